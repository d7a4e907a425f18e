//! A batch of runs, pooled: several seeds of one scenario, or many generated held-out
//! scenarios. A p95 over the three or four episodes of one run is its slowest episode;
//! pooled, the time targets are judged on every episode of the batch, and the false
//! verdict rates on every healthy node-hour.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::classes::ClassStats;
use super::expect::ExpectCheck;
use super::report::{
    CauseCount, DeviceReport, Report, left_out, magnitude_rows, min_95, rows, text as run_text,
};
use super::score::{LevelStats, level_stats};

/// Sums every class's verdicts over the runs (classes in the order of the first report).
fn classes(runs: &[Report], healthy: f64) -> Vec<ClassStats> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .classes
        .iter()
        .map(|c| {
            let of = runs
                .iter()
                .filter_map(|r| r.classes.iter().find(|x| x.class == c.class));
            let (v, k, emitted) = of.fold((0, 0, false), |(v, k, e), x| {
                (v + x.verdicts, k + x.correct, e || x.emitted)
            });
            ClassStats::new(&c.class, v, k, healthy, emitted)
        })
        .collect()
}

/// The runs' expectations together: met when every run's is.
fn expectation(runs: &[Report]) -> Option<ExpectCheck> {
    let all: Vec<&ExpectCheck> = runs.iter().filter_map(|r| r.expectation.as_ref()).collect();
    if all.is_empty() {
        return None;
    }
    Some(ExpectCheck {
        may_cordon: Vec::new(),
        must_cordon: Vec::new(),
        unexpected: all.iter().flat_map(|e| e.unexpected.clone()).collect(),
        missing: all.iter().flat_map(|e| e.missing.clone()).collect(),
        met: all.iter().all(|e| e.met),
    })
}

/// Sums verdict counts level by level (levels in the order of the first report).
fn levels(all: &[&[LevelStats]], healthy: f64) -> Vec<LevelStats> {
    let Some(first) = all.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let (v, c) = all
                .iter()
                .filter_map(|x| x.get(k))
                .fold((0, 0), |(v, c), x| (v + x.verdicts, c + x.correct));
            level_stats(&l.level, v, c, healthy)
        })
        .collect()
}

/// The device-plane parts of the runs that have one, pooled (`None` when none has).
fn pool_devices(runs: &[Report], healthy: f64) -> Option<DeviceReport> {
    let devices: Vec<&DeviceReport> = runs.iter().filter_map(|r| r.device.as_ref()).collect();
    if devices.is_empty() {
        return None;
    }
    let dl = levels(
        &devices
            .iter()
            .map(|d| d.levels.as_slice())
            .collect::<Vec<_>>(),
        healthy,
    );
    let max = |f: fn(&DeviceReport) -> f64| devices.iter().map(|d| f(d)).fold(0.0, f64::max);
    Some(DeviceReport {
        ports: devices.iter().map(|d| d.ports).sum(),
        levels: dl,
        fabric_verdicts: devices.iter().map(|d| d.fabric_verdicts).sum(),
        requests_per_second_per_npu: max(|d| d.requests_per_second_per_npu),
        packets_per_second_per_npu: max(|d| d.packets_per_second_per_npu),
        peak_packets_per_second_per_npu: max(|d| d.peak_packets_per_second_per_npu),
        port_rounds_per_second: devices
            .iter()
            .map(|d| d.port_rounds_per_second)
            .sum::<f64>()
            / devices.len() as f64,
    })
}

/// The pooled report of a batch: counts summed, rates over the pooled node-hours, tables
/// and targets over the pooled episodes.
pub fn pool(runs: &[Report]) -> Report {
    let healthy: f64 = runs.iter().map(|r| r.healthy_node_hours).sum();
    let episodes: Vec<_> = runs.iter().flat_map(|r| r.episodes.clone()).collect();
    let lv = levels(
        &runs.iter().map(|r| r.levels.as_slice()).collect::<Vec<_>>(),
        healthy,
    );
    let links = levels(
        &runs
            .iter()
            .map(|r| std::slice::from_ref(&r.links))
            .collect::<Vec<_>>(),
        healthy,
    );
    let mut causes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in runs.iter().flat_map(|r| &r.false_by_cause) {
        *causes
            .entry((c.level.clone(), c.cause.clone()))
            .or_default() += c.count;
    }
    let device = pool_devices(runs, healthy);
    let by_magnitude = magnitude_rows(&episodes);
    let sum = |f: fn(&Report) -> usize| runs.iter().map(f).sum::<usize>();
    let classes = classes(runs, healthy);
    let cordon_rate = classes
        .iter()
        .find(|c| c.class == "cordon")
        .map_or(0.0, |c| c.false_per_1000_node_hours);
    let mut p = Report {
        scenario: format!("pooled ({} runs)", runs.len()),
        nodes: runs.iter().map(|r| r.nodes).sum(),
        groups: runs.iter().map(|r| r.groups).sum(),
        npus_per_node: runs.iter().map(|r| r.npus_per_node).max().unwrap_or(0),
        rounds: runs.iter().map(|r| r.rounds).max().unwrap_or(0),
        round_seconds: runs.first().map_or(30.0, |r| r.round_seconds),
        device_every: runs.first().map_or(1, |r| r.device_every),
        seed: runs.first().map_or(0, |r| r.seed),
        node_hours: runs.iter().map(|r| r.node_hours).sum(),
        healthy_node_hours: healthy,
        precision: lv.get(2).map_or(1.0, |l| l.precision),
        false_suspects_per_1000_node_hours: lv.first().map_or(0.0, |l| l.false_per_1000_node_hours),
        false_quarantines_per_1000_node_hours: cordon_rate,
        classes,
        levels: lv,
        links: links.into_iter().next().unwrap_or_default(),
        rows: rows(&episodes),
        min_slowdown_95: (min_95(&by_magnitude, false), min_95(&by_magnitude, true)),
        by_magnitude,
        quarantines_from_fabric_dips: sum(|r| r.quarantines_from_fabric_dips),
        quarantines_from_tor: sum(|r| r.quarantines_from_tor),
        quarantines_from_congestion: sum(|r| r.quarantines_from_congestion),
        false_by_cause: causes
            .into_iter()
            .map(|((level, cause), count)| CauseCount {
                level,
                cause,
                count,
            })
            .collect(),
        false_verdicts: runs
            .iter()
            .flat_map(|r| {
                r.false_verdicts.iter().map(move |f| {
                    let mut f = f.clone();
                    f.entity = format!("{}: {}", r.scenario, f.entity);
                    f
                })
            })
            .take(40)
            .collect(),
        device,
        targets: Vec::new(),
        left_out: left_out(&episodes),
        episodes: Vec::new(),
        expectation: expectation(runs),
        verdicts: Vec::new(),
        final_states: None,
        truth: None,
        topology_inference: super::inference::InferenceAccuracy::pooled(
            runs.iter().filter_map(|r| r.topology_inference.as_ref()),
        ),
        normal_changes: super::report::NormalCounts::sum(runs.iter().map(|r| &r.normal_changes)),
        node_rounds_per_second: runs.iter().map(|r| r.node_rounds_per_second).sum::<f64>()
            / runs.len().max(1) as f64,
    };
    p.targets = super::targets::check_pooled(&p, &episodes);
    p.episodes = episodes;
    p
}

/// One line per run (its targets met, not met, n/a), then the pooled report.
pub fn text(runs: &[Report], pooled: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Runs:");
    for r in runs {
        let count = |status: &str| r.targets.iter().filter(|t| t.status == status).count();
        let _ = writeln!(
            s,
            "  {:<28} {:>5} nodes {:>6.0} node-h  targets met {:>2}, not met {:>2}, nothing to judge {:>2}, judged pooled {}{}",
            r.scenario,
            r.nodes,
            r.node_hours,
            count("met"),
            count("not met"),
            count("nothing to judge"),
            count("judged pooled"),
            r.targets
                .iter()
                .filter(|t| t.status == "not met")
                .map(|t| format!("\n      NOT MET {}: {}", t.target, t.value))
                .collect::<String>()
        );
    }
    let _ = writeln!(s);
    s.push_str(&run_text(pooled));
    s
}
