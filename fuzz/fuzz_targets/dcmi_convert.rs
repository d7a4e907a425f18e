//! `telemetry::dcmi::convert`: DCMI's raw values to SI units. For any raw value, a
//! checked reading is either within its physical range (−40..=150 °C, 0..=2 kW, 0..=5 V,
//! 0..=10 GHz) or an error; all-ones sentinels are never readings; the plain conversions
//! return finite, non-negative values where they document it; per-link HCCS bandwidth
//! keeps one slot per link.
#![no_main]

use hcclwatch::telemetry::dcmi::convert::{
    self, RangeError, checked_clock, checked_power, checked_temperature, checked_voltage,
};
use libfuzzer_sys::fuzz_target;

fn in_range(r: Result<f64, RangeError>, min: f64, max: f64) {
    match r {
        Ok(v) => assert!(
            v.is_finite() && (min..=max).contains(&v),
            "{v} outside {min}..={max}"
        ),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut words = data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()));
    let Some(raw) = words.next() else {
        return;
    };
    let (lo, hi) = (raw as u32, (raw >> 32) as u32);
    let signed = lo as i32;

    in_range(checked_temperature(signed), -40.0, 150.0);
    in_range(checked_power(signed), 0.0, 2000.0);
    in_range(checked_voltage(hi), 0.0, 5.0);
    in_range(checked_clock(hi), 0.0, 10e9);
    for v in [lo, u32::MAX, 0xFFFF, 0x7FFF_FFFF] {
        assert!(checked_voltage(v).is_err() || !convert::is_sentinel(u64::from(v), 32));
        assert!(checked_clock(v).is_err() || !convert::is_sentinel(u64::from(v), 32));
    }
    assert!(checked_temperature(-1).is_err() && checked_power(-1).is_err());

    if let Some(w) = convert::power_watts(signed) {
        assert!(w.is_finite() && w >= 0.0);
    }
    if let Some(w) = convert::mcu_power_watts(signed) {
        assert!(w.is_finite() && (0.0..3276.5).contains(&w));
    }
    if let Some(r) = convert::percent_to_ratio(lo) {
        assert!((0.0..=1.0).contains(&r));
    }
    if let Some(b) = convert::mb_to_bytes(raw) {
        assert_eq!(b / (1 << 20), raw);
    }
    if let Some(c) = convert::temperature_celsius(signed) {
        assert!(c >= -273.0 && c < f64::from(0x7ffd));
    }
    assert!(convert::voltage_volts(hi).is_finite() && convert::mhz_to_hertz(hi).is_finite());
    for bits in [8, 16, 32, 64, hi % 80] {
        let _ = convert::is_sentinel(raw, bits);
    }

    // The rest of the input: HCCS link bandwidths, and (logical, physical) id pairs.
    let rest: Vec<u64> = words.collect();
    let gbps: Vec<f64> = rest.iter().map(|w| f64::from_bits(*w)).collect();
    let links = convert::hccs_links_bytes_per_second(&gbps);
    assert_eq!(links.len(), gbps.len(), "one slot per link");
    for (g, b) in gbps.iter().zip(&links) {
        if let Some(b) = b {
            assert!(
                b.is_finite() && *b >= 0.0 && *b <= 1000e9,
                "{g} GB/s became {b} B/s"
            );
        }
    }
    let chips: Vec<(u32, u32)> = rest
        .iter()
        .map(|w| (*w as u32 % 16, (*w >> 32) as u32 % 16))
        .collect();
    let dups = convert::duplicate_physical_ids(&chips);
    let distinct: std::collections::BTreeSet<u32> = chips.iter().map(|c| c.1).collect();
    assert_eq!(
        dups.len(),
        chips.len() - distinct.len(),
        "every repeat is named once"
    );
});
