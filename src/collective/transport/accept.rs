//! Incoming connections while a mesh forms: handshakes run concurrently, each under a
//! short deadline, with a cap on how many are in progress at once overall and per source
//! address, so connections that never complete one cannot hold up formation.
//!
//! One thread accepts and drives every handshake on a single-threaded Tokio runtime, so
//! a thousand idle strangers cost a thousand small tasks, not a thousand threads. When a
//! cap is reached the *oldest* handshake in progress (of that source, or overall) is
//! dropped rather than the new one refused: a peer holding the key answers within a
//! round trip, so only a connection that has been silent for a while is ever old, and a
//! flood cannot keep the slots full against a peer that keeps trying (the connecting side
//! retries a handshake that was cut short, see `connect_one`).
//!
//! Every refused connection is counted by [`RejectReason`] in [`HandshakeStats`] and
//! logged at most once per source address per minute.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::{AbortHandle, JoinSet};

use super::TransportConfig;
use super::auth::{self, AuthError, CONNECT_LEN, Hello, REFUSAL};
use super::mesh::tune;
use super::seal::Session;
use crate::collective::error::{CollError, CollResult, HcclCode};

/// Why an incoming connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The peer's proof does not match the key.
    BadMac,
    /// The handshake did not complete within the handshake timeout.
    Timeout,
    /// Too many handshakes were in progress; this one was the oldest.
    TooManyPending,
    /// Too many handshakes from this source were in progress; this one was its oldest.
    PerSourceLimit,
    /// The peer did not speak the handshake.
    BadMagic,
    /// The peer holds the key but belongs to another communicator.
    WrongComm,
    /// The peer authenticated as a rank or channel this rank does not accept from (a
    /// lower rank, one outside the world, or a connection it already has).
    UnexpectedPeer,
    /// The connection failed mid-handshake.
    IoError,
    /// The peer holds the key but speaks no wire version this build speaks.
    WireVersion,
}

impl RejectReason {
    /// Every reason, in a fixed order (for exporting every series, zeros included).
    pub const ALL: [RejectReason; 9] = [
        RejectReason::BadMac,
        RejectReason::Timeout,
        RejectReason::TooManyPending,
        RejectReason::PerSourceLimit,
        RejectReason::BadMagic,
        RejectReason::WrongComm,
        RejectReason::UnexpectedPeer,
        RejectReason::IoError,
        RejectReason::WireVersion,
    ];

    /// The label value, e.g. `bad_mac`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::BadMac => "bad_mac",
            RejectReason::Timeout => "timeout",
            RejectReason::TooManyPending => "too_many_pending",
            RejectReason::PerSourceLimit => "per_source_limit",
            RejectReason::BadMagic => "bad_magic",
            RejectReason::WrongComm => "wrong_comm",
            RejectReason::UnexpectedPeer => "unexpected_peer",
            RejectReason::IoError => "io_error",
            RejectReason::WireVersion => "wire_version",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }

    fn of(e: &AuthError) -> RejectReason {
        match e {
            AuthError::WrongKey { .. } | AuthError::PeerUnproven => RejectReason::BadMac,
            AuthError::NotHandshake | AuthError::Refused => RejectReason::BadMagic,
            AuthError::OtherCommunicator { .. } => RejectReason::WrongComm,
            AuthError::WireVersion { .. } => RejectReason::WireVersion,
            AuthError::Read(e) | AuthError::Write(e)
                if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) =>
            {
                RejectReason::Timeout
            }
            _ => RejectReason::IoError,
        }
    }
}

/// How long a source stays quiet in the log after a refusal was logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Sources remembered for log limiting; beyond it, refusals from new sources are only
/// counted until old entries expire (a flood from many addresses cannot grow the map).
const LOG_SOURCES_MAX: usize = 4096;

/// Counters of incoming handshakes, shared across the communicators of one
/// configuration. Read with [`rejected`](Self::rejected) and
/// [`accepted`](Self::accepted).
#[derive(Debug, Default)]
pub struct HandshakeStats {
    rejected: [AtomicU64; RejectReason::ALL.len()],
    accepted: AtomicU64,
    /// Per source: when a refusal was last logged, and how many were not logged since.
    logged: Mutex<HashMap<IpAddr, (Instant, u64)>>,
}

impl HandshakeStats {
    /// Connections refused for `reason` so far.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.rejected[reason.index()].load(Ordering::Relaxed)
    }

    /// Every reason with its count, in [`RejectReason::ALL`] order.
    pub fn rejected_all(&self) -> Vec<(RejectReason, u64)> {
        RejectReason::ALL
            .iter()
            .map(|r| (*r, self.rejected(*r)))
            .collect()
    }

    /// Handshakes that completed and were kept.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Counts a refusal and logs it unless this source was logged within the last minute.
    fn reject(&self, from: SocketAddr, reason: RejectReason, detail: &str) {
        self.rejected[reason.index()].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let suppressed = match logged.get_mut(&from.ip()) {
            Some((at, n)) if now.duration_since(*at) < LOG_EVERY => {
                *n += 1;
                return;
            }
            Some((at, n)) => {
                *at = now;
                std::mem::take(n)
            }
            None => {
                if logged.len() >= LOG_SOURCES_MAX {
                    logged.retain(|_, (at, _)| now.duration_since(*at) < LOG_EVERY);
                    if logged.len() >= LOG_SOURCES_MAX {
                        return;
                    }
                }
                logged.insert(from.ip(), (now, 0));
                0
            }
        };
        drop(logged);
        tracing::warn!(
            source = %from,
            reason = reason.as_str(),
            suppressed_since_last = suppressed,
            "refused an incoming probe connection: {detail} (further refusals from this source are not logged for a minute)"
        );
    }
}

/// What this rank accepts: connections from every higher rank, `channels` each.
#[derive(Debug, Clone, Copy)]
pub(super) struct Want {
    pub rank: usize,
    pub world: usize,
    pub channels: usize,
    pub expected: usize,
}

/// An authenticated incoming connection: peer rank, channel, socket, session keys.
pub(super) type Accepted = (usize, usize, TcpStream, Session);

/// The last few refusals, for the error if formation times out (bounded: a flood must
/// not grow it).
#[derive(Debug, Default)]
struct Recent {
    lines: VecDeque<String>,
    total: u64,
}

impl Recent {
    fn push(&mut self, line: String) {
        self.total += 1;
        if self.lines.len() == 8 {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    fn summary(&self) -> String {
        match self.total {
            0 => String::new(),
            n => format!(
                "; rejected {n} connection(s), the last: {}",
                Vec::from(self.lines.clone()).join("; ")
            ),
        }
    }
}

/// One handshake in progress.
struct Pending {
    id: tokio::task::Id,
    from: SocketAddr,
    abort: AbortHandle,
}

type Outcome = (SocketAddr, Result<(Hello, TcpStream, Session), AuthError>);

/// Accepts and authenticates every connection `want` expects, until `deadline` or until
/// `stop` is set (this rank's own connecting failed).
pub(super) fn accept_all(
    listener: &TcpListener,
    want: Want,
    cfg: &TransportConfig,
    deadline: Instant,
    stop: &AtomicBool,
) -> CollResult<Vec<Accepted>> {
    let op = "init: accept";
    if want.expected == 0 {
        return Ok(Vec::new());
    }
    let fail = |e: std::io::Error| CollError::new(HcclCode::TcpConnect, op, None, e.to_string());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(fail)?;
    // A second descriptor of the same socket for the runtime to own; the caller keeps
    // the listener (it is reused when the communicator re-forms).
    let l = listener.try_clone().map_err(fail)?;
    l.set_nonblocking(true).map_err(fail)?;
    let r = rt.block_on(Acceptor { want, cfg, stop }.run(l, deadline));
    let _ = listener.set_nonblocking(false);
    r
}

struct Acceptor<'a> {
    want: Want,
    cfg: &'a TransportConfig,
    stop: &'a AtomicBool,
}

impl Acceptor<'_> {
    async fn run(self, l: TcpListener, deadline: Instant) -> CollResult<Vec<Accepted>> {
        let op = "init: accept";
        let l = tokio::net::TcpListener::from_std(l)
            .map_err(|e| CollError::new(HcclCode::TcpConnect, op, None, e.to_string()))?;
        let mut tasks: JoinSet<Outcome> = JoinSet::new();
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let mut got: Vec<Accepted> = Vec::new();
        let mut recent = Recent::default();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let until = tokio::time::Instant::from_std(deadline);
        while got.len() < self.want.expected {
            tokio::select! {
                r = l.accept() => match r {
                    Ok((s, from)) => self.admit(s, from, &mut tasks, &mut pending, &mut recent),
                    Err(e) => {
                        // Out of descriptors, say: do not spin on it.
                        recent.push(format!("accept: {e}"));
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                },
                Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    let (id, outcome) = match done {
                        Ok((id, o)) => (id, Some(o)),
                        Err(e) => (e.id(), None),
                    };
                    pending.retain(|p| p.id != id);
                    if let Some((from, r)) = outcome {
                        self.settle(from, r, &mut got, &mut recent);
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    return Err(self.timed_out(&got, &recent));
                }
                _ = tick.tick() => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(CollError::new(
                            HcclCode::TcpConnect,
                            op,
                            None,
                            "stopped: this rank's own connections failed",
                        ));
                    }
                }
            }
        }
        Ok(got)
    }

    /// Starts a handshake on a new connection, first dropping the oldest one in progress
    /// from the same source, or overall, if a cap is reached.
    fn admit(
        &self,
        s: tokio::net::TcpStream,
        from: SocketAddr,
        tasks: &mut JoinSet<Outcome>,
        pending: &mut VecDeque<Pending>,
        recent: &mut Recent,
    ) {
        let per_source = pending.iter().filter(|p| p.from.ip() == from.ip()).count();
        let evict = if per_source >= self.cfg.max_pending_per_source.max(1) {
            pending
                .iter()
                .position(|p| p.from.ip() == from.ip())
                .map(|i| (i, RejectReason::PerSourceLimit))
        } else if pending.len() >= self.cfg.max_pending_handshakes.max(1) {
            Some((0, RejectReason::TooManyPending))
        } else {
            None
        };
        if let Some((i, reason)) = evict
            && let Some(old) = pending.remove(i)
        {
            old.abort.abort();
            let detail = format!(
                "handshake dropped for a newer connection ({})",
                reason.as_str()
            );
            self.cfg.stats.reject(old.from, reason, &detail);
            recent.push(format!("{}: {detail}", old.from));
        }
        let key = self.cfg.key.clone();
        let (comm_id, within) = (self.cfg.comm_id, self.cfg.handshake_timeout);
        let abort = tasks.spawn(async move { (from, handshake(s, &key, comm_id, within).await) });
        pending.push_back(Pending {
            id: abort.id(),
            from,
            abort,
        });
    }

    /// Keeps an authenticated connection this rank expects; counts and logs the rest.
    fn settle(
        &self,
        from: SocketAddr,
        r: Result<(Hello, TcpStream, Session), AuthError>,
        got: &mut Vec<Accepted>,
        recent: &mut Recent,
    ) {
        let Want {
            rank,
            world,
            channels,
            ..
        } = self.want;
        match r {
            Ok((h, s, session)) => {
                let (p, ch) = (h.rank as usize, h.channel as usize);
                if p <= rank
                    || p >= world
                    || ch >= channels
                    || got.iter().any(|(gp, gc, _, _)| *gp == p && *gc == ch)
                {
                    let detail = format!("unexpected rank {p} channel {ch}");
                    self.cfg
                        .stats
                        .reject(from, RejectReason::UnexpectedPeer, &detail);
                    recent.push(format!("{from}: {detail}"));
                    return;
                }
                let _ = s.set_nonblocking(false);
                let _ = tune(&s, self.cfg);
                self.cfg.stats.accepted.fetch_add(1, Ordering::Relaxed);
                got.push((p, ch, s, session));
            }
            Err(m @ AuthError::ClosedUnspoken) => {
                // A member's liveness check: connect and close. Not a refusal.
                tracing::debug!(peer = %from, "connection {m}");
            }
            Err(m) => {
                let reason = RejectReason::of(&m);
                let detail = m.to_string();
                self.cfg.stats.reject(from, reason, &detail);
                recent.push(format!("{from}: {detail}"));
            }
        }
    }

    fn timed_out(&self, got: &[Accepted], recent: &Recent) -> CollError {
        let Want { rank, world, .. } = self.want;
        let have: Vec<usize> = got.iter().map(|(p, _, _, _)| *p).collect();
        let missing: Vec<usize> = (rank + 1..world).filter(|p| !have.contains(p)).collect();
        CollError::new(
            HcclCode::TcpConnect,
            "init: accept",
            missing.first().copied(),
            format!(
                "timed out waiting for ranks {missing:?} to connect{}",
                recent.summary()
            ),
        )
    }
}

/// Whether an I/O error means the peer went away.
fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
    )
}

/// The accepting side of one handshake (the same exchange as [`auth::accept`]), bounded
/// by `within`. Returns the socket, back in blocking mode's hands, with the peer's hello
/// and the session keys.
async fn handshake(
    mut s: tokio::net::TcpStream,
    key: &[u8],
    comm_id: u64,
    within: Duration,
) -> Result<(Hello, TcpStream, Session), AuthError> {
    let exchange = async {
        let acc = auth::Acceptor::new(comm_id)?;
        s.write_all(&acc.hello()).await.map_err(|e| {
            if gone(&e) {
                AuthError::ClosedUnspoken
            } else {
                AuthError::Write(e)
            }
        })?;
        let mut msg = [0u8; CONNECT_LEN];
        match s.read(&mut msg[..1]).await {
            Ok(0) => return Err(AuthError::ClosedUnspoken),
            Err(e) if gone(&e) => return Err(AuthError::ClosedUnspoken),
            Err(e) => return Err(AuthError::Read(e)),
            Ok(_) => {}
        }
        if msg[0] != b'H' {
            // No handshake starts with this byte: refuse without waiting for more.
            let _ = s.write_all(&REFUSAL).await;
            return Err(AuthError::NotHandshake);
        }
        s.read_exact(&mut msg[1..]).await.map_err(AuthError::Read)?;
        match acc.finish(key, &msg) {
            Ok((hello, reply, session)) => {
                s.write_all(&reply).await.map_err(AuthError::Write)?;
                Ok((hello, session))
            }
            Err(e) => {
                let _ = s.write_all(&REFUSAL).await;
                Err(e)
            }
        }
    };
    let (hello, session) = tokio::time::timeout(within, exchange)
        .await
        .map_err(|_| AuthError::Read(ErrorKind::TimedOut.into()))??;
    let s = s.into_std().map_err(AuthError::Read)?;
    Ok((hello, s, session))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_label_and_counter() {
        let stats = HandshakeStats::default();
        let from: SocketAddr = "192.0.2.1:5".parse().unwrap();
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            for _ in 0..=i {
                stats.reject(from, *r, "test");
            }
        }
        for (i, (r, n)) in stats.rejected_all().into_iter().enumerate() {
            assert_eq!(n, i as u64 + 1, "{}", r.as_str());
        }
        let labels: std::collections::HashSet<&str> =
            RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), RejectReason::ALL.len());
    }

    #[test]
    fn a_source_is_logged_at_most_once_a_minute() {
        let stats = HandshakeStats::default();
        let a: SocketAddr = "192.0.2.1:5".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:5".parse().unwrap();
        for _ in 0..5 {
            stats.reject(a, RejectReason::Timeout, "x");
        }
        stats.reject(b, RejectReason::Timeout, "x");
        let logged = stats.logged.lock().unwrap();
        assert_eq!(logged.len(), 2);
        assert_eq!(logged[&a.ip()].1, 4, "four refusals from a held back");
        assert_eq!(logged[&b.ip()].1, 0);
    }

    #[test]
    fn the_refusal_list_stays_short() {
        let mut r = Recent::default();
        for i in 0..1000 {
            r.push(format!("x{i}"));
        }
        assert_eq!(r.lines.len(), 8);
        assert!(r.summary().contains("rejected 1000 connection(s)"));
        assert!(r.summary().contains("x999"));
    }
}
