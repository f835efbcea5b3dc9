//! The job's records in SeaweedFS: the dataset manifest, the checkpoint (model and step) and the progress
//! record (the furthest step reached and the job's restart accounting), at fixed file ids of the dataset's
//! meta collection (see [`crate::storage`]).
//!
//! The steps lost to a failure are the steps between the checkpoint the job resumes from and the furthest
//! step it had reached, which rank 0 records in the progress record four times a second and again when it
//! exits on a failure. Totals over the job's life live in the same record, so every incarnation of the job
//! reports them, not just the one that saw the failure.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dataset::Manifest;
use crate::error::{Result, WorkloadError};
use crate::rendezvous::Resume;
use crate::storage::{self, Storage};

const CHECKPOINT_MAGIC: &[u8; 8] = b"LABCKPT1";
const CHECKPOINT_HEADER: usize = 48;

/// A saved model.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Steps completed when it was taken.
    pub step: u64,
    /// The dataset seed and feature count the model's fixed layer was built from.
    pub seed: u64,
    pub features: u32,
    pub params: Vec<f32>,
}

impl Checkpoint {
    /// The stored form: a 48-byte header (magic, step, seed, features, length, CRC32 of the parameters,
    /// CRC32 of the header so far) and the parameters as little-endian `f32`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHECKPOINT_HEADER + 4 * self.params.len());
        out.extend_from_slice(CHECKPOINT_MAGIC);
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.features.to_le_bytes());
        out.extend_from_slice(&(self.params.len() as u64).to_le_bytes());
        out.extend_from_slice(&crate::model::checksum(&self.params).to_le_bytes());
        let header_crc = crc32fast::hash(&out);
        out.extend_from_slice(&header_crc.to_le_bytes());
        out.resize(CHECKPOINT_HEADER, 0);
        for p in &self.params {
            out.extend_from_slice(&p.to_le_bytes());
        }
        out
    }

    /// Reads the stored form back, checking its CRC.
    ///
    /// # Errors
    /// [`WorkloadError::Checksum`] when the bytes are not a whole, intact checkpoint.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint> {
        let bad = |d: String| WorkloadError::Checksum {
            what: "checkpoint".into(),
            detail: d,
        };
        if bytes.len() < CHECKPOINT_HEADER
            || &bytes[..8] != CHECKPOINT_MAGIC
            || bytes[44..48].iter().any(|b| *b != 0)
        {
            return Err(bad("not a lab checkpoint".into()));
        }
        let header_crc = u32::from_le_bytes(bytes[40..44].try_into().expect("4 bytes"));
        if crc32fast::hash(&bytes[..40]) != header_crc {
            return Err(bad("header checksum does not match".into()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let step = u64_at(8);
        let seed = u64_at(16);
        let features = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
        let n = u64_at(28);
        let crc = u32::from_le_bytes(bytes[36..40].try_into().expect("4 bytes"));
        if (bytes.len() - CHECKPOINT_HEADER) as u64 != n.saturating_mul(4) {
            return Err(bad(format!("{} bytes for {n} parameters", bytes.len())));
        }
        let params: Vec<f32> = bytes[CHECKPOINT_HEADER..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect();
        let got = crate::model::checksum(&params);
        if got != crc {
            return Err(bad(format!("parameters crc32 {got:08x}, header says {crc:08x}")));
        }
        Ok(Checkpoint {
            step,
            seed,
            features,
            params,
        })
    }
}

/// The furthest the job got, and its restart accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps completed, as far as rank 0 knows.
    pub step: u64,
    /// The last checkpoint written.
    pub checkpoint_step: u64,
    pub steps_lost_total: u64,
    pub resumes_total: u64,
    /// The model size of the job this record belongs to.
    pub model_size: u64,
    pub updated_unix_ms: u64,
}

/// Decides where the job starts, from what is stored: the checkpoint if it fits this model, and the steps
/// lost since it according to the progress record. Returns the resume point, the parameters to start from
/// (empty: fresh) and a note for the log when something stored was not used.
pub fn decide_resume(
    checkpoint: Option<Checkpoint>,
    progress: Option<Progress>,
    seed: u64,
    features: u32,
    model_size: usize,
) -> (Resume, Vec<f32>, Option<String>) {
    let mut note = None;
    let checkpoint = checkpoint.filter(|c| {
        let fits = c.seed == seed && c.features == features && c.params.len() == model_size;
        if !fits {
            note = Some(format!(
                "the stored checkpoint (step {}, {} parameters, seed {}) does not fit this job ({} parameters, seed \
                 {seed}): starting a new job from step 0",
                c.step,
                c.params.len(),
                c.seed,
                model_size
            ));
        }
        fits
    });
    let progress =
        progress.filter(|p| p.model_size == model_size as u64 && (checkpoint.is_some() || note.is_none()));
    let (start, params) = match checkpoint {
        Some(c) => (c.step, c.params),
        None => (0, Vec::new()),
    };
    let mut resume = Resume {
        start_step: start,
        checkpoint_step: (start > 0).then_some(start),
        ..Resume::default()
    };
    if let Some(p) = progress {
        resume.steps_lost = p.step.saturating_sub(start);
        resume.steps_lost_total = p.steps_lost_total + resume.steps_lost;
        resume.resumes_total = p.resumes_total + 1;
    }
    resume.model_crc = crate::model::checksum(&params);
    (resume, params, note)
}

/// Reads and writes the job's records.
#[derive(Debug)]
pub struct JobStore {
    storage: Storage,
    dataset: String,
    meta_vid: Option<u32>,
    buf: Vec<u8>,
}

impl JobStore {
    /// The records of `dataset` in the SeaweedFS whose master is at `master`.
    pub fn new(master: &str, dataset: &str, timeout: Duration) -> JobStore {
        JobStore {
            storage: Storage::new(master, timeout),
            dataset: dataset.to_string(),
            meta_vid: None,
            buf: Vec::new(),
        }
    }

    /// The underlying storage client.
    pub fn storage(&mut self) -> &mut Storage {
        &mut self.storage
    }

    /// The meta volume, found through the master once.
    ///
    /// # Errors
    /// [`WorkloadError::NoManifest`] when the dataset was never seeded; others when the master is unreachable.
    pub fn meta_volume(&mut self) -> Result<u32> {
        if let Some(v) = self.meta_vid {
            return Ok(v);
        }
        let vid = self
            .storage
            .meta_volume(&self.dataset)?
            .ok_or_else(|| WorkloadError::NoManifest {
                dataset: self.dataset.clone(),
                master: self.storage.master().addr().to_string(),
            })?;
        self.meta_vid = Some(vid);
        Ok(vid)
    }

    /// Uses `vid` as the meta volume (the seeder, which just created it).
    pub fn set_meta_volume(&mut self, vid: u32) {
        self.meta_vid = Some(vid);
    }

    fn read(&mut self, key: u64) -> Result<Option<Vec<u8>>> {
        let vid = self.meta_volume()?;
        let mut buf = std::mem::take(&mut self.buf);
        let got = self.storage.read(&storage::fixed_fid(vid, key), None, &mut buf);
        let out = match got {
            Ok(Some(_)) if !buf.is_empty() => Ok(Some(buf.clone())),
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        self.buf = buf;
        out
    }

    fn write(&mut self, key: u64, data: &[u8]) -> Result<()> {
        let vid = self.meta_volume()?;
        self.storage.write(&storage::fixed_fid(vid, key), data)
    }

    /// The dataset manifest.
    ///
    /// # Errors
    /// [`WorkloadError::NoManifest`] when there is none; [`WorkloadError::Invalid`] when it does not parse
    /// or is inconsistent.
    pub fn load_manifest(&mut self) -> Result<Manifest> {
        let bytes = self
            .read(storage::MANIFEST_KEY)?
            .ok_or_else(|| WorkloadError::NoManifest {
                dataset: self.dataset.clone(),
                master: self.storage.master().addr().to_string(),
            })?;
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| WorkloadError::invalid("dataset manifest", format!("{e}: reseed the dataset")))?;
        m.validate()?;
        if m.dataset != self.dataset {
            return Err(WorkloadError::invalid(
                "dataset manifest",
                format!("it names dataset {:?}, expected {:?}", m.dataset, self.dataset),
            ));
        }
        Ok(m)
    }

    /// Stores the manifest, replacing any earlier one.
    ///
    /// # Errors
    /// When the write fails.
    pub fn save_manifest(&mut self, m: &Manifest) -> Result<()> {
        let bytes =
            serde_json::to_vec_pretty(m).map_err(|e| WorkloadError::invalid("manifest", e.to_string()))?;
        self.write(storage::MANIFEST_KEY, &bytes)
    }

    /// The checkpoint, if one was written.
    ///
    /// # Errors
    /// When storage cannot be read, or the checkpoint is damaged.
    pub fn load_checkpoint(&mut self) -> Result<Option<Checkpoint>> {
        self.read(storage::CHECKPOINT_KEY)?
            .map(|b| Checkpoint::decode(&b))
            .transpose()
    }

    /// Stores a checkpoint, replacing the previous one.
    ///
    /// # Errors
    /// When the write fails.
    pub fn save_checkpoint(&mut self, c: &Checkpoint) -> Result<()> {
        self.write(storage::CHECKPOINT_KEY, &c.encode())
    }

    /// The progress record, if one was written. A damaged record reads as none.
    ///
    /// # Errors
    /// When storage cannot be read.
    pub fn load_progress(&mut self) -> Result<Option<Progress>> {
        Ok(self
            .read(storage::PROGRESS_KEY)?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Stores the progress record.
    ///
    /// # Errors
    /// When the write fails.
    pub fn save_progress(&mut self, p: &Progress) -> Result<()> {
        let bytes = serde_json::to_vec(p).map_err(|e| WorkloadError::invalid("progress", e.to_string()))?;
        self.write(storage::PROGRESS_KEY, &bytes)
    }

    /// Deletes the checkpoint and progress record (a reseeded dataset starts a new job).
    ///
    /// # Errors
    /// When storage cannot be reached.
    pub fn clear_job(&mut self) -> Result<()> {
        let vid = self.meta_volume()?;
        self.storage
            .delete(&storage::fixed_fid(vid, storage::CHECKPOINT_KEY))?;
        self.storage
            .delete(&storage::fixed_fid(vid, storage::PROGRESS_KEY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_catch_damage() {
        let c = Checkpoint {
            step: 300,
            seed: 7,
            features: 32,
            params: vec![0.5, -1.25, 3.0],
        };
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode(&bytes).unwrap(), c);
        for i in [0, 9, 30, 40, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(Checkpoint::decode(&bad).is_err(), "byte {i}");
        }
        assert!(Checkpoint::decode(&bytes[..bytes.len() - 4]).is_err());
    }

    #[test]
    fn resume_counts_the_steps_lost() {
        let ckpt = Checkpoint {
            step: 300,
            seed: 7,
            features: 4,
            params: vec![1.0; 8],
        };
        let progress = Progress {
            step: 311,
            checkpoint_step: 300,
            steps_lost_total: 5,
            resumes_total: 1,
            model_size: 8,
            updated_unix_ms: 0,
        };
        let (r, params, note) = decide_resume(Some(ckpt.clone()), Some(progress), 7, 4, 8);
        assert_eq!(
            (
                r.start_step,
                r.checkpoint_step,
                r.steps_lost,
                r.steps_lost_total,
                r.resumes_total
            ),
            (300, Some(300), 11, 16, 2)
        );
        assert_eq!(params, ckpt.params);
        assert!(note.is_none());
        // A fresh job: nothing stored.
        let (r, params, _) = decide_resume(None, None, 7, 4, 8);
        assert_eq!((r.start_step, r.steps_lost, r.resumes_total), (0, 0, 0));
        assert!(params.is_empty());
        // A failure before the first checkpoint loses everything since step 0.
        let p = Progress {
            step: 40,
            model_size: 8,
            ..Progress::default()
        };
        let (r, _, _) = decide_resume(None, Some(p), 7, 4, 8);
        assert_eq!((r.start_step, r.steps_lost, r.resumes_total), (0, 40, 1));
        // A checkpoint of another model is not used, and its job's accounting does not carry over.
        let (r, params, note) = decide_resume(Some(ckpt), Some(progress), 7, 4, 16);
        assert_eq!((r.start_step, r.steps_lost, r.resumes_total), (0, 0, 0));
        assert!(params.is_empty());
        assert!(note.unwrap().contains("does not fit"));
    }
}
