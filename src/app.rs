//! The composition root: builds each part from the configuration and wires them,
//! sources → pollers → store → HTTP server, OTLP and the prober.
//!
//! Collection runs on plain threads (DCMI calls block); the HTTP server runs on a small
//! tokio runtime. SIGINT or SIGTERM stops the server gracefully and signals the pollers.
//! Each subsystem turns the configuration into its own settings
//! ([`ProbeSettings::from_config`], [`otlp::Settings::from_config`], [`setup`]); this
//! module only composes them.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use crate::config::Config;
use crate::export::{otlp, server};
use crate::probe::ProbeSettings;
use crate::probe::device::hccs::{HccsTask, MeshCallError, MeshDriver, MeshSample, Unavailable};
use crate::probe::device::runner::{PingError, PingReply, Pinger};
use crate::snapshot::Store;
use crate::snapshot::npu::ChipAddress;
use crate::snapshot::status::BuildInfo;
use crate::telemetry::dcmi::DcmiError;
use crate::telemetry::dcmi::PingMesh;
use crate::telemetry::dcmi::pingmesh::{MeshError, MeshState, MeshTask};
use crate::telemetry::faults::{FaultTable, FaultTableError, SharedFaultTable};
use crate::telemetry::hccn::Hccn;
use crate::telemetry::host::HostSource;
use crate::telemetry::{poller, setup};
use std::net::Ipv4Addr;

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

/// Re-reads the configuration the way start-up read it (file, environment, flags) and
/// returns it, or every problem found.
pub type Reloader = Arc<dyn Fn() -> Result<Config, Vec<String>> + Send + Sync>;

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
    let running = start_sources(&config, &env, &store, source)?;
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
    let result = runtime.block_on(async {
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
    stop(running, otlp.as_deref());
    // Blocking tasks (a stuck reload among them) are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    tracing::info!("hcclwatch stopped");
    result
}

/// The threads `run` started: their stop channels, the prober, and `hccn_tool`.
struct Running {
    stops: Vec<mpsc::Sender<()>>,
    prober: Option<std::thread::JoinHandle<()>>,
    hccn: Option<Arc<Hccn>>,
}

/// Starts the pollers, `hccn_tool`, the prober and pod attribution.
fn start_sources(
    config: &Config,
    env: &Environment,
    store: &Arc<Store>,
    source: Option<Box<dyn crate::telemetry::DeviceSource>>,
) -> Result<Running, AppError> {
    let config = config.clone();
    let store = store.clone();
    let npu_poller = source.is_some();
    // Taken before the source moves into its poller: the device prober drives the ping
    // mesh through its own handle (its own call thread, the same deadlines).
    let mesh = source.as_ref().and_then(|s| s.ping_mesh());
    let mut stops: Vec<mpsc::Sender<()>> = Vec::new();
    if let Some(source) = source {
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        poller::spawn_npu(source, setup::npu_schedule(&config), store.clone(), rx).map_err(
            |source| AppError::Start {
                what: "NPU poller",
                source,
            },
        )?;
    }
    let hccn = start_hccn(&config, env, &store, npu_poller, &mut stops)?;
    let mut prober = None;
    if config.probe.enabled {
        let mut settings = ProbeSettings::from_config(&config)?;
        settings.device = device_probe(&config, hccn.as_ref(), &store);
        if let Some(d) = settings.device.as_mut() {
            d.hccs = hccs_mesh(&config, mesh, &store);
        }
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        prober = Some(
            crate::probe::spawn(settings, store.clone(), rx).map_err(|source| AppError::Start {
                what: "prober",
                source,
            })?,
        );
    }
    if config.attribution.enabled {
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        let settings = crate::attribution::Settings::from_config(&config);
        crate::attribution::spawn(settings, store.clone(), rx).map_err(|source| {
            AppError::Start {
                what: "pod attribution",
                source,
            }
        })?;
    } else {
        tracing::info!("pod attribution off: attribution.enabled = false");
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

    Ok(Running {
        stops,
        prober,
        hccn,
    })
}

/// OTLP export, when the config or the standard variables name an endpoint.
fn start_otlp(
    config: &Config,
    store: &Arc<Store>,
    build: &BuildInfo,
) -> Result<Option<Arc<otlp::Otlp>>, AppError> {
    let read_env = |k: &str| std::env::var(k).ok();
    let otlp = match otlp::Settings::from_config(&config.otlp, &read_env)? {
        Some(s) => {
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
    let router = server::router(store.clone(), build.clone(), &config.web.telemetry_path)?;
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
                tokio::spawn(check_on_sighup(
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

/// Stops the threads `run` started, each within its bound.
fn stop(running: Running, otlp: Option<&otlp::Otlp>) {
    let Running {
        stops,
        prober,
        hccn,
    } = running;
    // Dropping the senders wakes every poller; a poller inside a stuck DCMI call is left
    // to the process exit rather than joined.
    drop(stops);
    // The prober is waited for (briefly): its leave notice must reach the group before the
    // process exits, or every peer pauses for probe.member_timeout.
    if let Some(p) = prober {
        let until = std::time::Instant::now() + PROBER_EXIT;
        while !p.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !p.is_finished() {
            tracing::warn!(within = ?PROBER_EXIT, "the prober did not stop in time (a round in progress); peers will notice the departure by timeout");
        }
    }
    // hccn_tool runs in process groups of its own: kill any still running (a device that
    // is not ready keeps the tool waiting for minutes) rather than leave them behind.
    if let Some(h) = &hccn {
        h.shutdown();
    }
    // The last OTLP flush, bounded by otlp.shutdown_timeout.
    if let Some(o) = otlp {
        o.shutdown();
    }
}

/// `hccn_tool -ping` as the device plane's pinger.
struct HccnPinger(Arc<Hccn>);

impl Pinger for HccnPinger {
    fn ping(&self, phy: u32, dst: Ipv4Addr) -> Result<PingReply, PingError> {
        use crate::telemetry::hccn::HccnError as E;
        match self.0.ping(phy, dst) {
            Ok(r) => Ok(PingReply {
                sent: r.sent,
                received: r.received,
                rtts: r.rtts.iter().flatten().copied().collect(),
            }),
            Err(E::NotSupported) => Err(PingError::Unsupported),
            Err(E::Busy(_)) => Err(PingError::Busy),
            Err(E::Timeout(_) | E::QueueTimeout(_)) => Err(PingError::Timeout),
            Err(e) => Err(PingError::Failed(e.to_string())),
        }
    }
}

/// The DCMI HCCS ping mesh as the device plane's [`MeshDriver`]: NPUs by physical id,
/// addressed through the NPU inventory the poller publishes.
struct DcmiMesh {
    mesh: PingMesh,
    store: Arc<Store>,
}

impl DcmiMesh {
    fn chip(&self, npu: u32) -> Result<ChipAddress, MeshCallError> {
        self.store
            .npu()
            .state
            .chips
            .get(&npu)
            .map(|c| c.address)
            .ok_or_else(|| MeshCallError::Failed(format!("NPU {npu} is not in the inventory")))
    }
}

fn mesh_error(e: MeshError) -> MeshCallError {
    match e {
        MeshError::NotAvailable => MeshCallError::Unavailable(Unavailable::NotSupported),
        MeshError::NotPermitted => MeshCallError::Unavailable(Unavailable::NotPermitted),
        other => MeshCallError::Failed(other.to_string()),
    }
}

impl MeshDriver for DcmiMesh {
    fn available(&mut self) -> Result<Option<()>, Unavailable> {
        let missing = self.mesh.missing_functions();
        if !missing.is_empty() {
            tracing::debug!(missing = %missing.join(","), "DCMI ping-mesh functions missing");
            return Err(Unavailable::MissingFunction);
        }
        // Asked on the first NPU, as MindCluster NodeD does: -8255 there means not an A3.
        let Some(chip) = self
            .store
            .npu()
            .state
            .chips
            .values()
            .next()
            .map(|c| c.address)
        else {
            return Ok(None);
        };
        match self.mesh.state(chip, 0) {
            Ok(_) => Ok(Some(())),
            Err(MeshError::NotAvailable) => {
                // The state function is optional; without it, ask the NPU with a read.
                match self.mesh.info(chip, 0) {
                    Ok(_) => Ok(Some(())),
                    Err(MeshError::NotAvailable) => Err(Unavailable::NotSupported),
                    Err(MeshError::NotPermitted) => Err(Unavailable::NotPermitted),
                    // A DCMI error or no answer: asked again at the next read.
                    Err(_) => Ok(None),
                }
            }
            Err(MeshError::NotPermitted) => Err(Unavailable::NotPermitted),
            Err(_) => Ok(None),
        }
    }

    fn start(&mut self, npu: u32, task: &HccsTask) -> Result<(), MeshCallError> {
        let chip = self.chip(npu)?;
        let t = MeshTask {
            task_id: task.task_id,
            packets_per_round: crate::probe::device::hccs::PACKETS_PER_ROUND,
            ..MeshTask::new(task.destinations.clone(), task.round_interval_secs)
        };
        self.mesh.start(chip, &t).map_err(mesh_error)
    }

    fn running(&mut self, npu: u32, task_id: u32) -> Result<Option<bool>, MeshCallError> {
        let chip = self.chip(npu)?;
        match self.mesh.state(chip, task_id) {
            Ok(MeshState::Running) => Ok(Some(true)),
            Ok(MeshState::Stopped) => Ok(Some(false)),
            Ok(MeshState::Unknown(v)) => Err(MeshCallError::Failed(format!("task state {v}"))),
            // No state function: the caller reads instead.
            Err(MeshError::NotAvailable) if self.mesh.missing_functions().is_empty() => Ok(None),
            Err(e) => Err(mesh_error(e)),
        }
    }

    fn read(&mut self, npu: u32, task_id: u32) -> Result<Vec<MeshSample>, MeshCallError> {
        let chip = self.chip(npu)?;
        let info = self.mesh.info(chip, task_id).map_err(mesh_error)?;
        Ok(info
            .into_iter()
            .map(|d| MeshSample {
                address: d.address,
                replies: u64::from(d.replies),
                losses: u64::from(d.losses),
                avg_seconds: d.avg_seconds,
            })
            .collect())
    }

    fn stop(&mut self, npu: u32, task_id: u32) -> Result<(), MeshCallError> {
        let chip = self.chip(npu)?;
        self.mesh.stop(chip, task_id).map_err(mesh_error)
    }
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
    let pinger: Arc<dyn Pinger> = Arc::new(HccnPinger(hccn.clone()));
    Some(crate::probe::settings::device_settings(
        config,
        pinger,
        local_ports,
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
    stops: &mut Vec<mpsc::Sender<()>>,
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
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        crate::telemetry::hccn::poller::spawn(hccn.clone(), schedule, store.clone(), rx).map_err(
            |source| AppError::Start {
                what: "port poller",
                source,
            },
        )?;
    }
    Ok(Some(hccn))
}

/// How long the daemon waits at exit for the prober to leave its group (a leave notice takes
/// at most half a second once the prober is between rounds).
const PROBER_EXIT: Duration = Duration::from_secs(3);

/// How long a SIGHUP re-check may take before it is reported as failed.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(15);

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

/// Why a re-check gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The configuration is invalid.
    #[error("{} problem(s)", .0.len())]
    Invalid(Vec<String>),
    /// The re-check did not finish within the deadline (a hung mount): it is left running
    /// on its own thread, and the next SIGHUP is refused until it ends.
    #[error("the re-check did not finish within {0:?}")]
    Timeout(Duration),
    /// The previous re-check is still running.
    #[error("the previous re-check is still running")]
    Busy,
}

/// Runs one re-check on its own thread (never a runtime thread, so a hung one cannot
/// hold the runtime at shutdown), waiting at most `deadline`.
pub async fn reload_within(
    reload: &Reloader,
    busy: &Arc<std::sync::atomic::AtomicBool>,
    deadline: Duration,
) -> Result<Config, ReloadError> {
    use std::sync::atomic::Ordering;
    if busy.swap(true, Ordering::SeqCst) {
        return Err(ReloadError::Busy);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (reload, flag) = (reload.clone(), busy.clone());
    let spawned = std::thread::Builder::new()
        .name("hcclwatch-reload".into())
        .spawn(move || {
            let r = reload();
            flag.store(false, Ordering::SeqCst);
            let _ = tx.send(r);
        });
    if spawned.is_err() {
        busy.store(false, Ordering::SeqCst);
        return Err(ReloadError::Invalid(vec!["cannot start a thread".into()]));
    }
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(r)) => r.map_err(ReloadError::Invalid),
        Ok(Err(_)) => Err(ReloadError::Invalid(vec!["the re-check panicked".into()])),
        Err(_) => Err(ReloadError::Timeout(deadline)),
    }
}

/// Loads the fault-level table on its own thread, waiting at most `deadline` (a file on a
/// hung mount must not hold the SIGHUP loop).
async fn load_fault_table_within(
    path: Option<std::path::PathBuf>,
    deadline: Duration,
) -> Result<FaultTable, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("hcclwatch-faults".into())
        .spawn(move || {
            let _ = tx.send(FaultTable::from_config(path.as_deref()));
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(r)) => r.map_err(|e| e.to_string()),
        Ok(Err(_)) => Err("the re-read panicked".into()),
        Err(_) => Err(format!("the re-read did not finish within {deadline:?}")),
    }
}

/// SIGHUP re-reads and validates the configuration, so a bad edit to a ConfigMap or file is
/// caught while the daemon still runs on the old one (and alerted on through
/// `hcclwatch_config_last_reload_successful`) instead of at the next restart. The running
/// components are not rebuilt: keys that changed are named in the log and apply at restart.
/// The one exception is the fault-level table: it is re-read from the (new)
/// `telemetry.fault_levels_file` and swapped in whole, or kept when the file is bad. Both
/// re-reads run on their own threads with [`RELOAD_DEADLINE`], so they can never wedge the
/// daemon or its shutdown.
async fn check_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    reload: Reloader,
    running: Config,
    store: Arc<Store>,
    fault_table: SharedFaultTable,
) {
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    while hup.recv().await.is_some() {
        let now = std::time::SystemTime::now();
        match reload_within(&reload, &busy, RELOAD_DEADLINE).await {
            Ok(new) => {
                let path = new.telemetry.fault_levels_file.clone();
                match load_fault_table_within(path, RELOAD_DEADLINE).await {
                    Ok(t) => {
                        tracing::info!(
                            table = t.origin(),
                            codes = t.len(),
                            "fault-level table (re)loaded on SIGHUP"
                        );
                        fault_table.replace(t);
                    }
                    Err(e) => {
                        store.record_reload(false, now);
                        tracing::error!(error = %e, "fault-level table on SIGHUP is unusable; still using the previous table");
                        continue;
                    }
                }
                store.record_reload(true, now);
                let mut changed = crate::config::diff::changed_keys(&running, &new);
                // Applied just above, not at restart.
                changed.retain(|k| k != "telemetry.fault_levels_file");
                if changed.is_empty() {
                    tracing::info!("configuration re-checked on SIGHUP: valid, unchanged");
                } else {
                    tracing::warn!(
                        changed = %changed.join(","),
                        "configuration re-checked on SIGHUP: valid; the changed keys apply when the daemon restarts"
                    );
                }
            }
            Err(ReloadError::Invalid(problems)) => {
                store.record_reload(false, now);
                for p in &problems {
                    tracing::error!(problem = %p, "configuration re-check failed");
                }
                tracing::error!(
                    problems = problems.len(),
                    "configuration on disk is invalid; still running on the previous one, and a restart would fail: fix the file"
                );
            }
            Err(e) => {
                store.record_reload(false, now);
                tracing::error!(error = %e, "configuration re-check did not complete");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins: a re-check that never returns (a config on a hung mount) is reported as
    /// timed out within the deadline, and a SIGHUP meanwhile is refused at once instead
    /// of stacking another stuck thread; the daemon's loop goes on either way.
    #[tokio::test]
    async fn a_hung_reload_is_bounded_and_not_stacked() {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let reload: Reloader = Arc::new(move || {
            let _ = gate.lock().unwrap().recv();
            Ok(Config::default())
        });
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = std::time::Instant::now();
        let r = reload_within(&reload, &busy, Duration::from_millis(200)).await;
        assert_eq!(
            r.unwrap_err(),
            ReloadError::Timeout(Duration::from_millis(200))
        );
        assert!(t.elapsed() < Duration::from_secs(2));
        let r = reload_within(&reload, &busy, Duration::from_millis(200)).await;
        assert_eq!(r.unwrap_err(), ReloadError::Busy);
        // Once the stuck one returns, re-checks work again.
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while busy.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        release.send(()).unwrap();
        assert!(
            reload_within(&reload, &busy, Duration::from_secs(5))
                .await
                .is_ok()
        );
    }
}
