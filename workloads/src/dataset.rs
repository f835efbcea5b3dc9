//! The synthetic regression dataset: how samples are generated from a seed, the binary shard format with
//! its checksums, and the manifest that says which shards each rank reads and where they live.
//!
//! A sample is `features` inputs drawn from a standard normal and a target computed by a fixed, seeded
//! "teacher" (a small random ReLU network plus a linear part, normalised to unit variance) plus a little
//! noise, so there is something real to learn and the loss has a floor above zero.
//!
//! A shard is a 64-byte header and `samples` rows. Each row carries its own CRC32 over the dataset seed,
//! the shard id, the row index and the row's bytes, so a reader that fetches any run of rows with an HTTP
//! range verifies exactly what it uses, and a row served from the wrong shard or offset fails too. The
//! header carries a CRC of itself and of all rows, which the seeder checks when it verifies whole shards.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Result, WorkloadError};

/// The first eight bytes of every shard.
pub const SHARD_MAGIC: &[u8; 8] = b"LABSHRD1";
/// Shard format version.
pub const SHARD_VERSION: u32 = 1;
/// Bytes before the first row.
pub const HEADER_LEN: usize = 64;
/// The manifest format this code writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// Standard deviation of the noise added to every target.
pub const NOISE: f64 = 0.1;
/// The largest number of features a dataset may have.
pub const MAX_FEATURES: u32 = 4096;

const TEACHER_UNITS: usize = 16;

/// Bytes of one row: the features, the target and the row's CRC32, four bytes each.
pub fn row_len(features: u32) -> usize {
    4 * (features as usize + 2)
}

/// The shape of the data a shard holds, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardHeader {
    pub features: u32,
    pub samples: u32,
    pub shard_id: u32,
    pub seed: u64,
    pub rows_crc: u32,
}

/// The function the targets come from, fixed by the dataset seed and the number of features.
#[derive(Debug, Clone)]
pub struct Teacher {
    features: usize,
    units: Vec<(Vec<f64>, f64, f64)>,
    linear: Vec<f64>,
    mean: f64,
    std: f64,
}

impl Teacher {
    /// The teacher of a dataset.
    pub fn new(seed: u64, features: u32) -> Teacher {
        let f = features as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x7eac_4e70));
        let scale = 1.0 / (f as f64).sqrt();
        let units = (0..TEACHER_UNITS)
            .map(|_| {
                let v = (0..f).map(|_| normal(&mut rng) * scale).collect();
                (v, normal(&mut rng) * 0.5, normal(&mut rng))
            })
            .collect();
        let linear = (0..f).map(|_| normal(&mut rng) * 0.5 * scale).collect();
        let mut t = Teacher {
            features: f,
            units,
            linear,
            mean: 0.0,
            std: 1.0,
        };
        // Normalise the targets to zero mean and unit variance, measured on the teacher's own stream.
        let n = 4096;
        let mut x = vec![0.0; f];
        let (mut sum, mut sum2) = (0.0, 0.0);
        for _ in 0..n {
            x.iter_mut().for_each(|v| *v = normal(&mut rng));
            let y = t.raw(&x);
            sum += y;
            sum2 += y * y;
        }
        let mean = sum / n as f64;
        t.mean = mean;
        t.std = (sum2 / n as f64 - mean * mean).max(1e-12).sqrt();
        t
    }

    fn raw(&self, x: &[f64]) -> f64 {
        let mut y: f64 = self.linear.iter().zip(x).map(|(a, b)| a * b).sum();
        for (v, c, a) in &self.units {
            let z: f64 = v.iter().zip(x).map(|(p, q)| p * q).sum::<f64>() + c;
            y += a * z.max(0.0);
        }
        y
    }

    /// The noiseless, normalised target for input `x`.
    pub fn target(&self, x: &[f64]) -> f64 {
        debug_assert_eq!(x.len(), self.features);
        (self.raw(x) - self.mean) / self.std
    }
}

/// Generates shard `shard_id` of the dataset `seed` (the same bytes every time, on every machine).
pub fn generate_shard(teacher: &Teacher, seed: u64, shard_id: u32, features: u32, samples: u32) -> Vec<u8> {
    let f = features as usize;
    let rl = row_len(features);
    let mut out = vec![0u8; HEADER_LEN + rl * samples as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x5a4d_0000 ^ u64::from(shard_id)));
    let mut x = vec![0.0f64; f];
    for i in 0..samples {
        x.iter_mut().for_each(|v| *v = normal(&mut rng));
        let y = teacher.target(&x) + NOISE * normal(&mut rng);
        let row = &mut out[HEADER_LEN + rl * i as usize..][..rl];
        for (k, v) in x.iter().enumerate() {
            row[4 * k..4 * k + 4].copy_from_slice(&(*v as f32).to_le_bytes());
        }
        row[4 * f..4 * f + 4].copy_from_slice(&(y as f32).to_le_bytes());
        let crc = row_crc(seed, shard_id, i, &row[..4 * (f + 1)]);
        row[4 * (f + 1)..].copy_from_slice(&crc.to_le_bytes());
    }
    let rows_crc = crc32fast::hash(&out[HEADER_LEN..]);
    let h = &mut out[..HEADER_LEN];
    h[0..8].copy_from_slice(SHARD_MAGIC);
    h[8..12].copy_from_slice(&SHARD_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&features.to_le_bytes());
    h[16..20].copy_from_slice(&samples.to_le_bytes());
    h[20..24].copy_from_slice(&shard_id.to_le_bytes());
    h[24..32].copy_from_slice(&seed.to_le_bytes());
    h[32..36].copy_from_slice(&rows_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&h[..60]);
    h[60..64].copy_from_slice(&header_crc.to_le_bytes());
    out
}

/// The CRC32 a row carries: over the dataset seed, the shard id, the row index and the row's values.
pub fn row_crc(seed: u64, shard_id: u32, row: u32, values: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(&shard_id.to_le_bytes());
    h.update(&row.to_le_bytes());
    h.update(values);
    h.finalize()
}

/// Reads and checks a shard's header.
///
/// # Errors
/// [`WorkloadError::Checksum`] when the bytes are too short, the magic or version is wrong, or the header's
/// own CRC does not match.
pub fn decode_header(bytes: &[u8]) -> Result<ShardHeader> {
    let bad = |detail: String| WorkloadError::Checksum {
        what: "shard header".into(),
        detail,
    };
    if bytes.len() < HEADER_LEN {
        return Err(bad(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let h = &bytes[..HEADER_LEN];
    if &h[0..8] != SHARD_MAGIC {
        return Err(bad("not a lab shard (wrong magic)".into()));
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != SHARD_VERSION {
        return Err(bad(format!(
            "shard format {version}, this build reads {SHARD_VERSION}"
        )));
    }
    let want = u32_at(60);
    let got = crc32fast::hash(&h[..60]);
    if want != got {
        return Err(bad(format!("header crc32 {got:08x}, header says {want:08x}")));
    }
    Ok(ShardHeader {
        features: u32_at(12),
        samples: u32_at(16),
        shard_id: u32_at(20),
        seed: u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")),
        rows_crc: u32_at(32),
    })
}

/// Verifies a whole shard: its header, the CRC of all rows, and every row's own CRC.
///
/// # Errors
/// [`WorkloadError::Checksum`] naming the first thing that does not match.
pub fn verify_shard(bytes: &[u8], shard_id: u32, seed: u64, features: u32) -> Result<ShardHeader> {
    let h = decode_header(bytes)?;
    let bad = |detail: String| WorkloadError::Checksum {
        what: format!("shard {shard_id}"),
        detail,
    };
    if h.shard_id != shard_id || h.seed != seed || h.features != features {
        return Err(bad(format!(
            "header says shard {} of seed {} with {} features, expected shard {shard_id} of seed {seed} with \
             {features}",
            h.shard_id, h.seed, h.features
        )));
    }
    let want_len = HEADER_LEN + row_len(features) * h.samples as usize;
    if bytes.len() != want_len {
        return Err(bad(format!("{} bytes, expected {want_len}", bytes.len())));
    }
    let got = crc32fast::hash(&bytes[HEADER_LEN..]);
    if got != h.rows_crc {
        return Err(bad(format!(
            "rows crc32 {got:08x}, header says {:08x}",
            h.rows_crc
        )));
    }
    let mut x = Vec::new();
    let mut y = Vec::new();
    decode_rows(&bytes[HEADER_LEN..], seed, shard_id, 0, features, &mut x, &mut y)?;
    Ok(h)
}

/// Decodes rows `first_row..` (as many as `bytes` holds) into `x` (row-major) and `y`, verifying each row's
/// CRC. `x` and `y` are cleared first.
///
/// # Errors
/// [`WorkloadError::Checksum`] when the length is not a whole number of rows, a row's CRC does not match,
/// or a value is not finite.
pub fn decode_rows(
    bytes: &[u8],
    seed: u64,
    shard_id: u32,
    first_row: u32,
    features: u32,
    x: &mut Vec<f32>,
    y: &mut Vec<f32>,
) -> Result<usize> {
    let f = features as usize;
    let rl = row_len(features);
    x.clear();
    y.clear();
    let bad = |detail: String| WorkloadError::Checksum {
        what: format!("shard {shard_id}"),
        detail,
    };
    if !bytes.len().is_multiple_of(rl) {
        return Err(bad(format!(
            "{} bytes is not a whole number of {rl}-byte rows",
            bytes.len()
        )));
    }
    let rows = bytes.len() / rl;
    x.reserve(rows * f);
    y.reserve(rows);
    for (i, row) in bytes.chunks_exact(rl).enumerate() {
        let index = first_row + i as u32;
        let (values, crc) = row.split_at(4 * (f + 1));
        let want = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        let got = row_crc(seed, shard_id, index, values);
        if want != got {
            return Err(bad(format!("row {index} crc32 {got:08x}, row says {want:08x}")));
        }
        let mut floats = values
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")));
        x.extend(floats.by_ref().take(f));
        y.extend(floats);
    }
    if x.iter().chain(y.iter()).any(|v| !v.is_finite()) {
        return Err(bad("a value is not finite".into()));
    }
    Ok(rows)
}

/// Where one shard is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub id: u32,
    /// The rank that reads it.
    pub rank: u32,
    /// The SeaweedFS file id (`volume,keycookie`).
    pub fid: String,
    /// The storage server (rack name, `storage-<i>`) that holds it.
    pub server: String,
    pub bytes: u64,
    /// CRC32 of the whole shard as stored.
    pub crc32: u32,
}

/// The dataset's table of contents, stored in SeaweedFS next to the data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub dataset: String,
    pub seed: u64,
    pub features: u32,
    pub samples_per_shard: u32,
    pub shards_per_rank: u32,
    /// The number of ranks the data was cut for.
    pub ranks: u32,
    /// The storage servers that existed when seeding (`storage-0`, ...).
    pub servers: Vec<String>,
    pub shards: Vec<ShardEntry>,
}

impl Manifest {
    /// The shards rank `rank` reads, in order. A rank beyond the ranks the data was cut for reads the
    /// shards of `rank mod ranks` (so a job scaled past its dataset still trains, on repeated data).
    pub fn shards_for(&self, rank: u32) -> Vec<&ShardEntry> {
        let r = if self.ranks == 0 { 0 } else { rank % self.ranks };
        self.shards.iter().filter(|s| s.rank == r).collect()
    }

    /// Checks that the manifest is internally consistent.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] describing the first inconsistency.
    pub fn validate(&self) -> Result<()> {
        let bad = |d: String| WorkloadError::invalid("dataset manifest", d);
        if self.format != MANIFEST_FORMAT {
            return Err(bad(format!(
                "format {}, this build reads {MANIFEST_FORMAT}: reseed",
                self.format
            )));
        }
        if self.features == 0
            || self.features > MAX_FEATURES
            || self.samples_per_shard == 0
            || self.ranks == 0
        {
            return Err(bad(
                "features, samples per shard and ranks must be positive".into()
            ));
        }
        for r in 0..self.ranks {
            if self.shards_for(r).is_empty() {
                return Err(bad(format!("rank {r} has no shards")));
            }
        }
        let want = (HEADER_LEN + row_len(self.features) * self.samples_per_shard as usize) as u64;
        if let Some(s) = self.shards.iter().find(|s| s.bytes != want) {
            return Err(bad(format!(
                "shard {} is {} bytes, expected {want}",
                s.id, s.bytes
            )));
        }
        Ok(())
    }
}

/// Parses `--placement`: `rank=server` pairs separated by commas, the server as `storage-<i>` or `<i>`.
///
/// # Errors
/// [`WorkloadError::Invalid`] naming the pair that does not parse.
pub fn parse_placement(text: &str) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            WorkloadError::invalid(
                "--placement",
                format!("{pair:?} is not rank=server (for example 1=storage-2 or 1=2)"),
            )
        };
        let (r, s) = pair.split_once('=').ok_or_else(bad)?;
        let rank: u32 = r.trim().parse().map_err(|_| bad())?;
        let s = s.trim();
        let server = lab_model::names::index_of(s, "storage")
            .or_else(|| s.parse().ok())
            .ok_or_else(bad)?;
        if out.iter().any(|(r, _)| *r == rank) {
            return Err(WorkloadError::invalid(
                "--placement",
                format!("rank {rank} is placed twice"),
            ));
        }
        out.push((rank, server));
    }
    Ok(out)
}

/// A standard normal draw (Box–Muller; the second value is discarded for simplicity).
pub fn normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Mixes a seed with a stream number (splitmix64), so that every shard gets an independent stream.
pub fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_deterministic_and_verify() {
        let t = Teacher::new(7, 8);
        let a = generate_shard(&t, 7, 3, 8, 50);
        let b = generate_shard(&Teacher::new(7, 8), 7, 3, 8, 50);
        assert_eq!(a, b);
        assert_eq!(a.len(), HEADER_LEN + 50 * row_len(8));
        let h = verify_shard(&a, 3, 7, 8).unwrap();
        assert_eq!((h.samples, h.shard_id, h.features), (50, 3, 8));
        assert_ne!(a, generate_shard(&t, 7, 4, 8, 50));
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let t = Teacher::new(1, 4);
        let shard = generate_shard(&t, 1, 0, 4, 6);
        for i in 0..shard.len() {
            let mut bad = shard.clone();
            bad[i] ^= 0x20;
            assert!(
                verify_shard(&bad, 0, 1, 4).is_err(),
                "byte {i} flipped went unnoticed"
            );
        }
    }

    #[test]
    fn ranges_verify_row_by_row() {
        let t = Teacher::new(9, 5);
        let shard = generate_shard(&t, 9, 2, 5, 20);
        let rl = row_len(5);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        let range = &shard[HEADER_LEN + 4 * rl..HEADER_LEN + 10 * rl];
        assert_eq!(decode_rows(range, 9, 2, 4, 5, &mut x, &mut y).unwrap(), 6);
        assert_eq!((x.len(), y.len()), (30, 6));
        // The same bytes presented as other rows, another shard or another dataset fail.
        assert!(decode_rows(range, 9, 2, 5, 5, &mut x, &mut y).is_err());
        assert!(decode_rows(range, 9, 3, 4, 5, &mut x, &mut y).is_err());
        assert!(decode_rows(range, 10, 2, 4, 5, &mut x, &mut y).is_err());
        assert!(decode_rows(&range[1..], 9, 2, 4, 5, &mut x, &mut y).is_err());
    }

    #[test]
    fn targets_are_normalised_and_learnable() {
        let t = Teacher::new(42, 16);
        let shard = generate_shard(&t, 42, 0, 16, 2000);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        decode_rows(&shard[HEADER_LEN..], 42, 0, 0, 16, &mut x, &mut y).unwrap();
        let mean = y.iter().map(|v| f64::from(*v)).sum::<f64>() / y.len() as f64;
        let var = y.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / y.len() as f64;
        assert!(mean.abs() < 0.15, "mean {mean}");
        assert!((0.8..1.2).contains(&var), "variance {var}");
    }

    #[test]
    fn placement_parses_and_refuses_junk() {
        assert_eq!(parse_placement("0=storage-2, 3=1").unwrap(), vec![(0, 2), (3, 1)]);
        assert_eq!(parse_placement("").unwrap(), vec![]);
        for bad in ["0", "x=1", "0=disk-1", "0=1,0=2"] {
            assert!(parse_placement(bad).is_err(), "{bad}");
        }
    }
}
