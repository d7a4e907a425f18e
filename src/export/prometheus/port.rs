//! NPU port and optics families, read through `hccn_tool`: the tool's own call
//! statistics, then per NPU link state, speed, link events, network health (where DCMI
//! has none), device addresses, the optical module per lane, and the `-stat -g`
//! counters DCMI does not give.
//!
//! Every per-NPU series carries the device labels of the NPU collector (`npu`, `uuid`,
//! `model`, `pci_bus_id`) when DCMI knows the chip, and `npu` alone when it does not. A
//! reading that failed has no series; the failure shows in
//! `hcclwatch_scrape_collector_success{collector="npu_ports"|"npu_optics"}`.

use super::family::{Labels, Render, Sink, flag, with};
use super::npu::device_labels;
use crate::snapshot::View;
use crate::snapshot::npu::NpuSnapshot;
use crate::snapshot::port::{HccnCallStats, PortReadings, PortSnapshot};
use std::fmt;

/// Renders the port part of the snapshot and the `hccn_tool` call statistics.
#[derive(Debug, Default)]
pub struct PortCollector;

impl Render for PortCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        if let Some(calls) = &view.hccn_calls {
            call_stats(calls, f)?;
        }
        let Some(ports) = &view.ports else {
            return Ok(());
        };
        let p = Ports {
            ports,
            npu: &view.npu,
        };
        links(&p, f)?;
        addresses(&p, f)?;
        optics(&p, f)?;
        counters(&p, f)
    }
}

/// The ports with the NPU part, for the device labels.
struct Ports<'a> {
    ports: &'a PortSnapshot,
    npu: &'a NpuSnapshot,
}

impl Ports<'_> {
    fn labels(&self, phy: u32) -> Labels {
        match self.npu.state.chips.get(&phy) {
            Some(chip) => device_labels(chip),
            None => vec![("npu", phy.to_string())],
        }
    }

    /// One series per port where `get` has a value.
    fn each<T>(&self, get: impl Fn(&PortReadings) -> Option<T>) -> Vec<(Labels, T)> {
        self.ports
            .ports
            .iter()
            .filter_map(|(phy, r)| get(r).map(|v| (self.labels(*phy), v)))
            .collect()
    }
}

fn call_stats(s: &HccnCallStats, f: &mut dyn Sink) -> fmt::Result {
    f.counter(
        "hcclwatch_hccn_calls",
        "hccn_tool runs by command and result (ok, busy, not_supported, timeout, queue_timeout, device_not_ready, error, ...); a busy answer is retried and each run counted.",
        s.calls
            .iter()
            .map(|((cmd, result), n)| {
                (
                    vec![("command", (*cmd).to_string()), ("result", (*result).to_string())],
                    *n,
                )
            })
            .collect(),
    )?;
    f.histogram(
        "hcclwatch_hccn_call_duration_seconds",
        "Wall time of hccn_tool runs by command, up to the kill at the call's deadline.",
        s.durations
            .iter()
            .map(|(cmd, h)| (vec![("command", (*cmd).to_string())], h))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_hccn_unsupported",
        "hccn_tool commands this product does not support on an NPU; never run again.",
        s.unsupported
            .iter()
            .map(|(cmd, phy)| {
                (
                    vec![("command", (*cmd).to_string()), ("npu", phy.to_string())],
                    1.0,
                )
            })
            .collect(),
    )
}

fn links(v: &Ports<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_port_up",
        "Whether the NPU's RoCE port link is up (hccn_tool -link -g).",
        v.each(|r| r.link_up.map(flag)),
    )?;
    f.gauge(
        "hcclwatch_npu_port_speed_bits_per_second",
        "Negotiated speed of the NPU's RoCE port (hccn_tool -speed -g, Mb/s x 10^6); absent while the tool reports Unknown.",
        v.each(|r| r.speed_bits_per_second),
    )?;
    f.counter(
        "hcclwatch_npu_port_link_up_events",
        "Link-up events of the NPU's RoCE port counted by the driver (hccn_tool -link_stat -g).",
        v.each(|r| r.link_stat.as_ref().map(|s| s.up_count)),
    )?;
    f.counter(
        "hcclwatch_npu_port_link_down_events",
        "Link-down events of the NPU's RoCE port counted by the driver (older drivers do not report it).",
        v.each(|r| r.link_stat.as_ref().and_then(|s| s.down_count)),
    )?;
    f.gauge(
        "hcclwatch_npu_port_last_change_timestamp_seconds",
        "Unix time of the newest link change the driver recorded for the NPU's RoCE port (absent when none is recorded).",
        v.each(|r| {
            r.link_stat
                .as_ref()
                .and_then(|s| s.last_change_unix_seconds())
        }),
    )?;
    // DCMI wins: its hcclwatch_npu_network_health is the reading; this family only fills
    // in for NPUs where DCMI has none (no DCMI, or the call unsupported there).
    f.gauge(
        "hcclwatch_npu_port_network_health",
        "hccn_tool -net_health -g result, for NPUs without a DCMI network-health reading: 0 ok, 1 socket fail, 2 receive timeout, 3 unreachable, 4 time exceeded, 5 fault, 6 initialising, 7 thread error, 8 detect IP being set.",
        v.ports
            .ports
            .iter()
            .filter(|(phy, _)| {
                v.npu
                    .state
                    .chips
                    .get(phy)
                    .is_none_or(|c| c.network_health.is_none())
            })
            .filter_map(|(phy, r)| r.net_health.map(|h| (v.labels(*phy), f64::from(h))))
            .collect(),
    )
}

fn addresses(v: &Ports<'_>, f: &mut dyn Sink) -> fmt::Result {
    let mut series = Vec::new();
    for (phy, r) in &v.ports.ports {
        if let Some(src) = r.ip_source {
            for ip in &r.device_ips {
                series.push((
                    with(
                        v.labels(*phy),
                        &[
                            ("address", ip.to_string()),
                            ("kind", "roce".to_string()),
                            ("source", src.as_str().to_string()),
                        ],
                    ),
                    1.0,
                ));
            }
        }
        if let Some(ip) = r.vnic_ip {
            series.push((
                with(
                    v.labels(*phy),
                    &[
                        ("address", ip.to_string()),
                        ("kind", "vnic".to_string()),
                        ("source", "hccn_tool".to_string()),
                    ],
                ),
                1.0,
            ));
        }
    }
    f.gauge(
        "hcclwatch_npu_port_address_info",
        "The NPU's device IPv4 addresses; always 1. kind: roce (the rank table's device_ip) or vnic (A3 HCCS); source: hccn_tool (-ip -g / -vnic -g) or hccn_conf (address_<npu> of /etc/hccn.conf).",
        series,
    )
}

fn optics(v: &Ports<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_optical_present",
        "Whether an optical module is plugged into the NPU's port (hccn_tool -optical -g).",
        v.each(|r| r.optics.as_ref().map(|o| flag(o.present))),
    )?;
    f.gauge(
        "hcclwatch_npu_optical_temperature_celsius",
        "Optical module temperature.",
        v.each(|r| r.optics.as_ref().and_then(|o| o.temperature_celsius)),
    )?;
    f.gauge(
        "hcclwatch_npu_optical_voltage_volts",
        "Optical module supply voltage (the tool prints mV).",
        v.each(|r| r.optics.as_ref().and_then(|o| o.voltage_volts)),
    )?;
    let per_lane = |tx: bool| -> Vec<(Labels, f64)> {
        let mut out = Vec::new();
        for (phy, r) in &v.ports.ports {
            let Some(o) = &r.optics else { continue };
            let lanes = if tx {
                &o.tx_power_watts
            } else {
                &o.rx_power_watts
            };
            for (lane, w) in lanes {
                out.push((with(v.labels(*phy), &[("lane", lane.to_string())]), *w));
            }
        }
        out
    };
    f.gauge(
        "hcclwatch_npu_optical_tx_power_watts",
        "Optical transmit power per lane (the tool prints mW); lanes the module does not have are absent.",
        per_lane(true),
    )?;
    f.gauge(
        "hcclwatch_npu_optical_rx_power_watts",
        "Optical receive power per lane (the tool prints mW); a dying module or a dirty or bent fibre shows here first.",
        per_lane(false),
    )
}

/// A `-stat -g` family: name, help, and its series as (key, extra labels).
type StatFamily = (&'static str, &'static str, Vec<(String, Labels)>);

fn dir(d: &str) -> Labels {
    vec![("direction", d.to_string())]
}

/// The `-stat -g` counters DCMI does not give, as families. The others (pause, PFC
/// totals, bad packets, FCS, RoCE totals, errors, CNP, retries, ECN) are the NPU
/// collector's, from `dcmi_get_netdev_pkt_stats_info`.
fn stat_families() -> Vec<StatFamily> {
    let both = |tx: &str, rx: &str| vec![(tx.to_string(), dir("tx")), (rx.to_string(), dir("rx"))];
    let one = |k: &str| vec![(k.to_string(), Labels::new())];
    let mut pfc = Vec::new();
    for d in ["tx", "rx"] {
        for p in 0..8 {
            pfc.push((
                format!("mac_{d}_pfc_pri{p}_pkt_num"),
                vec![("direction", d.to_string()), ("priority", p.to_string())],
            ));
        }
    }
    vec![
        (
            "hcclwatch_npu_mac_pfc_priority_frames",
            "MAC PFC frames by direction and priority (hccn_tool -stat -g); the priority carrying RoCE shows a PFC storm.",
            pfc,
        ),
        (
            "hcclwatch_npu_mac_packets",
            "All MAC packets by direction (hccn_tool -stat -g).",
            both("mac_tx_total_pkt_num", "mac_rx_total_pkt_num"),
        ),
        (
            "hcclwatch_npu_mac_bytes",
            "All MAC bytes by direction (hccn_tool -stat -g).",
            both("mac_tx_total_oct_num", "mac_rx_total_oct_num"),
        ),
        (
            "hcclwatch_npu_mac_bad_bytes",
            "Bytes of bad MAC packets by direction (hccn_tool -stat -g).",
            both("mac_tx_bad_oct_num", "mac_rx_bad_oct_num"),
        ),
        (
            "hcclwatch_npu_roce_rc_packets",
            "RoCE reliable-connection packets by direction (hccn_tool -stat -g).",
            both("roce_tx_rc_pkt_num", "roce_rx_rc_pkt_num"),
        ),
        (
            "hcclwatch_npu_roce_cqes",
            "RoCE completion queue entries (hccn_tool -stat -g).",
            one("roce_cqe_num"),
        ),
        (
            "hcclwatch_npu_roce_unexpected_acks",
            "RoCE unexpected ACKs (hccn_tool -stat -g).",
            one("roce_unexpected_ack_num"),
        ),
        (
            "hcclwatch_npu_roce_out_of_order_packets",
            "RoCE packets received out of order (hccn_tool -stat -g).",
            one("roce_out_of_order_num"),
        ),
        (
            "hcclwatch_npu_roce_verification_errors",
            "RoCE packets that failed verification (hccn_tool -stat -g).",
            one("roce_verification_err_num"),
        ),
        (
            "hcclwatch_npu_roce_qp_status_errors",
            "RoCE packets for a queue pair in the wrong state (hccn_tool -stat -g).",
            one("roce_qp_status_err_num"),
        ),
        (
            "hcclwatch_npu_nic_packets",
            "Packets of the NPU's NIC path (non-RoCE) by direction (hccn_tool -stat -g).",
            both("nic_tx_all_pkg_num", "nic_rx_all_pkg_num"),
        ),
        (
            "hcclwatch_npu_nic_bytes",
            "Bytes of the NPU's NIC path (non-RoCE) by direction (hccn_tool -stat -g).",
            both("nic_tx_all_oct_num", "nic_rx_all_oct_num"),
        ),
    ]
}

fn counters(v: &Ports<'_>, f: &mut dyn Sink) -> fmt::Result {
    for (name, help, keys) in stat_families() {
        let mut series = Vec::new();
        for (phy, r) in &v.ports.ports {
            let Some(c) = &r.counters else { continue };
            for (key, extra) in &keys {
                if let Some(n) = c.get(key) {
                    series.push((with(v.labels(*phy), extra), *n));
                }
            }
        }
        f.counter(name, help, series)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::prometheus::{Format, encode, registry};
    use crate::snapshot::Store;
    use crate::snapshot::npu::{ChipReadings, Identity};
    use crate::snapshot::port::{IpSource, LinkChange, LinkStat, Optics};
    use crate::snapshot::status::{BuildInfo, CollectorStatus};
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;
    use std::sync::Arc;
    use std::time::Duration;

    fn scrape(store: Arc<Store>) -> String {
        encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap()
    }

    fn port() -> PortReadings {
        PortReadings {
            link_up: Some(true),
            speed_bits_per_second: Some(200e9),
            link_stat: Some(LinkStat {
                up_count: 3,
                down_count: Some(2),
                changes: vec![LinkChange {
                    at_unix_seconds: 1_759_659_231.0,
                    up: true,
                }],
            }),
            net_health: Some(3),
            device_ips: vec![Ipv4Addr::new(10, 20, 0, 1)],
            ip_source: Some(IpSource::HccnTool),
            vnic_ip: None,
            optics: Some(Optics {
                present: true,
                temperature_celsius: Some(47.0),
                voltage_volts: Some(3.2629),
                tx_power_watts: [(0, 0.0011), (1, 0.0012)].into(),
                rx_power_watts: [(0, 0.0009)].into(),
            }),
            counters: Some(BTreeMap::from([
                ("mac_rx_pfc_pri3_pkt_num".to_string(), 34),
                ("roce_cqe_num".to_string(), 450_000),
            ])),
        }
    }

    #[test]
    fn renders_si_units_with_device_labels() {
        let store = Arc::new(Store::new(false, false));
        let mut npu = NpuSnapshot::default();
        let mut chip = ChipReadings::default();
        chip.address.phy = 0;
        chip.identity = Identity {
            model: Some("910B3-Ascend-V1".into()),
            uuid: Some("U0".into()),
            pci_bus_id: Some("0000:61:00.0".into()),
            serial: None,
            ..Identity::default()
        };
        // DCMI has a network-health reading for NPU 0: hccn_tool's is not exported.
        chip.network_health = Some(0);
        npu.state.chips.insert(0, chip);
        store.publish_npu(npu);
        let mut part = PortSnapshot::default();
        part.ports.insert(0, port());
        // NPU 1: not known to DCMI, link down, no optics, speed unknown.
        part.ports.insert(
            1,
            PortReadings {
                link_up: Some(false),
                net_health: Some(2),
                ..PortReadings::default()
            },
        );
        part.collectors.insert(
            "npu_ports".into(),
            CollectorStatus {
                name: "npu_ports".into(),
                success: false,
                duration: Duration::from_millis(5),
                last_success: None,
            },
        );
        store.publish_ports(part);
        let s = scrape(store);
        let dev = r#"npu="0",uuid="U0",model="910B3-Ascend-V1",pci_bus_id="0000:61:00.0""#;
        for line in [
            format!("hcclwatch_npu_port_up{{{dev}}} 1"),
            r#"hcclwatch_npu_port_up{npu="1"} 0"#.to_string(),
            format!("hcclwatch_npu_port_speed_bits_per_second{{{dev}}} 200000000000"),
            format!("hcclwatch_npu_port_link_up_events_total{{{dev}}} 3"),
            format!("hcclwatch_npu_port_link_down_events_total{{{dev}}} 2"),
            format!("hcclwatch_npu_port_last_change_timestamp_seconds{{{dev}}} 1759659231"),
            r#"hcclwatch_npu_port_network_health{npu="1"} 2"#.to_string(),
            format!(
                "hcclwatch_npu_port_address_info{{{dev},address=\"10.20.0.1\",kind=\"roce\",source=\"hccn_tool\"}} 1"
            ),
            format!("hcclwatch_npu_optical_present{{{dev}}} 1"),
            format!("hcclwatch_npu_optical_temperature_celsius{{{dev}}} 47"),
            format!("hcclwatch_npu_optical_voltage_volts{{{dev}}} 3.2629"),
            format!("hcclwatch_npu_optical_tx_power_watts{{{dev},lane=\"1\"}} 0.0012"),
            format!("hcclwatch_npu_optical_rx_power_watts{{{dev},lane=\"0\"}} 0.0009"),
            format!(
                "hcclwatch_npu_mac_pfc_priority_frames_total{{{dev},direction=\"rx\",priority=\"3\"}} 34"
            ),
            format!("hcclwatch_npu_roce_cqes_total{{{dev}}} 450000"),
            r#"hcclwatch_scrape_collector_success{collector="npu_ports"} 0"#.to_string(),
        ] {
            assert!(s.contains(&line), "missing {line}\n{s}");
        }
        // Failed or absent readings have no series; DCMI's network health wins.
        assert!(!s.contains(&format!("hcclwatch_npu_port_network_health{{{dev}")));
        assert!(!s.contains("hcclwatch_npu_port_speed_bits_per_second{npu=\"1\"}"));
        assert!(!s.contains("hcclwatch_npu_optical_present{npu=\"1\"}"));
        assert!(!s.contains("lane=\"2\""));
        // Only counters the tool reported; none DCMI already exports.
        assert!(!s.contains("hcclwatch_npu_nic_packets_total"));
    }

    #[test]
    fn nothing_without_the_tool() {
        let s = scrape(Arc::new(Store::new(false, false)));
        assert!(!s.contains("hcclwatch_npu_port_"), "{s}");
        assert!(!s.contains("hcclwatch_hccn_"), "{s}");
    }

    #[test]
    fn stat_families_cover_exactly_the_keys_dcmi_does_not_give() {
        use crate::snapshot::port::{STAT_KEYS, STAT_KEYS_READ_THROUGH_DCMI};
        let mut exported: Vec<String> = stat_families()
            .into_iter()
            .flat_map(|(_, _, keys)| keys.into_iter().map(|(k, _)| k))
            .collect();
        exported.sort();
        let mut want: Vec<String> = STAT_KEYS
            .iter()
            .filter(|k| !STAT_KEYS_READ_THROUGH_DCMI.contains(k))
            .map(|k| k.to_string())
            .collect();
        want.sort();
        assert_eq!(exported, want);
    }
}
