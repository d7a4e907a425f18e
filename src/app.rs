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
    /// OTLP export could not be set up.
    #[error("OTLP export: {0}")]
    Otlp(String),
    /// Probing is enabled but cannot be set up.
    #[error("probe.enabled: {0}")]
    Probe(String),
}

/// Members from `collective.peers` (or the rank table), cut to this node's probe group:
/// the source, the listen address, and the group's base communicator id.
fn static_members(
    config: &Config,
) -> Result<(crate::probe::membership::Source, std::net::SocketAddr, u64), String> {
    let c = &config.collective;
    let peers: Vec<std::net::SocketAddr> = c
        .peers
        .iter()
        .map(|p| {
            p.parse()
                .map_err(|_| format!("collective.peers: {p:?} is not IP:port"))
        })
        .collect::<Result<_, _>>()?;
    let rank = if c.rank >= 0 {
        c.rank as usize
    } else {
        let local: Vec<std::net::IpAddr> = crate::collective::bootstrap::env::interfaces()
            .into_iter()
            .map(|i| i.addr)
            .collect();
        let mine: Vec<usize> = (0..peers.len())
            .filter(|i| local.contains(&peers[*i].ip()))
            .collect();
        match mine.as_slice() {
            [one] => *one,
            _ => {
                return Err(format!(
                    "collective.rank is -1 and {} peers match a local address; set collective.rank",
                    mine.len()
                ));
            }
        }
    };
    if rank >= peers.len() {
        return Err(format!(
            "collective.rank {rank} is outside collective.peers"
        ));
    }
    // This node's probe group: the members sharing its topology label, split into
    // balanced groups of at most probe.max_group_size.
    let group = crate::probe::membership::probe_group(
        &c.peer_topology,
        rank,
        peers.len(),
        config.probe.max_group_size as usize,
    );
    if group.len() < 2 {
        return Err(format!(
            "this node ({}) is alone in its probe group; give its topology label more members",
            c.peers[rank]
        ));
    }
    let all_names = if c.peer_names.is_empty() {
        c.peers.clone()
    } else {
        c.peer_names.clone()
    };
    let names: Vec<String> = group.iter().map(|&i| all_names[i].clone()).collect();
    let group_peers: Vec<String> = group.iter().map(|&i| c.peers[i].clone()).collect();
    let peers: Vec<std::net::SocketAddr> = group.iter().map(|&i| peers[i]).collect();
    let rank = group.iter().position(|&i| i == rank).unwrap_or(0);
    let comm_id = group_peers
        .iter()
        .flat_map(|p| p.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    Ok((
        crate::probe::membership::Source::Static {
            peers: peers.clone(),
            names,
            rank,
        },
        peers[rank],
        comm_id,
    ))
}

/// Probing settings from the config, or why they are unusable.
pub fn probe_settings(config: &Config) -> Result<crate::probe::ProbeSettings, String> {
    use crate::collective::transport::{FaultSpec, TransportConfig};
    use crate::probe::membership::Source;
    let c = &config.collective;
    let (source, listen, base_id) = if c.peers_dns.is_empty() {
        static_members(config)?
    } else {
        let (host, port) = c
            .peers_dns
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("collective.peers_dns: {:?} is not host:port", c.peers_dns))?;
        let own: Option<std::net::SocketAddr> = if c.own_address.is_empty() {
            None
        } else {
            Some(c.own_address.parse().map_err(|_| {
                format!("collective.own_address: {:?} is not IP:port", c.own_address)
            })?)
        };
        let listen = own.unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], port)));
        let base_id = c.peers_dns.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let source = Source::Dns {
            host,
            port,
            own,
            refresh: config.probe.dns_refresh,
            stale_after: config.probe.membership_stale_after,
            max_group_size: config.probe.max_group_size as usize,
        };
        (source, listen, base_id)
    };
    let key_path = c
        .key_file
        .as_ref()
        .ok_or("collective.key_file is required")?;
    let key: Vec<u8> = std::fs::read(key_path)
        .map_err(|e| format!("reading collective.key_file {}: {e}", key_path.display()))?
        .into_iter()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if key.len() < 16 {
        return Err(format!(
            "collective.key_file {} holds {} bytes; use at least 16 random bytes",
            key_path.display(),
            key.len()
        ));
    }
    let mut t = TransportConfig::new(base_id, key);
    t.channels = c.channels as usize;
    t.connect_timeout = c
        .connect_timeout
        .min((config.probe.interval * 2).max(Duration::from_secs(2)));
    if c.traffic_class >= 0 {
        t.traffic_class = Some(c.traffic_class as u32);
    }
    t.bind_device = c.bind_device.clone();
    let mut comm = crate::collective::CommConfig::new(t);
    comm.exec_timeout = c.exec_timeout;
    if !c.algo.is_empty() {
        comm.algo =
            crate::collective::algo::select::parse_hccl_algo(&c.algo).map_err(|e| e.to_string())?;
    }
    let own_name = [
        c.node_name.clone(),
        std::env::var("NODE_NAME").unwrap_or_default(),
    ]
    .into_iter()
    .find(|n| !n.is_empty())
    .or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
    })
    .unwrap_or_default();
    Ok(crate::probe::ProbeSettings {
        source,
        listen,
        member_timeout: config.probe.member_timeout,
        own_name,
        inject_peers: config
            .probe
            .inject_peer_throttle
            .iter()
            .map(|e| {
                crate::config::parse_peer_throttle(e)
                    .map(|(addr, rate)| {
                        (
                            addr,
                            FaultSpec {
                                rate_bytes_per_sec: Some(rate as f64),
                                ..FaultSpec::default()
                            },
                        )
                    })
                    .map_err(|why| format!("probe.inject_peer_throttle {e:?}: {why}"))
            })
            .collect::<Result<_, _>>()?,
        inject: (config.probe.inject_throttle_bytes_per_second > 0).then(|| FaultSpec {
            rate_bytes_per_sec: Some(config.probe.inject_throttle_bytes_per_second as f64),
            ..FaultSpec::default()
        }),
        comm,
        interval: config.probe.interval,
        small_bytes: config.probe.small_bytes as usize,
        link_bytes: config.probe.link_bytes as usize,
        ring_every: config.probe.ring_every,
        ring_bytes: config.probe.ring_bytes as usize,
        budget_bytes_per_hour: config.probe.budget_bytes_per_hour,
        budget_busy_ratio: config.probe.budget_busy_ratio,
        health: config.health.engine(),
    })
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
    store.record_reload(true, std::time::SystemTime::now());

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
    if config.probe.enabled {
        let settings = probe_settings(&config).map_err(AppError::Probe)?;
        let (tx, rx) = mpsc::channel();
        stops.push(tx);
        crate::probe::spawn(settings, store.clone(), rx).map_err(|source| AppError::Start {
            what: "prober",
            source,
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
    let read_env = |k: &str| std::env::var(k).ok();
    let otlp = match crate::export::otlp::settings(&config.otlp, &read_env)
        .map_err(AppError::Otlp)?
    {
        Some(s) => {
            let o = crate::export::otlp::Otlp::start(&s, store.clone(), build.clone(), &read_env)
                .map_err(AppError::Otlp)?;
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
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| AppError::Bind {
                address: address.to_string(),
                source,
            })?;
        let bound = listener.local_addr().map_err(AppError::Serve)?;
        let shutdown = shutdown_signal();
        tracing::info!(
            version = build.version,
            revision = build.revision,
            backend = config.telemetry.backend.as_str(),
            address = %bound,
            path = %config.web.telemetry_path,
            "hcclwatch listening"
        );
        let router = server::router(store.clone(), build.clone(), &config.web.telemetry_path);
        if let Some(reload) = env.reload.clone() {
            tokio::spawn(check_on_sighup(reload, config.clone(), store.clone()));
        }
        server::serve(listener, router, shutdown)
            .await
            .map_err(AppError::Serve)
    });
    // Dropping the senders wakes every poller; a poller inside a stuck DCMI call is left
    // to the process exit rather than joined.
    drop(stops);
    // The last OTLP flush, bounded by otlp.shutdown_timeout.
    if let Some(o) = &otlp {
        o.shutdown();
    }
    tracing::info!("hcclwatch stopped");
    result
}

/// SIGHUP re-reads and validates the configuration, so a bad edit to a ConfigMap or file is
/// caught while the daemon still runs on the old one (and alerted on through
/// `hcclwatch_config_last_reload_successful`) instead of at the next restart. The running
/// components are not rebuilt: keys that changed are named in the log and apply at restart.
async fn check_on_sighup(reload: Reloader, running: Config, store: Arc<Store>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; configuration checks on SIGHUP are off");
        return;
    };
    while hup.recv().await.is_some() {
        let now = std::time::SystemTime::now();
        match tokio::task::spawn_blocking({
            let reload = reload.clone();
            move || reload()
        })
        .await
        {
            Ok(Ok(new)) => {
                store.record_reload(true, now);
                let changed = changed_keys(&running, &new);
                if changed.is_empty() {
                    tracing::info!("configuration re-checked on SIGHUP: valid, unchanged");
                } else {
                    tracing::warn!(
                        changed = %changed.join(","),
                        "configuration re-checked on SIGHUP: valid; the changed keys apply when the daemon restarts"
                    );
                }
            }
            Ok(Err(problems)) => {
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

/// Dotted keys whose values differ between two configurations.
pub fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = serde_json::Value::Null;
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(path.to_string()),
            _ => {}
        }
    }
    let (Ok(a), Ok(b)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return vec!["(configuration not comparable)".to_string()];
    };
    let mut out = Vec::new();
    walk("", &a, &b, &mut out);
    out
}

/// A future that completes on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled, so a signal that arrives right after
/// start-up (before the server polls it) still shuts down gracefully instead of killing
/// the process. Call it inside the runtime, before announcing readiness.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(term) => {},
            _ = wait(int) => {},
        }
        tracing::info!("shutdown signal received");
    }
}
