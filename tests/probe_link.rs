//! One degraded link between real daemons over real TCP on loopback: six `hcclwatch run`
//! processes probe each other, and two of them (nodes 1 and 3) throttle, by the engine's
//! fault injection, only what they send to each other. A test binary of its own, so that
//! it never shares the two cores with the other six-daemon tests.

mod common;

use std::time::Duration;

use common::{
    Daemon, Start, free_port, node_state as state, probe_config as config, value, write_key,
};

/// One degraded link, not a degraded node: nodes 1 and 3 throttle only what they send to
/// each other. Every daemon localises it as a link verdict (`hcclwatch_link_degraded`)
/// through the re-measurements the engine asks for, and nobody is recommended for
/// quarantine.
#[test]
fn degraded_link_is_localised_and_quarantines_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let members = 6;
    let peers: Vec<String> = (0..members)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let (a, b) = (1, 3);
    let daemons: Vec<Daemon> = (0..members)
        .map(|r| {
            let other = match r {
                x if x == a => Some(b),
                x if x == b => Some(a),
                _ => None,
            };
            let cfg = match other {
                Some(o) => config(&peers, r, &key, 0).replace(
                    "[health]",
                    &format!(
                        "inject_peer_throttle = [\"{}=20000000\"]\n[health]",
                        peers[o]
                    ),
                ),
                None => config(&peers, r, &key, 0),
            };
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    let link = |s: &str| {
        value(
            s,
            "hcclwatch_link_degraded",
            &[("src_node", &peers[a]), ("dst_node", &peers[b])],
        )
        .is_some()
            || value(
                s,
                "hcclwatch_link_degraded",
                &[("src_node", &peers[b]), ("dst_node", &peers[a])],
            )
            .is_some()
    };
    for d in &daemons {
        let s = d.wait_for("the link verdict", Duration::from_secs(90), link);
        assert!(
            !s.contains("hcclwatch_quarantine_recommended{"),
            "a degraded link quarantined a node:\n{s}"
        );
        for p in &peers {
            assert_ne!(
                state(&s, p, "quarantine_recommended"),
                Some(1.0),
                "{p} recommended for quarantine"
            );
        }
        // Only that link.
        let verdicts = s
            .lines()
            .filter(|l| l.starts_with("hcclwatch_link_degraded{"))
            .count();
        assert!(verdicts <= 2, "more links than the degraded one:\n{s}");
    }
}
