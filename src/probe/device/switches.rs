//! Which switch each NPU port hangs off, for the device engine, and the names its ToR and
//! spine verdicts are shown by.
//!
//! The topology names each node's ToR. Where every NPU port of a node hangs off that ToR
//! (`topology.npu_cabling = "tor"`), a port's switch is its node's, and the engine is given
//! the nodes' ToRs alone. On a rail-optimised fabric (`"rail"`) NPU k of every node behind
//! one ToR (the ToR then names the nodes' rail group) hangs off that group's k-th leaf, so
//! each port's switch is the pair (ToR, NPU id), a *switch port group*: one port of each
//! member. Every member derives the same numbers (the ports table and the ToR numbers are
//! the group's, exchanged), so every member's engine judges the same switches.

use std::collections::BTreeMap;

use super::Topology;
use super::ports::Port;
use crate::health::SpineVerdict;
use crate::snapshot::probe::SpineView;

/// The group's switches as the engine numbers them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Switches {
    /// Each port's switch, by port index; empty: each port's node's ToR.
    pub port: Vec<Option<u32>>,
    /// Switch number k is `names[k]`.
    pub names: Vec<String>,
    /// Each candidate's ToR, by candidate index (as the topology gives it).
    tors: Vec<Option<u32>>,
}

impl Switches {
    /// The switches of `ports` under `topology`: the nodes' ToRs, or with `rails` one leaf
    /// per (ToR, NPU id), named `<tor>/npu<id>`. A port whose node has no ToR has none.
    pub fn of(ports: &[Port], topology: Topology<'_>, rails: bool) -> Self {
        let tors = topology.tors.to_vec();
        if !rails {
            return Switches {
                port: Vec::new(),
                names: topology.names.to_vec(),
                tors,
            };
        }
        let tor = |p: &Port| tors.get(p.node).copied().flatten();
        let mut numbers: BTreeMap<(u32, u32), u32> = ports
            .iter()
            .filter_map(|p| tor(p).map(|t| ((t, p.phy), 0)))
            .collect();
        let mut names = Vec::with_capacity(numbers.len());
        for (k, (&(t, phy), n)) in numbers.iter_mut().enumerate() {
            *n = k as u32;
            let group = topology
                .names
                .get(t as usize)
                .map_or("unknown", String::as_str);
            names.push(format!("{group}/npu{phy}"));
        }
        let port = ports
            .iter()
            .map(|p| tor(p).and_then(|t| numbers.get(&(t, p.phy)).copied()))
            .collect();
        Switches { port, names, tors }
    }

    /// The name of switch `k` (None for a number it does not hold).
    pub fn name(&self, k: u32) -> Option<&str> {
        self.names.get(k as usize).map(String::as_str)
    }

    /// The candidates with a port on one of `switches`, sorted: behind those ToRs, or, with
    /// rails, owning a port on those leaves (`ports` the table the numbers came from).
    pub fn members(&self, switches: &[u32], ports: &[Port]) -> Vec<usize> {
        let mut out: Vec<usize> = if self.port.is_empty() {
            (0..self.tors.len())
                .filter(|&i| self.tors[i].is_some_and(|t| switches.contains(&t)))
                .collect()
        } else {
            ports
                .iter()
                .zip(&self.port)
                .filter(|(_, s)| s.is_some_and(|s| switches.contains(&s)))
                .map(|(p, _)| p.node)
                .collect()
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A spine verdict by switch names, with the candidates behind them; its spine group is
    /// named by the prober, which knows the members' places (`unknown` here).
    pub fn spine_view(&self, v: &SpineVerdict, ports: &[Port]) -> SpineView {
        SpineView {
            name: "unknown".to_string(),
            tors: v
                .tors
                .iter()
                .filter_map(|&t| self.name(t).map(String::from))
                .collect(),
            members: self.members(&v.tors, ports),
            tor_pairs: v.tor_pairs,
            cross_share: v.cross_share,
            inner_share: v.inner_share,
        }
    }
}

/// Each old switch number's new one, by name (None: the switch is gone): switches are
/// numbered by their place among the names, so one that appears or goes shifts the others.
pub(super) fn renumbering(old: &[String], new: &[String]) -> Vec<Option<u32>> {
    old.iter()
        .map(|name| new.iter().position(|x| x == name).map(|k| k as u32))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// Four candidates on ToRs a, b, none, b; two NPUs each (ids 0 and 1), candidate 3's
    /// NPU 1 missing.
    fn table() -> (Vec<Port>, Vec<Option<u32>>, Vec<String>) {
        let port = |node: usize, phy: u32| Port {
            node,
            phy,
            ip: Ipv4Addr::new(10, 0, node as u8, phy as u8),
        };
        let ports = vec![
            port(0, 0),
            port(0, 1),
            port(1, 0),
            port(1, 1),
            port(2, 0),
            port(2, 1),
            port(3, 0),
        ];
        (
            ports,
            vec![Some(0), Some(1), None, Some(1)],
            vec!["a".to_string(), "b".to_string()],
        )
    }

    #[test]
    fn without_rails_the_switches_are_the_nodes_tors() {
        let (ports, tors, names) = table();
        let s = Switches::of(
            &ports,
            Topology {
                tors: &tors,
                names: &names,
            },
            false,
        );
        assert!(s.port.is_empty(), "the engine takes the nodes' ToRs");
        assert_eq!(s.name(1), Some("b"));
        assert_eq!(s.name(2), None);
        assert_eq!(s.members(&[1], &ports), [1, 3]);
    }

    /// With rails each (ToR, NPU id) is a leaf, numbered in that order and named after
    /// both; a port without a ToR has no switch; a spine verdict names its leaves and the
    /// candidates with a port on them.
    #[test]
    fn with_rails_each_npu_id_behind_a_tor_is_a_leaf() {
        let (ports, tors, names) = table();
        let s = Switches::of(
            &ports,
            Topology {
                tors: &tors,
                names: &names,
            },
            true,
        );
        assert_eq!(s.names, ["a/npu0", "a/npu1", "b/npu0", "b/npu1"]);
        assert_eq!(
            s.port,
            [Some(0), Some(1), Some(2), Some(3), None, None, Some(2)]
        );
        assert_eq!(s.members(&[3], &ports), [1]);
        assert_eq!(s.members(&[2], &ports), [1, 3]);
        let v = s.spine_view(
            &SpineVerdict {
                tors: vec![0, 2, 3, 9],
                tor_pairs: 3,
                cross_share: 0.25,
                inner_share: 0.0,
            },
            &ports,
        );
        assert_eq!(v.tors, ["a/npu0", "b/npu0", "b/npu1"]);
        assert_eq!(v.members, [0, 1, 3]);
        assert_eq!(
            (v.tor_pairs, v.cross_share, v.name.as_str()),
            (3, 0.25, "unknown")
        );
    }

    /// A switch that appears shifts the numbers after it; one that goes has none.
    #[test]
    fn switches_keep_their_identity_across_numbers() {
        let names = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let old = names(&["a/npu0", "a/npu1", "c/npu0"]);
        let new = names(&["a/npu1", "b/npu0", "c/npu0"]);
        assert_eq!(renumbering(&old, &new), [None, Some(0), Some(2)]);
        assert!(renumbering(&[], &new).is_empty());
    }
}
