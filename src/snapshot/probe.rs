//! The probing part of the snapshot: the probe group as this node sees it, each member's
//! health state and scores, the last round's links, and the verdicts with their evidence.
//!
//! Per-node values live in one [`MemberView`] per candidate member (not in parallel
//! vectors), so a reader cannot pair one node's score with another node's name. Pairs and
//! transitions name members by their index into [`ProbeSnapshot::members`].

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;

use super::histogram::Histogram;

/// A node's state.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum NodeState {
    /// Nothing wrong.
    Healthy,
    /// Slow in the window; awaiting confirmation.
    Suspect,
    /// Confirmed slow against known-good peers.
    Confirmed,
    /// Take it out of scheduling.
    QuarantineRecommended,
    /// Back within bounds after a quarantine; watched with halved thresholds.
    Probation,
}

impl NodeState {
    /// Every state, in order.
    pub const ALL: [NodeState; 5] = [
        NodeState::Healthy,
        NodeState::Suspect,
        NodeState::Confirmed,
        NodeState::QuarantineRecommended,
        NodeState::Probation,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Healthy => "healthy",
            NodeState::Suspect => "suspect",
            NodeState::Confirmed => "confirmed",
            NodeState::QuarantineRecommended => "quarantine_recommended",
            NodeState::Probation => "probation",
        }
    }
}

/// A recorded state change, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Round of the change.
    pub round: u64,
    /// Node.
    pub node: usize,
    /// Old state.
    pub from: NodeState,
    /// New state.
    pub to: NodeState,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it: (what, value).
    pub evidence: Vec<(String, f64)>,
}

/// Why a node is recommended for quarantine: the bounded `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuarantineReason {
    /// Confirmed slower than its peers for long enough.
    Straggler,
    /// A hard device fault reported by telemetry.
    HardFault,
    /// One of its NPU ports confirmed bad on the device plane.
    NpuPort,
}

impl QuarantineReason {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::Straggler => "straggler",
            QuarantineReason::HardFault => "hard_fault",
            QuarantineReason::NpuPort => "npu_port",
        }
    }
}

/// Why probing is paused: the bounded `reason` label of `hcclwatch_probe_paused` (the
/// words, with the peer and the error, are in `last_error` and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseReason {
    /// The probe port cannot be bound (retried with backoff).
    ListenFailed,
    /// The probe thread died; the daemon must be restarted.
    ThreadDied,
    /// The membership source (DNS, the peer list) has not been refreshed in time.
    MembershipStale,
    /// No other member of the group answers.
    Alone,
    /// The group did not form (connect, name, engine-state or port exchange).
    FormFailed,
    /// A round failed; the group will be re-formed.
    RoundFailed,
}

impl PauseReason {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::ListenFailed => "listen_failed",
            PauseReason::ThreadDied => "thread_died",
            PauseReason::MembershipStale => "membership_stale",
            PauseReason::Alone => "alone",
            PauseReason::FormFailed => "form_failed",
            PauseReason::RoundFailed => "round_failed",
        }
    }
}

/// One candidate member of the probe group, as this node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    /// The node's name (metric label), else its probe address.
    pub name: String,
    /// Whether it took part in the last round (it is in the formed group).
    pub up: bool,
    /// Its health state.
    pub state: NodeState,
    /// Window score (median log residual against its peers), when measured this round.
    pub score: Option<f64>,
    /// How much later than the last arrival's peers it reached the last barrier, seconds.
    pub arrival_lag: Option<f64>,
    /// Why a quarantine is recommended, while it is.
    pub quarantine: Option<QuarantineReason>,
    /// Its re-pairing reports are consistently contradicted by the other reporters.
    pub inconsistent_reports: bool,
    /// Its own uplink reported congestion in the last round (from its gathered row; false
    /// while it is not in the group).
    pub uplink_congested: bool,
    /// The hardware signs its own uplink showed in the last round, by their labels in
    /// [`HARDWARE_SIGNS`] (from its gathered row; empty while it is not in the group).
    pub hardware_signs: Vec<&'static str>,
    /// Its place in the network as it said at the group's formation (None: unknown, or
    /// not in the group).
    pub place: Option<super::topology::NodePlace>,
    /// The group of nodes whose slowdowns moved with its own (the health engine's ToR
    /// inference), only while no source gives its ToR; None: nothing inferred.
    pub inferred_tor: Option<u32>,
    /// Why it is left out of the group for now, while it is (it broke a formation
    /// exchange; `probe.exclusion`).
    pub excluded: Option<String>,
}

/// The hardware signs a member's uplink can show, as label values: its link trained below
/// its rate, its NIC's PCIe link trained down, corrupted frames or lost carrier.
pub const HARDWARE_SIGNS: [&str; 3] = ["link_speed", "pcie", "frame_errors"];

impl MemberView {
    /// A candidate as it is before any round: named, not in the group, healthy, nothing
    /// measured or known.
    pub fn new(name: impl Into<String>) -> Self {
        MemberView {
            name: name.into(),
            up: false,
            state: NodeState::Healthy,
            score: None,
            arrival_lag: None,
            quarantine: None,
            inconsistent_reports: false,
            uplink_congested: false,
            hardware_signs: Vec::new(),
            place: None,
            inferred_tor: None,
            excluded: None,
        }
    }

    /// Its ToR and the source named for its place: a source's ToR, else its inferred
    /// group's name ([`inferred_tor_name`], source `inferred`), else none and the
    /// source of whatever else is known.
    ///
    /// [`inferred_tor_name`]: super::topology::inferred_tor_name
    pub fn tor(&self) -> (Option<String>, super::topology::TopologySource) {
        use super::topology::{TopologySource, inferred_tor_name};
        let known = self.place.as_ref().and_then(|p| p.place.tor.clone());
        match (known, self.inferred_tor) {
            (Some(t), _) => (
                Some(t),
                self.place.as_ref().map(|p| p.source).unwrap_or_default(),
            ),
            (None, Some(g)) => (Some(inferred_tor_name(g)), TopologySource::Inferred),
            (None, None) => (
                None,
                self.place.as_ref().map(|p| p.source).unwrap_or_default(),
            ),
        }
    }
}

/// A measured link of the last permutation round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkView {
    /// Sending member (index into `members`).
    pub src: usize,
    /// Receiving member.
    pub dst: usize,
    /// Exchange bandwidth, bytes per second.
    pub bytes_per_second: f64,
}

/// The last probe ring all-reduce.
#[derive(Debug, Clone, PartialEq)]
pub struct RingResult {
    /// Algorithm the engine chose.
    pub algo: String,
    /// Buffer size, bytes.
    pub bytes: usize,
    /// Bus bandwidth, bytes per second.
    pub busbw: f64,
    /// The α-β model's busbw for the same all-reduce, from the costs measured when the
    /// group formed: what the fabric delivered then, for comparison with `busbw` now.
    pub expected_busbw: Option<f64>,
}

/// Durations of one kind of probe collective.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveDurations {
    /// Operation, e.g. `all_reduce`.
    pub op: String,
    /// Buffer size, bytes.
    pub bytes: usize,
    /// Observed durations, seconds.
    pub seconds: Histogram,
}

/// The persistence horizon an engine applies now to a straggler (a port, on the device
/// plane) that nothing corroborates and whose own counters report no run under way, with
/// what it rests on: for the operator who sees a slow node wait longer than
/// `uncorroborated_hold`, and wants to know why and for how long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Horizon {
    /// Rounds of the engine's plane.
    pub rounds: usize,
    /// The configured horizon (`uncorroborated_hold`): `rounds` is longer only when learnt.
    pub configured: usize,
    /// The congestion runs and the slow episodes that ended by themselves the horizon is
    /// learnt from: those of at least 30 rounds, the ended ones remembered and the runs
    /// under way (fewer than three of either kind teach nothing).
    pub runs: usize,
}

impl Horizon {
    /// Whether the horizon is learnt: longer than configured.
    pub fn learnt(&self) -> bool {
        self.rounds > self.configured
    }
}

/// What probing exports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeSnapshot {
    /// Probing runs and the group is formed.
    pub active: bool,
    /// Every candidate member, in candidate order.
    pub members: Vec<MemberView>,
    /// Last permutation round's links.
    pub links: Vec<LinkView>,
    /// The round's small all-reduce, seconds: the median of the members' own timings that
    /// are finite, not negative and within the exec timeout (None when none is).
    pub latency: Option<f64>,
    /// Members' latency reports left out of [`Self::latency`] since start (not finite,
    /// negative, or longer than the exec timeout).
    pub latency_reports_dropped: u64,
    /// Last ring all-reduce.
    pub ring: Option<RingResult>,
    /// Rounds completed.
    pub rounds_ok: u64,
    /// Rounds that failed (including failures to form the group).
    pub rounds_failed: u64,
    /// Probe payload bytes sent by this node.
    pub bytes_sent: u64,
    /// Members of the current group (0 while it is not formed).
    pub group_members: usize,
    /// The wire version the group speaks: the highest every member supports (None while
    /// it is not formed).
    pub wire_version: Option<u8>,
    /// Whether the formed group's members proved who they are with certificates (None
    /// while it is not formed).
    pub certificate_mode: Option<bool>,
    /// Gathered blocks (rows, plans, device-plane rows) whose author's signature failed
    /// since start, by the name of the first member that relayed them (see
    /// `collective::authorship::Forgery::relay`).
    pub forged_rows: std::collections::BTreeMap<String, u64>,
    /// Whether the membership view is stale (probing stopped, fail-closed).
    pub membership_stale: bool,
    /// Fabric verdict.
    pub fabric_degraded: bool,
    /// The members of the last round's crowd (many steadily slow at once, or every member
    /// of a ToR: a shared cause, not each member's doing), by candidate index; empty
    /// without one.
    pub crowd: Vec<usize>,
    /// Pairs the engine judged degraded links (src, dst) in the last round.
    pub link_degraded: Vec<(usize, usize)>,
    /// Pairs (src, dst) whose evidence made a link verdict in the last round but which
    /// other links, sharing no end with them, were slow together with (a shared cause:
    /// no verdict while it lasts).
    pub link_withheld: Vec<(usize, usize)>,
    /// The ToRs the engine judged in the last round (those with enough members in the
    /// group, and another ToR to judge them against), with their verdict: empty without
    /// topology or in a group behind one ToR.
    pub tors: Vec<TorView>,
    /// The ToRs whose uplinks the engine marked slow in the last round (their members slow
    /// with the rest of the group, not with each other): empty without one, or without
    /// topology.
    pub tor_uplinks: Vec<TorUplinksView>,
    /// The last round's spine verdict (a partial fabric event with a spine's shape):
    /// empty without one, or without topology.
    pub spines: Vec<SpineView>,
    /// Lasting changes that became the normal since start (their verdicts ended).
    pub normal_changes: NormalChanges,
    /// The persistence horizon the host-plane engine applies now (None before its first
    /// round).
    pub horizon: Option<Horizon>,
    /// Latest transitions (bounded), with reasons and evidence.
    pub transitions: VecDeque<Transition>,
    /// Why probing is inactive, if it is.
    pub last_error: Option<String>,
    /// The same, as a bounded label (`hcclwatch_probe_paused{reason}`).
    pub pause_reason: Option<PauseReason>,
    /// Bytes sent in the last hour ÷ the budget (None without a budget).
    pub budget_ratio: Option<f64>,
    /// Seconds spent in probe rounds in the last hour ÷ (3600 × the busy budget) (None
    /// without one).
    pub busy_ratio: Option<f64>,
    /// Whether the group is running reduced rounds because a strict majority of its members
    /// is over budget.
    pub budget_limited: bool,
    /// Distinct peers this node exchanged with over the last n − 1 rounds ÷ (n − 1).
    pub coverage: f64,
    /// Latency-sized ping-pong round trips this node measured to its permutation peer.
    pub link_rtt: Histogram,
    /// Per quarantine reason: seconds from a member's episode onset (its first transition
    /// out of healthy or probation) to its quarantine recommendation, as this node's engine
    /// saw them.
    pub onset_to_recommendation: BTreeMap<QuarantineReason, Histogram>,
    /// This node's collective durations by (op, size).
    pub collective_durations: Vec<CollectiveDurations>,
    /// The device plane, when this node probes it.
    pub device: Option<DeviceView>,
    /// Incoming probe connections refused before they proved the key, by reason.
    pub handshakes_rejected: Vec<(&'static str, u64)>,
    /// Whether this node's last uplink read succeeded for every signal that is on (None
    /// before the first read, or with the reader off).
    pub congestion_source_up: Option<bool>,
    /// This node's failed uplink reads since start.
    pub congestion_read_errors: u64,
    /// This node's own inferred ToR group (see [`MemberView::inferred_tor`]).
    pub own_inferred_tor: Option<u32>,
    /// This node's NPUs (physical ids) whose own hard fault recommends isolating them, with
    /// the reason label (`health.hard_npu_scoped`); refreshed each probe round.
    pub npu_isolation: Vec<(u32, &'static str)>,
}

/// One ToR (leaf switch) of the group, as the health engine judged it last round.
#[derive(Debug, Clone, PartialEq)]
pub struct TorView {
    /// Its name, as the members' topology gave it.
    pub name: String,
    /// Its members (indices into `members`).
    pub members: Vec<usize>,
    /// The ToR verdict: its members are slow together against the ToR's learned normal.
    /// For the network team; never a node's, port's or link's verdict.
    pub degraded: bool,
    /// While degraded: how much slower than its normal its members' probes are (a ratio,
    /// above 1).
    pub slowdown_ratio: Option<f64>,
}

/// A ToR whose uplinks are slow, by name: its members are slow with the rest of the group
/// while the probes between two of them are not, so what slows them lies past the ToR (its
/// uplinks, or the switches behind them). For the network team; it makes no ToR verdict
/// itself (the ToR's own probes are fine; one may begin while the mark is held), and none
/// of its members is quarantined for it.
#[derive(Debug, Clone, PartialEq)]
pub struct TorUplinksView {
    /// Its name, as the members' topology gave it.
    pub name: String,
    /// Its members (indices into `members`).
    pub members: Vec<usize>,
    /// How much slower its members' probes with the other ToRs are than the rest of the
    /// group's (a ratio above 1), as the last round that showed the mark measured it: the
    /// mark and this value are held, unchanged, for two windows of rounds after it.
    pub slowdown_ratio: f64,
}

/// A spine verdict by name: a dip on a share of the pairs between ToRs, spread over them,
/// sparing the pairs within ToRs, which is how a spine (one of several that ECMP spreads
/// the pairs over) looks from the nodes. For the network team; never a node's or link's.
#[derive(Debug, Clone, PartialEq)]
pub struct SpineView {
    /// The spine group the ToRs it reached sit under, from the topology: one name, the
    /// names joined by `+` when they sit under several (the layer above), or `unknown`
    /// when no source gave a spine group.
    pub name: String,
    /// The ToRs it reached (their pairs to other ToRs slowed alike), by name.
    pub tors: Vec<String>,
    /// The members on those ToRs (indices into `members`).
    pub members: Vec<usize>,
    /// The distinct ToR pairs it slowed.
    pub tor_pairs: usize,
    /// The share of the measurements between ToRs it slowed (about one over the spines).
    pub cross_share: f64,
    /// The share of the measurements within ToRs it slowed (about zero).
    pub inner_share: f64,
}

/// Lasting changes that became the new normal, counted since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NormalChanges {
    /// Of the group's round median (the fabric verdict ended).
    pub fabric: u64,
    /// Of a ToR's level (its ToR verdict ended).
    pub tor: u64,
    /// Of a partial fabric event (a dip): its pairs became the normal (the fabric verdict
    /// ended; they make no link verdict while they stay slow).
    pub dip: u64,
}

/// One NPU port of the group on the device plane.
#[derive(Debug, Clone, PartialEq)]
pub struct PortView {
    /// Owning member (index into `members`).
    pub node: usize,
    /// Physical NPU id (the `npu` label).
    pub npu: u32,
    /// RoCE device IP.
    pub ip: Ipv4Addr,
    /// Its state.
    pub state: NodeState,
    /// Packets through it in the engine's window.
    pub window_packets: u32,
    /// Of which lost.
    pub window_lost: u32,
    /// Window median log RTT residual against the round median.
    pub rtt_residual: Option<f64>,
}

/// A port's state change.
#[derive(Debug, Clone, PartialEq)]
pub struct PortTransitionView {
    /// Engine round.
    pub round: u64,
    /// Port index into `ports`.
    pub port: usize,
    /// Owning member.
    pub node: usize,
    /// Physical NPU id.
    pub npu: u32,
    /// Old state.
    pub from: NodeState,
    /// New state.
    pub to: NodeState,
    /// Why.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Vec<(String, f64)>,
}

/// One of this node's pings of the last round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedPing {
    /// Source port index.
    pub src: usize,
    /// Destination port index.
    pub dst: usize,
    /// Packets sent.
    pub sent: u32,
    /// Answers.
    pub received: u32,
    /// Mean round trip, seconds.
    pub rtt: Option<f64>,
}

/// This node's pings from one local NPU, since start.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalPings {
    /// Physical NPU id.
    pub npu: u32,
    /// Round trips of the answers.
    pub rtt: Histogram,
    /// Packets sent.
    pub sent: u64,
    /// Answers received.
    pub received: u64,
    /// Pings that measured nothing, by reason.
    pub failures: BTreeMap<&'static str, u64>,
}

/// What one of this node's NPU ports' own counters said over the port poller's latest
/// interval: the device engine's evidence besides the pings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConditionView {
    /// Physical NPU id.
    pub npu: u32,
    /// Pause frames or congestion notifications arrived.
    pub congested: bool,
    /// The hardware signs it showed, as labels of [`HARDWARE_SIGNS`].
    pub hardware_signs: Vec<&'static str>,
}

/// The device plane as this node sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceView {
    /// This node's own member index (its ports are the local ones).
    pub me: Option<usize>,
    /// Every NPU port of the group.
    pub ports: Vec<PortView>,
    /// A large share of the fabric (or a ToR) is bad: no port or node escalates.
    pub fabric_degraded: bool,
    /// Members most of whose ports are bad.
    pub node_verdicts: Vec<usize>,
    /// Port pairs judged bad (a cable or a path), by port index.
    pub pair_verdicts: Vec<(usize, usize)>,
    /// ToRs most of whose NPU ports are bad: verdicts on the switches.
    pub tor_verdicts: Vec<DeviceTorView>,
    /// The last device-plane round's spine verdict (a partial fabric event on the NPU
    /// ports' pings with a spine's shape); empty without one.
    pub spines: Vec<SpineView>,
    /// This node's pings of the last round.
    pub planned: Vec<PlannedPing>,
    /// This node's ping counters per local NPU.
    pub local: Vec<LocalPings>,
    /// What this node's own NPU ports' counters said over the port poller's latest
    /// interval (ports with a reading only).
    pub conditions: Vec<PortConditionView>,
    /// Latest port transitions.
    pub transitions: VecDeque<PortTransitionView>,
    /// Device-engine rounds.
    pub rounds: u64,
    /// The persistence horizon the device-plane engine applies now, in device rounds (None
    /// before its first round).
    pub horizon: Option<Horizon>,
    /// Times the partial-fabric base rate (the share of NPU pings slow on their own) was
    /// learnt again since start: a higher share lasted 180 partial fabric events with no
    /// quiet round between (an hour at the shipped device interval) and became the normal.
    pub normal_changes: u64,
    /// Times the round median's normal was learnt again since start: the NPU pings stayed
    /// slower than it by the RTT ratio for 180 device rounds in a row (an hour at the
    /// shipped device interval), and that level became the normal (the fabric event it
    /// made ends).
    pub median_changes: u64,
    /// The HCCS ping mesh (Atlas A3), when this node drives it or found it unavailable.
    pub hccs: Option<HccsView>,
}

/// A device-plane ToR verdict, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTorView {
    /// The ToR's name (as the topology gives it).
    pub tor: String,
    /// Its members present (member indices).
    pub members: Vec<usize>,
    /// Their NPU ports judged.
    pub ports: usize,
    /// Of which elevated against the fabric.
    pub elevated: usize,
    /// The ToR's loss rate: median over its ports of their window loss ratio.
    pub loss_ratio: f64,
    /// The ToR's RTT level: median log RTT residual of its ports against the round.
    pub rtt_level: f64,
    /// This round's loss ratio on the pings crossing it, when that loss would make it an
    /// event on its own.
    pub crossing_loss_ratio: Option<f64>,
    /// This round's share of slow pings among those crossing it, when that share would
    /// make it an event on its own.
    pub crossing_slow_share: Option<f64>,
    /// Device-plane rounds in a row.
    pub rounds: u64,
}

/// Whether this node runs the HCCS ping mesh, or why not: the bounded `state` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HccsState {
    /// Not decided yet (no NPU inventory to ask on).
    Pending,
    /// Tasks run (or will, once destinations are known).
    Running,
    /// The NPU refuses it (`-8255`: not an Atlas A3).
    NotSupported,
    /// The driver's DCMI library lacks the functions.
    MissingFunction,
    /// Not root, or an unprivileged container (`-8002`).
    NotPermitted,
}

impl HccsState {
    /// Every state, in order.
    pub const ALL: [HccsState; 5] = [
        HccsState::Pending,
        HccsState::Running,
        HccsState::NotSupported,
        HccsState::MissingFunction,
        HccsState::NotPermitted,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            HccsState::Pending => "pending",
            HccsState::Running => "running",
            HccsState::NotSupported => "not_supported",
            HccsState::MissingFunction => "missing_function",
            HccsState::NotPermitted => "not_permitted",
        }
    }
}

/// A destination of a local NPU's HCCS ping mesh that lost packets in the last read.
#[derive(Debug, Clone, PartialEq)]
pub struct HccsLossy {
    /// The destination's owning member (index into `members`).
    pub node: usize,
    /// Its physical NPU id.
    pub npu: u32,
    /// Lost ÷ sent packets since the read before.
    pub loss_ratio: f64,
}

/// One local NPU's HCCS ping mesh, since start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalHccs {
    /// Physical NPU id.
    pub npu: u32,
    /// Per destination and read, the average round trip the task reports.
    pub rtt: Histogram,
    /// Packets sent (answered + lost), summed over reads.
    pub sent: u64,
    /// Packets answered.
    pub received: u64,
    /// Destination readings dropped as implausible (a negative, huge or non-finite value,
    /// an address the task was not given).
    pub invalid: u64,
    /// Tasks found stopped (a chip reset) and started again.
    pub restarts: u64,
    /// Destinations in the tasks now running.
    pub destinations: usize,
    /// Destinations that lost packets in the last read, in (node, npu) order.
    pub lossy: Vec<HccsLossy>,
}

/// The HCCS ping mesh as this node drives it.
#[derive(Debug, Clone, PartialEq)]
pub struct HccsView {
    /// Running, or why not.
    pub state: HccsState,
    /// Per local NPU that has destinations.
    pub local: Vec<LocalHccs>,
}

impl ProbeSnapshot {
    /// The NPUs of member `node` whose ports the device plane recommends for quarantine.
    pub fn bad_npus(&self, node: usize) -> Vec<u32> {
        self.device
            .iter()
            .flat_map(|d| &d.ports)
            .filter(|p| p.node == node && p.state == NodeState::QuarantineRecommended)
            .map(|p| p.npu)
            .collect()
    }

    /// A member's name by index; the index itself for one that is gone.
    pub fn name(&self, i: usize) -> String {
        self.members
            .get(i)
            .map_or_else(|| i.to_string(), |m| m.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::topology::{NodePlace, Place, TopologySource};

    fn member(place: Option<NodePlace>, inferred_tor: Option<u32>) -> MemberView {
        MemberView {
            up: true,
            place,
            inferred_tor,
            ..MemberView::new("n")
        }
    }

    #[test]
    fn a_source_s_tor_comes_first_then_the_inferred_group_then_nothing() {
        let at = |tor: Option<&str>, sp: Option<&str>, source| NodePlace {
            place: Place {
                tor: tor.map(String::from),
                super_pod: sp.map(String::from),
                ..Place::default()
            },
            source,
        };
        let labels = at(Some("tor-a"), None, TopologySource::NodeLabels);
        assert_eq!(
            member(Some(labels), Some(3)).tor(),
            (Some("tor-a".into()), TopologySource::NodeLabels)
        );
        let sp = at(None, Some("sp0"), TopologySource::RankTable);
        assert_eq!(
            member(Some(sp.clone()), Some(3)).tor(),
            (Some("inferred-3".into()), TopologySource::Inferred)
        );
        assert_eq!(
            member(Some(sp), None).tor(),
            (None, TopologySource::RankTable)
        );
        assert_eq!(member(None, None).tor(), (None, TopologySource::None));
    }
}
