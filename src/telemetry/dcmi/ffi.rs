//! The raw DCMI ABI: the symbol table and safe wrappers around each call (the `repr(C)`
//! layouts they fill are in `layout.rs`, the values they return in `types.rs`).
//!
//! This file is the only place in hcclwatch with `unsafe` code, so it also holds the one
//! `pre_exec` hook the `hccn_tool` runs need. Every DCMI function is resolved on its own
//! and kept as an `Option`: an older driver that lacks a function makes that one reading
//! unsupported instead of failing the load (npu-exporter's `-99998` rule). The wrappers
//! take and return plain Rust values; no raw pointer leaves this module. Struct layouts
//! are the x86_64/LP64 layouts from the DCMI header and are pinned by `size_of`
//! assertions, because a layout mistake here is memory corruption, not a compile error.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, TryLockError};

use libloading::Library;

use super::layout::*;
pub use super::layout::{MESH_ADDR_LIST_LEN, MESH_MAX_DESTINATIONS};
pub use super::types::*;

/// What a raw call returned when it did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    /// The library does not export this function.
    Missing,
    /// The function returned this non-zero status.
    Code(i32),
}

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

/// `enum dcmi_main_cmd` value for HCCS queries through `dcmi_get_device_info`.
const MAIN_CMD_HCCS: c_int = 16;

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

/// Arranges for a child started from `cmd` to be killed (SIGKILL) when the thread that
/// starts it ends, which includes the daemon exiting or being killed. The `hccn_tool`
/// runs need it: a tool stuck on a device that is not ready waits for minutes, and the
/// orderly shutdown, which kills every registered run, cannot see a run whose spawn was
/// still returning when the process exited, nor any run when the daemon is OOM-killed.
/// The caller must start the child from a thread that outlives it (the runner waits for
/// its child on the thread that spawned it), because Linux ties the signal to that thread.
///
/// It lives here because it is the one `unsafe` call outside DCMI (`pre_exec`), and this
/// file is the project's only place for `unsafe` code.
pub fn kill_when_parent_exits(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe work is allowed. It makes two raw system calls through rustix
    // (prctl and getppid), which neither allocate nor take locks, and builds an
    // `io::Error` from a raw OS code, which does not allocate either.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)?;
            // The parent may have gone between the fork and the prctl, in which case no
            // signal will ever come: refuse to start then.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        });
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
