//! Continuous probing: every node's daemon runs rounds of collectives with its peers and
//! feeds the timings to the health engine.
//!
//! A round is: a barrier (each node's wait gives the arrival lag: the straggler waits
//! least), a small all-reduce (latency), a permutation round (node i exchanges with
//! i + s and i − s, the stride rotating every round, so every node sends one flow and
//! receives one), the confirmation re-pairings the engine asked for, and periodically a
//! ring all-reduce at a bandwidth size (a ring runs at its slowest link). The per-node
//! timings are all-gathered, so every member feeds identical input to its engine and
//! reaches identical verdicts without a coordinator.
//!
//! Failure is fail-closed: if the group cannot be formed or a round fails, probing stops
//! (`hcclwatch_probe_active 0`), the daemon keeps exporting telemetry, and the group is
//! re-formed at the next round.

mod hard_faults;
pub mod histogram;
pub mod membership;
mod plan;
mod trace;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::collective::algo::select::{Algo, allreduce_cost};
use crate::collective::{CollResult, CommConfig, Communicator, DataType, ReduceOp};
use crate::health::{HealthConfig, HealthEngine, NodeState, Probe, RoundInput, Transition};
use crate::telemetry::store::Store;

use hard_faults::{HardFaults, hard_fault_reason};
use histogram::Histogram;
use plan::Plan;

/// Probing settings.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Where the members come from.
    pub source: membership::Source,
    /// Address the probe listener binds.
    pub listen: SocketAddr,
    /// A member that has not accepted a connection for this long is left out of the group
    /// until it does again.
    pub member_timeout: Duration,
    /// The name this node announces to a DNS-discovered group.
    pub own_name: String,
    /// Fault injection on every exchange this node sends (tests and the demo).
    pub inject: Option<crate::collective::transport::FaultSpec>,
    /// Fault injection on what this node sends to one peer (by probe address); overrides
    /// `inject` for that peer.
    pub inject_peers: Vec<(SocketAddr, crate::collective::transport::FaultSpec)>,
    /// Engine transport and timeouts.
    pub comm: CommConfig,
    /// Time between round starts.
    pub interval: Duration,
    /// Bytes of the latency all-reduce.
    pub small_bytes: usize,
    /// Bytes of each permutation and confirmation exchange.
    pub link_bytes: usize,
    /// A ring all-reduce every this many rounds (0: never).
    pub ring_every: u64,
    /// Bytes of the ring all-reduce.
    pub ring_bytes: usize,
    /// Probe bytes this node may send per hour (0: unlimited). Over budget, the group
    /// drops to latency-sized exchanges and skips the ring until usage falls.
    pub budget_bytes_per_hour: u64,
    /// Fraction of wall time this node may spend in probe rounds, over the last hour (0:
    /// unlimited). Over it, the group runs reduced rounds as for the byte budget.
    pub budget_busy_ratio: f64,
    /// Engine thresholds.
    pub health: HealthConfig,
}

/// What probing exports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbePart {
    /// Probing runs and the group is formed.
    pub active: bool,
    /// Node names, by rank.
    pub nodes: Vec<String>,
    /// Engine state per node.
    pub states: Vec<NodeState>,
    /// Window score per node (median log residual).
    pub scores: Vec<f64>,
    /// Arrival lag per node in the last barrier, seconds.
    pub arrival_lag: Vec<f64>,
    /// Last permutation round: (src, dst, bytes/s).
    pub links: Vec<(usize, usize, f64)>,
    /// Small all-reduce duration, seconds (slowest rank).
    pub latency: Option<f64>,
    /// Last ring all-reduce: (algorithm, bytes, busbw bytes/s).
    pub busbw: Option<(String, usize, f64)>,
    /// The α-β model's busbw for that all-reduce, from the costs measured when the group
    /// formed: what the fabric delivered then, for comparison with `busbw` now.
    pub busbw_expected: Option<f64>,
    /// Rounds completed.
    pub rounds_ok: u64,
    /// Rounds that failed (including failures to form the group).
    pub rounds_failed: u64,
    /// Probe payload bytes sent by this node.
    pub bytes_sent: u64,
    /// Whether each candidate is in the current group (it took part in the last round).
    pub peer_up: Vec<bool>,
    /// Members of the current group (0 while it is not formed).
    pub members: usize,
    /// Whether the membership view is stale (probing stopped, fail-closed).
    pub membership_stale: bool,
    /// Fabric verdict.
    pub fabric_degraded: bool,
    /// Pairs the engine judged degraded links (src, dst) in the last round.
    pub link_degraded: Vec<(usize, usize)>,
    /// Latest transitions (bounded), with reasons and evidence.
    pub transitions: VecDeque<Transition>,
    /// Why probing is inactive, if it is.
    pub last_error: Option<String>,
    /// Bytes sent in the last hour ÷ the budget (None without a budget).
    pub budget_ratio: Option<f64>,
    /// Seconds spent in probe rounds in the last hour ÷ (3600 × the busy budget) (None
    /// without one).
    pub busy_ratio: Option<f64>,
    /// Whether the group is running reduced rounds because a member is over budget.
    pub budget_limited: bool,
    /// Distinct peers this node exchanged with over the last n − 1 rounds ÷ (n − 1).
    pub coverage: f64,
    /// Quarantine recommendations with their reason category (`straggler`, `hard_fault`).
    pub quarantine: Vec<(usize, String)>,
    /// Latency-sized ping-pong round trips this node measured to its permutation peer.
    pub link_rtt: Histogram,
    /// This node's collective durations by (op, size in bytes).
    pub collective_durations: Vec<(String, usize, Histogram)>,
}

struct Measured {
    wait: f64,
    latency: f64,
    link: f64,
    ring: f64,
    hard: u8,
    over_budget: bool,
    rtt: f64,
    confirm: Vec<f64>,
}

/// Link re-measurements per round at most (each is one `link_bytes` exchange).
const MAX_LINK_REMEASURES: usize = 4;

/// Every member's measurements, the stride used, the ring result (algorithm, bytes, α-β
/// predicted seconds), and the plan the round ran.
type RoundResult = (Vec<Measured>, usize, Option<(String, f64, f64)>, Plan);

/// Confirmation pairs in candidate indices: each requested suspect with `per` healthy
/// members of the current group (`present`), chosen deterministically so that every member
/// computes the same pairs.
fn confirm_pairs(
    requests: &[usize],
    states: &[NodeState],
    present: &[bool],
    per: usize,
) -> Vec<(usize, usize)> {
    let n = states.len();
    let good: Vec<usize> = (0..n)
        .filter(|i| states[*i] == NodeState::Healthy && present.get(*i) == Some(&true))
        .collect();
    let mut out = Vec::new();
    for &x in requests.iter().filter(|x| present.get(**x) == Some(&true)) {
        let peers: Vec<usize> = good.iter().copied().filter(|p| *p != x).collect();
        for k in 0..per.min(peers.len()) {
            out.push((x, peers[(x * 7 + k * 13) % peers.len()]));
        }
        out.dedup();
    }
    out
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn from_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn round_trip(
    cx: &opentelemetry::Context,
    comm: &mut Communicator,
    s: &ProbeSettings,
    proposal: &Plan,
    hard: u8,
    over_budget: bool,
    bytes_sent: &mut u64,
) -> CollResult<RoundResult> {
    let (n, r) = (comm.size(), comm.rank());
    let now = std::time::SystemTime::now;
    let (t, w) = (Instant::now(), now());
    comm.barrier()?;
    let wait = t.elapsed().as_secs_f64();
    trace::op(cx, "probe.barrier", "barrier", "", 0, n, 1.0, w, wait);
    // After the barrier, so that the plan's broadcast does not absorb the arrival lag.
    let mut plan_bytes = proposal.encode();
    let words = plan_bytes.len() / 8;
    comm.broadcast(&mut plan_bytes, words, DataType::Uint64, 0)?;
    let plan = Plan::decode(&plan_bytes, n);
    let (round, limited, pairs) = (plan.round, plan.limited, &plan.pairs);
    let small_count = (s.small_bytes / 4).max(1);
    let mut small = vec![0u8; small_count * 4];
    let (t, w) = (Instant::now(), now());
    let algo = comm.all_reduce_in_place(&mut small, small_count, DataType::Fp32, ReduceOp::Sum)?;
    let latency = t.elapsed().as_secs_f64();
    trace::op(
        cx,
        "probe.all_reduce",
        "all_reduce",
        algo.name(),
        small.len(),
        n,
        2.0 * (n as f64 - 1.0) / n as f64,
        w,
        latency,
    );
    let stride = 1 + (round as usize % (n - 1).max(1));
    // Over budget (a group decision from the last round), every exchange shrinks to the
    // latency size: detection goes on at a fraction of the bytes.
    let link_bytes = if limited {
        s.small_bytes.max(1)
    } else {
        s.link_bytes.max(1)
    };
    // A latency-sized ping-pong with the permutation peer: ping to i + s (while receiving
    // i − s's ping), then answer i − s (while receiving i + s's answer). The time to the
    // answer is this node's round trip to i + s.
    let ping = vec![0x5au8; s.small_bytes.max(1)];
    let mut pong = vec![0u8; ping.len()];
    let (right, left) = ((r + stride) % n, (r + n - stride) % n);
    let (t, w) = (Instant::now(), now());
    comm.send_recv(&ping, right, &mut pong, left, ping.len(), DataType::Uint8)?;
    comm.send_recv(&ping, left, &mut pong, right, ping.len(), DataType::Uint8)?;
    let rtt = t.elapsed().as_secs_f64();
    trace::op(
        cx,
        "probe.ping_pong",
        "send_recv",
        "direct",
        2 * ping.len(),
        2,
        1.0,
        w,
        rtt,
    );
    *bytes_sent += 2 * ping.len() as u64;
    let send = vec![0x5au8; link_bytes];
    let mut recv = vec![0u8; send.len()];
    let (t, w) = (Instant::now(), now());
    comm.send_recv(
        &send,
        (r + stride) % n,
        &mut recv,
        (r + n - stride) % n,
        send.len(),
        DataType::Uint8,
    )?;
    let link = t.elapsed().as_secs_f64();
    trace::op(
        cx,
        "probe.exchange",
        "send_recv",
        "permutation",
        send.len(),
        2,
        1.0,
        w,
        link,
    );
    *bytes_sent += send.len() as u64;
    let mut confirm = vec![f64::NAN; pairs.len()];
    for (k, &(x, p)) in pairs.iter().enumerate() {
        if r == x || r == p {
            let other = if r == x { p } else { x };
            // Meet first (one byte each way, untimed): the pairs run one after another,
            // and time spent waiting for a partner still busy with its previous pair is
            // not the link's.
            let mut one = [0u8; 1];
            comm.send_recv(&[1u8], other, &mut one, other, 1, DataType::Uint8)?;
            let (t, w) = (Instant::now(), now());
            comm.send_recv(&send, other, &mut recv, other, send.len(), DataType::Uint8)?;
            trace::op(
                cx,
                "probe.confirm",
                "send_recv",
                "confirmation",
                send.len(),
                2,
                1.0,
                w,
                t.elapsed().as_secs_f64(),
            );
            *bytes_sent += send.len() as u64;
            // Both ends time the exchange: a send returns once the kernel has the bytes,
            // so a node whose egress is shaped looks fast from its own side and slow only
            // from its peer's. The pair's value is the slower end (see `pair_seconds`).
            confirm[k] = t.elapsed().as_secs_f64();
        }
    }
    let mut ring_result = None;
    let mut ring = f64::NAN;
    if !limited && s.ring_every > 0 && round.is_multiple_of(s.ring_every) {
        let count = (s.ring_bytes / 4).max(1);
        let mut buf = vec![0u8; count * 4];
        let (t, w) = (Instant::now(), now());
        let algo: Algo =
            comm.all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum)?;
        ring = t.elapsed().as_secs_f64();
        let factor = 2.0 * (n as f64 - 1.0) / n as f64;
        trace::op(
            cx,
            "probe.all_reduce",
            "all_reduce",
            algo.name(),
            buf.len(),
            n,
            factor,
            w,
            ring,
        );
        *bytes_sent += (2 * (n - 1) * buf.len() / n) as u64;
        let predicted = allreduce_cost(algo, n, buf.len(), comm.costs());
        ring_result = Some((algo.name().to_string(), buf.len(), predicted));
    }
    let mine = [
        vec![
            wait,
            latency,
            link,
            ring,
            f64::from(hard),
            if over_budget { 1.0 } else { 0.0 },
            rtt,
        ],
        confirm,
    ]
    .concat();
    let width = mine.len();
    let mut all = vec![0u8; width * 8 * n];
    let (t, w) = (Instant::now(), now());
    let gathered_by = comm.all_gather(&f64s(&mine), &mut all, width, DataType::Fp64)?;
    trace::op(
        cx,
        "probe.all_gather",
        "all_gather",
        gathered_by.name(),
        all.len(),
        n,
        (n as f64 - 1.0) / n as f64,
        w,
        t.elapsed().as_secs_f64(),
    );
    let v = from_f64s(&all);
    let measured = (0..n)
        .map(|i| {
            let row = &v[i * width..(i + 1) * width];
            Measured {
                wait: row[0],
                latency: row[1],
                link: row[2],
                ring: row[3],
                hard: row[4].clamp(0.0, 255.0) as u8,
                over_budget: row[5] != 0.0,
                rtt: row[6],
                confirm: row[7..].to_vec(),
            }
        })
        .collect();
    let ring_out = ring_result.map(|(a, b, p)| (a, b as f64, p));
    Ok((measured, stride, ring_out, plan))
}

/// A confirmation exchange's duration: the slower of its two ends (NaN if neither timed it).
fn pair_seconds(m: &[Measured], k: usize, x: usize, p: usize) -> f64 {
    let at = |i: usize| {
        m.get(i)
            .and_then(|r| r.confirm.get(k))
            .copied()
            .unwrap_or(f64::NAN)
    };
    match (at(x), at(p)) {
        (a, b) if a.is_nan() => b,
        (a, b) if b.is_nan() => a,
        (a, b) => a.max(b),
    }
}

/// One step of xorshift64: enough randomness for schedule jitter, with no dependency.
fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// `interval` scaled by a factor in [0.9, 1.1] drawn from `random`.
fn jittered(interval: Duration, random: u64) -> Duration {
    let spread = (random % 2001) as f64 / 1000.0 - 1.0;
    interval.mul_f64(1.0 + 0.1 * spread)
}

fn observe_duration(h: &mut Vec<(String, usize, Histogram)>, op: &str, bytes: usize, v: f64) {
    match h.iter_mut().find(|(o, b, _)| o == op && *b == bytes) {
        Some((_, _, x)) => x.observe(v),
        None => {
            let mut x = Histogram::default();
            x.observe(v);
            h.push((op.to_string(), bytes, x));
        }
    }
}

/// Starts the prober thread.
pub fn spawn(
    s: ProbeSettings,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hcclwatch-probe".into())
        .spawn(move || {
            let listener = match TcpListener::bind(s.listen) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    let part = ProbePart {
                        last_error: Some(format!("cannot listen on {}: {e}", s.listen)),
                        ..ProbePart::default()
                    };
                    tracing::error!(address = %s.listen, "probing disabled: cannot listen: {e}");
                    store.publish_probe(part);
                    return;
                }
            };
            let mut p = Prober::new(s, listener, Instant::now());
            let mut next = Instant::now();
            loop {
                match shutdown.recv_timeout(next.saturating_duration_since(Instant::now())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => {
                        // Leaving is explicit: the others drop this member at once instead
                        // of pausing for probe.member_timeout as they would for a crash.
                        if let Some(c) = p.comm.take() {
                            let me = c.rank();
                            c.leave(&format!("{LEAVING} (rank {me})"));
                        }
                        return;
                    }
                }
                // Jitter of ±10 % keeps groups (and nodes restarted together) from locking onto
                // one phase with each other or with a training step; the barrier re-aligns the
                // members of one group every round anyway.
                p.jitter = xorshift(p.jitter);
                next = (next + jittered(p.s.interval, p.jitter)).max(Instant::now());
                p.tick(&store);
                store.publish_probe(p.part.clone());
            }
        })
}

/// The reason a member gives its group when it shuts down; `(rank N)` follows.
const LEAVING: &str = "hcclwatch member leaving the probe group";

/// The communicator rank that announced it is leaving, if `err` carries its notice (it may
/// arrive nested in another rank's abort).
fn leaver(err: &str) -> Option<usize> {
    let rest = &err[err.find(LEAVING)? + LEAVING.len()..];
    let rest = rest.strip_prefix(" (rank ")?;
    rest[..rest.find(')')?].parse().ok()
}

/// The prober's state between rounds.
struct Prober {
    s: ProbeSettings,
    listener: Arc<TcpListener>,
    view: membership::Membership,
    comm: Option<Communicator>,
    /// Candidate index of each rank of `comm`.
    group: Vec<usize>,
    engine: HealthEngine,
    requests: Vec<usize>,
    link_requests: Vec<(usize, usize)>,
    faults: HardFaults,
    round: u64,
    limited: bool,
    jitter: u64,
    /// (end, bytes sent, seconds spent) of each round in the last hour.
    sent_log: VecDeque<(Instant, u64, f64)>,
    /// (round, candidate) of the peers this node exchanged with.
    met: VecDeque<(u64, usize)>,
    part: ProbePart,
    /// The membership problem last logged, so that a persisting one is logged once.
    logged: Option<String>,
}

impl Prober {
    fn new(s: ProbeSettings, listener: Arc<TcpListener>, now: Instant) -> Self {
        let view = membership::Membership::new(s.source.clone(), s.member_timeout, now);
        let n = view.candidates().len();
        let jitter = 0x9e37_79b9_7f4a_7c15
            ^ (u64::from(s.listen.port()) << 17)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        let mut p = Self {
            engine: HealthEngine::new(n, s.health.clone()),
            s,
            listener,
            view,
            comm: None,
            group: Vec::new(),
            requests: Vec::new(),
            link_requests: Vec::new(),
            faults: HardFaults::default(),
            round: 0,
            limited: false,
            jitter,
            sent_log: VecDeque::new(),
            met: VecDeque::new(),
            part: ProbePart::default(),
            logged: None,
        };
        p.resize_part();
        p
    }

    /// Sizes the per-candidate parts of the export to the current candidates.
    fn resize_part(&mut self) {
        let n = self.view.candidates().len();
        self.part.nodes = self
            .view
            .candidates()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        self.part.states = self.engine.states();
        self.part.peer_up = vec![false; n];
        self.part.scores.clear();
        self.part.arrival_lag.clear();
        self.part.links.clear();
        self.part.link_degraded.clear();
        self.part.quarantine.clear();
    }

    /// Pauses probing with `why` (fail closed: telemetry goes on).
    fn pause(&mut self, why: String, failed_round: bool) {
        if self.logged.as_deref() != Some(&why) {
            tracing::warn!(reason = %why, "probing paused; telemetry continues");
            self.logged = Some(why.clone());
        }
        self.part.active = false;
        self.part.members = 0;
        self.part.peer_up.iter_mut().for_each(|u| *u = false);
        self.part.last_error = Some(why);
        if failed_round {
            self.part.rounds_failed += 1;
        }
        self.comm = None;
    }

    /// One scheduled round: membership upkeep, forming the group if needed, and the round.
    fn tick(&mut self, store: &Store) {
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
                renumber(&mut self.part.transitions, &map);
                self.requests.clear();
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
            self.pause(why, false);
            return;
        }
        let me = self.view.me().unwrap_or(0);
        let n = self.view.candidates().len();
        let ping = self
            .s
            .comm
            .transport
            .connect_timeout
            .min(Duration::from_secs(1));
        if self.comm.is_none() && !self.form(now, me, n, ping) {
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
        let out: Vec<usize> = (0..n).filter(|i| !self.group.contains(i)).collect();
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
    fn form(&mut self, now: Instant, me: usize, n: usize, ping: Duration) -> bool {
        let others: Vec<usize> = (0..n).filter(|i| *i != me).collect();
        let up = membership::reachable(&self.addrs(&others), ping);
        for (i, ok) in others.iter().zip(&up) {
            self.view.record(*i, *ok, now);
        }
        let members = self.view.members(now);
        let left_out: Vec<String> = (0..n)
            .filter(|i| !members.contains(i))
            .map(|i| self.view.candidates()[i].name.clone())
            .collect();
        if members.len() < 2 {
            self.pause(
                format!(
                    "no other member of the probe group answers (left out: {})",
                    left_out.join(", ")
                ),
                true,
            );
            return false;
        }
        let rank = members.iter().position(|i| *i == me).unwrap_or(0);
        let mut cfg = self.s.comm.clone();
        cfg.transport.comm_id = self.view.comm_id(self.s.comm.transport.comm_id, &members);
        for p in (0..members.len()).filter(|p| *p != rank) {
            let addr = self.view.candidates()[members[p]].addr;
            let own = self
                .s
                .inject_peers
                .iter()
                .find(|(a, _)| *a == addr)
                .map(|(_, f)| f);
            if let Some(spec) = own.or(self.s.inject.as_ref()) {
                cfg.transport.faults.insert(p, spec.clone());
            }
        }
        let l = match self.listener.try_clone() {
            Ok(l) => l,
            Err(e) => {
                self.pause(format!("cannot share the probe listener: {e}"), true);
                return false;
            }
        };
        let addrs = self.addrs(&members);
        let mut c = match Communicator::init(l, rank, addrs, cfg) {
            Ok(c) => c,
            Err(e) => {
                self.pause(format!("cannot form the probe group: {e}"), true);
                return false;
            }
        };
        if self.view.is_dns() {
            // Members found by DNS are known by address until they say their names.
            match exchange_names(&mut c, &self.s.own_name) {
                Ok(names) => {
                    for (k, name) in names.into_iter().enumerate() {
                        if let Some(name) = name {
                            self.part.nodes[members[k]] = name;
                        }
                    }
                }
                Err(e) => {
                    self.pause(
                        format!("probe group formed but the name exchange failed: {e}"),
                        true,
                    );
                    return false;
                }
            }
        }
        // Every member takes over the engine of the one that has been probing longest, so
        // that a member that just (re)joined reaches the same verdicts as the others.
        match adopt_engine(&mut c, &mut self.engine) {
            Ok(Some(from)) => {
                tracing::info!(from = %self.part.nodes[members[from]], rounds = self.engine.rounds(), "took over the group's engine state");
                self.requests.clear();
                self.link_requests.clear();
                self.part.states = self.engine.states();
            }
            Ok(None) => {}
            Err(e) => {
                self.pause(
                    format!("probe group formed but the engine state exchange failed: {e}"),
                    true,
                );
                return false;
            }
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

    fn run_round(&mut self, store: &Store, me: usize) {
        let Some(c) = self.comm.as_mut() else { return };
        let s = &self.s;
        let n = self.view.candidates().len();
        let g = self.group.clone();
        let m_size = g.len();
        let present: Vec<bool> = (0..n).map(|i| g.contains(&i)).collect();
        let rank_of = |i: usize| g.iter().position(|x| *x == i);
        self.round += 1;
        let round = self.round;
        let mut pairs = confirm_pairs(
            &self.requests,
            &self.engine.states(),
            &present,
            s.health.confirm_peers,
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
                    .take(MAX_LINK_REMEASURES),
            );
        }
        let in_group = |(a, b): &(usize, usize)| Some((rank_of(*a)?, rank_of(*b)?));
        let proposal = Plan {
            round,
            limited: self.limited,
            n_confirm: pairs[..n_confirm].iter().filter_map(in_group).count(),
            pairs: pairs.iter().filter_map(in_group).collect(),
        };
        let hard = self.faults.code(store);
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
        let over_budget = (s.budget_bytes_per_hour > 0 && used >= s.budget_bytes_per_hour)
            || (busy_budget > 0.0 && busy >= busy_budget);
        let part = &mut self.part;
        part.budget_ratio =
            (s.budget_bytes_per_hour > 0).then(|| used as f64 / s.budget_bytes_per_hour as f64);
        part.busy_ratio = (busy_budget > 0.0).then(|| busy / busy_budget);
        let started = Instant::now();
        let before = part.bytes_sent;
        let cx = trace::round(round, c.size());
        let result = round_trip(
            &cx,
            c,
            s,
            &proposal,
            hard,
            over_budget,
            &mut part.bytes_sent,
        );
        trace::end(&cx, result.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        self.sent_log.push_back((
            Instant::now(),
            part.bytes_sent - before,
            started.elapsed().as_secs_f64(),
        ));
        let (m, stride, ring, plan) = match result {
            Ok(r) => r,
            Err(e) => {
                // A member that said it is leaving is out at once. Otherwise the peer the
                // error names is the first suspect for removal, and the next formation's
                // liveness check decides.
                if let Some(p) = leaver(&e.to_string()).and_then(|p| g.get(p)) {
                    tracing::info!(member = %self.part.nodes[*p], "a member left the probe group");
                    self.view.left(*p, Instant::now());
                } else if let Some(p) = e.peer.and_then(|p| g.get(p)) {
                    self.view.record(*p, false, Instant::now());
                }
                self.pause(
                    format!("probe round failed; the group will be re-formed: {e}"),
                    true,
                );
                return;
            }
        };
        // Each rank sends first (the probe fits in the socket buffers, so the send
        // completes without the peer) and then waits for its left neighbour: its exchange
        // time measures the link it received on, i − s → i. (A shaped egress delays the
        // receiver, not the sender.)
        let from = |k: usize| g[(k + m_size - stride) % m_size];
        let probes: Vec<Probe> = (0..m_size)
            .map(|k| Probe {
                src: from(k),
                dst: g[k],
                seconds: m[k].link,
            })
            .collect();
        // The agreed plan: rank 0's round number and pairs.
        self.round = plan.round;
        let round_limited = plan.limited;
        let mut confirmations: Vec<Probe> = plan
            .pairs
            .iter()
            .enumerate()
            .map(|(k, &(x, p))| Probe {
                src: g[x],
                dst: g[p],
                seconds: pair_seconds(&m, k, x, p),
            })
            .collect();
        let link_probes = confirmations.split_off(plan.n_confirm.min(confirmations.len()));
        let hard_faults: Vec<(usize, String)> = (0..m_size)
            .filter(|k| m[*k].hard != 0)
            .map(|k| (g[k], hard_fault_reason(m[k].hard).to_string()))
            .collect();
        let absent: Vec<usize> = (0..n).filter(|i| !present[*i]).collect();
        let out = self.engine.step(&RoundInput {
            probes,
            confirmations,
            hard_faults,
            link_probes,
            absent,
        });
        self.requests = out.confirm_requests.clone();
        self.link_requests = out.link_requests.clone();
        // The next round's size is decided from data every member shares.
        self.limited = m.iter().any(|x| x.over_budget);
        part.budget_limited = self.limited;
        let r = rank_of(me).unwrap_or(0);
        // The count is rank 0's: it may have jumped (either way) when the group re-formed.
        let round = plan.round;
        self.met.retain(|(r0, _)| *r0 < round);
        self.met.push_back((round, g[(r + stride) % m_size]));
        self.met
            .push_back((round, g[(r + m_size - stride) % m_size]));
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
        part.coverage = distinct.len() as f64 / (m_size as f64 - 1.0).max(1.0);
        let max_wait = m.iter().map(|x| x.wait).fold(0.0, f64::max);
        part.active = true;
        part.last_error = None;
        part.rounds_ok += 1;
        part.members = m_size;
        part.states = self.engine.states();
        // Per-node probe values only for the members measured this round: a left-out
        // node's frozen score is not a measurement.
        part.scores = (0..n)
            .map(|i| {
                if present[i] {
                    out.scores.get(i).copied().unwrap_or(f64::NAN)
                } else {
                    f64::NAN
                }
            })
            .collect();
        part.arrival_lag = (0..n)
            .map(|i| rank_of(i).map_or(f64::NAN, |k| max_wait - m[k].wait))
            .collect();
        part.latency = Some(m.iter().map(|x| x.latency).fold(0.0, f64::max));
        let own = &m[r];
        part.link_rtt.observe(own.rtt);
        let small = (s.small_bytes / 4).max(1) * 4;
        observe_duration(
            &mut part.collective_durations,
            "all_reduce",
            small,
            own.latency,
        );
        if let Some((_, bytes, _)) = &ring {
            observe_duration(
                &mut part.collective_durations,
                "all_reduce",
                *bytes as usize,
                own.ring,
            );
        }
        // A latency-sized exchange says nothing about a link's bandwidth, so a reduced
        // round omits the link series instead of exporting a misleading dip.
        part.links = if round_limited {
            Vec::new()
        } else {
            (0..m_size)
                .map(|k| {
                    (
                        from(k),
                        g[k],
                        s.link_bytes.max(1) as f64 / m[k].link.max(1e-9),
                    )
                })
                .collect()
        };
        if let Some((algo, bytes, predicted)) = ring {
            let t = m.iter().map(|x| x.ring).fold(0.0, f64::max).max(1e-9);
            let factor = 2.0 * (m_size as f64 - 1.0) / m_size as f64;
            part.busbw = Some((algo, bytes as usize, bytes / t * factor));
            part.busbw_expected = (predicted > 0.0).then(|| bytes / predicted * factor);
        }
        part.peer_up = present.clone();
        part.fabric_degraded = out.fabric_degraded;
        part.link_degraded = out.link_verdicts.clone();
        for t in out.transitions {
            tracing::info!(node = %part.nodes[t.node], from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, "node state changed");
            if t.to == NodeState::QuarantineRecommended {
                // The label is a bounded category; the full reason and the evidence are in
                // the log and in /api/v1/state.
                let category = if t.reason.starts_with("hard fault") {
                    "hard_fault"
                } else {
                    "straggler"
                };
                part.quarantine.retain(|(x, _)| *x != t.node);
                part.quarantine.push((t.node, category.to_string()));
            }
            part.transitions.push_back(t);
            while part.transitions.len() > 100 {
                part.transitions.pop_front();
            }
        }
        let states = part.states.clone();
        part.quarantine
            .retain(|(x, _)| states[*x] == NodeState::QuarantineRecommended);
    }
}

/// Renumbers past transitions after the candidates changed (`map[old] = Some(new)`), so
/// that they keep naming the same nodes; those of nodes that are gone are dropped.
fn renumber(transitions: &mut VecDeque<Transition>, map: &[Option<usize>]) {
    let old = std::mem::take(transitions);
    *transitions = old
        .into_iter()
        .filter_map(|mut t| {
            t.node = map.get(t.node).copied().flatten()?;
            Some(t)
        })
        .collect();
}

/// Makes every member's engine the one that has processed the most rounds (ties: the
/// lowest rank's): its snapshot is broadcast, the others restore it. Returns the rank it
/// came from if this member took it over. A snapshot this member cannot take (another
/// number of candidates) is logged and its own engine kept.
fn adopt_engine(c: &mut Communicator, engine: &mut HealthEngine) -> CollResult<Option<usize>> {
    let n = c.size();
    let mut rounds = vec![0u8; 8 * n];
    c.all_gather(
        &engine.rounds().to_le_bytes(),
        &mut rounds,
        1,
        DataType::Uint64,
    )?;
    let rounds: Vec<u64> = rounds
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect();
    let best = rounds.iter().copied().max().unwrap_or(0);
    let src = rounds.iter().position(|r| *r == best).unwrap_or(0);
    if rounds.iter().all(|r| *r == best) {
        // Everyone is as far as everyone else (a group formed together): nothing to send.
        return Ok(None);
    }
    let mut snapshot = if c.rank() == src {
        engine.snapshot()
    } else {
        Vec::new()
    };
    let mut len = (snapshot.len() as u64).to_le_bytes();
    c.broadcast(&mut len, 1, DataType::Uint64, src)?;
    let len = u64::from_le_bytes(len) as usize;
    snapshot.resize(len, 0);
    c.broadcast(&mut snapshot, len, DataType::Uint8, src)?;
    if c.rank() == src {
        return Ok(None);
    }
    match engine.restore(&snapshot) {
        Ok(()) => Ok(Some(src)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot take over the group's engine state; keeping this node's own");
            Ok(None)
        }
    }
}

/// Longest node name a member announces (bytes of UTF-8).
const NAME_MAX: usize = 128;

/// All-gathers every member's announced name. A name that is empty, not UTF-8 or not a
/// printable label is ignored (None: the member stays known by its address).
fn exchange_names(c: &mut Communicator, own: &str) -> CollResult<Vec<Option<String>>> {
    let mut mine = [0u8; NAME_MAX];
    let b = own.as_bytes();
    let len = if b.len() <= NAME_MAX { b.len() } else { 0 };
    mine[..len].copy_from_slice(&b[..len]);
    let mut all = vec![0u8; NAME_MAX * c.size()];
    c.all_gather(&mine, &mut all, NAME_MAX, DataType::Uint8)?;
    Ok(all
        .chunks_exact(NAME_MAX)
        .map(|raw| {
            let end = raw.iter().position(|b| *b == 0).unwrap_or(NAME_MAX);
            std::str::from_utf8(&raw[..end])
                .ok()
                .filter(|n| !n.is_empty() && n.chars().all(|ch| ch.is_ascii_graphic()))
                .map(str::to_string)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent_and_varies() {
        let base = Duration::from_secs(30);
        let mut x = 0x1234_5678_9abc_def0;
        let mut seen = Vec::new();
        for _ in 0..1000 {
            x = xorshift(x);
            let d = jittered(base, x);
            assert!(d >= base.mul_f64(0.9) && d <= base.mul_f64(1.1), "{d:?}");
            seen.push(d);
        }
        seen.sort();
        assert!(
            seen[999] - seen[0] > Duration::from_secs(5),
            "jitter barely moves"
        );
    }

    #[test]
    fn confirmation_pairs_avoid_suspects_and_left_out_members_and_are_deterministic() {
        let mut states = vec![NodeState::Healthy; 8];
        states[2] = NodeState::Suspect;
        states[5] = NodeState::Suspect;
        let all = vec![true; 8];
        let a = confirm_pairs(&[2, 5], &states, &all, 3);
        assert_eq!(a, confirm_pairs(&[2, 5], &states, &all, 3));
        assert_eq!(a.len(), 6);
        for (x, p) in &a {
            assert!(*x == 2 || *x == 5);
            assert_eq!(states[*p], NodeState::Healthy);
        }
        // Node 7 is out of the group and node 5 too: neither pairs.
        let mut present = all.clone();
        present[7] = false;
        present[5] = false;
        let b = confirm_pairs(&[2, 5], &states, &present, 3);
        assert_eq!(b.len(), 3);
        assert!(
            b.iter().all(|(x, p)| *x == 2 && *p != 7 && *p != 5),
            "{b:?}"
        );
    }

    #[test]
    fn a_leaving_notice_is_found_also_when_nested() {
        let direct = format!(
            "HCCL_E_REMOTE (21): barrier with peer rank 2: peer rank 2 aborted the operation: {LEAVING} (rank 2)"
        );
        assert_eq!(leaver(&direct), Some(2));
        let nested = format!(
            "HCCL_E_REMOTE (21): send_recv with peer rank 1: peer rank 1 aborted the operation: HCCL_E_REMOTE (21): x: peer rank 3 aborted the operation: {LEAVING} (rank 3)"
        );
        assert_eq!(leaver(&nested), Some(3));
        assert_eq!(leaver("HCCL_E_TCP_TRANSFER (13): connection lost"), None);
        assert_eq!(leaver(&format!("{LEAVING} (rank x)")), None);
        assert_eq!(leaver(LEAVING), None);
    }

    #[test]
    fn transitions_follow_their_nodes_when_the_candidates_change() {
        let t = |node: usize| Transition {
            round: 1,
            node,
            from: NodeState::Healthy,
            to: NodeState::Suspect,
            reason: format!("node {node}"),
            evidence: vec![],
        };
        let mut ts: VecDeque<Transition> = [t(0), t(1), t(2)].into_iter().collect();
        // Node 0 left; 1 and 2 moved down one; a newcomer took index 2.
        renumber(&mut ts, &[None, Some(0), Some(1)]);
        let got: Vec<(usize, String)> = ts.iter().map(|t| (t.node, t.reason.clone())).collect();
        assert_eq!(got, vec![(0, "node 1".into()), (1, "node 2".into())]);
    }

    #[test]
    fn f64_round_trip() {
        let v = [1.5, f64::NAN, -3.0];
        let back = from_f64s(&f64s(&v));
        assert_eq!(back[0], 1.5);
        assert!(back[1].is_nan());
        assert_eq!(back[2], -3.0);
    }
}
