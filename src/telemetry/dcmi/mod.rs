//! NPU telemetry from Ascend's DCMI library (`libdcmi.so`), loaded at run time.
//!
//! The library is searched for, loaded and initialised once; every call then goes through
//! [`runner::Runner`], which puts it on a dedicated thread with a deadline. Readings are
//! converted to SI units here and stored in [`ChipReadings`]; nothing in this module is
//! reachable from a scrape.
//!
//! Error semantics, following the DCMI reference and npu-exporter's field experience:
//! - a missing symbol makes the function unsupported, logged once, never called again;
//! - `-8255` makes that (call, input type, chip) unsupported — per chip, because on
//!   multi-die cards one die may refuse what the other answers (Atlas A3 power);
//! - `-8012`, or health `0xFFFFFFFF`, means the card dropped: fault `0x40F84E00` is raised;
//! - any other error omits that series for this cycle and is counted per (call, code);
//! - a call that misses its deadline omits the series and is counted as timed out.
//!
//! Fault events pushed by `dcmi_subscribe_fault_event` (where the library has it and the
//! process may use it) wake the poller, which re-reads the health and fault codes of the
//! chips they concern at once ([`DeviceSource::on_wake`]).

#[allow(unsafe_code)]
mod ffi;
mod layout;
mod types;

pub(crate) mod codes;
pub mod convert;
mod groups;
pub mod pingmesh;
pub(crate) mod runner;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use self::codes::{Class, UnsupportedReason};
use self::ffi::{DcmiLib, FaultEvent, Raw};
use self::runner::{RunError, Runner};
use super::faults::SharedFaultTable;
use super::{DeviceSource, Group, GroupReport, NpuState, SourceStats, Waker};
use crate::snapshot::npu::{self as model, ChipReadings, Scope, Unsupported};

pub use self::ffi::kill_when_parent_exits;
pub use self::pingmesh::PingMesh;

/// Fault events queued between the library's callback and the poller; more are dropped
/// (and counted) rather than blocking the library's thread.
pub const FAULT_EVENT_QUEUE: usize = 1024;

/// The call that gives a fault code's text; its `-8255` is per code, not per chip.
const CODE_TEXT: &str = "dcmi_get_device_errorcode_string";

/// Directories searched for `libdcmi.so` after `LD_LIBRARY_PATH`, as npu-exporter's image
/// and DaemonSet lay them out.
pub const DEFAULT_SEARCH_DIRS: &[&str] = &[
    "/usr/local/dcmi",
    "/usr/local/Ascend/driver/lib64/driver",
    "/usr/local/Ascend/driver/lib64",
];

/// How the DCMI backend is set up.
#[derive(Debug, Clone)]
pub struct DcmiOptions {
    /// Explicit library path; when set, nothing else is tried.
    pub library: Option<PathBuf>,
    /// The value of `LD_LIBRARY_PATH`, searched first.
    pub ld_library_path: Option<String>,
    /// Deadline for one call.
    pub call_deadline: Duration,
    /// Deadline for `dcmi_get_device_network_health`.
    pub network_health_deadline: Duration,
    /// Stuck calls tolerated before calls are suspended.
    pub max_stuck_calls: usize,
    /// HCCS bandwidth sampling window.
    pub hccs_profiling_time: Duration,
    /// The fault-level table (shared with whoever reloads it).
    pub fault_table: SharedFaultTable,
}

impl Default for DcmiOptions {
    fn default() -> Self {
        Self {
            library: None,
            ld_library_path: None,
            call_deadline: Duration::from_secs(2),
            network_health_deadline: Duration::from_secs(1),
            max_stuck_calls: 4,
            hccs_profiling_time: Duration::from_millis(200),
            fault_table: SharedFaultTable::default(),
        }
    }
}

/// Why the DCMI backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum DcmiError {
    /// No candidate path could be loaded.
    #[error(
        "cannot load libdcmi.so; tried {}. Install the Ascend driver, or set telemetry.dcmi_library (or LD_LIBRARY_PATH) to the directory holding libdcmi.so",
        describe_tried(.tried)
    )]
    NotLoaded {
        /// Each path tried and why it failed.
        tried: Vec<(PathBuf, String)>,
    },
    /// `dcmi_init` is not exported.
    #[error("{path} does not export dcmi_init; it is not a DCMI library")]
    InitMissing {
        /// The library.
        path: PathBuf,
    },
    /// `dcmi_init` returned an error.
    #[error("dcmi_init in {path} failed with {code} ({}); check that /dev/davinci_manager and the driver are present", codes::name(*.code))]
    InitFailed {
        /// The library.
        path: PathBuf,
        /// DCMI status.
        code: i32,
    },
    /// `dcmi_init` did not return within the call deadline.
    #[error("dcmi_init in {path} did not return within {deadline:?}")]
    InitTimeout {
        /// The library.
        path: PathBuf,
        /// The deadline.
        deadline: Duration,
    },
}

fn describe_tried(tried: &[(PathBuf, String)]) -> String {
    if tried.is_empty() {
        return "no paths".into();
    }
    tried
        .iter()
        .map(|(p, why)| format!("{} ({why})", p.display()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error with its sources, `outer: inner: …` (libloading keeps dlerror's text in the
/// source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Candidate library paths in search order.
pub fn candidate_paths(explicit: Option<&Path>, ld_library_path: Option<&str>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = Vec::new();
    let dirs = ld_library_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(DEFAULT_SEARCH_DIRS.iter().copied());
    for dir in dirs {
        let p = Path::new(dir).join("libdcmi.so");
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// A privileged daemon must not load code that a non-root user could have replaced.
/// Returns a warning when the file or a parent directory is group/other-writable or not
/// owned by root (npu-exporter refuses such paths; we load but say so loudly).
fn ownership_warning(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut cur = Some(path);
    while let Some(p) = cur {
        if let Ok(m) = std::fs::metadata(p)
            && (m.uid() != 0 || m.mode() & 0o022 != 0)
            && m.mode() & 0o1000 == 0
        {
            return Some(format!(
                "{} is writable by non-root users or not owned by root (uid {}, mode {:o}); a local user could replace the DCMI library",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        cur = p.parent();
    }
    None
}

struct Loaded {
    path: PathBuf,
    runner: Runner,
    lib: Arc<DcmiLib>,
}

/// The key of an "unsupported" verdict: the call (with its input type) and what it covers.
type UnsupportedKey = (String, Scope);

/// The DCMI device source.
pub struct DcmiSource {
    opts: DcmiOptions,
    loaded: Option<Loaded>,
    last_error: Option<String>,
    unsupported: BTreeMap<UnsupportedKey, UnsupportedReason>,
    call_errors: BTreeMap<(String, String), u64>,
    timeouts: BTreeMap<String, u64>,
    logged: HashSet<String>,
    /// The readings that are invalid now, with why (the [`Invalid`] kind): a reading is
    /// logged when it becomes invalid, when the kind changes and when it is valid again,
    /// never at every read while it stays.
    invalid_logged: HashMap<Reading, &'static str>,
    /// Pushed fault events, when subscribed.
    events: Option<Receiver<FaultEvent>>,
    /// Whether the subscription is active (`None`: not attempted).
    subscription: Option<bool>,
    /// The last severity seen in a fault event, per code: the level of a code the table
    /// does not list depends on it.
    event_severity: HashMap<u32, u8>,
    /// `dcmi_get_device_errorcode_string` per code: `Some` text, or `None` when the library
    /// answered with an error for it (asked once, not every cycle).
    descriptions: HashMap<u32, Option<String>>,
    /// The fault-level file's `consecutive_reads` and `clear_after`, per chip and code.
    debounce: super::fault_overrides::FaultDebounce,
}

impl std::fmt::Debug for DcmiSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcmiSource")
            .field("loaded", &self.loaded.as_ref().map(|l| l.path.clone()))
            .finish_non_exhaustive()
    }
}

/// The outcome of one DCMI call, after classification.
enum Got<T> {
    Value(T),
    Unsupported,
    Dropped,
    /// The call returned an error code.
    Failed,
    /// No answer: deadline missed, still stuck, or not issued.
    NoAnswer,
}

impl<T> Got<T> {
    /// The value, or `None`: for an unsupported reading (not an error), and for a failed
    /// call, no answer or a dropped card after counting one error in `errors`.
    fn value(self, errors: &mut u32) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            Got::Unsupported => None,
            Got::Dropped | Got::Failed | Got::NoAnswer => {
                *errors += 1;
                None
            }
        }
    }
}

/// Why a value DCMI returned is no physical reading: logged once when a [`Reading`]
/// becomes invalid (and once when it is valid again), counted as `invalid_value` at every
/// read; the series is omitted until the value is valid again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Invalid {
    /// A sensor reading outside its physical range, or an all-ones sentinel.
    #[error(transparent)]
    Range(#[from] convert::RangeError),
    /// A call result outside the values the call documents.
    #[error("result {0}")]
    Result(i32),
    /// A health value other than 0 to 3 (or the dropped card's all-ones).
    #[error("health {0}")]
    Health(u32),
    /// A utilization that is no percentage.
    #[error("type {kind}: {percent}%")]
    Percent {
        /// The utilization type asked for.
        kind: i32,
        /// What DCMI returned.
        percent: u32,
    },
    /// An HBM record whose sizes do not add up.
    #[error("{0:?}")]
    Hbm(types::HbmInfo),
    /// A DDR record whose sizes do not add up.
    #[error("{0:?}")]
    Ddr(types::DdrInfo),
    /// An MCU board power that is no power.
    #[error("{0:#x} dW")]
    McuPower(i32),
    /// HCCS link bandwidths that are no bandwidth.
    #[error("{0} link value(s) not a bandwidth")]
    Links(usize),
}

impl Invalid {
    /// The kind of invalid value, without the value itself: a reading whose junk changes
    /// from read to read is still logged once.
    fn reason(&self) -> &'static str {
        match self {
            Invalid::Range(_) => "out_of_range",
            Invalid::Result(_) => "result",
            Invalid::Health(_) => "health",
            Invalid::Percent { .. } => "percent",
            Invalid::Hbm(_) => "hbm",
            Invalid::Ddr(_) => "ddr",
            Invalid::McuPower(_) => "mcu_power",
            Invalid::Links(_) => "links",
        }
    }
}

/// One reading an invalid value is about: the call, its input type (the utilisation type,
/// for example), the part of the answer that was checked (empty for the whole answer), and
/// the chip or card. Readings of one call that differ in any of these are logged apart, so
/// that one chip's valid utilisation type does not make another type's invalid value log
/// again, nor a valid HCCS answer its invalid link values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Reading {
    call: &'static str,
    input: Option<i32>,
    part: &'static str,
    at: Scope,
}

impl Reading {
    /// The whole answer of `call` with `input` at `at`.
    fn of(call: &'static str, input: Option<i32>, at: Scope) -> Self {
        Self {
            call,
            input,
            part: "",
            at,
        }
    }

    /// One part of that answer.
    fn part(self, part: &'static str) -> Self {
        Self { part, ..self }
    }
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.call)?;
        if let Some(i) = self.input {
            write!(f, "({i})")?;
        }
        if !self.part.is_empty() {
            write!(f, " {}", self.part)?;
        }
        Ok(())
    }
}

impl DcmiSource {
    /// Loads and initialises DCMI, or fails with every path tried.
    pub fn open(opts: DcmiOptions) -> Result<Self, DcmiError> {
        let mut s = Self::unloaded(opts);
        s.try_load()?;
        Ok(s)
    }

    /// A source that is not loaded yet; [`DeviceSource::collect`] for the inventory group
    /// retries loading (the `auto` backend, where the driver may come up later).
    pub fn unloaded(opts: DcmiOptions) -> Self {
        Self {
            opts,
            loaded: None,
            last_error: None,
            unsupported: BTreeMap::new(),
            call_errors: BTreeMap::new(),
            timeouts: BTreeMap::new(),
            logged: HashSet::new(),
            invalid_logged: HashMap::new(),
            events: None,
            subscription: None,
            event_severity: HashMap::new(),
            descriptions: HashMap::new(),
            debounce: Default::default(),
        }
    }

    /// An unloaded source that remembers why loading failed, so the retry loop does not
    /// log the same failure again.
    pub fn failed(opts: DcmiOptions, err: &DcmiError) -> Self {
        let mut s = Self::unloaded(opts);
        s.last_error = Some(err.to_string());
        s
    }

    /// The most recent load error, if the library is not loaded.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    fn try_load(&mut self) -> Result<(), DcmiError> {
        let candidates = candidate_paths(
            self.opts.library.as_deref(),
            self.opts.ld_library_path.as_deref(),
        );
        let mut tried = Vec::new();
        for path in candidates {
            if !path.exists() {
                tried.push((path, "not found".to_string()));
                continue;
            }
            let lib = match DcmiLib::open(&path) {
                Ok(l) => l,
                Err(e) => {
                    tried.push((path, error_chain(&e)));
                    continue;
                }
            };
            if let Some(w) = ownership_warning(&path) {
                tracing::warn!(library = %path.display(), "{w}");
            }
            let missing: Vec<&str> = lib
                .symbol_presence()
                .into_iter()
                .filter(|(_, present)| !present)
                .map(|(n, _)| n)
                .collect();
            let lib = Arc::new(lib);
            let mut runner = Runner::new(lib.clone(), self.opts.max_stuck_calls);
            match runner.call("dcmi_init", self.opts.call_deadline, |l| l.init()) {
                Ok(Ok(())) => {}
                Ok(Err(Raw::Missing)) => return Err(DcmiError::InitMissing { path }),
                Ok(Err(Raw::Code(code))) => return Err(DcmiError::InitFailed { path, code }),
                Err(_) => {
                    return Err(DcmiError::InitTimeout {
                        path,
                        deadline: self.opts.call_deadline,
                    });
                }
            }
            for name in &missing {
                self.unsupported.insert(
                    ((*name).to_string(), Scope::Call),
                    UnsupportedReason::MissingSymbol,
                );
            }
            if !missing.is_empty() {
                tracing::warn!(
                    library = %path.display(),
                    missing = %missing.join(","),
                    "DCMI library lacks some functions; those readings are unsupported (an older driver?)"
                );
            }
            tracing::info!(library = %path.display(), "DCMI initialised");
            self.loaded = Some(Loaded { path, runner, lib });
            self.last_error = None;
            self.subscribe();
            return Ok(());
        }
        Err(DcmiError::NotLoaded { tried })
    }

    /// Subscribes to fault events, where the library has the function and lets us.
    fn subscribe(&mut self) {
        let got = self.call("dcmi_subscribe_fault_event", None, Scope::Call, |l| {
            l.subscribe_fault_events(FAULT_EVENT_QUEUE)
        });
        self.subscription = match got {
            Got::Value(rx) => {
                self.events = Some(rx);
                tracing::info!("subscribed to DCMI fault events; a new fault is re-read at once");
                Some(true)
            }
            // A missing symbol is logged with the others at load.
            Got::Unsupported => None,
            _ => {
                tracing::warn!(
                    "cannot subscribe to DCMI fault events (in a container this needs root); fault codes are read every health interval only"
                );
                Some(false)
            }
        };
    }

    /// A ping-mesh handle over the loaded library, with its own call thread, for the
    /// device prober; `None` when DCMI is not loaded.
    pub fn ping_mesh(&self) -> Option<PingMesh> {
        let l = self.loaded.as_ref()?;
        Some(PingMesh::new(
            l.lib.clone(),
            self.opts.call_deadline,
            self.opts.max_stuck_calls,
        ))
    }

    /// Whether (`call` with input type `sub`) is unsupported at `at`: its symbol is
    /// missing, or that call answered `-8255` there.
    fn is_unsupported(&self, call: &str, name: &str, at: Scope) -> bool {
        self.unsupported
            .contains_key(&(call.to_string(), Scope::Call))
            || self.unsupported.contains_key(&(name.to_string(), at))
    }

    /// Issues one call through the runner and classifies its result. `sub` is the input
    /// type of typed calls; `at` is the chip or card the call is about (`Scope::Call` for
    /// calls about neither). `-8255` is cached per (call, sub, at); a missing symbol per
    /// call.
    fn call<T, F>(&mut self, call: &'static str, sub: Option<i32>, at: Scope, f: F) -> Got<T>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> Result<T, Raw> + Send + 'static,
    {
        let name = match sub {
            Some(s) => format!("{call}({s})"),
            None => call.to_string(),
        };
        if self.is_unsupported(call, &name, at) {
            return Got::Unsupported;
        }
        let Some(loaded) = self.loaded.as_mut() else {
            return Got::NoAnswer;
        };
        let deadline = if call == "dcmi_get_device_network_health" {
            self.opts.network_health_deadline
        } else if call == "dcmi_get_hccs_link_bandwidth_info" {
            self.opts.call_deadline + self.opts.hccs_profiling_time
        } else {
            self.opts.call_deadline
        };
        let key = format!("{name}@{at:?}");
        match loaded.runner.call(&key, deadline, f) {
            Ok(Ok(v)) => Got::Value(v),
            Ok(Err(raw)) => match codes::classify(raw) {
                // The text of a fault code is a property of the code: -8255 there means
                // "no text for this code", which the caller remembers per code. The chip
                // keeps being asked for the texts of other codes.
                Class::Unsupported(UnsupportedReason::NotSupported) if call == CODE_TEXT => {
                    tracing::debug!(at = ?at, "DCMI has no text for this fault code");
                    Got::Unsupported
                }
                Class::Unsupported(reason) => {
                    let key = match reason {
                        UnsupportedReason::MissingSymbol => (call.to_string(), Scope::Call),
                        UnsupportedReason::NotSupported => (name, at),
                    };
                    tracing::info!(call = %key.0, at = ?key.1, reason = reason.as_str(), "DCMI reading unsupported; not asking for it there again");
                    self.unsupported.insert(key, reason);
                    Got::Unsupported
                }
                Class::CardDropped => {
                    self.count_error(call, codes::NOT_READY, at);
                    Got::Dropped
                }
                Class::Failed(code) => {
                    self.count_error(call, code, at);
                    Got::Failed
                }
            },
            Err(RunError::Timeout) => {
                *self.timeouts.entry(call.to_string()).or_default() += 1;
                tracing::warn!(call, at = ?at, deadline = ?deadline, "DCMI call missed its deadline; its thread is abandoned and the reading omitted");
                Got::NoAnswer
            }
            Err(RunError::StillStuck) => Got::NoAnswer,
            Err(RunError::Saturated) => {
                if self.logged.insert("saturated".into()) {
                    tracing::error!(
                        max = self.opts.max_stuck_calls,
                        "too many DCMI calls are stuck; DCMI calls suspended until one returns"
                    );
                }
                Got::NoAnswer
            }
            Err(RunError::WorkerGone) => {
                tracing::error!(call, "DCMI worker thread could not run the call");
                Got::NoAnswer
            }
        }
    }

    fn count_error(&mut self, call: &'static str, code: i32, at: Scope) {
        *self
            .call_errors
            .entry((call.to_string(), code.to_string()))
            .or_default() += 1;
        // One warning per (call, code); afterwards debug, so a dropped card does not
        // flood the log every cycle.
        if self.logged.insert(format!("{call}/{code}")) {
            tracing::warn!(call, code, meaning = codes::name(code), at = ?at, "DCMI call failed; series omitted for this cycle");
        } else {
            tracing::debug!(call, code, at = ?at, "DCMI call failed");
        }
    }

    /// Counts a value DCMI returned that is no physical reading; logs it when the reading
    /// becomes invalid or the kind of invalid value changes, not at every read.
    fn count_invalid(&mut self, r: Reading, what: Invalid) {
        *self
            .call_errors
            .entry((r.call.to_string(), "invalid_value".to_string()))
            .or_default() += 1;
        let reason = what.reason();
        if self.invalid_logged.insert(r, reason) != Some(reason) {
            tracing::warn!(
                call = r.call,
                reading = %r,
                at = ?r.at,
                reason,
                "DCMI returned an invalid value ({what}); series omitted until it is valid again"
            );
        }
    }

    /// A reading that was valid: logged once if it had been invalid.
    fn valid_again(&mut self, r: Reading) {
        if let Some(was) = self.invalid_logged.remove(&r) {
            tracing::info!(
                call = r.call,
                reading = %r,
                at = ?r.at,
                was,
                "DCMI value valid again; series restored"
            );
        }
    }

    /// One reading at `at` (usually a chip): the call through [`Self::call`], then `convert`
    /// from DCMI units. `None` when there is no reading: unsupported (not an error), a
    /// failed call or a dropped card (one error in `errors`), or a value `convert` rejects
    /// ([`Invalid`]: counted as `invalid_value`, and one error).
    fn read<T, U, F>(
        &mut self,
        at: Scope,
        errors: &mut u32,
        (call, sub): (&'static str, Option<i32>),
        f: F,
        convert: impl FnOnce(T) -> Result<U, Invalid>,
    ) -> Option<U>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> Result<T, Raw> + Send + 'static,
    {
        let value = self.call(call, sub, at, f).value(errors)?;
        let reading = Reading::of(call, sub, at);
        match convert(value) {
            Ok(v) => {
                self.valid_again(reading);
                Some(v)
            }
            Err(what) => {
                self.count_invalid(reading, what);
                *errors += 1;
                None
            }
        }
    }

    /// Runs a per-chip reader on every known chip; the group's errors are the sum.
    fn each_chip(
        &mut self,
        state: &mut NpuState,
        mut read: impl FnMut(&mut Self, &mut ChipReadings) -> u32,
    ) -> GroupReport {
        let mut errors = 0;
        for chip in state.chips.values_mut() {
            errors += read(self, chip);
        }
        GroupReport { errors }
    }
}

impl DeviceSource for DcmiSource {
    fn name(&self) -> &'static str {
        "dcmi"
    }

    fn available(&self) -> bool {
        self.loaded.is_some()
    }

    fn collect(&mut self, group: Group, state: &mut NpuState) -> GroupReport {
        if self.loaded.is_none() {
            if group != Group::Inventory {
                return GroupReport { errors: 0 };
            }
            if let Err(e) = self.try_load() {
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(error = %msg, "DCMI unavailable; exporting no NPU telemetry and retrying each inventory interval");
                }
                self.last_error = Some(msg);
                state.chips.clear();
                state.cards.clear();
                state.driver_version = None;
                state.mark_enumeration_failed();
                return GroupReport { errors: 1 };
            }
        }
        match group {
            Group::Inventory => self.inventory(state),
            Group::Health => {
                // Events that arrived without a wake-up (before the poller set its waker)
                // are counted here; every chip is re-read below anyway.
                self.drain_events(state);
                self.each_chip(state, Self::health)
            }
            Group::Sensors => {
                let mut report = self.each_chip(state, Self::sensors);
                report.errors += self.card_power(state);
                report
            }
            Group::Utilization => self.each_chip(state, Self::utilization),
            Group::Memory => self.each_chip(state, Self::memory),
            Group::Network => self.each_chip(state, Self::network),
        }
    }

    fn set_waker(&mut self, wake: Waker) {
        ffi::set_fault_event_waker(wake);
    }

    fn on_wake(&mut self, state: &mut NpuState) -> Option<GroupReport> {
        let chips = self.drain_events(state);
        if chips.is_empty() {
            return None;
        }
        let mut errors = 0;
        for phy in chips {
            if let Some(chip) = state.chips.get_mut(&phy) {
                errors += self.health_and_faults(chip).0;
            }
        }
        Some(GroupReport { errors })
    }

    fn ping_mesh(&self) -> Option<PingMesh> {
        DcmiSource::ping_mesh(self)
    }

    fn stats(&self) -> SourceStats {
        SourceStats {
            call_errors: self.call_errors.clone(),
            timeouts: self.timeouts.clone(),
            unsupported: self
                .unsupported
                .iter()
                .map(|((call, scope), r)| Unsupported {
                    call: call.clone(),
                    scope: *scope,
                    reason: r.as_str(),
                })
                .collect::<BTreeSet<_>>(),
            stuck_calls: self.loaded.as_ref().map_or(0, |l| l.runner.stuck_calls()),
            fault_subscription: self.subscription,
            fault_events_dropped: ffi::fault_events_dropped(),
        }
    }
}

impl DcmiSource {
    /// Takes every queued fault event: counts it on its chip, remembers its severity for
    /// the code (the level of a code the table lacks depends on it) and returns the chips
    /// to re-read. An event for a logic id no chip has re-reads every chip.
    fn drain_events(&mut self, state: &mut NpuState) -> BTreeSet<u32> {
        let mut chips = BTreeSet::new();
        let Some(rx) = self.events.as_ref() else {
            return chips;
        };
        let events: Vec<FaultEvent> = rx.try_iter().collect();
        for ev in events {
            if self.event_severity.len() >= 4096 {
                self.event_severity.clear();
            }
            self.event_severity.insert(ev.event_id, ev.severity);
            let chip = state
                .chips
                .values_mut()
                .find(|c| c.address.logic == u32::from(ev.logic_id));
            tracing::info!(
                code = %format!("0x{:08X}", ev.event_id),
                logic_id = ev.logic_id,
                severity = model::event_severity_name(ev.severity),
                assertion = model::event_assertion_name(ev.assertion),
                name = %ev.name,
                "DCMI fault event"
            );
            match chip {
                Some(c) => {
                    let key = (
                        model::event_severity_name(ev.severity),
                        model::event_assertion_name(ev.assertion),
                    );
                    *c.fault_events.entry(key).or_default() += 1;
                    chips.insert(c.address.phy);
                }
                None => chips.extend(state.chips.keys().copied()),
            }
        }
        chips
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_ld_library_path_then_defaults() {
        let c = candidate_paths(None, Some("/opt/a::/opt/b:/usr/local/dcmi"));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/opt/a/libdcmi.so"),
                PathBuf::from("/opt/b/libdcmi.so"),
                PathBuf::from("/usr/local/dcmi/libdcmi.so"),
                PathBuf::from("/usr/local/Ascend/driver/lib64/driver/libdcmi.so"),
                PathBuf::from("/usr/local/Ascend/driver/lib64/libdcmi.so"),
            ]
        );
        assert_eq!(
            candidate_paths(Some(Path::new("/x/lib.so")), Some("/opt/a")),
            vec![PathBuf::from("/x/lib.so")]
        );
    }

    #[test]
    fn not_loaded_error_names_every_path() {
        let opts = DcmiOptions {
            library: None,
            ld_library_path: Some("/nonexistent-a".into()),
            ..DcmiOptions::default()
        };
        let err = DcmiSource::open(opts).unwrap_err().to_string();
        for p in [
            "/nonexistent-a/libdcmi.so",
            "/usr/local/dcmi/libdcmi.so",
            "/usr/local/Ascend/driver/lib64/libdcmi.so",
        ] {
            assert!(err.contains(p), "{err}");
        }
        assert!(err.contains("telemetry.dcmi_library"), "{err}");
    }
}
