//! The report of a run as text tables: verdicts per class with their budgets, fault
//! episodes per kind, the magnitude sweep, the device plane, the false verdicts with
//! their causes, the expectation and the targets.

use std::fmt::Write as _;

use super::report::Report;

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
    classes_table(&mut s, r);
    fault_table(&mut s, r);
    magnitude_table(&mut s, r);
    if let Some(d) = &r.device {
        let _ = writeln!(
            s,
            "Device plane ({} NPU ports): fabric verdicts {}; traffic {:.2} requests/s per NPU, {:.2} packets/s with replies (busiest port-round {:.2}/s); engine {:.0} port-rounds/s\n",
            d.ports,
            d.fabric_verdicts,
            d.requests_per_second_per_npu,
            d.packets_per_second_per_npu,
            d.peak_packets_per_second_per_npu,
            d.port_rounds_per_second
        );
    }
    causes(&mut s, r);
    inference(&mut s, r);
    expectation(&mut s, r);
    let _ = writeln!(s, "Targets:");
    for t in &r.targets {
        let mark = match t.status {
            "met" => "met",
            "not met" => "NOT MET",
            "judged pooled" => "pooled",
            _ => "nothing",
        };
        let _ = writeln!(s, "  [{mark:>7}] {}: {}", t.target, t.value);
    }
    let _ = writeln!(s, "\nengine {:.0} node-rounds/s", r.node_rounds_per_second);
    s
}

/// The ToR inference's accuracy, when the fleet has ToRs.
fn inference(s: &mut String, r: &Report) {
    let Some(a) = &r.topology_inference else {
        return;
    };
    let ratio = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    let _ = writeln!(
        s,
        "Topology inference (as if no source gave ToRs): groups {} ({} within one ToR), nodes placed {}; same-ToR pairs: precision {} ({} of {} inferred), recall {} ({} of {})\n",
        a.groups,
        a.pure_groups,
        a.nodes_placed,
        ratio(a.precision),
        a.pairs_right,
        a.pairs_inferred,
        ratio(a.recall),
        a.pairs_right,
        a.pairs_same_tor
    );
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

/// Every class of verdict with its false rate against its budget.
fn classes_table(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "Verdicts per class (hard faults apart; a cordon is a node recommended for quarantine by the host engine or an NPU port):"
    );
    let _ = writeln!(
        s,
        "{:<16} {:>8} {:>8} {:>10} {:>18} {:>8}",
        "class", "verdicts", "correct", "precision", "false/1000 node-h", "budget"
    );
    for c in &r.classes {
        let precision = c
            .precision
            .map_or_else(|| "-".into(), |p| format!("{p:.3}"));
        let note = match (c.emitted, c.class.as_str()) {
            (false, _) => "  (no NPU ports)",
            _ if c.false_per_1000_node_hours > c.budget => "  OVER BUDGET",
            _ => "",
        };
        let _ = writeln!(
            s,
            "{:<16} {:>8} {:>8} {:>10} {:>18.3} {:>8}{note}",
            c.class, c.verdicts, c.correct, precision, c.false_per_1000_node_hours, c.budget
        );
    }
    let cordons = r.classes.iter().find(|c| c.class == "cordon");
    if cordons.is_some_and(|c| c.false_verdicts == 0) && r.healthy_node_hours > 0.0 {
        let _ = writeln!(
            s,
            "no false cordon in {:.0} healthy node-hours: the rate is below {:.4} per 1000 node-hours at 95 % confidence (rule of three)",
            r.healthy_node_hours,
            3.0 / r.healthy_node_hours * 1000.0
        );
    }
    let _ = writeln!(
        s,
        "precision {:.3} (node quarantine level); false suspects {:.2} / 1000 node-h, false quarantines (cordons: host and NPU port) {:.3} / 1000 node-h\nquarantines from fabric dips {}, from ToR events {}, from congestion {}\n",
        r.precision,
        r.false_suspects_per_1000_node_hours,
        r.false_quarantines_per_1000_node_hours,
        r.quarantines_from_fabric_dips,
        r.quarantines_from_tor,
        r.quarantines_from_congestion
    );
}

/// The episodes the time targets leave out, and the scenario's expectation.
fn expectation(s: &mut String, r: &Report) {
    if !r.left_out.is_empty() {
        let list: Vec<String> = r
            .left_out
            .iter()
            .map(|l| format!("{} {}", l.count, l.reason))
            .collect();
        let _ = writeln!(
            s,
            "Left out of the time targets (an event crossed the fault's own probes in its first rounds): {}\n",
            list.join(", ")
        );
    }
    let Some(e) = &r.expectation else { return };
    let _ = writeln!(
        s,
        "Expectation: {} (may be recommended: {} nodes; must be: {:?})",
        if e.met { "met" } else { "NOT MET" },
        e.may_cordon.len(),
        e.must_cordon
    );
    for (n, round, reason) in e.unexpected.iter().take(12) {
        let _ = writeln!(s, "  unexpected: node {n} from round {round}: {reason}");
    }
    for (n, why) in e.missing.iter().take(12) {
        let _ = writeln!(s, "  missing: node {n}: {why}");
    }
    let _ = writeln!(s);
}
