//! The device plane: the NPUs' own RoCE ports, probed with pings from port to port, judged
//! by [`crate::health::device`].
//!
//! - [`ports`]: the group's port table, all-gathered when the group forms;
//! - [`plan`]: the rotating plan every member derives from the round number;
//! - [`runner`]: this node's pings, one thread per local NPU, in the background;
//! - [`hccs`]: the DCMI HCCS ping mesh on Atlas A3, driven on its own thread with the
//!   destinations the group's vNIC table gives;
//! - here: the round's exchange. Each host-plane round all-gathers the outcomes of the
//!   pings started the round before (one fixed-width row per member, validated against the
//!   plan the sender was given), feeds the same input to every member's engine, and starts
//!   this round's pings: the plan's, and the re-pings the engine asked for.
//!
//! Pings run while the host plane runs its next round, so device probing adds no time to a
//! host round, and a slow or hung `hccn_tool` costs only its own ping.

pub(crate) mod hccs;
pub(crate) mod plan;
pub mod ports;
pub(crate) mod runner;
pub mod status;
mod switches;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crate::collective::{CollResult, Communicator, DataType};
use crate::health::NodeState;
use crate::health::device::{DeviceConfig, DeviceEngine, DeviceInput, DeviceOutput, PortProbe};
use crate::snapshot::histogram::Histogram;
use crate::snapshot::probe::{
    DeviceTorView, DeviceView, LocalPings, PlannedPing, PortConditionView, PortTransitionView,
    PortView,
};

use ports::Port;
use runner::{Batch, Job, Outcome, Pinger};
use switches::Switches;

/// Device-plane settings.
#[derive(Clone)]
pub struct DeviceSettings {
    /// Pings each port sends per round (after the packet budget).
    pub pings_per_round: usize,
    /// Most re-pings this node runs per round for suspects and pairs.
    pub confirm_cap: usize,
    /// How long a round's pings may take before the next round collects them.
    pub collect_deadline: Duration,
    /// Engine thresholds.
    pub engine: DeviceConfig,
    /// The pinger.
    pub pinger: Arc<dyn Pinger>,
    /// This node's ports (physical id, device IP), read when the group forms.
    pub local_ports: Arc<dyn Fn() -> Vec<(u32, Ipv4Addr)> + Send + Sync>,
    /// This node's ports' congestion and error counters and link speeds as the port
    /// poller last read them (physical id, reading), read each round.
    pub local_status: Arc<dyn Fn() -> Vec<(u32, status::PortReading)> + Send + Sync>,
    /// The HCCS ping mesh, when this node may drive it.
    pub hccs: Option<hccs::HccsSettings>,
    /// The NPU ports are cabled by rail (`topology.npu_cabling = "rail"`): each port's
    /// switch is its node's ToR group's leaf for its NPU id (see `switches`).
    pub rails: bool,
}

impl std::fmt::Debug for DeviceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSettings")
            .field("pings_per_round", &self.pings_per_round)
            .field("confirm_cap", &self.confirm_cap)
            .field("collect_deadline", &self.collect_deadline)
            .field("engine", &self.engine)
            .field("hccs", &self.hccs)
            .field("rails", &self.rails)
            .finish_non_exhaustive()
    }
}

/// The group's ToRs for the device engine: each candidate's ToR number (empty: unknown)
/// and the names the numbers stand for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Topology<'a> {
    /// Each candidate's ToR, by candidate index.
    pub tors: &'a [Option<u32>],
    /// ToR number k is `names[k]`.
    pub names: &'a [String],
}

/// A pinger for a node that does not probe the device plane: it has no ports, so it is
/// never asked to ping.
pub(crate) struct NoPinger;

impl Pinger for NoPinger {
    fn ping(&self, _phy: u32, _dst: Ipv4Addr) -> Result<runner::PingReply, runner::PingError> {
        Err(runner::PingError::Unsupported)
    }
}

/// Settings of a node that does not probe the device plane: it still takes part in the
/// group's exchanges (announcing no port), so the members stay in lock step.
pub fn disabled() -> DeviceSettings {
    DeviceSettings {
        pings_per_round: 0,
        confirm_cap: 0,
        collect_deadline: Duration::from_secs(1),
        engine: DeviceConfig::default(),
        pinger: Arc::new(NoPinger),
        local_ports: Arc::new(Vec::new),
        local_status: Arc::new(Vec::new),
        hccs: None,
        rails: false,
    }
}

/// Fields of one ping in a row: source, destination, kind (0 plan, 1 re-ping), sent,
/// received, mean RTT (NaN when none). A slot of kind 2 is a port's condition instead
/// (see [`status`]): its port twice, 2, its flags ([`status::PortCondition::flags`]), 0,
/// NaN. A release that knows no kind 2 drops it (its source equals its destination).
const FIELDS: usize = 6;

/// The kind of a slot that carries a port's condition.
const STATUS_KIND: u8 = 2;

/// Most packets a ping may claim (hccn_tool sends 3).
const MAX_PACKETS: f64 = 16.0;

/// Longest RTT a ping may claim, seconds: anything longer is garbage, not a measurement.
const MAX_RTT: f64 = 60.0;

/// Latest port transitions kept for `/api/v1/state`.
const TRANSITIONS_KEPT: usize = 100;

/// Checks one ping of a gathered row (`FIELDS` = 6 values: source and destination port
/// indices into `ports`, kind, sent, received, mean RTT in seconds) reported by member
/// `node`. Kept only if the source is one of `node`'s ports and differs from the
/// destination, 1 to 16 packets were sent and at most that many received, and a ping that
/// received anything has an RTT above 0 and below 60 s. Pure and total (a short slice is
/// `None`); the kind is the caller's to check.
pub fn valid_ping(ports: &[Port], f: &[f64], node: usize) -> Option<PortProbe> {
    let f: &[f64; FIELDS] = f.try_into().ok()?;
    let idx =
        |x: f64| (x.is_finite() && x >= 0.0 && (x as usize) < ports.len()).then_some(x as usize);
    let (src, dst) = (idx(f[0])?, idx(f[1])?);
    let (sent, received) = (f[3], f[4]);
    if ports[src].node != node
        || src == dst
        || !(1.0..=MAX_PACKETS).contains(&sent)
        || !(0.0..=sent).contains(&received)
    {
        return None;
    }
    let rtt = (f[5].is_finite() && f[5] > 0.0 && f[5] < MAX_RTT).then_some(f[5]);
    if received > 0.0 && rtt.is_none() {
        return None;
    }
    Some(PortProbe {
        src,
        dst,
        sent: sent as u32,
        received: received as u32,
        rtt,
    })
}

/// Checks one condition slot of a gathered row (see [`FIELDS`]) reported by member
/// `node`: kind 2, the same port twice, one of `node`'s ports, flags a whole number
/// 0..=255. Pure and total.
pub fn valid_condition(
    ports: &[Port],
    f: &[f64],
    node: usize,
) -> Option<(usize, status::PortCondition)> {
    let f: &[f64; FIELDS] = f.try_into().ok()?;
    if f[2] != f64::from(STATUS_KIND) || f[0] != f[1] {
        return None;
    }
    let port =
        (f[0].is_finite() && f[0] >= 0.0 && (f[0] as usize) < ports.len() && f[0].fract() == 0.0)
            .then_some(f[0] as usize)?;
    let flags = f[3];
    if ports[port].node != node || !(0.0..=255.0).contains(&flags) || flags.fract() != 0.0 {
        return None;
    }
    Some((port, status::PortCondition::from_flags(flags as u8)))
}

/// The device plane's state in the prober.
pub struct DevicePlane {
    s: DeviceSettings,
    /// The port table: present members' ports as they announced them, absent members'
    /// as last known.
    ports: Vec<Port>,
    /// The switch names the engine's switch numbers last stood for.
    switch_names: Vec<String>,
    engine: DeviceEngine,
    /// Pings in flight, with the round they belong to and the re-pings that were asked.
    batch: Option<(Batch, u64, Requests)>,
    /// The engine's last requests, to plan this round's re-pings.
    requests: Requests,
    /// Row width of the all-gather, in pings, agreed when the group formed.
    width: usize,
    /// This node's ports as announced when the group formed.
    announced: Vec<(u32, Ipv4Addr)>,
    /// This node's vNIC addresses as announced when the group formed.
    announced_vnics: Vec<(u32, Ipv4Addr)>,
    /// The HCCS ping mesh's thread, when it runs.
    hccs: Option<hccs::HccsMesh>,
    view: DeviceView,
    /// This node's ports' conditions from their counters.
    status: status::StatusTracker,
}

/// The engine's re-ping requests.
#[derive(Debug, Clone, Default, PartialEq)]
struct Requests {
    ports: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

impl DevicePlane {
    /// A device plane with no ports yet.
    pub fn new(s: DeviceSettings) -> Self {
        let hccs = s
            .hccs
            .clone()
            .and_then(|h| match hccs::HccsMesh::start(h) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the HCCS ping-mesh thread; HCCS is not probed");
                    None
                }
            });
        Self {
            hccs,
            announced_vnics: Vec::new(),
            engine: DeviceEngine::new(&[], s.engine.clone()),
            s,
            ports: Vec::new(),
            switch_names: Vec::new(),
            batch: None,
            requests: Requests::default(),
            width: 0,
            announced: Vec::new(),
            view: DeviceView::default(),
            status: status::StatusTracker::default(),
        }
    }

    /// The exported view, with the HCCS ping mesh's as it is now.
    pub fn view(&self) -> DeviceView {
        DeviceView {
            hccs: self.hccs.as_ref().map(hccs::HccsMesh::view),
            ..self.view.clone()
        }
    }

    /// This node's vNIC addresses now (none without the HCCS ping mesh).
    fn local_vnics(&self) -> Vec<(u32, Ipv4Addr)> {
        let mut v = self
            .s
            .hccs
            .as_ref()
            .map(|h| (h.local_vnics)())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// When the group forms: exchange port tables and agree on the row width. `members`
    /// are the candidate indices of the ranks.
    pub fn on_form(&mut self, c: &mut Communicator, members: &[usize]) -> CollResult<()> {
        let local = (self.s.local_ports)();
        let fresh = ports::exchange(c, &local, members)?;
        self.announced = local;
        // Every member takes part in the vNIC exchange, with or without addresses.
        let vnics = self.local_vnics();
        let pod = self.s.hccs.as_ref().and_then(|h| h.super_pod);
        let table = ports::exchange_vnics(c, &vnics, pod, members)?;
        self.announced_vnics = vnics;
        if let (Some(m), Some(&me)) = (&self.hccs, members.get(c.rank())) {
            m.set_plan(hccs::plan(&table, me));
        }
        // Row width: the largest member's ports × the largest pings per round, plus the
        // largest re-ping cap, so every member sends the same width.
        let mine = [
            fresh
                .iter()
                .filter(|p| Some(&p.node) == members.get(c.rank()))
                .count() as u64,
            self.s.pings_per_round as u64,
            self.s.confirm_cap as u64,
        ];
        let mut all = vec![0u8; 24 * c.size()];
        let bytes: Vec<u8> = mine.iter().flat_map(|w| w.to_le_bytes()).collect();
        c.all_gather_agreed("device row width", &bytes, &mut all, DataType::Uint64)?;
        let words: Vec<u64> = all
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect();
        let max = |k: usize| words.iter().skip(k).step_by(3).copied().max().unwrap_or(0) as usize;
        let local_max = max(0).min(ports::MAX_LOCAL_PORTS);
        self.width = local_max * max(1).min(16) + max(2).min(256);
        self.merge_table(fresh, members);
        // Pings in flight were planned on the old table.
        self.batch = None;
        self.requests = Requests::default();
        Ok(())
    }

    /// Whether this node's ports differ from what it announced when the group formed (the
    /// port poller found their IPs after formation, or one changed): the group must re-form
    /// for the others to learn them.
    pub fn local_changed(&self) -> bool {
        let mut now = (self.s.local_ports)();
        now.sort();
        let mut was = self.announced.clone();
        was.sort();
        now != was || self.local_vnics() != self.announced_vnics
    }

    /// Replaces present members' ports and keeps absent members' as last known; port
    /// histories follow their (node, phy).
    fn merge_table(&mut self, fresh: Vec<Port>, members: &[usize]) {
        let present: BTreeSet<usize> = members.iter().copied().collect();
        let mut table: Vec<Port> = self
            .ports
            .iter()
            .copied()
            .filter(|p| !present.contains(&p.node))
            .chain(fresh)
            .collect();
        table.sort();
        table.dedup_by_key(|p| (p.node, p.phy));
        let map: Vec<Option<usize>> = self
            .ports
            .iter()
            .map(|old| {
                table
                    .iter()
                    .position(|p| p.node == old.node && p.phy == old.phy)
            })
            .collect();
        let nodes: Vec<usize> = table.iter().map(|p| p.node).collect();
        self.engine.remap(&map, &nodes);
        self.ports = table;
    }

    /// Candidates renumbered (a DNS re-resolution): `map[old] = new`, ports of nodes that
    /// are gone are dropped.
    pub fn remap_nodes(&mut self, map: &[Option<usize>]) {
        let old = std::mem::take(&mut self.ports);
        let mut renumbered: Vec<(usize, Port)> = old
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let node = map.get(p.node).copied().flatten()?;
                Some((i, Port { node, ..*p }))
            })
            .collect();
        renumbered.sort_by_key(|(_, p)| *p);
        let mut port_map = vec![None; old.len()];
        for (new, (i, _)) in renumbered.iter().enumerate() {
            port_map[*i] = Some(new);
        }
        let table: Vec<Port> = renumbered.into_iter().map(|(_, p)| p).collect();
        let nodes: Vec<usize> = table.iter().map(|p| p.node).collect();
        self.engine.remap(&port_map, &nodes);
        self.ports = table;
        self.batch = None;
        self.requests = Requests::default();
    }

    /// This member's row: the outcomes of its pings, validated and fixed-width, then its
    /// ports' conditions in the slots left (`conditions`: port table index, flags). A row
    /// full of pings carries no condition that round.
    fn row(
        &self,
        outcomes: &[Outcome],
        kinds: &BTreeMap<(usize, usize), u8>,
        conditions: &[(usize, u8)],
    ) -> Vec<f64> {
        let mut row = vec![f64::NAN; self.width * FIELDS];
        let measured = outcomes.iter().filter_map(|o| {
            let r = o.result.as_ref().ok()?;
            Some((o.job, r.sent, r.received, r.mean_rtt()))
        });
        let mut slots = row.chunks_exact_mut(FIELDS);
        for (slot, (job, sent, received, rtt)) in slots.by_ref().zip(measured) {
            let kind = kinds.get(&(job.src, job.dst)).copied().unwrap_or(0);
            slot.copy_from_slice(&[
                job.src as f64,
                job.dst as f64,
                f64::from(kind),
                f64::from(sent),
                f64::from(received),
                rtt.unwrap_or(f64::NAN),
            ]);
        }
        for (slot, &(port, flags)) in slots.zip(conditions) {
            slot.copy_from_slice(&[
                port as f64,
                port as f64,
                f64::from(STATUS_KIND),
                f64::from(flags),
                0.0,
                f64::NAN,
            ]);
        }
        row
    }

    /// This node's ports' conditions now, by port table index, as flags (ports with
    /// nothing to say are left out).
    fn conditions(&mut self, me: usize) -> Vec<(usize, u8)> {
        let now = self.status.update(&(self.s.local_status)());
        self.view.conditions = now
            .iter()
            .map(|(phy, c)| PortConditionView {
                npu: *phy,
                congested: c.congested,
                hardware_signs: c.signs.labels(),
            })
            .collect();
        self.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node == me)
            .filter_map(|(i, p)| Some((i, now.get(&p.phy)?.flags())))
            .filter(|(_, flags)| *flags != 0)
            .collect()
    }

    /// Reads every member's row back into the engine's input. A ping is kept only if its
    /// source is a port of the member that reports it, and it was planned (a plan ping of
    /// `round`) or requested (a re-ping of a requested port or pair); counts and times must
    /// be plausible. So a member can report only its own measurements of what was asked.
    fn read_rows(
        &self,
        all: &[f64],
        members: &[usize],
        round: u64,
        asked: &Requests,
    ) -> DeviceInput {
        let planned: BTreeSet<(usize, usize)> =
            self.present_plan(round, members).into_iter().collect();
        let mut input = DeviceInput::default();
        let per = self.width * FIELDS;
        for (rank, row) in all.chunks_exact(per.max(1)).enumerate() {
            let Some(&node) = members.get(rank) else {
                break;
            };
            for f in row.chunks_exact(FIELDS) {
                if let Some((port, c)) = valid_condition(&self.ports, f, node) {
                    if c.congested {
                        input.congested_ports.push(port);
                    }
                    if !c.signs.is_empty() {
                        input.port_signs.push((port, c.signs));
                    }
                    continue;
                }
                let Some(p) = valid_ping(&self.ports, f, node) else {
                    continue;
                };
                let requested = asked.ports.contains(&p.dst)
                    || asked.pairs.contains(&(p.src, p.dst))
                    || asked.pairs.contains(&(p.dst, p.src));
                match f[2] as u8 {
                    0 if planned.contains(&(p.src, p.dst)) => input.probes.push(p),
                    1 if requested => input.confirmations.push(p),
                    _ => {}
                }
            }
        }
        let present: BTreeSet<usize> = members.iter().copied().collect();
        input.absent_nodes = self
            .ports
            .iter()
            .map(|p| p.node)
            .filter(|n| !present.contains(n))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        input
    }

    /// The plan over the ports of present members, in table indices.
    fn present_plan(&self, round: u64, members: &[usize]) -> Vec<(usize, usize)> {
        let present: BTreeSet<usize> = members.iter().copied().collect();
        let idx: Vec<usize> = (0..self.ports.len())
            .filter(|i| present.contains(&self.ports[*i].node))
            .collect();
        let sub: Vec<Port> = idx.iter().map(|i| self.ports[*i]).collect();
        plan::pings(round, &sub, self.s.pings_per_round)
            .into_iter()
            .map(|(a, b)| (idx[a], idx[b]))
            .collect()
    }

    /// One round: gather last round's outcomes, judge, start this round's pings. `me` is
    /// this node's candidate index, `members` the ranks' candidate indices,
    /// `host_suspects` the candidates the host-plane engine holds confirmed or worse and
    /// `topology` their ToRs (the same on every member: their engines run on the same
    /// all-gathered input, and the places are exchanged).
    pub fn on_round(
        &mut self,
        c: &mut Communicator,
        round: u64,
        me: usize,
        members: &[usize],
        host_suspects: &[usize],
        topology: Topology<'_>,
    ) -> CollResult<()> {
        if self.width == 0 || self.ports.is_empty() {
            return Ok(());
        }
        let (outcomes, prev_round, asked) = match self.batch.take() {
            Some((b, r, asked)) => (b.collect(self.s.collect_deadline), Some(r), asked),
            None => (Vec::new(), None, Requests::default()),
        };
        let kinds: BTreeMap<(usize, usize), u8> = outcomes
            .iter()
            .map(|o| {
                (
                    (o.job.src, o.job.dst),
                    u8::from(!self.is_planned(o, prev_round, members)),
                )
            })
            .collect();
        self.count_local(&outcomes);
        let conditions = self.conditions(me);
        let mine = self.row(&outcomes, &kinds, &conditions);
        let mut all = vec![0u8; mine.len() * 8 * c.size()];
        let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        let forged = c.all_gather_signed("device row", &bytes, &mut all, DataType::Fp64)?;
        let mut all: Vec<f64> = all
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect();
        // A row whose author's signature failed says nothing: every value unknown.
        for f in &forged {
            if let Some(row) = all.chunks_exact_mut(mine.len().max(1)).nth(f.author) {
                row.fill(f64::NAN);
            }
        }
        if let Some(r) = prev_round {
            let mut input = self.read_rows(&all, members, r, &asked);
            input.host_suspects = host_suspects.to_vec();
            let switches = Switches::of(&self.ports, topology, self.s.rails);
            if switches.names != self.switch_names {
                let map = switches::renumbering(&self.switch_names, &switches.names);
                self.engine.renumber_switches(&map);
                self.switch_names = switches.names.clone();
            }
            input.tors = topology.tors.to_vec();
            input.port_tors = switches.port.clone();
            let out = self.engine.step(&input);
            self.requests = Requests {
                ports: out.confirm_requests.clone(),
                pairs: out.pair_requests.clone(),
            };
            self.publish(&input, &out, me);
            self.view.tor_verdicts = out
                .tor_verdicts
                .iter()
                .map(|v| DeviceTorView {
                    // The number came from `switches`; a number outside it is not shown.
                    tor: switches.name(v.tor).map(String::from).unwrap_or_default(),
                    members: v.members.clone(),
                    ports: v.ports,
                    elevated: v.elevated,
                    loss_ratio: v.loss_ratio,
                    rtt_level: v.rtt_level,
                    crossing_loss_ratio: v.crossing_loss_ratio,
                    crossing_slow_share: v.crossing_slow_share,
                    rounds: v.rounds,
                })
                .filter(|v| !v.tor.is_empty())
                .collect();
            self.view.spines = out
                .spine_verdict
                .iter()
                .map(|v| switches.spine_view(v, &self.ports))
                .collect();
        }
        let jobs = self.jobs(round, me, members);
        let asked = self.requests.clone();
        self.batch = Some((Batch::start(self.s.pinger.clone(), jobs), round, asked));
        Ok(())
    }

    fn is_planned(&self, o: &Outcome, round: Option<u64>, members: &[usize]) -> bool {
        round.is_some_and(|r| {
            self.present_plan(r, members)
                .contains(&(o.job.src, o.job.dst))
        })
    }

    /// This node's pings for `round`: its share of the plan, then re-pings of suspects it
    /// is a confirmer for and of requested pairs it is the source of, up to the cap.
    fn jobs(&self, round: u64, me: usize, members: &[usize]) -> Vec<Job> {
        let present: Vec<bool> = {
            let max = self.ports.iter().map(|p| p.node).max().unwrap_or(0);
            let set: BTreeSet<usize> = members.iter().copied().collect();
            (0..=max).map(|n| set.contains(&n)).collect()
        };
        let job = |src: usize, dst: usize| Job {
            src,
            dst,
            phy: self.ports[src].phy,
            ip: self.ports[dst].ip,
        };
        let mut jobs: Vec<Job> = self
            .present_plan(round, members)
            .into_iter()
            .filter(|(a, _)| self.ports[*a].node == me)
            .map(|(a, b)| job(a, b))
            .collect();
        let mut extra: Vec<Job> = Vec::new();
        for &suspect in &self.requests.ports {
            for confirmer in self.engine.confirmers(suspect, &present) {
                if self.ports[confirmer].node == me {
                    extra.push(job(confirmer, suspect));
                }
            }
        }
        for &(a, b) in &self.requests.pairs {
            if self.ports.get(a).is_some_and(|p| p.node == me) && b < self.ports.len() {
                extra.push(job(a, b));
            }
        }
        extra.truncate(self.s.confirm_cap);
        jobs.extend(extra);
        jobs
    }

    /// This node's own pings: packets and round trips per local NPU, failures by reason.
    fn count_local(&mut self, outcomes: &[Outcome]) {
        for o in outcomes {
            let npu = self.ports.get(o.job.src).map_or(o.job.phy, |p| p.phy);
            let e = match self.view.local.iter_mut().position(|l| l.npu == npu) {
                Some(i) => &mut self.view.local[i],
                None => {
                    self.view.local.push(LocalPings {
                        npu,
                        rtt: Histogram::default(),
                        sent: 0,
                        received: 0,
                        failures: BTreeMap::new(),
                    });
                    self.view.local.sort_by_key(|l| l.npu);
                    let i = self
                        .view
                        .local
                        .iter()
                        .position(|l| l.npu == npu)
                        .unwrap_or(0);
                    &mut self.view.local[i]
                }
            };
            match &o.result {
                Ok(r) => {
                    e.sent += u64::from(r.sent);
                    e.received += u64::from(r.received);
                    for t in &r.rtts {
                        e.rtt.observe(*t);
                    }
                }
                Err(err) => *e.failures.entry(err.reason()).or_default() += 1,
            }
        }
    }

    /// Updates the exported view from the round's input and the engine's output.
    fn publish(&mut self, input: &DeviceInput, out: &DeviceOutput, me: usize) {
        let states = self.engine.states();
        self.view.ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = out.scores.get(i).copied().unwrap_or_default();
                PortView {
                    node: p.node,
                    npu: p.phy,
                    ip: p.ip,
                    state: states.get(i).copied().unwrap_or(NodeState::Healthy),
                    window_packets: s.packets,
                    window_lost: s.lost,
                    rtt_residual: s.rtt_residual.is_finite().then_some(s.rtt_residual),
                }
            })
            .collect();
        self.view.fabric_degraded = out.fabric;
        crate::probe::horizon::log_horizon(self.view.horizon, out.horizon, "device");
        self.view.horizon = Some(out.horizon);
        if out.rate_renewed {
            self.view.normal_changes += 1;
            tracing::info!(
                round = self.engine.rounds(),
                "device plane: NPU pings slow on their own stayed above the learnt share for 180 partial fabric events with no quiet round between; that share is the new normal and is learnt again"
            );
        }
        if out.median_renewed {
            self.view.median_changes += 1;
            tracing::info!(
                round = self.engine.rounds(),
                "device plane: the NPU pings' round median stayed above its learnt normal for 180 device rounds in a row; that level is the new normal and the fabric event it made ends"
            );
        }
        self.view.node_verdicts = out.node_verdicts.clone();
        self.view.pair_verdicts = out.pair_verdicts.clone();
        self.view.planned = input
            .probes
            .iter()
            .filter(|p| self.ports.get(p.src).is_some_and(|x| x.node == me))
            .map(|p| PlannedPing {
                src: p.src,
                dst: p.dst,
                sent: p.sent,
                received: p.received,
                rtt: p.rtt,
            })
            .collect();
        for t in &out.transitions {
            let p = self.ports[t.port];
            tracing::info!(node = p.node, npu = p.phy, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, "NPU port state changed");
            self.view.transitions.push_back(PortTransitionView {
                round: t.round,
                port: t.port,
                node: p.node,
                npu: p.phy,
                from: t.from,
                to: t.to,
                reason: t.reason.clone(),
                evidence: t.evidence.clone(),
            });
        }
        while self.view.transitions.len() > TRANSITIONS_KEPT {
            self.view.transitions.pop_front();
        }
        self.view.rounds = self.engine.rounds();
        self.view.me = Some(me);
    }

    /// Nodes with a port recommended for quarantine (reason `npu_port`).
    pub fn quarantined_nodes(&self) -> BTreeSet<usize> {
        self.engine
            .states()
            .iter()
            .zip(&self.ports)
            .filter(|(s, _)| **s == NodeState::QuarantineRecommended)
            .map(|(_, p)| p.node)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::CommConfig;
    use crate::collective::transport::TransportConfig;
    use runner::{PingError, PingReply};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A synthetic fabric: every ping answers 3 of 3 in 100 µs, except that the port with
    /// IP `lossy` loses every third packet it carries.
    struct Fabric {
        lossy: Ipv4Addr,
        own: Vec<(u32, Ipv4Addr)>,
        counter: AtomicU64,
    }

    impl Pinger for Fabric {
        fn ping(&self, phy: u32, dst: Ipv4Addr) -> Result<PingReply, PingError> {
            let src = self.own.iter().find(|(p, _)| *p == phy).map(|(_, ip)| *ip);
            let through = src == Some(self.lossy) || dst == self.lossy;
            let mut received = 0;
            for _ in 0..3 {
                let n = self.counter.fetch_add(1, Ordering::Relaxed);
                if !(through && n.is_multiple_of(3)) {
                    received += 1;
                }
            }
            Ok(PingReply {
                sent: 3,
                received,
                rtts: vec![1e-4; received as usize],
            })
        }
    }

    fn ports_of(node: usize) -> Vec<(u32, Ipv4Addr)> {
        (0..4u32)
            .map(|phy| (phy, Ipv4Addr::new(10, 0, node as u8, phy as u8 + 1)))
            .collect()
    }

    /// Port counters as the poller reads them: on member `failing`, phy 1's FCS errors
    /// grow by one at every read.
    fn status_of(
        r: usize,
        failing: Option<usize>,
    ) -> Arc<dyn Fn() -> Vec<(u32, status::PortReading)> + Send + Sync> {
        let reads = Arc::new(AtomicU64::new(0));
        Arc::new(move || {
            let k = reads.fetch_add(1, Ordering::Relaxed);
            (0..4u32)
                .map(|phy| {
                    let errors = if failing == Some(r) && phy == 1 { k } else { 0 };
                    let reading = status::PortReading {
                        pause_rx: Some(0),
                        cnp_rx: Some(0),
                        errors: Some(errors),
                        speed_bps: Some(200e9),
                        link_up: Some(true),
                        link_changes: Some(1),
                        read_at: Some(std::time::UNIX_EPOCH + Duration::from_secs(k)),
                    };
                    (phy, reading)
                })
                .collect()
        })
    }

    /// Four members run `rounds` device rounds over a fabric where node 2's phy 1 loses a
    /// third of its packets; `failing`: the member whose phy 1 counts corrupted frames.
    fn run_group(rounds: u64, failing: Option<usize>) -> Vec<DeviceView> {
        let n = 4;
        let lossy = Ipv4Addr::new(10, 0, 2, 2); // node 2, phy 1
        let ls: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<_> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        std::thread::scope(|s| {
            let hs: Vec<_> = ls
                .into_iter()
                .enumerate()
                .map(|(r, l)| {
                    let addrs = addrs.clone();
                    s.spawn(move || {
                        let mut t = TransportConfig::new(41, b"device-plane-test".to_vec());
                        t.connect_timeout = Duration::from_secs(10);
                        let mut cfg = CommConfig::new(t);
                        cfg.exec_timeout = Duration::from_secs(20);
                        let mut c = Communicator::init(l, r, addrs, cfg).unwrap();
                        let own = ports_of(r);
                        let pinger = Arc::new(Fabric {
                            lossy,
                            own: own.clone(),
                            counter: AtomicU64::new(0),
                        });
                        let mut d = DevicePlane::new(DeviceSettings {
                            pings_per_round: 4,
                            confirm_cap: 16,
                            collect_deadline: Duration::from_secs(5),
                            engine: DeviceConfig::default(),
                            pinger,
                            local_ports: Arc::new(move || own.clone()),
                            local_status: status_of(r, failing),
                            hccs: None,
                            rails: false,
                        });
                        let members: Vec<usize> = (0..n).collect();
                        d.on_form(&mut c, &members).unwrap();
                        for round in 1..=rounds {
                            d.on_round(&mut c, round, r, &members, &[], Topology::default())
                                .unwrap();
                        }
                        d.view()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn every_member_localises_the_same_lossy_port() {
        let views = run_group(30, None);
        for (r, v) in views.iter().enumerate() {
            assert_eq!(v.ports.len(), 16, "member {r}");
            let bad: Vec<(usize, u32)> = v
                .ports
                .iter()
                .filter(|p| p.state != NodeState::Healthy)
                .map(|p| (p.node, p.npu))
                .collect();
            assert_eq!(bad, vec![(2, 1)], "member {r}: {bad:?}");
            assert!(!v.fabric_degraded && v.node_verdicts.is_empty());
            // Every member judged the same input: the same states everywhere.
            let states: Vec<NodeState> = v.ports.iter().map(|p| p.state).collect();
            let first: Vec<NodeState> = views[0].ports.iter().map(|p| p.state).collect();
            assert_eq!(states, first, "member {r} disagrees");
            // Each member counted only its own pings.
            let sent: u64 = v.local.iter().map(|l| l.sent).sum();
            assert!(sent > 0 && v.local.iter().all(|l| l.npu < 4));
        }
    }

    /// The lossy port's own member reads corrupted frames on it: the condition travels in
    /// that member's row, and every member's engine recommends the port after the short
    /// hold, saying so. Without the reading the same 30 rounds (under the persistence
    /// horizon) recommend nothing.
    #[test]
    fn a_ports_own_counters_reach_every_members_engine() {
        let recommended = |v: &DeviceView| -> Vec<String> {
            v.transitions
                .iter()
                .filter(|t| (t.node, t.npu) == (2, 1))
                .filter(|t| t.to == NodeState::QuarantineRecommended)
                .map(|t| t.reason.clone())
                .collect()
        };
        for (r, v) in run_group(30, Some(2)).iter().enumerate() {
            let reasons = recommended(v);
            assert_eq!(reasons.len(), 1, "member {r}: {:?}", v.transitions);
            assert!(
                reasons[0].contains("corroborated by the port's own hardware")
                    && reasons[0].ends_with("corrupted frames"),
                "member {r}: {}",
                reasons[0]
            );
        }
        for (r, v) in run_group(30, None).iter().enumerate() {
            assert!(recommended(v).is_empty(), "member {r}: {:?}", v.transitions);
        }
    }
}
