//! NPU ports and optics through `hccn_tool`, end to end: the real daemon runs the fake
//! tool (`tests/fake-hccn`) as a subprocess and exports what it says, in SI units; a
//! failed reading has no series; a hung tool is killed at its deadline while scrapes stay
//! fast; busy answers are retried and counted; "not supported" is asked once; output past
//! the cap is refused.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Daemon, FakeHccn, Signal, Start, hccn_config, value};
use serde_json::json;

fn collector_ok(s: &str, c: &str) -> Option<f64> {
    value(s, "hcclwatch_scrape_collector_success", &[("collector", c)])
}

/// Unix seconds of two link changes, newest first.
const CHANGED_UP: i64 = 1_759_659_231;
const CHANGED_DOWN: i64 = 1_759_659_230;

fn npu0() -> serde_json::Value {
    json!({
        "phy_id": 0,
        "ips": ["10.20.0.1"],
        "link": "UP",
        "speed_mbps": 100000,
        "link_stat": {"up_count": 3, "down_count": 2, "changes": [
            {"at": CHANGED_UP, "state": "UP"}, {"at": CHANGED_DOWN, "state": "DOWN"}]},
        "net_health": "Receive timeout",
        "optical": {"temperature": 47, "vcc_mv": 3262.9,
                    "tx_power_mw": [1.1, 1.2, null, null], "rx_power_mw": [0.9, 0.01]},
        "stat": {"roce_cqe_num": 450000, "mac_rx_pfc_pri3_pkt_num": 34,
                 "roce_rx_all_pkt_num": 999}
    })
}

/// With DCMI (the fake library, one chip with phy id 0): the port series carry the chip's
/// device labels, every unit is SI, and DCMI's network health wins over the tool's.
#[test]
fn the_daemon_exports_link_speed_events_and_optics_in_si_units() {
    let dir = tempfile::tempdir().unwrap();
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu0()]}).to_string(), None);
    let dcmi = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fake-dcmi/scenarios/example.json"
    ))
    .unwrap();
    let cfg = common::fake_config("ports = \"1s\"\noptics = \"1s\"\n");
    let mut start = Start::new(&cfg).scenario(&dcmi);
    start.env = vec![
        (
            "HCCLWATCH_TELEMETRY_HCCN_TOOL",
            hccn.tool.display().to_string(),
        ),
        (
            "HCCLWATCH_TELEMETRY_HCCN_CONF",
            hccn.conf.display().to_string(),
        ),
    ];
    let d = Daemon::start(start);
    let s = d.wait_for("ports and optics", Duration::from_secs(20), |s| {
        collector_ok(s, "npu_ports") == Some(1.0)
            && collector_ok(s, "npu_optics") == Some(1.0)
            && value(s, "hcclwatch_devices", &[]) == Some(1.0)
    });
    // example.json's chip has vdie_id [1, 2, 3, 4, 5].
    let uuid = "00000001-00000002-00000003-00000004-00000005";
    let dev = [("npu", "0"), ("uuid", uuid)];
    let v = |name: &str, extra: &[(&str, &str)]| {
        let mut want = dev.to_vec();
        want.extend_from_slice(extra);
        value(&s, name, &want)
    };
    assert_eq!(v("hcclwatch_npu_port_up", &[]), Some(1.0), "{s}");
    assert_eq!(
        v("hcclwatch_npu_port_speed_bits_per_second", &[]),
        Some(100e9)
    );
    assert_eq!(v("hcclwatch_npu_port_link_up_events_total", &[]), Some(3.0));
    assert_eq!(
        v("hcclwatch_npu_port_link_down_events_total", &[]),
        Some(2.0)
    );
    assert_eq!(
        v("hcclwatch_npu_port_last_change_timestamp_seconds", &[]),
        Some(CHANGED_UP as f64)
    );
    assert_eq!(v("hcclwatch_npu_optical_present", &[]), Some(1.0));
    assert_eq!(
        v("hcclwatch_npu_optical_temperature_celsius", &[]),
        Some(47.0)
    );
    let volts = v("hcclwatch_npu_optical_voltage_volts", &[]).unwrap();
    assert!((volts - 3.2629).abs() < 1e-9, "{volts}");
    let watts = |name: &str, lane: &str| v(name, &[("lane", lane)]);
    assert_eq!(
        watts("hcclwatch_npu_optical_tx_power_watts", "0"),
        Some(0.0011)
    );
    assert_eq!(
        watts("hcclwatch_npu_optical_tx_power_watts", "1"),
        Some(0.0012)
    );
    assert_eq!(watts("hcclwatch_npu_optical_tx_power_watts", "2"), None);
    assert_eq!(
        watts("hcclwatch_npu_optical_rx_power_watts", "1"),
        Some(0.00001)
    );
    assert_eq!(watts("hcclwatch_npu_optical_rx_power_watts", "3"), None);
    assert_eq!(
        v(
            "hcclwatch_npu_port_address_info",
            &[("address", "10.20.0.1"), ("source", "hccn_tool")]
        ),
        Some(1.0)
    );
    assert_eq!(v("hcclwatch_npu_roce_cqes_total", &[]), Some(450000.0));
    assert_eq!(
        v(
            "hcclwatch_npu_mac_pfc_priority_frames_total",
            &[("direction", "rx"), ("priority", "3")]
        ),
        Some(34.0)
    );
    // DCMI has this chip's network health: the tool's reading is not exported, and the
    // counters DCMI gives are not exported twice.
    assert_eq!(v("hcclwatch_npu_port_network_health", &[]), None);
    assert_ne!(
        v("hcclwatch_npu_roce_packets_total", &[("direction", "rx")]),
        Some(999.0),
        "a counter DCMI gives came from hccn_tool"
    );
    assert!(
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", "link"), ("result", "ok")]
        )
        .is_some_and(|n| n >= 1.0)
    );
    assert!(
        value(
            &s,
            "hcclwatch_hccn_call_duration_seconds_count",
            &[("command", "optical")]
        )
        .is_some_and(|n| n >= 1.0)
    );
}

/// Without DCMI the NPUs come from `hccn.conf`; a reading that fails has no series and
/// flips its collector; an NPU without an IP on the device takes `hccn.conf`'s.
#[test]
fn a_failed_reading_omits_its_series_and_flips_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let mut npu1 = npu0();
    npu1["phy_id"] = json!(1);
    npu1["ips"] = json!([]);
    npu1["behaviours"] = json!({"speed": {"mode": "fail"}, "optical": {"mode": "fail"}});
    let hccn = FakeHccn::new(
        dir.path(),
        &json!({"npus": [npu0(), npu1]}).to_string(),
        None,
    );
    std::fs::write(
        &hccn.conf,
        "address_0=10.20.0.1\nnetmask_0=255.255.255.0\naddress_1=10.20.0.2\n",
    )
    .unwrap();
    let d = Daemon::start(Start::new(&hccn_config(&hccn, "", "")));
    let s = d.wait_for("a ports pass", Duration::from_secs(20), |s| {
        collector_ok(s, "npu_ports").is_some() && collector_ok(s, "npu_optics").is_some()
    });
    assert_eq!(collector_ok(&s, "npu_ports"), Some(0.0), "{s}");
    assert_eq!(collector_ok(&s, "npu_optics"), Some(0.0));
    let one = [("npu", "1")];
    // The failed readings are absent, the others present; no sentinel anywhere.
    assert_eq!(
        value(&s, "hcclwatch_npu_port_speed_bits_per_second", &one),
        None
    );
    assert_eq!(value(&s, "hcclwatch_npu_optical_present", &one), None);
    assert_eq!(value(&s, "hcclwatch_npu_port_up", &one), Some(1.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_port_speed_bits_per_second",
            &[("npu", "0")]
        ),
        Some(100e9)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_optical_present", &[("npu", "0")]),
        Some(1.0)
    );
    // No DCMI: the tool's network health is the reading (2 = receive timeout).
    assert_eq!(
        value(&s, "hcclwatch_npu_port_network_health", &one),
        Some(2.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_port_address_info",
            &[
                ("npu", "1"),
                ("address", "10.20.0.2"),
                ("source", "hccn_conf")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", "ip"), ("result", "no_ip")]
        )
        .map(|n| n >= 1.0),
        Some(true)
    );
    assert!(
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", "speed"), ("result", "error")]
        )
        .is_some_and(|n| n >= 1.0)
    );
}

/// Reads `/proc/<pid>/environ` and `cmdline` of every process, and returns the pids of
/// fake-tool runs for this test's scenario whose argv contains `what`.
fn tool_processes(scenario: &std::path::Path, what: &str) -> Vec<u32> {
    let marker = format!("FAKE_HCCN_SCENARIO={}", scenario.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let env = String::from_utf8_lossy(&env);
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && env.split('\0').any(|v| v == marker) && cmd.contains(what) {
            out.push(pid);
        }
    }
    out
}

/// A hung tool (NPU 0's `-optical` sleeps ten minutes) and a device that is not ready
/// (NPU 1: five minutes, then `Get device health status failed!`) are killed at the 1 s
/// deadline, again every pass; no run outlives its deadline or the daemon, and every
/// scrape meanwhile answers in under 200 ms.
#[test]
fn a_hung_tool_is_killed_at_its_deadline_while_scrapes_stay_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut hung = npu0();
    hung["behaviours"] = json!({"optical": {"mode": "hang", "hang_ms": 600000}});
    let mut not_ready = npu0();
    not_ready["phy_id"] = json!(1);
    not_ready["not_ready"] = json!(true);
    let hccn = FakeHccn::new(
        dir.path(),
        &json!({"npus": [hung, not_ready], "not_ready_delay_ms": 300000}).to_string(),
        None,
    );
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\naddress_1=10.20.0.2\n").unwrap();
    let deadline = Duration::from_secs(1);
    let d = Daemon::start(Start::new(&hccn_config(
        &hccn,
        "hccn_call_deadline = \"1s\"",
        "",
    )));
    // Watch for 6 s: every live run of the hung command, when first and last seen; every
    // scrape, how long it took.
    let mut seen: BTreeMap<u32, (Instant, Instant)> = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    let mut scrapes = 0;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        for pid in tool_processes(&hccn.scenario, "-i 0 -optical") {
            let now = Instant::now();
            seen.entry(pid).or_insert((now, now)).1 = now;
        }
        let t0 = Instant::now();
        let s = d.scrape();
        slowest = slowest.max(t0.elapsed());
        scrapes += 1;
        assert!(s.contains("hcclwatch_build_info"));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "measured: {scrapes} scrapes, slowest {slowest:?}; hung runs seen {}: {:?}",
        seen.len(),
        seen.values().map(|(a, b)| *b - *a).collect::<Vec<_>>()
    );
    assert!(
        slowest < Duration::from_millis(200),
        "slowest of {scrapes} scrapes took {slowest:?}"
    );
    assert!(seen.len() >= 2, "the hung run was not restarted: {seen:?}");
    for (pid, (first, last)) in &seen {
        let lived = *last - *first;
        assert!(
            lived < deadline + Duration::from_millis(700),
            "run {pid} lived {lived:?} past the {deadline:?} deadline"
        );
    }
    let s = d.scrape();
    let timeouts = |cmd: &str| {
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", cmd), ("result", "timeout")],
        )
        .unwrap_or(0.0)
    };
    assert!(timeouts("optical") >= 2.0, "{s}");
    // NPU 1 never answers anything: its first command of each pass times out too.
    assert!(timeouts("link") >= 1.0, "{s}");
    assert_eq!(collector_ok(&s, "npu_optics"), Some(0.0));
    assert_eq!(
        value(&s, "hcclwatch_npu_optical_present", &[("npu", "0")]),
        None
    );
    // Stopping the daemon kills what still runs: nothing of this test is left. A SIGKILL
    // takes effect asynchronously, so a run killed at the daemon's exit may take a moment
    // to die; a run that was never killed sleeps for minutes and is still there after 3 s.
    d.stop();
    assert_eq!(
        left_after(&hccn.scenario, Duration::from_secs(3)),
        Vec::<u32>::new()
    );
}

/// The tool processes of `scenario` still alive (not zombies) once `within` has passed,
/// returning as soon as there are none.
fn left_after(scenario: &std::path::Path, within: Duration) -> Vec<u32> {
    let until = Instant::now() + within;
    loop {
        let left = tool_processes(scenario, "-i ");
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon that is killed outright (SIGKILL, as the OOM killer does) runs no shutdown
/// code, yet its hung tool runs die with it instead of sleeping on for ten minutes.
#[test]
fn a_killed_daemon_leaves_no_hung_tool_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut npu = npu0();
    npu["behaviours"] = json!({"optical": {"mode": "hang", "hang_ms": 600000}});
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu]}).to_string(), None);
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\n").unwrap();
    // A deadline far past the test's length, so only the daemon's death can end the run.
    let mut d = Daemon::start(Start::new(&hccn_config(
        &hccn,
        "hccn_call_deadline = \"5m\"",
        "",
    )));
    let until = Instant::now() + Duration::from_secs(20);
    while tool_processes(&hccn.scenario, "-i 0 -optical").is_empty() {
        assert!(
            Instant::now() < until,
            "the hung -optical run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.signal(Signal::KILL);
    let until = Instant::now() + Duration::from_secs(10);
    while !d.try_wait() {
        assert!(Instant::now() < until, "the daemon outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = left_after(&hccn.scenario, Duration::from_secs(3));
    // A failure must not leave the hung tool behind for ten minutes either.
    for &pid in &left {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
    assert_eq!(left, Vec::<u32>::new());
}

/// Busy answers are retried within the call and each run is counted; the reading
/// arrives on the third run.
#[test]
fn busy_answers_are_retried_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut npu = npu0();
    npu["behaviours"] = json!({
        "link": {"mode": "busy", "times": 1},
        "speed": {"mode": "lock_failed", "times": 2}
    });
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu]}).to_string(), None);
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\n").unwrap();
    let d = Daemon::start(Start::new(&hccn_config(&hccn, "", "")));
    let s = d.wait_for("a ports pass", Duration::from_secs(20), |s| {
        collector_ok(s, "npu_ports").is_some()
    });
    let calls = |cmd: &str, result: &str| {
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", cmd), ("result", result)],
        )
    };
    assert_eq!(collector_ok(&s, "npu_ports"), Some(1.0), "{s}");
    assert_eq!(calls("link", "busy"), Some(1.0));
    assert_eq!(calls("speed", "busy"), Some(2.0));
    assert_eq!(calls("speed", "ok"), Some(1.0));
    assert_eq!(hccn.runs("-i 0 -speed -g"), 3);
    assert_eq!(
        value(
            &s,
            "hcclwatch_npu_port_speed_bits_per_second",
            &[("npu", "0")]
        ),
        Some(100e9)
    );
}

/// "Not supported on this product" is asked once and never again, and is not a failure.
#[test]
fn not_supported_is_asked_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut npu = npu0();
    npu["behaviours"] = json!({"optical": {"mode": "not_supported"}});
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu]}).to_string(), None);
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\n").unwrap();
    let d = Daemon::start(Start::new(&hccn_config(&hccn, "", "")));
    // Four ports passes at 1 s mean at least three optics passes at 1 s.
    d.wait_for("four ports passes", Duration::from_secs(30), |_| {
        hccn.runs("-i 0 -link -g") >= 4
    });
    let s = d.scrape();
    assert_eq!(hccn.runs("-i 0 -optical -g"), 1);
    assert_eq!(
        value(
            &s,
            "hcclwatch_hccn_unsupported",
            &[("command", "optical"), ("npu", "0")]
        ),
        Some(1.0)
    );
    assert_eq!(collector_ok(&s, "npu_optics"), Some(1.0), "{s}");
    assert_eq!(
        value(&s, "hcclwatch_npu_optical_present", &[("npu", "0")]),
        None
    );
}

/// Output past the cap (64 KiB) is refused, counted, and not parsed.
#[test]
fn output_past_the_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut npu = npu0();
    npu["behaviours"] = json!({"stat": {"mode": "flood", "flood_bytes": 1048576}});
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu]}).to_string(), None);
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\n").unwrap();
    let d = Daemon::start(Start::new(&hccn_config(&hccn, "", "")));
    let s = d.wait_for("a ports pass", Duration::from_secs(20), |s| {
        collector_ok(s, "npu_ports").is_some()
    });
    assert_eq!(
        value(
            &s,
            "hcclwatch_hccn_calls_total",
            &[("command", "stat"), ("result", "output_too_large")]
        ),
        Some(1.0),
        "{s}"
    );
    assert_eq!(collector_ok(&s, "npu_ports"), Some(0.0));
    assert!(!s.contains("hcclwatch_npu_roce_cqes_total"));
    assert_eq!(
        value(&s, "hcclwatch_npu_port_up", &[("npu", "0")]),
        Some(1.0)
    );
}

/// The fake is re-read on every run: a port that flaps between two passes shows as
/// rising link-up events and a newer last change, as the flap alert expects.
#[test]
fn a_flapping_port_shows_as_rising_link_up_events() {
    let dir = tempfile::tempdir().unwrap();
    let hccn = FakeHccn::new(dir.path(), &json!({"npus": [npu0()]}).to_string(), None);
    std::fs::write(&hccn.conf, "address_0=10.20.0.1\n").unwrap();
    let d = Daemon::start(Start::new(&hccn_config(&hccn, "", "")));
    let npu = [("npu", "0")];
    d.wait_for("the first link_stat", Duration::from_secs(20), |s| {
        value(s, "hcclwatch_npu_port_link_up_events_total", &npu) == Some(3.0)
    });
    let later = CHANGED_UP + 600;
    let mut flapped = npu0();
    flapped["link_stat"] = json!({"up_count": 6, "down_count": 5, "changes": [
        {"at": later, "state": "UP"}, {"at": later - 1, "state": "DOWN"},
        {"at": CHANGED_UP, "state": "UP"}]});
    hccn.set_scenario(&json!({"npus": [flapped]}).to_string());
    let s = d.wait_for("the flaps", Duration::from_secs(20), |s| {
        value(s, "hcclwatch_npu_port_link_up_events_total", &npu) == Some(6.0)
    });
    assert_eq!(
        value(&s, "hcclwatch_npu_port_link_down_events_total", &npu),
        Some(5.0)
    );
    assert_eq!(
        value(&s, "hcclwatch_npu_port_last_change_timestamp_seconds", &npu),
        Some(later as f64)
    );
}

/// `Hccn::ping` against the fake over a shared fabric file: a healthy port answers all
/// three packets near the fabric's base round trip, a lossy one loses them (a
/// measurement, not an error), an unknown address is all lost, and a port without an IP
/// cannot ping at all. Several threads ping at once.
#[test]
fn pings_over_the_shared_fabric() {
    use hcclwatch::telemetry::hccn::{Hccn, HccnError, HccnOptions};
    use std::net::Ipv4Addr;
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric.json");
    std::fs::write(
        &fabric,
        json!({"base_rtt_ms": 0.5, "ports": {
            "10.20.0.1": {}, "10.20.0.2": {"added_rtt_ms": 1.5}, "10.20.0.3": {"loss": 1.0}}})
        .to_string(),
    )
    .unwrap();
    let mut no_ip = npu0();
    no_ip["phy_id"] = json!(1);
    no_ip["ips"] = json!([]);
    let hccn = FakeHccn::new(
        dir.path(),
        &json!({"npus": [npu0(), no_ip]}).to_string(),
        Some(&fabric),
    );
    let h = Hccn::new(
        HccnOptions {
            tool: hccn.tool.clone(),
            path: Some("/usr/bin:/bin".into()),
            ..HccnOptions::default()
        },
        None,
    );
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = [2u8, 3, 9]
            .into_iter()
            .map(|last| {
                let h = &h;
                s.spawn(move || h.ping(0, Ipv4Addr::new(10, 20, 0, last)))
            })
            .collect();
        handles.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let healthy = results[0].as_ref().unwrap();
    assert_eq!((healthy.sent, healthy.received), (3, 3));
    for rtt in &healthy.rtts {
        // 0.5 + 1.5 ms, ± 10 % jitter.
        let ms = rtt.unwrap() * 1e3;
        assert!((1.8..=2.2).contains(&ms), "{ms} ms");
    }
    for lossy in &results[1..] {
        let r = lossy.as_ref().unwrap();
        assert_eq!((r.sent, r.received), (3, 0));
        assert_eq!(r.rtts, vec![None, None, None]);
    }
    assert!(matches!(
        h.ping(1, Ipv4Addr::new(10, 20, 0, 1)),
        Err(HccnError::Failed { exit: Some(1), .. })
    ));
    assert_eq!(hccn.runs("-i 0 -ping -g address 10.20.0.2"), 1);
    assert_eq!(h.stats().calls[&("ping", "ok")], 3);
}
