//! The device plane of one probe group: its NPU ports ping each other on the rotating plan
//! the daemon's prober uses, suspects are re-pinged from the ports
//! [`DeviceEngine::confirmers`] names, suspect pairs are re-pinged, and every ping is a
//! [`World::device_ping`].

use super::counters::Reader;
use super::world::{Draw, World};
use crate::health::device::{DeviceConfig, DeviceEngine, DeviceInput, DeviceOutput, PortProbe};

/// The plan of round `r` over `ports` ports (`npus` per node, numbered node by node): port
/// `i` pings `(i + 1 + ((r·k + j) mod (P − 1))) mod P` for `j` in `0..k`, skipping targets
/// on its own node. Over `⌈(P − 1) / k⌉` rounds every port meets every other.
pub fn plan(r: u64, ports: usize, npus: usize, k: usize) -> Vec<(usize, usize)> {
    if ports < 2 {
        return Vec::new();
    }
    let npus = npus.max(1);
    let m = (ports - 1) as u64;
    let mut out = Vec::with_capacity(ports * k);
    for i in 0..ports {
        for j in 0..k as u64 {
            let t = (i + 1 + ((r * k as u64 + j) % m) as usize) % ports;
            if t / npus != i / npus {
                out.push((i, t));
            }
        }
    }
    out
}

/// Packets a group's ports put on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Traffic {
    /// Echo requests sent (plan, re-pings).
    pub requests: u64,
    /// Echo replies sent back.
    pub replies: u64,
    /// The most request + reply packets one port handled in a round.
    pub max_port_round: u64,
}

/// One group's device engine and what it asked for last round.
pub struct DeviceGroup {
    /// The engine.
    pub engine: DeviceEngine,
    /// Member node numbers.
    members: Vec<usize>,
    npus: usize,
    last: Option<DeviceOutput>,
    /// Packets so far.
    pub traffic: Traffic,
    /// The ports' congestion counters, as the daemon reads them.
    counters: Reader,
}

/// Salt of the ports' counter misses and false alarms (a stream apart from the nodes').
const PORT_COUNTER_SALT: u64 = 0x706f_7274_6374_0001;

impl DeviceGroup {
    /// The device plane of a group of `members`, `npus` ports each.
    pub fn new(members: &[usize], npus: usize, cfg: DeviceConfig) -> Self {
        let port_nodes: Vec<usize> = (0..members.len() * npus).map(|i| i / npus).collect();
        DeviceGroup {
            engine: DeviceEngine::new(&port_nodes, cfg),
            members: members.to_vec(),
            npus,
            last: None,
            traffic: Traffic::default(),
            counters: Reader::default(),
        }
    }

    /// The global port number of local port `i`.
    pub fn global(&self, i: usize) -> usize {
        self.members[i / self.npus] * self.npus + i % self.npus
    }

    /// One round: the plan's pings, last round's re-pings, the engine's step.
    /// `host_suspects` are the group's members (local indices) that the host-plane engine
    /// holds confirmed or worse, as the daemon passes them.
    pub fn round(
        &mut self,
        w: &World,
        d: &mut Draw,
        (r, plan_round): (u64, u64),
        host_suspects: Vec<usize>,
    ) -> &DeviceOutput {
        let (members, npus) = (&self.members, self.npus);
        let ports = members.len() * npus;
        let k = w.scenario.device.pings_per_round;
        let mut load = vec![0u64; ports];
        let mut traffic = self.traffic;
        let global = |i: usize| members[i / npus] * npus + i % npus;
        let mut ping = |d: &mut Draw, a: usize, b: usize, load: &mut [u64]| -> PortProbe {
            let p = w.device_ping(d, r, global(a), global(b));
            load[a] += u64::from(p.sent);
            load[b] += u64::from(p.received);
            traffic.requests += u64::from(p.sent);
            traffic.replies += u64::from(p.received);
            PortProbe {
                src: a,
                dst: b,
                ..p
            }
        };
        let probes: Vec<PortProbe> = plan(plan_round, ports, self.npus, k)
            .into_iter()
            .map(|(a, b)| ping(d, a, b, &mut load))
            .collect();
        let mut confirmations = Vec::new();
        if let Some(last) = &self.last {
            let present = vec![true; self.members.len()];
            for &port in &last.confirm_requests {
                for c in self.engine.confirmers(port, &present) {
                    confirmations.push(ping(d, c, port, &mut load));
                }
            }
            for &(a, b) in &last.pair_requests {
                confirmations.push(ping(d, a, b, &mut load));
            }
        }
        traffic.max_port_round = traffic
            .max_port_round
            .max(load.iter().copied().max().unwrap_or(0));
        self.traffic = traffic;
        let (congested_ports, port_signs) = self.port_readings(w, r, &probes, &confirmations);
        let out = self.engine.step(&DeviceInput {
            probes,
            confirmations,
            absent_nodes: Vec::new(),
            host_suspects,
            tors: self
                .members
                .iter()
                .map(|&n| Some(w.topo.tor(n) as u32))
                .collect(),
            // The simulated fabric hangs every NPU port off its node's ToR (no rails).
            port_tors: Vec::new(),
            congested_ports,
            port_signs,
        });
        self.last.insert(out)
    }

    /// What the ports' own counters and hardware show in round `r`, in local port numbers:
    /// congestion as read through the scenario's `[counters]` (misses, false alarms, lag),
    /// and hardware signs.
    fn port_readings(
        &mut self,
        w: &World,
        r: u64,
        probes: &[PortProbe],
        confirmations: &[PortProbe],
    ) -> (Vec<usize>, Vec<(usize, crate::health::hardware::Signs)>) {
        let globals: Vec<usize> = (0..self.members.len() * self.npus)
            .map(|i| self.global(i))
            .collect();
        let pings: Vec<(usize, usize)> = probes
            .iter()
            .chain(confirmations)
            .map(|p| (globals[p.src], globals[p.dst]))
            .collect();
        let truth = w.device_congested(r, &globals, &pings);
        let seed = w.scenario.fleet.seed ^ PORT_COUNTER_SALT;
        let flagged = self
            .counters
            .read(&w.scenario.counters, seed, r, &globals, truth);
        let congested = (0..globals.len())
            .filter(|&i| flagged.contains(&globals[i]))
            .collect();
        (congested, w.port_hardware(r, &globals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan as the lead's prober will run it: k targets per port, never on its own
    /// node, and every pair of ports on different nodes within ⌈(P − 1)/k⌉ rounds.
    #[test]
    fn the_plan_covers_every_pair_and_skips_own_node() {
        let (nodes, npus, k): (usize, usize, usize) = (5, 4, 3);
        let ports = nodes * npus;
        let mut seen = std::collections::BTreeSet::new();
        let rounds = (ports - 1).div_ceil(k) as u64;
        for r in 0..rounds {
            let p = plan(r, ports, npus, k);
            assert!(p.iter().all(|(a, b)| a / npus != b / npus));
            // Port 0 in round 0 pings 1, 2, 3 — all on its own node — so nothing.
            if r == 0 {
                assert!(!p.iter().any(|(a, _)| *a == 0));
            }
            seen.extend(p);
        }
        for a in 0..ports {
            for b in 0..ports {
                if a / npus != b / npus {
                    assert!(seen.contains(&(a, b)), "{a} never pinged {b}");
                }
            }
        }
        // Port i's j-th target in round r, by the formula.
        let p = plan(7, ports, npus, k);
        let want = (6 + 1 + ((7 * 3 + 1) % 19)) % ports;
        assert!(p.contains(&(6, want)), "{want}");
    }
}
