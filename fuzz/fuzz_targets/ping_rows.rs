//! `probe::device::valid_ping`: one ping of a member's all-gathered device-plane row. A
//! ping is kept only if its source is a port of the member that reports it, its
//! destination another port of the table, 1 to 16 packets were sent and at most that many
//! received, and one that received anything has an RTT above 0 and below 60 s.
#![no_main]

use std::net::Ipv4Addr;

use hcclwatch::probe::device::ports::Port;
use hcclwatch::probe::device::valid_ping;
use libfuzzer_sys::fuzz_target;

/// Values of one ping in a row: source, destination, kind, sent, received, RTT.
const FIELDS: usize = 6;

fuzz_target!(|data: &[u8]| {
    let Some((&[count, reporter], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    // A table of up to 32 ports on 4 nodes, the owner of each from the input.
    let count = usize::from(count % 33);
    if rest.len() < count {
        return;
    }
    let ports: Vec<Port> = rest[..count]
        .iter()
        .enumerate()
        .map(|(i, b)| Port {
            node: usize::from(b % 4),
            phy: i as u32,
            ip: Ipv4Addr::new(10, 0, 0, i as u8 + 1),
        })
        .collect();
    let node = usize::from(reporter % 5);
    let values: Vec<f64> = rest[count..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Whole rows, as the all-gather delivers them, and every other length once.
    for f in values.chunks(FIELDS) {
        let Some(p) = valid_ping(&ports, f, node) else {
            continue;
        };
        assert_eq!(f.len(), FIELDS);
        assert!(p.src < ports.len() && p.dst < ports.len());
        assert_eq!(ports[p.src].node, node, "a member reported another's port");
        assert_ne!(p.src, p.dst);
        assert!((1..=16).contains(&p.sent), "sent {}", p.sent);
        assert!(p.received <= p.sent);
        if let Some(rtt) = p.rtt {
            assert!(rtt.is_finite() && rtt > 0.0 && rtt < 60.0, "rtt {rtt}");
        }
        assert!(
            p.received == 0 || p.rtt.is_some(),
            "received without an RTT"
        );
    }
});
