//! Runs this node's share of a device-plane plan: one thread per local NPU, each pinging
//! its targets in turn (the tool allows one call per NPU at a time), all NPUs at once.
//!
//! The pings of round `r` run in the background while the host plane runs its next round;
//! their outcomes are gathered at round `r + 1`. A ping that has not finished by then is
//! left out (never counted as loss: an unfinished ping is not a measurement), and a ping
//! that failed for a reason other than loss (tool busy, unsupported, timed out) is reported
//! by reason and left out of the engine's input.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one ping measured: `sent` packets, `received` answers and their round trips.
#[derive(Debug, Clone, PartialEq)]
pub struct PingReply {
    /// Packets sent.
    pub sent: u32,
    /// Answers received.
    pub received: u32,
    /// Round trip of each answer, seconds.
    pub rtts: Vec<f64>,
}

impl PingReply {
    /// Mean round trip of the answers.
    pub fn mean_rtt(&self) -> Option<f64> {
        (!self.rtts.is_empty()).then(|| self.rtts.iter().sum::<f64>() / self.rtts.len() as f64)
    }
}

/// Why a ping measured nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PingError {
    /// The product does not support it (cached by the tool wrapper; not retried).
    #[error("not supported on this product")]
    Unsupported,
    /// The tool or device was busy; try again next round.
    #[error("busy")]
    Busy,
    /// The call missed its deadline and was killed.
    #[error("timed out")]
    Timeout,
    /// Anything else, with the tool's message.
    #[error("{0}")]
    Failed(String),
}

impl PingError {
    /// A bounded label value for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            PingError::Unsupported => "unsupported",
            PingError::Busy => "busy",
            PingError::Timeout => "timeout",
            PingError::Failed(_) => "error",
        }
    }
}

/// Something that pings from a local NPU port (hccn_tool on a node; a fake in tests).
pub trait Pinger: Send + Sync {
    /// Pings `dst` from the port of local NPU `phy`. Blocks up to the pinger's deadline.
    fn ping(&self, phy: u32, dst: Ipv4Addr) -> Result<PingReply, PingError>;
}

/// One planned ping of this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Source port index (a local port).
    pub src: usize,
    /// Destination port index.
    pub dst: usize,
    /// The source port's physical id.
    pub phy: u32,
    /// The destination's IP.
    pub ip: Ipv4Addr,
}

/// A ping's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The job.
    pub job: Job,
    /// What it measured, or why not.
    pub result: Result<PingReply, PingError>,
}

/// Pings in flight.
pub struct Batch {
    started: Instant,
    done: Arc<Mutex<Vec<Outcome>>>,
    threads: Vec<JoinHandle<()>>,
    jobs: usize,
}

impl Batch {
    /// Starts `jobs` on `pinger`: one thread per source NPU, its jobs in order.
    pub fn start(pinger: Arc<dyn Pinger>, jobs: Vec<Job>) -> Batch {
        let done = Arc::new(Mutex::new(Vec::with_capacity(jobs.len())));
        let mut by_phy: std::collections::BTreeMap<u32, Vec<Job>> = Default::default();
        let n = jobs.len();
        for j in jobs {
            by_phy.entry(j.phy).or_default().push(j);
        }
        let threads = by_phy
            .into_values()
            .filter_map(|list| {
                let (pinger, done) = (pinger.clone(), done.clone());
                std::thread::Builder::new()
                    .name("hcclwatch-ping".into())
                    .spawn(move || {
                        for job in list {
                            let result = pinger.ping(job.phy, job.ip);
                            done.lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(Outcome { job, result });
                        }
                    })
                    .map_err(
                        |e| tracing::warn!(error = %e, "cannot start a device-plane ping thread"),
                    )
                    .ok()
            })
            .collect();
        Batch {
            started: Instant::now(),
            done,
            threads,
            jobs: n,
        }
    }

    /// Waits until every ping finished or `deadline` after the start, then takes the
    /// outcomes so far. Unfinished pings are left to end on their own (each has the
    /// pinger's deadline) and are not reported.
    pub fn collect(self, deadline: Duration) -> Vec<Outcome> {
        let until = self.started + deadline;
        for t in self.threads {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        let got = std::mem::take(&mut *self.done.lock().unwrap_or_else(|p| p.into_inner()));
        if got.len() < self.jobs {
            tracing::debug!(
                planned = self.jobs,
                finished = got.len(),
                "device-plane pings still running at the next round are left out"
            );
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Pinger for Fixed {
        fn ping(&self, phy: u32, dst: Ipv4Addr) -> Result<PingReply, PingError> {
            if dst.octets()[3] == 9 {
                std::thread::sleep(Duration::from_millis(400));
            }
            if phy == 3 {
                return Err(PingError::Busy);
            }
            Ok(PingReply {
                sent: 3,
                received: 2,
                rtts: vec![1e-4, 3e-4],
            })
        }
    }

    fn job(src: usize, phy: u32, last: u8) -> Job {
        Job {
            src,
            dst: 99,
            phy,
            ip: Ipv4Addr::new(10, 0, 0, last),
        }
    }

    #[test]
    fn outcomes_come_back_by_job_and_late_ones_are_left_out() {
        let b = Batch::start(
            Arc::new(Fixed),
            vec![job(0, 0, 1), job(1, 1, 2), job(2, 3, 3), job(3, 2, 9)],
        );
        let mut out = b.collect(Duration::from_millis(200));
        out.sort_by_key(|o| o.job.src);
        let srcs: Vec<usize> = out.iter().map(|o| o.job.src).collect();
        assert_eq!(srcs, vec![0, 1, 2], "the slow ping is left out, not lost");
        let mean = out[0].result.as_ref().unwrap().mean_rtt().unwrap();
        assert!((mean - 2e-4).abs() < 1e-12, "{mean}");
        assert_eq!(out[2].result, Err(PingError::Busy));
    }
}
