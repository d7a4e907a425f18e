//! SIGHUP: the configuration re-checked while the daemon runs on the one it started
//! with, and the fault-level table swapped in. Every re-read runs on a thread of its own
//! with a deadline, so a file on a hung mount can never wedge the daemon or its shutdown.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, Problem};
use crate::snapshot::Store;
use crate::telemetry::faults::{FaultTable, FaultTableError, SharedFaultTable};

/// Re-reads the configuration the way start-up read it (file, environment, flags) and
/// returns it, or every problem found.
pub type Reloader = Arc<dyn Fn() -> Result<Config, Vec<Problem>> + Send + Sync>;

/// How long a SIGHUP re-check may take before it is reported as failed.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(15);

/// Why a re-check gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The configuration is invalid.
    #[error("{} problem(s)", .0.len())]
    Invalid(Vec<Problem>),
    /// The re-check did not finish within the deadline (a hung mount): it is left running
    /// on its own thread, and the next SIGHUP is refused until it ends.
    #[error("the re-check did not finish within {0:?}")]
    Timeout(Duration),
    /// The previous re-check is still running.
    #[error("the previous re-check is still running")]
    Busy,
}

/// Runs one re-check on its own thread (never a runtime thread, so a hung one cannot
/// hold the runtime at shutdown), waiting at most `deadline`.
pub async fn reload_within(
    reload: &Reloader,
    busy: &Arc<std::sync::atomic::AtomicBool>,
    deadline: Duration,
) -> Result<Config, ReloadError> {
    use std::sync::atomic::Ordering;
    if busy.swap(true, Ordering::SeqCst) {
        return Err(ReloadError::Busy);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (reload, flag) = (reload.clone(), busy.clone());
    let spawned = std::thread::Builder::new()
        .name("hcclwatch-reload".into())
        .spawn(move || {
            let r = reload();
            flag.store(false, Ordering::SeqCst);
            let _ = tx.send(r);
        });
    if spawned.is_err() {
        busy.store(false, Ordering::SeqCst);
        return Err(ReloadError::Invalid(vec![Problem::reason(
            "cannot start a thread",
        )]));
    }
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(r)) => r.map_err(ReloadError::Invalid),
        Ok(Err(_)) => Err(ReloadError::Invalid(vec![Problem::reason(
            "the re-check panicked",
        )])),
        Err(_) => Err(ReloadError::Timeout(deadline)),
    }
}

/// Why the fault-level table was not re-read on SIGHUP.
#[derive(Debug, thiserror::Error)]
enum FaultReloadError {
    /// The thread for the re-read could not start.
    #[error("cannot start a thread: {0}")]
    Spawn(std::io::Error),
    /// The re-read panicked.
    #[error("the re-read panicked")]
    Panicked,
    /// The re-read did not finish within the deadline (a hung mount).
    #[error("the re-read did not finish within {0:?}")]
    Timeout(Duration),
    /// The file is unusable.
    #[error(transparent)]
    Table(#[from] FaultTableError),
}

/// Loads the fault-level table on its own thread, waiting at most `deadline` (a file on a
/// hung mount must not hold the SIGHUP loop).
async fn load_fault_table_within(
    path: Option<std::path::PathBuf>,
    deadline: Duration,
) -> Result<FaultTable, FaultReloadError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("hcclwatch-faults".into())
        .spawn(move || {
            let _ = tx.send(FaultTable::from_config(path.as_deref()));
        })
        .map_err(FaultReloadError::Spawn)?;
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(r)) => Ok(r?),
        Ok(Err(_)) => Err(FaultReloadError::Panicked),
        Err(_) => Err(FaultReloadError::Timeout(deadline)),
    }
}

/// SIGHUP re-reads and validates the configuration, so a bad edit to a ConfigMap or file is
/// caught while the daemon still runs on the old one (and alerted on through
/// `hcclwatch_config_last_reload_successful`) instead of at the next restart. The running
/// components are not rebuilt: keys that changed are named in the log and apply at restart.
/// The one exception is the fault-level table: it is re-read from the (new)
/// `telemetry.fault_levels_file` and swapped in whole, or kept when the file is bad. Both
/// re-reads run on their own threads with [`RELOAD_DEADLINE`], so they can never wedge the
/// daemon or its shutdown.
pub(super) async fn check_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    reload: Reloader,
    running: Config,
    store: Arc<Store>,
    fault_table: SharedFaultTable,
) {
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    while hup.recv().await.is_some() {
        let now = std::time::SystemTime::now();
        match reload_within(&reload, &busy, RELOAD_DEADLINE).await {
            Ok(new) => {
                let path = new.telemetry.fault_levels_file.clone();
                match load_fault_table_within(path, RELOAD_DEADLINE).await {
                    Ok(t) => {
                        tracing::info!(
                            table = t.origin(),
                            codes = t.len(),
                            "fault-level table (re)loaded on SIGHUP"
                        );
                        fault_table.replace(t);
                    }
                    Err(e) => {
                        store.record_reload(false, now);
                        tracing::error!(error = %e, "fault-level table on SIGHUP is unusable; still using the previous table");
                        continue;
                    }
                }
                store.record_reload(true, now);
                let mut changed = crate::config::diff::changed_keys(&running, &new);
                // Applied just above, not at restart.
                changed.retain(|k| k != "telemetry.fault_levels_file");
                if changed.is_empty() {
                    tracing::info!("configuration re-checked on SIGHUP: valid, unchanged");
                } else {
                    tracing::warn!(
                        changed = %changed.join(","),
                        "configuration re-checked on SIGHUP: valid; the changed keys apply when the daemon restarts"
                    );
                }
            }
            Err(ReloadError::Invalid(problems)) => {
                store.record_reload(false, now);
                for p in &problems {
                    tracing::error!(problem = %p, "configuration re-check failed");
                }
                tracing::error!(
                    problems = problems.len(),
                    "configuration on disk is invalid; still running on the previous one, and a restart would fail: fix the file"
                );
            }
            Err(e) => {
                store.record_reload(false, now);
                tracing::error!(error = %e, "configuration re-check did not complete");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins: a re-check that never returns (a config on a hung mount) is reported as
    /// timed out within the deadline, and a SIGHUP meanwhile is refused at once instead
    /// of stacking another stuck thread; the daemon's loop goes on either way.
    #[tokio::test]
    async fn a_hung_reload_is_bounded_and_not_stacked() {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let reload: Reloader = Arc::new(move || {
            let _ = gate.lock().unwrap().recv();
            Ok(Config::default())
        });
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = std::time::Instant::now();
        let r = reload_within(&reload, &busy, Duration::from_millis(200)).await;
        assert_eq!(
            r.unwrap_err(),
            ReloadError::Timeout(Duration::from_millis(200))
        );
        assert!(t.elapsed() < Duration::from_secs(2));
        let r = reload_within(&reload, &busy, Duration::from_millis(200)).await;
        assert_eq!(r.unwrap_err(), ReloadError::Busy);
        // Once the stuck one returns, re-checks work again.
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while busy.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        release.send(()).unwrap();
        assert!(
            reload_within(&reload, &busy, Duration::from_secs(5))
                .await
                .is_ok()
        );
    }
}
