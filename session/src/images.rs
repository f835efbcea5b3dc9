//! `lab image build`: the lab's images written offline as archives into a folder, for a cluster without a
//! registry (a bare node imports them with `ctr images import`, kind with `kind load image-archive`) or
//! for pushing (`docker load`, then `docker push`). The same builder `lab up --runtime kind` uses.

use std::path::{Path, PathBuf};

pub use lab_runtime_kube::image_set::{BuiltImage, LabImageKind};

use crate::Result;

/// Where the archives go without `--out`: the machine's image cache, which `lab up --runtime kind` reads.
///
/// # Errors
/// When neither `LAB_CACHE` nor `HOME` is set.
pub fn default_out() -> Result<PathBuf> {
    Ok(lab_runtime_kube::image_set::cache_dir()?)
}

/// Builds `images` into `out`, one after the other (an archive whose inputs did not change is kept),
/// telling `done` about each as it is written.
///
/// # Errors
/// An empty list; the first image whose inputs are missing (the workspace's binaries beside `lab`, weed,
/// PostgreSQL, prometheus, a C compiler) or whose archive cannot be written, named.
pub fn build(
    images: &[LabImageKind],
    out: &Path,
    done: &mut dyn FnMut(&BuiltImage),
) -> Result<Vec<BuiltImage>> {
    Ok(lab_runtime_kube::image_set::build(images, out, done)?)
}
