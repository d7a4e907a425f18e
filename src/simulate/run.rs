//! Drives the engines through a world, as the daemons do: the fleet is cut into probe
//! groups, and each group has one [`HealthEngine`] (host plane) and, with NPU ports, one
//! [`DeviceEngine`](crate::health::device::DeviceEngine). Every round each group runs its
//! permutation probes (the daemon's rotating stride), the confirmations its engine asked
//! for (peers chosen by the daemon's own [`confirm_pairs`]), a few link re-measurements,
//! and the hard faults telemetry would read. What the engines say is kept as a [`Trace`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::counters::Reader;
use super::device::{DeviceGroup, Traffic};
use super::world::{Draw, World};
use crate::health::device::DeviceConfig;
use crate::health::plan::{OwnTor, confirm_pairs};
use crate::health::{
    HealthConfig, HealthEngine, InferConfig, NodeState, Probe, RoundInput, TorInference,
};

/// Extra pairs a round's plan carries at most (`probe::plan::PLAN_PAIRS`).
const PLAN_PAIRS: usize = 64;

/// Spans of rounds during which something held, per key.
#[derive(Debug, Clone, Default)]
pub struct Intervals<K: Ord + Copy> {
    open: BTreeMap<K, u64>,
    /// Closed spans: (key, first round, first round after).
    pub spans: Vec<(K, u64, u64)>,
}

impl<K: Ord + Copy> Intervals<K> {
    /// Round `r` holds for exactly the keys of `now`.
    pub fn update(&mut self, r: u64, now: impl IntoIterator<Item = K>) {
        let now: std::collections::BTreeSet<K> = now.into_iter().collect();
        let ended: Vec<K> = self
            .open
            .keys()
            .filter(|k| !now.contains(k))
            .copied()
            .collect();
        for k in ended {
            if let Some(start) = self.open.remove(&k) {
                self.spans.push((k, start, r));
            }
        }
        for k in now {
            self.open.entry(k).or_insert(r);
        }
    }

    /// Closes every open span at `end`.
    pub fn finish(&mut self, end: u64) {
        for (k, start) in std::mem::take(&mut self.open) {
            self.spans.push((k, start, end));
        }
    }
}

/// A state change of a node (host plane) or NPU port (device plane), in global numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Round.
    pub round: u64,
    /// Node or global port.
    pub who: usize,
    /// Old state.
    pub from: NodeState,
    /// New state.
    pub to: NodeState,
    /// The engine's reason.
    pub reason: String,
}

/// Everything the engines said during a run.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Host-plane node state changes.
    pub nodes: Vec<Change>,
    /// Device-plane port state changes.
    pub ports: Vec<Change>,
    /// Host link verdicts (src, dst).
    pub links: Intervals<(usize, usize)>,
    /// Host fabric verdicts, per probe group.
    pub host_fabric: Intervals<usize>,
    /// Host ToR verdicts, per ToR (a ToR split over groups counts once per round).
    pub host_tors: Intervals<usize>,
    /// Host spine verdicts, per probe group (a dip with a spine's shape there).
    pub host_spines: Intervals<usize>,
    /// Host ToRs whose uplinks are marked slow, per ToR (a ToR split over groups counts
    /// once per round).
    pub host_uplinks: Intervals<usize>,
    /// Rounds in which a group's lasting change (its round median, or a ToR's level)
    /// became the new normal: (round, group, ToR when it was a ToR's).
    pub new_normals: Vec<(u64, usize, Option<usize>)>,
    /// Rounds in which a group's lasting dip (a partial fabric event) became the normal:
    /// (round, group).
    pub dip_normals: Vec<(u64, usize)>,
    /// Rounds in which a group's device plane learnt its share of slow pings again:
    /// (round, group).
    pub device_normals: Vec<(u64, usize)>,
    /// Rounds in which a group's device plane learnt its round median's normal again:
    /// (round, group).
    pub device_median_normals: Vec<(u64, usize)>,
    /// Device-plane node verdicts.
    pub device_nodes: Intervals<usize>,
    /// Device-plane pair verdicts (global ports, lower first).
    pub pairs: Intervals<(usize, usize)>,
    /// Device-plane fabric verdicts, per probe group.
    pub device_fabric: Intervals<usize>,
    /// Device-plane ToR verdicts, per ToR (a ToR split over groups counts once per round).
    pub device_tors: Intervals<usize>,
    /// Device-plane spine verdicts, per probe group.
    pub device_spines: Intervals<usize>,
    /// Device-plane packets.
    pub traffic: Traffic,
    /// Seconds spent in host engines.
    pub host_seconds: f64,
    /// Seconds spent in device engines.
    pub device_seconds: f64,
    /// Probe rounds per device-plane round.
    pub device_every: u64,
    /// Device-plane rounds run.
    pub device_rounds: u64,
    /// Every node's host-plane state at the end of the run.
    pub final_nodes: Vec<NodeState>,
    /// Every NPU port's state at the end of the run (global port numbers).
    pub final_ports: Vec<NodeState>,
    /// The ToR groups each probe group's inference holds at the end of the run (global
    /// node numbers), as a daemon that no source gives ToRs would infer them.
    pub inferred: Vec<Vec<usize>>,
}

impl Trace {
    /// Closes every open verdict span at `end`.
    fn finish(&mut self, end: u64) {
        self.links.finish(end);
        self.host_fabric.finish(end);
        self.host_tors.finish(end);
        self.host_spines.finish(end);
        self.host_uplinks.finish(end);
        self.device_nodes.finish(end);
        self.pairs.finish(end);
        self.device_fabric.finish(end);
        self.device_tors.finish(end);
        self.device_spines.finish(end);
    }
}

/// One group's host-plane engine and its requests from last round.
struct HostGroup {
    engine: HealthEngine,
    members: Vec<usize>,
    requests: Vec<usize>,
    /// Of `requests`, those to re-pair within their own ToR.
    own_tor: Vec<usize>,
    link_requests: Vec<(usize, usize)>,
    /// The members' counter readings, as late as the scenario's `[counters]` says.
    counters: Reader,
    /// The ToR inference the daemon runs when no source gives ToRs, fed the same
    /// permutation probes as the engine.
    infer: TorInference,
}

impl HostGroup {
    /// A fresh engine over the members `g`.
    fn new(g: &[usize], health: &HealthConfig) -> Self {
        HostGroup {
            engine: HealthEngine::new(g.len(), health.clone()),
            members: g.to_vec(),
            requests: Vec::new(),
            own_tor: Vec::new(),
            link_requests: Vec::new(),
            counters: Reader::default(),
            infer: TorInference::new(g.len(), InferConfig::of(health)),
        }
    }

    /// The engine's input for round `r`: permutation probes (member k receives from
    /// k − stride, as `probe::round::permutation_probes`), the confirmation and link
    /// exchanges (the slower of their two directions, as `probe::round::pair_seconds`),
    /// and hard faults.
    fn input(&mut self, w: &World, d: &mut Draw, r: u64, cfg: &HealthConfig) -> RoundInput {
        let m = &self.members;
        let n = m.len();
        let stride = 1 + (r as usize % (n - 1).max(1));
        let probes: Vec<Probe> = (0..n)
            .map(|k| {
                let src = (k + n - stride) % n;
                Probe {
                    src,
                    dst: k,
                    seconds: w.host_probe(d, r, m[src], m[k]),
                }
            })
            .collect();

        let present = vec![true; n];
        // The daemon's topology: each member's ToR (the simulator's own numbering), for
        // the plan's own-ToR pairs and the engine alike.
        let tors: Vec<Option<u32>> = m.iter().map(|&x| Some(w.topo.tor(x) as u32)).collect();
        let own = OwnTor {
            tors: &tors,
            nodes: &self.own_tor,
            round: self.engine.rounds(),
        };
        let mut pairs = confirm_pairs(
            &self.requests,
            &self.engine.states(),
            &present,
            cfg.confirm_peers,
            own,
        );
        let n_confirm = pairs.len().min(PLAN_PAIRS);
        pairs.extend(
            self.link_requests
                .iter()
                .filter(|(a, b)| a != b)
                .take(crate::health::LINK_REMEASURES),
        );
        pairs.truncate(PLAN_PAIRS);
        let mut exchanges: Vec<Probe> = pairs
            .iter()
            .map(|&(x, p)| Probe {
                src: x,
                dst: p,
                seconds: w
                    .host_probe(d, r, m[x], m[p])
                    .max(w.host_probe(d, r, m[p], m[x])),
            })
            .collect();
        // What each member's own counters say, as the daemon gathers it with the round:
        // every flow of the round, the exchanges both ways.
        let crossed: Vec<(usize, usize)> = probes
            .iter()
            .map(|p| (m[p.src], m[p.dst]))
            .chain(
                pairs
                    .iter()
                    .flat_map(|&(x, p)| [(m[x], m[p]), (m[p], m[x])]),
            )
            .collect();
        let seed = w.scenario.fleet.seed;
        let truth = w.host_congested(r, m, &crossed);
        let flagged = self.counters.read(&w.scenario.counters, seed, r, m, truth);
        let congested = (0..n).filter(|k| flagged.contains(&m[*k])).collect();
        let link_probes = exchanges.split_off(n_confirm.min(exchanges.len()));
        let hard_faults = w
            .hard_faults(r)
            .filter_map(|node| {
                let local = m.iter().position(|x| *x == node)?;
                Some((local, "device lost (0x40F84E00)".to_string()))
            })
            .collect();
        RoundInput {
            reports: Vec::new(),
            probes,
            confirmations: exchanges,
            hard_faults,
            link_probes,
            absent: Vec::new(),
            congested,
            hardware: w.host_hardware(r, m),
            tors,
        }
    }
}

/// Records the group's new normals of round `r` (its own, and its ToRs').
fn new_normals(t: &mut Trace, r: u64, gi: usize, out: &crate::health::RoundOutput) {
    if out.new_normal {
        t.new_normals.push((r, gi, None));
    }
    if out.dip_new_normal {
        t.dip_normals.push((r, gi));
    }
    t.new_normals.extend(
        out.tor_new_normal
            .iter()
            .map(|&x| (r, gi, Some(x as usize))),
    );
}

/// Runs the world through the engines with these thresholds, the device plane every
/// `device_every` probe rounds (as the prober does, `device_probe.interval`).
pub fn run(w: &World, health: &HealthConfig, device: &DeviceConfig, device_every: u64) -> Trace {
    let device_every = device_every.max(1);
    let mut d = Draw::new(
        w.scenario.fleet.seed ^ 0x005e_ed0f_5eed,
        w.scenario.noise.dof,
    );
    let topo = &w.topo;
    let mut hosts: Vec<HostGroup> = topo
        .groups
        .iter()
        .map(|g| HostGroup::new(g, health))
        .collect();
    let mut devices: Vec<DeviceGroup> = if topo.npus > 0 {
        topo.groups
            .iter()
            .map(|g| DeviceGroup::new(g, topo.npus, device.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let mut t = Trace {
        device_every,
        ..Trace::default()
    };
    for r in 1..=w.rounds {
        let mut links = Vec::new();
        let mut host_suspects = BTreeSet::new();
        let mut fabric = Vec::new();
        let mut tors = BTreeSet::new();
        let mut uplinks = BTreeSet::new();
        let mut spines = Vec::new();
        for (gi, h) in hosts.iter_mut().enumerate() {
            let input = h.input(w, &mut d, r, health);
            let t0 = Instant::now();
            let out = h.engine.step(&input);
            t.host_seconds += t0.elapsed().as_secs_f64();
            h.infer.observe_probes(&input.probes);
            let m = &h.members;
            links.extend(out.link_verdicts.iter().map(|&(a, b)| (m[a], m[b])));
            if out.fabric_degraded {
                fabric.push(gi);
            }
            tors.extend(out.tor_verdicts.iter().map(|v| v.tor as usize));
            uplinks.extend(out.tor_uplinks.iter().map(|&(t, _)| t as usize));
            if out.spine_verdict.is_some() {
                spines.push(gi);
            }
            new_normals(&mut t, r, gi, &out);
            t.nodes.extend(out.transitions.into_iter().map(|x| Change {
                round: r,
                who: m[x.node],
                from: x.from,
                to: x.to,
                reason: x.reason,
            }));
            host_suspects.extend(
                h.engine
                    .states()
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| {
                        matches!(s, NodeState::Confirmed | NodeState::QuarantineRecommended)
                    })
                    .map(|(i, _)| m[i]),
            );
            h.requests = out.confirm_requests;
            h.own_tor = out.confirm_own_tor;
            h.link_requests = out.link_requests;
        }
        t.links.update(r, links);
        t.host_fabric.update(r, fabric);
        t.host_tors.update(r, tors);
        t.host_spines.update(r, spines);
        t.host_uplinks.update(r, uplinks);
        if r.is_multiple_of(device_every) {
            device_round(w, &mut d, r, &mut devices, &host_suspects, &mut t);
        }
    }
    t.finish(w.rounds + 1);
    host_finals(&mut t, &hosts, topo.nodes);
    t.final_ports = vec![NodeState::Healthy; topo.nodes * topo.npus];
    for g in &devices {
        for (k, state) in g.engine.states().into_iter().enumerate() {
            t.final_ports[g.global(k)] = state;
        }
    }
    for g in &devices {
        t.traffic.requests += g.traffic.requests;
        t.traffic.replies += g.traffic.replies;
        t.traffic.max_port_round = t.traffic.max_port_round.max(g.traffic.max_port_round);
    }
    t
}

/// Every node's host-plane state at the end, and each group's inferred ToR groups (in
/// global node numbers).
fn host_finals(t: &mut Trace, hosts: &[HostGroup], nodes: usize) {
    t.final_nodes = vec![NodeState::Healthy; nodes];
    for h in hosts {
        for (k, state) in h.engine.states().into_iter().enumerate() {
            t.final_nodes[h.members[k]] = state;
        }
        t.inferred.extend(
            h.infer
                .groups()
                .into_iter()
                .map(|g| g.into_iter().map(|k| h.members[k]).collect::<Vec<usize>>()),
        );
    }
}

/// One round of every group's device plane; `host_suspects` are the nodes (global) the
/// host-plane engines hold confirmed or worse this round.
fn device_round(
    w: &World,
    d: &mut Draw,
    r: u64,
    groups: &mut [DeviceGroup],
    host_suspects: &BTreeSet<usize>,
    t: &mut Trace,
) {
    if groups.is_empty() {
        return;
    }
    t.device_rounds += 1;
    let npus = w.topo.npus;
    let (mut nodes, mut pairs, mut fabric) = (Vec::new(), Vec::new(), Vec::new());
    let mut tors = BTreeSet::new();
    let mut spines = Vec::new();
    for (gi, g) in groups.iter_mut().enumerate() {
        let t0 = Instant::now();
        let local: Vec<usize> = w.topo.groups[gi]
            .iter()
            .enumerate()
            .filter(|(_, n)| host_suspects.contains(n))
            .map(|(i, _)| i)
            .collect();
        // The plan rotates with the device plane's own rounds, as the prober's does.
        let plan_round = r / t.device_every.max(1);
        let out = g.round(w, d, (r, plan_round), local).clone();
        t.device_seconds += t0.elapsed().as_secs_f64();
        let members = &w.topo.groups[gi];
        nodes.extend(out.node_verdicts.iter().map(|&n| members[n]));
        pairs.extend(out.pair_verdicts.iter().map(|&(a, b)| {
            let (x, y) = (g.global(a), g.global(b));
            (x.min(y), x.max(y))
        }));
        if out.fabric {
            fabric.push(gi);
        }
        if out.spine_verdict.is_some() {
            spines.push(gi);
        }
        if out.rate_renewed {
            t.device_normals.push((r, gi));
        }
        if out.median_renewed {
            t.device_median_normals.push((r, gi));
        }
        // The engine's ToR numbers are the topology's (the group passes them).
        tors.extend(out.tor_verdicts.iter().map(|v| v.tor as usize));
        t.ports.extend(out.transitions.into_iter().map(|x| Change {
            round: r,
            who: members[x.port / npus] * npus + x.port % npus,
            from: x.from,
            to: x.to,
            reason: x.reason,
        }));
    }
    t.device_nodes.update(r, nodes);
    t.pairs.update(r, pairs);
    t.device_fabric.update(r, fabric);
    t.device_tors.update(r, tors);
    t.device_spines.update(r, spines);
}
