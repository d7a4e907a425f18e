//! `compat.npu_exporter`: the readings hcclwatch has, also under the metric names, labels
//! and units of Huawei's npu-exporter (MindCluster), so dashboards, HAMi-WebUI and
//! scripts written against it read hcclwatch unchanged.
//!
//! What is npu-exporter's here: the names, the card labels (`id`, `model_name`,
//! `vdie_id`, `pcie_bus_info`, `namespace`, `pod_name`, `container_name`, empty where not
//! known, as it writes them), its units (MB, MHz, percent, Mb/s, mV, mW, GB/s) and its
//! types (every family a gauge, counters included). What stays hcclwatch's: a reading not
//! obtained has no series, where npu-exporter writes -1 for some (health and network
//! status "unknown"); samples carry no timestamp. Readings npu-exporter has and hcclwatch
//! does not are not written at all; `docs/metrics.md` lists them with the mapping.

use std::collections::BTreeMap;
use std::fmt;

use super::family::{Labels, Render, Sink, flag};
use crate::snapshot::View;
use crate::snapshot::npu::{self as model, ChipKind, ChipReadings, UtilUnit};
use crate::snapshot::port::{Optics, PortReadings};

/// npu-exporter's value of the three container labels on a card more than one container
/// uses (`NotDisplayedForMultiPod`).
pub const MULTI_POD: &str = "not_displayed_for_multi_pod";

/// Bytes in npu-exporter's MB (DCMI's MB is 2^20 bytes).
const MB: f64 = (1u64 << 20) as f64;

/// HCCS links npu-exporter names (`_0` to `_7`).
const HCCS_LINKS: usize = 8;

/// Fault codes npu-exporter writes per chip at most (`npu_chip_info_error_code`, then
/// `_1` to `_9`).
const ERROR_CODES: usize = 10;

/// Renders the npu-exporter names of the snapshot's readings.
#[derive(Debug, Default)]
pub struct NpuExporterCollector;

impl Render for NpuExporterCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let c = Cards::new(view);
        machine(&c, f)?;
        identity_and_health(&c, f)?;
        sensors(&c, f)?;
        utilization(&c, f)?;
        memory(&c, f)?;
        ecc(&c, f)?;
        processes(&c, f)?;
        error_codes(&c, f)?;
        links(&c, f)?;
        optics(&c, f)?;
        packets(&c, f)?;
        hccs(&c, f)
    }
}

/// The chips with their card labels, and the ports by physical id.
struct Cards<'a> {
    view: &'a View,
    /// `namespace`, `pod_name`, `container_name` by physical id, for NPUs with users.
    containers: BTreeMap<u32, [String; 3]>,
}

impl<'a> Cards<'a> {
    fn new(view: &'a View) -> Self {
        let mut containers = BTreeMap::new();
        for (npu, users) in view.attribution.iter().flat_map(|a| a.users.iter()) {
            let labels = match users.as_slice() {
                [] => continue,
                [one] => {
                    let (ns, pod) = one
                        .pod
                        .name
                        .as_ref()
                        .map(|p| (p.namespace.clone(), p.name.clone()))
                        .unwrap_or_default();
                    [ns, pod, one.container.clone().unwrap_or_default()]
                }
                // npu-exporter writes one marker for all three when several containers
                // share the card (whether of one pod or several).
                _ => [MULTI_POD.into(), MULTI_POD.into(), MULTI_POD.into()],
            };
            containers.insert(*npu, labels);
        }
        Self { view, containers }
    }

    fn chips(&self) -> impl Iterator<Item = &'a ChipReadings> + use<'a> {
        self.view.npu.state.chips.values()
    }

    /// The card labels of NPU `phy`; identity not known (no DCMI reading of the chip) is
    /// empty, as npu-exporter writes a failed identity read.
    fn labels(&self, phy: u32) -> Labels {
        let id = self.view.npu.state.chips.get(&phy).map(|c| &c.identity);
        let get = |f: fn(&model::Identity) -> &Option<String>| {
            id.and_then(|i| f(i).clone()).unwrap_or_default()
        };
        let [ns, pod, container] = self.containers.get(&phy).cloned().unwrap_or_default();
        vec![
            ("id", phy.to_string()),
            ("model_name", get(|i| &i.model)),
            ("vdie_id", get(|i| &i.uuid)),
            ("pcie_bus_info", get(|i| &i.pci_bus_id)),
            ("namespace", ns),
            ("pod_name", pod),
            ("container_name", container),
        ]
    }

    /// One series per chip where `get` has a value.
    fn each(&self, get: impl Fn(&ChipReadings) -> Option<f64>) -> Vec<(Labels, f64)> {
        self.chips()
            .filter_map(|c| get(c).map(|v| (self.labels(c.address.phy), v)))
            .collect()
    }

    /// One series per port where `get` has a value.
    fn each_port(&self, get: impl Fn(&PortReadings) -> Option<f64>) -> Vec<(Labels, f64)> {
        self.view
            .ports
            .iter()
            .flat_map(|p| p.ports.iter())
            .filter_map(|(phy, r)| get(r).map(|v| (self.labels(*phy), v)))
            .collect()
    }
}

/// `labels` with `extra` appended.
fn plus(mut labels: Labels, extra: &[(&'static str, String)]) -> Labels {
    labels.extend(extra.iter().cloned());
    labels
}

fn machine(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    let count = |keep: fn(Option<u32>) -> bool| c.chips().filter(|x| keep(x.health)).count();
    let one = |n: usize| vec![(Labels::new(), n as f64)];
    f.gauge(
        "machine_npu_nums",
        "npu-exporter name: NPUs enumerated on this node.",
        one(c.chips().count()),
    )?;
    f.gauge(
        "machine_healthy_npu_nums",
        "npu-exporter name: NPUs whose DCMI health is 0 (ok).",
        one(count(|h| h == Some(0))),
    )?;
    f.gauge(
        "machine_unhealthy_npu_nums",
        "npu-exporter name: NPUs whose DCMI health is an alarm (1 to 3).",
        one(count(|h| h.is_some_and(|h| h != 0))),
    )?;
    f.gauge(
        "machine_unknown_npu_nums",
        "npu-exporter name: NPUs whose health read failed this cycle.",
        one(count(|h| h.is_none())),
    )
}

fn identity_and_health(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "npu_chip_info_name",
        "npu-exporter name: the chip's name-type-version in label name; always 1.",
        c.chips()
            .map(|x| {
                let mut l = c.labels(x.address.phy);
                // npu-exporter calls the model label `name` on this one family.
                if let Some(k) = l.iter_mut().find(|(k, _)| *k == "model_name") {
                    k.0 = "name";
                }
                (l, 1.0)
            })
            .collect(),
    )?;
    f.gauge(
        "npu_chip_info_serial_number",
        "npu-exporter name: the card's serial number in label serial_number; always 1.",
        c.chips()
            .filter_map(|x| {
                let serial = x.identity.serial.clone()?;
                Some((
                    plus(c.labels(x.address.phy), &[("serial_number", serial)]),
                    1.0,
                ))
            })
            .collect(),
    )?;
    f.gauge(
        "npu_chip_info_health_status",
        "npu-exporter name: 1 healthy (DCMI health 0), 0 unhealthy; no series when the read failed (npu-exporter writes -1).",
        c.each(|x| x.health.map(|h| flag(h == 0))),
    )?;
    // DCMI's reading where it has one, else hccn_tool's (the same result codes).
    let ports = c.view.ports.as_deref();
    f.gauge(
        "npu_chip_info_network_status",
        "npu-exporter name: 1 when the RoCE network health result is 0 (ok) or 6 (initialising), else 0; no series when not read.",
        c.chips()
            .filter_map(|x| {
                let code = x.network_health.or_else(|| {
                    ports
                        .and_then(|p| p.ports.get(&x.address.phy))
                        .and_then(|r| r.net_health)
                })?;
                Some((
                    c.labels(x.address.phy),
                    flag(model::network_health_is_ok(code)),
                ))
            })
            .collect(),
    )
}

fn sensors(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "npu_chip_info_temperature",
        "npu-exporter name: chip temperature, °C.",
        c.each(|x| x.temperature_celsius),
    )?;
    // npu-exporter shows a 310P card's board (MCU) power on each of its chips.
    let cards = &c.view.npu.state.cards;
    f.gauge(
        "npu_chip_info_power",
        "npu-exporter name: power, W (on 310P the card's board power, on each of its chips; on A3 the card's, on the die that reports it).",
        c.each(|x| match x.identity.kind {
            ChipKind::Ascend310P => cards.get(&x.address.card).and_then(|r| r.power_watts),
            _ => x.power_watts,
        }),
    )?;
    f.gauge(
        "npu_chip_info_voltage",
        "npu-exporter name: chip voltage, V.",
        c.each(|x| x.voltage_volts),
    )?;
    f.gauge(
        "npu_chip_info_aicore_current_freq",
        "npu-exporter name: current AI-core clock, MHz.",
        c.each(|x| x.aicore_frequency_hertz.map(|hz| hz / 1e6)),
    )
}

fn utilization(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    let families = [
        (
            "npu_chip_info_utilization",
            "npu-exporter name: AI-core utilisation, percent.",
            UtilUnit::Aicore,
        ),
        (
            "npu_chip_info_overall_utilization",
            "npu-exporter name: whole-NPU utilisation, percent.",
            UtilUnit::Overall,
        ),
        (
            "npu_chip_info_vector_utilization",
            "npu-exporter name: vector-core utilisation, percent.",
            UtilUnit::Vector,
        ),
        (
            "npu_chip_info_cube_utilization",
            "npu-exporter name: cube-unit utilisation, percent.",
            UtilUnit::Cube,
        ),
        (
            "npu_chip_info_hbm_utilization",
            "npu-exporter name: HBM (on-chip memory) utilisation, percent.",
            UtilUnit::Hbm,
        ),
    ];
    for (name, help, unit) in families {
        f.gauge(
            name,
            help,
            c.each(|x| x.utilization.get(&unit).map(|r| r * 100.0)),
        )?;
    }
    Ok(())
}

fn memory(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    let mb = |b: u64| b as f64 / MB;
    f.gauge(
        "npu_chip_info_hbm_used_memory",
        "npu-exporter name: HBM in use, MB (2^20 bytes).",
        c.each(|x| x.hbm.map(|h| mb(h.used_bytes))),
    )?;
    f.gauge(
        "npu_chip_info_hbm_total_memory",
        "npu-exporter name: HBM capacity, MB (2^20 bytes).",
        c.each(|x| x.hbm.map(|h| mb(h.total_bytes))),
    )?;
    f.gauge(
        "npu_chip_info_hbm_temperature",
        "npu-exporter name: HBM temperature, °C.",
        c.each(|x| x.hbm.map(|h| h.temperature_celsius)),
    )?;
    f.gauge(
        "npu_chip_info_hbm_bandwidth_utilization",
        "npu-exporter name: HBM bandwidth utilisation, percent.",
        c.each(|x| x.hbm.map(|h| h.bandwidth_utilization_ratio * 100.0)),
    )?;
    f.gauge(
        "npu_chip_info_total_memory",
        "npu-exporter name: DDR capacity, MB (chips with DDR only).",
        c.each(|x| x.ddr.map(|d| mb(d.total_bytes))),
    )?;
    f.gauge(
        "npu_chip_info_used_memory",
        "npu-exporter name: DDR in use, MB (chips with DDR only).",
        c.each(|x| x.ddr.map(|d| mb(d.used_bytes))),
    )
}

fn ecc(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    type Get = fn(&model::Ecc) -> f64;
    let families: [(&str, &str, Get); 7] = [
        (
            "npu_chip_info_hbm_ecc_enable_flag",
            "npu-exporter name: 1 when HBM ECC is enabled, else 0.",
            |e| flag(e.enabled),
        ),
        (
            "npu_chip_info_hbm_ecc_single_bit_error_cnt",
            "npu-exporter name: HBM single-bit ECC errors since boot.",
            |e| e.single as f64,
        ),
        (
            "npu_chip_info_hbm_ecc_double_bit_error_cnt",
            "npu-exporter name: HBM double-bit ECC errors since boot.",
            |e| e.double as f64,
        ),
        (
            "npu_chip_info_hbm_ecc_total_single_bit_error_cnt",
            "npu-exporter name: HBM single-bit ECC errors over the chip's life.",
            |e| e.total_single as f64,
        ),
        (
            "npu_chip_info_hbm_ecc_total_double_bit_error_cnt",
            "npu-exporter name: HBM double-bit ECC errors over the chip's life.",
            |e| e.total_double as f64,
        ),
        (
            "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt",
            "npu-exporter name: HBM pages isolated after single-bit errors.",
            |e| e.single_isolated_pages as f64,
        ),
        (
            "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt",
            "npu-exporter name: HBM pages isolated after double-bit errors.",
            |e| e.double_isolated_pages as f64,
        ),
    ];
    for (name, help, get) in families {
        f.gauge(name, help, c.each(|x| x.ecc.as_ref().map(get)))?;
    }
    Ok(())
}

fn processes(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "npu_chip_info_process_info_num",
        "npu-exporter name: processes DCMI lists on the NPU.",
        c.each(|x| x.processes.as_ref().map(|p| p.len() as f64)),
    )?;
    // The container of each process, where attribution read its cgroup.
    let container_of: BTreeMap<(u32, u32), String> = c
        .view
        .attribution
        .iter()
        .flat_map(|a| a.processes.iter())
        .filter_map(|p| Some(((p.npu, p.pid), p.container_id.clone()?)))
        .collect();
    let container_of = &container_of;
    f.gauge(
        "npu_chip_info_process_info",
        "npu-exporter name: NPU memory of each process, MB, by process_id (host PID) and container_id (empty for a process outside containers or not attributed).",
        c.chips()
            .flat_map(|x| {
                let phy = x.address.phy;
                x.processes.iter().flatten().map(move |p| {
                    let cid = container_of.get(&(phy, p.pid)).cloned();
                    (
                        plus(
                            c.labels(phy),
                            &[
                                ("process_id", p.pid.to_string()),
                                ("container_id", cid.unwrap_or_default()),
                            ],
                        ),
                        p.memory_bytes as f64 / MB,
                    )
                })
            })
            .collect(),
    )
}

fn error_codes(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    // The codes DCMI listed, in its order; hcclwatch's own card-dropped marker is not one
    // of them (npu-exporter's read of a dropped card fails instead), nor a code only held
    // by the fault-level file's clear_after (npu-exporter has no such thing).
    let codes = |x: &ChipReadings| -> Vec<u32> {
        x.faults
            .iter()
            .flatten()
            .filter(|fault| fault.state.read_now())
            .map(|fault| fault.code)
            .filter(|code| *code != model::FAULT_CARD_DROPPED)
            .take(ERROR_CODES)
            .collect()
    };
    for i in 0..ERROR_CODES {
        let name = match i {
            0 => "npu_chip_info_error_code".to_string(),
            i => format!("npu_chip_info_error_code_{i}"),
        };
        f.gauge(
            &name,
            "npu-exporter name: an active fault code (DCMI event id) as a decimal number; the first in the unsuffixed family, up to ten.",
            c.each(|x| codes(x).get(i).map(|code| f64::from(*code))),
        )?;
    }
    Ok(())
}

fn links(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "npu_chip_info_link_status",
        "npu-exporter name: 1 when the NPU's RoCE port link is UP, 0 when DOWN (hccn_tool -link -g).",
        c.each_port(|r| r.link_up.map(flag)),
    )?;
    f.gauge(
        "npu_chip_link_speed",
        "npu-exporter name: negotiated port speed, Mb/s as hccn_tool -speed -g prints it.",
        c.each_port(|r| r.speed_bits_per_second.map(|b| b / 1e6)),
    )?;
    f.gauge(
        "npu_chip_link_up_num",
        "npu-exporter name: link-up events of the port (hccn_tool -link_stat -g).",
        c.each_port(|r| r.link_stat.as_ref().map(|s| s.up_count as f64)),
    )
}

fn optics(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    fn o(r: &PortReadings) -> Option<&Optics> {
        r.optics.as_ref()
    }
    f.gauge(
        "npu_chip_optical_state",
        "npu-exporter name: 1 when an optical module is present, 0 when not.",
        c.each_port(|r| o(r).map(|o| flag(o.present))),
    )?;
    f.gauge(
        "npu_chip_optical_vcc",
        "npu-exporter name: optical module supply voltage, mV.",
        c.each_port(|r| o(r).and_then(|o| o.voltage_volts).map(|v| v * 1e3)),
    )?;
    f.gauge(
        "npu_chip_optical_temp",
        "npu-exporter name: optical module temperature, °C.",
        c.each_port(|r| o(r).and_then(|o| o.temperature_celsius)),
    )?;
    for lane in 0..4u32 {
        f.gauge(
            &format!("npu_chip_optical_tx_power_{lane}"),
            "npu-exporter name: optical transmit power of the lane in the name, mW.",
            c.each_port(|r| o(r).and_then(|o| o.tx_power_watts.get(&lane).map(|w| w * 1e3))),
        )?;
    }
    for lane in 0..4u32 {
        f.gauge(
            &format!("npu_chip_optical_rx_power_{lane}"),
            "npu-exporter name: optical receive power of the lane in the name, mW.",
            c.each_port(|r| o(r).and_then(|o| o.rx_power_watts.get(&lane).map(|w| w * 1e3))),
        )?;
    }
    Ok(())
}

fn packets(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    type Get = fn(&model::PacketCounters) -> u64;
    // Read through DCMI (dcmi_get_netdev_pkt_stats_info).
    let dcmi: [(&str, Get); 15] = [
        ("npu_chip_mac_rx_pause_num", |p| p.mac_rx_pause),
        ("npu_chip_mac_tx_pause_num", |p| p.mac_tx_pause),
        ("npu_chip_mac_rx_pfc_pkt_num", |p| p.mac_rx_pfc),
        ("npu_chip_mac_tx_pfc_pkt_num", |p| p.mac_tx_pfc),
        ("npu_chip_mac_rx_bad_pkt_num", |p| p.mac_rx_bad),
        ("npu_chip_mac_tx_bad_pkt_num", |p| p.mac_tx_bad),
        ("npu_chip_info_rx_fcs_num", |p| p.mac_rx_fcs_errors),
        ("npu_chip_info_rx_ecn_num", |p| p.roce_ecn),
        ("npu_chip_roce_rx_all_pkt_num", |p| p.roce_rx_all),
        ("npu_chip_roce_tx_all_pkt_num", |p| p.roce_tx_all),
        ("npu_chip_roce_rx_err_pkt_num", |p| p.roce_rx_err),
        ("npu_chip_roce_tx_err_pkt_num", |p| p.roce_tx_err),
        ("npu_chip_roce_rx_cnp_pkt_num", |p| p.roce_rx_cnp),
        ("npu_chip_roce_tx_cnp_pkt_num", |p| p.roce_tx_cnp),
        ("npu_chip_roce_new_pkt_rty_num", |p| p.roce_retry),
    ];
    for (name, get) in dcmi {
        f.gauge(
            name,
            "npu-exporter name: a port counter of the NPU (dcmi_get_netdev_pkt_stats_info), as a gauge like npu-exporter's.",
            c.each(|x| x.packets.as_ref().map(|p| get(p) as f64)),
        )?;
    }
    // Read through hccn_tool -stat -g (DCMI does not give these).
    let hccn = [
        ("npu_chip_mac_tx_bad_oct_num", "mac_tx_bad_oct_num"),
        ("npu_chip_mac_rx_bad_oct_num", "mac_rx_bad_oct_num"),
        (
            "npu_chip_roce_unexpected_ack_num",
            "roce_unexpected_ack_num",
        ),
        ("npu_chip_roce_out_of_order_num", "roce_out_of_order_num"),
        (
            "npu_chip_roce_verification_err_num",
            "roce_verification_err_num",
        ),
        ("npu_chip_roce_qp_status_err_num", "roce_qp_status_err_num"),
    ];
    for (name, key) in hccn {
        f.gauge(
            name,
            "npu-exporter name: a port counter of the NPU (hccn_tool -stat -g), as a gauge like npu-exporter's.",
            c.each_port(|r| r.counters.as_ref().and_then(|m| m.get(key)).map(|n| *n as f64)),
        )?;
    }
    Ok(())
}

fn hccs(c: &Cards<'_>, f: &mut dyn Sink) -> fmt::Result {
    type Get = fn(&model::Hccs) -> Option<[u64; 16]>;
    let counts: [(&str, Get); 3] = [
        ("tx_cnt", |h| h.tx_flits),
        ("rx_cnt", |h| h.rx_flits),
        ("crc_err_cnt", |h| h.crc_errors),
    ];
    for (what, get) in counts {
        for link in 0..HCCS_LINKS {
            f.gauge(
                &format!("npu_chip_info_hccs_statistic_info_{what}_{link}"),
                "npu-exporter name: HCCS flit or CRC-error count of the link in the name.",
                c.each(|x| get(&x.hccs).map(|a| a[link] as f64)),
            )?;
        }
    }
    type Bw = fn(&model::Hccs) -> Option<[Option<f64>; 16]>;
    let bandwidth: [(&str, Bw); 2] = [
        ("tx", |h| h.tx_bytes_per_second),
        ("rx", |h| h.rx_bytes_per_second),
    ];
    for (dir, get) in bandwidth {
        for link in 0..HCCS_LINKS {
            f.gauge(
                &format!("npu_chip_info_hccs_bandwidth_info_{dir}_{link}"),
                "npu-exporter name: HCCS bandwidth of the link in the name, GB/s (10^9 bytes).",
                c.each(|x| get(&x.hccs).and_then(|a| a[link]).map(|b| b / 1e9)),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::snapshot::Store;
    use crate::snapshot::attribution::{AttributionSnapshot, Evidence, NpuUser, PodName, PodRef};
    use crate::snapshot::histogram::Histogram;
    use crate::snapshot::npu::{
        CardReadings, ChipAddress, Fault, FaultLevel, FaultState, Hbm, Identity, LevelSource,
        NpuSnapshot, NpuState,
    };

    /// Every series written, as (family, labels, value).
    #[derive(Default)]
    struct Rec(Vec<(String, Labels, f64)>);

    impl Sink for Rec {
        fn gauge(&mut self, name: &str, _: &str, series: Vec<(Labels, f64)>) -> fmt::Result {
            for (l, v) in series {
                self.0.push((name.to_string(), l, v));
            }
            Ok(())
        }
        fn counter(&mut self, name: &str, _: &str, _: Vec<(Labels, u64)>) -> fmt::Result {
            panic!("npu-exporter writes gauges only, not counter {name}")
        }
        fn histogram(&mut self, name: &str, _: &str, _: Vec<(Labels, &Histogram)>) -> fmt::Result {
            panic!("npu-exporter writes gauges only, not histogram {name}")
        }
    }

    impl Rec {
        /// The values of `family` for NPU `id`.
        fn values(&self, family: &str, id: &str) -> Vec<f64> {
            self.0
                .iter()
                .filter(|(n, l, _)| n == family && l.contains(&("id", id.to_string())))
                .map(|(_, _, v)| *v)
                .collect()
        }
        fn label(&self, family: &str, id: &str, key: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(n, l, _)| n == family && l.contains(&("id", id.to_string())))
                .and_then(|(_, l, _)| l.iter().find(|(k, _)| *k == key))
                .map(|(_, v)| v.clone())
        }
    }

    fn chip(phy: u32, card: i32) -> ChipReadings {
        ChipReadings {
            address: ChipAddress {
                card,
                device: 0,
                logic: phy,
                phy,
            },
            identity: Identity {
                model: Some("910B3-Ascend-V1".into()),
                uuid: Some("00000007-00000002-00000003-00000004-00000005".into()),
                pci_bus_id: Some("0000:61:00.0".into()),
                serial: Some("SN7".into()),
                kind: ChipKind::Other,
            },
            ..ChipReadings::default()
        }
    }

    fn render(chips: Vec<ChipReadings>, cards: BTreeMap<i32, CardReadings>) -> Rec {
        render_with(chips, cards, None)
    }

    fn render_with(
        chips: Vec<ChipReadings>,
        cards: BTreeMap<i32, CardReadings>,
        attribution: Option<AttributionSnapshot>,
    ) -> Rec {
        let store = Arc::new(Store::new(false, false));
        store.publish_npu(NpuSnapshot {
            backend: Some("dcmi"),
            state: NpuState {
                chips: chips.into_iter().map(|c| (c.address.phy, c)).collect(),
                cards,
                ..NpuState::default()
            },
            ..NpuSnapshot::default()
        });
        if let Some(a) = attribution {
            store.publish_attribution(a);
        }
        let mut rec = Rec::default();
        NpuExporterCollector
            .render(&store.view(), &mut rec)
            .unwrap();
        rec
    }

    /// The units npu-exporter writes: readings chosen here in hcclwatch's SI units come
    /// out in MHz, MB, percent and GB/s, with the card labels.
    #[test]
    fn readings_come_out_in_npu_exporter_units_and_labels() {
        let mut c = chip(7, 3);
        c.health = Some(0);
        c.temperature_celsius = Some(45.0);
        c.power_watts = Some(215.5);
        c.voltage_volts = Some(0.85);
        c.aicore_frequency_hertz = Some(1_800_000_000.0);
        c.utilization = [(UtilUnit::Aicore, 0.37), (UtilUnit::Hbm, 0.12)].into();
        c.hbm = Some(Hbm {
            total_bytes: 65536 * 1024 * 1024,
            used_bytes: 1024 * 1024 * 1024,
            temperature_celsius: 40.0,
            bandwidth_utilization_ratio: 0.05,
        });
        c.processes = Some(vec![model::NpuProcess {
            pid: 4242,
            memory_bytes: 512 * 1024 * 1024,
        }]);
        let mut h = model::Hccs::default();
        let mut bw = [None; 16];
        bw[1] = Some(1.5e9);
        h.tx_bytes_per_second = Some(bw);
        c.hccs = h;
        let r = render(vec![c], BTreeMap::new());
        let one = |f: &str| r.values(f, "7");
        assert_eq!(one("npu_chip_info_temperature"), [45.0]);
        assert_eq!(one("npu_chip_info_power"), [215.5]);
        assert_eq!(one("npu_chip_info_voltage"), [0.85]);
        assert_eq!(one("npu_chip_info_aicore_current_freq"), [1800.0]);
        assert_eq!(one("npu_chip_info_utilization"), [37.0]);
        assert_eq!(one("npu_chip_info_hbm_utilization"), [12.0]);
        assert_eq!(one("npu_chip_info_hbm_total_memory"), [65536.0]);
        assert_eq!(one("npu_chip_info_hbm_used_memory"), [1024.0]);
        assert_eq!(one("npu_chip_info_hbm_bandwidth_utilization"), [5.0]);
        assert_eq!(one("npu_chip_info_process_info"), [512.0]);
        assert_eq!(one("npu_chip_info_process_info_num"), [1.0]);
        assert_eq!(one("npu_chip_info_hccs_bandwidth_info_tx_1"), [1.5]);
        assert!(one("npu_chip_info_hccs_bandwidth_info_tx_0").is_empty());
        assert_eq!(one("npu_chip_info_health_status"), [1.0]);
        assert_eq!(one("machine_npu_nums"), Vec::<f64>::new()); // no id label
        let labels: Vec<&str> =
            r.0.iter()
                .find(|(n, _, _)| n == "npu_chip_info_temperature")
                .unwrap()
                .1
                .iter()
                .map(|(k, _)| *k)
                .collect();
        assert_eq!(
            labels,
            [
                "id",
                "model_name",
                "vdie_id",
                "pcie_bus_info",
                "namespace",
                "pod_name",
                "container_name"
            ]
        );
        let label = |k| r.label("npu_chip_info_temperature", "7", k);
        assert_eq!(label("model_name").as_deref(), Some("910B3-Ascend-V1"));
        assert_eq!(
            label("vdie_id").as_deref(),
            Some("00000007-00000002-00000003-00000004-00000005")
        );
        assert_eq!(label("pcie_bus_info").as_deref(), Some("0000:61:00.0"));
        assert_eq!(label("pod_name").as_deref(), Some(""));
        assert_eq!(
            r.label("npu_chip_info_name", "7", "name").as_deref(),
            Some("910B3-Ascend-V1")
        );
        assert_eq!(
            r.label("npu_chip_info_process_info", "7", "process_id")
                .as_deref(),
            Some("4242")
        );
    }

    /// A reading not obtained has no series: no -1, no 0. The health counts still add up
    /// to the chips, the unread one counted unknown.
    #[test]
    fn a_reading_not_obtained_has_no_series() {
        let mut ok = chip(0, 0);
        ok.health = Some(0);
        let mut bad = chip(1, 0);
        bad.health = Some(2);
        let unread = chip(2, 1);
        let r = render(vec![ok, bad, unread], BTreeMap::new());
        assert_eq!(r.values("npu_chip_info_health_status", "1"), [0.0]);
        assert!(r.values("npu_chip_info_health_status", "2").is_empty());
        for family in [
            "npu_chip_info_temperature",
            "npu_chip_info_power",
            "npu_chip_info_hbm_used_memory",
            "npu_chip_info_network_status",
            "npu_chip_info_error_code",
        ] {
            assert!(r.values(family, "2").is_empty(), "{family}");
        }
        assert!(r.0.iter().all(|(_, _, v)| *v >= 0.0), "a negative value");
        let machine = |f: &str| {
            r.0.iter()
                .find(|(n, _, _)| n == f)
                .map(|(_, _, v)| *v)
                .unwrap()
        };
        assert_eq!(machine("machine_npu_nums"), 3.0);
        assert_eq!(machine("machine_healthy_npu_nums"), 1.0);
        assert_eq!(machine("machine_unhealthy_npu_nums"), 1.0);
        assert_eq!(machine("machine_unknown_npu_nums"), 1.0);
    }

    /// npu-exporter's container labels: one container's names, the multi-pod marker for
    /// an NPU several containers use, empty for an NPU nobody uses.
    #[test]
    fn container_labels_as_npu_exporter_writes_them() {
        let user = |pod: &str, container: &str| NpuUser {
            pod: PodRef {
                name: Some(PodName {
                    namespace: "ml".into(),
                    name: pod.into(),
                }),
                uid: None,
            },
            container: Some(container.into()),
            evidence: BTreeSet::from([Evidence::PodResources]),
            pids: BTreeSet::new(),
        };
        let mut a = AttributionSnapshot::default();
        a.users.insert(0, vec![user("train-0", "main")]);
        a.users
            .insert(1, vec![user("infer-a", "srv"), user("infer-b", "srv")]);
        let mut chips = vec![chip(0, 0), chip(1, 0), chip(2, 1)];
        for c in &mut chips {
            c.temperature_celsius = Some(50.0);
        }
        let r = render_with(chips, BTreeMap::new(), Some(a));
        let labels = |id| {
            ["namespace", "pod_name", "container_name"]
                .map(|k| r.label("npu_chip_info_temperature", id, k).unwrap())
        };
        assert_eq!(labels("0"), ["ml", "train-0", "main"]);
        assert_eq!(labels("1"), [MULTI_POD; 3]);
        assert_eq!(labels("2"), ["", "", ""]);
    }

    /// 310P: the card's board power on each of its chips (npu-exporter's reading), never a
    /// chip's own; fault codes in DCMI's order as decimals, without hcclwatch's
    /// card-dropped marker, nor a code only held by the fault-level file's `clear_after`.
    #[test]
    fn board_power_on_310p_chips_and_fault_codes_as_decimals() {
        let mut a = chip(0, 4);
        let mut b = chip(1, 4);
        let mut c2 = chip(2, 4);
        for c in [&mut a, &mut b, &mut c2] {
            c.identity.kind = ChipKind::Ascend310P;
        }
        let fault = |code| Fault {
            code,
            level: FaultLevel::NotHandleFault,
            source: LevelSource::Table,
            description: None,
            state: FaultState::Counted,
        };
        a.faults = Some(vec![
            fault(0x80E1_8005),
            fault(model::FAULT_CARD_DROPPED),
            fault(0x8C08_4E00),
        ]);
        // The fault-level file's overrides: a code held after it cleared is not listed by
        // DCMI now, one still short of its consecutive reads is.
        c2.faults = Some(vec![
            Fault {
                state: FaultState::Pending {
                    reads: 1,
                    needed: 3,
                },
                ..fault(0x8000_0001)
            },
            Fault {
                state: FaultState::Held,
                ..fault(0x8000_0002)
            },
        ]);
        let cards = BTreeMap::from([(
            4,
            CardReadings {
                power_watts: Some(85.6),
            },
        )]);
        let r = render(vec![a, b, c2], cards);
        assert_eq!(r.values("npu_chip_info_power", "0"), [85.6]);
        assert_eq!(r.values("npu_chip_info_power", "1"), [85.6]);
        assert_eq!(r.values("npu_chip_info_error_code", "0"), [2_162_262_021.0]);
        assert_eq!(
            r.values("npu_chip_info_error_code_1", "0"),
            [2_349_354_496.0]
        );
        assert!(r.values("npu_chip_info_error_code_2", "0").is_empty());
        assert!(r.values("npu_chip_info_error_code", "1").is_empty());
        assert_eq!(r.values("npu_chip_info_error_code", "2"), [2_147_483_649.0]);
        assert!(r.values("npu_chip_info_error_code_1", "2").is_empty());
    }
}
