//! Threads that run collections on schedule and publish them to the store.
//!
//! Each group has its own interval. The poller always runs the group that is due soonest;
//! if a run overruns, the next one starts at once rather than bursting to catch up. The
//! wait between runs is a receive on a channel, so stopping is immediate, and a source
//! that is pushed news (a DCMI fault event) wakes the NPU poller through the same channel
//! to re-read at once instead of at the next interval.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::host::HostSource;
use super::{DeviceSource, Group, NpuState};
use crate::snapshot::Store;
use crate::snapshot::host::HostSnapshot;
use crate::snapshot::npu::NpuSnapshot;
use crate::snapshot::status::CollectorStatus;

/// Waits until `due` or shutdown; returns false on shutdown.
fn wait_until(shutdown: &Receiver<()>, due: Instant) -> bool {
    let now = Instant::now();
    let timeout = due.saturating_duration_since(now);
    match shutdown.recv_timeout(timeout) {
        Err(RecvTimeoutError::Timeout) => true,
        Ok(()) | Err(RecvTimeoutError::Disconnected) => false,
    }
}

fn status(
    name: &str,
    success: bool,
    duration: Duration,
    previous: Option<&CollectorStatus>,
) -> CollectorStatus {
    CollectorStatus {
        name: name.to_string(),
        success,
        duration,
        last_success: if success {
            Some(SystemTime::now())
        } else {
            previous.and_then(|p| p.last_success)
        },
    }
}

/// What wakes the NPU poller before its next group is due.
enum Wake {
    /// Stop.
    Shutdown,
    /// The source has pushed news to read.
    Source,
}

/// Waits until `due`, shutdown or a wake-up from the source.
fn wait_npu(wake: &Receiver<Wake>, due: Instant) -> Option<Wake> {
    match wake.recv_timeout(due.saturating_duration_since(Instant::now())) {
        Err(RecvTimeoutError::Timeout) => None,
        Ok(w) => Some(w),
        Err(RecvTimeoutError::Disconnected) => Some(Wake::Shutdown),
    }
}

/// The poller's wake channel: the source's waker rings it (never blocking: one pending
/// wake-up is enough), and a small thread turns the shutdown signal into a message on it.
fn wake_channel(shutdown: Receiver<()>) -> std::io::Result<(super::Waker, Receiver<Wake>)> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Wake>(2);
    let stop: SyncSender<Wake> = tx.clone();
    std::thread::Builder::new()
        .name("hcclwatch-npu-stop".into())
        .spawn(move || {
            // Returns on a message or when every sender is dropped: both mean stop.
            let _ = shutdown.recv();
            let _ = stop.send(Wake::Shutdown);
        })?;
    let waker: super::Waker = Arc::new(move || {
        // Full: a wake-up is already pending, which covers this one too.
        let _ = tx.try_send(Wake::Source);
    });
    Ok((waker, rx))
}

/// Starts the NPU poller thread. `schedule` lists the enabled groups and their intervals;
/// the inventory group is always run first. `expected_npus` is `telemetry.expected_npus`,
/// published with every snapshot for the device counts.
pub fn spawn_npu(
    mut source: Box<dyn DeviceSource>,
    schedule: Vec<(Group, Duration)>,
    expected_npus: u32,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let (waker, wake) = wake_channel(shutdown)?;
    source.set_waker(waker);
    std::thread::Builder::new()
        .name("hcclwatch-npu".into())
        .spawn(move || {
            let start = Instant::now();
            let mut due: Vec<(Group, Duration, Instant)> =
                schedule.iter().map(|(g, i)| (*g, *i, start)).collect();
            let mut state = NpuState::default();
            let mut part = NpuSnapshot {
                backend: Some(source.name()),
                expected_npus,
                ..NpuSnapshot::default()
            };
            let mut seen: HashSet<Group> = HashSet::new();
            loop {
                // Earliest due; ties go to schedule order (inventory first).
                let Some(idx) = (0..due.len()).min_by_key(|i| (due[*i].2, *i)) else {
                    return;
                };
                match wait_npu(&wake, due[idx].2) {
                    Some(Wake::Shutdown) => return,
                    Some(Wake::Source) => {
                        // Pushed news: re-read what it concerns now, publish, then go back
                        // to the schedule (which the wake-up does not move).
                        if source.on_wake(&mut state).is_some() {
                            part.state = state.clone();
                            part.stats = source.stats();
                            store.publish_npu(part.clone());
                        }
                        continue;
                    }
                    None => {}
                }
                let (group, interval, _) = due[idx];
                let t0 = Instant::now();
                let report = source.collect(group, &mut state);
                let took = t0.elapsed();
                let available = source.available();
                let name = group.collector();
                let backend = source.name();
                if available {
                    let st = status(name, report.errors == 0, took, part.collectors.get(name));
                    part.collectors.insert(name.to_string(), st);
                } else {
                    // One cause, one signal: while the backend is absent only its own
                    // collector reports failure, not every reading group.
                    part.collectors.retain(|k, _| k == backend);
                }
                if group == Group::Inventory {
                    let st = status(
                        backend,
                        available && report.errors == 0,
                        took,
                        part.collectors.get(backend),
                    );
                    part.collectors.insert(backend.to_string(), st);
                }
                part.backend_up = available;
                part.state = state.clone();
                part.stats = source.stats();
                store.publish_npu(part.clone());
                seen.insert(group);
                if seen.len() == due.len() {
                    store.set_npu_ready();
                }
                let next = due[idx].2 + interval;
                let now = Instant::now();
                due[idx].2 = next.max(now);
            }
        })
}

/// Starts the host poller thread.
pub fn spawn_host(
    mut source: HostSource,
    interval: Duration,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hcclwatch-host".into())
        .spawn(move || {
            let mut due = Instant::now();
            let mut part = HostSnapshot::default();
            loop {
                if !wait_until(&shutdown, due) {
                    return;
                }
                let t0 = Instant::now();
                let readings = source.collect();
                let took = t0.elapsed();
                let st = status("host", readings.is_some(), took, part.collector.as_ref());
                part.readings = readings;
                part.collector = Some(st);
                store.publish_host(part.clone());
                store.set_host_ready();
                let next = due + interval;
                let now = Instant::now();
                due = next.max(now);
            }
        })
}
