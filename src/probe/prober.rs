//! The prober's state between rounds, and what a round does with it: keep the membership
//! view, form the group, plan and run the round, feed the health engine, and publish the
//! [`ProbeSnapshot`].
//!
//! Failure is fail-closed: if the group cannot be formed or a round fails, probing stops
//! (`hcclwatch_probe_active 0`), the daemon keeps exporting telemetry, and the group is
//! re-formed at the next round.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::congestion::UplinkReader;
use super::device::{DevicePlane, Topology};
use super::forgeries::ForgedRows;
use super::hard_faults::{HardFaults, hard_fault_reason};
use super::onsets::{Onsets, reason_of};
use super::plan::Plan;
use super::round::{
    Contribution, RoundResult, group_latency, link_views, majority_over_budget, pair_seconds,
    permutation_probes, round_trip,
};
use super::tors::{self, record_tors, tor_table};
use super::{ProbeSettings, group, leaver, membership, trace};
use crate::collective::Communicator;
use crate::collective::identity::IDENTITY_STEP;
use crate::health::hardware::Signs;
use crate::health::plan::{OwnTor, confirm_pairs};
use crate::health::{
    HealthEngine, InferConfig, NodeState, Probe, Report, RoundInput, RoundOutput, TorInference,
    Transition,
};
use crate::snapshot::Store;
use crate::snapshot::histogram::{EPISODE_BUCKETS, Histogram};
use crate::snapshot::probe::{
    CollectiveDurations, MemberView, PauseReason, ProbeSnapshot, QuarantineReason, RingResult,
};
use crate::snapshot::topology::NodePlace;

/// Longest transition log kept for `/api/v1/state`.
const TRANSITIONS_KEPT: usize = 100;

/// The prober's state between rounds.
pub struct Prober {
    pub(super) s: ProbeSettings,
    listener: Arc<TcpListener>,
    view: membership::Membership,
    pub(super) comm: Option<Communicator>,
    /// Candidate index of each rank of `comm`.
    group: Vec<usize>,
    engine: HealthEngine,
    requests: Vec<usize>,
    /// Of `requests`, those to re-pair within their own ToR (`RoundOutput::confirm_own_tor`).
    own_tor: Vec<usize>,
    link_requests: Vec<(usize, usize)>,
    faults: HardFaults,
    round: u64,
    limited: bool,
    pub(super) jitter: u64,
    /// (end, bytes sent, seconds spent) of each round in the last hour.
    sent_log: VecDeque<(Instant, u64, f64)>,
    /// (round, candidate) of the peers this node exchanged with.
    met: VecDeque<(u64, usize)>,
    pub(super) part: ProbeSnapshot,
    /// The device plane (always present, so every member takes part in its exchanges;
    /// without a pinger or ports it announces nothing).
    device: DevicePlane,
    /// Whether this node probes the device plane (it has a pinger and ports).
    device_on: bool,
    /// The membership problem last logged, so that a persisting one is logged once.
    logged: Option<String>,
    /// This node's own uplink, read once per round (None: `probe.congestion_enabled` off).
    uplink: Option<UplinkReader>,
    /// This node's place as it said it at the group's formation; a different one published
    /// since makes the group re-form, so every member judges with the same topology.
    shared_place: Option<NodePlace>,
    /// The members' ToRs as the engines number them, and the names of those numbers (see
    /// `tors`): set when the group's places are exchanged, the only time they change.
    tor_table: (Vec<Option<u32>>, Vec<String>),
    /// Groups of members whose slowdowns move together: what `/api/v1/state` names as the
    /// ToR of a member no source places (the engine does not judge by them).
    infer: TorInference,
    /// When each member's current episode began (its first transition out of healthy or
    /// probation), by name, until it is recommended or recovers.
    onsets: Onsets,
    /// Blocks whose author's signature failed, counted and logged.
    forged: ForgedRows,
}

impl Prober {
    pub fn new(s: ProbeSettings, listener: Arc<TcpListener>, now: Instant) -> Self {
        let view = membership::Membership::new(s.source.clone(), s.member_timeout, now);
        let n = view.candidates().len();
        let jitter = 0x9e37_79b9_7f4a_7c15
            ^ (u64::from(s.listen.port()) << 17)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        let device_on = s.device.is_some();
        let hard_rules = s.hard_faults;
        let device = DevicePlane::new(s.device.clone().unwrap_or_else(super::device::disabled));
        let uplink = s
            .congestion
            .enabled
            .then(|| UplinkReader::new(s.congestion.clone()));
        let infer = TorInference::new(n, InferConfig::of(&s.health));
        let mut p = Self {
            device,
            device_on,
            infer,
            engine: HealthEngine::new(n, s.health.clone()),
            s,
            listener,
            view,
            comm: None,
            group: Vec::new(),
            requests: Vec::new(),
            own_tor: Vec::new(),
            link_requests: Vec::new(),
            faults: HardFaults::new(hard_rules),
            round: 0,
            limited: false,
            jitter,
            sent_log: VecDeque::new(),
            met: VecDeque::new(),
            part: ProbeSnapshot::default(),
            logged: None,
            uplink,
            shared_place: None,
            tor_table: (Vec::new(), Vec::new()),
            onsets: Onsets::default(),
            forged: ForgedRows::default(),
        };
        p.resize_part();
        p
    }

    /// Sizes the per-candidate parts of the export to the current candidates.
    fn resize_part(&mut self) {
        let states = self.engine.states();
        self.part.members = self
            .view
            .candidates()
            .iter()
            .enumerate()
            .map(|(i, c)| MemberView {
                state: states.get(i).copied().unwrap_or(NodeState::Healthy),
                ..MemberView::new(c.name.clone())
            })
            .collect();
        self.part.links.clear();
        self.part.link_degraded.clear();
        self.part.link_withheld.clear();
        tors::forget(&mut self.part);
        self.tor_table = (Vec::new(), Vec::new());
    }

    /// Pauses probing with `why` (fail closed: telemetry goes on).
    fn pause(&mut self, reason: PauseReason, why: String, failed_round: bool) {
        if self.logged.as_deref() != Some(&why) {
            tracing::warn!(reason = %why, "probing paused; telemetry continues");
            self.logged = Some(why.clone());
        }
        self.part.active = false;
        self.part.group_members = 0;
        self.part.wire_version = None;
        self.part.certificate_mode = None;
        self.part.members.iter_mut().for_each(|m| m.up = false);
        self.part.last_error = Some(why);
        self.part.pause_reason = Some(reason);
        if failed_round {
            self.part.rounds_failed += 1;
        }
        self.forged
            .take_from(self.comm.as_mut(), &mut self.part, &self.group);
        self.comm = None;
    }

    /// One scheduled round: membership upkeep, forming the group if needed, and the round.
    pub fn tick(&mut self, store: &Store) {
        let now = Instant::now();
        match self
            .view
            .refresh(now, membership::system_resolve, membership::is_local)
        {
            Ok(membership::Refresh::Unchanged) => {}
            Ok(membership::Refresh::Changed(map)) => {
                let addrs: Vec<String> = self
                    .view
                    .candidates()
                    .iter()
                    .map(|c| c.addr.to_string())
                    .collect();
                tracing::info!(candidates = %addrs.join(","), "membership changed; the group re-forms");
                self.engine.remap(&map, addrs.len());
                // Node numbers changed: the inference starts over.
                self.infer = TorInference::new(addrs.len(), InferConfig::of(&self.s.health));
                self.device.remap_nodes(&map);
                renumber(&mut self.part.transitions, &map);
                self.requests.clear();
                self.own_tor.clear();
                self.link_requests.clear();
                self.met.clear();
                self.comm = None;
                self.resize_part();
            }
            Err(e) => {
                tracing::warn!(error = %e, "membership refresh failed; keeping the last view")
            }
        }
        self.part.membership_stale = false;
        if let Some(why) = self.view.stale(now) {
            self.part.membership_stale = true;
            self.pause(PauseReason::MembershipStale, why, false);
            return;
        }
        let me = self.view.me().unwrap_or(0);
        let n = self.view.candidates().len();
        let place = store.topology().and_then(|t| t.own.clone());
        if self.comm.is_some() && place != self.shared_place {
            tracing::info!(place = ?place, "this node's place in the network changed; the group re-forms to share it");
            self.comm = None;
        }
        let ping = self
            .s
            .comm
            .transport
            .connect_timeout
            .min(Duration::from_secs(1));
        if self.comm.is_none() && !self.form(now, me, n, ping, place) {
            return;
        }
        self.run_round(store, me);
        self.check_returns(n, ping);
    }

    /// Re-admission: a left-out candidate that accepts again makes the group re-form at
    /// the next round. Checked after the round, so that a connect timing out against a
    /// dead host never delays this node's arrival at the barrier (its arrival lag). Every
    /// member sees the return at about the same round; one that does not yet fails its
    /// next round on the departed connections and re-forms then.
    fn check_returns(&mut self, n: usize, ping: Duration) {
        if self.comm.is_none() {
            return;
        }
        // An excluded member answering is not a return: it stays out until its time.
        let now = Instant::now();
        let out: Vec<usize> = (0..n)
            .filter(|i| !self.group.contains(i) && self.view.excluded(*i, now).is_none())
            .collect();
        if out.is_empty() {
            return;
        }
        let back = membership::reachable(&self.addrs(&out), ping);
        let now = Instant::now();
        for (i, ok) in out.iter().zip(&back) {
            self.view.record(*i, *ok, now);
        }
        if back.iter().any(|b| *b) {
            tracing::info!("a left-out member accepts connections again; re-forming the group");
            self.comm = None;
        }
    }

    fn addrs(&self, idx: &[usize]) -> Vec<SocketAddr> {
        idx.iter()
            .map(|i| self.view.candidates()[*i].addr)
            .collect()
    }

    /// Forms the group from the candidates that answer; false (with the export updated)
    /// if it cannot.
    fn form(
        &mut self,
        now: Instant,
        me: usize,
        n: usize,
        ping: Duration,
        place: Option<NodePlace>,
    ) -> bool {
        let others: Vec<usize> = (0..n).filter(|i| *i != me).collect();
        let up = membership::reachable(&self.addrs(&others), ping);
        for (i, ok) in others.iter().zip(&up) {
            self.view.record(*i, *ok, now);
        }
        let members = self.view.members(now);
        for (i, m) in self.part.members.iter_mut().enumerate() {
            m.excluded = self.view.excluded(i, now).map(str::to_string);
        }
        let left_out: Vec<String> = (0..n)
            .filter(|i| !members.contains(i))
            .map(|i| self.view.candidates()[i].name.clone())
            .collect();
        if members.len() < 2 {
            self.pause(
                PauseReason::Alone,
                format!(
                    "no other member of the probe group answers (left out: {})",
                    left_out.join(", ")
                ),
                true,
            );
            return false;
        }
        let rank = members.iter().position(|i| *i == me).unwrap_or(0);
        let comm_id = self.view.comm_id(self.s.comm.transport.comm_id, &members);
        let cfg = match self
            .s
            .group_config(self.view.candidates(), comm_id, &members, rank)
        {
            Ok(cfg) => cfg,
            Err(e) => {
                let why = format!("this node's identity cannot be used: {e}");
                self.pause(PauseReason::FormFailed, why, true);
                return false;
            }
        };
        let l = match self.listener.try_clone() {
            Ok(l) => l,
            Err(e) => {
                self.pause(
                    PauseReason::FormFailed,
                    format!("cannot share the probe listener: {e}"),
                    true,
                );
                return false;
            }
        };
        let addrs = self.addrs(&members);
        let mut c = match Communicator::init(l, rank, addrs, cfg) {
            Ok(c) => c,
            Err(e) if e.step == IDENTITY_STEP && e.peer.is_some_and(|p| p != rank) => {
                // The proof came over the rank's own connection: its sender failed it.
                let bad = members[e.peer.unwrap_or_default()];
                self.exclude(bad, &e.message);
                return false;
            }
            Err(e) => {
                self.pause(
                    PauseReason::FormFailed,
                    format!("cannot form the probe group: {e}"),
                    true,
                );
                return false;
            }
        };
        if let Some((old, why)) = group::below_floor(&c, self.s.min_wire_version) {
            old.iter().for_each(|r| self.exclude(members[*r], &why));
            return false;
        }
        let agreed = self.agree(&mut c, &members, n) && self.share_places(&mut c, &members, place);
        // Forgeries found while agreeing count even when they broke the formation.
        self.forged
            .take_from(Some(&mut c), &mut self.part, &members);
        if !agreed {
            return false;
        }
        if left_out.is_empty() {
            tracing::info!(members = members.len(), "probe group formed");
        } else {
            tracing::warn!(members = members.len(), left_out = %left_out.join(","), "probe group formed without members that stopped answering");
        }
        self.logged = None;
        self.group = members;
        self.comm = Some(c);
        true
    }

    /// After the mesh forms, the members agree on names (DNS membership), on the engine
    /// state (the longest-running member's) and on their NPU ports. False, with the
    /// probing paused and the reason exported, if any exchange fails.
    fn agree(&mut self, c: &mut Communicator, members: &[usize], n: usize) -> bool {
        if self.view.is_dns() {
            // Members found by DNS are known by address until they say their names.
            match group::exchange_names(c, &self.s.own_name) {
                Ok(names) => {
                    for (k, name) in names.into_iter().enumerate() {
                        if let Some(name) = name {
                            self.part.members[members[k]].name = name;
                        }
                    }
                }
                Err(e) => {
                    self.pause(
                        PauseReason::FormFailed,
                        format!("probe group formed but the name exchange failed: {e}"),
                        true,
                    );
                    return false;
                }
            }
        }
        // Every member takes over the engine of the one that has been probing longest, so
        // that a member that just (re)joined reaches the same verdicts as the others.
        let max_len = crate::health::max_state_bytes(n, self.s.health.window);
        let faults = group::HandoverFaults {
            lie: self.s.inject_lies,
            oversize: self.s.inject_oversize_handover,
        };
        match group::adopt_engine(c, &mut self.engine, max_len, faults) {
            Ok(group::Handover::Adopted { from }) => {
                tracing::info!(from = %self.part.name(members[from]), rounds = self.engine.rounds(), "took over the group's engine state");
                self.requests.clear();
                self.own_tor.clear();
                self.link_requests.clear();
                self.sync_states();
            }
            Ok(group::Handover::Unchanged | group::Handover::NoMajority) => {}
            Ok(group::Handover::Refused { from, why }) => {
                self.exclude(members[from], &why);
                return false;
            }
            Err(e) => {
                self.pause(
                    PauseReason::FormFailed,
                    format!("probe group formed but the engine state exchange failed: {e}"),
                    true,
                );
                return false;
            }
        }
        if let Err(e) = self.device.on_form(c, members) {
            self.pause(
                PauseReason::FormFailed,
                format!("probe group formed but the NPU port exchange failed: {e}"),
                true,
            );
            return false;
        }
        true
    }

    /// Leaves candidate `node` out of the group for `probe.exclusion` because it broke a
    /// formation exchange (`why`); the group re-forms without it at the next round.
    fn exclude(&mut self, node: usize, why: &str) {
        let name = self.part.name(node);
        let until = Instant::now() + self.s.exclusion;
        let reason = format!("excluded for {:?}: {why}", self.s.exclusion);
        tracing::warn!(peer = %name, reason = %reason, "a member is left out of the group; the group forms without it");
        self.view.exclude(node, until, reason.clone());
        if let Some(m) = self.part.members.get_mut(node) {
            m.excluded = Some(reason);
        }
        self.pause(
            PauseReason::FormFailed,
            format!("member {name} is left out ({why}); re-forming without it"),
            true,
        );
    }

    /// All-gathers the members' places into their views (see `group`); false, with the
    /// probing paused and the reason exported, if the exchange fails.
    fn share_places(
        &mut self,
        c: &mut Communicator,
        members: &[usize],
        place: Option<NodePlace>,
    ) -> bool {
        match group::exchange_places(c, place.as_ref()) {
            Ok(places) => {
                self.part.members.iter_mut().for_each(|m| m.place = None);
                for (k, p) in places.into_iter().enumerate() {
                    self.part.members[members[k]].place = p;
                }
                self.tor_table = tor_table(&self.part.members);
                self.shared_place = place;
                true
            }
            Err(e) => {
                self.pause(
                    PauseReason::FormFailed,
                    format!("probe group formed but the topology exchange failed: {e}"),
                    true,
                );
                false
            }
        }
    }

    /// Copies the engine's states into the members' views.
    fn sync_states(&mut self) {
        for (m, s) in self.part.members.iter_mut().zip(self.engine.states()) {
            m.state = s;
        }
    }

    /// This member's proposal for the round: the confirmations the engine asked for and,
    /// unless the round is budget-limited, a few link re-measurements, in group ranks.
    fn propose(&self, present: &[bool]) -> Plan {
        let g = &self.group;
        let rank_of = |i: usize| g.iter().position(|x| *x == i);
        let own = OwnTor {
            tors: &self.tor_table.0,
            nodes: &self.own_tor,
            round: self.engine.rounds(),
        };
        let mut pairs = confirm_pairs(
            &self.requests,
            &self.engine.states(),
            present,
            self.s.health.confirm_peers,
            own,
        );
        let n_confirm = pairs.len();
        // Pairs the engine found slow are re-measured (link localisation), a few per round;
        // never in a budget-limited round, whose exchanges are latency-sized.
        if !self.limited {
            pairs.extend(
                self.link_requests
                    .iter()
                    .copied()
                    .filter(|(a, b)| {
                        a != b && present.get(*a) == Some(&true) && present.get(*b) == Some(&true)
                    })
                    .take(crate::health::LINK_REMEASURES),
            );
        }
        let in_group = |(a, b): &(usize, usize)| Some((rank_of(*a)?, rank_of(*b)?));
        Plan {
            round: self.round,
            limited: self.limited,
            n_confirm: pairs[..n_confirm].iter().filter_map(in_group).count(),
            pairs: pairs.iter().filter_map(in_group).collect(),
            device_every: self.s.device_every,
        }
    }

    /// Whether this node is over its probe budget (bytes or busy time in the last hour);
    /// updates the exported ratios.
    fn over_budget(&mut self) -> bool {
        let s = &self.s;
        let hour_ago = Instant::now().checked_sub(Duration::from_secs(3600));
        while self
            .sent_log
            .front()
            .is_some_and(|(t, _, _)| hour_ago.is_some_and(|h| *t < h))
        {
            self.sent_log.pop_front();
        }
        let used: u64 = self.sent_log.iter().map(|(_, b, _)| b).sum();
        let busy: f64 = self.sent_log.iter().map(|(_, _, t)| t).sum();
        let busy_budget = 3600.0 * s.budget_busy_ratio;
        self.part.budget_ratio =
            (s.budget_bytes_per_hour > 0).then(|| used as f64 / s.budget_bytes_per_hour as f64);
        self.part.busy_ratio = (busy_budget > 0.0).then(|| busy / busy_budget);
        (s.budget_bytes_per_hour > 0 && used >= s.budget_bytes_per_hour)
            || (busy_budget > 0.0 && busy >= busy_budget)
    }

    /// Whether this node's own uplink showed congestion since the last round, and its
    /// hardware signs (none with the reader off); read just before the exchange, so that the period it covers ends
    /// where this round's probe traffic begins.
    fn uplink_read(&mut self) -> (bool, Signs) {
        let Some(u) = self.uplink.as_mut() else {
            return (false, Signs::NONE);
        };
        let local = self
            .view
            .me()
            .and_then(|me| self.view.candidates().get(me))
            .map(|c| c.addr.ip());
        let bind = self.s.comm.transport.bind_device.as_deref();
        u.locate(local, bind, crate::collective::bootstrap::env::interfaces);
        let r = u.read(Instant::now(), self.part.bytes_sent);
        if r.congested {
            tracing::debug!(busy = ?r.busy, ce_packets = ?r.ce_packets, "this node's uplink is congested this round");
        }
        self.part.congestion_source_up = Some(r.source_up);
        self.part.congestion_read_errors = u.errors();
        if !r.signs.is_empty() {
            tracing::debug!(signs = ?r.signs.names(), "this node's uplink shows hardware signs this round");
        }
        (r.congested, r.signs)
    }

    /// Runs the round; on failure pauses probing (the group re-forms next round) and
    /// returns `None`.
    fn exchange(&mut self, proposal: &Plan, own: Contribution) -> Option<RoundResult> {
        let c = self.comm.as_mut()?;
        let started = Instant::now();
        let before = self.part.bytes_sent;
        let cx = trace::round(proposal.round, c.size());
        let result = round_trip(&cx, c, &self.s, proposal, own, &mut self.part.bytes_sent);
        trace::end(&cx, result.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        self.sent_log.push_back((
            Instant::now(),
            self.part.bytes_sent - before,
            started.elapsed().as_secs_f64(),
        ));
        match result {
            Ok(r) => Some(r),
            Err(e) => {
                // A member that said it is leaving is out at once. Otherwise the peer the
                // error names is the first suspect for removal, and the next formation's
                // liveness check decides.
                let g = &self.group;
                if let Some(p) = leaver(&e.to_string()).and_then(|p| g.get(p)) {
                    tracing::info!(member = %self.part.name(*p), "a member left the probe group");
                    self.view.left(*p, Instant::now());
                } else if let Some(p) = e.peer.and_then(|p| g.get(p)) {
                    self.view.record(*p, false, Instant::now());
                }
                self.pause(
                    PauseReason::RoundFailed,
                    format!("probe round failed; the group will be re-formed: {e}"),
                    true,
                );
                None
            }
        }
    }

    /// The engine's input for a round, in candidate indices.
    fn engine_input(&self, r: &RoundResult, present: &[bool]) -> RoundInput {
        let (g, m) = (&self.group, &r.measured);
        let mut confirmations: Vec<Probe> = r
            .plan
            .pairs
            .iter()
            .enumerate()
            .map(|(k, &(x, p))| Probe {
                src: g[x],
                dst: g[p],
                seconds: pair_seconds(m, k, x, p),
            })
            .collect();
        let n_confirm = r.plan.n_confirm.min(confirmations.len());
        let link_probes = confirmations.split_off(n_confirm);
        // Each peer's own timing of its re-pairing with the suspect, for the consistency
        // check (the suspect's own report is left out: it cannot be a witness to itself).
        let reports = r.plan.pairs[..n_confirm]
            .iter()
            .enumerate()
            .filter_map(|(k, &(x, p))| {
                let v = m.get(p)?.confirm.get(k).copied()?;
                v.is_finite().then_some(Report {
                    reporter: g[p],
                    accused: g[x],
                    seconds: v,
                })
            })
            .collect();
        RoundInput {
            reports,
            probes: permutation_probes(g, m, r.stride),
            confirmations,
            hard_faults: (0..g.len())
                .filter(|k| m[*k].hard != 0)
                .map(|k| (g[k], hard_fault_reason(m[k].hard).to_string()))
                .collect(),
            link_probes,
            absent: (0..present.len()).filter(|i| !present[*i]).collect(),
            congested: (0..g.len())
                .filter(|k| m[*k].congested)
                .map(|k| g[k])
                .collect(),
            hardware: (0..g.len())
                .filter(|k| !m[*k].hardware.is_empty())
                .map(|k| (g[k], m[k].hardware))
                .collect(),
            tors: self.tor_table.0.clone(),
        }
    }

    fn run_round(&mut self, store: &Store, me: usize) {
        if self.comm.is_none() {
            return;
        }
        let n = self.view.candidates().len();
        let present: Vec<bool> = (0..n).map(|i| self.group.contains(&i)).collect();
        self.round += 1;
        let mut proposal = self.propose(&present);
        if self.s.inject_lies {
            // A liar proposes that every other member be confirmed against itself alone,
            // at a round of its choosing.
            let me = self
                .group
                .iter()
                .position(|x| Some(*x) == self.view.me())
                .unwrap_or(0);
            proposal.round += 1000;
            proposal.pairs = (0..self.group.len())
                .filter(|k| *k != me)
                .map(|k| (k, me))
                .collect();
            proposal.n_confirm = proposal.pairs.len();
        }
        let (congested, hardware) = self.uplink_read();
        let hardware = hardware.union(self.s.inject_signs);
        let hard = self.faults.code(store);
        self.part.npu_isolation = self
            .faults
            .isolations()
            .iter()
            .map(|(npu, code)| (*npu, super::hard_faults::isolation_reason(*code)))
            .collect();
        let own = Contribution {
            hard,
            over_budget: self.over_budget(),
            congested,
            hardware,
            lie: self.s.inject_lies,
        };
        let Some(r) = self.exchange(&proposal, own) else {
            return;
        };
        let input = self.engine_input(&r, &present);
        let out = self.engine.step(&input);
        self.infer.observe_probes(&input.probes);
        self.publish_inferred(me);
        self.requests = out.confirm_requests.clone();
        self.own_tor = out.confirm_own_tor.clone();
        self.link_requests = out.link_requests.clone();
        // The agreed plan: rank 0's round number, which may have jumped (either way) when
        // the group re-formed. The next round's size is decided from data every member
        // shares.
        self.round = r.plan.round;
        self.limited = majority_over_budget(&r.measured);
        self.part.budget_limited = self.limited;
        self.track_coverage(me, &r, &present);
        self.publish_round(&r, &present, out);
        // Every member counts the agreed round, so all run the device exchange together.
        // Every member runs the agreed plan's spacing, whatever its own configuration says.
        let every = r.plan.device_every.max(1);
        if self.round.is_multiple_of(every) {
            self.device_round(me, every);
        }
        // Every signed exchange since the last round's: this round's, and the formation's.
        self.forged
            .take_from(self.comm.as_mut(), &mut self.part, &self.group);
    }

    /// The device plane's part of the round, on the same communicator: a failure is a
    /// failed round (the group re-forms), as for the host plane.
    fn device_round(&mut self, me: usize, every: u64) {
        let Some(c) = self.comm.as_mut() else { return };
        // The device plane's own round: its plan rotates through every stride only when
        // counted in its rounds, not in the probe rounds it runs on.
        let round = self.round / every;
        let host_suspects: Vec<usize> = self
            .part
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                matches!(
                    m.state,
                    NodeState::Confirmed | NodeState::QuarantineRecommended
                )
            })
            .map(|(i, _)| i)
            .collect();
        let topology = Topology {
            tors: &self.tor_table.0,
            names: &self.tor_table.1,
        };
        match self
            .device
            .on_round(c, round, me, &self.group, &host_suspects, topology)
        {
            Ok(()) => {}
            Err(e) => {
                self.pause(
                    PauseReason::RoundFailed,
                    format!("device-plane exchange failed; the group will be re-formed: {e}"),
                    true,
                );
                return;
            }
        }
        let npu_port = self.device.quarantined_nodes();
        for (i, m) in self.part.members.iter_mut().enumerate() {
            if m.quarantine.is_none() && npu_port.contains(&i) {
                m.quarantine = Some(QuarantineReason::NpuPort);
            } else if m.quarantine == Some(QuarantineReason::NpuPort) && !npu_port.contains(&i) {
                m.quarantine = None;
            }
        }
        if self.device_on {
            self.part.device = Some(tors::named_device(&self.part, self.device.view()));
            if self.device.local_changed() {
                tracing::info!(
                    "this node's NPU ports changed; re-forming the group to announce them"
                );
                self.comm = None;
            }
        }
    }

    /// Keeps the peers met over the last n − 1 rounds and exports their share.
    fn track_coverage(&mut self, me: usize, r: &RoundResult, present: &[bool]) {
        let g = &self.group;
        let m_size = g.len();
        let k = g.iter().position(|x| *x == me).unwrap_or(0);
        let round = r.plan.round;
        self.met.retain(|(r0, _)| *r0 < round);
        self.met.push_back((round, g[(k + r.stride) % m_size]));
        self.met
            .push_back((round, g[(k + m_size - r.stride) % m_size]));
        while self
            .met
            .front()
            .is_some_and(|(r0, _)| round - r0 >= (m_size as u64 - 1).max(1))
        {
            self.met.pop_front();
        }
        let mut distinct: Vec<usize> = self
            .met
            .iter()
            .map(|(_, p)| *p)
            .filter(|p| *p != me && present[*p])
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        self.part.coverage = distinct.len() as f64 / (m_size as f64 - 1.0).max(1.0);
    }

    /// Publishes what the round measured and the engine decided.
    fn publish_round(&mut self, r: &RoundResult, present: &[bool], out: RoundOutput) {
        let g = self.group.clone();
        let m = &r.measured;
        let m_size = g.len();
        let rank_of = |i: usize| g.iter().position(|x| *x == i);
        let max_wait = m.iter().map(|x| x.wait).fold(0.0, f64::max);
        let finite = |v: f64| v.is_finite().then_some(v);
        let part = &mut self.part;
        part.active = true;
        part.last_error = None;
        part.pause_reason = None;
        part.rounds_ok += 1;
        part.group_members = m_size;
        part.wire_version = Some(r.wire_version);
        part.certificate_mode = Some(r.certificate_mode);
        // Per-node probe values only for the members measured this round: a left-out
        // node's frozen score is not a measurement.
        for (i, v) in part.members.iter_mut().enumerate() {
            v.up = present[i];
            v.score = present[i]
                .then(|| out.scores.get(i).copied().and_then(finite))
                .flatten();
            v.arrival_lag = rank_of(i).and_then(|k| finite(max_wait - m[k].wait));
            v.uplink_congested = rank_of(i).is_some_and(|k| m[k].congested);
            v.hardware_signs = rank_of(i).map_or_else(Vec::new, |k| m[k].hardware.labels());
        }
        // The group's latency is the median of the members' own reports, bounded: one
        // member's (+Inf, 1e300) can neither set it nor hide in it.
        let (latency, dropped) = group_latency(m, self.s.comm.exec_timeout.as_secs_f64());
        part.latency = latency;
        part.latency_reports_dropped += dropped as u64;
        let own = &m[rank_of(self.view.me().unwrap_or(0)).unwrap_or(0)];
        part.link_rtt.observe(own.rtt);
        let small = (self.s.small_bytes / 4).max(1) * 4;
        observe_duration(
            &mut part.collective_durations,
            "all_reduce",
            small,
            own.latency,
        );
        if let Some(ring) = &r.ring {
            observe_duration(
                &mut part.collective_durations,
                "all_reduce",
                ring.bytes,
                own.ring,
            );
        }
        part.links = link_views(&self.s, r, &g);
        if let Some(ring) = &r.ring {
            let t = m.iter().map(|x| x.ring).fold(0.0, f64::max).max(1e-9);
            let factor = 2.0 * (m_size as f64 - 1.0) / m_size as f64;
            let bytes = ring.bytes as f64;
            part.ring = Some(RingResult {
                algo: ring.algo.clone(),
                bytes: ring.bytes,
                busbw: bytes / t * factor,
                expected_busbw: (ring.predicted > 0.0).then(|| bytes / ring.predicted * factor),
            });
        }
        part.fabric_degraded = out.fabric_degraded;
        super::horizon::log_horizon(part.horizon, out.horizon, "host");
        part.horizon = Some(out.horizon);
        part.crowd = out.crowd.clone();
        for (i, v) in part.members.iter_mut().enumerate() {
            v.inconsistent_reports = out.inconsistent_reporters.contains(&i);
        }
        for i in &out.inconsistent_reporters {
            if let Some(m) = part.members.get(*i) {
                tracing::warn!(peer = %m.name, "this member's re-pairing reports are consistently contradicted by the other members");
            }
        }
        part.link_degraded = out.link_verdicts.clone();
        part.link_withheld = out.link_withheld.clone();
        record_tors(part, &out, &self.tor_table.1);
        self.record_transitions(out.transitions);
    }

    /// Each member's inferred ToR group, for the members no source gives a ToR (logged
    /// when the groups change).
    fn publish_inferred(&mut self, me: usize) {
        let a = self.infer.assignment();
        let mut changed = false;
        for (i, m) in self.part.members.iter_mut().enumerate() {
            let known = m.place.as_ref().is_some_and(|p| p.place.tor.is_some());
            let g = if known {
                None
            } else {
                a.get(i).copied().flatten()
            };
            changed |= m.inferred_tor != g;
            m.inferred_tor = g;
        }
        self.part.own_inferred_tor = self.part.members.get(me).and_then(|m| m.inferred_tor);
        if changed {
            let groups = a.iter().flatten().max().map_or(0, |g| g + 1);
            tracing::info!(
                groups,
                "topology: inferred ToR groups changed (nodes whose slowdowns move together)"
            );
        }
    }

    /// Times each recommendation from its episode's onset ([`Onsets`]).
    fn time_recommendations(&mut self, transitions: &[Transition]) {
        let now = Instant::now();
        for t in transitions {
            let Some(m) = self.part.members.get(t.node) else {
                continue;
            };
            if let Some(seconds) = self.onsets.note(&m.name, t.to, now) {
                self.part
                    .onset_to_recommendation
                    .entry(reason_of(&t.reason))
                    .or_insert_with(|| Histogram::new(EPISODE_BUCKETS))
                    .observe(seconds);
            }
        }
    }

    /// Logs and keeps the round's transitions, and the quarantine reasons they set.
    fn record_transitions(&mut self, transitions: Vec<Transition>) {
        self.time_recommendations(&transitions);
        self.sync_states();
        let part = &mut self.part;
        for t in transitions {
            tracing::info!(node = %part.name(t.node), from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, "node state changed");
            if t.to == NodeState::QuarantineRecommended
                && let Some(m) = part.members.get_mut(t.node)
            {
                // The label is a bounded category; the full reason and the evidence are in
                // the log and in /api/v1/state.
                m.quarantine = Some(reason_of(&t.reason));
            }
            part.transitions.push_back(t);
            while part.transitions.len() > TRANSITIONS_KEPT {
                part.transitions.pop_front();
            }
        }
        for m in &mut part.members {
            if m.state != NodeState::QuarantineRecommended
                && m.quarantine != Some(QuarantineReason::NpuPort)
            {
                m.quarantine = None;
            }
        }
    }
}

/// Renumbers past transitions after the candidates changed (`map[old] = Some(new)`), so
/// that they keep naming the same nodes; those of nodes that are gone are dropped.
pub fn renumber(transitions: &mut VecDeque<Transition>, map: &[Option<usize>]) {
    let old = std::mem::take(transitions);
    *transitions = old
        .into_iter()
        .filter_map(|mut t| {
            t.node = map.get(t.node).copied().flatten()?;
            Some(t)
        })
        .collect();
}

fn observe_duration(h: &mut Vec<CollectiveDurations>, op: &str, bytes: usize, v: f64) {
    match h.iter_mut().find(|d| d.op == op && d.bytes == bytes) {
        Some(d) => d.seconds.observe(v),
        None => {
            let mut seconds = Histogram::default();
            seconds.observe(v);
            h.push(CollectiveDurations {
                op: op.to_string(),
                bytes,
                seconds,
            });
        }
    }
}
