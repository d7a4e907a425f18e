//! Root-info bootstrap, HCCL's `HcclGetRootInfo` / `HcclCommInitRootInfo` flow over TCP.
//!
//! The root listens on one address; its root info prints as
//! `hcclwatch-root://IP:PORT/COMMID` and is passed out of band. Every rank (the root's
//! own rank included) connects, authenticates with the communicator key, and reports the
//! address it listens on for the mesh; when all `world` ranks have reported, the root
//! sends each the full address list, indexed by rank.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::str::FromStr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::collective::error::{CollError, CollResult, HcclCode};
use crate::collective::transport::auth;

/// Channel number marking a bootstrap connection in the handshake.
const BOOTSTRAP_CHANNEL: u32 = u32::MAX;

/// Where the root listens, and the communicator id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootInfo {
    /// Root store address.
    pub addr: SocketAddr,
    /// Communicator id.
    pub comm_id: u64,
}

impl fmt::Display for RootInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hcclwatch-root://{}/{:016x}", self.addr, self.comm_id)
    }
}

/// Why a string is not root info.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootInfoError {
    /// The scheme is missing.
    #[error("{text:?} is not root info (expected hcclwatch-root://IP:PORT/COMMID)")]
    NotRootInfo {
        /// The text given.
        text: String,
    },
    /// No `/COMMID` after the address.
    #[error("{text:?} lacks the /COMMID part (expected hcclwatch-root://IP:PORT/COMMID)")]
    NoCommId {
        /// The text given.
        text: String,
    },
    /// The address part is not `IP:PORT`.
    #[error("{addr:?} is not IP:PORT")]
    BadAddress {
        /// The address part.
        addr: String,
    },
    /// The communicator id is not hexadecimal.
    #[error("{id:?} is not a hex communicator id")]
    BadCommId {
        /// The id part.
        id: String,
    },
}

impl FromStr for RootInfo {
    type Err = RootInfoError;
    fn from_str(s: &str) -> Result<Self, RootInfoError> {
        let rest = s
            .strip_prefix("hcclwatch-root://")
            .ok_or_else(|| RootInfoError::NotRootInfo { text: s.into() })?;
        let (addr, id) = rest
            .rsplit_once('/')
            .ok_or_else(|| RootInfoError::NoCommId { text: s.into() })?;
        Ok(RootInfo {
            addr: addr
                .parse()
                .map_err(|_| RootInfoError::BadAddress { addr: addr.into() })?,
            comm_id: u64::from_str_radix(id, 16)
                .map_err(|_| RootInfoError::BadCommId { id: id.into() })?,
        })
    }
}

/// A bad address message in the exchange with the root.
#[derive(Debug, thiserror::Error)]
enum AddrMessageError {
    /// The stream failed or closed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The length prefix is beyond any socket address.
    #[error("address of {0} bytes is too long")]
    TooLong(usize),
    /// The bytes are not text.
    #[error("address is not UTF-8")]
    NotUtf8,
    /// The text is not `IP:PORT`.
    #[error("{0:?} is not IP:PORT")]
    NotAnAddress(String),
}

fn write_addr(s: &mut TcpStream, a: &SocketAddr) -> std::io::Result<()> {
    let t = a.to_string();
    s.write_all(&(t.len() as u16).to_le_bytes())?;
    s.write_all(t.as_bytes())
}

fn read_addr(s: &mut TcpStream) -> Result<SocketAddr, AddrMessageError> {
    let mut l = [0u8; 2];
    s.read_exact(&mut l)?;
    let n = u16::from_le_bytes(l) as usize;
    if n > 64 {
        return Err(AddrMessageError::TooLong(n));
    }
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)?;
    let t = String::from_utf8(b).map_err(|_| AddrMessageError::NotUtf8)?;
    t.parse().map_err(|_| AddrMessageError::NotAnAddress(t))
}

/// Serves the root store for `world` ranks on `listener`; returns when every rank got
/// the list (or the timeout passes).
pub fn serve(
    listener: TcpListener,
    world: usize,
    comm_id: u64,
    key: Vec<u8>,
    timeout: Duration,
) -> JoinHandle<CollResult<Vec<SocketAddr>>> {
    std::thread::spawn(move || {
        let op = "root-info bootstrap (root)";
        let deadline = Instant::now() + timeout;
        let mut slots: Vec<Option<(SocketAddr, TcpStream)>> = (0..world).map(|_| None).collect();
        listener
            .set_nonblocking(true)
            .map_err(|e| CollError::new(HcclCode::TcpConnect, op, None, e.to_string()))?;
        while slots.iter().any(Option::is_none) {
            if Instant::now() > deadline {
                let missing: Vec<usize> = (0..world).filter(|r| slots[*r].is_none()).collect();
                return Err(CollError::new(
                    HcclCode::Timeout,
                    op,
                    missing.first().copied(),
                    format!("ranks {missing:?} did not join within {timeout:?}"),
                ));
            }
            match listener.accept() {
                Ok((mut s, from)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let hello = match auth::accept(&mut s, &key, comm_id) {
                        Ok((h, _))
                            if h.channel == BOOTSTRAP_CHANNEL && (h.rank as usize) < world =>
                        {
                            h
                        }
                        Ok((h, _)) => {
                            tracing::warn!(peer = %from, rank = h.rank, "bootstrap: unexpected rank or channel");
                            continue;
                        }
                        Err(m) => {
                            tracing::warn!(peer = %from, "bootstrap: rejected: {m}");
                            continue;
                        }
                    };
                    match read_addr(&mut s) {
                        Ok(a) => slots[hello.rank as usize] = Some((a, s)),
                        Err(m) => {
                            tracing::warn!(peer = %from, "bootstrap: bad address message: {m}")
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => {
                    return Err(CollError::new(
                        HcclCode::TcpConnect,
                        op,
                        None,
                        e.to_string(),
                    ));
                }
            }
        }
        let addrs: Vec<SocketAddr> = slots.iter().flatten().map(|(a, _)| *a).collect();
        for (rank, (_, s)) in slots.iter_mut().flatten().enumerate() {
            let send = (|| -> std::io::Result<()> {
                s.write_all(&(addrs.len() as u32).to_le_bytes())?;
                for a in &addrs {
                    write_addr(s, a)?;
                }
                Ok(())
            })();
            send.map_err(|e| CollError::new(HcclCode::TcpTransfer, op, Some(rank), e.to_string()))?;
        }
        Ok(addrs)
    })
}

/// Joins through the root store: reports `listen` for `rank` and returns every rank's
/// address.
pub fn join(
    root: &RootInfo,
    rank: usize,
    world: usize,
    listen: SocketAddr,
    key: &[u8],
    timeout: Duration,
) -> CollResult<Vec<SocketAddr>> {
    let op = "root-info bootstrap";
    let deadline = Instant::now() + timeout;
    let mut s = loop {
        match TcpStream::connect_timeout(&root.addr, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(CollError::new(
                        HcclCode::TcpConnect,
                        op,
                        Some(0),
                        format!("cannot reach the root at {}: {e}", root.addr),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let _ = s.set_read_timeout(Some(left));
    let hello = auth::Hello {
        comm_id: root.comm_id,
        rank: rank as u32,
        channel: BOOTSTRAP_CHANNEL,
    };
    auth::connect(&mut s, key, hello)
        .map_err(|e| CollError::new(HcclCode::TcpConnect, op, Some(0), e.to_string()))?;
    write_addr(&mut s, &listen)
        .map_err(|e| CollError::new(HcclCode::TcpTransfer, op, Some(0), e.to_string()))?;
    let mut n = [0u8; 4];
    s.read_exact(&mut n).map_err(|e| {
        CollError::new(
            HcclCode::Timeout,
            op,
            Some(0),
            format!("no member list from the root: {e}"),
        )
    })?;
    let n = u32::from_le_bytes(n) as usize;
    if n != world {
        return Err(CollError::para(
            op,
            format!("root announced {n} ranks, this rank expects {world}"),
        ));
    }
    (0..n)
        .map(|_| {
            read_addr(&mut s)
                .map_err(|e| CollError::new(HcclCode::TcpTransfer, op, Some(0), e.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_info_string_round_trips() {
        let r = RootInfo {
            addr: "127.0.0.1:60000".parse().unwrap(),
            comm_id: 0xabc,
        };
        let s = r.to_string();
        assert_eq!(s, "hcclwatch-root://127.0.0.1:60000/0000000000000abc");
        assert_eq!(s.parse::<RootInfo>().unwrap(), r);
        assert!("http://x".parse::<RootInfo>().is_err());
        assert!(
            "hcclwatch-root://127.0.0.1:1/zz"
                .parse::<RootInfo>()
                .unwrap_err()
                .to_string()
                .contains("hex")
        );
    }

    #[test]
    fn ranks_learn_every_address() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = RootInfo {
            addr: l.local_addr().unwrap(),
            comm_id: 9,
        };
        let server = serve(l, 3, 9, b"k".to_vec(), Duration::from_secs(10));
        let joins: Vec<_> = (0..3)
            .map(|r| {
                std::thread::spawn(move || {
                    let me: SocketAddr = format!("127.0.0.1:{}", 41000 + r).parse().unwrap();
                    join(&root, r, 3, me, b"k", Duration::from_secs(10))
                })
            })
            .collect();
        for j in joins {
            let list = j.join().unwrap().unwrap();
            assert_eq!(list.len(), 3);
            assert_eq!(list[2].port(), 41002);
        }
        assert_eq!(server.join().unwrap().unwrap().len(), 3);
    }

    #[test]
    fn wrong_key_cannot_join() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = RootInfo {
            addr: l.local_addr().unwrap(),
            comm_id: 9,
        };
        let _server = serve(l, 1, 9, b"right".to_vec(), Duration::from_secs(2));
        let err = join(
            &root,
            0,
            1,
            "127.0.0.1:1".parse().unwrap(),
            b"wrong",
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert!(err.message.contains("authentication refused"), "{err}");
    }
}
