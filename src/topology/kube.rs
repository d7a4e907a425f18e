//! This node's place as the Kubernetes API knows it: the node's own labels (keys from
//! `topology.*_label`) and Volcano's `HyperNode` objects (`topology.volcano.sh/v1alpha1`,
//! cluster-scoped).
//!
//! Read-only: `get` of this node, `list` of HyperNodes (paged, [`PAGE`] at a time, at most
//! [`MAX_PAGES`] pages), each call bounded by `topology.deadline`.
//!
//! HyperNodes form a tree of network performance domains; `spec.tier` is the level (1 the
//! nearest). We take a tier-1 HyperNode that has this node as a member for its ToR and a
//! tier-2 HyperNode that has that tier-1 HyperNode as a member for its spine group: the
//! common reading (a leaf switch, then the spine above it), documented as an assumption in
//! `docs/topology.md`. A member is selected by exact name, by regular expression on the name
//! or by labels (`exactMatch`, `regexMatch`, `labelMatch`). A node in two tier-1
//! HyperNodes is ambiguous: no ToR is taken, and the source reports why.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use serde::Deserialize;

use crate::snapshot::topology::Place;

/// HyperNodes per list call.
pub const PAGE: u32 = 500;
/// Most pages read (so at most `PAGE * MAX_PAGES` HyperNodes).
pub const MAX_PAGES: usize = 200;
/// Largest compiled member regex, bytes: a pattern that would compile bigger is refused.
const REGEX_LIMIT: usize = 1 << 20;

/// Why the API gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// No configuration: not in a cluster and no kubeconfig (the sources are off).
    #[error("no in-cluster service account and no kubeconfig ({0})")]
    NoConfig(String),
    /// The client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
    /// A call failed.
    #[error("{what}: {error}")]
    Call {
        /// The call.
        what: String,
        /// Why.
        error: String,
    },
    /// The API server answered 404 (the node, or a resource it does not have).
    #[error("{what}: not found ({message})")]
    NotFound {
        /// The call.
        what: String,
        /// The server's message.
        message: String,
    },
    /// The HyperNode resource does not exist (Volcano's CRD is not installed).
    #[error("no HyperNode resource (topology.volcano.sh/v1alpha1) in this cluster")]
    NoHyperNodes,
    /// The deadline passed.
    #[error("{what} did not finish within {deadline:?}")]
    Deadline {
        /// The call.
        what: String,
        /// The deadline.
        deadline: Duration,
    },
    /// The HyperNodes say something that cannot be used.
    #[error("{0}")]
    Ambiguous(String),
}

/// Which node labels hold the place (empty: not read).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelKeys {
    /// The ToR label.
    pub tor: String,
    /// The spine label.
    pub spine: String,
    /// The super pod label.
    pub super_pod: String,
}

/// A client for this node and the HyperNodes.
#[derive(Clone)]
pub struct TopologyApi {
    client: Client,
    node: String,
}

impl std::fmt::Debug for TopologyApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyApi")
            .field("node", &self.node)
            .finish()
    }
}

/// Awaits `fut` at most `deadline`, naming `what` when it does not finish.
async fn within<T>(
    what: &str,
    deadline: Duration,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, KubeError> {
    match tokio::time::timeout(deadline, fut).await {
        Err(_) => Err(KubeError::Deadline {
            what: what.to_string(),
            deadline,
        }),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(KubeError::NotFound {
            what: what.to_string(),
            message: s.message,
        }),
        Ok(Err(e)) => Err(KubeError::Call {
            what: what.to_string(),
            error: e.to_string(),
        }),
        Ok(Ok(v)) => Ok(v),
    }
}

impl TopologyApi {
    /// Builds a client from `kubeconfig`, or else from the in-cluster service account or
    /// `KUBECONFIG`. Must run inside a tokio runtime.
    pub async fn connect(
        node: &str,
        kubeconfig: Option<&Path>,
        deadline: Duration,
    ) -> Result<Self, KubeError> {
        let load = async {
            match kubeconfig {
                Some(p) => {
                    let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                        KubeError::Client(format!("reading kubeconfig {}: {e}", p.display()))
                    })?;
                    kube::Config::from_custom_kubeconfig(kc, &Default::default())
                        .await
                        .map_err(|e| KubeError::Client(format!("kubeconfig {}: {e}", p.display())))
                }
                None => kube::Config::infer()
                    .await
                    .map_err(|e| KubeError::NoConfig(e.to_string())),
            }
        };
        let mut cfg =
            tokio::time::timeout(deadline, load)
                .await
                .map_err(|_| KubeError::Deadline {
                    what: "reading the Kubernetes client configuration".into(),
                    deadline,
                })??;
        cfg.connect_timeout = Some(deadline);
        cfg.read_timeout = Some(deadline);
        let client = Client::try_from(cfg).map_err(|e| KubeError::Client(e.to_string()))?;
        Ok(Self {
            client,
            node: node.to_string(),
        })
    }

    /// This node's labels.
    pub async fn node_labels(
        &self,
        deadline: Duration,
    ) -> Result<BTreeMap<String, String>, KubeError> {
        Ok(self
            .node(deadline)
            .await?
            .metadata
            .labels
            .unwrap_or_default())
    }

    /// This node's annotations (the operator overrides are read from them).
    pub async fn node_annotations(
        &self,
        deadline: Duration,
    ) -> Result<BTreeMap<String, String>, KubeError> {
        Ok(self
            .node(deadline)
            .await?
            .metadata
            .annotations
            .unwrap_or_default())
    }

    async fn node(&self, deadline: Duration) -> Result<Node, KubeError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let what = format!("getting node {}", self.node);
        within(&what, deadline, nodes.get(&self.node)).await
    }

    /// Every HyperNode's spec, paged.
    pub async fn hypernodes(&self, deadline: Duration) -> Result<Vec<HyperNode>, KubeError> {
        let gvk = GroupVersionKind::gvk("topology.volcano.sh", "v1alpha1", "HyperNode");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "hypernodes");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut lp = ListParams::default().limit(PAGE);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = match within("listing HyperNodes", deadline, api.list(&lp)).await {
                Err(KubeError::NotFound { .. }) => return Err(KubeError::NoHyperNodes),
                other => other?,
            };
            for o in &page.items {
                out.push(HyperNode::from_object(o));
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(out);
            }
        }
        Err(KubeError::Call {
            what: "listing HyperNodes".into(),
            error: format!(
                "more than {} objects; refusing to read further",
                PAGE as usize * MAX_PAGES
            ),
        })
    }
}

/// The place the labels give.
pub fn place_from_labels(labels: &BTreeMap<String, String>, keys: &LabelKeys) -> Place {
    let get = |k: &str| {
        (!k.is_empty())
            .then(|| labels.get(k))
            .flatten()
            .filter(|v| super::file::name_problem(v).is_none())
            .cloned()
    };
    Place {
        tor: get(&keys.tor),
        spine: get(&keys.spine),
        super_pod: get(&keys.super_pod),
    }
}

/// A HyperNode's name and what matters of its spec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HyperNode {
    /// `metadata.name`.
    pub name: String,
    /// `spec.tier` (an integer; older CRDs had a string), when it parses.
    pub tier: Option<u32>,
    /// `spec.members`.
    pub members: Vec<Member>,
}

/// One `spec.members` entry.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// `Node` or `HyperNode`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// How members are selected.
    #[serde(default)]
    pub selector: Selector,
}

/// `spec.members[].selector`: one of the three.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// `exactMatch.name`.
    pub exact_match: Option<ExactMatch>,
    /// `regexMatch.pattern`.
    pub regex_match: Option<RegexMatch>,
    /// `labelMatch`, a label selector.
    pub label_match: Option<LabelMatch>,
}

/// `exactMatch`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct ExactMatch {
    /// The name.
    #[serde(default)]
    pub name: String,
}

/// `regexMatch`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct RegexMatch {
    /// The pattern (RE2 syntax, as Go's `regexp`; unanchored).
    #[serde(default)]
    pub pattern: String,
}

/// `labelMatch`: a Kubernetes label selector (only for `Node` members).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelMatch {
    /// Labels the member must all carry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements the member's labels must all meet.
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct Requirement {
    /// The label key.
    #[serde(default)]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[serde(default)]
    pub operator: String,
    /// The values for `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelMatch {
    /// Whether `labels` meet the selector, as Kubernetes reads one; an empty selector
    /// selects nothing here (Kubernetes would select every node: a member list that names
    /// no one is taken as naming no one, never as everyone), and an unknown operator fails.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => v.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => v.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    _ => false,
                }
            })
    }
}

impl HyperNode {
    fn from_object(o: &DynamicObject) -> Self {
        let spec = &o.data["spec"];
        let tier = match &spec["tier"] {
            serde_json::Value::Number(n) => n.as_u64().and_then(|t| u32::try_from(t).ok()),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        let members = spec["members"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| serde_json::from_value(m.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        Self {
            name: o.metadata.name.clone().unwrap_or_default(),
            tier,
            members,
        }
    }

    /// Whether a member of `kind` named `name` (with `labels`, when they could be read)
    /// is selected; an error when a label selector needs labels that could not be read.
    fn has(
        &self,
        kind: &str,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Result<bool, KubeError> {
        let mut hit = false;
        for m in self.members.iter().filter(|m| m.kind == kind) {
            hit |= selects(&m.selector, kind, name, labels)?;
        }
        Ok(hit)
    }
}

fn selects(
    s: &Selector,
    kind: &str,
    name: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, KubeError> {
    if let Some(e) = &s.exact_match {
        return Ok(e.name == name);
    }
    if let Some(r) = &s.regex_match {
        return Ok(regex::RegexBuilder::new(&r.pattern)
            .size_limit(REGEX_LIMIT)
            .build()
            .is_ok_and(|re| re.is_match(name)));
    }
    match (&s.label_match, labels) {
        // Volcano applies label selectors to `Node` members only.
        (Some(_), _) if kind != "Node" => Ok(false),
        (Some(l), Some(labels)) => Ok(l.matches(labels)),
        (Some(_), None) => Err(KubeError::Ambiguous(format!(
            "a HyperNode selects nodes by label and node {name}'s labels could not be read; no ToR taken"
        ))),
        (None, _) => Ok(false),
    }
}

/// This node's ToR (its tier-1 HyperNode) and spine (the tier-2 HyperNode over that one).
pub fn place_from_hypernodes(
    node: &str,
    labels: Option<&BTreeMap<String, String>>,
    all: &[HyperNode],
) -> Result<Place, KubeError> {
    let tier = |t: u32| all.iter().filter(move |h| h.tier == Some(t));
    let mut tors: Vec<&HyperNode> = Vec::new();
    for h in tier(1) {
        if h.has("Node", node, labels)? {
            tors.push(h);
        }
    }
    let tor = match tors.as_slice() {
        [] => return Ok(Place::default()),
        [one] => *one,
        many => {
            return Err(KubeError::Ambiguous(format!(
                "node {node} is a member of {} tier-1 HyperNodes ({}); no ToR taken",
                many.len(),
                many.iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    let mut spines: Vec<&HyperNode> = Vec::new();
    for h in tier(2) {
        if h.has("HyperNode", &tor.name, None)? {
            spines.push(h);
        }
    }
    let ok = |s: &str| {
        super::file::name_problem(s)
            .is_none()
            .then(|| s.to_string())
    };
    Ok(Place {
        tor: ok(&tor.name),
        // Two spines over one ToR cannot be told apart: no spine is taken.
        spine: match spines.as_slice() {
            [one] => ok(&one.name),
            _ => None,
        },
        super_pod: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hn(v: serde_json::Value) -> HyperNode {
        HyperNode::from_object(&serde_json::from_value(v).unwrap())
    }

    fn fabric() -> Vec<HyperNode> {
        vec![
            hn(
                serde_json::json!({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                "metadata": {"name": "s0"}, "spec": {"tier": 1, "members": [
                    {"type": "Node", "selector": {"exactMatch": {"name": "node-0"}}},
                    {"type": "Node", "selector": {"exactMatch": {"name": "node-1"}}}]}}),
            ),
            hn(
                serde_json::json!({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                "metadata": {"name": "s1"}, "spec": {"tier": "1", "members": [
                    {"type": "Node", "selector": {"type": "Regex", "regexMatch": {"pattern": "^gpu-[2-3]$"}}}]}}),
            ),
            hn(
                serde_json::json!({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                "metadata": {"name": "s2"}, "spec": {"tier": 1, "members": [
                    {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r9"}}}}]}}),
            ),
            hn(
                serde_json::json!({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                "metadata": {"name": "s4"}, "spec": {"tier": 2, "members": [
                    {"type": "HyperNode", "selector": {"exactMatch": {"name": "s0"}}},
                    {"type": "HyperNode", "selector": {"exactMatch": {"name": "s1"}}}]}}),
            ),
        ]
    }

    #[test]
    fn tier_one_is_the_tor_and_the_tier_two_above_it_the_spine() {
        let none = BTreeMap::new();
        let p = place_from_hypernodes("node-1", Some(&none), &fabric()).unwrap();
        assert_eq!(p.tor.as_deref(), Some("s0"));
        assert_eq!(p.spine.as_deref(), Some("s4"));
        // By regex, on a string tier (the older CRD).
        let p = place_from_hypernodes("gpu-3", Some(&none), &fabric()).unwrap();
        assert_eq!(p.tor.as_deref(), Some("s1"));
        // The regex is unanchored only where the pattern says so.
        let p = place_from_hypernodes("gpu-33", Some(&none), &fabric()).unwrap();
        assert_eq!(p.tor, None);
        // By labels; no tier-2 over s2, so no spine.
        let labels = BTreeMap::from([("rack".to_string(), "r9".to_string())]);
        let p = place_from_hypernodes("x", Some(&labels), &fabric()).unwrap();
        assert_eq!((p.tor.as_deref(), p.spine), (Some("s2"), None));
        // Not a member anywhere: nothing.
        assert!(
            place_from_hypernodes("other", Some(&none), &fabric())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_node_in_two_tier_one_hypernodes_gets_no_tor() {
        let mut f = fabric();
        f.push(hn(
            serde_json::json!({"metadata": {"name": "s9"}, "spec": {"tier": 1, "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "node-0"}}}]}}),
        ));
        let e = place_from_hypernodes("node-0", Some(&BTreeMap::new()), &f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("s0, s9"), "{e}");
    }

    #[test]
    fn label_selectors_read_as_kubernetes_reads_them() {
        let f = vec![hn(
            serde_json::json!({"metadata": {"name": "rack-9"}, "spec": {"tier": 1, "members": [
            {"type": "Node", "selector": {"labelMatch": {
                "matchLabels": {"zone": "z1"},
                "matchExpressions": [
                    {"key": "rack", "operator": "In", "values": ["r9", "r10"]},
                    {"key": "retired", "operator": "DoesNotExist"},
                    {"key": "pool", "operator": "NotIn", "values": ["cpu"]}]}}}]}}),
        )];
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let tor = |labels: BTreeMap<String, String>| {
            place_from_hypernodes("n", Some(&labels), &f).unwrap().tor
        };
        assert_eq!(
            tor(l(&[("zone", "z1"), ("rack", "r10")])).as_deref(),
            Some("rack-9")
        );
        assert_eq!(
            tor(l(&[("zone", "z1"), ("rack", "r10"), ("pool", "npu")])).as_deref(),
            Some("rack-9")
        );
        assert_eq!(tor(l(&[("zone", "z1"), ("rack", "r11")])), None);
        assert_eq!(
            tor(l(&[("zone", "z1"), ("rack", "r9"), ("retired", "")])),
            None
        );
        assert_eq!(
            tor(l(&[("zone", "z1"), ("rack", "r9"), ("pool", "cpu")])),
            None
        );
        assert_eq!(tor(l(&[("rack", "r9")])), None);
        // Labels that could not be read cannot be matched: no ToR, and the source says why.
        let e = place_from_hypernodes("n", None, &f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("labels could not be read"), "{e}");
        // An empty selector names no one.
        let empty = vec![hn(
            serde_json::json!({"metadata": {"name": "all"}, "spec": {"tier": 1, "members": [
            {"type": "Node", "selector": {"labelMatch": {}}}]}}),
        )];
        assert!(
            place_from_hypernodes("n", Some(&l(&[("a", "b")])), &empty)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn labels_give_the_place_under_the_configured_keys_only() {
        let labels = BTreeMap::from([
            ("k/tor".to_string(), "t1".to_string()),
            ("k/spine".to_string(), "".to_string()),
            ("other".to_string(), "x".to_string()),
        ]);
        let keys = LabelKeys {
            tor: "k/tor".into(),
            spine: "k/spine".into(),
            super_pod: String::new(),
        };
        let p = place_from_labels(&labels, &keys);
        // An empty label value is not a name: left unknown.
        assert_eq!(p.tor.as_deref(), Some("t1"));
        assert_eq!((p.spine, p.super_pod), (None, None));
    }
}
