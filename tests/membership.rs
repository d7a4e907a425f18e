//! Probe-group membership between real daemons over real TCP.
//!
//! A member that stops answering is left out after `probe.member_timeout` and the others go
//! on probing without it; it is re-admitted when it returns. A member list from DNS (here
//! the system resolver reading a namespace's own `/etc/hosts`, as `ip netns exec` mounts
//! it: no test double) is re-resolved, takes in a new member, and goes stale, which stops
//! probing (fail closed) while telemetry goes on.

mod common;

use std::time::Duration;

use common::{Daemon, Start, loopback_peers, probe_config, value, with_loosened_health, write_key};

fn members(s: &str) -> Option<f64> {
    value(s, "hcclwatch_probe_group_members", &[])
}

fn up(s: &str, peer: &str) -> Option<f64> {
    value(s, "hcclwatch_peer_up", &[("peer", peer)])
}

/// Four groups of daemons at once on two cores would drown the slow node's signal in
/// scheduler noise: one group at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn rounds_ok(s: &str) -> f64 {
    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap_or(0.0)
}

/// Starts `n` daemons with `config(rank)` and waits until each has run rounds in a group
/// of all `n`.
fn start_group(n: usize, config: impl Fn(usize) -> String) -> Vec<Daemon> {
    let daemons: Vec<Daemon> = (0..n)
        .map(|r| Daemon::start(Start::new(&config(r))))
        .collect();
    for d in &daemons {
        d.wait_for("the whole group formed", Duration::from_secs(30), |s| {
            members(s) == Some(n as f64) && rounds_ok(s) >= 3.0
        });
    }
    daemons
}

#[test]
fn a_silent_member_is_left_out_after_the_timeout_and_readmitted_when_it_returns() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 4;
    let peers: Vec<String> = loopback_peers(n);
    let config = |r: usize| {
        probe_config(&peers, r, &key, 0).replace("[probe]\n", "[probe]\nmember_timeout = \"2s\"\n")
    };
    let mut daemons = start_group(n, config);

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

#[test]
fn a_member_that_shuts_down_is_dropped_at_once_not_after_the_timeout() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 4;
    let peers: Vec<String> = loopback_peers(n);
    // A timeout far longer than the test waits: only the leave notice can explain a group
    // that re-forms without the member in time.
    let config = |r: usize| {
        probe_config(&peers, r, &key, 0).replace("[probe]\n", "[probe]\nmember_timeout = \"10m\"\n")
    };
    let mut daemons = start_group(n, config);
    let leaving = daemons.pop().unwrap();
    let started = std::time::Instant::now();
    let (status, _) = leaving.stop_logged();
    assert!(status.success(), "{status}");
    for d in &daemons {
        let s = d.wait_for(
            "a group of three after the member left",
            Duration::from_secs(30),
            |s| members(s) == Some(3.0) && value(s, "hcclwatch_probe_active", &[]) == Some(1.0),
        );
        assert_eq!(up(&s, &peers[n - 1]), Some(0.0), "{s}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        daemons[0].log().contains("a member left the probe group"),
        "{}",
        daemons[0].log()
    );
}

/// A member that restarts takes over the engine of the members that kept probing: its
/// first round already shows the verdict the others reached, instead of a fresh engine's
/// "healthy" until its own window fills (about 20 rounds here).
#[test]
fn a_rejoining_member_takes_over_the_groups_verdicts() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 6;
    let slow = 2;
    let peers: Vec<String> = loopback_peers(n);
    let config = |r: usize| {
        let throttle = if r == slow { common::SLOW_THROTTLE } else { 0 };
        // The subject is the hand-over of verdicts, not detection: see `with_loosened_health`.
        with_loosened_health(probe_config(&peers, r, &key, throttle))
            .replace("[probe]\n", "[probe]\nmember_timeout = \"2s\"\n")
    };
    let mut daemons: Vec<Daemon> = (0..n)
        .map(|r| Daemon::start(Start::new(&config(r))))
        .collect();
    let quarantined =
        |s: &str| common::node_state(s, &peers[slow], "quarantine_recommended") == Some(1.0);
    for d in &daemons {
        d.wait_for(
            "the slowed node's quarantine recommendation",
            Duration::from_secs(90),
            quarantined,
        );
    }
    let (status, _) = daemons.pop().unwrap().stop_logged();
    assert!(status.success());
    daemons.push(Daemon::start(Start::new(&config(n - 1))));
    let back = daemons.last().unwrap();
    // The first scrape after its first round: a fresh engine would still say healthy.
    let s = back.wait_for(
        "the first round after rejoining",
        Duration::from_secs(40),
        |s| rounds_ok(s) >= 1.0,
    );
    assert!(rounds_ok(&s) < 10.0, "too late to tell: {}", rounds_ok(&s));
    assert!(quarantined(&s), "{s}");
    assert!(
        back.log().contains("took over the group's engine state"),
        "{}",
        back.log()
    );
}

/// One namespace with its own `/etc/hosts` (bind-mounted by `ip netns exec` from
/// `/etc/netns/<ns>/hosts`), daemons on 127.0.0.x inside it. Dropping it kills the
/// daemons and removes the namespace and its files, also when an assertion fails.
struct DnsNet {
    ns: String,
    daemons: Vec<std::process::Child>,
    dir: tempfile::TempDir,
}

const NAME: &str = "probe-group.hcclwatch.test";

impl DnsNet {
    fn hosts(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("/etc/netns")
            .join(&self.ns)
            .join("hosts")
    }

    /// Makes `NAME` resolve to 127.0.0.{k} for each k (none: the name is unknown). The file
    /// is rewritten in place: the namespace's mount shows this inode.
    fn publish(&self, ks: &[u8]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for k in ks {
            text.push_str(&format!("127.0.0.{k} {NAME}\n"));
        }
        std::fs::write(self.hosts(), text).unwrap();
    }

    fn start(&mut self, k: u8) {
        let key = self.dir.path().join("probe.key");
        let cfg = self.dir.path().join(format!("node{k}.toml"));
        std::fs::write(
            &cfg,
            format!(
                r#"[web]
listen_address = "127.0.0.{k}:9478"
[telemetry]
backend = "none"
[collective]
peers_dns = "{NAME}:7100"
own_address = "127.0.0.{k}:7100"
node_name = "node-{k}"
key_file = "{key}"
connect_timeout = "3s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "200ms"
small_bytes = 1024
link_bytes = 65536
ring_every = 0
member_timeout = "2s"
dns_refresh = "1s"
membership_stale_after = "3s"
"#,
                key = key.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.dir.path().join(format!("node{k}.log"))).unwrap();
        let child = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                env!("CARGO_BIN_EXE_hcclwatch"),
                "run",
            ])
            .arg("--config.file")
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons.push(child);
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for e in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                out.push_str(&format!("--- {}\n", e.path().display()));
                out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        out
    }

    /// Polls node k's metrics until `pred` holds. No event crosses the namespace boundary;
    /// each poll is bounded by curl's timeout.
    fn wait(&self, k: u8, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            let s = common::netns::get(&self.ns, &format!("http://127.0.0.{k}:9478/metrics"))
                .unwrap_or_default();
            if pred(&s) {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {k}: timed out waiting for {what}; last scrape:\n{s}\nlogs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for DnsNet {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&self.ns));
    }
}

use std::path::PathBuf;

#[test]
fn members_from_dns_are_re_resolved_and_a_stale_list_stops_probing() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut net = DnsNet {
        ns: format!("hwdns{}", std::process::id() % 100_000),
        daemons: Vec::new(),
        dir: tempfile::tempdir().unwrap(),
    };
    common::netns::ip(&["netns", "add", &net.ns]);
    common::netns::ip(&["-n", &net.ns, "link", "set", "lo", "up"]);
    std::fs::create_dir_all(net.hosts().parent().unwrap()).unwrap();
    write_key(net.dir.path(), "probe.key");
    net.publish(&[2, 3, 4]);
    for k in 2..=4 {
        net.start(k);
    }
    for k in 2..=4 {
        let s = net.wait(k, "a group of three from DNS", |s| {
            members(s) == Some(3.0) && rounds_ok(s) >= 3.0
        });
        // The members announced their names; the series use them, not addresses.
        for other in 2..=4 {
            assert_eq!(up(&s, &format!("node-{other}")), Some(1.0), "{s}");
        }
        assert_eq!(value(&s, "hcclwatch_membership_stale", &[]), Some(0.0));
    }

    // A fourth member appears in DNS and starts: the next resolution takes it in.
    net.publish(&[2, 3, 4, 5]);
    net.start(5);
    for k in 2..=5 {
        let s = net.wait(k, "the new member taken in", |s| {
            members(s) == Some(4.0) && up(s, "node-5") == Some(1.0)
        });
        assert_eq!(up(&s, "node-2"), Some(1.0), "{s}");
    }

    // The name stops resolving: the last view serves until it is stale, then probing stops
    // (fail closed) and telemetry goes on.
    net.publish(&[]);
    for k in 2..=5 {
        let s = net.wait(k, "a stale member list", |s| {
            value(s, "hcclwatch_membership_stale", &[]) == Some(1.0)
        });
        assert_eq!(value(&s, "hcclwatch_probe_active", &[]), Some(0.0), "{s}");
        assert_eq!(
            value(
                &s,
                "hcclwatch_probe_paused",
                &[("reason", "membership_stale")]
            ),
            Some(1.0),
            "{s}"
        );
        assert_eq!(members(&s), Some(0.0));
        assert!(
            value(&s, "hcclwatch_host_memory_total_bytes", &[]).is_some(),
            "telemetry continues"
        );
    }
    let api = common::netns::get(&net.ns, "http://127.0.0.2:9478/api/v1/state").unwrap();
    let v: serde_json::Value = serde_json::from_str(&api).unwrap();
    let why = v["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("stale") && why.contains(NAME), "{v}");

    // It resolves again: probing resumes.
    net.publish(&[2, 3, 4, 5]);
    for k in 2..=5 {
        net.wait(k, "probing resumed", |s| {
            value(s, "hcclwatch_membership_stale", &[]) == Some(0.0)
                && value(s, "hcclwatch_probe_active", &[]) == Some(1.0)
                && members(s) == Some(4.0)
        });
    }
}
