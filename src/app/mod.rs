//! The composition root: builds each part from the configuration and wires them,
//! sources → pollers → store → HTTP server, OTLP and the prober.
//!
//! Collection runs on plain threads (DCMI calls block) owned by a `Supervisor`; the
//! HTTP server runs on a small tokio runtime. SIGINT or SIGTERM stops the server
//! gracefully and signals the pollers. Each subsystem turns the configuration into its
//! own settings ([`ProbeSettings::from_config`], [`otlp::Settings::from_config`],
//! [`setup`]); this module only composes them: `sources` starts the sources,
//! `adapters` fits `hccn_tool` and DCMI to the prober, `reload` answers SIGHUP.
//!
//! [`ProbeSettings::from_config`]: crate::probe::ProbeSettings::from_config
//! [`setup`]: crate::telemetry::setup

mod adapters;
mod reload;
mod sources;
mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::export::{otlp, server};
use crate::snapshot::Store;
use crate::snapshot::status::BuildInfo;
use crate::telemetry::dcmi::DcmiError;
use crate::telemetry::faults::{FaultTable, FaultTableError, SharedFaultTable};
use crate::telemetry::setup;

pub use self::reload::{RELOAD_DEADLINE, ReloadError, Reloader, reload_within};

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// `backend = "dcmi"` and DCMI could not start.
    #[error("telemetry.backend = \"dcmi\" but DCMI is unavailable: {0}")]
    Dcmi(#[from] DcmiError),
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
    /// OTLP export could not be set up.
    #[error("OTLP export: {0}")]
    Otlp(#[from] crate::export::otlp::OtlpError),
    /// Hard-fault pushes are on but cannot be set up.
    #[error("remediation.push: {0}")]
    Push(#[from] crate::export::push::PushSetupError),
    /// Probing is enabled but cannot be set up.
    #[error("probe.enabled: {0}")]
    Probe(#[from] crate::probe::SettingsError),
    /// `telemetry.fault_levels_file` cannot be used.
    #[error("telemetry.fault_levels_file: {0}")]
    FaultLevels(#[from] FaultTableError),
    /// The telemetry path collides with another route.
    #[error(transparent)]
    Route(#[from] crate::export::server::RouteError),
    /// The web config file cannot be applied.
    #[error(transparent)]
    Web(#[from] crate::export::web::auth::WebError),
}

/// Inputs of [`run`] that come from the process environment.
#[derive(Clone, Default)]
pub struct Environment {
    /// `LD_LIBRARY_PATH`, searched for `libdcmi.so`.
    pub ld_library_path: Option<String>,
    /// How SIGHUP re-checks the configuration; `None` ignores SIGHUP's check.
    pub reload: Option<Reloader>,
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("ld_library_path", &self.ld_library_path)
            .field("reload", &self.reload.is_some())
            .finish()
    }
}

/// Runs the daemon until SIGINT or SIGTERM.
pub fn run(config: Config, env: Environment) -> Result<(), AppError> {
    let address = config.web.listen_address.addr();
    let fault_table = SharedFaultTable::new(FaultTable::from_config(
        config.telemetry.fault_levels_file.as_deref(),
    )?);
    let source = setup::npu_source(&config, env.ld_library_path.clone(), fault_table.clone())?;
    let store = Arc::new(Store::new(source.is_some(), config.collectors.host));
    store.record_reload(true, std::time::SystemTime::now());
    let supervisor = sources::start_sources(&config, &env, &store, source)?;
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
    let otlp = start_otlp(&config, &store, &build)?;
    let push = crate::export::push::Settings::from_config(&config)?;
    let result = runtime.block_on(async {
        if let Some(p) = push {
            tracing::info!(node = p.node(), to = %p.target(), "hard-fault push to the remediation receiver on");
            tokio::spawn(crate::export::push::run(p, store.clone()));
        }
        if let Some(o) = otlp.clone() {
            // New families appear as collectors and probing get going; give them
            // instruments. The callbacks themselves read the same snapshot as /metrics.
            // Every second: an encode costs about a millisecond, and a family that appears
            // between two discoveries misses at most one export.
            let every = Duration::from_secs(1);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let o = o.clone();
                    let _ = tokio::task::spawn_blocking(move || o.discover()).await;
                }
            });
        }
        serve_http(&config, &env, address, &store, &build, &fault_table).await
    });
    supervisor.stop(otlp.as_deref());
    // Blocking tasks (a stuck reload among them) are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    tracing::info!("hcclwatch stopped");
    result
}

/// OTLP export, when the config or the standard variables name an endpoint.
fn start_otlp(
    config: &Config,
    store: &Arc<Store>,
    build: &BuildInfo,
) -> Result<Option<Arc<otlp::Otlp>>, AppError> {
    let read_env = |k: &str| std::env::var(k).ok();
    let otlp = match otlp::Settings::from_config(&config.otlp, &read_env)? {
        Some(mut s) => {
            s.node_name = config.web.node_label.clone();
            let o = otlp::Otlp::start(&s, store.clone(), build.clone(), &read_env)?;
            tracing::info!(
                endpoint = s.metrics_endpoint.as_deref().unwrap_or("(from OTEL_EXPORTER_OTLP_*)"),
                interval = ?s.interval,
                traces = s.traces,
                "OTLP export on"
            );
            Some(Arc::new(o))
        }
        None => None,
    };
    Ok(otlp)
}

/// Serves HTTP until SIGINT or SIGTERM, with the SIGHUP re-check alongside.
async fn serve_http(
    config: &Config,
    env: &Environment,
    address: std::net::SocketAddr,
    store: &Arc<Store>,
    build: &BuildInfo,
    fault_table: &SharedFaultTable,
) -> Result<(), AppError> {
    let router = server::router(
        store.clone(),
        build.clone(),
        &config.web.telemetry_path,
        &crate::export::prometheus::Options::from_config(config),
    )?;
    let security = Arc::new(crate::export::web::Security::from_file(
        config.web.config_file.as_deref(),
        server::OPEN_PATHS,
    )?);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| AppError::Bind {
            address: address.to_string(),
            source,
        })?;
    let bound = listener.local_addr().map_err(AppError::Serve)?;
    let exit_bound = shutdown_bound(config);
    let signal = crate::shutdown::signal();
    let shutdown = async move {
        signal.await;
        // From here the process exits within the bound whatever is stuck: a reload on
        // a hung mount, a DCMI call, a connection, an OTLP flush.
        arm_exit_watchdog(exit_bound);
    };
    // The SIGHUP handler is installed before the daemon says it listens: SIGHUP's
    // default action ends the process, so one sent right after start-up must already
    // find the handler.
    if let Some(reload) = env.reload.clone() {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hup) => {
                tokio::spawn(reload::check_on_sighup(
                    hup,
                    reload,
                    config.clone(),
                    store.clone(),
                    fault_table.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; configuration checks on SIGHUP are off")
            }
        }
    }
    tracing::info!(
        version = build.version,
        revision = build.revision,
        backend = config.telemetry.backend.as_str(),
        address = %bound,
        path = %config.web.telemetry_path,
        "hcclwatch listening"
    );
    let limits = crate::export::web::Limits::from_config(&config.web);
    server::serve(listener, router, limits, security, shutdown)
        .await
        .map_err(AppError::Serve)
}

/// Margin on top of the HTTP drain and the OTLP flush before the exit watchdog fires.
const EXIT_MARGIN: Duration = Duration::from_secs(2);

/// How long the daemon may take to exit after SIGTERM or SIGINT: the HTTP drain (5 s),
/// the last OTLP flush (`otlp.shutdown_timeout`) and a margin; 12 s by default.
pub fn shutdown_bound(config: &Config) -> Duration {
    crate::export::web::Limits::default().shutdown_grace
        + config.otlp.shutdown_timeout
        + EXIT_MARGIN
}

/// Ends the process after `bound` if it has not exited by itself by then.
fn arm_exit_watchdog(bound: Duration) {
    let spawned = std::thread::Builder::new()
        .name("hcclwatch-exit".into())
        .spawn(move || {
            std::thread::sleep(bound);
            tracing::error!(bound = ?bound, "shutdown did not finish in time; exiting now");
            std::process::exit(1);
        });
    if spawned.is_err() {
        tracing::warn!("cannot start the exit watchdog");
    }
}
