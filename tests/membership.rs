//! Probe-group membership between real daemons over real TCP.
//!
//! A member that stops answering is left out after `probe.member_timeout` and the others go
//! on probing without it; it is re-admitted when it returns. A member list from DNS (here
//! the system resolver reading a namespace's own `/etc/hosts`, as `ip netns exec` mounts
//! it: no test double) is re-resolved, takes in a new member, and goes stale, which stops
//! probing (fail closed) while telemetry goes on.

mod common;

use std::time::Duration;

use common::{Daemon, Start, free_port, probe_config, value, write_key};

fn members(s: &str) -> Option<f64> {
    value(s, "hcclwatch_probe_group_members", &[])
}

fn up(s: &str, peer: &str) -> Option<f64> {
    value(s, "hcclwatch_peer_up", &[("peer", peer)])
}

fn rounds_ok(s: &str) -> f64 {
    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap_or(0.0)
}

#[test]
fn a_silent_member_is_left_out_after_the_timeout_and_readmitted_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 4;
    let peers: Vec<String> = (0..n)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let config = |r: usize| {
        probe_config(&peers, r, &key, 0).replace("[probe]\n", "[probe]\nmember_timeout = \"2s\"\n")
    };
    let mut daemons: Vec<Daemon> = (0..n)
        .map(|r| Daemon::start(Start::new(&config(r))))
        .collect();
    for d in &daemons {
        d.wait_for("a group of four", Duration::from_secs(30), |s| {
            members(s) == Some(4.0) && rounds_ok(s) >= 3.0
        });
    }

    let gone = &peers[n - 1];
    drop(daemons.pop());
    for d in &daemons {
        // Paused first (the member may come back), then formed without it.
        let s = d.wait_for(
            "a group of three without the silent member",
            Duration::from_secs(30),
            |s| members(s) == Some(3.0) && value(s, "hcclwatch_probe_active", &[]) == Some(1.0),
        );
        assert_eq!(up(&s, gone), Some(0.0), "{s}");
        assert_eq!(up(&s, &peers[0]), Some(1.0), "{s}");
        let before = rounds_ok(&s);
        let s = d.wait_for("rounds among the three", Duration::from_secs(30), |s| {
            rounds_ok(s) >= before + 3.0
        });
        // The left-out node's state is kept, but no fresh measurement is claimed for it.
        assert!(
            value(&s, "hcclwatch_straggler_score", &[("node", gone)]).is_none(),
            "{s}"
        );
        assert!(
            value(&s, "hcclwatch_straggler_score", &[("node", &peers[1])]).is_some(),
            "{s}"
        );
        assert_eq!(
            value(
                &s,
                "hcclwatch_node_state",
                &[("node", gone), ("state", "healthy")]
            ),
            Some(1.0)
        );
    }
    let api: serde_json::Value =
        serde_json::from_str(&daemons[0].get("/api/v1/state", None).body).unwrap();
    assert_eq!(api["membership"]["group_members"], 3, "{api}");
    let listed: Vec<&serde_json::Value> = api["members"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 4, "left-out members stay listed: {api}");
    assert!(
        listed
            .iter()
            .any(|m| m["node"] == gone.as_str() && m["up"] == false)
    );

    // It returns on the same address and is taken back in by everyone.
    daemons.push(Daemon::start(Start::new(&config(n - 1))));
    for d in &daemons {
        let s = d.wait_for(
            "the returned member re-admitted",
            Duration::from_secs(40),
            |s| members(s) == Some(4.0) && up(s, gone) == Some(1.0),
        );
        assert_eq!(value(&s, "hcclwatch_probe_active", &[]), Some(1.0));
    }
    let back = daemons.last().unwrap();
    back.wait_for(
        "rounds on the returned member",
        Duration::from_secs(30),
        |s| rounds_ok(s) >= 3.0,
    );
}
