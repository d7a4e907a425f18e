//! The HCCS ping-mesh wrapper (`telemetry::dcmi::pingmesh`) against `libfake_dcmi.so`,
//! whose ping mesh measures over the shared fake fabric file: start a task, read its state
//! and per-destination statistics (loss and round-trip times as the fabric sets them), see
//! a chip reset stop it and start it again, stop it; and the refusals (not an A3, not root,
//! a bad task, a driver without the functions).
//!
//! The fake library reads its scenario and fabric from the environment when it is loaded,
//! and this test loads it into its own process; so each case runs in a child process of
//! this test binary (the `#[ignore]`d `child_*` tests) with that environment set.

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hcclwatch::snapshot::npu::ChipAddress;
use hcclwatch::telemetry::dcmi::pingmesh::{MeshDestination, MeshError, MeshState, MeshTask};
use hcclwatch::telemetry::dcmi::{DcmiOptions, DcmiSource, PingMesh};
use serde_json::{Value, json};

const A3: &str = include_str!("fake-dcmi/scenarios/a3-8-die.json");
/// Set in the children.
const CHILD: &str = "HCCLWATCH_PINGMESH_CHILD";

/// The fabric: die 1 of card 0 answers after 0.08 + 0.5 ms; die 0 of card 2 is down;
/// 192.9.9.9 is in no port (every packet to it is lost).
fn fabric() -> Value {
    json!({
        "base_rtt_ms": 0.08,
        "ports": {
            "192.0.2.199": {},
            "192.0.3.198": {"added_rtt_ms": 0.5},
            "192.0.2.197": {},
            "192.0.2.195": {"down": true}
        }
    })
}

/// The A3 scenario with card 1's die 0 not an A3 (no ping mesh) and die 1 refusing the
/// start as a non-root caller would; `edit` changes it further.
fn scenario(edit: impl FnOnce(&mut Value)) -> Value {
    let mut s: Value = serde_json::from_str(A3).unwrap();
    s["cards"][1]["chips"][0]
        .as_object_mut()
        .unwrap()
        .remove("ping_mesh");
    s["cards"][1]["chips"][1]["fail"] = json!({"dcmi_start_hccsping_mesh": -8002});
    edit(&mut s);
    s
}

/// Runs the child test `name` with the scenario and fabric in its environment.
fn run_child(name: &str, scenario: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("scenario.json");
    let fab = dir.path().join("fabric.json");
    std::fs::write(&sc, scenario.to_string()).unwrap();
    std::fs::write(&fab, fabric().to_string()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("FAKE_DCMI_SCENARIO", &sc)
        .env("FAKE_FABRIC", &fab)
        .env("FAKE_DCMI_LIB", common::fake_lib())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed:\n{text}");
    assert!(text.contains("1 passed"), "{name} did not run:\n{text}");
}

#[test]
fn ping_mesh_runs_reports_restarts_and_stops() {
    run_child("child_ping_mesh_lifecycle", &scenario(|_| {}));
}

#[test]
fn ping_mesh_falls_back_to_v1_and_reports_missing_functions() {
    let s = scenario(|s| {
        s["missing_symbols"] = json!([
            "dcmi_get_hccsping_mesh_info_v2",
            "dcmi_get_hccsping_mesh_state"
        ]);
    });
    run_child("child_ping_mesh_v1", &s);
}

/// The ping-mesh handle over the fake library of this child's environment.
fn mesh() -> Option<PingMesh> {
    std::env::var_os(CHILD)?;
    let opts = DcmiOptions {
        library: Some(std::env::var_os("FAKE_DCMI_LIB").unwrap().into()),
        ..DcmiOptions::default()
    };
    let source = DcmiSource::open(opts).expect("the fake library loads");
    Some(source.ping_mesh().expect("loaded"))
}

fn chip(card: i32, device: i32) -> ChipAddress {
    ChipAddress {
        card,
        device,
        ..ChipAddress::default()
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// Reads the task's statistics until `rounds` rounds are in (a round is 1 s).
fn after_rounds(m: &mut PingMesh, c: ChipAddress, rounds: u64) -> Vec<MeshDestination> {
    let start = Instant::now();
    loop {
        let info = m.info(c, 0).unwrap();
        if info.first().is_some_and(|d| d.rounds_total >= rounds) {
            return info;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{info:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Replaces the scenario file the way tests do (write, then rename over it).
fn rewrite_scenario(edit: impl FnOnce(&mut Value)) {
    let path = std::env::var_os("FAKE_DCMI_SCENARIO").unwrap();
    let path = Path::new(&path);
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut s);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, s.to_string()).unwrap();
    // A different mtime than the file it replaces, so the fake sees the change.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
#[ignore = "run in a child process by ping_mesh_runs_reports_restarts_and_stops"]
fn child_ping_mesh_lifecycle() {
    let Some(mut m) = mesh() else { return };
    let c = chip(0, 0);
    assert_eq!(m.state(c, 0), Ok(MeshState::Stopped));
    assert_eq!(m.info(c, 0), Ok(vec![]));
    let task = MeshTask {
        packet_interval_ms: 0,
        ..MeshTask::new(
            vec![
                ip("192.0.3.198"),
                ip("192.0.2.197"),
                ip("192.9.9.9"),
                ip("192.0.2.195"),
            ],
            1,
        )
    };
    m.start(c, &task).unwrap();
    assert_eq!(m.state(c, 0), Ok(MeshState::Running));
    let info = after_rounds(&mut m, c, 2);
    let by_addr = |a: &str| info.iter().find(|d| d.address == a).unwrap().clone();
    let rounds = by_addr("192.0.3.198").rounds_total;
    let sent = 10 * rounds as u32;
    // Reachable: every packet answered, RTT = base + added (± 10 % jitter).
    let slow = by_addr("192.0.3.198");
    assert_eq!((slow.replies, slow.losses), (sent, 0));
    let avg = slow.avg_seconds.unwrap();
    assert!((0.58e-3 * 0.9..=0.58e-3 * 1.1).contains(&avg), "{avg}");
    assert!(slow.min_seconds.unwrap() <= avg && avg <= slow.max_seconds.unwrap());
    assert_eq!(slow.l1_plane_faults, Some(0));
    let fast = by_addr("192.0.2.197");
    assert!(fast.avg_seconds.unwrap() < 0.08e-3 * 1.1);
    // Not in the fabric, and down: everything lost, no times.
    for a in ["192.9.9.9", "192.0.2.195"] {
        let d = by_addr(a);
        assert_eq!((d.replies, d.losses), (0, sent), "{a}");
        assert_eq!(d.avg_seconds, None, "{a}");
        assert_eq!(d.loss_ratio(), Some(1.0), "{a}");
    }

    // A chip reset stops the task: stopped, no statistics; starting it again works.
    rewrite_scenario(|s| s["cards"][0]["chips"][0]["ping_mesh"] = json!({"reset_generation": 1}));
    assert_eq!(m.state(c, 0), Ok(MeshState::Stopped));
    assert_eq!(m.info(c, 0), Ok(vec![]));
    m.start(c, &task).unwrap();
    assert_eq!(m.state(c, 0), Ok(MeshState::Running));
    m.stop(c, 0).unwrap();
    assert_eq!(m.state(c, 0), Ok(MeshState::Stopped));

    // Refusals: not an A3, not root, a task libdcmi would refuse.
    assert_eq!(m.start(chip(1, 0), &task), Err(MeshError::NotAvailable));
    assert_eq!(m.start(chip(1, 1), &task), Err(MeshError::NotPermitted));
    let bad = MeshTask::new(vec![ip("10.0.0.1")], 1);
    assert!(matches!(m.start(c, &bad), Err(MeshError::InvalidTask(_))));
}

#[test]
#[ignore = "run in a child process by ping_mesh_falls_back_to_v1_and_reports_missing_functions"]
fn child_ping_mesh_v1() {
    let Some(mut m) = mesh() else { return };
    let c = chip(0, 0);
    assert_eq!(m.state(c, 0), Err(MeshError::NotAvailable));
    m.start(c, &MeshTask::new(vec![ip("192.0.2.197")], 1))
        .unwrap();
    let info = after_rounds(&mut m, c, 1);
    assert_eq!(info.len(), 1);
    assert!(info[0].replies > 0);
    // Only `_v2` has the L1-plane summary.
    assert_eq!(info[0].l1_plane_faults, None);
    m.stop(c, 0).unwrap();
}
