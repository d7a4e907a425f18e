//! The topology source against its real inputs: this node's labels and Volcano HyperNodes
//! read through the real kube client from a small, faithful stand-in of the Kubernetes API
//! server (`common::fake_apiserver`; no real API server can run here), a topology file on
//! disk; and real daemons that share their places in the probe group, each member's
//! `/api/v1/state` naming every member's ToR and where it came from.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::fake_apiserver::FakeApi;
use common::{Daemon, Start, fake_config, loopback_peers, value, write_key};
use hcclwatch::snapshot::topology::{Place, TopologySnapshot, TopologySource};
use hcclwatch::topology::kube::LabelKeys;
use hcclwatch::topology::{Poller, Settings};
use serde_json::{Value, json};

fn keys() -> LabelKeys {
    LabelKeys {
        tor: "example.com/tor".into(),
        spine: "example.com/spine".into(),
        super_pod: "example.com/super-pod".into(),
    }
}

fn settings(node: &str, kubeconfig: &Path) -> Settings {
    Settings {
        node: node.into(),
        file: None,
        labels: Some(keys()),
        hypernodes: true,
        rank_table: None,
        kubeconfig: Some(kubeconfig.to_path_buf()),
        refresh: Duration::from_secs(60),
        deadline: Duration::from_secs(2),
    }
}

fn pass(s: Settings) -> TopologySnapshot {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(Poller::new(s).pass())
}

fn exact(kind: &str, name: &str) -> Value {
    json!({"type": kind, "selector": {"exactMatch": {"name": name}}})
}

fn place(tor: Option<&str>, spine: Option<&str>, super_pod: Option<&str>) -> Place {
    Place {
        tor: tor.map(String::from),
        spine: spine.map(String::from),
        super_pod: super_pod.map(String::from),
    }
}

/// A fabric of HyperNodes: `leaf-1` (tier 1) holds gpu-1 and gpu-2, `leaf-2` holds nodes
/// named `gpu-1[0-9]` by regex; `spine-a` (tier 2) holds both leaves. 600 more tier-1
/// HyperNodes of other nodes make the list span two pages.
fn fabric(api: &FakeApi) {
    for i in 0..600 {
        api.add_hypernode(
            &format!("other-{i:03}"),
            1,
            json!([exact("Node", &format!("x-{i}"))]),
        );
    }
    api.add_hypernode(
        "leaf-1",
        1,
        json!([exact("Node", "gpu-1"), exact("Node", "gpu-2")]),
    );
    api.add_hypernode(
        "leaf-2",
        1,
        json!([{"type": "Node", "selector": {"regexMatch": {"pattern": "^gpu-1[0-9]$"}}}]),
    );
    api.add_hypernode(
        "spine-a",
        2,
        json!([exact("HyperNode", "leaf-1"), exact("HyperNode", "leaf-2")]),
    );
}

#[test]
fn labels_come_before_hypernodes_field_by_field_and_the_list_is_paged() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start();
    let kc = api.kubeconfig(dir.path());
    fabric(&api);
    // gpu-1's labels name its ToR and super pod but not its spine.
    api.add_node(
        "gpu-1",
        &[
            ("example.com/tor", "tor-from-label"),
            ("example.com/super-pod", "sp3"),
        ],
    );
    api.add_node("gpu-12", &[("unrelated", "x")]);

    let t = pass(settings("gpu-1", &kc));
    let own = t.own.expect("gpu-1 is placed");
    // The ToR from the labels (first), the spine from the HyperNodes (only they know it).
    assert_eq!(
        own.place,
        place(Some("tor-from-label"), Some("spine-a"), Some("sp3"))
    );
    assert_eq!(own.source, TopologySource::NodeLabels);
    for s in [TopologySource::NodeLabels, TopologySource::HyperNode] {
        assert!(t.sources[&s].ok, "{s:?}: {:?}", t.sources[&s]);
    }
    // 603 HyperNodes at 500 a page: two list calls, the second continuing the first.
    let lists = api.hypernode_lists();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(lists[0].contains("limit=500"), "{lists:?}");
    assert!(lists[1].contains("continue=500"), "{lists:?}");

    // A node without labels: everything from the HyperNodes, matched by regex.
    let t = pass(settings("gpu-12", &kc));
    let own = t.own.expect("gpu-12 is placed");
    assert_eq!(own.place, place(Some("leaf-2"), Some("spine-a"), None));
    assert_eq!(own.source, TopologySource::HyperNode);
}

#[test]
fn without_volcano_s_crd_hypernodes_are_off_and_a_denied_read_is_a_failing_source() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start();
    let kc = api.kubeconfig(dir.path());
    api.add_node("gpu-1", &[("example.com/tor", "t1")]);
    let t = pass(settings("gpu-1", &kc));
    assert_eq!(t.own.unwrap().place, place(Some("t1"), None, None));
    // The list was answered 404: not a source here, and not a failure.
    assert_eq!(api.hypernode_lists().len(), 1);
    assert!(
        !t.sources.contains_key(&TopologySource::HyperNode),
        "{:?}",
        t.sources
    );

    // RBAC without `get nodes`: the labels fail with the server's reason, the topology file
    // still places the node, and nothing of the failed source is used.
    api.deny("get", "nodes");
    let file = dir.path().join("topology.toml");
    std::fs::write(&file, "[[tor]]\nname = \"tor-file\"\nnodes = [\"gpu-1\"]\n").unwrap();
    let mut s = settings("gpu-1", &kc);
    s.file = Some(file);
    let t = pass(s);
    let labels = &t.sources[&TopologySource::NodeLabels];
    assert!(!labels.ok);
    assert!(
        labels.error.as_deref().unwrap().contains("forbidden"),
        "{labels:?}"
    );
    assert!(t.sources[&TopologySource::File].ok);
    let own = t.own.unwrap();
    assert_eq!(own.place, place(Some("tor-file"), None, None));
    assert_eq!(own.source, TopologySource::File);
}

#[test]
fn a_hung_api_server_costs_one_deadline_and_gives_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start();
    let kc = api.kubeconfig(dir.path());
    api.add_node("gpu-1", &[("example.com/tor", "t1")]);
    api.hang_get("gpu-1");
    let mut s = settings("gpu-1", &kc);
    s.hypernodes = false;
    s.deadline = Duration::from_millis(500);
    let started = Instant::now();
    let t = pass(s);
    let took = started.elapsed();
    // Bounded by the deadline (the server would hang for minutes), with margin for a slow
    // machine; this bounds a hang, it does not time the code.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(t.own.is_none());
    let labels = &t.sources[&TopologySource::NodeLabels];
    assert!(!labels.ok);
    assert!(
        labels.error.as_deref().unwrap().contains("500ms"),
        "{labels:?}"
    );
}

#[test]
fn the_rank_table_gives_this_server_s_super_pod() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("ranktable.json");
    std::fs::write(
        &table,
        r#"{"version":"1.2","server_count":"2","status":"completed",
        "server_list":[
          {"server_id":"gpu-1","host_ip":"10.9.0.1","device":[{"device_id":"0","device_ip":"192.168.9.1","rank_id":"0"}]},
          {"server_id":"gpu-2","host_ip":"10.9.0.2","device":[{"device_id":"0","device_ip":"192.168.9.2","rank_id":"1"}]}],
        "super_pod_list":[
          {"super_pod_id":"4","server_list":[{"server_id":"gpu-1"}]},
          {"super_pod_id":"5","server_list":[{"server_id":"gpu-2"}]}]}"#,
    )
    .unwrap();
    let s = Settings {
        node: "gpu-2".into(),
        file: None,
        labels: None,
        hypernodes: false,
        rank_table: Some(table),
        kubeconfig: None,
        refresh: Duration::from_secs(60),
        deadline: Duration::from_secs(2),
    };
    let t = pass(s);
    let own = t.own.unwrap();
    assert_eq!(own.place, place(None, None, Some("5")));
    assert_eq!(own.source, TopologySource::RankTable);
    assert_eq!(t.sources[&TopologySource::RankTable].nodes, 2);
}

/// Polls `/api/v1/state` until `pred` holds, at most `timeout`.
fn wait_state(d: &Daemon, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let r = d.get("/api/v1/state", None);
        if r.status == 200 {
            let v: Value = serde_json::from_str(&r.body).unwrap();
            if pred(&v) {
                return v;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out waiting for {what}; last state:\n{v:#}\nlog:\n{}",
                    d.log()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each member's (tor, topology_source) as a state document names them.
fn tors(state: &Value) -> BTreeMap<String, (Value, Value)> {
    state["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["node"].as_str().unwrap().to_string(),
                (m["tor"].clone(), m["topology_source"].clone()),
            )
        })
        .collect()
}

#[test]
fn every_member_s_state_names_every_member_s_tor_from_the_shared_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let file = dir.path().join("topology.toml");
    // node-c is in no table: its place is unknown, and every member says so.
    std::fs::write(
        &file,
        "[[tor]]\nname = \"tor-a\"\nspine = \"spine-1\"\nnodes = [\"node-a\", \"node-b\"]\n\n[[node]]\nname = \"node-d\"\ntor = \"tor-d\"\n",
    )
    .unwrap();
    let names = ["node-a", "node-b", "node-c"];
    let peers = loopback_peers(names.len());
    let list = |v: &[String]| {
        v.iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let name_list: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let daemons: Vec<Daemon> = (0..names.len())
        .map(|r| {
            let cfg = fake_config(&format!(
                "[collectors]\nhost = false\n[collective]\npeers = [{}]\npeer_names = [{}]\nrank = {r}\nkey_file = \"{}\"\nconnect_timeout = \"5s\"\nexec_timeout = \"5s\"\n[probe]\nenabled = true\ninterval = \"200ms\"\nsmall_bytes = 1024\nlink_bytes = 65536\n[attribution]\nenabled = false\nnode_name = \"{}\"\n[topology]\nfile = \"{}\"\nnode_labels = false\nhypernodes = false\nrefresh = \"1s\"\ndeadline = \"500ms\"\n",
                list(&peers),
                list(&name_list),
                key.display(),
                names[r],
                file.display()
            ));
            Daemon::start(Start::new(&cfg).scenario(include_str!("fake-dcmi/scenarios/example.json")))
        })
        .collect();
    let want: BTreeMap<String, (Value, Value)> = BTreeMap::from([
        ("node-a".into(), (json!("tor-a"), json!("file"))),
        ("node-b".into(), (json!("tor-a"), json!("file"))),
        ("node-c".into(), (Value::Null, json!("none"))),
    ]);
    for (i, d) in daemons.iter().enumerate() {
        let s = wait_state(d, "every member's ToR", Duration::from_secs(90), |s| {
            tors(s) == want
        });
        let a = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["node"] == "node-a")
            .unwrap();
        assert_eq!(a["spine"], "spine-1");
        assert_eq!(a["super_pod"], Value::Null);
        // This node's own place on /metrics, only where it is known.
        let scrape = d.scrape();
        let info = value(
            &scrape,
            "hcclwatch_node_topology_info",
            &[("tor", "tor-a"), ("spine", "spine-1"), ("source", "file")],
        );
        if names[i] == "node-c" {
            assert!(
                !scrape.contains("hcclwatch_node_topology_info{"),
                "{scrape}"
            );
        } else {
            assert_eq!(info, Some(1.0), "{scrape}");
        }
        assert_eq!(
            value(
                &scrape,
                "hcclwatch_topology_source_up",
                &[("source", "file")]
            ),
            Some(1.0)
        );
    }
    // The cabling changes: node-c is placed, node-b moves. node-c's and node-b's daemons
    // read it at their next refresh and re-form the group, so every member learns it.
    std::fs::write(
        &file,
        "[[tor]]\nname = \"tor-a\"\nspine = \"spine-1\"\nnodes = [\"node-a\"]\n\n[[node]]\nname = \"node-b\"\ntor = \"tor-b\"\n\n[[node]]\nname = \"node-c\"\ntor = \"tor-c\"\n",
    )
    .unwrap();
    let want: BTreeMap<String, (Value, Value)> = BTreeMap::from([
        ("node-a".into(), (json!("tor-a"), json!("file"))),
        ("node-b".into(), (json!("tor-b"), json!("file"))),
        ("node-c".into(), (json!("tor-c"), json!("file"))),
    ]);
    for d in &daemons {
        wait_state(d, "every member's new ToR", Duration::from_secs(90), |s| {
            tors(s) == want
        });
    }
}

#[test]
fn a_bad_topology_file_is_reported_with_its_line_and_the_daemon_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("topology.toml");
    std::fs::write(
        &file,
        "[[tor]]\nname = \"tor-a\"\nnodes = [\"node-a\"]\n[[tor]]\nname = \"tor-b\"\nnodes = [\"node-a\"]\n",
    )
    .unwrap();
    let cfg = fake_config(&format!(
        "[collectors]\nhost = false\n[attribution]\nenabled = false\nnode_name = \"node-a\"\n[topology]\nfile = \"{}\"\nnode_labels = false\nhypernodes = false\n",
        file.display()
    ));
    let d =
        Daemon::start(Start::new(&cfg).scenario(include_str!("fake-dcmi/scenarios/example.json")));
    // Telemetry goes on beside the failed source.
    let s = d.wait_for(
        "the file source's failure, with telemetry",
        Duration::from_secs(30),
        |s| {
            value(s, "hcclwatch_topology_source_up", &[("source", "file")]) == Some(0.0)
                && s.contains("hcclwatch_npu_temperature_celsius{")
        },
    );
    // No place at all from a bad file, not the first half of it.
    assert!(!s.contains("hcclwatch_node_topology_info{"), "{s}");
    let log = d.log();
    let line = format!(
        "{}:6: tor[1].nodes[0]: node \\\"node-a\\\" is already placed by tor[0].nodes[0] (line 3)",
        file.display()
    );
    assert!(
        log.contains(&line) || log.contains(&line.replace("\\\"", "\"")),
        "{log}"
    );
}

#[test]
fn check_config_reports_every_problem_of_the_topology_file() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topology.toml");
    std::fs::write(&topo, "[[tor]]\nname = \"\"\nnodes = [\"n1\"]\nleaf = 1\n").unwrap();
    let cfg = dir.path().join("hcclwatch.toml");
    std::fs::write(&cfg, format!("[topology]\nfile = \"{}\"\n", topo.display())).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["check-config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("{}:4: ", topo.display())), "{err}");
    assert!(err.contains("unknown field `leaf`"), "{err}");
    // A good file passes.
    std::fs::write(&topo, "[[tor]]\nname = \"t\"\nnodes = [\"n1\"]\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["check-config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
