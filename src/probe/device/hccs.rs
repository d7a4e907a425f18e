//! The HCCS ping mesh (Atlas A3): a resident DCMI task per local NPU that pings the vNIC
//! addresses of the other NPUs of the super-pod over HCCS, read periodically.
//!
//! The device plane hands this module the destinations of each local NPU whenever the
//! group forms ([`HccsMesh::set_plan`]); a thread of its own then, every read interval:
//! - decides once whether the mesh is available at all (a missing function, `-8255` or
//!   `-8002` means not: one log line, a state for `/metrics`, and no call is made again);
//! - starts each NPU's tasks (at most 48 destinations per task and two task slots per NPU;
//!   with more destinations the two slots rotate through them, one chunk per read);
//! - reads each task's state and restarts one found stopped (a chip reset drops it);
//! - reads the statistics, turns the library's running totals into per-read amounts and
//!   keeps them per local NPU, dropping implausible values (counted as invalid);
//! - stops a task whose destinations changed, and every task when the daemon stops.
//!
//! The calls go through [`MeshDriver`], which the composition root implements over DCMI
//! (this module never sees the library), each call with the DCMI call deadline.
//!
//! The results are exported, not judged: the device health engine takes the RoCE pings
//! only (see `docs/device-plane.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::snapshot::histogram::Histogram;
use crate::snapshot::probe::{HccsLossy, HccsState, HccsView, LocalHccs};

/// Destinations per task (`HCCS_PING_MESH_MAX_NUM`).
pub const MAX_DESTINATIONS: usize = 48;

/// Task slots per NPU (`task_id` 0 and 1).
pub const TASK_SLOTS: u32 = 2;

/// Packets per destination and round the driver asks for (MindCluster NodeD's default);
/// bounds what a read may plausibly report.
pub const PACKETS_PER_ROUND: u32 = 10;

/// Longest round trip a reading may claim, seconds: anything longer is garbage.
const MAX_RTT: f64 = 60.0;

/// How long stopping the tasks may take when the daemon stops.
const STOP_BOUND: Duration = Duration::from_secs(2);

/// Why the mesh is not available on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// `-8255`: not an Atlas A3.
    NotSupported,
    /// The DCMI library lacks a ping-mesh function.
    MissingFunction,
    /// `-8002`: not root, or an unprivileged container.
    NotPermitted,
}

impl Unavailable {
    fn state(self) -> HccsState {
        match self {
            Unavailable::NotSupported => HccsState::NotSupported,
            Unavailable::MissingFunction => HccsState::MissingFunction,
            Unavailable::NotPermitted => HccsState::NotPermitted,
        }
    }
}

/// Why one ping-mesh call gave nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshCallError {
    /// The mesh is not available (the driver found out on this call).
    #[error("not available: {0:?}")]
    Unavailable(Unavailable),
    /// Anything else (a DCMI error, a missed deadline, an NPU not in the inventory).
    #[error("{0}")]
    Failed(String),
}

/// One task to start: destinations (1 to 48 vNIC addresses), its slot, its round interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HccsTask {
    /// The destinations' vNIC addresses.
    pub destinations: Vec<Ipv4Addr>,
    /// Task slot, 0 or 1.
    pub task_id: u32,
    /// Seconds between rounds, 1..=60.
    pub round_interval_secs: u32,
}

/// One destination's running totals, as the task reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshSample {
    /// The destination's address as the library writes it.
    pub address: String,
    /// Packets answered since the task started.
    pub replies: u64,
    /// Packets lost since the task started.
    pub losses: u64,
    /// Average round trip, seconds (`None`: not pinged yet).
    pub avg_seconds: Option<f64>,
}

/// Whether the mesh can run on this node, when the driver could ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// It can: the NPU answered the ping-mesh calls.
    Available,
    /// Not known yet (no NPU to ask, or no answer): asked again at the next read.
    Undecided,
}

/// A task's state, as far as the library can say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// The task runs.
    Running,
    /// The task is stopped (a chip reset drops it).
    Stopped,
    /// The library has no state function: an empty reading then means stopped.
    Unknown,
}

/// The DCMI ping-mesh calls, addressed by local physical NPU id.
pub trait MeshDriver: Send {
    /// Whether the mesh can run on this node, or `Err` why not.
    fn available(&mut self) -> Result<Availability, Unavailable>;
    /// Starts (or restarts) `task` on NPU `npu`.
    fn start(&mut self, npu: u32, task: &HccsTask) -> Result<(), MeshCallError>;
    /// The state of task `task_id` on `npu`.
    fn running(&mut self, npu: u32, task_id: u32) -> Result<TaskState, MeshCallError>;
    /// The running totals of task `task_id` on `npu`, one per destination.
    fn read(&mut self, npu: u32, task_id: u32) -> Result<Vec<MeshSample>, MeshCallError>;
    /// Stops task `task_id` on `npu`.
    fn stop(&mut self, npu: u32, task_id: u32) -> Result<(), MeshCallError>;
}

/// A destination of a local NPU: another NPU of the super-pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Destination {
    /// Owning member (candidate index).
    pub node: usize,
    /// Its physical NPU id.
    pub npu: u32,
    /// Its vNIC address.
    pub ip: Ipv4Addr,
}

/// Per local NPU (physical id), its destinations.
pub type Plan = BTreeMap<u32, Vec<Destination>>;

/// HCCS ping-mesh settings.
#[derive(Clone)]
pub struct HccsSettings {
    /// The calls.
    pub driver: Arc<Mutex<Box<dyn MeshDriver>>>,
    /// Seconds between the task's rounds (1..=60).
    pub round_interval_secs: u32,
    /// Between reads.
    pub read_interval: Duration,
    /// This node's super-pod id, shared with the group.
    pub super_pod: Option<u32>,
    /// This node's NPUs' vNIC addresses (physical id, address), read when the group forms.
    pub local_vnics: Arc<dyn Fn() -> Vec<(u32, Ipv4Addr)> + Send + Sync>,
}

impl std::fmt::Debug for HccsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HccsSettings")
            .field("round_interval_secs", &self.round_interval_secs)
            .field("read_interval", &self.read_interval)
            .field("super_pod", &self.super_pod)
            .finish_non_exhaustive()
    }
}

/// What the thread is told.
enum Command {
    Plan(Plan),
    Stop,
}

/// The running mesh: its thread and the view it keeps.
pub struct HccsMesh {
    tx: Sender<Command>,
    view: Arc<Mutex<HccsView>>,
    thread: Option<JoinHandle<()>>,
}

impl HccsMesh {
    /// Starts the thread. It makes no call until the first read interval has passed.
    pub fn start(s: HccsSettings) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let view = Arc::new(Mutex::new(HccsView {
            state: HccsState::Pending,
            local: Vec::new(),
        }));
        let shared = view.clone();
        let thread = std::thread::Builder::new()
            .name("hcclwatch-hccs".into())
            .spawn(move || Worker::new(s, shared).run(&rx))?;
        Ok(Self {
            tx,
            view,
            thread: Some(thread),
        })
    }

    /// New destinations (the group formed): tasks whose destinations changed are stopped
    /// and started again on the next read.
    pub fn set_plan(&self, plan: Plan) {
        let _ = self.tx.send(Command::Plan(plan));
    }

    /// The current view.
    pub fn view(&self) -> HccsView {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for HccsMesh {
    /// Stops every task, waiting at most [`STOP_BOUND`] (each call has its own deadline;
    /// a stuck library is left behind rather than holding up the exit).
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let until = Instant::now() + STOP_BOUND;
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A task slot of one local NPU: what it was started with and the totals last read.
#[derive(Debug, Default)]
struct Slot {
    /// Destinations it runs with (empty: not started).
    running: Vec<Destination>,
    /// Running totals at the last read, per address.
    last: BTreeMap<String, (u64, u64)>,
    /// A failed start was logged as a warning (the next ones at debug, until one works).
    start_warned: bool,
}

/// One local NPU: its destinations split into chunks of 48, the two slots, and which
/// chunk each slot holds.
#[derive(Debug, Default)]
struct Npu {
    chunks: Vec<Vec<Destination>>,
    slots: [Slot; 2],
    /// Next chunk for a rotating slot (only used with more than two chunks).
    next_chunk: usize,
    stats: LocalHccs,
    lossy: BTreeMap<(usize, u32), f64>,
}

struct Worker {
    s: HccsSettings,
    view: Arc<Mutex<HccsView>>,
    state: HccsState,
    npus: BTreeMap<u32, Npu>,
}

impl Worker {
    fn new(s: HccsSettings, view: Arc<Mutex<HccsView>>) -> Self {
        Self {
            s,
            view,
            state: HccsState::Pending,
            npus: BTreeMap::new(),
        }
    }

    fn run(mut self, rx: &Receiver<Command>) {
        let mut next = Instant::now() + self.s.read_interval;
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Command::Plan(p)) => self.set_plan(p),
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    self.stop_all();
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    next = Instant::now() + self.s.read_interval;
                    self.tick();
                }
            }
            self.publish();
        }
    }

    fn driver(&self) -> std::sync::MutexGuard<'_, Box<dyn MeshDriver>> {
        self.s.driver.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a new plan: NPUs that left it have their tasks stopped; the others keep
    /// their counters and get the new chunks (a slot whose chunk changed restarts at the
    /// next read).
    fn set_plan(&mut self, plan: Plan) {
        let gone: Vec<u32> = self
            .npus
            .keys()
            .filter(|n| plan.get(n).is_none_or(Vec::is_empty))
            .copied()
            .collect();
        for npu in gone {
            if let Some(mut n) = self.npus.remove(&npu) {
                self.stop_slots(npu, &mut n);
            }
        }
        for (npu, mut dests) in plan {
            dests.sort();
            dests.dedup_by_key(|d| d.ip);
            if dests.is_empty() {
                continue;
            }
            let chunks: Vec<Vec<Destination>> = dests
                .chunks(MAX_DESTINATIONS)
                .map(<[Destination]>::to_vec)
                .collect();
            let n = self.npus.entry(npu).or_insert_with(|| Npu {
                stats: LocalHccs {
                    npu,
                    rtt: Histogram::default(),
                    ..LocalHccs::default()
                },
                ..Npu::default()
            });
            n.chunks = chunks;
            n.next_chunk = 0;
            n.lossy.clear();
        }
    }

    /// One read interval: decide availability once, then run every NPU's tasks.
    fn tick(&mut self) {
        match self.state {
            HccsState::Pending => match self.available() {
                Ok(Availability::Available) => {
                    tracing::info!(
                        "HCCS ping mesh available: driving a resident task per local NPU"
                    );
                    self.state = HccsState::Running;
                }
                Ok(Availability::Undecided) => return,
                Err(why) => {
                    self.unavailable(why);
                    return;
                }
            },
            HccsState::Running => {}
            _ => return,
        }
        let npus: Vec<u32> = self.npus.keys().copied().collect();
        for npu in npus {
            let Some(mut n) = self.npus.remove(&npu) else {
                continue;
            };
            let r = self.run_npu(npu, &mut n);
            self.npus.insert(npu, n);
            if let Err(why) = r {
                self.unavailable(why);
                return;
            }
        }
    }

    fn available(&self) -> Result<Availability, Unavailable> {
        self.driver().available()
    }

    /// The one log line; no ping-mesh call is made again.
    fn unavailable(&mut self, why: Unavailable) {
        let reason = match why {
            Unavailable::NotSupported => {
                "the NPU refuses it (-8255 NOT_SUPPORT: it is an Atlas A3 feature)"
            }
            Unavailable::MissingFunction => {
                "the DCMI library lacks the ping-mesh functions (an older driver)"
            }
            Unavailable::NotPermitted => {
                "DCMI refuses the caller (-8002: needs root, in a container a privileged one)"
            }
        };
        tracing::info!(
            reason,
            "HCCS ping mesh unavailable on this node; not asking again (RoCE pings continue)"
        );
        self.state = why.state();
    }

    /// The chunks slot `slot` of `n` should run now.
    fn wanted(n: &Npu, slot: usize) -> Option<Vec<Destination>> {
        if n.chunks.len() <= TASK_SLOTS as usize {
            return n.chunks.get(slot).cloned();
        }
        // Rotating: slot s holds chunk (next + s) mod chunks.
        let i = (n.next_chunk + slot) % n.chunks.len();
        Some(n.chunks[i].clone())
    }

    /// One NPU's read: read every running slot (a slot found stopped is started again),
    /// then, with more chunks than slots, move both slots on to the next chunks, and start
    /// what each slot should run.
    fn run_npu(&mut self, npu: u32, n: &mut Npu) -> Result<(), Unavailable> {
        let mut read_any = false;
        for slot in 0..TASK_SLOTS as usize {
            if n.slots[slot].running.is_empty() {
                continue;
            }
            read_any = true;
            let task_id = slot as u32;
            // The driver's lock is released before anything else is called.
            let state = self.driver().running(npu, task_id);
            let stopped = match state {
                Ok(TaskState::Stopped) => true,
                Ok(TaskState::Running | TaskState::Unknown) => false,
                Err(MeshCallError::Unavailable(u)) => return Err(u),
                Err(MeshCallError::Failed(e)) => {
                    tracing::debug!(npu, task_id, error = %e, "HCCS ping-mesh state: no answer");
                    continue;
                }
            };
            let read = if stopped {
                Ok(Vec::new())
            } else {
                self.driver().read(npu, task_id)
            };
            match read {
                // Stopped, or (without a state function) no destination reported: the
                // task was dropped (a chip reset). Started again below.
                Ok(samples) if samples.is_empty() => {
                    tracing::info!(
                        npu,
                        task_id,
                        "HCCS ping-mesh task found stopped (a chip reset?); starting it again"
                    );
                    n.stats.restarts += 1;
                    n.slots[slot].running.clear();
                    n.slots[slot].last.clear();
                }
                Ok(samples) => Self::account(n, slot, &samples, self.max_packets()),
                Err(MeshCallError::Unavailable(u)) => return Err(u),
                Err(MeshCallError::Failed(e)) => {
                    tracing::debug!(npu, task_id, error = %e, "HCCS ping-mesh read: no answer");
                }
            }
        }
        if read_any && n.chunks.len() > TASK_SLOTS as usize {
            n.next_chunk = (n.next_chunk + TASK_SLOTS as usize) % n.chunks.len();
        }
        for slot in 0..TASK_SLOTS as usize {
            let task_id = slot as u32;
            let want = Self::wanted(n, slot).unwrap_or_default();
            if n.slots[slot].running == want {
                continue;
            }
            if !n.slots[slot].running.is_empty() {
                self.stop_slot(npu, task_id, &mut n.slots[slot]);
            }
            if !want.is_empty() {
                self.start_slot(npu, task_id, &want, &mut n.slots[slot])?;
            }
        }
        n.stats.destinations = n.slots.iter().map(|s| s.running.len()).sum();
        Ok(())
    }

    fn start_slot(
        &mut self,
        npu: u32,
        task_id: u32,
        want: &[Destination],
        slot: &mut Slot,
    ) -> Result<(), Unavailable> {
        let task = HccsTask {
            destinations: want.iter().map(|d| d.ip).collect(),
            task_id,
            round_interval_secs: self.s.round_interval_secs,
        };
        slot.last.clear();
        let r = self.driver().start(npu, &task);
        match r {
            Ok(()) => {
                slot.running = want.to_vec();
                slot.start_warned = false;
                tracing::debug!(
                    npu,
                    task_id,
                    destinations = want.len(),
                    "HCCS ping-mesh task started"
                );
                Ok(())
            }
            Err(MeshCallError::Unavailable(u)) => Err(u),
            Err(MeshCallError::Failed(e)) => {
                // Tried again at the next read.
                slot.running.clear();
                if std::mem::replace(&mut slot.start_warned, true) {
                    tracing::debug!(npu, task_id, error = %e, "cannot start the HCCS ping-mesh task");
                } else {
                    tracing::warn!(npu, task_id, error = %e, "cannot start the HCCS ping-mesh task; trying again at every read");
                }
                Ok(())
            }
        }
    }

    fn stop_slot(&mut self, npu: u32, task_id: u32, slot: &mut Slot) {
        let r = self.driver().stop(npu, task_id);
        if let Err(e) = r {
            tracing::debug!(npu, task_id, error = %e, "cannot stop the HCCS ping-mesh task");
        }
        slot.running.clear();
        slot.last.clear();
    }

    fn stop_slots(&mut self, npu: u32, n: &mut Npu) {
        for (i, slot) in n.slots.iter_mut().enumerate() {
            if !slot.running.is_empty() {
                self.stop_slot(npu, i as u32, slot);
            }
        }
    }

    /// Stops every running task (the daemon is stopping).
    fn stop_all(&mut self) {
        if self.state != HccsState::Running {
            return;
        }
        let mut stopped = 0;
        let npus = std::mem::take(&mut self.npus);
        for (npu, mut n) in npus {
            stopped += n.slots.iter().filter(|s| !s.running.is_empty()).count();
            self.stop_slots(npu, &mut n);
        }
        tracing::info!(tasks = stopped, "HCCS ping-mesh tasks stopped");
    }

    /// Most packets one destination may plausibly report between two reads: the rounds
    /// of a read interval (plus slack for a late read) × the packets per round.
    fn max_packets(&self) -> u64 {
        let rounds =
            self.s.read_interval.as_secs_f64() / f64::from(self.s.round_interval_secs.max(1));
        ((rounds * 2.0).ceil() as u64 + 2) * u64::from(PACKETS_PER_ROUND)
    }

    /// Adds one read of slot `slot` to `n`'s counters.
    fn account(n: &mut Npu, slot: usize, samples: &[MeshSample], max_packets: u64) {
        let by_ip: BTreeMap<Ipv4Addr, Destination> =
            n.slots[slot].running.iter().map(|d| (d.ip, *d)).collect();
        let mut seen = BTreeSet::new();
        for s in samples {
            let dest = s
                .address
                .parse::<Ipv4Addr>()
                .ok()
                .and_then(|ip| by_ip.get(&ip).copied());
            let Some(dest) = dest.filter(|d| seen.insert(d.ip)) else {
                n.stats.invalid += 1;
                continue;
            };
            let (was_r, was_l) = n.slots[slot]
                .last
                .insert(s.address.clone(), (s.replies, s.losses))
                .unwrap_or((0, 0));
            // Totals that went down: the task started over; count from zero.
            let (dr, dl) = if s.replies >= was_r && s.losses >= was_l {
                (s.replies - was_r, s.losses - was_l)
            } else {
                (s.replies, s.losses)
            };
            let rtt = s.avg_seconds;
            let rtt_ok = rtt.is_none_or(|t| t.is_finite() && (0.0..MAX_RTT).contains(&t));
            if dr.saturating_add(dl) > max_packets || !rtt_ok {
                n.stats.invalid += 1;
                continue;
            }
            n.stats.received += dr;
            n.stats.sent += dr + dl;
            if dr > 0
                && let Some(t) = rtt
            {
                n.stats.rtt.observe(t);
            }
            let key = (dest.node, dest.npu);
            if dl > 0 {
                n.lossy.insert(key, dl as f64 / (dr + dl) as f64);
            } else if dr > 0 {
                n.lossy.remove(&key);
            }
        }
    }

    fn publish(&self) {
        let local = self
            .npus
            .values()
            .filter(|_| self.state == HccsState::Running)
            .map(|n| {
                let mut l = n.stats.clone();
                l.lossy = n
                    .lossy
                    .iter()
                    .map(|(&(node, npu), &loss_ratio)| HccsLossy {
                        node,
                        npu,
                        loss_ratio,
                    })
                    .collect();
                l
            })
            .collect();
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = HccsView {
            state: self.state,
            local,
        };
    }
}

/// The destinations of each local NPU: every other NPU of the super-pod with a vNIC
/// address. `table` is the group's vNIC table of this super-pod, `me` this node.
pub fn plan(table: &[Destination], me: usize) -> Plan {
    let mut out = Plan::new();
    for src in table.iter().filter(|d| d.node == me) {
        let dests: Vec<Destination> = table
            .iter()
            .filter(|d| !(d.node == me && d.npu == src.npu))
            .copied()
            .collect();
        out.insert(src.npu, dests);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(node: usize, npu: u32) -> Destination {
        Destination {
            node,
            npu,
            ip: Ipv4Addr::new(192, node as u8, 2 + (npu % 2) as u8, 199 - npu as u8),
        }
    }

    /// A driver over a scripted world: records calls, answers totals per (npu, task).
    #[derive(Default)]
    struct Script {
        calls: Vec<String>,
        started: BTreeMap<(u32, u32), Vec<Ipv4Addr>>,
        stopped_by_reset: BTreeSet<(u32, u32)>,
        samples: Vec<MeshSample>,
        unavailable: Option<Unavailable>,
    }

    struct Driver(Arc<Mutex<Script>>);

    impl MeshDriver for Driver {
        fn available(&mut self) -> Result<Availability, Unavailable> {
            let s = self.0.lock().unwrap();
            s.unavailable.map_or(Ok(Availability::Available), Err)
        }
        fn start(&mut self, npu: u32, task: &HccsTask) -> Result<(), MeshCallError> {
            let mut s = self.0.lock().unwrap();
            s.calls.push(format!("start {npu}/{}", task.task_id));
            s.started
                .insert((npu, task.task_id), task.destinations.clone());
            s.stopped_by_reset.remove(&(npu, task.task_id));
            Ok(())
        }
        fn running(&mut self, npu: u32, task_id: u32) -> Result<TaskState, MeshCallError> {
            let s = self.0.lock().unwrap();
            Ok(if s.stopped_by_reset.contains(&(npu, task_id)) {
                TaskState::Stopped
            } else {
                TaskState::Running
            })
        }
        fn read(&mut self, npu: u32, task_id: u32) -> Result<Vec<MeshSample>, MeshCallError> {
            let mut s = self.0.lock().unwrap();
            s.calls.push(format!("read {npu}/{task_id}"));
            Ok(s.samples.clone())
        }
        fn stop(&mut self, npu: u32, task_id: u32) -> Result<(), MeshCallError> {
            let mut s = self.0.lock().unwrap();
            s.calls.push(format!("stop {npu}/{task_id}"));
            s.started.remove(&(npu, task_id));
            Ok(())
        }
    }

    fn worker(script: &Arc<Mutex<Script>>) -> Worker {
        let s = HccsSettings {
            driver: Arc::new(Mutex::new(Box::new(Driver(script.clone())))),
            round_interval_secs: 1,
            read_interval: Duration::from_secs(2),
            super_pod: None,
            local_vnics: Arc::new(Vec::new),
        };
        Worker::new(
            s,
            Arc::new(Mutex::new(HccsView {
                state: HccsState::Pending,
                local: vec![],
            })),
        )
    }

    fn sample(ip: Ipv4Addr, replies: u64, losses: u64, avg: Option<f64>) -> MeshSample {
        MeshSample {
            address: ip.to_string(),
            replies,
            losses,
            avg_seconds: avg,
        }
    }

    #[test]
    fn the_plan_is_every_other_npu_of_the_pod() {
        let table: Vec<Destination> = (0..2)
            .flat_map(|n| (0..2).map(move |p| dest(n, p)))
            .collect();
        let p = plan(&table, 1);
        assert_eq!(p.len(), 2);
        assert_eq!(p[&0], vec![dest(0, 0), dest(0, 1), dest(1, 1)]);
        assert_eq!(p[&1], vec![dest(0, 0), dest(0, 1), dest(1, 0)]);
    }

    #[test]
    fn more_than_two_chunks_rotate_through_both_slots() {
        // Every read answers something (an empty read means a dropped task).
        let script = Arc::new(Mutex::new(Script {
            samples: vec![sample(Ipv4Addr::new(192, 9, 9, 9), 1, 0, None)],
            ..Script::default()
        }));
        let mut w = worker(&script);
        // 150 destinations: chunks of 48, 48, 48, 6.
        let dests: Vec<Destination> = (0..150).map(|i| dest(1 + i / 8, (i % 8) as u32)).collect();
        w.set_plan(Plan::from([(0, dests)]));
        w.tick();
        let first: Vec<usize> = {
            let s = script.lock().unwrap();
            s.started.values().map(Vec::len).collect()
        };
        assert_eq!(first, vec![48, 48]);
        w.tick();
        w.tick();
        let s = script.lock().unwrap();
        // Started: chunks 0,1; 2,3; then 0,1 again; each slot stopped before a new chunk.
        let starts = s.calls.iter().filter(|c| c.starts_with("start")).count();
        let stops = s.calls.iter().filter(|c| c.starts_with("stop")).count();
        assert_eq!((starts, stops), (6, 4), "{:?}", s.calls);
        assert_eq!(s.started[&(0, 1)].len(), 48);
    }

    #[test]
    fn reads_become_per_read_amounts_and_bad_values_are_dropped() {
        let script = Arc::new(Mutex::new(Script::default()));
        let mut w = worker(&script);
        let (a, b) = (dest(1, 0), dest(1, 1));
        w.set_plan(Plan::from([(0, vec![a, b])]));
        w.tick(); // starts
        script.lock().unwrap().samples = vec![
            sample(a.ip, 20, 0, Some(1e-4)),
            sample(b.ip, 15, 5, Some(2e-4)),
            // Not a destination of the task.
            sample(Ipv4Addr::new(192, 9, 9, 9), 1, 0, None),
        ];
        w.tick();
        script.lock().unwrap().samples = vec![
            sample(a.ip, 40, 0, Some(1e-4)),
            // Huge: more packets than two reads could send.
            sample(b.ip, 15, 5_000_000, Some(2e-4)),
        ];
        w.tick();
        script.lock().unwrap().samples = vec![
            // Went down: the task started over.
            sample(a.ip, 10, 0, Some(f64::NAN)),
        ];
        w.tick();
        let n = &w.npus[&0];
        assert_eq!(n.stats.received, 20 + 15 + 20);
        assert_eq!(n.stats.sent, 20 + 20 + 20);
        // The foreign address, the huge count, the NaN time.
        assert_eq!(n.stats.invalid, 3);
        assert_eq!(n.stats.rtt.count(), 3);
        assert_eq!(n.lossy.get(&(1, 1)), Some(&0.25));
        assert_eq!(n.lossy.get(&(1, 0)), None);
    }

    #[test]
    fn new_destinations_restart_the_task_and_a_dropped_npu_is_stopped() {
        let script = Arc::new(Mutex::new(Script {
            samples: vec![sample(Ipv4Addr::new(192, 9, 9, 9), 1, 0, None)],
            ..Script::default()
        }));
        let mut w = worker(&script);
        w.set_plan(Plan::from([(0, vec![dest(1, 0)]), (1, vec![dest(1, 0)])]));
        w.tick();
        // The same plan again (the group re-formed unchanged): nothing restarts.
        w.set_plan(Plan::from([(0, vec![dest(1, 0)]), (1, vec![dest(1, 0)])]));
        w.tick();
        assert_eq!(
            script.lock().unwrap().calls,
            vec!["start 0/0", "start 1/0", "read 0/0", "read 1/0"]
        );
        // NPU 0 gets another destination; NPU 1 has none left.
        script.lock().unwrap().calls.clear();
        w.set_plan(Plan::from([(0, vec![dest(1, 0), dest(1, 1)])]));
        assert_eq!(script.lock().unwrap().calls, vec!["stop 1/0"]);
        w.tick();
        let s = script.lock().unwrap();
        assert_eq!(
            s.calls,
            vec!["stop 1/0", "read 0/0", "stop 0/0", "start 0/0"]
        );
        assert_eq!(s.started[&(0, 0)], vec![dest(1, 0).ip, dest(1, 1).ip]);
        assert!(!s.started.contains_key(&(1, 0)));
    }

    #[test]
    fn a_stopped_task_is_restarted_and_unavailability_is_final() {
        let script = Arc::new(Mutex::new(Script::default()));
        let mut w = worker(&script);
        w.set_plan(Plan::from([(0, vec![dest(1, 0)])]));
        w.tick();
        script.lock().unwrap().stopped_by_reset.insert((0, 0));
        w.tick();
        assert_eq!(w.npus[&0].stats.restarts, 1);
        let starts = |s: &Script| s.calls.iter().filter(|c| c.starts_with("start")).count();
        assert_eq!(starts(&script.lock().unwrap()), 2);
        w.stop_all();
        assert!(script.lock().unwrap().started.is_empty());

        let script = Arc::new(Mutex::new(Script {
            unavailable: Some(Unavailable::NotSupported),
            ..Script::default()
        }));
        let mut w = worker(&script);
        w.set_plan(Plan::from([(0, vec![dest(1, 0)])]));
        for _ in 0..3 {
            w.tick();
        }
        assert_eq!(w.state, HccsState::NotSupported);
        assert!(script.lock().unwrap().calls.is_empty());
        w.publish();
        assert!(w.view.lock().unwrap().local.is_empty());
    }
}
