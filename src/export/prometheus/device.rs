//! Device-plane families: NPU port states and verdicts, and this node's pings.
//!
//! Bounded as the host plane's are. Every daemon exports the states of its own NPU ports
//! (all states, 1 for the current), and of other members' ports only while they are not
//! healthy, so the fleet has one state set per port plus one per verdict. Pair series exist
//! only for this node's pings of the last round (`pings_per_round` per local NPU) and for
//! pairs with a verdict. Per local NPU: a ping RTT histogram and packet counters.
//!
//! The HCCS ping mesh (Atlas A3) has families of its own (`hcclwatch_npu_hccs_ping_*`), so
//! the RoCE families keep their names and values: per local NPU a histogram, packet,
//! invalid-reading and restart counters and the destination count; per destination only
//! while it lost packets in the last read (at most the NPU's destinations). Its state
//! (running, or why not) is one gauge set.

use super::family::{Labels, Render, Sink, flag};
use crate::snapshot::View;
use crate::snapshot::probe::{
    DeviceTorView, DeviceView, HARDWARE_SIGNS, HccsState, HccsView, NodeState, ProbeSnapshot,
    SpineView,
};
use std::fmt;

/// Renders the device plane of the probing part.
#[derive(Debug, Default)]
pub struct DeviceCollector;

impl Render for DeviceCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let Some(pr) = &view.probe else {
            return Ok(());
        };
        let Some(d) = &pr.device else {
            return Ok(());
        };
        let me = d.me;
        states(pr, d, me, f)?;
        verdicts(pr, d, f)?;
        local(pr, d, f)?;
        conditions(d, f)?;
        match &d.hccs {
            Some(h) => hccs(pr, h, f),
            None => Ok(()),
        }
    }
}

fn port_labels(pr: &ProbeSnapshot, d: &DeviceView, i: usize) -> Labels {
    match d.ports.get(i) {
        Some(p) => vec![("node", pr.name(p.node)), ("npu", p.npu.to_string())],
        None => vec![("node", String::new()), ("npu", i.to_string())],
    }
}

fn states(pr: &ProbeSnapshot, d: &DeviceView, me: Option<usize>, f: &mut dyn Sink) -> fmt::Result {
    let shown = d
        .ports
        .iter()
        .enumerate()
        .filter(|(_, p)| Some(p.node) == me || p.state != NodeState::Healthy);
    f.gauge(
        "hcclwatch_npu_port_state",
        "1 for the NPU port's current device-plane state (this node's ports always; other members' only while not healthy).",
        shown
            .flat_map(|(i, p)| {
                NodeState::ALL.iter().map(move |s| {
                    let mut l = port_labels(pr, d, i);
                    l.push(("state", s.as_str().to_string()));
                    (l, flag(*s == p.state))
                })
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_port_window_loss_ratio",
        "Lost ÷ sent packets through the NPU port over the device engine's window (this node's ports, and other members' while not healthy).",
        d.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| (Some(p.node) == me || p.state != NodeState::Healthy) && p.window_packets > 0)
            .map(|(i, p)| {
                (
                    port_labels(pr, d, i),
                    f64::from(p.window_lost) / f64::from(p.window_packets),
                )
            })
            .collect(),
    )
}

fn verdicts(pr: &ProbeSnapshot, d: &DeviceView, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_device_fabric_degraded",
        "Whether a large share of the NPU fabric (or a ToR) is bad on the device plane (blocks port and node verdicts).",
        vec![(vec![], flag(d.fabric_degraded))],
    )?;
    f.gauge(
        "hcclwatch_device_node_degraded",
        "Members most of whose NPU ports are bad on the device plane.",
        d.node_verdicts
            .iter()
            .map(|n| (vec![("node", pr.name(*n))], 1.0))
            .collect(),
    )?;
    tors(pr, d, f)?;
    let spine = |s: &SpineView| vec![("spine", s.name.clone())];
    f.gauge(
        "hcclwatch_device_spine_degraded",
        "1 while a device-plane partial fabric event has a spine's shape: a share of the NPU pings between ToRs slow, spread over them, those within ToRs spared (a verdict on a spine of the group, for the network team; never quarantines a port or node). Absent without such an event.",
        d.spines.iter().map(|s| (spine(s), 1.0)).collect(),
    )?;
    f.gauge(
        "hcclwatch_device_spine_slow_ping_ratio",
        "While the device-plane spine verdict holds: the share of the NPU pings between ToRs it slowed (about one over the spines behind them).",
        d.spines.iter().map(|s| (spine(s), s.cross_share)).collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_port_pair_degraded",
        "NPU port pairs judged bad while both ports are otherwise fine (a cable or a switch path); never quarantines.",
        d.pair_verdicts
            .iter()
            .map(|(a, b)| {
                let (pa, pb) = (port_labels(pr, d, *a), port_labels(pr, d, *b));
                (
                    vec![
                        ("src_node", pa[0].1.clone()),
                        ("src_npu", pa[1].1.clone()),
                        ("dst_node", pb[0].1.clone()),
                        ("dst_npu", pb[1].1.clone()),
                    ],
                    1.0,
                )
            })
            .collect(),
    )
}

/// ToR verdicts: one series per ToR with a verdict, its evidence, and one per member.
fn tors(pr: &ProbeSnapshot, d: &DeviceView, f: &mut dyn Sink) -> fmt::Result {
    let tor = |t: &DeviceTorView| vec![("tor", t.tor.clone())];
    f.gauge(
        "hcclwatch_device_tor_degraded",
        "ToRs (leaf switches) most of whose members' NPU ports are lossy or slow beyond the ToR's normal, or whose pings lose packets the group's other pings do not, on the device plane: a verdict on the switch, never on its ports or nodes.",
        d.tor_verdicts.iter().map(|t| (tor(t), 1.0)).collect(),
    )?;
    f.gauge(
        "hcclwatch_device_tor_bad_port_ratio",
        "Share of a degraded ToR's NPU ports that are lossy or slow against the fabric.",
        d.tor_verdicts
            .iter()
            .filter(|t| t.ports > 0)
            .map(|t| (tor(t), t.elevated as f64 / t.ports as f64))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_device_tor_loss_ratio",
        "A degraded ToR's loss rate: the median over its NPU ports of their window loss ratio.",
        d.tor_verdicts
            .iter()
            .map(|t| (tor(t), t.loss_ratio))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_device_tor_crossing_loss_ratio",
        "A degraded ToR's loss on the last round's pings crossing it, when that loss, unlikely against the group's other pings, would make it a verdict on its own (a ToR that began dropping before its ports' windows show it); absent otherwise.",
        d.tor_verdicts
            .iter()
            .filter_map(|t| t.crossing_loss_ratio.map(|x| (tor(t), x)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_device_tor_crossing_slow_share",
        "A degraded ToR's share of slow pings among the last round's pings crossing it, when that share, unlikely against the group's other pings and matched by its pings within, would make it a verdict on its own (a ToR that began delaying before its ports' windows show it); absent otherwise.",
        d.tor_verdicts
            .iter()
            .filter_map(|t| t.crossing_slow_share.map(|x| (tor(t), x)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_device_tor_member",
        "The members of a degraded ToR (1 per member, while the verdict holds).",
        d.tor_verdicts
            .iter()
            .flat_map(|t| {
                t.members.iter().map(move |n| {
                    let mut l = tor(t);
                    l.push(("node", pr.name(*n)));
                    (l, 1.0)
                })
            })
            .collect(),
    )
}

fn local(pr: &ProbeSnapshot, d: &DeviceView, f: &mut dyn Sink) -> fmt::Result {
    let npu = |n: u32| vec![("npu", n.to_string())];
    f.histogram(
        "hcclwatch_npu_ping_rtt_seconds",
        "Round trips of this node's device-plane pings, per local NPU.",
        d.local.iter().map(|l| (npu(l.npu), &l.rtt)).collect(),
    )?;
    f.counter(
        "hcclwatch_npu_ping_packets",
        "Packets of this node's device-plane pings, per local NPU, by result (received, lost).",
        d.local
            .iter()
            .flat_map(|l| packets_by_result(l.npu, l.sent, l.received))
            .collect(),
    )?;
    f.counter(
        "hcclwatch_npu_ping_failures",
        "Device-plane pings that measured nothing (tool busy, unsupported, timed out, error), per local NPU.",
        d.local
            .iter()
            .flat_map(|l| {
                l.failures.iter().map(move |(reason, v)| {
                    let mut labels = npu(l.npu);
                    labels.push(("reason", (*reason).to_string()));
                    (labels, *v)
                })
            })
            .collect(),
    )?;
    let pair = |src: usize, dst: usize| {
        let (s, t) = (port_labels(pr, d, src), port_labels(pr, d, dst));
        vec![
            ("npu", s[1].1.clone()),
            ("dst_node", t[0].1.clone()),
            ("dst_npu", t[1].1.clone()),
        ]
    };
    f.gauge(
        "hcclwatch_npu_ping_loss_ratio",
        "Lost ÷ sent packets of this node's pings of the last round, per planned pair.",
        d.planned
            .iter()
            .map(|p| {
                (
                    pair(p.src, p.dst),
                    f64::from(p.sent - p.received) / f64::from(p.sent.max(1)),
                )
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_ping_mean_rtt_seconds",
        "Mean round trip of this node's pings of the last round, per planned pair that answered.",
        d.planned
            .iter()
            .filter_map(|p| p.rtt.map(|r| (pair(p.src, p.dst), r)))
            .collect(),
    )
}

/// This node's own ports' counters over the port poller's latest interval: congestion,
/// and the hardware signs congestion cannot give.
fn conditions(d: &DeviceView, f: &mut dyn Sink) -> fmt::Result {
    let npu = |n: u32| vec![("npu", n.to_string())];
    f.gauge(
        "hcclwatch_npu_port_congested",
        "Whether this NPU port received pause frames or congestion notifications over the port poller's latest interval: its slow rounds then never count towards a quarantine.",
        d.conditions
            .iter()
            .map(|c| (npu(c.npu), flag(c.congested)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_port_hardware_sign",
        "Whether this NPU port showed this hardware sign over the port poller's latest interval (sign: link_speed, its link below the best speed it ran at; frame_errors, FCS errors or bad packets received): evidence congestion cannot give, that lets a confirmed port be recommended after the short hold instead of the persistence horizon.",
        d.conditions
            .iter()
            .flat_map(|c| {
                PORT_SIGNS.iter().map(|s| {
                    let mut labels = npu(c.npu);
                    labels.push(("sign", s.to_string()));
                    (labels, flag(c.hardware_signs.contains(s)))
                })
            })
            .collect(),
    )
}

/// The hardware signs an NPU port can show (a port has no PCIe link of its own to read).
const PORT_SIGNS: [&str; 2] = [HARDWARE_SIGNS[0], HARDWARE_SIGNS[2]];

fn hccs(pr: &ProbeSnapshot, h: &HccsView, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_hccs_ping_mesh_state",
        "1 for the HCCS ping mesh's current state on this node: running, pending (not decided yet), or why it is unavailable (not_supported: -8255, not an Atlas A3; missing_function: the DCMI library lacks it; not_permitted: -8002, needs root).",
        HccsState::ALL
            .iter()
            .map(|s| (vec![("state", s.as_str().to_string())], flag(*s == h.state)))
            .collect(),
    )?;
    let npu = |n: u32| vec![("npu", n.to_string())];
    f.histogram(
        "hcclwatch_npu_hccs_ping_rtt_seconds",
        "Average HCCS round trip per destination and read, as the DCMI ping-mesh task reports it, per local NPU (time unit of the library not confirmed on hardware).",
        h.local.iter().map(|l| (npu(l.npu), &l.rtt)).collect(),
    )?;
    f.counter(
        "hcclwatch_npu_hccs_ping_packets",
        "Packets of this node's HCCS ping-mesh tasks, per local NPU, by result (received, lost).",
        h.local
            .iter()
            .flat_map(|l| packets_by_result(l.npu, l.sent, l.received))
            .collect(),
    )?;
    f.counter(
        "hcclwatch_npu_hccs_ping_invalid_readings",
        "HCCS ping-mesh destination readings dropped as implausible (negative, huge or non-finite values, an address the task was not given), per local NPU.",
        h.local.iter().map(|l| (npu(l.npu), l.invalid)).collect(),
    )?;
    f.counter(
        "hcclwatch_npu_hccs_ping_task_restarts",
        "HCCS ping-mesh tasks found stopped (a chip reset) and started again, per local NPU.",
        h.local.iter().map(|l| (npu(l.npu), l.restarts)).collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_hccs_ping_destinations",
        "Destinations of the HCCS ping-mesh tasks running now, per local NPU.",
        h.local
            .iter()
            .map(|l| (npu(l.npu), l.destinations as f64))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_hccs_ping_loss_ratio",
        "Lost ÷ sent HCCS ping-mesh packets since the read before, per local NPU and destination that lost packets in the last read.",
        h.local
            .iter()
            .flat_map(|l| {
                l.lossy.iter().map(move |x| {
                    let mut labels = npu(l.npu);
                    labels.push(("dst_node", pr.name(x.node)));
                    labels.push(("dst_npu", x.npu.to_string()));
                    (labels, x.loss_ratio)
                })
            })
            .collect(),
    )
}

/// The `received` and `lost` samples of one local NPU's packet counter.
fn packets_by_result(npu: u32, sent: u64, received: u64) -> [(Labels, u64); 2] {
    [
        ("received", received),
        ("lost", sent.saturating_sub(received)),
    ]
    .map(|(result, v)| {
        (
            vec![("npu", npu.to_string()), ("result", result.to_string())],
            v,
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Format, encode, registry};
    use crate::snapshot::Store;
    use crate::snapshot::probe::{DeviceTorView, MemberView};
    use crate::snapshot::status::BuildInfo;

    use super::*;

    fn member(name: &str) -> MemberView {
        MemberView {
            up: true,
            ..MemberView::new(name)
        }
    }

    fn lines(text: &str, family: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(String::from)
            .collect()
    }

    /// A ToR verdict on leaf-7 (members 1 and 2 of n0–n2: 12 of their 16 ports bad, 5 %
    /// loss, 7 in 8 of its crossing pings slow) is one series per ToR for the verdict and
    /// each piece of evidence, and one per member, named.
    #[test]
    fn a_tor_verdict_names_the_tor_its_members_and_evidence() {
        let store = Arc::new(Store::new(false, false));
        store.publish_probe(ProbeSnapshot {
            active: true,
            members: vec![member("n0"), member("n1"), member("n2")],
            device: Some(DeviceView {
                me: Some(0),
                tor_verdicts: vec![
                    DeviceTorView {
                        tor: "leaf-7".into(),
                        members: vec![1, 2],
                        ports: 16,
                        elevated: 12,
                        loss_ratio: 0.05,
                        rtt_level: 0.0,
                        crossing_loss_ratio: None,
                        crossing_slow_share: Some(0.875),
                        rounds: 4,
                    },
                    DeviceTorView {
                        tor: "leaf-8".into(),
                        members: vec![0],
                        ports: 8,
                        elevated: 0,
                        loss_ratio: 0.001,
                        rtt_level: 0.0,
                        crossing_loss_ratio: Some(0.0625),
                        crossing_slow_share: None,
                        rounds: 2,
                    },
                ],
                ..DeviceView::default()
            }),
            ..ProbeSnapshot::default()
        });
        let text = encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap();
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_degraded"),
            [
                "hcclwatch_device_tor_degraded{tor=\"leaf-7\"} 1.0",
                "hcclwatch_device_tor_degraded{tor=\"leaf-8\"} 1.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_bad_port_ratio"),
            [
                "hcclwatch_device_tor_bad_port_ratio{tor=\"leaf-7\"} 0.75",
                "hcclwatch_device_tor_bad_port_ratio{tor=\"leaf-8\"} 0.0",
            ]
        );
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_loss_ratio"),
            [
                "hcclwatch_device_tor_loss_ratio{tor=\"leaf-7\"} 0.05",
                "hcclwatch_device_tor_loss_ratio{tor=\"leaf-8\"} 0.001",
            ]
        );
        // Only the ToR its crossing pings' loss made a verdict has that evidence.
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_crossing_loss_ratio"),
            ["hcclwatch_device_tor_crossing_loss_ratio{tor=\"leaf-8\"} 0.0625"]
        );
        // And only the one its crossing pings' slowness made a verdict has that.
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_crossing_slow_share"),
            ["hcclwatch_device_tor_crossing_slow_share{tor=\"leaf-7\"} 0.875"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_device_tor_member"),
            [
                "hcclwatch_device_tor_member{tor=\"leaf-7\",node=\"n1\"} 1.0",
                "hcclwatch_device_tor_member{tor=\"leaf-7\",node=\"n2\"} 1.0",
                "hcclwatch_device_tor_member{tor=\"leaf-8\",node=\"n0\"} 1.0",
            ]
        );
    }

    /// A device-plane spine verdict is one series by its spine group, with its share of
    /// the pings between ToRs; without one neither family has a series.
    #[test]
    fn a_device_spine_verdict_has_its_series_only_while_it_holds() {
        let store = Arc::new(Store::new(false, false));
        let publish = |spines: Vec<SpineView>| {
            store.publish_probe(ProbeSnapshot {
                active: true,
                members: vec![member("n0"), member("n1")],
                device: Some(DeviceView {
                    me: Some(0),
                    spines,
                    ..DeviceView::default()
                }),
                ..ProbeSnapshot::default()
            });
            encode(
                &registry(store.clone(), BuildInfo::current()),
                Format::Text004,
            )
            .unwrap()
        };
        let quiet = publish(Vec::new());
        assert!(lines(&quiet, "hcclwatch_device_spine_degraded").is_empty());
        assert!(lines(&quiet, "hcclwatch_device_spine_slow_ping_ratio").is_empty());
        let text = publish(vec![SpineView {
            name: "pod-3".into(),
            tors: vec!["leaf-1".into(), "leaf-2".into(), "leaf-3".into()],
            members: vec![0, 1],
            tor_pairs: 3,
            cross_share: 0.375,
            inner_share: 0.0,
        }]);
        assert_eq!(
            lines(&text, "hcclwatch_device_spine_degraded"),
            ["hcclwatch_device_spine_degraded{spine=\"pod-3\"} 1.0"]
        );
        assert_eq!(
            lines(&text, "hcclwatch_device_spine_slow_ping_ratio"),
            ["hcclwatch_device_spine_slow_ping_ratio{spine=\"pod-3\"} 0.375"]
        );
    }
}
