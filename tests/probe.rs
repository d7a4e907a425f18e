//! Continuous probing between real daemons over real TCP on loopback: six `hcclwatch run`
//! processes probe each other (peer-relative scoring needs the slow node's probes to be a
//! minority of each round: with four members its two slow probes would be half); one of them is slowed by the engine's fault injection (a
//! send throttle). Every daemon must reach the same verdict: that node, and only that
//! node, is recommended for quarantine, with its reason. A killed member makes the others
//! fail closed while their telemetry keeps flowing. Each member's own uplink congestion
//! reaches every daemon's export.

mod common;

use std::time::Duration;

use common::{
    Daemon, Start, free_port, loopback_peers, node_state as state, probe_config as config, value,
    write_key,
};

#[test]
fn slowed_node_and_only_it_is_recommended_for_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let members = 6;
    let peers: Vec<String> = loopback_peers(members);
    let slow = 2;
    let daemons: Vec<Daemon> = (0..members)
        .map(|r| {
            let throttle = if r == slow { common::SLOW_THROTTLE } else { 0 };
            // On loopback the slow node's timings scatter with the scheduler, and the
            // shipped steadiness check then holds it at `confirmed` (seen on a quiet 2-core
            // CI machine); this test is about which node is recommended, so it takes the
            // loosened thresholds (see `with_loosened_health`). The shipped `[health]` runs
            // end to end in tests/netns.rs, tests/device_plane.rs and the lying-member test
            // below.
            let cfg = common::with_loosened_health(config(&peers, r, &key, throttle));
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    for d in &daemons {
        let s = d.wait_for(
            "the slowed node's quarantine recommendation",
            Duration::from_secs(90),
            |s| state(s, &peers[slow], "quarantine_recommended") == Some(1.0),
        );
        for (i, p) in peers.iter().enumerate() {
            if i != slow {
                assert_eq!(
                    state(&s, p, "healthy"),
                    Some(1.0),
                    "{p} should be healthy:\n{s}"
                );
            }
        }
        assert_eq!(value(&s, "hcclwatch_probe_active", &[]), Some(1.0));
        assert!(value(&s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap() >= 10.0);
        assert_eq!(
            value(&s, "hcclwatch_peer_up", &[("peer", &peers[0])]),
            Some(1.0)
        );
        let reasons = common::samples(
            &s,
            "hcclwatch_quarantine_recommended",
            &[("node", &peers[slow])],
        );
        assert_eq!(reasons, vec![1.0]);
        assert!(value(&s, "hcclwatch_straggler_score", &[("node", &peers[slow])]).unwrap() > 0.08);
        assert!(s.contains("hcclwatch_collective_busbw_bytes_per_second{op=\"all_reduce\""));
    }
    // The API explains the verdict.
    let api = daemons[0].get("/api/v1/state", None);
    assert_eq!(api.status, 200);
    let v: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    let t = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["to"] == "quarantine_recommended")
        .expect("a quarantine transition");
    assert_eq!(t["node"], peers[slow].as_str());
    assert!(
        t["reason"]
            .as_str()
            .unwrap()
            .contains("confirmed straggler"),
        "{t}"
    );
    assert!(!t["evidence"].as_array().unwrap().is_empty());
    assert_eq!(v["members"].as_array().unwrap().len(), members);

    // A member dies: the others fail closed (probing paused) and keep exporting telemetry.
    let mut daemons = daemons;
    let victim = daemons.remove(members - 1);
    drop(victim);
    for d in &daemons {
        let s = d.wait_for(
            "probing to pause after a member died",
            Duration::from_secs(30),
            |s| value(s, "hcclwatch_probe_active", &[]) == Some(0.0),
        );
        assert!(value(&s, "hcclwatch_probe_rounds_total", &[("result", "failed")]).unwrap() >= 1.0);
        // Why, as a bounded label: the round with the dead member failed, and while the
        // group re-forms the member cannot be reached, so one of the two.
        let why: Vec<&str> = ["round_failed", "form_failed"]
            .into_iter()
            .filter(|r| value(&s, "hcclwatch_probe_paused", &[("reason", r)]) == Some(1.0))
            .collect();
        assert_eq!(why.len(), 1, "{s}");
        assert!(
            value(&s, "hcclwatch_host_memory_total_bytes", &[]).is_some(),
            "telemetry continues"
        );
    }
}

#[test]
fn probing_config_errors_are_reported() {
    let cfg = "[probe]\nenabled = true\n[collective]\npeers = [\"127.0.0.1:1\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, cfg).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("probe.enabled: probing needs at least 2 members in collective.peers"),
        "{err}"
    );
    assert!(
        err.contains("probe.enabled: probing needs collective.key_file"),
        "{err}"
    );
}

#[test]
fn over_budget_group_keeps_probing_with_reduced_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers: Vec<String> = loopback_peers(3);
    // One full round sends more than 300 KB, so ranks 0 and 1 are over their budgets after
    // the first round: a strict majority. Rank 2 has no budget and must follow the group
    // decision all the same.
    let daemons: Vec<Daemon> = (0..3)
        .map(|r| {
            let budget = if r < 2 { 300_000 } else { 0 };
            let cfg = config(&peers, r, &key, 0).replace(
                "[probe]\n",
                &format!("[probe]\nbudget_bytes_per_hour = {budget}\n"),
            );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    for (r, d) in daemons.iter().enumerate() {
        let s = d.wait_for("reduced probe rounds", Duration::from_secs(30), |s| {
            value(s, "hcclwatch_probe_budget_limited", &[]) == Some(1.0)
                && value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")])
                    .is_some_and(|v| v >= 5.0)
        });
        let ratio = value(&s, "hcclwatch_probe_budget_ratio", &[]);
        if r < 2 {
            assert!(ratio.unwrap() >= 1.0, "{s}");
        } else {
            assert_eq!(ratio, None, "no budget, no ratio series:\n{s}");
        }
        assert_eq!(value(&s, "hcclwatch_probe_coverage_ratio", &[]), Some(1.0));
        assert!(
            !s.contains("hcclwatch_link_bandwidth_bytes_per_second{"),
            "reduced rounds must not export link bandwidth:\n{s}"
        );
    }
    // Sent bytes keep growing, but by latency-sized exchanges only. Bytes and rounds come
    // from the same scrape so they describe the same moment.
    let read = |s: &str| {
        (
            value(s, "hcclwatch_probe_bytes_total", &[]).unwrap(),
            value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap(),
        )
    };
    let (b0, r0) = read(&daemons[0].get("/metrics", None).body);
    let s = daemons[0].wait_for("more rounds", Duration::from_secs(30), |s| {
        value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= r0 + 5.0)
    });
    let (b1, r1) = read(&s);
    let per_round = (b1 - b0) / (r1 - r0);
    assert!(
        per_round > 0.0 && per_round < 262_144.0 / 4.0,
        "{per_round} bytes per reduced round"
    );
}

/// Issue 27: one member over budget (or saying so every round) does not keep the group in
/// reduced rounds. Before, any one member's flag reduced every round of the group for
/// good: no bandwidth, no links.
#[test]
fn one_member_over_budget_does_not_reduce_the_groups_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers: Vec<String> = loopback_peers(3);
    // One full round sends more than 300 KB: rank 0 is over its budget after the first.
    let daemons: Vec<Daemon> = (0..3)
        .map(|r| {
            let budget = if r == 0 { 300_000 } else { 0 };
            let cfg = config(&peers, r, &key, 0).replace(
                "[probe]\n",
                &format!("[probe]\nbudget_bytes_per_hour = {budget}\n"),
            );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    let rounds = |s: &str| value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]);
    let s = daemons[0].wait_for("rank 0 over its budget", Duration::from_secs(30), |s| {
        value(s, "hcclwatch_probe_budget_ratio", &[]).is_some_and(|v| v >= 1.0)
            && rounds(s).is_some_and(|v| v >= 3.0)
    });
    // Rounds after it went over budget: with one flag deciding, every one of them would
    // have been reduced.
    let after = rounds(&s).unwrap() + 3.0;
    for d in &daemons {
        let s = d.wait_for(
            "rounds after rank 0 went over",
            Duration::from_secs(30),
            |s| rounds(s).is_some_and(|v| v >= after),
        );
        assert_eq!(
            value(&s, "hcclwatch_probe_budget_limited", &[]),
            Some(0.0),
            "one member over budget reduced the group's rounds:\n{s}"
        );
        assert!(
            s.contains("hcclwatch_link_bandwidth_bytes_per_second{"),
            "full rounds export link bandwidth:\n{s}"
        );
    }
}

#[test]
fn over_the_time_budget_the_group_runs_reduced_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers: Vec<String> = loopback_peers(3);
    // 0.00001 of an hour is 36 ms: a few rounds use it up, on ranks 0 and 1 (a strict
    // majority). The byte budget stays default.
    let daemons: Vec<Daemon> = (0..3)
        .map(|r| {
            let ratio = if r < 2 { "0.00001" } else { "0" };
            let cfg = config(&peers, r, &key, 0).replace(
                "[probe]\n",
                &format!("[probe]\nbudget_busy_ratio = {ratio}\n"),
            );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    for (r, d) in daemons.iter().enumerate() {
        let s = d.wait_for("reduced probe rounds", Duration::from_secs(30), |s| {
            value(s, "hcclwatch_probe_budget_limited", &[]) == Some(1.0)
        });
        let busy = value(&s, "hcclwatch_probe_busy_ratio", &[]);
        if r < 2 {
            assert!(busy.unwrap() >= 1.0, "{s}");
            assert!(
                value(&s, "hcclwatch_probe_budget_ratio", &[]).unwrap() < 1.0,
                "{s}"
            );
        } else {
            assert_eq!(busy, None, "no time budget, no ratio series:\n{s}");
        }
    }
}

/// Members from an HCCL rank table: two hosts (127.0.0.2 and 127.0.0.3, both loopback), two
/// devices each; the daemons probe one member per host on `rank_table_port`.
#[test]
fn members_from_a_rank_table_form_a_probe_group() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let port = free_port();
    let table = dir.path().join("rank_table.json");
    std::fs::write(
        &table,
        r#"{"version":"1.0","server_count":"2","server_list":[
          {"server_id":"host-a","host_ip":"127.0.0.2","device":[
            {"device_id":"0","device_ip":"192.168.1.8","rank_id":"0"},
            {"device_id":"1","device_ip":"192.168.1.9","rank_id":"1"}]},
          {"server_id":"host-b","host_ip":"127.0.0.3","device":[
            {"device_id":"0","device_ip":"192.168.2.8","rank_id":"2"},
            {"device_id":"1","device_ip":"192.168.2.9","rank_id":"3"}]}]}"#,
    )
    .unwrap();
    let daemons: Vec<Daemon> = (0..2)
        .map(|rank| {
            let cfg = format!(
                "[web]\nlisten_address = \"127.0.0.1:0\"\n[telemetry]\nbackend = \"none\"\n\
                 [collective]\nrank_table_file = \"{}\"\nrank_table_port = {port}\nrank = {rank}\n\
                 key_file = \"{}\"\n[probe]\nenabled = true\ninterval = \"100ms\"\n\
                 small_bytes = 1024\nlink_bytes = 65536\nring_every = 0\n",
                table.display(),
                key.display()
            );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    for d in &daemons {
        let s = d.wait_for(
            "rounds among rank-table members",
            Duration::from_secs(30),
            |s| {
                value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")])
                    .is_some_and(|v| v >= 3.0)
            },
        );
        for host in ["127.0.0.2", "127.0.0.3"] {
            let peer = format!("{host}:{port}");
            assert_eq!(
                value(&s, "hcclwatch_peer_up", &[("peer", &peer)]),
                Some(1.0),
                "{s}"
            );
        }
    }
}

/// Pins: a probe port that cannot be bound is visible (`hcclwatch_probe_active 0` with the
/// reason in `/api/v1/state`, and `/-/ready` naming the prober) and is retried with backoff,
/// so probing starts once the port is free; before, the prober gave up for good and
/// `/-/ready` said nothing.
#[test]
fn a_busy_probe_port_is_visible_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(2);
    // Someone else holds member 0's probe port.
    let squatter = std::net::TcpListener::bind(&peers[0]).unwrap();
    let d0 = Daemon::start(Start::new(&config(&peers, 0, &key, 0)));
    let d1 = Daemon::start(Start::new(&config(&peers, 1, &key, 0)));
    let s = d0.wait_for(
        "the prober to report the busy port",
        Duration::from_secs(20),
        |s| value(s, "hcclwatch_probe_active", &[]) == Some(0.0),
    );
    assert_eq!(value(&s, "hcclwatch_probe_active", &[]), Some(0.0));
    assert_eq!(
        value(&s, "hcclwatch_probe_paused", &[("reason", "listen_failed")]),
        Some(1.0),
        "{s}"
    );
    let state: serde_json::Value =
        serde_json::from_str(&d0.get("/api/v1/state", None).body).unwrap();
    let why = state["last_error"].as_str().unwrap_or_default().to_string();
    assert!(
        why.contains("cannot listen") && why.contains("retrying"),
        "{why}"
    );
    let ready = d0.get("/-/ready", None);
    assert_eq!(ready.status, 503);
    assert!(
        ready.body.contains("probe: cannot listen"),
        "{}",
        ready.body
    );
    // The port frees up: the retry binds it and the group forms.
    drop(squatter);
    d0.wait_for(
        "the group to form after the retry",
        Duration::from_secs(30),
        |s| value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 1.0),
    );
    assert_eq!(d0.get("/-/ready", None).status, 200);
    drop(d1);
}

/// Pins the issue-18 target: a member that lies in every way it can (it proposes plans in
/// which it alone confirms every other member, at a round of its choosing; it reports 10 s
/// for every timing; it announces a forged engine state) moves no other node beyond
/// suspect. Before, one member that claimed the most rounds had its state adopted, and as
/// rank 0 it chose who confirmed whom. The liar itself may end up recommended: its own
/// reports make it look slow. Shipped `[health]` thresholds. Its 10 s latency reports are
/// dropped from the group's latency (issue 27).
#[test]
fn one_lying_member_cannot_quarantine_anyone_else() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let members = 6;
    let liar = 0;
    let peers: Vec<String> = loopback_peers(members);
    let daemons: Vec<Daemon> = (0..members)
        .map(|r| {
            let cfg = config(&peers, r, &key, 0);
            // The shipped thresholds: drop the test harness's [health] section.
            let cfg = cfg.split("[health]").next().unwrap().to_string();
            let cfg = if r == liar {
                cfg.replace("[probe]\n", "[probe]\ninject_lies = true\n")
            } else {
                cfg
            };
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    // Long enough for any verdict the lies could cause: suspect (a 10-round window),
    // confirmation (2 rounds) and the hold before a recommendation (5 more).
    for d in &daemons[1..] {
        let s = d.wait_for("60 probe rounds", Duration::from_secs(120), |s| {
            value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 60.0)
        });
        for (i, p) in peers.iter().enumerate().filter(|(i, _)| *i != liar) {
            for bad in ["confirmed", "quarantine_recommended"] {
                assert_ne!(
                    state(&s, p, bad),
                    Some(1.0),
                    "{p} (node {i}) is {bad} because of one liar:\n{s}"
                );
            }
        }
        // The liar's 10 s latency (past the 5 s exec timeout) is dropped and counted, not
        // exported as the group's (before, the slowest report was the group's latency).
        let latency = value(&s, "hcclwatch_probe_latency_seconds", &[]).unwrap();
        assert!(
            latency < 5.0,
            "the liar set the group's latency: {latency}\n{s}"
        );
        assert!(
            value(&s, "hcclwatch_probe_latency_reports_dropped_total", &[])
                .is_some_and(|v| v >= 1.0),
            "{s}"
        );
    }
}

/// A fake sysfs and procfs tree for one member: interface `up0` with byte counters, and a
/// netstat file with no congestion-marked packets.
fn uplink_tree(dir: &std::path::Path) -> std::path::PathBuf {
    let stats = dir.join("sys/class/net/up0/statistics");
    std::fs::create_dir_all(&stats).unwrap();
    std::fs::create_dir_all(dir.join("proc/net")).unwrap();
    for f in ["rx_bytes", "tx_bytes"] {
        std::fs::write(stats.join(f), "0\n").unwrap();
    }
    std::fs::write(
        dir.join("proc/net/netstat"),
        "IpExt: InNoRoutes InCEPkts\nIpExt: 0 0\n",
    )
    .unwrap();
    stats.join("rx_bytes")
}

/// Replaces `path`'s contents at once (a reader never sees a half-written counter).
fn write_atomically(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// One member's interface receives far more than its line rate of other traffic (a fake
/// sysfs counter the test advances): every daemon exports that member's
/// `hcclwatch_probe_uplink_congested` 1 and the others' 0, and 0 again once the traffic
/// stops. Every member reads its own fake tree, so no flag depends on this host's traffic.
#[test]
fn a_members_own_uplink_congestion_reaches_every_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let members = 3;
    let busy = 1;
    let line_rate: u64 = 1_000_000_000; // bits per second
    // Other traffic at 8 × the line rate: far over the shipped busy ratio (0.5) whatever
    // the rounds' spacing, and far over what the probes themselves move.
    let bytes_per_second = line_rate as f64;
    let peers: Vec<String> = loopback_peers(members);
    let mut counters = Vec::new();
    let daemons: Vec<Daemon> = (0..members)
        .map(|r| {
            let tree = dir.path().join(format!("member{r}"));
            counters.push(uplink_tree(&tree));
            let cfg = config(&peers, r, &key, 0)
                + &format!(
                    "congestion_interface = \"up0\"\ncongestion_line_rate = {line_rate}\ncongestion_sysfs_root = \"{}\"\ncongestion_procfs_root = \"{}\"\n",
                    tree.join("sys").display(),
                    tree.join("proc").display()
                );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (stop, rx) = (stop.clone(), counters[busy].clone());
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let total = (start.elapsed().as_secs_f64() * bytes_per_second) as u64;
                write_atomically(&rx, &format!("{total}\n"));
                // The counter's pace, as a NIC's would move; no daemon waits on it.
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let flag = |s: &str, p: &str| value(s, "hcclwatch_probe_uplink_congested", &[("peer", p)]);
    let only_busy = |s: &str| {
        peers
            .iter()
            .enumerate()
            .all(|(i, p)| flag(s, p) == Some(if i == busy { 1.0 } else { 0.0 }))
    };
    for d in &daemons {
        let s = d.wait_for(
            "the busy member's uplink flag, and only its",
            Duration::from_secs(60),
            only_busy,
        );
        assert_eq!(
            value(&s, "hcclwatch_probe_congestion_source_up", &[]),
            Some(1.0),
            "{s}"
        );
        assert_eq!(
            value(&s, "hcclwatch_probe_congestion_read_errors_total", &[]),
            Some(0.0),
            "{s}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.join().unwrap();
    for d in &daemons {
        d.wait_for(
            "every uplink flag back to 0 once the traffic stopped",
            Duration::from_secs(60),
            |s| peers.iter().all(|p| flag(s, p) == Some(0.0)),
        );
    }
}
