//! `probe::row`: one member's gathered row in the layout of a wire version, as a peer of
//! this or another release sends it. Any values decode to the row of version 2 this build
//! reads (all its fixed fields from version 3 on, nothing more than the row held plus the
//! fields it lacks) or to a typed error, never a panic; a row written at a version reads
//! back exactly as written.
#![no_main]

use hcclwatch::probe::round::ROW_FIXED;
use hcclwatch::probe::row::{LAYOUT_HEAD, LAYOUT_VERSION, decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&v, bytes)) = data.split_first() else {
        return;
    };
    // Versions 2 (no layout) to 4 (a later release's, read by its layout).
    let version = 2 + v % 3;
    let row: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    if let Ok(r) = decode(version, &row) {
        if version < LAYOUT_VERSION {
            assert_eq!(r.len(), row.len(), "a version-2 row is read as it is");
        } else {
            assert!(r.len() >= ROW_FIXED, "every fixed field this build knows");
            assert!(
                r.len() <= row.len() - LAYOUT_HEAD + ROW_FIXED,
                "nothing beyond the row but the fields it lacks"
            );
        }
    }
    // What this build writes (a row always has the fixed fields) reads back bit for bit.
    if row.len() >= ROW_FIXED {
        let back = decode(version, &encode(version, &row)).expect("a written row reads back");
        assert_eq!(back.len(), row.len());
        assert!(
            back.iter()
                .zip(&row)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
});
