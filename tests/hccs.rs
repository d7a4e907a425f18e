//! The HCCS ping mesh end to end: two daemons on loopback, each on the fake DCMI library's
//! Atlas A3 node (8 dies with vNIC addresses and the ping mesh) and a fake `hccn_tool`
//! answering `-vnic -g` with the same addresses, all over one shared fake fabric file.
//!
//! - Every local NPU runs a task to the other 15 NPUs of the (one) super-pod; one vNIC
//!   port of the other node loses packets, and the exported HCCS packets and the loss ratio
//!   of that destination match the loss the fabric file sets, while no other destination
//!   shows loss.
//! - A chip reset (the fake's `reset_generation`) stops a task; the daemon restarts it.
//! - On shutdown the tasks are stopped.
//! - On an A2 node (`-8255`) and on a driver without the functions, one log line says why,
//!   the state gauge says the same, and no per-NPU HCCS series is exported.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Daemon, FakeHccn, Start, loopback_peers, samples, value, write_key};
use serde_json::{Value, json};

/// Two fleets on two shared cores: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const A3: &str = include_str!("fake-dcmi/scenarios/a3-8-die.json");
const A2: &str = include_str!("fake-dcmi/scenarios/example.json");
const NPUS: u32 = 8;
/// The lossy vNIC port: node 1, NPU 3.
const LOSSY: (usize, u32) = (1, 3);
/// Its loss.
const LOSS: f64 = 0.3;

/// NPU `npu`'s vNIC address on node `node`, as the A3 scenario numbers them
/// (`192.<server>.<2 + die>.<199 - device>`).
fn vnic(node: usize, npu: u32) -> String {
    format!("192.{node}.{}.{}", 2 + npu % 2, 199 - npu)
}

/// NPU `npu`'s RoCE address on node `node`.
fn roce(node: usize, npu: u32) -> String {
    format!("10.20.{node}.{}", npu + 1)
}

/// The A3 DCMI scenario of node `node`: its vNIC addresses moved to `192.<node>.*`.
fn dcmi_a3(node: usize) -> Value {
    let mut s: Value = serde_json::from_str(A3).unwrap();
    for card in s["cards"].as_array_mut().unwrap() {
        for chip in card["chips"].as_array_mut().unwrap() {
            let phy = chip["phy_id"].as_u64().unwrap() as u32;
            chip["vnic_ip"] = json!(vnic(node, phy));
        }
    }
    s
}

/// The 8-NPU fake `hccn_tool` node with RoCE addresses `10.20.<node>.*` and, when `a3`,
/// the vNIC addresses of [`dcmi_a3`].
fn hccn_scenario(node: usize, a3: bool) -> String {
    let text = include_str!("fake-hccn/scenarios/8-npu.json")
        .replace("\"10.20.0.", &format!("\"10.20.{node}."));
    let mut s: Value = serde_json::from_str(&text).unwrap();
    if a3 {
        for npu in s["npus"].as_array_mut().unwrap() {
            let phy = npu["phy_id"].as_u64().unwrap() as u32;
            npu["vnic_ip"] = json!(vnic(node, phy));
        }
    }
    s.to_string()
}

/// The fabric: every RoCE and vNIC port of both nodes; the vNIC port [`LOSSY`] loses
/// [`LOSS`] of its packets.
fn fabric() -> Value {
    let mut ports = serde_json::Map::new();
    for node in 0..2 {
        for npu in 0..NPUS {
            ports.insert(roce(node, npu), json!({}));
            let loss = if (node, npu) == LOSSY { LOSS } else { 0.0 };
            ports.insert(vnic(node, npu), json!({ "loss": loss }));
        }
    }
    json!({ "base_rtt_ms": 0.05, "ports": ports })
}

/// One daemon's config: the fake DCMI library, the fake tool, fast probe rounds, HCCS
/// rounds every second and reads every 3 s.
fn config(peers: &[String], rank: usize, key: &Path, hccn: &FakeHccn) -> String {
    let list = peers
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "dcmi"
dcmi_library = "{lib}"
call_deadline = "500ms"
hccn_tool = "{tool}"
hccn_conf = "{conf}"
[telemetry.intervals]
inventory = "2s"
ports = "60s"
[collectors]
host = false
optics = false
[collective]
peers = [{list}]
rank = {rank}
key_file = "{key}"
connect_timeout = "5s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "1s"
small_bytes = 1024
link_bytes = 65536
ring_every = 0
[device_probe]
interval = "1s"
max_packets_per_second = 10.0
hccs_round_interval = "1s"
hccs_read_interval = "3s"
"#,
        lib = common::fake_lib().display(),
        tool = hccn.tool.display(),
        conf = hccn.conf.display(),
        key = key.display(),
    )
}

/// Two daemons on `scenarios` (fake DCMI) with their fake tools and the shared fabric.
struct Fleet {
    daemons: Vec<Daemon>,
    peers: Vec<String>,
    _hccn: Vec<FakeHccn>,
    _fabric: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(scenarios: &[Value], a3: bool) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let fabric_path = dir.path().join("fabric.json");
    std::fs::write(&fabric_path, fabric().to_string()).unwrap();
    let peers = loopback_peers(scenarios.len());
    let mut hccns = Vec::new();
    let daemons = scenarios
        .iter()
        .enumerate()
        .map(|(n, scen)| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir(&node_dir).unwrap();
            let hccn = FakeHccn::new(&node_dir, &hccn_scenario(n, a3), Some(&fabric_path));
            let conf: String = (0..NPUS)
                .map(|p| format!("address_{p}={}\nnetmask_{p}=255.255.255.0\n", roce(n, p)))
                .collect();
            std::fs::write(&hccn.conf, conf).unwrap();
            let cfg = config(&peers, n, &key, &hccn);
            let scen = scen.to_string();
            let mut s = Start::new(&cfg).scenario(&scen);
            s.env
                .push(("FAKE_FABRIC", fabric_path.display().to_string()));
            let d = Daemon::start(s);
            hccns.push(hccn);
            d
        })
        .collect();
    Fleet {
        daemons,
        peers,
        _hccn: hccns,
        _fabric: fabric_path,
        _dir: dir,
    }
}

/// The sum of `name`'s samples with labels `want` (every NPU).
fn sum(scrape: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    samples(scrape, name, want).iter().sum()
}

/// `(labels, value)` of every sample of `name`.
fn series(scrape: &str, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    scrape
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, v) = rest.rsplit_once("} ")?;
            Some((common::parse_labels(labels), v.trim().parse().ok()?))
        })
        .collect()
}

fn label<'a>(labels: &'a [(String, String)], k: &str) -> &'a str {
    labels
        .iter()
        .find(|(n, _)| n == k)
        .map_or("", |(_, v)| v.as_str())
}

#[test]
fn a3_nodes_export_hccs_loss_restart_stopped_tasks_and_stop_them_on_exit() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fleet = start(&[dcmi_a3(0), dcmi_a3(1)], true);
    let d0 = &fleet.daemons[0];
    let lossy_node = fleet.peers[LOSSY.0].clone();
    let lossy_npu = LOSSY.1.to_string();
    // Every local NPU pings the 15 other NPUs; wait for enough packets that the measured
    // share is close to the expected one.
    let packets = "hcclwatch_npu_hccs_ping_packets_total";
    let scrape = d0.wait_for("HCCS packets", Duration::from_secs(90), |s| {
        sum(s, "hcclwatch_npu_hccs_ping_destinations", &[]) == f64::from(8 * 15)
            && sum(s, packets, &[]) >= 12_000.0
    });
    assert_eq!(
        value(
            &scrape,
            "hcclwatch_hccs_ping_mesh_state",
            &[("state", "running")]
        ),
        Some(1.0)
    );
    // One destination of the 15 loses LOSS of its packets: that share of every local
    // NPU's packets, summed over the NPUs.
    let lost = sum(&scrape, packets, &[("result", "lost")]);
    let sent = sum(&scrape, packets, &[]);
    let expected = LOSS / 15.0;
    let measured = lost / sent;
    eprintln!("HCCS: lost {lost} of {sent} packets = {measured:.4} (expected {expected:.4})");
    assert!(
        (measured - expected).abs() < expected * 0.3,
        "lost {lost} of {sent} = {measured}, expected {expected}"
    );
    // Only the lossy destination has a loss-ratio series, from each local NPU; the mean
    // of the per-read ratios is close to the fabric's loss.
    let ratios = series(&scrape, "hcclwatch_npu_hccs_ping_loss_ratio");
    assert!(!ratios.is_empty(), "no loss ratio series:\n{scrape}");
    for (l, _) in &ratios {
        assert_eq!(
            (label(l, "dst_node"), label(l, "dst_npu")),
            (lossy_node.as_str(), lossy_npu.as_str()),
            "{l:?}"
        );
    }
    let mean = ratios.iter().map(|(_, v)| v).sum::<f64>() / ratios.len() as f64;
    eprintln!(
        "HCCS: mean per-read loss of the lossy destination {mean:.3} over {} series (fabric {LOSS})",
        ratios.len()
    );
    assert!((mean - LOSS).abs() < 0.12, "mean per-read loss {mean}");
    let rtt_count = sum(&scrape, "hcclwatch_npu_hccs_ping_rtt_seconds_count", &[]);
    assert!(rtt_count > 0.0, "no HCCS round trips observed");
    // The RoCE families are still there, unchanged in name.
    assert!(scrape.contains("hcclwatch_npu_ping_packets_total{"));

    // A chip reset stops NPU 0's task (card 0, die 0): it is found stopped and started
    // again, and counts packets again after that.
    let mut s = dcmi_a3(0);
    s["cards"][0]["chips"][0]["ping_mesh"] = json!({ "reset_generation": 1 });
    d0.set_scenario(&s.to_string());
    let restarted = d0.wait_for("a restart", Duration::from_secs(30), |s| {
        value(
            s,
            "hcclwatch_npu_hccs_ping_task_restarts_total",
            &[("npu", "0")],
        ) == Some(1.0)
    });
    let before = sum(&restarted, packets, &[("npu", "0")]);
    d0.wait_for("packets after the restart", Duration::from_secs(30), |s| {
        sum(s, packets, &[("npu", "0")]) > before
    });
    assert_eq!(
        sum(
            &restarted,
            "hcclwatch_npu_hccs_ping_task_restarts_total",
            &[]
        ),
        1.0,
        "only NPU 0 was reset"
    );
    assert!(d0.log().contains("HCCS ping-mesh task found stopped"));

    // Shutdown stops the eight tasks.
    let Fleet { mut daemons, .. } = fleet;
    let d0 = daemons.remove(0);
    let (_, log) = d0.stop_logged();
    let line = log
        .lines()
        .find(|l| l.contains("HCCS ping-mesh tasks stopped"))
        .unwrap_or_else(|| panic!("no stop line:\n{log}"));
    assert!(line.contains("tasks=8"), "{line}");
}

#[test]
fn without_the_mesh_one_line_says_why_and_no_hccs_series_is_exported() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Node 0: an A2 (the library answers -8255). Node 1: an A3 whose driver lacks the
    // functions.
    let a2: Value = serde_json::from_str(A2).unwrap();
    let mut old = dcmi_a3(1);
    old["missing_symbols"] = json!([
        "dcmi_start_hccsping_mesh",
        "dcmi_stop_hccsping_mesh",
        "dcmi_get_hccsping_mesh_info",
        "dcmi_get_hccsping_mesh_info_v2",
        "dcmi_get_hccsping_mesh_state"
    ]);
    let fleet = start(&[a2, old], false);
    for (d, state) in fleet
        .daemons
        .iter()
        .zip(["not_supported", "missing_function"])
    {
        let scrape = d.wait_for("the HCCS state", Duration::from_secs(60), |s| {
            value(s, "hcclwatch_hccs_ping_mesh_state", &[("state", state)]) == Some(1.0)
        });
        assert!(
            !scrape.contains("hcclwatch_npu_hccs_ping_"),
            "HCCS series on a node without the mesh:\n{scrape}"
        );
    }
    // Several reads later, still one line each.
    std::thread::sleep(Duration::from_secs(7));
    for d in &fleet.daemons {
        let log = d.log();
        let lines = log
            .lines()
            .filter(|l| l.contains("HCCS ping mesh unavailable"))
            .count();
        assert_eq!(lines, 1, "{log}");
        assert!(!d.scrape().contains("hcclwatch_npu_hccs_ping_"));
    }
}
