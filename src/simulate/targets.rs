//! The detection targets (issue 17 for the host plane, issue 15 for the device plane, issue
//! 24 for the scorer), checked on one run.
//!
//! - Every class of verdict has a false-verdict budget per 1000 healthy node-hours,
//!   judged on every run whatever it injected ([`super::classes`]).
//! - Precision is judged wherever the class has verdicts; a class without verdicts is
//!   judged by its false rate alone.
//! - Recall targets count persistent faults (step and ramp shapes); time targets count
//!   step faults, from onset, with a missed episode counting as never detected, leaving
//!   out only those whose own probes an event crossed early on (`score::Outcome::left_out`;
//!   the value says how many and why). A target with nothing to judge says so and is never
//!   met. Intermittent, flapping and random faults are reported, not targeted.

use std::collections::BTreeMap;

use super::report::{Report, TargetCheck, p50_p95};
use super::scenario::{FaultKind, Plane, Shape};
use super::score::Outcome;

fn share(hit: usize, of: usize) -> String {
    format!("{hit}/{of} = {:.3}", hit as f64 / of.max(1) as f64)
}

fn judged(target: &str, value: String, ok: bool) -> TargetCheck {
    TargetCheck {
        target: target.to_string(),
        value,
        ok: Some(ok),
        status: if ok { "met" } else { "not met" },
    }
}

fn nothing(target: &str, value: String) -> TargetCheck {
    TargetCheck {
        target: target.to_string(),
        value,
        ok: None,
        status: "nothing to judge",
    }
}

/// Recall and time of one class of outcomes.
fn class<'a>(outcomes: &'a [Outcome], keep: impl Fn(&Outcome) -> bool + 'a) -> Vec<&'a Outcome> {
    outcomes.iter().filter(|o| keep(o)).collect()
}

fn recall(target: &str, os: &[&Outcome], need: f64, what: &str) -> TargetCheck {
    recall_by(target, os, need, what, |o| o.detected)
}

/// [`recall`] by another first round than detection's (`by`).
fn recall_by(
    target: &str,
    os: &[&Outcome],
    need: f64,
    what: &str,
    by: fn(&Outcome) -> Option<u64>,
) -> TargetCheck {
    let hit = os.iter().filter(|o| by(o).is_some()).count();
    if os.is_empty() {
        return nothing(target, format!("no {what} in this run"));
    }
    judged(
        target,
        share(hit, os.len()),
        hit as f64 >= need * os.len() as f64,
    )
}

/// Episodes a p95 needs before one run is judged on it alone: with fewer, the p95 is the
/// slowest episode, and the target is judged on the pooled episodes of a batch of runs
/// ([`super::batch`]).
pub const MIN_EPISODES_FOR_P95: usize = 20;

/// "N left out: k reason, …" for the episodes of a time target that were not timed.
fn left_out(all: &[&Outcome]) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for o in all {
        if let Some(r) = &o.left_out {
            *by.entry(r.as_str()).or_default() += 1;
        }
    }
    if by.is_empty() {
        return "none left out".into();
    }
    let n: usize = by.values().sum();
    let list: Vec<String> = by.iter().map(|(r, k)| format!("{k} {r}")).collect();
    format!("{n} left out: {}", list.join(", "))
}

/// A time target of `limit` rounds of an engine that runs every `per` probe rounds (the
/// device plane runs every `device_probe.interval`); `secs` is the run's probe round
/// length, for the value. `all` are the episodes of the class, timed or not. Episode
/// times are in probe rounds; an engine's rounds are those divided by `per`, rounded up.
fn time(
    target: &str,
    all: &[&Outcome],
    f: fn(&Outcome) -> Option<u64>,
    (limit, secs, per): (u64, f64, u64),
    min: usize,
) -> TargetCheck {
    let per = per.max(1);
    let os: Vec<&Outcome> = all.iter().copied().filter(|o| o.timed).collect();
    let out = left_out(all);
    if os.is_empty() {
        let what = if all.is_empty() {
            "no such episode in this run".to_string()
        } else {
            format!("no episode left to time ({out})")
        };
        return nothing(target, format!("nothing to time: {what}"));
    }
    let [_, p95] = p50_p95(&os.iter().map(|o| f(o)).collect::<Vec<_>>());
    let p95 = p95.map(|x| x.div_ceil(per));
    let unit = if per == 1 {
        "rounds".to_string()
    } else {
        format!("of its rounds (every {per} probe rounds)")
    };
    let value = p95.map_or_else(
        || format!("more than 5 % of {} never reached it; {out}", os.len()),
        |x| {
            format!(
                "p95 {x} {unit} ({:.0} s at {secs} s) over {} episodes; {out}",
                (x * per) as f64 * secs,
                os.len()
            )
        },
    );
    if os.len() < min {
        return TargetCheck {
            target: target.to_string(),
            value: format!("{value} (fewer than {min}: judged on a pooled batch)"),
            ok: None,
            status: "judged pooled",
        };
    }
    judged(target, value, p95.is_some_and(|x| x <= limit))
}

/// Every target on this run (time targets only with enough episodes).
pub fn check(r: &Report, outcomes: &[Outcome]) -> Vec<TargetCheck> {
    check_with(r, outcomes, MIN_EPISODES_FOR_P95)
}

/// Every target on a pooled batch: time targets on however many episodes there are.
pub fn check_pooled(r: &Report, outcomes: &[Outcome]) -> Vec<TargetCheck> {
    check_with(r, outcomes, 1)
}

fn persistent(o: &Outcome) -> bool {
    matches!(o.shape, Shape::Step | Shape::Ramp)
}

fn check_with(r: &Report, outcomes: &[Outcome], min: usize) -> Vec<TargetCheck> {
    let slow20 = |o: &Outcome| {
        o.kind == FaultKind::SlowNode && o.plane == Plane::Host && o.magnitude >= 0.2 - 1e-9
    };
    let big = class(outcomes, move |o| slow20(o) && persistent(o));
    let big_step = class(outcomes, move |o| slow20(o) && o.shape == Shape::Step);
    let hard = class(outcomes, |o| o.kind == FaultKind::HardFault);
    let mut out = vec![
        precision(
            r,
            "node quarantine",
            "straggler precision ≥ 0.98 at the quarantine level",
        ),
        recall(
            "recall ≥ 0.95, slow nodes ≥ 20 % (step, ramp): quarantine recommended",
            &big,
            0.95,
            "persistent slow node of at least 20 %",
        ),
        time(
            "slow nodes ≥ 20 % (step) suspected within 5 rounds, p95",
            &big_step,
            |o| o.suspect,
            (5, r.round_seconds, 1),
            min,
        ),
        time(
            "slow nodes ≥ 20 % (step) recommended within 20 rounds, p95",
            &big_step,
            |o| o.quarantine,
            (20, r.round_seconds, 1),
            min,
        ),
    ];
    out.splice(2..2, links(r, outcomes));
    out.extend(budgets(r));
    out.push(judged(
        "no quarantine from fabric-wide or ToR-wide events or congestion",
        format!(
            "fabric {}, ToR {}, congestion {}",
            r.quarantines_from_fabric_dips, r.quarantines_from_tor, r.quarantines_from_congestion
        ),
        r.quarantines_from_fabric_dips + r.quarantines_from_tor + r.quarantines_from_congestion
            == 0,
    ));
    out.push(recall(
        "hard faults recommended for quarantine (scored apart)",
        &hard,
        1.0,
        "hard fault",
    ));
    out.extend(events(outcomes));
    if let Some(e) = &r.expectation {
        let value = format!(
            "{} unexpected recommendation(s){}, {} missing{}",
            e.unexpected.len(),
            e.unexpected
                .iter()
                .take(5)
                .map(|(n, round, _)| format!(" node {n}@{round}"))
                .collect::<String>(),
            e.missing.len(),
            e.missing
                .iter()
                .take(5)
                .map(|(n, _)| format!(" node {n}"))
                .collect::<String>()
        );
        out.push(judged(
            "the scenario's expectation: only its may_cordon nodes recommended, every must_cordon node recommended",
            value,
            e.met,
        ));
    }
    if let Some(d) = &r.device {
        out.extend(device(r, d, outcomes, min));
    }
    out
}

/// The link targets: the engines' verdicts, the shipped alert over them, and the links no
/// probe crosses.
fn links(r: &Report, outcomes: &[Outcome]) -> Vec<TargetCheck> {
    let link20 = |o: &Outcome| {
        o.kind == FaultKind::DegradedLink && o.magnitude >= 0.2 - 1e-9 && persistent(o)
    };
    let links = class(outcomes, move |o| link20(o) && !o.between_groups);
    let far_links = class(outcomes, move |o| link20(o) && o.between_groups);
    vec![
        precision(r, "link", "link precision ≥ 0.98"),
        recall(
            "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link verdict",
            &links,
            0.95,
            "persistent degraded link of at least 20 % within a probe group",
        ),
        precision(
            r,
            "link alert",
            "link alert precision ≥ 0.98 (the shipped rule over the link verdicts)",
        ),
        recall_by(
            "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link alert",
            &links,
            0.95,
            "persistent degraded link of at least 20 % within a probe group",
            |o| o.alerted,
        ),
        recall(
            "recall ≥ 0.95, degraded links ≥ 20 % between probe groups (no probe crosses them)",
            &far_links,
            0.95,
            "degraded link between probe groups",
        ),
    ]
}

/// Precision of one class, judged where it has verdicts.
fn precision(r: &Report, class: &str, target: &str) -> TargetCheck {
    let c = r.classes.iter().find(|c| c.class == class);
    match c.and_then(|c| c.precision.map(|p| (p, c.verdicts))) {
        Some((p, n)) => judged(target, format!("{p:.3} of {n} verdicts"), p >= 0.98),
        None => nothing(
            target,
            format!("no {class} verdict (its false rate is judged below)"),
        ),
    }
}

/// Every class's false-verdict rate against its budget: always judged where its engine
/// runs (the device plane's classes need NPU ports).
fn budgets(r: &Report) -> Vec<TargetCheck> {
    r.classes
        .iter()
        .map(|c| {
            let target = format!(
                "false {} verdicts ≤ {} per 1000 healthy node-hours",
                c.class, c.budget
            );
            if !c.emitted {
                return nothing(
                    &target,
                    "no NPU ports in this run: the device plane did not run".into(),
                );
            }
            judged(
                &target,
                format!(
                    "{:.3} ({} of {} verdicts in {:.0} healthy node-hours)",
                    c.false_per_1000_node_hours, c.false_verdicts, c.verdicts, r.healthy_node_hours
                ),
                c.false_per_1000_node_hours <= c.budget,
            )
        })
        .collect()
}

/// Fabric dips and slow ToRs: detected (a fabric verdict in a group they touch) and
/// localised (named, none of their members blamed).
fn events(outcomes: &[Outcome]) -> Vec<TargetCheck> {
    let dips = class(outcomes, |o| o.kind == FaultKind::FabricDip);
    let tors = class(outcomes, |o| o.kind == FaultKind::SlowTor);
    let localised = |os: &[&Outcome]| os.iter().filter(|o| o.localised).count();
    let detected = |os: &[&Outcome]| os.iter().filter(|o| o.detected.is_some()).count();
    let mut out = Vec::new();
    let t = "fabric dips localised ≥ 0.95 (a fabric verdict where they reach, no verdict on their members)";
    out.push(if dips.is_empty() {
        nothing(t, "no fabric dip in this run".into())
    } else {
        let k = localised(&dips);
        judged(
            t,
            format!("{} (detected {})", share(k, dips.len()), detected(&dips)),
            k as f64 >= 0.95 * dips.len() as f64,
        )
    });
    let t = "slow ToRs localised ≥ 0.95 (a ToR verdict, no verdict on their members)";
    out.push(if tors.is_empty() {
        nothing(t, "no slow ToR in this run".into())
    } else {
        let k = localised(&tors);
        judged(
            t,
            format!("{} (detected {})", share(k, tors.len()), detected(&tors)),
            k as f64 >= 0.95 * tors.len() as f64,
        )
    });
    out
}

fn device(
    r: &Report,
    d: &super::report::DeviceReport,
    outcomes: &[Outcome],
    min: usize,
) -> Vec<TargetCheck> {
    let strong = class(outcomes, |o| {
        o.kind == FaultKind::SlowPort && o.band.starts_with('≥') && o.shape == Shape::Step
    });
    let localised = strong.iter().filter(|o| o.localised).count();
    let fabric_quarantines: usize = r
        .false_by_cause
        .iter()
        .filter(|c| c.level == "port quarantine")
        .filter(|c| {
            [
                "fabric dip",
                "slow ToR",
                "ToR congestion",
                "spine congestion",
            ]
            .contains(&c.cause.as_str())
        })
        .map(|c| c.count)
        .sum();
    let t = "those ports localised to the port ≥ 95 %";
    vec![
        time(
            "ports with ≥ 5 % loss or ≥ 2× RTT (step) suspected within 10 device-plane rounds, p95",
            &strong,
            |o| o.suspect,
            (10, r.round_seconds, r.device_every),
            min,
        ),
        if strong.is_empty() {
            nothing(t, "no such port in this run".into())
        } else {
            judged(
                t,
                share(localised, strong.len()),
                localised as f64 >= 0.95 * strong.len() as f64,
            )
        },
        precision(r, "port suspect", "port suspect precision ≥ 0.98"),
        precision(r, "port quarantine", "port quarantine precision ≥ 0.98"),
        judged(
            "no port quarantine from fabric-wide or ToR-wide events",
            fabric_quarantines.to_string(),
            fabric_quarantines == 0,
        ),
        judged(
            "device-plane probe traffic ≤ 10 packets/s per NPU",
            format!(
                "{:.2} packets/s (requests and replies; busiest port-round {:.2}/s)",
                d.packets_per_second_per_npu, d.peak_packets_per_second_per_npu
            ),
            d.peak_packets_per_second_per_npu <= 10.0,
        ),
    ]
}
