//! What both runtimes know about the lab's SeaweedFS: the master's volume list, and a volume server's own
//! latency (a request straight to it, bypassing the latency proxy the ranks read through) sent with its
//! scrape.

use std::time::Duration;

use serde_json::Value;

use crate::{Result, RuntimeError};

/// How far apart the direct probe's requests are sent: nine span 560 ms, more than one CFS period of a
/// starved server (the local runtime's `lab_runtime_local::cgroup::STORAGE_PERIOD_US`, Kubernetes' 100 ms), so
/// they sample every phase of it.
pub const PROBE_SPACING: Duration = Duration::from_millis(70);

/// How long one direct probe waits for an answer; a request still unanswered then counts as this long.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The [`lab_model::metrics::STORAGE_OWN_PROBE_SECONDS`] sample appended to a storage server's scrape.
pub fn own_probe_text(own: Duration) -> String {
    let m = lab_model::metrics::STORAGE_OWN_PROBE_SECONDS;
    format!(
        "# HELP {m} One request straight to the server, bypassing the ranks' path.\n# TYPE {m} gauge\n{m} {}\n",
        own.as_secs_f64()
    )
}

/// A storage server's scrape with its own latency appended: the scrape and one request straight to the
/// server (`probe`), sent at the same moment. Not one after the other: a server held to a CPU budget per
/// period answers the scrape when its budget comes back, and a probe sent right after that answer would
/// always find budget left and read fast; sent with the scrape, it lands on whatever phase of the period
/// the scrape's schedule hits. A probe still unanswered when the scrape's time is up counts as that long
/// (a starved server is slow, not absent from the evidence); a probe that fails adds nothing. A server so
/// starved that its own scrape does not answer in time still has that latency: the answer is the probe's
/// line alone, and the scrape's error only when the probe failed too (a server that is not there).
///
/// # Errors
/// The scrape's error, when the probe gave no latency either.
pub async fn scrape_with_own_probe<S, P>(scrape: S, probe: P, timeout: Duration) -> Result<String>
where
    S: std::future::Future<Output = Result<String>>,
    P: std::future::Future<Output = Result<Duration>>,
{
    let (body, own) = tokio::join!(scrape, tokio::time::timeout(timeout, probe));
    let own = match own {
        Ok(Ok(own)) => Some(own_probe_text(own)),
        Err(_) => Some(own_probe_text(timeout)),
        Ok(Err(_)) => None,
    };
    match (body, own) {
        (Ok(mut body), Some(own)) => {
            body.push_str(&own);
            Ok(body)
        }
        (Ok(body), None) => Ok(body),
        (Err(_), Some(own)) => Ok(own),
        (Err(e), None) => Err(e),
    }
}

/// One volume as the master's `/vol/status` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeEntry {
    pub id: u32,
    pub collection: String,
    /// The rack the server holding it registered with (`storage-<i>` in a lab).
    pub rack: String,
    /// The server's address (`ip:port`).
    pub node: String,
}

/// The volumes on storage server `server`: those whose server registered with its rack (`storage-<i>`).
pub fn volumes_on(entries: Vec<VolumeEntry>, server: u32) -> Vec<u32> {
    let rack = lab_model::names::storage(server);
    entries
        .into_iter()
        .filter(|e| e.rack == rack)
        .map(|e| e.id)
        .collect()
}

/// Parses the master's `/vol/status` answer.
///
/// # Errors
/// [`RuntimeError::Other`] when it is not the shape SeaweedFS answers with.
pub fn parse_vol_status(body: &str) -> Result<Vec<VolumeEntry>> {
    let bad = |what: &str| RuntimeError::Other(format!("the master's /vol/status is unreadable: {what}"));
    let v: Value = serde_json::from_str(body).map_err(|e| bad(&e.to_string()))?;
    let dcs = v
        .pointer("/Volumes/DataCenters")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no Volumes.DataCenters"))?;
    let mut out = Vec::new();
    for racks in dcs.values().filter_map(Value::as_object) {
        for (rack, nodes) in racks {
            for (node, vols) in nodes.as_object().into_iter().flatten() {
                for vol in vols.as_array().into_iter().flatten() {
                    let id = vol
                        .get("Id")
                        .and_then(Value::as_u64)
                        .and_then(|i| u32::try_from(i).ok())
                        .ok_or_else(|| bad("a volume without an Id"))?;
                    out.push(VolumeEntry {
                        id,
                        collection: vol
                            .get("Collection")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        rack: rack.clone(),
                        node: node.clone(),
                    });
                }
            }
        }
    }
    out.sort_by_key(|e| e.id);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server too starved to answer its scrape in time is read as slow (the probe's wait), not dropped
    /// from the evidence; one that is not there at all is the scrape's error.
    #[tokio::test(start_paused = true)]
    async fn a_starved_server_keeps_its_own_latency() {
        let t = Duration::from_millis(700);
        let late = || async {
            Err::<String, _>(RuntimeError::Timeout {
                what: "scrape".into(),
                seconds: 0.7,
            })
        };
        let body = scrape_with_own_probe(late(), std::future::pending(), t)
            .await
            .unwrap();
        assert_eq!(body, own_probe_text(t));
        let refused = async { Err(RuntimeError::Other("refused".into())) };
        assert!(scrape_with_own_probe(late(), refused, t).await.is_err());
        let ok = async { Ok("x 1\n".to_string()) };
        let fine = scrape_with_own_probe(ok, async { Ok(Duration::from_millis(2)) }, t)
            .await
            .unwrap();
        assert_eq!(fine, format!("x 1\n{}", own_probe_text(Duration::from_millis(2))));
    }

    #[test]
    fn reads_the_masters_volume_list() {
        let body = r#"{"Version":"8000GB 4.48 pypi","Volumes":{"DataCenters":{"lab":{"storage-0":{"127.0.0.1:38081":[{"Collection":"d","Id":3},{"Collection":"","Id":1}]},"storage-1":{"127.0.0.1:38082":[]}}},"Free":63,"Max":64}}"#;
        let v = parse_vol_status(body).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].id, 1);
        assert_eq!(v[1].collection, "d");
        assert_eq!(v[1].rack, "storage-0");
        assert_eq!(v[1].node, "127.0.0.1:38081");
        assert!(parse_vol_status("{}").is_err());
        assert!(parse_vol_status("garbage").is_err());
    }
}
