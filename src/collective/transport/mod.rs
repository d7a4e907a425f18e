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
//!
//! The parts: this file holds the settings and the [`Mesh`] itself; `mesh` forms it
//! (connect, accept, tune the sockets), `stripe` is the data path (segments, stripes and
//! frames of one [`Transfer`]), `rawio` the socket reads and writes under it, `shape` the
//! fault injection toward a peer, `notice` the abort and leave notices, and [`wire`] the
//! wire versions the members agree on (the highest every member speaks).

pub(crate) mod accept;
pub mod auth;
pub mod frame;
mod mesh;
mod notice;
mod rawio;
pub mod seal;
mod shape;
mod stripe;
pub mod wire;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use self::accept::{HandshakeStats, RejectReason};
pub use self::frame::Payload;
pub use self::stripe::{
    INLINE_FLOOR, RecvMode, SEGMENT, STRIPE_MAX, STRIPE_MIN, Traffic, Transfer, stripes,
};

use self::rawio::Timeouts;
use self::seal::{Direction, Session};
use self::shape::Shaper;
use super::error::{CollError, CollResult, HcclCode};

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
/// point-to-point ones up to [`STRIPE_MAX`], are striped, and there several sockets let
/// the kernel work on one exchange in parallel and keep each socket's queue short.
/// Measured on the 2-core reference machine (five interleaved rounds, median busbw):
/// 2-rank all-reduce at 1 / 2 / 4 MiB 1.64 / 2.59 / 2.16 GB/s with two channels,
/// 2.07 / 3.18 / 3.30 with four; 4 ranks at 2 / 4 MiB 1.20 / 1.10 against 1.76 / 1.32; no
/// loss at other sizes. (An earlier default of one per CPU assumed more streams than
/// cores only add contention; they do not, here.)
pub fn default_channels() -> usize {
    4
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
    timeouts: Timeouts,
    /// The wire versions the peer said in the handshake.
    peer_wire: wire::Range,
}

impl Link {
    fn new(stream: TcpStream, session: Session) -> Self {
        Self {
            peer_wire: session.peer,
            stream,
            tx: Direction::new(session.send),
            rx: Direction::new(session.recv),
            timeouts: Mutex::new((None, None)),
        }
    }
}

/// The connections to one peer, and the fault injection toward it.
#[derive(Debug)]
struct Peer {
    links: Vec<Link>,
    shaper: Option<Mutex<Shaper>>,
}

impl Peer {
    /// Shuts every connection to this peer down.
    fn shut_down(&self) {
        for l in &self.links {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
    }
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
    /// The wire version every frame of this mesh carries: the highest every member speaks.
    version: u8,
}

impl Mesh {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// World size.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The wire version this mesh speaks: the highest every member supports. Each rank
    /// reads every other rank's range in its own handshakes, so every rank of a full mesh
    /// works out the same one.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The ranks whose builds speak no version as high as `v` (what they said in their
    /// handshakes), lowest first.
    pub fn peers_below(&self, v: u8) -> Vec<usize> {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.as_ref()
                    .is_some_and(|p| p.links.iter().any(|l| l.peer_wire.max < v))
            })
            .map(|(r, _)| r)
            .collect()
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
            p.shut_down();
        }
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

/// The error for a deadline that passed between frames.
fn timed_out(op: &str, peer: usize) -> CollError {
    io_error(op, peer, &ErrorKind::TimedOut.into(), true)
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
