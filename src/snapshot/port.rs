//! What `hccn_tool` reports about each NPU's network port and optical module, in SI
//! units, plus the tool's own call statistics.
//!
//! Keyed by physical NPU id (the `-i` argument of `hccn_tool` and the `npu` label). As in
//! the NPU part, every reading is an `Option` or a collection that may be empty: a reading
//! that failed, timed out or is not supported on the product is absent and its series is
//! omitted, never replaced by a sentinel.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use super::histogram::Histogram;
use super::status::CollectorStatus;

/// Bucket bounds, in seconds, for `hccn_tool` call durations: 10 ms to 300 s. A healthy
/// query returns in tens of milliseconds; a ping takes about a second; a device that is
/// not ready makes the tool wait up to about five minutes before it gives up.
pub const HCCN_CALL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The port's network-health result (`-net_health -g`), in the numbering of DCMI's
/// `dcmi_rdfx_detect_result`, which the tool's table follows (0 `Success` … 8
/// `Detect ip set`). The tool's tenth value, `Unknown`, is not a reading and has no code.
pub type NetHealthCode = u32;

/// The counter keys of `-stat -g`, in the order the 910B/A3 tool prints them (the same
/// 48 counters as DCMI's `struct dcmi_network_pkt_stats_info`, under the tool's names).
/// The parser takes whatever keys the tool prints; the tests print every one of these.
#[cfg(test)]
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

/// The `-stat -g` keys DCMI's `dcmi_get_netdev_pkt_stats_info` already provides (as the
/// NPU part's packet counters): [`PortReadings::counters`] keeps them (the device prober
/// reads them), but the port exporters show only the others.
#[cfg(test)]
pub const STAT_KEYS_READ_THROUGH_DCMI: [&str; 15] = [
    "mac_tx_mac_pause_num",
    "mac_rx_mac_pause_num",
    "mac_tx_pfc_pkt_num",
    "mac_rx_pfc_pkt_num",
    "mac_tx_bad_pkt_num",
    "mac_rx_bad_pkt_num",
    "mac_rx_fcs_err_pkt_num",
    "roce_rx_all_pkt_num",
    "roce_tx_all_pkt_num",
    "roce_rx_err_pkt_num",
    "roce_tx_err_pkt_num",
    "roce_rx_cnp_pkt_num",
    "roce_tx_cnp_pkt_num",
    "roce_new_pkt_rty_num",
    "roce_ecn_db_num",
];

/// One entry of the port's link history (`-link_stat -g`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkChange {
    /// When it happened, Unix seconds (the tool prints the node's local time).
    pub at_unix_seconds: f64,
    /// `LINK UP` (true) or `LINK DOWN` (false).
    pub up: bool,
}

/// The port's link statistics (`-link_stat -g`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkStat {
    /// Link-up events the driver counted.
    pub up_count: u64,
    /// Link-down events; older drivers do not print this line.
    pub down_count: Option<u64>,
    /// The recorded changes, newest first (the driver keeps at most ten). Empty when the
    /// tool printed `NA`.
    pub changes: Vec<LinkChange>,
}

impl LinkStat {
    /// Unix time of the newest recorded link change, if any is recorded.
    pub fn last_change_unix_seconds(&self) -> Option<f64> {
        self.changes.first().map(|c| c.at_unix_seconds)
    }
}

/// Optical module readings (`-optical -g`), converted to SI units.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Optics {
    /// A module is plugged in.
    pub present: bool,
    /// Module temperature, °C.
    pub temperature_celsius: Option<f64>,
    /// Supply voltage, V (the tool prints mV).
    pub voltage_volts: Option<f64>,
    /// Transmit power per lane, W (the tool prints mW); lanes the tool printed as `NA`
    /// are absent.
    pub tx_power_watts: BTreeMap<u32, f64>,
    /// Receive power per lane, W.
    pub rx_power_watts: BTreeMap<u32, f64>,
}

/// Where a device IP was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpSource {
    /// `hccn_tool -i <phy> -ip -g`, what the device has configured.
    HccnTool,
    /// `address_<phy>` in `/etc/hccn.conf`, what was configured last (the tool could not
    /// be asked, or the device reported no IP).
    HccnConf,
}

impl IpSource {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            IpSource::HccnTool => "hccn_tool",
            IpSource::HccnConf => "hccn_conf",
        }
    }
}

/// Everything `hccn_tool` told about one NPU port.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PortReadings {
    /// `link status: UP` (true) or `DOWN`.
    pub link_up: Option<bool>,
    /// Port speed, bits/s (the tool prints Mb/s); absent when the tool says `Unknown!`.
    pub speed_bits_per_second: Option<f64>,
    /// Link-up/down counters and the change history.
    pub link_stat: Option<LinkStat>,
    /// Network-health result code; see [`NetHealthCode`].
    pub net_health: Option<NetHealthCode>,
    /// The port's RoCE IPv4 addresses (one on most boards, several on Atlas 9000 A3),
    /// first the primary one. Empty when neither the tool nor `hccn.conf` has one.
    pub device_ips: Vec<Ipv4Addr>,
    /// Where `device_ips` came from.
    pub ip_source: Option<IpSource>,
    /// The A3 vNIC (HCCS) IPv4 address (`-vnic -g`), where the product has one.
    pub vnic_ip: Option<Ipv4Addr>,
    /// Optical module.
    pub optics: Option<Optics>,
    /// The `-stat -g` counters, by the tool's key name (e.g. `mac_tx_pfc_pri3_pkt_num`),
    /// those DCMI also gives among them.
    pub counters: Option<BTreeMap<String, u64>>,
}

/// The port part of the snapshot: what the port and optics poller last published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortSnapshot {
    /// Ports by physical NPU id.
    pub ports: BTreeMap<u32, PortReadings>,
    /// `npu_ports` and `npu_optics` collector status.
    pub collectors: BTreeMap<String, CollectorStatus>,
}

/// The result of one `hccn_tool -ping`: three packets from an NPU port to an IP.
///
/// `rtts[i]` is the round trip of packet `i` in seconds (the tool prints ms), `None` when
/// it timed out. `sent` and `received` come from the tool's summary line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PingReply {
    /// Packets transmitted.
    pub sent: u32,
    /// Packets that came back.
    pub received: u32,
    /// Per-packet round trip, seconds, by sequence number; `None` for a lost packet.
    pub rtts: Vec<Option<f64>>,
}

impl PingReply {
    /// Lost packets.
    pub fn lost(&self) -> u32 {
        self.sent.saturating_sub(self.received)
    }
}

/// `hccn_tool` call statistics, exported as `hcclwatch_hccn_*`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HccnCallStats {
    /// Tool runs (and calls refused before a run) by (command, result).
    pub calls: BTreeMap<(&'static str, &'static str), u64>,
    /// Run durations by command.
    pub durations: BTreeMap<&'static str, Histogram>,
    /// (command, NPU) pairs the product does not support; never called again.
    pub unsupported: BTreeSet<(&'static str, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_change_is_the_newest_record() {
        let s = LinkStat {
            up_count: 2,
            down_count: Some(1),
            changes: vec![
                LinkChange {
                    at_unix_seconds: 30.0,
                    up: true,
                },
                LinkChange {
                    at_unix_seconds: 20.0,
                    up: false,
                },
            ],
        };
        assert_eq!(s.last_change_unix_seconds(), Some(30.0));
        assert_eq!(LinkStat::default().last_change_unix_seconds(), None);
    }

    #[test]
    fn dcmi_keys_are_tool_keys() {
        for k in STAT_KEYS_READ_THROUGH_DCMI {
            assert!(STAT_KEYS.contains(&k), "{k}");
        }
        let mut all = STAT_KEYS.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), STAT_KEYS.len());
    }

    #[test]
    fn lost_packets() {
        let r = PingReply {
            sent: 3,
            received: 1,
            rtts: vec![None, Some(1e-4), None],
        };
        assert_eq!(r.lost(), 2);
    }
}
