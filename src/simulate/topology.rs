//! The fleet's shape: nodes on ToR switches (consecutive numbers share one), spines, NPU
//! ports per node, and the probe groups the daemons cut the fleet into.

use super::scenario::Scenario;

/// Nodes, ToRs, spines, probe groups.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Nodes.
    pub nodes: usize,
    /// NPU ports per node.
    pub npus: usize,
    /// Nodes per ToR.
    pub tor_size: usize,
    /// Spine switches.
    pub spines: usize,
    /// Probe groups (node numbers), as the daemons cut them.
    pub groups: Vec<Vec<usize>>,
    /// Each node's group.
    pub group_of: Vec<usize>,
    /// Each node's index within its group.
    pub local: Vec<usize>,
}

impl Topology {
    /// The topology of a scenario's fleet.
    pub fn new(s: &Scenario) -> Self {
        let n = s.fleet.nodes;
        let groups = crate::health::plan::balanced_groups(n, s.fleet.group_size);
        let mut group_of = vec![0; n];
        let mut local = vec![0; n];
        for (g, members) in groups.iter().enumerate() {
            for (k, &i) in members.iter().enumerate() {
                group_of[i] = g;
                local[i] = k;
            }
        }
        Topology {
            nodes: n,
            npus: s.fleet.npus_per_node,
            tor_size: s.fleet.tor_size.max(1),
            spines: s.fleet.spines.max(1),
            groups,
            group_of,
            local,
        }
    }
    /// A node's ToR.
    pub fn tor(&self, node: usize) -> usize {
        node / self.tor_size
    }
    /// ToRs.
    pub fn tors(&self) -> usize {
        self.nodes.div_ceil(self.tor_size)
    }
    /// The nodes of a ToR.
    pub fn tor_nodes(&self, t: usize) -> std::ops::Range<usize> {
        t * self.tor_size..((t + 1) * self.tor_size).min(self.nodes)
    }
    /// The node of a global port.
    pub fn port_node(&self, port: usize) -> usize {
        port / self.npus.max(1)
    }
    /// The probe groups with a node on ToR `t`.
    pub fn groups_of_tor(&self, t: usize) -> Vec<usize> {
        let mut g: Vec<usize> = self.tor_nodes(t).map(|n| self.group_of[n]).collect();
        g.dedup();
        g
    }
}
