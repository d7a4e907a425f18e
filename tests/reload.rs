//! SIGHUP re-checks the configuration file: a bad edit flips
//! `hcclwatch_config_last_reload_successful` to 0 (the alert `HcclwatchConfigReloadFailed`
//! fires on it) while the daemon keeps serving on the configuration it started with; fixing
//! the file and sending SIGHUP again brings it back to 1 with a newer success time.

mod common;

use std::time::Duration;

use common::{Daemon, Signal, Start, fake_config, value};

const SCENARIO: &str = include_str!("fake-dcmi/scenarios/example.json");

#[test]
fn sighup_reports_a_bad_config_and_keeps_running() {
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(SCENARIO));
    let ok = |s: &str| value(s, "hcclwatch_config_last_reload_successful", &[]);
    let first = d.scrape();
    assert_eq!(ok(&first), Some(1.0), "{first}");
    let t0 = value(
        &first,
        "hcclwatch_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .expect("success timestamp at start");

    std::fs::write(
        d.config_path(),
        cfg.replace("level = \"debug\"", "level = \"chatty\""),
    )
    .unwrap();
    d.signal(Signal::HUP);
    let s = d.wait_for("the failed re-check", Duration::from_secs(10), |s| {
        ok(s) == Some(0.0)
    });
    // The last success is kept, and telemetry still flows from the running configuration.
    assert_eq!(
        value(
            &s,
            "hcclwatch_config_last_reload_success_timestamp_seconds",
            &[]
        ),
        Some(t0)
    );
    assert!(value(&s, "hcclwatch_npu_temperature_celsius", &[("npu", "0")]).is_some());
    assert!(d.log().contains("log.level"), "{}", d.log());

    std::fs::write(
        d.config_path(),
        cfg.replace("sensors = \"300ms\"", "sensors = \"400ms\""),
    )
    .unwrap();
    d.signal(Signal::HUP);
    let s = d.wait_for("the passing re-check", Duration::from_secs(10), |s| {
        ok(s) == Some(1.0)
    });
    assert!(
        value(
            &s,
            "hcclwatch_config_last_reload_success_timestamp_seconds",
            &[]
        )
        .unwrap()
            >= t0
    );
    d.wait_for("the changed-keys log line", Duration::from_secs(5), |_| {
        d.log().contains("telemetry.intervals.sensors")
    });
}
