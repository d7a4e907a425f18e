//! DCMI units to SI units.
//!
//! Conversions divide by powers of ten instead of multiplying by 0.1 or 0.01, so the
//! result is the correctly rounded double: 2150 dW is exactly `215`, never
//! `215.00000000000003`. Out-of-range raw values become `None`, never a clamped number.

/// 0.1 W → W. Negative power is not a reading.
pub fn power_watts(deciwatts: i32) -> Option<f64> {
    (deciwatts >= 0).then(|| f64::from(deciwatts) / 10.0)
}

/// The card's MCU power, 0.1 W → W. `0x7FFD` (invalid value) and `0x7FFF` (read failure,
/// e.g. I2C) are DCMI's markers, not 3276.5 W or 3276.7 W; anything from `0x7FFD` up or
/// below zero is not a reading.
pub fn mcu_power_watts(deciwatts: i32) -> Option<f64> {
    (0..0x7FFD)
        .contains(&deciwatts)
        .then(|| f64::from(deciwatts) / 10.0)
}

/// 0.01 V → V.
pub fn voltage_volts(centivolts: u32) -> f64 {
    f64::from(centivolts) / 100.0
}

/// MHz → Hz.
pub fn mhz_to_hertz(mhz: u32) -> f64 {
    f64::from(mhz) * 1e6
}

/// % → ratio; values above 100 are DCMI's "invalid" markers and are rejected.
pub fn percent_to_ratio(percent: u32) -> Option<f64> {
    (percent <= 100).then(|| f64::from(percent) / 100.0)
}

/// DCMI "MB" (2^20 bytes: a 64 GiB HBM reports 65536) → bytes.
pub fn mb_to_bytes(mb: u64) -> Option<u64> {
    mb.checked_mul(1 << 20)
}

/// °C as DCMI reports it. Below absolute zero, or the MCU "invalid"/"read fail" markers
/// (0x7ffd, 0x7fff), is not a reading.
pub fn temperature_celsius(c: i32) -> Option<f64> {
    ((-273..0x7ffd).contains(&c)).then(|| f64::from(c))
}

/// Highest HCCS link bandwidth taken as a reading, GB/s: an HCCS link carries some tens
/// of GB/s; a thousand is no physical value.
pub const MAX_HCCS_GBPS: f64 = 1000.0;

/// GB/s (decimal, as DCMI's HCCS bandwidth) → bytes/s. NaN, infinite, negative or
/// physically impossible values (above [`MAX_HCCS_GBPS`]) are not readings.
pub fn gigabytes_to_bytes_per_second(gbps: f64) -> Option<f64> {
    (gbps.is_finite() && (0.0..=MAX_HCCS_GBPS).contains(&gbps)).then_some(gbps * 1e9)
}

// === Physical ranges (issue 18) ===
//
// A reading outside what the hardware can physically report is a driver or firmware
// fault, not a measurement: exporting it would draw a 4-billion-degree chip on a
// dashboard and fire every threshold alert. The checks below are pure; the caller omits
// the reading, counts it, and logs it once per (chip, reading) until the raw value
// changes (see [`OutOfRangeLog`]).

/// Lowest plausible chip temperature, °C.
pub const TEMPERATURE_MIN_C: f64 = -40.0;
/// Highest plausible chip temperature, °C.
pub const TEMPERATURE_MAX_C: f64 = 150.0;
/// Highest plausible power of one chip, W.
pub const POWER_MAX_W: f64 = 2000.0;
/// Highest plausible voltage, V.
pub const VOLTAGE_MAX_V: f64 = 5.0;
/// Highest plausible clock, Hz.
pub const CLOCK_MAX_HZ: f64 = 10e9;

/// Which reading a range check is about (the `reading` label of the counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reading {
    /// Chip temperature.
    Temperature,
    /// Chip power.
    Power,
    /// Chip voltage.
    Voltage,
    /// AI-core (or other) clock.
    Clock,
}

impl Reading {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reading::Temperature => "temperature",
            Reading::Power => "power",
            Reading::Voltage => "voltage",
            Reading::Clock => "clock",
        }
    }
}

/// A raw reading that is not a physical value.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RangeError {
    /// An all-ones sentinel (`0xFFFF`, `0xFFFFFFFF`, `-1`, `0x7FFF…`): "no value".
    #[error("{reading}: raw value {raw:#x} is an all-ones sentinel", reading = .reading.as_str())]
    Sentinel {
        /// Which reading.
        reading: Reading,
        /// The raw value.
        raw: u64,
    },
    /// Converted, but outside the physical range.
    #[error("{reading}: {value} is outside {min}..={max}", reading = .reading.as_str())]
    OutOfRange {
        /// Which reading.
        reading: Reading,
        /// The converted value (SI units).
        value: f64,
        /// Lowest plausible.
        min: f64,
        /// Highest plausible.
        max: f64,
    },
}

impl RangeError {
    /// Which reading.
    pub fn reading(&self) -> Reading {
        match self {
            RangeError::Sentinel { reading, .. } | RangeError::OutOfRange { reading, .. } => {
                *reading
            }
        }
    }
}

/// Whether `raw`, as an unsigned value of `bits` width, is all ones (`-1` for signed
/// fields), or the signed all-ones-but-the-sign maximum the MCU uses.
pub fn is_sentinel(raw: u64, bits: u32) -> bool {
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let v = raw & mask;
    v == mask || v == mask >> 1 || (bits > 16 && (v == 0xFFFF || v == 0x7FFF))
}

fn ranged(reading: Reading, value: f64, min: f64, max: f64) -> Result<f64, RangeError> {
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(RangeError::OutOfRange {
            reading,
            value,
            min,
            max,
        })
    }
}

/// A DCMI temperature (°C, `i32`) checked against −40..=150 °C.
pub fn checked_temperature(raw: i32) -> Result<f64, RangeError> {
    if is_sentinel(raw as u32 as u64, 32) {
        return Err(RangeError::Sentinel {
            reading: Reading::Temperature,
            raw: raw as u32 as u64,
        });
    }
    ranged(
        Reading::Temperature,
        f64::from(raw),
        TEMPERATURE_MIN_C,
        TEMPERATURE_MAX_C,
    )
}

/// A DCMI power (0.1 W, `i32`) checked against 0..=2 kW.
pub fn checked_power(deciwatts: i32) -> Result<f64, RangeError> {
    if is_sentinel(deciwatts as u32 as u64, 32) {
        return Err(RangeError::Sentinel {
            reading: Reading::Power,
            raw: deciwatts as u32 as u64,
        });
    }
    ranged(
        Reading::Power,
        f64::from(deciwatts) / 10.0,
        0.0,
        POWER_MAX_W,
    )
}

/// A DCMI voltage (0.01 V, `u32`) checked against 0..=5 V.
pub fn checked_voltage(centivolts: u32) -> Result<f64, RangeError> {
    if is_sentinel(u64::from(centivolts), 32) {
        return Err(RangeError::Sentinel {
            reading: Reading::Voltage,
            raw: u64::from(centivolts),
        });
    }
    ranged(
        Reading::Voltage,
        voltage_volts(centivolts),
        0.0,
        VOLTAGE_MAX_V,
    )
}

/// A DCMI clock (MHz, `u32`) checked against 0..=10 GHz.
pub fn checked_clock(mhz: u32) -> Result<f64, RangeError> {
    if is_sentinel(u64::from(mhz), 32) {
        return Err(RangeError::Sentinel {
            reading: Reading::Clock,
            raw: u64::from(mhz),
        });
    }
    ranged(Reading::Clock, mhz_to_hertz(mhz), 0.0, CLOCK_MAX_HZ)
}

/// Remembers which (chip, reading) pairs were logged as out of range, with the raw value,
/// so a stuck bad value is logged once, and again only when it changes.
#[derive(Debug, Default, Clone)]
pub struct OutOfRangeLog {
    last: std::collections::HashMap<(u32, Reading), u64>,
}

impl OutOfRangeLog {
    /// Whether to log this bad raw value of `reading` on `chip` now.
    pub fn should_log(&mut self, chip: u32, reading: Reading, raw: u64) -> bool {
        self.last.insert((chip, reading), raw) != Some(raw)
    }

    /// The reading is good again: a later bad value is logged anew.
    pub fn clear(&mut self, chip: u32, reading: Reading) {
        self.last.remove(&(chip, reading));
    }
}

/// Two chips report the same physical id: an error naming both (by their logical ids).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chips with logical ids {first} and {second} both report physical id {phy_id}")]
pub struct DuplicatePhysicalId {
    /// The shared physical id.
    pub phy_id: u32,
    /// Logical id of the first chip with it.
    pub first: u32,
    /// Logical id of the second.
    pub second: u32,
}

/// Checks `(logical id, physical id)` pairs for a physical id used twice; every
/// duplicate is returned (linear time).
pub fn duplicate_physical_ids(chips: &[(u32, u32)]) -> Vec<DuplicatePhysicalId> {
    let mut seen: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for &(logic, phy) in chips {
        if let Some(&first) = seen.get(&phy) {
            out.push(DuplicatePhysicalId {
                phy_id: phy,
                first,
                second: logic,
            });
        } else {
            seen.insert(phy, logic);
        }
    }
    out
}

/// Per-link HCCS bandwidth (GB/s) → bytes/s, link by link: a bad link is `None` in its
/// own slot (and counted by the caller) and never hides the chip's other links.
pub fn hccs_links_bytes_per_second(gbps: &[f64]) -> Vec<Option<f64>> {
    gbps.iter()
        .map(|g| gigabytes_to_bytes_per_second(*g))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_examples() {
        assert_eq!(power_watts(2150), Some(215.0));
        assert_eq!(power_watts(2151), Some(215.1));
        assert_eq!(power_watts(-1), None);
        assert_eq!(mcu_power_watts(1234), Some(123.4));
        assert_eq!(mcu_power_watts(0x7FFC), Some(3276.4));
        assert_eq!(mcu_power_watts(0x7FFD), None);
        assert_eq!(mcu_power_watts(0x7FFF), None);
        assert_eq!(mcu_power_watts(-5), None);
        assert_eq!(voltage_volts(85), 0.85);
        assert_eq!(mhz_to_hertz(1800), 1_800_000_000.0);
        assert_eq!(percent_to_ratio(37), Some(0.37));
        assert_eq!(percent_to_ratio(100), Some(1.0));
        assert_eq!(percent_to_ratio(101), None);
        assert_eq!(percent_to_ratio(u32::MAX), None);
        assert_eq!(mb_to_bytes(65536), Some(68_719_476_736));
        assert_eq!(mb_to_bytes(u64::MAX), None);
        assert_eq!(temperature_celsius(45), Some(45.0));
        assert_eq!(temperature_celsius(-300), None);
        assert_eq!(temperature_celsius(0x7fff), None);
        assert_eq!(gigabytes_to_bytes_per_second(1.5), Some(1.5e9));
        assert_eq!(gigabytes_to_bytes_per_second(f64::NAN), None);
    }

    /// Pins: readings outside the physical range are errors, not values (a raw
    /// temperature of 200 °C or 0x7FFE, a 0xFFFF power, 6 V, 12 GHz were exported as is).
    #[test]
    fn physical_ranges() {
        assert_eq!(checked_temperature(45), Ok(45.0));
        assert_eq!(checked_temperature(-40), Ok(-40.0));
        assert_eq!(checked_temperature(150), Ok(150.0));
        assert!(matches!(
            checked_temperature(151),
            Err(RangeError::OutOfRange {
                reading: Reading::Temperature,
                ..
            })
        ));
        assert!(matches!(
            checked_temperature(-41),
            Err(RangeError::OutOfRange { .. })
        ));
        assert!(matches!(
            checked_temperature(0x7fff),
            Err(RangeError::Sentinel { .. })
        ));
        assert!(matches!(
            checked_temperature(-1),
            Err(RangeError::Sentinel { .. })
        ));
        assert_eq!(checked_power(2150), Ok(215.0));
        assert!(matches!(
            checked_power(20_001),
            Err(RangeError::OutOfRange {
                reading: Reading::Power,
                ..
            })
        ));
        assert!(matches!(
            checked_power(0xFFFF),
            Err(RangeError::Sentinel { .. })
        ));
        assert_eq!(checked_voltage(85), Ok(0.85));
        assert!(matches!(
            checked_voltage(600),
            Err(RangeError::OutOfRange {
                reading: Reading::Voltage,
                ..
            })
        ));
        assert!(matches!(
            checked_voltage(u32::MAX),
            Err(RangeError::Sentinel { .. })
        ));
        assert_eq!(checked_clock(1800), Ok(1.8e9));
        assert!(matches!(
            checked_clock(12_000),
            Err(RangeError::OutOfRange {
                reading: Reading::Clock,
                ..
            })
        ));
        assert!(matches!(
            checked_clock(u32::MAX),
            Err(RangeError::Sentinel { .. })
        ));
    }

    #[test]
    fn out_of_range_logged_once_until_it_changes() {
        let mut l = OutOfRangeLog::default();
        assert!(l.should_log(0, Reading::Power, 7));
        assert!(!l.should_log(0, Reading::Power, 7));
        assert!(l.should_log(1, Reading::Power, 7), "another chip");
        assert!(l.should_log(0, Reading::Temperature, 7), "another reading");
        assert!(l.should_log(0, Reading::Power, 8), "the value changed");
        l.clear(0, Reading::Power);
        assert!(l.should_log(0, Reading::Power, 8));
    }

    #[test]
    fn duplicate_physical_ids_name_both_chips() {
        assert!(duplicate_physical_ids(&[(0, 0), (1, 1)]).is_empty());
        let d = duplicate_physical_ids(&[(0, 4), (1, 5), (2, 4)]);
        assert_eq!(
            d,
            vec![DuplicatePhysicalId {
                phy_id: 4,
                first: 0,
                second: 2
            }]
        );
        assert!(d[0].to_string().contains("0 and 2"));
    }

    #[test]
    fn one_bad_hccs_link_keeps_the_others() {
        assert_eq!(
            hccs_links_bytes_per_second(&[1.0, f64::NAN, -2.0, 3.5]),
            vec![Some(1e9), None, None, Some(3.5e9)]
        );
    }

    proptest! {
        /// Division keeps the shortest decimal form: formatting the watts gives the
        /// deciwatt integer with a decimal point inserted, to the last digit.
        #[test]
        fn power_prints_exactly(dw in 0i32..1_000_000) {
            let w = power_watts(dw).unwrap();
            let expected = if dw % 10 == 0 { format!("{}", dw / 10) } else { format!("{}.{}", dw / 10, dw % 10) };
            prop_assert_eq!(format!("{w}"), expected);
        }

        #[test]
        fn voltage_prints_exactly(cv in 0u32..100_000) {
            let v = voltage_volts(cv);
            let s = format!("{v}");
            let back: f64 = s.parse().unwrap();
            prop_assert_eq!((back * 100.0).round() as u32, cv);
            let int_digits = (cv / 100).to_string().len();
            prop_assert!(s.len() <= int_digits + 3, "{} is longer than needed", s);
        }
    }
}
