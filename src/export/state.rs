//! `/api/v1/state`: the probe group and the health engine's verdicts as JSON, for people
//! and for tools (the demo's live view reads it).
//!
//! The types here are the documented schema (`docs/state.schema.json`, checked against the
//! daemon's real output in `tests/state_api.rs`); they are built from the typed
//! [`ProbeSnapshot`], never assembled ad hoc.

use serde::Serialize;

use crate::snapshot::overrides::{Override, OverridesSnapshot};
use crate::snapshot::probe::{DeviceView, Horizon, ProbeSnapshot, SpineView, Transition};

/// The whole response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct State {
    /// Probing runs and the group is formed.
    pub active: bool,
    /// Why probing is paused, if it is.
    pub last_error: Option<String>,
    /// Rounds by result.
    pub rounds: Rounds,
    /// The whole group is slow against its baseline (blocks quarantine recommendations).
    pub fabric_degraded: bool,
    /// The last round's crowd: members slow together (a shared cause), not escalated while
    /// it lasts; empty without one.
    pub crowd: Vec<String>,
    /// Pairs judged degraded links.
    pub link_degraded: Vec<Pair>,
    /// Pairs whose evidence made a link verdict in the last round but which other links
    /// were slow together with (a shared cause: no verdict while it lasts).
    pub link_withheld: Vec<Pair>,
    /// The ToRs judged last round (enough members in the group), with their verdicts.
    pub tors: Vec<Tor>,
    /// The ToRs whose uplinks are marked slow (their members slow with the rest of the
    /// group, not with each other); empty without one.
    pub tor_uplinks: Vec<TorUplinks>,
    /// The last round's spine verdict (a dip with a spine's shape); empty without one.
    pub spines: Vec<Spine>,
    /// Lasting changes that became the new normal since start.
    pub normal_changes: NormalChanges,
    /// The persistence horizon the engine applies now; null before its first round.
    pub persistence_horizon: Option<PersistenceHorizon>,
    /// The group as formed.
    pub membership: Membership,
    /// Every candidate member, in candidate order.
    pub members: Vec<Member>,
    /// The last permutation round's links.
    pub matrix: Vec<Link>,
    /// The latest state changes, oldest first, with their evidence.
    pub transitions: Vec<TransitionView>,
    /// The device plane (NPU ports), when this node probes it.
    pub device: Option<Device>,
    /// This node's operator overrides, and its own verdict beside what is exported; null
    /// while their source is off ([`State::with_overrides`]).
    #[serde(rename = "override")]
    pub overrides: Option<OverrideState>,
}

/// One operator override that holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldView {
    /// The NPU, for a per-NPU override; null for the node's.
    pub npu: Option<u32>,
    /// `healthy` or `quarantined`.
    pub state: &'static str,
    /// When it ends (RFC 3339).
    pub until: String,
    /// Why.
    pub reason: String,
    /// Who set it.
    pub by: String,
}

impl HeldView {
    fn new(npu: Option<u32>, o: &Override) -> Self {
        Self {
            npu,
            state: o.state.as_str(),
            until: o.until_text(),
            reason: o.reason.clone(),
            by: o.by.clone(),
        }
    }
}

/// This node's operator overrides as the daemon applies them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverrideState {
    /// This node.
    pub node: String,
    /// The overrides that hold (the node's, then each NPU's).
    pub held: Vec<HeldView>,
    /// This node's state as the health engine judges it, override or not (null when it is
    /// not a member of the group).
    pub engine_state: Option<&'static str>,
    /// The engine's quarantine reason for this node, override or not.
    pub engine_quarantine: Option<&'static str>,
    /// The quarantine recommendation exported for this node after the override
    /// (`operator_override` under a quarantined one; null under a healthy one).
    pub exported_quarantine: Option<&'static str>,
    /// Override annotations that were refused, with why.
    pub refused: Vec<String>,
    /// Why the annotations could not be read (then no override is applied).
    pub error: Option<String>,
}

impl State {
    /// Adds this node's overrides, as the exporter applies them.
    pub fn with_overrides(mut self, p: &ProbeSnapshot, o: Option<&OverridesSnapshot>) -> Self {
        self.overrides = o.map(|o| {
            let index = p.members.iter().position(|m| m.name == o.node);
            let me = index.map(|i| &p.members[i]);
            let engine_quarantine = me.and_then(|m| m.quarantine.map(|q| q.as_str()));
            let bad = index.map(|i| p.bad_npus(i)).unwrap_or_default();
            let exported_quarantine = o.active.apply(engine_quarantine, &bad);
            let mut held: Vec<HeldView> = o
                .active
                .node
                .iter()
                .map(|n| HeldView::new(None, n))
                .collect();
            held.extend(
                o.active
                    .npus
                    .iter()
                    .map(|(i, n)| HeldView::new(Some(*i), n)),
            );
            OverrideState {
                node: o.node.clone(),
                held,
                engine_state: me.map(|m| m.state.as_str()),
                engine_quarantine,
                exported_quarantine,
                refused: o.refused.clone(),
                error: o.error.clone(),
            }
        });
        self
    }
}

/// One ToR as the health engine judged it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tor {
    /// Its name.
    pub tor: String,
    /// Its members.
    pub members: Vec<String>,
    /// The ToR verdict (the switch's, never its members').
    pub degraded: bool,
    /// While degraded: its members' probes against its normal (a ratio above 1).
    pub slowdown_ratio: Option<f64>,
}

/// A ToR whose uplinks are slow: what slows its members lies past it (no ToR verdict, no
/// member quarantined for it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorUplinks {
    /// Its name.
    pub tor: String,
    /// Its members.
    pub members: Vec<String>,
    /// Its members' probes with the other ToRs against the rest of the group's, as the
    /// last round that showed the mark measured it (a ratio above 1; held unchanged while
    /// the mark is).
    pub slowdown_ratio: f64,
}

/// A spine verdict: a share of the pairs between ToRs slow, spread over them, the pairs
/// within ToRs spared (the switch's, never a node's or link's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spine {
    /// The spine group of its ToRs (`a+b` for several, `unknown` without one).
    pub spine: String,
    /// The ToRs it reached (their pairs to other ToRs slowed alike).
    pub tors: Vec<String>,
    /// The members on those ToRs.
    pub members: Vec<String>,
    /// The distinct ToR pairs it slowed.
    pub tor_pairs: usize,
    /// Share of the measurements between ToRs it slowed.
    pub cross_share: f64,
    /// Share of the measurements within ToRs it slowed.
    pub inner_share: f64,
}

impl Spine {
    /// The state form of a spine verdict of `p`'s group (members by name).
    fn of(p: &ProbeSnapshot, s: &SpineView) -> Self {
        Spine {
            spine: s.name.clone(),
            tors: s.tors.clone(),
            members: s.members.iter().map(|&i| p.name(i)).collect(),
            tor_pairs: s.tor_pairs,
            cross_share: s.cross_share,
            inner_share: s.inner_share,
        }
    }
}

/// Lasting changes that became the normal, since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NormalChanges {
    /// Of the group's round median.
    pub fabric: u64,
    /// Of a ToR's level.
    pub tor: u64,
    /// Of a dip (a partial fabric event): its pairs became the normal.
    pub dip: u64,
}

/// One NPU port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    /// Owning member.
    pub node: String,
    /// Physical NPU id.
    pub npu: u32,
    /// RoCE device IP.
    pub ip: String,
    /// Its state.
    pub state: &'static str,
    /// Packets through it in the engine's window.
    pub window_packets: u32,
    /// Of which lost.
    pub window_lost: u32,
    /// Window median log RTT residual against the round median.
    pub rtt_residual: Option<f64>,
}

/// A pair of NPU ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortPair {
    /// Source member.
    pub src_node: String,
    /// Source NPU.
    pub src_npu: u32,
    /// Destination member.
    pub dst_node: String,
    /// Destination NPU.
    pub dst_npu: u32,
}

/// A port's state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortTransition {
    /// Device-engine round.
    pub round: u64,
    /// Owning member.
    pub node: String,
    /// Physical NPU id.
    pub npu: u32,
    /// Old state.
    pub from: &'static str,
    /// New state.
    pub to: &'static str,
    /// Why.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Vec<Evidence>,
}

/// The device plane.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// Device-engine rounds.
    pub rounds: u64,
    /// Times the share of NPU pings slow on their own (the partial-fabric base rate) was
    /// learnt again since start, after 180 partial fabric events with no quiet round
    /// between (an hour at the shipped device interval).
    pub normal_changes: u64,
    /// Times the NPU pings' round median was learnt again since start, after 180 device
    /// rounds in a row above its normal (the fabric event it made ends).
    pub median_changes: u64,
    /// The persistence horizon the device engine applies now, in device rounds; null
    /// before its first round.
    pub persistence_horizon: Option<PersistenceHorizon>,
    /// A large share of the NPU fabric (or a ToR) is bad: no port or node verdict.
    pub fabric_degraded: bool,
    /// Members most of whose ports are bad.
    pub node_verdicts: Vec<String>,
    /// Port pairs judged bad.
    pub pair_verdicts: Vec<PortPair>,
    /// ToRs most of whose members' NPU ports are bad: verdicts on the switches.
    pub tor_verdicts: Vec<DeviceTor>,
    /// The last device-plane round's spine verdict (NPU pings between ToRs slow, spread
    /// over them, those within ToRs spared); empty without one or without topology.
    pub spines: Vec<Spine>,
    /// Every NPU port of the group.
    pub ports: Vec<Port>,
    /// The latest port state changes, oldest first.
    pub transitions: Vec<PortTransition>,
}

/// How long a straggler (or NPU port) that nothing corroborates must stay steadily slow
/// before its quarantine is recommended, and what that rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PersistenceHorizon {
    /// Rounds of the plane.
    pub rounds: usize,
    /// The configured horizon (`health.uncorroborated_hold` on the host plane).
    pub configured_rounds: usize,
    /// Whether it is learnt from the congestion the counters reported and the slow
    /// episodes that ended by themselves (longer than configured).
    pub learnt: bool,
    /// The congestion runs and self-ended slow episodes it rests on (at least 30 rounds
    /// each; fewer than 3 of either kind teach nothing).
    pub congestion_runs: usize,
}

impl From<Horizon> for PersistenceHorizon {
    fn from(h: Horizon) -> Self {
        PersistenceHorizon {
            rounds: h.rounds,
            configured_rounds: h.configured,
            learnt: h.learnt(),
            congestion_runs: h.runs,
        }
    }
}

/// A device-plane ToR verdict, with its members and evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceTor {
    /// The ToR, as the topology names it.
    pub tor: String,
    /// Its members present in the group.
    pub members: Vec<String>,
    /// Their NPU ports judged this round.
    pub ports: usize,
    /// Of which lossy or slow against the fabric.
    pub elevated_ports: usize,
    /// The ToR's loss rate (median over its ports of their window loss ratio).
    pub loss_ratio: f64,
    /// Median window log RTT residual of its ports against the round.
    pub rtt_level: f64,
    /// This round's loss ratio on the pings crossing it, when that loss, unlikely against
    /// the group's other pings, would make it an event on its own (null otherwise).
    pub crossing_loss_ratio: Option<f64>,
    /// This round's share of slow pings among those crossing it (slow against the round,
    /// or against the learned normal when the round itself is slower), when that share,
    /// unlikely against the group's other pings and matched by its pings within, would
    /// make it an event on its own (null otherwise).
    pub crossing_slow_share: Option<f64>,
    /// Device-plane rounds in a row.
    pub rounds: u64,
}

fn evidence(e: &[(String, f64)]) -> Vec<Evidence> {
    e.iter()
        .map(|(what, value)| Evidence {
            what: what.clone(),
            value: *value,
        })
        .collect()
}

impl Device {
    fn new(p: &ProbeSnapshot, d: &DeviceView) -> Self {
        let port = |i: usize| {
            d.ports
                .get(i)
                .map_or((String::new(), 0), |x| (p.name(x.node), x.npu))
        };
        Device {
            rounds: d.rounds,
            normal_changes: d.normal_changes,
            median_changes: d.median_changes,
            persistence_horizon: d.horizon.map(PersistenceHorizon::from),
            fabric_degraded: d.fabric_degraded,
            node_verdicts: d.node_verdicts.iter().map(|n| p.name(*n)).collect(),
            pair_verdicts: d
                .pair_verdicts
                .iter()
                .map(|(a, b)| {
                    let ((src_node, src_npu), (dst_node, dst_npu)) = (port(*a), port(*b));
                    PortPair {
                        src_node,
                        src_npu,
                        dst_node,
                        dst_npu,
                    }
                })
                .collect(),
            tor_verdicts: d
                .tor_verdicts
                .iter()
                .map(|t| DeviceTor {
                    tor: t.tor.clone(),
                    members: t.members.iter().map(|n| p.name(*n)).collect(),
                    ports: t.ports,
                    elevated_ports: t.elevated,
                    loss_ratio: t.loss_ratio,
                    rtt_level: t.rtt_level,
                    crossing_loss_ratio: t.crossing_loss_ratio,
                    crossing_slow_share: t.crossing_slow_share,
                    rounds: t.rounds,
                })
                .collect(),
            spines: d.spines.iter().map(|s| Spine::of(p, s)).collect(),
            ports: d
                .ports
                .iter()
                .map(|x| Port {
                    node: p.name(x.node),
                    npu: x.npu,
                    ip: x.ip.to_string(),
                    state: x.state.as_str(),
                    window_packets: x.window_packets,
                    window_lost: x.window_lost,
                    rtt_residual: x.rtt_residual,
                })
                .collect(),
            transitions: d
                .transitions
                .iter()
                .map(|t| PortTransition {
                    round: t.round,
                    node: p.name(t.node),
                    npu: t.npu,
                    from: t.from.as_str(),
                    to: t.to.as_str(),
                    reason: t.reason.clone(),
                    evidence: evidence(&t.evidence),
                })
                .collect(),
        }
    }
}

/// Rounds by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rounds {
    /// Completed.
    pub ok: u64,
    /// Failed, including failures to form the group.
    pub failed: u64,
}

/// A directed pair of members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
}

/// The group as formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Membership {
    /// Members of the formed group (0 while it is not formed).
    pub group_members: usize,
    /// The member list could not be refreshed (probing stops, fail-closed).
    pub stale: bool,
}

/// One candidate member.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    /// Its name.
    pub node: String,
    /// It took part in the last round.
    pub up: bool,
    /// Its health state (`healthy`, `suspect`, `confirmed`, `quarantine_recommended`,
    /// `probation`).
    pub state: &'static str,
    /// Window score (median log residual against its peers), when measured this round.
    pub score: Option<f64>,
    /// Its arrival lag at the last barrier, seconds.
    pub arrival_lag_seconds: Option<f64>,
    /// Its ToR (leaf) switch, as it said at the group's formation; else, while no
    /// source gives it, the group of nodes whose slowdowns moved with its own
    /// (`inferred-<n>`); null when unknown.
    pub tor: Option<String>,
    /// Its spine group or pod; null when unknown.
    pub spine: Option<String>,
    /// Its super pod; null when unknown.
    pub super_pod: Option<String>,
    /// Where its place came from: `file`, `node_labels`, `hypernode`, `rank_table`,
    /// `inferred` (its ToR is an inferred group), or `none` when unknown.
    pub topology_source: &'static str,
    /// Why it is left out of the group for now (it broke a formation exchange, did not
    /// prove its identity, or speaks too old a wire version); null while it is not.
    pub excluded: Option<String>,
}

/// A measured link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
    /// Exchange bandwidth.
    pub bytes_per_second: f64,
}

/// One number behind a verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// What it is.
    pub what: String,
    /// Its value, always finite: the engines leave out a figure they did not measure.
    pub value: f64,
}

/// A state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionView {
    /// Engine round of the change.
    pub round: u64,
    /// The node.
    pub node: String,
    /// Old state.
    pub from: &'static str,
    /// New state.
    pub to: &'static str,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Vec<Evidence>,
}

impl TransitionView {
    fn new(p: &ProbeSnapshot, t: &Transition) -> Self {
        Self {
            round: t.round,
            node: p.name(t.node),
            from: t.from.as_str(),
            to: t.to.as_str(),
            reason: t.reason.clone(),
            evidence: evidence(&t.evidence),
        }
    }
}

impl From<&ProbeSnapshot> for State {
    fn from(p: &ProbeSnapshot) -> Self {
        let pair = |a: usize, b: usize| Pair {
            src: p.name(a),
            dst: p.name(b),
        };
        State {
            active: p.active,
            last_error: p.last_error.clone(),
            rounds: Rounds {
                ok: p.rounds_ok,
                failed: p.rounds_failed,
            },
            fabric_degraded: p.fabric_degraded,
            crowd: p.crowd.iter().map(|&i| p.name(i)).collect(),
            link_degraded: p.link_degraded.iter().map(|(a, b)| pair(*a, *b)).collect(),
            link_withheld: p.link_withheld.iter().map(|(a, b)| pair(*a, *b)).collect(),
            tors: p
                .tors
                .iter()
                .map(|t| Tor {
                    tor: t.name.clone(),
                    members: t.members.iter().map(|&i| p.name(i)).collect(),
                    degraded: t.degraded,
                    slowdown_ratio: t.slowdown_ratio,
                })
                .collect(),
            tor_uplinks: p
                .tor_uplinks
                .iter()
                .map(|u| TorUplinks {
                    tor: u.name.clone(),
                    members: u.members.iter().map(|&i| p.name(i)).collect(),
                    slowdown_ratio: u.slowdown_ratio,
                })
                .collect(),
            spines: p.spines.iter().map(|s| Spine::of(p, s)).collect(),
            normal_changes: NormalChanges {
                fabric: p.normal_changes.fabric,
                tor: p.normal_changes.tor,
                dip: p.normal_changes.dip,
            },
            persistence_horizon: p.horizon.map(PersistenceHorizon::from),
            membership: Membership {
                group_members: p.group_members,
                stale: p.membership_stale,
            },
            members: p
                .members
                .iter()
                .map(|m| {
                    let (tor, source) = m.tor();
                    Member {
                        node: m.name.clone(),
                        up: m.up,
                        state: m.state.as_str(),
                        score: m.score,
                        arrival_lag_seconds: m.arrival_lag,
                        tor,
                        spine: m.place.as_ref().and_then(|p| p.place.spine.clone()),
                        super_pod: m.place.as_ref().and_then(|p| p.place.super_pod.clone()),
                        topology_source: source.as_str(),
                        excluded: m.excluded.clone(),
                    }
                })
                .collect(),
            matrix: p
                .links
                .iter()
                .map(|l| Link {
                    src: p.name(l.src),
                    dst: p.name(l.dst),
                    bytes_per_second: l.bytes_per_second,
                })
                .collect(),
            transitions: p
                .transitions
                .iter()
                .map(|t| TransitionView::new(p, t))
                .collect(),
            device: p.device.as_ref().map(|d| Device::new(p, d)),
            overrides: None,
        }
    }
}

/// The body of the 404 answer when probing is off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotEnabled {
    /// Why there is no state.
    pub error: &'static str,
}

impl NotEnabled {
    /// Probing is off in the configuration.
    pub const PROBING_OFF: NotEnabled = NotEnabled {
        error: "probing is not enabled (probe.enabled = false)",
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::probe::MemberView;

    /// The horizon is null before the first round, and says it is learnt only when it is
    /// longer than configured.
    #[test]
    fn the_horizon_says_whether_it_is_learnt() {
        assert_eq!(
            State::from(&ProbeSnapshot::default()).persistence_horizon,
            None
        );
        let state = |rounds| {
            let p = ProbeSnapshot {
                horizon: Some(Horizon {
                    rounds,
                    configured: 180,
                    runs: 4,
                }),
                ..ProbeSnapshot::default()
            };
            State::from(&p).persistence_horizon.map(|h| h.learnt)
        };
        assert_eq!((state(180), state(181)), (Some(false), Some(true)));
    }

    /// The device plane's horizon is its own, beside the host plane's.
    #[test]
    fn the_device_planes_horizon_is_its_own() {
        let h = |rounds| Horizon {
            rounds,
            configured: 180,
            runs: 3,
        };
        let p = ProbeSnapshot {
            horizon: Some(h(180)),
            device: Some(DeviceView {
                horizon: Some(h(450)),
                ..DeviceView::default()
            }),
            ..ProbeSnapshot::default()
        };
        let s = State::from(&p);
        let device = s.device.and_then(|d| d.persistence_horizon);
        assert_eq!(s.persistence_horizon.map(|h| h.learnt), Some(false));
        assert_eq!(device.map(|h| (h.rounds, h.learnt)), Some((450, true)));
    }

    /// The crowd is named by its members' names, in the engine's order.
    #[test]
    fn the_crowd_is_named_by_its_members() {
        let p = ProbeSnapshot {
            members: ["a", "b", "c"].map(MemberView::new).to_vec(),
            crowd: vec![2, 0],
            ..ProbeSnapshot::default()
        };
        assert_eq!(State::from(&p).crowd, ["c", "a"]);
        assert!(State::from(&ProbeSnapshot::default()).crowd.is_empty());
    }

    /// A ToR's slow uplinks are named by the ToR and its members' names, and the state
    /// that carries them, serialised as the daemon serves it, satisfies the documented
    /// schema (`docs/state.schema.json`); the schema rejects the entry without its ratio.
    #[test]
    fn slow_uplinks_are_named_and_match_the_schema() {
        let p = ProbeSnapshot {
            members: ["a", "b", "c"].map(MemberView::new).to_vec(),
            tor_uplinks: vec![crate::snapshot::probe::TorUplinksView {
                name: "leaf-2".into(),
                members: vec![2, 0],
                slowdown_ratio: 1.25,
            }],
            ..ProbeSnapshot::default()
        };
        let s = State::from(&p);
        assert_eq!(
            (s.tor_uplinks[0].tor.as_str(), &s.tor_uplinks[0].members),
            ("leaf-2", &vec!["c".to_string(), "a".to_string()])
        );
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/state.schema.json");
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let mut doc = serde_json::to_value(&s).unwrap();
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert_eq!(errors, Vec::<String>::new(), "{doc:#}");
        doc["tor_uplinks"][0]
            .as_object_mut()
            .unwrap()
            .remove("slowdown_ratio");
        assert!(!v.is_valid(&doc));
    }

    /// A withheld link is named by its ends, apart from the degraded ones.
    #[test]
    fn withheld_links_are_named_by_their_ends() {
        let p = ProbeSnapshot {
            members: ["a", "b", "c"].map(MemberView::new).to_vec(),
            link_degraded: vec![(0, 1)],
            link_withheld: vec![(2, 0)],
            ..ProbeSnapshot::default()
        };
        let s = State::from(&p);
        let ends = |v: &[Pair]| -> Vec<(String, String)> {
            v.iter().map(|x| (x.src.clone(), x.dst.clone())).collect()
        };
        assert_eq!(ends(&s.link_withheld), [("c".into(), "a".into())]);
        assert_eq!(ends(&s.link_degraded), [("a".into(), "b".into())]);
    }
}
