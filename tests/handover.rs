//! The engine-state hand-over between real daemons over real TCP, with a member that
//! breaks it (`probe.inject_oversize_handover`: when it sends the group's state it
//! announces more bytes than any state can hold).
//!
//! Before, every formation after an honest member restarted failed on that sender's
//! announcement, again and again, so the restarted member stayed out of the group (and
//! `HcclwatchPeerDown` fired for it) for as long as the breaker stayed in. Now every member
//! sees the same failure from the same sender and leaves the sender out for
//! `probe.exclusion`; the honest members form without it.

mod common;

use std::time::Duration;

use common::{Daemon, Start, loopback_peers, probe_config, value, write_key};

fn members(s: &str) -> Option<f64> {
    value(s, "hcclwatch_probe_group_members", &[])
}

fn rounds_ok(s: &str) -> f64 {
    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap_or(0.0)
}

#[test]
fn a_member_that_breaks_the_handover_is_left_out_not_the_one_that_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 3;
    // Rank 0 is the lowest rank of any majority, so it is the one that sends the state.
    let breaker = 0;
    let restarted = 2;
    let peers: Vec<String> = loopback_peers(n);
    let config = |r: usize| {
        let extra = if r == breaker {
            "inject_oversize_handover = true\n"
        } else {
            ""
        };
        probe_config(&peers, r, &key, 0).replace(
            "[probe]\n",
            &format!("[probe]\nmember_timeout = \"2s\"\n{extra}"),
        )
    };
    let mut daemons: Vec<Daemon> = (0..n)
        .map(|r| Daemon::start(Start::new(&config(r))))
        .collect();
    // Formed together, all hold the same (empty) state: nothing is sent, so the breaker's
    // fault does not show yet.
    for d in &daemons {
        d.wait_for("the whole group formed", Duration::from_secs(30), |s| {
            members(s) == Some(n as f64) && rounds_ok(s) >= 5.0
        });
    }

    // An honest member restarts: its fresh state differs from the majority's, so the
    // majority's lowest rank (the breaker) must send its state.
    let (status, _) = daemons.pop().unwrap().stop_logged();
    assert!(status.success());
    daemons[1].wait_for(
        "the group formed without the stopped member",
        Duration::from_secs(30),
        |s| members(s) == Some(2.0),
    );
    daemons.push(Daemon::start(Start::new(&config(restarted))));

    // The two honest members form a group of their own, the breaker left out.
    let breaker_name = &peers[breaker];
    let restarted_name = &peers[restarted];
    for d in &daemons[1..] {
        let s = d.wait_for(
            "the honest members in a group without the breaker",
            Duration::from_secs(40),
            |s| {
                members(s) == Some(2.0)
                    && value(s, "hcclwatch_peer_up", &[("peer", restarted_name)]) == Some(1.0)
                    && value(
                        s,
                        "hcclwatch_probe_member_excluded",
                        &[("peer", breaker_name)],
                    ) == Some(1.0)
            },
        );
        assert_eq!(
            value(&s, "hcclwatch_peer_up", &[("peer", breaker_name)]),
            Some(0.0)
        );
    }
    // The state API says why.
    let state: serde_json::Value =
        serde_json::from_str(&daemons[restarted].get("/api/v1/state", None).body).unwrap();
    let members = state["members"].as_array().expect("members");
    let excluded = members
        .iter()
        .find(|m| m["node"] == breaker_name.as_str())
        .expect("the breaker is listed");
    let why = excluded["excluded"].as_str().unwrap_or_default();
    assert!(
        why.contains("engine-state hand-over") && why.contains("bytes"),
        "{why}"
    );
    assert!(
        members
            .iter()
            .filter(|m| m["node"] != breaker_name.as_str())
            .all(|m| m["excluded"].is_null())
    );
    // And the log names it.
    assert!(
        daemons[1].log().contains("is left out of the group"),
        "{}",
        daemons[1].log()
    );
}
