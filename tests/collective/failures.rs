//! How the engine fails: parameter errors before anything is sent, keys and strangers
//! refused at formation, bad frames and dead or aborting peers failing every rank promptly
//! with the cause, and the fault injection tests and the demo rely on.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use hcclwatch::collective::algo::select::Algo;
use hcclwatch::collective::transport::FaultSpec;
use hcclwatch::collective::{CommConfig, Communicator, DataType, HcclCode, ReduceOp};

use crate::reference::all_reduce_int32;
use crate::world::{config, listeners, on_all, world, world_with};

#[test]
fn bad_arguments_are_hccl_e_para() {
    let mut comms = world(2, None);
    let e = comms[0]
        .all_reduce(&[0u8; 8], &mut [0u8; 4], 2, DataType::Fp32, ReduceOp::Sum)
        .unwrap_err();
    assert_eq!(e.code, HcclCode::Para);
    assert!(
        e.message
            .contains("recv buffer holds 4 bytes but 2 × fp32 needs 8"),
        "{e}"
    );
    let e = comms[0]
        .broadcast(&mut [0u8; 4], 1, DataType::Fp32, 5)
        .unwrap_err();
    assert_eq!(e.code, HcclCode::Para);
    let e = comms[1].send(&[0u8; 4], 1, DataType::Fp32, 1).unwrap_err();
    assert!(e.message.contains("not another rank"), "{e}");
    // A parameter error is caught before anything is sent, so the communicator still works.
    on_all(&mut comms, |_, c| c.barrier().unwrap());
}

#[test]
fn wrong_key_is_refused_and_reported_on_both_sides() {
    let cfgs = vec![config(1, b"right", None), config(1, b"wrong", None)];
    let mut cfgs = cfgs;
    for c in &mut cfgs {
        c.transport.connect_timeout = Duration::from_secs(2);
    }
    let r = world_with(2, cfgs);
    let e0 = r[0].as_ref().unwrap_err();
    let e1 = r[1].as_ref().unwrap_err();
    assert_eq!(e0.code, HcclCode::TcpConnect);
    assert!(
        e0.message.contains("failed authentication (wrong key)"),
        "{e0}"
    );
    assert_eq!(e1.code, HcclCode::TcpConnect);
    assert!(e1.message.contains("authentication refused"), "{e1}");
}

#[test]
fn garbage_on_the_port_is_rejected_and_init_completes() {
    let (ls, addrs) = listeners(2);
    let target = addrs[0];
    // Rank 1 starts once rank 0 has taken the stranger in (its hello arrived).
    let (stranger_in, go) = std::sync::mpsc::channel::<()>();
    let mut go = Some(go);
    let hs: Vec<_> = ls
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let a = addrs.clone();
            let go = if r == 1 { go.take() } else { None };
            std::thread::spawn(move || {
                if let Some(go) = go {
                    go.recv_timeout(Duration::from_secs(10))
                        .expect("the stranger reached rank 0");
                }
                Communicator::init(l, r, a, config(3, b"k", None))
            })
        })
        .collect();
    // A stranger connects to rank 0 and sends junk instead of the handshake.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(target).unwrap();
    let mut hello = [0u8; 36];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..4], b"HCWA");
    stranger_in.send(()).unwrap();
    s.write_all(&[0xAB; 200]).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(
        reply.starts_with(b"NO"),
        "the stranger is told no: {reply:?}"
    );
    let mut comms: Vec<Communicator> = hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    on_all(&mut comms, |_, c| c.barrier().unwrap());
}

#[test]
fn oversized_or_mismatched_frames_fail_the_op_clearly() {
    use hcclwatch::collective::transport::auth;
    use hcclwatch::collective::transport::frame::{Header, Kind};
    use std::io::Write;
    let (mut ls, addrs) = listeners(2);
    let l0 = ls.remove(0);
    let a0 = addrs.clone();
    let real = std::thread::spawn(move || {
        let mut c = Communicator::init(l0, 0, a0, {
            let mut c = config(5, b"k", None);
            c.measure_costs = false;
            c.transport.channels = 1;
            c
        })?;
        let mut buf = vec![0u8; 16];
        c.recv(&mut buf, 4, DataType::Fp32, 1)
    });
    // A peer that knows the key but sends a frame announcing 1 GiB.
    let mut s = std::net::TcpStream::connect(addrs[0]).unwrap();
    auth::connect(
        &mut s,
        b"k",
        auth::Hello {
            comm_id: 5,
            rank: 1,
            channel: 0,
        },
    )
    .unwrap();
    let h = Header {
        // Both ends are this build: the mesh speaks its highest version.
        version: hcclwatch::collective::transport::frame::VERSION,
        kind: Kind::Data,
        dtype: DataType::Fp32.code(),
        comm_id: 5,
        seq: 1,
        len: 1 << 30,
        chunk: 0,
    };
    s.write_all(&h.encode()).unwrap();
    let e = real.join().unwrap().unwrap_err();
    assert_eq!(e.code, HcclCode::TcpTransfer);
    assert_eq!(e.peer, Some(1));
    assert!(
        e.message
            .contains("bad frame: frame of 1073741824 bytes exceeds the maximum"),
        "{e}"
    );
}

#[test]
fn dead_peer_fails_every_rank_promptly_and_survivors_reform() {
    let n = 4;
    let mut comms = world(n, Some("level0:NA;level1:ring"));
    let victim = comms.pop().unwrap();
    let count = 2_000_000;
    let started = Instant::now();
    let results = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter_mut()
            .map(|c| {
                s.spawn(move || {
                    let mut buf = vec![0u8; count * 4];
                    let mut last = Ok(Algo::Ring);
                    for _ in 0..50 {
                        last =
                            c.all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum);
                        if last.is_err() {
                            break;
                        }
                    }
                    last
                })
            })
            .collect();
        // The victim takes part in a few operations, then dies (its sockets close, as on
        // kill -9).
        let mut victim = victim;
        let mut buf = vec![0u8; count * 4];
        for _ in 0..2 {
            victim
                .all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum)
                .unwrap();
        }
        drop(victim);
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for r in &results {
        let e = r.as_ref().unwrap_err();
        assert!(
            matches!(
                e.code,
                HcclCode::TcpTransfer | HcclCode::Timeout | HcclCode::Remote
            ),
            "{e}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "failure took {:?}",
        started.elapsed()
    );
    // Survivors re-form without rank 3 and complete an all-reduce.
    let mut survivors: Vec<Communicator> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| s.spawn(move || c.shrink(&[3], 8).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(survivors.iter().all(|c| c.size() == 3));
    all_reduce_int32(&mut survivors, 3, 1000, "after shrink");
    // The failed node returns (a new process, a new listener) and the group grows back.
    let newcomer = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut addrs: Vec<SocketAddr> = survivors.iter().map(|c| c.listen_addr()).collect();
    addrs.push(newcomer.local_addr().unwrap());
    let mut grown: Vec<Communicator> = std::thread::scope(|s| {
        let mut hs: Vec<_> = survivors
            .into_iter()
            .map(|c| {
                let a = addrs.clone();
                s.spawn(move || c.reform(a, 9).unwrap())
            })
            .collect();
        let a = addrs.clone();
        hs.push(s.spawn(move || {
            Communicator::init(
                newcomer,
                3,
                a,
                config(9, b"test-key", Some("level0:NA;level1:ring")),
            )
            .unwrap()
        }));
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    all_reduce_int32(&mut grown, 4, 100, "after grow");
}

#[test]
fn traffic_class_sets_the_ip_tos_byte() {
    let mut cfgs: Vec<CommConfig> = (0..2).map(|_| config(13, b"k", None)).collect();
    for c in &mut cfgs {
        c.transport.traffic_class = Some(132);
        c.transport.channels = 2;
        c.measure_costs = false;
    }
    let comms: Vec<Communicator> = world_with(2, cfgs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(comms[0].socket_tos(1).unwrap(), vec![132; 2]);
    assert_eq!(comms[1].socket_tos(0).unwrap(), vec![132; 2]);
}

#[test]
fn fault_injection_caps_throughput_and_drops() {
    // Rank 0 → rank 1 capped at 20 MB/s: 4 MB takes at least ~0.2 s.
    let mut cfgs: Vec<CommConfig> = (0..2).map(|_| config(11, b"k", None)).collect();
    cfgs[0].transport.faults.insert(
        1,
        FaultSpec {
            rate_bytes_per_sec: Some(20e6),
            ..FaultSpec::default()
        },
    );
    let mut comms: Vec<Communicator> = world_with(2, cfgs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let t = Instant::now();
    on_all(&mut comms, |r, c| {
        let mut buf = vec![0u8; 4_000_000];
        if r == 0 {
            c.send(&buf, 4_000_000, DataType::Uint8, 1).unwrap();
        } else {
            c.recv(&mut buf, 4_000_000, DataType::Uint8, 0).unwrap();
        }
    });
    assert!(
        t.elapsed() >= Duration::from_millis(190),
        "cap not applied: {:?}",
        t.elapsed()
    );

    let mut cfgs: Vec<CommConfig> = (0..2).map(|_| config(12, b"k", None)).collect();
    cfgs[1].measure_costs = false;
    cfgs[0].measure_costs = false;
    cfgs[0].transport.faults.insert(
        1,
        FaultSpec {
            drop_after_bytes: Some(1000),
            ..FaultSpec::default()
        },
    );
    let mut comms: Vec<Communicator> = world_with(2, cfgs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let res = on_all(&mut comms, |r, c| {
        let mut buf = vec![0u8; 4096];
        if r == 0 {
            c.send(&buf, 4096, DataType::Uint8, 1)
        } else {
            c.recv(&mut buf, 4096, DataType::Uint8, 0)
        }
    });
    assert!(
        res[0]
            .as_ref()
            .unwrap_err()
            .message
            .contains("fault injection: connection dropped after 1000 bytes")
    );
    assert_eq!(res[1].as_ref().unwrap_err().peer, Some(0));
}

#[test]
fn a_failing_rank_tells_its_peers_why() {
    // Rank 2 disagrees on the count. In a 3-rank ring, rank 0 receives rank 2's frame,
    // rejects it, and aborts with that reason; rank 1, which receives from rank 0, gets
    // HCCL_E_REMOTE carrying rank 0's diagnosis instead of a bare lost connection.
    let mut comms = world(3, Some("level0:NA;level1:ring"));
    let errs = on_all(&mut comms, |r, c| {
        let count = if r == 2 { 8000 } else { 4000 };
        let mut buf = vec![0u8; count * 4];
        c.all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum)
            .unwrap_err()
    });
    assert_eq!(errs[0].code, HcclCode::TcpTransfer, "{}", errs[0]);
    assert!(
        errs[0].message.contains("bad frame: byte count"),
        "{}",
        errs[0]
    );
    assert_eq!(errs[1].code, HcclCode::Remote, "{}", errs[1]);
    assert_eq!(errs[1].peer, Some(0));
    assert!(
        errs[1]
            .message
            .contains("peer rank 0 aborted the operation"),
        "{}",
        errs[1]
    );
    assert!(
        errs[1].message.contains("byte count"),
        "root cause forwarded: {}",
        errs[1]
    );
    // The broken communicator keeps reporting the original failure.
    let again = comms[1].barrier().unwrap_err();
    assert!(
        again.message.contains("broken by an earlier failure"),
        "{again}"
    );
}
