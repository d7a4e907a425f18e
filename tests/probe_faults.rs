//! Hard faults from telemetry, between real daemons over real TCP on loopback: a node
//! whose `libfake_dcmi.so` starts reporting uncorrectable ECC errors (or a downed RoCE
//! network) is recommended for quarantine at once, with the reason, without the straggler
//! hysteresis. (A degraded link is tested on a real network, with `tc htb`, in
//! `tests/netns.rs`: the loopback fault injection throttles senders and cannot imitate one.)

mod common;

use std::time::Duration;

use common::{
    Daemon, Start, loopback_peers, node_state as state, probe_config as config, value, write_key,
};

#[test]
fn telemetry_hard_faults_skip_the_hysteresis() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers: Vec<String> = loopback_peers(3);
    let scenario = include_str!("fake-dcmi/scenarios/example.json");
    let daemons: Vec<Daemon> = (0..3)
        .map(|r| {
            let cfg = config(&peers, r, &key, 0).replace(
                "[telemetry]\nbackend = \"none\"",
                &format!(
                    "[telemetry]\nbackend = \"dcmi\"\ndcmi_library = \"{}\"\n[telemetry.intervals]\nhealth = \"300ms\"\nmemory = \"300ms\"\nnetwork = \"300ms\"",
                    common::fake_lib().display()
                ),
            );
            Daemon::start(Start::new(&cfg).scenario(scenario))
        })
        .collect();
    for d in &daemons {
        d.wait_for("rounds", Duration::from_secs(30), |s| {
            value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 5.0)
        });
    }
    // Node 1's NPU reports two more uncorrectable ECC errors.
    let mut sc: serde_json::Value = serde_json::from_str(scenario).unwrap();
    sc["cards"][0]["chips"][0]["ecc_hbm"]["total_double"] = serde_json::json!(2);
    sc["cards"][0]["chips"][0]["ecc_hbm"]["double"] = serde_json::json!(2);
    daemons[1].set_scenario(&sc.to_string());
    for d in &daemons {
        let s = d.wait_for(
            "the hard-fault recommendation",
            Duration::from_secs(30),
            |s| {
                value(
                    s,
                    "hcclwatch_quarantine_recommended",
                    &[("node", &peers[1]), ("reason", "hard_fault")],
                ) == Some(1.0)
            },
        );
        assert_eq!(state(&s, &peers[0], "healthy"), Some(1.0));
        assert_eq!(state(&s, &peers[2], "healthy"), Some(1.0));
        // Timed from its onset: a hard fault goes from healthy straight to the
        // recommendation in one round, within the first bucket (1 s).
        let hist = "hcclwatch_verdict_onset_to_recommendation";
        let hard = [("reason", "hard_fault")];
        assert_eq!(
            value(&s, &format!("{hist}_seconds_count"), &hard),
            Some(1.0)
        );
        assert_eq!(
            value(
                &s,
                &format!("{hist}_seconds_bucket"),
                &[("reason", "hard_fault"), ("le", "1")]
            ),
            Some(1.0),
            "{s}"
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&daemons[0].get("/api/v1/state", None).body).unwrap();
    let t = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["node"] == peers[1].as_str() && t["to"] == "quarantine_recommended")
        .expect("a transition for node 1");
    assert!(t["reason"].as_str().unwrap().contains("double-bit"), "{t}");

    // Node 2's RoCE network health goes bad (3: unreachable).
    let mut sc: serde_json::Value = serde_json::from_str(scenario).unwrap();
    sc["cards"][0]["chips"][0]["network_health"] = serde_json::json!(3);
    daemons[2].set_scenario(&sc.to_string());
    daemons[0].wait_for("the network hard fault", Duration::from_secs(30), |s| {
        value(
            s,
            "hcclwatch_quarantine_recommended",
            &[("node", &peers[2]), ("reason", "hard_fault")],
        ) == Some(1.0)
    });
}

/// Groups: with probe.max_group_size = 2, four daemons form two probe groups of two, and
/// each exports only its own group's members; with topology labels, members group by label.
#[test]
fn members_are_split_into_capped_and_labelled_groups() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    for (extra, groups) in [
        ("max_group_size = 2", [[0usize, 1], [2, 3]]),
        ("", [[0, 2], [1, 3]]),
    ] {
        let peers: Vec<String> = loopback_peers(4);
        let labels = if extra.is_empty() {
            "peer_topology = [\"r1\", \"r2\", \"r1\", \"r2\"]\n"
        } else {
            ""
        };
        let daemons: Vec<Daemon> = (0..4)
            .map(|r| {
                let cfg = config(&peers, r, &key, 0)
                    .replace("[probe]\n", &format!("{labels}[probe]\n{extra}\n"));
                Daemon::start(Start::new(&cfg))
            })
            .collect();
        for g in groups {
            for &r in &g {
                let s = daemons[r].wait_for("its group's rounds", Duration::from_secs(30), |s| {
                    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")])
                        .is_some_and(|v| v >= 3.0)
                });
                for (i, p) in peers.iter().enumerate() {
                    let exported = state(&s, p, "healthy").is_some();
                    assert_eq!(
                        exported,
                        g.contains(&i),
                        "daemon {r} ({extra:?}{labels:?}) and member {i}:\n{s}"
                    );
                }
            }
        }
    }
}
