//! `remediate::payload::parse`: an Alertmanager webhook body, straight from the network.
//! Any bytes give a notification or an error; an accepted one is version 4 with 1 to
//! 1000 alerts, each named, with a hex fingerprint of at most 64 digits and, where a rule
//! needs it, a node label that is a Kubernetes node name (RFC 1123 subdomain).
#![no_main]

use hcclwatch::remediate::payload::parse;
use libfuzzer_sys::fuzz_target;

/// An RFC 1123 subdomain, written out here rather than taken from the code under test.
fn node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fuzz_target!(|data: &[u8]| {
    // Rules act on alerts whose name starts with "Hccl" (as the shipped rules do).
    let needs_node = |a: &hcclwatch::remediate::payload::Alert| a.name().starts_with("Hccl");
    let n = match parse(data, "node", needs_node) {
        Ok(n) => n,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(n.version, "4");
    assert!(
        (1..=1000).contains(&n.alerts.len()),
        "{} alerts",
        n.alerts.len()
    );
    for a in &n.alerts {
        assert!(!a.name().is_empty());
        assert!(!a.fingerprint.is_empty() && a.fingerprint.len() <= 64);
        assert!(a.fingerprint.bytes().all(|b| b.is_ascii_hexdigit()));
        if needs_node(a) {
            let node = a.labels.get("node").expect("a node label");
            assert!(node_name(node), "node {node:?} accepted");
        }
    }
});
