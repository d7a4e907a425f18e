//! A real network: six Linux network namespaces on a bridge (itself in a namespace of its
//! own, so nothing touches the host's interfaces or addresses), one daemon in each. Every
//! node's egress is shaped by `tc tbf` to 100 Mbit/s and one node's to 50 Mbit/s; that node,
//! and only that node, must reach `quarantine_recommended` in every daemon's view.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2, which CI has; the test fails with that reason
//! rather than passing silently when it cannot build the network.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MEMBERS: usize = 6;
const SLOW: usize = 2;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root and iproute2)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Owns the namespaces and the daemons; dropping it kills the daemons and deletes the
/// namespaces (their veths go with them), also when an assertion fails.
struct Net {
    prefix: String,
    daemons: Vec<Child>,
}

impl Net {
    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }
    fn bridge_ns(&self) -> String {
        format!("{}br", self.prefix)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in (0..MEMBERS).map(|i| self.ns(i)).chain([self.bridge_ns()]) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

fn addr(i: usize) -> String {
    format!("10.77.0.{}", i + 1)
}

/// GET from inside namespace `ns` with curl (the test process lives in the host namespace,
/// which has no route to the test network, by design).
fn get(ns: &str, url: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

#[test]
fn tbf_shaped_node_and_only_it_is_recommended_for_quarantine() {
    let mut net = Net {
        prefix: format!("hw{}", std::process::id() % 100_000),
        daemons: Vec::new(),
    };
    let br = net.bridge_ns();
    ip(&["netns", "add", &br]);
    ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &br, "link", "set", "br0", "up"]);
    for i in 0..MEMBERS {
        let ns = net.ns(i);
        ip(&["netns", "add", &ns]);
        let port = format!("p{i}");
        ip(&[
            "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        ip(&["-n", &br, "link", "set", &port, "master", "br0", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", addr(i)),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let rate = if i == SLOW { "50mbit" } else { "100mbit" };
        let out = Command::new("ip")
            .args([
                "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
            ])
            .args(["rate", rate, "burst", "32kb", "latency", "100ms"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tc tbf in {ns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("probe.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef").unwrap();
    let peers = (0..MEMBERS)
        .map(|i| format!("\"{}:7100\"", addr(i)))
        .collect::<Vec<_>>()
        .join(", ");
    for i in 0..MEMBERS {
        let cfg = dir.path().join(format!("node{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                r#"[web]
listen_address = "{a}:9478"
[telemetry]
backend = "none"
[collective]
peers = [{peers}]
key_file = "{key}"
connect_timeout = "10s"
exec_timeout = "10s"
[probe]
enabled = true
interval = "200ms"
small_bytes = 1024
link_bytes = 262144
ring_every = 5
ring_bytes = 262144
[health]
# Six daemons on two cores: see tests/probe.rs for why these two are relaxed.
fabric_ratio = 3.0
z = 2.0
"#,
                a = addr(i),
                key = key.display()
            ),
        )
        .unwrap();
        // rank = -1 (the default): each daemon finds its rank from its own interface address.
        let log = std::fs::File::create(dir.path().join(format!("node{i}.log"))).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.ns(i),
                env!("CARGO_BIN_EXE_hcclwatch"),
                "run",
            ])
            .arg("--config.file")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        net.daemons.push(child);
    }
    let slow = format!("{}:7100", addr(SLOW));
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..MEMBERS {
        let url = format!("http://{}:9478/api/v1/state", addr(i));
        let view = loop {
            let v = get(&net.ns(i), &url)
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
            let done = v.as_ref().is_some_and(|v| {
                v["members"].as_array().is_some_and(|m| {
                    m.iter().any(|m| {
                        m["node"] == slow.as_str() && m["state"] == "quarantine_recommended"
                    })
                })
            });
            if done {
                break v.unwrap();
            }
            if Instant::now() > deadline {
                let logs: String = (0..MEMBERS)
                    .map(|k| {
                        std::fs::read_to_string(dir.path().join(format!("node{k}.log")))
                            .unwrap_or_default()
                    })
                    .collect::<Vec<_>>()
                    .join("\n---\n");
                panic!("node {i} never recommended {slow}; last view {v:?}\nlogs:\n{logs}");
            }
            // Polling the HTTP API of a process in another namespace: there is no event to
            // wait on, and each poll is bounded by curl's own timeout.
            std::thread::sleep(Duration::from_millis(250));
        };
        for m in view["members"].as_array().unwrap() {
            if m["node"] != slow.as_str() {
                assert_eq!(m["state"], "healthy", "node {i}'s view: {view}");
            }
        }
        let metrics = get(&net.ns(i), &format!("http://{}:9478/metrics", addr(i))).unwrap();
        assert!(
            metrics.contains(&format!(
                "hcclwatch_quarantine_recommended{{node=\"{slow}\",reason=\"straggler\"}} 1"
            )),
            "{metrics}"
        );
    }
}
