//! The project's offline image builder, for machines where the Dockerfile's base images cannot be pulled:
//! an image made of files already on this machine (the workspace's release binaries, `weed`, `tc`,
//! busybox, `prometheus`), each binary with the shared libraries it loads at the paths it loads
//! them from, written as one deterministic layer in a `docker save` archive that Docker loads and kind
//! imports. Hand-written rather than a dependency: the whole format is a tar, two JSON files and their
//! SHA-256 digests.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use lab_runtime::{Result, RuntimeError};

/// One entry of the image's file system.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A file copied from this machine; with `strip`, an executable's copy without its debug sections.
    File {
        src: PathBuf,
        mode: u32,
        strip: bool,
    },
    /// A file with the given contents.
    Bytes {
        data: Vec<u8>,
        mode: u32,
    },
    Dir {
        mode: u32,
        owner: u64,
    },
    Symlink {
        target: String,
    },
}

/// An image to build: its file system and its run configuration.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// `repository:tag`.
    pub reference: String,
    entries: BTreeMap<String, Entry>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub workdir: Option<String>,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Path inside the image, without the leading `/`.
fn rel(path: &str) -> String {
    path.trim_start_matches('/').trim_end_matches('/').to_string()
}

impl ImageSpec {
    pub fn new(reference: impl Into<String>) -> Self {
        ImageSpec {
            reference: reference.into(),
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            ..ImageSpec::default()
        }
    }

    /// Copies `src` from this machine to `dest` in the image.
    pub fn file(&mut self, dest: &str, src: &Path, mode: u32) -> &mut Self {
        self.entries.insert(
            rel(dest),
            Entry::File {
                src: src.to_path_buf(),
                mode,
                strip: false,
            },
        );
        self
    }

    /// Writes `data` to `dest` in the image.
    pub fn bytes(&mut self, dest: &str, data: impl Into<Vec<u8>>, mode: u32) -> &mut Self {
        self.entries.insert(
            rel(dest),
            Entry::Bytes {
                data: data.into(),
                mode,
            },
        );
        self
    }

    /// A directory owned by `owner` (uid and gid).
    pub fn dir(&mut self, dest: &str, mode: u32, owner: u64) -> &mut Self {
        self.entries.insert(rel(dest), Entry::Dir { mode, owner });
        self
    }

    pub fn symlink(&mut self, dest: &str, target: &str) -> &mut Self {
        self.entries.insert(
            rel(dest),
            Entry::Symlink {
                target: target.to_string(),
            },
        );
        self
    }

    /// The executable `src` at `dest_dir/<its name>`, and every shared library it loads (from `ldd`) at
    /// the path the dynamic loader finds it on this machine.
    ///
    /// # Errors
    /// When `src` is not a file or `ldd` cannot read it.
    pub fn binary(&mut self, dest_dir: &str, src: &Path) -> Result<&mut Self> {
        self.binary_as(dest_dir, src, false)
    }

    /// As [`ImageSpec::binary`], the executable copied without its debug sections (`objcopy
    /// --strip-debug`): one of the workspace's own, whose debug build is four times the size of its code,
    /// and every node loads the image. Where `objcopy` is missing the file goes in as it is.
    ///
    /// # Errors
    /// As [`ImageSpec::binary`].
    pub fn stripped_binary(&mut self, dest_dir: &str, src: &Path) -> Result<&mut Self> {
        self.binary_as(dest_dir, src, true)
    }

    fn binary_as(&mut self, dest_dir: &str, src: &Path, strip: bool) -> Result<&mut Self> {
        let name = src
            .file_name()
            .ok_or_else(|| RuntimeError::InvalidInput(format!("{} is not a file", src.display())))?
            .to_string_lossy()
            .into_owned();
        if !src.is_file() {
            return Err(RuntimeError::InvalidInput(format!(
                "{} is not a file",
                src.display()
            )));
        }
        self.entries.insert(
            format!("{}/{name}", rel(dest_dir)),
            Entry::File {
                src: src.to_path_buf(),
                mode: 0o755,
                strip,
            },
        );
        for lib in shared_libraries(src)? {
            let dest = lib.to_string_lossy().into_owned();
            self.file(&dest, &lib, 0o755);
        }
        Ok(self)
    }

    /// Whether the image has an entry at `path`.
    pub fn has(&self, path: &str) -> bool {
        self.entries.contains_key(&rel(path))
    }

    /// Every parent directory of every entry, so the layer never relies on the runtime creating them.
    fn with_parents(&self) -> BTreeMap<String, Entry> {
        let mut all = self.entries.clone();
        for path in self.entries.keys() {
            let mut p = Path::new(path).parent();
            while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
                all.entry(d.to_string_lossy().into_owned()).or_insert(Entry::Dir {
                    mode: 0o755,
                    owner: 0,
                });
                p = d.parent();
            }
        }
        all
    }

    /// Writes the single layer as an uncompressed tar: entries sorted, times and owners fixed, so the
    /// same inputs give the same digest.
    fn write_layer(&self, out: impl Write) -> Result<()> {
        let mut b = tar::Builder::new(out);
        b.mode(tar::HeaderMode::Deterministic);
        for (path, entry) in self.with_parents() {
            let mut h = tar::Header::new_gnu();
            h.set_mtime(0);
            h.set_uid(0);
            h.set_gid(0);
            let r = match entry {
                Entry::Dir { mode, owner } => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(mode);
                    h.set_uid(owner);
                    h.set_gid(owner);
                    h.set_size(0);
                    b.append_data(&mut h, format!("{path}/"), std::io::empty())
                }
                Entry::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, &path, &target)
                }
                Entry::Bytes { data, mode } => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(mode);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, &path, data.as_slice())
                }
                Entry::File { src, mode, strip } => {
                    let stripped = if strip { stripped_copy(&src) } else { None };
                    let from = stripped.as_ref().map_or(src.as_path(), |t| t.path());
                    let f = File::open(from)
                        .map_err(|e| RuntimeError::io(format!("read {} for the image", src.display()), e))?;
                    let len = f
                        .metadata()
                        .map_err(|e| RuntimeError::io(format!("stat {}", src.display()), e))?
                        .len();
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(mode);
                    h.set_size(len);
                    b.append_data(&mut h, &path, f)
                }
            };
            r.map_err(|e| RuntimeError::io(format!("write {path} into the image layer"), e))?;
        }
        b.into_inner()
            .and_then(|mut w| w.flush())
            .map_err(|e| RuntimeError::io("finish the image layer", e))
    }

    /// The image configuration (the OCI/Docker config JSON) for a layer with digest `diff_id`.
    fn config(&self, diff_id: &str) -> serde_json::Value {
        let mut cfg = serde_json::json!({ "Env": self.env, "Labels": self.labels });
        if !self.entrypoint.is_empty() {
            cfg["Entrypoint"] = serde_json::json!(self.entrypoint);
        }
        if !self.cmd.is_empty() {
            cfg["Cmd"] = serde_json::json!(self.cmd);
        }
        if let Some(w) = &self.workdir {
            cfg["WorkingDir"] = serde_json::json!(w);
        }
        if let Some(u) = &self.user {
            cfg["User"] = serde_json::json!(u);
        }
        serde_json::json!({
            "architecture": docker_arch(),
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": cfg,
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff_id}")] },
            "history": [{ "created": "1970-01-01T00:00:00Z", "created_by": "straggler-lab offline image builder" }],
        })
    }

    /// What the image is made of, as a digest: every entry's path and mode, each copied file's source,
    /// size and modification time (not its bytes: reading a few hundred MB of binaries to hash them
    /// would cost what writing the archive does), each written file's bytes, and the run configuration.
    /// Two specs with one key make the same archive.
    ///
    /// # Errors
    /// When a copied file cannot be looked at.
    pub fn key(&self) -> Result<String> {
        let mut h = Sha256::new();
        let mut put = |s: &[u8]| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s);
        };
        put(self.reference.as_bytes());
        for (path, e) in &self.entries {
            put(path.as_bytes());
            match e {
                Entry::File { src, mode, strip } => {
                    let m = std::fs::metadata(src)
                        .map_err(|e| RuntimeError::io(format!("stat {}", src.display()), e))?;
                    let mtime = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos());
                    let strip = if *strip { " stripped" } else { "" };
                    put(format!("file {} {mode:o} {} {mtime}{strip}", src.display(), m.len()).as_bytes());
                }
                Entry::Bytes { data, mode } => {
                    put(format!("bytes {mode:o}").as_bytes());
                    put(data);
                }
                Entry::Dir { mode, owner } => put(format!("dir {mode:o} {owner}").as_bytes()),
                Entry::Symlink { target } => put(format!("symlink {target}").as_bytes()),
            }
        }
        put(&serde_json::to_vec(&self.config("")).map_err(|e| RuntimeError::Other(e.to_string()))?);
        Ok(hex(&h.finalize()))
    }

    /// The archive of this image in `cache` (a folder of the machine's cache, kept across labs), written
    /// only when no archive of the same [`key`](Self::key) is there yet: a warm `lab up` reuses the one
    /// an earlier `lab up` wrote. Older archives of the same image name are removed when a new one is
    /// written, so the folder holds one per image. Returns the archive's path.
    ///
    /// # Errors
    /// When the cache folder or the archive cannot be written.
    pub fn cached_archive(&self, cache: &Path) -> Result<PathBuf> {
        let stem: String = self
            .reference
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let key = self.key()?;
        let out = cache.join(format!("{stem}-{}.tar", &key[..16]));
        if out.is_file() {
            return Ok(out);
        }
        std::fs::create_dir_all(cache)
            .map_err(|e| RuntimeError::io(format!("create {}", cache.display()), e))?;
        let tmp = cache.join(format!(".{stem}-{}.{}.tar", &key[..16], std::process::id()));
        let written = self.write_archive(&tmp);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if let Ok(old) = std::fs::read_dir(cache) {
            for e in old.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&format!("{stem}-")) && name.ends_with(".tar") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        std::fs::rename(&tmp, &out).map_err(|e| RuntimeError::io(format!("write {}", out.display()), e))?;
        Ok(out)
    }

    /// Writes the image as a `docker save` archive at `out` (`docker load` and `kind load image-archive`
    /// both read it) and returns the image id (`sha256:<config digest>`).
    ///
    /// # Errors
    /// When a file cannot be read or the archive cannot be written.
    pub fn write_archive(&self, out: &Path) -> Result<String> {
        let dir = out.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| RuntimeError::io(format!("create {}", dir.display()), e))?;
        let layer_path = out.with_extension("layer.tmp");
        {
            let f = File::create(&layer_path)
                .map_err(|e| RuntimeError::io(format!("create {}", layer_path.display()), e))?;
            self.write_layer(BufWriter::new(f))?;
        }
        let result = self.pack(&layer_path, out);
        let _ = std::fs::remove_file(&layer_path);
        result
    }

    fn pack(&self, layer_path: &Path, out: &Path) -> Result<String> {
        let diff_id = sha256_file(layer_path)?;
        let config =
            serde_json::to_vec(&self.config(&diff_id)).map_err(|e| RuntimeError::Other(e.to_string()))?;
        let config_digest = hex(&Sha256::digest(&config));
        let manifest = serde_json::to_vec(&serde_json::json!([{
            "Config": format!("{config_digest}.json"),
            "RepoTags": [self.reference],
            "Layers": [format!("{diff_id}/layer.tar")],
        }]))
        .map_err(|e| RuntimeError::Other(e.to_string()))?;

        let tmp = out.with_extension("tmp");
        let f = File::create(&tmp).map_err(|e| RuntimeError::io(format!("create {}", tmp.display()), e))?;
        let mut b = tar::Builder::new(BufWriter::new(f));
        let add = |b: &mut tar::Builder<_>, name: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_mtime(0);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, name, data)
        };
        let io = |e| RuntimeError::io(format!("write {}", out.display()), e);
        add(&mut b, &format!("{config_digest}.json"), &config).map_err(io)?;
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_mtime(0);
        h.set_size(0);
        b.append_data(&mut h, format!("{diff_id}/"), std::io::empty())
            .map_err(io)?;
        let layer = File::open(layer_path).map_err(io)?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_size(layer.metadata().map_err(io)?.len());
        b.append_data(&mut h, format!("{diff_id}/layer.tar"), layer)
            .map_err(io)?;
        add(&mut b, "manifest.json", &manifest).map_err(io)?;
        b.into_inner().and_then(|mut w| w.flush()).map_err(io)?;
        std::fs::rename(&tmp, out)
            .map_err(|e| RuntimeError::io(format!("move {} into place", out.display()), e))?;
        Ok(format!("sha256:{config_digest}"))
    }
}

/// A copy of the executable `src` without its debug sections, in a temporary file removed when it is
/// dropped; `None` (the file goes in as it is) where `objcopy` is missing or fails.
fn stripped_copy(src: &Path) -> Option<tempfile::NamedTempFile> {
    let out = tempfile::NamedTempFile::new().ok()?;
    let done = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(src)
        .arg(out.path())
        .stderr(std::process::Stdio::null())
        .status();
    match done {
        Ok(s) if s.success() => Some(out),
        _ => {
            tracing::debug!(
                "objcopy could not strip {}: it goes into the image as it is",
                src.display()
            );
            None
        }
    }
}

fn docker_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| RuntimeError::io(format!("read {}", path.display()), e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| RuntimeError::io(format!("read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The shared libraries `bin` loads, as `ldd` resolves them on this machine (the loader included);
/// none for a static binary.
///
/// # Errors
/// When `ldd` is missing.
pub fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| RuntimeError::io("run ldd (install libc-bin)", e))?;
    // A static binary: ldd says "not a dynamic executable" and exits non-zero.
    if !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)`.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// Finds `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The programs of busybox the lab's containers use (a shell for probes and debugging, wget, nc).
const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "cat", "ls", "sleep", "wget", "nc", "env", "echo", "printf", "test", "ps", "kill", "mkdir", "rm",
    "cp", "mv", "ln", "id", "hostname", "head", "tail", "grep", "sed", "awk", "cut", "tr", "wc", "sort",
    "date", "timeout", "true", "false", "nslookup", "df", "du", "find", "touch",
];

/// The workspace binaries `names` from `bin_dir` (beside the `lab` CLI) at `/usr/local/bin`, each with the
/// libraries it loads.
///
/// # Errors
/// When one is missing, saying how to build it.
fn lab_binaries(spec: &mut ImageSpec, bin_dir: &Path, names: &[&str]) -> Result<()> {
    for b in names {
        let p = bin_dir.join(b);
        if !p.is_file() {
            return Err(RuntimeError::MissingTool {
                tool: (*b).into(),
                hint: format!(
                    "{} has no {b}: build the workspace's binaries with `cargo build --release` (the image is made from them)",
                    bin_dir.display()
                ),
            });
        }
        spec.stripped_binary("/usr/local/bin", &p)?;
    }
    Ok(())
}

/// Debian's dynamic busybox at `/bin`, with the applets the lab's containers use.
///
/// # Errors
/// When busybox is not installed.
fn with_busybox(spec: &mut ImageSpec) -> Result<()> {
    let busybox = which("busybox").ok_or_else(|| RuntimeError::MissingTool {
        tool: "busybox".into(),
        hint: "install Debian's busybox (`apt-get install busybox`)".into(),
    })?;
    spec.binary("/bin", &busybox)?;
    for a in BUSYBOX_APPLETS {
        spec.symlink(&format!("/bin/{a}"), "busybox");
    }
    Ok(())
}

/// The lab image from this machine's files: the `lab-*` binaries found in `bin_dir` (beside the `lab`
/// CLI: the workspace's release build), `weed`, iproute2's `tc` (the netem delay container), and
/// Debian's dynamic busybox for a shell.
///
/// # Errors
/// When a binary it needs is missing, naming how to get it.
pub fn lab_image(reference: &str, bin_dir: &Path, weed: &Path) -> Result<ImageSpec> {
    let mut spec = ImageSpec::new(reference);
    lab_binaries(
        &mut spec,
        bin_dir,
        &["lab-rank", "lab-beside", "lab-seeder", "lab-proxy", "lab-reader"],
    )?;
    if !weed.is_file() {
        return Err(RuntimeError::MissingTool {
            tool: "weed".into(),
            hint: "install SeaweedFS (`scripts/tools.sh weed`) or set LAB_WEED".into(),
        });
    }
    spec.binary("/usr/local/bin", weed)?;
    let tc = which("tc").ok_or_else(|| RuntimeError::MissingTool {
        tool: "tc".into(),
        hint: "install iproute2 (`apt-get install iproute2`)".into(),
    })?;
    spec.binary("/sbin", &tc)?;
    with_busybox(&mut spec)?;
    spec.dir("/tmp", 0o1777, 0)
        .dir("/data", 0o777, 0)
        .bytes(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
            0o644,
        )
        .bytes("/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
    spec.cmd = vec!["weed".into(), "version".into()];
    spec.workdir = Some("/data".into());
    spec.labels
        .insert("org.opencontainers.image.title".into(), "straggler-lab".into());
    spec.labels.insert(
        "org.opencontainers.image.description".into(),
        "built offline from this machine's release binaries".into(),
    );
    Ok(spec)
}

/// The user the database's pods run as: PostgreSQL refuses to run as root.
pub const DB_UID: u64 = 999;

/// The database image from this machine's files: `lab-db` and `lab-writer` from `bin_dir`, PostgreSQL's
/// server programs from its installed packages (`pg_bin`: `postgres`, `initdb`, `pg_basebackup`, `psql`,
/// each with the libraries it loads), its loadable modules (`plpgsql`, the snowball dictionaries `initdb`
/// installs, the standby's `libpqwalreceiver`; not the JIT, which would bring LLVM: the servers run with
/// `jit=off`), its share folder, the UTC zone, busybox for a shell, and a `postgres` user.
///
/// # Errors
/// When a binary it needs is missing, naming how to get it, or PostgreSQL's folders cannot be read.
pub fn db_image(reference: &str, bin_dir: &Path, pg_bin: &Path) -> Result<ImageSpec> {
    let mut spec = ImageSpec::new(reference);
    lab_binaries(&mut spec, bin_dir, &["lab-db", "lab-writer"])?;
    let pg_dir = pg_bin.to_string_lossy().into_owned();
    for b in ["postgres", "initdb", "pg_basebackup", "psql"] {
        spec.binary(&pg_dir, &pg_bin.join(b))?;
    }
    let config = |what: &str| -> Result<PathBuf> {
        let out = std::process::Command::new(pg_bin.join("pg_config"))
            .arg(what)
            .output()
            .map_err(|e| RuntimeError::io("run pg_config (PostgreSQL's development files)", e))?;
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || dir.is_empty() {
            return Err(RuntimeError::Other(format!("pg_config {what} gave no folder")));
        }
        Ok(PathBuf::from(dir))
    };
    let modules = config("--pkglibdir")?;
    let read = |dir: &Path| {
        std::fs::read_dir(dir).map_err(|e| RuntimeError::io(format!("reading {}", dir.display()), e))
    };
    let mut libs: Vec<PathBuf> = read(&modules)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            p.is_file() && name.ends_with(".so") && !name.starts_with("llvmjit")
        })
        .collect();
    libs.sort();
    let modules_dir = modules.to_string_lossy().into_owned();
    for lib in &libs {
        spec.binary(&modules_dir, lib)?;
    }
    let share = config("--sharedir")?;
    let mut stack = vec![share];
    while let Some(dir) = stack.pop() {
        for e in read(&dir)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                spec.file(&p.to_string_lossy(), &p, 0o644);
            }
        }
    }
    for zone in ["/usr/share/zoneinfo/UTC", "/usr/share/zoneinfo/Etc/UTC"] {
        let p = Path::new(zone);
        if !p.is_file() {
            return Err(RuntimeError::MissingTool {
                tool: "tzdata".into(),
                hint: format!("{zone} is missing: install Debian's tzdata (`apt-get install tzdata`)"),
            });
        }
        spec.file(zone, p, 0o644);
    }
    with_busybox(&mut spec)?;
    spec.dir("/tmp", 0o1777, 0)
        .dir("/pgdata", 0o700, DB_UID)
        .bytes(
            "/etc/passwd",
            format!(
                "root:x:0:0:root:/root:/bin/sh\npostgres:x:{DB_UID}:{DB_UID}:PostgreSQL:/pgdata:/bin/sh\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
            ),
            0o644,
        )
        .bytes(
            "/etc/group",
            format!("root:x:0:\npostgres:x:{DB_UID}:\nnogroup:x:65534:\n"),
            0o644,
        );
    // PostgreSQL's programs on the PATH too (`psql` through `exec`, by the lab or by hand).
    for e in &mut spec.env {
        if let Some(path) = e.strip_prefix("PATH=") {
            *e = format!("PATH={path}:{pg_dir}");
        }
    }
    spec.env.push("TZ=UTC".into());
    spec.env.push(format!("LAB_PG_BIN={pg_dir}"));
    spec.cmd = vec!["lab-db".into(), "--help".into()];
    spec.workdir = Some("/pgdata".into());
    spec.user = Some(DB_UID.to_string());
    spec.labels
        .insert("org.opencontainers.image.title".into(), "straggler-lab-db".into());
    spec.labels.insert(
        "org.opencontainers.image.description".into(),
        "the lab's database (PostgreSQL from this machine's packages) and its writer, built offline".into(),
    );
    Ok(spec)
}

/// Prometheus from the `prometheus` on PATH, for clusters that cannot pull its image: Debian's package
/// (2.42), or the Prometheus 3 that `scripts/env/prometheus/build.sh` builds from its Go module.
///
/// # Errors
/// When the package is not installed.
pub fn prometheus_image(reference: &str) -> Result<ImageSpec> {
    let bin = which("prometheus")
        .or_else(|| Some(PathBuf::from("/usr/bin/prometheus")).filter(|p| p.is_file()))
        .ok_or_else(|| RuntimeError::MissingTool {
            tool: "prometheus".into(),
            hint: "install Debian's prometheus package (`apt-get install prometheus`) to build its image offline, \
                   or pass --no-monitoring"
                .into(),
        })?;
    let mut spec = ImageSpec::new(reference);
    spec.binary("/bin", &bin)?;
    spec.dir("/prometheus", 0o775, 65534)
        .dir("/etc/prometheus", 0o755, 0)
        .dir("/tmp", 0o1777, 0)
        .bytes(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
            0o644,
        )
        .bytes("/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
    spec.entrypoint = vec!["/bin/prometheus".into()];
    spec.workdir = Some("/prometheus".into());
    spec.user = Some("65534".into());
    spec.labels.insert(
        "org.opencontainers.image.description".into(),
        "Prometheus from this machine's build, made into an image offline".into(),
    );
    Ok(spec)
}

/// The pod sandbox image of a bare node (the containerd `sandbox_image`): the project's pause program.
pub const PAUSE_IMAGE: &str = "straggler-lab/pause:1.0";
/// The pause program: holds the pod's namespaces, reaps orphans, exits on SIGTERM or SIGINT.
const PAUSE_C: &str = include_str!("../../scripts/images/pause.c");

/// The pause image: [`PAUSE_C`] compiled static with the machine's C compiler (`CC`, else `cc`) into
/// `work` (once per source: a folder named by its digest, so a rebuild of the image finds the same file
/// and the same key).
///
/// # Errors
/// When no C compiler (or no static C library) is there, or the compile fails.
pub fn pause_image(reference: &str, work: &Path) -> Result<ImageSpec> {
    let dir = work.join(format!(
        ".pause-{}",
        &hex(&Sha256::digest(PAUSE_C.as_bytes()))[..16]
    ));
    let bin = dir.join("pause");
    if !bin.is_file() {
        std::fs::create_dir_all(&dir)
            .map_err(|e| RuntimeError::io(format!("create {}", dir.display()), e))?;
        let src = dir.join("pause.c");
        std::fs::write(&src, PAUSE_C).map_err(|e| RuntimeError::io(format!("write {}", src.display()), e))?;
        let cc = std::env::var("CC")
            .ok()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "cc".into());
        let tmp = dir.join(format!("pause.{}", std::process::id()));
        let out = std::process::Command::new(&cc)
            .args(["-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .map_err(|e| RuntimeError::MissingTool {
                tool: cc.clone(),
                hint: format!(
                    "cannot run it ({e}): install a C compiler (`apt-get install gcc libc6-dev`) or set CC"
                ),
            })?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp);
            return Err(RuntimeError::Other(format!(
                "{cc} could not build the pause program: {}; install gcc and libc6-dev (static libc) or set CC",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        std::fs::rename(&tmp, &bin).map_err(|e| RuntimeError::io(format!("write {}", bin.display()), e))?;
    }
    let mut spec = ImageSpec::new(reference);
    spec.env.clear();
    spec.file("/pause", &bin, 0o755);
    spec.entrypoint = vec!["/pause".into()];
    spec.user = Some("65535:65535".into());
    spec.labels.insert(
        "org.opencontainers.image.title".into(),
        "straggler-lab-pause".into(),
    );
    Ok(spec)
}

/// The image id (`sha256:<config digest>`) of a `docker save` archive, from its `manifest.json` (the
/// layer is skipped over, not read).
///
/// # Errors
/// When the archive cannot be read or has no manifest naming one config.
pub fn archive_id(archive: &Path) -> Result<String> {
    let what = || format!("read {}", archive.display());
    let f = File::open(archive).map_err(|e| RuntimeError::io(what(), e))?;
    let mut tar = tar::Archive::new(f);
    for entry in tar.entries_with_seek().map_err(|e| RuntimeError::io(what(), e))? {
        let mut entry = entry.map_err(|e| RuntimeError::io(what(), e))?;
        if entry.path().is_ok_and(|p| p == Path::new("manifest.json")) {
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|e| RuntimeError::io(what(), e))?;
            let m: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| RuntimeError::Other(format!("{}: {e}", what())))?;
            let config = m[0]["Config"].as_str().unwrap_or_default();
            if let Some(hex) = config.strip_suffix(".json").filter(|h| h.len() == 64) {
                return Ok(format!("sha256:{hex}"));
            }
            break;
        }
    }
    Err(RuntimeError::Other(format!(
        "{} has no manifest.json naming its config: it is not a `docker save` archive",
        archive.display()
    )))
}

/// The version the `prometheus` on PATH prints (`prometheus, version 2.42.0+ds (branch: …)` → `2.42.0`; 3.5.0 from its module).
pub fn prometheus_version() -> Option<String> {
    let bin = which("prometheus")?;
    let out = std::process::Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let v = text.split_whitespace().skip_while(|w| *w != "version").nth(1)?;
    Some(v.split('+').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspaces_binaries_go_in_without_their_debug_sections() {
        // This test's own executable: a debug build, as the kind tier's images are made of.
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut plain = ImageSpec::new("lab/t:1");
        plain.binary("/usr/local/bin", &exe).unwrap();
        let mut stripped = ImageSpec::new("lab/t:1");
        stripped.stripped_binary("/usr/local/bin", &exe).unwrap();
        assert_ne!(
            plain.key().unwrap(),
            stripped.key().unwrap(),
            "a stripped copy is another image"
        );
        let size = |s: &ImageSpec, name: &str| {
            let out = dir.path().join(name);
            s.write_archive(&out).unwrap();
            std::fs::metadata(out).unwrap().len()
        };
        let (plain, stripped) = (size(&plain, "plain.tar"), size(&stripped, "stripped.tar"));
        assert!(
            stripped * 2 < plain,
            "objcopy --strip-debug (binutils) should halve a debug build at least: {stripped} of {plain} bytes"
        );
    }

    #[test]
    fn ldd_output_is_read_with_and_without_arrows() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x7f)\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib/x86_64-linux-gnu/libm.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }

    fn archive_entries(path: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut a = tar::Archive::new(File::open(path).unwrap());
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                (name, data)
            })
            .collect()
    }

    #[test]
    fn an_archives_id_is_read_back_from_its_manifest() {
        let d = tempfile::tempdir().unwrap();
        let mut spec = ImageSpec::new("lab/t:1");
        spec.bytes("/etc/x", "x", 0o644);
        let out = d.path().join("t.tar");
        let id = spec.write_archive(&out).unwrap();
        assert!(id.starts_with("sha256:") && id.len() == 71, "{id}");
        assert_eq!(archive_id(&out).unwrap(), id);
        let not = d.path().join("not.tar");
        std::fs::write(&not, vec![0u8; 1024]).unwrap();
        let e = archive_id(&not).unwrap_err().to_string();
        assert!(e.contains("not a `docker save` archive"), "{e}");
    }

    #[test]
    fn a_cached_archive_is_written_once_per_content() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("tool");
        std::fs::write(&bin, b"one").unwrap();
        let cache = d.path().join("cache");
        let spec = |r: &str| {
            let mut s = ImageSpec::new(r);
            s.file("/bin/tool", &bin, 0o755).bytes("/etc/x", "x", 0o644);
            s
        };
        let a = spec("lab/t:1").cached_archive(&cache).unwrap();
        let written = std::fs::metadata(&a).unwrap().modified().unwrap();
        // The same content: the same archive, not written again.
        let b = spec("lab/t:1").cached_archive(&cache).unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::metadata(&b).unwrap().modified().unwrap(), written);
        // A changed binary (size and time): a new archive, and the old one of that name is gone.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&bin, b"two!").unwrap();
        let c = spec("lab/t:1").cached_archive(&cache).unwrap();
        assert_ne!(a, c);
        assert!(!a.exists() && c.exists());
        // Another image keeps its own.
        let other = spec("lab/u:1").cached_archive(&cache).unwrap();
        assert!(other.exists() && c.exists());
        let entries = archive_entries(&c);
        assert!(
            entries.keys().any(|k| k.ends_with("layer.tar")),
            "{:?}",
            entries.keys()
        );
    }

    #[test]
    fn the_archive_is_what_docker_load_reads_and_is_reproducible() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("tool");
        std::fs::write(&src, b"#!/bin/sh\necho hi\n").unwrap();
        let mut spec = ImageSpec::new("straggler-lab/test:1");
        spec.file("/usr/local/bin/tool", &src, 0o755)
            .symlink("/bin/sh", "busybox")
            .dir("/data", 0o777, 65534);
        spec.cmd = vec!["tool".into()];
        let id1 = spec.write_archive(&d.path().join("a.tar")).unwrap();
        let id2 = spec.write_archive(&d.path().join("b.tar")).unwrap();
        assert_eq!(id1, id2, "same inputs, same image id");
        assert_eq!(
            std::fs::read(d.path().join("a.tar")).unwrap(),
            std::fs::read(d.path().join("b.tar")).unwrap()
        );

        let files = archive_entries(&d.path().join("a.tar"));
        let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], "straggler-lab/test:1");
        let config_name = manifest[0]["Config"].as_str().unwrap();
        assert_eq!(format!("sha256:{}", config_name.trim_end_matches(".json")), id1);
        let config: serde_json::Value = serde_json::from_slice(&files[config_name]).unwrap();
        assert_eq!(config["config"]["Cmd"][0], "tool");
        let layer_name = manifest[0]["Layers"][0].as_str().unwrap();
        let layer = &files[layer_name];
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            format!("sha256:{}", hex(&Sha256::digest(layer)))
        );

        let mut l = tar::Archive::new(layer.as_slice());
        let mut seen = BTreeMap::new();
        for e in l.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            seen.insert(
                e.path().unwrap().display().to_string(),
                (h.entry_type(), h.mode().unwrap(), h.uid().unwrap()),
            );
        }
        // Parents are made explicit, modes and owners kept.
        assert_eq!(seen["usr/"].0, tar::EntryType::Directory);
        assert_eq!(seen["usr/local/bin/"].0, tar::EntryType::Directory);
        assert_eq!(seen["usr/local/bin/tool"].1, 0o755);
        assert_eq!(seen["bin/sh"].0, tar::EntryType::Symlink);
        assert_eq!(seen["data/"].2, 65534);
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let d = tempfile::tempdir().unwrap();
        let err = lab_image(
            "straggler-lab/lab:0.1.0",
            d.path(),
            Path::new("/nonexistent/weed"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("cargo build --release"), "{err}");
    }
}
