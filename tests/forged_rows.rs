//! A member that holds the probe key and rewrites another member's rows as it relays them
//! (issue 27): four real daemons probe each other over loopback, one of them forging. The
//! forger is the `probe.inject_forge_relayed` fault of the real daemon, which rewrites the
//! victim's row inside the ring all-gather, after the victim signed it and before the
//! members downstream receive it: a hard fault (card dropped) and 10 s timings. Before
//! rows were signed, every member downstream took the forged row as the victim's and
//! recommended it for quarantine (`hard_fault`) in its first round.
//!
//! Here no honest member may move the victim on the forged rows (a suspect that the
//! scheduler's noise makes and its re-pairings clear is not the forgery's), and the
//! members downstream of the forger must count the forged rows, naming the forger as
//! the relay, in both modes: the shared key alone, and certificate mode (every member
//! holding its own certificate from a test CA). Shipped `[health]` thresholds.

mod common;

use std::time::Duration;

use common::ca::TestCa;
use common::{Daemon, Start, loopback_peers, probe_config, value, write_key};

#[test]
fn a_forging_relay_moves_no_honest_member_and_its_rows_are_counted() {
    forging_relay(false);
}

#[test]
fn in_certificate_mode_a_forging_relay_moves_no_honest_member_either() {
    forging_relay(true);
}

fn forging_relay(certificate_mode: bool) {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let key = write_key(dir.path(), "probe.key");
    let members = 4;
    // The ring runs 0 → 1 → 2 → 3 → 0: the victim's rows reach 3 and 0 through the
    // forger; 2's own rows and 3's reach everyone unchanged.
    let (victim, forger) = (1, 2);
    let peers: Vec<String> = loopback_peers(members);
    let daemons: Vec<Daemon> = (0..members)
        .map(|r| {
            let cfg = probe_config(&peers, r, &key, 0);
            // Members known by address: each certificate is for its probe IP.
            let cfg = if certificate_mode {
                let files = ca.files(dir.path(), &format!("m{r}"), "127.0.0.1");
                cfg.replace("[collective]\n", &format!("[collective]\n{files}"))
            } else {
                cfg
            };
            let cfg = if r == forger {
                cfg.replace(
                    "[probe]\n",
                    &format!("[probe]\ninject_forge_relayed = \"{}\"\n", peers[victim]),
                )
            } else {
                cfg
            };
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    let honest = (0..members).filter(|r| *r != forger);
    for r in honest {
        let d = &daemons[r];
        // 40 rounds: a forged hard fault is a recommendation in the first round it is
        // read, and forged timings would make a suspect within the 10-round window.
        let s = d.wait_for("40 probe rounds", Duration::from_secs(120), |s| {
            value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 40.0)
        });
        assert_eq!(
            value(&s, "hcclwatch_probe_wire_version", &[]),
            Some(4.0),
            "node {r}: the group does not sign its rows\n{s}"
        );
        assert_eq!(
            value(&s, "hcclwatch_probe_certificate_mode", &[]),
            Some(if certificate_mode { 1.0 } else { 0.0 }),
            "node {r}\n{s}"
        );
        // Nothing forged moved the victim in this member's view (the state API keeps
        // every recent transition with its reason and evidence). On a busy machine the
        // scheduler alone can make a member a suspect now and then (seen once, with one
        // core taken elsewhere: 111 % slower, a window residual of 0.75, not reproduced
        // by its re-pairings, healthy the next round), so a suspect is allowed when its
        // window is far from what the forged rows would give. Forged 10 s timings against
        // honest 256 KiB loopback links (0.2 to 1.3 ms at the 0.2 to 1.4 GB/s seen here
        // under load) would be a window residual near ln(10 s / 1.3 ms), about 8.9; the
        // bound is ln(100), about 4.6. Anything past suspect (confirmed, a
        // recommendation, the forged hard fault) fails; forged re-pairings are 10 s too,
        // so they would confirm the victim.
        let api = d.get("/api/v1/state", None).body;
        let state: serde_json::Value = serde_json::from_str(&api).unwrap();
        let moved: Vec<&serde_json::Value> = state["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["node"] == peers[victim].as_str())
            .filter(|t| !noise_suspect(t))
            .collect();
        assert!(
            moved.is_empty(),
            "node {r} moved the victim {}: {moved:?}",
            peers[victim]
        );
        // Healthy, or a suspect at the moment of the scrape, whose transitions all passed
        // the check above.
        let in_state = |st: &str| {
            value(
                &s,
                "hcclwatch_node_state",
                &[("node", &peers[victim]), ("state", st)],
            ) == Some(1.0)
        };
        assert!(in_state("healthy") || in_state("suspect"), "node {r}\n{s}");
        // Downstream of the forger (3 and 0) the victim's rows failed their signature
        // every round, and the forger is the relay named; upstream (1, the victim itself)
        // nothing was forged.
        let counted = value(
            &s,
            "hcclwatch_probe_forged_rows_total",
            &[("relay", &peers[forger])],
        );
        if r == victim {
            assert!(
                !s.contains("hcclwatch_probe_forged_rows_total{"),
                "node {r} saw forged rows upstream of the forger:\n{s}"
            );
        } else {
            assert!(
                counted.is_some_and(|n| n >= 30.0),
                "node {r} counted {counted:?} forged rows from {}:\n{s}",
                peers[forger]
            );
            assert!(
                d.log().contains("failed its author's signature"),
                "node {r} did not log the forgery:\n{}",
                d.log()
            );
        }
    }
}

/// Whether a transition of the victim is one the scheduler's noise makes and forged rows
/// cannot: into suspect with a window residual below ln(100), or out of suspect back to
/// healthy because its re-pairings did not reproduce.
fn noise_suspect(t: &serde_json::Value) -> bool {
    let residual = t["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["what"] == "window_median_log_residual")
        .and_then(|e| e["value"].as_f64());
    match (t["from"].as_str(), t["to"].as_str()) {
        (Some("healthy"), Some("suspect")) => residual.is_some_and(|x| x < 100f64.ln()),
        (Some("suspect"), Some("healthy")) => t["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("not reproduced")),
        _ => false,
    }
}
