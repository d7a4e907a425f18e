//! Operator overrides in the daemon, end to end: real daemons over loopback, with
//! `libfake_dcmi.so`, reading their node's `hcclwatch.io/override*` annotations from the
//! stand-in Kubernetes API server (`common/fake_apiserver.rs`).
//!
//! A node held `healthy` gets an uncorrectable ECC fault: the health engine still
//! recommends it (its verdict is its own, and `/api/v1/state` shows it), but the node's
//! daemon withholds its quarantine recommendation and exports the override; once the
//! override's time is up, without a restart or a change of the annotations, the
//! recommendation is exported. A node held `quarantined`, and a node one of whose NPUs is
//! (the per-NPU form), is recommended with the reason `operator_override` though nothing
//! is wrong with it.

mod common;

use std::time::{Duration, SystemTime};

use common::fake_apiserver::FakeApi;
use common::{Daemon, Start, loopback_peers, probe_config, toml_strings, value, write_key};
use serde_json::{Value, json};

const NAMES: [&str; 3] = ["n0", "n1", "n2"];

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t).unwrap().to_string()
}

fn hold(api: &FakeApi, node: &str, state: &str, until: SystemTime) {
    let until = rfc3339(until);
    api.edit(node, |n| {
        n["metadata"]["annotations"] = json!({
            "hcclwatch.io/override": state,
            "hcclwatch.io/override-until": until,
            "hcclwatch.io/override-by": "alice",
            "hcclwatch.io/override-reason": "test",
        })
    });
}

fn recommended(s: &str, node: &str, reason: &str) -> Option<f64> {
    value(
        s,
        "hcclwatch_quarantine_recommended",
        &[("node", node), ("reason", reason)],
    )
}

fn state(d: &Daemon) -> Value {
    serde_json::from_str(&d.get("/api/v1/state", None).body).unwrap()
}

#[test]
fn a_healthy_override_withholds_a_hard_fault_until_its_end_and_quarantined_forces_one() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let api = FakeApi::start();
    for n in NAMES {
        api.add_node(n, &[]);
    }
    let kubeconfig = api.kubeconfig(dir.path());
    // n1 is held healthy for an hour; its end is moved closer below.
    hold(
        &api,
        "n1",
        "healthy",
        SystemTime::now() + Duration::from_secs(3600),
    );
    hold(
        &api,
        "n2",
        "quarantined",
        SystemTime::now() + Duration::from_secs(3600),
    );
    // n0's NPU 3 is held quarantined (the per-NPU form).
    let npu_until = rfc3339(SystemTime::now() + Duration::from_secs(3600));
    api.edit("n0", |n| {
        n["metadata"]["annotations"] = json!({
            "hcclwatch.io/override.npu.3": json!({"state": "quarantined", "until": npu_until, "by": "bob"}).to_string(),
        })
    });
    let peers = loopback_peers(3);
    let names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    let scenario = include_str!("fake-dcmi/scenarios/example.json");
    let daemons: Vec<Daemon> = (0..3)
        .map(|r| {
            let cfg = probe_config(&peers, r, &key, 0)
                .replace(
                    "[telemetry]\nbackend = \"none\"",
                    &format!(
                        "[telemetry]\nbackend = \"dcmi\"\ndcmi_library = \"{}\"\n[telemetry.intervals]\nhealth = \"300ms\"\nmemory = \"300ms\"\nnetwork = \"300ms\"",
                        common::fake_lib().display()
                    ),
                )
                .replace(
                    "rank = ",
                    &format!("peer_names = [{}]\nrank = ", toml_strings(&names)),
                )
                + &format!(
                    "[attribution]\nenabled = false\nnode_name = \"{}\"\nkubeconfig = \"{}\"\n[topology]\nnode_labels = false\nhypernodes = false\noverrides_refresh = \"1s\"\n",
                    NAMES[r],
                    kubeconfig.display()
                );
            Daemon::start(Start::new(&cfg).scenario(scenario))
        })
        .collect();
    // The quarantined override: n2's daemon recommends n2 though nothing is wrong with it.
    let s = daemons[2].wait_for("n2's forced recommendation", Duration::from_secs(30), |s| {
        recommended(s, "n2", "operator_override") == Some(1.0)
    });
    assert_eq!(
        value(
            &s,
            "hcclwatch_override",
            &[("node", "n2"), ("entity", "node"), ("state", "quarantined")]
        ),
        Some(1.0)
    );
    assert_eq!(common::node_state(&s, "n2", "healthy"), Some(1.0));
    let s = daemons[0].wait_for("n0's forced recommendation", Duration::from_secs(30), |s| {
        recommended(s, "n0", "operator_override") == Some(1.0)
    });
    assert_eq!(
        value(
            &s,
            "hcclwatch_override",
            &[
                ("node", "n0"),
                ("entity", "npu"),
                ("npu", "3"),
                ("state", "quarantined")
            ]
        ),
        Some(1.0)
    );
    let held = &state(&daemons[0])["override"]["held"];
    assert_eq!(held[0]["npu"], 3, "{held}");
    assert_eq!(held[0]["by"], "bob", "{held}");

    // n1's NPU reports uncorrectable ECC errors: a hard fault.
    let mut sc: Value = serde_json::from_str(scenario).unwrap();
    sc["cards"][0]["chips"][0]["ecc_hbm"]["total_double"] = json!(2);
    sc["cards"][0]["chips"][0]["ecc_hbm"]["double"] = json!(2);
    daemons[1].set_scenario(&sc.to_string());
    // The engine's verdict is there (n1's own state API shows it) ...
    let d1 = &daemons[1];
    let s = d1.wait_for("the engine's verdict on n1", Duration::from_secs(30), |s| {
        common::node_state(s, "n1", "quarantine_recommended") == Some(1.0)
    });
    // ... but under the healthy override n1's daemon does not recommend n1.
    assert_eq!(recommended(&s, "n1", "hard_fault"), None, "{s}");
    assert_eq!(
        value(
            &s,
            "hcclwatch_override",
            &[("node", "n1"), ("entity", "node"), ("state", "healthy")]
        ),
        Some(1.0)
    );
    let v = state(d1);
    let o = &v["override"];
    assert_eq!(o["node"], "n1", "{v}");
    assert_eq!(o["engine_state"], "quarantine_recommended", "{o}");
    assert_eq!(o["engine_quarantine"], "hard_fault", "{o}");
    assert_eq!(o["exported_quarantine"], Value::Null, "{o}");
    assert_eq!(o["held"][0]["state"], "healthy", "{o}");
    assert_eq!(o["held"][0]["by"], "alice", "{o}");

    // The override's end is brought to 4 s from now. Once the daemon has read it (the
    // state API shows the new end), nothing more changes; at the end the hold is over.
    let until = SystemTime::now() + Duration::from_secs(4);
    hold(&api, "n1", "healthy", until);
    let text = rfc3339(until);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state(d1)["override"]["held"][0]["until"] != text.as_str() {
        assert!(
            std::time::Instant::now() < deadline,
            "the new end was not read:\n{}",
            d1.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = d1.wait_for(
        "n1's recommendation after the end",
        Duration::from_secs(20),
        |s| recommended(s, "n1", "hard_fault") == Some(1.0),
    );
    assert!(
        SystemTime::now() >= until,
        "recommended before the override's end"
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_override",
            &[("node", "n1"), ("entity", "node"), ("state", "healthy")]
        ),
        None,
        "the override is still exported after its end"
    );
    let o = &state(d1)["override"];
    assert_eq!(o["exported_quarantine"], "hard_fault", "{o}");
    assert_eq!(o["held"], json!([]), "{o}");
}
