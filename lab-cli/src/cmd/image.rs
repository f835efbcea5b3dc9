//! `lab image build`: the flags mapped onto the façade's image list, each image printed as it is written.

use anyhow::Context;
use lab_session::images::{self, LabImageKind};
use serde_json::json;

use crate::cli::{ImageArg, ImageBuildArgs, ImageCmd};
use crate::exit::Exit;
use crate::formats;
use crate::out::{self, outln};

pub async fn run(cmd: ImageCmd) -> anyhow::Result<Exit> {
    match cmd {
        ImageCmd::Build(a) => build(a),
    }
}

fn kind(a: ImageArg) -> LabImageKind {
    match a {
        ImageArg::Pause => LabImageKind::Pause,
        ImageArg::Lab => LabImageKind::Lab,
        ImageArg::Db => LabImageKind::Db,
        ImageArg::Prometheus => LabImageKind::Prometheus,
    }
}

fn build(a: ImageBuildArgs) -> anyhow::Result<Exit> {
    let out = match a.out {
        // Absolute, so the paths printed still name the archives from another folder.
        Some(o) => std::path::absolute(&o).with_context(|| format!("cannot resolve {}", o.display()))?,
        None => images::default_out()?,
    };
    let mut wanted: Vec<LabImageKind> = if a.only.is_empty() {
        LabImageKind::ALL.to_vec()
    } else {
        a.only.into_iter().map(kind).collect()
    };
    wanted.dedup();
    let started = std::time::Instant::now();
    let json = a.json;
    let built = images::build(&wanted, &out, &mut |b| {
        if !json {
            outln!("{}  {}  {}", b.reference, b.archive.display(), b.id);
        }
    })
    .with_context(|| format!("building the images into {}", out.display()))?;
    if json {
        out::json(
            formats::IMAGES,
            &json!({ "out": out, "images": built, "seconds": started.elapsed().as_secs_f64() }),
        )?;
    }
    Ok(Exit::Passed)
}
