//! The threads the daemon starts, owned in one place: each gets a stop channel when it
//! starts, and at exit every one is told to stop; the prober, whose leave notice must
//! reach its group, is waited for within a bound, the others are left to the process
//! exit (a poller inside a stuck DCMI call cannot be joined).

use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::AppError;
use crate::export::otlp;
use crate::telemetry::hccn::Hccn;

/// How long the daemon waits at exit for the prober to leave its group (a leave notice takes
/// at most half a second once the prober is between rounds).
const PROBER_EXIT: Duration = Duration::from_secs(3);

/// What happens to a thread at exit once it has been told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtExit {
    /// Not waited for: the process exit ends it.
    Detach,
    /// Waited for, at most [`PROBER_EXIT`]: the prober's leave notice.
    AwaitLeave,
}

/// The threads `run` started (their stop channels and join handles) and `hccn_tool`,
/// whose child processes are killed at exit.
#[derive(Default)]
pub(super) struct Supervisor {
    stops: Vec<mpsc::Sender<()>>,
    awaited: Vec<JoinHandle<()>>,
    hccn: Option<Arc<Hccn>>,
}

impl Supervisor {
    /// Starts a thread through `spawn`, handing it a new stop channel; `what` names it in
    /// the error when it cannot start.
    pub(super) fn start(
        &mut self,
        what: &'static str,
        at_exit: AtExit,
        spawn: impl FnOnce(mpsc::Receiver<()>) -> std::io::Result<JoinHandle<()>>,
    ) -> Result<(), AppError> {
        let (tx, rx) = mpsc::channel();
        self.stops.push(tx);
        let handle = spawn(rx).map_err(|source| AppError::Start { what, source })?;
        if at_exit == AtExit::AwaitLeave {
            self.awaited.push(handle);
        }
        Ok(())
    }

    /// Keeps the `hccn_tool` handle, so its running children are killed at exit.
    pub(super) fn hold_hccn(&mut self, hccn: Arc<Hccn>) {
        self.hccn = Some(hccn);
    }

    /// Stops the threads, each within its bound, then kills any `hccn_tool` still running
    /// and makes the last OTLP flush.
    pub(super) fn stop(self, otlp: Option<&otlp::Otlp>) {
        let Supervisor {
            stops,
            awaited,
            hccn,
        } = self;
        // Dropping the senders wakes every thread.
        drop(stops);
        // The prober is waited for (briefly): its leave notice must reach the group before
        // the process exits, or every peer pauses for probe.member_timeout.
        for handle in awaited {
            let until = Instant::now() + PROBER_EXIT;
            while !handle.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if !handle.is_finished() {
                tracing::warn!(within = ?PROBER_EXIT, "the prober did not stop in time (a round in progress); peers will notice the departure by timeout");
            }
        }
        // hccn_tool runs in process groups of its own: kill any still running (a device
        // that is not ready keeps the tool waiting for minutes) rather than leave them
        // behind.
        if let Some(h) = &hccn {
            h.shutdown();
        }
        // The last OTLP flush, bounded by otlp.shutdown_timeout.
        if let Some(o) = otlp {
            o.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A thread that ends when its stop channel closes, setting `done` on the way out.
    fn stoppable(
        done: Arc<AtomicBool>,
    ) -> impl FnOnce(mpsc::Receiver<()>) -> std::io::Result<JoinHandle<()>> {
        move |rx| {
            std::thread::Builder::new().spawn(move || {
                // Returns Err once every sender is dropped.
                let _ = rx.recv();
                std::thread::sleep(Duration::from_millis(50));
                done.store(true, Ordering::SeqCst);
            })
        }
    }

    /// Pins: stop() closes every stop channel and waits for the awaited thread (the
    /// prober's leave notice) before it returns.
    #[test]
    fn stop_closes_every_channel_and_awaits_the_prober() {
        let (poller, prober) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let mut sup = Supervisor::default();
        sup.start("host poller", AtExit::Detach, stoppable(poller.clone()))
            .unwrap();
        sup.start("prober", AtExit::AwaitLeave, stoppable(prober.clone()))
            .unwrap();
        assert!(!prober.load(Ordering::SeqCst));
        sup.stop(None);
        assert!(
            prober.load(Ordering::SeqCst),
            "stop() returned before the prober ended"
        );
    }

    /// Pins: a thread that cannot start is an error that names it.
    #[test]
    fn a_thread_that_cannot_start_is_named() {
        let mut sup = Supervisor::default();
        let err = sup
            .start("pod attribution", AtExit::Detach, |_rx| {
                Err(std::io::Error::other("no threads left"))
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot start pod attribution: no threads left"
        );
    }
}
