//! Worlds of ranks on loopback: one listener and one thread per rank.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use hcclwatch::collective::algo::select::parse_hccl_algo;
use hcclwatch::collective::transport::TransportConfig;
use hcclwatch::collective::{CollError, CommConfig, Communicator};

pub(crate) fn config(comm_id: u64, key: &[u8], algo: Option<&str>) -> CommConfig {
    let mut t = TransportConfig::new(comm_id, key.to_vec());
    t.connect_timeout = Duration::from_secs(10);
    let mut c = CommConfig::new(t);
    c.exec_timeout = Duration::from_secs(20);
    if let Some(a) = algo {
        c.algo = parse_hccl_algo(a).unwrap();
    }
    c
}

pub(crate) fn listeners(n: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = ls.iter().map(|l| l.local_addr().unwrap()).collect();
    (ls, addrs)
}

pub(crate) fn world_with(n: usize, cfgs: Vec<CommConfig>) -> Vec<Result<Communicator, CollError>> {
    let (ls, addrs) = listeners(n);
    let handles: Vec<_> = ls
        .into_iter()
        .zip(cfgs)
        .enumerate()
        .map(|(r, (l, c))| {
            let addrs = addrs.clone();
            std::thread::spawn(move || Communicator::init(l, r, addrs, c))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

pub(crate) fn world(n: usize, algo: Option<&str>) -> Vec<Communicator> {
    world_with(n, (0..n).map(|_| config(7, b"test-key", algo)).collect())
        .into_iter()
        .map(|c| c.expect("init"))
        .collect()
}

/// Runs `f` on every rank at once; returns the per-rank results in rank order.
pub(crate) fn on_all<T: Send>(
    comms: &mut [Communicator],
    f: impl Fn(usize, &mut Communicator) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter_mut()
            .enumerate()
            .map(|(r, c)| {
                let f = &f;
                s.spawn(move || f(r, c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
