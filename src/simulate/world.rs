//! The world: a scenario made concrete with its seed. Faults get their nodes, links, ports
//! and onsets ([`super::place`]), congestion processes get their episodes
//! ([`super::episodes`]), and every effect is a function of the round:
//! [`World::host_probe`] and [`World::device_ping`] are the only way anything of it reaches
//! the engines.
//!
//! Host-plane probes are modelled in log time, as the noise model of the detection design
//! does: a healthy probe is a fixed per-link offset, a common-mode drift (AR(1)), a daily
//! swing per ToR, and heavy-tailed noise with rare spikes. Faults and congestion add to it.
//! Congestion on an uplink adds to *every* probe through that uplink, confirmations and
//! re-measurements included; a partial fabric dip touches only a share of the links (or one
//! spine's pairs, one ToR pair, one ToR's uplinks), so peer-relative residuals do not
//! cancel it. Device-plane pings are packets: each is lost with the combined loss of
//! everything on its path, else its RTT is the healthy RTT times the same kind of
//! log-normal factors.

use serde::Serialize;
use std::collections::BTreeSet;

pub use super::draw::Draw;
use super::draw::unit_hash;
pub use super::episodes::Episode;
pub use super::fault::{Fault, Target};
use super::scenario::{Element, FaultKind, Noise, Plane, Scenario};
pub use super::topology::Topology;
use crate::health::device::PortProbe;
use crate::health::hardware::Signs;

/// Per-pair keys inside one probe group: the fixed link offset, and two uniforms (which
/// spine the pair hashes onto, and whether a partial dip touches it).
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct PairKey {
    offset: f64,
    spine: f64,
    dip: f64,
}

/// The ground truth of a run and its effects.
pub struct World {
    /// The scenario.
    pub scenario: Scenario,
    /// Topology.
    pub topo: Topology,
    /// Rounds.
    pub rounds: u64,
    /// Congestion episodes.
    pub episodes: Vec<Episode>,
    /// Faults.
    pub faults: Vec<Fault>,
    drift: Vec<f64>,
    daily_phase: Vec<f64>,
    keys: Vec<Vec<PairKey>>,
    node_faults: Vec<Vec<usize>>,
    port_faults: Vec<Vec<usize>>,
    tor_faults: Vec<Vec<usize>>,
    link_faults: std::collections::BTreeMap<(usize, usize), Vec<usize>>,
    pair_faults: std::collections::BTreeMap<(usize, usize), Vec<usize>>,
    dips: Vec<usize>,
    uplink_eps: Vec<Vec<usize>>,
    port_eps: Vec<Vec<usize>>,
    tor_eps: Vec<Vec<usize>>,
    spine_eps: Vec<Vec<usize>>,
    /// Per node: its silent hard faults (its NPU pings are lost while they last).
    silent: Vec<Vec<usize>>,
}

/// Seeds the stream that decides which congestion episodes show in the counters.
const SIGNAL_SEED: u64 = 0x5167_4e41_4c5f_0001;
/// Seeds the stream of stray hardware signs on healthy nodes.
const HARDWARE_FALSE_SEED: u64 = 0x6877_6661_6c73_0001;
/// Salt of the stray hardware signs on NPU ports (a stream apart from the nodes').
const PORT_HARDWARE_FALSE_SEED: u64 = 0x7068_7766_616c_0002;

/// A scenario's faults placed, with the draws that come before them in the world's stream
/// (the noise's drift, the daily phases and the pair keys), so that a generator can check
/// that a scenario's faults find room exactly as its run will place them.
struct Placed {
    topo: Topology,
    rounds: u64,
    d: Draw,
    drift: Vec<f64>,
    daily_phase: Vec<f64>,
    keys: Vec<Vec<PairKey>>,
    faults: Vec<Fault>,
}

impl Placed {
    fn draw(s: &Scenario) -> Result<Placed, Vec<(String, String)>> {
        let topo = Topology::new(s);
        let rounds = s.rounds();
        let mut d = Draw::new(s.fleet.seed, s.noise.dof);
        let drift = drift(&mut d, &s.noise, rounds);
        let daily_phase = (0..topo.tors())
            .map(|_| d.uniform(0.0, s.noise.daily_phase_hours))
            .collect();
        let keys = topo
            .groups
            .iter()
            .map(|g| {
                (0..g.len() * g.len())
                    .map(|_| PairKey {
                        offset: d.normal(s.noise.link_offset_sd),
                        spine: d.uniform(0.0, 1.0),
                        dip: d.uniform(0.0, 1.0),
                    })
                    .collect()
            })
            .collect();
        let faults = super::place::faults(s, &topo, &mut d, rounds)?;
        Ok(Placed {
            topo,
            rounds,
            d,
            drift,
            daily_phase,
            keys,
            faults,
        })
    }
}

/// Whether `s`'s faults find room on its fleet, placed as its run will place them; the
/// `(key, reason)` of the first that does not.
pub fn placement(s: &Scenario) -> Result<(), Vec<(String, String)>> {
    Placed::draw(s).map(|_| ())
}

impl World {
    /// Realises a checked scenario: places its faults and draws its episodes. Fails (with
    /// `(key, reason)`) only when random placement cannot find room.
    pub fn new(s: &Scenario) -> Result<World, Vec<(String, String)>> {
        let Placed {
            topo,
            rounds,
            mut d,
            drift,
            daily_phase,
            keys,
            faults,
        } = Placed::draw(s)?;
        let mut episodes = Vec::new();
        let mut signal = Draw::new(s.fleet.seed ^ SIGNAL_SEED, s.noise.dof);
        for c in &s.congestion {
            let first = episodes.len();
            super::episodes::draw(c, &topo, &mut d, rounds, &mut episodes);
            // From a stream of its own, so that a scenario's episodes, faults and noise
            // are the same whatever its signal says.
            for e in &mut episodes[first..] {
                e.visible = signal.chance(c.signal);
            }
        }
        let mut w = World {
            scenario: s.clone(),
            topo,
            rounds,
            episodes,
            faults,
            drift,
            daily_phase,
            keys,
            node_faults: Vec::new(),
            port_faults: Vec::new(),
            tor_faults: Vec::new(),
            link_faults: Default::default(),
            pair_faults: Default::default(),
            dips: Vec::new(),
            uplink_eps: Vec::new(),
            port_eps: Vec::new(),
            tor_eps: Vec::new(),
            spine_eps: Vec::new(),
            silent: Vec::new(),
        };
        w.index();
        Ok(w)
    }

    fn index(&mut self) {
        let t = &self.topo;
        self.node_faults = vec![Vec::new(); t.nodes];
        self.port_faults = vec![Vec::new(); t.nodes * t.npus];
        self.tor_faults = vec![Vec::new(); t.tors()];
        self.silent = vec![Vec::new(); t.nodes];
        for (i, f) in self.faults.iter().enumerate() {
            match f.target {
                Target::Node(n) if f.kind == FaultKind::SlowNode => self.node_faults[n].push(i),
                Target::Node(n) if f.silent => self.silent[n].push(i),
                Target::Node(_) => {}
                Target::Port(p) => self.port_faults[p].push(i),
                Target::Tor(x) => self.tor_faults[x].push(i),
                Target::Fabric => self.dips.push(i),
                Target::Link { src, dst, both } => {
                    self.link_faults.entry((src, dst)).or_default().push(i);
                    if both {
                        self.link_faults.entry((dst, src)).or_default().push(i);
                    }
                }
                Target::PortPair(a, b) => {
                    self.pair_faults
                        .entry((a.min(b), a.max(b)))
                        .or_default()
                        .push(i);
                }
            }
        }
        self.uplink_eps = vec![Vec::new(); t.nodes];
        self.port_eps = vec![Vec::new(); t.nodes * t.npus];
        self.tor_eps = vec![Vec::new(); t.tors()];
        self.spine_eps = vec![Vec::new(); t.spines];
        for (i, e) in self.episodes.iter().enumerate() {
            let list = match (e.on, e.plane) {
                (Element::Uplink, Plane::Device) => &mut self.port_eps[e.element],
                (Element::Uplink, _) => &mut self.uplink_eps[e.element],
                (Element::Tor, _) => &mut self.tor_eps[e.element],
                (Element::Spine, _) => &mut self.spine_eps[e.element],
            };
            list.push(i);
        }
    }

    /// The spine the pair `a`, `b` (on different ToRs, in one probe group) crosses.
    pub fn spine_of(&self, a: usize, b: usize) -> usize {
        let spines = self.topo.spines;
        ((self.key(a, b).spine * spines as f64) as usize).min(spines - 1)
    }

    /// Whether fabric dip `f` touches the pair `a`, `b` of one probe group.
    pub fn dip_touches(&self, f: &Fault, a: usize, b: usize) -> bool {
        let t = &self.topo;
        let (ta, tb) = (t.tor(a), t.tor(b));
        let spine = if ta != tb { self.spine_of(a, b) } else { 0 };
        f.dip_touches(
            self.key(a, b).dip,
            spine,
            (ta, tb),
            (t.group_of[a], t.group_of[b]),
        )
    }

    fn key(&self, a: usize, b: usize) -> PairKey {
        let g = self.topo.group_of[a];
        let size = self.topo.groups[g].len();
        let (la, lb) = (self.topo.local[a], self.topo.local[b]);
        let (x, y) = (la.min(lb), la.max(lb));
        self.keys[g].get(x * size + y).copied().unwrap_or_default()
    }

    /// Common-mode log offset of round `r` between nodes `a` and `b`: the drift and the
    /// average of their ToRs' daily swings.
    fn common(&self, r: u64, a: usize, b: usize) -> f64 {
        let n = &self.scenario.noise;
        let hours = r as f64 * self.scenario.fleet.round_seconds / 3600.0;
        let swing = |node: usize| {
            let phase = self.daily_phase[self.topo.tor(node)];
            n.daily_amplitude * (std::f64::consts::TAU * (hours + phase) / 24.0).sin()
        };
        self.drift[r.min(self.rounds) as usize] + (swing(a) + swing(b)) / 2.0
    }

    /// Congestion episodes active in round `r` on the path between nodes `a` and `b` of
    /// `plane`: their uplinks (host plane), ToRs and the spine the pair crosses.
    fn path_episodes(&self, r: u64, a: usize, b: usize, plane: Plane) -> Vec<&Episode> {
        let t = &self.topo;
        let (ta, tb) = (t.tor(a), t.tor(b));
        let mut lists: Vec<&Vec<usize>> = vec![&self.tor_eps[ta]];
        if tb != ta {
            lists.push(&self.tor_eps[tb]);
            lists.push(&self.spine_eps[self.spine_of(a, b)]);
        }
        if plane == Plane::Host {
            lists.push(&self.uplink_eps[a]);
            if b != a {
                lists.push(&self.uplink_eps[b]);
            }
        }
        lists
            .into_iter()
            .flatten()
            .map(|&i| &self.episodes[i])
            .filter(|e| r >= e.start && r < e.end)
            .filter(|e| {
                if plane == Plane::Host {
                    e.plane.host()
                } else {
                    e.plane.device()
                }
            })
            .collect()
    }

    /// The nodes of `members` whose own uplink counters report congestion in round `r`,
    /// given the round's host-plane probes `(src, dst)` among them: the node of every visible uplink episode
    /// (its own bytes near line rate), the receiver of every probe that crossed a visible
    /// episode (marked packets arrive there), and the background share of busy
    /// node-rounds that slow nothing (`noise.busy_rate`).
    pub fn host_congested(
        &self,
        r: u64,
        members: &[usize],
        probes: &[(usize, usize)],
    ) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let live = |e: &&Episode| e.visible && e.plane.host() && r >= e.start && r < e.end;
        for &node in members {
            let eps = &self.uplink_eps[node];
            if eps.iter().map(|&i| &self.episodes[i]).any(|e| live(&e)) {
                out.insert(node);
            }
        }
        for &(a, b) in probes {
            if self.path_episodes(r, a, b, Plane::Host).iter().any(live) {
                out.insert(b);
            }
        }
        let busy = self.scenario.noise.busy_rate;
        if busy > 0.0 {
            for &node in members {
                if unit_hash(self.scenario.fleet.seed ^ SIGNAL_SEED, r, node) < busy {
                    out.insert(node);
                }
            }
        }
        out
    }

    /// One host-plane probe `a → b` in round `r` (a permutation probe, a confirmation or a
    /// re-measurement alike): its duration, in units of a healthy probe.
    pub fn host_probe(&self, d: &mut Draw, r: u64, a: usize, b: usize) -> f64 {
        let mut l = self.common(r, a, b) + self.key(a, b).offset + d.noise(&self.scenario.noise);
        for node in [a, b] {
            for &i in &self.node_faults[node] {
                if self.faults[i].plane.host() {
                    l += self.faults[i].host(r);
                }
            }
        }
        if let Some(list) = self.link_faults.get(&(a, b)) {
            l += list.iter().map(|&i| self.faults[i].host(r)).sum::<f64>();
        }
        l += self.tor_and_dips(r, a, b, Plane::Host).1;
        for e in self.path_episodes(r, a, b, Plane::Host) {
            l += e.magnitude * d.jitter(e.jitter);
        }
        l.exp()
    }

    /// ToR faults and fabric dips between `a` and `b` in round `r` on `plane`: (loss, log
    /// slowdown). A pair inside one slow ToR crosses it once.
    fn tor_and_dips(&self, r: u64, a: usize, b: usize, plane: Plane) -> (f64, f64) {
        let t = &self.topo;
        let mut tors = vec![t.tor(a)];
        if t.tor(b) != tors[0] {
            tors.push(t.tor(b));
        }
        let mut ids: Vec<usize> = tors
            .iter()
            .flat_map(|x| self.tor_faults[*x].clone())
            .collect();
        for &i in &self.dips {
            if self.dip_touches(&self.faults[i], a, b) {
                ids.push(i);
            }
        }
        let (mut keep, mut log) = (1.0, 0.0);
        for i in ids {
            let f = &self.faults[i];
            if plane == Plane::Host && f.plane.host() {
                log += f.host(r);
            } else if plane == Plane::Device && f.plane.device() {
                let (loss, l) = f.device(r);
                keep *= 1.0 - loss;
                log += l;
            }
        }
        (1.0 - keep, log)
    }

    /// One device-plane ping from global port `pa` to `pb` in round `r`.
    pub fn device_ping(&self, d: &mut Draw, r: u64, pa: usize, pb: usize) -> PortProbe {
        let dv = &self.scenario.device;
        let (a, b) = (self.topo.port_node(pa), self.topo.port_node(pb));
        if self.silenced(r, a) || self.silenced(r, b) {
            // The device is gone: nothing answers, nothing is sent from it.
            return PortProbe {
                src: pa,
                dst: pb,
                sent: dv.packets,
                received: 0,
                rtt: None,
            };
        }
        let mut keep = 1.0 - dv.loss;
        let mut log = self.common(r, a, b);
        let mut add = |(loss, l): (f64, f64)| {
            keep *= 1.0 - loss;
            log += l;
        };
        for port in [pa, pb] {
            for &i in &self.port_faults[port] {
                add(self.faults[i].device(r));
            }
        }
        for node in [a, b] {
            for &i in &self.node_faults[node] {
                if self.faults[i].plane.device() {
                    add(self.faults[i].device(r));
                }
            }
        }
        if let Some(list) = self.pair_faults.get(&(pa.min(pb), pa.max(pb))) {
            for &i in list {
                add(self.faults[i].device(r));
            }
        }
        add(self.tor_and_dips(r, a, b, Plane::Device));
        let mut eps: Vec<&Episode> = self.path_episodes(r, a, b, Plane::Device);
        for port in [pa, pb] {
            eps.extend(
                self.port_eps[port]
                    .iter()
                    .map(|&i| &self.episodes[i])
                    .filter(|e| r >= e.start && r < e.end),
            );
        }
        let mut jittered = Vec::with_capacity(eps.len());
        for e in eps {
            keep *= 1.0 - e.loss;
            jittered.push((e.magnitude, e.jitter));
        }
        let (mut received, mut sum) = (0u32, 0.0);
        for _ in 0..dv.packets {
            if d.chance(1.0 - keep) {
                continue;
            }
            let cong: f64 = jittered.iter().map(|(m, j)| m * d.jitter(*j)).sum();
            received += 1;
            sum += dv.rtt_us * 1e-6 * (log + cong + d.normal(dv.rtt_sd)).exp();
        }
        PortProbe {
            src: pa,
            dst: pb,
            sent: dv.packets,
            received,
            rtt: (received > 0).then(|| sum / f64::from(received)),
        }
    }

    /// Whether a silent hard fault on `node` holds in round `r`.
    fn silenced(&self, r: u64, node: usize) -> bool {
        self.silent[node]
            .iter()
            .any(|&i| self.faults[i].intensity(r) > 0.0)
    }

    /// The common-mode drift of round `r` (log units), for the ground truth of fabric
    /// verdicts.
    pub fn drift(&self, r: u64) -> f64 {
        self.drift[r.min(self.rounds) as usize]
    }

    /// The hardware signs the interfaces of `members` show in round `r`, by index into
    /// `members`: a slow node whose fault shows one while it is on (as a trained-down PCIe
    /// link), and stray corrupted frames on any node at `counters.hardware_false`.
    pub fn host_hardware(&self, r: u64, members: &[usize]) -> Vec<(usize, Signs)> {
        let stray = self.scenario.counters.hardware_false;
        let seed = self.scenario.fleet.seed ^ HARDWARE_FALSE_SEED;
        members
            .iter()
            .enumerate()
            .filter_map(|(k, &node)| {
                let faulty = self.faults.iter().any(|f| {
                    f.hardware
                        && f.kind == FaultKind::SlowNode
                        && f.plane.host()
                        && f.target == Target::Node(node)
                        && f.intensity(r) > 0.0
                });
                let mut signs = if faulty { Signs::PCIE } else { Signs::NONE };
                if stray > 0.0 && unit_hash(seed, r, node) < stray {
                    signs = signs.union(Signs::FRAME_ERRORS);
                }
                (!signs.is_empty()).then_some((k, signs))
            })
            .collect()
    }

    /// The global ports of `ports` whose own counters would show congestion in round `r`,
    /// given the round's device-plane pings `(src, dst)` (global ports): every port with a
    /// visible episode on its own link, and the receiver of every ping that crossed a
    /// visible ToR or spine episode (as the nodes' counters are read on the host plane).
    pub fn device_congested(
        &self,
        r: u64,
        ports: &[usize],
        pings: &[(usize, usize)],
    ) -> BTreeSet<usize> {
        let live = |e: &&Episode| e.visible && e.plane.device() && r >= e.start && r < e.end;
        let mut out: BTreeSet<usize> = ports
            .iter()
            .copied()
            .filter(|&p| {
                self.port_eps
                    .get(p)
                    .is_some_and(|l| l.iter().map(|&i| &self.episodes[i]).any(|e| live(&e)))
            })
            .collect();
        for &(a, b) in pings {
            let (na, nb) = (self.topo.port_node(a), self.topo.port_node(b));
            if self
                .path_episodes(r, na, nb, Plane::Device)
                .iter()
                .any(live)
            {
                out.insert(b);
            }
        }
        out
    }

    /// The hardware signs of `ports` (global) in round `r`, by index into `ports`: a slow
    /// port whose fault shows one while it is on (corrupted frames when it loses packets,
    /// a link below its speed when it only delays them), and stray corrupted frames on
    /// any port at `counters.hardware_false`.
    pub fn port_hardware(&self, r: u64, ports: &[usize]) -> Vec<(usize, Signs)> {
        let stray = self.scenario.counters.hardware_false;
        let seed = self.scenario.fleet.seed ^ PORT_HARDWARE_FALSE_SEED;
        ports
            .iter()
            .enumerate()
            .filter_map(|(k, &port)| {
                let mut signs = Signs::NONE;
                for &i in self.port_faults.get(port).map_or(&[][..], |v| &v[..]) {
                    let f = &self.faults[i];
                    if f.hardware && f.kind == FaultKind::SlowPort && f.intensity(r) > 0.0 {
                        signs = signs.union(if f.loss > 0.0 {
                            Signs::FRAME_ERRORS
                        } else {
                            Signs::LINK_SPEED
                        });
                    }
                }
                if stray > 0.0 && unit_hash(seed, r, port) < stray {
                    signs = signs.union(Signs::FRAME_ERRORS);
                }
                (!signs.is_empty()).then_some((k, signs))
            })
            .collect()
    }

    /// Nodes with a hard fault in round `r`.
    pub fn hard_faults(&self, r: u64) -> impl Iterator<Item = usize> + '_ {
        self.faults.iter().filter_map(move |f| match f.target {
            Target::Node(n) if f.kind == FaultKind::HardFault && f.intensity(r) > 0.0 => Some(n),
            _ => None,
        })
    }
}

/// The common-mode drift of every round: an AR(1) with the asked stationary deviation.
fn drift(d: &mut Draw, n: &Noise, rounds: u64) -> Vec<f64> {
    let innovation = n.drift_sd * (1.0 - n.drift_ar * n.drift_ar).sqrt();
    let mut x = d.normal(n.drift_sd);
    (0..=rounds)
        .map(|_| {
            x = n.drift_ar * x + d.normal(innovation);
            x
        })
        .collect()
}
