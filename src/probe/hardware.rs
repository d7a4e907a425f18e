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
//! - **PCIe**: the NIC's `device/current_link_width` below `device/max_link_width`, or
//!   `device/current_link_speed` below `device/max_link_speed` (GT/s): a link that trained
//!   down, which halves what the NIC can move whatever the network does.
//! - **frame errors**: growth since the last read of `statistics/rx_crc_errors`,
//!   `rx_frame_errors` or `tx_carrier_errors`: corrupted frames and lost carrier come from
//!   optics, cables and ports, never from load. (Drops and FIFO overruns are left out:
//!   load makes those.)
//!
//! A virtual interface (veth, bond, loopback) has no PCIe files and often no speed: a
//! missing file is not a failure and shows no sign. A file that is there but does not
//! parse, or a counter that went backwards, shows no sign for the round and is counted as
//! a read error. No sign is ever inferred from a failed read.

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
        let note = |r: Result<bool, ReadError>, sign: Signs, out: &mut HardwareReading| match r {
            Ok(true) => out.signs = out.signs.union(sign),
            Ok(false) => {}
            Err(e) => out.errors.push(e),
        };
        let speed = self.speed_low(&dir);
        note(speed, Signs::LINK_SPEED, &mut out);
        note(pcie_degraded(&dir.join("device")), Signs::PCIE, &mut out);
        let errors = self.errors_grew(&dir.join("statistics"));
        note(errors, Signs::FRAME_ERRORS, &mut out);
        out
    }

    /// Whether the speed is below the expected rate. A speed the kernel does not know
    /// (missing file, refused read, -1 or 0) is no sign.
    fn speed_low(&mut self, dir: &Path) -> Result<bool, ReadError> {
        let Some(mbps) = optional(read_small(&dir.join("speed"), SYSFS_LIMIT))? else {
            return Ok(false);
        };
        let Some(mbps) = mbps.trim().parse::<i64>().ok().filter(|v| *v > 0) else {
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

    /// Whether any error counter grew since the last read (a missing counter is left
    /// out; one that went backwards sets a new baseline and is reported).
    fn errors_grew(&mut self, stats: &Path) -> Result<bool, ReadError> {
        let mut now = [None; 3];
        let mut failed = None;
        for (slot, name) in now.iter_mut().zip(ERROR_COUNTERS) {
            match optional(read_counter(&stats.join(name))) {
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

/// Whether the PCIe link under `device` trained narrower or slower than its maximum. An
/// interface without these files (virtual, or not on PCIe) is no sign.
fn pcie_degraded(device: &Path) -> Result<bool, ReadError> {
    let read = |name: &str| optional(read_small(&device.join(name), SYSFS_LIMIT));
    let width = |name: &str| -> Result<Option<u32>, ReadError> {
        let Some(t) = read(name)? else {
            return Ok(None);
        };
        // x16 is written "16"; some kernels or devices write 0 for a link that is down.
        t.trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| bad_value(&device.join(name), &t))
    };
    let speed = |name: &str| -> Result<Option<f64>, ReadError> {
        let Some(t) = read(name)? else {
            return Ok(None);
        };
        gigatransfers(&t)
            .map(Some)
            .ok_or_else(|| bad_value(&device.join(name), &t))
    };
    let narrow = match (width("current_link_width")?, width("max_link_width")?) {
        (Some(c), Some(m)) => c > 0 && c < m,
        _ => false,
    };
    let slow = match (speed("current_link_speed")?, speed("max_link_speed")?) {
        (Some(c), Some(m)) => c > 0.0 && c < m,
        _ => false,
    };
    Ok(narrow || slow)
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

/// A read whose file may be absent (or refused, as sysfs refuses `speed` on a link that
/// is down): absent is `None`, any other failure an error.
fn optional<T>(r: Result<T, ReadError>) -> Result<Option<T>, ReadError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(ReadError::File(FileError::Open { .. } | FileError::Read { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

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
        assert!(r.read(root.path(), "missing0").signs.is_empty());
    }

    #[test]
    fn garbage_and_counters_going_back_are_errors_not_signs() {
        let root = iface(&HEALTHY);
        let mut r = HardwareReader::new(0);
        r.read(root.path(), "eth0");
        set(&root, "device/max_link_width", "sixteen\n");
        set(&root, "statistics/rx_crc_errors", "3\n");
        let got = r.read(root.path(), "eth0");
        assert!(got.signs.is_empty(), "{got:?}");
        let text: Vec<String> = got.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("max_link_width") && text[0].contains("sixteen"));
        assert!(text[1].contains("rx_crc_errors") && text[1].contains("backwards"));
        // After going back, the new value is the baseline: no sign, no error.
        set(&root, "device/max_link_width", "16\n");
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
