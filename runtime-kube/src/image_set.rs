//! The lab's images as archives in a folder (`lab image build`), for a cluster without a registry (a bare
//! node imports them with `ctr images import`) or for pushing, and the inputs the offline builder
//! ([`super::image`]) takes them from: the workspace's binaries beside the running `lab`, SeaweedFS,
//! this machine's PostgreSQL and Prometheus, and the pause program. `lab up --runtime kind` builds the
//! same images into the machine's cache.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::image::{self, ImageSpec};
use lab_runtime::{Result, RuntimeError};

/// An image `lab image build` can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabImageKind {
    /// The pod sandbox of a bare node ([`image::PAUSE_IMAGE`]).
    Pause,
    /// The lab image every lab container runs ([`super::DEFAULT_IMAGE`]).
    Lab,
    /// The database image (`lab up --database`, [`super::DEFAULT_DB_IMAGE`]).
    Db,
    /// Prometheus from the `prometheus` on PATH (`straggler-lab/prometheus:<its version>`).
    Prometheus,
}

impl LabImageKind {
    /// Every image, in the order they are built.
    pub const ALL: [LabImageKind; 4] = [
        LabImageKind::Pause,
        LabImageKind::Lab,
        LabImageKind::Db,
        LabImageKind::Prometheus,
    ];
}

/// One image written: its reference, its archive and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuiltImage {
    pub image: LabImageKind,
    /// `repository:tag`, as the archive tags it (containerd stores it as `docker.io/<this>`).
    pub reference: String,
    /// The `docker save` archive: `docker load`, `kind load image-archive` and `ctr images import` read it.
    pub archive: PathBuf,
    /// The image id, `sha256:<config digest>`: the same inputs give the same id.
    pub id: String,
}

/// The offline Prometheus image (from the `prometheus` on PATH) is tagged `<this><its version>`.
pub const OFFLINE_PROMETHEUS: &str = "straggler-lab/prometheus:";

/// Where the offline images' archives are kept between labs: `LAB_CACHE` (the scripts' cache folder,
/// `~/.cache/straggler-lab` by default) `/images`.
///
/// # Errors
/// When neither `LAB_CACHE` nor `HOME` is set.
pub fn cache_dir() -> Result<PathBuf> {
    let base = std::env::var_os("LAB_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache/straggler-lab"))
        })
        .ok_or_else(|| {
            RuntimeError::InvalidInput(
                "neither LAB_CACHE nor HOME is set: set LAB_CACHE to a folder for the lab's image archives"
                    .into(),
            )
        })?;
    Ok(base.join("images"))
}

/// The folder of the running `lab` binary: the workspace's other binaries, which the offline images are
/// made from, are beside it.
///
/// # Errors
/// When the running binary's path cannot be told.
pub fn lab_bin_dir() -> Result<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .ok_or_else(|| RuntimeError::Other("cannot tell where the lab binary is".into()))
}

/// SeaweedFS for the lab image: `LAB_WEED`, `weed` on PATH, or the project's tools folder (in `context`,
/// else in the current folder or one above it).
pub fn weed_binary(context: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LAB_WEED")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
    {
        return Some(p);
    }
    if let Some(p) = image::which("weed") {
        return Some(p);
    }
    let roots: Vec<PathBuf> = match context {
        Some(c) => vec![c.to_path_buf()],
        None => std::env::current_dir()
            .map(|d| d.ancestors().map(Path::to_path_buf).collect())
            .unwrap_or_default(),
    };
    roots
        .into_iter()
        .map(|r| r.join(".tools/bin/weed"))
        .find(|p| p.is_file())
}

/// The weed binary, or what to do to get one.
///
/// # Errors
/// [`RuntimeError::MissingTool`] when there is none.
pub fn require_weed(context: Option<&Path>) -> Result<PathBuf> {
    weed_binary(context).ok_or_else(|| RuntimeError::MissingTool {
        tool: "weed".into(),
        hint: "install SeaweedFS (`scripts/tools.sh weed`) or set LAB_WEED".into(),
    })
}

/// What the image `kind` is made of, with the inputs it needs found on this machine.
///
/// # Errors
/// When an input is missing (the workspace's binaries, weed, PostgreSQL, prometheus, a C compiler).
pub fn spec_of(kind: LabImageKind, out: &Path) -> Result<ImageSpec> {
    match kind {
        LabImageKind::Pause => image::pause_image(image::PAUSE_IMAGE, out),
        LabImageKind::Lab => image::lab_image(super::DEFAULT_IMAGE, &lab_bin_dir()?, &require_weed(None)?),
        LabImageKind::Db => image::db_image(
            super::DEFAULT_DB_IMAGE,
            &lab_bin_dir()?,
            &lab_runtime::db::find_pg_bin()?,
        ),
        LabImageKind::Prometheus => {
            let version = image::prometheus_version().unwrap_or_else(|| "debian".into());
            image::prometheus_image(&format!("{OFFLINE_PROMETHEUS}{version}"))
        }
    }
}

/// Builds `images` into `out` (an archive is rewritten only when what it is made of changed), one after
/// the other, telling `done` about each as it is written.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] for an empty list; the first image whose inputs are missing or whose
/// archive cannot be written, named.
pub fn build(
    images: &[LabImageKind],
    out: &Path,
    done: &mut dyn FnMut(&BuiltImage),
) -> Result<Vec<BuiltImage>> {
    if images.is_empty() {
        return Err(RuntimeError::InvalidInput(
            "no image to build: name at least one of pause, lab, db, prometheus".into(),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| RuntimeError::io(format!("create {}", out.display()), e))?;
    let mut built = Vec::new();
    for &kind in images {
        let named = |e: RuntimeError| RuntimeError::Step {
            step: format!(
                "image {}",
                serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ),
            message: e.to_string(),
        };
        let spec = spec_of(kind, out).map_err(named)?;
        let archive = spec.cached_archive(out).map_err(named)?;
        let id = image::archive_id(&archive).map_err(named)?;
        let b = BuiltImage {
            image: kind,
            reference: spec.reference.clone(),
            archive,
            id,
        };
        done(&b);
        built.push(b);
    }
    Ok(built)
}
