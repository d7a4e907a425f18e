//! NPU fault codes end to end through `libfake_dcmi.so`: each active code's level comes
//! from the fault-level table (the built-in MindCluster table, or
//! `telemetry.fault_levels_file`), its text from `dcmi_get_device_errorcode_string`; a bad
//! table file stops the start and, on SIGHUP, keeps the previous table; and a fault event
//! pushed by DCMI reaches `/metrics` within a second while the health interval is a minute.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Daemon, Start, fake_config, samples, value};
use serde_json::{Value, json};

fn chip(phy: u32, codes: &[u32]) -> Value {
    json!({
        "phy_id": phy, "logic_id": phy,
        "chip": {"type": "Ascend", "name": "910B3", "version": "V1", "aicore_count": 20},
        "pcie": {"domain": 0, "bus": 0x61 + phy, "device": 0, "function": 0},
        "vdie_id": [phy + 1, 2, 3, 4, 5], "serial": "SN-A",
        "health": 0, "error_codes": codes,
        "temperature_c": 45, "network_health": 0,
        "fail": {}, "hang_ms": {}, "drop_after_calls": null
    })
}

const HBM_PARITY: u32 = 0x80E1_8005; // RestartNPU in MindCluster's table
const LINK_DOWN: u32 = 0x8107_8603; // NotHandleFault
const TWO_LEVELS: u32 = 0xA230_1001; // RestartBusiness and SeparateNPU
const UNLISTED: u32 = 0x1234_5678; // in no table

/// Chips 0 and 1 on card 0; chip 0 has `codes`. Texts for two codes.
fn scenario(codes: &[u32]) -> Value {
    json!({
        "dcmi_version": "24.1.rc2",
        "cards": [{"card_id": 0, "chips": [chip(0, codes), chip(1, &[])]}],
        "fault_descriptions": {
            "80E18005": "HBMC CA parity error\nreset the chip",
            "81078603": "Network port link down"
        }
    })
}

fn fault(s: &str, npu: &str, code: &str) -> Vec<(String, String)> {
    let line = s
        .lines()
        .find(|l| {
            l.starts_with("hcclwatch_npu_fault_active{")
                && l.contains(&format!("npu=\"{npu}\""))
                && l.contains(&format!("code=\"{code}\""))
        })
        .unwrap_or_else(|| panic!("no fault_active for npu {npu} code {code}:\n{s}"));
    let labels = &line[line.find('{').unwrap() + 1..line.rfind('}').unwrap()];
    common::parse_labels(labels)
}

fn level_of(s: &str, npu: &str, code: &str) -> String {
    fault(s, npu, code)
        .into_iter()
        .find(|(k, _)| k == "level")
        .map(|(_, v)| v)
        .unwrap()
}

/// Waits until chip 0's faults have been read once.
fn with_faults(d: &Daemon) -> String {
    d.wait_for("chip 0's fault codes", Duration::from_secs(15), |s| {
        !samples(s, "hcclwatch_npu_fault_active", &[("npu", "0")]).is_empty()
    })
}

#[test]
fn levels_come_from_the_table_and_texts_from_dcmi() {
    let cfg = fake_config("");
    let sc = scenario(&[HBM_PARITY, LINK_DOWN, TWO_LEVELS, UNLISTED]);
    let d = Daemon::start(Start::new(&cfg).scenario(&sc.to_string()));
    let s = with_faults(&d);
    assert_eq!(level_of(&s, "0", "0x80E18005"), "RestartNPU");
    assert_eq!(level_of(&s, "0", "0x81078603"), "NotHandleFault");
    // Listed at two levels: the more serious one wins.
    assert_eq!(level_of(&s, "0", "0xA2301001"), "SeparateNPU");
    // Listed nowhere and no event gave its severity: SeparateNPU (MindCluster's rule).
    assert_eq!(level_of(&s, "0", "0x12345678"), "SeparateNPU");
    // Texts: control characters become spaces.
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_info",
            &[
                ("npu", "0"),
                ("code", "0x80E18005"),
                ("level", "RestartNPU"),
                ("description", "HBMC CA parity error reset the chip")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_info",
            &[
                ("code", "0x81078603"),
                ("description", "Network port link down")
            ]
        ),
        Some(1.0)
    );
    // A code the library has no text for (it answers -8255) has no info series, and does
    // not cost the chip the texts of its other codes: not an unsupported call.
    assert!(samples(&s, "hcclwatch_npu_fault_info", &[("code", "0xA2301001")]).is_empty());
    assert!(
        samples(
            &s,
            "hcclwatch_dcmi_unsupported",
            &[("call", "dcmi_get_device_errorcode_string")]
        )
        .is_empty()
    );
    assert!(samples(&s, "hcclwatch_npu_fault_active", &[("npu", "1")]).is_empty());
}

#[test]
fn up_to_128_codes_are_read_per_chip() {
    let codes: Vec<u32> = (0..130).map(|i| 0x8000_0000 + i).collect();
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(&codes).to_string()));
    let s = with_faults(&d);
    assert_eq!(
        samples(&s, "hcclwatch_npu_fault_active", &[("npu", "0")]).len(),
        128
    );
}

#[test]
fn a_fault_levels_file_replaces_the_builtin_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faultCode.json");
    std::fs::write(&file, r#"{"NotHandleFaultCodes":["80E18005"]}"#).unwrap();
    let cfg = with_key(
        &fake_config(""),
        "fault_levels_file",
        &file.display().to_string(),
    );
    let d =
        Daemon::start(Start::new(&cfg).scenario(&scenario(&[HBM_PARITY, LINK_DOWN]).to_string()));
    let s = with_faults(&d);
    assert_eq!(level_of(&s, "0", "0x80E18005"), "NotHandleFault");
    // Not in the file: unlisted, as with the device plugin (the file is the whole table).
    assert_eq!(level_of(&s, "0", "0x81078603"), "SeparateNPU");
}

/// `base` (a fake_config) with `key = "value"` added to its `[telemetry]` table.
fn with_key(base: &str, key: &str, value: &str) -> String {
    let anchor = "[telemetry]\n";
    assert!(base.contains(anchor));
    base.replacen(anchor, &format!("{anchor}{key} = \"{value}\"\n"), 1)
}

/// Starts the daemon with a fault-level file of `json`, which must refuse to start; its
/// error must name the key and the file. Returns the error output.
fn start_refused(json: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faultCode.json");
    std::fs::write(&file, json).unwrap();
    let cfg_path = dir.path().join("hcclwatch.toml");
    std::fs::write(
        &cfg_path,
        with_key(
            &fake_config(""),
            "fault_levels_file",
            &file.display().to_string(),
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["run", "--config.file"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("telemetry.fault_levels_file"), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    err.into_owned()
}

#[test]
fn a_bad_fault_levels_file_stops_the_start_naming_file_key_and_code() {
    let err = start_refused(r#"{"SeparateNPUCodes":["80E3A201","80X3A202"]}"#);
    assert!(err.contains("SeparateNPUCodes"), "{err}");
    assert!(err.contains("\"80X3A202\""), "{err}");
}

#[test]
fn sighup_swaps_the_table_or_keeps_it_when_the_file_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faultCode.json");
    std::fs::write(&file, r#"{"RestartNPUCodes":["80E18005"]}"#).unwrap();
    let cfg = with_key(
        &fake_config(""),
        "fault_levels_file",
        &file.display().to_string(),
    );
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(&[HBM_PARITY]).to_string()));
    let ok = |s: &str| value(s, "hcclwatch_config_last_reload_successful", &[]);
    let s = with_faults(&d);
    assert_eq!(level_of(&s, "0", "0x80E18005"), "RestartNPU");

    // A bad edit: reported, and the previous table stays in use.
    std::fs::write(&file, r#"{"RestartNPUCodes":["not-hex"]}"#).unwrap();
    d.signal(common::Signal::HUP);
    d.wait_for("the failed reload", Duration::from_secs(10), |s| {
        ok(s) == Some(0.0)
    });
    assert!(d.log().contains("not-hex"), "{}", d.log());
    let health_at = |s: &str| {
        value(
            s,
            "hcclwatch_collector_last_success_timestamp_seconds",
            &[("collector", "npu_health")],
        )
    };
    let after = health_at(&d.scrape()).unwrap();
    let s = d.wait_for(
        "a health cycle after the reload",
        Duration::from_secs(5),
        |s| health_at(s).is_some_and(|t| t > after),
    );
    assert_eq!(level_of(&s, "0", "0x80E18005"), "RestartNPU");

    // The fix is swapped in whole: the next health cycle reads the new level.
    std::fs::write(&file, r#"{"SubHealthFaultCodes":["80E18005"]}"#).unwrap();
    d.signal(common::Signal::HUP);
    d.wait_for("the new level", Duration::from_secs(10), |s| {
        ok(s) == Some(1.0)
            && s.lines().any(|l| {
                l.starts_with("hcclwatch_npu_fault_active{")
                    && l.contains("code=\"0x80E18005\"")
                    && l.contains("level=\"SubHealthFault\"")
            })
    });
}

/// The unix time in ms at which the fake says it delivered `code`.
fn delivered_at(log: &str, code: u32) -> Option<u128> {
    let tag = format!("fake-dcmi: delivered fault event 0x{code:08X} at unix_ms=");
    log.lines()
        .find_map(|l| l.split_once(&tag).map(|(_, t)| t.trim().parse().unwrap()))
}

#[test]
fn a_pushed_fault_event_reaches_metrics_within_a_second() {
    // Health is read once a minute; only the event can bring the fault in time.
    let cfg = fake_config("").replace("health = \"300ms\"", "health = \"60s\"");
    assert!(cfg.contains("health = \"60s\""));
    let mut sc = scenario(&[]);
    sc["fault_events"] = json!([
        {"at_ms": 2500, "card_id": 0, "device_id": 0, "event_id": HBM_PARITY,
         "severity": 3, "assertion": 1, "name": "HBM parity"},
        // Not in the table, minor: NotHandleFault by its severity.
        {"at_ms": 2500, "card_id": 0, "device_id": 1, "event_id": 0x0ABC_DEF0u32,
         "severity": 1, "assertion": 1}
    ]);
    let start = Instant::now();
    let d = Daemon::start(Start::new(&cfg).scenario(&sc.to_string()));
    let s = d.wait_for("the first health cycle", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_npu_up", &[("npu", "0")]) == Some(1.0)
    });
    assert!(
        start.elapsed() < Duration::from_millis(2500),
        "the daemon took too long to start for this test to mean anything"
    );
    assert!(samples(&s, "hcclwatch_npu_fault_active", &[]).is_empty());
    assert_eq!(
        value(&s, "hcclwatch_dcmi_fault_events_subscribed", &[]),
        Some(1.0)
    );
    let s = d.wait_for("the pushed fault", Duration::from_secs(10), |s| {
        !samples(s, "hcclwatch_npu_fault_active", &[("npu", "0")]).is_empty()
            && !samples(s, "hcclwatch_npu_fault_active", &[("npu", "1")]).is_empty()
    });
    let seen_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let sent_ms = delivered_at(&d.log(), HBM_PARITY).expect("the fake logs its delivery");
    println!(
        "fault event to /metrics: at most {} ms",
        seen_ms.saturating_sub(sent_ms)
    );
    assert!(
        seen_ms.saturating_sub(sent_ms) < 1000,
        "the fault took {} ms to reach /metrics",
        seen_ms - sent_ms
    );
    assert_eq!(level_of(&s, "0", "0x80E18005"), "RestartNPU");
    assert_eq!(level_of(&s, "1", "0x0ABCDEF0"), "NotHandleFault");
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_fault_events_total",
            &[
                ("npu", "0"),
                ("severity", "critical"),
                ("assertion", "occur")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_dcmi_fault_events_dropped_total", &[]),
        Some(0.0)
    );
}

/// Whether the scrape shows `code` active on chip 0 (at `level`, when given).
fn shows(s: &str, code: &str, level: Option<&str>) -> bool {
    s.lines().any(|l| {
        l.starts_with("hcclwatch_npu_fault_active{")
            && l.contains("npu=\"0\"")
            && l.contains(&format!("code=\"{code}\""))
            && level.is_none_or(|lv| l.contains(&format!("level=\"{lv}\"")))
    })
}

#[test]
fn per_code_overrides_set_the_level_delay_a_code_and_hold_it_after_it_clears() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faultCode.json");
    // HBM parity: RestartNPU in the lists, SeparateNPU by its override, counted after 3
    // reads in a row, kept 4 s after it clears. Link down has no override. A code in no
    // list (SeparateNPU by the severity rule) gets its level from its override.
    std::fs::write(
        &file,
        r#"{"RestartNPUCodes":["80E18005"],"NotHandleFaultCodes":["81078603"],
            "hcclwatch_overrides":{"0x80E18005":
              {"level":"SeparateNPU","consecutive_reads":3,"clear_after":"4s"},
              "12345678":{"level":"SubHealthFault"}}}"#,
    )
    .unwrap();
    // Health read once a second: the third read is two seconds after the first, far
    // longer than the 50 ms between the test's scrapes.
    let cfg = with_key(
        &fake_config(""),
        "fault_levels_file",
        &file.display().to_string(),
    )
    .replace("health = \"300ms\"", "health = \"1s\"");
    assert!(cfg.contains("health = \"1s\""));
    let sc = scenario(&[HBM_PARITY, LINK_DOWN, UNLISTED]);
    let d = Daemon::start(Start::new(&cfg).scenario(&sc.to_string()));
    let s = d.wait_for("link down read", Duration::from_secs(15), |s| {
        shows(s, "0x81078603", None)
    });
    assert_eq!(level_of(&s, "0", "0x12345678"), "SubHealthFault");
    assert!(
        !shows(&s, "0x80E18005", None),
        "HBM parity counts only from its third read:\n{s}"
    );
    d.wait_for(
        "HBM parity at its overridden level",
        Duration::from_secs(10),
        |s| shows(s, "0x80E18005", Some("SeparateNPU")),
    );

    // Both codes clear: link down goes with the next read, HBM parity 4 s later.
    d.set_scenario(&scenario(&[]).to_string());
    let s = d.wait_for("link down cleared", Duration::from_secs(10), |s| {
        !shows(s, "0x81078603", None)
    });
    assert!(
        shows(&s, "0x80E18005", Some("SeparateNPU")),
        "HBM parity is held for its clear_after:\n{s}"
    );
    d.wait_for("HBM parity released", Duration::from_secs(15), |s| {
        !shows(s, "0x80E18005", None)
    });
}

#[test]
fn a_bad_override_stops_the_start_naming_file_key_path_and_code() {
    let err = start_refused(
        r#"{"SeparateNPUCodes":["80E3A201"],
            "hcclwatch_overrides":{"80E3A201":{"consecutive_reads":0}}}"#,
    );
    assert!(
        err.contains("\"hcclwatch_overrides.80E3A201.consecutive_reads\""),
        "{err}"
    );
    assert!(err.contains("code 80E3A201"), "{err}");
}

#[test]
fn sighup_swaps_the_overrides_with_the_table_or_keeps_both_when_bad() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faultCode.json");
    std::fs::write(&file, r#"{"RestartNPUCodes":["80E18005"]}"#).unwrap();
    let cfg = with_key(
        &fake_config(""),
        "fault_levels_file",
        &file.display().to_string(),
    );
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario(&[HBM_PARITY]).to_string()));
    let ok = |s: &str| value(s, "hcclwatch_config_last_reload_successful", &[]);
    let s = with_faults(&d);
    assert_eq!(level_of(&s, "0", "0x80E18005"), "RestartNPU");

    // An override of the level: swapped in with the table.
    std::fs::write(
        &file,
        r#"{"RestartNPUCodes":["80E18005"],
            "hcclwatch_overrides":{"80E18005":{"level":"SeparateNPU"}}}"#,
    )
    .unwrap();
    d.signal(common::Signal::HUP);
    d.wait_for("the overridden level", Duration::from_secs(10), |s| {
        ok(s) == Some(1.0) && shows(s, "0x80E18005", Some("SeparateNPU"))
    });

    // A bad override (and a new list beside it): refused whole, the previous table and
    // overrides stay.
    std::fs::write(
        &file,
        r#"{"SubHealthFaultCodes":["80E18005"],
            "hcclwatch_overrides":{"80E18005":{"level":"Separate"}}}"#,
    )
    .unwrap();
    d.signal(common::Signal::HUP);
    d.wait_for("the failed reload", Duration::from_secs(10), |s| {
        ok(s) == Some(0.0)
    });
    assert!(
        d.log().contains("hcclwatch_overrides.80E18005.level"),
        "{}",
        d.log()
    );
    let health_at = |s: &str| {
        value(
            s,
            "hcclwatch_collector_last_success_timestamp_seconds",
            &[("collector", "npu_health")],
        )
    };
    let after = health_at(&d.scrape()).unwrap();
    let s = d.wait_for(
        "a health cycle after the reload",
        Duration::from_secs(5),
        |s| health_at(s).is_some_and(|t| t > after),
    );
    assert_eq!(level_of(&s, "0", "0x80E18005"), "SeparateNPU");
}
