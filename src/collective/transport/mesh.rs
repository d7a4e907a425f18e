//! Forming the mesh: every rank connects to the ranks below it (`channels` connections
//! each) while accepting from the ranks above it ([`super::accept`]), proves the key on
//! every connection ([`super::auth`]) and tunes the sockets.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::seal::Session;
use super::shape::Shaper;
use super::stripe::INLINE_FLOOR;
use super::{Link, Mesh, Peer, TransportConfig, accept, auth, wire};
use crate::collective::error::{CollError, CollResult, HcclCode};

/// The links this rank opened, by peer: `(peer, links in channel order)`.
type Connected = Vec<(usize, Vec<Link>)>;

/// The connections this rank accepted: `(peer, channel, socket, session)`.
type Accepted = Vec<(usize, usize, TcpStream, Session)>;

/// Where a rank is and what it connects with: the part of [`Mesh::establish`]'s input the
/// connecting and accepting threads share.
struct Formation<'a> {
    listener: &'a TcpListener,
    rank: usize,
    addrs: &'a [SocketAddr],
    cfg: &'a TransportConfig,
    deadline: Instant,
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
        let formation = Formation {
            listener,
            rank,
            addrs,
            cfg: &cfg,
            deadline: Instant::now() + cfg.connect_timeout,
        };
        let (accepted, connected) = formation.connect_and_accept();
        let peers = assemble(world, &cfg, connected?, accepted?);
        let inline_max = peers
            .iter()
            .flatten()
            .flat_map(|p: &Peer| p.links.iter())
            .filter_map(|l| socket2::SockRef::from(&l.stream).send_buffer_size().ok())
            .min()
            .map_or(INLINE_FLOOR, |b| (b / 2).clamp(INLINE_FLOOR, 4 << 20));
        let version = agreed_version(&peers);
        Ok(Mesh {
            version,
            inline_max,
            rank,
            world,
            peers,
            send_seq: Mutex::new(vec![0; world]),
            recv_seq: Mutex::new(vec![0; world]),
            cfg,
        })
    }
}

impl Formation<'_> {
    /// Accepts from the higher ranks on a thread of its own while connecting to the lower
    /// ones on this one. Returns (accepted, connected).
    fn connect_and_accept(&self) -> (CollResult<Accepted>, CollResult<Connected>) {
        let (rank, world, channels) = (self.rank, self.addrs.len(), self.cfg.channels);
        let expected = (world - rank - 1) * channels;
        // Set when this rank's own connecting fails, so the acceptor stops waiting.
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let want = accept::Want {
                rank,
                world,
                channels,
                expected,
            };
            let (listener, cfg, deadline, stop) = (self.listener, self.cfg, self.deadline, &stop);
            let acceptor =
                scope.spawn(move || accept::accept_all(listener, want, cfg, deadline, stop));
            let mut out = Vec::new();
            for (peer, addr) in self.addrs.iter().enumerate().take(rank) {
                let mut chans = Vec::new();
                for ch in 0..channels {
                    match connect_one(*addr, rank, peer, ch, cfg, deadline) {
                        Ok(link) => chans.push(link),
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
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
        })
    }
}

/// The highest wire version every member speaks: the lowest of what this rank agreed with
/// each peer (every handshake already refused a peer without a common version).
fn agreed_version(peers: &[Option<Peer>]) -> u8 {
    peers
        .iter()
        .flatten()
        .flat_map(|p| p.links.iter())
        .map(|l| wire::negotiate(l.peer_wire).unwrap_or(wire::Range::OURS.min))
        .min()
        .unwrap_or(wire::Range::OURS.max)
}

/// Every peer's links in channel order, with its fault injection.
fn assemble(
    world: usize,
    cfg: &TransportConfig,
    connected: Connected,
    accepted: Accepted,
) -> Vec<Option<Peer>> {
    let channels = cfg.channels;
    let mut peers: Vec<Option<Vec<Option<Link>>>> = (0..world).map(|_| None).collect();
    for (peer, chans) in connected {
        peers[peer] = Some(chans.into_iter().map(Some).collect());
    }
    for (peer, ch, s, session) in accepted {
        let slot = peers[peer].get_or_insert_with(|| (0..channels).map(|_| None).collect());
        slot[ch] = Some(Link::new(s, session));
    }
    peers
        .into_iter()
        .enumerate()
        .map(|(p, chans)| {
            chans.map(|c| Peer {
                links: c.into_iter().flatten().collect(),
                shaper: cfg
                    .faults
                    .get(&p)
                    .map(|spec| Mutex::new(Shaper::new(spec.clone()))),
            })
        })
        .collect()
}

/// Disables Nagle, sets the buffer sizes, keepalive and the traffic class.
pub(super) fn tune(s: &TcpStream, cfg: &TransportConfig) -> std::io::Result<()> {
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

/// One attempt to open a TCP connection to `addr`, waiting at most `wait` for the answer.
fn dial(addr: SocketAddr, cfg: &TransportConfig, wait: Duration) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(dev) = &cfg.bind_device {
        sock.bind_device(Some(dev.as_bytes()))?;
    }
    sock.connect_timeout(&addr.into(), wait)?;
    let s: TcpStream = sock.into();
    // Connecting to a port nobody listens on can connect the socket to itself when
    // the kernel picks that very port as the source (TCP simultaneous open on the
    // same address). It would then "handshake" with its own hello: treat it as the
    // refusal it really is.
    if s.local_addr().ok() == s.peer_addr().ok() {
        return Err(ErrorKind::ConnectionRefused.into());
    }
    Ok(s)
}

/// One connection to open: where, to which rank, and the hello that introduces this end.
#[derive(Debug, Clone, Copy)]
struct Target {
    addr: SocketAddr,
    peer: usize,
    me: auth::Hello,
}

/// Opens and authenticates connection `ch` to rank `peer` at `addr`, retrying until
/// `deadline` while the peer is not listening yet, its accept queue is full, or it cut a
/// handshake short.
fn connect_one(
    addr: SocketAddr,
    rank: usize,
    peer: usize,
    ch: usize,
    cfg: &TransportConfig,
    deadline: Instant,
) -> CollResult<Link> {
    let op = "init: connect";
    let me = auth::Hello {
        comm_id: cfg.comm_id,
        rank: rank as u32,
        channel: ch as u32,
    };
    let target = Target { addr, peer, me };
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
        match dial(addr, cfg, remaining.min(attempt_timeout)) {
            Ok(s) => {
                if let Some(link) = handshake(s, target, cfg, remaining)? {
                    return Ok(link);
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

/// Proves the key on a fresh connection: the link, `None` when the acceptor cut the
/// handshake short (try again), or the error that ends the attempt.
fn handshake(
    mut s: TcpStream,
    target: Target,
    cfg: &TransportConfig,
    remaining: Duration,
) -> CollResult<Option<Link>> {
    let op = "init: connect";
    let Target { addr, peer, me } = target;
    tune(&s, cfg)
        .map_err(|e| CollError::new(HcclCode::TcpConnect, op, Some(peer), e.to_string()))?;
    let _ = s.set_read_timeout(Some(remaining));
    let _ = s.set_write_timeout(Some(remaining));
    match auth::connect(&mut s, &cfg.key, me) {
        Ok(session) => {
            let _ = s.set_read_timeout(None);
            let _ = s.set_write_timeout(None);
            Ok(Some(Link::new(s, session)))
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
            Ok(None)
        }
        Err(m) => Err(CollError::new(
            HcclCode::TcpConnect,
            op,
            Some(peer),
            format!("handshake with {addr} failed: {m}"),
        )),
    }
}
