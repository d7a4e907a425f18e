//! The detection targets (issue 17 for the host plane, issue 15 for the device plane),
//! checked on one run. A target with nothing to judge it on in the scenario is `n/a`.
//!
//! Recall targets count persistent faults (step and ramp shapes); time targets count step
//! faults, from onset, with a missed episode counting as never detected, leaving out those
//! an injected fabric dip or slow ToR overlapped in their first rounds (a fabric event
//! blocks escalation by design) and those whose node or port was already accused when
//! they began (see `score::Outcome::timed`; the report's tables count every episode).
//! Intermittent and flapping faults are reported, not targeted.

use super::report::{Report, TargetCheck, p50_p95};
use super::scenario::{FaultKind, Plane, Shape};
use super::score::Outcome;

fn share(hit: usize, of: usize) -> String {
    format!("{hit}/{of} = {:.3}", hit as f64 / of.max(1) as f64)
}

fn check_one(target: &str, value: String, ok: Option<bool>) -> TargetCheck {
    TargetCheck {
        target: target.to_string(),
        value,
        ok,
    }
}

/// Recall and time of one class of outcomes.
fn class<'a>(outcomes: &'a [Outcome], keep: impl Fn(&Outcome) -> bool + 'a) -> Vec<&'a Outcome> {
    outcomes.iter().filter(|o| keep(o)).collect()
}

fn recall(target: &str, os: &[&Outcome], need: f64) -> TargetCheck {
    let hit = os.iter().filter(|o| o.detected.is_some()).count();
    let ok = (!os.is_empty()).then_some(hit as f64 >= need * os.len() as f64);
    check_one(target, share(hit, os.len()), ok)
}

/// Episodes a p95 needs before one run is judged on it alone: with fewer, the p95 is the
/// slowest episode, and the target is judged on the pooled episodes of a batch of runs
/// ([`super::batch`]).
pub const MIN_EPISODES_FOR_P95: usize = 20;

/// A time target of `limit` rounds of an engine that runs every `per` probe rounds (the
/// device plane runs every `device_probe.interval`); `secs` is the run's probe round
/// length, for the value. Episode times are in probe rounds; an engine's rounds are
/// those divided by `per`, rounded up (the first of its rounds after the onset can be up
/// to `per` − 1 probe rounds away).
fn time(
    target: &str,
    os: &[&Outcome],
    f: fn(&Outcome) -> Option<u64>,
    (limit, secs, per): (u64, f64, u64),
    min: usize,
) -> TargetCheck {
    let per = per.max(1);
    let [_, p95] = p50_p95(&os.iter().map(|o| f(o)).collect::<Vec<_>>());
    let p95 = p95.map(|x| x.div_ceil(per));
    let unit = if per == 1 {
        "rounds".to_string()
    } else {
        format!("of its rounds (every {per} probe rounds)")
    };
    let mut value = p95.map_or_else(
        || format!("more than 5 % of {} never reached it", os.len()),
        |x| {
            format!(
                "p95 {x} {unit} ({:.0} s at {secs} s) over {} episodes",
                (x * per) as f64 * secs,
                os.len()
            )
        },
    );
    let ok = if os.len() < min {
        if !os.is_empty() {
            value.push_str(&format!(" (fewer than {min}: judged on a pooled batch)"));
        }
        None
    } else {
        Some(p95.is_some_and(|x| x <= limit))
    };
    check_one(target, value, ok)
}

/// Every target on this run (time targets only with enough episodes).
pub fn check(r: &Report, outcomes: &[Outcome]) -> Vec<TargetCheck> {
    check_with(r, outcomes, MIN_EPISODES_FOR_P95)
}

/// Every target on a pooled batch: time targets on however many episodes there are.
pub fn check_pooled(r: &Report, outcomes: &[Outcome]) -> Vec<TargetCheck> {
    check_with(r, outcomes, 1)
}

fn check_with(r: &Report, outcomes: &[Outcome], min: usize) -> Vec<TargetCheck> {
    let persistent = |o: &Outcome| matches!(o.shape, Shape::Step | Shape::Ramp);
    let slow20 = |o: &Outcome| {
        o.kind == FaultKind::SlowNode && o.plane == Plane::Host && o.magnitude >= 0.2 - 1e-9
    };
    let slow_nodes = class(outcomes, |o| {
        o.kind == FaultKind::SlowNode && o.plane == Plane::Host
    });
    let big = class(outcomes, move |o| slow20(o) && persistent(o));
    let big_step = class(outcomes, move |o| {
        slow20(o) && o.shape == Shape::Step && o.timed
    });
    let links = class(outcomes, move |o| {
        o.kind == FaultKind::DegradedLink && o.magnitude >= 0.2 - 1e-9 && persistent(o)
    });
    let hard = class(outcomes, |o| o.kind == FaultKind::HardFault);
    let all_links = class(outcomes, |o| o.kind == FaultKind::DegradedLink);
    let (con, quar) = (&r.levels[1], &r.levels[2]);
    // Precision is judged where the scenario has faults of the class: without any, every
    // verdict is false and the false-verdict rates below say how many.
    let mut out = vec![
        check_one(
            "straggler precision ≥ 0.98 at the quarantine level (the cordon)",
            format!(
                "{:.3} of {} (confirmed, a ticket: {:.3} of {})",
                quar.precision, quar.verdicts, con.precision, con.verdicts
            ),
            (!slow_nodes.is_empty()).then_some(quar.precision >= 0.98),
        ),
        recall(
            "recall ≥ 0.95, slow nodes ≥ 20 % (step, ramp): quarantine recommended",
            &big,
            0.95,
        ),
        check_one(
            "link precision ≥ 0.98",
            format!(
                "{:.3} of {} link verdicts",
                r.links.precision, r.links.verdicts
            ),
            (!all_links.is_empty()).then_some(r.links.precision >= 0.98),
        ),
        recall(
            "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link verdict",
            &links,
            0.95,
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
        check_one(
            "false quarantine recommendations ≤ 0.01 per 1000 node-hours",
            format!(
                "{:.3} ({} in {:.0} healthy node-hours)",
                r.false_quarantines_per_1000_node_hours,
                r.levels[2].verdicts - r.levels[2].correct,
                r.healthy_node_hours
            ),
            Some(r.false_quarantines_per_1000_node_hours <= 0.01),
        ),
        check_one(
            "no quarantine from fabric-wide or ToR-wide events or congestion",
            format!(
                "fabric {}, ToR {}, congestion {}",
                r.quarantines_from_fabric_dips,
                r.quarantines_from_tor,
                r.quarantines_from_congestion
            ),
            Some(
                r.quarantines_from_fabric_dips
                    + r.quarantines_from_tor
                    + r.quarantines_from_congestion
                    == 0,
            ),
        ),
        recall(
            "hard faults recommended for quarantine (scored apart)",
            &hard,
            1.0,
        ),
    ];
    if let Some(d) = &r.device {
        out.extend(device(r, d, outcomes, min));
    }
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
    let strong_timed: Vec<&Outcome> = strong.iter().copied().filter(|o| o.timed).collect();
    let localised = strong
        .iter()
        .filter(|o| o.detected.is_some() && !o.wrong)
        .count();
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
    vec![
        time(
            "ports with ≥ 5 % loss or ≥ 2× RTT (step) suspected within 10 device-plane rounds, p95",
            &strong_timed,
            |o| o.suspect,
            (10, r.round_seconds, r.device_every),
            min,
        ),
        check_one(
            "those ports localised to the port ≥ 95 %",
            share(localised, strong.len()),
            (!strong.is_empty()).then_some(localised as f64 >= 0.95 * strong.len() as f64),
        ),
        check_one(
            "no port quarantine from fabric-wide or ToR-wide events",
            fabric_quarantines.to_string(),
            Some(fabric_quarantines == 0),
        ),
        check_one(
            "device-plane probe traffic ≤ 10 packets/s per NPU",
            format!(
                "{:.2} packets/s (requests and replies; busiest port-round {:.2}/s)",
                d.packets_per_second_per_npu, d.peak_packets_per_second_per_npu
            ),
            Some(d.peak_packets_per_second_per_npu <= 10.0),
        ),
    ]
}
