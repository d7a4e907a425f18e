//! The world: a scenario made concrete with its seed. Faults get their nodes, links, ports
//! and onsets, congestion processes get their episodes, and every effect is a function of
//! the round: [`World::host_probe`] and [`World::device_ping`] are the only way anything of
//! it reaches the engines.
//!
//! Host-plane probes are modelled in log time, as the noise model of the detection design
//! does: a healthy probe is a fixed per-link offset, a common-mode drift (AR(1)), a daily
//! swing per ToR, and heavy-tailed noise with rare spikes. Faults and congestion add to it.
//! Congestion on an uplink adds to *every* probe through that uplink, confirmations and
//! re-measurements included; a partial fabric dip touches only a share of the links, so
//! peer-relative residuals do not cancel it. Device-plane pings are packets: each is lost
//! with the combined loss of everything on its path, else its RTT is the healthy RTT times
//! the same kind of log-normal factors.

use rand::RngExt as _;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng as _;
use rand_distr::{Distribution as _, Exp, Gamma, StandardNormal, StudentT};
use serde::Serialize;
use std::collections::BTreeSet;

use super::scenario::{
    Congestion, Element, FaultKind, FaultSpec, Noise, Plane, Scenario, Shape, Span, Tails,
};
use super::validate::{fault_count, fault_plane};
use crate::health::device::PortProbe;

/// The random source of a run: one ChaCha8 stream, and the noise distributions.
pub struct Draw {
    rng: ChaCha8Rng,
    t: Option<StudentT<f64>>,
}

impl Draw {
    /// A stream from `seed`.
    pub fn new(seed: u64, dof: f64) -> Self {
        Draw {
            rng: ChaCha8Rng::seed_from_u64(seed),
            t: StudentT::new(dof).ok(),
        }
    }
    /// N(0, sd²).
    pub fn normal(&mut self, sd: f64) -> f64 {
        let z: f64 = StandardNormal.sample(&mut self.rng);
        z * sd
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p.min(1.0))
    }
    /// Uniform in `[lo, hi)` (lo when the range is empty).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        if hi > lo {
            self.rng.random_range(lo..hi)
        } else {
            lo
        }
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.random_range(0..n.max(1))
    }
    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        Exp::new(1.0 / mean.max(1e-9)).map_or(mean, |e| e.sample(&mut self.rng))
    }
    /// A multiplier with mean 1 and coefficient of variation `cv` (gamma); 1 when cv is 0.
    pub fn jitter(&mut self, cv: f64) -> f64 {
        if cv <= 0.0 {
            return 1.0;
        }
        let shape = 1.0 / (cv * cv);
        Gamma::new(shape, 1.0 / shape).map_or(1.0, |g| g.sample(&mut self.rng))
    }
    /// One healthy probe's noise: the scenario's tails plus a spike now and then.
    pub fn noise(&mut self, n: &Noise) -> f64 {
        let base = match n.tails {
            Tails::Normal => self.normal(n.sd),
            Tails::StudentT => match self.t {
                // Scaled to standard deviation sd: Student-t's variance is ν / (ν − 2).
                Some(t) => t.sample(&mut self.rng) * n.sd / (n.dof / (n.dof - 2.0)).sqrt(),
                None => self.normal(n.sd),
            },
            Tails::Mixture => {
                if self.chance(n.mixture_share) {
                    self.normal(n.mixture_sd)
                } else {
                    self.normal(n.sd)
                }
            }
        };
        if self.chance(n.spike_rate) {
            base + self.normal(n.spike_sd).abs()
        } else {
            base
        }
    }
    /// A value of a span: itself, or uniform in its range.
    pub fn span(&mut self, s: Span) -> f64 {
        match s {
            Span::One(x) => x,
            Span::Range([a, b]) => self.uniform(a, b),
        }
    }
}

/// Nodes, ToRs, spines, probe groups.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Nodes.
    pub nodes: usize,
    /// NPU ports per node.
    pub npus: usize,
    /// Nodes per ToR.
    pub tor_size: usize,
    /// Spine switches.
    pub spines: usize,
    /// Probe groups (node numbers), as the daemons cut them.
    pub groups: Vec<Vec<usize>>,
    /// Each node's group.
    pub group_of: Vec<usize>,
    /// Each node's index within its group.
    pub local: Vec<usize>,
}

impl Topology {
    fn new(s: &Scenario) -> Self {
        let n = s.fleet.nodes;
        let groups = crate::health::plan::balanced_groups(n, s.fleet.group_size);
        let mut group_of = vec![0; n];
        let mut local = vec![0; n];
        for (g, members) in groups.iter().enumerate() {
            for (k, &i) in members.iter().enumerate() {
                group_of[i] = g;
                local[i] = k;
            }
        }
        Topology {
            nodes: n,
            npus: s.fleet.npus_per_node,
            tor_size: s.fleet.tor_size.max(1),
            spines: s.fleet.spines.max(1),
            groups,
            group_of,
            local,
        }
    }
    /// A node's ToR.
    pub fn tor(&self, node: usize) -> usize {
        node / self.tor_size
    }
    /// ToRs.
    pub fn tors(&self) -> usize {
        self.nodes.div_ceil(self.tor_size)
    }
    /// The nodes of a ToR.
    pub fn tor_nodes(&self, t: usize) -> std::ops::Range<usize> {
        t * self.tor_size..((t + 1) * self.tor_size).min(self.nodes)
    }
    /// The node of a global port.
    pub fn port_node(&self, port: usize) -> usize {
        port / self.npus.max(1)
    }
}

/// A congestion episode: ground truth, for scoring.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// Number, in order of the scenario's processes.
    pub id: usize,
    /// Where.
    pub on: Element,
    /// Which plane.
    pub plane: Plane,
    /// Node (host uplink), global port (device uplink), ToR or spine number.
    pub element: usize,
    /// First round.
    pub start: u64,
    /// First round after it.
    pub end: u64,
    /// Log slowdown of its probes (mean, before jitter).
    pub magnitude: f64,
    /// Per-probe variation.
    pub jitter: f64,
    /// Device-plane packet loss.
    pub loss: f64,
    /// It shows in the counters of the nodes whose traffic it slows.
    pub visible: bool,
}

/// What a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Target {
    /// A node.
    Node(usize),
    /// A host link src → dst (and back when `both`).
    Link {
        /// Sender.
        src: usize,
        /// Receiver.
        dst: usize,
        /// Both directions.
        both: bool,
    },
    /// A global NPU port.
    Port(usize),
    /// Two global NPU ports.
    PortPair(usize, usize),
    /// A ToR.
    Tor(usize),
    /// The fabric.
    Fabric,
}

/// An injected fault: ground truth, for scoring.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// Number, in order of the scenario's `[[fault]]` entries.
    pub id: usize,
    /// Kind.
    pub kind: FaultKind,
    /// Plane.
    pub plane: Plane,
    /// What it hits.
    pub target: Target,
    /// First round.
    pub onset: u64,
    /// First round after it (the run's end + 1 when persistent).
    pub end: u64,
    /// Whether it lasts to the end of the run.
    pub persistent: bool,
    /// Host-plane slowdown (fraction).
    pub magnitude: f64,
    /// Device-plane loss.
    pub loss: f64,
    /// Device-plane RTT multiplier.
    pub rtt: f64,
    /// Fabric dip: share of links.
    pub share: f64,
    /// Shape.
    pub shape: Shape,
    ramp_rounds: u64,
    period: u64,
    duty: f64,
    down_rounds: u64,
}

impl Fault {
    /// The share of its full effect the fault has in round `r` (0 outside its life).
    pub fn intensity(&self, r: u64) -> f64 {
        if r < self.onset || r >= self.end {
            return 0.0;
        }
        let t = r - self.onset;
        match self.shape {
            Shape::Step => 1.0,
            Shape::Ramp => ((t + 1) as f64 / self.ramp_rounds.max(1) as f64).min(1.0),
            Shape::Intermittent => {
                let on = (self.duty * self.period as f64).round().max(1.0) as u64;
                f64::from(u8::from(t % self.period.max(1) < on))
            }
            Shape::Flapping => f64::from(u8::from(t % self.period.max(1) < self.down_rounds)),
        }
    }

    /// Host log slowdown in round `r`.
    fn host(&self, r: u64) -> f64 {
        let i = self.intensity(r);
        if i > 0.0 {
            (1.0 + self.magnitude * i).ln()
        } else {
            0.0
        }
    }

    /// Device loss and log RTT factor in round `r` (a flap without loss given is down).
    fn device(&self, r: u64) -> (f64, f64) {
        let i = self.intensity(r);
        if i <= 0.0 {
            return (0.0, 0.0);
        }
        let loss = if self.shape == Shape::Flapping && self.loss == 0.0 && self.rtt <= 1.0 {
            1.0
        } else {
            self.loss * i
        };
        (loss, (1.0 + (self.rtt - 1.0) * i).ln())
    }
}

/// Per-pair keys inside one probe group: the fixed link offset, and two uniforms (which
/// spine the pair hashes onto, and whether a partial dip touches it).
#[derive(Debug, Clone, Copy, Default)]
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
}

/// Seeds the stream that decides which congestion episodes show in the counters.
const SIGNAL_SEED: u64 = 0x5167_4e41_4c5f_0001;

/// The golden ratio's fraction: spreads one uniform key into uncorrelated-looking subsets
/// for successive dips.
const PHI: f64 = 0.618_033_988_749_895;

impl World {
    /// Realises a checked scenario: places its faults and draws its episodes. Fails (with
    /// `(key, reason)`) only when random placement cannot find room.
    pub fn new(s: &Scenario) -> Result<World, Vec<(String, String)>> {
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
        let faults = place_faults(s, &topo, &mut d, rounds)?;
        let mut episodes = Vec::new();
        let mut signal = Draw::new(s.fleet.seed ^ SIGNAL_SEED, s.noise.dof);
        for c in &s.congestion {
            let first = episodes.len();
            draw_episodes(c, &topo, &mut d, rounds, &mut episodes);
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
        };
        w.index();
        Ok(w)
    }

    fn index(&mut self) {
        let t = &self.topo;
        self.node_faults = vec![Vec::new(); t.nodes];
        self.port_faults = vec![Vec::new(); t.nodes * t.npus];
        self.tor_faults = vec![Vec::new(); t.tors()];
        for (i, f) in self.faults.iter().enumerate() {
            match f.target {
                Target::Node(n) if f.kind == FaultKind::SlowNode => self.node_faults[n].push(i),
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
            let spine = (self.key(a, b).spine * t.spines as f64) as usize;
            lists.push(&self.spine_eps[spine.min(t.spines - 1)]);
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
        let key = self.key(a, b);
        let mut ids: Vec<usize> = tors
            .iter()
            .flat_map(|x| self.tor_faults[*x].clone())
            .collect();
        for &i in &self.dips {
            let f = &self.faults[i];
            // A partial dip touches a fixed share of the links, a different subset per dip.
            if (key.dip + f.id as f64 * PHI).fract() < f.share {
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

/// Episodes of one congestion process: exponential gaps between episodes on each element,
/// exponential lengths, |N(0, sd)| magnitudes.
fn draw_episodes(c: &Congestion, t: &Topology, d: &mut Draw, rounds: u64, out: &mut Vec<Episode>) {
    if c.rate <= 0.0 {
        return;
    }
    let count = match (c.on, c.plane) {
        (Element::Uplink, Plane::Device) => t.nodes * t.npus,
        (Element::Uplink, _) => t.nodes,
        (Element::Tor, _) => t.tors(),
        (Element::Spine, _) => t.spines,
    };
    let elements: Vec<usize> = if c.at.is_empty() {
        (0..count).collect()
    } else {
        c.at.clone()
    };
    for element in elements {
        let mut r = 0.0;
        loop {
            r += d.exp(1.0 / c.rate).ceil().max(1.0);
            if r > rounds as f64 {
                break;
            }
            let len = d.exp(c.mean_rounds).round().max(1.0);
            out.push(Episode {
                id: out.len(),
                on: c.on,
                plane: c.plane,
                element,
                start: r as u64,
                end: (r + len) as u64,
                magnitude: d.normal(c.magnitude_sd).abs(),
                jitter: c.jitter,
                loss: c.loss,
                visible: false,
            });
            r += len;
        }
    }
}

/// Places every fault: listed targets as written, the rest on distinct free nodes drawn
/// with the seed; onsets uniform between the warm-up and the last stretch of the run (a
/// pair of a probe group meets once per group − 1 rounds, so faults start at least three
/// such cycles, and at least 60 rounds, before the end).
fn place_faults(
    s: &Scenario,
    t: &Topology,
    d: &mut Draw,
    rounds: u64,
) -> Result<Vec<Fault>, Vec<(String, String)>> {
    let mut free = vec![true; t.nodes];
    let mut out = Vec::new();
    let g = s.fleet.group_size.min(t.nodes);
    let tail = (3 * g.saturating_sub(1) as u64).max(60);
    let last = rounds.saturating_sub(tail).max(s.fleet.warmup_rounds + 1);
    // Whole ToRs first, then pairs within a group, then single nodes, so that random
    // placement finds room; numbers follow the file's order.
    let rank = |k: &FaultKind| match k {
        FaultKind::SlowTor => 0,
        FaultKind::DegradedLink | FaultKind::PortPair => 1,
        _ => 2,
    };
    let mut order: Vec<usize> = (0..s.faults.len()).collect();
    order.sort_by_key(|&k| rank(&s.faults[k].kind));
    let mut placed: Vec<(usize, usize, Fault)> = Vec::new();
    for k in order {
        let spec = &s.faults[k];
        for j in 0..fault_count(s, spec) {
            let target = place(spec, j, t, d, &mut free).ok_or_else(|| {
                vec![(
                    format!("fault[{k}]"),
                    format!(
                        "no room to place {} {} at random on distinct nodes (within one probe group for a link or pair)",
                        fault_count(s, spec),
                        spec.kind.as_str()
                    ),
                )]
            })?;
            let onset = match spec.onset {
                Some(x) => d.span(x).round() as u64,
                None => d.uniform(s.fleet.warmup_rounds as f64, last as f64) as u64,
            };
            let end = spec
                .rounds
                .map_or(rounds + 1, |x| onset + d.span(x).round().max(1.0) as u64);
            placed.push((k, j, fault(spec, 0, target, onset, end, rounds, d)));
        }
    }
    placed.sort_by_key(|(k, j, _)| (*k, *j));
    for (id, (_, _, f)) in placed.into_iter().enumerate() {
        out.push(Fault { id, ..f });
    }
    Ok(out)
}

fn fault(
    spec: &FaultSpec,
    id: usize,
    target: Target,
    onset: u64,
    end: u64,
    rounds: u64,
    d: &mut Draw,
) -> Fault {
    Fault {
        id,
        kind: spec.kind,
        plane: fault_plane(spec),
        target,
        onset,
        end: end.min(rounds + 1),
        persistent: end > rounds,
        magnitude: spec.magnitude.map_or(0.0, |m| d.span(m)),
        loss: spec.loss.map_or(0.0, |m| d.span(m)),
        rtt: spec.rtt.map_or(1.0, |m| d.span(m)),
        share: spec.share.unwrap_or(1.0),
        shape: spec.shape,
        ramp_rounds: spec.ramp_rounds.unwrap_or(1),
        period: spec.period.unwrap_or(1),
        duty: spec.duty.unwrap_or(1.0),
        down_rounds: spec.down_rounds.unwrap_or(0),
    }
}

/// A free node drawn at random (within group `within` if given), now taken.
fn take(t: &Topology, d: &mut Draw, free: &mut [bool], within: Option<usize>) -> Option<usize> {
    let pool: Vec<usize> = (0..t.nodes)
        .filter(|&i| free[i] && within.is_none_or(|g| t.group_of[i] == g))
        .collect();
    let x = *pool.get(d.below(pool.len()))?;
    free[x] = false;
    Some(x)
}

/// Two free nodes of one probe group (a link between groups carries no probe).
fn pair(t: &Topology, d: &mut Draw, free: &mut [bool]) -> Option<(usize, usize)> {
    for _ in 0..64 {
        let a = take(t, d, free, None)?;
        if let Some(b) = take(t, d, free, Some(t.group_of[a])) {
            return Some((a, b));
        }
    }
    None
}

/// The `j`-th target of a spec: listed, or drawn among free nodes.
fn place(
    spec: &FaultSpec,
    j: usize,
    t: &Topology,
    d: &mut Draw,
    free: &mut [bool],
) -> Option<Target> {
    let npus = t.npus.max(1);
    let port = |node: usize, npu: usize| node * npus + npu;
    Some(match spec.kind {
        FaultKind::SlowNode | FaultKind::HardFault => match spec.nodes.get(j) {
            Some(&n) => Target::Node(n),
            None => Target::Node(take(t, d, free, None)?),
        },
        FaultKind::SlowPort => match spec.ports.get(j) {
            Some(&[n, p]) => Target::Port(port(n, p)),
            None => {
                let n = take(t, d, free, None)?;
                Target::Port(port(n, d.below(npus)))
            }
        },
        FaultKind::DegradedLink => match spec.links.get(j) {
            Some(&[a, b]) => Target::Link {
                src: a,
                dst: b,
                both: spec.both_directions,
            },
            None => {
                let (a, b) = pair(t, d, free)?;
                Target::Link {
                    src: a,
                    dst: b,
                    both: spec.both_directions,
                }
            }
        },
        FaultKind::PortPair => match spec.port_pairs.get(j) {
            Some(&[a, p, b, q]) => Target::PortPair(port(a, p), port(b, q)),
            None => {
                let (a, b) = pair(t, d, free)?;
                Target::PortPair(port(a, d.below(npus)), port(b, d.below(npus)))
            }
        },
        FaultKind::SlowTor => match spec.tors.get(j) {
            Some(&x) => Target::Tor(x),
            None => {
                let ok: Vec<usize> = (0..t.tors())
                    .filter(|&x| t.tor_nodes(x).all(|n| free[n]))
                    .collect();
                let x = *ok.get(d.below(ok.len()))?;
                for n in t.tor_nodes(x) {
                    free[n] = false;
                }
                Target::Tor(x)
            }
        },
        FaultKind::FabricDip => Target::Fabric,
    })
}

/// A uniform number in `[0, 1)` from `(seed, round, node)` alone (SplitMix64's finaliser):
/// the same whichever order the rounds and nodes are asked in.
fn unit_hash(seed: u64, round: u64, node: usize) -> f64 {
    let mut z = seed
        ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (node as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}
