//! Scenario files: the fleet, its noise, its congestion and its faults, as a TOML (or JSON)
//! document (schema in `docs/simulation.md`).
//!
//! A scenario says what the world is; [`super::world`] turns it into ground truth with the
//! scenario's seed (where faults sit when the file leaves that open, when congestion
//! episodes start), and nothing of that truth reaches the engines except through the
//! simulated measurements. Every field is checked here, and every problem is reported as
//! `FILE:LINE: key: reason`, the configuration file's style.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use super::counters::Counters;
pub use super::episodes::Lengths;
pub use super::expect::{Expect, NodeSet};

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, shown in the report.
    #[serde(default)]
    pub name: String,
    /// What the scenario is for.
    #[serde(default)]
    pub description: String,
    /// The fleet and the run.
    pub fleet: Fleet,
    /// Host-plane measurement noise.
    #[serde(default)]
    pub noise: Noise,
    /// Device-plane (NPU port) pings and their noise.
    #[serde(default)]
    pub device: DevicePlane,
    /// Congestion processes.
    #[serde(default)]
    pub congestion: Vec<Congestion>,
    /// Injected faults (`[[fault]]`).
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSpec>,
    /// The nodes' own congestion counters as the daemon reads them (late, with false
    /// alarms and misses); the default is today's idealised reading.
    #[serde(default, skip_serializing_if = "Counters::is_ideal")]
    pub counters: Counters,
    /// What the scenario expects of the verdicts: which nodes may be recommended for
    /// quarantine and which must be (checked and reported by the scorer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// `[fleet]`: nodes, topology and the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// Nodes (4..=10000).
    pub nodes: usize,
    /// Members per probe group at most, as `probe.max_group_size`.
    #[serde(default = "d_group_size")]
    pub group_size: usize,
    /// NPU ports per node (0: no device plane).
    #[serde(default)]
    pub npus_per_node: usize,
    /// Nodes per ToR switch (consecutive node numbers share a ToR).
    #[serde(default = "d_tor_size")]
    pub tor_size: usize,
    /// Spine switches: a pair of nodes on different ToRs crosses one of them (by a hash of
    /// the pair, as ECMP does).
    #[serde(default = "d_spines")]
    pub spines: usize,
    /// Simulated hours (exactly one of `hours` and `rounds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hours: Option<f64>,
    /// Simulated rounds (exactly one of `hours` and `rounds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u64>,
    /// Seconds per probe round (the default `probe.interval`).
    #[serde(default = "d_round_seconds")]
    pub round_seconds: f64,
    /// Rounds at the start during which no fault begins (the engines learn baselines).
    #[serde(default = "d_warmup")]
    pub warmup_rounds: u64,
    /// Seed of every random choice of the run.
    #[serde(default = "d_seed")]
    pub seed: u64,
}

/// The distribution of a healthy probe's log-time noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tails {
    /// Gaussian.
    Normal,
    /// Student-t with `dof` degrees of freedom, scaled to standard deviation `sd`.
    StudentT,
    /// Gaussian `sd`, and with probability `mixture_share` Gaussian `mixture_sd` instead.
    Mixture,
}

/// `[noise]`: what a healthy host-plane probe looks like, in log units (0.03 ≈ 3 %).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Noise {
    /// Per-link base spread: standard deviation of one probe's log time on a healthy link.
    pub sd: f64,
    /// Standard deviation of a fixed per-link offset (cable lengths, hop counts).
    pub link_offset_sd: f64,
    /// Tail shape of the per-probe noise.
    pub tails: Tails,
    /// Student-t degrees of freedom (> 2, so that the variance exists).
    pub dof: f64,
    /// Mixture: share of probes drawn from the wide component.
    pub mixture_share: f64,
    /// Mixture: standard deviation of the wide component.
    pub mixture_sd: f64,
    /// Share of probes hit by a spike (a one-off stall).
    pub spike_rate: f64,
    /// A spike adds |N(0, spike_sd)|.
    pub spike_sd: f64,
    /// Common-mode drift of the whole fleet: an AR(1) with this stationary deviation.
    pub drift_sd: f64,
    /// AR(1) coefficient of the common-mode drift, per round.
    pub drift_ar: f64,
    /// Amplitude of the daily (24 h) swing.
    pub daily_amplitude: f64,
    /// Each ToR's daily swing is shifted by up to this many hours, so the swing is not
    /// the same everywhere at once (0: in phase, and peer-relative residuals cancel it).
    pub daily_phase_hours: f64,
    /// Share of node-rounds whose uplink counters report congestion that slows no probe
    /// (a busy job's traffic that leaves the probes their share): what makes a slow node's
    /// hold the longer one now and then.
    pub busy_rate: f64,
}

impl Default for Noise {
    fn default() -> Self {
        Self {
            sd: 0.03,
            link_offset_sd: 0.01,
            tails: Tails::StudentT,
            dof: 3.0,
            mixture_share: 0.05,
            mixture_sd: 0.1,
            spike_rate: 0.01,
            spike_sd: 0.3,
            drift_sd: 0.05,
            drift_ar: 0.9,
            daily_amplitude: 0.02,
            daily_phase_hours: 3.0,
            busy_rate: 0.02,
        }
    }
}

/// `[device]`: the NPU-port ping plan and its noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DevicePlane {
    /// Pings each port sends per round (k of the rotating plan).
    pub pings_per_round: usize,
    /// Packets per ping.
    pub packets: u32,
    /// RTT of a healthy pair, microseconds.
    pub rtt_us: f64,
    /// Standard deviation of one packet's log RTT.
    pub rtt_sd: f64,
    /// Background loss per packet.
    pub loss: f64,
}

impl Default for DevicePlane {
    fn default() -> Self {
        Self {
            pings_per_round: 4,
            packets: 3,
            rtt_us: 80.0,
            rtt_sd: 0.05,
            loss: 1e-4,
        }
    }
}

/// Which plane an event touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Plane {
    /// Host NIC probes (the health engine).
    Host,
    /// NPU-port pings (the device engine).
    Device,
    /// Both.
    Both,
}

impl Plane {
    /// Whether the plane includes host probes.
    pub fn host(self) -> bool {
        matches!(self, Plane::Host | Plane::Both)
    }
    /// Whether the plane includes NPU-port pings.
    pub fn device(self) -> bool {
        matches!(self, Plane::Device | Plane::Both)
    }
}

/// Where a congestion episode sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Element {
    /// One node's uplink (host plane) or one NPU port's link (device plane): every probe
    /// through it, confirmations and re-measurements included.
    Uplink,
    /// One ToR switch: every probe to or from its nodes.
    Tor,
    /// One spine switch: the pairs on different ToRs that hash onto it.
    Spine,
}

/// `[[congestion]]`: a process of congestion episodes on every element of a kind (or on
/// the listed ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Congestion {
    /// Where.
    pub on: Element,
    /// Which plane.
    #[serde(default = "d_plane")]
    pub plane: Plane,
    /// Episode starts per element per round.
    pub rate: f64,
    /// Mean episode length, rounds (exponential).
    pub mean_rounds: f64,
    /// An episode slows its probes by |N(0, magnitude_sd)| in log units.
    pub magnitude_sd: f64,
    /// Per-probe variation of an episode's delay (coefficient of variation of a gamma
    /// multiplier with mean 1; 0: every probe of the episode is slowed alike).
    #[serde(default)]
    pub jitter: f64,
    /// Device plane: added per-packet loss while an episode lasts.
    #[serde(default)]
    pub loss: f64,
    /// Host plane: probability that an episode shows in the counters of the nodes whose
    /// traffic it slows (their own uplink's bytes near line rate, congestion-marked packets
    /// received), as the daemon's `probe.congestion_*` reader sees it; 0: never.
    #[serde(default)]
    pub signal: f64,
    /// Only these elements (node numbers for a host uplink, global port numbers
    /// `node × npus_per_node + npu` for a device uplink, ToR or spine numbers); empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<usize>,
    /// How episode lengths are drawn around `mean_rounds` (default exponential).
    #[serde(default, skip_serializing_if = "Lengths::is_exponential")]
    pub lengths: Lengths,
    /// Lognormal lengths: the standard deviation of a length's logarithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_sd: Option<f64>,
    /// Pareto lengths: the tail index (above 1, so that the mean exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_alpha: Option<f64>,
    /// No episode lasts longer than this many rounds (any length distribution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<f64>,
}

impl Congestion {
    /// A process with today's defaults for every optional key.
    pub fn new(on: Element, plane: Plane, rate: f64, mean_rounds: f64, magnitude_sd: f64) -> Self {
        Congestion {
            on,
            plane,
            rate,
            mean_rounds,
            magnitude_sd,
            jitter: 0.0,
            loss: 0.0,
            signal: 0.0,
            at: Vec::new(),
            lengths: Lengths::Exponential,
            length_sd: None,
            length_alpha: None,
            max_rounds: None,
        }
    }
}

/// The kinds of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A node whose probes are all slower (host plane) or whose NPU ports all are (device).
    SlowNode,
    /// One NPU port: loss and/or added RTT on every ping through it.
    SlowPort,
    /// One host link (a → b, or both directions).
    DegradedLink,
    /// One pair of NPU ports.
    PortPair,
    /// Every node of a ToR.
    SlowTor,
    /// The whole fabric, or a share of its links (`share`).
    FabricDip,
    /// A hard fault read from telemetry (device lost): transient (`rounds`) or persistent.
    HardFault,
}

impl FaultKind {
    /// Name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::SlowNode => "slow_node",
            FaultKind::SlowPort => "slow_port",
            FaultKind::DegradedLink => "degraded_link",
            FaultKind::PortPair => "port_pair",
            FaultKind::SlowTor => "slow_tor",
            FaultKind::FabricDip => "fabric_dip",
            FaultKind::HardFault => "hard_fault",
        }
    }
}

/// How a fault's effect develops over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Full effect from onset.
    Step,
    /// From nothing to the full effect over `ramp_rounds`.
    Ramp,
    /// On for `duty` of every `period` rounds.
    Intermittent,
    /// Down (device: every packet lost) for `down_rounds` of every `period` rounds.
    Flapping,
    /// On and off at random: alternating stretches of exponential length with means
    /// `on_rounds` and `off_rounds`, on first.
    Random,
}

/// Which links a fabric dip touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DipScope {
    /// A fixed random share of the links (`share`; 1: every link).
    Random,
    /// The pairs on different ToRs that hash onto one spine (`at = [spine]`).
    Spine,
    /// The pairs between two ToRs (`at = [tor, tor]`).
    TorPair,
    /// One ToR's uplinks: every pair between its nodes and another ToR's (`at = [tor]`).
    TorUplinks,
    /// The links between probe groups (which no probe crosses), or a `share` of them.
    CrossGroup,
}

impl DipScope {
    /// Name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            DipScope::Random => "random",
            DipScope::Spine => "spine",
            DipScope::TorPair => "tor_pair",
            DipScope::TorUplinks => "tor_uplinks",
            DipScope::CrossGroup => "cross_group",
        }
    }
}

/// A number, or a `[low, high]` range drawn uniformly with the scenario's seed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Span {
    /// Exactly this.
    One(f64),
    /// Uniform between the two.
    Range([f64; 2]),
}

impl Span {
    /// Lowest value.
    pub fn low(self) -> f64 {
        match self {
            Span::One(x) => x,
            Span::Range([a, _]) => a,
        }
    }
    /// Highest value.
    pub fn high(self) -> f64 {
        match self {
            Span::One(x) => x,
            Span::Range([_, b]) => b,
        }
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a [low, high] pair of numbers")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Span, E> {
                Ok(Span::One(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Span, E> {
                Ok(Span::One(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Span, E> {
                Ok(Span::One(v as f64))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Span, A::Error> {
                let bad = || serde::de::Error::custom("expected a [low, high] pair of numbers");
                let a: f64 = s.next_element()?.ok_or_else(bad)?;
                let b: f64 = s.next_element()?.ok_or_else(bad)?;
                if s.next_element::<f64>()?.is_some() {
                    return Err(bad());
                }
                Ok(Span::Range([a, b]))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[[fault]]`: one fault, or `count` of them placed at random.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// What breaks.
    pub kind: FaultKind,
    /// Which plane a slow node, slow ToR or fabric dip touches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<Plane>,
    /// How many such faults (placed on distinct nodes) when no target is listed.
    #[serde(default = "d_count")]
    pub count: usize,
    /// At least one fault per this many nodes (scales a campaign with `--nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_nodes: Option<usize>,
    /// Slow nodes, hard faults: these nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<usize>,
    /// Degraded links: these `[src, dst]` node pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<[usize; 2]>,
    /// Slow ports: these `[node, npu]` ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<[usize; 2]>,
    /// Port pairs: these `[node, npu, node, npu]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_pairs: Vec<[usize; 4]>,
    /// Slow ToRs: these ToR numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tors: Vec<usize>,
    /// A degraded link slows both directions (default: src → dst only).
    #[serde(default)]
    pub both_directions: bool,
    /// Host-plane slowdown as a fraction (0.2 = 20 % slower).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub magnitude: Option<Span>,
    /// Device plane: per-packet loss (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<Span>,
    /// Device plane: RTT multiplier (2.0 = twice the healthy RTT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<Span>,
    /// Fabric dip: share of links it touches (1.0: uniform).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// Onset round (default: uniform between the warm-up and the last stretch of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onset: Option<Span>,
    /// Rounds the fault lasts (default: to the end of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<Span>,
    /// How the effect develops.
    #[serde(default = "d_shape")]
    pub shape: Shape,
    /// Ramp: rounds from nothing to the full effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_rounds: Option<u64>,
    /// Intermittent and flapping: the cycle, rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    /// Intermittent: the share of each period the fault is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duty: Option<f64>,
    /// Flapping: rounds down per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_rounds: Option<u64>,
    /// Random shape: mean rounds on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_rounds: Option<f64>,
    /// Random shape: mean rounds off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_rounds: Option<f64>,
    /// Host-plane faults: the slowdown varies from round to round, a normal spread of this
    /// share of the magnitude around it (0.5: a 20 % node is 10–30 % slow most rounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
    /// Fabric dip: which links it touches (default `random`, with `share`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<DipScope>,
    /// Fabric dip: the spine, the two ToRs or the ToR of its scope (default: drawn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<usize>,
    /// Degraded links and port pairs placed at random: ends in different probe groups
    /// (no probe measures such a link).
    #[serde(default, skip_serializing_if = "is_false")]
    pub between_groups: bool,
    /// Hard fault: every ping to or from the node's NPU ports is lost while it lasts (the
    /// device is gone), not only its telemetry.
    #[serde(default, skip_serializing_if = "is_false")]
    pub silent: bool,
    /// Slow node: the chance that such a fault shows on its node's own interface as a
    /// hardware sign (a link or PCIe link trained down, corrupted frames) while it is on:
    /// the evidence congestion cannot give (default 0: none shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<f64>,
}

impl FaultSpec {
    /// A fault of this kind with every optional key at its default.
    pub fn new(kind: FaultKind) -> Self {
        FaultSpec {
            kind,
            plane: None,
            count: 1,
            per_nodes: None,
            nodes: Vec::new(),
            links: Vec::new(),
            ports: Vec::new(),
            port_pairs: Vec::new(),
            tors: Vec::new(),
            both_directions: false,
            magnitude: None,
            loss: None,
            rtt: None,
            share: None,
            onset: None,
            rounds: None,
            shape: Shape::Step,
            ramp_rounds: None,
            period: None,
            duty: None,
            down_rounds: None,
            on_rounds: None,
            off_rounds: None,
            spread: None,
            scope: None,
            at: Vec::new(),
            between_groups: false,
            silent: false,
            hardware: None,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn d_group_size() -> usize {
    64
}
fn d_tor_size() -> usize {
    16
}
fn d_spines() -> usize {
    4
}
fn d_round_seconds() -> f64 {
    30.0
}
fn d_warmup() -> u64 {
    40
}
fn d_seed() -> u64 {
    1
}
fn d_plane() -> Plane {
    Plane::Host
}
fn d_count() -> usize {
    1
}
fn d_shape() -> Shape {
    Shape::Step
}

/// One problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `FILE:LINE`, or `FILE` when the line is not known.
    pub location: String,
    /// Dotted key path, e.g. `fault[2].magnitude` (arrays counted from 0).
    pub key: String,
    /// Why it is wrong.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.location, self.key, self.reason)
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The scenario has problems; every one found is listed.
    #[error("invalid scenario:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Problem>),
}

impl ScenarioError {
    /// The problems (empty for a read error).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ScenarioError::Invalid(p) => p,
            ScenarioError::Read { .. } => &[],
        }
    }
}

/// The shipped campaign (`scenarios/campaign.toml`), built in.
pub const CAMPAIGN: &str = include_str!("../../scenarios/campaign.toml");

/// Where each key sits in the text, for messages: value span and line of the key.
#[derive(Default)]
struct Spans {
    /// (path, key line, value byte range).
    entries: Vec<(String, usize, std::ops::Range<usize>)>,
    /// (path, key byte range).
    keys: Vec<(String, std::ops::Range<usize>)>,
    lines: Vec<usize>,
}

impl Spans {
    fn of(text: &str) -> Self {
        let mut s = Spans {
            lines: text.match_indices('\n').map(|(i, _)| i).collect::<Vec<_>>(),
            ..Spans::default()
        };
        if let Ok(doc) = toml::de::DeTable::parse(text) {
            s.table(doc.get_ref(), "");
        }
        s
    }

    fn line(&self, offset: usize) -> usize {
        self.lines.partition_point(|&nl| nl < offset) + 1
    }

    fn table(&mut self, t: &toml::de::DeTable<'_>, prefix: &str) {
        for (k, v) in t.iter() {
            let path = if prefix.is_empty() {
                k.get_ref().to_string()
            } else {
                format!("{prefix}.{}", k.get_ref())
            };
            let line = self.line(k.span().start);
            self.entries.push((path.clone(), line, v.span()));
            self.keys.push((path.clone(), k.span()));
            self.value(v.get_ref(), &path);
        }
    }

    fn value(&mut self, v: &toml::de::DeValue<'_>, path: &str) {
        match v {
            toml::de::DeValue::Table(t) => self.table(t, path),
            toml::de::DeValue::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    let line = self.line(e.span().start);
                    self.entries.push((p.clone(), line, e.span()));
                    self.value(e.get_ref(), &p);
                }
            }
            _ => {}
        }
    }

    /// The line of a key path, or of its nearest enclosing entry.
    fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path.to_string();
        loop {
            if let Some((_, line, _)) = self.entries.iter().find(|(k, _, _)| *k == p) {
                return Some(*line);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }

    /// The key at `offset`, or the innermost key whose value contains it.
    fn key_at(&self, offset: usize) -> Option<(&str, usize)> {
        if let Some((k, _)) = self.keys.iter().find(|(_, r)| r.contains(&offset)) {
            return Some((k.as_str(), self.line(offset)));
        }
        self.entries
            .iter()
            .filter(|(_, _, r)| r.start <= offset && offset < r.end.max(r.start + 1))
            .min_by_key(|(_, _, r)| r.end - r.start)
            .map(|(k, l, _)| (k.as_str(), *l))
    }
}

impl Scenario {
    /// Reads and checks a scenario file (`.json` as JSON, anything else as TOML).
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path.display().to_string();
        if path.extension().is_some_and(|e| e == "json") {
            Scenario::from_json(&text, &name)
        } else {
            Scenario::from_toml(&text, &name)
        }
    }

    /// Parses and checks TOML text; `file` names it in messages.
    pub fn from_toml(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let spans = Spans::of(text);
        let s: Scenario = toml::from_str(text).map_err(|e| {
            let (key, line) = match e.span().and_then(|r| spans.key_at(r.start)) {
                Some((k, l)) => (k.to_string(), Some(l)),
                None => (
                    "(document)".to_string(),
                    e.span().map(|r| spans.line(r.start)),
                ),
            };
            ScenarioError::Invalid(vec![Problem {
                location: line.map_or(file.to_string(), |l| format!("{file}:{l}")),
                key,
                reason: e.message().trim().replace('\n', " "),
            }])
        })?;
        s.checked(file, &|k| spans.line_of(k))
    }

    /// Parses and checks JSON text (the same schema); `file` names it in messages.
    pub fn from_json(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = serde_json::from_str(text).map_err(|e| {
            ScenarioError::Invalid(vec![Problem {
                location: format!("{file}:{}", e.line()),
                key: "(document)".into(),
                reason: e.to_string(),
            }])
        })?;
        s.checked(file, &|_| None)
    }

    /// The built-in campaign.
    pub fn campaign() -> Scenario {
        Scenario::from_toml(CAMPAIGN, "scenarios/campaign.toml")
            .expect("the shipped campaign is a valid scenario (tested)")
    }

    /// Checks a scenario built in code (after overrides): every problem, located in `file`.
    pub fn check(self, file: &str) -> Result<Scenario, ScenarioError> {
        self.checked(file, &|_| None)
    }

    fn checked(
        self,
        file: &str,
        line_of: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Scenario, ScenarioError> {
        let problems: Vec<Problem> = super::validate::problems(&self)
            .into_iter()
            .map(|(key, reason)| Problem {
                location: line_of(&key).map_or(file.to_string(), |l| format!("{file}:{l}")),
                key,
                reason,
            })
            .collect();
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(ScenarioError::Invalid(problems))
        }
    }

    /// Rounds the run lasts.
    pub fn rounds(&self) -> u64 {
        match (self.fleet.rounds, self.fleet.hours) {
            (Some(r), _) => r,
            (None, Some(h)) => (h * 3600.0 / self.fleet.round_seconds).round() as u64,
            (None, None) => 0,
        }
    }

    /// The scenario as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        match Scenario::from_toml(text, "s.toml") {
            Ok(_) => vec![],
            Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        }
    }

    const MINIMAL: &str = "[fleet]\nnodes = 16\nhours = 1\n";

    #[test]
    fn a_minimal_scenario_takes_the_documented_defaults() {
        let s = Scenario::from_toml(MINIMAL, "s.toml").unwrap();
        assert_eq!(s.fleet.group_size, 64);
        assert_eq!(s.fleet.round_seconds, 30.0);
        assert_eq!(s.rounds(), 120);
        assert_eq!(s.noise.tails, Tails::StudentT);
        assert!(s.faults.is_empty() && s.congestion.is_empty());
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key_and_line() {
        let p = problems("[fleet]\nnodes = 16\nhours = 1\nnodez = 3\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("s.toml:4: fleet.nodez: "), "{p:?}");
        assert!(p[0].contains("unknown field `nodez`"), "{p:?}");
        let p = problems("[fleet]\nnodes = \"many\"\nhours = 1\n");
        assert!(p[0].starts_with("s.toml:2: fleet.nodes: "), "{p:?}");
        let p = problems(&format!("{MINIMAL}[[fault]]\nkind = \"slow_nod\"\n"));
        assert!(p[0].starts_with("s.toml:5: fault[0].kind: "), "{p:?}");
        assert!(
            p[0].contains("slow_node"),
            "the reason lists the kinds: {p:?}"
        );
        let p = problems(&format!(
            "{MINIMAL}[[fault]]\nkind = \"slow_node\"\nmagnitude = [0.1]\n"
        ));
        assert!(p[0].contains("fault[0].magnitude"), "{p:?}");
        assert!(p[0].contains("[low, high]"), "{p:?}");
        let p = problems("[fleet]\nhours = 1\n");
        assert!(p[0].contains("missing field `nodes`"), "{p:?}");
    }

    #[test]
    fn semantic_problems_are_all_listed_with_their_lines() {
        let text = "[fleet]\nnodes = 2\nhours = 1\nrounds = 10\n[noise]\nsd = -1\n\
                    [[congestion]]\non = \"uplink\"\nrate = 2\nmean_rounds = 10\nmagnitude_sd = 0.1\n\
                    [[fault]]\nkind = \"slow_port\"\nloss = 0.1\n";
        let p = problems(text);
        let want = [
            "s.toml:2: fleet.nodes: 2 is out of range 4..=10000",
            "s.toml:3: fleet.hours: give `hours` or `rounds`, not both",
            "s.toml:6: noise.sd: -1 is out of range 0..=1",
            "s.toml:9: congestion[0].rate: 2 is out of range 0..=1 (episode starts per element per round)",
            "s.toml:13: fault[0].kind: slow_port needs NPU ports: set fleet.npus_per_node",
        ];
        for w in want {
            assert!(p.iter().any(|x| x == w), "missing {w:?} in {p:#?}");
        }
    }

    #[test]
    fn json_scenarios_use_the_same_schema() {
        let s =
            Scenario::from_json(r#"{"fleet": {"nodes": 16, "rounds": 100}}"#, "s.json").unwrap();
        assert_eq!(s.rounds(), 100);
        let e = Scenario::from_json(
            r#"{"fleet": {"nodes": 16, "rounds": 100, "x": 1}}"#,
            "s.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
    }

    #[test]
    fn the_campaign_round_trips_through_toml() {
        let s = Scenario::campaign();
        let again = Scenario::from_toml(&s.to_toml(), "again.toml").unwrap();
        assert_eq!(again, s);
    }

    /// The rougher world's keys are checked like the others, each problem with its line.
    #[test]
    fn the_rougher_worlds_keys_are_checked_with_their_lines() {
        let text = "[fleet]\nnodes = 128\ngroup_size = 64\nhours = 2\n\
                    [counters]\nlag = 5\nmiss = 1.5\n\
                    [[congestion]]\non = \"tor\"\nrate = 0.001\nmean_rounds = 10\nmagnitude_sd = 0.1\nlength_alpha = 2\nlengths = \"lognormal\"\n\
                    [[fault]]\nkind = \"fabric_dip\"\nmagnitude = 0.2\nscope = \"tor_pair\"\nat = [3, 3]\n\
                    [[fault]]\nkind = \"slow_tor\"\nmagnitude = 0.2\nsilent = true\nspread = 0.5\nshape = \"random\"\non_rounds = 10\n\
                    [[fault]]\nkind = \"hard_fault\"\nsilent = true\n\
                    [expect]\nmust_cordon = [500]\n";
        let p = problems(text);
        let want = [
            "s.toml:6: counters.lag: 5 is out of range 0..=3",
            "s.toml:7: counters.miss: 1.5 is out of range 0..=1 (a share of node-rounds)",
            "s.toml:13: congestion[0].length_alpha: length_alpha applies to pareto lengths, not to lognormal",
            "s.toml:19: fault[0].at: a ToR pair is two different ToRs",
            "s.toml:23: fault[1].silent: silent applies to hard_fault, not to slow_tor",
            "s.toml:29: fault[2].silent: a silent hard fault loses its node's NPU pings: set fleet.npus_per_node",
            "s.toml:31: expect.must_cordon: node 500 is not in the fleet of 128",
        ];
        for w in want {
            assert!(p.iter().any(|x| x == w), "missing {w:?} in {p:#?}");
        }
        // A missing key is located at its table.
        assert!(
            p.iter()
                .any(|x| x.ends_with("fault[1].off_rounds: the random shape needs off_rounds")),
            "{p:#?}"
        );
        // A spread is accepted on a host-plane slowdown; a link between groups is allowed.
        let ok = "[fleet]\nnodes = 128\ngroup_size = 64\nhours = 2\n\
                  [[fault]]\nkind = \"slow_node\"\nmagnitude = 0.2\nspread = 0.5\n\
                  [[fault]]\nkind = \"degraded_link\"\nlinks = [[1, 100]]\nmagnitude = 0.2\n\
                  [expect]\nmay_cordon = \"strong\"\n";
        assert_eq!(problems(ok), Vec::<String>::new());
        let p = problems("[fleet]\nnodes = 16\nhours = 1\n[expect]\nmay_cordon = \"some\"\n");
        assert!(p[0].contains("unknown node set `some`"), "{p:?}");
    }

    #[test]
    fn fault_keys_are_checked_against_kind_shape_and_fleet() {
        let text = "[fleet]\nnodes = 128\ngroup_size = 64\nhours = 2\n\
                    [[fault]]\nkind = \"degraded_link\"\nlinks = [[1, 1]]\nmagnitude = 0.2\n\
                    [[fault]]\nkind = \"slow_node\"\nmagnitude = 0.2\nshape = \"intermittent\"\nperiod = 10\n\
                    [[fault]]\nkind = \"slow_node\"\nloss = 0.1\nmagnitude = 0.2\nshape = \"flapping\"\nperiod = 10\ndown_rounds = 2\n\
                    [[fault]]\nkind = \"fabric_dip\"\nshare = 1.5\nonset = 500\n";
        let p = problems(text);
        let want = [
            "s.toml:7: fault[0].links: [1, 1]: both ends are the same node",
            "s.toml:9: fault[1].duty: the intermittent shape needs duty",
            "s.toml:16: fault[2].loss: loss applies to NPU-port pings; slow_node here is on the host plane",
            "s.toml:18: fault[2].shape: flapping applies to links and ports, not to slow_node",
            "s.toml:21: fault[3].magnitude: fabric_dip on the host plane needs a magnitude (0.2 = 20 % slower)",
            "s.toml:23: fault[3].share: 1.5 is out of range (0, 1]",
            "s.toml:24: fault[3].onset: 500 is out of range 40..=239",
        ];
        for w in want {
            assert!(p.iter().any(|x| x == w), "missing {w:?} in {p:#?}");
        }
    }
}
