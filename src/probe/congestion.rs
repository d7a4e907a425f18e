//! This node's own uplink: did the interface the probes use show congestion since the last
//! round?
//!
//! Probes alone cannot tell steady congestion on a node's uplink (a checkpoint burst, a
//! busy job sharing the NIC) from a slow component, except by how long it lasts. So each
//! member reads its own uplink once per round and tells the group; the health engine holds
//! a congested node longer before it escalates. Two signals, either one makes the round
//! congested:
//!
//! - **other traffic near line rate**: the growth of the interface's `rx_bytes` and
//!   `tx_bytes` (sysfs `class/net/<if>/statistics/`) since the last read, minus this
//!   member's own probe bytes, divided by the elapsed time × the line rate, in either
//!   direction, at or above the busy ratio. The line rate is configured, or read from
//!   `class/net/<if>/speed` (Mb/s); when it is unknown (missing, unreadable, 0 or negative,
//!   as on many virtual interfaces) this signal is off.
//! - **congestion-marked packets**: the growth of `IpExt: InCEPkts` in procfs
//!   `net/netstat` since the last read, at or above a packet count. This counter is
//!   host-wide (the network namespace's), not the interface's.
//!
//! A read that fails (a missing file, text that does not parse, a counter that went
//! backwards after a reset, a wrap or a renamed interface) turns that signal off for the
//! round: the round is not congested on its account, no value is invented. The failure is
//! counted and logged (rate limited) and the daemon goes on. Every read is bounded in size
//! and time (see [`crate::config::file::read_regular_within`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::hardware::HardwareReader;
use crate::collective::bootstrap::env::Iface;
use crate::config::file::{FileError, read_regular_within};
use crate::health::hardware::Signs;

/// Largest sysfs attribute read (a counter or the link speed is one short line; sysfs
/// reports every attribute as 4096 bytes long).
pub(super) const SYSFS_LIMIT: u64 = 4096;
/// Largest `net/netstat` read (about 3 KiB on current kernels).
const NETSTAT_LIMIT: u64 = 64 << 10;
/// How long one read may take: sysfs and procfs answer from memory, so anything slower is
/// a wrong root (a network mount), and the prober must not wait on it.
const READ_DEADLINE: Duration = Duration::from_secs(1);
/// Read failures are logged at most once per this period (the rest are counted).
const LOG_EVERY: Duration = Duration::from_secs(60);

/// What the reader is configured to do (`probe.congestion_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct CongestionSettings {
    /// Read the uplink at all.
    pub enabled: bool,
    /// The interface whose byte counters are read; empty: the one that holds the local
    /// address the probes use.
    pub interface: String,
    /// Other traffic at or above this fraction of the line rate is congestion.
    pub busy_ratio: f64,
    /// The line rate in bits per second; 0 reads `speed` from sysfs.
    pub line_rate: u64,
    /// Congestion-marked packets since the last read at or above this are congestion
    /// (0: this signal off).
    pub ce_packets: u64,
    /// Where sysfs is (`/sys`; a fake tree in tests).
    pub sysfs_root: PathBuf,
    /// Where procfs is (`/proc`; a fake tree in tests).
    pub procfs_root: PathBuf,
    /// A marked-packet count over a longer gap than this (probing paused, the group
    /// re-forming) is not a round's: it only sets a new baseline.
    pub ce_max_gap: Duration,
}

impl Default for CongestionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            interface: String::new(),
            busy_ratio: 0.5,
            line_rate: 0,
            ce_packets: 100,
            sysfs_root: "/sys".into(),
            procfs_root: "/proc".into(),
            ce_max_gap: Duration::from_secs(30),
        }
    }
}

/// Why a signal could not be read this round.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read (missing, not a regular file, too large, too slow).
    #[error(transparent)]
    File(#[from] FileError),
    /// The text is not what the kernel writes there.
    #[error("{}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The netstat file is not laid out as the kernel writes it.
    #[error(
        "{}: {source} (a kernel without IpExt InCEPkts: set probe.congestion_ce_packets = 0 to turn the signal off)",
        path.display()
    )]
    Netstat {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: NetstatError,
    },
    /// A cumulative counter is lower than at the last read.
    #[error(
        "{}: counter went backwards from {before} to {now} (a reset, a wrap or a renamed interface)",
        path.display()
    )]
    Backwards {
        /// The file.
        path: PathBuf,
        /// The value at the last read.
        before: u64,
        /// The value now.
        now: u64,
    },
}

impl ReadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::File(e) => match e {
                FileError::Open { path, .. }
                | FileError::NotRegular { path, .. }
                | FileError::TooLarge { path, .. }
                | FileError::Read { path, .. }
                | FileError::Timeout { path, .. }
                | FileError::NotText { path } => path,
            },
            ReadError::Parse { path, .. }
            | ReadError::Netstat { path, .. }
            | ReadError::Backwards { path, .. } => path,
        }
    }
}

/// What one read of the uplink found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// Either signal crossed its threshold since the last read.
    pub congested: bool,
    /// Other traffic ÷ line rate in the busier direction, when it was measured.
    pub busy: Option<f64>,
    /// Congestion-marked packets since the last read, when they were counted.
    pub ce_packets: Option<u64>,
    /// Every signal that is on was read without error.
    pub source_up: bool,
    /// The interface's hardware signs (see [`super::hardware`]): not congestion, evidence
    /// that congestion cannot give.
    pub signs: Signs,
}

/// The byte counters at one read.
#[derive(Debug, Clone, Copy)]
struct Bytes {
    at: Instant,
    rx: u64,
    tx: u64,
    /// This member's probe payload bytes sent, as of the same moment.
    own: u64,
}

/// Reads this node's uplink once per round; keeps the counters of the last read.
#[derive(Debug)]
pub struct UplinkReader {
    s: CongestionSettings,
    /// The interface read, once known.
    iface: Option<String>,
    /// The local address the interface was last looked up for (automatic mode).
    located_for: Option<IpAddr>,
    bytes: Option<Bytes>,
    /// The last marked-packet count, and when it was read.
    ce: Option<(u64, Instant)>,
    errors: u64,
    last_log: Option<Instant>,
    suppressed: u64,
    /// The line rate was found unknown and that was logged.
    warned_rate: bool,
    /// The interface's hardware signs.
    hardware: HardwareReader,
}

impl UplinkReader {
    /// A reader with `s`; an explicitly named interface is used as is, an automatic one is
    /// found by [`UplinkReader::locate`].
    pub fn new(s: CongestionSettings) -> Self {
        let iface = (!s.interface.is_empty()).then(|| s.interface.clone());
        Self {
            iface,
            located_for: None,
            bytes: None,
            ce: None,
            errors: 0,
            last_log: None,
            suppressed: 0,
            warned_rate: false,
            hardware: HardwareReader::new(s.line_rate),
            s,
        }
    }

    /// The interface whose counters are read, once known.
    #[cfg(test)]
    pub fn interface(&self) -> Option<&str> {
        self.iface.as_deref()
    }

    /// Read failures since start.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// In automatic mode, finds the interface the probes use: `bind_device` when the
    /// collective binds its connections to one, else the interface that holds `local` (the
    /// address this member's probe listener has). `ifaces` is asked only when the address
    /// changed since the last look-up. Not found: the byte signal is off, with one warning
    /// per address.
    pub fn locate(
        &mut self,
        local: Option<IpAddr>,
        bind_device: Option<&str>,
        ifaces: impl FnOnce() -> Vec<Iface>,
    ) {
        if !self.s.interface.is_empty() {
            return;
        }
        if let Some(dev) = bind_device.filter(|d| !d.is_empty()) {
            self.set_iface(Some(dev.to_string()));
            return;
        }
        let Some(local) = local else { return };
        if self.located_for == Some(local) {
            return;
        }
        self.located_for = Some(local);
        let found = interface_holding(local, &ifaces());
        if found.is_none() {
            tracing::warn!(address = %local, "uplink congestion: no interface holds this member's probe address; the byte-rate signal is off (set probe.congestion_interface)");
        }
        self.set_iface(found);
    }

    fn set_iface(&mut self, iface: Option<String>) {
        if iface != self.iface {
            if let Some(name) = &iface {
                tracing::info!(interface = %name, "uplink congestion: reading this interface");
            }
            self.iface = iface;
            self.bytes = None;
            self.warned_rate = false;
        }
    }

    /// Reads both signals at `now`; `own_bytes` is this member's probe payload bytes sent
    /// so far (a running total). The first read only sets the baseline.
    pub fn read(&mut self, now: Instant, own_bytes: u64) -> Reading {
        let mut r = Reading {
            source_up: true,
            ..Reading::default()
        };
        if !self.s.enabled {
            return r;
        }
        if let Some(iface) = self.iface.clone() {
            match self.read_bytes(now, own_bytes) {
                Ok(busy) => r.busy = busy,
                Err(e) => {
                    r.source_up = false;
                    self.failed(now, "bytes", &e);
                }
            }
            let hw = self.hardware.read(&self.s.sysfs_root, &iface);
            r.signs = hw.signs;
            for e in &hw.errors {
                r.source_up = false;
                self.failed(now, "hardware", e);
            }
        }
        if self.s.ce_packets > 0 {
            match self.read_ce(now) {
                Ok(ce) => r.ce_packets = ce,
                Err(e) => {
                    r.source_up = false;
                    self.failed(now, "ce_packets", &e);
                }
            }
        }
        r.congested = r.busy.is_some_and(|b| b >= self.s.busy_ratio)
            || r.ce_packets.is_some_and(|n| n >= self.s.ce_packets);
        r
    }

    /// The busier direction's share of the line rate taken by other traffic since the last
    /// read; None on the first read or while the line rate is unknown.
    fn read_bytes(&mut self, now: Instant, own: u64) -> Result<Option<f64>, ReadError> {
        let iface = self.iface.clone().unwrap_or_default();
        let dir = self.s.sysfs_root.join("class/net").join(&iface);
        let stats = dir.join("statistics");
        let counters = read_counter(&stats.join("rx_bytes"))
            .and_then(|rx| Ok((rx, read_counter(&stats.join("tx_bytes"))?)));
        let (rx, tx) = match counters {
            Ok(c) => c,
            Err(e) => {
                self.bytes = None;
                return Err(e);
            }
        };
        let now_bytes = Bytes {
            at: now,
            rx,
            tx,
            own,
        };
        let Some(prev) = self.bytes.replace(now_bytes) else {
            return Ok(None);
        };
        for (path, before, now) in [("rx_bytes", prev.rx, rx), ("tx_bytes", prev.tx, tx)] {
            if now < before {
                return Err(ReadError::Backwards {
                    path: stats.join(path),
                    before,
                    now,
                });
            }
        }
        let Some(rate) = self.line_rate(&dir) else {
            return Ok(None);
        };
        let elapsed = now.saturating_duration_since(prev.at).as_secs_f64();
        if elapsed <= 0.0 {
            return Ok(None);
        }
        // What this member's own probes moved in the period is not congestion. The prober
        // counts the payload it sends; in a permutation round (and a confirmation pair, and
        // a ring all-reduce) a member receives about as much as it sends, so the same
        // amount is taken off both directions. Headers and the group's control frames are
        // not in that count: a few per cent of the probe bytes stay in "other", far below
        // any busy ratio the configuration accepts.
        let own = own.saturating_sub(prev.own);
        let other = (rx - prev.rx)
            .saturating_sub(own)
            .max((tx - prev.tx).saturating_sub(own));
        Ok(Some(other as f64 * 8.0 / (elapsed * rate)))
    }

    /// The line rate in bits per second: configured, else `speed` (Mb/s) from sysfs; None
    /// when it is unknown (logged once per interface).
    fn line_rate(&mut self, dir: &Path) -> Option<f64> {
        if self.s.line_rate > 0 {
            return Some(self.s.line_rate as f64);
        }
        let path = dir.join("speed");
        // Virtual interfaces (loopback, veth, many bonds and tunnels) refuse the read or
        // say -1: that is not a failure of the reader, only an unknown rate.
        let mbps = read_small(&path, SYSFS_LIMIT)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .filter(|v| *v > 0);
        if mbps.is_none() && !self.warned_rate {
            self.warned_rate = true;
            tracing::warn!(file = %path.display(), "uplink congestion: the interface's line rate is unknown; the byte-rate signal is off (set probe.congestion_line_rate)");
        }
        mbps.map(|v| v as f64 * 1e6)
    }

    /// Congestion-marked packets since the last read; None on the first read and after a
    /// gap longer than `ce_max_gap` (a count, unlike the byte rate, grows with the gap).
    fn read_ce(&mut self, at: Instant) -> Result<Option<u64>, ReadError> {
        let path = self.s.procfs_root.join("net/netstat");
        let now = match read_small(&path, NETSTAT_LIMIT).and_then(|t| {
            netstat_value(&t, "IpExt:", "InCEPkts").map_err(|source| ReadError::Netstat {
                path: path.clone(),
                source,
            })
        }) {
            Ok(v) => v,
            Err(e) => {
                self.ce = None;
                return Err(e);
            }
        };
        match self.ce.replace((now, at)) {
            None => Ok(None),
            Some((before, _)) if now < before => Err(ReadError::Backwards { path, before, now }),
            Some((_, then)) if at.saturating_duration_since(then) > self.s.ce_max_gap => Ok(None),
            Some((before, _)) => Ok(Some(now - before)),
        }
    }

    /// Counts a failed read and logs it, at most once per [`LOG_EVERY`].
    fn failed(&mut self, now: Instant, signal: &'static str, e: &ReadError) {
        self.errors += 1;
        if self
            .last_log
            .is_some_and(|t| now.saturating_duration_since(t) < LOG_EVERY)
        {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(
            signal,
            file = %e.path().display(),
            reason = %e,
            errors = self.errors,
            not_logged_since_last = self.suppressed,
            "uplink congestion: read failed; this signal is off for the round"
        );
        self.last_log = Some(now);
        self.suppressed = 0;
    }
}

fn parse(path: &Path, reason: String) -> ReadError {
    ReadError::Parse {
        path: path.to_path_buf(),
        reason,
    }
}

/// A whole file as text, bounded in size and time.
pub(super) fn read_small(path: &Path, limit: u64) -> Result<String, ReadError> {
    let c = read_regular_within(path, limit, READ_DEADLINE)?;
    String::from_utf8(c.bytes).map_err(|_| parse(path, "not UTF-8 text".into()))
}

/// A sysfs counter: one unsigned decimal number.
pub(super) fn read_counter(path: &Path) -> Result<u64, ReadError> {
    let text = read_small(path, SYSFS_LIMIT)?;
    text.trim()
        .parse()
        .map_err(|_| parse(path, format!("{:?} is not a counter", clip(text.trim()))))
}

/// At most 40 characters of `s`, for an error message about garbage.
fn clip(s: &str) -> &str {
    s.char_indices().nth(40).map_or(s, |(i, _)| &s[..i])
}

/// Why a netstat-style file (`/proc/net/netstat`) does not give a counter: the file is
/// not laid out as the kernel writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetstatError {
    /// No header line starts with the prefix.
    #[error("no {prefix} line")]
    NoHeader {
        /// The block's prefix (`IpExt:`).
        prefix: String,
    },
    /// The header is not followed by its value line.
    #[error("the {prefix} header is not followed by its values")]
    NoValues {
        /// The block's prefix.
        prefix: String,
    },
    /// The header and value lines differ in length.
    #[error("{prefix} has {names} names and {values} values")]
    Mismatch {
        /// The block's prefix.
        prefix: String,
        /// Column names in the header.
        names: usize,
        /// Values in the value line.
        values: usize,
    },
    /// The header has no such column (a kernel without it).
    #[error("no {prefix} {column} column")]
    NoColumn {
        /// The block's prefix.
        prefix: String,
        /// The column asked for.
        column: String,
    },
    /// The value is not an unsigned decimal number.
    #[error("{prefix} {column} {value:?} is not a counter")]
    NotCounter {
        /// The block's prefix.
        prefix: String,
        /// The column.
        column: String,
        /// At most 40 characters of the value.
        value: String,
    },
}

/// The value of `column` in the `prefix` block of a netstat-style file: a header line
/// (`IpExt: InNoRoutes InTruncatedPkts ...`) followed by its value line (`IpExt: 0 0 ...`),
/// matched by column name.
pub fn netstat_value(text: &str, prefix: &str, column: &str) -> Result<u64, NetstatError> {
    let mut lines = text.lines();
    let header = lines
        .by_ref()
        .find(|l| l.split_whitespace().next() == Some(prefix))
        .ok_or_else(|| NetstatError::NoHeader {
            prefix: prefix.to_string(),
        })?;
    let values = lines
        .next()
        .filter(|l| l.split_whitespace().next() == Some(prefix))
        .ok_or_else(|| NetstatError::NoValues {
            prefix: prefix.to_string(),
        })?;
    let names: Vec<&str> = header.split_whitespace().skip(1).collect();
    let nums: Vec<&str> = values.split_whitespace().skip(1).collect();
    if names.len() != nums.len() {
        return Err(NetstatError::Mismatch {
            prefix: prefix.to_string(),
            names: names.len(),
            values: nums.len(),
        });
    }
    let k = names
        .iter()
        .position(|n| *n == column)
        .ok_or_else(|| NetstatError::NoColumn {
            prefix: prefix.to_string(),
            column: column.to_string(),
        })?;
    nums[k].parse().map_err(|_| NetstatError::NotCounter {
        prefix: prefix.to_string(),
        column: column.to_string(),
        value: clip(nums[k]).to_string(),
    })
}

/// The interface that holds `addr` (an IPv4-mapped IPv6 address counts as its IPv4 one).
pub fn interface_holding(addr: IpAddr, ifaces: &[Iface]) -> Option<String> {
    let addr = addr.to_canonical();
    if addr.is_unspecified() {
        return None;
    }
    ifaces
        .iter()
        .find(|i| i.addr.to_canonical() == addr)
        .map(|i| i.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    /// A temp dir laid out as sysfs and procfs for interface `up0`.
    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("sys/class/net/up0/statistics")).unwrap();
            std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
            let t = Tree { dir };
            t.bytes(0, 0);
            t.ce(0);
            t
        }
        fn sys(&self, rel: &str) -> PathBuf {
            self.dir.path().join("sys/class/net/up0").join(rel)
        }
        fn bytes(&self, rx: u64, tx: u64) {
            std::fs::write(self.sys("statistics/rx_bytes"), format!("{rx}\n")).unwrap();
            std::fs::write(self.sys("statistics/tx_bytes"), format!("{tx}\n")).unwrap();
        }
        fn speed(&self, text: &str) {
            std::fs::write(self.sys("speed"), text).unwrap();
        }
        fn netstat_path(&self) -> PathBuf {
            self.dir.path().join("proc/net/netstat")
        }
        /// A netstat file in the kernel's layout with `InCEPkts` = `ce`, between other
        /// blocks and columns so that the match must be by block and column name.
        fn ce(&self, ce: u64) {
            let text = format!(
                "TcpExt: SyncookiesSent SyncookiesRecv TCPDeliveredCE\n\
                 TcpExt: 1 2 999999\n\
                 IpExt: InNoRoutes InTruncatedPkts InOctets OutOctets InNoECTPkts InECT1Pkts InECT0Pkts InCEPkts ReasmOverlaps\n\
                 IpExt: 0 0 123456 654321 77 0 5 {ce} 0\n\
                 MPTcpExt: MPCapableSYNRX\n\
                 MPTcpExt: 0\n"
            );
            std::fs::write(self.netstat_path(), text).unwrap();
        }
        fn settings(&self) -> CongestionSettings {
            CongestionSettings {
                interface: "up0".into(),
                sysfs_root: self.dir.path().join("sys"),
                procfs_root: self.dir.path().join("proc"),
                ..CongestionSettings::default()
            }
        }
    }

    #[test]
    fn other_traffic_over_the_busy_ratio_in_either_direction_is_congestion() {
        let t = Tree::new();
        let rate = 5 * GB; // bits per second
        let mut r = UplinkReader::new(CongestionSettings {
            line_rate: rate,
            ..t.settings()
        });
        let t0 = Instant::now();
        t.bytes(1_000, 2_000);
        let first = r.read(t0, 50);
        assert_eq!(
            (first.congested, first.busy),
            (false, None),
            "a baseline only"
        );
        assert!(first.source_up);

        // 2 s later: 1.2 GB in, 0.4 GB out, 0.1 GB of it this member's probes.
        let (secs, own) = (2.0, 100_000_000u64);
        t.bytes(1_000 + 1_200_000_000, 2_000 + 400_000_000);
        let got = r.read(t0 + Duration::from_secs(2), 50 + own);
        let want = (1_200_000_000 - own) as f64 * 8.0 / (secs * rate as f64);
        assert!((got.busy.unwrap() - want).abs() < 1e-9, "{got:?} vs {want}");
        assert!(want >= 0.5 && got.congested, "{want}");

        // The next 2 s: 0.5 GB out only (minus 0.1 GB own): 0.32 of the line, not busy.
        t.bytes(1_000 + 1_200_000_000, 2_000 + 900_000_000);
        let got = r.read(t0 + Duration::from_secs(4), 50 + 2 * own);
        let want = (500_000_000 - own) as f64 * 8.0 / (secs * rate as f64);
        assert!((got.busy.unwrap() - want).abs() < 1e-9, "{got:?} vs {want}");
        assert!(want < 0.5 && !got.congested, "{want}");
        assert_eq!(r.errors(), 0);
    }

    #[test]
    fn the_line_rate_comes_from_sysfs_in_megabits() {
        let t = Tree::new();
        t.speed("1000\n");
        let mut r = UplinkReader::new(t.settings());
        let t0 = Instant::now();
        r.read(t0, 0);
        // 1 Gb/s for 1 s is 125 MB; 100 MB of other traffic is 0.8 of it.
        t.bytes(100_000_000, 0);
        let got = r.read(t0 + Duration::from_secs(1), 0);
        assert!((got.busy.unwrap() - 0.8).abs() < 1e-9, "{got:?}");
        assert!(got.congested);
    }

    #[test]
    fn an_unknown_line_rate_turns_the_byte_signal_off_without_an_error() {
        for speed in [None, Some("-1\n"), Some("0\n"), Some("fast\n")] {
            let t = Tree::new();
            if let Some(s) = speed {
                t.speed(s);
            }
            let mut r = UplinkReader::new(t.settings());
            let t0 = Instant::now();
            r.read(t0, 0);
            t.bytes(100 * GB, 100 * GB);
            let got = r.read(t0 + Duration::from_secs(1), 0);
            assert_eq!(got.busy, None, "{speed:?}");
            assert!(!got.congested && got.source_up, "{speed:?}: {got:?}");
            assert_eq!(r.errors(), 0);
        }
    }

    #[test]
    fn marked_packets_at_or_over_the_threshold_are_congestion() {
        let t = Tree::new();
        let mut r = UplinkReader::new(t.settings());
        let threshold = CongestionSettings::default().ce_packets;
        let t0 = Instant::now();
        t.ce(5_000);
        assert_eq!(r.read(t0, 0).ce_packets, None, "a baseline only");
        t.ce(5_000 + threshold - 1);
        let below = r.read(t0 + Duration::from_secs(1), 0);
        assert_eq!(below.ce_packets, Some(threshold - 1));
        assert!(!below.congested);
        t.ce(5_000 + threshold - 1 + threshold);
        let at = r.read(t0 + Duration::from_secs(2), 0);
        assert_eq!(at.ce_packets, Some(threshold));
        assert!(at.congested && at.source_up);
    }

    #[test]
    fn marked_packets_counted_over_a_pause_only_set_a_new_baseline() {
        let t = Tree::new();
        let mut r = UplinkReader::new(t.settings());
        let gap = CongestionSettings::default().ce_max_gap;
        let threshold = CongestionSettings::default().ce_packets;
        let t0 = Instant::now();
        t.ce(100);
        r.read(t0, 0);
        // Probing paused for longer than the gap: ten thresholds' worth of marks over it
        // are not one round's.
        t.ce(100 + 10 * threshold);
        let after = r.read(t0 + gap + Duration::from_secs(1), 0);
        assert_eq!(after.ce_packets, None);
        assert!(!after.congested && after.source_up);
        // The next round within the gap counts again.
        t.ce(100 + 11 * threshold);
        let next = r.read(t0 + gap + Duration::from_secs(11), 0);
        assert_eq!(next.ce_packets, Some(threshold));
        assert!(next.congested);
    }

    #[test]
    fn a_zero_packet_threshold_turns_the_marked_packet_signal_off() {
        let t = Tree::new();
        std::fs::remove_file(t.netstat_path()).unwrap();
        let mut r = UplinkReader::new(CongestionSettings {
            ce_packets: 0,
            ..t.settings()
        });
        let got = r.read(Instant::now(), 0);
        assert_eq!(got.ce_packets, None);
        assert!(got.source_up, "a signal that is off is not read");
        assert_eq!(r.errors(), 0);
    }

    #[test]
    fn a_counter_going_backwards_is_an_error_for_that_round_only() {
        let t = Tree::new();
        let mut r = UplinkReader::new(CongestionSettings {
            line_rate: GB,
            ..t.settings()
        });
        let t0 = Instant::now();
        t.bytes(50 * GB, 50 * GB);
        t.ce(10_000);
        r.read(t0, 0);
        // A reset: both counters start over, below their last values.
        t.bytes(10, 10);
        t.ce(3);
        let got = r.read(t0 + Duration::from_secs(1), 0);
        assert_eq!(
            (got.busy, got.ce_packets, got.congested),
            (None, None, false)
        );
        assert!(!got.source_up);
        assert_eq!(r.errors(), 2, "one per signal");
        // The next round measures from the new values.
        t.bytes(10 + GB / 8, 10);
        t.ce(3 + 200);
        let got = r.read(t0 + Duration::from_secs(2), 0);
        assert!((got.busy.unwrap() - 1.0).abs() < 1e-9, "{got:?}");
        assert_eq!(got.ce_packets, Some(200));
        assert!(got.congested && got.source_up);
        assert_eq!(r.errors(), 2);
    }

    #[test]
    fn garbage_and_missing_files_are_errors_not_values() {
        let t = Tree::new();
        let mut r = UplinkReader::new(CongestionSettings {
            line_rate: GB,
            ..t.settings()
        });
        let t0 = Instant::now();
        r.read(t0, 0);
        std::fs::write(t.sys("statistics/rx_bytes"), "lots\n").unwrap();
        std::fs::write(t.netstat_path(), "IpExt: InCEPkts\nIpExt: many\n").unwrap();
        let got = r.read(t0 + Duration::from_secs(1), 0);
        assert_eq!(
            (got.busy, got.ce_packets, got.congested),
            (None, None, false)
        );
        assert!(!got.source_up);
        assert_eq!(r.errors(), 2);
        std::fs::remove_file(t.sys("statistics/tx_bytes")).unwrap();
        std::fs::remove_file(t.netstat_path()).unwrap();
        let got = r.read(t0 + Duration::from_secs(2), 0);
        assert!(!got.congested && !got.source_up);
        assert_eq!(r.errors(), 4);
    }

    #[test]
    fn a_huge_netstat_is_refused_without_reading_it_all() {
        let t = Tree::new();
        let mut r = UplinkReader::new(t.settings());
        let mut text = "IpExt: InCEPkts\nIpExt: 0\n".to_string();
        text.push_str(&"#".repeat(NETSTAT_LIMIT as usize));
        std::fs::write(t.netstat_path(), &text).unwrap();
        let got = r.read(Instant::now(), 0);
        assert!(!got.source_up);
        assert_eq!(r.errors(), 1);
        let err = read_small(&t.netstat_path(), NETSTAT_LIMIT).unwrap_err();
        assert!(
            matches!(err, ReadError::File(FileError::TooLarge { .. })),
            "{err}"
        );
    }

    #[test]
    fn a_fifo_in_place_of_a_counter_does_not_block() {
        let t = Tree::new();
        let fifo = t.sys("statistics/rx_bytes");
        std::fs::remove_file(&fifo).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let mut r = UplinkReader::new(t.settings());
        let got = r.read(Instant::now(), 0);
        assert!(!got.source_up);
        assert_eq!(r.errors(), 1);
    }

    #[test]
    fn netstat_columns_are_matched_by_name_within_their_block() {
        let text = "TcpExt: InCEPkts A\nTcpExt: 9 9\nIpExt: B InCEPkts\nIpExt: 1 42\n";
        assert_eq!(netstat_value(text, "IpExt:", "InCEPkts"), Ok(42));
        assert!(netstat_value("IpExt: A InCEPkts\nIpExt: 1\n", "IpExt:", "InCEPkts").is_err());
        assert!(netstat_value("IpExt: A InCEPkts\n", "IpExt:", "InCEPkts").is_err());
        assert!(netstat_value("IpExt: A\nIpExt: 1\n", "IpExt:", "InCEPkts").is_err());
        assert!(netstat_value("TcpExt: InCEPkts\nTcpExt: 1\n", "IpExt:", "InCEPkts").is_err());
    }

    #[test]
    fn the_interface_is_the_one_holding_the_probe_address() {
        let iface = |name: &str, addr: &str| Iface {
            name: name.into(),
            addr: addr.parse().unwrap(),
        };
        let all = vec![
            iface("lo", "127.0.0.1"),
            iface("eth0", "10.0.0.7"),
            iface("eth0", "fe80::1"),
            iface("bond0", "192.168.1.2"),
        ];
        let find = |a: &str| interface_holding(a.parse().unwrap(), &all);
        assert_eq!(find("192.168.1.2").as_deref(), Some("bond0"));
        assert_eq!(find("::ffff:10.0.0.7").as_deref(), Some("eth0"));
        assert_eq!(find("10.9.9.9"), None);
        assert_eq!(find("0.0.0.0"), None);

        let mut r = UplinkReader::new(CongestionSettings::default());
        r.locate(Some("10.0.0.7".parse().unwrap()), None, || all.clone());
        assert_eq!(r.interface(), Some("eth0"));
        r.locate(Some("10.0.0.7".parse().unwrap()), Some("bond0"), Vec::new);
        assert_eq!(
            r.interface(),
            Some("bond0"),
            "a bound device is what the probes use"
        );
        let mut r = UplinkReader::new(CongestionSettings {
            interface: "ib0".into(),
            ..CongestionSettings::default()
        });
        r.locate(Some("10.0.0.7".parse().unwrap()), Some("bond0"), || {
            all.clone()
        });
        assert_eq!(r.interface(), Some("ib0"), "a configured interface wins");
    }

    #[test]
    fn without_an_interface_only_marked_packets_are_read() {
        let t = Tree::new();
        let mut r = UplinkReader::new(CongestionSettings {
            interface: String::new(),
            ..t.settings()
        });
        r.locate(Some("10.9.9.9".parse().unwrap()), None, Vec::new);
        assert_eq!(r.interface(), None);
        let t0 = Instant::now();
        r.read(t0, 0);
        t.ce(1_000);
        let got = r.read(t0 + Duration::from_secs(1), 0);
        assert_eq!((got.busy, got.ce_packets), (None, Some(1_000)));
        assert!(got.congested && got.source_up);
    }
}
