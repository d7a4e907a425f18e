//! A fully populated snapshot for unit tests of the readers: every reading of every
//! domain has a value, with numbers chosen here (not by a source), so a reader's test can
//! check its output against them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Store;
use super::histogram::Histogram;
use super::host::{HostReadings, HostSnapshot, InterfaceCounters};
use super::npu::*;
use super::port::{
    HCCN_CALL_BUCKETS, HccnCallStats, IpSource, LinkChange, LinkStat, Optics, PortReadings,
    PortSnapshot, STAT_KEYS,
};
use super::status::CollectorStatus;

/// Chip `phy` with every reading set; values derive from `phy` so chips differ.
pub fn chip(phy: u32) -> ChipReadings {
    let p = f64::from(phy);
    ChipReadings {
        address: ChipAddress {
            card: (phy / 2) as i32,
            device: (phy % 2) as i32,
            logic: phy,
            phy,
        },
        identity: Identity {
            model: Some("910B3-Ascend-V1".into()),
            uuid: Some(format_vdie([phy, 2, 3, 4, 5])),
            pci_bus_id: Some(format_bdf(0, 0x01 + phy * 0x20, 0, 0)),
            serial: Some(format!("SN{phy:04}")),
            kind: ChipKind::Other,
        },
        health: Some(0),
        dropped: false,
        up: Some(true),
        faults: Some(vec![Fault {
            code: FAULT_CARD_DROPPED,
            level: FaultLevel::RestartNPU,
            source: LevelSource::Table,
            description: Some("card dropped".into()),
            state: FaultState::Counted,
        }]),
        fault_events: [(("critical", "occur"), 1)].into_iter().collect(),
        network_health: Some(0),
        critical_reads: 0,
        network_bad_reads: 0,
        temperature_celsius: Some(40.0 + p),
        power_watts: Some(200.0 + p),
        voltage_volts: Some(0.85),
        aicore_frequency_hertz: Some(1.8e9),
        utilization: [(UtilUnit::Aicore, 0.25), (UtilUnit::Overall, 0.5)]
            .into_iter()
            .collect(),
        hbm: Some(Hbm {
            total_bytes: 64 << 30,
            used_bytes: (1 << 30) * u64::from(phy + 1),
            temperature_celsius: 41.0,
            bandwidth_utilization_ratio: 0.05,
        }),
        ddr: Some(Ddr {
            total_bytes: 2,
            used_bytes: 1,
        }),
        ecc: Some(Ecc {
            enabled: true,
            total_single: 3,
            ..Ecc::default()
        }),
        packets: Some(PacketCounters {
            roce_rx_all: 1000,
            roce_tx_all: 2000,
            ..PacketCounters::default()
        }),
        fec: Some(Fec {
            total: 1_000_000,
            corrected: 10 + u64::from(phy),
            uncorrectable: 0,
            bad: 0,
            pre_correction_ber: Some(1e-9),
        }),
        hccs: Hccs {
            tx_bytes_per_second: Some([Some(1.0); 16]),
            rx_bytes_per_second: Some([Some(1.0); 16]),
            tx_flits: Some([1; 16]),
            rx_flits: Some([1; 16]),
            crc_errors: Some([0; 16]),
        },
        processes: Some(vec![NpuProcess {
            pid: 4242 + phy,
            memory_bytes: 1 << 30,
        }]),
    }
}

fn status(name: &str) -> CollectorStatus {
    CollectorStatus {
        name: name.into(),
        success: true,
        duration: Duration::from_millis(1),
        last_success: Some(SystemTime::now()),
    }
}

/// A store holding `chips` fixture chips behind a DCMI backend with one error, one
/// timeout and one unsupported call, and a host with one interface.
pub fn store(chips: u32) -> Arc<Store> {
    let mut stats = SourceStats::default();
    stats
        .call_errors
        .insert(("dcmi_get_device_health".into(), "-8012".into()), 1);
    stats
        .timeouts
        .insert("dcmi_get_device_network_health".into(), 1);
    stats.unsupported.insert(Unsupported {
        call: "dcmi_get_device_memory_info_v3".into(),
        scope: Scope::Chip(0),
        reason: "not_supported",
    });
    let store = Arc::new(Store::new(true, true));
    store.publish_npu(NpuSnapshot {
        backend: Some("dcmi"),
        backend_up: true,
        state: NpuState {
            driver_version: Some("24.1.rc2".into()),
            chips: (0..chips).map(|p| (p, chip(p))).collect(),
            cards: BTreeMap::new(),
            enumerated: true,
            seen: (0..chips).collect(),
        },
        collectors: [("dcmi".to_string(), status("dcmi"))].into_iter().collect(),
        stats,
        expected_npus: 0,
    });
    let interfaces: BTreeMap<String, InterfaceCounters> = [(
        "eth0".to_string(),
        InterfaceCounters {
            rx_bytes: 10,
            tx_bytes: 20,
            rx_errors: 0,
            tx_errors: 1,
        },
    )]
    .into_iter()
    .collect();
    store.publish_host(HostSnapshot {
        readings: Some(HostReadings {
            cpu_usage_ratio: Some(0.5),
            cpus: 2,
            memory_total_bytes: 8 << 30,
            memory_available_bytes: 4 << 30,
            interfaces,
        }),
        collector: Some(status("host")),
    });
    store.publish_ports(PortSnapshot {
        ports: (0..chips).map(|p| (p, port(p))).collect(),
        collectors: [("npu_ports".to_string(), status("npu_ports"))]
            .into_iter()
            .collect(),
    });
    let mut calls = HccnCallStats::default();
    calls.calls.insert(("link", "ok"), 3);
    calls.calls.insert(("optical", "not_supported"), 1);
    let mut h = Histogram::new(HCCN_CALL_BUCKETS);
    h.observe(0.05);
    calls.durations.insert("link", h);
    calls.unsupported.insert(("optical", 1));
    store.publish_hccn_calls(calls);
    store
}

/// The port of NPU `phy` with every reading set.
pub fn port(phy: u32) -> PortReadings {
    let p = f64::from(phy);
    PortReadings {
        link_up: Some(true),
        speed_bits_per_second: Some(200e9),
        link_stat: Some(LinkStat {
            up_count: 1 + u64::from(phy),
            down_count: Some(u64::from(phy)),
            changes: vec![LinkChange {
                at_unix_seconds: 1.7e9 + p,
                up: true,
            }],
        }),
        net_health: Some(0),
        device_ips: vec![std::net::Ipv4Addr::new(10, 20, 0, phy as u8 + 1)],
        ip_source: Some(IpSource::HccnTool),
        vnic_ip: Some(std::net::Ipv4Addr::new(192, 168, 2, phy as u8 + 1)),
        optics: Some(Optics {
            present: true,
            temperature_celsius: Some(45.0 + p),
            voltage_volts: Some(3.3),
            tx_power_watts: (0..4).map(|l| (l, 0.0011)).collect(),
            rx_power_watts: (0..4).map(|l| (l, 0.0009)).collect(),
        }),
        counters: Some(STAT_KEYS.iter().map(|k| (k.to_string(), 7)).collect()),
    }
}
