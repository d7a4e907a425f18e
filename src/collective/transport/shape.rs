//! Fault injection toward one peer ([`FaultSpec`]): a delay before every frame, a
//! throughput cap, and a connection cut after a number of bytes. Tests and the demo use
//! it to make one link slow or broken on purpose.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{FaultSpec, Mesh, timed_out};
use crate::collective::error::{CollError, CollResult, HcclCode};

/// The state of one peer's fault injection: when its link is free again and how many
/// bytes went out.
#[derive(Debug)]
pub(super) struct Shaper {
    spec: FaultSpec,
    next_free: Instant,
    sent: u64,
}

impl Shaper {
    /// A shaper that has sent nothing yet.
    pub(super) fn new(spec: FaultSpec) -> Self {
        Self {
            spec,
            next_free: Instant::now(),
            sent: 0,
        }
    }
}

impl Mesh {
    /// Holds a frame of `len` bytes to `to` back as the peer's [`FaultSpec`] says, or cuts
    /// the peer's connections once its byte budget is spent. Fails rather than waiting
    /// past `deadline`.
    pub(super) fn shape(
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
                    p.shut_down();
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
            return Err(timed_out(op, to));
        }
        std::thread::sleep(wait);
        Ok(())
    }
}
