//! `probe::plan::Plan::decode`: rank 0's round plan as every member receives it. Any
//! bytes decode to a plan that names only ranks of the group (no pair with itself), at
//! most 64 pairs, at most as many confirmations as pairs; a decoded plan survives its
//! own encoding.
#![no_main]

use hcclwatch::probe::plan::Plan;
use libfuzzer_sys::fuzz_target;

/// Most extra pairs a plan carries (the module's documented bound).
const MAX_PAIRS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((size, bytes)) = data.split_first_chunk::<2>() else {
        return;
    };
    // Group sizes 0..=1023: the decoder must hold for an empty group too.
    let size = usize::from(u16::from_le_bytes(*size) % 1024);
    let plan = Plan::decode(bytes, size);
    assert!(plan.pairs.len() <= MAX_PAIRS, "{} pairs", plan.pairs.len());
    assert!(plan.n_confirm <= plan.pairs.len());
    for &(a, b) in &plan.pairs {
        assert!(a < size && b < size, "pair ({a}, {b}) in a group of {size}");
        assert_ne!(a, b, "a rank paired with itself");
    }
    let wire = plan.encode();
    assert_eq!(
        wire.len(),
        Plan::WORDS * 8,
        "the wire form has a fixed size"
    );
    assert_eq!(
        Plan::decode(&wire, size),
        plan,
        "a plan survives its encoding"
    );
});
