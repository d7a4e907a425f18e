//! `collective::bootstrap::ranktable::parse`: an HCCL rank-table file. Any text gives a
//! table or an error (every error renders); a table has a supported version, ranks
//! numbered 0..n in order, ids within `u32` and ports within 1..=65535; its addresses
//! resolve or fail cleanly for any base port.
#![no_main]

use hcclwatch::collective::bootstrap::ranktable::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let table = match parse(text) {
        Ok(t) => t,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(["1.0", "1.2", "2.0"].contains(&table.version.as_str()));
    for (i, r) in table.ranks.iter().enumerate() {
        assert_eq!(r.rank_id, i, "ranks are 0..n in order");
        assert!(r.rank_id as u64 <= u64::from(u32::MAX));
        assert_ne!(r.host_port, Some(0), "port 0 accepted");
        // The position among its host's ranks in file order (the table is then sorted by
        // rank id, so it need not be at most `i`): within the table's size.
        assert!(r.local_index < table.ranks.len());
    }
    for base in [0u16, 1, 29000, 65535] {
        if let Ok(addrs) = table.addresses(base) {
            assert_eq!(addrs.len(), table.ranks.len());
            for (a, r) in addrs.iter().zip(&table.ranks) {
                if let Some(p) = r.host_port {
                    assert_eq!(a.port(), p);
                } else {
                    assert_eq!(usize::from(a.port()), usize::from(base) + r.local_index);
                }
            }
        }
    }
});
