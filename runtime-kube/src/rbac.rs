//! The least RBAC the lab needs on a cluster it did not create: one table of permissions, from which both
//! the manifest a user applies (`lab rbac`) and the preflight of `lab up --kubeconfig` (one
//! SelfSubjectAccessReview per verb, every missing permission listed at once) are made, so the two cannot
//! disagree.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::api;
use lab_runtime::Result;

/// Which objects a permission covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In the lab's namespace (a Role).
    Namespace,
    /// Cluster-wide (a ClusterRole).
    Cluster,
}

/// When the lab needs a permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Always.
    Always,
    /// When the lab creates (and later deletes) its own namespace (no `--namespace`).
    OwnNamespace,
    /// With `--advertise-gpus true`.
    AdvertiseGpus,
    /// Never required: without it the lab says what it could not check.
    Optional,
}

/// One rule: verbs on a resource (and subresource) of an API group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub scope: Scope,
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: &'static str,
    pub verbs: &'static [&'static str],
    pub need: Need,
    /// What it is for, in the manifest's comment and the preflight's message.
    pub why: &'static str,
}

const OBJECTS: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

const fn ns(
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Permission {
    Permission {
        scope: Scope::Namespace,
        group,
        resource,
        subresource,
        verbs,
        need: Need::Always,
        why,
    }
}

/// Every permission the lab uses, least first within each group.
pub const PERMISSIONS: &[Permission] = &[
    ns(
        "",
        "pods",
        "",
        &["get", "list", "watch", "patch", "delete"],
        "status; restart a rank",
    ),
    ns(
        "",
        "pods",
        "ephemeralcontainers",
        &["patch"],
        "slow-storage's netem container",
    ),
    ns(
        "",
        "pods",
        "resize",
        &["patch"],
        "throttled-rank, slow-disk (in-place resize)",
    ),
    ns("", "pods", "log", &["get"], "a failed step's logs"),
    ns(
        "",
        "pods",
        "proxy",
        &["get", "create", "update"],
        "metrics, checkpoint, latency proxy",
    ),
    ns(
        "",
        "pods",
        "exec",
        &["get", "create"],
        "lab rank procs/stop, slow-compute, rank-hang, rank env, storage drain",
    ),
    ns("", "configmaps", "", OBJECTS, "lab-config, the rule file"),
    ns(
        "",
        "secrets",
        "",
        &["get", "list", "create", "patch", "delete"],
        "the lab's control token",
    ),
    ns("", "services", "", OBJECTS, "rendezvous, storage, Prometheus"),
    ns("", "serviceaccounts", "", OBJECTS, "Prometheus' account"),
    ns("", "events", "", &["list"], "why a pod is Pending"),
    ns(
        "apps",
        "deployments",
        "",
        OBJECTS,
        "storage, the writer, jobs of other teams",
    ),
    ns("apps", "statefulsets", "", OBJECTS, "the ranks, the database"),
    ns("apps", "statefulsets", "scale", &["patch"], "lab scale"),
    ns("batch", "jobs", "", OBJECTS, "the seeder"),
    ns(
        "rbac.authorization.k8s.io",
        "roles",
        "",
        OBJECTS,
        "Prometheus may read the pods",
    ),
    ns(
        "rbac.authorization.k8s.io",
        "rolebindings",
        "",
        OBJECTS,
        "Prometheus may read the pods",
    ),
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "namespaces",
        subresource: "",
        verbs: &["get"],
        need: Need::Always,
        why: "whether the lab's namespace exists",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "namespaces",
        subresource: "",
        verbs: &["create", "delete"],
        need: Need::OwnNamespace,
        why: "the lab's own namespace (not with --namespace)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        subresource: "",
        verbs: &["list"],
        need: Need::Optional,
        why: "the nodes' GPUs in lab status and the preflight",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        subresource: "status",
        verbs: &["patch"],
        need: Need::AdvertiseGpus,
        why: "--advertise-gpus true",
    },
];

impl Permission {
    /// `pods/exec`, `statefulsets.apps/scale`: how kubectl and RBAC name it.
    pub fn name(&self) -> String {
        let mut n = self.resource.to_string();
        if !self.group.is_empty() {
            n.push('.');
            n.push_str(self.group);
        }
        if !self.subresource.is_empty() {
            n.push('/');
            n.push_str(self.subresource);
        }
        n
    }
}

/// Who the manifest binds the roles to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
    /// A service account, by namespace and name.
    ServiceAccount(String, String),
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn rules(scope: Scope, with_optional: bool) -> String {
    let mut out = String::new();
    for p in PERMISSIONS.iter().filter(|p| p.scope == scope) {
        if p.need == Need::Optional && !with_optional {
            continue;
        }
        let resource = if p.subresource.is_empty() {
            p.resource.to_string()
        } else {
            format!("{}/{}", p.resource, p.subresource)
        };
        let verbs: Vec<String> = p.verbs.iter().map(|v| yaml_str(v)).collect();
        out.push_str(&format!(
            "  # {}{}\n  - apiGroups: [{}]\n    resources: [{}]\n    verbs: [{}]\n",
            p.why,
            match p.need {
                Need::Always => "",
                Need::OwnNamespace => " (only when the lab makes its own namespace)",
                Need::AdvertiseGpus => " (only with --advertise-gpus true)",
                Need::Optional => " (optional)",
            },
            yaml_str(p.group),
            yaml_str(&resource),
            verbs.join(", ")
        ));
    }
    out
}

fn subject(s: &Subject) -> String {
    match s {
        Subject::User(n) => format!(
            "  - kind: User\n    apiGroup: rbac.authorization.k8s.io\n    name: {}\n",
            yaml_str(n)
        ),
        Subject::Group(n) => format!(
            "  - kind: Group\n    apiGroup: rbac.authorization.k8s.io\n    name: {}\n",
            yaml_str(n)
        ),
        Subject::ServiceAccount(ns, n) => format!(
            "  - kind: ServiceAccount\n    namespace: {}\n    name: {}\n",
            yaml_str(ns),
            yaml_str(n)
        ),
    }
}

/// The RBAC manifest that lets `who` run a lab in `namespace` (which must exist when `cluster_wide` is
/// false; with it, the ClusterRole also lets the lab make and delete that namespace, see the nodes' GPUs
/// and advertise GPUs).
pub fn manifest(namespace: &str, who: &Subject, cluster_wide: bool) -> String {
    let ns = yaml_str(namespace);
    let labels = "  labels:\n    app.kubernetes.io/part-of: straggler-lab\n";
    let mut out = format!(
        "# The least RBAC straggler-lab needs to run a lab in namespace {namespace}: `kubectl apply -f` this.\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: straggler-lab\n  namespace: {ns}\n{labels}rules:\n{}\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: straggler-lab\n  namespace: {ns}\n{labels}\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: straggler-lab\nsubjects:\n{}",
        rules(Scope::Namespace, true),
        subject(who)
    );
    if cluster_wide {
        out.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: straggler-lab\n{labels}rules:\n{}\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: straggler-lab\n{labels}\
             roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: straggler-lab\nsubjects:\n{}",
            rules(Scope::Cluster, true),
            subject(who)
        ));
    }
    out
}

/// What this `lab up` needs: every permission that is not optional, the namespace's own ones when the
/// lab makes it, and the node status when it advertises GPUs.
pub fn needed(own_namespace: bool, advertise_gpus: bool) -> impl Iterator<Item = &'static Permission> {
    PERMISSIONS.iter().filter(move |p| match p.need {
        Need::Always => true,
        Need::OwnNamespace => own_namespace,
        Need::AdvertiseGpus => advertise_gpus,
        Need::Optional => false,
    })
}

/// Asks the API server, for each verb of each permission, whether the kubeconfig's user has it (a
/// SelfSubjectAccessReview, which any authenticated user may make); returns every one it does not have,
/// as `verb resource (what for)`.
///
/// # Errors
/// When the API server cannot be asked.
pub async fn missing(
    client: &Client,
    namespace: &str,
    perms: impl Iterator<Item = &'static Permission>,
    deadline: std::time::Duration,
) -> Result<Vec<String>> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let asks: Vec<(&Permission, &str)> = perms.flat_map(|p| p.verbs.iter().map(move |v| (p, *v))).collect();
    let answers = futures::future::try_join_all(asks.iter().map(|(p, verb)| {
        let reviews = reviews.clone();
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: (p.scope == Scope::Namespace).then(|| namespace.to_string()),
                    group: Some(p.group.to_string()),
                    resource: Some(p.resource.to_string()),
                    subresource: (!p.subresource.is_empty()).then(|| p.subresource.to_string()),
                    verb: Some((*verb).to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        async move {
            api::within("ask the API server what the lab may do", deadline, async {
                reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(|e| {
                        api::kube_err(
                            "ask the API server what the lab may do (SelfSubjectAccessReview)",
                            e,
                        )
                    })
            })
            .await
            .map(|r| r.status.is_some_and(|s| s.allowed))
        }
    }))
    .await?;
    Ok(asks
        .iter()
        .zip(answers)
        .filter(|(_, allowed)| !allowed)
        .map(|((p, verb), _)| {
            let place = match p.scope {
                Scope::Namespace => format!("in namespace {namespace}"),
                Scope::Cluster => "cluster-wide".to_string(),
            };
            format!("{verb} {} {place} ({})", p.name(), p.why)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_parses_and_grants_what_the_preflight_asks() {
        let text = manifest("team-a", &Subject::User("alice".into()), true);
        let docs: Vec<serde_json::Value> = text
            .split("\n---\n")
            .map(|d| serde_norway::from_str(d).unwrap())
            .collect();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
        );
        assert_eq!(docs[0]["metadata"]["namespace"], "team-a");
        assert_eq!(docs[1]["subjects"][0]["name"], "alice");
        // Every verb the preflight may ask for is granted by one rule of the right role.
        for p in PERMISSIONS {
            let role = if p.scope == Scope::Namespace {
                &docs[0]
            } else {
                &docs[2]
            };
            let res = if p.subresource.is_empty() {
                p.resource.to_string()
            } else {
                format!("{}/{}", p.resource, p.subresource)
            };
            for verb in p.verbs {
                assert!(
                    role["rules"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r["apiGroups"][0] == p.group
                            && r["resources"][0] == res.as_str()
                            && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)),
                    "{verb} {res} is not granted"
                );
            }
        }
        // Without the cluster-wide part: the Role and its binding only.
        let ns_only = manifest(
            "team-a",
            &Subject::ServiceAccount("ci".into(), "runner".into()),
            false,
        );
        assert_eq!(ns_only.matches("\nkind: ").count(), 2, "{ns_only}");
        assert!(ns_only.contains("kind: ServiceAccount"), "{ns_only}");
    }

    #[test]
    fn what_a_lab_up_needs_depends_on_its_namespace_and_gpus() {
        let names = |own, gpus| -> Vec<String> { needed(own, gpus).map(Permission::name).collect() };
        let plain = names(false, false);
        assert!(plain.contains(&"pods/exec".to_string()));
        assert!(plain.contains(&"statefulsets.apps/scale".to_string()));
        assert!(!plain.contains(&"nodes/status".to_string()));
        assert!(!plain.contains(&"nodes".to_string()), "optional");
        assert_eq!(
            names(true, false).iter().filter(|n| *n == "namespaces").count(),
            2
        );
        assert!(names(false, true).contains(&"nodes/status".to_string()));
    }
}
