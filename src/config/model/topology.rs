//! `[topology]`: where each node sits in the network (ToR, spine group, super pod), from
//! the sources `docs/topology.md` describes.

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::enums::config_enum;
use crate::config::schema::{Spec, ms, secs};

config_enum! {
    /// How each node's NPU RoCE ports are cabled to the leaf switches.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum NpuCabling {
        /// Every NPU port of a node hangs off the node's ToR.
        #[default]
        Tor = "tor",
        /// Rail-optimised: NPU k of every node behind one ToR (the ToR names the node's
        /// rail group) hangs off that group's k-th leaf.
        Rail = "rail",
    }
}

section! {
    /// `[topology]`: this node's ToR, spine group and super pod, from a topology file, the
    /// node's Kubernetes labels, Volcano `HyperNode` objects and the rank table, in that
    /// order of precedence; each source optional.
    pub struct TopologyConfig in "topology" {
        /// Master switch; when on, each configured source is read where it is available.
        enabled: bool = true, Spec::BOOL;
        /// A topology file (TOML, `[[tor]]` and `[[node]]` tables, see docs/topology.md);
        /// the first source, when set.
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<PathBuf> = None, Spec::PATH;
        /// Read this node's labels through the Kubernetes API, where one can be reached.
        node_labels: bool = true, Spec::BOOL;
        /// The node label that names the node's ToR (leaf) switch; empty: not read.
        tor_label: String = "hcclwatch.io/tor".into(), Spec::STR;
        /// The node label that names the node's spine group or pod; empty: not read.
        spine_label: String = "hcclwatch.io/spine".into(), Spec::STR;
        /// The node label that names the node's super pod; empty: not read.
        super_pod_label: String = "hcclwatch.io/super-pod".into(), Spec::STR;
        /// Read Volcano `HyperNode` objects (tier 1: ToR, tier 2: spine) through the
        /// Kubernetes API, where the API and the resource exist.
        hypernodes: bool = true, Spec::BOOL;
        /// How the NPU RoCE ports are cabled, for the device plane: `tor` (every port of a
        /// node on its ToR) or `rail` (NPU k of the nodes behind one ToR on that group's
        /// k-th leaf: each leaf a switch port group). Set it alike on every member.
        npu_cabling: NpuCabling = NpuCabling::Tor, Spec::one_of(NpuCabling::NAMES);
        /// Take the super pod from `collective.rank_table_file` (v1.2 `super_pod_list`).
        rank_table: bool = true, Spec::BOOL;
        /// Read this node's operator-override annotations (`hcclwatch.io/override*`)
        /// through the Kubernetes API, where one can be reached (docs/overrides.md).
        overrides: bool = true, Spec::BOOL;
        /// Time between reads of the override annotations (an override's end is applied
        /// at its time, without waiting for a read).
        #[serde(with = "duration::serde_str")]
        overrides_refresh: Duration = secs(15), Spec::duration(ms(1000), ms(3_600_000));
        /// Time between reads of every source.
        #[serde(with = "duration::serde_str")]
        refresh: Duration = secs(300), Spec::duration(ms(1000), ms(86_400_000));
        /// Bound on each call to the Kubernetes API and on each file read.
        #[serde(with = "duration::serde_str")]
        deadline: Duration = secs(5), Spec::duration(ms(100), ms(60_000));
    }
}
