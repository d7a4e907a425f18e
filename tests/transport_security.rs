//! The collective transport under attack, over real TCP on loopback: frames forged,
//! altered or replayed after a valid handshake; lengths no receiver should allocate; a
//! keyless flood of the listening port while a group forms; and a leave notice that must
//! be delivered before `leave` returns.
//!
//! The attacker is a raw TCP client. Where it plays a member it speaks the handshake with
//! the key (`auth::connect`) and writes frames by hand: the engine's public wire types
//! (`frame::Header`, `seal::tag`) are what a peer of another implementation would use.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hcclwatch::collective::transport::frame::{self, Header, Kind};
use hcclwatch::collective::transport::seal::{self, Session};
use hcclwatch::collective::transport::{RejectReason, TransportConfig, auth};
use hcclwatch::collective::{CollError, CommConfig, Communicator, DataType, HcclCode, ReduceOp};

const KEY: &[u8] = b"transport-security-test-key";

fn config(comm_id: u64, channels: usize) -> CommConfig {
    let mut t = TransportConfig::new(comm_id, KEY.to_vec());
    t.connect_timeout = Duration::from_secs(10);
    t.channels = channels;
    let mut c = CommConfig::new(t);
    c.exec_timeout = Duration::from_secs(10);
    c.measure_costs = false;
    // The raw peer plays the handshake and frames by hand, not the signing-key hand-over
    // that wire version 4 adds when a communicator forms; this file's subject is the frames.
    c.sign_gathers = false;
    c
}

fn listeners(n: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    (ls, addrs)
}

/// How the raw peer tags a frame.
#[derive(Debug, Clone, Copy)]
enum Tag {
    /// The right tag for the frame's position.
    Right,
    /// A tag computed as if the frame were the one numbered `n` (a replay or reorder).
    At(u64),
    /// A tag under a key the peer does not hold (a forger without the session key).
    Forged,
    /// No tag at all.
    Absent,
}

/// A member played by hand: rank 1 of a 2-rank communicator whose rank 0 is real.
struct RawPeer {
    links: Vec<(TcpStream, Session, u64)>,
    comm_id: u64,
}

impl RawPeer {
    /// Connects `channels` times to rank 0 at `addr` and completes each handshake.
    fn join(addr: SocketAddr, comm_id: u64, channels: usize) -> RawPeer {
        let links = (0..channels)
            .map(|ch| {
                let mut s = connect_retrying(addr);
                let hello = auth::Hello {
                    comm_id,
                    rank: 1,
                    channel: ch as u32,
                };
                let session = auth::connect(&mut s, KEY, hello).expect("handshake with the key");
                (s, session, 0)
            })
            .collect();
        RawPeer { links, comm_id }
    }

    /// The bytes of one frame on channel `ch`, taking that channel's next number.
    fn frame(
        &mut self,
        ch: usize,
        kind: Kind,
        dtype: DataType,
        seq: u64,
        payload: &[u8],
        tag: Tag,
    ) -> Vec<u8> {
        let head = Header {
            // Both ends are this build: the mesh speaks its highest version.
            version: frame::VERSION,
            kind,
            dtype: dtype.code(),
            comm_id: self.comm_id,
            seq,
            len: payload.len() as u32,
            chunk: 0,
        }
        .encode();
        let (_, session, next) = &mut self.links[ch];
        let n = *next;
        *next += 1;
        let mut out = head.to_vec();
        out.extend_from_slice(payload);
        match tag {
            Tag::Right => out.extend_from_slice(&seal::tag(&session.send, n, &head, payload)),
            Tag::At(m) => out.extend_from_slice(&seal::tag(&session.send, m, &head, payload)),
            Tag::Forged => {
                let other = session.recv.clone();
                out.extend_from_slice(&seal::tag(&other, n, &head, payload));
            }
            Tag::Absent => {}
        }
        out
    }

    fn send(&mut self, ch: usize, bytes: &[u8]) {
        self.links[ch].0.write_all(bytes).unwrap();
    }

    /// Whether rank 0 dropped channel `ch`: reading ends (after any abort notice) within
    /// `within`.
    fn dropped(&mut self, ch: usize, within: Duration) -> bool {
        let s = &mut self.links[ch].0;
        s.set_read_timeout(Some(within)).unwrap();
        let mut sink = Vec::new();
        match s.read_to_end(&mut sink) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

fn connect_retrying(addr: SocketAddr) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e) if Instant::now() < until => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

/// Real rank 0 of a 2-rank communicator, running `op` in a thread, and the raw rank 1.
fn rank0_against_raw<T: Send + 'static>(
    comm_id: u64,
    cfg: CommConfig,
    op: impl FnOnce(&mut Communicator) -> T + Send + 'static,
) -> (std::thread::JoinHandle<(T, Communicator)>, RawPeer) {
    let (mut ls, addrs) = listeners(2);
    let l0 = ls.remove(0);
    let channels = cfg.transport.channels;
    let a0 = addrs.clone();
    let real = std::thread::spawn(move || {
        let mut c = Communicator::init(l0, 0, a0, cfg).expect("rank 0 forms");
        let r = op(&mut c);
        (r, c)
    });
    let raw = RawPeer::join(addrs[0], comm_id, channels);
    (real, raw)
}

fn assert_auth_failure(e: &CollError, ch: usize) {
    assert_eq!(e.code, HcclCode::TcpTransfer, "{e}");
    assert_eq!(e.peer, Some(1), "the error names the peer: {e}");
    assert!(
        e.message.contains("failed authentication")
            && e.message.contains(&format!("channel {ch}"))
            && e.message.contains("connection dropped"),
        "{e}"
    );
}

#[test]
fn a_forged_or_altered_control_frame_after_a_valid_handshake_is_rejected() {
    // An untagged frame of the kind today's wire carries, a tag under the wrong key, and a
    // right tag over a payload altered after tagging: each must fail the receive (today
    // the first was accepted and its payload used).
    for (case, tag, alter) in [
        ("untagged", Tag::Absent, false),
        ("forged tag", Tag::Forged, false),
        ("altered payload", Tag::Right, true),
    ] {
        let (real, mut raw) = rank0_against_raw(11, config(11, 1), |c| {
            let mut buf = vec![0u8; 16];
            c.recv(&mut buf, 4, DataType::Fp32, 1).map(|()| buf)
        });
        let payload = [7u8; 16];
        let kind = if matches!(tag, Tag::Absent) {
            Kind::Data
        } else {
            Kind::Control
        };
        let mut f = raw.frame(0, kind, DataType::Fp32, 1, &payload, tag);
        if alter {
            f[32 + 3] ^= 0x40;
        }
        raw.send(0, &f);
        let (r, c) = real.join().expect("rank 0 does not panic");
        let e = r.expect_err(case);
        if matches!(tag, Tag::Absent) {
            assert!(
                e.message
                    .contains("bulk payload where control payload was expected"),
                "{case}: {e}"
            );
        } else {
            assert_auth_failure(&e, 0);
        }
        assert!(c.broken().is_some(), "{case}: the communicator is broken");
        assert!(
            raw.dropped(0, Duration::from_secs(5)),
            "{case}: rank 0 dropped the connection"
        );
    }
}

#[test]
fn a_rightly_tagged_control_frame_is_accepted() {
    // The control for the test above: the same frame with its right tag is received.
    let (real, mut raw) = rank0_against_raw(12, config(12, 1), |c| {
        let mut buf = vec![0u8; 16];
        c.recv(&mut buf, 4, DataType::Fp32, 1).map(|()| buf)
    });
    let f = raw.frame(0, Kind::Control, DataType::Fp32, 1, &[9u8; 16], Tag::Right);
    raw.send(0, &f);
    let (r, _) = real.join().unwrap();
    assert_eq!(r.unwrap(), vec![9u8; 16]);
}

#[test]
fn a_replayed_frame_is_rejected() {
    // 1. Across connections: a 512 KiB receive is striped over two channels, one frame
    //    each, with identical headers; the frame sent on channel 0 is replayed on channel
    //    1. Today both were accepted and stripe 0 landed twice.
    let (real, mut raw) = rank0_against_raw(13, config(13, 2), |c| {
        let mut buf = vec![0u8; 512 << 10];
        c.recv(&mut buf, 512 << 10, DataType::Uint8, 1)
    });
    let stripe = vec![0x5au8; 256 << 10];
    let f = raw.frame(0, Kind::Control, DataType::Uint8, 1, &stripe, Tag::Right);
    raw.send(0, &f);
    raw.send(1, &f);
    let (r, _) = real.join().unwrap();
    assert_auth_failure(&r.unwrap_err(), 1);

    // 2. Within a connection: the second frame carries a tag that was valid for the first
    //    position (a recorded tag replayed later, or two frames swapped).
    let (real, mut raw) = rank0_against_raw(14, config(14, 1), |c| {
        let mut buf = vec![0u8; 8];
        c.recv(&mut buf, 8, DataType::Uint8, 1)?;
        c.recv(&mut buf, 8, DataType::Uint8, 1)
    });
    let first = raw.frame(0, Kind::Control, DataType::Uint8, 1, &[1; 8], Tag::Right);
    let second = raw.frame(0, Kind::Control, DataType::Uint8, 2, &[2; 8], Tag::At(0));
    raw.send(0, &first);
    raw.send(0, &second);
    let (r, _) = real.join().unwrap();
    assert_auth_failure(&r.unwrap_err(), 0);
}

#[test]
fn lengths_from_the_wire_are_bounded_before_allocating() {
    // A member announces 2^40 and then 2^63 bytes for a broadcast. Allocating either
    // aborts or panics the process; the bounded receive refuses both, naming the sender.
    for announced in [1u64 << 40, 1u64 << 63] {
        let (real, mut raw) =
            rank0_against_raw(15, config(15, 1), |c| c.broadcast_bytes(&[], 1, 1 << 20));
        let f = raw.frame(
            0,
            Kind::Control,
            DataType::Uint64,
            1,
            &announced.to_le_bytes(),
            Tag::Right,
        );
        raw.send(0, &f);
        let started = Instant::now();
        let (r, c) = real.join().expect("no panic");
        let e = r.unwrap_err();
        assert_eq!(e.code, HcclCode::Para, "{e}");
        assert_eq!(e.peer, Some(1));
        assert!(
            e.message.contains(&format!(
                "rank 1 announced {announced} bytes, more than the 1048576 accepted"
            )),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(c.broken().is_some());
    }
    // And a frame header announcing more than the frame limit is refused from the header.
    let (real, mut raw) = rank0_against_raw(16, config(16, 1), |c| {
        let mut buf = vec![0u8; 16];
        c.recv(&mut buf, 16, DataType::Uint8, 1)
    });
    let mut f = raw.frame(0, Kind::Control, DataType::Uint8, 1, &[0; 16], Tag::Right);
    f[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    raw.send(0, &f[..32]);
    let (r, _) = real.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        e.message
            .contains("frame of 4294967295 bytes exceeds the maximum"),
        "{e}"
    );
}

#[test]
fn bulk_payloads_are_tagged_only_when_switched_on() {
    // Off (the default): a bulk receive takes an untagged frame.
    let (real, mut raw) = rank0_against_raw(17, config(17, 1), |c| {
        let mut buf = vec![0u8; 8];
        c.bulk().recv(&mut buf, 8, DataType::Uint8, 1).map(|()| buf)
    });
    let f = raw.frame(0, Kind::Data, DataType::Uint8, 1, &[3; 8], Tag::Absent);
    raw.send(0, &f);
    assert_eq!(real.join().unwrap().0.unwrap(), vec![3; 8]);

    // On: the same untagged frame is refused, an altered tagged one fails its tag, and a
    // rightly tagged one is received.
    let on = || {
        let mut c = config(18, 1);
        c.transport.authenticate_payloads = true;
        c
    };
    let recv = |c: &mut Communicator| {
        let mut buf = vec![0u8; 8];
        c.bulk().recv(&mut buf, 8, DataType::Uint8, 1).map(|()| buf)
    };
    let (real, mut raw) = rank0_against_raw(18, on(), recv);
    let f = raw.frame(0, Kind::Data, DataType::Uint8, 1, &[3; 8], Tag::Absent);
    raw.send(0, &f);
    let e = real.join().unwrap().0.unwrap_err();
    assert!(
        e.message
            .contains("bulk payload where authenticated bulk payload was expected"),
        "{e}"
    );
    let (real, mut raw) = rank0_against_raw(18, on(), recv);
    let mut f = raw.frame(0, Kind::SealedData, DataType::Uint8, 1, &[3; 8], Tag::Right);
    f[33] ^= 1;
    raw.send(0, &f);
    assert_auth_failure(&real.join().unwrap().0.unwrap_err(), 0);
    let (real, mut raw) = rank0_against_raw(18, on(), recv);
    let f = raw.frame(0, Kind::SealedData, DataType::Uint8, 1, &[4; 8], Tag::Right);
    raw.send(0, &f);
    assert_eq!(real.join().unwrap().0.unwrap(), vec![4; 8]);
}

#[test]
fn authenticated_payloads_give_the_same_results() {
    // Every size class of the transfer path (inline, striped, multi-segment) with tags on
    // bulk payloads, against the sum computed here.
    let n = 3;
    let (ls, addrs) = listeners(n);
    let hs: Vec<_> = ls
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                let mut cfg = config(19, 4);
                cfg.transport.authenticate_payloads = true;
                let mut c = Communicator::init(l, r, addrs, cfg).unwrap();
                for count in [1usize, 1000, 300_000, 1_500_000] {
                    let mut buf: Vec<u8> = (0..count)
                        .flat_map(|i| ((i % 97) as f32 * (r + 1) as f32).to_le_bytes())
                        .collect();
                    c.bulk()
                        .all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum)
                        .unwrap();
                    for (i, v) in buf.chunks_exact(4).enumerate() {
                        let want = (i % 97) as f32 * 6.0; // 1 + 2 + 3
                        assert_eq!(f32::from_le_bytes(v.try_into().unwrap()), want);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn ranks_that_disagree_on_payload_authentication_fail_clearly() {
    let (ls, addrs) = listeners(2);
    let hs: Vec<_> = ls
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                let mut cfg = config(20, 1);
                cfg.transport.authenticate_payloads = r == 1;
                let mut c = Communicator::init(l, r, addrs, cfg).unwrap();
                let mut buf = vec![0u8; 64];
                c.bulk()
                    .all_reduce_in_place(&mut buf, 16, DataType::Fp32, ReduceOp::Sum)
                    .unwrap_err()
            })
        })
        .collect();
    let errs: Vec<CollError> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        errs.iter().any(|e| e
            .message
            .contains("disagree on the operation, or on authenticate_payloads")),
        "{errs:?}"
    );
}

/// A keyless attacker on the listening ports, in three manners, from the ranks' own
/// address (the hardest case: a per-source cap cannot tell it apart) and from a second
/// loopback address. Bounded: it stops when told, after `MAX_CONNECTIONS` connections per
/// thread, or after a minute.
struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

const MAX_CONNECTIONS: u64 = 50_000;

#[derive(Debug, Clone, Copy)]
enum Manner {
    /// Connect and say nothing, holding the connection.
    Silent,
    /// Connect and send bytes that are not a handshake.
    Garbage,
    /// Read the acceptor's hello, send half of a connector's message and hold.
    HalfHello,
}

impl Flood {
    /// Starts the flood and returns once it is under way: every attacker has made its
    /// first connection attempt on its target (each says so when it has).
    fn start(targets: &[SocketAddr]) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let (engaged, reports) = std::sync::mpsc::channel::<()>();
        let mut threads = Vec::new();
        for &t in targets {
            for (manner, from) in [
                (Manner::Silent, "127.0.0.1"),
                (Manner::Garbage, "127.0.0.1"),
                (Manner::HalfHello, "127.0.0.1"),
                (Manner::Silent, "127.0.0.2"),
            ] {
                let (stop, engaged) = (stop.clone(), engaged.clone());
                threads.push(std::thread::spawn(move || {
                    attack(t, manner, from, &stop, &engaged)
                }));
            }
        }
        for n in 0..threads.len() {
            if let Err(e) = reports.recv_timeout(Duration::from_secs(20)) {
                panic!("{n} of {} attackers under way: {e}", threads.len());
            }
        }
        Flood { stop, threads }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn attack(
    target: SocketAddr,
    manner: Manner,
    from: &str,
    stop: &AtomicBool,
    report: &std::sync::mpsc::Sender<()>,
) -> u64 {
    let until = Instant::now() + Duration::from_secs(60);
    let mut held: std::collections::VecDeque<TcpStream> = Default::default();
    let mut n = 0;
    let mut engaged = false;
    while !stop.load(Ordering::Relaxed) && n < MAX_CONNECTIONS && Instant::now() < until {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let src: SocketAddr = format!("{from}:0").parse().unwrap();
        if sock.bind(&src.into()).is_err() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let connected = sock.connect_timeout(&target.into(), Duration::from_millis(200));
        if !engaged {
            engaged = true;
            let _ = report.send(());
        }
        if connected.is_err() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        n += 1;
        let mut s: TcpStream = sock.into();
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        match manner {
            Manner::Silent => {}
            Manner::Garbage => {
                let _ = s.write_all(&[0xA5; 100]);
                continue;
            }
            Manner::HalfHello => {
                let mut hello = [0u8; auth::ACCEPTOR_HELLO_LEN];
                if s.read_exact(&mut hello).is_ok() {
                    let mut half = b"HCWC".to_vec();
                    half.extend_from_slice(&[0u8; 38]);
                    let _ = s.write_all(&half);
                }
            }
        }
        held.push_back(s);
        if held.len() > 64 {
            held.pop_front();
        }
    }
    n
}

#[test]
fn a_group_forms_while_a_keyless_attacker_floods_the_port() {
    // A "round" of this test: the group must form within two of them. Formation itself
    // would give up only after five (the connect timeout), so a slow formation shows as
    // a failed deadline, not as an init error.
    const ROUND: Duration = Duration::from_secs(2);
    let n = 3;
    let (ls, addrs) = listeners(n);
    // The flood is under way at every rank, in every manner, before the ranks start.
    let flood = Flood::start(&addrs);
    let stats: Vec<_> = (0..n)
        .map(|_| Arc::new(hcclwatch::collective::transport::HandshakeStats::default()))
        .collect();
    let started = Instant::now();
    let hs: Vec<_> = ls
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let addrs = addrs.clone();
            let stats = stats[r].clone();
            std::thread::spawn(move || {
                let mut cfg = config(21, 2);
                cfg.transport.connect_timeout = ROUND * 5;
                cfg.transport.handshake_timeout = Duration::from_millis(500);
                cfg.transport.stats = stats;
                let c = Communicator::init(l, r, addrs, cfg);
                (c, started.elapsed())
            })
        })
        .collect();
    let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let formed_in = results.iter().map(|(_, t)| *t).max().unwrap();
    let mut comms: Vec<Communicator> = results
        .into_iter()
        .map(|(c, _)| c.expect("every rank forms under the flood"))
        .collect();
    let attempts = flood.stop();
    eprintln!(
        "formed in {formed_in:?} under a flood of {attempts} connections; refused by rank 0: {:?}",
        stats[0].rejected_all()
    );
    assert!(
        formed_in < ROUND * 2,
        "formed in {formed_in:?}, more than two rounds ({:?}) under a flood of {attempts} connections",
        ROUND * 2
    );
    // The mesh works.
    std::thread::scope(|s| {
        for c in comms.iter_mut() {
            s.spawn(move || {
                let mut buf = 1f32.to_le_bytes().to_vec();
                c.all_reduce_in_place(&mut buf, 1, DataType::Fp32, ReduceOp::Sum)
                    .unwrap();
                assert_eq!(f32::from_le_bytes(buf.try_into().unwrap()), 3.0);
            });
        }
    });
    // Rank 0 accepts the longest (from ranks 1 and 2), so it met the flood and counted
    // what it refused (which reasons depends on timing; see the next test for each).
    let refused: u64 = stats[0].rejected_all().iter().map(|(_, n)| n).sum();
    assert!(refused > 0, "rank 0 counted no refusal");
}

/// Waits until `cond` holds, polling (the counters have no event to wait on), for at
/// most ten seconds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn refused_handshakes_are_counted_by_reason() {
    // Rank 0 waits for rank 1 while strangers try, one manner at a time; each refusal
    // shows in its own counter before the next stranger comes.
    let stats = Arc::new(hcclwatch::collective::transport::HandshakeStats::default());
    let (mut ls, addrs) = listeners(2);
    let l0 = ls.remove(0);
    let (a0, st) = (addrs.clone(), stats.clone());
    let real = std::thread::spawn(move || {
        let mut cfg = config(23, 1);
        cfg.transport.handshake_timeout = Duration::from_millis(300);
        cfg.transport.max_pending_per_source = 2;
        cfg.transport.stats = st;
        Communicator::init(l0, 0, a0, cfg)
    });
    let target = addrs[0];
    let count = |r: RejectReason| stats.rejected(r);
    // Garbage.
    let mut s = connect_retrying(target);
    s.write_all(&[0xA5; 100]).unwrap();
    eventually("bad_magic", || count(RejectReason::BadMagic) == 1);
    // Silence past the handshake timeout.
    let silent = connect_retrying(target);
    eventually("timeout", || count(RejectReason::Timeout) == 1);
    drop(silent);
    // The wrong key, and the right key in another communicator.
    let mut s = connect_retrying(target);
    let hello = auth::Hello {
        comm_id: 23,
        rank: 1,
        channel: 0,
    };
    assert!(auth::connect(&mut s, b"not the key", hello).is_err());
    eventually("bad_mac", || count(RejectReason::BadMac) == 1);
    let mut s = connect_retrying(target);
    let other = auth::Hello {
        comm_id: 99,
        ..hello
    };
    assert!(auth::connect(&mut s, KEY, other).is_err());
    eventually("wrong_comm", || count(RejectReason::WrongComm) == 1);
    // Three silent connections from one source with room for two: the oldest goes.
    let held: Vec<TcpStream> = (0..3).map(|_| connect_retrying(target)).collect();
    eventually("per_source_limit", || {
        count(RejectReason::PerSourceLimit) == 1
    });
    drop(held);
    // A member's liveness check (connect, close) is not a refusal.
    drop(connect_retrying(target));
    // Rank 1 still gets in, and nothing else was counted.
    let raw = RawPeer::join(target, 23, 1);
    let c = real.join().unwrap().expect("rank 0 forms");
    drop((c, raw));
    assert_eq!(count(RejectReason::TooManyPending), 0);
    assert_eq!(count(RejectReason::IoError), 0);
    assert_eq!(count(RejectReason::UnexpectedPeer), 0);
    assert_eq!(stats.accepted(), 1);
}

#[test]
fn the_leave_notice_is_delivered_before_leave_returns() {
    // Rank 1 leaves right after rank 0 sent it a message it never read (so its sockets
    // hold unread bytes, which makes a plain close reset the connection). `leave` returns
    // only once rank 0 acknowledged the notice; rank 0's next operation then reports the
    // departure and its reason, not a lost connection.
    let (ls, addrs) = listeners(2);
    let hs: Vec<_> = ls
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let addrs = addrs.clone();
            std::thread::spawn(move || Communicator::init(l, r, addrs, config(22, 2)).unwrap())
        })
        .collect();
    let mut comms: Vec<Communicator> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let leaver = comms.pop().unwrap();
    let mut stayer = comms.pop().unwrap();
    stayer.send(&[1u8; 64], 64, DataType::Uint8, 1).unwrap();
    let t = Instant::now();
    let acked = leaver.leave("node draining (rank 1)");
    assert_eq!(acked, 1, "rank 0 acknowledged the notice");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let e = stayer.barrier().unwrap_err();
    assert_eq!(e.code, HcclCode::Remote, "{e}");
    assert!(
        e.message
            .contains("peer rank 1 aborted the operation: node draining (rank 1)"),
        "{e}"
    );
}
