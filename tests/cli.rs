//! Black-box tests of the command line and the HTTP endpoints of the real binary.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Daemon, Start, value};

fn hcclwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
}

fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn shipped_configs_pass_check_config() {
    for f in ["deploy/config/hcclwatch.toml", "deploy/config/sim.toml"] {
        let out = hcclwatch()
            .arg("check-config")
            .arg(repo(f))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
    }
}

#[test]
fn documented_example_covers_every_key() {
    let text = std::fs::read_to_string(repo("deploy/config/hcclwatch.toml")).unwrap();
    let mut section = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let l = line.trim().trim_start_matches('#').trim();
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_string();
            seen.insert(section.clone());
        } else if let Some((k, _)) = l.split_once(" = ")
            && !k.contains(' ')
        {
            seen.insert(format!("{section}.{k}"));
        }
    }
    for key in hcclwatch::config::schema::SCHEMA {
        assert!(
            seen.contains(key.path),
            "deploy/config/hcclwatch.toml does not document {}",
            key.path
        );
    }
}

#[test]
fn check_config_prints_every_problem_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "[web]\nlisten_adress = \":1\"\n\n[telemetry]\nbackend = \"gpu\"\n\n[telemetry.intervals]\nhealth = \"fast\"\n\n[collector]\nhost = true\n",
    )
    .unwrap();
    let out = hcclwatch().arg("check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let path = p.display().to_string();
    for want in [
        format!("{path}:2: web.listen_adress: unknown key; did you mean `web.listen_address`?"),
        format!("{path}:5: telemetry.backend: \"gpu\" is not one of auto, dcmi, sim, none"),
        format!(
            "{path}:8: telemetry.intervals.health: \"fast\" is not a duration; write e.g. \"5s\", \"500ms\" or \"1m\""
        ),
        format!("{path}:10: collector: unknown key; did you mean `collectors`?"),
    ] {
        assert!(
            lines.contains(&want.as_str()),
            "missing {want:?} in:\n{err}"
        );
    }
    assert_eq!(lines.len(), 4, "{err}");
}

#[test]
fn check_config_on_missing_file_fails_clearly() {
    let out = hcclwatch()
        .args(["check-config", "/nonexistent/hcclwatch.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read config file /nonexistent/hcclwatch.toml"),
        "{err}"
    );
}

#[test]
fn environment_overrides_are_validated_by_check_config() {
    let out = hcclwatch()
        .arg("check-config")
        .arg(repo("deploy/config/sim.toml"))
        .env("HCCLWATCH_TELEMETRY_SIM_CHIPS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "env:HCCLWATCH_TELEMETRY_SIM_CHIPS: telemetry.sim.chips: 0 is out of range 1..=64"
        ),
        "{err}"
    );
}

#[test]
fn version_prints_version_commit_and_date() {
    let out = hcclwatch().arg("version").output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.starts_with(&format!("hcclwatch {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{s}"
    );
    assert!(s.contains(", built 20"), "{s}");
}

#[test]
fn bad_flag_value_is_reported_with_the_flag() {
    let out = hcclwatch()
        .args([
            "run",
            "--web.listen-address",
            "nowhere",
            "--telemetry.backend",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("flag --web.listen-address: web.listen_address: \"nowhere\" has no port"),
        "{err}"
    );
    let out = hcclwatch()
        .args(["run", "--log.level", "loud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("flag --log.level: log.level"));
}

#[test]
fn flags_override_the_file() {
    let cfg = "[web]\nlisten_address = \"127.0.0.1:1\"\ntelemetry_path = \"/metrics\"\n[telemetry]\nbackend = \"none\"\n";
    let mut s = Start::new(cfg);
    s.args = vec![
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.telemetry-path",
        "/prom",
        "--log.format",
        "json",
    ];
    let d = Daemon::start(s);
    assert_eq!(d.get("/prom", None).status, 200);
    assert_eq!(d.get("/metrics", None).status, 404);
    let log = d.log();
    let first = log
        .lines()
        .find(|l| l.contains("hcclwatch listening"))
        .unwrap();
    let parsed: serde_json::Value = serde_json::from_str(first).expect("JSON log line");
    assert_eq!(parsed["level"], "INFO");
    assert_eq!(parsed["message"], "hcclwatch listening");
}

#[test]
fn endpoints_and_content_negotiation() {
    let cfg = r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "sim"
[telemetry.sim]
chips = 2
[telemetry.intervals]
health = "200ms"
sensors = "200ms"
utilization = "200ms"
memory = "200ms"
network = "200ms"
host = "200ms"
"#;
    let d = Daemon::start(Start::new(cfg));
    assert_eq!(d.get("/-/healthy", None).status, 200);
    d.wait_for("readiness", Duration::from_secs(10), |_| {
        d.get("/-/ready", None).status == 200
    });
    let index = d.get("/", None);
    assert_eq!(index.status, 200);
    assert!(index.body.contains("href=\"/metrics\""));

    let text = d.get("/metrics", Some("text/plain"));
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!text.body.contains("# EOF"));
    assert!(
        text.body
            .contains("# TYPE hcclwatch_npu_hbm_ecc_errors_total counter"),
        "{}",
        text.body
    );

    let om = d.get(
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(
        om.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(
        om.body.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    assert!(
        om.body
            .contains("# TYPE hcclwatch_npu_hbm_ecc_errors counter")
    );
    assert!(om.body.contains("hcclwatch_npu_hbm_ecc_errors_total{"));

    // The sim backend ran only because it was asked for, and says so.
    let s = d.scrape();
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(2.0));
    assert_eq!(
        value(
            &s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "sim")]
        ),
        Some(1.0)
    );
    assert!(common::samples(&s, "hcclwatch_dcmi_stuck_calls", &[]).is_empty());

    assert_eq!(d.get("/nope", None).status, 404);
    assert!(d.stop().success(), "clean exit on SIGTERM");
}

#[test]
fn not_ready_until_first_collection() {
    // A slow first collection: the health call hangs past the first readiness probe.
    let scen = r#"{"dcmi_version": "1", "cards": [{"card_id": 0, "chips": [
        {"phy_id": 0, "logic_id": 0, "health": 0, "hang_ms": {"dcmi_get_device_health": 1500}}]}]}"#;
    let cfg =
        common::fake_config("").replace("call_deadline = \"500ms\"", "call_deadline = \"3s\"");
    let d = Daemon::start(Start::new(&cfg).scenario(scen));
    let r = d.get("/-/ready", None);
    assert_eq!(r.status, 503, "{}", r.body);
    d.wait_for(
        "readiness after the slow call",
        Duration::from_secs(10),
        |_| d.get("/-/ready", None).status == 200,
    );
}

#[test]
fn simulate_prints_a_report_and_json() {
    let out = hcclwatch()
        .args(["simulate", "--nodes", "32", "--hours", "1", "--seed", "4"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "slow node x1.2",
        "precision",
        "false quarantines",
        "quarantines from fabric dips",
        "node-rounds/s",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    let out = hcclwatch()
        .args([
            "simulate",
            "--nodes",
            "32",
            "--hours",
            "1",
            "--seed",
            "4",
            "--probe-interval",
            "10s",
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nodes"], 32);
    // One hour of 10 s rounds.
    assert_eq!(v["rounds"], 360);
    assert!(v["precision"].as_f64().unwrap() <= 1.0);
    let out = hcclwatch()
        .args(["simulate", "--nodes", "20000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes must be 4..=10000"));
}
