//! Which images a kind lab loads into its cluster, and where each comes from: Docker as it is
//! (`--no-build`), a build of the repository's Dockerfile, or the offline builder
//! ([`super::super::image`]) writing archives into the machine's cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::{KubeOptions, KubeRecord, image_set, kind};
use super::PULL_DEADLINE;
use lab_runtime::lifecycle::Progress;
use lab_runtime::{Result, RuntimeError};

pub(super) use super::super::image_set::OFFLINE_PROMETHEUS;

/// An image the cluster needs, and where it is loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LabImage {
    /// In the Docker engine: `docker save` into the preloaded node image (`kind load docker-image` when that
    /// could not be made).
    InDocker(String),
    /// An archive the offline builder wrote (kept in the machine's cache for the next lab): imported into
    /// the preloaded node image (`kind load image-archive` when that could not be made).
    Archive(PathBuf),
}

/// The images the cluster needs: the lab image (from the Dockerfile where its base images can be had,
/// else from this machine's release binaries with the offline builder) and, with monitoring,
/// Prometheus (pulled, else built from Debian's package). Says which path each took.
pub(super) async fn build_images(
    docker: &bollard::Docker,
    kopts: &KubeOptions,
    rec: &mut KubeRecord,
    progress: &dyn Progress,
) -> Result<Vec<LabImage>> {
    let cache = image_set::cache_dir()?;
    let mut images = Vec::new();
    if !kopts.build_image {
        docker.inspect_image(&rec.image).await.map_err(|e| {
            RuntimeError::InvalidInput(format!(
                "the lab image {} is not in Docker ({e}): build it (`docker build -t {} .`) or drop --no-build",
                rec.image, rec.image
            ))
        })?;
        progress.note(&format!(
            "lab image {}: taken from Docker as it is (--no-build)",
            rec.image
        ));
        images.push(LabImage::InDocker(rec.image.clone()));
    } else {
        let context = match &kopts.build_context {
            Some(r) => Some(r.clone()),
            None => std::env::current_dir()
                .ok()
                .and_then(|d| kind::find_build_context(&d)),
        };
        let unavailable = match &context {
            Some(root) => first_unavailable_base(docker, root).await,
            None => Some("no Dockerfile here (run from the repository to build from it)".to_string()),
        };
        match (context, unavailable) {
            (Some(root), None) => {
                progress.note(&format!(
                    "lab image {}: building from {}/Dockerfile",
                    rec.image,
                    root.display()
                ));
                kind::build_image(&root, &rec.image, Duration::from_secs(3600), &|_| {}).await?;
                images.push(LabImage::InDocker(rec.image.clone()));
            }
            (_, why) => {
                let why = why.unwrap_or_default();
                let bin_dir = image_set::lab_bin_dir()?;
                let weed = image_set::require_weed(kopts.build_context.as_deref())?;
                progress.note(&format!(
                    "lab image {}: {why}; building it offline from {} and {}",
                    rec.image,
                    bin_dir.display(),
                    weed.display()
                ));
                let spec = super::super::image::lab_image(&rec.image, &bin_dir, &weed)?;
                images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
            }
        }
    }
    if let Some(db_image) = rec.db_image.clone() {
        if kopts.build_image {
            // Always offline: the database image is this machine's PostgreSQL, as the local lab's is.
            let bin_dir = image_set::lab_bin_dir()?;
            let pg_bin = lab_runtime::db::find_pg_bin()?;
            progress.note(&format!(
                "database image {db_image}: building it offline from {} and PostgreSQL in {}",
                bin_dir.display(),
                pg_bin.display()
            ));
            let spec = super::super::image::db_image(&db_image, &bin_dir, &pg_bin)?;
            images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
        } else {
            docker.inspect_image(&db_image).await.map_err(|e| {
                RuntimeError::InvalidInput(format!(
                    "the database image {db_image} is not in Docker ({e}): drop --no-build so the lab builds it"
                ))
            })?;
            images.push(LabImage::InDocker(db_image));
        }
    }
    if rec.monitoring {
        match kind::ensure_image(docker, &rec.prometheus_image, PULL_DEADLINE).await {
            Ok(()) => images.push(LabImage::InDocker(rec.prometheus_image.clone())),
            Err(e) => {
                let version = super::super::image::prometheus_version().unwrap_or_else(|| "debian".into());
                let reference = format!("{OFFLINE_PROMETHEUS}{version}");
                progress.note(&format!(
                    "Prometheus image {} cannot be pulled ({e}): building {reference} from the prometheus on PATH",
                    rec.prometheus_image
                ));
                let spec = super::super::image::prometheus_image(&reference)?;
                rec.prometheus_image = reference;
                images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
            }
        }
    }
    Ok(images)
}

/// [`super::super::image::ImageSpec::cached_archive`] off the async threads (it may write hundreds of MB).
async fn cached_archive(spec: super::super::image::ImageSpec, cache: &Path) -> Result<PathBuf> {
    let cache = cache.to_path_buf();
    tokio::task::spawn_blocking(move || spec.cached_archive(&cache))
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?
}

/// The first base image of the Dockerfile in `root` that Docker neither has nor can pull, with why.
async fn first_unavailable_base(docker: &bollard::Docker, root: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(root.join("Dockerfile")) {
        Ok(t) => t,
        Err(e) => return Some(format!("cannot read the Dockerfile ({e})")),
    };
    for base in kind::dockerfile_bases(&text) {
        if let Err(e) = kind::ensure_image(docker, &base, PULL_DEADLINE).await {
            return Some(format!(
                "the Dockerfile's base image {base} cannot be pulled ({e})"
            ));
        }
    }
    None
}
