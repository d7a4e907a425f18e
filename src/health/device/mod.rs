//! The device-plane engine: NPU-port pings in, per-port states and localised verdicts out.
//!
//! Training traffic between nodes leaves each NPU through its own RoCE port, so a dying
//! optical module, a flapping port, a bad cable or a switch port that drops packets slows a
//! job without touching the host NIC. Every round each NPU port pings a few other ports (a
//! rotating plan: every pair is covered within a bounded number of rounds), and every
//! member feeds the same all-gathered pings to its engine.
//!
//! **Attribution.** A lost packet or a slow ping could be either end's fault. A bad port
//! shows up on its pings to and from *many distinct peers*, while each of those peers is
//! bad only on its pings with it; a bad pair shows up on that pair only. So each ping is
//! charged to both ends, and a port is elevated only when
//! - its loss over the window is unlikely under the fabric's own loss rate (a binomial tail
//!   below `loss_alpha`, at least `loss_min` of its packets, on pings with at least
//!   `min_peers` distinct peers), or
//! - the window median of its pings' log RTT residual (against the round median) is above
//!   ln(`rtt_ratio`) with a robust z above `z`.
//!
//! **Localisation.** Each round the elevated ports are read together:
//! - a large share of the ports outside ToR events elevated (`fabric_share`) is the
//!   fabric: no port or node escalates while it lasts;
//! - with topology, most ports of one ToR elevated (`node_share`, beyond the ToR's normal),
//!   or the round's pings crossing it losing or slow where the group's other pings make
//!   that unlikely (slow within it too), is that ToR: a ToR verdict; its ports are judged
//!   against the ToR's own loss rate and RTT level, so a port bad among them still
//!   escalates and the others do not;
//! - most ports of one node elevated (`node_share`, and two or more: one port of a
//!   two-NPU node is a port) is that node: a node verdict, and its
//!   ports do not escalate one by one: a port suspected, or confirmed in the last few
//!   rounds, before the verdict formed (a node's ports cross the thresholds a round or
//!   two apart) is withdrawn, and one confirmed earlier counts the node's rounds as clean
//!   (`exit_rounds` of them clear it). A node the host plane holds bad needs only one
//!   elevated port for its verdict, so the same goes for its ports;
//! - otherwise an elevated port is suspected on its own, and re-pinged from known-good
//!   ports on other nodes (`confirm_peers`); reproduced, it is confirmed, and after
//!   `confirm_hold` more elevated rounds its node is recommended for quarantine with reason
//!   `npu_port`;
//! - a slow or lossy pair whose ends are otherwise fine is re-pinged, and after
//!   `pair_observations` bad observations in a row, or enough lost packets over its recent
//!   observations, is a pair verdict (a cable or a switch path, never a ToR in an event,
//!   a spine or an end's uplink; see `pairs`), which never quarantines anything.
//!
//! A lost packet is charged to both ends, but a port's loss with peers already accused
//! (elevated, or not healthy) is explained by them and not counted, and the fabric's loss
//! rate a port is judged against is the median over ports, so that a few bad ports do not
//! raise it. More slow pings between unaccused ports than the learned base rate explains
//! is a partial fabric event (a spine, a share of the paths); a fabric event of two rounds
//! or more holds for a window. A pair observation counts only when neither end is bad with
//! other peers in the same round. A port slow by RTT alone is recommended for quarantine
//! only when its RTTs are steady (see [`STEADY_RATIO`](crate::health::STEADY_RATIO)): a congested link
//! scatters them.
//!
//! Ports move through the same states as nodes (healthy → suspect → confirmed →
//! quarantine_recommended → probation → healthy), with exit thresholds below entry
//! thresholds. Pure code: the daemon, the simulator and the tests run the same engine.
//!
//! The parts: `score` (each port's window and elevation), `localise` (fabric and node
//! events), `tor` (ToR events), `confirm` (re-pings from known-good ports), `advance` (moving a port through
//! the lifecycle both planes share) and `pairs`.

mod advance;
mod confirm;
mod localise;
mod pairs;
mod score;
mod spine;
#[cfg(test)]
mod tests;
mod tor;

pub use tor::DeviceTorVerdict;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::evidence::Evidence;
use super::fabric::{BaseRate, EventRun, Normal, RateLearning};
use super::hardware::Signs;
use super::horizon::{CongestionHorizon, Horizon};
use super::lifecycle::{Change, Lifecycle, NodeIx, PortIx};
use super::pairs::Pairs;
use super::spine::SpineVerdict;
use crate::snapshot::probe::NodeState;

use confirm::{Confirmation, Reproduction};
use score::{Against, Elevation, Sample};
use spine::SpineTrack;
use tor::TorTrack;

/// Rounds before a node verdict in which a port's confirmation may be its node's fault:
/// at a node fault's onset its ports cross the thresholds a round or two apart, and a
/// suspect's re-pings answer in the next round.
const NODE_ONSET_ROUNDS: u64 = 3;

/// Thresholds of the device-plane engine.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// Rounds in a port's window.
    pub window: usize,
    /// Least loss ratio of a port's packets that counts as lossy.
    pub loss_min: f64,
    /// A port's loss is elevated when the binomial tail of its lost packets under the
    /// fabric's loss rate is below this.
    pub loss_alpha: f64,
    /// Floor on the fabric loss rate the tail is computed with.
    pub loss_floor: f64,
    /// Least distinct peers a lossy or slow port must have been measured with.
    pub min_peers: usize,
    /// A port's window RTT must exceed the round median by this ratio.
    pub rtt_ratio: f64,
    /// Robust-z threshold on the RTT residuals.
    pub z: f64,
    /// Floor on the robust spread of log RTT residuals.
    pub mad_floor: f64,
    /// Known-good ports a suspect port is re-pinged from, each round it is suspect.
    pub confirm_peers: usize,
    /// Re-ping packets after which a suspect whose loss or slowness has not reproduced is
    /// cleared.
    pub confirm_packets: u32,
    /// Elevated rounds after confirmation, steady and not explained by the port's own
    /// congestion counters, before the node is recommended for quarantine (when the
    /// episode showed a hardware sign).
    pub confirm_hold: usize,
    /// The same when most of those rounds were congested (a busy port whose own hardware
    /// also shows a sign).
    pub congested_hold: usize,
    /// The persistence horizon: a port whose episode showed no hardware sign is recommended
    /// only after this many steadily elevated rounds its counters did not explain (in a
    /// row or not). Steady congestion the counters miss looks like a bad port until it
    /// ends.
    pub uncorroborated_hold: usize,
    /// Consecutive clean rounds that clear a suspect or confirmed port (or move a
    /// recommended one to probation).
    pub exit_rounds: usize,
    /// Rounds of probation.
    pub probation_rounds: usize,
    /// Share of the ports outside ToR events elevated that makes a fabric verdict (ToR
    /// events of two or more switches over more than half of all ports, or over every
    /// port, are one too).
    pub fabric_share: f64,
    /// Share of one node's ports elevated that makes a node verdict (two ports at least:
    /// one port of a two-NPU node is a port).
    pub node_share: f64,
    /// Nodes with a node verdict at once (and at least a tenth of the nodes) that make a
    /// ToR or fabric event instead.
    pub tor_nodes: usize,
    /// Bad observations of a pair in a row that make a pair verdict.
    pub pair_observations: usize,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            window: 10,
            loss_min: 0.02,
            loss_alpha: 1e-6,
            loss_floor: 1e-3,
            min_peers: 3,
            rtt_ratio: 1.5,
            z: 3.0,
            mad_floor: 0.05,
            confirm_peers: 3,
            confirm_packets: 90,
            confirm_hold: 3,
            congested_hold: 8,
            // 60 minutes at the shipped 20 s device-plane interval: longer than nearly all the
            // NPU-port congestion its counters miss in the simulator's held-out worlds; at 30
            // minutes it made most of their false cordons (docs/detection.md).
            uncorroborated_hold: 180,
            exit_rounds: 30,
            probation_rounds: 120,
            fabric_share: 0.25,
            node_share: 0.5,
            tor_nodes: 3,
            pair_observations: 3,
        }
    }
}

/// One ping between two ports: `sent` packets, `received` answers, and the mean RTT of
/// the answered ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PortProbe {
    /// Pinging port.
    pub src: usize,
    /// Pinged port.
    pub dst: usize,
    /// Packets sent.
    pub sent: u32,
    /// Answers received.
    pub received: u32,
    /// Mean RTT of the answers, seconds (None when none came back).
    pub rtt: Option<f64>,
}

impl PortProbe {
    /// Packets that got no answer.
    fn lost(&self) -> u32 {
        self.sent.saturating_sub(self.received)
    }

    /// Between two distinct ports of the table, with packets.
    fn usable(&self, ports: usize) -> bool {
        self.src < ports && self.dst < ports && self.src != self.dst && self.sent > 0
    }
}

/// What the device engine receives for one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceInput {
    /// The plan's pings.
    pub probes: Vec<PortProbe>,
    /// The re-pings it asked for (suspect ports from known-good ports, suspect pairs).
    pub confirmations: Vec<PortProbe>,
    /// Nodes outside this round's group: their ports' states are kept, frozen.
    pub absent_nodes: Vec<usize>,
    /// Nodes the host-plane engine holds confirmed or worse (suspect is too common under
    /// congestion to move a verdict): a node whose host-plane probes are bad and whose
    /// ports are elevated is judged as a node, not port by port (its NIC, PCIe, CPU or
    /// power slows both planes), even below [`DeviceConfig::node_share`].
    pub host_suspects: Vec<usize>,
    /// Each node's ToR (leaf switch), by node index, as the topology gives it (the ToR its
    /// NPU ports hang off): most ports of one ToR bad is that ToR, and its ports are judged
    /// against each other. Empty (or `None` for a node): the place is unknown.
    pub tors: Vec<Option<u32>>,
    /// Each port's own switch, by port index, where the NPU ports of a node do not all hang
    /// off its ToR: on rail-optimised fabrics NPU k of every node behind one ToR group is
    /// cabled to that group's k-th leaf, so a leaf is a *switch port group*, one port of
    /// each member. Given (non-empty), it replaces `tors` wherever a port's switch is
    /// meant (ToR events, spine shapes, re-pingers behind another switch); `None` for a
    /// port: unknown. Empty: each port hangs off its node's ToR.
    pub port_tors: Vec<Option<u32>>,
    /// Ports whose own counters showed congestion this round (pause frames or congestion
    /// notifications received beyond their usual rate): their slow rounds are explained and
    /// never move them towards a quarantine.
    pub congested_ports: Vec<usize>,
    /// Hardware signs ports showed this round (port, signs): readings congestion cannot
    /// produce (corrupted frames, a link below its speed). A port whose episode showed one
    /// is recommended after `confirm_hold`; without, only after `uncorroborated_hold`.
    pub port_signs: Vec<(usize, Signs)>,
}

/// Where a port transition or verdict points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// One NPU port.
    Port,
    /// Most ports of one node.
    Node,
    /// One pair of ports.
    Pair,
    /// A large share of the fabric.
    Fabric,
}

impl Scope {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Port => "port",
            Scope::Node => "node",
            Scope::Pair => "pair",
            Scope::Fabric => "fabric",
        }
    }
}

/// A port's state change, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct PortTransition {
    /// Engine round.
    pub round: u64,
    /// Port.
    pub port: usize,
    /// Old state.
    pub from: NodeState,
    /// New state.
    pub to: NodeState,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Vec<(String, f64)>,
}

/// A port's window numbers, for export.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortScore {
    /// Packets through the port in the window.
    pub packets: u32,
    /// Of which lost.
    pub lost: u32,
    /// Window median log RTT residual (NaN without samples).
    pub rtt_residual: f64,
}

/// What a round produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceOutput {
    /// Port state changes.
    pub transitions: Vec<PortTransition>,
    /// Ports to re-ping from known-good ports next round.
    pub confirm_requests: Vec<usize>,
    /// Pairs to re-ping next round (suspect pairs, and pairs with a verdict until it clears).
    pub pair_requests: Vec<(usize, usize)>,
    /// Pairs judged bad (both ends otherwise fine).
    pub pair_verdicts: Vec<(usize, usize)>,
    /// Nodes most of whose ports are elevated.
    pub node_verdicts: Vec<usize>,
    /// A large share of the fabric is elevated (blocks escalation).
    pub fabric: bool,
    /// ToRs most of whose ports are elevated, beyond their normal, for two rounds or more
    /// (none during a fabric event): a verdict on the switch, never on its ports or nodes.
    pub tor_verdicts: Vec<DeviceTorVerdict>,
    /// While the fabric verdict holds: its partial event has a spine's shape (pings
    /// between ToRs slow, spread over the ToR pairs, those within ToRs spared). A verdict
    /// on a spine, for the network team; changes nothing else.
    pub spine_verdict: Option<SpineVerdict>,
    /// Per-port window numbers.
    pub scores: Vec<PortScore>,
    /// The partial-fabric base rate (the share of pings slow on their own) was learnt
    /// again this round: a higher share lasted 180 partial events with no quiet round
    /// between (`EventRun::step`) and is the new normal, so such rounds stop being
    /// fabric events (once the verdict's hold has passed). A change of the normal,
    /// for the operator to know of (it is counted and logged where it is published).
    pub rate_renewed: bool,
    /// The round median's normal was learnt again this round: the fabric's pings stayed
    /// slower than it by `rtt_ratio` for 180 rounds in a row (an hour at the shipped
    /// 20 s device round), which is how the fabric is now, so the fabric event those
    /// rounds made ends (once its hold has passed). A change of the normal, for the
    /// operator to know of (counted and logged where it is published).
    pub median_renewed: bool,
    /// The persistence horizon a port nothing corroborates waits now, and the congestion
    /// runs and slow episodes that ended by themselves it was learnt from.
    pub horizon: Horizon,
}

/// What the engine keeps about a port beside its lifecycle.
#[derive(Debug, Clone, PartialEq)]
struct PortData {
    /// The node that owns the port.
    node: NodeIx,
    /// The port's last `window` rounds.
    window: VecDeque<Sample>,
    /// Re-pings from known-good ports since the port became suspect.
    confirm: Confirmation,
    /// The hardware signs of the current episode (from its first elevated round until the
    /// port is healthy again).
    signs: Signs,
    /// The episode's steadily elevated rounds its counters did not explain.
    persist: usize,
    /// The episode's elevated rounds, and of them those with a hardware sign.
    elevated_rounds: usize,
    sign_rounds: usize,
    /// The episode reached a recommendation (its end may be a repair's).
    recommended: bool,
}

impl PortData {
    /// Drops the current episode's evidence (the port is back within bounds).
    fn forget_episode(&mut self) {
        self.signs = Signs::NONE;
        self.persist = 0;
        self.elevated_rounds = 0;
        self.sign_rounds = 0;
        self.recommended = false;
    }

    fn new(node: usize) -> Self {
        PortData {
            node: NodeIx(node),
            window: VecDeque::new(),
            confirm: Confirmation::default(),
            signs: Signs::NONE,
            persist: 0,
            elevated_rounds: 0,
            sign_rounds: 0,
            recommended: false,
        }
    }
}

/// The device-plane engine over a fixed list of ports (index → owning node).
///
/// ```
/// use hcclwatch::health::NodeState;
/// use hcclwatch::health::device::{DeviceConfig, DeviceEngine, DeviceInput, PortProbe};
///
/// // Eight nodes with four NPU ports each; every ping through port 5 takes twice as long
/// // (a failing optical module, say). Each port pings four others a round, on a rotating
/// // stride.
/// let port_nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
/// let mut engine = DeviceEngine::new(&port_nodes, DeviceConfig::default());
/// for round in 0..5 {
///     let mut probes = Vec::new();
///     for k in 0..4 {
///         let stride = 1 + (round * 4 + k) % 31;
///         for src in 0..32 {
///             let dst = (src + stride) % 32;
///             if src / 4 != dst / 4 {
///                 let rtt = if src == 5 || dst == 5 { 200e-6 } else { 100e-6 };
///                 probes.push(PortProbe { src, dst, sent: 3, received: 3, rtt: Some(rtt) });
///             }
///         }
///     }
///     engine.step(&DeviceInput { probes, ..DeviceInput::default() });
/// }
/// // The port is suspected (re-pings from known-good ports would confirm it); its peers,
/// // whose pings with it were slow too, are not, nor is its node (one port of four).
/// let states = engine.states();
/// assert_eq!(states[5], NodeState::Suspect);
/// assert!(states.iter().enumerate().all(|(i, s)| i == 5 || *s == NodeState::Healthy));
/// ```
#[derive(Debug, Clone)]
pub struct DeviceEngine {
    cfg: DeviceConfig,
    ports: Lifecycle<PortIx, PortData>,
    /// Pairs under watch (their bad observations in a row and recent packets), and pairs
    /// with a verdict, held while watched (see `pairs`).
    pairs: Pairs<pairs::PairEvidence>,
    /// Median log RTT of a normal round, learned slowly outside fabric events; a step
    /// that stays [`localise::RATE_RENEWAL_ROUNDS`] rounds in a row is the new normal.
    baseline: Normal,
    /// That normal changed in the current round (reported in
    /// [`DeviceOutput::median_renewed`]).
    median_renewed: bool,
    /// Share of a normal round's pings (between ports nothing accuses) that are slow.
    slow_rate: BaseRate,
    /// Its warm-up.
    rate_learning: RateLearning,
    /// The run of partial events that renews it.
    event_run: EventRun,
    /// The base rate was learnt again in the current round (reported in
    /// [`DeviceOutput::rate_renewed`]).
    rate_renewed: bool,
    /// Last round of the current fabric event's hold.
    fabric_until: u64,
    /// Consecutive fabric rounds.
    fabric_run: u64,
    /// Ports elevated last round (their peers' loss with them is explained).
    last_elevated: Vec<bool>,
    /// Each node's ToR, from the last round's input.
    tor_of: Vec<Option<u32>>,
    /// Each port's own switch, from the last round's input (empty: its node's ToR).
    port_tor_of: Vec<Option<u32>>,
    /// Each ToR's normal share of elevated ports and its current event.
    tor_tracks: BTreeMap<u32, TorTrack>,
    /// Per port: its ToR was in an event when the round began (pings with it from
    /// behind another ToR are explained by that ToR).
    tor_explained: Vec<bool>,
    /// The current partial fabric event's shape: whether it is a spine's.
    spine: SpineTrack,
    /// The runs of congestion the ports' own counters reported, by node (any of its ports),
    /// and the ports' slow episodes that ended by themselves: how long the persistence
    /// horizon of a port nothing corroborates is
    /// ([`crate::health::horizon`]).
    congestion: CongestionHorizon,
}

/// How the round's ports were judged together.
struct Localised {
    /// Per port: elevated this round on its own (against its ToR when the ToR is in an
    /// event, else against the fabric), and by how much.
    elevations: Vec<Elevation>,
    /// Per port: elevated against the fabric.
    elevated: Vec<bool>,
    /// Per port: elevated on its own.
    own: Vec<bool>,
    /// Per port: what it is judged against when its ToR is in an event.
    against: Vec<Option<Against>>,
    /// ToRs with a verdict.
    tor_verdicts: Vec<DeviceTorVerdict>,
    /// Nodes judged as nodes (most ports elevated, or a host-plane suspect with one).
    node_bad: BTreeSet<NodeIx>,
    /// A fabric (or ToR) event now or in its hold: nothing escalates.
    fabric: bool,
    /// The fabric event is a spine's (see `spine`).
    spine_verdict: Option<SpineVerdict>,
}

impl DeviceEngine {
    /// An engine for ports owned by `port_nodes[i]`.
    pub fn new(port_nodes: &[usize], cfg: DeviceConfig) -> Self {
        Self {
            ports: Lifecycle::new(port_nodes.iter().map(|&node| PortData::new(node))),
            cfg,
            pairs: Pairs::default(),
            baseline: Normal::default(),
            median_renewed: false,
            slow_rate: BaseRate::default(),
            rate_learning: RateLearning::default(),
            event_run: EventRun::default(),
            rate_renewed: false,
            fabric_until: 0,
            fabric_run: 0,
            last_elevated: Vec::new(),
            tor_of: Vec::new(),
            port_tor_of: Vec::new(),
            tor_tracks: BTreeMap::new(),
            tor_explained: Vec::new(),
            spine: SpineTrack::default(),
            congestion: CongestionHorizon::default(),
        }
    }

    /// Carries the engine over to a new port table: `map[old]` is the old port's new index
    /// (None: gone); new ports without an old one start healthy and empty; `port_nodes`
    /// gives each new port's node. Pair histories follow their ports.
    pub fn remap(&mut self, map: &[Option<usize>], port_nodes: &[usize]) {
        // The congestion runs are the nodes': an old node's new number is that of any of
        // its ports that stays (a node none of whose ports stays is gone).
        let old_nodes = self.port_nodes();
        let mut node_map = vec![None; old_nodes.iter().max().map_or(0, |m| m + 1)];
        for (old, new) in map.iter().enumerate() {
            if let (Some(&node), Some(&new)) = (old_nodes.get(old), new.as_ref()) {
                node_map[node] = port_nodes.get(new).copied();
            }
        }
        self.congestion.remap(&node_map);
        let fresh = port_nodes.iter().map(|&node| PortData::new(node)).collect();
        self.ports.remap(map, fresh, |new, mut t| {
            t.data.node = NodeIx(port_nodes[new]);
            t
        });
        self.pairs.remap(map);
        // The event's tally counted pings of the old table's ports.
        self.spine.forget();
    }

    /// Ports this engine judges.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// Whether the engine has no port.
    pub fn is_empty(&self) -> bool {
        self.ports.len() == 0
    }

    /// The node that owns each port.
    pub fn port_nodes(&self) -> Vec<usize> {
        self.ports.tracks().iter().map(|p| p.data.node.0).collect()
    }

    /// Every port's state.
    pub fn states(&self) -> Vec<NodeState> {
        self.ports.states()
    }

    /// Rounds processed.
    pub fn rounds(&self) -> u64 {
        self.ports.round()
    }

    /// Processes one round.
    pub fn step(&mut self, input: &DeviceInput) -> DeviceOutput {
        self.ports.tick();
        self.rate_renewed = false;
        self.median_renewed = false;
        let mut out = DeviceOutput::default();
        let mut r = self.stats(input);
        self.record(input, &r);
        let n = self.ports.len();
        // Runs are a node's, not a port's: one node's pause storm or misread counters on
        // its eight ports is one run, as on the host plane, or it alone would pass
        // HORIZON_MIN_RUNS and outweigh the quantile. (A node named twice is one report.)
        let congested: Vec<usize> = input
            .congested_ports
            .iter()
            .filter(|&&p| p < n)
            .map(|&p| self.ports[PortIx(p)].data.node.0)
            .collect();
        self.congestion.observe(self.ports.round(), &congested);
        let l = self.localise(input, &mut r);
        out.scores = (0..n)
            .map(|i| {
                let t = &self.ports[PortIx(i)];
                PortScore {
                    packets: t.data.window.iter().map(|s| s.packets).sum(),
                    lost: t.data.window.iter().map(|s| s.lost).sum(),
                    rtt_residual: l.elevations[i].rtt_residual,
                }
            })
            .collect();
        out.fabric = l.fabric;
        if !out.fabric {
            out.node_verdicts = l.node_bad.iter().map(|n| n.0).collect();
        }
        out.tor_verdicts = l.tor_verdicts.clone();
        out.spine_verdict = l.spine_verdict.clone();
        out.rate_renewed = self.rate_renewed;
        out.median_renewed = self.median_renewed;
        out.horizon = self.congestion.group(self.cfg.uncorroborated_hold);
        self.record_confirmations(input, &r);
        let absent: BTreeSet<usize> = input.absent_nodes.iter().copied().collect();
        let seen = advance::Seen::of(input, n);
        for i in (0..n).map(PortIx) {
            let node = self.ports[i].data.node;
            if absent.contains(&node.0) {
                continue;
            }
            // A port of a node verdict, or any port during a fabric event, is not judged on
            // its own: the cause is not the port. Nor is a port of a ToR in an event unless
            // it stands out from its ToR.
            let node_event = !out.fabric && l.node_bad.contains(&node);
            if node_event && self.judged_at_onset(i) {
                // Suspected (or just confirmed) in the rounds before its node's verdict
                // formed: the node verdict names the cause, and re-pings only reproduce
                // the node's fault as the port's.
                let e = &l.elevations[i.0];
                let why = "withdrawn: its node is judged as a whole, not the port";
                self.set(i, NodeState::Healthy, why.into(), e.evidence(), &mut out);
                continue;
            }
            let own = l.own[i.0] && !out.fabric && !node_event;
            let explained = out.fabric || (l.against[i.0].is_some() && !l.own[i.0]);
            let fabric = Against {
                loss: r.fabric_loss,
                rtt: 0.0,
            };
            let mut confirm = match self.ports[i].state {
                NodeState::Suspect => self.reproduced(i, &r, l.against[i.0].unwrap_or(fabric)),
                _ => Reproduction::Undecided,
            };
            if explained && matches!(confirm, Reproduction::Reproduced { .. }) {
                // Re-pings during a fabric or ToR event cross it too: they may clear a
                // suspect, not confirm one.
                confirm = Reproduction::Undecided;
            }
            let e = &l.elevations[i.0];
            self.advance(i, (own, explained), e, (confirm, seen[i.0]), &mut out);
        }
        let in_tor: Vec<bool> = l.against.iter().map(Option::is_some).collect();
        self.judge_pairs(input, &r, (&l.elevated, &in_tor), out.fabric, &mut out);
        out
    }

    /// Whether `port`'s verdict may have come from its node's fault rather than its own:
    /// a suspect, or confirmed within the last [`NODE_ONSET_ROUNDS`] rounds. (Read every
    /// round of a node verdict; since a port of one is never suspected, it only finds
    /// anything in the verdict's first round, or the first after a lapse.)
    fn judged_at_onset(&self, port: PortIx) -> bool {
        match self.ports[port].state {
            NodeState::Suspect => true,
            NodeState::Confirmed => self.ports.age(port) <= NODE_ONSET_ROUNDS,
            _ => false,
        }
    }

    /// Moves `port` to `to` and records the transition (nothing when it is there already).
    fn set(
        &mut self,
        port: PortIx,
        to: NodeState,
        reason: String,
        evidence: Evidence,
        out: &mut DeviceOutput,
    ) {
        // An episode nothing corroborated that ended by itself (back within bounds for
        // `exit_rounds` from suspect or confirmed, never recommended) tells how long such
        // slowness lasts (see `CongestionHorizon::episode_ended`). Not one withdrawn for
        // its node's verdict or not reproduced (its next rounds are the same slowness),
        // nor one that was recommended (it may have ended by a repair; a port elevated
        // again in probation carries that episode on).
        let (t, d) = (&self.ports[port], &self.ports[port].data);
        let by_itself = to == NodeState::Healthy
            && matches!(t.state, NodeState::Suspect | NodeState::Confirmed)
            && t.counts.clean >= self.cfg.exit_rounds
            && !d.recommended;
        let ended = (by_itself && !d.corroborated()).then_some(d.persist);
        if let Some(c) = self.ports.set(port, to, reason, evidence) {
            if let Some(rounds) = ended {
                self.congestion.episode_ended(rounds as u64);
            }
            if to == NodeState::Healthy {
                // The episode is over: its evidence goes with it.
                self.ports[port].data.forget_episode();
            }
            out.transitions.push(transition(c));
        }
    }
}

/// Whether `bad` of `all` (a node's elevated ports, or a ToR's bad members) are most of
/// them: at least `share` of them, and at least two (one when there is only one). On a
/// node of two NPUs one bad port is half its ports, and it is a port, not the node: held
/// out, counting it as the node made node verdicts of single bad ports, ToR events of two
/// such nodes behind one ToR, and, five or more such nodes at once, a fabric event that
/// froze every port verdict for hours (docs/detection.md).
pub(super) fn most_of(bad: usize, all: usize, share: f64) -> bool {
    all > 0 && bad >= all.min(2) && bad as f64 >= share * all as f64
}

fn transition(c: Change<PortIx>) -> PortTransition {
    PortTransition {
        round: c.round,
        port: c.id.0,
        from: c.from,
        to: c.to,
        reason: c.reason,
        evidence: c.evidence.named(),
    }
}
