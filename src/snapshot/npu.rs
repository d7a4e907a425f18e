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
    pub tx_bytes_per_second: Option<[f64; 16]>,
    /// Per-link receive bandwidth, bytes/s, when read.
    pub rx_bytes_per_second: Option<[f64; 16]>,
    /// Per-link transmitted flits, when read.
    pub tx_flits: Option<[u64; 16]>,
    /// Per-link received flits, when read.
    pub rx_flits: Option<[u64; 16]>,
    /// Per-link CRC errors, when read.
    pub crc_errors: Option<[u64; 16]>,
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
    /// Active fault codes.
    pub faults: Option<Vec<u32>>,
    /// RoCE network health (`dcmi_rdfx_detect_result`).
    pub network_health: Option<u32>,

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

/// The chips a source knows and the driver version; sources update it in place, one
/// reading group at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NpuState {
    /// Driver (DCMI) version.
    pub driver_version: Option<String>,
    /// Chips by physical id.
    pub chips: BTreeMap<u32, ChipReadings>,
}

/// A source's own health counters, exported as `hcclwatch_dcmi_*`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceStats {
    /// Errors by (call, code).
    pub call_errors: BTreeMap<(String, String), u64>,
    /// Deadline misses by call.
    pub timeouts: BTreeMap<String, u64>,
    /// Unsupported readings as (call, reason).
    pub unsupported: BTreeSet<(String, &'static str)>,
    /// Calls currently stuck past their deadline.
    pub stuck_calls: usize,
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

/// The handling level MindCluster's device plugin assigns to a fault code, for the
/// `level` label. Only codes named in the DCMI reference are listed; any other code is
/// `unknown` rather than a guess.
pub fn fault_level(code: u32) -> &'static str {
    match code {
        0x40F8_4E00 | 0x80E1_8005 => "RestartNPU",
        0x80E0_1801 => "RestartBusiness",
        0x8107_8603 | 0x80E2_1007 => "NotHandleFault",
        _ => "unknown",
    }
}

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
    fn fault_levels() {
        assert_eq!(fault_level(FAULT_CARD_DROPPED), "RestartNPU");
        assert_eq!(fault_level(0x8107_8603), "NotHandleFault");
        assert_eq!(fault_level(0x1234_5678), "unknown");
    }
}
