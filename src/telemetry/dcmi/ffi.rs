//! The raw DCMI ABI: `repr(C)` structs, the symbol table, and safe wrappers.
//!
//! This file is the only place in hcclwatch with `unsafe` code. Every DCMI function is
//! resolved on its own and kept as an `Option`: an older driver that lacks a function
//! makes that one reading unsupported instead of failing the load (npu-exporter's
//! `-99998` rule). The wrappers take and return plain Rust values; no raw pointer leaves
//! this module. Struct layouts are the x86_64/LP64 layouts from the DCMI header and are
//! pinned by `size_of` assertions, because a layout mistake here is memory corruption,
//! not a compile error.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_ulonglong, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, TryLockError};

use libloading::Library;

/// What a raw call returned when it did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    /// The library does not export this function.
    Missing,
    /// The function returned this non-zero status.
    Code(i32),
}

// ---------------------------------------------------------------------------------------
// Structs. Field names follow the DCMI header.

#[repr(C)]
struct ChipInfoC {
    chip_type: [u8; 32],
    chip_name: [u8; 32],
    chip_ver: [u8; 32],
    aicore_cnt: c_uint,
}

#[repr(C)]
struct ChipInfoV2C {
    chip_type: [u8; 32],
    chip_name: [u8; 32],
    chip_ver: [u8; 32],
    aicore_cnt: c_uint,
    npu_name: [u8; 32],
}

#[repr(C)]
struct PcieInfoAllC {
    venderid: c_uint,
    subvenderid: c_uint,
    deviceid: c_uint,
    subdeviceid: c_uint,
    domain: c_int,
    bdf_busid: c_uint,
    bdf_deviceid: c_uint,
    bdf_funcid: c_uint,
    reserve: [u8; 32],
}

#[repr(C)]
struct DieIdC {
    soc_die: [c_uint; 5],
}

#[repr(C)]
struct ElabelInfoC {
    product_name: [u8; 256],
    model: [u8; 256],
    manufacturer: [u8; 256],
    manufacturer_date: [u8; 256],
    serial_number: [u8; 256],
}

#[repr(C)]
struct HbmInfoC {
    memory_size: u64,
    freq: c_uint,
    memory_usage: u64,
    temp: c_int,
    bandwith_util_rate: c_uint,
}

#[repr(C)]
struct GetMemoryInfoC {
    memory_size: u64,
    memory_available: u64,
    freq: c_uint,
    hugepagesize: libc::c_ulong,
    hugepages_total: libc::c_ulong,
    hugepages_free: libc::c_ulong,
    utiliza: c_uint,
    reserve: [u8; 60],
}

/// The vendored header's 9-field layout (36 B). The official header has 7 fields
/// (28 B); allocating the larger one and reading the first 7 is safe with both.
#[repr(C)]
struct EccInfoC {
    enable_flag: c_int,
    single_bit_error_cnt: c_uint,
    double_bit_error_cnt: c_uint,
    total_single_bit_error_cnt: c_uint,
    total_double_bit_error_cnt: c_uint,
    single_bit_isolated_pages_cnt: c_uint,
    double_bit_isolated_pages_cnt: c_uint,
    single_bit_next_isolated_pages_cnt: c_uint,
    double_bit_next_isolated_pages_cnt: c_uint,
}

#[repr(C)]
struct MultiUtilizationC {
    aic_util: c_uint,
    aiv_util: c_uint,
    aicore_util: c_uint,
    npu_util: c_uint,
    reserved: [c_uint; 8],
}

#[repr(C)]
struct NetworkPktStatsC {
    counters: [u64; PKT_STATS_COUNTERS],
    tv_sec: libc::c_long,
    tv_usec: libc::c_long,
    reserved: [u8; 64],
}

#[repr(C)]
struct HccsBandwidthC {
    profiling_time: c_int,
    total_txbw: f64,
    total_rxbw: f64,
    tx_bandwidth: [f64; 16],
    rx_bandwidth: [f64; 16],
}

#[repr(C)]
struct HccsStatisticU64C {
    tx_cnt: [u64; 16],
    rx_cnt: [u64; 16],
    crc_err_cnt: [u64; 16],
    retry_cnt: [u64; 16],
    reserved: [u64; 64],
}

#[repr(C)]
struct HccsStatisticU32C {
    tx_cnt: [c_uint; 16],
    rx_cnt: [c_uint; 16],
    crc_err_cnt: [c_uint; 16],
    retry_cnt: [c_uint; 16],
    reserved: [c_uint; 64],
}

#[repr(C)]
struct BoardInfoC {
    board_id: c_uint,
    pcb_id: c_uint,
    bom_id: c_uint,
    slot_id: c_uint,
}

#[repr(C)]
struct ProcMemInfoC {
    proc_id: c_int,
    /// Bytes.
    proc_mem_usage: c_ulong,
}

#[repr(C)]
struct ExtraStatisticsC {
    cw_total_cnt: c_ulonglong,
    cw_before_correct_cnt: c_ulonglong,
    cw_correct_cnt: c_ulonglong,
    cw_uncorrect_cnt: c_ulonglong,
    cw_bad_cnt: c_ulonglong,
    trans_total_bit: c_ulonglong,
    cw_total_correct_bit: c_ulonglong,
    rx_full_drop_cnt: c_ulonglong,
    pcs_err_cnt: c_ulonglong,
    rx_send_app_good_pkts: c_ulonglong,
    rx_send_app_bad_pkts: c_ulonglong,
    correcting_bit_rate: f64,
}

/// `struct dcmi_event_filter`, passed **by value** to `dcmi_subscribe_fault_event`.
#[repr(C)]
#[derive(Clone, Copy)]
struct EventFilterC {
    /// bit 0: filter on `event_id`, bit 1: on `severity` (at least), bit 2: on
    /// `node_type`; 0: every event.
    filter_flag: c_ulonglong,
    event_id: c_uint,
    severity: u8,
    node_type: u8,
    resv: [u8; 32],
}

/// `struct dcmi_dms_fault_event`. The official header splits `resv` differently from
/// MindCluster's copy (`os_id, resv_1[1], node_type_ex, …`); the size is 352 bytes in both.
#[repr(C)]
struct DmsFaultEventC {
    event_id: c_uint,
    /// The chip's logic id.
    deviceid: u16,
    node_type: u8,
    node_id: u8,
    sub_node_type: u8,
    sub_node_id: u8,
    severity: u8,
    assertion: u8,
    event_serial_num: c_int,
    notify_serial_num: c_int,
    /// Milliseconds since the epoch.
    alarm_raised_time: c_ulonglong,
    event_name: [u8; 256],
    additional_info: [u8; 32],
    resv: [u8; 32],
}

/// `struct dcmi_event`: a type (0 = DMS fault event) and a union with one member.
#[repr(C)]
struct EventC {
    event_type: c_int,
    dms_event: DmsFaultEventC,
}

/// `IP_ADDR_LIST_LEN`: the destination list of a ping-mesh task, with its NUL.
pub const MESH_ADDR_LIST_LEN: usize = 1024;
/// `HCCS_PING_MESH_MAX_NUM`: destinations per ping-mesh task.
pub const MESH_MAX_DESTINATIONS: usize = 48;
/// `ADDR_MAX_LEN`: one destination address, with its NUL.
const MESH_ADDR_LEN: usize = 16;

#[repr(C)]
struct HccsPingMeshOperateC {
    dst_addr_list: [c_char; MESH_ADDR_LIST_LEN],
    pkt_size: c_int,
    pkt_send_num: c_int,
    pkt_interval: c_int,
    timeout: c_int,
    task_interval: c_int,
    task_id: c_int,
}

#[repr(C)]
struct HccsPingMeshInfoC {
    dst_addr: [[c_char; MESH_ADDR_LEN]; MESH_MAX_DESTINATIONS],
    suc_pkt_num: [c_uint; MESH_MAX_DESTINATIONS],
    fail_pkt_num: [c_uint; MESH_MAX_DESTINATIONS],
    max_time: [c_long; MESH_MAX_DESTINATIONS],
    min_time: [c_long; MESH_MAX_DESTINATIONS],
    avg_time: [c_long; MESH_MAX_DESTINATIONS],
    tp95_time: [c_long; MESH_MAX_DESTINATIONS],
    reply_stat_num: [c_int; MESH_MAX_DESTINATIONS],
    ping_total_num: [c_ulonglong; MESH_MAX_DESTINATIONS],
    dest_num: c_int,
}

#[repr(C)]
struct HccsPingMeshInfoV2C {
    info: HccsPingMeshInfoC,
    /// Per destination: the L1 planes whose HCCS links to it are faulty.
    l1_plane_check_res: [u8; MESH_MAX_DESTINATIONS],
    reserved: [u8; MESH_MAX_DESTINATIONS],
}

const _: () = assert!(size_of::<ChipInfoC>() == 100 && align_of::<ChipInfoC>() == 4);
const _: () = assert!(size_of::<ChipInfoV2C>() == 132);
const _: () = assert!(size_of::<PcieInfoAllC>() == 64);
const _: () = assert!(size_of::<DieIdC>() == 20);
const _: () = assert!(size_of::<ElabelInfoC>() == 1280 && align_of::<ElabelInfoC>() == 1);
const _: () = assert!(size_of::<HbmInfoC>() == 32 && align_of::<HbmInfoC>() == 8);
const _: () = assert!(std::mem::offset_of!(HbmInfoC, memory_usage) == 16);
const _: () = assert!(std::mem::offset_of!(HbmInfoC, temp) == 24);
const _: () = assert!(size_of::<GetMemoryInfoC>() == 112);
const _: () = assert!(std::mem::offset_of!(GetMemoryInfoC, hugepagesize) == 24);
const _: () = assert!(std::mem::offset_of!(GetMemoryInfoC, utiliza) == 48);
const _: () = assert!(size_of::<EccInfoC>() == 36);
const _: () = assert!(size_of::<MultiUtilizationC>() == 48);
const _: () = assert!(size_of::<NetworkPktStatsC>() == 464);
const _: () = assert!(size_of::<HccsBandwidthC>() == 280);
const _: () = assert!(std::mem::offset_of!(HccsBandwidthC, total_txbw) == 8);
const _: () = assert!(size_of::<HccsStatisticU64C>() == 1024);
const _: () = assert!(size_of::<HccsStatisticU32C>() == 512);
const _: () = assert!(size_of::<BoardInfoC>() == 16);
const _: () = assert!(size_of::<ProcMemInfoC>() == 16 && align_of::<ProcMemInfoC>() == 8);
const _: () = assert!(size_of::<ExtraStatisticsC>() == 96);
const _: () = assert!(std::mem::offset_of!(ExtraStatisticsC, correcting_bit_rate) == 88);
const _: () = assert!(size_of::<EventFilterC>() == 48 && align_of::<EventFilterC>() == 8);
const _: () = assert!(size_of::<DmsFaultEventC>() == 352 && align_of::<DmsFaultEventC>() == 8);
const _: () = assert!(std::mem::offset_of!(DmsFaultEventC, severity) == 10);
const _: () = assert!(std::mem::offset_of!(DmsFaultEventC, alarm_raised_time) == 24);
const _: () = assert!(std::mem::offset_of!(DmsFaultEventC, event_name) == 32);
const _: () = assert!(size_of::<EventC>() == 360 && std::mem::offset_of!(EventC, dms_event) == 8);
const _: () = assert!(size_of::<HccsPingMeshOperateC>() == 1048);
const _: () = assert!(size_of::<HccsPingMeshInfoC>() == 3272);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, suc_pkt_num) == 768);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, fail_pkt_num) == 960);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, max_time) == 1152);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, min_time) == 1536);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, avg_time) == 1920);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, tp95_time) == 2304);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, reply_stat_num) == 2688);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, ping_total_num) == 2880);
const _: () = assert!(std::mem::offset_of!(HccsPingMeshInfoC, dest_num) == 3264);
const _: () = assert!(size_of::<HccsPingMeshInfoV2C>() == 3368);

/// Plain C data: integers, floats and arrays of them, for which all-zero bytes are a
/// valid value. Out-parameters are zeroed before a call, so a library that fills only
/// part of a struct (the 28-byte ECC layout) leaves the rest defined.
///
/// # Safety
/// Implement only for types made of integers, floats and arrays of them.
unsafe trait Plain: Sized {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: all-zero bytes are a valid `Self` (the trait's contract).
        unsafe { std::mem::zeroed() }
    }
}

macro_rules! plain {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: integers, floats and arrays of them only (see the definitions above).
            unsafe impl Plain for $t {}
        )*
    };
}

plain!(
    c_int,
    c_uint,
    ChipInfoC,
    ChipInfoV2C,
    PcieInfoAllC,
    DieIdC,
    ElabelInfoC,
    HbmInfoC,
    GetMemoryInfoC,
    EccInfoC,
    MultiUtilizationC,
    NetworkPktStatsC,
    HccsBandwidthC,
    HccsStatisticU64C,
    HccsStatisticU32C,
    BoardInfoC,
    ProcMemInfoC,
    ExtraStatisticsC,
    EventFilterC,
    HccsPingMeshOperateC,
    HccsPingMeshInfoC,
    HccsPingMeshInfoV2C,
);

/// Number of 64-bit counters in `struct dcmi_network_pkt_stats_info`.
pub const PKT_STATS_COUNTERS: usize = 48;

/// `enum dcmi_main_cmd` value for HCCS queries through `dcmi_get_device_info`.
const MAIN_CMD_HCCS: c_int = 16;

// ---------------------------------------------------------------------------------------
// Plain results.

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

// ---------------------------------------------------------------------------------------
// Symbol table.

type FnInit = unsafe extern "C" fn() -> c_int;
type FnVersion = unsafe extern "C" fn(*mut c_char, c_uint) -> c_int;
type FnCardList = unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int;
type FnLogicId = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type FnErrorCodes = unsafe extern "C" fn(c_int, c_int, *mut c_int, *mut c_uint, c_uint) -> c_int;
type FnDeviceInfo =
    unsafe extern "C" fn(c_int, c_int, c_int, c_uint, *mut c_void, *mut c_uint) -> c_int;
type FnErrorString = unsafe extern "C" fn(c_int, c_int, c_uint, *mut u8, c_int) -> c_int;
type FnResourceInfo = unsafe extern "C" fn(c_int, c_int, *mut ProcMemInfoC, *mut c_int) -> c_int;
/// `dcmi_fault_event_callback`: `void (*)(struct dcmi_event *event)`.
type FaultCallback = extern "C" fn(*mut EventC);
type FnSubscribe = unsafe extern "C" fn(c_int, c_int, EventFilterC, FaultCallback) -> c_int;
/// `int f(int card_id, int device_id, int port_id, unsigned int task_id, T *out)`: the
/// ping-mesh queries.
type MeshFn<T> = unsafe extern "C" fn(c_int, c_int, c_int, c_uint, *mut T) -> c_int;
type FnMeshStop = unsafe extern "C" fn(c_int, c_int, c_int, c_uint) -> c_int;
/// `int f(A id, T *out)`: a query about a card, or a translation of one ID.
type IdFn<A, T> = unsafe extern "C" fn(A, *mut T) -> c_int;
/// `int f(int card_id, int device_id, T *out)`: the shape of most chip queries.
type ChipFn<T> = unsafe extern "C" fn(c_int, c_int, *mut T) -> c_int;
/// `int f(int card_id, int device_id, int type, T *out)`: a chip query with an input
/// type (or port).
type TypedFn<T> = unsafe extern "C" fn(c_int, c_int, c_int, *mut T) -> c_int;

/// A DCMI function that answers through its last parameter, a pointer to a `T`; `Args`
/// are the parameters before it.
trait OutFn<Args> {
    /// What the function writes.
    type Out: Plain;

    /// Calls the function with `args` and `out`.
    ///
    /// # Safety
    /// `self` must be the function's real prototype, and `out` valid for writes of one
    /// `Self::Out`.
    unsafe fn call_out(self, args: Args, out: *mut Self::Out) -> c_int;
}

macro_rules! out_fn {
    ($($a:ident: $ty:ident),*) => {
        impl<$($ty,)* T: Plain> OutFn<($($ty,)*)> for unsafe extern "C" fn($($ty,)* *mut T) -> c_int {
            type Out = T;

            unsafe fn call_out(self, ($($a,)*): ($($ty,)*), out: *mut T) -> c_int {
                // SAFETY: the prototype and the pointer are the caller's obligations.
                unsafe { self($($a,)* out) }
            }
        }
    };
}

out_fn!(a: A);
out_fn!(a: A, b: B);
out_fn!(a: A, b: B, c: C);
out_fn!(a: A, b: B, c: C, d: D);

macro_rules! symbol_table {
    ($($name:ident: $ty:ty,)*) => {
        #[allow(non_snake_case)]
        struct Symbols {
            $($name: Option<$ty>,)*
        }

        impl Symbols {
            fn resolve(lib: &Library) -> Self {
                Self {
                    $($name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: `$ty` is the C prototype of this DCMI function from the
                        // vendor header; the pointer is only called through the wrappers
                        // below, while `lib` (owned by the same `DcmiLib`) stays loaded.
                        unsafe { lib.get::<$ty>(name.as_bytes()) }.ok().map(|s| *s)
                    },)*
                }
            }

            fn presence(&self) -> Vec<(&'static str, bool)> {
                vec![$((stringify!($name), self.$name.is_some()),)*]
            }
        }
    };
}

symbol_table! {
    dcmi_init: FnInit,
    dcmi_get_dcmi_version: FnVersion,
    dcmi_get_card_list: FnCardList,
    dcmi_get_device_num_in_card: IdFn<c_int, c_int>,
    dcmi_get_device_logic_id: FnLogicId,
    dcmi_get_device_phyid_from_logicid: IdFn<c_uint, c_uint>,
    dcmi_get_device_chip_info: ChipFn<ChipInfoC>,
    dcmi_get_device_chip_info_v2: ChipFn<ChipInfoV2C>,
    dcmi_get_device_pcie_info_v2: ChipFn<PcieInfoAllC>,
    dcmi_get_device_die_v2: TypedFn<DieIdC>,
    dcmi_get_card_elabel_v2: IdFn<c_int, ElabelInfoC>,
    dcmi_get_device_health: ChipFn<c_uint>,
    dcmi_get_device_errorcode_v2: FnErrorCodes,
    dcmi_get_device_temperature: ChipFn<c_int>,
    dcmi_get_device_power_info: ChipFn<c_int>,
    dcmi_get_device_voltage: ChipFn<c_uint>,
    dcmi_get_device_frequency: TypedFn<c_uint>,
    dcmi_get_device_utilization_rate: TypedFn<c_uint>,
    dcmi_get_device_multi_utilization_rate: ChipFn<MultiUtilizationC>,
    dcmi_get_device_hbm_info: ChipFn<HbmInfoC>,
    dcmi_get_device_memory_info_v3: ChipFn<GetMemoryInfoC>,
    dcmi_get_device_ecc_info: TypedFn<EccInfoC>,
    dcmi_get_device_network_health: ChipFn<c_int>,
    dcmi_get_netdev_pkt_stats_info: TypedFn<NetworkPktStatsC>,
    dcmi_get_hccs_link_bandwidth_info: ChipFn<HccsBandwidthC>,
    dcmi_get_device_info: FnDeviceInfo,
    dcmi_get_device_board_info: ChipFn<BoardInfoC>,
    dcmi_mcu_get_power_info: IdFn<c_int, c_int>,
    dcmi_get_device_errorcode_string: FnErrorString,
    dcmi_get_device_resource_info: FnResourceInfo,
    dcmi_get_extra_statistics_info: TypedFn<ExtraStatisticsC>,
    dcmi_subscribe_fault_event: FnSubscribe,
    dcmi_start_hccsping_mesh: TypedFn<HccsPingMeshOperateC>,
    dcmi_stop_hccsping_mesh: FnMeshStop,
    dcmi_get_hccsping_mesh_info: MeshFn<HccsPingMeshInfoC>,
    dcmi_get_hccsping_mesh_info_v2: MeshFn<HccsPingMeshInfoV2C>,
    dcmi_get_hccsping_mesh_state: MeshFn<c_uint>,
}

/// A loaded `libdcmi.so` with its symbol table.
///
/// Field order matters: `symbols` must not outlive `_lib`, and Rust drops fields in
/// declaration order, so the pointers go first.
pub struct DcmiLib {
    symbols: Symbols,
    _lib: Library,
}

impl std::fmt::Debug for DcmiLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcmiLib").finish_non_exhaustive()
    }
}

fn status(rc: c_int) -> Result<(), Raw> {
    if rc == 0 { Ok(()) } else { Err(Raw::Code(rc)) }
}

/// Decodes a fixed-size C string buffer: stops at the first NUL or the buffer's end,
/// replaces invalid UTF-8, trims whitespace.
fn c_buf_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// Calls `f(args…, &mut out)` on `out` as given and returns what `f` wrote; a missing
/// symbol is [`Raw::Missing`], a non-zero status [`Raw::Code`].
fn answer<A, F: OutFn<A>>(f: Option<F>, args: A, mut out: F::Out) -> Result<F::Out, Raw> {
    let f = f.ok_or(Raw::Missing)?;
    // SAFETY: every `OutFn` in the symbol table has the prototype of its DCMI function
    // (from the vendor header), and `out` is a live, writable value of the type it fills.
    status(unsafe { f.call_out(args, &mut out) })?;
    Ok(out)
}

/// [`answer`] on a zeroed out-parameter: the usual call.
fn query<A, F: OutFn<A>>(f: Option<F>, args: A) -> Result<F::Out, Raw> {
    answer(f, args, Plain::zeroed())
}

impl ChipInfo {
    /// Decodes the fields `dcmi_chip_info` and `dcmi_chip_info_v2` share.
    fn decode(chip_type: &[u8], chip_name: &[u8], chip_ver: &[u8], aicore_cnt: c_uint) -> Self {
        Self {
            chip_type: c_buf_to_string(chip_type),
            chip_name: c_buf_to_string(chip_name),
            chip_ver: c_buf_to_string(chip_ver),
            aicore_count: aicore_cnt,
        }
    }
}

impl DcmiLib {
    /// Loads the library at `path` and resolves every symbol it has.
    pub fn open(path: &Path) -> Result<Self, libloading::Error> {
        // SAFETY: loading runs the library's initialisers. libdcmi's are the vendor's
        // own; we load it exactly as npu-exporter does (dlopen of a root-owned path).
        let lib = unsafe { Library::new(path) }?;
        let symbols = Symbols::resolve(&lib);
        Ok(Self { symbols, _lib: lib })
    }

    /// `(symbol, present)` for every function hcclwatch knows.
    pub fn symbol_presence(&self) -> Vec<(&'static str, bool)> {
        self.symbols.presence()
    }

    /// `dcmi_init()`.
    pub fn init(&self) -> Result<(), Raw> {
        let f = self.symbols.dcmi_init.ok_or(Raw::Missing)?;
        // SAFETY: no arguments; the prototype matches the header.
        status(unsafe { f() })
    }

    /// `dcmi_get_dcmi_version()`.
    pub fn dcmi_version(&self) -> Result<String, Raw> {
        let f = self.symbols.dcmi_get_dcmi_version.ok_or(Raw::Missing)?;
        let mut buf = [0u8; 64];
        // SAFETY: the buffer is 64 writable bytes and we pass its length.
        status(unsafe { f(buf.as_mut_ptr().cast(), buf.len() as c_uint) })?;
        Ok(c_buf_to_string(&buf))
    }

    /// `dcmi_get_card_list()`; the list is capped at 64, as the driver documents.
    pub fn card_list(&self) -> Result<Vec<i32>, Raw> {
        let f = self.symbols.dcmi_get_card_list.ok_or(Raw::Missing)?;
        let mut n: c_int = 0;
        let mut list = [0 as c_int; 64];
        // SAFETY: `n` is writable and `list` holds 64 ints, the length we pass.
        status(unsafe { f(&mut n, list.as_mut_ptr(), list.len() as c_int) })?;
        let n = usize::try_from(n).unwrap_or(0).min(list.len());
        Ok(list[..n].to_vec())
    }

    /// `dcmi_get_device_num_in_card()`.
    pub fn device_num_in_card(&self, card: i32) -> Result<i32, Raw> {
        query(self.symbols.dcmi_get_device_num_in_card, (card,))
    }

    /// `dcmi_get_device_logic_id()` (note the out-parameter comes first in C).
    pub fn logic_id(&self, card: i32, device: i32) -> Result<i32, Raw> {
        let f = self.symbols.dcmi_get_device_logic_id.ok_or(Raw::Missing)?;
        let mut id: c_int = 0;
        // SAFETY: `id` is a valid writable int.
        status(unsafe { f(&mut id, card, device) })?;
        Ok(id)
    }

    /// `dcmi_get_device_phyid_from_logicid()`.
    pub fn phy_id_from_logic(&self, logic: u32) -> Result<u32, Raw> {
        query(self.symbols.dcmi_get_device_phyid_from_logicid, (logic,))
    }

    /// `dcmi_get_device_chip_info_v2()`.
    pub fn chip_info_v2(&self, card: i32, device: i32) -> Result<ChipInfo, Raw> {
        let out = query(self.symbols.dcmi_get_device_chip_info_v2, (card, device))?;
        Ok(ChipInfo::decode(
            &out.chip_type,
            &out.chip_name,
            &out.chip_ver,
            out.aicore_cnt,
        ))
    }

    /// `dcmi_get_device_chip_info()` (the pre-v2 form).
    pub fn chip_info(&self, card: i32, device: i32) -> Result<ChipInfo, Raw> {
        let out = query(self.symbols.dcmi_get_device_chip_info, (card, device))?;
        Ok(ChipInfo::decode(
            &out.chip_type,
            &out.chip_name,
            &out.chip_ver,
            out.aicore_cnt,
        ))
    }

    /// `dcmi_get_device_pcie_info_v2()`.
    pub fn pcie_info_v2(&self, card: i32, device: i32) -> Result<PcieBdf, Raw> {
        let out = query(self.symbols.dcmi_get_device_pcie_info_v2, (card, device))?;
        Ok(PcieBdf {
            domain: out.domain,
            bus: out.bdf_busid,
            device: out.bdf_deviceid,
            function: out.bdf_funcid,
        })
    }

    /// `dcmi_get_device_die_v2()`; `die_type` 0 = NDIE, 1 = VDIE.
    pub fn die_v2(&self, card: i32, device: i32, die_type: i32) -> Result<[u32; 5], Raw> {
        let f = self.symbols.dcmi_get_device_die_v2;
        Ok(query(f, (card, device, die_type))?.soc_die)
    }

    /// Serial number from `dcmi_get_card_elabel_v2()`.
    pub fn card_serial(&self, card: i32) -> Result<String, Raw> {
        let out = query(self.symbols.dcmi_get_card_elabel_v2, (card,))?;
        Ok(c_buf_to_string(&out.serial_number))
    }

    /// `dcmi_get_device_health()`: 0..=3, or 0xFFFFFFFF for a missing device.
    pub fn health(&self, card: i32, device: i32) -> Result<u32, Raw> {
        query(self.symbols.dcmi_get_device_health, (card, device))
    }

    /// `dcmi_get_device_errorcode_v2()` with a 128-entry list, as npu-exporter uses.
    pub fn error_codes_v2(&self, card: i32, device: i32) -> Result<Vec<u32>, Raw> {
        let f = self
            .symbols
            .dcmi_get_device_errorcode_v2
            .ok_or(Raw::Missing)?;
        let mut n: c_int = 0;
        let mut list = [0 as c_uint; 128];
        // SAFETY: `n` is writable and `list` holds the 128 entries we declare.
        status(unsafe {
            f(
                card,
                device,
                &mut n,
                list.as_mut_ptr(),
                list.len() as c_uint,
            )
        })?;
        let n = usize::try_from(n).unwrap_or(0).min(list.len());
        Ok(list[..n].to_vec())
    }

    /// `dcmi_get_device_temperature()`, °C.
    pub fn temperature(&self, card: i32, device: i32) -> Result<i32, Raw> {
        query(self.symbols.dcmi_get_device_temperature, (card, device))
    }

    /// `dcmi_get_device_power_info()`, 0.1 W.
    pub fn power(&self, card: i32, device: i32) -> Result<i32, Raw> {
        query(self.symbols.dcmi_get_device_power_info, (card, device))
    }

    /// `dcmi_get_device_voltage()`, 0.01 V.
    pub fn voltage(&self, card: i32, device: i32) -> Result<u32, Raw> {
        query(self.symbols.dcmi_get_device_voltage, (card, device))
    }

    /// `dcmi_get_device_frequency()`, MHz.
    pub fn frequency(&self, card: i32, device: i32, freq_type: i32) -> Result<u32, Raw> {
        let f = self.symbols.dcmi_get_device_frequency;
        query(f, (card, device, freq_type))
    }

    /// `dcmi_get_device_utilization_rate()`, %.
    pub fn utilization_rate(&self, card: i32, device: i32, input_type: i32) -> Result<u32, Raw> {
        let f = self.symbols.dcmi_get_device_utilization_rate;
        query(f, (card, device, input_type))
    }

    /// `dcmi_get_device_multi_utilization_rate()`, %.
    pub fn multi_utilization(&self, card: i32, device: i32) -> Result<MultiUtilization, Raw> {
        let f = self.symbols.dcmi_get_device_multi_utilization_rate;
        let out = query(f, (card, device))?;
        Ok(MultiUtilization {
            aic: out.aic_util,
            aiv: out.aiv_util,
            aicore: out.aicore_util,
            npu: out.npu_util,
        })
    }

    /// `dcmi_get_device_hbm_info()`.
    pub fn hbm_info(&self, card: i32, device: i32) -> Result<HbmInfo, Raw> {
        let out = query(self.symbols.dcmi_get_device_hbm_info, (card, device))?;
        Ok(HbmInfo {
            memory_size_mb: out.memory_size,
            memory_usage_mb: out.memory_usage,
            temp_c: out.temp,
            bandwidth_util_pct: out.bandwith_util_rate,
        })
    }

    /// `dcmi_get_device_memory_info_v3()` (DDR).
    pub fn memory_info_v3(&self, card: i32, device: i32) -> Result<DdrInfo, Raw> {
        let out = query(self.symbols.dcmi_get_device_memory_info_v3, (card, device))?;
        Ok(DdrInfo {
            memory_size_mb: out.memory_size,
            memory_available_mb: out.memory_available,
        })
    }

    /// `dcmi_get_device_ecc_info()`; `device_type` 2 = HBM.
    ///
    /// The out-parameter is the larger (36-byte) layout, so either header's library
    /// writes within bounds.
    pub fn ecc_info(&self, card: i32, device: i32, device_type: i32) -> Result<EccInfo, Raw> {
        let out = query(
            self.symbols.dcmi_get_device_ecc_info,
            (card, device, device_type),
        )?;
        Ok(EccInfo {
            enable_flag: out.enable_flag,
            single: out.single_bit_error_cnt,
            double: out.double_bit_error_cnt,
            total_single: out.total_single_bit_error_cnt,
            total_double: out.total_double_bit_error_cnt,
            single_isolated_pages: out.single_bit_isolated_pages_cnt,
            double_isolated_pages: out.double_bit_isolated_pages_cnt,
        })
    }

    /// `dcmi_get_device_network_health()`: a `dcmi_rdfx_detect_result`.
    pub fn network_health(&self, card: i32, device: i32) -> Result<i32, Raw> {
        query(self.symbols.dcmi_get_device_network_health, (card, device))
    }

    /// `dcmi_get_netdev_pkt_stats_info()`: the 48 counters in header order.
    pub fn netdev_pkt_stats(
        &self,
        card: i32,
        device: i32,
        port: i32,
    ) -> Result<[u64; PKT_STATS_COUNTERS], Raw> {
        let f = self.symbols.dcmi_get_netdev_pkt_stats_info;
        Ok(query(f, (card, device, port))?.counters)
    }

    /// `dcmi_get_hccs_link_bandwidth_info()`, sampling for `profiling_ms` (1..=1000).
    pub fn hccs_bandwidth(
        &self,
        card: i32,
        device: i32,
        profiling_ms: i32,
    ) -> Result<HccsBandwidth, Raw> {
        // The sampling window is an input field of the out-parameter.
        let request = HccsBandwidthC {
            profiling_time: profiling_ms,
            ..Plain::zeroed()
        };
        let f = self.symbols.dcmi_get_hccs_link_bandwidth_info;
        let out = answer(f, (card, device), request)?;
        Ok(HccsBandwidth {
            tx: out.tx_bandwidth,
            rx: out.rx_bandwidth,
        })
    }

    /// `dcmi_get_device_board_info()`: the board id.
    pub fn board_id(&self, card: i32, device: i32) -> Result<u32, Raw> {
        Ok(query(self.symbols.dcmi_get_device_board_info, (card, device))?.board_id)
    }

    /// `dcmi_mcu_get_power_info()`: the card's board power, 0.1 W (0x7FFD and 0x7FFF are
    /// the invalid and read-failure markers; the caller rejects them).
    pub fn mcu_power(&self, card: i32) -> Result<i32, Raw> {
        query(self.symbols.dcmi_mcu_get_power_info, (card,))
    }

    /// `dcmi_get_device_errorcode_string()` with a 256-byte buffer (the full text; 48..255
    /// bytes give a shortened one).
    pub fn error_string(&self, card: i32, device: i32, code: u32) -> Result<String, Raw> {
        let f = self
            .symbols
            .dcmi_get_device_errorcode_string
            .ok_or(Raw::Missing)?;
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is 256 writable bytes and we pass that length.
        status(unsafe { f(card, device, code, buf.as_mut_ptr(), buf.len() as c_int) })?;
        Ok(c_buf_to_string(&buf))
    }

    /// `dcmi_get_device_resource_info()`: the processes using the chip, as listed.
    pub fn processes(&self, card: i32, device: i32) -> Result<Vec<ProcMem>, Raw> {
        let f = self
            .symbols
            .dcmi_get_device_resource_info
            .ok_or(Raw::Missing)?;
        let mut list: Vec<ProcMemInfoC> = (0..PROC_BUFFER).map(|_| Plain::zeroed()).collect();
        let mut n: c_int = 0;
        // SAFETY: `list` holds PROC_BUFFER writable entries, more than the 32 the reference
        // allows the library to write (it takes no length), and `n` is writable.
        status(unsafe { f(card, device, list.as_mut_ptr(), &mut n) })?;
        let n = usize::try_from(n).unwrap_or(0).min(PROC_BUFFER);
        Ok(list[..n]
            .iter()
            .map(|p| ProcMem {
                pid: p.proc_id,
                memory_bytes: p.proc_mem_usage,
            })
            .collect())
    }

    /// `dcmi_get_extra_statistics_info()`: FEC counters of `port`.
    pub fn extra_statistics(
        &self,
        card: i32,
        device: i32,
        port: i32,
    ) -> Result<ExtraStatistics, Raw> {
        let f = self.symbols.dcmi_get_extra_statistics_info;
        let out = query(f, (card, device, port))?;
        Ok(ExtraStatistics {
            total: out.cw_total_cnt,
            corrected: out.cw_correct_cnt,
            uncorrectable: out.cw_uncorrect_cnt,
            bad: out.cw_bad_cnt,
            correcting_bit_rate: out.correcting_bit_rate,
        })
    }

    /// `dcmi_subscribe_fault_event(-1, -1, no filter, callback)`: every chip's fault
    /// events, from now on, into a queue of `capacity` events. The library calls the
    /// callback on its own thread; the callback only copies the event into the queue (an
    /// event that finds it full is counted in [`fault_events_dropped`]) and rings the
    /// waker of [`set_fault_event_waker`]. One subscription per process: a second call
    /// replaces the queue the callback feeds.
    pub fn subscribe_fault_events(&self, capacity: usize) -> Result<Receiver<FaultEvent>, Raw> {
        let f = self
            .symbols
            .dcmi_subscribe_fault_event
            .ok_or(Raw::Missing)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
        lock_sink().events = Some(tx);
        let filter = EventFilterC::zeroed();
        // SAFETY: the prototype is the official header's (the filter by value, then the
        // handler); `on_fault_event` has the callback's signature and stays valid for the
        // process lifetime.
        let rc = unsafe { f(-1, -1, filter, on_fault_event) };
        if rc != 0 {
            lock_sink().events = None;
        }
        status(rc)?;
        Ok(rx)
    }

    /// `dcmi_start_hccsping_mesh()`.
    pub fn mesh_start(
        &self,
        card: i32,
        device: i32,
        port: i32,
        op: &MeshOperate,
    ) -> Result<(), Raw> {
        let mut c = HccsPingMeshOperateC::zeroed();
        let list = op.dst_addr_list.as_bytes();
        if list.len() >= MESH_ADDR_LIST_LEN {
            // What libdcmi answers for a list it cannot take (INVALID_PARAMETER).
            return Err(Raw::Code(-8001));
        }
        for (dst, src) in c.dst_addr_list.iter_mut().zip(list) {
            *dst = *src as c_char;
        }
        c.pkt_size = op.pkt_size;
        c.pkt_send_num = op.pkt_send_num;
        c.pkt_interval = op.pkt_interval;
        c.timeout = op.timeout;
        c.task_interval = op.task_interval;
        c.task_id = op.task_id;
        answer(
            self.symbols.dcmi_start_hccsping_mesh,
            (card, device, port),
            c,
        )
        .map(|_| ())
    }

    /// `dcmi_stop_hccsping_mesh()`.
    pub fn mesh_stop(&self, card: i32, device: i32, port: i32, task_id: u32) -> Result<(), Raw> {
        let f = self.symbols.dcmi_stop_hccsping_mesh.ok_or(Raw::Missing)?;
        // SAFETY: four integers; the prototype matches the header.
        status(unsafe { f(card, device, port, task_id) })
    }

    /// `dcmi_get_hccsping_mesh_state()`: 0 stopped, 1 running.
    pub fn mesh_state(&self, card: i32, device: i32, port: i32, task_id: u32) -> Result<u32, Raw> {
        let f = self.symbols.dcmi_get_hccsping_mesh_state;
        query(f, (card, device, port, task_id))
    }

    /// `dcmi_get_hccsping_mesh_info_v2()` when the library has it (it adds the L1-plane
    /// summary), else `dcmi_get_hccsping_mesh_info()`.
    pub fn mesh_info(
        &self,
        card: i32,
        device: i32,
        port: i32,
        task_id: u32,
    ) -> Result<Vec<MeshDestRaw>, Raw> {
        let args = (card, device, port, task_id);
        let (info, l1) = match self.symbols.dcmi_get_hccsping_mesh_info_v2 {
            Some(_) => {
                let v2 = query(self.symbols.dcmi_get_hccsping_mesh_info_v2, args)?;
                (v2.info, Some(v2.l1_plane_check_res))
            }
            None => (query(self.symbols.dcmi_get_hccsping_mesh_info, args)?, None),
        };
        let n = usize::try_from(info.dest_num)
            .unwrap_or(0)
            .min(MESH_MAX_DESTINATIONS);
        Ok((0..n)
            .map(|i| MeshDestRaw {
                addr: c_buf_to_string(&info.dst_addr[i].map(|c| c as u8)),
                suc_pkt_num: info.suc_pkt_num[i],
                fail_pkt_num: info.fail_pkt_num[i],
                max_time: info.max_time[i],
                min_time: info.min_time[i],
                avg_time: info.avg_time[i],
                tp95_time: info.tp95_time[i],
                reply_stat_num: info.reply_stat_num[i],
                ping_total_num: info.ping_total_num[i],
                l1_plane_check_res: l1.map(|a| a[i]),
            })
            .collect())
    }

    /// HCCS statistics through `dcmi_get_device_info(main 16, sub 5)`, 64-bit counters.
    pub fn hccs_statistics_u64(&self, card: i32, device: i32) -> Result<HccsStatistics, Raw> {
        let out: HccsStatisticU64C = self.hccs_statistics(card, device, 5)?;
        Ok(HccsStatistics {
            tx: out.tx_cnt,
            rx: out.rx_cnt,
            crc_errors: out.crc_err_cnt,
        })
    }

    /// HCCS statistics through `dcmi_get_device_info(main 16, sub 3)`, 32-bit counters
    /// (older drivers).
    pub fn hccs_statistics_u32(&self, card: i32, device: i32) -> Result<HccsStatistics, Raw> {
        let out: HccsStatisticU32C = self.hccs_statistics(card, device, 3)?;
        let widen = |a: [c_uint; 16]| a.map(u64::from);
        Ok(HccsStatistics {
            tx: widen(out.tx_cnt),
            rx: widen(out.rx_cnt),
            crc_errors: widen(out.crc_err_cnt),
        })
    }

    /// `dcmi_get_device_info(card, device, MAIN_CMD_HCCS, sub_cmd, &out, &size)` with
    /// `size` the size of `T`, the struct that sub-command fills.
    fn hccs_statistics<T: Plain>(&self, card: i32, device: i32, sub_cmd: c_uint) -> Result<T, Raw> {
        let f = self.symbols.dcmi_get_device_info.ok_or(Raw::Missing)?;
        let mut out = T::zeroed();
        let mut size = size_of::<T>() as c_uint;
        let buf = (&mut out as *mut T).cast();
        // SAFETY: `buf` points to `out`, `size` writable bytes, and `size` is a valid
        // in/out unsigned int.
        status(unsafe { f(card, device, MAIN_CMD_HCCS, sub_cmd, buf, &mut size) })?;
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------
// Fault events: the callback the library calls, and where it puts what it gets.

/// Where the callback hands events: the queue of the current subscription and the waker
/// of the thread that drains it.
struct EventSink {
    events: Option<SyncSender<FaultEvent>>,
    wake: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// The callback has no context pointer, so its destination is process-wide.
static EVENT_SINK: Mutex<EventSink> = Mutex::new(EventSink {
    events: None,
    wake: None,
});
static EVENTS_DROPPED: AtomicU64 = AtomicU64::new(0);

fn lock_sink() -> std::sync::MutexGuard<'static, EventSink> {
    EVENT_SINK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets what the fault-event callback calls after queueing an event. It runs on the
/// library's thread and must not block.
pub fn set_fault_event_waker(wake: Arc<dyn Fn() + Send + Sync>) {
    lock_sink().wake = Some(wake);
}

/// Fault events the callback could not queue (queue full, no subscriber, lock busy).
pub fn fault_events_dropped() -> u64 {
    EVENTS_DROPPED.load(Ordering::Relaxed)
}

/// The `dcmi_fault_event_callback`. It must never unwind into C (undefined behaviour) and
/// never block the library's thread: a panic is caught, the sink is only `try_lock`ed,
/// and the queue is only `try_send`; each miss counts one dropped event.
extern "C" fn on_fault_event(event: *mut EventC) {
    let delivered =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deliver(event))).unwrap_or(false);
    if !delivered {
        EVENTS_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Copies the event out and queues it; false when it was not queued.
fn deliver(event: *mut EventC) -> bool {
    if event.is_null() {
        return false;
    }
    // SAFETY: the library passes a pointer to a `struct dcmi_event` that is valid for the
    // duration of the callback; it is only read here, and nothing keeps it afterwards.
    let e = unsafe { &*event };
    if e.event_type != 0 {
        // Only DMS fault events (type 0) are defined.
        return false;
    }
    let d = &e.dms_event;
    let ev = FaultEvent {
        event_id: d.event_id,
        logic_id: d.deviceid,
        severity: d.severity,
        assertion: d.assertion,
        raised_ms: d.alarm_raised_time,
        name: c_buf_to_string(&d.event_name),
    };
    let sink = match EVENT_SINK.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return false,
    };
    let Some(tx) = sink.events.as_ref() else {
        return false;
    };
    match tx.try_send(ev) {
        Ok(()) => {
            if let Some(w) = sink.wake.as_ref() {
                w();
            }
            true
        }
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_are_bounded_and_lossy() {
        assert_eq!(c_buf_to_string(b"910B3\0garbage"), "910B3");
        assert_eq!(c_buf_to_string(b"no-terminator"), "no-terminator");
        assert_eq!(c_buf_to_string(b"\xff\xfeA\0"), "\u{fffd}\u{fffd}A");
        assert_eq!(c_buf_to_string(b" V1 \0"), "V1");
    }

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        let err = DcmiLib::open(Path::new("/nonexistent/libdcmi.so")).unwrap_err();
        let msg = super::super::error_chain(&err);
        assert!(msg.contains("/nonexistent/libdcmi.so"), "{msg}");
    }

    #[test]
    fn fault_callback_queues_wakes_and_counts_what_it_cannot_deliver() {
        let lib_less_subscribe = |cap| {
            let (tx, rx) = std::sync::mpsc::sync_channel(cap);
            lock_sink().events = Some(tx);
            rx
        };
        let rx = lib_less_subscribe(1);
        let woken = Arc::new(AtomicU64::new(0));
        let w = woken.clone();
        set_fault_event_waker(Arc::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        let mut ev = EventC {
            event_type: 0,
            dms_event: DmsFaultEventC {
                event_id: 0x80E1_8005,
                deviceid: 3,
                node_type: 0,
                node_id: 0,
                sub_node_type: 0,
                sub_node_id: 0,
                severity: 3,
                assertion: 1,
                event_serial_num: 0,
                notify_serial_num: 0,
                alarm_raised_time: 1_700_000_000_000,
                event_name: [0; 256],
                additional_info: [0; 32],
                resv: [0; 32],
            },
        };
        ev.dms_event.event_name[..3].copy_from_slice(b"HBM");
        let dropped = fault_events_dropped();
        on_fault_event(&mut ev);
        // The queue holds one: the second is dropped and counted, never blocking.
        on_fault_event(&mut ev);
        on_fault_event(std::ptr::null_mut());
        assert_eq!(fault_events_dropped() - dropped, 2);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        let got = rx.try_recv().unwrap();
        assert_eq!(
            got,
            FaultEvent {
                event_id: 0x80E1_8005,
                logic_id: 3,
                severity: 3,
                assertion: 1,
                raised_ms: 1_700_000_000_000,
                name: "HBM".into(),
            }
        );
        lock_sink().events = None;
    }
}
