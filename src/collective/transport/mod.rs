//! TCP transport: a full mesh of authenticated connections, several per peer.
//!
//! Every rank listens; each pair of ranks is joined by `channels` connections, opened by
//! the higher rank. Mid-size transfers are striped over the channels (the "multi-stream"
//! idea), each stripe on its own thread when the socket buffers cannot absorb it, so one
//! slow `write` never serialises the others; small transfers go inline on channel 0, and
//! so do the large segments of a point-to-point stream (see [`STRIPE_MAX`] and
//! [`Traffic`]). Every payload travels in [`frame`]s whose headers are checked field by
//! field.
//!
//! Every connection is authenticated twice over: the handshake ([`auth`]) proves the peer
//! holds the shared key, and the frames after it carry tags under per-connection session
//! keys ([`seal`]): control frames always, bulk payloads when
//! [`TransportConfig::authenticate_payloads`] is on. Handshakes run concurrently under a
//! deadline and caps ([`accept`]), so connections that never finish one cannot hold up
//! formation.
//!
//! Failure is loud and total: any I/O or protocol error aborts the mesh (all sockets shut
//! down), so every other rank's pending operation fails promptly instead of waiting for
//! its timeout, and the caller re-forms a communicator with the survivors.

pub mod accept;
pub mod auth;
pub mod frame;
pub mod seal;

use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use self::accept::{HandshakeStats, RejectReason};
pub use self::frame::Payload;

use self::frame::{ABORT_MAX, HEADER_LEN, Header, Kind};
use self::seal::{Direction, Session, TAG_LEN};
use super::dtype::{DataType, ReduceOp, reduce_apart, reduce_into};
use super::error::{CollError, CollResult, HcclCode};

/// The floor of the inline limit: a transfer up to half the send buffer, and up to this
/// much whatever the socket buffers, is sent without a helper thread.
pub const INLINE_FLOOR: usize = 128 * 1024;

/// Every stripe of a striped transfer carries at least this much, so a transfer is
/// striped over ⌊len / STRIPE_MIN⌋ channels (at least one, at most all): below 512 KiB it
/// is one frame sequence on channel 0, at 512 KiB two stripes, from 1 MiB all four.
/// Striping a small message only adds frames and wake-ups. Against striping everything
/// above 128 KiB (64 KiB stripes at 512 KiB), medians of ten interleaved rounds: 2-rank
/// all-reduce at 512 KiB / 1 MiB 3.41 / 3.56 → 4.00 / 3.71 GB/s busbw, 4 ranks at
/// 512 KiB / 1 / 2 MiB 1.72 / 1.80 / 1.96 → 1.90 / 1.98 / 2.06. Stripes of at least
/// 512 KiB lost (4-rank 2 MiB 2.10 → 1.47).
pub const STRIPE_MIN: usize = 256 * 1024;

/// Fault injection toward one peer (tests and the demo).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultSpec {
    /// Added before every frame sent.
    pub delay: Duration,
    /// Throughput cap on sends, bytes per second.
    pub rate_bytes_per_sec: Option<f64>,
    /// Shut the connections down after this many payload bytes have been sent.
    pub drop_after_bytes: Option<u64>,
}

/// Transport settings shared by every rank of a communicator.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Communicator id; connections of another communicator are refused.
    pub comm_id: u64,
    /// Shared secret for the handshake.
    pub key: Arc<Vec<u8>>,
    /// Connections per peer.
    pub channels: usize,
    /// Bound on connection setup (`HCCL_CONNECT_TIMEOUT`).
    pub connect_timeout: Duration,
    /// `SO_SNDBUF` / `SO_RCVBUF`.
    pub socket_buffer: usize,
    /// Payload bytes per frame.
    pub chunk_bytes: usize,
    /// Largest payload a frame may announce.
    pub max_frame: usize,
    /// IP TOS byte (`HCCL_RDMA_TC` semantics: traffic class = DSCP × 4).
    pub traffic_class: Option<u32>,
    /// Bind outgoing connections to this interface (`SO_BINDTODEVICE`).
    pub bind_device: Option<String>,
    /// Fault injection, by peer rank.
    pub faults: HashMap<usize, FaultSpec>,
    /// Tag bulk payloads too ([`Payload::Bulk`]; control payloads are always tagged).
    /// Every rank of a communicator must agree. Off by default: at large sizes the tag
    /// costs a pass over the payload on both ends (see `docs/engine.md`,
    /// "Authentication").
    pub authenticate_payloads: bool,
    /// Bound on one incoming handshake, from accept to the peer's proof: a connection
    /// that has not proved the key by then is dropped.
    pub handshake_timeout: Duration,
    /// Incoming handshakes in progress at once; beyond it the oldest is dropped.
    pub max_pending_handshakes: usize,
    /// Incoming handshakes in progress at once from one source address; beyond it that
    /// source's oldest is dropped, so one source cannot crowd out the others.
    pub max_pending_per_source: usize,
    /// Counters of refused connections, shared by every communicator built from this
    /// configuration (a re-formed one counts on).
    pub stats: Arc<HandshakeStats>,
}

impl TransportConfig {
    /// Defaults for `comm_id` and `key`: [`default_channels`], 4 MiB socket buffers,
    /// 512 KiB chunks.
    pub fn new(comm_id: u64, key: Vec<u8>) -> Self {
        Self {
            comm_id,
            key: Arc::new(key),
            channels: default_channels(),
            connect_timeout: Duration::from_secs(120),
            socket_buffer: 4 << 20,
            chunk_bytes: 512 << 10,
            max_frame: 16 << 20,
            traffic_class: None,
            bind_device: None,
            faults: HashMap::new(),
            authenticate_payloads: false,
            handshake_timeout: Duration::from_secs(2),
            max_pending_handshakes: 128,
            max_pending_per_source: 32,
            stats: Arc::new(HandshakeStats::default()),
        }
    }
}

/// Four connections per peer. Only collective transfers from 2 × [`STRIPE_MIN`], and
/// point-to-point ones up to [`STRIPE_MAX`], are striped, and there several sockets let the kernel work on one exchange in parallel
/// and keep each socket's queue short. Measured on the 2-core reference machine
/// (five interleaved rounds, median busbw): 2-rank all-reduce at 1 / 2 / 4 MiB
/// 1.64 / 2.59 / 2.16 GB/s with two channels, 2.07 / 3.18 / 3.30 with four; 4 ranks at
/// 2 / 4 MiB 1.20 / 1.10 against 1.76 / 1.32; no loss at other sizes. (An earlier
/// default of one per CPU assumed more streams than cores only add contention; they do
/// not, here.)
pub fn default_channels() -> usize {
    4
}

/// How received bytes land in the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode<'a> {
    /// Copy.
    Copy,
    /// Reduce into the destination with this operator.
    Reduce(ReduceOp),
    /// Store `op(src, received)`, where `src` is as long as the destination. An
    /// out-of-place reduction reads its own contribution from the caller's send buffer
    /// this way instead of first copying the whole send buffer into the receive buffer:
    /// above the last-level cache that copy costs as much time as the network transfer.
    ReduceFrom(ReduceOp, &'a [u8]),
}

impl<'a> RecvMode<'a> {
    /// `Reduce(op)` in place, or `ReduceFrom(op, src)` from an out-of-place input.
    pub fn reduce(op: ReduceOp, src: Option<&'a [u8]>) -> Self {
        match src {
            Some(s) => RecvMode::ReduceFrom(op, s),
            None => RecvMode::Reduce(op),
        }
    }

    /// The mode for the bytes `range` of the destination.
    fn narrow(self, range: std::ops::Range<usize>) -> RecvMode<'a> {
        match self {
            RecvMode::ReduceFrom(op, src) => RecvMode::ReduceFrom(op, &src[range]),
            other => other,
        }
    }
}

#[derive(Debug)]
struct Shaper {
    spec: FaultSpec,
    next_free: Instant,
    sent: u64,
}

/// One authenticated connection: the socket and the frame keys and counters of both
/// directions.
#[derive(Debug)]
struct Link {
    stream: TcpStream,
    tx: Direction,
    rx: Direction,
    /// Socket timeouts last set (read, write): setting them costs a syscall, so they are
    /// only changed when the remaining time drifts far from them.
    timeouts: Mutex<(Option<Duration>, Option<Duration>)>,
}

impl Link {
    fn new(stream: TcpStream, session: Session) -> Self {
        Self {
            stream,
            tx: Direction::new(session.send),
            rx: Direction::new(session.recv),
            timeouts: Mutex::new((None, None)),
        }
    }
}

#[derive(Debug)]
struct Peer {
    links: Vec<Link>,
    shaper: Option<Mutex<Shaper>>,
}

/// Transfers are exchanged in segments of at most this many bytes.
pub const SEGMENT: usize = 4 << 20;

/// Point-to-point transfers above this size travel on channel 0 alone instead of
/// striped over the channels: a one-way stream of whole segments lost more than half its
/// bandwidth striped (64 MiB point-to-point 6.4 → 2.7 GB/s, three interleaved rounds on
/// the 2-core reference host). Collective steps, where every link carries traffic both
/// ways at once, stripe every segment: 2-rank all-reduce at 16 / 32 MiB 2.74 / 2.39 →
/// 3.56 / 2.89 GB/s busbw, 4-rank at 4 / 8 MiB 1.41 / 1.10 → 1.76 / 1.22.
pub const STRIPE_MAX: usize = 2 << 20;

/// What kind of operation a transfer belongs to, which decides how it is striped. Both
/// ends of a transfer run the same kind of operation (a collective on every rank, or a
/// send matched by a receive), so they agree on the layout without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// A step of a collective: striped over the channels, [`STRIPE_MIN`] or more each.
    Collective,
    /// Point-to-point send and receive: striped only up to [`STRIPE_MAX`].
    PointToPoint,
}

/// The number of channels a transfer of `len` bytes is striped over: as many as give
/// every stripe [`STRIPE_MIN`] bytes or more (a small message is one frame sequence on
/// channel 0), and one above [`STRIPE_MAX`] for point-to-point. It depends only on the
/// transfer's own size and kind, which both ends know.
fn lanes(streams: usize, len: usize, traffic: Traffic) -> usize {
    if traffic == Traffic::PointToPoint && len > STRIPE_MAX {
        return 1;
    }
    (len / STRIPE_MIN).clamp(1, streams.max(1))
}

/// How long a receive polls for a frame's header before it sleeps in a blocking read.
///
/// A peer that is itself sending a few hundred KiB first, or that was briefly preempted,
/// often takes longer than 50 µs to answer, and every such miss costs a sleep and a
/// wake-up. Interleaved A/B rounds, 50 µs against 200 µs: 2-rank 8 B 11.7–14.6 → 5.2–5.8 µs
/// (medians of four rounds), 512 KiB busbw 2.10 → 2.94 GB/s; 1 ms gained nothing more.
const SPIN: Duration = Duration::from_micros(200);

/// Frames whose payload is at most this size are read with one call into a reused
/// buffer and copied out: one system call instead of two for a small message. Above it
/// the copy costs more than the call (64 KiB frames spent 22 % of CPU in that copy and in
/// zeroing the buffer), so the payload is read straight into its destination.
const COMBINE_MAX: usize = 4 * 1024;

/// Sets a socket timeout only when `remaining` is well below or well above the one in
/// force. Overshoot is bounded by 10 % of the remaining time (the op deadline is also
/// checked between chunks).
fn ensure_timeout(
    cache: &Mutex<(Option<Duration>, Option<Duration>)>,
    s: &TcpStream,
    read: bool,
    remaining: Duration,
) -> std::io::Result<()> {
    let mut g = cache.lock().unwrap_or_else(|p| p.into_inner());
    let cur = if read { g.0 } else { g.1 };
    let stale = match cur {
        None => true,
        Some(c) => remaining < c.mul_f64(0.9) || remaining > c.mul_f64(1.5),
    };
    if stale {
        if read {
            s.set_read_timeout(Some(remaining))?;
            g.0 = Some(remaining);
        } else {
            s.set_write_timeout(Some(remaining))?;
            g.1 = Some(remaining);
        }
    }
    Ok(())
}

/// Per-link sequence numbers one operation claimed: `(peer, seq)`, one entry per peer. A
/// short list beats a map: an operation talks to a few peers.
pub type Seqs = Vec<(usize, u64)>;

/// The connections of one rank to all others.
#[derive(Debug)]
pub struct Mesh {
    rank: usize,
    world: usize,
    peers: Vec<Option<Peer>>,
    cfg: TransportConfig,
    send_seq: Mutex<Vec<u64>>,
    recv_seq: Mutex<Vec<u64>>,
    /// Largest transfer sent inline (without a sender thread): half of the smallest
    /// effective socket send buffer, so a blocking write of that size always completes
    /// into the kernel even if the peer is writing to us at the same moment.
    inline_max: usize,
}

fn tune(s: &TcpStream, cfg: &TransportConfig) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let sock = socket2::SockRef::from(s);
    // 0 leaves the buffers to Linux's autotuning (which an explicit size disables).
    if cfg.socket_buffer > 0 {
        sock.set_send_buffer_size(cfg.socket_buffer)?;
        sock.set_recv_buffer_size(cfg.socket_buffer)?;
    }
    sock.set_keepalive(true)?;
    if let Some(tc) = cfg.traffic_class {
        sock.set_tos_v4(tc)?;
    }
    Ok(())
}

fn io_error(op: &str, peer: usize, e: &std::io::Error, timeout: bool) -> CollError {
    if timeout || matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
        CollError::new(
            HcclCode::Timeout,
            op,
            Some(peer),
            "no progress before the execution timeout",
        )
    } else {
        CollError::new(
            HcclCode::TcpTransfer,
            op,
            Some(peer),
            format!("connection lost ({e}); the peer exited, aborted or was cut off"),
        )
    }
}

impl Mesh {
    /// Connects rank `rank` to every address in `addrs` (index = rank), using `listener`
    /// (bound to `addrs[rank]`) for incoming connections.
    pub fn establish(
        listener: &TcpListener,
        rank: usize,
        addrs: &[SocketAddr],
        cfg: TransportConfig,
    ) -> CollResult<Mesh> {
        let world = addrs.len();
        if rank >= world {
            return Err(CollError::para(
                "init",
                format!("rank {rank} is outside a world of {world}"),
            ));
        }
        if cfg.channels == 0 || cfg.channels > 16 {
            return Err(CollError::para(
                "init",
                format!("channels = {} (must be 1..=16)", cfg.channels),
            ));
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let channels = cfg.channels;
        type Slots = Vec<Option<Link>>;
        let mut peers: Vec<Option<Slots>> = (0..world).map(|_| None).collect();
        let expected = (world - rank - 1) * channels;
        // Set when this rank's own connecting fails, so the acceptor stops waiting.
        let stop = std::sync::atomic::AtomicBool::new(false);

        let (accepted, connected) = std::thread::scope(|scope| {
            let want = accept::Want {
                rank,
                world,
                channels,
                expected,
            };
            let (cfg, stop) = (&cfg, &stop);
            let acceptor =
                scope.spawn(move || accept::accept_all(listener, want, cfg, deadline, stop));
            let mut out = Vec::new();
            for (peer, addr) in addrs.iter().enumerate().take(rank) {
                let mut chans = Vec::new();
                for ch in 0..channels {
                    match connect_one(*addr, rank, peer, ch, cfg, deadline) {
                        Ok(link) => chans.push(link),
                        Err(e) => {
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                            return (acceptor.join().unwrap_or_else(|_| Err(e.clone())), Err(e));
                        }
                    }
                }
                out.push((peer, chans));
            }
            (
                acceptor.join().unwrap_or_else(|_| {
                    Err(CollError::new(
                        HcclCode::Internal,
                        "init",
                        None,
                        "acceptor thread panicked",
                    ))
                }),
                Ok(out),
            )
        });
        let connected = connected?;
        let accepted = accepted?;
        for (peer, chans) in connected {
            peers[peer] = Some(chans.into_iter().map(Some).collect());
        }
        for (peer, ch, s, session) in accepted {
            let slot = peers[peer].get_or_insert_with(|| (0..channels).map(|_| None).collect());
            slot[ch] = Some(Link::new(s, session));
        }
        let peers: Vec<Option<Peer>> = peers
            .into_iter()
            .enumerate()
            .map(|(p, chans)| {
                chans.map(|c| Peer {
                    links: c.into_iter().flatten().collect(),
                    shaper: cfg.faults.get(&p).map(|spec| {
                        Mutex::new(Shaper {
                            spec: spec.clone(),
                            next_free: Instant::now(),
                            sent: 0,
                        })
                    }),
                })
            })
            .collect();
        let inline_max = peers
            .iter()
            .flatten()
            .flat_map(|p: &Peer| p.links.iter())
            .filter_map(|l| socket2::SockRef::from(&l.stream).send_buffer_size().ok())
            .min()
            .map_or(INLINE_FLOOR, |b| (b / 2).clamp(INLINE_FLOOR, 4 << 20));
        Ok(Mesh {
            inline_max,
            rank,
            world,
            peers,
            send_seq: Mutex::new(vec![0; world]),
            recv_seq: Mutex::new(vec![0; world]),
            cfg,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// World size.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The IP TOS byte of each connection to `peer`.
    pub fn socket_tos(&self, peer: usize) -> std::io::Result<Vec<u32>> {
        let p = self
            .peers
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| std::io::Error::other(format!("no peer {peer}")))?;
        p.links
            .iter()
            .map(|l| socket2::SockRef::from(&l.stream).tos_v4())
            .collect()
    }

    /// Shuts every connection down, so peers blocked on us fail at once.
    pub fn abort(&self) {
        for p in self.peers.iter().flatten() {
            for l in &p.links {
                let _ = l.stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Tells every peer why this rank failed (an abort frame on channel 0, best effort,
    /// 100 ms per peer at most), then shuts every connection down. A peer waiting on us
    /// then reports `HCCL_E_REMOTE` with our reason instead of a bare lost connection.
    pub fn abort_with(&self, reason: &str) {
        for p in self.peers.iter().flatten() {
            if let Some(l) = p.links.first() {
                let _ = self.send_notice(l, reason, Duration::from_millis(100));
            }
        }
        self.abort();
    }

    /// Writes a tagged abort frame carrying `reason` (cut to [`ABORT_MAX`] bytes) on one
    /// link, waiting at most `within` for room in the socket buffer.
    fn send_notice(&self, l: &Link, reason: &str, within: Duration) -> std::io::Result<()> {
        let msg = &reason.as_bytes()[..reason.len().min(ABORT_MAX)];
        let head = Header {
            kind: Kind::Abort,
            dtype: 0,
            comm_id: self.cfg.comm_id,
            seq: 0,
            len: msg.len() as u32,
            chunk: 0,
        }
        .encode();
        let tag = seal::tag(l.tx.key(), l.tx.claim(), &head, msg);
        l.stream
            .set_write_timeout(Some(within.max(Duration::from_millis(1))))?;
        write_all_vectored(
            &l.stream,
            &mut [IoSlice::new(&head), IoSlice::new(msg), IoSlice::new(&tag)],
        )
    }

    /// Leaves on purpose: sends `reason` to every peer (as [`abort_with`](Self::abort_with)
    /// does) and returns once every peer's kernel has acknowledged it, or after `within`.
    /// A process may exit right after: the notice is not left in a send queue that a
    /// reset would discard. Returns how many peers acknowledged in time.
    ///
    /// Each connection is shut down for writing (a FIN after the notice), emptied of
    /// anything unread (closing a socket with unread bytes sends a reset, which discards
    /// whatever of ours is still unsent), and closed with `SO_LINGER`, which makes the
    /// close wait for the peer's acknowledgement; the closes run in parallel, one short
    /// thread per connection, so one unresponsive peer does not hold up the others.
    pub fn leave(self, reason: &str, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        for (rank, p) in self.peers.iter().enumerate() {
            if let Some(l) = p.as_ref().and_then(|p| p.links.first()) {
                let left = deadline.saturating_duration_since(Instant::now());
                if let Err(e) = self.send_notice(l, reason, left) {
                    tracing::debug!(peer = rank, "leave notice not sent: {e}");
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let mut pending = 0;
        for (rank, p) in self.peers.into_iter().enumerate() {
            let Some(p) = p else { continue };
            for (ch, l) in p.links.into_iter().enumerate() {
                let tx = tx.clone();
                // The socket moves into the thread, so its last descriptor closes there.
                let spawned =
                    std::thread::Builder::new()
                        .name("hccl-leave".into())
                        .spawn(move || {
                            close_after_delivery(l.stream);
                            let _ = tx.send((rank, ch));
                        });
                pending += usize::from(spawned.is_ok());
            }
        }
        drop(tx);
        let mut done: Vec<(usize, usize)> = Vec::with_capacity(pending);
        while done.len() < pending {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(x) => done.push(x),
                Err(_) => break,
            }
        }
        // A peer counts once all its connections closed cleanly; channel 0 carries the
        // notice, so that is the one that matters.
        done.iter().filter(|(_, ch)| *ch == 0).count()
    }

    /// Claims the next per-link sequence numbers for one operation's traffic. Each link
    /// direction counts the operations that used it, so ranks that skip a peer in some
    /// operation (point-to-point, trees) stay in step with it.
    pub fn next_seqs(&self, sends: &[usize], recvs: &[usize]) -> (Seqs, Seqs) {
        let claim = |seqs: &Mutex<Vec<u64>>, peers: &[usize]| {
            let mut seq = seqs.lock().unwrap_or_else(|p| p.into_inner());
            let mut out: Vec<(usize, u64)> = Vec::with_capacity(peers.len());
            for &p in peers {
                // A peer listed twice claims one number: the operation is one message
                // sequence on that link.
                if !out.iter().any(|(q, _)| *q == p) {
                    seq[p] += 1;
                    out.push((p, seq[p]));
                }
            }
            out
        };
        (claim(&self.send_seq, sends), claim(&self.recv_seq, recvs))
    }

    fn peer(&self, p: usize, op: &str) -> CollResult<&Peer> {
        self.peers.get(p).and_then(Option::as_ref).ok_or_else(|| {
            CollError::para(
                op,
                format!(
                    "rank {p} is not a peer of rank {} in a world of {}",
                    self.rank, self.world
                ),
            )
        })
    }

    /// Sends `data` to `to`, and receives `recv.len()` bytes from `from` into `recv`,
    /// concurrently. Either side may be absent or empty.
    ///
    /// Transfers are cut into [`SEGMENT`]-byte segments exchanged one after another (both
    /// directions cut the same way, so the wire layout depends only on sizes). A segment
    /// that fits in the local socket buffers goes inline without a helper thread, which
    /// on a small host is faster than threads competing for the cores; only one segment
    /// per direction is ever in flight. `traffic` decides how segments are striped over
    /// the channels, `class` whether the frames are tagged (see [`Kind::for_payload`]).
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &self,
        op: &str,
        seq: (u64, u64),
        dtype: DataType,
        traffic: Traffic,
        class: Payload,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, &mut [u8], RecvMode<'_>)>,
        deadline: Instant,
    ) -> CollResult<()> {
        if let Some((_, dst, RecvMode::ReduceFrom(_, src))) = &recv
            && src.len() != dst.len()
        {
            return Err(CollError::para(
                op,
                format!(
                    "reduce source holds {} bytes but the destination {}",
                    src.len(),
                    dst.len()
                ),
            ));
        }
        let kind = Kind::for_payload(class, self.cfg.authenticate_payloads);
        let seg = (SEGMENT / dtype.size()).max(1) * dtype.size();
        let send_len = send.as_ref().map_or(0, |(_, d)| d.len());
        let recv_len = recv.as_ref().map_or(0, |(_, d, _)| d.len());
        if send_len <= seg && recv_len <= seg {
            return self.exchange_segment(op, seq, dtype, traffic, kind, send, recv, deadline);
        }
        let (send, mut recv) = (send, recv);
        let mut k = 0;
        loop {
            let s_part = send.as_ref().and_then(|(p, d)| {
                let lo = (k * seg).min(d.len());
                let hi = ((k + 1) * seg).min(d.len());
                (lo < hi).then(|| (*p, &d[lo..hi]))
            });
            let r_part = match recv.as_mut() {
                Some((p, d, m)) => {
                    let lo = (k * seg).min(d.len());
                    let hi = ((k + 1) * seg).min(d.len());
                    (lo < hi).then(|| (*p, &mut d[lo..hi], m.narrow(lo..hi)))
                }
                None => None,
            };
            if s_part.is_none() && r_part.is_none() {
                break;
            }
            self.exchange_segment(op, seq, dtype, traffic, kind, s_part, r_part, deadline)?;
            k += 1;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange_segment(
        &self,
        op: &str,
        seq: (u64, u64),
        dtype: DataType,
        traffic: Traffic,
        kind: Kind,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, &mut [u8], RecvMode<'_>)>,
        deadline: Instant,
    ) -> CollResult<()> {
        let send = send.filter(|(_, d)| !d.is_empty());
        let recv = recv.filter(|(_, d, _)| !d.is_empty());
        // Wire layout depends only on each transfer's own size (see `lanes`), which both
        // of its ends know; never on the other direction of an exchange, which only one
        // end knows. Whether a rank sends from its own thread or from a helper thread is
        // its own business (it depends on its socket buffers), not the peer's.
        let elem = dtype.size();
        let fits = send
            .as_ref()
            .is_none_or(|(_, d)| d.len() <= self.inline_max);
        if fits {
            // The whole send fits in the kernel's socket buffers, so it completes without
            // the peer reading: send inline, then receive, with no helper thread competing
            // for the CPU.
            if let Some((to, data)) = send {
                let n = lanes(self.peer(to, op)?.links.len(), data.len(), traffic);
                for (ch, part) in stripes(data.len(), n, elem).into_iter().enumerate() {
                    self.send_stripe(op, to, seq.0, dtype, kind, ch, &data[part], deadline)?;
                }
            }
            if let Some((from, buf, mode)) = recv {
                let wait = Wait::Spin;
                let how = (dtype, traffic, kind, wait);
                self.recv_stripes(op, from, seq.1, how, buf, mode, deadline)?;
            }
            return Ok(());
        }
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            if let Some((to, data)) = send {
                let n = lanes(self.peer(to, op)?.links.len(), data.len(), traffic);
                for (ch, part) in stripes(data.len(), n, elem).into_iter().enumerate() {
                    let d = &data[part];
                    handles.push(scope.spawn(move || {
                        self.send_stripe(op, to, seq.0, dtype, kind, ch, d, deadline)
                    }));
                }
            }
            // Receive every stripe on this thread, in channel order: the senders run on
            // their own threads, so a stripe waiting in its socket buffer never blocks
            // another channel's sender, and no receive thread needs spawning.
            let mut result = match recv {
                Some((from, buf, mode)) => {
                    let how = (dtype, traffic, kind, Wait::Block);
                    self.recv_stripes(op, from, seq.1, how, buf, mode, deadline)
                }
                None => Ok(()),
            };
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(CollError::new(
                        HcclCode::Internal,
                        op,
                        None,
                        "transfer thread panicked",
                    ))
                });
                if result.is_ok() {
                    result = r;
                }
            }
            result
        })
    }

    /// Receives a transfer from `from` on this thread, stripe by stripe in channel order.
    #[allow(clippy::too_many_arguments)]
    fn recv_stripes(
        &self,
        op: &str,
        from: usize,
        seq: u64,
        (dtype, traffic, kind, wait): (DataType, Traffic, Kind, Wait),
        buf: &mut [u8],
        mode: RecvMode<'_>,
        deadline: Instant,
    ) -> CollResult<()> {
        let n = lanes(self.peer(from, op)?.links.len(), buf.len(), traffic);
        let mut rest = buf;
        for (ch, part) in stripes(rest.len(), n, dtype.size()).into_iter().enumerate() {
            let (head, tail) = rest.split_at_mut(part.len());
            rest = tail;
            let m = mode.narrow(part);
            let at = Expect {
                from,
                seq,
                dtype,
                kind,
                ch,
            };
            self.recv_stripe(op, at, head, m, wait, deadline)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn send_stripe(
        &self,
        op: &str,
        to: usize,
        seq: u64,
        dtype: DataType,
        kind: Kind,
        ch: usize,
        data: &[u8],
        deadline: Instant,
    ) -> CollResult<()> {
        let peer = self.peer(to, op)?;
        let link = &peer.links[ch];
        let s = &link.stream;
        let chunk = self.chunk_bytes(dtype);
        for (i, part) in data.chunks(chunk).enumerate() {
            if let Some(sh) = &peer.shaper {
                self.shape(sh, part.len(), to, op, deadline)?;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(io_error(op, to, &ErrorKind::TimedOut.into(), true));
            }
            ensure_timeout(&link.timeouts, s, false, remaining)
                .map_err(|e| io_error(op, to, &e, false))?;
            let h = Header {
                kind,
                dtype: dtype.code(),
                comm_id: self.cfg.comm_id,
                seq,
                len: part.len() as u32,
                chunk: i as u32,
            };
            // Header, payload and tag in one call: a small frame is one TCP segment and
            // one wake-up at the receiver, and no payload is copied in user space. Every
            // frame takes a number, tagged or not, so both ends count alike.
            let head = h.encode();
            let counter = link.tx.claim();
            let written = if kind.tagged() {
                let tag = seal::tag(link.tx.key(), counter, &head, part);
                let mut bufs = [IoSlice::new(&head), IoSlice::new(part), IoSlice::new(&tag)];
                write_all_vectored(s, &mut bufs)
            } else {
                write_all_vectored(s, &mut [IoSlice::new(&head), IoSlice::new(part)])
            };
            written.map_err(|e| io_error(op, to, &e, false))?;
        }
        Ok(())
    }

    fn shape(
        &self,
        sh: &Mutex<Shaper>,
        len: usize,
        to: usize,
        op: &str,
        deadline: Instant,
    ) -> CollResult<()> {
        let wait = {
            let mut g = sh.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(limit) = g.spec.drop_after_bytes
                && g.sent + len as u64 > limit
            {
                drop(g);
                if let Some(p) = self.peers[to].as_ref() {
                    for l in &p.links {
                        let _ = l.stream.shutdown(Shutdown::Both);
                    }
                }
                return Err(CollError::new(
                    HcclCode::TcpTransfer,
                    op,
                    Some(to),
                    format!("fault injection: connection dropped after {limit} bytes"),
                ));
            }
            g.sent += len as u64;
            let now = Instant::now();
            let start = g.next_free.max(now) + g.spec.delay;
            let busy = g.spec.rate_bytes_per_sec.map_or(Duration::ZERO, |r| {
                Duration::from_secs_f64(len as f64 / r.max(1.0))
            });
            g.next_free = start + busy;
            g.next_free.saturating_duration_since(now)
        };
        if Instant::now() + wait > deadline {
            return Err(io_error(op, to, &ErrorKind::TimedOut.into(), true));
        }
        std::thread::sleep(wait);
        Ok(())
    }

    fn chunk_bytes(&self, dtype: DataType) -> usize {
        let e = dtype.size();
        (self.cfg.chunk_bytes.min(self.cfg.max_frame) / e).max(1) * e
    }

    /// Receives one stripe from `at.from` on channel `at.ch`, chunk by chunk, checking
    /// every header (its length before anything else) and every tag, and landing the
    /// payload as `mode` says. A tagged payload is checked before it is reduced; a copied
    /// one lands in the destination first (the operation fails if its tag does not match,
    /// and the destination is then undefined, as after any failure).
    fn recv_stripe(
        &self,
        op: &str,
        at: Expect,
        buf: &mut [u8],
        mode: RecvMode<'_>,
        wait: Wait,
        deadline: Instant,
    ) -> CollResult<()> {
        let Expect {
            from,
            seq,
            dtype,
            kind,
            ch,
        } = at;
        let peer = self.peer(from, op)?;
        let link = &peer.links[ch];
        let chunk = self.chunk_bytes(dtype);
        let tag_len = if kind.tagged() { TAG_LEN } else { 0 };
        let io = |e: std::io::Error| io_error(op, from, &e, false);
        // Reused across calls on this thread: a fresh zeroed buffer per stripe cost a
        // memset of up to a chunk each time.
        RECV_BUFFERS.with_borrow_mut(|(scratch, small)| {
            if matches!(mode, RecvMode::Reduce(_) | RecvMode::ReduceFrom(..)) {
                scratch.resize(chunk.min(buf.len()).max(scratch.len()), 0);
            }
            let s = &link.stream;
            for (i, dst) in buf.chunks_mut(chunk).enumerate() {
                let at = i * chunk;
                let mode = mode.narrow(at..at + dst.len());
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err(io_error(op, from, &ErrorKind::TimedOut.into(), true));
                }
                ensure_timeout(&link.timeouts, s, true, remaining).map_err(io)?;
                let mut hb = [0u8; HEADER_LEN];
                // A small frame usually arrives whole, so it is read with one call into a
                // buffer sized by what this rank expects (never by what the peer announces);
                // the header is checked as soon as its 32 bytes are in, before waiting for
                // or using the payload.
                let combined = dst.len() <= COMBINE_MAX;
                let mut have = 0;
                if combined {
                    small.resize(HEADER_LEN + dst.len() + tag_len, 0);
                    have = read_at_least(s, small, HEADER_LEN, wait).map_err(io)?;
                    hb.copy_from_slice(&small[..HEADER_LEN]);
                } else {
                    read_exact(s, &mut hb, wait).map_err(io)?;
                }
                let counter = link.rx.claim();
                let want = Header {
                    kind,
                    dtype: dtype.code(),
                    comm_id: self.cfg.comm_id,
                    seq,
                    len: dst.len() as u32,
                    chunk: i as u32,
                };
                if let Ok(h) = Header::decode(&hb)
                    && h.kind == Kind::Abort
                    && h.comm_id == self.cfg.comm_id
                {
                    let already = if combined {
                        &small[HEADER_LEN..have]
                    } else {
                        &[][..]
                    };
                    let notice = Notice {
                        header: &hb,
                        len: h.len as usize,
                        counter,
                        already,
                    };
                    return Err(self.read_abort(link, from, ch, op, notice));
                }
                Header::decode(&hb)
                    .and_then(|h| h.expect(&want, self.cfg.max_frame))
                    .map_err(|m| {
                        CollError::new(
                            HcclCode::TcpTransfer,
                            op,
                            Some(from),
                            format!("bad frame: {m}"),
                        )
                    })?;
                let check = |payload: &[u8], tag: &[u8]| {
                    if tag_len == 0 || seal::verify(link.rx.key(), counter, &hb, payload, tag) {
                        Ok(())
                    } else {
                        Err(forged(op, from, ch, &link.stream))
                    }
                };
                if combined {
                    if have < small.len() {
                        read_exact(s, &mut small[have..], Wait::Block).map_err(io)?;
                    }
                    let (payload, tag) = small[HEADER_LEN..].split_at(dst.len());
                    check(payload, tag)?;
                    match mode {
                        RecvMode::Copy => dst.copy_from_slice(payload),
                        RecvMode::Reduce(rop) => reduce_into(rop, dtype, dst, payload),
                        RecvMode::ReduceFrom(rop, src) => {
                            reduce_apart(rop, dtype, dst, src, payload)
                        }
                    }
                    continue;
                }
                let mut tag = [0u8; TAG_LEN];
                let tag = &mut tag[..tag_len];
                match mode {
                    RecvMode::Copy => {
                        read_exact(s, dst, Wait::Block).map_err(io)?;
                        read_exact(s, tag, Wait::Block).map_err(io)?;
                        check(dst, tag)?;
                    }
                    // The same operand order as `Reduce` (own value first), so max and min
                    // treat NaN and signed zeros identically in and out of place.
                    RecvMode::ReduceFrom(rop, src) => {
                        let tmp = &mut scratch[..dst.len()];
                        read_exact(s, tmp, Wait::Block).map_err(io)?;
                        read_exact(s, tag, Wait::Block).map_err(io)?;
                        check(tmp, tag)?;
                        reduce_apart(rop, dtype, dst, src, tmp);
                    }
                    RecvMode::Reduce(rop) => {
                        let tmp = &mut scratch[..dst.len()];
                        read_exact(s, tmp, Wait::Block).map_err(io)?;
                        read_exact(s, tag, Wait::Block).map_err(io)?;
                        check(tmp, tag)?;
                        reduce_into(rop, dtype, dst, tmp);
                    }
                }
            }
            Ok(())
        })
    }

    /// Reads an abort frame's message and tag (part of which may already be in
    /// `n.already`) and turns it into the `HCCL_E_REMOTE` error the operation returns,
    /// or into an authentication failure if its tag does not match. Its announced length
    /// is checked before anything is read.
    fn read_abort(
        &self,
        link: &Link,
        from: usize,
        ch: usize,
        op: &str,
        n: Notice<'_>,
    ) -> CollError {
        if n.len > ABORT_MAX {
            return CollError::new(
                HcclCode::TcpTransfer,
                op,
                Some(from),
                format!(
                    "bad frame: abort notice of {} bytes exceeds the maximum {ABORT_MAX}",
                    n.len
                ),
            );
        }
        let mut frame = [0u8; ABORT_MAX + TAG_LEN];
        let frame = &mut frame[..n.len + TAG_LEN];
        let have = n.already.len().min(frame.len());
        frame[..have].copy_from_slice(&n.already[..have]);
        if have < frame.len() {
            // The rest is in flight or never comes: wait briefly, not for the op deadline.
            let _ = link
                .stream
                .set_read_timeout(Some(Duration::from_millis(200)));
            if let Err(e) = (&link.stream).read_exact(&mut frame[have..]) {
                return io_error(op, from, &e, false);
            }
        }
        let (msg, tag) = frame.split_at(n.len);
        if !seal::verify(link.rx.key(), n.counter, n.header, msg, tag) {
            return forged(op, from, ch, &link.stream);
        }
        CollError::new(
            HcclCode::Remote,
            op,
            Some(from),
            format!(
                "peer rank {from} aborted the operation: {}",
                String::from_utf8_lossy(msg)
            ),
        )
    }
}

/// What a receive expects of the frames of one stripe.
#[derive(Debug, Clone, Copy)]
struct Expect {
    from: usize,
    seq: u64,
    dtype: DataType,
    kind: Kind,
    ch: usize,
}

/// An abort frame whose header has been read.
struct Notice<'a> {
    header: &'a [u8; HEADER_LEN],
    len: usize,
    counter: u64,
    already: &'a [u8],
}

/// The error for a frame whose tag does not match: forged, altered, replayed, reordered,
/// or copied from another connection. The operation fails, which shuts every connection
/// of the communicator down; the process carries on.
fn forged(op: &str, from: usize, ch: usize, s: &TcpStream) -> CollError {
    let addr = s
        .peer_addr()
        .map_or_else(|_| "unknown address".to_string(), |a| a.to_string());
    tracing::warn!(peer = from, %addr, channel = ch, "frame failed authentication; dropping the connection");
    CollError::new(
        HcclCode::TcpTransfer,
        op,
        Some(from),
        format!(
            "frame from rank {from} ({addr}, channel {ch}) failed authentication \
             (forged, altered, replayed or out of order); connection dropped"
        ),
    )
}

/// How a receive waits for the header of its next frame. The rest of a frame that has
/// started arriving is always read blocking: it is already in flight, and polling a
/// socket the sender is filling only contends for its lock (interleaved A/B runs: 64 MiB
/// point-to-point 4.7 → 5.4 GB/s, 8 B at 4 ranks 27 → 21 µs against polling every read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Poll without blocking for up to [`SPIN`] (yielding the CPU between polls), then
    /// block. Waiting for a message a few microseconds away is mostly scheduler latency:
    /// a sleep and a wake-up cost more than the transfer. Only for receives with no helper
    /// thread of this rank waiting for the CPU.
    Spin,
    /// Block in `read` at once (helper threads are sending and need the CPU).
    Block,
}

thread_local! {
    /// Reduction scratch and small-frame buffer of the receiving thread.
    static RECV_BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Writes every byte of `bufs`, in as few calls as the socket allows.
fn write_all_vectored(mut s: &TcpStream, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !bufs.is_empty() {
        match s.write_vectored(bufs) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads at least one byte into `buf` (0 at end of stream). `MSG_DONTWAIT` makes a poll
/// non-blocking without switching the socket's mode, which would cost two more system
/// calls per receive.
fn read_some(mut s: &TcpStream, buf: &mut [u8], wait: Wait) -> std::io::Result<usize> {
    if wait == Wait::Spin {
        let start = Instant::now();
        loop {
            match rustix::net::recv(s, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((n, _)) => return Ok(n),
                Err(rustix::io::Errno::AGAIN) if start.elapsed() < SPIN => {
                    std::thread::yield_now();
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    s.read(buf)
}

/// Reads into `buf` until at least `min` bytes are in; returns how many are.
fn read_at_least(s: &TcpStream, buf: &mut [u8], min: usize, wait: Wait) -> std::io::Result<usize> {
    let mut have = 0;
    while have < min {
        match read_some(s, &mut buf[have..], wait) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(have)
}

/// Fills `buf`, waiting as `wait` says for each part.
fn read_exact(s: &TcpStream, buf: &mut [u8], wait: Wait) -> std::io::Result<()> {
    read_at_least(s, buf, buf.len(), wait).map(|_| ())
}

/// Closes a connection so that what was written to it is delivered first: FIN after the
/// data, unread bytes drained (a close with unread bytes resets the connection and drops
/// our unsent data), then a close that lingers until the peer acknowledged everything (at
/// most a second: `SO_LINGER` counts whole seconds, and 0 would mean "reset").
fn close_after_delivery(s: TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
    let _ = s.set_nonblocking(true);
    let mut sink = [0u8; 4096];
    loop {
        match (&s).read(&mut sink) {
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    let _ = s.set_nonblocking(false);
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::from_secs(1)));
    drop(s);
}

/// Splits `len` bytes into `n` contiguous ranges aligned to `elem`, as even as possible.
pub fn stripes(len: usize, n: usize, elem: usize) -> Vec<std::ops::Range<usize>> {
    let elems = len / elem;
    let n = n.max(1).min(elems.max(1));
    let (base, extra) = (elems / n, elems % n);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let size = (base + usize::from(i < extra)) * elem;
        out.push(start..start + size);
        start += size;
    }
    out
}

fn connect_one(
    addr: SocketAddr,
    rank: usize,
    peer: usize,
    ch: usize,
    cfg: &TransportConfig,
    deadline: Instant,
) -> CollResult<Link> {
    let op = "init: connect";
    // Each attempt waits this long for the SYN to be answered, doubling every four
    // unanswered attempts up to 2 s (for links slower than that). A listener whose accept
    // queue is full (a flood before its owner started accepting) drops SYNs, and the
    // kernel would retransmit only after 1 s, then 3 s: a fresh attempt sooner gets in as
    // soon as the queue drains.
    let mut attempt_timeout = Duration::from_millis(250);
    let mut unanswered = 0u32;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(CollError::new(
                HcclCode::TcpConnect,
                op,
                Some(peer),
                format!(
                    "could not connect to {addr} within the connect timeout ({:?})",
                    cfg.connect_timeout
                ),
            ));
        }
        let attempt = (|| -> std::io::Result<TcpStream> {
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::STREAM,
                None,
            )?;
            if let Some(dev) = &cfg.bind_device {
                sock.bind_device(Some(dev.as_bytes()))?;
            }
            sock.connect_timeout(&addr.into(), remaining.min(attempt_timeout))?;
            let s: TcpStream = sock.into();
            // Connecting to a port nobody listens on can connect the socket to itself when
            // the kernel picks that very port as the source (TCP simultaneous open on the
            // same address). It would then "handshake" with its own hello: treat it as the
            // refusal it really is.
            if s.local_addr().ok() == s.peer_addr().ok() {
                return Err(ErrorKind::ConnectionRefused.into());
            }
            Ok(s)
        })();
        match attempt {
            Ok(mut s) => {
                tune(&s, cfg).map_err(|e| {
                    CollError::new(HcclCode::TcpConnect, op, Some(peer), e.to_string())
                })?;
                let _ = s.set_read_timeout(Some(remaining));
                let _ = s.set_write_timeout(Some(remaining));
                let me = auth::Hello {
                    comm_id: cfg.comm_id,
                    rank: rank as u32,
                    channel: ch as u32,
                };
                match auth::connect(&mut s, &cfg.key, me) {
                    Ok(session) => {
                        let _ = s.set_read_timeout(None);
                        let _ = s.set_write_timeout(None);
                        return Ok(Link::new(s, session));
                    }
                    // The acceptor dropped the connection before answering: it was shedding
                    // handshakes under a flood (see `accept`), or restarting. Try again.
                    Err(auth::AuthError::Read(e) | auth::AuthError::Write(e))
                        if matches!(
                            e.kind(),
                            ErrorKind::UnexpectedEof
                                | ErrorKind::ConnectionReset
                                | ErrorKind::BrokenPipe
                                | ErrorKind::ConnectionAborted
                        ) =>
                    {
                        tracing::debug!(peer, %addr, "handshake cut short ({e}); retrying");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(m) => {
                        return Err(CollError::new(
                            HcclCode::TcpConnect,
                            op,
                            Some(peer),
                            format!("handshake with {addr} failed: {m}"),
                        ));
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionRefused | ErrorKind::TimedOut | ErrorKind::WouldBlock
                ) =>
            {
                // The peer is not listening yet, or its queue is full; retry until the
                // deadline.
                if e.kind() != ErrorKind::ConnectionRefused {
                    unanswered += 1;
                    if unanswered.is_multiple_of(4) {
                        attempt_timeout = (attempt_timeout * 2).min(Duration::from_secs(2));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(CollError::new(
                    HcclCode::TcpConnect,
                    op,
                    Some(peer),
                    format!("connect to {addr}: {e}"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stripes_cover_exactly_and_align(elems in 0usize..10_000, n in 1usize..9, esize in prop::sample::select(vec![1usize, 2, 4, 8])) {
            let len = elems * esize;
            let s = stripes(len, n, esize);
            prop_assert!(!s.is_empty() && s.len() <= n);
            let mut pos = 0;
            for r in &s {
                prop_assert_eq!(r.start, pos);
                prop_assert_eq!(r.len() % esize, 0);
                pos = r.end;
            }
            prop_assert_eq!(pos, len);
            let sizes: Vec<usize> = s.iter().map(|r| r.len()).collect();
            let (mn, mx) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(mx - mn <= esize);
        }

        #[test]
        fn striped_transfers_give_every_stripe_its_minimum(
            len in 0usize..(16 << 20),
            streams in 1usize..9,
            esize in prop::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            let len = len / esize * esize;
            let n = lanes(streams, len, Traffic::Collective);
            prop_assert!((1..=streams).contains(&n));
            let s = stripes(len, n, esize);
            if s.len() > 1 {
                for r in &s {
                    prop_assert!(r.len() + esize > STRIPE_MIN, "{} of {len}", r.len());
                }
            }
            // Not striped only where one more stripe would be under the minimum.
            if n < streams {
                prop_assert!(len < (n + 1) * STRIPE_MIN);
            }
        }
    }

    #[test]
    fn lanes_by_size_and_kind() {
        let coll = |len| lanes(4, len, Traffic::Collective);
        assert_eq!(coll(0), 1);
        assert_eq!(coll(128 << 10), 1);
        assert_eq!(coll((512 << 10) - 4), 1);
        assert_eq!(coll(512 << 10), 2);
        assert_eq!(coll(768 << 10), 3);
        assert_eq!(coll(1 << 20), 4);
        assert_eq!(coll(64 << 20), 4);
        let p2p = |len| lanes(4, len, Traffic::PointToPoint);
        assert_eq!(p2p(1 << 20), 4);
        assert_eq!(p2p(STRIPE_MAX), 4);
        assert_eq!(p2p(STRIPE_MAX + 4), 1);
    }
}
