//! `collective::transport::frame::Header`: every 32 bytes a peer can send as a header
//! decode to a header or an error, never a panic; a decoded header encodes back to the
//! same bytes (the reserved byte aside); and `expect` accepts a header only if it is
//! exactly the one expected and within the receiver's length limit.
#![no_main]

use hcclwatch::collective::transport::frame::{HEADER_LEN, Header, Kind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((raw, rest)) = data.split_first_chunk::<HEADER_LEN>() else {
        return;
    };
    let Ok(h) = Header::decode(raw) else {
        return;
    };
    let mut again = h.encode();
    again[7] = raw[7];
    assert_eq!(&again, raw, "a decoded header re-encodes to its bytes");
    assert_eq!(Header::decode(&h.encode()), Ok(h));

    // What the receiver expects: another header from the rest of the input (or the same
    // one), and a length limit (the next four bytes, or 1 MiB).
    let (want, limit) = match rest.split_first_chunk::<HEADER_LEN>() {
        Some((w, more)) => (Header::decode(w).unwrap_or(h), more),
        None => (h, rest),
    };
    let max_frame = limit
        .first_chunk::<4>()
        .map_or(1 << 20, |b| u32::from_le_bytes(*b) as usize);
    if h.expect(&want, max_frame).is_ok() {
        assert!(
            h.len as usize <= max_frame,
            "a frame over the limit was accepted"
        );
        assert_eq!(h, want, "a header other than the expected one was accepted");
        assert!(
            h.kind != Kind::Data || want.kind == Kind::Data,
            "an untagged frame stood in for a tagged one"
        );
    }
});
