//! Where each node sits in the network: its ToR (leaf switch), its spine group (or pod)
//! and, on A3 systems, its super pod; and which source said so.
//!
//! The sources (`src/topology/`) each give a map from node name to [`Place`]; [`merge`]
//! combines them field by field in their order of precedence, so a field always comes from
//! the first source that knows it. A node's [`NodePlace::source`] is the source its ToR came
//! from (else its spine's, else its super pod's): the ToR is what the health engines judge
//! by, so that is the source `/api/v1/state` names. Nothing here is ever guessed: a field no
//! source gave stays `None`.

use std::collections::BTreeMap;

/// Where a node's place came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TopologySource {
    /// The topology file (`topology.file`).
    File,
    /// The node's Kubernetes labels (`topology.tor_label`, …).
    NodeLabels,
    /// Volcano `HyperNode` objects (tier 1: ToR, tier 2: spine).
    HyperNode,
    /// The rank table's `super_pod_list` (super pod only).
    RankTable,
    /// The health engine's own inference of groups whose slowdowns move together
    /// (`health::TorInference`), for a node no source gives a ToR; no source in this
    /// module produces it, the prober does.
    Inferred,
    /// No source knows the node.
    #[default]
    None,
}

impl TopologySource {
    /// Every source that reads something, in order of precedence.
    pub const READ: [TopologySource; 4] = [
        TopologySource::File,
        TopologySource::NodeLabels,
        TopologySource::HyperNode,
        TopologySource::RankTable,
    ];

    /// The name used in metric labels, logs and `/api/v1/state`.
    pub fn as_str(self) -> &'static str {
        match self {
            TopologySource::File => "file",
            TopologySource::NodeLabels => "node_labels",
            TopologySource::HyperNode => "hypernode",
            TopologySource::RankTable => "rank_table",
            TopologySource::Inferred => "inferred",
            TopologySource::None => "none",
        }
    }

    /// The wire code of the group exchange (`probe::group`); stable across versions.
    pub fn code(self) -> u8 {
        match self {
            TopologySource::None => 0,
            TopologySource::File => 1,
            TopologySource::NodeLabels => 2,
            TopologySource::HyperNode => 3,
            TopologySource::RankTable => 4,
            TopologySource::Inferred => 5,
        }
    }

    /// The source of a wire code; an unknown code is `None` (nothing is claimed).
    pub fn from_code(code: u8) -> Self {
        match code {
            1 => TopologySource::File,
            2 => TopologySource::NodeLabels,
            3 => TopologySource::HyperNode,
            4 => TopologySource::RankTable,
            5 => TopologySource::Inferred,
            _ => TopologySource::None,
        }
    }
}

/// The ToR name given to an inferred group: `inferred-<id>`, the id numbering the probe
/// group's inferred groups by their lowest member.
pub fn inferred_tor_name(id: u32) -> String {
    format!("inferred-{id}")
}

/// A node's place in the network; every field optional (unknown).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Place {
    /// Its ToR (leaf) switch.
    pub tor: Option<String>,
    /// Its spine group or pod.
    pub spine: Option<String>,
    /// Its super pod (Atlas A3).
    pub super_pod: Option<String>,
}

impl Place {
    /// Whether no field is known.
    pub fn is_empty(&self) -> bool {
        self.tor.is_none() && self.spine.is_none() && self.super_pod.is_none()
    }
}

/// A node's merged place and the source its ToR (else spine, else super pod) came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePlace {
    /// The place.
    pub place: Place,
    /// Where it came from (see the module doc).
    pub source: TopologySource,
}

/// Merges the sources' maps, given in order of precedence: for each node, each field is
/// the first source's that has it. Nodes no source knows are absent.
pub fn merge(layers: &[(TopologySource, &BTreeMap<String, Place>)]) -> BTreeMap<String, NodePlace> {
    let mut out: BTreeMap<String, (NodePlace, [Option<TopologySource>; 3])> = BTreeMap::new();
    for (source, map) in layers {
        for (node, p) in *map {
            let (np, from) = out.entry(node.clone()).or_default();
            let fields = [
                (&mut np.place.tor, &p.tor),
                (&mut np.place.spine, &p.spine),
                (&mut np.place.super_pod, &p.super_pod),
            ];
            for (k, (mine, theirs)) in fields.into_iter().enumerate() {
                if mine.is_none() && theirs.is_some() {
                    mine.clone_from(theirs);
                    from[k] = Some(*source);
                }
            }
        }
    }
    out.into_iter()
        .filter(|(_, (np, _))| !np.place.is_empty())
        .map(|(node, (mut np, from))| {
            np.source = from.into_iter().flatten().next().unwrap_or_default();
            (node, np)
        })
        .collect()
}

/// How one source fared in the last refresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceState {
    /// Whether it was read and understood.
    pub ok: bool,
    /// Why not, when it was not.
    pub error: Option<String>,
    /// How many nodes it placed.
    pub nodes: usize,
}

/// The topology part of the store: this node's place and each configured source's state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologySnapshot {
    /// This node's name, as the sources were asked about it.
    pub node: String,
    /// This node's merged place, when any source knows it.
    pub own: Option<NodePlace>,
    /// Every source in use (configured and available), with its last result.
    pub sources: BTreeMap<TopologySource, SourceState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(tor: Option<&str>, spine: Option<&str>, sp: Option<&str>) -> Place {
        Place {
            tor: tor.map(String::from),
            spine: spine.map(String::from),
            super_pod: sp.map(String::from),
        }
    }

    #[test]
    fn each_field_comes_from_the_first_source_that_has_it() {
        let file = BTreeMap::from([("n1".to_string(), place(None, Some("s-file"), None))]);
        let labels = BTreeMap::from([
            ("n1".to_string(), place(Some("t-lab"), Some("s-lab"), None)),
            ("n2".to_string(), place(None, None, None)),
        ]);
        let ranks = BTreeMap::from([("n1".to_string(), place(Some("t-rt"), None, Some("sp7")))]);
        let m = merge(&[
            (TopologySource::File, &file),
            (TopologySource::NodeLabels, &labels),
            (TopologySource::RankTable, &ranks),
        ]);
        let n1 = &m["n1"];
        assert_eq!(n1.place, place(Some("t-lab"), Some("s-file"), Some("sp7")));
        // The ToR came from the labels, so they are the node's source.
        assert_eq!(n1.source, TopologySource::NodeLabels);
        // A node that no source places is left out, not placed nowhere.
        assert!(!m.contains_key("n2"));
    }

    #[test]
    fn without_a_tor_the_source_is_the_spine_s_then_the_super_pod_s() {
        let ranks = BTreeMap::from([("n1".to_string(), place(None, None, Some("0")))]);
        let m = merge(&[(TopologySource::RankTable, &ranks)]);
        assert_eq!(m["n1"].source, TopologySource::RankTable);
    }

    #[test]
    fn wire_codes_round_trip_and_unknown_codes_claim_nothing() {
        for s in [
            TopologySource::File,
            TopologySource::NodeLabels,
            TopologySource::HyperNode,
            TopologySource::RankTable,
            TopologySource::Inferred,
            TopologySource::None,
        ] {
            assert_eq!(TopologySource::from_code(s.code()), s);
        }
        assert_eq!(TopologySource::from_code(200), TopologySource::None);
    }
}
