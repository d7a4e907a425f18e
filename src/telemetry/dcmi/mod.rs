//! NPU telemetry from Ascend's DCMI library (`libdcmi.so`), loaded at run time.
//!
//! The library is searched for, loaded and initialised once; every call then goes through
//! [`runner::Runner`], which puts it on a dedicated thread with a deadline. Readings are
//! converted to SI units here and stored in [`ChipReadings`]; nothing in this module is
//! reachable from a scrape.
//!
//! Error semantics, following the DCMI reference and npu-exporter's field experience:
//! - a missing symbol or `-8255` makes that (call, type) unsupported, logged once, never
//!   called again;
//! - `-8012`, or health `0xFFFFFFFF`, means the card dropped: fault `0x40F84E00` is raised;
//! - any other error omits that series for this cycle and is counted per (call, code);
//! - a call that misses its deadline omits the series and is counted as timed out.

#[allow(unsafe_code)]
mod ffi;

pub mod codes;
pub mod convert;
pub mod runner;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use self::codes::{Class, UnsupportedReason};
use self::ffi::{DcmiLib, Raw};
use self::runner::{RunError, Runner};
use super::{DeviceSource, Group, GroupReport, NpuState, SourceStats};
use crate::snapshot::npu::{
    self as model, ChipAddress, ChipReadings, Ddr, Ecc, Hbm, Identity, PacketCounters, UtilUnit,
};

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
}

/// The DCMI device source.
pub struct DcmiSource {
    opts: DcmiOptions,
    loaded: Option<Loaded>,
    last_error: Option<String>,
    unsupported: BTreeMap<String, UnsupportedReason>,
    call_errors: BTreeMap<(String, String), u64>,
    timeouts: BTreeMap<String, u64>,
    logged: HashSet<String>,
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
    Failed,
}

impl<T> Got<T> {
    /// The value, or `None`: for an unsupported reading (not an error), and for a failed
    /// call or a dropped card after counting one error in `errors`.
    fn value(self, errors: &mut u32) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            Got::Unsupported => None,
            Got::Dropped | Got::Failed => {
                *errors += 1;
                None
            }
        }
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
            let mut runner = Runner::new(lib, self.opts.max_stuck_calls);
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
                self.unsupported
                    .insert((*name).to_string(), UnsupportedReason::MissingSymbol);
            }
            if !missing.is_empty() {
                tracing::warn!(
                    library = %path.display(),
                    missing = %missing.join(","),
                    "DCMI library lacks some functions; those readings are unsupported (an older driver?)"
                );
            }
            tracing::info!(library = %path.display(), "DCMI initialised");
            self.loaded = Some(Loaded { path, runner });
            self.last_error = None;
            return Ok(());
        }
        Err(DcmiError::NotLoaded { tried })
    }

    /// Issues one call through the runner and classifies its result. `sub` is the
    /// input type for typed calls; `-8255` is cached per (call, sub).
    fn call<T, F>(
        &mut self,
        call: &'static str,
        sub: Option<i32>,
        chip: Option<u32>,
        f: F,
    ) -> Got<T>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> Result<T, Raw> + Send + 'static,
    {
        let unsupported_key = match sub {
            Some(s) => format!("{call}({s})"),
            None => call.to_string(),
        };
        if self.unsupported.contains_key(call) || self.unsupported.contains_key(&unsupported_key) {
            return Got::Unsupported;
        }
        let Some(loaded) = self.loaded.as_mut() else {
            return Got::Failed;
        };
        let deadline = if call == "dcmi_get_device_network_health" {
            self.opts.network_health_deadline
        } else if call == "dcmi_get_hccs_link_bandwidth_info" {
            self.opts.call_deadline + self.opts.hccs_profiling_time
        } else {
            self.opts.call_deadline
        };
        let key = format!("{unsupported_key}@{}", chip.map_or(-1, i64::from));
        match loaded.runner.call(&key, deadline, f) {
            Ok(Ok(v)) => Got::Value(v),
            Ok(Err(raw)) => match codes::classify(raw) {
                Class::Unsupported(reason) => {
                    tracing::info!(call = %unsupported_key, reason = reason.as_str(), "DCMI reading unsupported on this device; not calling it again");
                    self.unsupported.insert(unsupported_key, reason);
                    Got::Unsupported
                }
                Class::CardDropped => {
                    self.count_error(call, codes::NOT_READY, chip);
                    Got::Dropped
                }
                Class::Failed(code) => {
                    self.count_error(call, code, chip);
                    Got::Failed
                }
            },
            Err(RunError::Timeout) => {
                *self.timeouts.entry(call.to_string()).or_default() += 1;
                tracing::warn!(call, npu = ?chip, deadline = ?deadline, "DCMI call missed its deadline; its thread is abandoned and the reading omitted");
                Got::Failed
            }
            Err(RunError::StillStuck) => Got::Failed,
            Err(RunError::Saturated) => {
                if self.logged.insert("saturated".into()) {
                    tracing::error!(
                        max = self.opts.max_stuck_calls,
                        "too many DCMI calls are stuck; DCMI calls suspended until one returns"
                    );
                }
                Got::Failed
            }
            Err(RunError::WorkerGone) => {
                tracing::error!(call, "DCMI worker thread could not run the call");
                Got::Failed
            }
        }
    }

    fn count_error(&mut self, call: &'static str, code: i32, chip: Option<u32>) {
        *self
            .call_errors
            .entry((call.to_string(), code.to_string()))
            .or_default() += 1;
        // One warning per (call, code); afterwards debug, so a dropped card does not
        // flood the log every cycle.
        if self.logged.insert(format!("{call}/{code}")) {
            tracing::warn!(call, code, meaning = codes::name(code), npu = ?chip, "DCMI call failed; series omitted for this cycle");
        } else {
            tracing::debug!(call, code, npu = ?chip, "DCMI call failed");
        }
    }

    fn count_invalid(&mut self, call: &'static str, chip: u32, what: String) {
        *self
            .call_errors
            .entry((call.to_string(), "invalid_value".to_string()))
            .or_default() += 1;
        tracing::warn!(
            call,
            npu = chip,
            "DCMI returned an invalid value ({what}); series omitted"
        );
    }

    /// One reading of chip `npu`: the call through [`Self::call`], then `convert` from DCMI
    /// units. `None` when there is no reading: unsupported (not an error), a failed call or
    /// a dropped card (one error in `errors`), or a value `convert` rejects, whose `Err`
    /// describes it (counted as `invalid_value`, and one error).
    fn read<T, U, F>(
        &mut self,
        npu: u32,
        errors: &mut u32,
        (call, sub): (&'static str, Option<i32>),
        f: F,
        convert: impl FnOnce(T) -> Result<U, String>,
    ) -> Option<U>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> Result<T, Raw> + Send + 'static,
    {
        let value = self.call(call, sub, Some(npu), f).value(errors)?;
        match convert(value) {
            Ok(v) => Some(v),
            Err(what) => {
                self.count_invalid(call, npu, what);
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

    fn inventory(&mut self, state: &mut NpuState) -> GroupReport {
        let mut errors = 0;
        state.driver_version = self
            .call("dcmi_get_dcmi_version", None, None, |l| l.dcmi_version())
            .value(&mut errors);
        let cards = match self.call("dcmi_get_card_list", None, None, |l| l.card_list()) {
            Got::Value(c) => c,
            _ => {
                // Keep the chips we know: a failed enumeration must not make devices
                // disappear (their faults would vanish with them).
                return GroupReport { errors: errors + 1 };
            }
        };
        let old: HashMap<(i32, i32), ChipReadings> = state
            .chips
            .values()
            .map(|c| ((c.address.card, c.address.device), c.clone()))
            .collect();
        let mut chips = BTreeMap::new();
        for card in cards {
            let n = match self.call("dcmi_get_device_num_in_card", None, None, move |l| {
                l.device_num_in_card(card)
            }) {
                Got::Value(n) => n.clamp(0, 16),
                _ => {
                    errors += 1;
                    for c in old.values().filter(|c| c.address.card == card) {
                        chips.insert(c.address.phy, c.clone());
                    }
                    continue;
                }
            };
            let serial = self
                .call("dcmi_get_card_elabel_v2", None, None, move |l| {
                    l.card_serial(card)
                })
                .value(&mut errors)
                .filter(|s| !s.is_empty());
            for device in 0..n {
                let addr = match self.enumerate(card, device) {
                    Some(a) => a,
                    None => {
                        errors += 1;
                        if let Some(c) = old.get(&(card, device)) {
                            chips.insert(c.address.phy, c.clone());
                        }
                        continue;
                    }
                };
                let mut chip = old.get(&(card, device)).cloned().unwrap_or_default();
                if chip.address != addr {
                    chip = ChipReadings::default();
                }
                chip.address = addr;
                let (identity, e) = self.identity(addr, serial.clone());
                chip.identity = identity;
                errors += e;
                chips.insert(addr.phy, chip);
            }
        }
        state.chips = chips;
        GroupReport { errors }
    }

    fn enumerate(&mut self, card: i32, device: i32) -> Option<ChipAddress> {
        let logic = match self.call("dcmi_get_device_logic_id", None, None, move |l| {
            l.logic_id(card, device)
        }) {
            Got::Value(v) => u32::try_from(v).ok()?,
            _ => return None,
        };
        let phy = match self.call("dcmi_get_device_phyid_from_logicid", None, None, move |l| {
            l.phy_id_from_logic(logic)
        }) {
            Got::Value(v) => v,
            _ => return None,
        };
        Some(ChipAddress {
            card,
            device,
            logic,
            phy,
        })
    }

    fn identity(&mut self, a: ChipAddress, serial: Option<String>) -> (Identity, u32) {
        let (card, dev, phy) = (a.card, a.device, Some(a.phy));
        let mut errors = 0;
        let mut id = Identity {
            serial,
            ..Identity::default()
        };
        let info = match self.call("dcmi_get_device_chip_info_v2", None, phy, move |l| {
            l.chip_info_v2(card, dev)
        }) {
            Got::Unsupported => self.call("dcmi_get_device_chip_info", None, phy, move |l| {
                l.chip_info(card, dev)
            }),
            got => got,
        };
        id.model = info
            .value(&mut errors)
            .map(|i| format!("{}-{}-{}", i.chip_name, i.chip_type, i.chip_ver));
        id.pci_bus_id = self.read(
            a.phy,
            &mut errors,
            ("dcmi_get_device_pcie_info_v2", None),
            move |l| l.pcie_info_v2(card, dev),
            |p| Ok(model::format_bdf(p.domain, p.bus, p.device, p.function)),
        );
        id.uuid = self.read(
            a.phy,
            &mut errors,
            ("dcmi_get_device_die_v2", Some(1)),
            move |l| l.die_v2(card, dev, 1),
            |w| Ok(model::format_vdie(w)),
        );
        (id, errors)
    }

    /// Health, fault codes and network health of one chip; returns its errors.
    fn health(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let p = Some(phy);
        let mut errors = 0;
        let mut dropped = false;
        chip.health = None;
        chip.up = None;
        chip.faults = None;
        chip.network_health = None;
        match self.call("dcmi_get_device_health", None, p, move |l| {
            l.health(card, dev)
        }) {
            Got::Value(0xFFFF_FFFF) => {
                dropped = true;
                chip.up = Some(false);
            }
            Got::Value(h) if h <= 3 => {
                chip.health = Some(h);
                chip.up = Some(true);
            }
            Got::Value(h) => {
                self.count_invalid("dcmi_get_device_health", phy, format!("health {h}"));
                chip.up = Some(true);
                errors += 1;
            }
            Got::Dropped => {
                dropped = true;
                chip.up = Some(false);
                errors += 1;
            }
            Got::Failed => {
                chip.up = Some(false);
                errors += 1;
            }
            Got::Unsupported => {}
        }
        match self.call("dcmi_get_device_errorcode_v2", None, p, move |l| {
            l.error_codes_v2(card, dev)
        }) {
            Got::Value(codes) => chip.faults = Some(codes),
            Got::Dropped => {
                dropped = true;
                errors += 1;
            }
            Got::Failed => errors += 1,
            Got::Unsupported => {}
        }
        chip.dropped = dropped;
        if dropped {
            let faults = chip.faults.get_or_insert_with(Vec::new);
            if !faults.contains(&model::FAULT_CARD_DROPPED) {
                faults.push(model::FAULT_CARD_DROPPED);
            }
            // Network health is known to block after a card drops; do not ask.
            return errors;
        }
        chip.network_health = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_network_health", None),
            move |l| l.network_health(card, dev),
            |v| match u32::try_from(v) {
                Ok(v) if v <= 0xFF => Ok(v),
                _ => Err(format!("result {v}")),
            },
        );
        errors
    }

    /// Temperature, power, voltage and AI-core clock of one chip; returns its errors.
    fn sensors(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.temperature_celsius = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_temperature", None),
            move |l| l.temperature(card, dev),
            |t| convert::temperature_celsius(t).ok_or_else(|| format!("{t} °C")),
        );
        chip.power_watts = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_power_info", None),
            move |l| l.power(card, dev),
            |dw| convert::power_watts(dw).ok_or_else(|| format!("{dw} dW")),
        );
        chip.voltage_volts = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_voltage", None),
            move |l| l.voltage(card, dev),
            |cv| Ok(convert::voltage_volts(cv)),
        );
        chip.aicore_frequency_hertz = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_frequency", Some(7)),
            move |l| l.frequency(card, dev, 7),
            |mhz| Ok(convert::mhz_to_hertz(mhz)),
        );
        errors
    }

    /// Utilisation of one chip by unit; returns its errors.
    fn utilization(&mut self, chip: &mut ChipReadings) -> u32 {
        const TYPES: [(i32, UtilUnit); 4] = [
            (2, UtilUnit::Aicore),
            (6, UtilUnit::Hbm),
            (12, UtilUnit::Vector),
            (13, UtilUnit::Overall),
        ];
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.utilization.clear();
        for (t, unit) in TYPES {
            if let Some(r) = self.read(
                phy,
                &mut errors,
                ("dcmi_get_device_utilization_rate", Some(t)),
                move |l| l.utilization_rate(card, dev, t),
                |pct| convert::percent_to_ratio(pct).ok_or_else(|| format!("type {t}: {pct}%")),
            ) {
                chip.utilization.insert(unit, r);
            }
        }
        let wanted = [
            UtilUnit::Aicore,
            UtilUnit::Vector,
            UtilUnit::Overall,
            UtilUnit::Cube,
        ];
        if wanted.iter().all(|u| chip.utilization.contains_key(u)) {
            return errors;
        }
        let multi = self.call(
            "dcmi_get_device_multi_utilization_rate",
            None,
            Some(phy),
            move |l| l.multi_utilization(card, dev),
        );
        if let Some(m) = multi.value(&mut errors) {
            for (unit, pct) in [
                (UtilUnit::Aicore, m.aicore),
                (UtilUnit::Vector, m.aiv),
                (UtilUnit::Overall, m.npu),
                (UtilUnit::Cube, m.aic),
            ] {
                // A field above 100 is DCMI's "not available" for that unit.
                if let Some(r) = convert::percent_to_ratio(pct) {
                    chip.utilization.entry(unit).or_insert(r);
                }
            }
        }
        errors
    }

    /// HBM, DDR and ECC of one chip; returns its errors.
    fn memory(&mut self, chip: &mut ChipReadings) -> u32 {
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.hbm = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_hbm_info", None),
            move |l| l.hbm_info(card, dev),
            |h| {
                let total = convert::mb_to_bytes(h.memory_size_mb);
                let used = convert::mb_to_bytes(h.memory_usage_mb);
                let temp = convert::temperature_celsius(h.temp_c);
                let bw = convert::percent_to_ratio(h.bandwidth_util_pct);
                match (total, used, temp, bw) {
                    (Some(total_bytes), Some(used_bytes), Some(t), Some(b))
                        if used_bytes <= total_bytes =>
                    {
                        Ok(Hbm {
                            total_bytes,
                            used_bytes,
                            temperature_celsius: t,
                            bandwidth_utilization_ratio: b,
                        })
                    }
                    _ => Err(format!("{h:?}")),
                }
            },
        );
        chip.ddr = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_memory_info_v3", None),
            move |l| l.memory_info_v3(card, dev),
            |d| match (
                convert::mb_to_bytes(d.memory_size_mb),
                convert::mb_to_bytes(d.memory_available_mb),
            ) {
                (Some(total), Some(avail)) if avail <= total => Ok(Ddr {
                    total_bytes: total,
                    used_bytes: total - avail,
                }),
                _ => Err(format!("{d:?}")),
            },
        );
        chip.ecc = self.read(
            phy,
            &mut errors,
            ("dcmi_get_device_ecc_info", Some(2)),
            move |l| l.ecc_info(card, dev, 2),
            |e| {
                Ok(Ecc {
                    enabled: e.enable_flag != 0,
                    single: e.single.into(),
                    double: e.double.into(),
                    total_single: e.total_single.into(),
                    total_double: e.total_double.into(),
                    single_isolated_pages: e.single_isolated_pages.into(),
                    double_isolated_pages: e.double_isolated_pages.into(),
                })
            },
        );
        errors
    }

    /// Packet counters and HCCS links of one chip; returns its errors.
    fn network(&mut self, chip: &mut ChipReadings) -> u32 {
        let profiling_ms = i32::try_from(self.opts.hccs_profiling_time.as_millis())
            .unwrap_or(200)
            .clamp(1, 1000);
        let (card, dev, phy) = (chip.address.card, chip.address.device, chip.address.phy);
        let mut errors = 0;
        chip.hccs = model::Hccs::default();
        chip.packets = self.read(
            phy,
            &mut errors,
            ("dcmi_get_netdev_pkt_stats_info", None),
            move |l| l.netdev_pkt_stats(card, dev, 0),
            |c| Ok(packet_counters(&c)),
        );
        let bandwidth = self.read(
            phy,
            &mut errors,
            ("dcmi_get_hccs_link_bandwidth_info", None),
            move |l| l.hccs_bandwidth(card, dev, profiling_ms),
            |bw| {
                let per_second = |gb: &[f64; 16]| -> Option<Vec<f64>> {
                    gb.iter()
                        .map(|g| convert::gigabytes_to_bytes_per_second(*g))
                        .collect()
                };
                match (per_second(&bw.tx), per_second(&bw.rx)) {
                    (Some(tx), Some(rx)) => Ok((tx, rx)),
                    _ => Err("non-finite bandwidth".into()),
                }
            },
        );
        if let Some((tx, rx)) = bandwidth {
            chip.hccs.tx_bytes_per_second = tx.try_into().ok();
            chip.hccs.rx_bytes_per_second = rx.try_into().ok();
        }
        // npu-exporter probes sub-command 5 (64-bit) and falls back to 3 (32-bit).
        let stats = match self.call("dcmi_get_device_info", Some(5), Some(phy), move |l| {
            l.hccs_statistics_u64(card, dev)
        }) {
            Got::Unsupported => self.call("dcmi_get_device_info", Some(3), Some(phy), move |l| {
                l.hccs_statistics_u32(card, dev)
            }),
            got => got,
        };
        if let Some(s) = stats.value(&mut errors) {
            chip.hccs.tx_flits = Some(s.tx);
            chip.hccs.rx_flits = Some(s.rx);
            chip.hccs.crc_errors = Some(s.crc_errors);
        }
        errors
    }
}

/// Picks the counters hcclwatch exports out of DCMI's 48, by header position.
fn packet_counters(c: &[u64; ffi::PKT_STATS_COUNTERS]) -> PacketCounters {
    PacketCounters {
        mac_tx_pause: c[0],
        mac_rx_pause: c[1],
        mac_tx_pfc: c[2],
        mac_rx_pfc: c[11],
        mac_tx_bad: c[22],
        mac_rx_bad: c[26],
        mac_rx_fcs_errors: c[28],
        roce_rx_all: c[30],
        roce_rx_err: c[31],
        roce_tx_all: c[33],
        roce_tx_err: c[34],
        roce_rx_cnp: c[36],
        roce_tx_cnp: c[37],
        roce_retry: c[42],
        roce_ecn: c[43],
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
                state.driver_version = None;
                return GroupReport { errors: 1 };
            }
        }
        match group {
            Group::Inventory => self.inventory(state),
            Group::Health => self.each_chip(state, Self::health),
            Group::Sensors => self.each_chip(state, Self::sensors),
            Group::Utilization => self.each_chip(state, Self::utilization),
            Group::Memory => self.each_chip(state, Self::memory),
            Group::Network => self.each_chip(state, Self::network),
        }
    }

    fn stats(&self) -> SourceStats {
        SourceStats {
            call_errors: self.call_errors.clone(),
            timeouts: self.timeouts.clone(),
            unsupported: self
                .unsupported
                .iter()
                .map(|(k, r)| (k.clone(), r.as_str()))
                .collect::<BTreeSet<_>>(),
            stuck_calls: self.loaded.as_ref().map_or(0, |l| l.runner.stuck_calls()),
        }
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

    #[test]
    fn packet_counter_positions() {
        let mut c = [0u64; ffi::PKT_STATS_COUNTERS];
        for (i, v) in c.iter_mut().enumerate() {
            *v = i as u64 + 1000;
        }
        let p = packet_counters(&c);
        assert_eq!(p.mac_tx_pause, 1000);
        assert_eq!(p.mac_rx_pfc, 1011);
        assert_eq!(p.mac_rx_fcs_errors, 1028);
        assert_eq!(p.roce_rx_err, 1031);
        assert_eq!(p.roce_ecn, 1043);
    }
}
