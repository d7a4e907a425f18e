//! `probe::device::ports::decode`: the all-gathered NPU port tables of a group. Any bytes
//! decode to ports of the listed members only, sorted, at most 16 per member, with no two
//! ports sharing a device IP or a (member, physical id), and no unspecified IP; a table a
//! member encodes decodes back to its ports.
#![no_main]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use hcclwatch::probe::device::ports::{Port, decode, encode};
use libfuzzer_sys::fuzz_target;

/// Most ports one member announces, and bytes of one member's table.
const PER_MEMBER: usize = 16;
const TABLE_BYTES: usize = PER_MEMBER * 8;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 9);
    if rest.len() < n {
        return;
    }
    // Candidate indices in rank order (repeats allowed: the decoder must not trust them).
    let members: Vec<usize> = rest[..n].iter().map(|b| usize::from(*b % 12)).collect();
    let bytes = &rest[n..];
    let ports = decode(bytes, &members);

    let tables = (bytes.len() / TABLE_BYTES).min(members.len());
    let listed: BTreeSet<usize> = members[..tables].iter().copied().collect();
    assert!(
        ports.len() <= PER_MEMBER * tables,
        "{} ports from {tables} tables",
        ports.len()
    );
    assert!(ports.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
    let mut ips = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for p in &ports {
        assert!(
            listed.contains(&p.node),
            "port of node {} not listed",
            p.node
        );
        assert!(!p.ip.is_unspecified());
        assert!(p.phy <= 255, "phy {}", p.phy);
        assert!(ips.insert(p.ip), "IP {} twice", p.ip);
        assert!(ids.insert((p.node, p.phy)), "({}, {}) twice", p.node, p.phy);
    }

    // One member's own table, from the ports just decoded (distinct IPs and phys), decodes
    // back to them.
    let local: Vec<(u32, Ipv4Addr)> = ports
        .iter()
        .filter(|p| Some(&p.node) == members.first())
        .map(|p| (p.phy, p.ip))
        .collect();
    if let Some(&node) = members.first() {
        let back: Vec<Port> = decode(&encode(&local), &[node]);
        let want: Vec<Port> = local
            .iter()
            .map(|&(phy, ip)| Port { node, phy, ip })
            .collect();
        assert_eq!(back, want);
    }
});
