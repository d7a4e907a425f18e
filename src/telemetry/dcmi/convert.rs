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

/// GB/s (decimal, as DCMI's HCCS bandwidth) → bytes/s. NaN, infinite or negative values
/// are not readings.
pub fn gigabytes_to_bytes_per_second(gbps: f64) -> Option<f64> {
    (gbps.is_finite() && gbps >= 0.0).then_some(gbps * 1e9)
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
