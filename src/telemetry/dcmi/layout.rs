//! The C layouts of the DCMI structs hcclwatch passes to the library, field names as in
//! the DCMI header, with `size_of`/`offset_of` assertions that pin them at compile time.
//!
//! They live apart from `ffi.rs` so that file holds only the code that crosses the
//! boundary; nothing here is `unsafe`. A layout mistake is memory corruption, not a compile
//! error, which is why every struct the library writes into is asserted against the
//! x86_64/LP64 sizes from the header.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_ulonglong};

use super::types::PKT_STATS_COUNTERS;

#[repr(C)]
pub(super) struct ChipInfoC {
    pub(super) chip_type: [u8; 32],
    pub(super) chip_name: [u8; 32],
    pub(super) chip_ver: [u8; 32],
    pub(super) aicore_cnt: c_uint,
}

#[repr(C)]
pub(super) struct ChipInfoV2C {
    pub(super) chip_type: [u8; 32],
    pub(super) chip_name: [u8; 32],
    pub(super) chip_ver: [u8; 32],
    pub(super) aicore_cnt: c_uint,
    pub(super) npu_name: [u8; 32],
}

#[repr(C)]
pub(super) struct PcieInfoAllC {
    pub(super) venderid: c_uint,
    pub(super) subvenderid: c_uint,
    pub(super) deviceid: c_uint,
    pub(super) subdeviceid: c_uint,
    pub(super) domain: c_int,
    pub(super) bdf_busid: c_uint,
    pub(super) bdf_deviceid: c_uint,
    pub(super) bdf_funcid: c_uint,
    pub(super) reserve: [u8; 32],
}

#[repr(C)]
pub(super) struct DieIdC {
    pub(super) soc_die: [c_uint; 5],
}

#[repr(C)]
pub(super) struct ElabelInfoC {
    pub(super) product_name: [u8; 256],
    pub(super) model: [u8; 256],
    pub(super) manufacturer: [u8; 256],
    pub(super) manufacturer_date: [u8; 256],
    pub(super) serial_number: [u8; 256],
}

#[repr(C)]
pub(super) struct HbmInfoC {
    pub(super) memory_size: u64,
    pub(super) freq: c_uint,
    pub(super) memory_usage: u64,
    pub(super) temp: c_int,
    pub(super) bandwith_util_rate: c_uint,
}

#[repr(C)]
pub(super) struct GetMemoryInfoC {
    pub(super) memory_size: u64,
    pub(super) memory_available: u64,
    pub(super) freq: c_uint,
    pub(super) hugepagesize: libc::c_ulong,
    pub(super) hugepages_total: libc::c_ulong,
    pub(super) hugepages_free: libc::c_ulong,
    pub(super) utiliza: c_uint,
    pub(super) reserve: [u8; 60],
}

/// The vendored header's 9-field layout (36 B). The official header has 7 fields
/// (28 B); allocating the larger one and reading the first 7 is safe with both.
#[repr(C)]
pub(super) struct EccInfoC {
    pub(super) enable_flag: c_int,
    pub(super) single_bit_error_cnt: c_uint,
    pub(super) double_bit_error_cnt: c_uint,
    pub(super) total_single_bit_error_cnt: c_uint,
    pub(super) total_double_bit_error_cnt: c_uint,
    pub(super) single_bit_isolated_pages_cnt: c_uint,
    pub(super) double_bit_isolated_pages_cnt: c_uint,
    pub(super) single_bit_next_isolated_pages_cnt: c_uint,
    pub(super) double_bit_next_isolated_pages_cnt: c_uint,
}

#[repr(C)]
pub(super) struct MultiUtilizationC {
    pub(super) aic_util: c_uint,
    pub(super) aiv_util: c_uint,
    pub(super) aicore_util: c_uint,
    pub(super) npu_util: c_uint,
    pub(super) reserved: [c_uint; 8],
}

#[repr(C)]
pub(super) struct NetworkPktStatsC {
    pub(super) counters: [u64; PKT_STATS_COUNTERS],
    pub(super) tv_sec: libc::c_long,
    pub(super) tv_usec: libc::c_long,
    pub(super) reserved: [u8; 64],
}

#[repr(C)]
pub(super) struct HccsBandwidthC {
    pub(super) profiling_time: c_int,
    pub(super) total_txbw: f64,
    pub(super) total_rxbw: f64,
    pub(super) tx_bandwidth: [f64; 16],
    pub(super) rx_bandwidth: [f64; 16],
}

#[repr(C)]
pub(super) struct HccsStatisticU64C {
    pub(super) tx_cnt: [u64; 16],
    pub(super) rx_cnt: [u64; 16],
    pub(super) crc_err_cnt: [u64; 16],
    pub(super) retry_cnt: [u64; 16],
    pub(super) reserved: [u64; 64],
}

#[repr(C)]
pub(super) struct HccsStatisticU32C {
    pub(super) tx_cnt: [c_uint; 16],
    pub(super) rx_cnt: [c_uint; 16],
    pub(super) crc_err_cnt: [c_uint; 16],
    pub(super) retry_cnt: [c_uint; 16],
    pub(super) reserved: [c_uint; 64],
}

#[repr(C)]
pub(super) struct BoardInfoC {
    pub(super) board_id: c_uint,
    pub(super) pcb_id: c_uint,
    pub(super) bom_id: c_uint,
    pub(super) slot_id: c_uint,
}

#[repr(C)]
pub(super) struct ProcMemInfoC {
    pub(super) proc_id: c_int,
    /// Bytes.
    pub(super) proc_mem_usage: c_ulong,
}

#[repr(C)]
pub(super) struct ExtraStatisticsC {
    pub(super) cw_total_cnt: c_ulonglong,
    pub(super) cw_before_correct_cnt: c_ulonglong,
    pub(super) cw_correct_cnt: c_ulonglong,
    pub(super) cw_uncorrect_cnt: c_ulonglong,
    pub(super) cw_bad_cnt: c_ulonglong,
    pub(super) trans_total_bit: c_ulonglong,
    pub(super) cw_total_correct_bit: c_ulonglong,
    pub(super) rx_full_drop_cnt: c_ulonglong,
    pub(super) pcs_err_cnt: c_ulonglong,
    pub(super) rx_send_app_good_pkts: c_ulonglong,
    pub(super) rx_send_app_bad_pkts: c_ulonglong,
    pub(super) correcting_bit_rate: f64,
}

/// `struct dcmi_event_filter`, passed **by value** to `dcmi_subscribe_fault_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct EventFilterC {
    /// bit 0: filter on `event_id`, bit 1: on `severity` (at least), bit 2: on
    /// `node_type`; 0: every event.
    pub(super) filter_flag: c_ulonglong,
    pub(super) event_id: c_uint,
    pub(super) severity: u8,
    pub(super) node_type: u8,
    pub(super) resv: [u8; 32],
}

/// `struct dcmi_dms_fault_event`. The official header splits `resv` differently from
/// MindCluster's copy (`os_id, resv_1[1], node_type_ex, …`); the size is 352 bytes in both.
#[repr(C)]
pub(super) struct DmsFaultEventC {
    pub(super) event_id: c_uint,
    /// The chip's logic id.
    pub(super) deviceid: u16,
    pub(super) node_type: u8,
    pub(super) node_id: u8,
    pub(super) sub_node_type: u8,
    pub(super) sub_node_id: u8,
    pub(super) severity: u8,
    pub(super) assertion: u8,
    pub(super) event_serial_num: c_int,
    pub(super) notify_serial_num: c_int,
    /// Milliseconds since the epoch.
    pub(super) alarm_raised_time: c_ulonglong,
    pub(super) event_name: [u8; 256],
    pub(super) additional_info: [u8; 32],
    pub(super) resv: [u8; 32],
}

/// `struct dcmi_event`: a type (0 = DMS fault event) and a union with one member.
#[repr(C)]
pub(super) struct EventC {
    pub(super) event_type: c_int,
    pub(super) dms_event: DmsFaultEventC,
}

/// `IP_ADDR_LIST_LEN`: the destination list of a ping-mesh task, with its NUL.
pub const MESH_ADDR_LIST_LEN: usize = 1024;
/// `HCCS_PING_MESH_MAX_NUM`: destinations per ping-mesh task.
pub const MESH_MAX_DESTINATIONS: usize = 48;
/// `ADDR_MAX_LEN`: one destination address, with its NUL.
pub(super) const MESH_ADDR_LEN: usize = 16;

#[repr(C)]
pub(super) struct HccsPingMeshOperateC {
    pub(super) dst_addr_list: [c_char; MESH_ADDR_LIST_LEN],
    pub(super) pkt_size: c_int,
    pub(super) pkt_send_num: c_int,
    pub(super) pkt_interval: c_int,
    pub(super) timeout: c_int,
    pub(super) task_interval: c_int,
    pub(super) task_id: c_int,
}

#[repr(C)]
pub(super) struct HccsPingMeshInfoC {
    pub(super) dst_addr: [[c_char; MESH_ADDR_LEN]; MESH_MAX_DESTINATIONS],
    pub(super) suc_pkt_num: [c_uint; MESH_MAX_DESTINATIONS],
    pub(super) fail_pkt_num: [c_uint; MESH_MAX_DESTINATIONS],
    pub(super) max_time: [c_long; MESH_MAX_DESTINATIONS],
    pub(super) min_time: [c_long; MESH_MAX_DESTINATIONS],
    pub(super) avg_time: [c_long; MESH_MAX_DESTINATIONS],
    pub(super) tp95_time: [c_long; MESH_MAX_DESTINATIONS],
    pub(super) reply_stat_num: [c_int; MESH_MAX_DESTINATIONS],
    pub(super) ping_total_num: [c_ulonglong; MESH_MAX_DESTINATIONS],
    pub(super) dest_num: c_int,
}

#[repr(C)]
pub(super) struct HccsPingMeshInfoV2C {
    pub(super) info: HccsPingMeshInfoC,
    /// Per destination: the L1 planes whose HCCS links to it are faulty.
    pub(super) l1_plane_check_res: [u8; MESH_MAX_DESTINATIONS],
    pub(super) reserved: [u8; MESH_MAX_DESTINATIONS],
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
