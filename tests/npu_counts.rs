//! `hcclwatch_npus{state}` through the real daemon and `libfake_dcmi.so`: a chip that stops
//! enumerating is missing, a critical chip is unhealthy, a chip whose health read fails is
//! unknown, and while the chip list cannot be read there is no count at all. Each case
//! changes the fake's scenario under the running daemon, as a fault happens on a node.

mod common;

use std::time::Duration;

use common::{Daemon, Start, fake_config, samples, value};
use serde_json::{Value, json};

/// A healthy 910B chip with only what the health and inventory groups read.
fn chip(phy: u32) -> Value {
    json!({
        "phy_id": phy, "logic_id": phy,
        "chip": {"type": "Ascend", "name": "910B3", "version": "V1", "aicore_count": 20},
        "pcie": {"domain": 0, "bus": 0x61 + phy, "device": 0, "function": 0},
        "vdie_id": [phy + 1, 2, 3, 4, 5], "serial": format!("SN-{phy}"),
        "health": 0, "error_codes": [], "network_health": 0
    })
}

/// Card 0 holds phy 0 and 1, card 3 holds phy 4; `edit` then changes it.
fn scenario(edit: impl FnOnce(&mut Value)) -> String {
    let mut s = json!({
        "dcmi_version": "24.1.rc2",
        "cards": [
            {"card_id": 0, "chips": [chip(0), chip(1)]},
            {"card_id": 3, "chips": [chip(4)]}
        ]
    });
    edit(&mut s);
    s.to_string()
}

/// The counts in the order healthy, unhealthy, unknown, missing; `None` for a state
/// without a series.
fn counts(s: &str) -> [Option<f64>; 4] {
    ["healthy", "unhealthy", "unknown", "missing"]
        .map(|state| value(s, "hcclwatch_npus", &[("state", state)]))
}

/// Waits until the four counts are `want` (healthy, unhealthy, unknown, missing).
fn wait_counts(d: &Daemon, what: &str, want: [f64; 4]) -> String {
    d.wait_for(what, Duration::from_secs(20), |s| {
        counts(s) == want.map(Some)
    })
}

#[test]
fn a_chip_that_stops_enumerating_is_missing() {
    let d = Daemon::start(Start::new(&fake_config("")).scenario(&scenario(|_| {})));
    wait_counts(&d, "three healthy NPUs", [3.0, 0.0, 0.0, 0.0]);
    // Chip 1 leaves its card's device list (dcmi_get_device_num_in_card says 1).
    d.set_scenario(&scenario(|s| {
        s["cards"][0]["chips"].as_array_mut().unwrap().remove(1);
    }));
    let s = wait_counts(&d, "NPU 1 missing", [2.0, 0.0, 0.0, 1.0]);
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(2.0));
    assert!(samples(&s, "hcclwatch_npu_info", &[("npu", "1")]).is_empty());
    // Card 3 leaves the card list too.
    d.set_scenario(&scenario(|s| {
        s["cards"][0]["chips"].as_array_mut().unwrap().remove(1);
        s["cards"].as_array_mut().unwrap().remove(1);
    }));
    wait_counts(&d, "NPUs 1 and 4 missing", [1.0, 0.0, 0.0, 2.0]);
    // Both come back: nothing is missing.
    d.set_scenario(&scenario(|_| {}));
    wait_counts(&d, "all three back", [3.0, 0.0, 0.0, 0.0]);
}

#[test]
fn a_configured_count_sees_an_npu_gone_before_the_start() {
    // The node should have four NPUs; only three enumerate from the start.
    let cfg = fake_config("").replace(
        "[telemetry.intervals]",
        "expected_npus = 4\n\n[telemetry.intervals]",
    );
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(|_| {})));
    wait_counts(&d, "one NPU short of four", [3.0, 0.0, 0.0, 1.0]);
}

#[test]
fn a_critical_or_lost_chip_is_unhealthy_and_a_minor_alarm_is_not() {
    let d = Daemon::start(Start::new(&fake_config("")).scenario(&scenario(|_| {})));
    wait_counts(&d, "three healthy NPUs", [3.0, 0.0, 0.0, 0.0]);
    d.set_scenario(&scenario(|s| {
        s["cards"][1]["chips"][0]["health"] = json!(3);
    }));
    let s = wait_counts(&d, "NPU 4 critical", [2.0, 1.0, 0.0, 0.0]);
    assert_eq!(
        value(&s, "hcclwatch_npu_health", &[("npu", "4")]),
        Some(3.0)
    );
    // A minor alarm on NPU 0 is noted in its health but still counts as healthy; a major
    // one on NPU 1 does not.
    d.set_scenario(&scenario(|s| {
        s["cards"][1]["chips"][0]["health"] = json!(3);
        s["cards"][0]["chips"][0]["health"] = json!(1);
        s["cards"][0]["chips"][1]["health"] = json!(2);
    }));
    // The chips are read one after the other: wait for NPU 0's alarm as well.
    d.wait_for("NPU 1 major, NPU 0 minor", Duration::from_secs(20), |s| {
        counts(s) == [1.0, 2.0, 0.0, 0.0].map(Some)
            && value(s, "hcclwatch_npu_health", &[("npu", "0")]) == Some(1.0)
    });
    // A card that drops (health answers 0xFFFFFFFF) is still listed, and unhealthy.
    d.set_scenario(&scenario(|s| {
        s["cards"][1]["chips"][0]["health"] = json!(0xFFFF_FFFFu32);
    }));
    d.wait_for("NPU 4 dropped", Duration::from_secs(20), |s| {
        counts(s) == [2.0, 1.0, 0.0, 0.0].map(Some)
            && value(s, "hcclwatch_npu_up", &[("npu", "4")]) == Some(0.0)
    });
}

#[test]
fn a_chip_whose_health_read_fails_is_unknown() {
    let d = Daemon::start(Start::new(&fake_config("")).scenario(&scenario(|_| {})));
    wait_counts(&d, "three healthy NPUs", [3.0, 0.0, 0.0, 0.0]);
    // -8009 (ioctl failed): not a card drop, nothing is known about the chip's health.
    d.set_scenario(&scenario(|s| {
        s["cards"][0]["chips"][1]["fail"] = json!({"dcmi_get_device_health": -8009});
    }));
    let s = wait_counts(&d, "NPU 1 unknown", [2.0, 0.0, 1.0, 0.0]);
    assert_eq!(value(&s, "hcclwatch_npu_health", &[("npu", "1")]), None);
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(3.0));
    // The read answers again: healthy again.
    d.set_scenario(&scenario(|_| {}));
    wait_counts(&d, "NPU 1 healthy again", [3.0, 0.0, 0.0, 0.0]);
}

#[test]
fn no_counts_while_the_chip_list_cannot_be_read() {
    let failing = scenario(|s| s["card_list_error"] = json!(-8009));
    let d = Daemon::start(Start::new(&fake_config("")).scenario(&failing));
    let s = d.wait_for("the inventory to fail", Duration::from_secs(20), |s| {
        value(
            s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "npu_inventory")],
        ) == Some(0.0)
    });
    assert!(samples(&s, "hcclwatch_npus", &[]).is_empty(), "{s}");
    d.set_scenario(&scenario(|_| {}));
    wait_counts(&d, "the counts once the list is read", [3.0, 0.0, 0.0, 0.0]);
    // It fails again: the chips last known stay listed, but they are no count.
    d.set_scenario(&failing);
    let s = d.wait_for("the counts to go", Duration::from_secs(20), |s| {
        samples(s, "hcclwatch_npus", &[]).is_empty()
    });
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "npu_inventory")]
        ),
        Some(0.0)
    );
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(3.0));
}
