//! Names of the lab's role instances, shared by every runtime so that `rank-1` and `storage-1` mean the
//! same thing on a laptop and on a cluster.

/// The name of rank `r`, e.g. `rank-1`.
pub fn rank(r: u32) -> String {
    format!("rank-{r}")
}

/// The name of storage (volume) server `s`, e.g. `storage-1`.
pub fn storage(s: u32) -> String {
    format!("storage-{s}")
}

/// The name of the storage master.
pub const STORAGE_MASTER: &str = "storage-master";

/// The index in a name such as `rank-3` or `storage-0`, if it has that prefix.
pub fn index_of(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.strip_prefix('-')?.parse().ok()
}

/// A key that sorts names as a person reads them: `rank-2` before `rank-10`.
pub fn natural_key(name: &str) -> (String, u64) {
    match name.rsplit_once('-') {
        Some((head, n)) if n.parse::<u64>().is_ok() => (head.to_string(), n.parse().unwrap_or(0)),
        _ => (name.to_string(), 0),
    }
}

/// The storage server that rank `r` reads its shards from by default: `r mod servers`.
pub fn default_server_for_rank(rank: u32, servers: u32) -> u32 {
    if servers == 0 { 0 } else { rank % servers }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = ["rank-10", "master", "rank-2", "storage-0", "rank-1"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["master", "rank-1", "rank-2", "rank-10", "storage-0"]);
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(rank(3), "rank-3");
        assert_eq!(index_of(&rank(3), "rank"), Some(3));
        assert_eq!(index_of(&storage(12), "storage"), Some(12));
        assert_eq!(index_of("storage-master", "storage"), None);
        assert_eq!(index_of("rank3", "rank"), None);
    }

    #[test]
    fn ranks_spread_over_servers() {
        let placed: Vec<u32> = (0..4).map(|r| default_server_for_rank(r, 3)).collect();
        assert_eq!(placed, vec![0, 1, 2, 0]);
    }
}
