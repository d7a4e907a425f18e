//! Who pings whom on the device plane: a rotating plan over every NPU port of the group,
//! derived from the agreed round number and the port table alone, so every member computes
//! the same plan without sending it.
//!
//! In round `r` port `i` pings ports `(i + s_j) mod P` for `j` in `0..k`, with strides
//! `s_j = 1 + ((r·k + j) mod (P − 1))`: every offset, hence every ordered pair, comes up
//! within ⌈(P − 1) / k⌉ rounds, and every port sends `k` pings and receives about `k`, so
//! no port is a hot spot. Targets on the pinging port's own node are skipped (the host
//! plane already covers the node; RDMA between the dies of one A3 card may not be set up).

use super::ports::Port;

/// The plan's pings for `round`, as (source port, destination port) indices.
pub fn pings(round: u64, ports: &[Port], k: usize) -> Vec<(usize, usize)> {
    let p = ports.len();
    if p < 2 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(p * k);
    for j in 0..k as u64 {
        let stride = 1 + ((round.wrapping_mul(k as u64).wrapping_add(j)) % (p as u64 - 1)) as usize;
        for i in 0..p {
            let d = (i + stride) % p;
            if ports[i].node != ports[d].node {
                out.push((i, d));
            }
        }
    }
    out
}

/// Rounds after which every ordered pair of ports has been planned at least once (the
/// bound the plan's coverage test checks).
#[cfg(test)]
pub fn coverage_rounds(ports: usize, k: usize) -> usize {
    if ports < 2 || k == 0 {
        return 0;
    }
    (ports - 1).div_ceil(k)
}

/// Pings per round per port that keep a port's packets within `max_pps` at one round per
/// `interval_secs`, at most `wanted` (each ping is 3 packets, and a port answers about as
/// many pings as it sends).
pub fn pings_within_budget(wanted: usize, max_pps: f64, interval_secs: f64) -> usize {
    let per_round = max_pps * interval_secs;
    let by_budget = (per_round / (2.0 * 3.0)).floor().max(0.0) as usize;
    wanted.min(by_budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    fn table(nodes: usize, per: usize) -> Vec<Port> {
        (0..nodes * per)
            .map(|i| Port {
                node: i / per,
                phy: (i % per) as u32,
                ip: Ipv4Addr::from(0x0A00_0000 + i as u32),
            })
            .collect()
    }

    #[test]
    fn every_cross_node_pair_is_covered_within_the_bound() {
        let ports = table(6, 8);
        let k = 4;
        let bound = coverage_rounds(ports.len(), k);
        let mut seen = BTreeSet::new();
        for r in 0..bound as u64 {
            seen.extend(pings(r, &ports, k));
        }
        for a in 0..ports.len() {
            for b in 0..ports.len() {
                if ports[a].node != ports[b].node {
                    assert!(
                        seen.contains(&(a, b)),
                        "({a}, {b}) not covered in {bound} rounds"
                    );
                }
            }
        }
    }

    #[test]
    fn no_port_pings_its_own_node_and_load_is_even() {
        let ports = table(6, 8);
        let plan = pings(17, &ports, 4);
        assert!(plan.iter().all(|(a, b)| ports[*a].node != ports[*b].node));
        for i in 0..ports.len() {
            let sent = plan.iter().filter(|(a, _)| *a == i).count();
            let got = plan.iter().filter(|(_, b)| *b == i).count();
            assert!(sent <= 4 && got <= 4, "port {i}: {sent} out, {got} in");
        }
    }

    #[test]
    fn the_budget_bounds_the_pings() {
        // 1 packet/s at one round per 30 s: 30 packets, 3 per ping, half sent.
        assert_eq!(pings_within_budget(8, 1.0, 30.0), 5);
        assert_eq!(pings_within_budget(4, 1.0, 30.0), 4);
        assert_eq!(pings_within_budget(4, 0.01, 30.0), 0);
    }
}
