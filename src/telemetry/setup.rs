//! Telemetry from the configuration: which NPU source to run, how DCMI and `hccn_tool`
//! are set up, and which reading groups run on which interval.

use std::time::Duration;

use super::dcmi::{DcmiError, DcmiOptions, DcmiSource};
use super::faults::SharedFaultTable;
use super::hccn::HccnOptions;
use super::hccn::poller::PortSchedule;
use super::sim::SimSource;
use super::{DeviceSource, Group};
use crate::config::{Backend, Config};

/// The DCMI options a config implies; `ld_library_path` is searched for `libdcmi.so`, and
/// `fault_table` gives active fault codes their levels.
pub fn dcmi_options(
    config: &Config,
    ld_library_path: Option<String>,
    fault_table: SharedFaultTable,
) -> DcmiOptions {
    let t = &config.telemetry;
    DcmiOptions {
        library: t.dcmi_library.clone(),
        ld_library_path,
        call_deadline: t.call_deadline,
        network_health_deadline: t.network_health_deadline,
        max_stuck_calls: t.max_stuck_calls as usize,
        hccs_profiling_time: t.hccs_profiling_time,
        fault_table,
    }
}

/// Builds the NPU source the config asks for. `Ok(None)` for `backend = "none"`.
pub fn npu_source(
    config: &Config,
    ld_library_path: Option<String>,
    fault_table: SharedFaultTable,
) -> Result<Option<Box<dyn DeviceSource>>, DcmiError> {
    let opts = dcmi_options(config, ld_library_path, fault_table);
    Ok(match config.telemetry.backend {
        Backend::None => None,
        Backend::Sim => Some(Box::new(SimSource::new(
            config.telemetry.sim.chips,
            config.telemetry.sim.seed,
        ))),
        Backend::Dcmi => Some(Box::new(DcmiSource::open(opts)?)),
        Backend::Auto => match DcmiSource::open(opts.clone()) {
            Ok(s) => Some(Box::new(s)),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "no usable DCMI library (telemetry.backend = \"auto\"): exporting hcclwatch_devices 0 and host metrics; set telemetry.backend = \"dcmi\" to make this fatal"
                );
                Some(Box::new(DcmiSource::failed(opts, &e)))
            }
        },
    })
}

/// The NPU groups to run and their intervals.
pub fn npu_schedule(config: &Config) -> Vec<(Group, Duration)> {
    let i = &config.telemetry.intervals;
    let c = &config.collectors;
    let mut s = vec![(Group::Inventory, i.inventory)];
    for (enabled, g, d) in [
        (c.health, Group::Health, i.health),
        (c.sensors, Group::Sensors, i.sensors),
        (c.utilization, Group::Utilization, i.utilization),
        (c.memory, Group::Memory, i.memory),
        (c.network, Group::Network, i.network),
    ] {
        if enabled {
            s.push((g, d));
        }
    }
    s
}

/// The `hccn_tool` options a config implies. `path` and `ld_library_path` are the
/// daemon's own, handed to the tool as its whole environment.
pub fn hccn_options(
    config: &Config,
    path: Option<String>,
    ld_library_path: Option<String>,
) -> HccnOptions {
    let t = &config.telemetry;
    HccnOptions {
        tool: t.hccn_tool.clone(),
        call_deadline: t.hccn_call_deadline,
        ping_deadline: t.hccn_ping_deadline,
        max_in_flight: t.hccn_max_calls_in_flight as usize,
        path,
        ld_library_path,
    }
}

/// The port and optics passes the config enables; `None` when both are off.
/// `npu_poller` says whether an NPU poller runs (its inventory lists the NPUs).
pub fn port_schedule(config: &Config, npu_poller: bool) -> Option<PortSchedule> {
    let c = &config.collectors;
    let i = &config.telemetry.intervals;
    let s = PortSchedule {
        ports: c.ports.then_some(i.ports),
        optics: c.optics.then_some(i.optics),
        hccn_conf: config.telemetry.hccn_conf.clone(),
        after_inventory: npu_poller,
    };
    (s.ports.is_some() || s.optics.is_some()).then_some(s)
}
