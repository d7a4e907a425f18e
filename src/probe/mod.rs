//! Continuous probing: every node's daemon runs rounds of collectives with its peers and
//! feeds the timings to the health engine.
//!
//! - [`settings`]: what probing is configured to do, from the configuration;
//! - [`membership`]: who the candidates are and which of them form the group;
//! - [`group`]: what members exchange when the group forms (names, engine state);
//! - [`round`]: one round, as every member runs it in lock step;
//! - [`row`]: the layout of a round's gathered row, by wire version;
//! - [`congestion`]: whether this node's own uplink was congested since the last round;
//! - [`hardware`]: whether it shows a hardware sign that congestion cannot give;
//! - `prober`: the state between rounds, the engine's input and the published snapshot;
//! - `tors`: the members' ToRs as the engines number them, and the ToR verdicts by name;
//! - `horizon`: when an engine's persistence horizon became learnt, in the log.
//!
//! The per-node timings of a round are all-gathered, so every member feeds identical input
//! to its engine and reaches identical verdicts without a coordinator. Failure is
//! fail-closed: if the group cannot be formed or a round fails, probing stops
//! (`hcclwatch_probe_active 0`), the daemon keeps exporting telemetry, and the group is
//! re-formed at the next round.

pub(crate) mod congestion;
pub mod device;
mod forgeries;
pub(crate) mod group;
pub(crate) mod hard_faults;
pub(crate) mod hardware;
mod horizon;
pub(crate) mod membership;
mod onsets;
pub mod plan;
mod prober;
pub mod round;
pub mod row;
pub mod settings;
mod tors;
mod trace;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::snapshot::Store;
use crate::snapshot::probe::{PauseReason, ProbeSnapshot};

use prober::Prober;
pub use settings::{ProbeSettings, SettingsError};

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

/// Starts the prober thread. The probe port is bound with retries (1 s doubling to a
/// minute) while `hcclwatch_probe_active` is 0 with the reason and `/-/ready` names the
/// prober; a prober that panics publishes why and stays visible the same way, so a dead
/// probe thread is never silent.
pub fn spawn(
    s: ProbeSettings,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hcclwatch-probe".into())
        .spawn(move || {
            if await_place(s.topology_wait, &store, &shutdown) == PlaceWait::Shutdown {
                return;
            }
            let Some(listener) = bind_with_retries(&s, &store, &shutdown) else {
                return;
            };
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_loop(s, listener, &store, &shutdown)
            }));
            if let Err(panic) = run {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                let why = format!("the probe thread died: {what}; restart the daemon");
                tracing::error!(reason = %why, "probing stopped");
                let mut part = store
                    .probe()
                    .map(|p| p.as_ref().clone())
                    .unwrap_or_default();
                part.active = false;
                part.group_members = 0;
                part.wire_version = None;
                part.certificate_mode = None;
                part.last_error = Some(why.clone());
                part.pause_reason = Some(PauseReason::ThreadDied);
                store.publish_probe(part);
                store.set_not_ready("probe", why);
            }
        })
}

/// How the wait for this node's place in the network ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlaceWait {
    /// Topology is off: there is nothing to wait for.
    NotExpected,
    /// The topology source published its first read (with or without a place).
    Read,
    /// The first read took longer than its bound; probing starts without it.
    TimedOut,
    /// The daemon is stopping.
    Shutdown,
}

/// How often the wait looks at the store: the first read is a local file or a few API
/// calls, so this costs at most this much of the startup.
const PLACE_POLL: Duration = Duration::from_millis(50);

/// Waits, at most `wait` (`None`: topology off), for the topology source's first read
/// before the probe listener is bound. A member that formed its group before it knew its
/// own place would be judged by every member without its ToR (its NPU ports one by one,
/// its slowdowns against the whole group) until the read made the group re-form; and
/// while it waits unbound, its peers see it as not yet started and form without it, as
/// they do for a member that starts later, instead of failing a formation it would not
/// answer.
fn await_place(wait: Option<Duration>, store: &Store, shutdown: &Receiver<()>) -> PlaceWait {
    let Some(wait) = wait else {
        return PlaceWait::NotExpected;
    };
    let until = Instant::now() + wait;
    let mut said = false;
    loop {
        if store.topology().is_some() {
            return PlaceWait::Read;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            tracing::warn!(waited = ?wait, "probing starts before the topology's first read; the group re-forms when this node's place is read");
            return PlaceWait::TimedOut;
        }
        if !said {
            tracing::info!(at_most = ?wait, "probing waits for the topology's first read, so the group forms knowing this node's place");
            said = true;
        }
        match shutdown.recv_timeout(left.min(PLACE_POLL)) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return PlaceWait::Shutdown,
        }
    }
}

/// Binds the probe listener, retrying with backoff until it succeeds or the daemon stops.
fn bind_with_retries(
    s: &ProbeSettings,
    store: &Store,
    shutdown: &Receiver<()>,
) -> Option<Arc<TcpListener>> {
    let mut backoff = Duration::from_secs(1);
    loop {
        match TcpListener::bind(s.listen) {
            Ok(l) => {
                store.set_ready("probe");
                return Some(Arc::new(l));
            }
            Err(e) => {
                let why = format!(
                    "cannot listen on {}: {e}; retrying in {}s",
                    s.listen,
                    backoff.as_secs()
                );
                tracing::error!(address = %s.listen, error = %e, retry_in = ?backoff, "probing paused: cannot listen");
                store.publish_probe(ProbeSnapshot {
                    last_error: Some(why.clone()),
                    pause_reason: Some(PauseReason::ListenFailed),
                    ..ProbeSnapshot::default()
                });
                store.set_not_ready("probe", why);
                match shutdown.recv_timeout(backoff) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return None,
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Runs rounds until shutdown, then leaves the group explicitly: the others drop this
/// member at once instead of pausing for `probe.member_timeout` as they would for a crash.
fn run_loop(s: ProbeSettings, listener: Arc<TcpListener>, store: &Store, shutdown: &Receiver<()>) {
    let mut p = Prober::new(s, listener, Instant::now());
    let mut next = Instant::now();
    loop {
        match shutdown.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => {
                if let Some(c) = p.comm.take() {
                    let me = c.rank();
                    let told = c.leave(&format!("{LEAVING} (rank {me})"));
                    tracing::info!(acknowledged = told, "left the probe group");
                }
                return;
            }
        }
        // Jitter of ±10 % keeps groups (and nodes restarted together) from locking onto one
        // phase with each other or with a training step; the barrier re-aligns the members
        // of one group every round anyway.
        p.jitter = xorshift(p.jitter);
        next = (next + jittered(p.s.interval, p.jitter)).max(Instant::now());
        p.tick(store);
        p.part.handshakes_rejected =
            p.s.comm
                .transport
                .stats
                .rejected_all()
                .into_iter()
                .map(|(r, n)| (r.as_str(), n))
                .collect();
        store.publish_probe(p.part.clone());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{NodeState, Transition};
    use prober::renumber;
    use std::collections::VecDeque;

    #[test]
    fn probing_waits_for_the_topologys_first_read_and_no_longer() {
        let (_tx, rx) = std::sync::mpsc::channel::<()>();
        // Topology off: nothing to wait for.
        let store = Store::new(false, false);
        assert_eq!(await_place(None, &store, &rx), PlaceWait::NotExpected);
        // Never read: the wait lasts its bound (three polls), then gives up.
        let bound = PLACE_POLL * 3;
        let started = Instant::now();
        assert_eq!(await_place(Some(bound), &store, &rx), PlaceWait::TimedOut);
        assert!(started.elapsed() >= bound, "gave up early");
        // Read while waiting: the waiter (its own thread, a bound of a minute) says when it
        // starts; the read is published after that, and ends the wait.
        let store = Arc::new(Store::new(false, false));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || {
                let (_tx, rx) = std::sync::mpsc::channel::<()>();
                started_tx.send(()).unwrap();
                await_place(Some(Duration::from_secs(60)), &store, &rx)
            })
        };
        started_rx.recv().unwrap();
        store.publish_topology(crate::snapshot::topology::TopologySnapshot::default());
        assert_eq!(waiter.join().unwrap(), PlaceWait::Read);
        // Already read: no wait at all, even with a zero bound.
        assert_eq!(
            await_place(Some(Duration::ZERO), &store, &rx),
            PlaceWait::Read
        );
        // Stopping ends the wait.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        tx.send(()).unwrap();
        let unread = Store::new(false, false);
        let minute = Some(Duration::from_secs(60));
        assert_eq!(await_place(minute, &unread, &rx), PlaceWait::Shutdown);
        drop(tx);
    }

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
}
