//! OpenTelemetry export: every metric of `/metrics` over OTLP/HTTP, the NPU readings under
//! the hardware semantic conventions, and optionally a trace per probe round.
//!
//! **Built from the typed snapshot.** The instruments' callbacks run the same domain
//! collectors as `/metrics` ([`crate::export::prometheus::collectors`]) into a typed sink
//! ([`families`]), so names, label sets and values agree with the scrape without either
//! export parsing the other's output; the `hw.*` instruments ([`hw`]) read the chips of
//! the same view. One collection renders one view of the store. Units become UCUM.
//!
//! **Failures never block anything.** The SDK's periodic reader runs on its own thread;
//! its exports run on a small runtime of their own with a per-request timeout and two
//! bounded retries with backoff, and are counted ([`exporters`]):
//! `hcclwatch_otlp_export_failures_total`, `hcclwatch_otlp_last_success_timestamp_seconds`.
//! Scrapes and collection never wait for them. At shutdown the last data is flushed within
//! `otlp.shutdown_timeout`.

mod bridge;
pub(crate) mod exporters;
pub(crate) mod families;
pub(crate) mod hw;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use self::bridge::{Bridge, Sources};
use self::exporters::{Collections, MetricsOut, Outcomes, SpansOut};
use crate::config::{Compression, OtlpConfig};
use crate::export::prometheus;
use crate::snapshot::Store;
use crate::snapshot::status::BuildInfo;

/// The resolved export settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Full URL for metrics; `None` leaves it to `OTEL_EXPORTER_OTLP_*` variables.
    pub metrics_endpoint: Option<String>,
    /// Full URL for traces; `None` leaves it to the variables.
    pub traces_endpoint: Option<String>,
    /// Export interval.
    pub interval: Duration,
    /// Extra headers.
    pub headers: HashMap<String, String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Gzip request bodies (else the variables decide).
    pub gzip: bool,
    /// Export probe-round traces.
    pub traces: bool,
    /// Final flush deadline.
    pub shutdown_timeout: Duration,
    /// `web.node_label`: the `k8s.node.name` resource attribute, over `NODE_NAME`.
    pub node_name: Option<String>,
}

/// Why OTLP export cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// A standard variable asks for a protocol this build does not have.
    #[error(
        "{var}={value:?}: this hcclwatch exports OTLP over http/protobuf only (gRPC and http/json are not built); use an OTLP/HTTP endpoint, usually port 4318"
    )]
    Protocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The exporters' runtime could not start.
    #[error("starting the OTLP runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The SDK refused an exporter's settings.
    #[error("OTLP {signal} exporter: {source}")]
    Exporter {
        /// `metric` or `span`.
        signal: &'static str,
        /// The SDK's error.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

impl Settings {
    /// Decides whether and how to export: `Ok(None)` when neither the config nor the
    /// standard variables name an endpoint. `env` reads a variable (injected so tests never
    /// set any).
    pub fn from_config(
        cfg: &OtlpConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, OtlpError> {
        let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let enabled = !cfg.endpoint.is_empty()
            || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
        if !enabled {
            return Ok(None);
        }
        for var in [
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ] {
            if let Some(p) = set(var)
                && p != "http/protobuf"
            {
                return Err(OtlpError::Protocol { var, value: p });
            }
        }
        let base = cfg.endpoint.trim_end_matches('/');
        let url = |path: &str| (!base.is_empty()).then(|| format!("{base}{path}"));
        let headers = cfg
            .headers
            .iter()
            .map(|h| (h.name().to_string(), h.value().to_string()))
            .collect();
        Ok(Some(Settings {
            metrics_endpoint: url("/v1/metrics"),
            traces_endpoint: url("/v1/traces"),
            interval: cfg.interval,
            headers,
            timeout: cfg.timeout,
            gzip: cfg.compression == Compression::Gzip,
            traces: cfg.traces,
            shutdown_timeout: cfg.shutdown_timeout,
            node_name: None,
        }))
    }
}

/// The running export.
pub struct Otlp {
    /// The exporters' own runtime (the HTTP client needs one). Never dropped: an export
    /// may still be in flight on the SDK's thread when the daemon exits, and a runtime shut
    /// down under it would panic that thread; the process exit ends it instead.
    _rt: std::mem::ManuallyDrop<tokio::runtime::Runtime>,
    meters: SdkMeterProvider,
    tracers: Option<SdkTracerProvider>,
    bridge: Arc<Bridge>,
    shutdown_timeout: Duration,
}

/// Resource attributes: `service.name` (unless `OTEL_SERVICE_NAME` sets it),
/// `service.version`, `host.name`, `k8s.node.name` (`node_name`, which is
/// `web.node_label`, else `NODE_NAME`), `k8s.pod.name` (`POD_NAME`);
/// `OTEL_RESOURCE_ATTRIBUTES` is read by the SDK.
fn resource(
    build: &BuildInfo,
    node_name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Resource {
    let mut kv = vec![KeyValue::new("service.version", build.version.to_string())];
    if let Some(h) = hostname() {
        kv.push(KeyValue::new("host.name", h));
    }
    let node = node_name
        .map(str::to_string)
        .or_else(|| env("NODE_NAME"))
        .filter(|v| !v.is_empty());
    if let Some(n) = node {
        kv.push(KeyValue::new("k8s.node.name", n));
    }
    if let Some(p) = env("POD_NAME").filter(|v| !v.is_empty()) {
        kv.push(KeyValue::new("k8s.pod.name", p));
    }
    let mut b = Resource::builder().with_attributes(kv);
    if env("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        b = b.with_service_name("hcclwatch");
    }
    b.build()
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Otlp {
    /// Starts exporting, on a small runtime of its own.
    pub fn start(
        s: &Settings,
        store: Arc<Store>,
        build: BuildInfo,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, OtlpError> {
        let own = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("hcclwatch-otlp")
            .enable_all()
            .build()
            .map_err(OtlpError::Runtime)?;
        let rt = own.handle().clone();
        let outcomes = Outcomes::new(store.clone(), s.traces);
        let resource = resource(&build, s.node_name.as_deref(), env);
        let mut mb = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_timeout(s.timeout)
            .with_headers(s.headers.clone());
        if let Some(e) = &s.metrics_endpoint {
            mb = mb.with_endpoint(e.clone());
        }
        if s.gzip {
            mb = mb.with_compression(opentelemetry_otlp::Compression::Gzip);
        }
        let exporter = mb.build().map_err(|source| OtlpError::Exporter {
            signal: "metric",
            source,
        })?;
        let collections = Arc::new(Collections::default());
        let out = MetricsOut {
            inner: exporter,
            rt: rt.clone(),
            timeout: s.timeout,
            outcomes: outcomes.clone(),
            collections: collections.clone(),
        };
        let reader = PeriodicReader::builder(out)
            .with_interval(s.interval)
            .build();
        let meters = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource.clone())
            .build();
        let sources = Sources {
            collectors: prometheus::collectors(&build),
            store,
            collections,
            interval: s.interval,
        };
        let bridge = Bridge::new(sources, meters.meter("hcclwatch"));
        bridge.register_hw();
        bridge.discover();

        let tracers = if s.traces {
            let mut sb = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_timeout(s.timeout)
                .with_headers(s.headers.clone());
            if let Some(e) = &s.traces_endpoint {
                sb = sb.with_endpoint(e.clone());
            }
            if s.gzip {
                sb = sb.with_compression(opentelemetry_otlp::Compression::Gzip);
            }
            let exporter = sb.build().map_err(|source| OtlpError::Exporter {
                signal: "span",
                source,
            })?;
            let out = SpansOut {
                inner: exporter,
                rt,
                timeout: s.timeout,
                outcomes,
            };
            let p = SdkTracerProvider::builder()
                .with_batch_exporter(out)
                .with_resource(resource)
                .build();
            opentelemetry::global::set_tracer_provider(p.clone());
            Some(p)
        } else {
            None
        };
        Ok(Self {
            _rt: std::mem::ManuallyDrop::new(own),
            meters,
            tracers,
            bridge,
            shutdown_timeout: s.shutdown_timeout,
        })
    }

    /// Registers instruments for families that appeared since the last call (probing
    /// starts, a collector's first reading). Cheap; the daemon calls it periodically.
    pub fn discover(&self) {
        self.bridge.discover();
    }

    /// Flushes and stops, within `otlp.shutdown_timeout`. Call it outside the runtime.
    pub fn shutdown(&self) {
        // Families that appeared since the last discovery go out with the final flush.
        self.bridge.discover();
        let deadline = Instant::now() + self.shutdown_timeout;
        // The flush runs on its own thread so that a receiver that does not answer cannot
        // hold the exit past the deadline.
        let (tx, rx) = std::sync::mpsc::channel();
        let meters = self.meters.clone();
        let tracers = self.tracers.clone();
        let _ = std::thread::Builder::new()
            .name("otlp-flush".into())
            .spawn(move || {
                let t = tracers.map(|t| t.force_flush());
                let m = meters.force_flush();
                let _ = tx.send((m, t));
            });
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((Ok(()), None | Some(Ok(())))) => tracing::debug!("OTLP flushed at shutdown"),
            Ok((m, t)) => {
                tracing::warn!(metrics = ?m.err(), traces = ?t.and_then(Result::err), "OTLP flush at shutdown failed")
            }
            Err(_) => {
                tracing::warn!(deadline = ?self.shutdown_timeout, "OTLP flush at shutdown did not finish within otlp.shutdown_timeout; exiting anyway")
            }
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        if let Some(t) = &self.tracers {
            let _ = t.shutdown_with_timeout(left);
        }
        let _ = self.meters.shutdown_with_timeout(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `web.node_label` is the resource's `k8s.node.name`, over `NODE_NAME`; without it
    /// `NODE_NAME` is, and an empty one is none.
    #[test]
    fn the_node_label_is_the_node_name_resource_attribute() {
        let node = |label: Option<&str>, env_node: &str| {
            let env_node = env_node.to_string();
            let env = move |k: &str| (k == "NODE_NAME").then(|| env_node.clone());
            resource(&BuildInfo::current(), label, &env)
                .get(&opentelemetry::Key::new("k8s.node.name"))
                .map(|v| v.to_string())
        };
        assert_eq!(node(Some("gpu-7"), "other"), Some("gpu-7".into()));
        assert_eq!(node(None, "from-env"), Some("from-env".into()));
        assert_eq!(node(None, ""), None);
    }

    #[test]
    fn enabled_only_with_an_endpoint_and_only_over_http() {
        let none = |_: &str| None;
        assert_eq!(
            Settings::from_config(&OtlpConfig::default(), &none).unwrap(),
            None
        );
        let cfg = OtlpConfig {
            endpoint: "http://c:4318/".into(),
            ..OtlpConfig::default()
        };
        let s = Settings::from_config(&cfg, &none).unwrap().unwrap();
        assert_eq!(
            s.metrics_endpoint.as_deref(),
            Some("http://c:4318/v1/metrics")
        );
        assert_eq!(
            s.traces_endpoint.as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let env =
            |k: &str| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://x:4318".to_string());
        let s = Settings::from_config(&OtlpConfig::default(), &env)
            .unwrap()
            .unwrap();
        assert_eq!(
            s.metrics_endpoint, None,
            "the SDK resolves the variable itself"
        );
        let grpc = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://x:4317".to_string()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("grpc".to_string()),
            _ => None,
        };
        assert!(
            Settings::from_config(&OtlpConfig::default(), &grpc)
                .unwrap_err()
                .to_string()
                .contains("http/protobuf only")
        );
    }
}
