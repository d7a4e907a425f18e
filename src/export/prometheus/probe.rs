//! Probing families: whether the group runs, its rounds and budget, each member's state,
//! score and arrival lag, the last round's links, the verdicts, and this node's probe
//! timings. Link series exist only for the pairs of the current permutation round, so the
//! label set stays bounded by the group size.

use super::family::{Labels, Render, Sink, flag};
use crate::snapshot::View;
use crate::snapshot::overrides::OverridesSnapshot;
use crate::snapshot::probe::{
    HARDWARE_SIGNS, Horizon, NodeState, ProbeSnapshot, SpineView, TorView,
};
use std::fmt;

/// Renders the probing part of the snapshot, when probing is configured.
#[derive(Debug, Default)]
pub struct ProbeCollector;

impl Render for ProbeCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let Some(pr) = &view.probe else {
            return Ok(());
        };
        group(pr, f)?;
        if pr.active || pr.rounds_ok > 0 {
            verdicts(pr, f)?;
            quarantine(pr, view.overrides.as_deref(), f)?;
            horizons(pr, f)?;
            timings(pr, f)?;
        }
        Ok(())
    }
}

fn one(v: f64) -> Vec<(Labels, f64)> {
    vec![(vec![], v)]
}

fn group(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_probe_active",
        "Whether probing runs with a formed group (0: paused, fail-closed; telemetry continues).",
        one(flag(pr.active)),
    )?;
    f.gauge(
        "hcclwatch_probe_paused",
        "1 while probing is paused, with why (the full message is in /api/v1/state and the log).",
        pr.pause_reason
            .filter(|_| !pr.active)
            .map(|r| (vec![("reason", r.as_str().to_string())], 1.0))
            .into_iter()
            .collect(),
    )?;
    f.counter(
        "hcclwatch_probe_rounds",
        "Probe rounds by result.",
        vec![
            (vec![("result", "ok".to_string())], pr.rounds_ok),
            (vec![("result", "failed".to_string())], pr.rounds_failed),
        ],
    )?;
    f.counter(
        "hcclwatch_probe_bytes",
        "Probe payload bytes this node sent.",
        vec![(vec![], pr.bytes_sent)],
    )?;
    f.gauge(
        "hcclwatch_probe_budget_ratio",
        "Probe bytes sent in the last hour divided by probe.budget_bytes_per_hour.",
        pr.budget_ratio.map(|r| (vec![], r)).into_iter().collect(),
    )?;
    f.gauge(
        "hcclwatch_probe_busy_ratio",
        "Seconds this node spent in probe rounds in the last hour divided by 3600 x probe.budget_busy_ratio.",
        pr.busy_ratio.map(|r| (vec![], r)).into_iter().collect(),
    )?;
    f.gauge(
        "hcclwatch_probe_budget_limited",
        "Whether the group runs reduced rounds because a strict majority of its members is over its probe budget.",
        one(flag(pr.budget_limited)),
    )?;
    f.gauge(
        "hcclwatch_probe_coverage_ratio",
        "Distinct peers this node exchanged with over the last n-1 rounds, divided by n-1.",
        one(pr.coverage),
    )?;
    f.gauge(
        "hcclwatch_probe_group_members",
        "Members of the formed probe group (0 while it is not formed).",
        one(pr.group_members as f64),
    )?;
    f.gauge(
        "hcclwatch_probe_wire_version",
        "The wire version the formed probe group speaks: the highest every member supports (absent while not formed).",
        pr.wire_version
            .filter(|_| pr.active)
            .map(|v| (vec![], f64::from(v)))
            .into_iter()
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_membership_stale",
        "Whether the member list could not be refreshed for probe.membership_stale_after (probing stops, fail-closed).",
        one(flag(pr.membership_stale)),
    )?;
    integrity(pr, f)?;
    f.gauge(
        "hcclwatch_probe_congestion_source_up",
        "Whether this node's last read of its own uplink (byte counters, congestion-marked packets) succeeded for every signal that is on; absent with probe.congestion_enabled off.",
        pr.congestion_source_up
            .map(|up| (vec![], flag(up)))
            .into_iter()
            .collect(),
    )?;
    f.counter(
        "hcclwatch_probe_congestion_read_errors",
        "Reads of this node's own uplink that failed (a missing file, unparseable text, a counter that went backwards); that round's signal was off.",
        pr.congestion_source_up
            .map(|_| (vec![], pr.congestion_read_errors))
            .into_iter()
            .collect(),
    )?;
    members(pr, f)
}

/// What the probe group refused or left out to stay honest: handshakes that did not prove
/// the key, and gathered blocks that did not prove their author.
fn integrity(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.counter(
        "hcclwatch_probe_handshakes_rejected",
        "Incoming probe connections refused before they proved the shared key, by reason (bad_mac, timeout, too_many_pending, per_source_limit, bad_magic, wrong_comm, unexpected_peer, io_error, wire_version).",
        pr.handshakes_rejected
            .iter()
            .map(|(r, n)| (vec![("reason", (*r).to_string())], *n))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_probe_certificate_mode",
        "Whether the formed probe group's members proved who they are with certificates of the cluster CA (1), or with the shared key alone (0); absent while not formed.",
        pr.certificate_mode
            .filter(|_| pr.active)
            .map(|m| (vec![], flag(m)))
            .into_iter()
            .collect(),
    )?;
    f.counter(
        "hcclwatch_probe_forged_rows",
        "Gathered probe blocks (rows, plans, device-plane rows) whose author's signature failed and that were left out, by the first member that relayed them (wire version 4; docs/security.md).",
        pr.forged_rows
            .iter()
            .map(|(relay, n)| (vec![("relay", relay.clone())], *n))
            .collect(),
    )?;
    Ok(())
}

/// Per member of the group (up, excluded) and this node's own NPU isolation
/// recommendations.
fn members(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_probe_member_excluded",
        "1 while the member is left out of the group for probe.exclusion: it broke a formation exchange (its engine-state hand-over), did not prove its identity (certificate mode) or speaks no wire version as high as collective.min_wire_version; the reason is in /api/v1/state.",
        pr.members
            .iter()
            .map(|m| (vec![("peer", m.name.clone())], flag(m.excluded.is_some())))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_peer_up",
        "Whether the member is in the formed probe group (0: not answering, left out after probe.member_timeout, or probing paused).",
        pr.members
            .iter()
            .map(|m| (vec![("peer", m.name.clone())], flag(m.up)))
            .collect(),
    )
}

fn pair(pr: &ProbeSnapshot, a: usize, b: usize) -> Labels {
    vec![("src_node", pr.name(a)), ("dst_node", pr.name(b))]
}

/// Each member's own uplink as it reported it with its last round's timings: congestion,
/// and the hardware signs that congestion cannot give.
fn uplink(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_probe_uplink_congested",
        "Whether the member's own uplink reported congestion in the last round (other traffic near line rate, or congestion-marked packets): its confirmation then waits health.congested_hold rounds instead of confirm_hold.",
        pr.members
            .iter()
            .filter(|m| m.up)
            .map(|m| (vec![("peer", m.name.clone())], flag(m.uplink_congested)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_probe_uplink_hardware_sign",
        "Whether the member's own uplink showed this hardware sign in the last round (sign: link_speed, its link below its rate; pcie, its NIC's PCIe link retrained narrower or slower; frame_errors, corrupted frames or lost carrier): evidence congestion cannot give, that lets a confirmed straggler be recommended after health.confirm_hold (or congested_hold) instead of the persistence horizon health.uncorroborated_hold.",
        pr.members
            .iter()
            .filter(|m| m.up)
            .flat_map(|m| {
                HARDWARE_SIGNS.iter().map(|s| {
                    let on = m.hardware_signs.contains(s);
                    (vec![("peer", m.name.clone()), ("sign", s.to_string())], flag(on))
                })
            })
            .collect(),
    )
}

fn verdicts(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_node_state",
        "1 for the node's current health state.",
        pr.members
            .iter()
            .flat_map(|m| {
                NodeState::ALL.iter().map(move |s| {
                    (
                        vec![("node", m.name.clone()), ("state", s.as_str().to_string())],
                        flag(*s == m.state),
                    )
                })
            })
            .collect(),
    )?;
    let node = |name: &str| vec![("node", name.to_string())];
    f.gauge(
        "hcclwatch_straggler_score",
        "Window median of the node's log time residual against its peers (0.08 ≈ 8% slower).",
        pr.members
            .iter()
            .filter_map(|m| m.score.map(|v| (node(&m.name), v)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_rank_arrival_lag_seconds",
        "How much later than the last arrival's peers the node reached the round's barrier (the straggler waits least).",
        pr.members
            .iter()
            .filter_map(|m| m.arrival_lag.map(|v| (node(&m.name), v)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_link_bandwidth_bytes_per_second",
        "Exchange bandwidth of the pairs in the current permutation round.",
        pr.links
            .iter()
            .map(|l| (pair(pr, l.src, l.dst), l.bytes_per_second))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_peer_reports_inconsistent",
        "Whether the member's re-pairing reports are consistently contradicted by the other members' (a faulty or lying reporter; its reports never suffice to confirm a node).",
        pr.members
            .iter()
            .map(|m| (vec![("peer", m.name.clone())], flag(m.inconsistent_reports)))
            .collect(),
    )?;
    uplink(pr, f)?;
    f.gauge(
        "hcclwatch_fabric_degraded",
        "Whether the probe group's fabric is degraded: slow against its baseline, a partial event, or a crowd of slow nodes (blocks their quarantine recommendations).",
        one(flag(pr.fabric_degraded)),
    )?;
    tors(pr, f)?;
    f.gauge(
        "hcclwatch_link_degraded",
        "Pairs the health engine judged a degraded link (both ends otherwise normal); a link verdict never quarantines a node.",
        pr.link_degraded
            .iter()
            .map(|(a, b)| (pair(pr, *a, *b), 1.0))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_link_withheld",
        "Pairs slow enough and long enough for a link verdict that get none: other links, sharing no end with them, are slow together with them (a shared cause such as a spine or a dip; several at once point at a switch).",
        pr.link_withheld
            .iter()
            .map(|(a, b)| (pair(pr, *a, *b), 1.0))
            .collect(),
    )?;
    Ok(())
}

/// The recommendations, with this node's operator overrides applied to its own
/// (`Overrides::apply`: withheld under `healthy`, `operator_override` under `quarantined`);
/// the engine's verdict itself is unchanged (`hcclwatch_node_state` and `/api/v1/state`
/// show it). An NPU isolation recommendation is withheld while the node, or that NPU, is
/// held healthy.
fn quarantine(
    pr: &ProbeSnapshot,
    held: Option<&OverridesSnapshot>,
    f: &mut dyn Sink,
) -> fmt::Result {
    let npu_held_healthy = |npu: u32| {
        held.is_some_and(|h| {
            let healthy = |o: &crate::snapshot::overrides::Override| {
                o.state == crate::snapshot::overrides::Held::Healthy
            };
            h.active.node.as_ref().is_some_and(healthy)
                || h.active.npus.get(&npu).is_some_and(healthy)
        })
    };
    f.gauge(
        "hcclwatch_npu_isolation_recommended",
        "1 for each of this node's NPUs whose own hard fault (health critical, uncorrectable ECC, RoCE port down, a fault code at SeparateNPU or worse) recommends taking that NPU out of scheduling instead of the node (health.hard_npu_scoped), by reason; absent otherwise, and while an operator override holds the node or the NPU healthy.",
        pr.npu_isolation
            .iter()
            .filter(|(npu, _)| !npu_held_healthy(*npu))
            .map(|(npu, reason)| {
                (
                    vec![("npu", npu.to_string()), ("reason", (*reason).to_string())],
                    1.0,
                )
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_quarantine_recommended",
        "Nodes the health engine recommends taking out of scheduling; reason is straggler, hard_fault or npu_port (details in /api/v1/state), or operator_override for this node under a quarantined override (a healthy override withholds this node's).",
        pr.members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let engine = m.quarantine.map(|why| why.as_str());
                let reason = match held.filter(|h| h.node == m.name) {
                    Some(h) => h.active.apply(engine, &pr.bad_npus(i)),
                    None => engine,
                }?;
                Some((
                    vec![("node", m.name.clone()), ("reason", reason.to_string())],
                    1.0,
                ))
            })
            .collect(),
    )?;
    f.histogram(
        "hcclwatch_verdict_onset_to_recommendation_seconds",
        "Seconds from a member's episode onset (its first transition out of healthy or probation) to its quarantine recommendation, by reason, as this node's health engine saw them (a hard fault is recommended in the round that first sees it).",
        pr.onset_to_recommendation
            .iter()
            .map(|(why, h)| (vec![("reason", why.as_str().to_string())], h))
            .collect(),
    )
}

fn timings(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    if let Some(l) = pr.latency {
        f.gauge(
            "hcclwatch_probe_latency_seconds",
            "Duration of the round's small all-reduce: the median of the members' own timings that are finite, not negative and within collective.exec_timeout.",
            one(l),
        )?;
    }
    f.counter(
        "hcclwatch_probe_latency_reports_dropped",
        "Members' small all-reduce timings left out of hcclwatch_probe_latency_seconds (not finite, negative, or longer than collective.exec_timeout).",
        (pr.rounds_ok > 0)
            .then_some((vec![], pr.latency_reports_dropped))
            .into_iter()
            .collect(),
    )?;
    f.histogram(
        "hcclwatch_link_rtt_seconds",
        "Latency-sized ping-pong round trips from this node to its permutation peer of the round.",
        vec![(vec![], &pr.link_rtt)],
    )?;
    f.histogram(
        "hcclwatch_collective_duration_seconds",
        "Duration of this node's probe collectives.",
        pr.collective_durations
            .iter()
            .map(|d| {
                (
                    vec![("op", d.op.clone()), ("size_bytes", d.bytes.to_string())],
                    &d.seconds,
                )
            })
            .collect(),
    )?;
    if let Some(ring) = &pr.ring {
        let labels = || {
            vec![
                ("op", "all_reduce".to_string()),
                ("algo", ring.algo.clone()),
                ("size_bytes", ring.bytes.to_string()),
            ]
        };
        f.gauge(
            "hcclwatch_collective_busbw_bytes_per_second",
            "Bus bandwidth of the last probe ring all-reduce.",
            vec![(labels(), ring.busbw)],
        )?;
        f.gauge(
            "hcclwatch_collective_busbw_expected_bytes_per_second",
            "Bus bandwidth the alpha-beta model predicts for the same all-reduce, from the latency and per-byte costs measured when the probe group formed.",
            ring.expected_busbw
                .map(|e| (labels(), e))
                .into_iter()
                .collect(),
        )?;
    }
    Ok(())
}

/// The ToR verdicts: the switch's, never its members'. Only ToRs the engine judged (enough
/// members in the group) have a series: an unjudged ToR is absent, not 0.
fn tors(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    let tor = |t: &TorView| vec![("tor", t.name.clone())];
    f.gauge(
        "hcclwatch_tor_degraded",
        "Whether the ToR's members are slow together against the ToR's own learned normal (a verdict on the switch, for the network team; never quarantines its members). Only ToRs with at least 2 members in the probe group are judged: with 3 or more, when another ToR has as many, by their fitted level; the others, when they hold at most half of the group, by every member slow at once. A group behind one ToR judges none.",
        pr.tors.iter().map(|t| (tor(t), flag(t.degraded))).collect(),
    )?;
    f.gauge(
        "hcclwatch_tor_slowdown_ratio",
        "While the ToR verdict holds: how much slower than the ToR's normal its members' probes are.",
        pr.tors
            .iter()
            .filter_map(|t| t.slowdown_ratio.map(|r| (tor(t), r)))
            .collect(),
    )?;
    tor_uplinks(pr, f)?;
    let spine = |s: &SpineView| vec![("spine", s.name.clone())];
    f.gauge(
        "hcclwatch_spine_degraded",
        "1 while a partial fabric event has a spine's shape: a share of the pairs between ToRs slow, spread over them, the pairs within ToRs spared (a verdict on a spine of the group, for the network team; never quarantines a node or link). Absent without such an event.",
        pr.spines.iter().map(|s| (spine(s), 1.0)).collect(),
    )?;
    f.gauge(
        "hcclwatch_spine_slow_pair_ratio",
        "While the spine verdict holds: the share of the measurements between ToRs it slowed (about one over the spines behind them).",
        pr.spines.iter().map(|s| (spine(s), s.cross_share)).collect(),
    )?;
    f.counter(
        "hcclwatch_normal_changes",
        "Lasting changes that became the new normal after health.new_normal_rounds rounds (their verdict ended), by scope: fabric (the group's round median), tor, or dip (a partial fabric event's pairs); with the device plane, device_partial (the share of NPU pings slow on their own, after a run of 180 device rounds of partial events) and device_fabric (the NPU pings' round median, after 180 device rounds in a row above it).",
        vec![
            (vec![("scope", "fabric".to_string())], pr.normal_changes.fabric),
            (vec![("scope", "tor".to_string())], pr.normal_changes.tor),
            (vec![("scope", "dip".to_string())], pr.normal_changes.dip),
        ]
        .into_iter()
        .chain(pr.device.iter().flat_map(|d| {
            [
                (
                    vec![("scope", "device_partial".to_string())],
                    d.normal_changes,
                ),
                (
                    vec![("scope", "device_fabric".to_string())],
                    d.median_changes,
                ),
            ]
        }))
        .collect(),
    )
}

/// The ToRs whose uplinks are slow: a series for each ToR marked, and 0 for each other ToR
/// judged in the last round (a ToR neither judged nor marked is unknown, so absent; a ToR
/// of two members is judged but never marked, so it is always 0).
fn tor_uplinks(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    let tor = |name: &str| vec![("tor", name.to_string())];
    let marked = |name: &str| pr.tor_uplinks.iter().any(|u| u.name == name);
    f.gauge(
        "hcclwatch_tor_uplinks_slow",
        "Whether the ToR's uplinks are slow: both its fitted level and its typical member's (against the other ToRs) above ln(health.fabric_ratio) while the probes between two of its members stay under half of that (the uplinks, or the switches past them; for the network team). The mark makes no ToR verdict itself (one may begin while it is held) and none of its members is quarantined for it, but for one slower than it by the entry threshold. Needs a ToR of at least 3 members in the group and another fitted ToR; held two windows of rounds after the last round that showed it; no new normal. 1 for each ToR marked, 0 for each other ToR judged in the last round (a ToR of two is judged but never marked).",
        pr.tor_uplinks
            .iter()
            .map(|u| (tor(&u.name), 1.0))
            .chain(
                pr.tors
                    .iter()
                    .filter(|t| !marked(&t.name))
                    .map(|t| (tor(&t.name), 0.0)),
            )
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_tor_uplinks_slowdown_ratio",
        "While a ToR's uplinks are marked slow: how much slower its members' probes with the other ToRs are than the rest of the group's (the larger of its level and its typical member's), as the last round that showed the mark measured it (a ratio above 1; frozen while the mark is held).",
        pr.tor_uplinks
            .iter()
            .map(|u| (tor(&u.name), u.slowdown_ratio))
            .collect(),
    )
}

/// The persistence horizon of each plane's engine, with what it rests on.
fn horizons(pr: &ProbeSnapshot, f: &mut dyn Sink) -> fmt::Result {
    let planes: Vec<(&str, Horizon)> = pr
        .horizon
        .map(|h| ("host", h))
        .into_iter()
        .chain(
            pr.device
                .as_ref()
                .and_then(|d| d.horizon)
                .map(|h| ("device", h)),
        )
        .collect();
    let by = |v: fn(&Horizon) -> usize| -> Vec<(Labels, f64)> {
        planes
            .iter()
            .map(|(plane, h)| (vec![("plane", plane.to_string())], v(h) as f64))
            .collect()
    };
    f.gauge(
        "hcclwatch_persistence_horizon_rounds",
        "Rounds of its plane (probe.interval, or device_probe.interval on the device plane) a straggler or NPU port that nothing corroborates must stay steadily slow before its quarantine is recommended: the configured horizon (health.uncorroborated_hold on the host plane, 180 device rounds on the device plane), or 1.5 x the longer of two 95th percentiles, of the congestion runs the group's counters reported and of the slow episodes nothing corroborated that ended by themselves, when that is longer (at most 8 x the configured one).",
        by(|h| h.rounds),
    )?;
    f.gauge(
        "hcclwatch_persistence_horizon_configured_rounds",
        "The configured persistence horizon (health.uncorroborated_hold on the host plane; 180 device rounds on the device plane): hcclwatch_persistence_horizon_rounds above it is learnt.",
        by(|h| h.configured),
    )?;
    f.gauge(
        "hcclwatch_persistence_horizon_congestion_runs",
        "Runs of at least 30 rounds in which a member's own counters (on the device plane, any of a node's NPU ports') reported congestion, and slow episodes of at least 30 unexplained rounds that nothing corroborated and that ended by themselves, remembered (the last 128 of each kind that ended, and the runs under way): what the learnt horizon rests on (fewer than 3 of either kind teach nothing).",
        by(|h| h.runs),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Format, encode, registry};
    use crate::snapshot::Store;
    use crate::snapshot::probe::{MemberView, TorUplinksView};
    use crate::snapshot::status::BuildInfo;

    use super::*;

    fn member(name: &str, up: bool, uplink_congested: bool) -> MemberView {
        MemberView {
            up,
            uplink_congested,
            ..MemberView::new(name)
        }
    }

    fn render(pr: ProbeSnapshot) -> String {
        let store = Arc::new(Store::new(false, false));
        store.publish_probe(pr);
        encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap()
    }

    fn lines(text: &str, family: &str) -> Vec<String> {
        text.lines()
            .filter(|l| {
                l.starts_with(&format!("{family} ")) || l.starts_with(&format!("{family}{{"))
            })
            .map(String::from)
            .collect()
    }

    #[test]
    fn each_member_in_the_group_has_its_uplink_flag_and_this_node_its_reader_health() {
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 3,
            members: vec![
                member("a", true, true),
                MemberView {
                    hardware_signs: vec!["pcie"],
                    ..member("b", true, false)
                },
                // Out of the group: its flag is not a measurement of the last round.
                MemberView {
                    hardware_signs: vec!["frame_errors"],
                    ..member("c", false, true)
                },
            ],
            congestion_source_up: Some(false),
            congestion_read_errors: 3,
            ..ProbeSnapshot::default()
        });
        assert_eq!(
            lines(&text, "hcclwatch_probe_uplink_congested"),
            [
                "hcclwatch_probe_uplink_congested{peer=\"a\"} 1.0",
                "hcclwatch_probe_uplink_congested{peer=\"b\"} 0.0",
            ]
        );
        // Every sign of every member in the group, 1 where it showed.
        let signs = lines(&text, "hcclwatch_probe_uplink_hardware_sign");
        let on: Vec<&String> = signs.iter().filter(|l| l.ends_with(" 1.0")).collect();
        assert_eq!(signs.len(), 6, "{signs:?}");
        assert_eq!(
            on,
            ["hcclwatch_probe_uplink_hardware_sign{peer=\"b\",sign=\"pcie\"} 1.0"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_probe_congestion_source_up"),
            ["hcclwatch_probe_congestion_source_up 0.0"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_probe_congestion_read_errors_total"),
            ["hcclwatch_probe_congestion_read_errors_total 3"]
        );
    }

    /// Pins: an NPU isolation recommendation is exported per NPU, and withheld for an NPU
    /// an operator override holds healthy (the other NPU's stays).
    #[test]
    fn npu_isolation_is_withheld_for_an_npu_held_healthy() {
        use crate::snapshot::overrides::{Held, Override, Overrides, OverridesSnapshot};
        let pr = ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            npu_isolation: vec![(3, "separate_npu_fault"), (5, "health_critical")],
            ..ProbeSnapshot::default()
        };
        let store = Arc::new(Store::new(false, false));
        store.publish_probe(pr);
        let healthy = Override {
            state: Held::Healthy,
            until: std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
            reason: String::new(),
            by: String::new(),
        };
        store.publish_overrides(OverridesSnapshot {
            node: "a".into(),
            active: Overrides {
                node: None,
                npus: [(3, healthy)].into_iter().collect(),
            },
            refused: Vec::new(),
            error: None,
        });
        let text = encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap();
        assert_eq!(
            lines(&text, "hcclwatch_npu_isolation_recommended"),
            ["hcclwatch_npu_isolation_recommended{npu=\"5\",reason=\"health_critical\"} 1.0"]
        );
    }

    /// A withheld pair is its own series, beside the verdicts and not among them: the
    /// names are the members'.
    #[test]
    fn withheld_links_are_named_apart_from_degraded_ones() {
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: ["a", "b", "c", "d"]
                .map(|n| member(n, true, false))
                .to_vec(),
            link_degraded: vec![(0, 1)],
            link_withheld: vec![(2, 3), (3, 0)],
            ..ProbeSnapshot::default()
        });
        assert_eq!(
            lines(&text, "hcclwatch_link_withheld"),
            [
                "hcclwatch_link_withheld{src_node=\"c\",dst_node=\"d\"} 1.0",
                "hcclwatch_link_withheld{src_node=\"d\",dst_node=\"a\"} 1.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_link_degraded"),
            ["hcclwatch_link_degraded{src_node=\"a\",dst_node=\"b\"} 1.0"]
        );
    }

    #[test]
    fn without_the_reader_its_health_is_absent() {
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            ..ProbeSnapshot::default()
        });
        assert!(lines(&text, "hcclwatch_probe_congestion_source_up").is_empty());
        assert!(lines(&text, "hcclwatch_probe_congestion_read_errors_total").is_empty());
    }

    #[test]
    fn only_judged_tors_have_a_verdict_series_and_only_degraded_ones_a_ratio() {
        let tor = |name: &str, degraded: bool, ratio: Option<f64>| TorView {
            name: name.into(),
            members: vec![0],
            degraded,
            slowdown_ratio: ratio,
        };
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            tors: vec![tor("leaf-1", true, Some(1.5)), tor("leaf-2", false, None)],
            normal_changes: crate::snapshot::probe::NormalChanges {
                fabric: 0,
                tor: 2,
                dip: 1,
            },
            ..ProbeSnapshot::default()
        });
        assert_eq!(
            lines(&text, "hcclwatch_tor_degraded"),
            [
                "hcclwatch_tor_degraded{tor=\"leaf-1\"} 1.0",
                "hcclwatch_tor_degraded{tor=\"leaf-2\"} 0.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_tor_slowdown_ratio"),
            ["hcclwatch_tor_slowdown_ratio{tor=\"leaf-1\"} 1.5"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_normal_changes_total"),
            [
                "hcclwatch_normal_changes_total{scope=\"fabric\"} 0",
                "hcclwatch_normal_changes_total{scope=\"tor\"} 2",
                "hcclwatch_normal_changes_total{scope=\"dip\"} 1",
            ]
        );
    }

    /// A ToR whose uplinks are marked has 1 and its ratio; another judged ToR 0 and no
    /// ratio; a ToR marked though not judged this round (the mark is held) still has 1.
    #[test]
    fn slow_uplinks_have_a_series_per_marked_tor_and_0_for_the_other_judged_ones() {
        let judged = |name: &str| TorView {
            name: name.into(),
            members: vec![0],
            degraded: false,
            slowdown_ratio: None,
        };
        let marked = |name: &str, ratio: f64| TorUplinksView {
            name: name.into(),
            members: vec![0],
            slowdown_ratio: ratio,
        };
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            tors: vec![judged("leaf-1"), judged("leaf-2")],
            tor_uplinks: vec![marked("leaf-2", 1.25), marked("leaf-3", 1.5)],
            ..ProbeSnapshot::default()
        });
        assert_eq!(
            lines(&text, "hcclwatch_tor_uplinks_slow"),
            [
                "hcclwatch_tor_uplinks_slow{tor=\"leaf-2\"} 1.0",
                "hcclwatch_tor_uplinks_slow{tor=\"leaf-3\"} 1.0",
                "hcclwatch_tor_uplinks_slow{tor=\"leaf-1\"} 0.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_tor_uplinks_slowdown_ratio"),
            [
                "hcclwatch_tor_uplinks_slowdown_ratio{tor=\"leaf-2\"} 1.25",
                "hcclwatch_tor_uplinks_slowdown_ratio{tor=\"leaf-3\"} 1.5",
            ]
        );
        // No topology, nothing judged: no series at all, not a 0.
        let text = render(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            ..ProbeSnapshot::default()
        });
        assert!(lines(&text, "hcclwatch_tor_uplinks_slow").is_empty());
    }

    /// Each plane's persistence horizon is a series of its own, absent before its engine's
    /// first round: here the host plane's learnt (450 of 180 configured, from 5 runs) and
    /// the device plane's as configured.
    #[test]
    fn each_planes_persistence_horizon_is_exported_once_known() {
        let h = |rounds, configured, runs| Horizon {
            rounds,
            configured,
            runs,
        };
        let base = ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            ..ProbeSnapshot::default()
        };
        let text = render(base.clone());
        assert!(lines(&text, "hcclwatch_persistence_horizon_rounds").is_empty());
        let text = render(ProbeSnapshot {
            horizon: Some(h(450, 180, 5)),
            device: Some(crate::snapshot::probe::DeviceView {
                horizon: Some(h(180, 180, 2)),
                ..Default::default()
            }),
            ..base
        });
        assert_eq!(
            lines(&text, "hcclwatch_persistence_horizon_rounds"),
            [
                "hcclwatch_persistence_horizon_rounds{plane=\"host\"} 450.0",
                "hcclwatch_persistence_horizon_rounds{plane=\"device\"} 180.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_persistence_horizon_configured_rounds"),
            [
                "hcclwatch_persistence_horizon_configured_rounds{plane=\"host\"} 180.0",
                "hcclwatch_persistence_horizon_configured_rounds{plane=\"device\"} 180.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_persistence_horizon_congestion_runs"),
            [
                "hcclwatch_persistence_horizon_congestion_runs{plane=\"host\"} 5.0",
                "hcclwatch_persistence_horizon_congestion_runs{plane=\"device\"} 2.0",
            ]
        );
    }

    /// The device plane's renewals of its base rate are a scope of their own, present only
    /// where the node probes the device plane.
    #[test]
    fn device_renewals_are_a_scope_only_with_the_device_plane() {
        let base = || ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            ..ProbeSnapshot::default()
        };
        let device = ProbeSnapshot {
            device: Some(crate::snapshot::probe::DeviceView {
                normal_changes: 3,
                median_changes: 2,
                ..Default::default()
            }),
            ..base()
        };
        let scope = "hcclwatch_normal_changes_total{scope=\"device_partial\"}";
        let text = render(device);
        let found = lines(&text, "hcclwatch_normal_changes_total");
        assert!(found.contains(&format!("{scope} 3")), "{found:?}");
        let median = "hcclwatch_normal_changes_total{scope=\"device_fabric\"} 2";
        assert!(found.iter().any(|l| l == median), "{found:?}");
        let text = render(base());
        let found = lines(&text, "hcclwatch_normal_changes_total");
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().all(|l| !l.starts_with(scope)), "{found:?}");
    }

    #[test]
    fn a_spine_verdict_has_its_series_only_while_it_holds() {
        let base = || ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![member("a", true, false)],
            ..ProbeSnapshot::default()
        };
        let quiet = render(base());
        assert!(lines(&quiet, "hcclwatch_spine_degraded").is_empty());
        assert!(lines(&quiet, "hcclwatch_spine_slow_pair_ratio").is_empty());
        let text = render(ProbeSnapshot {
            spines: vec![SpineView {
                name: "pod-1".into(),
                tors: vec!["leaf-1".into(), "leaf-2".into(), "leaf-3".into()],
                members: vec![0],
                tor_pairs: 3,
                cross_share: 0.25,
                inner_share: 0.0,
            }],
            ..base()
        });
        assert_eq!(
            lines(&text, "hcclwatch_spine_degraded"),
            ["hcclwatch_spine_degraded{spine=\"pod-1\"} 1.0"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_spine_slow_pair_ratio"),
            ["hcclwatch_spine_slow_pair_ratio{spine=\"pod-1\"} 0.25"]
        );
    }
}
