//! The report of a run: tables per level and per fault class, the false verdicts with
//! their causes, what was not detected, and the targets checked — as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::run::Trace;
use super::scenario::{FaultKind, Plane, Shape};
use super::score::{FalseVerdict, LevelStats, Outcome, Scorer, percentile};
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
    /// Met (None: nothing in this scenario to judge it on).
    pub ok: Option<bool>,
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
    /// False quarantine recommendations per 1000 healthy node-hours.
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
    /// Host engine throughput.
    pub node_rounds_per_second: f64,
}

/// Scores a run into a report; `window` is the host engine's window (rounds).
pub fn report(w: &World, t: &Trace, window: u64) -> Report {
    let v = Verdicts::of(t, w.rounds);
    let s = Scorer::new(w, &v, window, t.device_every);
    let (node_hours, healthy) = s.node_hours();
    let outcomes = s.outcomes();
    let (levels, mut falses) = s.node_levels(healthy);
    let (links, link_falses) = s.link_levels(healthy);
    falses.extend(link_falses);
    let device = (w.topo.npus > 0).then(|| {
        let (lv, f) = s.device_levels(healthy);
        falses.extend(f);
        device_report(w, t, &v, lv)
    });
    // The weightiest first: quarantines, then the other verdicts, suspects last.
    let weight = |l: &str| match l {
        "quarantine" | "port quarantine" => 0,
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
    let q_from = |class: &[&str]| {
        falses
            .iter()
            .filter(|f| f.level == "quarantine" || f.level == "port quarantine")
            .filter(|f| class.iter().any(|c| f.cause == *c))
            .count()
    };
    let by_magnitude = magnitude_rows(&outcomes);
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
        false_quarantines_per_1000_node_hours: levels[2].false_per_1000_node_hours,
        levels,
        links,
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
        false_by_cause: causes
            .into_iter()
            .map(|((level, cause), count)| CauseCount {
                level,
                cause,
                count,
            })
            .collect(),
        false_verdicts: falses.into_iter().take(40).collect(),
        device,
        targets: Vec::new(),
        episodes: Vec::new(),
        node_rounds_per_second: (w.topo.nodes as f64 * w.rounds as f64) / t.host_seconds.max(1e-9),
    };
    r.targets = super::targets::check(&r, &outcomes);
    r.episodes = outcomes;
    r
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
                localised: count(|o| o.detected.is_some() && !o.wrong),
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

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |x| x.to_string())
}

fn pair(v: [Option<u64>; 2], secs: f64) -> String {
    match v {
        [Some(a), Some(b)] => format!("{a}/{b} ({:.0}/{:.0}s)", a as f64 * secs, b as f64 * secs),
        [a, b] => format!("{}/{}", opt(a), opt(b)),
    }
}

/// The report as text tables.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "hcclwatch simulate: scenario {:?}: {} nodes in {} probe groups{}, {} rounds of {} s ({:.1} h, {:.0} node-hours), seed {}\n",
        r.scenario,
        r.nodes,
        r.groups,
        if r.npus_per_node > 0 {
            format!(", {} NPU ports per node", r.npus_per_node)
        } else {
            String::new()
        },
        r.rounds,
        r.round_seconds,
        r.rounds as f64 * r.round_seconds / 3600.0,
        r.node_hours,
        r.seed
    );
    let _ = writeln!(s, "Host-plane verdicts (hard faults apart), per verdict:");
    let _ = writeln!(
        s,
        "{:<14} {:>8} {:>8} {:>10} {:>18}",
        "level", "verdicts", "correct", "precision", "false/1000 node-h"
    );
    for l in r.levels.iter().chain([&r.links]) {
        let _ = writeln!(
            s,
            "{:<14} {:>8} {:>8} {:>10.3} {:>18.3}",
            l.level, l.verdicts, l.correct, l.precision, l.false_per_1000_node_hours
        );
    }
    let false_quarantines = r.levels.get(2).map_or(0, |l| l.verdicts - l.correct);
    if false_quarantines == 0 && r.healthy_node_hours > 0.0 {
        let _ = writeln!(
            s,
            "no false quarantine in {:.0} healthy node-hours: the rate is below {:.4} per 1000 node-hours at 95 % confidence (rule of three)",
            r.healthy_node_hours,
            3.0 / r.healthy_node_hours * 1000.0
        );
    }
    let _ = writeln!(
        s,
        "precision {:.3} (quarantine level); false suspects {:.2} / 1000 node-h, false quarantines {:.3} / 1000 node-h\nquarantines from fabric dips {}, from ToR events {}, from congestion {}\n",
        r.precision,
        r.false_suspects_per_1000_node_hours,
        r.false_quarantines_per_1000_node_hours,
        r.quarantines_from_fabric_dips,
        r.quarantines_from_tor,
        r.quarantines_from_congestion
    );
    fault_table(&mut s, r);
    magnitude_table(&mut s, r);
    if let Some(d) = &r.device {
        let _ = writeln!(s, "Device plane ({} NPU ports), per verdict:", d.ports);
        let _ = writeln!(
            s,
            "{:<16} {:>8} {:>8} {:>10} {:>18}",
            "level", "verdicts", "correct", "precision", "false/1000 node-h"
        );
        for l in &d.levels {
            let _ = writeln!(
                s,
                "{:<16} {:>8} {:>8} {:>10.3} {:>18.3}",
                l.level, l.verdicts, l.correct, l.precision, l.false_per_1000_node_hours
            );
        }
        let _ = writeln!(
            s,
            "fabric verdicts {}; traffic {:.2} requests/s per NPU, {:.2} packets/s with replies (busiest port-round {:.2}/s); engine {:.0} port-rounds/s\n",
            d.fabric_verdicts,
            d.requests_per_second_per_npu,
            d.packets_per_second_per_npu,
            d.peak_packets_per_second_per_npu,
            d.port_rounds_per_second
        );
    }
    causes(&mut s, r);
    let _ = writeln!(s, "Targets:");
    for t in &r.targets {
        let mark = match t.ok {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "n/a",
        };
        let _ = writeln!(s, "  [{mark:>7}] {}: {}", t.target, t.value);
    }
    let _ = writeln!(s, "\nengine {:.0} node-rounds/s", r.node_rounds_per_second);
    s
}

fn fault_table(s: &mut String, r: &Report) {
    let secs = r.round_seconds;
    let _ = writeln!(
        s,
        "Fault episodes (times in rounds p50/p95 from onset, seconds at {secs} s; '-': fewer than half / 95 % reached it):"
    );
    let _ = writeln!(
        s,
        "{:<14} {:<6} {:<22} {:<12} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4}  {:<16} {:<16} {:<16} {:<16}",
        "kind",
        "plane",
        "band",
        "shape",
        "n",
        "sus",
        "con",
        "quar",
        "det",
        "loc",
        "T_suspect",
        "T_confirm",
        "T_recommend",
        "T_detect"
    );
    for x in &r.rows {
        let _ = writeln!(
            s,
            "{:<14} {:<6} {:<22} {:<12} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4}  {:<16} {:<16} {:<16} {:<16}",
            x.kind.as_str(),
            format!("{:?}", x.plane).to_lowercase(),
            x.band,
            format!("{:?}", x.shape).to_lowercase(),
            x.injected,
            x.suspect,
            x.confirmed,
            x.quarantine,
            x.detected,
            x.localised,
            pair(x.t_suspect, secs),
            pair(x.t_confirm, secs),
            pair(x.t_recommend, secs),
            pair(x.t_detect, secs),
        );
    }
    let _ = writeln!(s);
}

fn magnitude_table(s: &mut String, r: &Report) {
    if r.by_magnitude.is_empty() {
        return;
    }
    let _ = writeln!(s, "Slow nodes (host, step) by magnitude:");
    let _ = writeln!(
        s,
        "{:<24} {:>8} {:>9} {:>11}",
        "", "injected", "suspected", "quarantine"
    );
    for m in &r.by_magnitude {
        let _ = writeln!(
            s,
            "{:<24} {:>8} {:>9} {:>11}",
            m.label, m.injected, m.suspect, m.quarantine
        );
    }
    let pct = |v: Option<f64>| v.map_or_else(|| "none".into(), |x| format!("{:.0}%", x * 100.0));
    let _ = writeln!(
        s,
        "smallest slowdown with ≥ 95 % recall from there up (rows of ≥ 5): suspected {}, recommended {}\n",
        pct(r.min_slowdown_95.0),
        pct(r.min_slowdown_95.1)
    );
}

fn causes(s: &mut String, r: &Report) {
    if r.false_by_cause.is_empty() {
        let _ = writeln!(s, "False verdicts: none\n");
        return;
    }
    let _ = writeln!(s, "False verdicts by cause:");
    for c in &r.false_by_cause {
        let _ = writeln!(s, "  {:<18} {:<24} {:>6}", c.level, c.cause, c.count);
    }
    let _ = writeln!(s, "First false verdicts:");
    for f in r.false_verdicts.iter().take(12) {
        let _ = writeln!(
            s,
            "  round {:>5} {:<18} {:<28} {}: {}",
            f.round, f.level, f.entity, f.cause, f.detail
        );
    }
    let _ = writeln!(s);
}
