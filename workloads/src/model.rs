//! The model every rank trains: regression on random ReLU features.
//!
//! Inputs go through a fixed random layer, `φ(x) = relu(W x + b) / √D`, with `W` and `b` drawn from the
//! dataset seed, so every rank builds the same layer without exchanging it. The trained parameters are the
//! `D` output weights `θ`, and `D` is the model size: the gradient every step all-reduces has exactly that
//! many values. The loss is the mean squared error, which is convex in `θ`, so plain data-parallel SGD
//! makes it fall from the targets' variance (about 1) towards the noise floor.
//!
//! The cost of a step is about `batch × D × (features + 3)` multiply-adds, which is how the defaults put
//! compute at a real share of the step time.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::dataset::{mix, normal};
use crate::error::{Result, WorkloadError};

/// The largest model size accepted (256 MiB of parameters).
pub const MAX_MODEL_SIZE: usize = 64 << 20;

/// The random-features regression model.
#[derive(Debug, Clone)]
pub struct Model {
    features: usize,
    size: usize,
    /// `features` rows of `size` weights each (feature-major, so that the forward pass is a run of axpys).
    w: Vec<f32>,
    b: Vec<f32>,
    scale: f32,
    /// The trained output weights.
    pub theta: Vec<f32>,
}

impl Model {
    /// A fresh model (`θ = 0`) for a dataset with `features` inputs and `size` parameters.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] when a size is zero or too large.
    pub fn new(seed: u64, features: u32, size: usize) -> Result<Model> {
        if size == 0 || size > MAX_MODEL_SIZE {
            return Err(WorkloadError::invalid(
                "model size",
                format!("{size}: use 1 to {MAX_MODEL_SIZE}"),
            ));
        }
        if features == 0 || features as usize * size > 1 << 28 {
            return Err(WorkloadError::invalid(
                "model size",
                format!(
                    "{features} features × {size} parameters is more than the 2^28 random weights allowed"
                ),
            ));
        }
        let f = features as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x00de_1000 ^ size as u64));
        let ws = 1.0 / (f as f64).sqrt();
        let w = (0..f * size).map(|_| (normal(&mut rng) * ws) as f32).collect();
        let b = (0..size).map(|_| (normal(&mut rng) * 0.5) as f32).collect();
        Ok(Model {
            features: f,
            size,
            w,
            b,
            scale: 1.0 / (size as f32).sqrt(),
            theta: vec![0.0; size],
        })
    }

    /// The number of parameters (the gradient's length).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The number of inputs.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Computes the gradient of the mean squared error over a batch into `grad` and returns the loss
    /// (before any update). `x` is row-major `batch × features`; `h` is scratch space.
    pub fn gradient(&self, x: &[f32], y: &[f32], grad: &mut [f32], h: &mut Vec<f32>) -> f32 {
        let (f, d) = (self.features, self.size);
        debug_assert_eq!(x.len(), y.len() * f);
        debug_assert_eq!(grad.len(), d);
        grad.fill(0.0);
        h.resize(d, 0.0);
        let batch = y.len().max(1) as f32;
        let mut loss = 0.0f64;
        for (xi, &yi) in x.chunks_exact(f).zip(y) {
            h.copy_from_slice(&self.b);
            for (k, &xk) in xi.iter().enumerate() {
                axpy(xk, &self.w[k * d..(k + 1) * d], h);
            }
            h.iter_mut().for_each(|v| *v = v.max(0.0));
            let pred = dot(&self.theta, h) * self.scale;
            let err = pred - yi;
            loss += f64::from(err) * f64::from(err);
            axpy(2.0 * err * self.scale / batch, h, grad);
        }
        (loss / f64::from(batch)) as f32
    }

    /// Applies one SGD step with the gradient summed over `world` ranks.
    ///
    /// # Errors
    /// [`WorkloadError::Mismatch`] when the summed gradient holds a value that is not finite (a peer sent
    /// garbage, or training diverged): the model is left unchanged rather than poisoned.
    pub fn apply(&mut self, grad_sum: &[f32], world: usize, learning_rate: f32) -> Result<()> {
        if let Some(i) = grad_sum.iter().position(|g| !g.is_finite()) {
            return Err(WorkloadError::Mismatch {
                detail: format!(
                    "the all-reduced gradient holds {} at index {i} (a peer sent garbage, or the learning rate \
                     is too high)",
                    grad_sum[i]
                ),
            });
        }
        let step = learning_rate / world.max(1) as f32;
        axpy(-step, grad_sum, &mut self.theta);
        Ok(())
    }

    /// CRC32 of the parameters' bytes, the same on every rank when the models agree bit for bit.
    pub fn checksum(&self) -> u32 {
        checksum(&self.theta)
    }

    /// The loss on a batch without touching the model.
    pub fn loss(&self, x: &[f32], y: &[f32]) -> f32 {
        let mut grad = vec![0.0; self.size];
        self.gradient(x, y, &mut grad, &mut Vec::new())
    }
}

/// CRC32 of a parameter vector's little-endian bytes.
pub fn checksum(values: &[f32]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    if cfg!(target_endian = "little") {
        h.update(bytemuck::cast_slice(values));
    } else {
        for v in values {
            h.update(&v.to_le_bytes());
        }
    }
    h.finalize()
}

fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent sums let the compiler vectorise what a single running sum would serialise.
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{HEADER_LEN, Teacher, decode_rows, generate_shard};

    #[test]
    fn loss_falls_with_data_parallel_sgd() {
        let (seed, features, world, batch) = (3, 16, 4usize, 32usize);
        let teacher = Teacher::new(seed, features);
        let shards: Vec<(Vec<f32>, Vec<f32>)> = (0..world as u32)
            .map(|r| {
                let s = generate_shard(&teacher, seed, r, features, 512);
                let (mut x, mut y) = (Vec::new(), Vec::new());
                decode_rows(&s[HEADER_LEN..], seed, r, 0, features, &mut x, &mut y).unwrap();
                (x, y)
            })
            .collect();
        let held_out = generate_shard(&teacher, seed, 99, features, 512);
        let (mut hx, mut hy) = (Vec::new(), Vec::new());
        decode_rows(&held_out[HEADER_LEN..], seed, 99, 0, features, &mut hx, &mut hy).unwrap();

        let mut model = Model::new(seed, features, 1024).unwrap();
        let before = model.loss(&hx, &hy);
        let mut sum = vec![0.0; model.size()];
        let mut grad = vec![0.0; model.size()];
        let mut h = Vec::new();
        for step in 0..300 {
            sum.fill(0.0);
            for (x, y) in &shards {
                let b = step % (512 / batch);
                let xs = &x[b * batch * features as usize..(b + 1) * batch * features as usize];
                model.gradient(xs, &y[b * batch..(b + 1) * batch], &mut grad, &mut h);
                sum.iter_mut().zip(&grad).for_each(|(s, g)| *s += g);
            }
            model.apply(&sum, world, 0.5).unwrap();
        }
        let after = model.loss(&hx, &hy);
        assert!(before > 0.7, "initial loss {before}");
        assert!(
            after < 0.5 * before,
            "held-out loss fell only from {before} to {after}"
        );
    }

    #[test]
    fn refuses_non_finite_gradients_and_bad_sizes() {
        let mut m = Model::new(1, 4, 8).unwrap();
        let c = m.checksum();
        let mut g = vec![0.1; 8];
        g[3] = f32::NAN;
        assert!(m.apply(&g, 2, 0.1).is_err());
        assert_eq!(m.checksum(), c, "a refused update must leave the model alone");
        assert!(Model::new(1, 4, 0).is_err());
        assert!(Model::new(1, 4096, 1 << 20).is_err());
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| (i % 5) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-3);
    }
}
