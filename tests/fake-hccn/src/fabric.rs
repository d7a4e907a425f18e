//! Pings over the fabric file shared by every fake node of a test (`FAKE_FABRIC`), so
//! that pings between fake nodes agree: `-ping` (RoCE, every board) and `-hccs_ping`
//! (A3 boards only).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde::Deserialize;

use crate::scenario::{Board, LinkState, Npu, Scenario};
use crate::{Outcome, param_error};

fn base_rtt() -> f64 {
    0.08
}

/// One NPU port of the test, by its IP.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Port {
    /// Probability that a packet through this port is lost.
    pub loss: f64,
    /// Added round trip, ms.
    pub added_rtt_ms: f64,
    /// Every packet through this port is lost.
    pub down: bool,
}

/// A pair of ports with a fault of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Loss probability between them.
    #[serde(default)]
    pub loss: f64,
    /// Added round trip, ms.
    #[serde(default)]
    pub added_rtt_ms: f64,
}

/// The fabric file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    /// Round trip of a healthy pair, ms.
    #[serde(default = "base_rtt")]
    pub base_rtt_ms: f64,
    /// Ports by IP.
    #[serde(default)]
    pub ports: BTreeMap<String, Port>,
    /// Pair faults.
    #[serde(default)]
    pub pairs: Vec<Pair>,
}

impl Fabric {
    /// The file named by `FAKE_FABRIC`; without one, an empty fabric (every packet is
    /// lost: no destination is known).
    fn load() -> Result<Fabric, String> {
        let Some(path) = std::env::var_os("FAKE_FABRIC") else {
            return Ok(Fabric {
                base_rtt_ms: base_rtt(),
                ports: BTreeMap::new(),
                pairs: Vec::new(),
            });
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.to_string_lossy()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.to_string_lossy()))
    }

    /// One packet from `src` to `dst`: its round trip in ms, or `None` when lost.
    fn packet(&self, src: &str, dst: &str, rng: &mut Rng) -> Option<f64> {
        let d = self.ports.get(dst)?;
        let s = self.ports.get(src).copied().unwrap_or_default();
        if s.down || d.down {
            return None;
        }
        let pair = self
            .pairs
            .iter()
            .find(|p| (p.a == src && p.b == dst) || (p.a == dst && p.b == src));
        let (pl, pa) = pair.map_or((0.0, 0.0), |p| (p.loss, p.added_rtt_ms));
        let keep = (1.0 - s.loss) * (1.0 - d.loss) * (1.0 - pl);
        if rng.unit() >= keep {
            return None;
        }
        let rtt = self.base_rtt_ms + s.added_rtt_ms + d.added_rtt_ms + pa;
        Some(rtt * (1.0 + (rng.unit() - 0.5) * 0.2))
    }
}

/// xorshift64*, seeded from the clock and the pid: each run draws its own packets.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng((t ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The parsed `-ping` sub-arguments.
struct PingArgs {
    inet6: bool,
    address: String,
}

fn invalid(cmd: &str) -> Outcome {
    param_error(cmd, "Get invalid parameters!", 1)
}

/// Checks the `-ping` sub-arguments as the tool does: optional `-inet6` first, then `-g`
/// and `address|ipv6_address|pkt` pairs in any order, 3..5 of them after `-inet6`.
fn ping_args(sub: &[String], board: Board) -> Result<PingArgs, Outcome> {
    let inet6 = sub.first().is_some_and(|a| a == "-inet6");
    let sub = if inet6 { &sub[1..] } else { sub };
    if !(3..=5).contains(&sub.len()) {
        return Err(param_error(
            "-ping",
            "The total count of input parameters is wrong!",
            4,
        ));
    }
    if sub[0] != "-g" {
        return Err(param_error("-ping", "Get unknown option!", 3));
    }
    let pairs = &sub[1..];
    if !pairs.len().is_multiple_of(2) {
        return Err(invalid("-ping"));
    }
    let mut address = None;
    for kv in pairs.chunks(2) {
        let (k, v) = (kv[0].as_str(), kv[1].as_str());
        match k {
            "pkt" => {
                let ok = !v.is_empty()
                    && v.bytes().all(|b| b.is_ascii_digit())
                    && v.parse::<u32>().is_ok_and(|n| n <= 65535 - 20 - 8);
                if !ok {
                    return Err(invalid("-ping"));
                }
            }
            "address" | "ipv6_address" => {
                if (k == "address") == inet6 {
                    return Err(invalid("-ping"));
                }
                let valid = if inet6 {
                    v.parse::<Ipv6Addr>().is_ok()
                } else {
                    v.parse::<Ipv4Addr>().is_ok()
                };
                if !valid {
                    return Err(Outcome::err("The ip address you configured is invalid!", 6));
                }
                address = Some(v.to_string());
            }
            _ => return Err(param_error("-ping", "Get unknown option!", 3)),
        }
    }
    if inet6 && board == Board::A39000 {
        return Err(Outcome::out("This device does not support IPV6!", 23));
    }
    let address = address.ok_or_else(|| invalid("-ping"))?;
    Ok(PingArgs { inet6, address })
}

/// `-ping`: three packets; exit 0 only when all three came back, otherwise the full text
/// on stdout and `Command execute failed!` on stderr, exit 1.
pub fn ping(npu: &Npu, scen: &Scenario, sub: &[String]) -> Outcome {
    let args = match ping_args(sub, scen.board) {
        Ok(a) => a,
        Err(o) => return o,
    };
    let Some(src) = npu.ips.first() else {
        return Outcome::err("Command execute failed!", 1);
    };
    if npu.link == LinkState::Down {
        return Outcome::err("Execute failed: Link status is down.", 22);
    }
    let fabric = match Fabric::load() {
        Ok(f) => f,
        Err(e) => return Outcome::err(&format!("fake-hccn: {e}\nCommand execute failed!"), 1),
    };
    let mut rng = Rng::new();
    let kind = if args.inet6 { "PING6" } else { "PING" };
    let mut out = format!("device {} {kind} {}\n", npu.phy_id, args.address);
    let mut received = 0;
    let mut waited = 0.0;
    for seq in 0..3 {
        match fabric.packet(&src.to_string(), &args.address, &mut rng) {
            Some(ms) => {
                received += 1;
                waited += ms;
                out.push_str(&format!("recv seq={seq},time={ms:.6}ms\n"));
            }
            None => {
                waited += scen.ping_timeout_ms as f64;
                out.push_str(&format!("recv time out seq={seq}\n"));
            }
        }
    }
    let loss = f64::from(3 - received) * 100.0 / 3.0;
    out.push_str(&format!(
        "3 packets transmitted, {received} received, {loss:.2}% packet loss\n\n"
    ));
    std::thread::sleep(Duration::from_secs_f64(waited / 1e3));
    Outcome {
        stdout: out,
        stderr: if received == 3 {
            String::new()
        } else {
            "Command execute failed!\n".into()
        },
        code: if received == 3 { 0 } else { 1 },
    }
}

/// Microseconds as the tool prints them: `%ld.%03ldus`.
fn us(ms: f64) -> String {
    let ns = (ms * 1e6).round() as i64;
    format!("{}.{:03}us", ns / 1000, ns % 1000)
}

/// `-hccs_ping` sub-arguments: `-g`, then `address|sdid|pkt|cnt|interval|timeout` pairs;
/// returns (address, count).
fn hccs_args(sub: &[String]) -> Result<(String, u32), Outcome> {
    if !(3..=11).contains(&sub.len()) || sub[0] != "-g" || sub.len().is_multiple_of(2) {
        return Err(param_error(
            "-hccs_ping",
            "The total count of input parameters is wrong!",
            4,
        ));
    }
    let mut address = None;
    let mut cnt = 3;
    for kv in sub[1..].chunks(2) {
        let (k, v) = (kv[0].as_str(), kv[1].as_str());
        let n = v.parse::<u32>().ok();
        match (k, n) {
            ("address", _) => match v.parse::<Ipv4Addr>() {
                Ok(a) if a.octets()[0] == 192 => address = Some(v.to_string()),
                _ => return Err(Outcome::err("The ip address you configured is invalid!", 6)),
            },
            ("sdid", Some(_)) => address = Some(v.to_string()),
            ("cnt", Some(c)) if (1..=1000).contains(&c) => cnt = c,
            ("pkt", Some(p)) if (1792..=3000).contains(&p) => {}
            ("interval", Some(i)) if i <= 10 => {}
            ("timeout", Some(t)) if (1..=20000).contains(&t) => {}
            ("sdid" | "cnt" | "pkt" | "interval" | "timeout", _) => {
                return Err(invalid("-hccs_ping"));
            }
            _ => return Err(param_error("-hccs_ping", "Get unknown option!", 3)),
        }
    }
    let address = address.ok_or_else(|| invalid("-hccs_ping"))?;
    Ok((address, cnt))
}

/// `-hccs_ping`: refused on boards without HCCS (`not supported`, stdout, exit 13); on A3
/// boards the device task's report between vNIC addresses, times in µs.
pub fn hccs_ping(npu: &Npu, scen: &Scenario, sub: &[String]) -> Outcome {
    if scen.board == Board::A2 {
        return Outcome::out("The command is not supported on this product.", 13);
    }
    let (address, cnt) = match hccs_args(sub) {
        Ok(a) => a,
        Err(o) => return o,
    };
    let fabric = match Fabric::load() {
        Ok(f) => f,
        Err(e) => return Outcome::err(&format!("fake-hccn: {e}\nCommand execute failed!"), 1),
    };
    let src = npu.vnic_ip.map(|v| v.to_string()).unwrap_or_default();
    let mut rng = Rng::new();
    let mut out = format!("device {} PING {address}\n\n", npu.phy_id);
    let mut times = Vec::new();
    for seq in 0..cnt {
        let r = fabric.packet(&src, &address, &mut rng);
        out.push_str(if r.is_some() {
            "This pkt ping success!\n"
        } else {
            "This pkt check recv msg fail!\n"
        });
        let t = r.unwrap_or(0.0);
        out.push_str(&format!(
            "recv seq {seq}, time = {}, L1 plane check result = 0x0\n\n",
            us(t)
        ));
        if let Some(t) = r {
            times.push(t);
        }
    }
    times.sort_by(f64::total_cmp);
    let received = times.len() as u32;
    let loss = f64::from(cnt - received) * 100.0 / f64::from(cnt);
    let avg = if times.is_empty() {
        0.0
    } else {
        times.iter().sum::<f64>() / times.len() as f64
    };
    let p95 = times
        .get((times.len() * 95).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(0.0);
    out.push_str(&format!(
        "{cnt} packets transmitted, {received} received, {loss:.2}% packets loss\n"
    ));
    out.push_str(&format!(
        "max time {}\n",
        us(times.last().copied().unwrap_or(0.0))
    ));
    out.push_str(&format!(
        "min time {}\n",
        us(times.first().copied().unwrap_or(0.0))
    ));
    out.push_str(&format!("average time {}\n", us(avg)));
    out.push_str(&format!("TP95 time {}\n", us(p95)));
    // The tool polls the device task once a second before it prints.
    std::thread::sleep(Duration::from_secs(1));
    Outcome::ok(out)
}
