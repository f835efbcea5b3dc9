//! The dataset seeder: generates the dataset, places each rank's shards on the storage server chosen for
//! that rank, and writes the manifest.
//!
//! Servers are found by rack name in the master's topology (`storage-<i>`), never by address. Rank `r`'s
//! shards go to server `r mod servers` unless `--placement` says otherwise. Placement on a chosen server
//! is `/vol/grow` then `/dir/assign` with the data center, rack and node all named (see
//! [`crate::storage::Master::grow`]).
//!
//! Seeding is idempotent: when a manifest with the same parameters and placement exists and every shard
//! it lists reads back intact from the right server, the data is reused and the job's checkpoint is kept.
//! Otherwise the shards are written anew, the manifest replaced, the old shards deleted, and the job's
//! checkpoint and progress cleared (a model trained on other data is no resume point).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::checkpoint::JobStore;
use crate::dataset::{self, MANIFEST_FORMAT, Manifest, ShardEntry, Teacher};
use crate::error::{Result, WorkloadError};
use crate::storage::{self, Master, Node};

/// What to seed.
#[derive(Debug, Clone)]
pub struct SeedOptions {
    pub master: String,
    pub dataset: String,
    pub ranks: u32,
    pub seed: u64,
    pub features: u32,
    pub samples_per_shard: u32,
    pub shards_per_rank: u32,
    /// Storage servers to wait for and spread ranks over (`storage-0` .. `storage-<servers-1>`).
    pub servers: u32,
    /// Overrides of the default placement: (rank, server index).
    pub placement: Vec<(u32, u32)>,
    /// Rewrite everything even if an identical dataset is stored.
    pub fresh: bool,
    /// Write nothing: check that the stored dataset is the one these options describe, that every shard
    /// reads back intact from its server, and that the checkpoint, if any, passes its checksums.
    pub verify: bool,
    /// How long to wait for the master and the servers to appear.
    pub wait: Duration,
    /// Timeout of each request.
    pub request_timeout: Duration,
}

/// What the seeder did, printed as one line of JSON.
#[derive(Debug, Clone, Serialize)]
pub struct SeedSummary {
    pub dataset: String,
    /// `created`, `reused` or `overwritten`.
    pub action: String,
    pub ranks: u32,
    pub shards: usize,
    pub bytes: u64,
    /// Rank → server name.
    pub placement: BTreeMap<u32, String>,
    pub manifest_fid: String,
    pub seconds: f64,
    /// With `--verify`: what was checked, for comparing two verifications.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verified>,
}

/// The checksums a verification read back: equal across two verifications means nothing was lost.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    /// Shard id → CRC32 of its bytes as read back (equal to the manifest's, or the verification fails).
    pub shard_crc32: BTreeMap<u32, u32>,
    /// The step of the stored checkpoint (`None`: the job has not written one yet).
    pub checkpoint_step: Option<u64>,
    /// The CRC32 of the checkpoint's parameters, checked against its header.
    pub checkpoint_crc32: Option<u32>,
}

impl SeedOptions {
    /// Checks the options before anything is contacted.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] naming the flag that is wrong.
    pub fn validate(&self) -> Result<()> {
        storage::validate_dataset_name(&self.dataset)?;
        let positive = [
            ("--ranks", self.ranks),
            ("--features", self.features),
            ("--samples-per-shard", self.samples_per_shard),
            ("--shards-per-rank", self.shards_per_rank),
            ("--servers", self.servers),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(WorkloadError::invalid(*flag, "must be at least 1"));
        }
        if self.features > dataset::MAX_FEATURES {
            return Err(WorkloadError::invalid(
                "--features",
                format!("at most {}", dataset::MAX_FEATURES),
            ));
        }
        let shard_bytes = dataset::HEADER_LEN as u64
            + dataset::row_len(self.features) as u64 * u64::from(self.samples_per_shard);
        if shard_bytes > 256 << 20 {
            return Err(WorkloadError::invalid(
                "--samples-per-shard",
                format!("a shard of {shard_bytes} bytes is too large: keep shards under 256 MiB"),
            ));
        }
        for (r, s) in &self.placement {
            if *r >= self.ranks {
                return Err(WorkloadError::invalid(
                    "--placement",
                    format!("rank {r} but only {} ranks", self.ranks),
                ));
            }
            if *s >= self.servers {
                return Err(WorkloadError::invalid(
                    "--placement",
                    format!("server storage-{s} but only {} servers (--servers)", self.servers),
                ));
            }
        }
        Ok(())
    }

    /// The server index rank `rank`'s shards go to.
    pub fn server_for(&self, rank: u32) -> u32 {
        self.placement
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, s)| *s)
            .unwrap_or_else(|| lab_model::names::default_server_for_rank(rank, self.servers))
    }

    /// Rank → the name of the server its shards go to, for every rank the data is cut for.
    pub fn placement(&self) -> BTreeMap<u32, String> {
        (0..self.ranks)
            .map(|r| (r, lab_model::names::storage(self.server_for(r))))
            .collect()
    }
}

/// Seeds the dataset; `log` receives one line per notable event.
///
/// # Errors
/// [`WorkloadError::Invalid`] for bad options; [`WorkloadError::Timeout`] when the servers do not appear in
/// time; storage errors when reads or writes fail.
pub fn seed(opts: &SeedOptions, log: &dyn Fn(&str)) -> Result<SeedSummary> {
    opts.validate()?;
    let started = Instant::now();
    let mut master = Master::new(&opts.master, opts.request_timeout);
    let servers = wait_for_servers(&mut master, opts, log)?;

    let mut store = JobStore::new(&opts.master, &opts.dataset, opts.request_timeout);
    let meta_vid = ensure_meta_volume(&mut master, &mut store, opts, &servers[0])?;
    store.set_meta_volume(meta_vid);
    let manifest_fid = storage::fixed_fid(meta_vid, storage::MANIFEST_KEY);

    let placement = opts.placement();
    let existing = match store.load_manifest() {
        Ok(m) => Some(m),
        Err(WorkloadError::NoManifest { .. }) => None,
        Err(e @ WorkloadError::Invalid { .. }) => {
            log(&format!("the stored manifest is unusable ({e}); overwriting it"));
            None
        }
        Err(e) => return Err(e),
    };
    if opts.verify {
        return verify(&mut store, existing, opts, placement, manifest_fid, started);
    }
    let reusable = existing
        .as_ref()
        .filter(|m| !opts.fresh && same_dataset(m, opts, &placement));
    if let Some(m) = reusable {
        match verify_stored(&mut store, m) {
            Ok(bytes) => {
                log(&format!(
                    "dataset {} already stored and intact: reusing it",
                    opts.dataset
                ));
                return Ok(SeedSummary {
                    dataset: opts.dataset.clone(),
                    action: "reused".into(),
                    ranks: opts.ranks,
                    shards: m.shards.len(),
                    bytes,
                    placement,
                    manifest_fid,
                    seconds: started.elapsed().as_secs_f64(),
                    verified: None,
                });
            }
            Err(e) => log(&format!(
                "the stored dataset does not verify ({e}); writing it again"
            )),
        }
    }

    let teacher = Teacher::new(opts.seed, opts.features);
    let collection = storage::data_collection(&opts.dataset);
    let mut used: Vec<u32> = (0..opts.ranks).map(|r| opts.server_for(r)).collect();
    used.sort_unstable();
    used.dedup();
    for &i in &used {
        ensure_data_volume(&mut master, &collection, &servers[i as usize])?;
    }
    let mut shards = Vec::new();
    let mut bytes = 0u64;
    for rank in 0..opts.ranks {
        let index = opts.server_for(rank);
        let node = &servers[index as usize];
        for j in 0..opts.shards_per_rank {
            let id = rank * opts.shards_per_rank + j;
            let data =
                dataset::generate_shard(&teacher, opts.seed, id, opts.features, opts.samples_per_shard);
            let fid = assign_on(&mut master, &collection, node, opts.wait)?;
            store.storage().write(&fid, &data)?;
            bytes += data.len() as u64;
            shards.push(ShardEntry {
                id,
                rank,
                fid,
                server: node.rack.clone(),
                bytes: data.len() as u64,
                crc32: crc32fast::hash(&data),
            });
        }
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        dataset: opts.dataset.clone(),
        seed: opts.seed,
        features: opts.features,
        samples_per_shard: opts.samples_per_shard,
        shards_per_rank: opts.shards_per_rank,
        ranks: opts.ranks,
        servers: servers.iter().map(|n| n.rack.clone()).collect(),
        shards,
    };
    manifest.validate()?;
    store.save_manifest(&manifest)?;
    store.clear_job()?;
    if let Some(old) = &existing {
        for s in &old.shards {
            if let Err(e) = store.storage().delete(&s.fid) {
                log(&format!("could not delete old shard {} ({}): {e}", s.id, s.fid));
            }
        }
    }
    Ok(SeedSummary {
        dataset: opts.dataset.clone(),
        action: if existing.is_some() {
            "overwritten"
        } else {
            "created"
        }
        .into(),
        ranks: opts.ranks,
        shards: manifest.shards.len(),
        bytes,
        placement,
        manifest_fid,
        seconds: started.elapsed().as_secs_f64(),
        verified: None,
    })
}

/// `--verify`: the stored dataset must be the one `opts` describe, every shard intact on its server, and
/// the checkpoint, when there is one, must decode with matching checksums. Nothing is written.
fn verify(
    store: &mut JobStore,
    existing: Option<Manifest>,
    opts: &SeedOptions,
    placement: BTreeMap<u32, String>,
    manifest_fid: String,
    started: Instant,
) -> Result<SeedSummary> {
    let m = existing.ok_or_else(|| WorkloadError::NoManifest {
        dataset: opts.dataset.clone(),
        master: opts.master.clone(),
    })?;
    if !same_dataset(&m, opts, &placement) {
        return Err(WorkloadError::Checksum {
            what: format!("dataset {}", opts.dataset),
            detail: "the stored manifest describes another dataset or placement than these flags".into(),
        });
    }
    let bytes = verify_stored(store, &m)?;
    let checkpoint = store.load_checkpoint()?;
    Ok(SeedSummary {
        dataset: opts.dataset.clone(),
        action: "verified".into(),
        ranks: opts.ranks,
        shards: m.shards.len(),
        bytes,
        placement,
        manifest_fid,
        seconds: started.elapsed().as_secs_f64(),
        verified: Some(Verified {
            shard_crc32: m.shards.iter().map(|s| (s.id, s.crc32)).collect(),
            checkpoint_step: checkpoint.as_ref().map(|c| c.step),
            checkpoint_crc32: checkpoint.as_ref().map(|c| crate::model::checksum(&c.params)),
        }),
    })
}

fn same_dataset(m: &Manifest, opts: &SeedOptions, placement: &BTreeMap<u32, String>) -> bool {
    m.seed == opts.seed
        && m.features == opts.features
        && m.samples_per_shard == opts.samples_per_shard
        && m.shards_per_rank == opts.shards_per_rank
        && m.ranks == opts.ranks
        && m.shards.iter().all(|s| placement.get(&s.rank) == Some(&s.server))
}

/// Reads every shard back and checks it against the manifest and its own checksums; returns the bytes.
fn verify_stored(store: &mut JobStore, m: &Manifest) -> Result<u64> {
    let mut buf = Vec::new();
    let mut total = 0;
    for s in &m.shards {
        let server =
            store
                .storage()
                .read_internal(&s.fid, &mut buf)?
                .ok_or_else(|| WorkloadError::Checksum {
                    what: format!("shard {}", s.id),
                    detail: format!("{} is missing", s.fid),
                })?;
        if server != s.server {
            return Err(WorkloadError::Checksum {
                what: format!("shard {}", s.id),
                detail: format!("it is on {server}, the manifest says {}", s.server),
            });
        }
        if crc32fast::hash(&buf) != s.crc32 {
            return Err(WorkloadError::Checksum {
                what: format!("shard {}", s.id),
                detail: "crc32 differs".into(),
            });
        }
        dataset::verify_shard(&buf, s.id, m.seed, m.features)?;
        total += buf.len() as u64;
    }
    Ok(total)
}

/// Waits until the master lists `storage-0` .. `storage-<servers-1>`; returns them in index order.
fn wait_for_servers(master: &mut Master, opts: &SeedOptions, log: &dyn Fn(&str)) -> Result<Vec<Node>> {
    let deadline = Instant::now() + opts.wait;
    let mut said = false;
    loop {
        let problem = match master.topology() {
            Ok(nodes) => {
                let by_index = storage::storage_servers(&nodes);
                let missing: Vec<String> = (0..opts.servers)
                    .filter(|i| !by_index.contains_key(i))
                    .map(lab_model::names::storage)
                    .collect();
                if missing.is_empty() {
                    return Ok((0..opts.servers).map(|i| by_index[&i].clone()).collect());
                }
                let racks: Vec<&str> = nodes.iter().map(|n| n.rack.as_str()).collect();
                format!(
                    "the master lists no volume server in rack {} (racks seen: {racks:?}); start each volume server \
                     with `weed volume -rack storage-<i> -dataCenter lab`",
                    missing.join(", ")
                )
            }
            Err(e) => format!(
                "the master is not answering: {}",
                lab_model::format::error_chain(&e)
            ),
        };
        if Instant::now() >= deadline {
            return Err(WorkloadError::Master {
                master: opts.master.clone(),
                detail: problem,
            });
        }
        if !said {
            log(&format!("waiting for the storage servers: {problem}"));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn ensure_meta_volume(
    master: &mut Master,
    store: &mut JobStore,
    opts: &SeedOptions,
    node: &Node,
) -> Result<u32> {
    if let Some(v) = store.storage().meta_volume(&opts.dataset)? {
        return Ok(v);
    }
    let collection = storage::meta_collection(&opts.dataset);
    master.grow(&collection, node)?;
    store
        .storage()
        .meta_volume(&opts.dataset)?
        .ok_or_else(|| WorkloadError::Master {
            master: opts.master.clone(),
            detail: format!(
                "grew a volume for {collection} on {} but the master does not list it",
                node.rack
            ),
        })
}

/// Grows a volume of `collection` on `node` unless it already has a writable one. Growing explicitly
/// matters: an assign on a node without a volume makes the master grow one wherever it likes.
fn ensure_data_volume(master: &mut Master, collection: &str, node: &Node) -> Result<()> {
    let has = master
        .volumes()?
        .iter()
        .any(|v| v.collection == collection && v.node_url == node.url && !v.read_only);
    if has {
        Ok(())
    } else {
        master.grow(collection, node)
    }
}

/// A new file id on `node`, growing a volume of the collection there when it has no writable one.
fn assign_on(master: &mut Master, collection: &str, node: &Node, wait: Duration) -> Result<String> {
    let deadline = Instant::now() + wait;
    let mut grown = false;
    loop {
        match master.assign(collection, node) {
            Ok(a) if a.url == node.url => return Ok(a.fid),
            Ok(a) => {
                return Err(WorkloadError::Master {
                    master: master.addr().to_string(),
                    detail: format!(
                        "asked for a file on {} ({}), got one on {}",
                        node.rack, node.url, a.url
                    ),
                });
            }
            Err(WorkloadError::Master { detail, .. })
                if detail.contains("no writable volumes") || detail.contains("No more") =>
            {
                if Instant::now() >= deadline {
                    return Err(WorkloadError::Master {
                        master: master.addr().to_string(),
                        detail: format!("no writable volume of {collection} on {}: {detail}", node.rack),
                    });
                }
                if !grown && !detail.contains("growth in progress") {
                    master.grow(collection, node)?;
                    grown = true;
                } else {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ranks: u32, servers: u32) -> SeedOptions {
        SeedOptions {
            master: "127.0.0.1:9333".into(),
            dataset: "lab-train".into(),
            ranks,
            seed: 1,
            features: 32,
            samples_per_shard: 4096,
            shards_per_rank: 4,
            servers,
            placement: Vec::new(),
            fresh: false,
            verify: false,
            wait: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_default_lab_keeps_its_placement() {
        // 4 ranks on 3 servers: rank 1 (the one the throttled-rank drill slows) reads storage-1 (the one
        // the slow-storage drill delays), as before.
        let p = opts(4, 3).placement();
        let want: Vec<&str> = vec!["storage-0", "storage-1", "storage-2", "storage-0"];
        assert_eq!(p.values().map(String::as_str).collect::<Vec<_>>(), want);
    }

    #[test]
    fn every_server_holds_shards_and_has_readers_when_ranks_cover_them() {
        for servers in 1..=8u32 {
            for ranks in servers..=20 {
                let o = opts(ranks, servers);
                let p = o.placement();
                assert_eq!(p.len(), ranks as usize);
                for s in 0..servers {
                    let readers = p.values().filter(|n| **n == lab_model::names::storage(s)).count() as u32;
                    // Balanced: every server has ⌊R/S⌋ or ⌈R/S⌉ readers.
                    assert!(
                        readers == ranks / servers || readers == ranks.div_ceil(servers),
                        "{ranks} ranks on {servers} servers: storage-{s} has {readers} readers"
                    );
                }
            }
        }
        // The lab: 16 ranks on 8 servers, two readers each, storage-3..7 included.
        let p = opts(16, 8).placement();
        for s in 3..8 {
            let name = lab_model::names::storage(s);
            assert_eq!(p.values().filter(|n| **n == name).count(), 2, "{name}");
        }
    }

    #[test]
    fn placement_overrides_win() {
        let mut o = opts(4, 3);
        o.placement = vec![(1, 2)];
        assert_eq!(o.placement()[&1], "storage-2");
        assert_eq!(o.placement()[&3], "storage-0");
    }
}
