//! The node scenario: which NPUs exist and what the tool says about each. Read from the
//! file named by `FAKE_HCCN_SCENARIO` on every run (README.md has the format).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

/// The board, as far as it changes the tool's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Board {
    /// Atlas 800T A2 and other 910B boards: no `-hccs_ping`.
    #[default]
    A2,
    /// Atlas 900 A3 SuperPoD, A+K, A+X: `-hccs_ping` allowed.
    A3,
    /// Atlas 9000 A3 SuperPoD: `-hccs_ping` allowed, `-optical` refused, IPv6 ping
    /// refused, one `-ip -g` pair per link.
    #[serde(rename = "a3_9000")]
    A39000,
}

/// `UP` or `DOWN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum LinkState {
    /// Link up.
    #[default]
    #[serde(rename = "UP")]
    Up,
    /// Link down.
    #[serde(rename = "DOWN")]
    Down,
}

/// One record of the link history.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// Unix seconds; printed as the node's local time.
    pub at: i64,
    /// The new state.
    pub state: LinkState,
}

/// `-link_stat -g`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LinkStat {
    /// `link up count`.
    pub up_count: u64,
    /// `link down count`.
    pub down_count: u64,
    /// Print no `link down count` line, as older drivers do.
    pub old_format: bool,
    /// Records, newest first (the tool prints at most ten).
    pub changes: Vec<Change>,
}

/// A temperature: `45` prints `45 C`; a string (`NA`, `not supported`, `get failed`)
/// prints as is.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Temperature {
    /// °C.
    Celsius(i64),
    /// The tool's text for an unreadable value.
    Text(String),
}

impl Default for Temperature {
    fn default() -> Self {
        Temperature::Celsius(45)
    }
}

fn yes() -> bool {
    true
}

fn vendor() -> String {
    "HUAWEI".into()
}

fn identifier() -> String {
    "QSFP28 or later".into()
}

/// `-optical -g`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Optical {
    /// A module is plugged in (`false` prints `not present`).
    #[serde(default = "yes")]
    pub present: bool,
    /// Module temperature.
    #[serde(default)]
    pub temperature: Temperature,
    /// Supply voltage, mV; `null` or 0 prints the `NA` block.
    #[serde(default)]
    pub vcc_mv: Option<f64>,
    /// Transmit power per lane 0..3, mW; `null` prints `NA`.
    #[serde(default)]
    pub tx_power_mw: Vec<Option<f64>>,
    /// Receive power per lane 0..3, mW; `null` prints `NA`.
    #[serde(default)]
    pub rx_power_mw: Vec<Option<f64>>,
    /// `vendor name`.
    #[serde(default = "vendor")]
    pub vendor_name: String,
    /// `xsfp identifier`.
    #[serde(default = "identifier")]
    pub identifier: String,
}

/// A forced answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// stdout `hccn_tool is busy, please try again.`, exit 11.
    Busy,
    /// stderr `Get lock failed. Please try again.`, exit 25.
    LockFailed,
    /// stderr `The device is occupied. Please try again later.`, exit 31.
    Occupied,
    /// stdout `The command is not supported on this product.`, exit 13.
    NotSupported,
    /// stderr `Command execute failed!`, exit 1.
    Fail,
    /// stderr `Execute failed: Link status is down.`, exit 22.
    LinkDown,
    /// `not_ready_delay_ms`, then stderr `Get device health status failed!`, exit 3.
    NotReady,
    /// Sleeps `hang_ms` (default one hour).
    Hang,
    /// `flood_bytes` (default 1 MiB) of output on stdout, exit 0.
    Flood,
}

/// How one command misbehaves.
#[derive(Debug, Clone, Copy, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Behaviour {
    /// The forced answer; without one, only `delay_ms` applies (a slow answer).
    pub mode: Option<Mode>,
    /// Sleep before answering.
    pub delay_ms: Option<u64>,
    /// Apply only to the first N runs of the same argv (counted in `FAKE_HCCN_LOG`;
    /// without a log, always).
    pub times: Option<usize>,
    /// For `hang`.
    pub hang_ms: Option<u64>,
    /// For `flood`.
    pub flood_bytes: Option<usize>,
}

fn mask() -> Ipv4Addr {
    Ipv4Addr::new(255, 255, 255, 0)
}

fn speed() -> Option<u64> {
    Some(200_000)
}

fn success() -> String {
    "Success".into()
}

/// One NPU (one RoCE port).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Npu {
    /// Physical id, the `-i` argument.
    pub phy_id: u32,
    /// RoCE IPv4 addresses (one per link on Atlas 9000 A3); none: `-ip -g` answers
    /// `Get ipconf failed, because no ip was preset there!` and pings fail.
    #[serde(default)]
    pub ips: Vec<Ipv4Addr>,
    /// Netmask printed with every address.
    #[serde(default = "mask")]
    pub netmask: Ipv4Addr,
    /// A3 vNIC address; none: `-vnic -g` fails.
    #[serde(default)]
    pub vnic_ip: Option<Ipv4Addr>,
    /// `-link -g`.
    #[serde(default)]
    pub link: LinkState,
    /// Mb/s; `null` prints `Speed: Unknown!`. Default 200000.
    #[serde(default = "speed")]
    pub speed_mbps: Option<u64>,
    /// `-link_stat -g`.
    #[serde(default)]
    pub link_stat: LinkStat,
    /// `-net_health -g` text (`Success`, `Socket fail`, … `Unknown`).
    #[serde(default = "success")]
    pub net_health: String,
    /// `-optical -g`; absent: `Optical module is not present.`, exit 20.
    #[serde(default)]
    pub optical: Option<Optical>,
    /// `-stat -g` counters by key; unlisted keys print 0.
    #[serde(default)]
    pub stat: BTreeMap<String, u64>,
    /// `-stat -g` counters that keep growing: this many a second (each run prints its
    /// `stat` value plus this rate times the Unix time in whole seconds).
    #[serde(default)]
    pub stat_per_second: BTreeMap<String, u64>,
    /// Every command waits `not_ready_delay_ms`, then fails as a device that never
    /// became ready.
    #[serde(default)]
    pub not_ready: bool,
    /// Sleep before every normal answer (slow answers).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Per command (`link`, `speed`, `link_stat`, `net_health`, `ip`, `vnic`,
    /// `optical`, `stat`, `ping`, `hccs_ping`).
    #[serde(default)]
    pub behaviours: BTreeMap<String, Behaviour>,
}

fn five_minutes() -> u64 {
    300_000
}

/// The node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The board.
    #[serde(default)]
    pub board: Board,
    /// The NPUs.
    pub npus: Vec<Npu>,
    /// Behaviours for every NPU (an NPU's own come first).
    #[serde(default)]
    pub behaviours: BTreeMap<String, Behaviour>,
    /// How long a not-ready device makes the tool wait (the real tool: about 300 s).
    #[serde(default = "five_minutes")]
    pub not_ready_delay_ms: u64,
    /// Sleep before every normal answer, all NPUs.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Extra wait per lost ping packet (the device's per-packet timeout).
    #[serde(default)]
    pub ping_timeout_ms: u64,
}

/// The `-stat -g` keys, in the tool's order.
pub const STAT_KEYS: [&str; 48] = [
    "mac_tx_mac_pause_num",
    "mac_rx_mac_pause_num",
    "mac_tx_pfc_pkt_num",
    "mac_tx_pfc_pri0_pkt_num",
    "mac_tx_pfc_pri1_pkt_num",
    "mac_tx_pfc_pri2_pkt_num",
    "mac_tx_pfc_pri3_pkt_num",
    "mac_tx_pfc_pri4_pkt_num",
    "mac_tx_pfc_pri5_pkt_num",
    "mac_tx_pfc_pri6_pkt_num",
    "mac_tx_pfc_pri7_pkt_num",
    "mac_rx_pfc_pkt_num",
    "mac_rx_pfc_pri0_pkt_num",
    "mac_rx_pfc_pri1_pkt_num",
    "mac_rx_pfc_pri2_pkt_num",
    "mac_rx_pfc_pri3_pkt_num",
    "mac_rx_pfc_pri4_pkt_num",
    "mac_rx_pfc_pri5_pkt_num",
    "mac_rx_pfc_pri6_pkt_num",
    "mac_rx_pfc_pri7_pkt_num",
    "mac_tx_total_pkt_num",
    "mac_tx_total_oct_num",
    "mac_tx_bad_pkt_num",
    "mac_tx_bad_oct_num",
    "mac_rx_total_pkt_num",
    "mac_rx_total_oct_num",
    "mac_rx_bad_pkt_num",
    "mac_rx_bad_oct_num",
    "mac_rx_fcs_err_pkt_num",
    "roce_rx_rc_pkt_num",
    "roce_rx_all_pkt_num",
    "roce_rx_err_pkt_num",
    "roce_tx_rc_pkt_num",
    "roce_tx_all_pkt_num",
    "roce_tx_err_pkt_num",
    "roce_cqe_num",
    "roce_rx_cnp_pkt_num",
    "roce_tx_cnp_pkt_num",
    "roce_unexpected_ack_num",
    "roce_out_of_order_num",
    "roce_verification_err_num",
    "roce_qp_status_err_num",
    "roce_new_pkt_rty_num",
    "roce_ecn_db_num",
    "nic_tx_all_pkg_num",
    "nic_tx_all_oct_num",
    "nic_rx_all_pkg_num",
    "nic_rx_all_oct_num",
];

const COMMAND_NAMES: &[&str] = &[
    "link",
    "speed",
    "link_stat",
    "net_health",
    "ip",
    "vnic",
    "optical",
    "stat",
    "ping",
    "hccs_ping",
];

impl Scenario {
    /// Reads and checks the scenario named by `FAKE_HCCN_SCENARIO`.
    pub fn load() -> Result<Scenario, String> {
        let path = std::env::var_os("FAKE_HCCN_SCENARIO")
            .ok_or("FAKE_HCCN_SCENARIO is not set (hcclwatch clears the environment: run the fake through a wrapper script that sets it)")?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.to_string_lossy()))?;
        let s: Scenario =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.to_string_lossy()))?;
        s.check()?;
        Ok(s)
    }

    fn check(&self) -> Result<(), String> {
        let mut names: Vec<&String> = self.behaviours.keys().collect();
        for n in &self.npus {
            names.extend(n.behaviours.keys());
            let mut keys = n.stat.keys().chain(n.stat_per_second.keys());
            if let Some(k) = keys.find(|k| !STAT_KEYS.contains(&k.as_str())) {
                return Err(format!("npu {}: unknown -stat key {k}", n.phy_id));
            }
            if self.npus.iter().filter(|m| m.phy_id == n.phy_id).count() > 1 {
                return Err(format!("phy_id {} is listed twice", n.phy_id));
            }
        }
        if let Some(n) = names.iter().find(|n| !COMMAND_NAMES.contains(&n.as_str())) {
            return Err(format!(
                "unknown command {n:?} in behaviours (one of {})",
                COMMAND_NAMES.join(", ")
            ));
        }
        Ok(())
    }
}
