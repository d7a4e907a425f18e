//! The sources the daemon starts, each from its own part of the configuration: the NPU
//! poller, `hccn_tool` and its port poller, the prober (with the device plane's pinger and
//! HCCS ping mesh), pod attribution, the topology source and the host poller. One log line says why a source
//! that is off is off.

use std::net::Ipv4Addr;
use std::sync::Arc;

use super::adapters::{DcmiMesh, HccnPinger};
use super::supervisor::{AtExit, Supervisor};
use super::{AppError, Environment};
use crate::config::Config;
use crate::probe::ProbeSettings;
use crate::probe::device::runner::Pinger;
use crate::probe::device::status::PortReading;
use crate::probe::settings::LocalPorts;
use crate::snapshot::Store;
use crate::telemetry::dcmi::PingMesh;
use crate::telemetry::hccn::Hccn;
use crate::telemetry::host::HostSource;
use crate::telemetry::{poller, setup};

/// Starts the pollers, `hccn_tool`, the prober and pod attribution under a new
/// [`Supervisor`].
pub(super) fn start_sources(
    config: &Config,
    env: &Environment,
    store: &Arc<Store>,
    source: Option<Box<dyn crate::telemetry::DeviceSource>>,
) -> Result<Supervisor, AppError> {
    let config = config.clone();
    let store = store.clone();
    let npu_poller = source.is_some();
    // Taken before the source moves into its poller: the device prober drives the ping
    // mesh through its own handle (its own call thread, the same deadlines).
    let mesh = source.as_ref().and_then(|s| s.ping_mesh());
    let mut sup = Supervisor::default();
    if let Some(source) = source {
        let schedule = setup::npu_schedule(&config);
        let s = store.clone();
        let expected = config.telemetry.expected_npus;
        sup.start("NPU poller", AtExit::Detach, |rx| {
            poller::spawn_npu(source, schedule, expected, s, rx)
        })?;
    }
    let hccn = start_hccn(&config, env, &store, npu_poller, &mut sup)?;
    if config.probe.enabled {
        let mut settings = ProbeSettings::from_config(&config)?;
        settings.device = device_probe(&config, hccn.as_ref(), &store);
        if let Some(d) = settings.device.as_mut() {
            d.hccs = hccs_mesh(&config, mesh, &store);
        }
        let s = store.clone();
        sup.start("prober", AtExit::AwaitLeave, |rx| {
            crate::probe::spawn(settings, s, rx)
        })?;
    }
    if config.attribution.enabled {
        let settings = crate::attribution::Settings::from_config(&config);
        let s = store.clone();
        sup.start("pod attribution", AtExit::Detach, |rx| {
            crate::attribution::spawn(settings, s, rx)
        })?;
    } else {
        tracing::info!("pod attribution off: attribution.enabled = false");
    }
    if config.topology.enabled {
        let settings = crate::topology::Settings::from_config(&config);
        let s = store.clone();
        sup.start("topology", AtExit::Detach, |rx| {
            crate::topology::spawn(settings, s, rx)
        })?;
        if config.topology.overrides {
            let settings = crate::topology::overrides::Settings::from_config(&config);
            let s = store.clone();
            sup.start("operator overrides", AtExit::Detach, |rx| {
                crate::topology::overrides::spawn(settings, s, rx)
            })?;
        }
    } else {
        tracing::info!("topology off: topology.enabled = false");
    }
    if config.collectors.host {
        let interval = config.telemetry.intervals.host;
        let s = store.clone();
        sup.start("host poller", AtExit::Detach, |rx| {
            poller::spawn_host(HostSource::new(), interval, s, rx)
        })?;
    }
    if let Some(h) = hccn {
        sup.hold_hccn(h);
    }
    Ok(sup)
}
/// HCCS ping-mesh settings when DCMI is loaded and `device_probe.hccs` is on; this node's
/// vNIC addresses are the ones the port poller found (`hccn_tool -vnic -g`).
fn hccs_mesh(
    config: &Config,
    mesh: Option<PingMesh>,
    store: &Arc<Store>,
) -> Option<crate::probe::device::hccs::HccsSettings> {
    let Some(mesh) = mesh else {
        tracing::info!("HCCS ping mesh off: DCMI is not loaded");
        return None;
    };
    let driver = Box::new(DcmiMesh {
        mesh,
        store: store.clone(),
    });
    let store = store.clone();
    let local_vnics = Arc::new(move || -> Vec<(u32, Ipv4Addr)> {
        store
            .ports()
            .map(|p| {
                p.ports
                    .iter()
                    .filter_map(|(phy, r)| r.vnic_ip.map(|ip| (*phy, ip)))
                    .collect()
            })
            .unwrap_or_default()
    });
    crate::probe::settings::hccs_settings(config, driver, local_vnics)
}

/// Device-plane probing settings when it can run: `[device_probe] enabled` and
/// `hccn_tool` installed; this node's ports are the RoCE IPs the port poller found (read
/// each time the group forms). One log line says why it is off.
fn device_probe(
    config: &Config,
    hccn: Option<&Arc<Hccn>>,
    store: &Arc<Store>,
) -> Option<crate::probe::device::DeviceSettings> {
    if !config.device_probe.enabled {
        tracing::info!("device-plane probing off: device_probe.enabled = false");
        return None;
    }
    let Some(hccn) = hccn else {
        tracing::info!(
            "device-plane probing off: hccn_tool is not installed (telemetry.hccn_tool); NPU ports are not pinged"
        );
        return None;
    };
    let status_store = store.clone();
    let store = store.clone();
    let warned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let local_ports = Arc::new(move || {
        let ports: Vec<(u32, Ipv4Addr)> = store
            .ports()
            .map(|p| {
                p.ports
                    .iter()
                    .filter_map(|(phy, r)| r.device_ips.first().map(|ip| (*phy, *ip)))
                    .collect()
            })
            .unwrap_or_default();
        if ports.is_empty() && !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::info!(
                "device-plane probing: no NPU device IP found yet (hccn_tool -ip -g, /etc/hccn.conf); this node announces no port until it has one"
            );
        }
        ports
    });
    let status = Arc::new(move || {
        status_store
            .ports()
            .map(|p| {
                let read_at = p.collectors.get("npu_ports").and_then(|c| c.last_success);
                p.ports
                    .iter()
                    .map(|(phy, r)| {
                        let changes = r
                            .link_stat
                            .as_ref()
                            .map(|l| l.up_count.saturating_add(l.down_count.unwrap_or(0)));
                        let link = (r.speed_bits_per_second, r.link_up, changes);
                        let reading =
                            PortReading::from_readings(r.counters.as_ref(), link, read_at);
                        (*phy, reading)
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    let pinger: Arc<dyn Pinger> = Arc::new(HccnPinger(hccn.clone()));
    let local = LocalPorts {
        addresses: local_ports,
        status,
    };
    Some(crate::probe::settings::device_settings(
        config, pinger, local,
    ))
}

/// Sets up `hccn_tool` when it is installed: the handle (shared with the device prober)
/// and, when `[collectors] ports` or `optics` is on, the port and optics poller. Without
/// the tool, one log line says why those readings are off. `npu_poller`: an NPU poller
/// runs, whose inventory lists the NPUs.
fn start_hccn(
    config: &Config,
    env: &Environment,
    store: &Arc<Store>,
    npu_poller: bool,
    sup: &mut Supervisor,
) -> Result<Option<Arc<Hccn>>, AppError> {
    let opts = setup::hccn_options(
        config,
        std::env::var("PATH").ok(),
        env.ld_library_path.clone(),
    );
    let hccn = Arc::new(Hccn::new(opts, Some(store.clone())));
    if !hccn.tool_is_executable() {
        tracing::info!(
            path = %hccn.tool().display(),
            "hccn_tool not found or not executable: NPU port and optics readings are off (set telemetry.hccn_tool)"
        );
        return Ok(None);
    }
    if let Some(schedule) = setup::port_schedule(config, npu_poller) {
        tracing::info!(
            path = %hccn.tool().display(),
            ports = ?schedule.ports,
            optics = ?schedule.optics,
            "NPU port and optics readings through hccn_tool"
        );
        let (h, s) = (hccn.clone(), store.clone());
        sup.start("port poller", AtExit::Detach, |rx| {
            crate::telemetry::hccn::poller::spawn(h, schedule, s, rx)
        })?;
    }
    Ok(Some(hccn))
}
