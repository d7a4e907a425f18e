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
//! - a large share of all ports elevated (`fabric_share`) is the fabric or a ToR: no port
//!   or node escalates while it lasts;
//! - most ports of one node elevated (`node_share`) is that node: a node verdict, and its
//!   ports do not escalate one by one;
//! - otherwise an elevated port is suspected on its own, and re-pinged from known-good
//!   ports on other nodes (`confirm_peers`); reproduced, it is confirmed, and after
//!   `confirm_hold` more elevated rounds its node is recommended for quarantine with reason
//!   `npu_port`;
//! - a slow or lossy pair whose ends are otherwise fine is re-pinged, and after
//!   `pair_observations` bad observations in a row is a pair verdict (a cable or a switch
//!   path), which never quarantines anything.
//!
//! A lost packet is charged to both ends, but a port's loss with peers already accused
//! (elevated, or not healthy) is explained by them and not counted, and the fabric's loss
//! rate a port is judged against is the median over ports, so that a few bad ports do not
//! raise it. More slow pings between unaccused ports than the learned base rate explains
//! is a partial fabric event (a spine, a share of the paths); a fabric event of two rounds
//! or more holds for a window. A pair observation counts only when neither end is bad with
//! other peers in the same round. A port slow by RTT alone is recommended for quarantine
//! only when its RTTs are steady (see [`super::engine::STEADY_RATIO`]): a congested link
//! scatters them.
//!
//! Ports move through the same states as nodes (healthy → suspect → confirmed →
//! quarantine_recommended → probation → healthy), with exit thresholds below entry
//! thresholds. Pure code: the daemon, the simulator and the tests run the same engine.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use statrs::distribution::{Binomial, DiscreteCDF};

use super::engine::{PARTIAL_ALPHA, PARTIAL_MIN_PROBES, SLOW_RATE_FLOOR, STEADY_RATIO, median};
use crate::snapshot::probe::NodeState;

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
    /// Elevated rounds after confirmation before the node is recommended for quarantine.
    pub confirm_hold: usize,
    /// Consecutive clean rounds that clear a suspect or confirmed port (or move a
    /// recommended one to probation).
    pub exit_rounds: usize,
    /// Rounds of probation.
    pub probation_rounds: usize,
    /// Share of all ports elevated that makes a fabric (or ToR) verdict.
    pub fabric_share: f64,
    /// Share of one node's ports elevated that makes a node verdict.
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
    fn lost(&self) -> u32 {
        self.sent.saturating_sub(self.received)
    }

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
    /// Per-port window numbers.
    pub scores: Vec<PortScore>,
}

/// One round of a port's history.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Sample {
    packets: u32,
    lost: u32,
    /// Log RTT residuals of this round's pings through the port.
    residuals: Vec<f64>,
    /// Peers this round's pings went to or came from, and whether each lost packets.
    peers: Vec<(usize, u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct PortTrack {
    node: usize,
    state: NodeState,
    window: VecDeque<Sample>,
    since: u64,
    clean: usize,
    elevated_rounds: usize,
    confirm_pending: bool,
    /// Re-pings from known-good ports since the port became suspect.
    confirm: Confirmation,
}

/// Re-pings from known-good ports, accumulated while a port is suspect.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Confirmation {
    sent: u32,
    lost: u32,
    residuals: Vec<f64>,
    /// The same, per reporting node (the node whose port re-pinged): a confirmation needs
    /// [`MIN_REPORTERS`] nodes other than the accused's that each saw the fault, so one
    /// member that lies about its re-pings cannot confirm a port of another node.
    #[serde(default)]
    by_reporter: BTreeMap<usize, ReporterTally>,
}

/// One reporting node's re-pings of a suspect port.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct ReporterTally {
    sent: u32,
    lost: u32,
    residuals: Vec<f64>,
}

/// Distinct reporting nodes, other than the accused port's node, whose own re-pings must
/// each reproduce a suspect's loss or slowness before it is confirmed (the host plane's
/// rule, `health::engine`, applied to the device plane).
pub const MIN_REPORTERS: usize = 2;

/// Why a port is elevated this round.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Elevation {
    loss: bool,
    rtt: bool,
    loss_ratio: f64,
    tail: f64,
    rtt_residual: f64,
    rtt_z: f64,
    /// Robust spread of the window's RTT residuals.
    rtt_spread: f64,
    /// The slowness is steady (see [`STEADY_RATIO`]) or the port is lossy.
    steady: bool,
    peers: usize,
}

impl Elevation {
    fn any(&self) -> bool {
        self.loss || self.rtt
    }

    fn evidence(&self) -> Vec<(String, f64)> {
        vec![
            ("window_loss_ratio".into(), self.loss_ratio),
            ("loss_binomial_tail".into(), self.tail),
            ("window_median_log_rtt_residual".into(), self.rtt_residual),
            ("window_rtt_robust_z".into(), self.rtt_z),
            ("window_rtt_residual_spread".into(), self.rtt_spread),
            ("distinct_peers".into(), self.peers as f64),
        ]
    }

    fn describe(&self) -> String {
        match (self.loss, self.rtt) {
            (true, true) => format!(
                "{:.1}% packet loss and {:.0}% slower pings with {} peers",
                self.loss_ratio * 100.0,
                (self.rtt_residual.exp() - 1.0) * 100.0,
                self.peers
            ),
            (true, false) => format!(
                "{:.1}% packet loss on pings with {} peers",
                self.loss_ratio * 100.0,
                self.peers
            ),
            _ => format!(
                "pings {:.0}% slower than the round median with {} peers",
                (self.rtt_residual.exp() - 1.0) * 100.0,
                self.peers
            ),
        }
    }
}

/// The device-plane engine over a fixed list of ports (index → owning node).
#[derive(Debug, Clone)]
pub struct DeviceEngine {
    cfg: DeviceConfig,
    ports: Vec<PortTrack>,
    round: u64,
    /// Consecutive bad observations of each pair.
    pairs: BTreeMap<(usize, usize), usize>,
    /// Pairs with a verdict, held until a clean observation.
    held: BTreeSet<(usize, usize)>,
    /// Median log RTT of a normal round, learned slowly outside fabric events.
    baseline: Option<f64>,
    /// Share of a normal round's pings (between ports nothing accuses) that are slow.
    slow_rate: Option<f64>,
    /// Last round of the current fabric event's hold.
    fabric_until: u64,
    /// Consecutive fabric rounds.
    fabric_run: u64,
    /// Ports elevated last round (their peers' loss with them is explained).
    last_elevated: Vec<bool>,
}

/// Statistics of one round's pings as a whole.
struct RoundStats {
    median_log_rtt: f64,
    spread: f64,
    /// The fabric's loss rate (floored): lost ÷ sent over every ping of the window.
    fabric_loss: f64,
}

/// Significance a suspect's re-ping loss must reach: fewer packets than the window, so a
/// looser bound than `loss_alpha`, still far below chance.
const CONFIRM_ALPHA: f64 = 1e-3;

/// A port's loss is unlikely under the fabric rate: P(X ≥ lost) for X ~ Bin(packets, p0).
fn loss_tail(lost: u32, packets: u32, p0: f64) -> f64 {
    if lost == 0 || packets == 0 {
        return 1.0;
    }
    match Binomial::new(p0.clamp(1e-9, 1.0 - 1e-9), u64::from(packets)) {
        Ok(b) => b.sf(u64::from(lost) - 1),
        Err(_) => 1.0,
    }
}

impl DeviceEngine {
    /// An engine for ports owned by `port_nodes[i]`.
    pub fn new(port_nodes: &[usize], cfg: DeviceConfig) -> Self {
        Self {
            ports: port_nodes
                .iter()
                .map(|&node| PortTrack {
                    node,
                    state: NodeState::Healthy,
                    window: VecDeque::new(),
                    since: 0,
                    clean: 0,
                    elevated_rounds: 0,
                    confirm_pending: false,
                    confirm: Confirmation::default(),
                })
                .collect(),
            cfg,
            round: 0,
            pairs: BTreeMap::new(),
            held: BTreeSet::new(),
            baseline: None,
            slow_rate: None,
            fabric_until: 0,
            fabric_run: 0,
            last_elevated: Vec::new(),
        }
    }

    /// Carries the engine over to a new port table: `map[old]` is the old port's new index
    /// (None: gone); new ports without an old one start healthy and empty; `port_nodes`
    /// gives each new port's node. Pair histories follow their ports.
    pub fn remap(&mut self, map: &[Option<usize>], port_nodes: &[usize]) {
        let fresh = DeviceEngine::new(port_nodes, self.cfg.clone());
        let mut tracks = fresh.ports;
        for (old, new) in map.iter().enumerate() {
            if let (Some(new), Some(t)) = (new, self.ports.get(old))
                && let Some(slot) = tracks.get_mut(*new)
            {
                *slot = PortTrack {
                    node: port_nodes[*new],
                    ..t.clone()
                };
            }
        }
        self.ports = tracks;
        let idx = |i: usize| map.get(i).copied().flatten();
        self.pairs = std::mem::take(&mut self.pairs)
            .into_iter()
            .filter_map(|((a, b), c)| Some(((idx(a)?, idx(b)?), c)))
            .collect();
        self.held = std::mem::take(&mut self.held)
            .into_iter()
            .filter_map(|(a, b)| Some((idx(a)?, idx(b)?)))
            .collect();
    }

    /// Ports this engine judges.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// Whether the engine has no port.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// The node that owns each port.
    pub fn port_nodes(&self) -> Vec<usize> {
        self.ports.iter().map(|p| p.node).collect()
    }

    /// Every port's state.
    pub fn states(&self) -> Vec<NodeState> {
        self.ports.iter().map(|p| p.state).collect()
    }

    /// Rounds processed.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Healthy ports on nodes other than `exclude_node` that can re-ping a suspect: chosen
    /// deterministically from the round and the suspect, so every member picks the same.
    pub fn confirmers(&self, suspect: usize, present: &[bool]) -> Vec<usize> {
        let node = self.ports.get(suspect).map(|p| p.node);
        let good: Vec<usize> = (0..self.ports.len())
            .filter(|&i| {
                let p = &self.ports[i];
                p.state == NodeState::Healthy
                    && Some(p.node) != node
                    && present.get(p.node).copied().unwrap_or(false)
            })
            .collect();
        if good.is_empty() {
            return Vec::new();
        }
        (0..self.cfg.confirm_peers.min(good.len()))
            .map(|k| good[(suspect * 7 + k * 13 + self.round as usize) % good.len()])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    fn stats(&self, input: &DeviceInput) -> RoundStats {
        let n = self.ports.len();
        let logs: Vec<f64> = input
            .probes
            .iter()
            .filter(|p| p.usable(n))
            .filter_map(|p| p.rtt.filter(|r| r.is_finite() && *r > 0.0))
            .map(f64::ln)
            .collect();
        let median_log_rtt = median(&mut logs.clone());
        let mut dev: Vec<f64> = logs.iter().map(|l| (l - median_log_rtt).abs()).collect();
        let spread = (1.4826 * median(&mut dev)).max(self.cfg.mad_floor);
        RoundStats {
            median_log_rtt,
            spread,
            fabric_loss: self.cfg.loss_floor,
        }
    }

    /// The fabric's loss rate: the median over ports of each port's loss ratio over its
    /// window (each packet is charged to both ends), leaving out pings with an accused
    /// peer. A median, so that a few lossy ports do not raise the rate they and their
    /// peers are judged against; a loss most ports share moves it. Floored at `loss_floor`.
    fn fabric_loss(&self, accused: &[bool]) -> f64 {
        let mut ratios: Vec<f64> = self
            .ports
            .iter()
            .filter_map(|t| {
                let (sent, lost) = t
                    .window
                    .iter()
                    .flat_map(|s| s.peers.iter())
                    .filter(|(p, _, _)| !accused.get(*p).copied().unwrap_or(false))
                    .fold((0u64, 0u64), |(s, l), (_, ps, pl)| {
                        (s + u64::from(*ps), l + u64::from(*pl))
                    });
                (sent > 0).then(|| lost as f64 / sent as f64)
            })
            .collect();
        median(&mut ratios).max(self.cfg.loss_floor)
    }

    /// Charges this round's plan pings to both their ends.
    fn record(&mut self, input: &DeviceInput, r: &RoundStats) {
        let n = self.ports.len();
        let mut samples: Vec<Sample> = vec![Sample::default(); n];
        for p in input.probes.iter().filter(|p| p.usable(n)) {
            let residual = p
                .rtt
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(|x| x.ln() - r.median_log_rtt);
            for (me, peer) in [(p.src, p.dst), (p.dst, p.src)] {
                let s = &mut samples[me];
                s.packets += p.sent;
                s.lost += p.lost();
                s.residuals.extend(residual);
                s.peers.push((peer, p.sent, p.lost()));
            }
        }
        let absent: BTreeSet<usize> = input.absent_nodes.iter().copied().collect();
        for (track, s) in self.ports.iter_mut().zip(samples) {
            if absent.contains(&track.node) {
                continue;
            }
            track.window.push_back(s);
            while track.window.len() > self.cfg.window {
                track.window.pop_front();
            }
        }
    }

    /// Whether port `i` is elevated over its window, and by how much.
    fn elevation(&self, i: usize, r: &RoundStats, accused: &[bool]) -> Elevation {
        let cfg = &self.cfg;
        let t = &self.ports[i];
        // Loss on pings with a peer already accused is explained by that peer: a port
        // next to a bad one is not bad itself.
        let pings = || {
            t.window
                .iter()
                .flat_map(|s| s.peers.iter())
                .filter(|(p, _, _)| !accused.get(*p).copied().unwrap_or(false))
        };
        let packets: u32 = pings().map(|(_, s, _)| *s).sum();
        let lost: u32 = pings().map(|(_, _, l)| *l).sum();
        let peers: BTreeSet<usize> = t
            .window
            .iter()
            .flat_map(|s| s.peers.iter().map(|(p, _, _)| *p))
            .collect();
        // Loss with the ports of one node only is that node's (or a pair's), not this
        // port's: count the nodes of the lossy peers.
        let lossy_peers: BTreeSet<usize> = pings()
            .filter(|(_, _, l)| *l > 0)
            .map(|(p, _, _)| self.ports.get(*p).map_or(usize::MAX, |x| x.node))
            .collect();
        let mut residuals: Vec<f64> = t
            .window
            .iter()
            .flat_map(|s| s.residuals.iter().copied())
            .collect();
        let rtt_residual = if residuals.is_empty() {
            f64::NAN
        } else {
            median(&mut residuals)
        };
        let mut dev: Vec<f64> = residuals.iter().map(|x| (x - rtt_residual).abs()).collect();
        let rtt_spread = 1.4826 * median(&mut dev);
        let rtt_z = rtt_residual / r.spread;
        let loss_ratio = if packets == 0 {
            0.0
        } else {
            f64::from(lost) / f64::from(packets)
        };
        let tail = loss_tail(lost, packets, r.fabric_loss);
        let enough_peers = peers.len() >= cfg.min_peers;
        let mut e = Elevation {
            loss: enough_peers
                && lossy_peers.len() >= cfg.min_peers.min(2)
                && loss_ratio >= cfg.loss_min
                && tail < cfg.loss_alpha,
            rtt: enough_peers
                && rtt_residual.is_finite()
                && rtt_residual > cfg.rtt_ratio.ln()
                && rtt_z > cfg.z,
            loss_ratio,
            tail,
            rtt_residual,
            rtt_z,
            rtt_spread,
            steady: false,
            peers: peers.len(),
        };
        e.steady = e.loss || rtt_spread <= STEADY_RATIO * r.spread;
        e
    }

    fn set(
        &mut self,
        port: usize,
        to: NodeState,
        reason: String,
        evidence: Vec<(String, f64)>,
        out: &mut DeviceOutput,
    ) {
        let t = &mut self.ports[port];
        let from = t.state;
        if from == to {
            return;
        }
        t.state = to;
        t.since = self.round;
        t.clean = 0;
        t.elevated_rounds = 0;
        out.transitions.push(PortTransition {
            round: self.round,
            port,
            from,
            to,
            reason,
            evidence,
        });
    }

    /// Processes one round.
    pub fn step(&mut self, input: &DeviceInput) -> DeviceOutput {
        self.round += 1;
        let mut out = DeviceOutput::default();
        let mut r = self.stats(input);
        self.record(input, &r);
        let n = self.ports.len();
        let accused: Vec<bool> = (0..n)
            .map(|i| {
                self.last_elevated.get(i).copied().unwrap_or(false)
                    || !matches!(
                        self.ports[i].state,
                        NodeState::Healthy | NodeState::Probation
                    )
            })
            .collect();
        r.fabric_loss = self.fabric_loss(&accused);
        // Two passes: a port elevated only by its pings with bad ports is cleared once
        // those are accused in the first pass.
        let first: Vec<bool> = (0..n)
            .map(|i| accused[i] || self.elevation(i, &r, &accused).any())
            .collect();
        let elevations: Vec<Elevation> = (0..n).map(|i| self.elevation(i, &r, &first)).collect();
        let elevated: Vec<bool> = elevations.iter().map(Elevation::any).collect();
        self.last_elevated = elevated.clone();
        out.scores = (0..n)
            .map(|i| {
                let t = &self.ports[i];
                PortScore {
                    packets: t.window.iter().map(|s| s.packets).sum(),
                    lost: t.window.iter().map(|s| s.lost).sum(),
                    rtt_residual: elevations[i].rtt_residual,
                }
            })
            .collect();
        // Localisation: fabric, then nodes, then single ports.
        let node_bad = self.nodes_elevated(&elevated, &input.host_suspects);
        // A fabric event of two rounds or more holds for a window after its last round:
        // the ports' windows still carry its pings, and would otherwise accuse whoever it
        // touched most. (One round alone is often a node fault before its ports are
        // elevated.)
        let now = n > 0 && self.is_fabric(input, &r, &elevated, &node_bad);
        self.fabric_run = if now { self.fabric_run + 1 } else { 0 };
        if self.fabric_run >= 2 {
            self.fabric_until = self.round + self.cfg.window as u64;
        }
        out.fabric = now || self.round <= self.fabric_until;
        if !out.fabric {
            out.node_verdicts = node_bad.iter().copied().collect();
        }
        self.record_confirmations(input, &r);
        let absent: BTreeSet<usize> = input.absent_nodes.iter().copied().collect();
        for i in 0..n {
            let node = self.ports[i].node;
            if absent.contains(&node) {
                continue;
            }
            // A port of a node verdict, or any port during a fabric event, is not judged on
            // its own: the cause is not the port.
            let own = elevated[i] && !out.fabric && !node_bad.contains(&node);
            let mut confirm = self.reproduced(i, &r);
            if out.fabric && confirm.0 == Some(true) {
                // Re-pings during a fabric event cross it too: they may clear a suspect,
                // not confirm one.
                confirm.0 = None;
            }
            self.advance(i, own, &elevations[i], confirm, &mut out);
        }
        self.judge_pairs(input, &r, &elevated, out.fabric, &mut out);
        out
    }

    /// Nodes most of whose ports are elevated, and nodes with an elevated port whose
    /// host-plane probes are bad too (`host_suspects`).
    fn nodes_elevated(&self, elevated: &[bool], host_suspects: &[usize]) -> BTreeSet<usize> {
        let mut by_node: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for (i, t) in self.ports.iter().enumerate() {
            let e = by_node.entry(t.node).or_default();
            e.0 += 1;
            e.1 += usize::from(elevated[i]);
        }
        by_node
            .into_iter()
            .filter(|(node, (all, bad))| {
                *all > 1
                    && ((*bad as f64) / (*all as f64) >= self.cfg.node_share
                        || (*bad > 0 && host_suspects.contains(node)))
            })
            .map(|(node, _)| node)
            .collect()
    }

    /// Whether the fabric (or a ToR) is bad rather than a port or a node. Judged relative to
    /// itself (a large share of ports elevated, or many nodes at once) and absolutely (loss
    /// that no elevated port or node explains, or a round median RTT far above the learned
    /// baseline), since a uniformly bad fabric leaves no port standing out.
    fn is_fabric(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        elevated: &[bool],
        node_bad: &BTreeSet<usize>,
    ) -> bool {
        let n = self.ports.len();
        let share = elevated.iter().filter(|e| **e).count() as f64 / n as f64;
        let nodes: BTreeSet<usize> = self.ports.iter().map(|p| p.node).collect();
        let many_nodes = node_bad.len() >= (self.cfg.tor_nodes).max(1)
            && node_bad.len() as f64 >= 0.1 * nodes.len() as f64;
        // Loss on pings between ports that nothing else accuses.
        let owners: Vec<usize> = self.ports.iter().map(|p| p.node).collect();
        let explained = |port: usize| elevated[port] || node_bad.contains(&owners[port]);
        let (sent, lost) = input
            .probes
            .iter()
            .filter(|p| p.usable(n) && !explained(p.src) && !explained(p.dst))
            .fold((0u64, 0u64), |(s, l), p| {
                (s + u64::from(p.sent), l + u64::from(p.lost()))
            });
        let unexplained_loss = sent > 0 && lost as f64 / sent as f64 >= self.cfg.loss_min;
        let partial = self.partial_fabric(input, r, &explained);
        let slow = self.fabric_slow(r);
        share >= self.cfg.fabric_share || many_nodes || unexplained_loss || slow || partial
    }

    /// Whether more pings between ports nothing accuses are slow than the learned base
    /// rate explains (a binomial tail below [`PARTIAL_ALPHA`]): a share of the paths is
    /// slow at once (a partial dip, a spine), which moves no port's median and no round
    /// median. Learns the base rate from rounds that are not.
    fn partial_fabric(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        explained: &dyn Fn(usize) -> bool,
    ) -> bool {
        let n = self.ports.len();
        let pings: Vec<&PortProbe> = input
            .probes
            .iter()
            .filter(|p| p.usable(n) && !explained(p.src) && !explained(p.dst))
            .collect();
        let slow = pings.iter().filter(|p| self.slow_ping(p, r)).count();
        if pings.len() < PARTIAL_MIN_PROBES {
            return false;
        }
        let p0 = self
            .slow_rate
            .unwrap_or(SLOW_RATE_FLOOR)
            .max(SLOW_RATE_FLOOR);
        let partial = slow > 0
            && Binomial::new(p0.min(0.5), pings.len() as u64)
                .map_or(1.0, |b| b.sf(slow as u64 - 1))
                < PARTIAL_ALPHA;
        if !partial {
            let share = slow as f64 / pings.len() as f64;
            self.slow_rate = Some(self.slow_rate.map_or(share, |x| x + 0.02 * (share - x)));
        }
        partial
    }

    /// A ping slower than the round median by `rtt_ratio`, with a robust z above `z`.
    fn slow_ping(&self, p: &PortProbe, r: &RoundStats) -> bool {
        p.rtt.is_some_and(|x| {
            x > 0.0
                && x.ln() - r.median_log_rtt > self.cfg.rtt_ratio.ln()
                && (x.ln() - r.median_log_rtt) / r.spread > self.cfg.z
        })
    }

    /// Whether the round's median RTT is far above the learned baseline; learns the
    /// baseline from rounds that are not.
    fn fabric_slow(&mut self, r: &RoundStats) -> bool {
        if !r.median_log_rtt.is_finite() || r.median_log_rtt == 0.0 {
            return false;
        }
        let slow = self
            .baseline
            .is_some_and(|b| r.median_log_rtt - b > self.cfg.rtt_ratio.ln());
        if !slow {
            self.baseline = Some(match self.baseline {
                None => r.median_log_rtt,
                Some(b) => b + 0.05 * (r.median_log_rtt - b),
            });
        }
        slow
    }

    /// Adds this round's re-pings to the tallies of the ports awaiting them.
    fn record_confirmations(&mut self, input: &DeviceInput, r: &RoundStats) {
        let n = self.ports.len();
        // Re-pings of a suspect pair are about the pair: they do not confirm a port.
        let pair = |p: &PortProbe| {
            let k = (p.src.min(p.dst), p.src.max(p.dst));
            self.pairs.contains_key(&k) || self.held.contains(&k)
        };
        let repings: Vec<PortProbe> = input
            .confirmations
            .iter()
            .filter(|p| p.usable(n) && !pair(p))
            .copied()
            .collect();
        for p in &repings {
            // A re-ping is evidence about the port it was sent to, reported by the node of
            // the port that sent it; the accused's own node never testifies against it.
            let reporter = self.ports[p.src].node;
            let t = &mut self.ports[p.dst];
            if t.state != NodeState::Suspect || reporter == t.node {
                continue;
            }
            let residual = p
                .rtt
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(|x| x.ln() - r.median_log_rtt);
            t.confirm.sent = t.confirm.sent.saturating_add(p.sent);
            t.confirm.lost = t.confirm.lost.saturating_add(p.lost());
            t.confirm.residuals.extend(residual);
            let by = t.confirm.by_reporter.entry(reporter).or_default();
            by.sent = by.sent.saturating_add(p.sent);
            by.lost = by.lost.saturating_add(p.lost());
            by.residuals.extend(residual);
        }
    }

    /// Whether a suspect's re-pings from known-good ports reproduce its loss or slowness:
    /// `Some(true)` reproduced, `Some(false)` enough re-pings and not reproduced, `None`
    /// not decided yet.
    fn reproduced(&self, i: usize, r: &RoundStats) -> (Option<bool>, f64, f64) {
        let c = &self.ports[i].confirm;
        let ratio = f64::from(c.lost) / f64::from(c.sent.max(1));
        let mut res = c.residuals.clone();
        let slow = if res.is_empty() {
            f64::NAN
        } else {
            median(&mut res)
        };
        // Reporters that each saw the loss, and each the slowness, on their own.
        let lossy_reporters = c
            .by_reporter
            .values()
            .filter(|t| {
                t.lost > 0 && f64::from(t.lost) / f64::from(t.sent.max(1)) >= self.cfg.loss_min
            })
            .count();
        let slow_reporters = c
            .by_reporter
            .values()
            .filter(|t| {
                let mut own = t.residuals.clone();
                !own.is_empty() && median(&mut own) > self.cfg.rtt_ratio.ln()
            })
            .count();
        let lossy = c.lost >= 2
            && ratio >= self.cfg.loss_min
            && loss_tail(c.lost, c.sent, r.fabric_loss) < CONFIRM_ALPHA
            && lossy_reporters >= MIN_REPORTERS;
        let slow_enough = res.len() >= self.cfg.confirm_peers
            && slow > self.cfg.rtt_ratio.ln()
            && slow_reporters >= MIN_REPORTERS;
        let verdict = if lossy || slow_enough {
            Some(true)
        } else if c.sent >= self.cfg.confirm_packets {
            Some(false)
        } else {
            None
        };
        (verdict, ratio, slow)
    }

    fn advance(
        &mut self,
        i: usize,
        elevated: bool,
        e: &Elevation,
        confirm: (Option<bool>, f64, f64),
        out: &mut DeviceOutput,
    ) {
        let cfg = self.cfg.clone();
        let state = self.ports[i].state;
        if elevated {
            self.ports[i].clean = 0;
            // A quarantine waits for `confirm_hold` elevated rounds in a row that are lossy
            // or steadily slow: queueing behind other traffic scatters RTTs, a slow port
            // shifts them.
            if e.steady {
                self.ports[i].elevated_rounds += 1;
            } else {
                self.ports[i].elevated_rounds = 0;
            }
        } else {
            self.ports[i].clean += 1;
        }
        let clean = self.ports[i].clean;
        match state {
            NodeState::Healthy | NodeState::Probation if elevated => {
                self.ports[i].confirm_pending = true;
                self.ports[i].confirm = Confirmation::default();
                out.confirm_requests.push(i);
                self.set(i, NodeState::Suspect, e.describe(), e.evidence(), out);
            }
            NodeState::Probation
                if self.round - self.ports[i].since >= cfg.probation_rounds as u64 =>
            {
                self.set(
                    i,
                    NodeState::Healthy,
                    "probation passed".into(),
                    e.evidence(),
                    out,
                );
            }
            NodeState::Suspect => match confirm {
                (Some(true), ratio, slow) => {
                    self.ports[i].confirm_pending = false;
                    let mut ev = e.evidence();
                    ev.push(("confirmation_loss_ratio".into(), ratio));
                    ev.push(("confirmation_median_log_rtt_residual".into(), slow));
                    ev.push((
                        "confirmation_packets".into(),
                        f64::from(self.ports[i].confirm.sent),
                    ));
                    self.set(
                        i,
                        NodeState::Confirmed,
                        format!(
                            "re-pinged from known-good ports on other nodes: {}",
                            e.describe()
                        ),
                        ev,
                        out,
                    );
                }
                (Some(false), ratio, _) => {
                    self.ports[i].confirm_pending = false;
                    let mut ev = e.evidence();
                    ev.push(("confirmation_loss_ratio".into(), ratio));
                    self.set(
                        i,
                        NodeState::Healthy,
                        "not reproduced from known-good ports: path, not port".into(),
                        ev,
                        out,
                    );
                }
                (None, _, _) if clean >= cfg.exit_rounds => {
                    self.set(
                        i,
                        NodeState::Healthy,
                        "back within bounds".into(),
                        e.evidence(),
                        out,
                    );
                }
                (None, _, _) => {
                    // Not decided yet: keep re-pinging.
                    self.ports[i].confirm_pending = true;
                    out.confirm_requests.push(i);
                }
            },
            NodeState::Confirmed
                if elevated && self.ports[i].elevated_rounds >= cfg.confirm_hold =>
            {
                self.set(
                    i,
                    NodeState::QuarantineRecommended,
                    format!("confirmed bad NPU port: {}", e.describe()),
                    e.evidence(),
                    out,
                );
            }
            NodeState::Confirmed if clean >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    e.evidence(),
                    out,
                );
            }
            NodeState::QuarantineRecommended if clean >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Probation,
                    "back within bounds; probation".into(),
                    e.evidence(),
                    out,
                );
            }
            _ => {}
        }
    }

    /// Pairs: a ping with loss or a slow RTT between two ports that are otherwise fine is
    /// re-pinged; `pair_observations` bad observations in a row make a verdict.
    fn judge_pairs(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        elevated: &[bool],
        fabric: bool,
        out: &mut DeviceOutput,
    ) {
        let n = self.ports.len();
        let bad = |p: &PortProbe| {
            let lossy =
                p.lost() > 0 && f64::from(p.lost()) / f64::from(p.sent) >= self.cfg.loss_min;
            lossy || self.slow_ping(p, r)
        };
        let key = |p: &PortProbe| (p.src.min(p.dst), p.src.max(p.dst));
        // Bad plan pings per port this round: a port bad with several peers at once (its
        // own fault, its node's, its ToR's, a congested link) says nothing about one pair.
        let mut bad_at = vec![0u32; n];
        for p in input.probes.iter().filter(|p| p.usable(n) && bad(p)) {
            bad_at[p.src] += 1;
            bad_at[p.dst] += 1;
        }
        // Per pair: (bad, every bad observation specific to the pair).
        let mut seen: BTreeMap<(usize, usize), (bool, bool)> = BTreeMap::new();
        let plan = input.probes.iter().map(|p| (p, 1));
        let repings = input.confirmations.iter().map(|p| (p, 0));
        for (p, own) in plan.chain(repings).filter(|(p, _)| p.usable(n)) {
            let b = bad(p);
            let specific = bad_at[p.src] <= own && bad_at[p.dst] <= own;
            let e = seen.entry(key(p)).or_insert((false, true));
            e.0 |= b;
            e.1 &= !b || specific;
        }
        for (pair, (was_bad, specific)) in seen {
            let ends_fine = !elevated[pair.0] && !elevated[pair.1];
            if !was_bad {
                self.pairs.remove(&pair);
                self.held.remove(&pair);
            } else if ends_fine && !fabric && specific {
                *self.pairs.entry(pair).or_default() += 1;
            }
        }
        // Pairs with a verdict are re-pinged too, so that the verdict ends with the first
        // clean observation instead of waiting for the plan to come round again.
        for (pair, count) in &self.pairs {
            if self.held.contains(pair) || *count >= self.cfg.pair_observations {
                out.pair_verdicts.push(*pair);
            }
            out.pair_requests.push(*pair);
        }
        for p in &out.pair_verdicts {
            self.held.insert(*p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nodes` nodes × `per` ports; each port pings `k` others on a rotating stride; port
    /// `bad` (if any) loses `loss` of its packets; every RTT is 100 µs, `slow` ports add
    /// `extra`. Losses are spread deterministically: the j-th packet through a lossy port
    /// is lost when `(j * loss)` crosses an integer.
    struct Fabric {
        nodes: usize,
        per: usize,
        k: usize,
        lossy: Vec<(usize, f64)>,
        slow: Vec<(usize, f64)>,
        /// Pairs whose pings all come back 3× slower.
        bad_pairs: Vec<(usize, usize)>,
        /// Ports whose added RTT changes from ping to ping (queueing).
        scattered: Vec<usize>,
        /// Node pairs whose pings are 2× slower (a partial fabric event).
        slow_node_pairs: fn(usize, usize) -> bool,
        counters: BTreeMap<usize, f64>,
        pings: usize,
    }

    impl Fabric {
        fn new(nodes: usize, per: usize) -> Self {
            Self {
                nodes,
                per,
                k: 4,
                lossy: vec![],
                slow: vec![],
                bad_pairs: vec![],
                scattered: vec![],
                slow_node_pairs: |_, _| false,
                counters: BTreeMap::new(),
                pings: 0,
            }
        }

        fn port_nodes(&self) -> Vec<usize> {
            (0..self.nodes * self.per).map(|i| i / self.per).collect()
        }

        fn lose(&mut self, port: usize) -> bool {
            let Some(&(_, loss)) = self.lossy.iter().find(|(p, _)| *p == port) else {
                return false;
            };
            let c = self.counters.entry(port).or_default();
            let before = c.floor();
            *c += loss;
            c.floor() > before
        }

        fn ping(&mut self, src: usize, dst: usize) -> PortProbe {
            let mut received = 0;
            for _ in 0..3 {
                let lost_s = self.lose(src);
                let lost_d = self.lose(dst);
                if !lost_s && !lost_d {
                    received += 1;
                }
            }
            let mut extra: f64 = self
                .slow
                .iter()
                .filter(|(p, _)| *p == src || *p == dst)
                .map(|(_, e)| *e)
                .sum();
            if self
                .bad_pairs
                .iter()
                .any(|&(a, b)| (a, b) == (src, dst) || (b, a) == (src, dst))
            {
                extra += 200e-6;
            }
            self.pings += 1;
            if self.scattered.contains(&src) || self.scattered.contains(&dst) {
                extra += [20e-6, 400e-6, 60e-6, 250e-6, 120e-6, 500e-6][self.pings % 6];
            }
            if (self.slow_node_pairs)(src / self.per, dst / self.per) {
                extra += 100e-6;
            }
            PortProbe {
                src,
                dst,
                sent: 3,
                received,
                rtt: (received > 0).then_some(100e-6 + extra),
            }
        }

        fn round(&mut self, r: usize) -> DeviceInput {
            let p = self.nodes * self.per;
            let mut probes = Vec::new();
            for k in 0..self.k {
                let stride = 1 + (r * self.k + k) % (p - 1);
                for src in 0..p {
                    let dst = (src + stride) % p;
                    if src / self.per != dst / self.per {
                        probes.push(self.ping(src, dst));
                    }
                }
            }
            DeviceInput {
                probes,
                ..DeviceInput::default()
            }
        }
    }

    /// Runs `rounds` rounds, answering the engine's confirmation requests with re-pings from
    /// the confirmers it names; returns the engine and every output.
    fn run(f: &mut Fabric, rounds: usize) -> (DeviceEngine, Vec<DeviceOutput>) {
        run_with_host(f, rounds, &[])
    }

    /// [`run`], with `host` the nodes the host-plane engine holds suspect every round.
    fn run_with_host(
        f: &mut Fabric,
        rounds: usize,
        host: &[usize],
    ) -> (DeviceEngine, Vec<DeviceOutput>) {
        let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
        let present = vec![true; f.nodes];
        let mut outs: Vec<DeviceOutput> = Vec::new();
        for r in 0..rounds {
            let mut input = f.round(r);
            input.host_suspects = host.to_vec();
            if let Some(last) = outs.last() {
                for &port in &last.confirm_requests {
                    for c in e.confirmers(port, &present) {
                        input.confirmations.push(f.ping(c, port));
                    }
                }
                for &(a, b) in &last.pair_requests {
                    input.confirmations.push(f.ping(a, b));
                }
            }
            outs.push(e.step(&input));
        }
        (e, outs)
    }

    /// A victim port (node 5's first) loses 20 % of its packets until it is suspect, then
    /// heals. From then on one lying node (node 3) reports every re-ping of its ports to
    /// the victim as lost, every round and unasked, with as many packets as a ping may
    /// carry, and its planned pings to the victim too. The honest confirmers see no loss,
    /// so the victim is never confirmed: a confirmation needs two reporting nodes that each
    /// saw the fault (the pooled packets alone would be overwhelming).
    #[test]
    fn one_lying_node_cannot_confirm_another_nodes_port() {
        let mut f = Fabric::new(8, 8);
        let (liar, victim) = (3, 5 * 8);
        f.lossy = vec![(victim, 0.2)];
        let lie = |p: &mut PortProbe| {
            if p.src / 8 == liar && p.dst == victim {
                p.received = 0;
                p.rtt = None;
            }
        };
        let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
        let present = vec![true; f.nodes];
        let mut last: Option<DeviceOutput> = None;
        let mut healed_at = None;
        for r in 0..240 {
            let mut input = f.round(r);
            if let Some(o) = &last {
                for &port in &o.confirm_requests {
                    for c in e.confirmers(port, &present) {
                        input.confirmations.push(f.ping(c, port));
                    }
                }
            }
            if healed_at.is_some() {
                for src in liar * 8..liar * 8 + 8 {
                    input.confirmations.push(PortProbe {
                        src,
                        dst: victim,
                        sent: 16,
                        received: 16,
                        rtt: Some(100e-6),
                    });
                }
                input.probes.iter_mut().for_each(lie);
                input.confirmations.iter_mut().for_each(lie);
            }
            let out = e.step(&input);
            if healed_at.is_none() && e.states()[victim] == NodeState::Suspect {
                f.lossy.clear();
                healed_at = Some(r);
            }
            for t in out.transitions.iter().filter(|_| healed_at.is_some()) {
                assert!(
                    matches!(t.to, NodeState::Suspect | NodeState::Healthy),
                    "round {r}: port {} went to {:?} on one liar's word",
                    t.port,
                    t.to
                );
            }
            last = Some(out);
        }
        let healed_at = healed_at.expect("the lossy victim never became suspect");
        assert!(healed_at < 40, "suspect only at round {healed_at}");
    }

    #[test]
    fn a_clean_fabric_raises_nothing() {
        let mut f = Fabric::new(8, 8);
        let (e, outs) = run(&mut f, 60);
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
        assert!(outs.iter().all(|o| o.transitions.is_empty() && !o.fabric));
    }

    #[test]
    fn a_lossy_port_is_localised_to_that_port_and_escalates() {
        let mut f = Fabric::new(8, 8);
        f.lossy = vec![(19, 0.2)];
        let (e, outs) = run(&mut f, 30);
        let first = outs
            .iter()
            .position(|o| o.transitions.iter().any(|t| t.port == 19))
            .expect("port 19 never suspected");
        assert!(first < 10, "suspected only at round {first}");
        let states = e.states();
        assert_eq!(states[19], NodeState::QuarantineRecommended, "{states:?}");
        for (i, s) in states.iter().enumerate().filter(|(i, _)| *i != 19) {
            assert_eq!(*s, NodeState::Healthy, "port {i} also accused");
        }
        assert!(outs.iter().all(|o| o.node_verdicts.is_empty() && !o.fabric));
    }

    /// The same lossy port as above, on a node whose host-plane probes are bad too: the
    /// node is the cause (both planes), so it is a node verdict and the port is not judged
    /// on its own.
    #[test]
    fn a_bad_port_on_a_host_plane_suspect_is_a_node_verdict() {
        let mut f = Fabric::new(8, 8);
        f.lossy = vec![(19, 0.2)];
        let (e, outs) = run_with_host(&mut f, 30, &[19 / 8]);
        assert!(
            outs.iter().any(|o| o.node_verdicts == vec![19 / 8]),
            "no node verdict for node 2"
        );
        for o in &outs {
            for t in &o.transitions {
                assert!(
                    matches!(t.to, NodeState::Suspect | NodeState::Healthy),
                    "port {} went to {:?}",
                    t.port,
                    t.to
                );
            }
        }
        assert_ne!(e.states()[19], NodeState::QuarantineRecommended);
    }

    #[test]
    fn a_slow_port_is_localised_by_rtt() {
        let mut f = Fabric::new(8, 8);
        f.slow = vec![(5, 100e-6)]; // 2× the median
        let (e, _) = run(&mut f, 30);
        let states = e.states();
        assert_ne!(states[5], NodeState::Healthy);
        assert_eq!(
            states.iter().filter(|s| **s != NodeState::Healthy).count(),
            1
        );
    }

    #[test]
    fn all_ports_of_one_node_make_a_node_verdict_not_port_verdicts() {
        let mut f = Fabric::new(8, 8);
        f.lossy = (24..32).map(|p| (p, 0.2)).collect();
        let (e, outs) = run(&mut f, 30);
        assert!(outs.iter().skip(10).all(|o| o.node_verdicts == vec![3]));
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
    }

    #[test]
    fn every_port_lossy_is_a_fabric_verdict_and_nothing_escalates() {
        let mut f = Fabric::new(8, 8);
        f.lossy = (0..64).map(|p| (p, 0.1)).collect();
        let (e, outs) = run(&mut f, 30);
        assert!(
            outs.iter()
                .skip(10)
                .all(|o| o.fabric && o.node_verdicts.is_empty())
        );
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
    }

    #[test]
    fn a_bad_pair_is_a_pair_verdict_and_no_port_is_accused() {
        let mut f = Fabric::new(8, 8);
        // 3 and 42 meet in the plan every so often; their pings are 3× slower.
        f.bad_pairs = vec![(3, 42)];
        let (e, outs) = run(&mut f, 80);
        assert!(
            outs.iter().any(|o| o.pair_verdicts.contains(&(3, 42))),
            "the pair never got a verdict"
        );
        assert!(
            outs.iter()
                .all(|o| o.pair_verdicts.iter().all(|p| *p == (3, 42)))
        );
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
    }

    #[test]
    fn three_nodes_at_once_are_a_tor_event_not_three_node_verdicts() {
        let mut f = Fabric::new(8, 8);
        f.lossy = (0..24).map(|p| (p, 0.2)).collect();
        let (e, outs) = run(&mut f, 30);
        assert!(
            outs.iter()
                .skip(10)
                .all(|o| o.fabric && o.node_verdicts.is_empty())
        );
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
    }

    #[test]
    fn the_binomial_tail_is_what_it_says() {
        // P(X ≥ 1) for Bin(10, 0.1) = 1 − 0.9^10.
        assert!((loss_tail(1, 10, 0.1) - (1.0 - 0.9f64.powi(10))).abs() < 1e-12);
        assert_eq!(loss_tail(0, 10, 0.1), 1.0);
        // P(X ≥ 10) for Bin(10, 0.5) = 0.5^10.
        assert!((loss_tail(10, 10, 0.5) - 0.5f64.powi(10)).abs() < 1e-12);
    }

    /// A port whose RTT scatters from ping to ping (a congested link) may be suspected or
    /// confirmed, but is never recommended for quarantine; a steadily slow one is.
    #[test]
    fn scattered_rtt_is_never_recommended_steady_rtt_is() {
        let mut f = Fabric::new(8, 8);
        f.scattered = vec![12];
        f.slow = vec![(44, 150e-6)];
        let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
        let present = vec![true; f.nodes];
        let mut last: Option<DeviceOutput> = None;
        for r in 0..40 {
            let mut input = f.round(r);
            if let Some(o) = &last {
                for &port in &o.confirm_requests {
                    for c in e.confirmers(port, &present) {
                        input.confirmations.push(f.ping(c, port));
                    }
                }
            }
            last = Some(e.step(&input));
            assert_ne!(
                e.states()[12],
                NodeState::QuarantineRecommended,
                "round {r}"
            );
        }
        assert_ne!(
            e.states()[12],
            NodeState::Healthy,
            "the scattered port is at least suspect"
        );
        assert_eq!(e.states()[44], NodeState::QuarantineRecommended);
    }

    /// A third of the node pairs twice as slow (a partial dip: no port median moves
    /// much, no round median either) is a fabric event: no port is accused.
    #[test]
    fn a_partial_dip_is_a_fabric_event_and_accuses_no_port() {
        let mut f = Fabric::new(8, 8);
        f.slow_node_pairs = |a, b| (a + b) % 3 == 0;
        let (e, outs) = run(&mut f, 30);
        assert!(outs.iter().skip(2).all(|o| o.fabric));
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
    }
}
