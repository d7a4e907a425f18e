//! Wires the daemon together: sources → pollers → store → HTTP server.
//!
//! Collection runs on plain threads (DCMI calls block); the HTTP server runs on a small
//! tokio runtime. SIGINT or SIGTERM stops the server gracefully and signals the pollers.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use crate::config::{Backend, Config};
use crate::export::metrics::BuildInfo;
use crate::export::server;
use crate::telemetry::dcmi::{DcmiError, DcmiOptions, DcmiSource};
use crate::telemetry::host::HostSource;
use crate::telemetry::sim::SimSource;
use crate::telemetry::store::Store;
use crate::telemetry::{DeviceSource, Group, poller};

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// `backend = "dcmi"` and DCMI could not start.
    #[error("telemetry.backend = \"dcmi\" but DCMI is unavailable: {0}")]
    Dcmi(#[from] DcmiError),
    /// The listen address is invalid.
    #[error("web.listen_address {address:?} is invalid: {reason}")]
    Address {
        /// The configured address.
        address: String,
        /// Why.
        reason: String,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}; is another process using the port?")]
    Bind {
        /// The address.
        address: String,
        /// The error.
        source: std::io::Error,
    },
    /// A thread or the runtime could not start.
    #[error("cannot start {what}: {source}")]
    Start {
        /// What.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// Inputs of [`run`] that come from the process environment.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `LD_LIBRARY_PATH`, searched for `libdcmi.so`.
    pub ld_library_path: Option<String>,
}

/// The DCMI options a config implies.
pub fn dcmi_options(config: &Config, env: &Environment) -> DcmiOptions {
    let t = &config.telemetry;
    DcmiOptions {
        library: t.dcmi_library.clone(),
        ld_library_path: env.ld_library_path.clone(),
        call_deadline: t.call_deadline,
        network_health_deadline: t.network_health_deadline,
        max_stuck_calls: t.max_stuck_calls as usize,
        hccs_profiling_time: t.hccs_profiling_time,
    }
}

/// Builds the NPU source the config asks for. `Ok(None)` for `backend = "none"`.
pub fn npu_source(
    config: &Config,
    env: &Environment,
) -> Result<Option<Box<dyn DeviceSource>>, DcmiError> {
    let opts = dcmi_options(config, env);
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

/// Runs the daemon until SIGINT or SIGTERM.
pub fn run(config: Config, env: Environment) -> Result<(), AppError> {
    let address =
        crate::config::parse_listen_address(&config.web.listen_address).map_err(|reason| {
            AppError::Address {
                address: config.web.listen_address.clone(),
                reason,
            }
        })?;
    let source = npu_source(&config, &env)?;
    let store = Arc::new(Store::new(source.is_some(), config.collectors.host));

    let mut stops: Vec<mpsc::Sender<()>> = Vec::new();
    if let Some(source) = source {
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        poller::spawn_npu(source, npu_schedule(&config), store.clone(), rx).map_err(|source| {
            AppError::Start {
                what: "NPU poller",
                source,
            }
        })?;
    }
    if config.collectors.host {
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        poller::spawn_host(
            HostSource::new(),
            config.telemetry.intervals.host,
            store.clone(),
            rx,
        )
        .map_err(|source| AppError::Start {
            what: "host poller",
            source,
        })?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hcclwatch-http")
        .enable_all()
        .build()
        .map_err(|source| AppError::Start {
            what: "tokio runtime",
            source,
        })?;
    let build = BuildInfo::current();
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| AppError::Bind {
                address: address.to_string(),
                source,
            })?;
        let bound = listener.local_addr().map_err(AppError::Serve)?;
        tracing::info!(
            version = build.version,
            revision = build.revision,
            backend = config.telemetry.backend.as_str(),
            address = %bound,
            path = %config.web.telemetry_path,
            "hcclwatch listening"
        );
        let router = server::router(store.clone(), build.clone(), &config.web.telemetry_path);
        server::serve(listener, router, shutdown_signal())
            .await
            .map_err(AppError::Serve)
    });
    // Dropping the senders wakes every poller; a poller inside a stuck DCMI call is left
    // to the process exit rather than joined.
    drop(stops);
    tracing::info!("hcclwatch stopped");
    result
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received");
}
