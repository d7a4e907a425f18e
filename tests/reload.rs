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

/// Sends SIGTERM and returns how long the daemon took to exit (`None`: not within `limit`,
/// then it is killed).
fn exit_time(d: Daemon, limit: Duration) -> Option<Duration> {
    let t = std::time::Instant::now();
    d.signal(Signal::TERM);
    let mut d = d;
    loop {
        if d.try_wait() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pins: a SIGHUP while the config file is a FIFO (the stand-in for a file that never
/// finishes reading) fails the re-check at once and SIGTERM still ends the daemon within
/// its documented bound. The re-check used to block in open(2) on a runtime thread, the
/// metric never moved, and the runtime waited for that thread at exit, forever.
#[test]
fn a_stuck_reload_never_wedges_the_daemon_or_its_exit() {
    let cfg = fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(SCENARIO));
    std::fs::remove_file(d.config_path()).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(d.config_path())
            .status()
            .unwrap()
            .success()
    );
    d.signal(Signal::HUP);
    d.wait_for("the failed re-check", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_config_last_reload_successful", &[]) == Some(0.0)
    });
    assert!(d.log().contains("FIFO"), "{}", d.log());
    // Another SIGHUP while nothing is stuck is fine; the daemon still serves.
    d.signal(Signal::HUP);
    assert!(
        d.scrape()
            .contains("hcclwatch_config_last_reload_successful")
    );
    let took = exit_time(d, Duration::from_secs(15)).expect("no exit within 15 s of SIGTERM");
    assert!(took < Duration::from_secs(13), "{took:?}");
}

/// Pins: SIGTERM ends the daemon within its bound (12 s by default) while a DCMI call
/// hangs for a minute.
#[test]
fn sigterm_exits_while_a_dcmi_call_hangs() {
    let scenario: serde_json::Value = serde_json::from_str(SCENARIO).unwrap();
    let mut scenario = scenario;
    let mut hung = false;
    for card in scenario["cards"].as_array_mut().into_iter().flatten() {
        for chip in card["chips"].as_array_mut().into_iter().flatten() {
            chip["hang_ms"] = serde_json::json!({"dcmi_get_device_health": 60000});
            hung = true;
        }
    }
    assert!(hung, "the scenario has no chips to hang: {SCENARIO}");
    let d = Daemon::start(Start::new(&fake_config("")).scenario(&scenario.to_string()));
    // Let the health poll enter its hanging call.
    d.wait_for("a stuck DCMI call", Duration::from_secs(10), |s| {
        value(s, "hcclwatch_dcmi_stuck_calls", &[]).is_some_and(|v| v > 0.0)
    });
    let took = exit_time(d, Duration::from_secs(15)).expect("no exit within 15 s of SIGTERM");
    assert!(took < Duration::from_secs(13), "{took:?}");
}
