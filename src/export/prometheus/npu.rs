//! NPU families: the DCMI backend's own health, then per chip identity, health and faults,
//! sensors (and the card power of cards whose power is not a chip's), utilisation, memory,
//! ECC and processes, port and FEC counters and HCCS links. Every per-chip series carries
//! the device labels `npu`, `uuid`, `model`, `pci_bus_id`; a reading the source did not
//! obtain has no series.

use super::family::{Labels, Render, Sink, flag, with};
use crate::snapshot::View;
use crate::snapshot::npu::{self as model, ChipReadings, NpuSnapshot, Scope};
use std::fmt;

/// Renders the NPU part of the snapshot.
#[derive(Debug, Default)]
pub struct NpuCollector;

impl Render for NpuCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        // `web.pod_labels`: namespace/pod/container on every per-NPU series, from the
        // same attribution the allocation family of this view shows.
        let f = &mut super::attribution::with_pod_labels(view, f);
        let npu = &view.npu;
        if npu.backend == Some("dcmi") {
            dcmi_health(npu, f)?;
        }
        let chips: Vec<&ChipReadings> = npu.state.chips.values().collect();
        identity_and_health(npu, &chips, f)?;
        faults(&chips, f)?;
        sensors(&chips, f)?;
        card_power(npu, f)?;
        memory(&chips, f)?;
        processes(&chips, f)?;
        packets(&chips, f)?;
        fec(&chips, f)?;
        hccs(&chips, f)
    }
}

/// The device labels of a chip.
pub fn device_labels(c: &ChipReadings) -> Labels {
    vec![
        ("npu", c.address.phy.to_string()),
        ("uuid", c.identity.uuid.clone().unwrap_or_default()),
        ("model", c.identity.model.clone().unwrap_or_default()),
        (
            "pci_bus_id",
            c.identity.pci_bus_id.clone().unwrap_or_default(),
        ),
    ]
}

fn per_chip<F>(chips: &[&ChipReadings], f: F) -> Vec<(Labels, f64)>
where
    F: Fn(&ChipReadings) -> Option<f64>,
{
    chips
        .iter()
        .filter_map(|c| f(c).map(|v| (device_labels(c), v)))
        .collect()
}

fn per_chip_counter<F>(
    chips: &[&ChipReadings],
    extra: &[(&'static str, &'static str)],
    f: F,
) -> Vec<(Labels, u64)>
where
    F: Fn(&ChipReadings) -> Option<u64>,
{
    chips
        .iter()
        .filter_map(|c| {
            f(c).map(|v| {
                let mut l = device_labels(c);
                l.extend(extra.iter().map(|(k, v)| (*k, (*v).to_string())));
                (l, v)
            })
        })
        .collect()
}

fn dcmi_health(npu: &NpuSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.counter(
        "hcclwatch_dcmi_call_errors",
        "DCMI calls that returned an error, by call and DCMI return code.",
        npu.stats
            .call_errors
            .iter()
            .map(|((call, code), n)| (vec![("call", call.clone()), ("code", code.clone())], *n))
            .collect(),
    )?;
    f.counter(
        "hcclwatch_dcmi_calls_timed_out",
        "DCMI calls that missed their deadline; the reading was omitted.",
        npu.stats
            .timeouts
            .iter()
            .map(|(call, n)| (vec![("call", call.clone())], *n))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_dcmi_unsupported",
        "DCMI readings this device or driver does not support, never asked for again: a missing symbol for the whole call, -8255 for the npu (or card) that answered it.",
        npu.stats
            .unsupported
            .iter()
            .map(|u| {
                let mut l = vec![("call", u.call.clone())];
                match u.scope {
                    Scope::Call => {}
                    Scope::Card(card) => l.push(("card", card.to_string())),
                    Scope::Chip(phy) => l.push(("npu", phy.to_string())),
                }
                l.push(("reason", u.reason.to_string()));
                (l, 1.0)
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_dcmi_stuck_calls",
        "DCMI calls still blocked past their deadline (each holds one thread).",
        vec![(vec![], npu.stats.stuck_calls as f64)],
    )?;
    f.gauge(
        "hcclwatch_dcmi_fault_events_subscribed",
        "Whether DCMI pushes fault events to hcclwatch (1) or the subscription failed (0; in a container it needs root). Absent when the driver lacks the function.",
        npu.stats
            .fault_subscription
            .map(|s| (vec![], flag(s)))
            .into_iter()
            .collect(),
    )?;
    f.counter(
        "hcclwatch_dcmi_fault_events_dropped",
        "DCMI fault events dropped because hcclwatch's queue was full; their chips are still re-read at the next health interval.",
        npu.stats
            .fault_subscription
            .map(|_| (vec![], npu.stats.fault_events_dropped))
            .into_iter()
            .collect(),
    )
}

fn identity_and_health(
    npu: &NpuSnapshot,
    chips: &[&ChipReadings],
    f: &mut dyn Sink,
) -> fmt::Result {
    f.gauge(
        "hcclwatch_devices",
        "NPUs currently enumerated by the device backend.",
        vec![(vec![], chips.len() as f64)],
    )?;
    f.gauge(
        "hcclwatch_npus",
        "NPUs by state: healthy (DCMI health ok or minor alarm), unhealthy (major or critical alarm, or the chip dropped), unknown (enumerated, health not read), missing (expected by telemetry.expected_npus, or listed by an earlier inventory, and no longer enumerated). Absent while the chip list cannot be read.",
        model::device_counts(&npu.state, npu.expected_npus)
            .into_iter()
            .flatten()
            .map(|(state, n)| (vec![("state", state.as_str().to_string())], n as f64))
            .collect(),
    )?;
    let driver = npu.state.driver_version.clone().unwrap_or_default();
    f.gauge(
        "hcclwatch_npu_info",
        "Static NPU metadata; always 1. Join on npu.",
        chips
            .iter()
            .map(|c| {
                (
                    with(
                        device_labels(c),
                        &[
                            ("serial", c.identity.serial.clone().unwrap_or_default()),
                            ("driver_version", driver.clone()),
                        ],
                    ),
                    1.0,
                )
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_up",
        "Whether the NPU answered its health query (1) or not (0: call failed or card dropped).",
        per_chip(chips, |c| c.up.map(flag)),
    )?;
    f.gauge(
        "hcclwatch_npu_health",
        "DCMI health: 0 ok, 1 minor alarm, 2 major alarm, 3 critical alarm.",
        per_chip(chips, |c| c.health.map(f64::from)),
    )?;
    f.gauge(
        "hcclwatch_npu_network_health",
        "DCMI RoCE network health result: 0 ok, 1 socket fail, 2 receive timeout, 3 unreachable, 4 time exceeded, 5 fault, 6 initialising, 7 thread error, 8 IP not set.",
        per_chip(chips, |c| c.network_health.map(f64::from)),
    )?;
    f.gauge(
        "hcclwatch_npu_network_up",
        "Whether the NPU's RoCE network health is good (result 0 or 6).",
        per_chip(chips, |c| {
            c.network_health
                .map(|h| flag(model::network_health_is_ok(h)))
        }),
    )
}

/// The labels of an active fault: `npu`, `code` (hex) and `level`.
fn fault_labels(c: &ChipReadings, fault: &model::Fault) -> Labels {
    vec![
        ("npu", c.address.phy.to_string()),
        ("code", format!("0x{:08X}", fault.code)),
        ("level", fault.level.as_str().to_string()),
    ]
}

/// The chip's faults that have their effect now: read and counted, or held by the
/// fault-level file's `clear_after`; not those still short of their `consecutive_reads`.
fn in_effect(c: &ChipReadings) -> impl Iterator<Item = &model::Fault> {
    c.faults.iter().flatten().filter(|f| f.state.in_effect())
}

fn faults(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_fault_active",
        "Active NPU fault codes (DCMI event ids, hex) with their handling level from the fault-level table (a code the table lacks: SeparateNPU, or NotHandleFault when its fault event was hint or minor); 0x40F84E00 means the card dropped. The table file's per-code overrides can delay a code (consecutive_reads) or keep it for a while after it clears (clear_after).",
        chips
            .iter()
            .flat_map(|c| {
                in_effect(c).map(move |fault| (fault_labels(c, fault), 1.0))
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_npu_fault_info",
        "DCMI's text for each active fault code that has one (dcmi_get_device_errorcode_string); always 1.",
        chips
            .iter()
            .flat_map(|c| {
                in_effect(c).filter_map(move |fault| {
                    let text = fault.description.clone()?;
                    Some((with(fault_labels(c, fault), &[("description", text)]), 1.0))
                })
            })
            .collect(),
    )?;
    f.counter(
        "hcclwatch_npu_fault_events",
        "Fault events DCMI pushed for the NPU, by severity (hint, minor, major, critical) and assertion (occur, recovery, once).",
        chips
            .iter()
            .flat_map(|c| {
                c.fault_events.iter().map(move |((severity, assertion), n)| {
                    (
                        with(
                            device_labels(c),
                            &[
                                ("severity", (*severity).to_string()),
                                ("assertion", (*assertion).to_string()),
                            ],
                        ),
                        *n,
                    )
                })
            })
            .collect(),
    )
}

fn sensors(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_temperature_celsius",
        "NPU chip temperature.",
        per_chip(chips, |c| c.temperature_celsius),
    )?;
    f.gauge(
        "hcclwatch_npu_power_watts",
        "NPU chip power draw. On Atlas A3 the power is the card's: it is on the die that reports it, once per card (die 0 when both report the same value). On 310P it is hcclwatch_card_power_watts.",
        per_chip(chips, |c| c.power_watts),
    )?;
    f.gauge(
        "hcclwatch_npu_voltage_volts",
        "NPU chip voltage.",
        per_chip(chips, |c| c.voltage_volts),
    )?;
    f.gauge(
        "hcclwatch_npu_aicore_frequency_hertz",
        "Current AI-core clock.",
        per_chip(chips, |c| c.aicore_frequency_hertz),
    )?;
    f.gauge(
        "hcclwatch_npu_utilization_ratio",
        "NPU utilisation by unit (aicore, vector, cube, overall, hbm), 0 to 1.",
        chips
            .iter()
            .flat_map(|c| {
                c.utilization.iter().map(move |(u, r)| {
                    (
                        with(device_labels(c), &[("unit", u.as_str().to_string())]),
                        *r,
                    )
                })
            })
            .collect(),
    )
}

fn card_power(npu: &NpuSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_card_power_watts",
        "Board power of an NPU card, from its MCU (310P / Atlas 300I Duo, whose chips have no power reading of their own); once per card, never on its chips.",
        npu.state
            .cards
            .iter()
            .filter_map(|(card, r)| r.power_watts.map(|w| (vec![("card", card.to_string())], w)))
            .collect(),
    )
}

fn processes(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_processes",
        "Processes using the NPU, as DCMI lists them (host PIDs; at most 32 per NPU).",
        per_chip(chips, |c| c.processes.as_ref().map(|p| p.len() as f64)),
    )?;
    f.gauge(
        "hcclwatch_npu_process_memory_bytes",
        "NPU memory used by each process on it, by host PID (at most 32 per NPU: the largest).",
        chips
            .iter()
            .flat_map(|c| {
                c.processes.iter().flatten().map(move |p| {
                    (
                        with(device_labels(c), &[("pid", p.pid.to_string())]),
                        p.memory_bytes as f64,
                    )
                })
            })
            .collect(),
    )
}

fn fec(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    type Get = fn(&model::Fec) -> u64;
    let kinds: [(&str, Get); 4] = [
        ("total", |x| x.total),
        ("corrected", |x| x.corrected),
        ("uncorrectable", |x| x.uncorrectable),
        ("bad", |x| x.bad),
    ];
    let mut series = Vec::new();
    for (t, get) in kinds {
        series.extend(per_chip_counter(chips, &[("type", t)], |c| {
            c.fec.as_ref().map(get)
        }));
    }
    f.counter(
        "hcclwatch_npu_fec_codewords",
        "FEC codewords on the NPU's network port 0 (dcmi_get_extra_statistics_info), by type: total received, corrected, uncorrectable, bad.",
        series,
    )?;
    f.gauge(
        "hcclwatch_npu_fec_pre_correction_bit_error_ratio",
        "Bit error ratio before FEC correction on port 0 (DCMI correcting_bit_rate; only values between 0 and 1 are exported).",
        per_chip(chips, |c| c.fec.and_then(|x| x.pre_correction_ber)),
    )
}

fn memory(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_hbm_total_bytes",
        "HBM capacity.",
        per_chip(chips, |c| c.hbm.map(|h| h.total_bytes as f64)),
    )?;
    f.gauge(
        "hcclwatch_npu_hbm_used_bytes",
        "HBM in use.",
        per_chip(chips, |c| c.hbm.map(|h| h.used_bytes as f64)),
    )?;
    f.gauge(
        "hcclwatch_npu_hbm_temperature_celsius",
        "HBM temperature.",
        per_chip(chips, |c| c.hbm.map(|h| h.temperature_celsius)),
    )?;
    f.gauge(
        "hcclwatch_npu_hbm_bandwidth_utilization_ratio",
        "HBM bandwidth utilisation, 0 to 1.",
        per_chip(chips, |c| c.hbm.map(|h| h.bandwidth_utilization_ratio)),
    )?;
    f.gauge(
        "hcclwatch_npu_ddr_total_bytes",
        "DDR capacity (chips with DDR only).",
        per_chip(chips, |c| c.ddr.map(|d| d.total_bytes as f64)),
    )?;
    f.gauge(
        "hcclwatch_npu_ddr_used_bytes",
        "DDR in use (chips with DDR only).",
        per_chip(chips, |c| c.ddr.map(|d| d.used_bytes as f64)),
    )?;
    ecc(chips, f)
}

fn ecc(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_npu_hbm_ecc_enabled",
        "Whether HBM ECC is enabled.",
        per_chip(chips, |c| c.ecc.map(|e| flag(e.enabled))),
    )?;
    type Get = fn(&model::Ecc) -> u64;
    let counts: [(&str, &str, Get); 4] = [
        ("single", "current", |e| e.single),
        ("double", "current", |e| e.double),
        ("single", "lifetime", |e| e.total_single),
        ("double", "lifetime", |e| e.total_double),
    ];
    let mut errors = Vec::new();
    for (t, scope, get) in counts {
        errors.extend(per_chip_counter(
            chips,
            &[("type", t), ("scope", scope)],
            |c| c.ecc.as_ref().map(get),
        ));
    }
    f.counter(
        "hcclwatch_npu_hbm_ecc_errors",
        "HBM ECC errors by type (single, double) and scope (current: since boot; lifetime).",
        errors,
    )?;
    let isolated: [(&str, Get); 2] = [
        ("single", |e| e.single_isolated_pages),
        ("double", |e| e.double_isolated_pages),
    ];
    let mut pages = Vec::new();
    for (t, get) in isolated {
        pages.extend(chips.iter().filter_map(|c| {
            c.ecc.as_ref().map(|e| {
                (
                    with(device_labels(c), &[("type", t.to_string())]),
                    get(e) as f64,
                )
            })
        }));
    }
    f.gauge(
        "hcclwatch_npu_hbm_ecc_isolated_pages",
        "HBM pages isolated after ECC errors, by error type.",
        pages,
    )
}

fn packets(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    type Pc = model::PacketCounters;
    type Getters = Vec<(&'static str, fn(&Pc) -> u64)>;
    let families: [(&str, &str, Getters); 7] = [
        (
            "hcclwatch_npu_mac_pause_frames",
            "MAC pause frames on the NPU's network port, by direction.",
            vec![("tx", |p| p.mac_tx_pause), ("rx", |p| p.mac_rx_pause)],
        ),
        (
            "hcclwatch_npu_mac_pfc_frames",
            "MAC PFC frames (all priorities), by direction; a PFC storm shows here.",
            vec![("tx", |p| p.mac_tx_pfc), ("rx", |p| p.mac_rx_pfc)],
        ),
        (
            "hcclwatch_npu_mac_bad_packets",
            "Bad MAC packets, by direction.",
            vec![("tx", |p| p.mac_tx_bad), ("rx", |p| p.mac_rx_bad)],
        ),
        (
            "hcclwatch_npu_roce_packets",
            "RoCE packets, by direction.",
            vec![("tx", |p| p.roce_tx_all), ("rx", |p| p.roce_rx_all)],
        ),
        (
            "hcclwatch_npu_roce_error_packets",
            "RoCE error packets, by direction.",
            vec![("tx", |p| p.roce_tx_err), ("rx", |p| p.roce_rx_err)],
        ),
        (
            "hcclwatch_npu_roce_cnp_packets",
            "RoCE congestion notification packets, by direction.",
            vec![("tx", |p| p.roce_tx_cnp), ("rx", |p| p.roce_rx_cnp)],
        ),
        (
            "hcclwatch_npu_roce_retransmissions",
            "RoCE new-packet retransmissions.",
            vec![("", |p| p.roce_retry)],
        ),
    ];
    for (name, help, dirs) in families {
        let mut series = Vec::new();
        for (dir, get) in dirs {
            let extra: Vec<(&'static str, &'static str)> = if dir.is_empty() {
                Vec::new()
            } else {
                vec![("direction", dir)]
            };
            series.extend(per_chip_counter(chips, &extra, |c| {
                c.packets.as_ref().map(get)
            }));
        }
        f.counter(name, help, series)?;
    }
    f.counter(
        "hcclwatch_npu_mac_fcs_errors",
        "Frames received with FCS errors.",
        per_chip_counter(chips, &[], |c| c.packets.map(|p| p.mac_rx_fcs_errors)),
    )?;
    f.counter(
        "hcclwatch_npu_roce_ecn_marks",
        "RoCE ECN doorbells (congestion marks).",
        per_chip_counter(chips, &[], |c| c.packets.map(|p| p.roce_ecn)),
    )
}

/// One series per HCCS link of every chip that has the reading; `dir` adds a
/// `direction` label.
fn per_link<T: Copy>(
    chips: &[&ChipReadings],
    get: fn(&model::Hccs) -> Option<[T; 16]>,
    dir: Option<&'static str>,
) -> Vec<(Labels, T)> {
    chips
        .iter()
        .flat_map(|c| {
            get(&c.hccs).into_iter().flat_map(move |arr| {
                arr.into_iter().enumerate().map(move |(i, v)| {
                    let mut l = with(device_labels(c), &[("link", i.to_string())]);
                    if let Some(d) = dir {
                        l.push(("direction", d.to_string()));
                    }
                    (l, v)
                })
            })
        })
        .collect()
}

fn hccs(chips: &[&ChipReadings], f: &mut dyn Sink) -> fmt::Result {
    // A link whose bandwidth was no physical value has no series; the chip's other links
    // keep theirs.
    let bw: Vec<(Labels, f64)> = per_link(chips, |h| h.tx_bytes_per_second, Some("tx"))
        .into_iter()
        .chain(per_link(chips, |h| h.rx_bytes_per_second, Some("rx")))
        .filter_map(|(l, v)| v.map(|v| (l, v)))
        .collect();
    f.gauge(
        "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
        "HCCS link bandwidth over the DCMI sampling window, by link and direction.",
        bw,
    )?;
    let mut flits = per_link(chips, |h| h.tx_flits, Some("tx"));
    flits.extend(per_link(chips, |h| h.rx_flits, Some("rx")));
    f.counter(
        "hcclwatch_npu_hccs_flits",
        "HCCS flits by link and direction.",
        flits,
    )?;
    f.counter(
        "hcclwatch_npu_hccs_crc_errors",
        "HCCS CRC errors by link.",
        per_link(chips, |h| h.crc_errors, None),
    )
}
