//! This node's own uplink hardware: does the interface the probes use show a sign that
//! congestion cannot give ([`Signs`])?
//!
//! Read from sysfs once per round, beside the congestion counters, and told to the group
//! with the timings. Three signs, each from files the kernel keeps for every physical
//! network interface:
//!
//! - **link speed**: `class/net/<if>/speed` (Mb/s) below the expected rate: the configured
//!   `probe.congestion_line_rate`, else the highest speed read since the daemon started (a
//!   link that renegotiated down; one that came up slow is not seen without the
//!   configured rate).
//! - **PCIe**: the NIC's `device/current_link_width` or `device/current_link_speed` (GT/s)
//!   below the best read since the daemon started: a link that retrained down, which
//!   halves what the NIC can move whatever the network does. Not against
//!   `max_link_width`/`max_link_speed`: those are the device's own maximums, and a card in a
//!   narrower or older slot runs below them for good while healthy; such a link is logged
//!   once at the first read and is no sign (a link that trained down before the start is
//!   therefore not seen).
//! - **frame errors**: growth since the last read of `statistics/rx_crc_errors`,
//!   `rx_frame_errors` or `tx_carrier_errors`: corrupted frames and lost carrier come from
//!   optics, cables and ports, never from load. (Drops and FIFO overruns are left out:
//!   load makes those.)
//!
//! A virtual interface (veth, bond, loopback) has no PCIe files and often no speed: a
//! missing file (and a `speed` refused with EINVAL, as on a link that is down, or not a
//! positive number: an unknown rate, as for the congestion reader) is not a failure and
//! shows no sign. Any other failure (a file that cannot be opened or read,
//! that does not parse, a counter that went backwards) shows no sign for the round and is
//! counted as a read error. After a read that misses its deadline the rest of the round's
//! reads are skipped, so a hung sysfs costs one deadline per round. No sign is ever
//! inferred from a failed read.

use std::path::Path;

use super::congestion::{ReadError, SYSFS_LIMIT, read_counter, read_small};
use crate::config::file::FileError;
use crate::health::hardware::Signs;

/// The error counters whose growth is a frame-errors sign.
const ERROR_COUNTERS: [&str; 3] = ["rx_crc_errors", "rx_frame_errors", "tx_carrier_errors"];

/// What one read found.
#[derive(Debug, Default)]
pub struct HardwareReading {
    /// The signs shown.
    pub signs: Signs,
    /// Files that were there but could not be used.
    pub errors: Vec<ReadError>,
}

impl HardwareReading {
    /// Adds one check's result: its sign, or its error. Whether the check missed its
    /// deadline.
    fn note(&mut self, r: Result<bool, ReadError>, sign: Signs) -> bool {
        match r {
            Ok(true) => self.signs = self.signs.union(sign),
            Ok(false) => {}
            Err(e) => {
                let late = matches!(e, ReadError::File(FileError::Timeout { .. }));
                self.errors.push(e);
                return late;
            }
        }
        false
    }
}

/// Reads an interface's hardware signs; keeps what a sign is judged against.
#[derive(Debug, Default)]
pub struct HardwareReader {
    /// The configured line rate, bits per second (0: none).
    line_rate: u64,
    /// The interface the state below is about.
    iface: Option<String>,
    /// The highest speed read, Mb/s.
    top_speed: Option<u64>,
    /// The error counters at the last read (None for one that was missing).
    last_errors: Option<[Option<u64>; 3]>,
    /// The widest PCIe link and the fastest PCIe speed read.
    best_pcie: Option<(u32, f64)>,
}

impl HardwareReader {
    /// A reader that judges the link speed against `line_rate` bits per second (0: the
    /// highest speed it reads).
    pub fn new(line_rate: u64) -> Self {
        Self {
            line_rate,
            ..Self::default()
        }
    }

    /// Reads interface `iface` under `sysfs_root`. The first read of an interface only
    /// sets the error counters' baseline.
    pub fn read(&mut self, sysfs_root: &Path, iface: &str) -> HardwareReading {
        if self.iface.as_deref() != Some(iface) {
            *self = Self::new(self.line_rate);
            self.iface = Some(iface.to_string());
        }
        let dir = sysfs_root.join("class/net").join(iface);
        let mut out = HardwareReading::default();
        // After a read that missed its deadline the round's other reads are skipped.
        if out.note(self.speed_low(&dir), Signs::LINK_SPEED)
            || out.note(self.pcie_degraded(&dir.join("device")), Signs::PCIE)
        {
            return out;
        }
        out.note(
            self.errors_grew(&dir.join("statistics")),
            Signs::FRAME_ERRORS,
        );
        out
    }

    /// Whether the speed is below the expected rate. A speed the kernel does not know
    /// (missing file, refused read, -1 or 0) is no sign.
    fn speed_low(&mut self, dir: &Path) -> Result<bool, ReadError> {
        let path = dir.join("speed");
        let Some(text) = optional(read_small(&path, SYSFS_LIMIT), true)? else {
            return Ok(false);
        };
        // -1 (or 0) is the kernel's "unknown", as on a link that is down; text that is not
        // a number is an unknown rate too, as for the congestion reader's line rate.
        let Some(mbps) = text.trim().parse::<i64>().ok().filter(|v| *v > 0) else {
            return Ok(false);
        };
        let mbps = mbps as u64;
        let expected = if self.line_rate > 0 {
            self.line_rate / 1_000_000
        } else {
            let top = self.top_speed.map_or(mbps, |t| t.max(mbps));
            self.top_speed = Some(top);
            top
        };
        Ok(mbps < expected)
    }

    /// Whether the PCIe link under `device` runs narrower or slower than the best this
    /// reader has seen on it. An interface without these files (virtual, or not on PCIe)
    /// is no sign; a link below its own maximum from the first read is logged once.
    fn pcie_degraded(&mut self, device: &Path) -> Result<bool, ReadError> {
        let read = |name: &str| optional(read_small(&device.join(name), SYSFS_LIMIT), false);
        let (Some(width), Some(speed)) = (read("current_link_width")?, read("current_link_speed")?)
        else {
            return Ok(false);
        };
        let width_path = device.join("current_link_width");
        let width: u32 = width
            .trim()
            .parse()
            .map_err(|_| bad_value(&width_path, &width))?;
        let speed = gigatransfers(&speed)
            .ok_or_else(|| bad_value(&device.join("current_link_speed"), &speed))?;
        // 0 (or "Unknown"): a link that is down, not one that trained down.
        if width == 0 || speed == 0.0 {
            return Ok(false);
        }
        let Some((best_width, best_speed)) = self.best_pcie else {
            self.best_pcie = Some((width, speed));
            let max_width = read("max_link_width")?.and_then(|t| t.trim().parse::<u32>().ok());
            let max_speed = read("max_link_speed")?.and_then(|t| gigatransfers(&t));
            if max_width.is_some_and(|m| width < m) || max_speed.is_some_and(|m| speed < m) {
                tracing::warn!(device = %device.display(), width, speed, ?max_width, ?max_speed, "uplink NIC's PCIe link runs below the device's maximum since the start (a narrower or older slot, or trained down before the start): not a hardware sign");
            }
            return Ok(false);
        };
        self.best_pcie = Some((best_width.max(width), best_speed.max(speed)));
        Ok(width < best_width || speed < best_speed)
    }

    /// Whether any error counter grew since the last read (a missing counter is left
    /// out; one that went backwards sets a new baseline and is reported).
    fn errors_grew(&mut self, stats: &Path) -> Result<bool, ReadError> {
        let mut now = [None; 3];
        let mut failed = None;
        for (slot, name) in now.iter_mut().zip(ERROR_COUNTERS) {
            match optional(read_counter(&stats.join(name)), false) {
                Ok(v) => *slot = v,
                Err(e) => failed = Some(e),
            }
        }
        let before = self.last_errors.replace(now);
        if let Some(e) = failed {
            return Err(e);
        }
        let Some(before) = before else {
            return Ok(false);
        };
        let mut grew = false;
        for ((b, n), name) in before.into_iter().zip(now).zip(ERROR_COUNTERS) {
            if let (Some(b), Some(n)) = (b, n) {
                if n < b {
                    return Err(ReadError::Backwards {
                        path: stats.join(name),
                        before: b,
                        now: n,
                    });
                }
                grew |= n > b;
            }
        }
        Ok(grew)
    }
}

/// A PCIe link speed as sysfs writes it ("16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s"): its
/// GT/s. "Unknown" (a link that is down) is 0.
fn gigatransfers(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("unknown") || t.starts_with("Unknown") {
        return Some(0.0);
    }
    let n = t.split_whitespace().next()?;
    n.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

fn bad_value(path: &Path, text: &str) -> ReadError {
    let t = text.trim();
    let clipped = t.char_indices().nth(40).map_or(t, |(i, _)| &t[..i]);
    ReadError::Parse {
        path: path.to_path_buf(),
        reason: format!("{clipped:?} is not what the kernel writes here"),
    }
}

/// A read whose file may be absent: absent (no such file, or with `refused_is_absent`
/// EINVAL, as sysfs answers `speed` on a link that is down) is `None`, any other failure
/// an error.
fn optional<T>(r: Result<T, ReadError>, refused_is_absent: bool) -> Result<Option<T>, ReadError> {
    let absent = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::NotFound
            || (refused_is_absent && e.raw_os_error() == Some(EINVAL))
    };
    match r {
        Ok(v) => Ok(Some(v)),
        Err(ReadError::File(FileError::Open { source, .. } | FileError::Read { source, .. }))
            if absent(&source) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// EINVAL's number on Linux (every architecture this runs on).
const EINVAL: i32 = 22;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake sysfs interface `eth0` with these files (relative to its directory).
    fn iface(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("class/net/eth0");
        for (name, text) in files {
            let p = dir.join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        root
    }

    /// No sign and no error.
    fn clean(r: HardwareReading) -> bool {
        r.signs.is_empty() && r.errors.is_empty()
    }

    fn set(root: &tempfile::TempDir, name: &str, text: &str) {
        fs::write(root.path().join("class/net/eth0").join(name), text).unwrap();
    }

    const HEALTHY: [(&str, &str); 8] = [
        ("speed", "100000\n"),
        ("device/current_link_width", "16\n"),
        ("device/max_link_width", "16\n"),
        ("device/current_link_speed", "16.0 GT/s PCIe\n"),
        ("device/max_link_speed", "16.0 GT/s PCIe\n"),
        ("statistics/rx_crc_errors", "7\n"),
        ("statistics/rx_frame_errors", "0\n"),
        ("statistics/tx_carrier_errors", "1\n"),
    ];

    #[test]
    fn a_healthy_nic_shows_no_sign_and_each_fault_shows_its_own() {
        let root = iface(&HEALTHY);
        let mut r = HardwareReader::new(0);
        for _ in 0..3 {
            assert!(clean(r.read(root.path(), "eth0")));
        }
        set(&root, "device/current_link_width", "8\n");
        assert_eq!(r.read(root.path(), "eth0").signs, Signs::PCIE);
        set(&root, "device/current_link_width", "16\n");
        set(&root, "device/current_link_speed", "8.0 GT/s PCIe\n");
        assert_eq!(r.read(root.path(), "eth0").signs, Signs::PCIE);
        set(&root, "device/current_link_speed", "16.0 GT/s PCIe\n");
        set(&root, "statistics/rx_crc_errors", "9\n");
        assert_eq!(r.read(root.path(), "eth0").signs, Signs::FRAME_ERRORS);
        // No further growth: the sign goes.
        assert!(r.read(root.path(), "eth0").signs.is_empty());
        // The link renegotiated from 100G to 50G: below the highest speed seen.
        set(&root, "speed", "50000\n");
        assert_eq!(r.read(root.path(), "eth0").signs, Signs::LINK_SPEED);
    }

    #[test]
    fn the_configured_rate_judges_a_link_that_came_up_slow() {
        let root = iface(&[("speed", "25000\n")]);
        assert!(
            HardwareReader::new(0)
                .read(root.path(), "eth0")
                .signs
                .is_empty()
        );
        let got = HardwareReader::new(100_000_000_000).read(root.path(), "eth0");
        assert_eq!(got.signs, Signs::LINK_SPEED);
    }

    #[test]
    fn a_virtual_interface_shows_no_sign_and_no_error() {
        // A veth: speed 10000, no device/ PCIe files, no error counters.
        let root = iface(&[("speed", "10000\n")]);
        let mut r = HardwareReader::new(0);
        for _ in 0..2 {
            assert!(clean(r.read(root.path(), "eth0")));
        }
        // A link that is down writes -1 (or refuses the read): unknown, no sign.
        set(&root, "speed", "-1\n");
        assert!(clean(r.read(root.path(), "eth0")));
        set(&root, "speed", "fast\n");
        assert!(clean(r.read(root.path(), "eth0")));
        assert!(r.read(root.path(), "missing0").signs.is_empty());
    }

    #[test]
    fn garbage_and_counters_going_back_are_errors_not_signs() {
        let root = iface(&HEALTHY);
        let mut r = HardwareReader::new(0);
        r.read(root.path(), "eth0");
        set(&root, "device/current_link_width", "sixteen\n");
        set(&root, "statistics/rx_crc_errors", "3\n");
        let got = r.read(root.path(), "eth0");
        assert!(got.signs.is_empty(), "{got:?}");
        let text: Vec<String> = got.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("current_link_width") && text[0].contains("sixteen"));
        assert!(text[1].contains("rx_crc_errors") && text[1].contains("backwards"));
        // After going back, the new value is the baseline: no sign, no error.
        set(&root, "device/current_link_width", "16\n");
        assert!(clean(r.read(root.path(), "eth0")));
        // A directory where a counter should be is an error, not an absent file.
        let crc = root.path().join("class/net/eth0/statistics/rx_crc_errors");
        fs::remove_file(&crc).unwrap();
        fs::create_dir(&crc).unwrap();
        let got = r.read(root.path(), "eth0");
        assert!(got.signs.is_empty());
        assert_eq!(got.errors.len(), 1, "{:?}", got.errors);
    }

    /// A card in a narrower slot runs below its own maximum from the start while healthy:
    /// that is no sign (the reader logs it once); only a link that retrains below the best
    /// it has read is.
    #[test]
    fn a_link_below_its_maximum_from_the_start_is_no_sign() {
        let root = iface(&HEALTHY);
        set(&root, "device/current_link_width", "8\n");
        let mut r = HardwareReader::new(0);
        for _ in 0..3 {
            assert!(clean(r.read(root.path(), "eth0")));
        }
        set(&root, "device/current_link_width", "4\n");
        assert_eq!(r.read(root.path(), "eth0").signs, Signs::PCIE);
        // A link that is down (width 0) is not one that trained down.
        set(&root, "device/current_link_width", "0\n");
        assert!(clean(r.read(root.path(), "eth0")));
    }

    #[test]
    fn pcie_speeds_parse_as_sysfs_writes_them() {
        assert_eq!(gigatransfers("2.5 GT/s\n"), Some(2.5));
        assert_eq!(gigatransfers("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(gigatransfers("Unknown"), Some(0.0));
        assert_eq!(gigatransfers("fast"), None);
        assert_eq!(gigatransfers(""), None);
    }
}
