//! Parsers for what `hccn_tool` prints on stdout, one pure function per command.
//!
//! Each takes the tool's standard output (of a run the error classification accepted)
//! and returns typed readings in SI units, or [`HccnError::Parse`] naming what was
//! missing. They read by key, not by line position, because driver versions add and drop
//! lines (older drivers have no `link down count`, spell `Socket failed`, print
//! `netdetect address`). None of them panics on any input; a property test holds them to
//! that.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use super::error::HccnError;
#[cfg(test)]
use crate::snapshot::port::STAT_KEYS;
use crate::snapshot::port::{LinkChange, LinkStat, NetHealthCode, Optics, PingReply};

fn missing(what: &str) -> HccnError {
    HccnError::Parse(format!("no {what} in the output"))
}

fn bad(what: &str, value: &str) -> HccnError {
    HccnError::Parse(format!(
        "{what}: unexpected value {:?}",
        value.chars().take(80).collect::<String>()
    ))
}

/// The value after `key:` on the first line whose text before the first `:` is `key`
/// (leading and trailing blanks ignored on both sides).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// `-link -g`: `link status: UP` or `link status: DOWN`. True for UP.
pub fn link(text: &str) -> Result<bool, HccnError> {
    match field(text, "link status").ok_or_else(|| missing("`link status:` line"))? {
        "UP" => Ok(true),
        "DOWN" => Ok(false),
        other => Err(bad("link status", other)),
    }
}

/// `-speed -g`: `Speed: 200000 Mb/s`, in bits per second; `None` for `Speed: Unknown!`
/// (the driver's 0xFFFF, a port without a negotiated speed).
pub fn speed(text: &str) -> Result<Option<f64>, HccnError> {
    let v = field(text, "Speed").ok_or_else(|| missing("`Speed:` line"))?;
    if v == "Unknown!" {
        return Ok(None);
    }
    let mut it = v.split_whitespace();
    match (it.next().map(str::parse::<u64>), it.next(), it.next()) {
        (Some(Ok(mbps)), Some("Mb/s"), None) => Ok(Some(mbps as f64 * 1e6)),
        _ => Err(bad("Speed", v)),
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Parses C's `asctime` text (`Sun Oct  5 10:13:51 2025`, day padded with a space) as
/// local time in `tz`, to Unix seconds. In a repeated hour (end of daylight saving time)
/// the earlier instant is taken.
pub fn asctime(text: &str, tz: &TimeZone) -> Option<f64> {
    let t: Vec<&str> = text.split_whitespace().collect();
    let [_weekday, month, day, clock, year] = t.as_slice() else {
        return None;
    };
    let month = MONTHS.iter().position(|m| m == month)? as i8 + 1;
    let mut hms = clock.split(':').map(str::parse::<i8>);
    let (Some(Ok(h)), Some(Ok(m)), Some(Ok(s)), None) =
        (hms.next(), hms.next(), hms.next(), hms.next())
    else {
        return None;
    };
    let dt = DateTime::new(year.parse().ok()?, month, day.parse().ok()?, h, m, s, 0).ok()?;
    let ts = tz.to_ambiguous_timestamp(dt).compatible().ok()?;
    Some(ts.as_second() as f64)
}

/// Strips the `[devid N]` prefix `-link_stat -g` puts on every line, if present.
fn strip_devid(line: &str) -> &str {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("[devid ")
        && let Some((id, after)) = rest.split_once(']')
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
    {
        return after;
    }
    line
}

/// `-link_stat -g`: link-up and link-down counts and the change records (newest first,
/// at most ten, `NA` when there are none). Timestamps are the node's local time in `tz`.
/// Older drivers print no `link down count` line.
pub fn link_stat(text: &str, tz: &TimeZone) -> Result<LinkStat, HccnError> {
    let mut up = None;
    let mut down = None;
    let mut changes = Vec::new();
    for raw in text.lines() {
        let line = strip_devid(raw).trim();
        let record = line
            .strip_suffix("LINK UP")
            .map(|t| (t, true))
            .or_else(|| line.strip_suffix("LINK DOWN").map(|t| (t, false)));
        if let Some((when, is_up)) = record
            && !when.contains("link change records")
        {
            let at = asctime(when, tz).ok_or_else(|| bad("link change record time", when))?;
            changes.push(LinkChange {
                at_unix_seconds: at,
                up: is_up,
            });
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "link up count" => up = Some(v.parse::<u64>().map_err(|_| bad("link up count", v))?),
            "link down count" => {
                down = Some(v.parse::<u64>().map_err(|_| bad("link down count", v))?);
            }
            _ => {}
        }
    }
    Ok(LinkStat {
        up_count: up.ok_or_else(|| missing("`link up count` line"))?,
        down_count: down,
        changes,
    })
}

/// `-net_health -g`: `net health status: <text>` as a code in DCMI's numbering; `None`
/// for the tool's `Unknown`. Both spellings of the socket failure are accepted (`Socket
/// fail` on 910B/A3, `Socket failed` on 910A).
pub fn net_health(text: &str) -> Result<Option<NetHealthCode>, HccnError> {
    let v = field(text, "net health status").ok_or_else(|| missing("`net health status:`"))?;
    let code = match v.to_ascii_lowercase().as_str() {
        "success" => 0,
        "socket fail" | "socket failed" => 1,
        "receive timeout" => 2,
        "unreachable" => 3,
        "time exceeded" => 4,
        "fault" => 5,
        "init" => 6,
        "thread error" => 7,
        "detect ip set" => 8,
        "unknown" => return Ok(None),
        _ => return Err(bad("net health status", v)),
    };
    Ok(Some(code))
}

/// `-ip -g`: the `ipaddr:`/`netmask:` pairs, in order (several on Atlas 9000 A3). At
/// least one address.
pub fn ip(text: &str) -> Result<Vec<Ipv4Addr>, HccnError> {
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':')
            && k.trim() == "ipaddr"
        {
            let v = v.trim();
            out.push(v.parse().map_err(|_| bad("ipaddr", v))?);
        }
    }
    if out.is_empty() {
        return Err(missing("`ipaddr:` line"));
    }
    Ok(out)
}

/// The A3 vNIC (`-vnic -g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vnic {
    /// `vnic link status: UP`.
    pub link_up: Option<bool>,
    /// `vnic ipaddr:`.
    pub ip: Option<Ipv4Addr>,
}

/// `-vnic -g`: `vnic link status: UP|DOWN`, `vnic ipaddr: …`, `vnic netmask: …`.
pub fn vnic(text: &str) -> Result<Vnic, HccnError> {
    let link_up = field(text, "vnic link status").and_then(|v| match v {
        "UP" => Some(true),
        "DOWN" => Some(false),
        _ => None,
    });
    let ip = field(text, "vnic ipaddr").and_then(|v| v.parse().ok());
    if link_up.is_none() && ip.is_none() {
        return Err(missing("`vnic link status:` or `vnic ipaddr:`"));
    }
    Ok(Vnic { link_up, ip })
}

/// A `<number> <unit>` value, or `None` for the tool's `NA`, `not supported` and
/// `get failed`.
fn with_unit(v: &str, unit: &str) -> Option<f64> {
    let mut it = v.split_whitespace();
    match (it.next().map(str::parse::<f64>), it.next(), it.next()) {
        (Some(Ok(x)), Some(u), None) if u == unit && x.is_finite() => Some(x),
        _ => None,
    }
}

/// The lane of a `Tx Power<N>` / `Rx Power<N>` key.
fn lane(key: &str, prefix: &str) -> Option<u32> {
    let n = key.strip_prefix(prefix)?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// `-optical -g`: presence, temperature (`%d C`), Vcc (mV → V) and per-lane Tx/Rx
/// power (mW → W). `NA`, `not supported` and `get failed` values are absent, as are the
/// lanes DR4 modules print as `NA`.
pub fn optical(text: &str) -> Result<Optics, HccnError> {
    let present = match field(text, "present").ok_or_else(|| missing("`present` line"))? {
        "present" => true,
        "not present" => false,
        other => return Err(bad("present", other)),
    };
    let mut o = Optics {
        present,
        ..Optics::default()
    };
    if !present {
        return Ok(o);
    }
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "temperature" {
            o.temperature_celsius = with_unit(v, "C");
        } else if k == "Vcc" {
            o.voltage_volts = with_unit(v, "mV").map(|mv| mv / 1e3);
        } else if let Some(n) = lane(k, "Tx Power") {
            if let Some(mw) = with_unit(v, "mW") {
                o.tx_power_watts.insert(n, mw / 1e3);
            }
        } else if let Some(n) = lane(k, "Rx Power")
            && let Some(mw) = with_unit(v, "mW")
        {
            o.rx_power_watts.insert(n, mw / 1e3);
        }
    }
    Ok(o)
}

/// `-stat -g`: the `key:value` counter lines after `packet statistics:`. At least one.
pub fn stat(text: &str) -> Result<BTreeMap<String, u64>, HccnError> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            continue;
        }
        if !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        out.insert(k.to_string(), v.parse().map_err(|_| bad(k, v))?);
    }
    if out.is_empty() {
        return Err(missing("counter line"));
    }
    Ok(out)
}

/// One per-packet line of a ping: `Some(Some(rtt))` for `recv seq=N,time=Xms`,
/// `Some(None)` for `recv time out seq=N` or `Destination Host Unreachable`, `None` for
/// any other line.
fn ping_packet(line: &str) -> Option<Option<f64>> {
    let l = line.trim();
    if l.starts_with("recv time out") || l.contains("Destination Host Unreachable") {
        return Some(None);
    }
    let rest = l.strip_prefix("recv seq=")?;
    let (_seq, time) = rest.split_once(",time=")?;
    let ms: f64 = time.trim().strip_suffix("ms")?.parse().ok()?;
    (ms.is_finite() && ms >= 0.0).then_some(Some(ms / 1e3))
}

/// `N packets transmitted, R received, L% packet loss`.
fn ping_summary(line: &str) -> Option<(u32, u32)> {
    let (sent, rest) = line.trim().split_once(" packets transmitted, ")?;
    let (received, _) = rest.split_once(" received")?;
    Some((sent.trim().parse().ok()?, received.trim().parse().ok()?))
}

/// The most packets a ping summary may claim: hcclwatch asks for a handful per ping, and
/// the padding below allocates one slot per claimed packet, so a garbled summary must not
/// size an allocation.
pub const MAX_PING_PACKETS: u32 = 10_000;

/// `-ping -g address <ip>`: per-packet round trips (ms → s) in the order printed and the
/// summary counts. Without a summary line the counts come from the packet lines; a
/// summary that claims more packets than were printed pads with lost ones.
pub fn ping(text: &str) -> Result<PingReply, HccnError> {
    let mut rtts = Vec::new();
    let mut summary = None;
    for line in text.lines() {
        if let Some(p) = ping_packet(line) {
            rtts.push(p);
        } else if let Some(s) = ping_summary(line) {
            summary = Some(s);
        }
    }
    let (sent, received) = match summary {
        Some(s) => s,
        None if !rtts.is_empty() => (
            rtts.len() as u32,
            rtts.iter().filter(|r| r.is_some()).count() as u32,
        ),
        None => return Err(missing("ping result")),
    };
    if received > sent {
        return Err(bad(
            "ping summary",
            &format!("{received} received of {sent}"),
        ));
    }
    if sent > MAX_PING_PACKETS {
        return Err(bad(
            "ping summary",
            &format!("{sent} packets transmitted, more than the {MAX_PING_PACKETS} it may claim"),
        ));
    }
    while (rtts.len() as u32) < sent {
        rtts.push(None);
    }
    Ok(PingReply {
        sent,
        received,
        rtts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The fuzzer's finding: a summary claiming 87 million packets made the padding
    /// allocate gigabytes. It is refused, naming the count.
    #[test]
    fn a_summary_claiming_absurd_packet_counts_is_refused() {
        let text = "recv seq=1,time=0.097000ms\n87390002 packets transmitted, 2 received, 0% packet loss\n";
        let e = ping(text).unwrap_err().to_string();
        assert!(e.contains("87390002"), "{e}");
        let ok = "recv seq=1,time=0.097000ms\n3 packets transmitted, 1 received, 66% packet loss\n";
        assert_eq!(ping(ok).unwrap().rtts.len(), 3);
    }

    /// A zone with a fixed offset of +08:00 (China Standard Time, no daylight saving).
    fn cst() -> TimeZone {
        TimeZone::fixed(jiff::tz::offset(8))
    }

    #[test]
    fn link_states() {
        assert!(link("link status: UP\n").unwrap());
        assert!(!link("link status: DOWN\n").unwrap());
        assert!(matches!(
            link("link status: FLAPPING\n"),
            Err(HccnError::Parse(_))
        ));
        assert!(matches!(link(""), Err(HccnError::Parse(_))));
        // The vNIC's line is a different key.
        assert!(link("vnic link status: UP\n").is_err());
    }

    #[test]
    fn speeds() {
        assert_eq!(speed("Speed: 200000 Mb/s\n").unwrap(), Some(200e9));
        assert_eq!(speed("Speed: 100000 Mb/s\n").unwrap(), Some(100e9));
        assert_eq!(speed("Speed: Unknown!\n").unwrap(), None);
        assert!(speed("Speed: 100 Gb/s\n").is_err());
        assert!(speed("Speed: fast\n").is_err());
    }

    const LINK_STAT: &str = "\
[devid 0]current time        : Tue Oct 28 21:46:46 2025
[devid 0]link up count       : 2
[devid 0]link down count     : 1
[devid 0]link change records :
[devid 0]    Sun Oct  5 10:13:51 2025    LINK UP
[devid 0]    Sun Oct  5 10:13:50 2025    LINK DOWN
[devid 0]    Sun Oct  5 10:13:35 2025    LINK UP
";

    #[test]
    fn link_stat_capture() {
        let s = link_stat(LINK_STAT, &TimeZone::UTC).unwrap();
        assert_eq!(s.up_count, 2);
        assert_eq!(s.down_count, Some(1));
        assert_eq!(s.changes.len(), 3);
        // 2025-10-05T10:13:51Z.
        assert_eq!(s.changes[0].at_unix_seconds, 1_759_659_231.0);
        assert!(s.changes[0].up);
        assert_eq!(s.changes[1].at_unix_seconds, 1_759_659_230.0);
        assert!(!s.changes[1].up);
        assert_eq!(s.changes[2].at_unix_seconds, 1_759_659_215.0);
        assert_eq!(s.last_change_unix_seconds(), Some(1_759_659_231.0));
        // The same text read as local time eight hours east is eight hours earlier.
        let east = link_stat(LINK_STAT, &cst()).unwrap();
        assert_eq!(
            east.last_change_unix_seconds(),
            Some(1_759_659_231.0 - 8.0 * 3600.0)
        );
    }

    #[test]
    fn link_stat_without_records_and_old_format() {
        let na = "\
[devid 3]current time        : Tue Oct 28 21:46:46 2025
[devid 3]link up count       : 0
[devid 3]link down count     : 0
[devid 3]link change records : NA
";
        let s = link_stat(na, &TimeZone::UTC).unwrap();
        assert_eq!((s.up_count, s.down_count), (0, Some(0)));
        assert!(s.changes.is_empty());
        assert_eq!(s.last_change_unix_seconds(), None);
        // An older driver: no down count line.
        let old = "\
[devid 1]current time        : Mon Jan  6 08:00:00 2025
[devid 1]link up count       : 5
[devid 1]link change records :
[devid 1]    Mon Jan  6 07:59:00 2025    LINK UP
";
        let s = link_stat(old, &TimeZone::UTC).unwrap();
        assert_eq!((s.up_count, s.down_count), (5, None));
        assert_eq!(s.changes.len(), 1);
        // No up count at all is not a reading.
        assert!(link_stat("[devid 0]link down count : 1\n", &TimeZone::UTC).is_err());
        // A record with a garbled time is an error, not a guess.
        assert!(
            link_stat(
                "[devid 0]link up count : 1\n[devid 0]    Foo 99 25:00:00 2025    LINK UP\n",
                &TimeZone::UTC
            )
            .is_err()
        );
    }

    #[test]
    fn asctime_forms() {
        let utc = TimeZone::UTC;
        assert_eq!(asctime("Thu Jan  1 00:00:00 1970", &utc), Some(0.0));
        assert_eq!(asctime("Thu Jan 1 00:00:01 1970", &utc), Some(1.0));
        assert_eq!(asctime("Thu Jan 32 00:00:00 1970", &utc), None);
        assert_eq!(asctime("Thu Foo  1 00:00:00 1970", &utc), None);
        assert_eq!(asctime("yesterday", &utc), None);
    }

    #[test]
    fn net_health_every_value() {
        let table = [
            ("Success", Some(0)),
            ("Socket fail", Some(1)),
            ("Socket failed", Some(1)),
            ("Receive timeout", Some(2)),
            ("Unreachable", Some(3)),
            ("Time exceeded", Some(4)),
            ("Fault", Some(5)),
            ("Init", Some(6)),
            ("Thread error", Some(7)),
            ("Detect ip set", Some(8)),
            ("Unknown", None),
        ];
        for (text, want) in table {
            let out = format!("net health status: {text}\n");
            assert_eq!(net_health(&out).unwrap(), want, "{text}");
        }
        assert!(net_health("net health status: Exploded\n").is_err());
        assert!(net_health("").is_err());
    }

    #[test]
    fn ip_pairs() {
        assert_eq!(
            ip("ipaddr:11.12.165.80\nnetmask:255.255.255.0\n").unwrap(),
            vec![Ipv4Addr::new(11, 12, 165, 80)]
        );
        // Atlas 9000 A3: one pair per link.
        let a3 = "ipaddr:10.0.0.1\nnetmask:255.255.0.0\nipaddr:10.0.1.1\nnetmask:255.255.0.0\n";
        assert_eq!(
            ip(a3).unwrap(),
            vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 1, 1)]
        );
        assert!(ip("ipaddr:not-an-ip\n").is_err());
        assert!(ip("").is_err());
    }

    #[test]
    fn vnic_output() {
        let v =
            vnic("vnic link status: UP\nvnic ipaddr: 192.168.2.199\nvnic netmask: 255.255.255.0\n")
                .unwrap();
        assert_eq!(v.link_up, Some(true));
        assert_eq!(v.ip, Some(Ipv4Addr::new(192, 168, 2, 199)));
        assert!(vnic("nothing here\n").is_err());
    }

    const OPTICAL: &str = "\
optical info:
present              : present
temperature          : 47 C
high power enable reg: enabled
vendor name          : HUAWEI
vendor part number   : 02311KNQ
vendor serial number : ABCDEFG
vendor org unique id : 0x0 0x0 0x0
xsfp identifier      : QSFP28 or later
xsfp wave length     : 850 nm
manufact date code   : 210101
Vcc                  : 3262.90 mV
Tx Power0            : 4.4035 mW
Rx Power0            : 1.2500 mW
Tx Power1            : 4.0000 mW
Rx Power1            : 0.0100 mW
Tx Power2            : NA
Rx Power2            : NA
Tx Power3            : NA
Rx Power3            : NA
Vcc High Thres       : 3630.00 mV
Vcc Low Thres        : 2970.00 mV
Temp High Thres      : 75 C
Temp Low Thres       : -5 C
TxPower High Thres   : 5.0000 mW
TxPower Low Thres    : 0.1000 mW
RxPower High Thres   : 5.0000 mW
RxPower Low Thres    : 0.0500 mW
Tx Bias0             : 7.5000 mA
Tx Los Flag          : 0x0
Rx Los Flag          : 0xff
Host SNR Lane0       : not supported
Media SNR Lane0      : 23.1211 dB
Physical Code        : UPC
Specification compliance: 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00
";

    #[test]
    fn optical_present_with_na_lanes() {
        let o = optical(OPTICAL).unwrap();
        assert!(o.present);
        assert_eq!(o.temperature_celsius, Some(47.0));
        assert!((o.voltage_volts.unwrap() - 3.2629).abs() < 1e-9);
        assert_eq!(o.tx_power_watts.len(), 2, "{:?}", o.tx_power_watts);
        assert!((o.tx_power_watts[&0] - 0.0044035).abs() < 1e-12);
        assert!((o.tx_power_watts[&1] - 0.004).abs() < 1e-12);
        assert!((o.rx_power_watts[&0] - 0.00125).abs() < 1e-12);
        assert!((o.rx_power_watts[&1] - 0.00001).abs() < 1e-12);
        assert!(!o.rx_power_watts.contains_key(&2));
    }

    #[test]
    fn optical_not_present_and_na_block() {
        let o = optical("optical info:\npresent              : not present\n").unwrap();
        assert_eq!(
            o,
            Optics {
                present: false,
                ..Optics::default()
            }
        );
        // Present, but the module's diagnostics are unreadable: the NA block.
        let na = "\
optical info:
present              : present
temperature          : NA
Vcc                  : NA
Tx Power             : NA
Rx Power             : NA
";
        let o = optical(na).unwrap();
        assert!(o.present);
        assert_eq!(o.temperature_celsius, None);
        assert_eq!(o.voltage_volts, None);
        assert!(o.tx_power_watts.is_empty() && o.rx_power_watts.is_empty());
        for t in ["not supported", "get failed", "NA"] {
            let text = format!("present : present\ntemperature          : {t}\n");
            assert_eq!(optical(&text).unwrap().temperature_celsius, None, "{t}");
        }
        assert_eq!(
            optical("present : present\ntemperature          : -3 C\n")
                .unwrap()
                .temperature_celsius,
            Some(-3.0)
        );
        assert!(optical("temperature : 40 C\n").is_err());
        assert!(optical("present : maybe\n").is_err());
    }

    #[test]
    fn stat_every_key() {
        let keys = STAT_KEYS;
        let mut text = String::from("packet statistics:\n");
        for (i, k) in keys.iter().enumerate() {
            text.push_str(&format!("{k}:{}\n", i * 1000 + 7));
        }
        let m = stat(&text).unwrap();
        assert_eq!(m.len(), keys.len());
        assert_eq!(m["mac_tx_mac_pause_num"], 7);
        assert_eq!(m["nic_rx_all_oct_num"], (keys.len() as u64 - 1) * 1000 + 7);
        assert!(stat("packet statistics:\nroce_cqe_num:-1\n").is_err());
        assert!(stat("packet statistics:\n").is_err());
    }

    #[test]
    fn ping_success() {
        let text = "\
device 0 PING 11.12.165.80
recv seq=0,time=0.114000ms
recv seq=1,time=0.067000ms
recv seq=2,time=0.063000ms
3 packets transmitted, 3 received, 0.00% packet loss

";
        let r = ping(text).unwrap();
        assert_eq!((r.sent, r.received), (3, 3));
        let rtts: Vec<f64> = r.rtts.iter().map(|x| x.unwrap()).collect();
        assert!((rtts[0] - 0.000114).abs() < 1e-12);
        assert!((rtts[1] - 0.000067).abs() < 1e-12);
        assert!((rtts[2] - 0.000063).abs() < 1e-12);
    }

    #[test]
    fn ping_partial_and_total_loss() {
        let partial = "\
device 0 PING 10.10.100.10
recv time out seq=0
recv seq=1,time=0.097000ms
recv seq=2,time=0.066000ms
3 packets transmitted, 2 received, 33.33% packet loss
";
        let r = ping(partial).unwrap();
        assert_eq!((r.sent, r.received, r.lost()), (3, 2, 1));
        assert_eq!(r.rtts[0], None);
        assert!((r.rtts[1].unwrap() - 0.000097).abs() < 1e-12);
        let all = "\
device 2 PING 10.0.0.9
recv time out seq=0
recv time out seq=1
recv time out seq=2
3 packets transmitted, 0 received, 100.00% packet loss
";
        let r = ping(all).unwrap();
        assert_eq!((r.sent, r.received), (3, 0));
        assert_eq!(r.rtts, vec![None, None, None]);
        // The documented typo `seq=O` is still a lost packet.
        let r = ping("recv time out seq=O\nrecv seq=1,time=1.000000ms\n").unwrap();
        assert_eq!((r.sent, r.received), (2, 1));
        // The unreachable variant the tool checks for.
        let r = ping(
            "device 0 PING 10.0.0.9\nFrom 10.0.0.1 icmp_seq=1 Destination Host Unreachable\n\
             3 packets transmitted, 0 received, 100.00% packet loss\n",
        )
        .unwrap();
        assert_eq!((r.sent, r.received), (3, 0));
        assert_eq!(r.rtts.len(), 3);
        assert!(ping("device 0 PING 10.0.0.9\n").is_err());
        assert!(ping("3 packets transmitted, 4 received, 0.00% packet loss\n").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// No parser panics, whatever the tool prints.
        #[test]
        fn no_input_panics(text in "(?s).{0,400}") {
            let _ = link(&text);
            let _ = speed(&text);
            let _ = link_stat(&text, &TimeZone::UTC);
            let _ = net_health(&text);
            let _ = ip(&text);
            let _ = vnic(&text);
            let _ = optical(&text);
            let _ = stat(&text);
            let _ = ping(&text);
            let _ = asctime(&text, &TimeZone::UTC);
        }

        /// Nor on lines shaped like the real ones with random values.
        #[test]
        fn shaped_inputs_do_not_panic(
            key in prop::sample::select(vec![
                "link status", "Speed", "[devid 0]link up count", "[devid 0]    ",
                "net health status", "ipaddr", "present", "temperature", "Vcc",
                "Tx Power9", "Rx Power0", "recv seq=1,time", "roce_cqe_num",
            ]),
            value in "[ -~]{0,40}",
        ) {
            let text = format!("{key}:{value}\n{key} {value}\n{value} LINK UP\n");
            let _ = link(&text);
            let _ = speed(&text);
            let _ = link_stat(&text, &TimeZone::UTC);
            let _ = net_health(&text);
            let _ = ip(&text);
            let _ = optical(&text);
            let _ = stat(&text);
            let _ = ping(&text);
        }
    }
}
