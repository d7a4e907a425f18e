//! `[telemetry]`, `[telemetry.intervals]` and `[telemetry.sim]`: where NPU readings come
//! from, the deadlines of DCMI and `hccn_tool`, and how often each group is read.

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::enums::config_enum;
use crate::config::schema::{Spec, interval, ms, secs};

config_enum! {
    /// Which device backend feeds NPU telemetry.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Backend {
        /// DCMI if it loads and initialises; otherwise no NPU telemetry, with a warning.
        #[default]
        Auto = "auto",
        /// DCMI, and refuse to start without it.
        Dcmi = "dcmi",
        /// Simulated chips (demo and tests only).
        Sim = "sim",
        /// No NPU telemetry.
        None = "none",
    }
}

section! {
    /// `[telemetry]`.
    pub struct TelemetryConfig in "telemetry" {
        /// Device backend.
        backend: Backend = Backend::Auto, Spec::one_of(Backend::NAMES);
        /// Explicit path to `libdcmi.so`; when unset the standard locations are searched.
        #[serde(skip_serializing_if = "Option::is_none")]
        dcmi_library: Option<PathBuf> = None, Spec::PATH;
        /// Deadline for one DCMI call.
        #[serde(with = "duration::serde_str")]
        call_deadline: Duration = secs(2), Spec::duration(ms(10), ms(60_000));
        /// Deadline for `dcmi_get_device_network_health`, which blocks after a card drops.
        #[serde(with = "duration::serde_str")]
        network_health_deadline: Duration = secs(1), Spec::duration(ms(10), ms(60_000));
        /// How many DCMI calls may be stuck past their deadline at once before hcclwatch
        /// stops calling DCMI until one returns.
        max_stuck_calls: u32 = 4, Spec::int(1, 64);
        /// Sampling window passed to `dcmi_get_hccs_link_bandwidth_info`.
        #[serde(with = "duration::serde_str")]
        hccs_profiling_time: Duration = ms(200), Spec::duration(ms(1), ms(1000));
        /// Path of Ascend's `hccn_tool` (NPU ports, optics, device IPs, RoCE pings). When it
        /// is not an executable file, those readings are off.
        hccn_tool: PathBuf = "/usr/local/Ascend/driver/tools/hccn_tool".into(), Spec::PATH;
        /// `hccn.conf`: NPU ids and device IPs (`address_<phy>`) when DCMI or the tool have
        /// none.
        hccn_conf: PathBuf = "/etc/hccn.conf".into(), Spec::PATH;
        /// Deadline of one `hccn_tool` query, its wait for a turn and busy retries included;
        /// the tool's process group is killed when it passes.
        #[serde(with = "duration::serde_str")]
        hccn_call_deadline: Duration = secs(15), Spec::duration(ms(100), ms(600_000));
        /// Deadline of one `hccn_tool -ping`.
        #[serde(with = "duration::serde_str")]
        hccn_ping_deadline: Duration = secs(10), Spec::duration(ms(100), ms(600_000));
        /// `hccn_tool` processes allowed at once, all NPUs together (one per NPU at most).
        hccn_max_calls_in_flight: u32 = 8, Spec::int(1, 64);
        /// How many NPUs this node should enumerate, for `hcclwatch_npus{state="missing"}`;
        /// 0: every NPU an inventory has listed since the daemon started.
        expected_npus: u32 = 0, Spec::int(0, 1024);
        /// A fault-level table in MindCluster's `faultCode.json` format that replaces the
        /// built-in one (re-read on SIGHUP).
        #[serde(skip_serializing_if = "Option::is_none")]
        fault_levels_file: Option<PathBuf> = None, Spec::PATH;
        /// Collection interval per reading group.
        intervals: Intervals = Intervals::default(), Spec::TABLE;
        /// Simulated backend settings.
        sim: SimConfig = SimConfig::default(), Spec::TABLE;
    }
}

section! {
    /// `[telemetry.intervals]`: how often each reading group is collected.
    pub struct Intervals in "telemetry.intervals" {
        /// Chip list, model, PCIe address, UUID, serial, driver version.
        #[serde(with = "duration::serde_str")]
        inventory: Duration = secs(60), interval();
        /// Health, fault codes, network health.
        #[serde(with = "duration::serde_str")]
        health: Duration = secs(5), interval();
        /// Temperature, power, voltage, AI-core clock.
        #[serde(with = "duration::serde_str")]
        sensors: Duration = secs(5), interval();
        /// Utilisation ratios.
        #[serde(with = "duration::serde_str")]
        utilization: Duration = secs(5), interval();
        /// HBM, DDR and ECC.
        #[serde(with = "duration::serde_str")]
        memory: Duration = secs(15), interval();
        /// RoCE/MAC packet counters and HCCS.
        #[serde(with = "duration::serde_str")]
        network: Duration = secs(30), interval();
        /// Host CPU, memory and network interfaces.
        #[serde(with = "duration::serde_str")]
        host: Duration = secs(15), interval();
        /// NPU ports through `hccn_tool`: link, speed, link history, network health, device
        /// IPs, the counters DCMI does not give.
        #[serde(with = "duration::serde_str")]
        ports: Duration = secs(30), Spec::duration(ms(1_000), ms(86_400_000));
        /// Optical modules through `hccn_tool`.
        #[serde(with = "duration::serde_str")]
        optics: Duration = secs(60), Spec::duration(ms(1_000), ms(86_400_000));
    }
}

section! {
    /// `[telemetry.sim]`.
    pub struct SimConfig in "telemetry.sim" {
        /// Number of simulated chips.
        chips: u32 = 8, Spec::int(1, 64);
        /// Seed for the simulated values.
        seed: u64 = 1, Spec::int(0, i64::MAX);
    }
}
