//! `telemetry::hccn::parse`: every parser of `hccn_tool` output, on the same text. None
//! panics or allocates without bound; what they return respects their documented bounds
//! (finite SI values, net health codes in DCMI's 0..=8, at least one address or counter
//! where one is required, a ping never receiving more than it sent and listing every
//! packet it sent).
#![no_main]

use hcclwatch::telemetry::hccn::parse;
use jiff::tz::TimeZone;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse::link(text);
    if let Ok(Some(bps)) = parse::speed(text) {
        assert!(bps.is_finite() && bps >= 0.0, "speed {bps}");
    }
    for tz in [
        TimeZone::UTC,
        TimeZone::fixed(jiff::tz::offset(8)),
        TimeZone::fixed(jiff::tz::offset(-11)),
    ] {
        if let Some(t) = parse::asctime(text, &tz) {
            assert!(t.is_finite());
        }
        if let Ok(s) = parse::link_stat(text, &tz) {
            assert!(s.changes.iter().all(|c| c.at_unix_seconds.is_finite()));
        }
    }
    if let Ok(Some(code)) = parse::net_health(text) {
        assert!(code <= 8, "net health code {code}");
    }
    if let Ok(ips) = parse::ip(text) {
        assert!(!ips.is_empty());
    }
    let _ = parse::vnic(text);
    if let Ok(o) = parse::optical(text) {
        let values = o
            .temperature_celsius
            .iter()
            .chain(&o.voltage_volts)
            .chain(o.tx_power_watts.values())
            .chain(o.rx_power_watts.values());
        for v in values {
            assert!(v.is_finite(), "optical value {v}");
        }
        if !o.present {
            assert!(o.temperature_celsius.is_none() && o.tx_power_watts.is_empty());
        }
    }
    if let Ok(counters) = parse::stat(text) {
        assert!(!counters.is_empty());
        for k in counters.keys() {
            assert!(!k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        }
    }
    if let Ok(p) = parse::ping(text) {
        assert!(p.received <= p.sent, "{} of {}", p.received, p.sent);
        assert!(
            p.rtts.len() >= p.sent as usize,
            "{} rtts of {}",
            p.rtts.len(),
            p.sent
        );
        for r in p.rtts.iter().flatten() {
            assert!(r.is_finite() && *r >= 0.0, "rtt {r}");
        }
    }
});
