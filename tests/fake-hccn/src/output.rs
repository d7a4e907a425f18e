//! The query commands (`-<cmd> -g`): argument checks and the exact output lines.

use jiff::tz::TimeZone;
use jiff::{Timestamp, fmt::strtime};

use crate::scenario::{Board, LinkState, Npu, Optical, STAT_KEYS, Scenario, Temperature};
use crate::{Outcome, param_error};

/// The zone the real tool formats times in: it runs without `TZ`, so the C library uses
/// `/etc/localtime`, or UTC without one.
fn local_zone() -> TimeZone {
    std::fs::read("/etc/localtime")
        .ok()
        .and_then(|b| TimeZone::tzif("localtime", &b).ok())
        .unwrap_or(TimeZone::UTC)
}

/// C's `asctime` without the trailing newline: `Sun Oct  5 10:13:51 2025`.
fn asctime(unix: i64, tz: &TimeZone) -> String {
    let Ok(ts) = Timestamp::from_second(unix) else {
        return "???".into();
    };
    strtime::format("%a %b %e %H:%M:%S %Y", &ts.to_zoned(tz.clone())).unwrap_or_default()
}

fn updown(s: LinkState) -> &'static str {
    match s {
        LinkState::Up => "UP",
        LinkState::Down => "DOWN",
    }
}

/// A label padded to 21 characters, then `: ` and the value (the tool's `-optical`
/// layout).
fn kv(out: &mut String, label: &str, value: &str) {
    out.push_str(&format!("{label:<21}: {value}\n"));
}

fn link_stat(npu: &Npu) -> String {
    let tz = local_zone();
    let id = npu.phy_id;
    let now = Timestamp::now().as_second();
    let s = &npu.link_stat;
    let mut out = format!("[devid {id}]current time        : {}\n", asctime(now, &tz));
    out.push_str(&format!(
        "[devid {id}]link up count       : {}\n",
        s.up_count
    ));
    if !s.old_format {
        out.push_str(&format!(
            "[devid {id}]link down count     : {}\n",
            s.down_count
        ));
    }
    if s.changes.is_empty() {
        out.push_str(&format!("[devid {id}]link change records : NA\n"));
    } else {
        out.push_str(&format!("[devid {id}]link change records :\n"));
        for c in s.changes.iter().take(10) {
            out.push_str(&format!(
                "[devid {id}]    {}    LINK {}\n",
                asctime(c.at, &tz),
                updown(c.state)
            ));
        }
    }
    out
}

fn ip(npu: &Npu, scen: &Scenario) -> Outcome {
    if npu.ips.is_empty() {
        return Outcome::err("Get ipconf failed, because no ip was preset there!", 13);
    }
    // Only Atlas 9000 A3 prints one pair per link; other boards print the first.
    let n = if scen.board == Board::A39000 {
        npu.ips.len()
    } else {
        1
    };
    let mut out = String::new();
    for a in &npu.ips[..n] {
        out.push_str(&format!("ipaddr:{a}\nnetmask:{}\n", npu.netmask));
    }
    Outcome::ok(out)
}

const NA_BLOCK: [&str; 11] = [
    "Vcc",
    "Tx Power",
    "Rx Power",
    "Vcc High Thres",
    "Vcc Low Thres",
    "Temp High Thres",
    "Temp Low Thres",
    "TxPower High Thres",
    "TxPower Low Thres",
    "RxPower High Thres",
    "RxPower Low Thres",
];

fn power(v: Option<&Option<f64>>) -> String {
    match v.copied().flatten() {
        Some(mw) => format!("{mw:.4} mW"),
        None => "NA".into(),
    }
}

/// The diagnostics part of a readable module: Vcc, per-lane power, thresholds, bias,
/// flags, SNR.
fn optical_readings(out: &mut String, o: &Optical, vcc: f64) {
    kv(out, "Vcc", &format!("{vcc:.2} mV"));
    for lane in 0..4 {
        kv(
            out,
            &format!("Tx Power{lane}"),
            &power(o.tx_power_mw.get(lane)),
        );
        kv(
            out,
            &format!("Rx Power{lane}"),
            &power(o.rx_power_mw.get(lane)),
        );
    }
    kv(out, "Vcc High Thres", "3630.00 mV");
    kv(out, "Vcc Low Thres", "2970.00 mV");
    kv(out, "Temp High Thres", "75 C");
    kv(out, "Temp Low Thres", "-5 C");
    kv(out, "TxPower High Thres", "5.0000 mW");
    kv(out, "TxPower Low Thres", "0.1000 mW");
    kv(out, "RxPower High Thres", "5.0000 mW");
    kv(out, "RxPower Low Thres", "0.0500 mW");
    for lane in 0..4 {
        kv(out, &format!("Tx Bias{lane}"), "7.5000 mA");
    }
    for flag in ["Tx Los Flag", "Rx Los Flag", "Tx LoL Flag", "Rx LoL Flag"] {
        kv(out, flag, "0x0");
    }
    for lane in 0..4 {
        kv(out, &format!("Host SNR Lane{lane}"), "not supported");
    }
    for lane in 0..4 {
        kv(out, &format!("Media SNR Lane{lane}"), "23.1211 dB");
    }
    kv(out, "Physical Code", "UPC");
    kv(out, "vendor rev", "A0");
    out.push_str("Specification compliance: 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00\n");
}

fn optical(npu: &Npu, scen: &Scenario) -> Outcome {
    if scen.board == Board::A39000 {
        return Outcome::out("The command is not supported on this product.", 13);
    }
    let Some(o) = &npu.optical else {
        return Outcome::out("Optical module is not present.", 20);
    };
    let mut out = String::from("optical info:\n");
    kv(
        &mut out,
        "present",
        if o.present { "present" } else { "not present" },
    );
    let temp = match (&o.temperature, o.present) {
        (_, false) => "NA".to_string(),
        (Temperature::Celsius(c), true) => format!("{c} C"),
        (Temperature::Text(t), true) => t.clone(),
    };
    kv(&mut out, "temperature", &temp);
    if o.present {
        kv(&mut out, "high power enable reg", "enabled");
        kv(&mut out, "vendor name", &o.vendor_name);
        kv(&mut out, "vendor part number", "02311KNQ");
        kv(
            &mut out,
            "vendor serial number",
            &format!("FAKE{:04}", npu.phy_id),
        );
        kv(&mut out, "vendor org unique id", "0x0 0x0 0x0");
        kv(&mut out, "xsfp identifier", &o.identifier);
        kv(&mut out, "xsfp wave length", "850 nm");
        kv(&mut out, "manufact date code", "210101");
    }
    let readable = o.present && matches!(o.temperature, Temperature::Celsius(_));
    match o.vcc_mv.filter(|v| *v != 0.0) {
        Some(vcc) if readable => optical_readings(&mut out, o, vcc),
        _ => {
            for label in NA_BLOCK {
                kv(&mut out, label, "NA");
            }
        }
    }
    Outcome::ok(out)
}

fn stat(npu: &Npu) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut out = String::from("packet statistics:\n");
    for k in STAT_KEYS {
        let base = npu.stat.get(k).copied().unwrap_or(0);
        let grown = npu
            .stat_per_second
            .get(k)
            .map_or(0, |r| r.saturating_mul(now));
        out.push_str(&format!("{k}:{}\n", base.saturating_add(grown)));
    }
    out
}

/// A `-<cmd> -g` query: exactly one sub-argument, `-g`.
pub fn query(cmd: &str, npu: &Npu, scen: &Scenario, sub: &[String]) -> Outcome {
    if sub.len() != 1 {
        return param_error(cmd, "The total count of input parameters is wrong!", 4);
    }
    if sub[0] != "-g" {
        return param_error(cmd, "Get unknown option!", 3);
    }
    match cmd {
        "-link" => Outcome::ok(format!("link status: {}\n", updown(npu.link))),
        "-speed" => Outcome::ok(match npu.speed_mbps {
            Some(s) => format!("Speed: {s} Mb/s\n"),
            None => "Speed: Unknown!\n".into(),
        }),
        "-link_stat" => Outcome::ok(link_stat(npu)),
        "-net_health" => Outcome::ok(format!("net health status: {}\n", npu.net_health)),
        "-ip" => ip(npu, scen),
        "-vnic" => match npu.vnic_ip {
            Some(v) => Outcome::ok(format!(
                "vnic link status: {}\nvnic ipaddr: {v}\nvnic netmask: 255.255.255.0\n",
                updown(npu.link)
            )),
            None => Outcome::err("Command execute failed!", 1),
        },
        "-optical" => optical(npu, scen),
        "-stat" => Outcome::ok(stat(npu)),
        _ => Outcome::err("Command execute failed!", 1),
    }
}
