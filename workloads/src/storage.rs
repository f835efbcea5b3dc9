//! The SeaweedFS client: the master's topology, placement and lookups, and reads and writes of needles
//! on volume servers over keep-alive HTTP.
//!
//! Storage servers are known by their rack name: runtimes start each volume server with
//! `-rack storage-<i> -dataCenter lab`, so the client maps a node's address to `storage-<i>` from the
//! master's `/dir/status`, and never needs to be told an IP address. Reads go to the node's **public**
//! URL as the master reports it (a latency proxy may sit there, on purpose); writes go to its internal
//! URL. Volume locations are cached and looked up again after an error.
//!
//! SeaweedFS has no names without a filer, so the job's own records (manifest, checkpoint, progress) live
//! at fixed file ids in a collection of their own, `<dataset>-meta`: the volume is found through the
//! master's `/vol/status`, and the key and cookie are constants ([`MANIFEST_KEY`] and friends). Writing the
//! same file id again replaces the needle, which is how checkpoints are overwritten.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{Result, WorkloadError};
use crate::http::{HttpConn, body_snippet};

/// The cookie of every fixed file id the job writes itself.
pub const COOKIE: u32 = 0x1ab0_c0de;
/// Key of the dataset manifest in the meta collection.
pub const MANIFEST_KEY: u64 = 1;
/// Key of the job's checkpoint in the meta collection.
pub const CHECKPOINT_KEY: u64 = 2;
/// Key of the job's progress record in the meta collection.
pub const PROGRESS_KEY: u64 = 3;

/// The collection holding a dataset's shards.
pub fn data_collection(dataset: &str) -> String {
    dataset.to_string()
}

/// The collection holding a dataset's manifest and its job's checkpoint and progress.
pub fn meta_collection(dataset: &str) -> String {
    format!("{dataset}-meta")
}

/// The file id of fixed key `key` in volume `vid`.
pub fn fixed_fid(vid: u32, key: u64) -> String {
    format!("{vid},{key:x}{COOKIE:08x}")
}

/// The volume id of a file id (`3,01637037d6` → 3).
///
/// # Errors
/// [`WorkloadError::Invalid`] when the text is not a file id.
pub fn volume_of(fid: &str) -> Result<u32> {
    let (v, rest) = fid
        .split_once(',')
        .ok_or_else(|| WorkloadError::invalid("file id", fid))?;
    if rest.len() < 9 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WorkloadError::invalid(
            "file id",
            format!("{fid:?} is not volume,keycookie"),
        ));
    }
    v.parse()
        .map_err(|_| WorkloadError::invalid("file id", format!("{fid:?} has no volume number")))
}

/// Checks a dataset name: it becomes a SeaweedFS collection name, so it is kept to `[a-z0-9_-]`.
///
/// # Errors
/// [`WorkloadError::Invalid`] when it is empty, too long or has other characters.
pub fn validate_dataset_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.ends_with("-meta");
    if ok {
        Ok(())
    } else {
        Err(WorkloadError::invalid(
            "dataset name",
            format!("{name:?}: use 1 to 40 of a-z, 0-9, - and _ (and not ending in -meta)"),
        ))
    }
}

/// A volume server as the master knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Internal address (`ip:port`).
    pub url: String,
    /// Address clients read from (`ip:port`), possibly a proxy in front of the server.
    pub public_url: String,
    /// The rack, which names the server: `storage-<i>`.
    pub rack: String,
    pub data_center: String,
}

/// A volume as the master knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: u32,
    pub collection: String,
    pub node_url: String,
    pub rack: String,
    pub size: u64,
    pub read_only: bool,
}

/// Where a volume can be read and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub url: String,
    pub public_url: String,
    /// The storage server's name (`storage-<i>`), or the address when the master does not say.
    pub server: String,
}

/// What `/dir/assign` handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub fid: String,
    pub url: String,
    pub public_url: String,
}

/// The SeaweedFS master's HTTP API.
#[derive(Debug)]
pub struct Master {
    addr: String,
    conn: HttpConn,
    buf: Vec<u8>,
}

impl Master {
    /// A client of the master at `addr` (`host:port`); nothing is sent until the first call.
    pub fn new(addr: &str, timeout: Duration) -> Master {
        Master {
            addr: addr.to_string(),
            conn: HttpConn::new(addr, "seaweedfs master", timeout),
            buf: Vec::new(),
        }
    }

    /// The master's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn get_json(&mut self, path: &str) -> Result<Value> {
        let resp = self.conn.get(path, &mut self.buf)?;
        let v: Value = serde_json::from_slice(&self.buf).map_err(|e| {
            WorkloadError::protocol(
                "seaweedfs master",
                &self.addr,
                format!(
                    "{path} answered HTTP {} with non-JSON ({e}): {}",
                    resp.status,
                    body_snippet(&self.buf)
                ),
            )
        })?;
        if let Some(err) = v.get("error").and_then(Value::as_str).filter(|e| !e.is_empty()) {
            return Err(WorkloadError::Master {
                master: self.addr.clone(),
                detail: format!("{path}: {err}"),
            });
        }
        if !(200..300).contains(&resp.status) {
            return Err(WorkloadError::HttpStatus {
                addr: self.addr.clone(),
                method: "GET".into(),
                path: path.into(),
                status: resp.status,
                body: body_snippet(&self.buf),
            });
        }
        Ok(v)
    }

    /// Every volume server, from `/dir/status`.
    ///
    /// # Errors
    /// When the master cannot be reached or answers something else than its topology.
    pub fn topology(&mut self) -> Result<Vec<Node>> {
        let v = self.get_json("/dir/status")?;
        let mut nodes = Vec::new();
        for dc in v
            .pointer("/Topology/DataCenters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let dc_id = str_of(dc, "Id");
            for rack in dc.get("Racks").and_then(Value::as_array).into_iter().flatten() {
                let rack_id = str_of(rack, "Id");
                for n in rack
                    .get("DataNodes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let url = str_of(n, "Url");
                    let public = str_of(n, "PublicUrl");
                    nodes.push(Node {
                        public_url: if public.is_empty() { url.clone() } else { public },
                        url,
                        rack: rack_id.clone(),
                        data_center: dc_id.clone(),
                    });
                }
            }
        }
        Ok(nodes)
    }

    /// Every volume, from `/vol/status`.
    ///
    /// # Errors
    /// When the master cannot be reached or answers something unexpected.
    pub fn volumes(&mut self) -> Result<Vec<Volume>> {
        let v = self.get_json("/vol/status")?;
        let mut out = Vec::new();
        let dcs = v.pointer("/Volumes/DataCenters").and_then(Value::as_object);
        for racks in dcs.into_iter().flat_map(|m| m.values()) {
            for (rack, nodes) in racks.as_object().into_iter().flatten() {
                for (node, vols) in nodes.as_object().into_iter().flatten() {
                    for vol in vols.as_array().into_iter().flatten() {
                        let Some(id) = vol
                            .get("Id")
                            .and_then(Value::as_u64)
                            .and_then(|i| u32::try_from(i).ok())
                        else {
                            continue;
                        };
                        out.push(Volume {
                            id,
                            collection: str_of(vol, "Collection"),
                            node_url: node.clone(),
                            rack: rack.clone(),
                            size: vol.get("Size").and_then(Value::as_u64).unwrap_or(0),
                            read_only: vol.get("ReadOnly").and_then(Value::as_bool).unwrap_or(false),
                        });
                    }
                }
            }
        }
        out.sort_by_key(|v| v.id);
        Ok(out)
    }

    /// Where volume `vid` lives, from `/dir/lookup` (url, public url).
    ///
    /// # Errors
    /// When the master cannot be reached or does not know the volume.
    pub fn lookup(&mut self, vid: u32) -> Result<Vec<(String, String)>> {
        let v = self.get_json(&format!("/dir/lookup?volumeId={vid}"))?;
        let locs: Vec<(String, String)> = v
            .get("locations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|l| {
                let url = str_of(l, "url");
                let public = str_of(l, "publicUrl");
                (url.clone(), if public.is_empty() { url } else { public })
            })
            .filter(|(u, _)| !u.is_empty())
            .collect();
        if locs.is_empty() {
            return Err(WorkloadError::Master {
                master: self.addr.clone(),
                detail: format!("volume {vid} has no location"),
            });
        }
        Ok(locs)
    }

    /// Creates one volume of `collection` on `node`. The data center, rack and node are all given: with
    /// the node alone, weed 4.48 picks a random node first and then refuses it when it is not the one
    /// asked for.
    ///
    /// # Errors
    /// When the master refuses (no free volume slots on the node, for example).
    pub fn grow(&mut self, collection: &str, node: &Node) -> Result<()> {
        self.get_json(&format!(
            "/vol/grow?collection={collection}&count=1&replication=000&dataCenter={}&rack={}&dataNode={}",
            node.data_center, node.rack, node.url
        ))
        .map(|_| ())
    }

    /// A new file id in `collection` on `node`.
    ///
    /// # Errors
    /// When the master has no writable volume of the collection on that node.
    pub fn assign(&mut self, collection: &str, node: &Node) -> Result<Assignment> {
        let v = self.get_json(&format!(
            "/dir/assign?collection={collection}&replication=000&dataCenter={}&rack={}&dataNode={}",
            node.data_center, node.rack, node.url
        ))?;
        let a = Assignment {
            fid: str_of(&v, "fid"),
            url: str_of(&v, "url"),
            public_url: str_of(&v, "publicUrl"),
        };
        if a.fid.is_empty() || a.url.is_empty() {
            return Err(WorkloadError::protocol(
                "seaweedfs master",
                &self.addr,
                "/dir/assign answered without a fid",
            ));
        }
        Ok(a)
    }
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// The storage servers named `storage-<i>` in a topology, by index. Nodes in other racks are ignored.
pub fn storage_servers(nodes: &[Node]) -> HashMap<u32, Node> {
    nodes
        .iter()
        .filter_map(|n| lab_model::names::index_of(&n.rack, "storage").map(|i| (i, n.clone())))
        .collect()
}

/// Reads and writes needles, caching where volumes live and keeping one connection per server open.
#[derive(Debug)]
pub struct Storage {
    master: Master,
    timeout: Duration,
    conns: HashMap<String, HttpConn>,
    /// Where each volume was found, and when: an entry older than [`LOCATION_TTL`] is looked up again.
    locations: HashMap<u32, (Location, Instant)>,
    racks: HashMap<String, String>,
}

/// How long a volume's location is trusted before the master is asked again. A volume moved off a slow
/// server (`lab storage drain`) is then read from its new place within this long, even though the old
/// server may still answer (by proxying the read to the new place, which keeps the old server, slow or
/// not, on the path).
pub const LOCATION_TTL: Duration = Duration::from_secs(5);

impl Storage {
    /// A client of the SeaweedFS whose master is at `master` (`host:port`).
    pub fn new(master: &str, timeout: Duration) -> Storage {
        Storage {
            master: Master::new(master, timeout),
            timeout,
            conns: HashMap::new(),
            locations: HashMap::new(),
            racks: HashMap::new(),
        }
    }

    /// The master client.
    pub fn master(&mut self) -> &mut Master {
        &mut self.master
    }

    /// Refreshes the address → server-name map from the master's topology.
    ///
    /// # Errors
    /// When the master cannot be reached.
    pub fn refresh_topology(&mut self) -> Result<Vec<Node>> {
        let nodes = self.master.topology()?;
        self.racks = nodes
            .iter()
            .flat_map(|n| {
                [
                    (n.url.clone(), n.rack.clone()),
                    (n.public_url.clone(), n.rack.clone()),
                ]
            })
            .collect();
        Ok(nodes)
    }

    /// Where volume `vid` lives (cached).
    ///
    /// # Errors
    /// When the master cannot be reached or does not know the volume.
    pub fn locate(&mut self, vid: u32) -> Result<Location> {
        let cached = self.locations.get(&vid).cloned();
        if let Some((l, at)) = &cached
            && at.elapsed() < LOCATION_TTL
        {
            return Ok(l.clone());
        }
        let locs = match (self.master.lookup(vid), &cached) {
            (Ok(l), _) => l,
            // The master is briefly unreachable: the last known place is still the best guess.
            (Err(_), Some((l, _))) => return Ok(l.clone()),
            (Err(e), None) => return Err(e),
        };
        let (url, public_url) = locs[0].clone();
        if !self.racks.contains_key(&url) {
            // A node the map does not know yet: refresh once; a failure only costs the nicer label.
            let _ = self.refresh_topology();
        }
        let server = self.racks.get(&url).cloned().unwrap_or_else(|| url.clone());
        let loc = Location {
            url,
            public_url,
            server,
        };
        if let Some((old, _)) = cached
            && old != loc
        {
            // The volume moved: the connections to its old place are of no more use for it.
            self.conns.remove(&old.public_url);
            self.conns.remove(&old.url);
        }
        self.locations.insert(vid, (loc.clone(), Instant::now()));
        Ok(loc)
    }

    /// Forgets where volume `vid` lives and drops the connection to it, so the next call looks again.
    pub fn invalidate(&mut self, vid: u32) {
        if let Some((l, _)) = self.locations.remove(&vid) {
            self.conns.remove(&l.public_url);
            self.conns.remove(&l.url);
        }
    }

    fn conn(&mut self, addr: &str, server: &str) -> &mut HttpConn {
        let timeout = self.timeout;
        self.conns
            .entry(addr.to_string())
            .or_insert_with(|| HttpConn::new(addr, format!("volume server {server}"), timeout))
    }

    /// Reads needle `fid` (or bytes `first..=last` of it) from the server's public address into `body`.
    /// Returns the server's name. A `404` is `Ok(None)`.
    ///
    /// # Errors
    /// When the volume cannot be located, the server cannot be reached or answers with an error, or a
    /// range comes back with another length than asked.
    pub fn read(
        &mut self,
        fid: &str,
        range: Option<(u64, u64)>,
        body: &mut Vec<u8>,
    ) -> Result<Option<String>> {
        self.read_via(fid, range, body, true)
    }

    /// Like [`Storage::read`], but through the server's internal address: for checks that are not part of
    /// the training job's read path (the seeder verifying what it stored), so a proxy in front of the
    /// public address neither slows nor blocks them.
    ///
    /// # Errors
    /// As [`Storage::read`].
    pub fn read_internal(&mut self, fid: &str, body: &mut Vec<u8>) -> Result<Option<String>> {
        self.read_via(fid, None, body, false)
    }

    fn read_via(
        &mut self,
        fid: &str,
        range: Option<(u64, u64)>,
        body: &mut Vec<u8>,
        public: bool,
    ) -> Result<Option<String>> {
        let vid = volume_of(fid)?;
        let loc = self.locate(vid)?;
        let path = format!("/{fid}");
        let range_header = range.map(|(a, b)| format!("bytes={a}-{b}"));
        let headers: Vec<(&str, &str)> = range_header.iter().map(|r| ("Range", r.as_str())).collect();
        let addr = if public {
            loc.public_url.clone()
        } else {
            loc.url.clone()
        };
        let result = self
            .conn(&addr, &loc.server)
            .request("GET", &path, &headers, &[], body);
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                self.invalidate(vid);
                return Err(e);
            }
        };
        match resp.status {
            200 | 206 => {}
            404 => {
                // The needle may be missing, or the volume may have moved away: look it up next time.
                self.invalidate(vid);
                return Ok(None);
            }
            status => {
                self.invalidate(vid);
                return Err(WorkloadError::HttpStatus {
                    addr: addr.clone(),
                    method: "GET".into(),
                    path,
                    status,
                    body: body_snippet(body),
                });
            }
        }
        if let Some((a, b)) = range {
            let want = (b - a + 1) as usize;
            if resp.status == 200 {
                // The server ignored the range: cut it out of the whole needle.
                if body.len() < a as usize + want {
                    return Err(WorkloadError::protocol(
                        format!("volume server {}", loc.server),
                        addr.clone(),
                        format!(
                            "needle {fid} is {} bytes, shorter than the range {a}-{b}",
                            body.len()
                        ),
                    ));
                }
                body.drain(..a as usize);
                body.truncate(want);
            } else if body.len() != want || resp.content_range.is_some_and(|(s, e, _)| (s, e) != (a, b)) {
                return Err(WorkloadError::protocol(
                    format!("volume server {}", loc.server),
                    addr.clone(),
                    format!(
                        "asked {fid} bytes {a}-{b}, got {} bytes ({:?})",
                        body.len(),
                        resp.content_range
                    ),
                ));
            }
        }
        Ok(Some(loc.server))
    }

    /// Writes `data` as needle `fid` (replacing it if it exists) through the server's internal address.
    ///
    /// # Errors
    /// When the volume cannot be located or the server refuses the write.
    pub fn write(&mut self, fid: &str, data: &[u8]) -> Result<()> {
        let vid = volume_of(fid)?;
        let loc = self.locate(vid)?;
        let path = format!("/{fid}");
        let mut body = Vec::new();
        let headers = [("Content-Type", "application/octet-stream")];
        let resp = match self
            .conn(&loc.url, &loc.server)
            .request("POST", &path, &headers, data, &mut body)
        {
            Ok(r) => r,
            Err(e) => {
                self.invalidate(vid);
                return Err(e);
            }
        };
        if resp.status == 204 {
            // The volume server answers 204 when the needle already holds exactly these bytes.
            return Ok(());
        }
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let error = answer.get("error").and_then(Value::as_str).unwrap_or_default();
        let size = answer.get("size").and_then(Value::as_u64);
        if !(200..300).contains(&resp.status) || !error.is_empty() || size != Some(data.len() as u64) {
            return Err(WorkloadError::HttpStatus {
                addr: loc.url,
                method: "POST".into(),
                path,
                status: resp.status,
                body: body_snippet(&body),
            });
        }
        Ok(())
    }

    /// Deletes needle `fid`; a needle that is already gone is fine.
    ///
    /// # Errors
    /// When the volume cannot be located or the server answers with an error.
    pub fn delete(&mut self, fid: &str) -> Result<()> {
        let vid = volume_of(fid)?;
        let loc = self.locate(vid)?;
        let path = format!("/{fid}");
        let mut body = Vec::new();
        let resp = self
            .conn(&loc.url, &loc.server)
            .request("DELETE", &path, &[], &[], &mut body)?;
        if (200..300).contains(&resp.status) || resp.status == 404 {
            Ok(())
        } else {
            Err(WorkloadError::HttpStatus {
                addr: loc.url,
                method: "DELETE".into(),
                path,
                status: resp.status,
                body: body_snippet(&body),
            })
        }
    }

    /// The volume of the dataset's meta collection (the lowest id when there are several), if any.
    ///
    /// # Errors
    /// When the master cannot be reached.
    pub fn meta_volume(&mut self, dataset: &str) -> Result<Option<u32>> {
        let collection = meta_collection(dataset);
        Ok(self
            .master
            .volumes()?
            .into_iter()
            .filter(|v| v.collection == collection)
            .map(|v| v.id)
            .min())
    }
}

/// The metric label `kind` for a storage error: `connect`, `timeout`, `http` or `checksum`.
pub fn error_kind(e: &WorkloadError) -> &'static str {
    match e {
        WorkloadError::Connect { .. } => "connect",
        WorkloadError::Timeout { .. } => "timeout",
        WorkloadError::Checksum { .. } => "checksum",
        _ => "http",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_ids() {
        assert_eq!(fixed_fid(7, MANIFEST_KEY), "7,11ab0c0de");
        assert_eq!(volume_of("7,11ab0c0de").unwrap(), 7);
        assert_eq!(volume_of("3,02a46b77ec").unwrap(), 3);
        for bad in ["", "3", "x,0123456789", "3,12", "3,zz3456789"] {
            assert!(volume_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dataset_names() {
        assert!(validate_dataset_name("lab-train_1").is_ok());
        for bad in ["", "Upper", "a/b", "x-meta", &"a".repeat(41)] {
            assert!(validate_dataset_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn servers_by_rack_name() {
        let node = |rack: &str, url: &str| Node {
            url: url.into(),
            public_url: url.into(),
            rack: rack.into(),
            data_center: "lab".into(),
        };
        let s = storage_servers(&[
            node("storage-2", "a:1"),
            node("DefaultRack", "b:1"),
            node("storage-0", "c:1"),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[&2].url, "a:1");
        assert_eq!(s[&0].url, "c:1");
    }
}
