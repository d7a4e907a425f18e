//! Runs DCMI calls on a dedicated thread, each with a deadline.
//!
//! A DCMI call cannot be cancelled: `dcmi_get_device_network_health` is known to block for
//! a long time after a card drops. So every call runs on a worker thread and the caller
//! waits at most its deadline. When a call misses its deadline the worker is *abandoned*:
//! it keeps blocking inside the library, a fresh worker takes over, and the call is
//! remembered as stuck so the same (call, chip) is not issued again until the old one
//! returns. When the abandoned call finally returns, its thread exits and the stuck count
//! drops. If `max_stuck` calls are stuck at once, no further DCMI call is issued until
//! one returns, so threads can never pile up without bound.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ffi::DcmiLib;

/// Why a call produced no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunError {
    /// The call missed its deadline and is now stuck.
    Timeout,
    /// The same (call, chip) is still stuck from an earlier attempt; not issued.
    StillStuck,
    /// Too many calls are stuck; not issued.
    Saturated,
    /// The worker thread could not be started or died.
    WorkerGone,
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

type Job = Box<dyn FnOnce(&DcmiLib) -> bool + Send>;

struct Shared {
    stuck: AtomicUsize,
    stuck_keys: Mutex<HashSet<String>>,
    spawned: AtomicUsize,
}

/// Owns the current worker and the stuck-call accounting.
pub struct Runner {
    lib: Arc<DcmiLib>,
    tx: Option<mpsc::Sender<Job>>,
    shared: Arc<Shared>,
    max_stuck: usize,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("stuck", &self.stuck_calls())
            .field("max_stuck", &self.max_stuck)
            .finish()
    }
}

impl Runner {
    /// A runner for `lib` that tolerates at most `max_stuck` stuck calls.
    pub fn new(lib: Arc<DcmiLib>, max_stuck: usize) -> Self {
        Self {
            lib,
            tx: None,
            shared: Arc::new(Shared {
                stuck: AtomicUsize::new(0),
                stuck_keys: Mutex::new(HashSet::new()),
                spawned: AtomicUsize::new(0),
            }),
            max_stuck: max_stuck.max(1),
        }
    }

    /// Calls currently stuck past their deadline (threads blocked inside DCMI).
    pub fn stuck_calls(&self) -> usize {
        self.shared.stuck.load(Ordering::SeqCst)
    }

    fn worker(&mut self) -> Option<&mpsc::Sender<Job>> {
        if self.tx.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let lib = self.lib.clone();
            let n = self.shared.spawned.fetch_add(1, Ordering::SeqCst);
            let spawned = std::thread::Builder::new()
                .name(format!("hcclwatch-dcmi-{n}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        if job(&lib) {
                            // This worker's call was abandoned; a newer worker has taken
                            // over. Exit so the thread is not leaked.
                            break;
                        }
                    }
                });
            if spawned.is_err() {
                return None;
            }
            self.tx = Some(tx);
        }
        self.tx.as_ref()
    }

    /// Runs `f` on the worker and waits at most `deadline`. `key` identifies the
    /// (call, chip) for stuck tracking.
    pub fn call<T, F>(&mut self, key: &str, deadline: Duration, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> T + Send + 'static,
    {
        if self
            .shared
            .stuck_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
        {
            return Err(RunError::StillStuck);
        }
        if self.stuck_calls() >= self.max_stuck {
            return Err(RunError::Saturated);
        }
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (rtx, rrx) = mpsc::sync_channel::<T>(1);
        let job_state = state.clone();
        let shared = self.shared.clone();
        let job_key = key.to_string();
        let job: Job = Box::new(move |lib: &DcmiLib| {
            let value = f(lib);
            if job_state
                .compare_exchange(RUNNING, DONE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                let _ = rtx.send(value);
                false
            } else {
                // Abandoned while we were blocked: release the accounting and retire.
                shared
                    .stuck_keys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&job_key);
                shared.stuck.fetch_sub(1, Ordering::SeqCst);
                true
            }
        });
        let Some(tx) = self.worker() else {
            return Err(RunError::WorkerGone);
        };
        if tx.send(job).is_err() {
            self.tx = None;
            return Err(RunError::WorkerGone);
        }
        match rrx.recv_timeout(deadline) {
            Ok(v) => Ok(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.tx = None;
                Err(RunError::WorkerGone)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Count first, so a job finishing concurrently can never decrement below
                // zero; undo if it turns out the job completed in the meantime.
                self.shared.stuck.fetch_add(1, Ordering::SeqCst);
                self.shared
                    .stuck_keys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.to_string());
                if state
                    .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    self.tx = None;
                    Err(RunError::Timeout)
                } else {
                    self.shared.stuck.fetch_sub(1, Ordering::SeqCst);
                    self.shared
                        .stuck_keys
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(key);
                    rrx.recv().map_err(|_| RunError::WorkerGone)
                }
            }
        }
    }
}
