//! `hcclwatch demo`: a local fleet on 127.0.0.1 that shows the health engine at work.
//!
//! Every node is a real `hcclwatch run` process with sim devices, its own web port and its
//! own probe port, probing the others over loopback TCP. Loopback is far faster than any
//! fabric and the processes share a few cores, so every node's probe sends are capped at
//! the same nominal rate; `--slow NODE=FACTOR` caps one node at FACTOR of it, and
//! `--bad-link A-B=FACTOR` caps what A sends to B and B to A. That keeps the comparison
//! between nodes about the links, not about the scheduler.
//!
//! With `--npus K` every node also has K fake NPU ports on one shared fake fabric
//! ([`device`]), and the view adds the device plane's port verdicts.
//!
//! The view polls each node's `/api/v1/state`, so what it shows is what the daemons
//! themselves decided; the demo computes nothing of its own.

mod device;
mod tors;

use std::io::{IsTerminal, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hcclwatch::health::median;
use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;

use crate::cli::DemoArgs;

/// Every node's probe send cap, bytes per second, before any `--slow` factor: 50 Mbit/s.
/// At this rate a 256 KiB link probe takes about 42 ms, so the milliseconds a daemon waits
/// for a shared core (tens of them with other work on two cores) stay small next to the
/// injected slowdowns, and the shipped `[health]` thresholds judge the loopback fleet as
/// they would a fabric. (At 100 MB/s a probe took under 3 ms and scheduler noise made
/// rounds look like fabric dips, which hide a slow link; at 12.5 MB/s the 1-4 link verdict
/// was once missing at the end of a 30 s run under heavy load.)
const NOMINAL_BYTES_PER_SECOND: f64 = 6.25e6;

struct Node {
    web: u16,
    probe: u16,
    child: Option<Child>,
}

/// `n` distinct free ports on 127.0.0.1. Every listener is held until all are bound: a
/// port bound and released at once can be handed out again by the next bind, and two
/// daemons given the same port made one of them exit ("address already in use").
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let held = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").context("binding a free port on 127.0.0.1"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// A node index from `text`, part of option `what`'s value `item`.
fn node_index(text: &str, what: &str, item: &str, nodes: usize) -> anyhow::Result<usize> {
    let n: usize = text
        .trim()
        .parse()
        .with_context(|| format!("{what} {item:?}: {text:?} is not a node index"))?;
    if n >= nodes {
        bail!(
            "{what} {item:?}: node {n} does not exist (nodes are 0..{})",
            nodes - 1
        );
    }
    Ok(n)
}

/// A number from `text`, part of option `what`'s value `item`.
fn number(text: &str, what: &str, item: &str) -> anyhow::Result<f64> {
    text.trim()
        .parse()
        .with_context(|| format!("{what} {item:?}: {text:?} is not a number"))
}

fn parse_pairs(
    items: &[String],
    sep: char,
    what: &str,
    nodes: usize,
) -> anyhow::Result<Vec<(usize, f64)>> {
    items
        .iter()
        .map(|s| {
            let (n, v) = s
                .split_once(sep)
                .with_context(|| format!("{what} {s:?}: expected NODE{sep}VALUE"))?;
            Ok((node_index(n, what, s, nodes)?, number(v, what, s)?))
        })
        .collect()
}

/// Parses `--bad-link A-B=FACTOR` items.
fn parse_links(items: &[String], nodes: usize) -> anyhow::Result<Vec<(usize, usize, f64)>> {
    let what = "--bad-link";
    items
        .iter()
        .map(|s| {
            let (a, b, f) = s
                .split_once('=')
                .and_then(|(ab, f)| ab.split_once('-').map(|(a, b)| (a, b, f)))
                .with_context(|| format!("{what} {s:?}: expected A-B=FACTOR"))?;
            let (a, b) = (
                node_index(a, what, s, nodes)?,
                node_index(b, what, s, nodes)?,
            );
            let f = number(f, what, s)?;
            if a == b {
                bail!("{what} {s:?}: a link needs two different nodes");
            }
            if f.is_nan() || f <= 0.0 || f >= 1.0 {
                bail!("{what} {s:?}: FACTOR must be between 0 and 1 (exclusive)");
            }
            Ok((a, b, f))
        })
        .collect()
}

fn config(
    rank: usize,
    nodes: &[Node],
    key: &Path,
    throttle: u64,
    faults: &Faults<'_>,
    tool: Option<&device::NodeTool>,
) -> String {
    let links = faults.links;
    // A bad link caps both ends' sends to each other; a slow ToR caps every send to its
    // members from outside it (its members' own sends are capped by their throttle).
    let mut caps: Vec<(usize, f64)> = links
        .iter()
        .filter_map(|&(a, b, f)| match rank {
            r if r == a => Some((b, f)),
            r if r == b => Some((a, f)),
            _ => None,
        })
        .collect();
    if let Some((t, _)) = faults.tors {
        for p in (0..nodes.len()).filter(|&p| t.of(p) != t.of(rank) && t.factor(p) < 1.0) {
            match caps.iter_mut().find(|(q, _)| *q == p) {
                Some(c) => c.1 = c.1.min(t.factor(p)),
                None => caps.push((p, t.factor(p))),
            }
        }
    }
    let peer_caps = caps
        .into_iter()
        .map(|(p, f)| {
            format!(
                "\"127.0.0.1:{}={}\"",
                nodes[p].probe,
                (throttle as f64 * f) as u64
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    // A slow node stands for a slow component: it also shows the hardware sign such a
    // component's interface shows (a PCIe link trained down), so the shipped thresholds
    // recommend it after the short hold, not the persistence horizon.
    let signs = if faults.slow.iter().any(|(x, _)| *x == rank) {
        r#"["pcie"]"#
    } else {
        "[]"
    };
    let peers = nodes
        .iter()
        .map(|n| format!("\"127.0.0.1:{}\"", n.probe))
        .collect::<Vec<_>>()
        .join(", ");
    let (interval, telemetry, sections) = match (tool, faults.ports) {
        (Some(t), Some(p)) => (
            device::INTERVAL,
            t.telemetry_keys(),
            device::sections(p.npus),
        ),
        _ => ("250ms", String::new(), String::new()),
    };
    format!(
        r#"[web]
listen_address = "127.0.0.1:{web}"
[telemetry]
backend = "sim"
{telemetry}[collective]
peers = [{peers}]
rank = {rank}
key_file = "{key}"
connect_timeout = "5s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "{interval}"
small_bytes = 1024
link_bytes = 262144
ring_every = 5
ring_bytes = 262144
inject_throttle_bytes_per_second = {throttle}
inject_peer_throttle = [{peer_caps}]
inject_hardware_signs = {signs}
# The demo runs until Ctrl-C: no probe budget, so that its rounds never shrink to
# latency-sized ones after a few minutes of 4 rounds a second.
budget_bytes_per_hour = 0
budget_busy_ratio = 0.0
{sections}{topology}"#,
        web = nodes[rank].web,
        key = key.display(),
        topology = faults
            .tors
            .map_or(String::new(), |(t, file)| t.sections(rank, file)),
    )
}

/// GET `path` from 127.0.0.1:`port`, bounded by a short timeout; `None` on any failure.
fn get_json(port: u16, path: &str) -> Option<Value> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n")?.1;
    serde_json::from_str(body).ok()
}

/// The reason of the node's latest transition, as `node` sees it.
fn latest_reason(state: &Value, node: &str) -> String {
    state["transitions"]
        .as_array()
        .and_then(|t| t.iter().rev().find(|t| t["node"] == node))
        .and_then(|t| t["reason"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Maps a member name (its probe address) to its demo node.
fn index_of(nodes: &[Node]) -> impl Fn(&str) -> Option<usize> + '_ {
    |name| {
        nodes
            .iter()
            .position(|n| name == format!("127.0.0.1:{}", n.probe))
    }
}

/// The screen, and each node's state and reason (what the non-terminal output prints on).
fn render(
    nodes: &[Node],
    views: &[Option<Value>],
    elapsed: f64,
    faults: &Faults<'_>,
) -> (String, String) {
    let ports = faults.ports;
    let mut out = format!(
        "hcclwatch demo: {} nodes, {elapsed:.0} s, shipped [health] thresholds\n",
        nodes.len()
    );
    // Any live node's view: they all hold the same all-gathered matrix and verdicts.
    let Some(v) = views.iter().flatten().find(|v| v["members"].is_array()) else {
        out.push_str("waiting for the first probe round...\n");
        return (out, String::new());
    };
    let mut bw_in = vec![Vec::new(); nodes.len()];
    let mut bw_out = vec![Vec::new(); nodes.len()];
    let members = v["members"].as_array().cloned().unwrap_or_default();
    let index = |name: &str| members.iter().position(|m| m["node"] == name);
    for l in v["matrix"].as_array().into_iter().flatten() {
        let (Some(a), Some(b), Some(bw)) = (
            l["src"].as_str().and_then(index),
            l["dst"].as_str().and_then(index),
            l["bytes_per_second"].as_f64(),
        ) else {
            continue;
        };
        bw_out[a].push(bw);
        bw_in[b].push(bw);
    }
    let mut all: Vec<f64> = bw_in.iter().flatten().copied().collect();
    let median = (!all.is_empty()).then(|| median(&mut all));
    let bad_links: Vec<String> = v["link_degraded"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let at = |k: &str| {
                l[k].as_str()
                    .and_then(index)
                    .map_or("?".to_string(), |i| i.to_string())
            };
            l.is_object()
                .then(|| format!("{}→{}", at("src"), at("dst")))
        })
        .collect();
    out.push_str(&format!(
        "fabric degraded: {}   rounds ok: {}   degraded links: {}\n",
        v["fabric_degraded"],
        v["rounds"]["ok"],
        if bad_links.is_empty() {
            "none".to_string()
        } else {
            bad_links.join(" ")
        }
    ));
    let mut verdicts = format!("links {bad_links:?}\n");
    if faults.tors.is_some() {
        let line = tors::render(v);
        out.push_str(&line);
        verdicts.push_str(&line);
    }
    out.push_str(&format!(
        "{:<4} {:<22} {:<7} {:<24} {:>10} {:>8} {:>8}  {}\n",
        "node", "probe address", "web", "state", "lag ms", "out/med", "in/med", "reason"
    ));
    for (i, m) in members.iter().enumerate() {
        let name = m["node"].as_str().unwrap_or("?");
        let ratio = |x: &[f64]| match (x.first(), median) {
            (Some(b), Some(med)) if med > 0.0 => format!("{:.2}", b / med),
            _ => "-".into(),
        };
        let web = nodes.get(i).map_or(0, |n| n.web);
        let alive = nodes.get(i).is_some_and(|n| n.child.is_some());
        let state = if alive {
            m["state"].as_str().unwrap_or("?").to_string()
        } else {
            "killed".to_string()
        };
        let reason = latest_reason(v, name);
        out.push_str(&format!(
            "{i:<4} {name:<22} {web:<7} {state:<24} {:>10.2} {:>8} {:>8}  {reason}\n",
            m["arrival_lag_seconds"].as_f64().unwrap_or(f64::NAN) * 1e3,
            ratio(&bw_out[i]),
            ratio(&bw_in[i]),
        ));
        verdicts.push_str(&format!("{state} {reason}\n"));
    }
    if ports.is_some() {
        let (screen, key) = device::render(views, index_of(nodes));
        out.push_str(&screen);
        verdicts.push_str(&key);
    }
    (out, verdicts)
}

/// Sets the flag on SIGINT or SIGTERM.
fn watch_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal watcher")?;
    std::thread::spawn(move || {
        rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            stop.store(true, Ordering::SeqCst);
        });
    });
    Ok(())
}

/// Runs the demo until `--duration` or a signal, then stops every daemon.
pub fn main(a: &DemoArgs) -> anyhow::Result<()> {
    if !(2..=32).contains(&a.nodes) {
        bail!("--nodes must be 2..=32 (got {})", a.nodes);
    }
    let mut slow = parse_pairs(&a.slow, '=', "--slow", a.nodes)?;
    if let Some((n, f)) = slow
        .iter()
        .find(|(_, f)| f.is_nan() || *f <= 0.0 || *f >= 1.0)
    {
        bail!("--slow {n}={f}: FACTOR must be between 0 and 1 (exclusive)");
    }
    if slow.is_empty() && !a.healthy && a.nodes > 2 {
        slow.push((2, 0.3));
    }
    let links = parse_links(&a.bad_link, a.nodes)?;
    let kill = parse_pairs(&a.kill, '@', "--kill", a.nodes)?;
    let tors = tors::parse(a)?;
    let tor_lossy = match (&tors, a.npus) {
        (Some(t), Some(k)) => t.lossy_ports(k),
        _ => Vec::new(),
    };
    let ports = device::parse(a, a.nodes, tor_lossy)?;
    if let Some(d) = a.duration
        && (d.is_nan() || d <= 0.0)
    {
        bail!("--duration must be positive (got {d})");
    }

    let dir = std::env::temp_dir().join(format!("hcclwatch-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = dir.join("probe.key");
    let secret: String = format!(
        "{:032x}",
        std::process::id() as u128 * 0x9e37_79b9_7f4a_7c15
    );
    std::fs::write(&key, secret).with_context(|| format!("writing {}", key.display()))?;
    let exe = std::env::current_exe().context("locating the hcclwatch binary")?;
    let topology = tors.as_ref().map(|t| t.write(&dir)).transpose()?;

    let mut nodes: Vec<Node> = free_ports(2 * a.nodes)?
        .chunks_exact(2)
        .map(|p| Node {
            web: p[0],
            probe: p[1],
            child: None,
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(stop.clone())?;
    let faults = Faults {
        slow: &slow,
        links: &links,
        kill: &kill,
        ports: ports.as_ref(),
        tors: tors.as_ref().zip(topology.as_deref()),
    };
    let result = run(a, &dir, &key, &exe, &mut nodes, &faults, &stop);
    for n in &mut nodes {
        if let Some(mut c) = n.child.take() {
            // SIGTERM first so each daemon shuts down cleanly; kill only if it lingers.
            let _ = kill_process(Pid::from_child(&c), Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What the demo injects.
struct Faults<'a> {
    /// Slowed nodes and their factor.
    slow: &'a [(usize, f64)],
    /// Slowed links (both directions) and their factor.
    links: &'a [(usize, usize, f64)],
    /// Nodes to kill, and when (seconds).
    kill: &'a [(usize, f64)],
    /// With `--npus`: the fake NPU ports and their faults.
    ports: Option<&'a device::Ports>,
    /// With `--tors` (or a ToR fault): the ToRs, their faults and the topology file.
    tors: Option<(&'a tors::Tors, &'a Path)>,
}

/// Writes every node's config (and fake tool) and starts its daemon.
fn start(
    dir: &Path,
    key: &Path,
    exe: &PathBuf,
    nodes: &mut [Node],
    faults: &Faults<'_>,
) -> anyhow::Result<()> {
    let tools = match faults.ports {
        Some(p) => p.write(dir, nodes.len())?.into_iter().map(Some).collect(),
        None => (0..nodes.len()).map(|_| None).collect::<Vec<_>>(),
    };
    for (rank, tool) in tools.iter().enumerate() {
        let factor = faults
            .slow
            .iter()
            .find(|(n, _)| *n == rank)
            .map_or(1.0, |(_, f)| *f)
            * faults.tors.map_or(1.0, |(t, _)| t.factor(rank));
        let throttle = (NOMINAL_BYTES_PER_SECOND * factor) as u64;
        let cfg = config(rank, nodes, key, throttle, faults, tool.as_ref());
        let path = dir.join(format!("node{rank}.toml"));
        std::fs::write(&path, cfg).with_context(|| format!("writing {}", path.display()))?;
        let log = std::fs::File::create(dir.join(format!("node{rank}.log")))?;
        let child = Command::new(exe)
            .arg("run")
            .arg("--config.file")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {rank}"))?;
        nodes[rank].child = Some(child);
    }
    Ok(())
}

/// What the demo runs, before the live view.
fn intro(dir: &Path, nodes: &[Node], faults: &Faults<'_>) {
    println!(
        "hcclwatch demo: {} daemons; logs and configs in {}",
        nodes.len(),
        dir.display()
    );
    println!("  [health]: the shipped thresholds");
    for (i, n) in nodes.iter().enumerate() {
        let note = faults
            .slow
            .iter()
            .find(|(x, _)| *x == i)
            .map_or(String::new(), |(_, f)| {
                format!("  (slowed to {f} of nominal)")
            });
        println!("  node {i}: http://127.0.0.1:{}/metrics{note}", n.web);
    }
    for (x, y, f) in faults.links {
        println!("  link {x}-{y}: slowed to {f} of nominal, both directions");
    }
    if let Some((t, _)) = faults.tors {
        print!("{}", t.describe());
    }
    if let Some(p) = faults.ports {
        print!("{}", p.describe(nodes.len()));
    }
}

/// Kills the nodes due by `elapsed`, notes those that died, and polls every live one.
fn poll(dir: &Path, nodes: &mut [Node], kill: &[(usize, f64)], elapsed: f64) -> Vec<Option<Value>> {
    for &(n, at) in kill {
        if elapsed >= at
            && let Some(mut c) = nodes[n].child.take()
        {
            let _ = c.kill();
            let _ = c.wait();
            println!("killed node {n} at {elapsed:.1} s");
        }
    }
    let mut views = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter_mut().enumerate() {
        if let Some(c) = &mut n.child
            && let Ok(Some(status)) = c.try_wait()
        {
            n.child = None;
            // The working directory goes when the demo ends: show the log's last lines.
            let log = dir.join(format!("node{i}.log"));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "node {i} exited unexpectedly ({status}); the end of {}:\n{}",
                log.display(),
                lines[lines.len().saturating_sub(5)..].join("\n")
            );
        }
        views.push(
            n.child
                .as_ref()
                .and_then(|_| get_json(n.web, "/api/v1/state")),
        );
    }
    views
}

fn run(
    a: &DemoArgs,
    dir: &Path,
    key: &Path,
    exe: &PathBuf,
    nodes: &mut [Node],
    faults: &Faults<'_>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    start(dir, key, exe, nodes, faults)?;
    intro(dir, nodes, faults);
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut last = String::new();
    let mut views: Vec<Option<Value>> = vec![None; nodes.len()];
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        if stop.load(Ordering::SeqCst) || a.duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        // A node too busy to answer one poll keeps the view it gave half a second ago.
        for (i, v) in poll(dir, nodes, faults.kill, elapsed)
            .into_iter()
            .enumerate()
        {
            if v.is_some() || nodes[i].child.is_none() {
                views[i] = v;
            }
        }
        let (screen, verdicts) = render(nodes, &views, elapsed, faults);
        if tty {
            print!("\x1b[2J\x1b[H{screen}");
            std::io::stdout().flush()?;
        } else if verdicts != last {
            // Without a terminal, print only when a state or reason changed.
            println!("{screen}");
            std::io::stdout().flush()?;
            last = verdicts;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    if let Some(path) = &a.json_out {
        write_json(path, nodes, &views, faults, start.elapsed().as_secs_f64())?;
    }
    Ok(())
}

/// Writes every node's final state, and the port verdicts, to `path`.
fn write_json(
    path: &Path,
    nodes: &[Node],
    views: &[Option<Value>],
    faults: &Faults<'_>,
    seconds: f64,
) -> anyhow::Result<()> {
    // A node too busy to answer this one request (two cores, six daemons) still has the
    // view polled half a second ago; a dead node has none.
    let views: Vec<Option<Value>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            n.child
                .as_ref()
                .and_then(|_| get_json(n.web, "/api/v1/state"))
                .or_else(|| n.child.as_ref().and(views[i].clone()))
        })
        .collect();
    let finals: Vec<Value> = nodes
        .iter()
        .zip(&views)
        .enumerate()
        .map(|(i, (n, view))| {
            let me = view
                .as_ref()
                .and_then(|v| v["members"].as_array().and_then(|m| m.get(i)).cloned());
            let name = format!("127.0.0.1:{}", n.probe);
            serde_json::json!({
                "node": i,
                "probe_address": name,
                "web_port": n.web,
                "alive": n.child.is_some(),
                "slow_factor": faults.slow.iter().find(|(x, _)| *x == i).map(|(_, f)| *f),
                "state": me.as_ref().and_then(|m| m["state"].as_str().map(str::to_string)),
                "reason": view.as_ref().map(|v| latest_reason(v, &name)),
                "view": view,
            })
        })
        .collect();
    let ports: Vec<Value> = device::verdicts(&views, index_of(nodes))
        .iter()
        .map(device::PortVerdict::json)
        .collect();
    let doc = serde_json::json!({
        "nodes": finals,
        "health": "shipped defaults",
        "device": faults.ports.map(device::Ports::json),
        "ports": ports,
        "seconds": seconds,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("final states written to {}", path.display());
    Ok(())
}
