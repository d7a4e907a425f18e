//! A scenario's expectation of the verdicts (`[expect]`): which nodes may be recommended
//! for quarantine and which must be, written in the scenario file beside the world it
//! describes, and checked against every recommendation of the run (host straggler, hard
//! fault or NPU port: each recommends its node for a cordon).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::fault::{Fault, Target};
use super::scenario::{FaultKind, Shape};
use super::topology::Topology;

/// A set of nodes, by name or listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum NodeSet {
    /// `"none"`, `"faulty"` (every node with a fault of its own: a slow node on either
    /// plane, a slow NPU port, a hard fault) or `"strong"` (the faulty nodes the targets
    /// expect found: a persistent (step or ramp) host slowdown of at least 20 %, a port or
    /// device node with at least 5 % loss or 2× RTT, any hard fault).
    Named(Named),
    /// These node numbers.
    List(Vec<usize>),
}

/// The named node sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Named {
    /// No node.
    None,
    /// Every node with a fault of its own.
    Faulty,
    /// The faulty nodes the targets expect found.
    Strong,
}

impl<'de> Deserialize<'de> for NodeSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NodeSet;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"none\", \"faulty\", \"strong\" or a list of node numbers")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NodeSet, E> {
                match v {
                    "none" => Ok(NodeSet::Named(Named::None)),
                    "faulty" => Ok(NodeSet::Named(Named::Faulty)),
                    "strong" => Ok(NodeSet::Named(Named::Strong)),
                    _ => Err(E::custom(format!(
                        "unknown node set `{v}`, expected \"none\", \"faulty\", \"strong\" or a list of node numbers"
                    ))),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<NodeSet, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = s.next_element::<usize>()? {
                    v.push(x);
                }
                Ok(NodeSet::List(v))
            }
        }
        d.deserialize_any(V)
    }
}

fn d_may() -> NodeSet {
    NodeSet::Named(Named::Faulty)
}
fn d_must() -> NodeSet {
    NodeSet::Named(Named::None)
}

/// `[expect]`: which nodes may, and which must, be recommended for quarantine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Nodes that may be recommended (default `"faulty"`); a recommendation of any other
    /// node breaks the expectation.
    #[serde(default = "d_may")]
    pub may_cordon: NodeSet,
    /// Nodes that must be recommended (default `"none"`).
    #[serde(default = "d_must")]
    pub must_cordon: NodeSet,
    /// A node that must be recommended is, within this many rounds of its fault's onset
    /// (the file's rounds; default: by the end of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_rounds: Option<f64>,
}

impl NodeSet {
    /// The node numbers of the set in a world with these faults.
    pub fn nodes(&self, faults: &[Fault], topo: &Topology) -> BTreeSet<usize> {
        match self {
            NodeSet::List(v) => v.iter().copied().collect(),
            NodeSet::Named(Named::None) => BTreeSet::new(),
            NodeSet::Named(n) => faults
                .iter()
                .filter(|f| *n == Named::Faulty || strong(f))
                .filter_map(|f| own_node(f, topo))
                .collect(),
        }
    }
}

/// The node a fault belongs to, when it is a fault of the node itself.
pub fn own_node(f: &Fault, topo: &Topology) -> Option<usize> {
    match (f.kind, f.target) {
        (FaultKind::SlowNode | FaultKind::HardFault, Target::Node(n)) => Some(n),
        (FaultKind::SlowPort, Target::Port(p)) => Some(topo.port_node(p)),
        _ => None,
    }
}

/// Whether a fault is one the targets expect found (see [`Named::Strong`]).
fn strong(f: &Fault) -> bool {
    let persistent = matches!(f.shape, Shape::Step | Shape::Ramp);
    match f.kind {
        FaultKind::HardFault => true,
        FaultKind::SlowNode if f.plane.host() => persistent && f.magnitude >= 0.2 - 1e-9,
        FaultKind::SlowNode | FaultKind::SlowPort => persistent && (f.loss >= 0.05 || f.rtt >= 2.0),
        _ => false,
    }
}

/// A recommendation for quarantine of a node, as the expectation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cordon {
    /// Node.
    pub node: usize,
    /// First round.
    pub start: u64,
    /// First round after.
    pub end: u64,
    /// The reason of the verdict that raised it.
    pub reason: String,
}

/// The expectation, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectCheck {
    /// The nodes that may be recommended.
    pub may_cordon: Vec<usize>,
    /// The nodes that must be recommended.
    pub must_cordon: Vec<usize>,
    /// Recommendations of nodes outside `may_cordon`: (node, first round, reason).
    pub unexpected: Vec<(usize, u64, String)>,
    /// Nodes of `must_cordon` not recommended in time: (node, why).
    pub missing: Vec<(usize, String)>,
    /// Neither unexpected nor missing recommendations.
    pub met: bool,
}

/// Checks an expectation against the run's recommendations; `within` is its limit in the
/// run's rounds, `rounds` the run's length.
pub fn check(
    e: &Expect,
    within: Option<u64>,
    faults: &[Fault],
    topo: &Topology,
    cordons: &[Cordon],
    rounds: u64,
) -> ExpectCheck {
    let may = e.may_cordon.nodes(faults, topo);
    let must = e.must_cordon.nodes(faults, topo);
    let unexpected: Vec<(usize, u64, String)> = cordons
        .iter()
        .filter(|c| !may.contains(&c.node))
        .map(|c| (c.node, c.start, c.reason.clone()))
        .collect();
    let mut missing = Vec::new();
    for &n in &must {
        let onset = faults
            .iter()
            .filter(|f| own_node(f, topo) == Some(n))
            .map(|f| f.onset)
            .min()
            .unwrap_or(0);
        let deadline = within.map_or(rounds + 1, |w| onset + w + 1);
        let hit = cordons
            .iter()
            .any(|c| c.node == n && c.end > onset && c.start < deadline);
        if !hit {
            let why = match within {
                Some(w) => format!("not recommended within {w} rounds of round {onset}"),
                None => format!("not recommended after round {onset}"),
            };
            missing.push((n, why));
        }
    }
    ExpectCheck {
        met: unexpected.is_empty() && missing.is_empty(),
        may_cordon: may.into_iter().collect(),
        must_cordon: must.into_iter().collect(),
        unexpected,
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::scenario::Scenario;
    use crate::simulate::world::World;

    fn world() -> World {
        let s = Scenario::from_toml(
            "[fleet]\nnodes = 16\nnpus_per_node = 2\nrounds = 400\n\
             [[fault]]\nkind = \"slow_node\"\nnodes = [3]\nmagnitude = 0.3\nonset = 100\n\
             [[fault]]\nkind = \"slow_node\"\nnodes = [4]\nmagnitude = 0.05\nonset = 100\n\
             [[fault]]\nkind = \"slow_port\"\nports = [[6, 1]]\nloss = 0.2\nonset = 50\n\
             [[fault]]\nkind = \"degraded_link\"\nlinks = [[8, 9]]\nmagnitude = 0.3\n",
            "t.toml",
        )
        .unwrap();
        World::new(&s).unwrap()
    }

    fn cordon(node: usize, start: u64, end: u64) -> Cordon {
        Cordon {
            node,
            start,
            end,
            reason: "x".into(),
        }
    }

    #[test]
    fn named_sets_are_the_faulty_and_the_strong_nodes() {
        let w = world();
        let set = |n: Named| NodeSet::Named(n).nodes(&w.faults, &w.topo);
        assert_eq!(set(Named::Faulty), [3, 4, 6].into());
        assert_eq!(set(Named::Strong), [3, 6].into());
        assert_eq!(set(Named::None), BTreeSet::new());
    }

    /// A recommendation outside `may_cordon` is unexpected; a must-node recommended too
    /// late, or never, is missing.
    #[test]
    fn unexpected_and_missing_recommendations_break_the_expectation() {
        let w = world();
        let e = Expect {
            may_cordon: NodeSet::Named(Named::Faulty),
            must_cordon: NodeSet::Named(Named::Strong),
            within_rounds: Some(60.0),
        };
        let check = |cordons: &[Cordon]| check(&e, Some(60), &w.faults, &w.topo, cordons, 400);
        let good = check(&[cordon(3, 130, 401), cordon(6, 70, 401)]);
        assert!(good.met, "{good:?}");
        // Node 8 is a degraded link's end, not faulty; node 6 is recommended 111 rounds
        // after its port's onset (50), past the 60 allowed.
        let bad = check(&[
            cordon(3, 130, 401),
            cordon(6, 161, 401),
            cordon(8, 200, 220),
        ]);
        assert!(!bad.met);
        assert_eq!(bad.unexpected, vec![(8, 200, "x".to_string())]);
        assert_eq!(bad.missing.len(), 1);
        assert_eq!(bad.missing[0].0, 6);
    }
}
