//! Evidence levels: how much of the incident bundle an agent gets to read. Each level adds to the one
//! before it (pod health is at every level): `pods` (pod health alone — phase, Ready, restarts and their reasons: the seed's starting
//! point, where a stalled job looks healthy), `metrics` (+ the golden signals, per-dependency latency and each rank's own figures),
//! `wiring` (+ the pods with their containers and resources against the template, and the rank → server
//! edges), `changes` (+ the change log), `full` (+ the lab's one-line latency summary). What was tried
//! before (`previous_attempts`) is in the bundle at every level.

use serde_json::Value;

/// How much of the bundle an agent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvidenceLevel {
    Pods,
    Metrics,
    Wiring,
    Changes,
    Full,
}

impl EvidenceLevel {
    /// Every level, least first.
    pub const ALL: [EvidenceLevel; 5] = [
        EvidenceLevel::Pods,
        EvidenceLevel::Metrics,
        EvidenceLevel::Wiring,
        EvidenceLevel::Changes,
        EvidenceLevel::Full,
    ];

    /// Its name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceLevel::Pods => "pods",
            EvidenceLevel::Metrics => "metrics",
            EvidenceLevel::Wiring => "wiring",
            EvidenceLevel::Changes => "changes",
            EvidenceLevel::Full => "full",
        }
    }

    /// Parses a level's name.
    ///
    /// # Errors
    /// A message listing the levels.
    pub fn parse(s: &str) -> Result<EvidenceLevel, String> {
        EvidenceLevel::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| format!("unknown evidence level {s:?}: pods, metrics, wiring, changes or full"))
    }
}

impl std::fmt::Display for EvidenceLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn remove(v: &mut Value, key: &str) {
    if let Some(o) = v.as_object_mut() {
        o.remove(key);
    }
}

/// The bundle (as JSON) cut down to `level`; it says which level it holds in `evidence`.
pub fn limit(bundle: &Value, level: EvidenceLevel) -> Value {
    let mut b = bundle.clone();
    if level < EvidenceLevel::Metrics {
        pods_only(&mut b);
    }
    if level < EvidenceLevel::Full {
        remove(&mut b, "latency_summary");
    }
    if level < EvidenceLevel::Changes {
        remove(&mut b, "changes");
    }
    if level < EvidenceLevel::Wiring {
        // Pod health is at every level; the pods' containers and resources are wiring.
        if let Some(pods) = b.get("wiring").and_then(|w| w.get("pods")) {
            let health = pod_health(Some(pods));
            if let Some(o) = b.as_object_mut() {
                o.insert("pods".into(), health);
            }
        }
        remove(&mut b, "wiring");
        // The database's desired state (its template, the versions its pods were made from, the primary's
        // settings) is wiring too; the writer's signals stay.
        if let Some(d) = b.get_mut("database") {
            remove(d, "template");
            remove(d, "synchronous_standby_names");
            if let Some(pods) = d.get_mut("pods").and_then(Value::as_array_mut) {
                for p in pods {
                    remove(p, "made_from");
                    remove(p, "differs_from_template");
                }
            }
        }
        // The edges as the metrics' labels give them, and the desired state: wiring, not metrics.
        if let Some(deps) = b.get_mut("dependencies").and_then(Value::as_array_mut) {
            for d in deps {
                remove(d, "readers");
            }
        }
        if let Some(t) = b.get_mut("training") {
            remove(t, "world_size_configured");
            remove(t, "ranks_desired");
            if let Some(ranks) = t.get_mut("ranks").and_then(Value::as_array_mut) {
                for r in ranks {
                    // `server` since v3, `reads_from` in v2 bundles (recorded incidents replay).
                    remove(r, "server");
                    remove(r, "reads_from");
                }
            }
        }
    }
    if let Some(o) = b.as_object_mut() {
        o.insert("evidence".into(), Value::String(level.as_str().into()));
    }
    b
}

/// What a pod's health says: the fields `kubectl get pods` and `describe` show, nothing measured.
const POD_HEALTH: [&str; 8] = [
    "name", "role", "phase", "ready", "restarts", "reason", "message", "node",
];

/// One pod's health alone, from its wiring row.
pub fn health_of(pod: &Value) -> Value {
    let mut o = serde_json::Map::new();
    for k in POD_HEALTH {
        if let Some(v) = pod.get(k) {
            o.insert(k.into(), v.clone());
        }
    }
    Value::Object(o)
}

/// Each pod's health alone, from the wiring's pod rows.
fn pod_health(pods: Option<&Value>) -> Value {
    let list = pods
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |ps| ps.iter().map(health_of).collect());
    Value::Array(list)
}

/// The bundle as pod health alone shows it: the pods (and the database's) with their phase, Ready,
/// restarts and reasons, the one-line Kubernetes view, and what was tried before.
fn pods_only(b: &mut Value) {
    let health = pod_health;
    let pods = health(b.get("wiring").and_then(|w| w.get("pods")));
    let db_pods = b
        .get("database")
        .and_then(|d| d.get("pods"))
        .map(|p| health(Some(p)));
    let Some(o) = b.as_object_mut() else { return };
    o.retain(|k, _| {
        matches!(
            k.as_str(),
            "format"
                | "lab"
                | "runtime"
                | "generated_at"
                | "generated_at_ms"
                | "kubernetes"
                | "previous_attempts"
        )
    });
    o.insert("pods".into(), pods);
    if let Some(d) = db_pods {
        o.insert("database_pods".into(), d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle() -> Value {
        serde_json::json!({
            "format": "straggler-lab.incident/v3",
            "latency_summary": ["storage-1 went from 2 ms to 414 ms"],
            "changes": [{"where": "storage-1"}],
            "wiring": {"pods": [], "edges": [{"from": "rank-1", "to": "storage-1"}]},
            "dependencies": [{"name": "storage-1", "readers": ["rank-1"], "client_p50": 0.4}],
            "training": {"world_size_configured": 4, "ranks_desired": 4, "world_size_reported": 4,
                         "ranks": [{"name": "rank-1", "server": "storage-1", "read": 0.9}]},
            "previous_attempts": [{"plan": []}],
        })
    }

    #[test]
    fn pods_is_pod_health_alone() {
        let mut b = bundle();
        b["kubernetes"] = "4/4 Running, Ready".into();
        b["wiring"]["pods"] = serde_json::json!([{"name": "rank-1", "role": "rank", "phase": "Running",
            "ready": true, "restarts": 0, "cpu_live": "150m", "cpu_template": "400m", "containers": ["rank"]}]);
        let p = limit(&b, EvidenceLevel::Pods);
        assert_eq!(p["evidence"], "pods");
        assert_eq!(p["kubernetes"], "4/4 Running, Ready");
        assert_eq!(p["pods"][0]["name"], "rank-1");
        assert_eq!(p["pods"][0]["ready"], true);
        assert!(
            p["pods"][0].get("cpu_live").is_none(),
            "a live limit is not pod health"
        );
        for gone in ["dependencies", "training", "wiring", "changes", "latency_summary"] {
            assert!(p.get(gone).is_none(), "{gone} at pods");
        }
        assert!(p.get("previous_attempts").is_some());
        assert!(EvidenceLevel::Pods < EvidenceLevel::Metrics);
    }

    #[test]
    fn a_recorded_v2_bundle_is_cut_the_same_way() {
        let mut b = bundle();
        b["format"] = "straggler-lab.incident/v2".into();
        b["training"]["ranks"][0] = serde_json::json!({"name": "rank-1", "reads_from": "storage-1"});
        let m = limit(&b, EvidenceLevel::Metrics);
        assert!(m["training"]["ranks"][0].get("reads_from").is_none());
        assert_eq!(m["training"]["ranks"][0]["name"], "rank-1");
    }

    #[test]
    fn each_level_adds_to_the_one_before() {
        let m = limit(&bundle(), EvidenceLevel::Metrics);
        assert_eq!(m["evidence"], "metrics");
        for gone in ["latency_summary", "changes", "wiring"] {
            assert!(m.get(gone).is_none(), "{gone} at metrics");
        }
        assert!(m["pods"].is_array(), "pod health is at every level");
        assert!(m["dependencies"][0].get("readers").is_none());
        assert_eq!(m["dependencies"][0]["client_p50"], 0.4);
        assert!(m["training"]["ranks"][0].get("server").is_none());
        assert_eq!(m["training"]["ranks"][0]["read"], 0.9);
        assert!(m["training"].get("ranks_desired").is_none());
        assert_eq!(m["training"]["world_size_reported"], 4);
        assert!(m.get("previous_attempts").is_some());

        let w = limit(&bundle(), EvidenceLevel::Wiring);
        assert!(w.get("wiring").is_some() && w.get("changes").is_none());
        assert_eq!(w["dependencies"][0]["readers"][0], "rank-1");
        let c = limit(&bundle(), EvidenceLevel::Changes);
        assert!(c.get("changes").is_some() && c.get("latency_summary").is_none());
        let f = limit(&bundle(), EvidenceLevel::Full);
        assert!(f.get("latency_summary").is_some());
        assert_eq!(EvidenceLevel::parse("wiring"), Ok(EvidenceLevel::Wiring));
        assert!(EvidenceLevel::parse("all").is_err());
    }
}
