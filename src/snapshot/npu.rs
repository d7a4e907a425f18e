//! What the NPU sources report, in SI units: per chip identity, readings and faults, plus
//! the source's own counters.
//!
//! Every reading is an `Option`: `None` means "not read this cycle" (the call failed, timed
//! out or is unsupported), and the exporter omits the series. There is no sentinel value
//! anywhere in this model, so a made-up number cannot reach `/metrics` by accident.

use std::collections::{BTreeMap, BTreeSet};

use super::status::CollectorStatus;

/// Where a chip sits in DCMI's addressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ChipAddress {
    /// Card id from `dcmi_get_card_list`.
    pub card: i32,
    /// Chip position inside the card.
    pub device: i32,
    /// Logic id.
    pub logic: u32,
    /// Physical id; the `npu` label.
    pub phy: u32,
}

/// Static identity of a chip, from the inventory group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// `name-type-version`, e.g. `910B3-Ascend-V1`.
    pub model: Option<String>,
    /// VDIE id formatted as five upper-case hex words joined by `-`.
    pub uuid: Option<String>,
    /// `DDDD:BB:DD.F`.
    pub pci_bus_id: Option<String>,
    /// Card serial number.
    pub serial: Option<String>,
    /// Product family, from the chip name (and the board id where the name does not say).
    pub kind: ChipKind,
}

/// The product families whose readings need special handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ChipKind {
    /// Atlas A3 (910_93): two dies per card; power is a card reading shown on die 0.
    Ascend910A3,
    /// Ascend 310P (Atlas 300I Duo and kin): power is the card's, from the MCU.
    Ascend310P,
    /// Anything else (910B, 910, unknown): every reading is the chip's own.
    #[default]
    Other,
}

/// Board ids of Atlas A3 products, as MindCluster's device manager lists them
/// (`GetDevType`: the board id decides A3 before the chip name is looked at).
pub const A3_BOARD_IDS: [u32; 9] = [0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0x81, 0x83, 0xd1, 0xd3];

/// What the chip name alone says about the family: `Some` when it decides, `None` when
/// only the board id can (then [`chip_kind`] is asked with it).
pub fn kind_from_chip_name(chip_name: &str) -> Option<ChipKind> {
    let name = chip_name.trim();
    // MindCluster's patterns: `^(310P\d?|I2\d?)` is 310P, `^(910B\d|A2G\d)` is 910B.
    let then_digit = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    if name.starts_with("310P") || name.starts_with("I2") {
        Some(ChipKind::Ascend310P)
    } else if name.starts_with("910_93") {
        Some(ChipKind::Ascend910A3)
    } else if then_digit("910B") || then_digit("A2G") {
        Some(ChipKind::Other)
    } else {
        None
    }
}

/// The family of a chip from its name and, when the name does not decide, its board id.
pub fn chip_kind(chip_name: &str, board_id: Option<u32>) -> ChipKind {
    kind_from_chip_name(chip_name).unwrap_or(match board_id {
        Some(b) if A3_BOARD_IDS.contains(&b) => ChipKind::Ascend910A3,
        _ => ChipKind::Other,
    })
}

/// Utilisation kinds reported as `hcclwatch_npu_utilization_ratio{unit}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UtilUnit {
    /// AI core.
    Aicore,
    /// Vector core.
    Vector,
    /// Cube unit.
    Cube,
    /// Whole NPU.
    Overall,
    /// On-chip memory (HBM) utilisation.
    Hbm,
}

impl UtilUnit {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            UtilUnit::Aicore => "aicore",
            UtilUnit::Vector => "vector",
            UtilUnit::Cube => "cube",
            UtilUnit::Overall => "overall",
            UtilUnit::Hbm => "hbm",
        }
    }
}

/// HBM reading.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Hbm {
    /// Capacity, bytes.
    pub total_bytes: u64,
    /// In use, bytes.
    pub used_bytes: u64,
    /// Temperature, °C.
    pub temperature_celsius: f64,
    /// Bandwidth utilisation, 0..=1.
    pub bandwidth_utilization_ratio: f64,
}

/// DDR reading (chips with DDR only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ddr {
    /// Capacity, bytes.
    pub total_bytes: u64,
    /// In use, bytes.
    pub used_bytes: u64,
}

/// HBM ECC counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ecc {
    /// ECC enabled.
    pub enabled: bool,
    /// Single-bit errors since boot.
    pub single: u64,
    /// Double-bit errors since boot.
    pub double: u64,
    /// Lifetime single-bit errors.
    pub total_single: u64,
    /// Lifetime double-bit errors.
    pub total_double: u64,
    /// Pages isolated for single-bit errors.
    pub single_isolated_pages: u64,
    /// Pages isolated for double-bit errors.
    pub double_isolated_pages: u64,
}

/// MAC and RoCE packet counters of the NPU's network port (a subset of DCMI's 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketCounters {
    /// MAC pause frames sent.
    pub mac_tx_pause: u64,
    /// MAC pause frames received.
    pub mac_rx_pause: u64,
    /// PFC frames sent (all priorities).
    pub mac_tx_pfc: u64,
    /// PFC frames received (all priorities).
    pub mac_rx_pfc: u64,
    /// Bad packets sent.
    pub mac_tx_bad: u64,
    /// Bad packets received.
    pub mac_rx_bad: u64,
    /// Frames received with FCS errors.
    pub mac_rx_fcs_errors: u64,
    /// RoCE packets received.
    pub roce_rx_all: u64,
    /// RoCE packets sent.
    pub roce_tx_all: u64,
    /// RoCE receive errors.
    pub roce_rx_err: u64,
    /// RoCE transmit errors.
    pub roce_tx_err: u64,
    /// CNP packets received (congestion notifications).
    pub roce_rx_cnp: u64,
    /// CNP packets sent.
    pub roce_tx_cnp: u64,
    /// New-packet retransmissions.
    pub roce_retry: u64,
    /// ECN doorbells.
    pub roce_ecn: u64,
}

/// HCCS link readings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Hccs {
    /// Per-link transmit bandwidth, bytes/s, when read.
    pub tx_bytes_per_second: Option<[Option<f64>; 16]>,
    /// Per-link receive bandwidth, bytes/s, when read.
    pub rx_bytes_per_second: Option<[Option<f64>; 16]>,
    /// Per-link transmitted flits, when read.
    pub tx_flits: Option<[u64; 16]>,
    /// Per-link received flits, when read.
    pub rx_flits: Option<[u64; 16]>,
    /// Per-link CRC errors, when read.
    pub crc_errors: Option<[u64; 16]>,
}

/// FEC codeword counters of the chip's network port (`dcmi_get_extra_statistics_info`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fec {
    /// Codewords received.
    pub total: u64,
    /// Codewords with errors the FEC corrected.
    pub corrected: u64,
    /// Codewords with errors the FEC could not correct.
    pub uncorrectable: u64,
    /// Bad codewords.
    pub bad: u64,
    /// Bit error ratio before correction, when the reading is a ratio (0..=1).
    pub pre_correction_ber: Option<f64>,
}

/// The handling level MindCluster's device plugin assigns to a fault code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultLevel {
    /// No impact on the service; nothing to do.
    NotHandleFault,
    /// Re-execute the request.
    RestartRequest,
    /// Re-execute the service.
    RestartBusiness,
    /// Reset the chip when it is idle.
    FreeRestartNPU,
    /// Stop the job, reset the chip, run again.
    RestartNPU,
    /// Unrecoverable: isolate the chip.
    SeparateNPU,
    /// No impact now, but no new jobs on the chip.
    PreSeparateNPU,
    /// Sub-health; handled per job policy.
    SubHealthFault,
    /// Isolated until an operator releases it (MindCluster reaches it by escalation only;
    /// no table entry maps to it).
    ManuallySeparateNPU,
}

impl FaultLevel {
    /// Every level, least serious first.
    pub const ALL: [FaultLevel; 9] = [
        FaultLevel::NotHandleFault,
        FaultLevel::SubHealthFault,
        FaultLevel::RestartRequest,
        FaultLevel::RestartBusiness,
        FaultLevel::FreeRestartNPU,
        FaultLevel::RestartNPU,
        FaultLevel::PreSeparateNPU,
        FaultLevel::SeparateNPU,
        FaultLevel::ManuallySeparateNPU,
    ];

    /// The level's name, as MindCluster spells it (the `level` label).
    pub fn as_str(self) -> &'static str {
        match self {
            FaultLevel::NotHandleFault => "NotHandleFault",
            FaultLevel::RestartRequest => "RestartRequest",
            FaultLevel::RestartBusiness => "RestartBusiness",
            FaultLevel::FreeRestartNPU => "FreeRestartNPU",
            FaultLevel::RestartNPU => "RestartNPU",
            FaultLevel::SeparateNPU => "SeparateNPU",
            FaultLevel::PreSeparateNPU => "PreSeparateNPU",
            FaultLevel::SubHealthFault => "SubHealthFault",
            FaultLevel::ManuallySeparateNPU => "ManuallySeparateNPU",
        }
    }

    /// How serious the level is, higher is worse: MindCluster's precedence
    /// (`getMostSeriousFaultType`), ManuallySeparateNPU > SeparateNPU > PreSeparateNPU >
    /// RestartNPU > FreeRestartNPU > RestartBusiness > RestartRequest > SubHealthFault >
    /// NotHandleFault.
    pub fn precedence(self) -> u8 {
        match self {
            FaultLevel::NotHandleFault => 0,
            FaultLevel::SubHealthFault => 1,
            FaultLevel::RestartRequest => 2,
            FaultLevel::RestartBusiness => 3,
            FaultLevel::FreeRestartNPU => 4,
            FaultLevel::RestartNPU => 5,
            FaultLevel::PreSeparateNPU => 6,
            FaultLevel::SeparateNPU => 7,
            FaultLevel::ManuallySeparateNPU => 8,
        }
    }

    /// The level a code missing from the table gets, by the severity of its fault event
    /// (MindCluster's rule): hint (0) or minor (1) is NotHandleFault; major, critical, an
    /// unknown severity or no event at all is SeparateNPU.
    pub fn from_severity(severity: Option<u8>) -> FaultLevel {
        match severity {
            Some(0 | 1) => FaultLevel::NotHandleFault,
            _ => FaultLevel::SeparateNPU,
        }
    }
}

/// Where an active fault's level came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LevelSource {
    /// The fault-level table lists the code.
    Table,
    /// Not listed; from the severity of the code's fault event.
    Severity,
    /// Not listed and no event seen: SeparateNPU by default.
    Default,
    /// The fault-level file's `hcclwatch_overrides` gives the code its level.
    Override,
}

/// Whether an active fault has its effect (a level label, a hard fault) now. Without
/// per-code overrides in the fault-level file every fault is [`FaultState::Counted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FaultState {
    /// Read now, and counts.
    #[default]
    Counted,
    /// Read now, but fewer times in a row than its `consecutive_reads`: no effect yet.
    Pending {
        /// Reads in a row that listed it, this one included.
        reads: u32,
        /// Reads in a row it needs.
        needed: u32,
    },
    /// No longer read, but counted before and within its `clear_after`: its effect stays.
    Held,
}

impl FaultState {
    /// Whether the fault has its effect now (counted, or held after it was last read).
    pub fn in_effect(self) -> bool {
        !matches!(self, FaultState::Pending { .. })
    }

    /// Whether DCMI listed the code in this read (not only held).
    pub fn read_now(self) -> bool {
        !matches!(self, FaultState::Held)
    }
}

/// An active fault code with what is known about it when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The DCMI event id.
    pub code: u32,
    /// Its handling level.
    pub level: FaultLevel,
    /// Where the level came from.
    pub source: LevelSource,
    /// DCMI's text for the code, when it gave one.
    pub description: Option<String>,
    /// Whether it has its effect now (per-code overrides of the fault-level file).
    pub state: FaultState,
}

/// Label value of a fault event's severity (`dcmi_dms_fault_event.severity`).
pub fn event_severity_name(severity: u8) -> &'static str {
    match severity {
        0 => "hint",
        1 => "minor",
        2 => "major",
        3 => "critical",
        _ => "unknown",
    }
}

/// Label value of a fault event's assertion (`dcmi_dms_fault_event.assertion`).
pub fn event_assertion_name(assertion: u8) -> &'static str {
    match assertion {
        0 => "recovery",
        1 => "occur",
        2 => "once",
        _ => "unknown",
    }
}

/// Whether a RoCE network health value is "not OK": anything but 0 (OK) and 6 (the
/// port is not in use), as DCMI documents them.
pub fn network_health_bad(v: u32) -> bool {
    v != 0 && v != 6
}

/// Everything known about one chip.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChipReadings {
    /// DCMI addressing.
    pub address: ChipAddress,
    /// Static identity.
    pub identity: Identity,

    /// Health 0 (ok) ..= 3 (critical).
    pub health: Option<u32>,
    /// The card stopped answering (`-8012` or health `0xFFFFFFFF`).
    pub dropped: bool,
    /// Whether the chip answered its health query this cycle.
    pub up: Option<bool>,
    /// Active fault codes, with their levels and descriptions.
    pub faults: Option<Vec<Fault>>,
    /// Fault events pushed by DCMI for this chip, by (severity, assertion) label values.
    pub fault_events: BTreeMap<(&'static str, &'static str), u64>,
    /// RoCE network health (`dcmi_rdfx_detect_result`).
    pub network_health: Option<u32>,
    /// Periodic health reads in a row, up to this one, that found health critical (3):
    /// counted by the telemetry at its own interval, so a hard fault's "N bad reads in a
    /// row" takes N health intervals, not N probe rounds.
    pub critical_reads: u32,
    /// Periodic health reads in a row that found the RoCE network not OK
    /// ([`network_health_bad`]).
    pub network_bad_reads: u32,

    /// °C.
    pub temperature_celsius: Option<f64>,
    /// W.
    pub power_watts: Option<f64>,
    /// V.
    pub voltage_volts: Option<f64>,
    /// Hz.
    pub aicore_frequency_hertz: Option<f64>,

    /// Utilisation ratios, 0..=1.
    pub utilization: BTreeMap<UtilUnit, f64>,

    /// HBM.
    pub hbm: Option<Hbm>,
    /// DDR.
    pub ddr: Option<Ddr>,
    /// HBM ECC.
    pub ecc: Option<Ecc>,

    /// Port counters.
    pub packets: Option<PacketCounters>,
    /// FEC counters of port 0.
    pub fec: Option<Fec>,
    /// HCCS.
    pub hccs: Hccs,

    /// Processes using the chip (host PIDs), as DCMI lists them (at most 32).
    pub processes: Option<Vec<NpuProcess>>,
}

/// A process using an NPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NpuProcess {
    /// Host PID.
    pub pid: u32,
    /// Device memory it uses, bytes.
    pub memory_bytes: u64,
}

/// Readings that belong to a card rather than to one of its chips, so that a sum over
/// chips never counts them twice.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CardReadings {
    /// Board power from the card's MCU (310P / Atlas 300I Duo), W.
    pub power_watts: Option<f64>,
}

/// The chips a source knows and the driver version; sources update it in place, one
/// reading group at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NpuState {
    /// Driver (DCMI) version.
    pub driver_version: Option<String>,
    /// Chips by physical id.
    pub chips: BTreeMap<u32, ChipReadings>,
    /// Card-level readings by card id (only cards that have one).
    pub cards: BTreeMap<i32, CardReadings>,
    /// Whether the last inventory read the chip list (`false` before the first one, and
    /// after one whose enumeration failed: `chips` are then the ones last known).
    pub enumerated: bool,
    /// Every chip (physical id) an inventory has listed since the source started: what
    /// the node is expected to keep enumerating.
    pub seen: BTreeSet<u32>,
}

impl NpuState {
    /// Records an inventory whose chip list was read: `chips` is what enumerates now, and
    /// each of them joins [`NpuState::seen`].
    pub fn mark_enumerated(&mut self) {
        self.enumerated = true;
        self.seen.extend(self.chips.keys().copied());
    }

    /// Records an inventory that could not read the chip list.
    pub fn mark_enumeration_failed(&mut self) {
        self.enumerated = false;
    }
}

/// How an NPU counts in `hcclwatch_npus{state}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NpuCondition {
    /// Health read, at 0 (ok) or 1 (minor alarm: noted in `hcclwatch_npu_health`, but a
    /// minor alarm does not stop work; MindCluster handles a minor fault event as
    /// NotHandleFault).
    Healthy,
    /// Health read at 2 (major) or 3 (critical), or the chip is lost (`-8012`, or health
    /// `0xFFFFFFFF`).
    Unhealthy,
    /// Enumerated, but its health was not read: the call failed, missed its deadline,
    /// returned no health value, is unsupported, or has not run yet.
    Unknown,
    /// Expected by the inventory but no longer enumerated.
    Missing,
}

impl NpuCondition {
    /// Every condition, in the order the states are exported.
    pub const ALL: [NpuCondition; 4] = [
        NpuCondition::Healthy,
        NpuCondition::Unhealthy,
        NpuCondition::Unknown,
        NpuCondition::Missing,
    ];

    /// The `state` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            NpuCondition::Healthy => "healthy",
            NpuCondition::Unhealthy => "unhealthy",
            NpuCondition::Unknown => "unknown",
            NpuCondition::Missing => "missing",
        }
    }
}

/// The condition of an enumerated chip, from what its last health read gave.
pub fn chip_condition(chip: &ChipReadings) -> NpuCondition {
    if chip.dropped {
        return NpuCondition::Unhealthy;
    }
    match chip.health {
        Some(0 | 1) => NpuCondition::Healthy,
        Some(_) => NpuCondition::Unhealthy,
        None => NpuCondition::Unknown,
    }
}

/// NPUs per [`NpuCondition`], every condition present (0 when none).
pub type DeviceCounts = BTreeMap<NpuCondition, u64>;

/// The NPU counts by condition, or `None` when the last inventory could not enumerate the
/// chips (nothing is known about which are there). `expected` is how many NPUs the node
/// should have (`telemetry.expected_npus`); 0 means "the NPUs any inventory has listed
/// since the start". Missing is `expected` minus the enumerated chips, or the listed NPUs
/// that no longer enumerate.
pub fn device_counts(state: &NpuState, expected: u32) -> Option<DeviceCounts> {
    if !state.enumerated {
        return None;
    }
    let mut counts: DeviceCounts = NpuCondition::ALL.iter().map(|c| (*c, 0)).collect();
    for chip in state.chips.values() {
        *counts.entry(chip_condition(chip)).or_default() += 1;
    }
    let missing = if expected > 0 {
        u64::from(expected).saturating_sub(state.chips.len() as u64)
    } else {
        state
            .seen
            .iter()
            .filter(|phy| !state.chips.contains_key(phy))
            .count() as u64
    };
    counts.insert(NpuCondition::Missing, missing);
    Some(counts)
}

/// What an "unsupported" verdict covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The whole function: a missing symbol, or a call about no chip or card.
    Call,
    /// One card (card-level calls).
    Card(i32),
    /// One chip, by physical id.
    Chip(u32),
}

/// A reading the device or driver does not support, never asked for again.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unsupported {
    /// The call, with its input type in parentheses when it has one.
    pub call: String,
    /// What the verdict covers.
    pub scope: Scope,
    /// `missing_symbol` or `not_supported`.
    pub reason: &'static str,
}

/// A source's own health counters, exported as `hcclwatch_dcmi_*`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceStats {
    /// Errors by (call, code).
    pub call_errors: BTreeMap<(String, String), u64>,
    /// Deadline misses by call.
    pub timeouts: BTreeMap<String, u64>,
    /// Unsupported readings.
    pub unsupported: BTreeSet<Unsupported>,
    /// Calls currently stuck past their deadline.
    pub stuck_calls: usize,
    /// Whether the fault-event subscription is active (`None`: not attempted).
    pub fault_subscription: Option<bool>,
    /// Fault events dropped because the queue to the poller was full.
    pub fault_events_dropped: u64,
}

/// The NPU part of the snapshot: what the NPU poller last published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NpuSnapshot {
    /// Backend name, when an NPU backend is configured.
    pub backend: Option<&'static str>,
    /// Backend loaded and initialised.
    pub backend_up: bool,
    /// Chips and driver version.
    pub state: NpuState,
    /// Per-group collector status, by `collector` label value.
    pub collectors: BTreeMap<String, CollectorStatus>,
    /// Source counters.
    pub stats: SourceStats,
    /// `telemetry.expected_npus`: how many NPUs the node should enumerate (0: those any
    /// inventory has listed since the start).
    pub expected_npus: u32,
}

/// `dcmi_rdfx_detect_result` values that npu-exporter treats as healthy: OK (0) and
/// INIT (6, the detection task is still starting).
pub fn network_health_is_ok(code: u32) -> bool {
    code == 0 || code == 6
}

/// Formats a VDIE id as npu-exporter's `vdie_id`: five 8-digit upper-case hex words.
pub fn format_vdie(words: [u32; 5]) -> String {
    words
        .iter()
        .map(|w| format!("{w:08X}"))
        .collect::<Vec<_>>()
        .join("-")
}

/// Formats a PCIe address as `DDDD:BB:DD.F` (upper-case hex, as npu-exporter does).
pub fn format_bdf(domain: i32, bus: u32, device: u32, function: u32) -> String {
    format!(
        "{:04X}:{:02X}:{:02X}.{:X}",
        domain as u32, bus, device, function
    )
}

/// Hard fault code synthesised when a card drops (device-plugin convention).
pub const FAULT_CARD_DROPPED: u32 = 0x40F8_4E00;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdie_format_matches_npu_exporter() {
        assert_eq!(
            format_vdie([0x185011D4, 0x21104518, 0xA0C4ED94, 0x14CC040A, 0x56102003]),
            "185011D4-21104518-A0C4ED94-14CC040A-56102003"
        );
        assert_eq!(
            format_vdie([1, 2, 3, 4, 5]),
            "00000001-00000002-00000003-00000004-00000005"
        );
    }

    #[test]
    fn bdf_format_matches_npu_exporter() {
        assert_eq!(format_bdf(0, 0x61, 0, 0), "0000:61:00.0");
        assert_eq!(format_bdf(1, 0xC1, 0x1f, 7), "0001:C1:1F.7");
    }

    #[test]
    fn network_health_ok_codes() {
        assert!(network_health_is_ok(0));
        assert!(network_health_is_ok(6));
        for bad in [1, 2, 3, 4, 5, 7, 8, 0xff] {
            assert!(!network_health_is_ok(bad));
        }
    }

    #[test]
    fn chip_kinds_follow_name_then_board() {
        assert_eq!(chip_kind("310P3", None), ChipKind::Ascend310P);
        assert_eq!(chip_kind("310P", Some(0xb0)), ChipKind::Ascend310P);
        assert_eq!(chip_kind("910_9392", None), ChipKind::Ascend910A3);
        assert_eq!(chip_kind("910B3", Some(0xb0)), ChipKind::Other);
        assert_eq!(chip_kind("910B", None), ChipKind::Other);
        // The name does not decide: the board id does.
        assert_eq!(kind_from_chip_name("910"), None);
        assert_eq!(chip_kind("910", Some(0xb1)), ChipKind::Ascend910A3);
        assert_eq!(chip_kind("910", Some(0x28)), ChipKind::Other);
        assert_eq!(chip_kind("", None), ChipKind::Other);
        assert_eq!(kind_from_chip_name("310B1"), None);
    }

    #[test]
    fn unlisted_codes_take_their_level_from_the_event_severity() {
        assert_eq!(
            FaultLevel::from_severity(Some(0)),
            FaultLevel::NotHandleFault
        );
        assert_eq!(
            FaultLevel::from_severity(Some(1)),
            FaultLevel::NotHandleFault
        );
        assert_eq!(FaultLevel::from_severity(Some(2)), FaultLevel::SeparateNPU);
        assert_eq!(FaultLevel::from_severity(Some(3)), FaultLevel::SeparateNPU);
        assert_eq!(FaultLevel::from_severity(Some(9)), FaultLevel::SeparateNPU);
        assert_eq!(FaultLevel::from_severity(None), FaultLevel::SeparateNPU);
    }

    /// A chip at `phy` with what its health read gave.
    fn read(phy: u32, health: Option<u32>, dropped: bool) -> ChipReadings {
        ChipReadings {
            address: ChipAddress {
                phy,
                ..ChipAddress::default()
            },
            health,
            dropped,
            ..ChipReadings::default()
        }
    }

    fn state_of(chips: Vec<ChipReadings>) -> NpuState {
        let mut s = NpuState {
            chips: chips.into_iter().map(|c| (c.address.phy, c)).collect(),
            ..NpuState::default()
        };
        s.mark_enumerated();
        s
    }

    fn counts(state: &NpuState, expected: u32) -> [u64; 4] {
        let c = device_counts(state, expected).expect("enumerated");
        NpuCondition::ALL.map(|k| c[&k])
    }

    #[test]
    fn a_chip_counts_by_what_its_health_read_gave() {
        use NpuCondition::*;
        assert_eq!(chip_condition(&read(0, Some(0), false)), Healthy);
        // A minor alarm is noted in hcclwatch_npu_health but does not stop work.
        assert_eq!(chip_condition(&read(0, Some(1), false)), Healthy);
        assert_eq!(chip_condition(&read(0, Some(2), false)), Unhealthy);
        assert_eq!(chip_condition(&read(0, Some(3), false)), Unhealthy);
        // Lost: -8012 or health 0xFFFFFFFF leave no health value but mark the drop.
        assert_eq!(chip_condition(&read(0, None, true)), Unhealthy);
        // A card-drop code while the health read said ok is still a lost chip.
        assert_eq!(chip_condition(&read(0, Some(0), true)), Unhealthy);
        // The read failed, timed out, gave no health value, or has not run.
        assert_eq!(chip_condition(&read(0, None, false)), Unknown);
    }

    #[test]
    fn every_state_is_counted_and_the_zeros_are_there() {
        let s = state_of(vec![
            read(0, Some(0), false),
            read(1, Some(1), false),
            read(2, Some(3), false),
            read(3, None, false),
        ]);
        assert_eq!(counts(&s, 0), [2, 1, 1, 0]);
        let all_ok = state_of(vec![read(0, Some(0), false)]);
        assert_eq!(counts(&all_ok, 0), [1, 0, 0, 0]);
        assert_eq!(counts(&state_of(vec![]), 0), [0, 0, 0, 0]);
    }

    #[test]
    fn a_chip_listed_before_that_no_longer_enumerates_is_missing() {
        let mut s = state_of(vec![
            read(0, Some(0), false),
            read(1, Some(0), false),
            read(4, Some(0), false),
        ]);
        assert_eq!(counts(&s, 0), [3, 0, 0, 0]);
        s.chips.remove(&1);
        s.mark_enumerated();
        assert_eq!(counts(&s, 0), [2, 0, 0, 1]);
        // It comes back: no longer missing.
        s.chips.insert(1, read(1, None, false));
        s.mark_enumerated();
        assert_eq!(counts(&s, 0), [2, 0, 1, 0]);
        // A chip seen only later is expected from then on.
        s.chips.insert(5, read(5, Some(0), false));
        s.mark_enumerated();
        s.chips.remove(&5);
        s.chips.remove(&0);
        s.mark_enumerated();
        assert_eq!(counts(&s, 0), [1, 0, 1, 2]);
    }

    #[test]
    fn a_configured_count_decides_what_is_missing() {
        let s = state_of(vec![read(0, Some(0), false), read(1, Some(2), false)]);
        assert_eq!(counts(&s, 8), [1, 1, 0, 6]);
        assert_eq!(counts(&s, 2), [1, 1, 0, 0]);
        // More chips than expected: none missing (the extra ones are counted by health).
        assert_eq!(counts(&s, 1), [1, 1, 0, 0]);
    }

    #[test]
    fn no_counts_without_an_enumeration() {
        let mut s = state_of(vec![read(0, Some(0), false)]);
        assert!(device_counts(&s, 0).is_some());
        // The chip list could not be read: the chips kept are the last known, not a count.
        s.mark_enumeration_failed();
        assert_eq!(device_counts(&s, 0), None);
        assert_eq!(device_counts(&s, 8), None);
        assert_eq!(device_counts(&NpuState::default(), 8), None);
    }

    #[test]
    fn level_precedence_is_mindclusters() {
        let order: Vec<&str> = {
            let mut l = FaultLevel::ALL.to_vec();
            l.sort_by_key(|l| l.precedence());
            l.iter().map(|l| l.as_str()).collect()
        };
        assert_eq!(
            order,
            [
                "NotHandleFault",
                "SubHealthFault",
                "RestartRequest",
                "RestartBusiness",
                "FreeRestartNPU",
                "RestartNPU",
                "PreSeparateNPU",
                "SeparateNPU",
                "ManuallySeparateNPU"
            ]
        );
    }
}
