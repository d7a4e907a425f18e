//! End-to-end tests of the DCMI path: the real `hcclwatch` binary loads
//! `libfake_dcmi.so` (the real DCMI ABI) through the same code as on an Ascend node, and
//! is scraped over HTTP.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, Start, fake_config, samples, value};
use serde_json::{Value, json};

fn chip(phy: u32, logic: u32, serial: &str) -> Value {
    json!({
        "phy_id": phy, "logic_id": logic,
        "chip": {"type": "Ascend", "name": "910B3", "version": "V1", "aicore_count": 20},
        "pcie": {"domain": 0, "bus": 0x61 + phy, "device": 0, "function": 0},
        "vdie_id": [phy + 1, 2, 3, 4, 5], "serial": serial,
        "health": 0, "error_codes": [],
        "temperature_c": 45 + phy, "power_dw": 2150 + phy, "voltage_cv": 85, "aicore_mhz": 1800,
        "utilization": {"aicore": 37, "hbm": 12, "overall": 40, "vector": 5, "cube": 9},
        "hbm": {"total_mb": 65536, "used_mb": 1024, "temp_c": 40, "bandwidth_util": 5},
        "ecc_hbm": {"enabled": 1, "single": 1, "double": 0, "total_single": 3, "total_double": 2,
                    "single_isolated_pages": 4, "double_isolated_pages": 1},
        "network_health": 0,
        "pkt_stats": {"mac_tx_mac_pause_num": 11, "mac_rx_mac_pause_num": 12,
                      "mac_tx_pfc_pkt_num": 13, "mac_rx_pfc_pkt_num": 14,
                      "mac_rx_fcs_err_pkt_num": 15, "roce_rx_err_pkt_num": 16,
                      "roce_tx_all_pkt_num": 17, "roce_ecn_db_num": 18},
        "hccs": {"tx_bandwidth_gbps": [1.5, 0.25], "rx_bandwidth_gbps": [2.0],
                 "tx_cnt": [100, 200], "rx_cnt": [300], "crc_err_cnt": [0, 7]},
        "processes": [{"pid": 4242 + phy, "memory_bytes": 1_073_741_824u64},
                      {"pid": 7, "memory_bytes": 2048}],
        "fec": {"cw_total_cnt": 1_000_000, "cw_correct_cnt": 50 + phy, "cw_uncorrect_cnt": 2,
                "cw_bad_cnt": 1, "correcting_bit_rate": 1.5e-7},
        "fail": {}, "hang_ms": {}, "drop_after_calls": null
    })
}

/// Two cards: card 0 holds phy 0 and 1, card 3 holds phy 4.
fn scenario(mut edit: impl FnMut(&mut Value)) -> String {
    let mut s = json!({
        "dcmi_version": "24.1.rc2",
        "missing_symbols": [],
        "cards": [
            {"card_id": 0, "chips": [chip(0, 0, "SN-A"), chip(1, 1, "SN-A")]},
            {"card_id": 3, "chips": [chip(4, 2, "SN-B")]}
        ]
    });
    edit(&mut s);
    s.to_string()
}

fn chip_mut(s: &mut Value, card_index: usize, chip_index: usize) -> &mut Value {
    &mut s["cards"][card_index]["chips"][chip_index]
}

fn npu(n: &str) -> [(&str, &str); 1] {
    [("npu", n)]
}

/// Waits until every NPU collector has run at least once and succeeded.
fn settled(d: &Daemon) -> String {
    d.wait_for(
        "all NPU collectors to succeed",
        Duration::from_secs(15),
        |s| {
            [
                "npu_inventory",
                "npu_health",
                "npu_sensors",
                "npu_utilization",
                "npu_memory",
                "npu_network",
            ]
            .iter()
            .all(|c| {
                value(s, "hcclwatch_scrape_collector_success", &[("collector", c)]) == Some(1.0)
            })
        },
    )
}

#[test]
fn every_reading_arrives_with_the_right_value_and_unit() {
    let cfg = fake_config("");
    let scen = scenario(|_| {});
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = settled(&d);

    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(3.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_info",
            &[
                ("npu", "4"),
                ("uuid", "00000005-00000002-00000003-00000004-00000005"),
                ("model", "910B3-Ascend-V1"),
                ("pci_bus_id", "0000:65:00.0"),
                ("serial", "SN-B"),
                ("driver_version", "24.1.rc2"),
            ]
        ),
        Some(1.0)
    );
    // Units converted exactly: 0.1 W, 0.01 V, MHz, %, MB.
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("0")),
        Some(215.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("1")),
        Some(215.1)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_voltage_volts", &npu("0")),
        Some(0.85)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("4")),
        Some(49.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_aicore_frequency_hertz", &npu("0")),
        Some(1.8e9)
    );
    for (unit, v) in [
        ("aicore", 0.37),
        ("hbm", 0.12),
        ("overall", 0.4),
        ("vector", 0.05),
        ("cube", 0.09),
    ] {
        assert_eq!(
            value(
                &s,
                "hcclwatch_npu_utilization_ratio",
                &[("npu", "0"), ("unit", unit)]
            ),
            Some(v),
            "{unit}"
        );
    }
    assert_eq!(
        value(&s, "hcclwatch_npu_hbm_total_bytes", &npu("0")),
        Some(68_719_476_736.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_hbm_used_bytes", &npu("0")),
        Some(1_073_741_824.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_hbm_temperature_celsius", &npu("0")),
        Some(40.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hbm_bandwidth_utilization_ratio",
            &npu("0")
        ),
        Some(0.05)
    );
    assert_eq!(value(&s, "hcclwatch_npu_health", &npu("0")), Some(0.0));
    assert_eq!(value(&s, "hcclwatch_npu_up", &npu("0")), Some(1.0));
    assert_eq!(value(&s, "hcclwatch_npu_network_up", &npu("0")), Some(1.0));
    assert_eq!(
        value(&s, "hcclwatch_npu_hbm_ecc_enabled", &npu("0")),
        Some(1.0)
    );
    for (t, scope, v) in [
        ("single", "current", 1.0),
        ("double", "current", 0.0),
        ("single", "lifetime", 3.0),
        ("double", "lifetime", 2.0),
    ] {
        assert_eq!(
            value(
                &s,
                "hcclwatch_npu_hbm_ecc_errors_total",
                &[("npu", "0"), ("type", t), ("scope", scope)]
            ),
            Some(v)
        );
    }
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hbm_ecc_isolated_pages",
            &[("npu", "0"), ("type", "single")]
        ),
        Some(4.0)
    );
    for (name, dir, v) in [
        ("hcclwatch_npu_mac_pause_frames_total", "tx", 11.0),
        ("hcclwatch_npu_mac_pause_frames_total", "rx", 12.0),
        ("hcclwatch_npu_mac_pfc_frames_total", "tx", 13.0),
        ("hcclwatch_npu_mac_pfc_frames_total", "rx", 14.0),
        ("hcclwatch_npu_roce_error_packets_total", "rx", 16.0),
        ("hcclwatch_npu_roce_packets_total", "tx", 17.0),
    ] {
        assert_eq!(
            value(&s, name, &[("npu", "1"), ("direction", dir)]),
            Some(v),
            "{name} {dir}"
        );
    }
    assert_eq!(
        value(&s, "hcclwatch_npu_mac_fcs_errors_total", &npu("1")),
        Some(15.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_roce_ecn_marks_total", &npu("1")),
        Some(18.0)
    );
    // HCCS: GB/s → bytes/s, per link.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            &[("npu", "0"), ("link", "0"), ("direction", "tx")]
        ),
        Some(1.5e9)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            &[("npu", "0"), ("link", "1"), ("direction", "tx")]
        ),
        Some(0.25e9)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hccs_flits_total",
            &[("npu", "0"), ("link", "1"), ("direction", "tx")]
        ),
        Some(200.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hccs_crc_errors_total",
            &[("npu", "0"), ("link", "1")]
        ),
        Some(7.0)
    );
    // Processes (host PIDs, bytes) and FEC counters of port 0.
    assert_eq!(value(&s, "hcclwatch_npu_processes", &npu("4")), Some(2.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_process_memory_bytes",
            &[("npu", "4"), ("pid", "4246")]
        ),
        Some(1_073_741_824.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_process_memory_bytes",
            &[("npu", "4"), ("pid", "7")]
        ),
        Some(2048.0)
    );
    for (t, v) in [
        ("total", 1_000_000.0),
        ("corrected", 51.0),
        ("uncorrectable", 2.0),
        ("bad", 1.0),
    ] {
        assert_eq!(
            value(
                &s,
                "hcclwatch_npu_fec_codewords_total",
                &[("npu", "1"), ("type", t)]
            ),
            Some(v),
            "{t}"
        );
    }
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fec_pre_correction_bit_error_ratio",
            &npu("1")
        ),
        Some(1.5e-7)
    );
    // Host collector alongside.
    assert!(value(&s, "hcclwatch_host_memory_total_bytes", &[]).unwrap() > 0.0);
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "dcmi")]
        ),
        Some(1.0)
    );
    // No DDR on a 910B: the series is absent, not zero.
    assert_eq!(value(&s, "hcclwatch_npu_ddr_total_bytes", &npu("0")), None);
}

#[test]
fn failing_call_omits_only_its_series_and_counts_the_error() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 0, 1)["fail"] = json!({
            "dcmi_get_device_temperature": -8005,
            "dcmi_get_device_voltage": -8255,
            "dcmi_get_device_utilization_rate:2": -8001,
            "dcmi_get_device_multi_utilization_rate": -8001
        });
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = d.wait_for(
        "a temperature error to be counted",
        Duration::from_secs(15),
        |s| {
            value(
                s,
                "hcclwatch_dcmi_call_errors_total",
                &[("call", "dcmi_get_device_temperature"), ("code", "-8005")],
            )
            .is_some_and(|v| v >= 1.0)
                && value(
                    s,
                    "hcclwatch_scrape_collector_success",
                    &[("collector", "npu_utilization")],
                )
                .is_some()
        },
    );
    // The failing chip lacks exactly the failed series …
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("1")),
        None
    );
    // (AI-core utilisation has two sources, type 2 and the multi call; both fail here.)
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_utilization_ratio",
            &[("npu", "1"), ("unit", "aicore")]
        ),
        None
    );
    // … keeps its other readings …
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("1")),
        Some(215.1)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_utilization_ratio",
            &[("npu", "1"), ("unit", "vector")]
        ),
        Some(0.05)
    );
    // … and the other chips are whole.
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("0")),
        Some(45.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("4")),
        Some(49.0)
    );
    // A failure flips the group's success; -8255 is "unsupported", not an error.
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "npu_sensors")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "npu_health")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[
                ("call", "dcmi_get_device_voltage"),
                ("npu", "1"),
                ("reason", "not_supported")
            ]
        ),
        Some(1.0)
    );
    assert!(
        common::samples(
            &s,
            "hcclwatch_dcmi_call_errors_total",
            &[("call", "dcmi_get_device_voltage")]
        )
        .is_empty()
    );
    // -8255 is cached for (call, chip): one chip's refusal never removes another chip's
    // reading (on multi-die cards one die refuses what the other answers). Cycles later,
    // chip 1 still has no voltage and is the only chip marked unsupported; 0 and 4 read on.
    let s = d.wait_for("two more sensor cycles", Duration::from_secs(5), |s| {
        value(
            s,
            "hcclwatch_dcmi_call_errors_total",
            &[("call", "dcmi_get_device_temperature"), ("code", "-8005")],
        )
        .is_some_and(|v| v >= 3.0)
    });
    assert_eq!(value(&s, "hcclwatch_npu_voltage_volts", &npu("1")), None);
    for chip in ["0", "4"] {
        assert_eq!(
            value(&s, "hcclwatch_npu_voltage_volts", &npu(chip)),
            Some(0.85),
            "npu {chip}"
        );
    }
    assert_eq!(
        common::samples(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[("call", "dcmi_get_device_voltage")]
        )
        .len(),
        1
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_dcmi_call_errors_total",
            &[
                ("call", "dcmi_get_device_utilization_rate"),
                ("code", "-8001")
            ]
        )
        .map(|v| v >= 1.0),
        Some(true)
    );
}

#[test]
fn missing_symbols_are_unsupported_and_fallbacks_are_used() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        s["missing_symbols"] = json!([
            "dcmi_get_device_multi_utilization_rate",
            "dcmi_get_device_chip_info_v2",
            "dcmi_get_netdev_pkt_stats_info"
        ]);
        for (c, i) in [(0, 0), (0, 1), (1, 0)] {
            chip_mut(s, c, i)["utilization"] =
                json!({"aicore": 37, "hbm": 12, "overall": 40, "vector": 5, "cube": 9});
        }
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = settled(&d);
    for sym in [
        "dcmi_get_device_multi_utilization_rate",
        "dcmi_get_device_chip_info_v2",
        "dcmi_get_netdev_pkt_stats_info",
    ] {
        assert_eq!(
            value(
                &s,
                "hcclwatch_dcmi_unsupported",
                &[("call", sym), ("reason", "missing_symbol")]
            ),
            Some(1.0),
            "{sym}"
        );
    }
    // chip_info_v2 missing → the v1 call fills the model label.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_info",
            &[("npu", "0"), ("model", "910B3-Ascend-V1")]
        ),
        Some(1.0)
    );
    // multi-utilisation missing → cube (only available there) is absent; the rest present.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_utilization_ratio",
            &[("npu", "0"), ("unit", "cube")]
        ),
        None
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_utilization_ratio",
            &[("npu", "0"), ("unit", "aicore")]
        ),
        Some(0.37)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_mac_pause_frames_total",
            &[("npu", "0"), ("direction", "tx")]
        ),
        None
    );
    assert!(
        d.log().contains("missing="),
        "missing symbols are logged once at load"
    );
}

#[test]
fn hung_call_does_not_block_scrapes_or_other_chips() {
    let cfg = fake_config("");
    let scen = |temp0: u32| {
        scenario(|s| {
            chip_mut(s, 0, 1)["hang_ms"] = json!({"dcmi_get_device_network_health": 5000});
            chip_mut(s, 0, 0)["temperature_c"] = json!(temp0);
        })
    };
    let d = Daemon::start(Start::new(&cfg).scenario(&scen(45)));
    d.wait_for(
        "a network-health deadline miss",
        Duration::from_secs(15),
        |s| {
            value(
                s,
                "hcclwatch_dcmi_calls_timed_out_total",
                &[("call", "dcmi_get_device_network_health")],
            )
            .is_some_and(|v| v >= 1.0)
        },
    );
    // While the call is stuck, every scrape answers quickly …
    for _ in 0..10 {
        let t = Instant::now();
        let s = d.scrape();
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "scrape took {:?}",
            t.elapsed()
        );
        assert!(value(&s, "hcclwatch_dcmi_stuck_calls", &[]).unwrap() <= 4.0);
    }
    // … and other chips stay fresh: a new value for chip 0 arrives while chip 1 hangs.
    d.set_scenario(&scen(77));
    let s = d.wait_for("chip 0's new temperature", Duration::from_secs(5), |s| {
        value(s, "hcclwatch_npu_temperature_celsius", &npu("0")) == Some(77.0)
    });
    // The hung reading itself is omitted; the chip's other health readings are present.
    assert_eq!(value(&s, "hcclwatch_npu_network_health", &npu("1")), None);
    assert_eq!(
        value(&s, "hcclwatch_npu_network_health", &npu("0")),
        Some(0.0)
    );
    assert_eq!(value(&s, "hcclwatch_npu_health", &npu("1")), Some(0.0));
    assert!(d.log().contains("missed its deadline"));
}

#[test]
fn dropped_card_raises_the_card_drop_fault() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 1, 0)["drop_after_calls"] = json!(40);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = d.wait_for("the card-drop fault", Duration::from_secs(20), |s| {
        value(
            s,
            "hcclwatch_npu_fault_active",
            &[
                ("npu", "4"),
                ("code", "0x40F84E00"),
                ("level", "RestartNPU"),
            ],
        ) == Some(1.0)
    });
    assert_eq!(value(&s, "hcclwatch_npu_up", &npu("4")), Some(0.0));
    assert_eq!(value(&s, "hcclwatch_npu_health", &npu("4")), None);
    // The dropped chip is still listed (its fault must stay visible), with its identity.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_info",
            &[("npu", "4"), ("serial", "SN-B")]
        ),
        Some(1.0)
    );
    assert!(
        value(
            &s,
            "hcclwatch_dcmi_call_errors_total",
            &[("call", "dcmi_get_device_health"), ("code", "-8012")]
        )
        .unwrap()
            >= 1.0
    );
    // The other card is unaffected.
    assert_eq!(value(&s, "hcclwatch_npu_up", &npu("0")), Some(1.0));
    assert!(common::samples(&s, "hcclwatch_npu_fault_active", &npu("0")).is_empty());
}

#[test]
fn health_0xffffffff_is_a_card_drop_and_fault_codes_are_exported() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 0, 0)["health"] = json!(0xFFFF_FFFFu32);
        chip_mut(s, 0, 1)["health"] = json!(2);
        chip_mut(s, 0, 1)["error_codes"] = json!([0x8107_8603u32, 0x1234_5678u32]);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = settled(&d);
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_active",
            &[("npu", "0"), ("code", "0x40F84E00")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&s, "hcclwatch_npu_up", &npu("0")), Some(0.0));
    assert_eq!(value(&s, "hcclwatch_npu_health", &npu("1")), Some(2.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_active",
            &[
                ("npu", "1"),
                ("code", "0x81078603"),
                ("level", "NotHandleFault")
            ]
        ),
        Some(1.0)
    );
    // Not in the fault-level table and no fault event gave its severity: SeparateNPU, as
    // MindCluster's device plugin treats it.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_active",
            &[
                ("npu", "1"),
                ("code", "0x12345678"),
                ("level", "SeparateNPU")
            ]
        ),
        Some(1.0)
    );
}

#[test]
fn scenario_change_is_picked_up_while_running() {
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(|_| {})));
    let s = settled(&d);
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("0")),
        Some(215.0)
    );
    d.set_scenario(&scenario(|s| {
        chip_mut(s, 0, 0)["power_dw"] = json!(3999);
        chip_mut(s, 0, 0)["health"] = json!(3);
    }));
    let s = d.wait_for("the new power reading", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_npu_power_watts", &npu("0")) == Some(399.9)
    });
    d.wait_for("the new health", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_npu_health", &npu("0")) == Some(3.0)
    });
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("1")),
        Some(215.1)
    );
}

#[test]
fn hccs_statistics_fall_back_to_32_bit_counters() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 0, 0)["hccs"]["stats_u32_only"] = json!(true);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = settled(&d);
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_hccs_flits_total",
            &[("npu", "0"), ("link", "0"), ("direction", "rx")]
        ),
        Some(300.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[
                ("call", "dcmi_get_device_info(5)"),
                ("reason", "not_supported")
            ]
        ),
        Some(1.0)
    );
}

#[test]
fn backend_dcmi_without_library_refuses_to_start() {
    let cfg = r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "dcmi"
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, cfg).unwrap();
    let empty = dir.path().join("empty-lib-dir");
    std::fs::create_dir(&empty).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["run", "--config.file"])
        .arg(&path)
        .env("LD_LIBRARY_PATH", &empty)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("telemetry.backend = \"dcmi\" but DCMI is unavailable"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}/libdcmi.so (not found)", empty.display())),
        "{err}"
    );
    assert!(err.contains("/usr/local/dcmi/libdcmi.so"), "{err}");
    assert!(
        err.contains("/usr/local/Ascend/driver/lib64/driver/libdcmi.so"),
        "{err}"
    );
}

#[test]
fn backend_dcmi_with_failing_init_refuses_to_start() {
    let cfg = fake_config("");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, &cfg).unwrap();
    let scen = dir.path().join("s.json");
    std::fs::write(&scen, r#"{"init_error": -8005, "cards": []}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["run", "--config.file"])
        .arg(&path)
        .env("FAKE_DCMI_SCENARIO", &scen)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dcmi_init"), "{err}");
    assert!(err.contains("-8005"), "{err}");
}

#[test]
fn backend_auto_without_library_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "auto"
[telemetry.intervals]
host = "200ms"
"#;
    let mut start = Start::new(cfg);
    start
        .env
        .push(("LD_LIBRARY_PATH", dir.path().display().to_string()));
    let d = Daemon::start(start);
    let s = d.wait_for(
        "host metrics and the dcmi collector status",
        Duration::from_secs(10),
        |s| {
            value(
                s,
                "hcclwatch_scrape_collector_success",
                &[("collector", "dcmi")],
            )
            .is_some()
                && value(s, "hcclwatch_host_memory_total_bytes", &[]).is_some()
        },
    );
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(0.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "dcmi")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "host")]
        ),
        Some(1.0)
    );
    assert!(common::samples(&s, "hcclwatch_npu_info", &[]).is_empty());
    let log = d.log();
    assert_eq!(
        log.matches("no usable DCMI library").count(),
        1,
        "one clear warning:\n{log}"
    );
    assert_eq!(d.get("/-/healthy", None).status, 200);
}

/// Threads stuck inside DCMI are bounded by `max_stuck_calls`, and released when the
/// calls return.
#[test]
fn stuck_calls_are_bounded_and_released() {
    let cfg = fake_config("").replace("[telemetry]\n", "[telemetry]\nmax_stuck_calls = 2\n");
    let hang = |ms: u64| {
        scenario(|s| {
            for (c, i) in [(0, 0), (0, 1), (1, 0)] {
                chip_mut(s, c, i)["hang_ms"] = json!({"dcmi_get_device_temperature": ms});
            }
        })
    };
    let d = Daemon::start(Start::new(&cfg).scenario(&hang(2500)));
    let s = d.wait_for("two stuck calls", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_dcmi_stuck_calls", &[]) == Some(2.0)
    });
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("4")),
        None
    );
    // Never more than the bound, however long the hang lasts.
    for _ in 0..10 {
        let s = d.scrape();
        assert!(value(&s, "hcclwatch_dcmi_stuck_calls", &[]).unwrap() <= 2.0);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log().contains("DCMI calls suspended until one returns"));
    // Once the hangs end, the threads return and collection resumes.
    d.set_scenario(&hang(0));
    d.wait_for(
        "stuck calls to drain and temperatures to return",
        Duration::from_secs(10),
        |s| {
            value(s, "hcclwatch_dcmi_stuck_calls", &[]) == Some(0.0)
                && value(s, "hcclwatch_npu_temperature_celsius", &npu("4")) == Some(49.0)
        },
    );
}

#[test]
fn processes_are_bounded_to_32_per_npu() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        // 40 processes, pid 100 + i using i MiB: the 32 largest are kept.
        let procs: Vec<Value> = (0..40u64)
            .map(|i| json!({"pid": 100 + i, "memory_bytes": i << 20}))
            .collect();
        chip_mut(s, 0, 0)["processes"] = json!(procs);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = settled(&d);
    assert_eq!(value(&s, "hcclwatch_npu_processes", &npu("0")), Some(32.0));
    let series = common::samples(&s, "hcclwatch_npu_process_memory_bytes", &npu("0"));
    assert_eq!(series.len(), 32);
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_process_memory_bytes",
            &[("npu", "0"), ("pid", "139")]
        ),
        Some(39.0 * 1_048_576.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_process_memory_bytes",
            &[("npu", "0"), ("pid", "107")]
        ),
        None,
        "the eight smallest are left out"
    );
}

/// A reading outside physical ranges (200 °C, 2.5 kW) is omitted, counted as an invalid
/// value and logged once while it stays, not once a cycle; one HCCS link with no physical
/// bandwidth (1e308 GB/s) loses its series and the chip's other links keep theirs.
#[test]
fn implausible_readings_are_omitted_counted_and_logged_once() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 0, 0)["temperature_c"] = json!(200);
        chip_mut(s, 0, 1)["power_dw"] = json!(25_000);
        chip_mut(s, 1, 0)["hccs"]["tx_bandwidth_gbps"] = json!([1.5, 1e308]);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    // Several sensor cycles (300 ms each) with the bad values in place.
    let s = d.wait_for(
        "repeated invalid temperatures",
        Duration::from_secs(15),
        |s| {
            value(
                s,
                "hcclwatch_dcmi_call_errors_total",
                &[
                    ("call", "dcmi_get_device_temperature"),
                    ("code", "invalid_value"),
                ],
            )
            .is_some_and(|v| v >= 4.0)
        },
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("0")),
        None
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_temperature_celsius", &npu("1")),
        Some(46.0)
    );
    assert_eq!(value(&s, "hcclwatch_npu_power_watts", &npu("1")), None);
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("0")),
        Some(215.0)
    );
    let log = d.log();
    let temp_logs = log
        .lines()
        .filter(|l| l.contains("invalid value") && l.contains("dcmi_get_device_temperature"))
        .count();
    assert_eq!(temp_logs, 1, "logged {temp_logs} times:\n{log}");
    let link = |l: &str, dir: &str| {
        value(
            &s,
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            &[("npu", "4"), ("link", l), ("direction", dir)],
        )
    };
    assert_eq!(link("0", "tx"), Some(1.5e9));
    assert_eq!(link("1", "tx"), None);
    assert_eq!(link("0", "rx"), Some(2.0e9));
}

/// Issue 27: an invalid utilisation type next to valid ones, and one HCCS link with no
/// physical bandwidth in an otherwise valid answer, are logged once when they become
/// invalid and once when they are valid again, not at every read (before, the valid
/// types and the valid answer cleared the record, and both warned every cycle). Invalid
/// again later: logged again, once.
#[test]
fn invalid_utilisation_and_hccs_values_are_logged_once_per_change() {
    let cfg = fake_config("");
    let bad = |s: &mut Value| {
        chip_mut(s, 0, 0)["utilization"]["hbm"] = json!(150);
        chip_mut(s, 1, 0)["hccs"]["tx_bandwidth_gbps"] = json!([1.5, 1e308]);
    };
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(bad)));
    let invalid = |s: &str, call: &str| {
        value(
            s,
            "hcclwatch_dcmi_call_errors_total",
            &[("call", call), ("code", "invalid_value")],
        )
    };
    let (util, hccs) = (
        "dcmi_get_device_utilization_rate",
        "dcmi_get_hccs_link_bandwidth_info",
    );
    // Several utilisation and network cycles (300 ms each) with the bad values in place.
    let s = d.wait_for("repeated invalid values", Duration::from_secs(15), |s| {
        invalid(s, util).is_some_and(|v| v >= 4.0) && invalid(s, hccs).is_some_and(|v| v >= 4.0)
    });
    let (util_before, hccs_before) = (invalid(&s, util).unwrap(), invalid(&s, hccs).unwrap());
    let count = |what: &str, call: &str| {
        d.log()
            .lines()
            .filter(|l| l.contains(what) && l.contains(call))
            .count()
    };
    let log = d.log();
    assert_eq!(count("invalid value", util), 1, "{log}");
    assert_eq!(count("invalid value", hccs), 1, "{log}");
    let hbm = [("npu", "0"), ("unit", "hbm")];
    assert_eq!(
        value(&s, "hcclwatch_npu_utilization_ratio", &hbm),
        None,
        "{s}"
    );

    // Valid again: one line each, and still one after more cycles.
    d.set_scenario(&scenario(|_| {}));
    d.wait_for("both readings valid again", Duration::from_secs(15), |_| {
        count("series restored", util) >= 1 && count("series restored", hccs) >= 1
    });
    let s = d.wait_for("more cycles", Duration::from_secs(15), |s| {
        value(
            s,
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            &[("npu", "4"), ("link", "1"), ("direction", "tx")],
        ) == Some(0.25e9)
            && value(s, "hcclwatch_npu_utilization_ratio", &hbm) == Some(0.12)
    });
    let log = d.log();
    assert_eq!(count("series restored", util), 1, "{log}");
    assert_eq!(count("series restored", hccs), 1, "{log}");
    assert_eq!(count("invalid value", util), 1, "{log}");
    assert!(invalid(&s, util).unwrap() >= util_before, "{s}");

    // Invalid again: logged again, once.
    d.set_scenario(&scenario(bad));
    d.wait_for(
        "invalid again for several cycles",
        Duration::from_secs(15),
        |s| {
            invalid(s, util).is_some_and(|v| v >= util_before + 4.0)
                && invalid(s, hccs).is_some_and(|v| v >= hccs_before + 4.0)
        },
    );
    let log = d.log();
    assert_eq!(count("invalid value", util), 2, "{log}");
    assert_eq!(count("invalid value", hccs), 2, "{log}");
}

/// Two chips that report the same physical id: the first keeps its series, the second is
/// left out, and the error names both.
#[test]
fn a_duplicate_physical_id_names_both_chips() {
    let cfg = fake_config("");
    let scen = scenario(|s| {
        chip_mut(s, 1, 0)["phy_id"] = json!(0);
    });
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = d.wait_for("the inventory", Duration::from_secs(15), |s| {
        value(s, "hcclwatch_devices", &[]).is_some_and(|v| v >= 1.0)
            && d.log().contains("same physical id")
    });
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(2.0));
    // The first chip with phy 0 is card 0's (serial SN-A), not card 3's.
    let info = samples(
        &s,
        "hcclwatch_npu_info",
        &[("npu", "0"), ("serial", "SN-A")],
    );
    assert_eq!(info.len(), 1, "{s}");
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("same physical id"))
        .unwrap();
    assert!(
        line.contains("first_logic_id=0") && line.contains("second_logic_id=2"),
        "{line}"
    );
}
