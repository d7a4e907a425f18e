//! The demo's device plane (`--npus K`): every node gets a fake `hccn_tool` (the workspace's
//! `fake-hccn`) with K NPU ports and RoCE addresses of its own, and all of them ping over
//! one shared fake fabric file, so the daemons' device plane judges the ports as it would
//! on a cluster. `--lossy-port` writes a port's loss into the fabric; `--down-port` takes a
//! port's link down on its node (its own pings fail with "link status is down") and in the
//! fabric (every packet to it is lost).
//!
//! The view reads the `device` section of each daemon's `/api/v1/state`: the demo judges
//! nothing itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{node_index, number};
use crate::cli::DemoArgs;

/// Most NPU ports a member may announce to the device plane.
const MAX_NPUS: usize = hcclwatch::probe::device::ports::MAX_LOCAL_PORTS;

/// The probe interval with `--npus`. The device plane's budget is packets per second per
/// NPU, at most 10/s; the shipped 4 pings per round (3 packets each way: 24 packets) fit
/// in a round only from 2.4 s up. Fewer pings per round leave too few packets in the
/// window for the shipped thresholds to tell a lossy port from the fabric.
pub const INTERVAL: &str = "2400ms";

/// NPU `npu`'s RoCE address on node `node`.
fn ip(node: usize, npu: usize) -> String {
    format!("10.20.{node}.{}", npu + 1)
}

/// The `--npus` setup: how many ports, the fake tool, and the port faults.
pub struct Ports {
    /// NPU ports per node.
    pub npus: usize,
    /// The `fake-hccn` binary the wrappers run.
    fake: PathBuf,
    /// `--lossy-port`: node, NPU, loss.
    lossy: Vec<(usize, usize, f64)>,
    /// `--down-port`: node, NPU.
    down: Vec<(usize, usize)>,
    /// The `--lossy-port` ports: a failing module, whose FCS error counter grows (the
    /// `--lossy-tor` ports lose packets in the switch, and show nothing).
    failing: Vec<(usize, usize)>,
}

/// One node's fake tool, as its config names it.
pub struct NodeTool {
    /// The wrapper script: `telemetry.hccn_tool`.
    pub tool: PathBuf,
    /// Its `hccn.conf`: `telemetry.hccn_conf`.
    pub conf: PathBuf,
}

/// `text` ("NODE:NPU"), part of option `what`'s value `item` of form `form`.
fn port_of(
    text: &str,
    (what, item, form): (&str, &str, &str),
    nodes: usize,
    npus: usize,
) -> anyhow::Result<(usize, usize)> {
    let (n, p) = text
        .split_once(':')
        .with_context(|| format!("{what} {item:?}: expected {form}"))?;
    let node = node_index(n, what, item, nodes)?;
    let npu: usize = p
        .trim()
        .parse()
        .with_context(|| format!("{what} {item:?}: {p:?} is not an NPU index"))?;
    if npu >= npus {
        bail!(
            "{what} {item:?}: NPU {npu} does not exist (with --npus {npus} the NPUs are 0..{})",
            npus - 1
        );
    }
    Ok((node, npu))
}

/// The `--npus` options, checked; `None` without `--npus`.
/// `tor_lossy` are the `--lossy-tor` ports (node, NPU, loss), before any `--lossy-port`, which
/// overrides them.
pub fn parse(
    a: &DemoArgs,
    nodes: usize,
    tor_lossy: Vec<(usize, usize, f64)>,
) -> anyhow::Result<Option<Ports>> {
    let Some(npus) = a.npus else {
        let needs = [
            ("--lossy-port", !a.lossy_port.is_empty()),
            ("--down-port", !a.down_port.is_empty()),
            ("--hccn-tool", a.hccn_tool.is_some()),
        ];
        if let Some((flag, _)) = needs.iter().find(|(_, set)| *set) {
            bail!("{flag} needs --npus K (the fake NPU ports per node)");
        }
        return Ok(None);
    };
    if !(1..=MAX_NPUS).contains(&npus) {
        bail!("--npus must be 1..={MAX_NPUS} (got {npus})");
    }
    let failing: Vec<(usize, usize, f64)> = a
        .lossy_port
        .iter()
        .map(|s| {
            let what = ("--lossy-port", s.as_str(), "NODE:NPU=LOSS");
            let (port, loss) = s
                .split_once('=')
                .with_context(|| format!("{} {s:?}: expected NODE:NPU=LOSS", what.0))?;
            let (node, npu) = port_of(port, what, nodes, npus)?;
            let loss = number(loss, what.0, s)?;
            if !(0.0..=1.0).contains(&loss) {
                bail!(
                    "{} {s:?}: LOSS must be a fraction from 0 to 1 (got {loss})",
                    what.0
                );
            }
            Ok((node, npu, loss))
        })
        .collect::<anyhow::Result<_>>()?;
    let lossy = tor_lossy.into_iter().chain(failing.clone()).collect();
    let down = a
        .down_port
        .iter()
        .map(|s| port_of(s, ("--down-port", s, "NODE:NPU"), nodes, npus))
        .collect::<anyhow::Result<_>>()?;
    Ok(Some(Ports {
        npus,
        fake: locate(a.hccn_tool.as_deref())?,
        lossy,
        down,
        failing: failing.iter().map(|&(n, p, _)| (n, p)).collect(),
    }))
}

/// The fake tool: `--hccn-tool`, else `fake-hccn` next to this executable (cargo builds
/// both into the same `target/<profile>/`).
fn locate(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!(
                "--hccn-tool {}: no such file (the fake hccn_tool binary, fake-hccn)",
                p.display()
            );
        }
        return std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    }
    let exe = std::env::current_exe().context("locating the hcclwatch binary")?;
    let bin = exe.with_file_name("fake-hccn");
    if !bin.is_file() {
        bail!(
            "--npus needs the fake hccn_tool, fake-hccn, and {} is missing: build it with \
             `cargo build -p fake-hccn` (the same profile as hcclwatch) or pass --hccn-tool PATH",
            bin.display()
        );
    }
    Ok(bin)
}

/// `s` quoted for `sh`.
fn sh_quote(s: &Path) -> String {
    format!("'{}'", s.display().to_string().replace('\'', r"'\''"))
}

impl Ports {
    fn is_down(&self, node: usize, npu: usize) -> bool {
        self.down.contains(&(node, npu))
    }

    /// The fabric every fake shares: each port's loss (the last `--lossy-port` for it) and
    /// whether it is down.
    fn fabric(&self, nodes: usize) -> Value {
        let ports: serde_json::Map<String, Value> = (0..nodes)
            .flat_map(|n| (0..self.npus).map(move |p| (n, p)))
            .map(|(n, p)| {
                let loss = self
                    .lossy
                    .iter()
                    .rev()
                    .find(|(x, y, _)| (*x, *y) == (n, p))
                    .map_or(0.0, |l| l.2);
                (
                    ip(n, p),
                    json!({ "loss": loss, "down": self.is_down(n, p) }),
                )
            })
            .collect();
        json!({ "base_rtt_ms": 0.08, "ports": ports })
    }

    /// Node `node`'s fake board: an A2 with K ports up at 200 Gb/s (down ones down).
    fn scenario(&self, node: usize) -> Value {
        let npus: Vec<Value> = (0..self.npus)
            .map(|p| {
                let mut port = json!({
                    "phy_id": p,
                    "ips": [ip(node, p)],
                    "netmask": "255.255.255.0",
                    "link": if self.is_down(node, p) { "DOWN" } else { "UP" },
                    "speed_mbps": 200_000,
                    "net_health": "Success",
                });
                if self.failing.contains(&(node, p)) {
                    port["stat_per_second"] = json!({ "mac_rx_fcs_err_pkt_num": 40 });
                }
                port
            })
            .collect();
        json!({ "board": "a2", "npus": npus })
    }

    /// Writes the shared fabric and every node's scenario, `hccn.conf` and wrapper under
    /// `dir`. The daemon runs the tool with only `PATH` and `LD_LIBRARY_PATH`, so the
    /// wrapper sets the fake's variables and `exec`s it.
    pub fn write(&self, dir: &Path, nodes: usize) -> anyhow::Result<Vec<NodeTool>> {
        use std::os::unix::fs::PermissionsExt;
        let fabric = dir.join("fabric.json");
        write(&fabric, &self.fabric(nodes).to_string())?;
        (0..nodes)
            .map(|n| {
                let d = dir.join(format!("node{n}-hccn"));
                std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
                let scenario = d.join("scenario.json");
                write(&scenario, &self.scenario(n).to_string())?;
                let conf = d.join("hccn.conf");
                let lines: String = (0..self.npus)
                    .map(|p| format!("address_{p}={}\nnetmask_{p}=255.255.255.0\n", ip(n, p)))
                    .collect();
                write(&conf, &lines)?;
                let tool = d.join("hccn_tool");
                let script = format!(
                    "#!/bin/sh\nexport FAKE_HCCN_SCENARIO={}\nexport FAKE_FABRIC={}\nexec {} \"$@\"\n",
                    sh_quote(&scenario),
                    sh_quote(&fabric),
                    sh_quote(&self.fake)
                );
                write(&tool, &script)?;
                std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("making {} executable", tool.display()))?;
                Ok(NodeTool { tool, conf })
            })
            .collect()
    }

    /// The intro lines: the ports and their faults.
    pub fn describe(&self, nodes: usize) -> String {
        let mut out = format!(
            "  NPU ports: {} per node ({} in all) on one fake fabric; probe interval {INTERVAL}\n",
            self.npus,
            self.npus * nodes
        );
        for (n, p, l) in &self.lossy {
            out.push_str(&format!("  port {n}:{p}: loses {l} of its packets\n"));
        }
        for (n, p) in &self.down {
            out.push_str(&format!("  port {n}:{p}: link down\n"));
        }
        out
    }

    /// The setup, for `--json-out`.
    pub fn json(&self) -> Value {
        json!({
            "npus": self.npus,
            "probe_interval": INTERVAL,
            "lossy_ports": self.lossy.iter()
                .map(|(n, p, l)| json!({ "node": n, "npu": p, "loss": l }))
                .collect::<Vec<_>>(),
            "down_ports": self.down.iter()
                .map(|(n, p)| json!({ "node": n, "npu": p }))
                .collect::<Vec<_>>(),
        })
    }
}

impl NodeTool {
    /// This node's `[telemetry]` keys.
    pub fn telemetry_keys(&self) -> String {
        format!(
            "hccn_tool = \"{}\"\nhccn_conf = \"{}\"\n",
            self.tool.display(),
            self.conf.display()
        )
    }
}

/// The sections a node with `npus` fake ports adds: sim chips to match the ports, the
/// device plane on every probe round, and its budget raised to the schema's largest (see
/// [`INTERVAL`]). Port readings every 15 s (a `--lossy-port`'s corrupted frames show
/// from the second pass on: its quarantine waits for them) and no optics keep the tool's
/// runs near the pings.
pub fn sections(npus: usize) -> String {
    format!(
        "[telemetry.sim]\nchips = {npus}\n[telemetry.intervals]\nports = \"15s\"\n\
         [collectors]\noptics = false\n[device_probe]\ninterval = \"{INTERVAL}\"\n\
         max_packets_per_second = 10.0\n"
    )
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// How bad a state is, for showing the worst one a port has in any daemon's view.
fn severity(state: &str) -> u8 {
    match state {
        "healthy" => 0,
        "probation" => 1,
        "suspect" => 2,
        "confirmed" => 3,
        _ => 4,
    }
}

/// A port some daemon does not judge healthy.
pub struct PortVerdict {
    /// Demo node index (`None`: a name no demo node has).
    pub node: Option<usize>,
    /// Its NPU.
    pub npu: u64,
    /// The worst state any daemon gives it.
    pub state: String,
    /// The daemons (demo indices) that do not judge it healthy.
    pub seen_by: Vec<usize>,
    /// Of how many daemons with a device view.
    pub of: usize,
    /// The evidence in the first of them: packets lost and sent in the window.
    pub lost: u64,
    /// Packets in the window.
    pub packets: u64,
    /// Window median log RTT residual.
    pub rtt_residual: Option<f64>,
    /// Its latest transition's reason.
    pub reason: String,
}

/// Every port not healthy in any of `views` (indexed by demo node), the worst first.
/// `index` maps a member name to its demo node.
pub fn verdicts(
    views: &[Option<Value>],
    index: impl Fn(&str) -> Option<usize>,
) -> Vec<PortVerdict> {
    let mut out: BTreeMap<(Option<usize>, u64), PortVerdict> = BTreeMap::new();
    let devices = views
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_ref().map(|v| (i, &v["device"])))
        .filter(|(_, d)| d.is_object());
    let mut of = 0;
    for (daemon, d) in devices {
        of += 1;
        for p in d["ports"].as_array().into_iter().flatten() {
            let state = p["state"].as_str().unwrap_or("?");
            if state == "healthy" {
                continue;
            }
            let name = p["node"].as_str().unwrap_or("");
            let npu = p["npu"].as_u64().unwrap_or(u64::MAX);
            let node = index(name);
            let v = out.entry((node, npu)).or_insert_with(|| PortVerdict {
                node,
                npu,
                state: state.to_string(),
                seen_by: Vec::new(),
                of: 0,
                lost: p["window_lost"].as_u64().unwrap_or(0),
                packets: p["window_packets"].as_u64().unwrap_or(0),
                rtt_residual: p["rtt_residual"].as_f64(),
                reason: latest_reason(d, name, npu),
            });
            if severity(state) > severity(&v.state) {
                v.state = state.to_string();
            }
            v.seen_by.push(daemon);
        }
    }
    let mut list: Vec<PortVerdict> = out.into_values().collect();
    for v in &mut list {
        v.of = of;
    }
    list.sort_by_key(|v| std::cmp::Reverse(severity(&v.state)));
    list
}

/// The reason of the port's latest transition in device view `d`.
fn latest_reason(d: &Value, node: &str, npu: u64) -> String {
    d["transitions"]
        .as_array()
        .and_then(|t| {
            t.iter()
                .rev()
                .find(|t| t["node"] == node && t["npu"] == npu)
        })
        .and_then(|t| t["reason"].as_str())
        .unwrap_or("")
        .to_string()
}

impl PortVerdict {
    fn name(&self) -> String {
        let node = self.node.map_or("?".to_string(), |n| n.to_string());
        format!("{node}:{}", self.npu)
    }

    fn loss(&self) -> String {
        if self.packets == 0 {
            return "-".into();
        }
        format!(
            "{}/{} ({:.1}%)",
            self.lost,
            self.packets,
            self.lost as f64 * 100.0 / self.packets as f64
        )
    }

    /// For `--json-out`.
    pub fn json(&self) -> Value {
        json!({
            "node": self.node,
            "npu": self.npu,
            "state": self.state,
            "seen_by": self.seen_by,
            "of": self.of,
            "window_lost": self.lost,
            "window_packets": self.packets,
            "rtt_residual": self.rtt_residual,
            "reason": self.reason,
        })
    }
}

/// The device-plane part of the screen, and what of it the non-terminal output prints on
/// (states and reasons, not the counts that change every round).
pub fn render(views: &[Option<Value>], index: impl Fn(&str) -> Option<usize>) -> (String, String) {
    let Some(d) = views
        .iter()
        .flatten()
        .map(|v| &v["device"])
        .find(|d| d.is_object())
    else {
        return (
            "NPU ports: waiting for the first device round...\n".into(),
            String::new(),
        );
    };
    let node_verdicts: Vec<String> = d["node_verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            n.as_str()
                .and_then(&index)
                .map_or("?".into(), |i| i.to_string())
        })
        .collect();
    // Each daemon's port table: they differ while a node's ports are still being found
    // (the group re-forms to learn them).
    let counts: Vec<usize> = views
        .iter()
        .flatten()
        .filter_map(|v| v["device"]["ports"].as_array().map(Vec::len))
        .collect();
    let (min, max) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    let ports = if min == max {
        format!("{min} in {} daemons' views", counts.len())
    } else {
        format!("{min}..{max} (still being learnt)")
    };
    let mut out = format!(
        "NPU ports: {ports}   device rounds: {}   device fabric degraded: {}   device node verdicts: {}\n",
        d["rounds"],
        d["fabric_degraded"],
        if node_verdicts.is_empty() {
            "none".into()
        } else {
            node_verdicts.join(" ")
        }
    );
    let mut key = format!(
        "device {ports} {} {node_verdicts:?}\n",
        d["fabric_degraded"]
    );
    let list = verdicts(views, index);
    if list.is_empty() {
        out.push_str("  every NPU port healthy\n");
    } else {
        out.push_str(&format!(
            "{:<9} {:<24} {:>7} {:>20} {:>10}  {}\n",
            "port", "state", "daemons", "window loss", "rtt resid", "reason"
        ));
    }
    for v in &list {
        let seen = format!("{}/{}", v.seen_by.len(), v.of);
        out.push_str(&format!(
            "port {:<4} {:<24} {seen:>7} {:>20} {:>10}  {}\n",
            v.name(),
            v.state,
            v.loss(),
            v.rtt_residual.map_or("-".into(), |r| format!("{r:.3}")),
            v.reason
        ));
        key.push_str(&format!("{} {} {seen} {}\n", v.name(), v.state, v.reason));
    }
    (out, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(down: Vec<(usize, usize)>, lossy: Vec<(usize, usize, f64)>) -> Ports {
        Ports {
            npus: 4,
            fake: PathBuf::from("/x/fake-hccn"),
            failing: lossy.iter().map(|&(n, p, _)| (n, p)).collect(),
            lossy,
            down,
        }
    }

    #[test]
    fn a_down_port_is_down_on_its_node_and_in_the_fabric() {
        let p = ports(vec![(4, 3)], vec![(2, 1, 0.2)]);
        let npus = p.scenario(4);
        let links: Vec<&str> = npus["npus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["link"].as_str().unwrap())
            .collect();
        assert_eq!(links, ["UP", "UP", "UP", "DOWN"]);
        assert_eq!(npus["npus"][3]["ips"][0], "10.20.4.4");
        let f = p.fabric(6);
        let all = f["ports"].as_object().unwrap();
        assert_eq!(all.len(), 24);
        assert_eq!(f["ports"]["10.20.4.4"]["down"], true);
        assert_eq!(f["ports"]["10.20.2.2"]["loss"], 0.2);
        // The lossy port's own counters show a failing module; no other port's do.
        let failing = &p.scenario(2)["npus"][1];
        assert!(failing["stat_per_second"]["mac_rx_fcs_err_pkt_num"].as_u64() > Some(0));
        for (node, npu) in [(2, 0), (4, 1), (4, 3)] {
            assert!(
                p.scenario(node)["npus"][npu]
                    .get("stat_per_second")
                    .is_none()
            );
        }
        let other = all
            .iter()
            .filter(|(ip, _)| *ip != "10.20.4.4" && *ip != "10.20.2.2");
        for (ip, v) in other {
            assert_eq!(v["down"], false, "{ip}");
            assert_eq!(v["loss"], 0.0, "{ip}");
        }
    }
}
