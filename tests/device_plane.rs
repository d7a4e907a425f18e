//! The device plane end to end: six real daemons on loopback, each with its own fake
//! `hccn_tool` (`tests/fake-hccn`) holding eight NPU ports with their own RoCE addresses,
//! all pinging over one shared fake fabric file. A fault written into the fabric must be
//! localised the same way in every daemon's view:
//! - one port with 20 % loss: that port, and only that port, is suspected or worse;
//! - every port of one node lossy: a node verdict, and no port of it judged on its own;
//! - every port lossy: a fabric verdict, and no port or node verdict or quarantine.
//!
//! The daemons run the shipped `[health]` and device-engine thresholds and the shipped
//! `device_probe.pings_per_round`; only the clock is faster (see [`config`]).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Daemon, FakeHccn, Start, http_get, loopback_peers, parse_labels, value, write_key};
use serde_json::{Value, json};

/// Eighteen daemons on two cores would starve each other's rounds: one fleet at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const NODES: usize = 6;
const NPUS: usize = 8;

/// How long a whole case may wait for a verdict (CI: two shared cores).
const VERDICT: Duration = Duration::from_secs(90);

/// NPU `npu`'s RoCE address on node `node`.
fn ip(node: usize, npu: usize) -> String {
    format!("10.20.{node}.{}", npu + 1)
}

/// The shipped 8-NPU fake node, its addresses moved to `10.20.<node>.*`.
fn node_scenario(node: usize) -> String {
    include_str!("fake-hccn/scenarios/8-npu.json")
        .replace("\"10.20.0.", &format!("\"10.20.{node}."))
}

/// The shared fabric: every port of the test, with its loss.
fn fabric(loss: impl Fn(usize, usize) -> f64) -> Value {
    let ports: serde_json::Map<String, Value> = (0..NODES)
        .flat_map(|n| (0..NPUS).map(move |p| (n, p)))
        .map(|(n, p)| (ip(n, p), json!({ "loss": loss(n, p) })))
        .collect();
    json!({ "base_rtt_ms": 0.08, "ports": ports })
}

/// Replaces the fabric atomically (write + rename): the fakes re-read it on every ping.
fn set_fabric(path: &Path, f: &Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, f.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// One daemon's config.
///
/// The clock: the shipped `probe.interval` is 30 s; a round every 2.4 s keeps a case within
/// a minute. The budget is packets per *second* per NPU: the shipped 1/s allows 2.4 packets
/// per 2.4 s round, which cuts the shipped 4 pings per round (3 packets each, sent and
/// answered: 24 packets) to zero. So the budget is raised to the largest the schema allows
/// (10/s): 24 packets per round, exactly the shipped 4 pings, hence the shipped plan density
/// and engine statistics, only faster. (At 1 s rounds 10/s would allow 1 ping per round,
/// too few packets in the window for the shipped significance thresholds to separate a
/// lossy node from the fabric.)
///
/// Port readings: the NPUs and their addresses come from `hccn.conf` and `-ip -g` (no
/// DCMI); one ports pass a minute and no optics keep six daemons' tool runs to the pings.
fn config(peers: &[String], rank: usize, key: &Path, hccn: &FakeHccn) -> String {
    let list = common::toml_strings(peers);
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "none"
hccn_tool = "{tool}"
hccn_conf = "{conf}"
[telemetry.intervals]
ports = "60s"
[collectors]
host = false
optics = false
[collective]
peers = [{list}]
rank = {rank}
key_file = "{key}"
connect_timeout = "5s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "2400ms"
small_bytes = 1024
link_bytes = 65536
ring_every = 0
[device_probe]
interval = "2400ms"
max_packets_per_second = 10.0
"#,
        tool = hccn.tool.display(),
        conf = hccn.conf.display(),
        key = key.display(),
    )
}

/// Six daemons, their fake tools and the fabric file they share.
struct Fleet {
    daemons: Vec<Daemon>,
    peers: Vec<String>,
    fabric: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// Starts the fleet on `initial` and waits until every daemon has judged device-plane
    /// rounds over all 48 ports.
    fn start(initial: &Value) -> Fleet {
        Fleet::start_with(initial, None)
    }

    /// [`Fleet::start`], with `failing` (node, NPU) a port whose module corrupts frames:
    /// its FCS error counter grows every second, and its node's port poller reads the
    /// counters every 2 s (the others once a minute).
    fn start_with(initial: &Value, failing: Option<(usize, usize)>) -> Fleet {
        Fleet::start_full(initial, failing, |_, _| String::new())
    }

    /// [`Fleet::start_with`], each node's config followed by `extra(node, dir)` (TOML;
    /// `dir` the fleet's directory, for files the config names).
    fn start_full(
        initial: &Value,
        failing: Option<(usize, usize)>,
        extra: impl Fn(usize, &Path) -> String,
    ) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let key = write_key(dir.path(), "probe.key");
        let fabric = dir.path().join("fabric.json");
        set_fabric(&fabric, initial);
        let peers = loopback_peers(NODES);
        let daemons = (0..NODES)
            .map(|n| {
                let node_dir = dir.path().join(format!("node{n}"));
                std::fs::create_dir(&node_dir).unwrap();
                let mut scenario: Value = serde_json::from_str(&node_scenario(n)).unwrap();
                let mut cfg_poll = "60s";
                if let Some((_, npu)) = failing.filter(|(node, _)| *node == n) {
                    let npus = scenario["npus"].as_array_mut().unwrap();
                    let port = npus.iter_mut().find(|p| p["phy_id"] == npu).unwrap();
                    port["stat_per_second"] = serde_json::json!({ "mac_rx_fcs_err_pkt_num": 7 });
                    cfg_poll = "2s";
                }
                let hccn = FakeHccn::new(&node_dir, &scenario.to_string(), Some(&fabric));
                let conf: String = (0..NPUS)
                    .map(|p| format!("address_{p}={}\nnetmask_{p}=255.255.255.0\n", ip(n, p)))
                    .collect();
                std::fs::write(&hccn.conf, conf).unwrap();
                let cfg = config(&peers, n, &key, &hccn)
                    .replace("ports = \"60s\"", &format!("ports = \"{cfg_poll}\""))
                    + &extra(n, dir.path());
                Daemon::start(Start::new(&cfg))
            })
            .collect();
        let f = Fleet {
            daemons,
            peers,
            fabric,
            _dir: dir,
        };
        f.wait_api(
            "device rounds over every port",
            Duration::from_secs(60),
            |v| {
                v["device"]["ports"].as_array().map_or(0, Vec::len) == NODES * NPUS
                    && v["device"]["rounds"].as_u64() >= Some(2)
            },
        );
        f
    }

    /// Polls every daemon's `/api/v1/state` until `pred` holds for it.
    fn wait_api(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) {
        for (i, d) in self.daemons.iter().enumerate() {
            let start = Instant::now();
            loop {
                let v = state(d);
                if pred(&v) {
                    break;
                }
                assert!(
                    start.elapsed() < timeout,
                    "daemon {i}: timed out waiting for {what}; state:\n{v:#}\nlog:\n{}",
                    d.log()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn node(&self, n: usize) -> &str {
        &self.peers[n]
    }
}

/// `/api/v1/state`; `null` until the prober has published (404 before its first round).
fn state(d: &Daemon) -> Value {
    let r = http_get(&d.addr, "/api/v1/state", None);
    if r.status == 404 {
        return Value::Null;
    }
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

/// The device-plane rounds `v` has judged.
fn rounds(v: &Value) -> u64 {
    v["device"]["rounds"].as_u64().unwrap_or(0)
}

/// `hcclwatch_npu_port_state` series at 1: (node, npu) → state.
fn port_states(scrape: &str) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("hcclwatch_npu_port_state{") else {
            continue;
        };
        let (labels, v) = rest.rsplit_once("} ").unwrap();
        if v.trim().parse::<f64>() != Ok(1.0) {
            continue;
        }
        let l: BTreeMap<String, String> = parse_labels(labels).into_iter().collect();
        out.insert((l["node"].clone(), l["npu"].clone()), l["state"].clone());
    }
    out
}

/// Ports not healthy in a scrape.
fn not_healthy(scrape: &str) -> BTreeMap<(String, String), String> {
    port_states(scrape)
        .into_iter()
        .filter(|(_, s)| s != "healthy")
        .collect()
}

/// Ports not healthy in `/api/v1/state`.
fn api_not_healthy(v: &Value) -> BTreeSet<(String, u64)> {
    v["device"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] != "healthy")
        .map(|p| {
            (
                p["node"].as_str().unwrap().into(),
                p["npu"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn npu_port_quarantines(scrape: &str) -> Vec<f64> {
    common::samples(
        scrape,
        "hcclwatch_quarantine_recommended",
        &[("reason", "npu_port")],
    )
}

/// No port is judged on its own in daemon `i`'s view: every port healthy, no quarantine
/// for a port, and no port transition ever, except on `node` (a node verdict's node): its
/// ports may be suspected, and confirmed by re-pings, in the rounds before its verdict
/// forms (they cross the significance thresholds a round or two apart, more so on a loaded
/// machine), and each is then withdrawn because the node is judged as a whole. Each port
/// of it goes through that at most twice (the verdict lapsing once), and no further.
fn no_port_judged(i: usize, d: &Daemon, scrape: &str, node: Option<&str>) {
    let bad = not_healthy(scrape);
    assert!(bad.is_empty(), "daemon {i} judges ports: {bad:?}");
    assert!(
        npu_port_quarantines(scrape).is_empty(),
        "daemon {i}: {scrape}"
    );
    let v = state(d);
    assert!(api_not_healthy(&v).is_empty(), "daemon {i}: {v:#}");
    let transitions = v["device"]["transitions"].as_array().unwrap();
    let allowed = |t: &Value| {
        let withdrawn = t["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("withdrawn: its node is judged as a whole"));
        match (t["from"].as_str(), t["to"].as_str()) {
            (Some("healthy"), Some("suspect")) | (Some("suspect"), Some("confirmed")) => true,
            (Some("suspect" | "confirmed"), Some("healthy")) => withdrawn,
            _ => false,
        }
    };
    let on_node = |t: &&Value| node.is_some_and(|n| t["node"] == n);
    let other: Vec<&Value> = transitions
        .iter()
        .filter(|t| !(on_node(t) && allowed(t)))
        .collect();
    assert!(other.is_empty(), "daemon {i}: {other:#?}");
    let mut withdrawals: BTreeMap<u64, usize> = BTreeMap::new();
    for t in transitions
        .iter()
        .filter(on_node)
        .filter(|t| t["to"] == "healthy")
    {
        *withdrawals.entry(t["npu"].as_u64().unwrap()).or_default() += 1;
    }
    assert!(
        withdrawals.values().all(|n| *n <= 2),
        "daemon {i}: ports withdrawn again and again {withdrawals:?}: {transitions:#?}"
    );
}

const ELEVATED: [&str; 3] = ["suspect", "confirmed", "quarantine_recommended"];

#[test]
fn one_lossy_port_is_that_port_in_every_view() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let (bad_node, bad_npu) = (2, 3);
    let fleet = Fleet::start_with(
        &fabric(|n, p| {
            if (n, p) == (bad_node, bad_npu) {
                0.2
            } else {
                0.0
            }
        }),
        Some((bad_node, bad_npu)),
    );
    let node = fleet.node(bad_node).to_string();
    let npu = bad_npu.to_string();
    let key = (node.clone(), npu.clone());
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.wait_for("a verdict on the lossy port", VERDICT, |s| {
            port_states(s)
                .get(&key)
                .is_some_and(|st| ELEVATED.contains(&st.as_str()))
        });
        let bad = not_healthy(&s);
        assert_eq!(
            bad.keys().collect::<Vec<_>>(),
            vec![&key],
            "daemon {i} accuses other ports: {bad:?}"
        );
        // Its own eight ports are always shown.
        let own = port_states(&s)
            .keys()
            .filter(|(n, _)| *n == fleet.peers[i])
            .count();
        assert_eq!(own, NPUS, "daemon {i}: {s}");
        assert_eq!(
            value(&s, "hcclwatch_device_fabric_degraded", &[]),
            Some(0.0)
        );
        assert!(common::samples(&s, "hcclwatch_device_node_degraded", &[]).is_empty());
        // The API says the same, with the evidence.
        let v = state(d);
        let bad = api_not_healthy(&v);
        assert_eq!(
            bad,
            BTreeSet::from([(node.clone(), bad_npu as u64)]),
            "daemon {i}"
        );
        let t = v["device"]["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["node"] == node.as_str() && t["npu"] == bad_npu && t["to"] == "suspect")
            .unwrap_or_else(|| panic!("daemon {i}: no suspect transition: {v:#}"));
        assert!(t["reason"].as_str().unwrap().contains("packet loss"), "{t}");
    }
    eprintln!("one lossy port: suspected in {:?}", started.elapsed());
    // Its own node reads the corrupted frames off the port's counters, and says so; its
    // other ports show none.
    let own = &fleet.daemons[bad_node];
    let sign = |s: &str, npu: usize| {
        let npu = npu.to_string();
        value(
            s,
            "hcclwatch_npu_port_hardware_sign",
            &[("npu", &npu), ("sign", "frame_errors")],
        )
    };
    let s = own.wait_for("the port's corrupted frames", VERDICT, |s| {
        sign(s, bad_npu) == Some(1.0)
    });
    for p in (0..NPUS).filter(|p| *p != bad_npu) {
        assert_eq!(sign(&s, p), Some(0.0), "NPU {p}");
    }
    // Held, the verdict escalates: re-pinged from known-good ports on other nodes it is
    // confirmed, then, its own hardware showing corrupted frames, its node is recommended
    // for quarantine with reason `npu_port`; still that port only, in every view.
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.wait_for("the port's quarantine recommendation", VERDICT, |s| {
            port_states(s).get(&key).map(String::as_str) == Some("quarantine_recommended")
        });
        let bad = not_healthy(&s);
        assert_eq!(bad.len(), 1, "daemon {i}: {bad:?}");
        assert_eq!(
            value(
                &s,
                "hcclwatch_quarantine_recommended",
                &[("node", &node), ("reason", "npu_port")]
            ),
            Some(1.0),
            "daemon {i}"
        );
        let v = state(d);
        let to = |st: &str| {
            v["device"]["transitions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["node"] == node.as_str() && t["to"] == st)
                .cloned()
                .unwrap_or_else(|| panic!("daemon {i}: no transition to {st}: {v:#}"))
        };
        let confirmed = to("confirmed");
        assert!(
            confirmed["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["what"] == "confirmation_packets" && e["value"].as_f64() > Some(0.0)),
            "{confirmed}"
        );
        // The port's own FCS errors, read by its node's poller and carried in its row,
        // corroborate it in every member's engine: recommended after the short hold, not
        // the persistence horizon (which at these rounds would take over 200 s).
        let reason = to("quarantine_recommended")["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains("confirmed bad NPU port"), "{reason}");
        assert!(
            reason.contains("corroborated by the port's own hardware")
                && reason.ends_with("corrupted frames"),
            "daemon {i}: {reason}"
        );
    }
    // The lossy port's own daemon sees it in its per-NPU ping counters: a fifth of NPU 3's
    // packets lost, the other NPUs' only when they happen to ping it.
    let s = fleet.daemons[bad_node].scrape();
    let packets = |npu: usize, result: &str| {
        value(
            &s,
            "hcclwatch_npu_ping_packets_total",
            &[("npu", &npu.to_string()), ("result", result)],
        )
        .unwrap_or(0.0)
    };
    for p in 0..NPUS {
        let (lost, got) = (packets(p, "lost"), packets(p, "received"));
        assert!(got > 0.0, "NPU {p}: no ping answered:\n{s}");
        let ratio = lost / (lost + got);
        if p == bad_npu {
            // The port loses 0.2 of its packets: the ratio is binomial around it, within 4
            // standard deviations for this many packets (a fixed 0.1..0.3 band failed once
            // at 0.097 in a full, loaded run of the suite), and always above what a
            // healthy port shows.
            let n = lost + got;
            let sd = (0.2 * 0.8 / n).sqrt();
            assert!(
                (ratio - 0.2).abs() < 4.0 * sd && ratio > 0.05,
                "NPU {p}: loss {ratio} of {n} packets (0.2 ± {:.3} expected)",
                4.0 * sd
            );
        } else {
            assert!(ratio < 0.05, "NPU {p}: loss {ratio}");
        }
    }
    eprintln!("one lossy port: quarantine in {:?}", started.elapsed());
}

#[test]
fn every_port_of_one_node_lossy_is_a_node_verdict() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let bad_node = 4;
    let fleet = Fleet::start(&fabric(|n, _| if n == bad_node { 0.2 } else { 0.0 }));
    let node = fleet.node(bad_node).to_string();
    let degraded = |s: &str| value(s, "hcclwatch_device_node_degraded", &[("node", &node)]);
    for d in &fleet.daemons {
        d.wait_for("the node verdict", VERDICT, |s| degraded(s) == Some(1.0));
    }
    // A few more rounds under the verdict: no port of it (nor any other) escalates on its
    // own, and nothing is quarantined for a port.
    let until = rounds(&state(&fleet.daemons[0])) + 4;
    fleet.wait_api("four more rounds", VERDICT, |v| rounds(v) >= until);
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.scrape();
        assert_eq!(degraded(&s), Some(1.0), "daemon {i}");
        assert_eq!(
            common::samples(&s, "hcclwatch_device_node_degraded", &[]).len(),
            1,
            "daemon {i}: {s}"
        );
        no_port_judged(i, d, &s, Some(&node));
        assert_eq!(
            value(&s, "hcclwatch_device_fabric_degraded", &[]),
            Some(0.0)
        );
    }
    eprintln!("one lossy node: verdicts in {:?}", started.elapsed());
}

#[test]
fn every_port_lossy_is_a_fabric_verdict_and_nothing_is_quarantined() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let fleet = Fleet::start(&fabric(|_, _| 0.0));
    // A clean fabric first: no verdict of any kind.
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.scrape();
        assert!(not_healthy(&s).is_empty(), "daemon {i}: {s}");
        assert_eq!(
            value(&s, "hcclwatch_device_fabric_degraded", &[]),
            Some(0.0)
        );
    }
    // Then every port loses 10 % (19 % of pings' packets, both ends counted).
    set_fabric(&fleet.fabric, &fabric(|_, _| 0.1));
    for d in &fleet.daemons {
        d.wait_for("the fabric verdict", VERDICT, |s| {
            value(s, "hcclwatch_device_fabric_degraded", &[]) == Some(1.0)
        });
    }
    let until = rounds(&state(&fleet.daemons[0])) + 4;
    fleet.wait_api("four more rounds", VERDICT, |v| rounds(v) >= until);
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.scrape();
        assert_eq!(
            value(&s, "hcclwatch_device_fabric_degraded", &[]),
            Some(1.0),
            "daemon {i}"
        );
        assert!(
            common::samples(&s, "hcclwatch_device_node_degraded", &[]).is_empty(),
            "daemon {i}: {s}"
        );
        no_port_judged(i, d, &s, None);
        let v = state(d);
        assert_eq!(v["device"]["fabric_degraded"], true);
        assert!(v["device"]["node_verdicts"].as_array().unwrap().is_empty());
    }
    eprintln!("lossy fabric: verdicts in {:?}", started.elapsed());
}

/// A rail-optimised fabric: the six nodes are one ToR group (`rail-a` in a topology file)
/// whose NPU k is cabled to the group's k-th leaf, and every daemon says so
/// (`topology.npu_cabling = "rail"`). Leaf 3 loses 10 % of what crosses it: NPU 3 of every
/// node is lossy, one port of eight each, so no node verdict and well below the fabric
/// share. Every member's view names the leaf (`rail-a/npu3`) in a ToR verdict with all six
/// members, and no port is recommended for quarantine.
#[test]
fn a_lossy_rail_leaf_is_a_switch_verdict_and_no_port_is_quarantined() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let leaf = 3;
    let names: Vec<String> = (0..NODES).map(|n| format!("node-{n}")).collect();
    let extra = |n: usize, dir: &Path| {
        let file = dir.join("topology.toml");
        let list = common::toml_strings(&names);
        std::fs::write(
            &file,
            format!("[[tor]]\nname = \"rail-a\"\nnodes = [{list}]\n"),
        )
        .unwrap();
        format!(
            "[attribution]\nenabled = false\nnode_name = \"node-{n}\"\n\
             [topology]\nfile = \"{}\"\nnpu_cabling = \"rail\"\nnode_labels = false\n\
             hypernodes = false\nrefresh = \"1s\"\ndeadline = \"500ms\"\n",
            file.display()
        )
    };
    let fleet = Fleet::start_full(
        &fabric(|_, p| if p == leaf { 0.1 } else { 0.0 }),
        None,
        extra,
    );
    let tor = format!("rail-a/npu{leaf}");
    for d in &fleet.daemons {
        d.wait_for("the leaf's ToR verdict", VERDICT, |s| {
            value(s, "hcclwatch_device_tor_degraded", &[("tor", &tor)]) == Some(1.0)
        });
    }
    // Every member's place is exchanged when the group forms; a member whose file was read
    // after the first formation joins the leaf when the group re-forms with it.
    fleet.wait_api("all six members on the leaf", VERDICT, |v| {
        v["device"]["tor_verdicts"][0]["members"]
            .as_array()
            .map(Vec::len)
            == Some(NODES)
    });
    let until = rounds(&state(&fleet.daemons[0])) + 4;
    fleet.wait_api("four more rounds", VERDICT, |v| rounds(v) >= until);
    for (i, d) in fleet.daemons.iter().enumerate() {
        let s = d.scrape();
        let verdicts = common::samples(&s, "hcclwatch_device_tor_degraded", &[]);
        assert_eq!(verdicts, [1.0], "daemon {i}: one ToR verdict: {s}");
        let v = state(d);
        let t = &v["device"]["tor_verdicts"][0];
        assert_eq!(t["tor"], tor.as_str(), "daemon {i}: {v:#}");
        let members: BTreeSet<&str> = t["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        // Members are shown by the names the group goes by (here the probe addresses).
        let want: BTreeSet<&str> = fleet.peers.iter().map(String::as_str).collect();
        assert_eq!(members, want, "daemon {i}: {t:#}");
        assert_eq!(
            t["ports"], NODES as u64,
            "daemon {i}: one port of each member"
        );
        // No port is recommended for quarantine. A port may be confirmed (a ticket): the
        // daemons start one after another, and a group of one member with a port on the
        // leaf has no ToR rule, nor two on a rail leaf (every ping with the leaf is
        // between its members), so it judges the lossy ports one by one until the group grows (one
        // full-suite run, before probing waited for the topology's first read, confirmed
        // one such port on one daemon; seven runs since, four of them under load, none).
        let judged: Vec<_> = port_states(&s)
            .into_iter()
            .filter(|(_, st)| st == "quarantine_recommended")
            .collect();
        assert!(judged.is_empty(), "daemon {i} judges ports: {judged:?}");
        assert!(npu_port_quarantines(&s).is_empty(), "daemon {i}: {s}");
        assert!(v["device"]["node_verdicts"].as_array().unwrap().is_empty());
        assert_eq!(v["device"]["fabric_degraded"], false, "daemon {i}");
    }
    eprintln!("lossy rail leaf: verdicts in {:?}", started.elapsed());
}
