//! The plain Rust values the DCMI wrappers return: what a call read, decoded from its C
//! layout, with no pointers and nothing `unsafe`. Units are the library's; the conversion
//! to base units happens in `convert`.

/// Number of 64-bit counters in `struct dcmi_network_pkt_stats_info`.
pub const PKT_STATS_COUNTERS: usize = 48;

/// `dcmi_chip_info` / `_v2`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChipInfo {
    /// e.g. "Ascend".
    pub chip_type: String,
    /// e.g. "910B3".
    pub chip_name: String,
    /// e.g. "V1".
    pub chip_ver: String,
    /// AI cores.
    pub aicore_count: u32,
}

/// PCIe domain/bus/device/function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieBdf {
    /// PCI domain.
    pub domain: i32,
    /// Bus.
    pub bus: u32,
    /// Device.
    pub device: u32,
    /// Function.
    pub function: u32,
}

/// `dcmi_hbm_info`, in DCMI units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HbmInfo {
    /// MB (2^20 bytes).
    pub memory_size_mb: u64,
    /// MB in use.
    pub memory_usage_mb: u64,
    /// °C.
    pub temp_c: i32,
    /// Bandwidth utilisation, %.
    pub bandwidth_util_pct: u32,
}

/// `dcmi_get_memory_info_stru`, in DCMI units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdrInfo {
    /// MB.
    pub memory_size_mb: u64,
    /// MB available.
    pub memory_available_mb: u64,
}

/// The seven fields of `dcmi_ecc_info` every header agrees on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EccInfo {
    /// ECC enabled flag.
    pub enable_flag: i32,
    /// Single-bit errors since boot.
    pub single: u32,
    /// Double-bit errors since boot.
    pub double: u32,
    /// Lifetime single-bit errors.
    pub total_single: u32,
    /// Lifetime double-bit errors.
    pub total_double: u32,
    /// Pages isolated for single-bit errors.
    pub single_isolated_pages: u32,
    /// Pages isolated for double-bit errors.
    pub double_isolated_pages: u32,
}

/// `dcmi_multi_utilization_info`, in %.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiUtilization {
    /// Cube.
    pub aic: u32,
    /// Vector.
    pub aiv: u32,
    /// AI core.
    pub aicore: u32,
    /// Whole NPU.
    pub npu: u32,
}

/// HCCS bandwidth per link, GB/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HccsBandwidth {
    /// Transmit, per link.
    pub tx: [f64; 16],
    /// Receive, per link.
    pub rx: [f64; 16],
}

/// HCCS counters per link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HccsStatistics {
    /// Transmitted flits.
    pub tx: [u64; 16],
    /// Received flits.
    pub rx: [u64; 16],
    /// CRC errors.
    pub crc_errors: [u64; 16],
}

/// One process on a chip (`dcmi_proc_mem_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcMem {
    /// Host PID.
    pub pid: i32,
    /// Device memory, bytes.
    pub memory_bytes: u64,
}

/// Entries of the buffer handed to `dcmi_get_device_resource_info`. The call has no length
/// parameter and the reference says "up to 32"; the buffer is four times that, so a
/// driver that lists more cannot write past it.
pub const PROC_BUFFER: usize = 128;

/// The FEC counters of `dcmi_extra_statistics_info` hcclwatch reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtraStatistics {
    /// `cw_total_cnt`.
    pub total: u64,
    /// `cw_correct_cnt`.
    pub corrected: u64,
    /// `cw_uncorrect_cnt`.
    pub uncorrectable: u64,
    /// `cw_bad_cnt`.
    pub bad: u64,
    /// `correcting_bit_rate` as the library wrote it.
    pub correcting_bit_rate: f64,
}

/// A fault event pushed by `dcmi_subscribe_fault_event`, copied out of the library's
/// buffer inside the callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The fault code (event id).
    pub event_id: u32,
    /// Logic id of the chip.
    pub logic_id: u16,
    /// 0 hint, 1 minor, 2 major, 3 critical.
    pub severity: u8,
    /// 0 recovery, 1 occur, 2 one-off.
    pub assertion: u8,
    /// When the alarm was raised, ms since the epoch.
    pub raised_ms: u64,
    /// `event_name`.
    pub name: String,
}

/// The parameters of a ping-mesh task, as `struct dcmi_hccsping_mesh_operate` carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshOperate {
    /// Comma-separated destinations, shorter than [`MESH_ADDR_LIST_LEN`].
    pub dst_addr_list: String,
    /// Bytes per packet.
    pub pkt_size: i32,
    /// Packets per destination and round.
    pub pkt_send_num: i32,
    /// Between packets, ms.
    pub pkt_interval: i32,
    /// Reserved, ≥ 0.
    pub timeout: i32,
    /// Between rounds, s.
    pub task_interval: i32,
    /// 0 or 1.
    pub task_id: i32,
}

/// One destination of `struct dcmi_hccsping_mesh_info`, in the library's units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshDestRaw {
    /// Destination address.
    pub addr: String,
    /// Packets answered.
    pub suc_pkt_num: u32,
    /// Packets lost.
    pub fail_pkt_num: u32,
    /// Slowest, in the unconfirmed time unit; -1 when not pinged.
    pub max_time: i64,
    /// Fastest.
    pub min_time: i64,
    /// Average.
    pub avg_time: i64,
    /// 95th percentile.
    pub tp95_time: i64,
    /// Rounds the statistics cover.
    pub reply_stat_num: i32,
    /// Rounds since the task started.
    pub ping_total_num: u64,
    /// `_v2` only: the faulty-L1-plane summary for this destination.
    pub l1_plane_check_res: Option<u8>,
}
