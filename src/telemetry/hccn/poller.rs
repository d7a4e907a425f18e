//! The port and optics poller: its own thread, because `hccn_tool` runs are slow
//! subprocesses and the DCMI poller must never wait on them.
//!
//! Two passes, each on its own interval (`[telemetry.intervals] ports` and `optics`):
//!
//! - **ports** (collector `npu_ports`): `-link -g`, `-speed -g`, `-link_stat -g`,
//!   `-net_health -g`, `-ip -g` (falling back to `address_<phy>` of `hccn.conf`),
//!   `-stat -g`, and `-vnic -g` (best effort: a board without a vNIC is not a failure);
//! - **optics** (collector `npu_optics`): `-optical -g`.
//!
//! The NPUs are the physical ids the DCMI inventory knows (the NPU part of the store);
//! when DCMI has no chips, the `address_<phy>` keys of `hccn.conf`. A pass reads every
//! NPU in parallel, one thread per NPU (the tool's own bound on calls in flight applies),
//! and publishes the port part of the store when it is done.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::{Command, Hccn, HccnError, conf};
use crate::snapshot::Store;
use crate::snapshot::port::{IpSource, PortReadings, PortSnapshot};
use crate::snapshot::status::CollectorStatus;

/// What the poller reads and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct PortSchedule {
    /// Interval of the ports pass; `None` turns it off.
    pub ports: Option<Duration>,
    /// Interval of the optics pass; `None` turns it off.
    pub optics: Option<Duration>,
    /// `hccn.conf`, for NPU ids and device IPs when DCMI and the tool have none.
    pub hccn_conf: PathBuf,
    /// An NPU poller runs: wait (at most [`INVENTORY_WAIT`]) for its first inventory
    /// before the first pass, so the first pass reads DCMI's NPUs.
    pub after_inventory: bool,
}

/// The longest the first pass waits for the NPU poller's first inventory.
pub const INVENTORY_WAIT: Duration = Duration::from_secs(10);

/// Waits until the NPU part has been published once, at most [`INVENTORY_WAIT`]; false
/// on shutdown. The store has no change notification, so this looks every 50 ms.
fn wait_for_inventory(store: &Store, shutdown: &Receiver<()>) -> bool {
    let until = Instant::now() + INVENTORY_WAIT;
    while store.npu().backend.is_none() && Instant::now() < until {
        match shutdown.recv_timeout(Duration::from_millis(50)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
    true
}

/// One of the two passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Link, speed, link history, network health, IPs, counters.
    Ports,
    /// The optical module.
    Optics,
}

impl Pass {
    /// The `collector` label value.
    pub fn collector(self) -> &'static str {
        match self {
            Pass::Ports => "npu_ports",
            Pass::Optics => "npu_optics",
        }
    }
}

/// The physical NPU ids to read: DCMI's, else the `address_<phy>` keys of `hccn.conf`.
pub fn npus(store: &Store, conf: &BTreeMap<u32, Ipv4Addr>) -> Vec<u32> {
    let dcmi: Vec<u32> = store.npu().state.chips.keys().copied().collect();
    if dcmi.is_empty() {
        conf.keys().copied().collect()
    } else {
        dcmi
    }
}

/// A reading that failed, for the collector status and the log.
#[derive(Debug)]
struct Failure {
    npu: u32,
    command: Command,
    error: HccnError,
}

/// Keeps `r`'s value, or records why there is none. Absences (not supported, no IP, no
/// module) are not failures.
fn keep<T>(
    r: Result<T, HccnError>,
    npu: u32,
    command: Command,
    fails: &mut Vec<Failure>,
) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(error) => {
            if !error.is_absence() {
                fails.push(Failure {
                    npu,
                    command,
                    error,
                });
            }
            None
        }
    }
}

/// Whether an NPU stopped answering: after such a failure the rest of its pass is
/// skipped, since every further call would wait out its deadline the same way.
fn unresponsive(fails: &[Failure]) -> bool {
    fails.iter().any(|f| {
        matches!(
            f.error,
            HccnError::Timeout(_) | HccnError::DeviceNotReady | HccnError::QueueTimeout(_)
        )
    })
}

/// Reads every port reading of one NPU; `optics` is carried over from `previous`. Stops
/// at the first reading that shows the NPU unresponsive; the rest stay absent.
fn read_port(
    hccn: &Hccn,
    phy: u32,
    conf_ip: Option<Ipv4Addr>,
    previous: Option<&PortReadings>,
) -> (PortReadings, Vec<Failure>) {
    let mut f = Vec::new();
    let mut r = PortReadings {
        optics: previous.and_then(|p| p.optics.clone()),
        ..PortReadings::default()
    };
    // The device IP comes from hccn.conf even when the tool cannot be asked.
    if let Some(ip) = conf_ip {
        r.device_ips = vec![ip];
        r.ip_source = Some(IpSource::HccnConf);
    }
    r.link_up = keep(hccn.link(phy), phy, Command::Link, &mut f);
    if unresponsive(&f) {
        return (r, f);
    }
    r.speed_bits_per_second = keep(hccn.speed(phy), phy, Command::Speed, &mut f).flatten();
    r.link_stat = keep(hccn.link_stat(phy), phy, Command::LinkStat, &mut f);
    if unresponsive(&f) {
        return (r, f);
    }
    r.net_health = keep(hccn.net_health(phy), phy, Command::NetHealth, &mut f).flatten();
    if let Some(ips) = keep(hccn.ip(phy), phy, Command::Ip, &mut f) {
        r.device_ips = ips;
        r.ip_source = Some(IpSource::HccnTool);
    }
    if unresponsive(&f) {
        return (r, f);
    }
    // Every counter the tool printed is kept, those DCMI also gives among them: the device
    // prober reads pause, CNP and FCS counters from here (it runs only with the tool,
    // with or without DCMI); the exporters show each counter from one source only.
    r.counters = keep(hccn.stat(phy), phy, Command::Stat, &mut f);
    if unresponsive(&f) {
        return (r, f);
    }
    // Best effort: boards without a vNIC answer in ways the spec does not pin down.
    match hccn.vnic(phy) {
        Ok(v) => r.vnic_ip = v.ip,
        Err(e) => tracing::debug!(npu = phy, error = %e, "hccn_tool -vnic -g: no vNIC reading"),
    }
    (r, f)
}

/// Runs one pass over `phys` (in parallel, one thread per NPU) and updates `part`.
/// Returns the failed readings.
fn run_pass(
    hccn: &Hccn,
    pass: Pass,
    phys: &[u32],
    conf: &BTreeMap<u32, Ipv4Addr>,
    part: &mut PortSnapshot,
) -> Vec<Failure> {
    part.ports.retain(|phy, _| phys.contains(phy));
    let results: Vec<(u32, Option<PortReadings>, Vec<Failure>)> = std::thread::scope(|s| {
        let handles: Vec<_> = phys
            .iter()
            .map(|&phy| {
                let previous = part.ports.get(&phy);
                let conf_ip = conf.get(&phy).copied();
                s.spawn(move || match pass {
                    Pass::Ports => {
                        let (r, f) = read_port(hccn, phy, conf_ip, previous);
                        (phy, Some(r), f)
                    }
                    Pass::Optics => {
                        let mut f = Vec::new();
                        let mut r = previous.cloned().unwrap_or_default();
                        r.optics = keep(hccn.optical(phy), phy, Command::Optical, &mut f);
                        (phy, Some(r), f)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .zip(phys)
            .map(|(h, &phy)| {
                h.join().unwrap_or_else(|_| {
                    tracing::error!(npu = phy, "port reader thread panicked");
                    (phy, None, Vec::new())
                })
            })
            .collect()
    });
    let mut failures = Vec::new();
    for (phy, readings, f) in results {
        if let Some(r) = readings {
            part.ports.insert(phy, r);
        }
        failures.extend(f);
    }
    failures
}

fn status(
    name: &str,
    success: bool,
    took: Duration,
    prev: Option<&CollectorStatus>,
) -> CollectorStatus {
    CollectorStatus {
        name: name.to_string(),
        success,
        duration: took,
        last_success: if success {
            Some(SystemTime::now())
        } else {
            prev.and_then(|p| p.last_success)
        },
    }
}

/// Starts the poller thread; `None` passes are not run. The thread ends when `shutdown`
/// fires or is dropped.
pub fn spawn(
    hccn: Arc<Hccn>,
    schedule: PortSchedule,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hcclwatch-ports".into())
        .spawn(move || {
            if schedule.after_inventory && !wait_for_inventory(&store, &shutdown) {
                return;
            }
            let start = Instant::now();
            let mut due: Vec<(Pass, Duration, Instant)> = [
                (Pass::Ports, schedule.ports),
                (Pass::Optics, schedule.optics),
            ]
            .into_iter()
            .filter_map(|(p, i)| i.map(|i| (p, i, start)))
            .collect();
            let mut part = PortSnapshot::default();
            loop {
                let Some(idx) = (0..due.len()).min_by_key(|i| (due[*i].2, *i)) else {
                    return;
                };
                let wait = due[idx].2.saturating_duration_since(Instant::now());
                match shutdown.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let (pass, interval, _) = due[idx];
                let t0 = Instant::now();
                let conf = conf::read_addresses(&schedule.hccn_conf);
                let phys = npus(&store, &conf);
                let failures = run_pass(&hccn, pass, &phys, &conf, &mut part);
                let name = pass.collector();
                let ok = failures.is_empty();
                let prev = part.collectors.get(name);
                if let Some(first) = failures.first()
                    && prev.is_none_or(|p| p.success)
                {
                    tracing::warn!(
                        collector = name,
                        failed = failures.len(),
                        npu = first.npu,
                        command = first.command.label(),
                        error = %first.error,
                        "hccn_tool readings failed; their series are omitted"
                    );
                } else if ok && prev.is_some_and(|p| !p.success) {
                    tracing::info!(collector = name, "hccn_tool readings recovered");
                }
                let st = status(name, ok, t0.elapsed(), prev);
                part.collectors.insert(name.to_string(), st);
                store.publish_ports(part.clone());
                let next = due[idx].2 + interval;
                due[idx].2 = next.max(Instant::now());
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::npu::{ChipReadings, NpuSnapshot};

    #[test]
    fn npus_come_from_dcmi_else_hccn_conf() {
        let store = Store::new(false, false);
        let conf: BTreeMap<u32, Ipv4Addr> = [(4, Ipv4Addr::new(10, 0, 0, 4))].into();
        assert_eq!(npus(&store, &conf), vec![4]);
        let mut part = NpuSnapshot::default();
        for phy in [0, 1] {
            part.state.chips.insert(phy, ChipReadings::default());
        }
        store.publish_npu(part);
        assert_eq!(npus(&store, &conf), vec![0, 1]);
        assert!(npus(&Store::new(false, false), &BTreeMap::new()).is_empty());
    }
}
