//! The report of a run: every verdict class judged against its budget, tables per fault
//! class, the false verdicts with their causes, what was not detected, the scenario's
//! expectation and the targets checked; in JSON also every verdict's span, every
//! entity's final state and the ground truth.

use std::collections::BTreeMap;

use serde::Serialize;

pub use super::classes::{ClassStats, VerdictSpan};
use super::expect::ExpectCheck;
pub use super::inference::InferenceAccuracy;
use super::run::Trace;
use super::scenario::{FaultKind, Plane, Shape};
use super::score::{FalseVerdict, LevelStats, Outcome, Scorer, percentile};
pub use super::text::text;
use super::truth::Truth;
use super::verdicts::Verdicts;
use super::world::World;

/// Fault episodes of one kind, plane, band and shape.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRow {
    /// Kind.
    pub kind: FaultKind,
    /// Plane judged.
    pub plane: Plane,
    /// Magnitude band.
    pub band: String,
    /// Shape.
    pub shape: Shape,
    /// Episodes.
    pub injected: usize,
    /// With a suspect (or stronger) verdict of the right entity.
    pub suspect: usize,
    /// With a confirmed (or stronger) verdict.
    pub confirmed: usize,
    /// With a quarantine recommendation.
    pub quarantine: usize,
    /// Detected, by this kind's detection verdict (slow node: quarantine; link: link
    /// verdict; port: suspect; pair: pair verdict; ToR, dip: fabric verdict; hard fault:
    /// quarantine).
    pub detected: usize,
    /// Detected with no verdict of another class on its elements.
    pub localised: usize,
    /// Rounds to suspect, p50 and p95 (missed episodes count as never).
    pub t_suspect: [Option<u64>; 2],
    /// Rounds to confirmed.
    pub t_confirm: [Option<u64>; 2],
    /// Rounds to the quarantine recommendation.
    pub t_recommend: [Option<u64>; 2],
    /// Rounds to detection.
    pub t_detect: [Option<u64>; 2],
}

/// Slow nodes (host plane, step) of one magnitude.
#[derive(Debug, Clone, Serialize)]
pub struct MagnitudeRow {
    /// Slowdown (fraction; the bin's lower edge when binned).
    pub magnitude: f64,
    /// Label, e.g. `slow node x1.20`.
    pub label: String,
    /// Episodes.
    pub injected: usize,
    /// Suspected.
    pub suspect: usize,
    /// Recommended for quarantine.
    pub quarantine: usize,
}

/// Counts of false verdicts by level and cause.
#[derive(Debug, Clone, Serialize)]
pub struct CauseCount {
    /// Level.
    pub level: String,
    /// Cause class.
    pub cause: String,
    /// Verdicts.
    pub count: usize,
}

/// One target, checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// The target.
    pub target: String,
    /// The measured value.
    pub value: String,
    /// Met (None: not judged here; `status` says why).
    pub ok: Option<bool>,
    /// `met`, `not met`, `nothing to judge` (never met: nothing in the run to judge it
    /// on), or `judged pooled` (too few episodes for one run; a batch judges it).
    pub status: &'static str,
}

/// Episodes the time targets leave out, by reason.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    /// Why.
    pub reason: String,
    /// Episodes.
    pub count: usize,
}

/// Every entity's state at the end of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FinalStates {
    /// Every node's host-plane state, by node number.
    pub nodes: Vec<&'static str>,
    /// Every NPU port's state, by global port number.
    pub ports: Vec<&'static str>,
    /// Nodes recommended for quarantine at the end (host engine or an NPU port).
    pub cordoned: Vec<usize>,
    /// Links with a verdict at the end.
    pub links: Vec<[usize; 2]>,
    /// Nodes with a device-plane node verdict at the end.
    pub device_nodes: Vec<usize>,
    /// Port pairs with a verdict at the end.
    pub pairs: Vec<[usize; 2]>,
    /// Groups with a host-plane fabric verdict at the end.
    pub fabric_host: Vec<usize>,
    /// Groups with a device-plane fabric verdict at the end.
    pub fabric_device: Vec<usize>,
}

/// The device plane's part.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// NPU ports.
    pub ports: usize,
    /// Port verdicts per level, device node and pair verdicts.
    pub levels: Vec<LevelStats>,
    /// Fabric verdicts (spans, all groups).
    pub fabric_verdicts: usize,
    /// Echo requests per second per NPU port at the scenario's cadence.
    pub requests_per_second_per_npu: f64,
    /// Requests and replies per second per NPU port.
    pub packets_per_second_per_npu: f64,
    /// The busiest port's requests and replies per second in its busiest round.
    pub peak_packets_per_second_per_npu: f64,
    /// Engine throughput.
    pub port_rounds_per_second: f64,
}

/// The findings of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Nodes.
    pub nodes: usize,
    /// Probe groups.
    pub groups: usize,
    /// NPU ports per node.
    pub npus_per_node: usize,
    /// Rounds.
    pub rounds: u64,
    /// Seconds per round.
    pub round_seconds: f64,
    /// Probe rounds per device-plane round.
    pub device_every: u64,
    /// Seed.
    pub seed: u64,
    /// Node-hours simulated.
    pub node_hours: f64,
    /// Node-hours of nodes without a node fault.
    pub healthy_node_hours: f64,
    /// Straggler precision at the quarantine level.
    pub precision: f64,
    /// Every class of verdict, judged against its budget (always, whatever the scenario
    /// injected).
    pub classes: Vec<ClassStats>,
    /// Host node verdicts (hard faults apart), per level.
    pub levels: Vec<LevelStats>,
    /// Host link verdicts.
    pub links: LevelStats,
    /// Fault episodes by kind, plane, band and shape.
    pub rows: Vec<FaultRow>,
    /// Step slow nodes by magnitude.
    pub by_magnitude: Vec<MagnitudeRow>,
    /// Smallest slowdown from which every magnitude row has ≥ 95 % recall: (suspect,
    /// quarantine).
    pub min_slowdown_95: (Option<f64>, Option<f64>),
    /// False suspects per 1000 healthy node-hours.
    pub false_suspects_per_1000_node_hours: f64,
    /// False quarantine recommendations (cordons: the host engine's and the NPU ports')
    /// per 1000 healthy node-hours.
    pub false_quarantines_per_1000_node_hours: f64,
    /// False quarantines that overlapped a fabric dip.
    pub quarantines_from_fabric_dips: usize,
    /// … a slow ToR.
    pub quarantines_from_tor: usize,
    /// … a congestion episode.
    pub quarantines_from_congestion: usize,
    /// False verdicts by level and cause.
    pub false_by_cause: Vec<CauseCount>,
    /// The first false verdicts, with their causes.
    pub false_verdicts: Vec<FalseVerdict>,
    /// The device plane.
    pub device: Option<DeviceReport>,
    /// Targets.
    pub targets: Vec<TargetCheck>,
    /// Every fault episode's outcome.
    pub episodes: Vec<Outcome>,
    /// Episodes the time targets leave out, by reason (of those they would time).
    pub left_out: Vec<LeftOut>,
    /// The scenario's `[expect]`, checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expectation: Option<ExpectCheck>,
    /// Every verdict, judged (empty in a pooled report).
    pub verdicts: Vec<VerdictSpan>,
    /// Every entity's final state (None in a pooled report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_states: Option<FinalStates>,
    /// The ground truth (None in a pooled report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth: Option<Truth>,
    /// The ToR inference's groups at the end of the run against the true ToRs (what a
    /// daemon that no source gives ToRs would infer); absent when the fleet has no ToRs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_inference: Option<InferenceAccuracy>,
    /// Lasting changes the host engines (and the device plane's, `device_partial` and
    /// `device_fabric`) took as the new normal, over the groups.
    pub normal_changes: NormalCounts,
    /// Host engine throughput.
    pub node_rounds_per_second: f64,
}

/// How many lasting changes became the new normal, by scope (as the daemon's
/// `hcclwatch_normal_changes_total{scope}` counts them, summed over the probe groups).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NormalCounts {
    /// Of a group's round median.
    pub fabric: usize,
    /// Of a ToR's level.
    pub tor: usize,
    /// Of a dip (a partial fabric event): its pairs became the normal.
    pub dip: usize,
    /// Of the device plane's share of slow pings (`device_partial`).
    pub device_partial: usize,
    /// Of the device plane's round median (`device_fabric`).
    pub device_fabric: usize,
}

impl NormalCounts {
    /// The counts of one run's trace.
    fn of(t: &Trace) -> Self {
        Self {
            fabric: t.new_normals.iter().filter(|x| x.2.is_none()).count(),
            tor: t.new_normals.iter().filter(|x| x.2.is_some()).count(),
            dip: t.dip_normals.len(),
            device_partial: t.device_normals.len(),
            device_fabric: t.device_median_normals.len(),
        }
    }

    /// The sum over several runs.
    pub fn sum<'a>(all: impl Iterator<Item = &'a NormalCounts>) -> Self {
        all.fold(Self::default(), |a, b| Self {
            fabric: a.fabric + b.fabric,
            tor: a.tor + b.tor,
            dip: a.dip + b.dip,
            device_partial: a.device_partial + b.device_partial,
            device_fabric: a.device_fabric + b.device_fabric,
        })
    }
}

/// The false verdicts, weightiest first (cordons and quarantines, then the other
/// verdicts, suspects last), and their counts by level and cause.
fn rank_falses(mut falses: Vec<FalseVerdict>) -> (Vec<FalseVerdict>, Vec<CauseCount>) {
    let weight = |l: &str| match l {
        "cordon" | "quarantine" | "port quarantine" => 0,
        "suspect" | "port suspect" => 2,
        _ => 1,
    };
    falses.sort_by_key(|f| (weight(&f.level), f.round));
    let mut causes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for f in &falses {
        *causes
            .entry((f.level.clone(), f.cause.clone()))
            .or_default() += 1;
    }
    let counts = causes
        .into_iter()
        .map(|((level, cause), count)| CauseCount {
            level,
            cause,
            count,
        })
        .collect();
    (falses, counts)
}

/// The scenario's written expectation checked against the run's cordons, if it has one.
fn expectation_of(w: &World, s: &Scorer<'_>) -> Option<super::expect::ExpectCheck> {
    let e = w.scenario.expect.as_ref()?;
    let within = e.within_rounds.map(|x| x.round() as u64);
    let cordons: Vec<super::expect::Cordon> = s
        .cordon_spans(true)
        .into_iter()
        .map(|c| super::expect::Cordon {
            node: c.who,
            start: c.start,
            end: c.end,
            reason: c.reason,
        })
        .collect();
    Some(super::expect::check(
        e, within, &w.faults, &w.topo, &cordons, w.rounds,
    ))
}

/// Scores a run into a report; `window` is the host engine's window (rounds).
pub fn report(w: &World, t: &Trace, window: u64) -> Report {
    let v = Verdicts::of(t, w.rounds, w.scenario.fleet.round_seconds);
    let truth = Truth::of(w);
    let s = Scorer::new(w, &truth, &v, window, t.device_every);
    let (node_hours, healthy) = s.node_hours();
    let outcomes = s.outcomes();
    let judged = s.judge(healthy);
    let by_class = |c: &str| {
        judged
            .classes
            .iter()
            .find(|x| x.class == c)
            .cloned()
            .unwrap_or_default()
    };
    let level = |c: &str, name: &str| level_of(&by_class(c), name);
    let levels = vec![
        level("node suspect", "suspect"),
        level("node confirmed", "confirmed"),
        level("node quarantine", "quarantine"),
    ];
    let device = (w.topo.npus > 0).then(|| {
        let lv = [
            "port suspect",
            "port confirmed",
            "port quarantine",
            "device node",
            "pair",
        ]
        .iter()
        .map(|c| level(c, c))
        .collect();
        device_report(w, t, &v, lv)
    });
    let (falses, false_by_cause) = rank_falses(judged.falses);
    let q_from = |class: &[&str]| {
        falses
            .iter()
            .filter(|f| f.level == "cordon")
            .filter(|f| class.iter().any(|c| f.cause == *c))
            .count()
    };
    let by_magnitude = magnitude_rows(&outcomes);
    let cordon = by_class("cordon");
    let expectation = expectation_of(w, &s);
    let final_states = final_states(w, t, &judged.spans);
    let mut r = Report {
        scenario: w.scenario.name.clone(),
        nodes: w.topo.nodes,
        groups: w.topo.groups.len(),
        npus_per_node: w.topo.npus,
        rounds: w.rounds,
        round_seconds: w.scenario.fleet.round_seconds,
        device_every: t.device_every.max(1),
        seed: w.scenario.fleet.seed,
        node_hours,
        healthy_node_hours: healthy,
        precision: levels[2].precision,
        false_suspects_per_1000_node_hours: levels[0].false_per_1000_node_hours,
        false_quarantines_per_1000_node_hours: cordon.false_per_1000_node_hours,
        links: level("link", "link"),
        classes: judged.classes.clone(),
        levels,
        rows: rows(&outcomes),
        min_slowdown_95: (min_95(&by_magnitude, false), min_95(&by_magnitude, true)),
        by_magnitude,
        quarantines_from_fabric_dips: q_from(&["fabric dip"]),
        quarantines_from_tor: q_from(&["slow ToR", "ToR congestion"]),
        quarantines_from_congestion: q_from(&[
            "uplink congestion",
            "ToR congestion",
            "spine congestion",
        ]),
        false_by_cause,
        false_verdicts: falses.into_iter().take(40).collect(),
        device,
        targets: Vec::new(),
        left_out: left_out(&outcomes),
        episodes: Vec::new(),
        expectation,
        verdicts: judged.spans,
        final_states: Some(final_states),
        truth: Some(truth),
        topology_inference: super::inference::measure(&t.inferred, &w.topo),
        normal_changes: NormalCounts::of(t),
        node_rounds_per_second: (w.topo.nodes as f64 * w.rounds as f64) / t.host_seconds.max(1e-9),
    };
    r.targets = super::targets::check(&r, &outcomes);
    r.episodes = outcomes;
    r
}

/// A class's stats in the older per-level shape (precision 1 when there is no verdict).
fn level_of(c: &ClassStats, name: &str) -> LevelStats {
    LevelStats {
        level: name.to_string(),
        verdicts: c.verdicts,
        correct: c.correct,
        precision: c.precision.unwrap_or(1.0),
        false_per_1000_node_hours: c.false_per_1000_node_hours,
    }
}

/// The episodes the time targets would time (≥ 20 % slow nodes and strong ports, step)
/// that they leave out, by reason.
pub(crate) fn left_out(outcomes: &[Outcome]) -> Vec<LeftOut> {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| timed_class(o)) {
        if let Some(r) = &o.left_out {
            *by.entry(r.clone()).or_default() += 1;
        }
    }
    by.into_iter()
        .map(|(reason, count)| LeftOut { reason, count })
        .collect()
}

/// Whether an episode is of a class a time target times: a step slow node of at least
/// 20 % on the host plane, or a step slow port of the strong band.
pub(crate) fn timed_class(o: &Outcome) -> bool {
    let step = o.shape == Shape::Step;
    let host = o.kind == FaultKind::SlowNode && o.plane == Plane::Host && o.magnitude >= 0.2 - 1e-9;
    let port = o.kind == FaultKind::SlowPort && o.band.starts_with('≥');
    step && (host || port)
}

fn final_states(w: &World, t: &Trace, spans: &[VerdictSpan]) -> FinalStates {
    let open = |class: &str| -> Vec<&VerdictSpan> {
        spans
            .iter()
            .filter(|s| s.class == class && s.last >= w.rounds)
            .collect()
    };
    let pairs = |class: &str| -> Vec<[usize; 2]> {
        open(class).iter().map(|s| [s.ids[0], s.ids[1]]).collect()
    };
    let ones = |class: &str| -> Vec<usize> { open(class).iter().map(|s| s.ids[0]).collect() };
    let mut cordoned: Vec<usize> = w
        .topo
        .groups
        .iter()
        .flatten()
        .copied()
        .filter(|n| t.final_nodes.get(*n) == Some(&crate::health::NodeState::QuarantineRecommended))
        .collect();
    let npus = w.topo.npus.max(1);
    cordoned.extend(
        t.final_ports
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == crate::health::NodeState::QuarantineRecommended)
            .map(|(p, _)| p / npus),
    );
    cordoned.sort_unstable();
    cordoned.dedup();
    FinalStates {
        nodes: t.final_nodes.iter().map(|s| s.as_str()).collect(),
        ports: t.final_ports.iter().map(|s| s.as_str()).collect(),
        cordoned,
        links: pairs("link"),
        device_nodes: ones("device node"),
        pairs: pairs("pair"),
        fabric_host: ones("fabric (host)"),
        fabric_device: ones("fabric (device)"),
    }
}

fn device_report(w: &World, t: &Trace, v: &Verdicts, levels: Vec<LevelStats>) -> DeviceReport {
    let ports = w.topo.nodes * w.topo.npus;
    let seconds = w.rounds as f64 * w.scenario.fleet.round_seconds;
    let per = |x: u64| x as f64 / ports.max(1) as f64 / seconds.max(1e-9);
    DeviceReport {
        ports,
        levels,
        fabric_verdicts: v.device_fabric.len(),
        requests_per_second_per_npu: per(t.traffic.requests),
        packets_per_second_per_npu: per(t.traffic.requests + t.traffic.replies),
        peak_packets_per_second_per_npu: t.traffic.max_port_round as f64
            / (w.scenario.fleet.round_seconds * t.device_every.max(1) as f64),
        port_rounds_per_second: ports as f64 * t.device_rounds as f64 / t.device_seconds.max(1e-9),
    }
}

/// p50 and p95 of the rounds to a verdict, a missed episode counting as never (so a p95
/// exists only when at least 95 % of the episodes got the verdict).
pub fn p50_p95(times: &[Option<u64>]) -> [Option<u64>; 2] {
    let pct = |p: f64| {
        let mut v: Vec<u64> = times.iter().map(|t| t.unwrap_or(u64::MAX)).collect();
        v.sort_unstable();
        percentile(&v, p).filter(|x| *x != u64::MAX)
    };
    [pct(0.5), pct(0.95)]
}

pub(crate) fn rows(outcomes: &[Outcome]) -> Vec<FaultRow> {
    let mut groups: BTreeMap<(FaultKind, Plane, &str, Shape), Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        groups
            .entry((o.kind, o.plane, o.band, o.shape))
            .or_default()
            .push(o);
    }
    groups
        .into_iter()
        .map(|((kind, plane, band, shape), os)| {
            let times = |f: fn(&Outcome) -> Option<u64>| {
                p50_p95(&os.iter().map(|o| f(o)).collect::<Vec<_>>())
            };
            let count = |f: fn(&Outcome) -> bool| os.iter().filter(|o| f(o)).count();
            FaultRow {
                kind,
                plane,
                band: band.to_string(),
                shape,
                injected: os.len(),
                suspect: count(|o| o.suspect.is_some()),
                confirmed: count(|o| o.confirmed.is_some()),
                quarantine: count(|o| o.quarantine.is_some()),
                detected: count(|o| o.detected.is_some()),
                localised: count(|o| o.localised),
                t_suspect: times(|o| o.suspect),
                t_confirm: times(|o| o.confirmed),
                t_recommend: times(|o| o.quarantine),
                t_detect: times(|o| o.detected),
            }
        })
        .collect()
}

/// Step slow nodes on the host plane by magnitude: exact values when there are few,
/// else bins of 2 %.
pub(crate) fn magnitude_rows(outcomes: &[Outcome]) -> Vec<MagnitudeRow> {
    let slow: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| {
            o.kind == FaultKind::SlowNode && o.plane == Plane::Host && o.shape == Shape::Step
        })
        .collect();
    let exact: std::collections::BTreeSet<i64> = slow
        .iter()
        .map(|o| (o.magnitude * 100.0).round() as i64)
        .collect();
    let width = if exact.len() <= 12 { 1 } else { 2 };
    let mut bins: BTreeMap<i64, Vec<&Outcome>> = BTreeMap::new();
    for o in slow {
        let pct = (o.magnitude * 100.0 + 1e-6).floor() as i64;
        let key = if width == 1 {
            (o.magnitude * 100.0).round() as i64
        } else {
            pct / width * width
        };
        bins.entry(key).or_default().push(o);
    }
    bins.into_iter()
        .map(|(k, os)| {
            let m = k as f64 / 100.0;
            let label = if width == 1 {
                format!("slow node x{:.2}", 1.0 + m)
            } else {
                format!(
                    "slow node x{:.2}–{:.2}",
                    1.0 + m,
                    1.0 + m + width as f64 / 100.0
                )
            };
            MagnitudeRow {
                magnitude: m,
                label,
                injected: os.len(),
                suspect: os.iter().filter(|o| o.suspect.is_some()).count(),
                quarantine: os.iter().filter(|o| o.quarantine.is_some()).count(),
            }
        })
        .collect()
}

/// The smallest magnitude from which every row (with at least 5 episodes) has ≥ 95 %
/// recall at suspect (or quarantine) level.
pub(crate) fn min_95(rows: &[MagnitudeRow], quarantine: bool) -> Option<f64> {
    let mut best = None;
    for r in rows.iter().rev().filter(|r| r.injected >= 5) {
        let hit = if quarantine { r.quarantine } else { r.suspect };
        if hit as f64 >= 0.95 * r.injected as f64 {
            best = Some(r.magnitude);
        } else {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each scope counts its own events: ToR and fabric changes apart by whether a ToR is
    /// named, dips and the device plane's renewals from their own lists; runs sum.
    #[test]
    fn normal_changes_count_each_scope_from_its_own_events() {
        let t = Trace {
            new_normals: vec![(10, 0, None), (20, 0, Some(3)), (30, 1, Some(4))],
            dip_normals: vec![(40, 1)],
            device_normals: vec![(50, 0), (60, 1), (70, 1)],
            device_median_normals: vec![(80, 2)],
            ..Trace::default()
        };
        let one = NormalCounts::of(&t);
        let want = NormalCounts {
            fabric: 1,
            tor: 2,
            dip: 1,
            device_partial: 3,
            device_fabric: 1,
        };
        assert_eq!(one, want);
        let two = NormalCounts::sum([one, one].iter());
        assert_eq!(two.device_partial, 6);
        assert_eq!(two.tor, 4);
    }
}
