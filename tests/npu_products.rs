//! Multi-die cards, end to end through `libfake_dcmi.so`: an Atlas A3 node (4 cards × 2
//! dies, die 1 of each card refusing power, as npu-smi hides it) and an Atlas 300I Duo
//! node (2 cards × 2 310P chips, power from the card's MCU, one MCU answering its
//! read-failure marker). One chip's refusal must never cost another chip a reading, and a
//! card-level reading must never be counted twice in a sum over chips.

mod common;

use std::time::Duration;

use common::{Daemon, Start, fake_config, samples, value};
use serde_json::{Value, json};

const A3: &str = include_str!("fake-dcmi/scenarios/a3-8-die.json");
const DUO: &str = include_str!("fake-dcmi/scenarios/300i-duo.json");

/// Scrape once every NPU collector has run twice (so an unsupported verdict from the
/// first cycle has been applied to the second).
fn settled(d: &Daemon) -> String {
    d.wait_for("every NPU collector", Duration::from_secs(20), |s| {
        [
            "npu_inventory",
            "npu_health",
            "npu_sensors",
            "npu_utilization",
            "npu_memory",
            "npu_network",
        ]
        .iter()
        .all(|c| value(s, "hcclwatch_scrape_collector_success", &[("collector", c)]) == Some(1.0))
    });
    // Two more sensor cycles (300 ms apart) after the first full collection.
    let last = |s: &str| {
        value(
            s,
            "hcclwatch_collector_last_success_timestamp_seconds",
            &[("collector", "npu_sensors")],
        )
    };
    let first = last(&d.scrape()).expect("npu_sensors succeeded");
    d.wait_for("two more sensor cycles", Duration::from_secs(10), |s| {
        last(s).is_some_and(|t| t >= first + 0.5)
    })
}

fn npu(n: &str) -> [(&str, &str); 1] {
    [("npu", n)]
}

/// Asserts that every family in `families` has a series for every npu in `chips`.
fn every_chip_has(s: &str, chips: &[u32], families: &[&str]) {
    for chip in chips {
        let c = chip.to_string();
        for f in families {
            assert!(
                !samples(s, f, &npu(&c)).is_empty(),
                "npu {chip} lacks {f}:\n{s}"
            );
        }
    }
}

#[test]
fn a3_dies_keep_every_reading_and_the_card_power_is_counted_once() {
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(A3));
    let s = settled(&d);
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(8.0));
    // Every reading but power on every die, die 1 included.
    every_chip_has(
        &s,
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[
            "hcclwatch_npu_info",
            "hcclwatch_npu_up",
            "hcclwatch_npu_health",
            "hcclwatch_npu_network_health",
            "hcclwatch_npu_temperature_celsius",
            "hcclwatch_npu_voltage_volts",
            "hcclwatch_npu_aicore_frequency_hertz",
            "hcclwatch_npu_utilization_ratio",
            "hcclwatch_npu_hbm_total_bytes",
            "hcclwatch_npu_hbm_used_bytes",
            "hcclwatch_npu_hbm_ecc_errors_total",
            "hcclwatch_npu_processes",
            "hcclwatch_npu_process_memory_bytes",
            "hcclwatch_npu_roce_packets_total",
            "hcclwatch_npu_fec_codewords_total",
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            "hcclwatch_npu_hccs_flits_total",
        ],
    );
    // Power: on die 0 of each card (166.5 W + 10 W per card), never on die 1.
    for card in 0..4u32 {
        let want = 166.5 + 10.0 * f64::from(card);
        let die0 = (2 * card).to_string();
        let die1 = (2 * card + 1).to_string();
        assert_eq!(
            value(&s, "hcclwatch_npu_power_watts", &npu(&die0)),
            Some(want)
        );
        assert_eq!(value(&s, "hcclwatch_npu_power_watts", &npu(&die1)), None);
        // Die 1's refusal is its own, labelled with its npu, not an error.
        assert_eq!(
            value(
                &s,
                "hcclwatch_dcmi_unsupported",
                &[
                    ("call", "dcmi_get_device_power_info"),
                    ("npu", &die1),
                    ("reason", "not_supported")
                ]
            ),
            Some(1.0)
        );
    }
    let total: f64 = samples(&s, "hcclwatch_npu_power_watts", &[]).iter().sum();
    assert_eq!(total, 166.5 + 176.5 + 186.5 + 196.5);
    assert_eq!(
        samples(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[("call", "dcmi_get_device_power_info")]
        )
        .len(),
        4,
        "only the four die-1 chips refuse power"
    );
    assert!(samples(&s, "hcclwatch_dcmi_call_errors_total", &[]).is_empty());
    // The A3 power is not a card reading of its own: no card series.
    assert!(samples(&s, "hcclwatch_card_power_watts", &[]).is_empty());
}

#[test]
fn a3_power_both_dies_report_alike_is_exported_once() {
    // Card 3's die 1 answers too, with the card's value: it is the card's power read
    // twice, kept on die 0 only. Card 2's die 1 answers a different value: a per-die
    // reading, kept.
    let mut sc: Value = serde_json::from_str(A3).unwrap();
    sc["cards"][3]["chips"][1]["fail"] = json!({});
    sc["cards"][3]["chips"][1]["power_dw"] = sc["cards"][3]["chips"][0]["power_dw"].clone();
    sc["cards"][2]["chips"][1]["fail"] = json!({});
    sc["cards"][2]["chips"][1]["power_dw"] = json!(123);
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&sc.to_string()));
    let s = settled(&d);
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("6")),
        Some(196.5)
    );
    assert_eq!(value(&s, "hcclwatch_npu_power_watts", &npu("7")), None);
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("4")),
        Some(186.5)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_power_watts", &npu("5")),
        Some(12.3)
    );
}

#[test]
fn duo_card_power_comes_from_the_mcu_once_per_card() {
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(DUO));
    let s = d.wait_for("the MCU sentinel counted", Duration::from_secs(20), |s| {
        value(
            s,
            "hcclwatch_dcmi_call_errors_total",
            &[
                ("call", "dcmi_mcu_get_power_info"),
                ("code", "invalid_value"),
            ],
        )
        .is_some_and(|v| v >= 1.0)
            && value(
                s,
                "hcclwatch_scrape_collector_success",
                &[("collector", "npu_network")],
            )
            .is_some()
    });
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(4.0));
    // Card 0: 856 × 0.1 W, once, on the card. Card 1: 0x7FFF is a failed reading, not
    // 3276.7 W: no series.
    assert_eq!(
        value(&s, "hcclwatch_card_power_watts", &[("card", "0")]),
        Some(85.6)
    );
    assert_eq!(
        samples(&s, "hcclwatch_card_power_watts", &[]),
        vec![85.6],
        "one series per card that has a reading"
    );
    // No chip carries the card's power, and chip power is not even asked for on 310P.
    assert!(samples(&s, "hcclwatch_npu_power_watts", &[]).is_empty());
    assert!(
        samples(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[("call", "dcmi_get_device_power_info")]
        )
        .is_empty()
    );
    // Every other reading of every chip is there.
    every_chip_has(
        &s,
        &[0, 1, 2, 3],
        &[
            "hcclwatch_npu_info",
            "hcclwatch_npu_health",
            "hcclwatch_npu_temperature_celsius",
            "hcclwatch_npu_voltage_volts",
            "hcclwatch_npu_aicore_frequency_hertz",
            "hcclwatch_npu_utilization_ratio",
            "hcclwatch_npu_ddr_total_bytes",
            "hcclwatch_npu_ddr_used_bytes",
            "hcclwatch_npu_processes",
        ],
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_ddr_used_bytes", &npu("3")),
        Some(((24576 - (20000 - 3)) as f64) * 1_048_576.0)
    );
}
