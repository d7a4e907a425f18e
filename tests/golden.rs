//! `/metrics` output pinned byte for byte for the shipped fake DCMI scenarios, so that a
//! change to how the exposition is produced (collectors, snapshot types) cannot change a
//! metric name, label, value, help text or the order of the families unnoticed.
//!
//! The daemon runs as in production (the real binary, `libfake_dcmi.so`, a real scrape over
//! TCP). Values that depend on the clock or on how many collection cycles ran before the
//! scrape (durations, timestamps, error counters, build metadata) are masked as `<v>`; every
//! other character must match the file under `tests/golden/`. With probing on, every value
//! is masked (they are timings), so the probe golden pins names, labels and order.
//!
//! To re-record after an intended change: `UPDATE_GOLDEN=1 cargo test --test golden`, and
//! review the diff of `tests/golden/` like code.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Daemon, Start, fake_config, loopback_peers, value, write_key};

/// Families whose values move with the clock or with the number of cycles run so far.
const VOLATILE: &[&str] = &[
    "hcclwatch_build_info",
    "hcclwatch_scrape_collector_duration_seconds",
    "hcclwatch_collector_last_success_timestamp_seconds",
    "hcclwatch_config_last_reload_success_timestamp_seconds",
    "hcclwatch_dcmi_call_errors_total",
    "hcclwatch_dcmi_calls_timed_out_total",
    "hcclwatch_dcmi_stuck_calls",
];

/// The series part of a sample line (`name{labels}`), and its value.
fn split_sample(line: &str) -> (&str, &str) {
    line.rsplit_once(' ').unwrap_or((line, ""))
}

fn family_of(series: &str) -> &str {
    series.split('{').next().unwrap_or(series)
}

/// Masks values of volatile families (all values when `all`), and the build labels.
fn normalise(text: &str, all: bool) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') {
            out.push_str(line);
        } else {
            let (series, _) = split_sample(line);
            let name = family_of(series);
            if name == "hcclwatch_build_info" {
                out.push_str("hcclwatch_build_info{<build>} <v>");
            } else if all || VOLATILE.contains(&name) {
                out.push_str(series);
                out.push_str(" <v>");
            } else {
                out.push_str(line);
            }
        }
        out.push('\n');
    }
    out
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `got` with the golden file, or records it under `UPDATE_GOLDEN=1`.
fn check(name: &str, got: &str) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; record it with UPDATE_GOLDEN=1", path.display()));
    if want != got {
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}:\n  want {a}\n  got  {b}", i + 1))
            .collect();
        panic!(
            "{} differs ({} lines wanted, {} got); first differences:\n{}",
            path.display(),
            want.lines().count(),
            got.lines().count(),
            diff.join("\n")
        );
    }
}

/// Scrapes once every collector has reported, in the given exposition format.
fn settled_scrape(d: &Daemon, accept: Option<&str>) -> String {
    d.wait_for("a full first collection", Duration::from_secs(30), |s| {
        d.get("/-/ready", None).status == 200
            && value(
                s,
                "hcclwatch_scrape_collector_success",
                &[("collector", "npu_network")],
            )
            .is_some()
    });
    let r = d.get("/metrics", accept);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn scenario_golden(file: &str, scenario: &str) {
    let cfg = fake_config("[collectors]\nhost = false\n");
    let d = Daemon::start(Start::new(&cfg).scenario(scenario));
    let text = settled_scrape(&d, None);
    check(&format!("{file}.prom"), &normalise(&text, false));
    let om = settled_scrape(&d, Some("application/openmetrics-text; version=1.0.0"));
    check(&format!("{file}.openmetrics"), &normalise(&om, false));
}

#[test]
fn example_scenario_exposition_is_unchanged() {
    scenario_golden("example", include_str!("fake-dcmi/scenarios/example.json"));
}

#[test]
fn sixteen_npu_scenario_exposition_is_unchanged() {
    scenario_golden("16-npu", include_str!("fake-dcmi/scenarios/16-npu.json"));
}

#[test]
fn probing_families_keep_their_names_labels_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(2);
    let list = peers
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let daemons: Vec<Daemon> = (0..2)
        .map(|r| {
            let cfg = fake_config(&format!(
                "[collectors]\nhost = false\n[collective]\npeers = [{list}]\npeer_names = [\"node-a\", \"node-b\"]\nrank = {r}\nkey_file = \"{}\"\nconnect_timeout = \"5s\"\nexec_timeout = \"5s\"\n[probe]\nenabled = true\ninterval = \"200ms\"\nsmall_bytes = 1024\nlink_bytes = 65536\nring_every = 1\nring_bytes = 65536\n",
                key.display()
            ));
            Daemon::start(
                Start::new(&cfg).scenario(include_str!("fake-dcmi/scenarios/example.json")),
            )
        })
        .collect();
    // Three completed rounds: every probe family (the ring's busbw included) has a value.
    let s = daemons[0].wait_for("three probe rounds", Duration::from_secs(60), |s| {
        value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 3.0)
            && value(s, "hcclwatch_collective_busbw_bytes_per_second", &[]).is_some()
            && value(
                s,
                "hcclwatch_scrape_collector_success",
                &[("collector", "npu_network")],
            )
            .is_some()
    });
    // Only the probe families: the telemetry part is pinned by the scenario goldens.
    let probe_part: String = normalise(&s, true)
        .lines()
        .filter(|l| {
            let name = l
                .strip_prefix("# HELP ")
                .or_else(|| l.strip_prefix("# TYPE "))
                .map_or_else(
                    || family_of(split_sample(l).0),
                    |r| r.split(' ').next().unwrap_or(""),
                );
            PROBE_FAMILIES.iter().any(|p| name.starts_with(p))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    check("probe-2-nodes.prom", &probe_part);
}

/// Name prefixes of the families the prober publishes.
const PROBE_FAMILIES: &[&str] = &[
    "hcclwatch_probe_",
    "hcclwatch_membership_",
    "hcclwatch_peer_up",
    "hcclwatch_peer_reports_inconsistent",
    "hcclwatch_node_state",
    "hcclwatch_straggler_score",
    "hcclwatch_rank_arrival_lag",
    "hcclwatch_link_",
    "hcclwatch_fabric_degraded",
    "hcclwatch_tor_",
    "hcclwatch_normal_changes",
    "hcclwatch_quarantine_recommended",
    "hcclwatch_collective_",
];
