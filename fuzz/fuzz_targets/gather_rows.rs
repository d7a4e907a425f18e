//! `probe::round::split_rows`: the all-gathered measurement rows of a probe round. Any
//! bytes split into one measurement per whole row, each with `width - ROW_FIXED`
//! confirmation slots and a hard-fault code that is a byte; nothing is read past the input.
#![no_main]

use hcclwatch::health::hardware::Signs;
use hcclwatch::probe::round::{ROW_FIXED as FIXED, split_rows};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&w, bytes)) = data.split_first() else {
        return;
    };
    // Widths 0..=80: below, at and above the fixed fields, up to 73 confirmation slots.
    let width = usize::from(w % 81);
    let rows = split_rows(bytes, width);
    assert_eq!(rows.len(), bytes.len() / 8 / width.max(1));
    for (i, m) in rows.iter().enumerate() {
        assert_eq!(m.confirm.len(), width.saturating_sub(FIXED));
        let at = |k: usize| {
            let o = (i * width.max(1) + k) * 8;
            f64::from_ne_bytes(bytes[o..o + 8].try_into().unwrap())
        };
        if width > FIXED {
            assert_eq!(m.confirm[0].to_bits(), at(FIXED).to_bits());
        }
        if width > 5 {
            assert_eq!(m.over_budget, at(5) != 0.0);
        }
        if width > 7 {
            // The uplink flags: a whole number below 512, bit 0 congestion, the bits
            // above it the hardware signs (those this build knows); anything else none.
            let v = at(7);
            let bits = if v.fract() == 0.0 && (0.0..512.0).contains(&v) {
                v as u16
            } else {
                0
            };
            assert_eq!(m.congested, bits & 1 == 1);
            assert_eq!(m.hardware, Signs::from_bits((bits >> 1) as u8));
        }
    }
});
