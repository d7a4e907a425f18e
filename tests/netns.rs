//! A real network: six Linux network namespaces on a bridge (itself in a namespace of its
//! own, so nothing touches the host's interfaces or addresses), one daemon in each. Every
//! node's egress is shaped by `tc tbf` to 100 Mbit/s and one node's to 50 Mbit/s; that node,
//! and only that node, must reach `quarantine_recommended` in every daemon's view. Shaping
//! every node is a fabric verdict; shaping only the traffic between two nodes (`tc htb`
//! with a `u32` destination filter on both ends) is a link verdict, and no node verdict.
//! Real traffic (`iperf3`) filling one node's shaped uplink makes that member's own
//! congestion flag 1 in every daemon's view, and only that member's.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2, which CI has; the test fails with that reason
//! rather than passing silently when it cannot build the network.

mod common;

use common::netns::{get, ip};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MEMBERS: usize = 6;
const SLOW: usize = 2;

/// Twelve daemons on two cores would drown the signal in scheduler noise: one network at a
/// time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Adds or changes the egress token bucket on `ns`'s eth0.
fn shape(ns: &str, verb: &str, rate: &str) {
    ip(&[
        "netns", "exec", ns, "tc", "qdisc", verb, "dev", "eth0", "root", "tbf", "rate", rate,
        "burst", "32kb", "latency", "100ms",
    ]);
}

/// Runs `tc` inside namespace `ns`.
fn tc(ns: &str, args: &[&str]) {
    let mut a = vec!["netns", "exec", ns, "tc"];
    a.extend_from_slice(args);
    ip(&a);
}

/// Replaces `ns`'s root qdisc with htb, all traffic in one class at `rate`.
fn htb_root(ns: &str, rate: &str) {
    tc(
        ns,
        &[
            "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10",
            "r2q", "100",
        ],
    );
    tc(
        ns,
        &[
            "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", rate,
            "burst", "32kb",
        ],
    );
}

/// Under an [`htb_root`], sends the traffic to `dst` only through a class at `rate`.
fn htb_limit_to(ns: &str, dst: &str, rate: &str) {
    tc(
        ns,
        &[
            "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", rate,
            "burst", "32kb",
        ],
    );
    let to = format!("{dst}/32");
    tc(
        ns,
        &[
            "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "dst", &to, "flowid", "1:20",
        ],
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

/// Builds the network with egress `rates[i]` on node i and starts a daemon in each, with
/// `extra(i)` appended to node i's `[probe]` section.
fn start(tag: char, rates: &[&str], extra: impl Fn(usize) -> String) -> (Net, tempfile::TempDir) {
    let mut net = Net {
        prefix: format!("hw{}{tag}", std::process::id() % 100_000),
        daemons: Vec::new(),
    };
    let br = net.bridge_ns();
    ip(&["netns", "add", &br]);
    ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &br, "link", "set", "br0", "up"]);
    for (i, rate) in rates.iter().enumerate() {
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
        shape(&ns, "add", rate);
    }
    let dir = tempfile::tempdir().unwrap();
    let key = common::write_key(dir.path(), "probe.key");
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
{extra}"#,
                a = addr(i),
                key = key.display(),
                extra = extra(i)
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
    (net, dir)
}

fn view(net: &Net, i: usize) -> Option<serde_json::Value> {
    get(&net.ns(i), &format!("http://{}:9478/api/v1/state", addr(i)))
        .and_then(|b| serde_json::from_str(&b).ok())
}

/// Waits until the group has run 30 rounds at full rate, so the engine knows its baseline
/// before the test shapes anything.
fn wait_for_baseline(net: &Net, dir: &tempfile::TempDir) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while view(net, 0).is_none_or(|v| v["rounds"]["ok"].as_u64().unwrap_or(0) < 30) {
        assert!(
            Instant::now() < deadline,
            "no baseline rounds:\n{}",
            logs(dir)
        );
        // No event crosses the namespace boundary; each poll is bounded by curl's timeout.
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn logs(dir: &tempfile::TempDir) -> String {
    (0..MEMBERS)
        .map(|k| {
            std::fs::read_to_string(dir.path().join(format!("node{k}.log"))).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[test]
fn tbf_shaped_node_and_only_it_is_recommended_for_quarantine() {
    let rates: Vec<&str> = (0..MEMBERS)
        .map(|i| if i == SLOW { "50mbit" } else { "100mbit" })
        .collect();
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The slow node's uplink reader reads a sysfs tree in which its NIC's PCIe link, x16
    // at the start, retrains to x8 once the group has its baseline: the evidence
    // congestion cannot give, read by the real reader, carried in its gathered row and
    // used by every member's engine (without it the shipped persistence horizon would make
    // it wait 180 rounds). A veth has no PCIe link to degrade; the other members read the
    // real /sys.
    let sysfs = tempfile::tempdir().unwrap();
    let nic = sysfs.path().join("class/net/eth0");
    for (name, text) in [
        ("speed", "10000"),
        ("statistics/rx_bytes", "0"),
        ("statistics/tx_bytes", "0"),
        ("device/current_link_width", "16"),
        ("device/current_link_speed", "16.0 GT/s PCIe"),
        ("device/max_link_width", "16"),
    ] {
        let p = nic.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{text}\n")).unwrap();
    }
    let root = sysfs.path().display().to_string();
    let (net, dir) = start('s', &rates, |i| {
        if i == SLOW {
            format!("congestion_sysfs_root = \"{root}\"\n")
        } else {
            String::new()
        }
    });
    let slow = format!("{}:7100", addr(SLOW));
    wait_for_baseline(&net, &dir);
    std::fs::write(nic.join("device/current_link_width"), "8\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..MEMBERS {
        let view = loop {
            let v = view(&net, i);
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
                panic!(
                    "node {i} never recommended {slow}; last view {v:?}\nlogs:\n{}",
                    logs(&dir)
                );
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
        assert!(
            metrics.contains(&format!(
                "hcclwatch_probe_uplink_hardware_sign{{peer=\"{slow}\",sign=\"pcie\"}} 1"
            )),
            "{metrics}"
        );
    }
}

/// Every link slows down together (a congested spine, a job-wide slowdown): the daemons
/// must call it a fabric problem and condemn no node.
#[test]
fn every_link_shaped_is_a_fabric_verdict_and_no_node_verdict() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (net, dir) = start('f', &["100mbit"; MEMBERS], |_| String::new());
    wait_for_baseline(&net, &dir);
    for i in 0..MEMBERS {
        shape(&net.ns(i), "change", "15mbit");
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut degraded_at: Vec<Option<u64>> = vec![None; MEMBERS];
    loop {
        let mut done = true;
        for (i, at) in degraded_at.iter_mut().enumerate() {
            let Some(v) = view(&net, i) else {
                done = false;
                continue;
            };
            let rounds = v["rounds"]["ok"].as_u64().unwrap_or(0);
            for m in v["members"].as_array().into_iter().flatten() {
                assert!(
                    m["state"] != "quarantine_recommended",
                    "node {i} recommended {} during a fabric-wide slowdown: {v}",
                    m["node"]
                );
            }
            if at.is_none() && v["fabric_degraded"] == true {
                *at = Some(rounds);
            }
            // Keep watching for 10 rounds after the fabric verdict.
            done &= at.is_some_and(|r| rounds >= r + 10);
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fabric verdict not reached everywhere ({degraded_at:?}):\n{}",
            logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn one_shaped_link_is_a_link_verdict_and_no_node_verdict() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (net, dir) = start('l', &["100mbit"; MEMBERS], |_| String::new());
    // Every node on the same htb qdisc, so that the shaped pair's ends differ from the
    // others only by the one link (htb and tbf at the same rate are not the same speed).
    for i in 0..MEMBERS {
        htb_root(&net.ns(i), "100mbit");
    }
    wait_for_baseline(&net, &dir);
    let (a, b) = (1, 3);
    htb_limit_to(&net.ns(a), &addr(b), "15mbit");
    htb_limit_to(&net.ns(b), &addr(a), "15mbit");
    let names = [format!("{}:7100", addr(a)), format!("{}:7100", addr(b))];
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = vec![false; MEMBERS];
    loop {
        for (i, s) in seen.iter_mut().enumerate() {
            let Some(v) = view(&net, i) else { continue };
            for m in v["members"].as_array().into_iter().flatten() {
                assert!(
                    m["state"] != "quarantine_recommended",
                    "node {i} recommended {} for a degraded link: {v}",
                    m["node"]
                );
            }
            let links: Vec<(String, String)> = v["link_degraded"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    (
                        l["src"].as_str().unwrap_or("").to_string(),
                        l["dst"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            *s |= links
                .iter()
                .any(|(x, y)| names.contains(x) && names.contains(y));
        }
        if seen.iter().all(|s| *s) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "link verdict not reached everywhere ({seen:?}):\n{}",
            logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Kills a helper process (here `iperf3`) when dropped, also when an assertion fails.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The rounds node `i` completed, and every member's `hcclwatch_probe_uplink_congested` as
/// it exports them, by peer.
fn uplink_flags(net: &Net, i: usize) -> Option<(f64, Vec<(String, f64)>)> {
    let m = get(&net.ns(i), &format!("http://{}:9478/metrics", addr(i)))?;
    let rounds = m
        .lines()
        .find_map(|l| l.strip_prefix("hcclwatch_probe_rounds_total{result=\"ok\"} "))?
        .trim()
        .parse()
        .ok()?;
    let flags: Vec<(String, f64)> = m
        .lines()
        .filter_map(|l| l.strip_prefix("hcclwatch_probe_uplink_congested{peer=\""))
        .filter_map(|l| {
            let (peer, rest) = l.split_once("\"} ")?;
            Some((peer.to_string(), rest.trim().parse().ok()?))
        })
        .collect();
    (flags.len() == MEMBERS).then_some((rounds, flags))
}

/// Polls every daemon until it has completed `rounds` rounds and `want(peer)` is each
/// member's flag in its view.
fn wait_for_flags(
    net: &Net,
    dir: &tempfile::TempDir,
    what: &str,
    rounds: f64,
    want: impl Fn(&str) -> f64,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let last: Vec<_> = (0..MEMBERS).map(|i| uplink_flags(net, i)).collect();
        let ok = last.iter().all(|v| {
            v.as_ref()
                .is_some_and(|(r, f)| *r >= rounds && f.iter().all(|(p, x)| *x == want(p)))
        });
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached in every view; last {last:?}\nlogs:\n{}",
            logs(dir)
        );
        // Polling the HTTP API of a process in another namespace: there is no event to
        // wait on, and each poll is bounded by curl's own timeout.
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One node's tbf-shaped uplink is filled by real traffic (`iperf3` to a server in the
/// bridge's namespace, so no other member's uplink carries it). With
/// `probe.congestion_line_rate` at each node's tbf rate, that member's flag becomes 1 in
/// every daemon's view and the others' stay 0; once the traffic stops, it is 0 again.
#[test]
fn real_traffic_filling_one_uplink_is_that_members_congestion_flag() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const BUSY: usize = 4;
    let rates: Vec<&str> = (0..MEMBERS)
        .map(|i| if i == BUSY { "50mbit" } else { "100mbit" })
        .collect();
    let bits = |r: &str| r.trim_end_matches("mbit").parse::<u64>().unwrap() * 1_000_000;
    let (net, dir) = start('c', &rates, |i| {
        format!("congestion_line_rate = {}\n", bits(rates[i]))
    });
    let busy = format!("{}:7100", addr(BUSY));
    // Measured rounds (the first read is only a baseline), with the probes' own traffic.
    wait_for_flags(&net, &dir, "no member congested at rest", 20.0, |_| 0.0);
    let server_addr = "10.77.0.254";
    ip(&[
        "-n",
        &net.bridge_ns(),
        "addr",
        "add",
        &format!("{server_addr}/24"),
        "dev",
        "br0",
    ]);
    let iperf = |ns: &str, args: &[&str], stdout: Stdio| {
        let mut a = vec!["netns", "exec", ns, "iperf3"];
        a.extend_from_slice(args);
        Kill(
            Command::new("ip")
                .args(&a)
                .stdout(stdout)
                .stderr(Stdio::null())
                .spawn()
                .expect("run iperf3"),
        )
    };
    let mut server = iperf(
        &net.bridge_ns(),
        &["-s", "-B", server_addr, "-p", "5299", "--forceflush"],
        Stdio::piped(),
    );
    // The client may start once the server says it listens; the rest of its output is
    // drained, so that it never blocks on (or dies of) a full or closed pipe.
    let out = server.0.stdout.take().unwrap();
    let (tx, listening) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            if line.contains("Server listening") {
                let _ = tx.send(());
            }
        }
    });
    listening
        .recv_timeout(Duration::from_secs(10))
        .expect("iperf3 -s did not listen");
    let client = iperf(
        &net.ns(BUSY),
        &["-c", server_addr, "-p", "5299", "-t", "120"],
        Stdio::null(),
    );
    wait_for_flags(
        &net,
        &dir,
        "the busy member's flag, and only its",
        0.0,
        |p| {
            if p == busy { 1.0 } else { 0.0 }
        },
    );
    drop(client);
    wait_for_flags(
        &net,
        &dir,
        "every flag 0 once the traffic stopped",
        0.0,
        |_| 0.0,
    );
}
