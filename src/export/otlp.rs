//! OpenTelemetry export: every metric of `/metrics` over OTLP/HTTP, and optionally a trace
//! per probe round.
//!
//! **Same numbers as `/metrics`, by construction.** The OTLP side does not read the store
//! on its own: its observable instruments' callbacks take the very exposition that
//! `/metrics` would serve at that moment (the same `prometheus-client` collector over the
//! same store), parsed back into families. So the names, label sets and values cannot
//! drift from the scrape. Counters lose their `_total` (OpenTelemetry names counters
//! without it; Prometheus' OTLP ingestion adds it back); units become UCUM. The SDK has no
//! observable histogram, so a histogram's `_bucket` (with `le`), `_sum` and `_count`
//! series are exported as three counters, exactly as `/metrics` shows them.
//!
//! **Hardware semantic conventions.** The device readings are also exported under the
//! OpenTelemetry `hw.*` names where those exist (see [`HW_MAPPING`]). The conventions have
//! no NPU device type, so an NPU is a `hw.type = "gpu"` device there.
//!
//! **Failures never block anything.** The SDK's periodic reader runs on its own thread;
//! its exports run on a small runtime of their own with a per-request timeout and two bounded
//! retries with backoff, and are counted (`hcclwatch_otlp_export_failures_total`,
//! `hcclwatch_otlp_last_success_timestamp_seconds`). Scrapes and collection never wait for
//! them. At shutdown the last data is flushed within `otlp.shutdown_timeout`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use prometheus_client::registry::Registry;

use super::metrics::{BuildInfo, Format, encode};
use crate::config::OtlpConfig;
use crate::telemetry::store::Store;

/// Retries after a failed export, each after a doubling backoff.
const RETRIES: u32 = 2;
/// The first backoff.
const BACKOFF: Duration = Duration::from_millis(500);
/// A parsed exposition is reused by every callback of one collection for this long.
const SNAPSHOT_TTL: Duration = Duration::from_millis(250);

/// Export outcomes of one signal, read by `/metrics`.
#[derive(Debug, Default)]
pub struct SignalStatus {
    exports: AtomicU64,
    failures: AtomicU64,
    last_success: AtomicU64,
}

impl SignalStatus {
    fn record(&self, ok: bool) {
        self.exports.fetch_add(1, Ordering::Relaxed);
        if ok {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.last_success.store(now.to_bits(), Ordering::Relaxed);
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Export attempts (after retries), failures, and the Unix time of the last success.
    pub fn read(&self) -> (u64, u64, Option<f64>) {
        let t = f64::from_bits(self.last_success.load(Ordering::Relaxed));
        (
            self.exports.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
            (t > 0.0).then_some(t),
        )
    }
}

/// Both signals' outcomes.
#[derive(Debug, Default)]
pub struct OtlpStatus {
    /// Metrics.
    pub metrics: SignalStatus,
    /// Traces (only when `otlp.traces`).
    pub traces: Option<SignalStatus>,
}

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
}

/// Decides whether and how to export: `Ok(None)` when neither the config nor the standard
/// variables name an endpoint. `env` reads a variable (injected so tests never set any).
pub fn settings(
    cfg: &OtlpConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, String> {
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
            return Err(format!(
                "{var}={p:?}: this hcclwatch exports OTLP over http/protobuf only (gRPC and http/json are not built); use an OTLP/HTTP endpoint, usually port 4318"
            ));
        }
    }
    let base = cfg.endpoint.trim_end_matches('/');
    let url = |path: &str| (!base.is_empty()).then(|| format!("{base}{path}"));
    let headers = cfg
        .headers
        .iter()
        .filter_map(|h| h.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Some(Settings {
        metrics_endpoint: url("/v1/metrics"),
        traces_endpoint: url("/v1/traces"),
        interval: cfg.interval,
        headers,
        timeout: cfg.timeout,
        gzip: cfg.compression == "gzip",
        traces: cfg.traces,
        shutdown_timeout: cfg.shutdown_timeout,
    }))
}

/// A label set as the exposition writes it.
type Labels = Vec<(String, String)>;
/// Families by exported name.
type Families = BTreeMap<String, Family>;
/// A `hw.*` mapping: a sample (labels, value) to attribute sets and values.
type HwMap = fn(&[(String, String)], f64) -> Vec<(Vec<KeyValue>, f64)>;

/// One metric family of the exposition.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    counter: bool,
    help: String,
    samples: Vec<(Labels, f64)>,
}

/// Parses Prometheus text 0.0.4 (as this crate's encoder writes it) into families keyed by
/// the exported (OpenTelemetry) name: counters without `_total`; a histogram's parts as
/// `<name>_bucket`, `<name>_sum`, `<name>_count`.
fn parse_exposition(text: &str) -> Families {
    let mut types: HashMap<&str, &str> = HashMap::new();
    let mut helps: HashMap<&str, String> = HashMap::new();
    let mut out = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((n, h)) = rest.split_once(' ') {
                helps.insert(n, h.replace("\\n", "\n").replace("\\\\", "\\"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((n, t)) = rest.split_once(' ') {
                types.insert(n, t);
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((name, labels, value)) = parse_sample(line) else {
            continue;
        };
        let (family, counter) = if let Some(base) = name
            .strip_suffix("_total")
            .filter(|_| types.get(name) == Some(&"counter"))
        {
            (base.to_string(), true)
        } else if let Some(t) = ["_bucket", "_sum", "_count"].iter().find_map(|s| {
            name.strip_suffix(s)
                .filter(|b| types.get(b) == Some(&"histogram"))
                .map(|b| (b, *s))
        }) {
            let help = helps.get(t.0).cloned().unwrap_or_default();
            let f = out.entry(name.to_string()).or_insert_with(|| Family {
                counter: true,
                help,
                samples: Vec::new(),
            });
            f.samples.push((labels, value));
            continue;
        } else {
            (name.to_string(), false)
        };
        let help_key = if counter {
            format!("{family}_total")
        } else {
            family.clone()
        };
        let help = helps.get(help_key.as_str()).cloned().unwrap_or_default();
        out.entry(family)
            .or_insert_with(|| Family {
                counter,
                help,
                samples: Vec::new(),
            })
            .samples
            .push((labels, value));
    }
    out
}

/// `name{a="b",...} value` → parts; label values unescaped.
fn parse_sample(line: &str) -> Option<(&str, Labels, f64)> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => (&line[..i], &line[i..]),
        None => return None,
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.trim_start_matches(',');
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let (k, after) = r.split_once("=\"")?;
            let mut v = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => v.push('\n'),
                        other => v.push(other),
                    },
                    '"' => break i,
                    c => v.push(c),
                }
            };
            labels.push((k.to_string(), v));
            r = &after[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let v = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        x => x.parse().ok()?,
    };
    Some((name, labels, v))
}

/// The UCUM unit of an exported name, from its Prometheus suffix.
pub fn ucum(name: &str) -> &'static str {
    const UNITS: &[(&str, &str)] = &[
        ("_bytes_per_second", "By/s"),
        ("_celsius", "Cel"),
        ("_watts", "W"),
        ("_volts", "V"),
        ("_hertz", "Hz"),
        ("_seconds_sum", "s"),
        ("_seconds", "s"),
        ("_bytes", "By"),
        ("_ratio", "1"),
        ("_packets", "{packet}"),
        ("_frames", "{frame}"),
        ("_errors", "{error}"),
        ("_retransmissions", "{packet}"),
        ("_marks", "{packet}"),
        ("_flits", "{flit}"),
        ("_pages", "{page}"),
        ("_rounds", "{round}"),
        ("_calls", "{call}"),
        ("_calls_timed_out", "{call}"),
        ("_devices", "{npu}"),
        ("_cpus", "{cpu}"),
    ];
    UNITS
        .iter()
        .find(|(s, _)| name.ends_with(s))
        .map_or("1", |(_, u)| u)
}

fn attrs(labels: &[(String, String)]) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect()
}

/// How a `hw.*` metric is derived from an hcclwatch family.
pub struct HwMetric {
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// The exported hcclwatch family it reads.
    pub source: &'static str,
    /// Counter (else gauge).
    pub counter: bool,
    /// Maps a sample (labels, value) to hw attributes and value; `None` skips it.
    pub map: HwMap,
}

fn label<'a>(l: &'a [(String, String)], k: &str) -> Option<&'a str> {
    l.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
}

fn device(l: &[(String, String)]) -> Vec<KeyValue> {
    let npu = label(l, "npu").unwrap_or("");
    let mut v = vec![
        KeyValue::new("hw.id", format!("npu{npu}")),
        KeyValue::new("hw.type", "gpu"),
        KeyValue::new("hw.vendor", "Huawei"),
    ];
    if let Some(m) = label(l, "model") {
        v.push(KeyValue::new("hw.model", m.to_string()));
    }
    v
}

fn sensor(l: &[(String, String)], what: &str, kind: &str) -> Vec<KeyValue> {
    let npu = label(l, "npu").unwrap_or("");
    vec![
        KeyValue::new("hw.id", format!("npu{npu}-{what}")),
        KeyValue::new("hw.type", kind.to_string()),
        KeyValue::new("hw.parent", format!("npu{npu}")),
        KeyValue::new("hw.name", format!("NPU {npu} {what}")),
    ]
}

/// The `hw.*` metrics, each derived from one hcclwatch family.
pub const HW_MAPPING: &[HwMetric] = &[
    HwMetric {
        name: "hw.temperature",
        unit: "Cel",
        source: "hcclwatch_npu_temperature_celsius",
        counter: false,
        map: |l, v| vec![(sensor(l, "die", "temperature"), v)],
    },
    HwMetric {
        name: "hw.temperature",
        unit: "Cel",
        source: "hcclwatch_npu_hbm_temperature_celsius",
        counter: false,
        map: |l, v| vec![(sensor(l, "hbm", "temperature"), v)],
    },
    HwMetric {
        name: "hw.power",
        unit: "W",
        source: "hcclwatch_npu_power_watts",
        counter: false,
        map: |l, v| vec![(device(l), v)],
    },
    HwMetric {
        name: "hw.voltage",
        unit: "V",
        source: "hcclwatch_npu_voltage_volts",
        counter: false,
        map: |l, v| vec![(sensor(l, "core", "voltage"), v)],
    },
    HwMetric {
        name: "hw.status",
        unit: "1",
        source: "hcclwatch_npu_health",
        counter: false,
        map: |l, v| {
            // DCMI health 0 ok, 1–2 degraded (minor, major), 3 failed.
            let state = match v as i64 {
                0 => "ok",
                1 | 2 => "degraded",
                _ => "failed",
            };
            ["ok", "degraded", "failed"]
                .iter()
                .map(|s| {
                    let mut a = device(l);
                    a.push(KeyValue::new("hw.state", *s));
                    (a, if *s == state { 1.0 } else { 0.0 })
                })
                .collect()
        },
    },
    HwMetric {
        name: "hw.errors",
        unit: "{error}",
        source: "hcclwatch_npu_hbm_ecc_errors",
        counter: true,
        map: |l, v| {
            if label(l, "scope") != Some("lifetime") {
                return Vec::new();
            }
            let mut a = device(l);
            let t = if label(l, "type") == Some("double") {
                "hbm_ecc_uncorrectable"
            } else {
                "hbm_ecc_corrected"
            };
            a.push(KeyValue::new("error.type", t));
            vec![(a, v)]
        },
    },
    HwMetric {
        name: "hw.gpu.memory.usage",
        unit: "By",
        source: "hcclwatch_npu_hbm_used_bytes",
        counter: false,
        map: |l, v| vec![(device(l), v)],
    },
    HwMetric {
        name: "hw.gpu.memory.limit",
        unit: "By",
        source: "hcclwatch_npu_hbm_total_bytes",
        counter: false,
        map: |l, v| vec![(device(l), v)],
    },
    HwMetric {
        name: "hw.gpu.utilization",
        unit: "1",
        source: "hcclwatch_npu_utilization_ratio",
        counter: false,
        map: |l, v| {
            let mut a = device(l);
            let task = match label(l, "unit") {
                Some("overall") => "general",
                Some(u) => u,
                None => return Vec::new(),
            };
            a.push(KeyValue::new("hw.gpu.task", task.to_string()));
            vec![(a, v)]
        },
    },
];

/// The exposition, parsed, shared by every callback of one collection.
struct Bridge {
    registry: Registry,
    cache: Mutex<Option<(Instant, Arc<Families>)>>,
    known: Mutex<BTreeSet<String>>,
    meter: Meter,
}

impl Bridge {
    fn snapshot(&self) -> Arc<Families> {
        self.render(false)
    }

    /// The parsed exposition: the cached one if it is fresh and `force` is false.
    fn render(&self, force: bool) -> Arc<Families> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, s)) = c.as_ref()
            && at.elapsed() < SNAPSHOT_TTL
            && !force
        {
            return s.clone();
        }
        let text = encode(&self.registry, Format::Text004).unwrap_or_default();
        let s = Arc::new(parse_exposition(&text));
        *c = Some((Instant::now(), s.clone()));
        s
    }

    /// Registers an observable instrument for every family not seen before.
    fn discover(self: &Arc<Self>) {
        // Always a fresh render: a cached one from just before a family appeared would hide
        // it (at shutdown, for good).
        let snap = self.render(true);
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for (name, fam) in snap.iter() {
            if !known.insert(name.clone()) {
                continue;
            }
            let weak: Weak<Bridge> = Arc::downgrade(self);
            let key = name.clone();
            let observe = move |o: &dyn AsyncInstrument<f64>| {
                let Some(b) = weak.upgrade() else { return };
                if let Some(f) = b.snapshot().get(&key) {
                    for (l, v) in &f.samples {
                        o.observe(*v, &attrs(l));
                    }
                }
            };
            if fam.counter {
                self.meter
                    .f64_observable_counter(name.clone())
                    .with_description(fam.help.clone())
                    .with_unit(ucum(name))
                    .with_callback(observe)
                    .build();
            } else {
                self.meter
                    .f64_observable_gauge(name.clone())
                    .with_description(fam.help.clone())
                    .with_unit(ucum(name))
                    .with_callback(observe)
                    .build();
            }
        }
    }

    /// Registers the `hw.*` instruments (once; each reads its source family).
    fn register_hw(self: &Arc<Self>) {
        let mut by_name: BTreeMap<&'static str, Vec<&'static HwMetric>> = BTreeMap::new();
        for m in HW_MAPPING {
            by_name.entry(m.name).or_default().push(m);
        }
        for (name, parts) in by_name {
            // Every part of one name shares its kind and unit.
            let first = parts[0];
            let weak: Weak<Bridge> = Arc::downgrade(self);
            let observe = move |o: &dyn AsyncInstrument<f64>| {
                let Some(b) = weak.upgrade() else { return };
                let snap = b.snapshot();
                for m in &parts {
                    if let Some(f) = snap.get(m.source) {
                        for (l, v) in &f.samples {
                            for (a, x) in (m.map)(l, *v) {
                                o.observe(x, &a);
                            }
                        }
                    }
                }
            };
            if first.counter {
                self.meter
                    .f64_observable_counter(name)
                    .with_unit(first.unit)
                    .with_callback(observe)
                    .build();
            } else if name == "hw.status" {
                self.meter
                    .f64_observable_up_down_counter(name)
                    .with_unit(first.unit)
                    .with_callback(observe)
                    .build();
            } else {
                self.meter
                    .f64_observable_gauge(name)
                    .with_unit(first.unit)
                    .with_callback(observe)
                    .build();
            }
        }
    }
}

/// Runs an export future on the daemon's runtime with a timeout and bounded retries.
fn with_retries<F, Fut>(
    rt: &tokio::runtime::Handle,
    timeout: Duration,
    what: &str,
    mut attempt: F,
) -> OTelSdkResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = OTelSdkResult>,
{
    rt.block_on(async {
        let mut backoff = BACKOFF;
        let mut last = OTelSdkError::InternalFailure("no attempt".into());
        for n in 0..=RETRIES {
            if n > 0 {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            match tokio::time::timeout(timeout, attempt()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => last = e,
                Err(_) => last = OTelSdkError::Timeout(timeout),
            }
        }
        tracing::warn!(signal = what, error = %last, attempts = RETRIES + 1, "OTLP export failed; telemetry and probing go on, the next interval tries again");
        Err(last)
    })
}

/// The metric exporter with retries and accounting.
struct MetricsOut {
    inner: opentelemetry_otlp::MetricExporter,
    rt: tokio::runtime::Handle,
    timeout: Duration,
    status: Arc<OtlpStatus>,
}

impl PushMetricExporter for MetricsOut {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let r = with_retries(&self.rt, self.timeout, "metrics", || {
            self.inner.export(metrics)
        });
        self.status.metrics.record(r.is_ok());
        std::future::ready(r)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// The span exporter with retries and accounting.
#[derive(Debug)]
struct SpansOut {
    inner: opentelemetry_otlp::SpanExporter,
    rt: tokio::runtime::Handle,
    timeout: Duration,
    status: Arc<OtlpStatus>,
}

impl SpanExporter for SpansOut {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let r = with_retries(&self.rt, self.timeout, "traces", || {
            self.inner.export(batch.clone())
        });
        if let Some(s) = &self.status.traces {
            s.record(r.is_ok());
        }
        std::future::ready(r)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
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
/// `service.version`, `host.name`, `k8s.node.name` (`NODE_NAME`), `k8s.pod.name`
/// (`POD_NAME`); `OTEL_RESOURCE_ATTRIBUTES` is read by the SDK.
fn resource(build: &BuildInfo, env: &dyn Fn(&str) -> Option<String>) -> Resource {
    let mut kv = vec![KeyValue::new("service.version", build.version.to_string())];
    if let Some(h) = hostname() {
        kv.push(KeyValue::new("host.name", h));
    }
    if let Some(n) = env("NODE_NAME").filter(|v| !v.is_empty()) {
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
    ) -> Result<Self, String> {
        let own = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("hcclwatch-otlp")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the OTLP runtime: {e}"))?;
        let rt = own.handle().clone();
        let status = Arc::new(OtlpStatus {
            metrics: SignalStatus::default(),
            traces: s.traces.then(SignalStatus::default),
        });
        store.set_otlp(status.clone());
        let resource = resource(&build, env);
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
        let exporter = mb
            .build()
            .map_err(|e| format!("OTLP metric exporter: {e}"))?;
        let out = MetricsOut {
            inner: exporter,
            rt: rt.clone(),
            timeout: s.timeout,
            status: status.clone(),
        };
        let reader = PeriodicReader::builder(out)
            .with_interval(s.interval)
            .build();
        let meters = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource.clone())
            .build();
        let bridge = Arc::new(Bridge {
            registry: super::metrics::registry(store, build),
            cache: Mutex::new(None),
            known: Mutex::new(BTreeSet::new()),
            meter: meters.meter("hcclwatch"),
        });
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
            let exporter = sb.build().map_err(|e| format!("OTLP span exporter: {e}"))?;
            let out = SpansOut {
                inner: exporter,
                rt,
                timeout: s.timeout,
                status,
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

    #[test]
    fn exposition_parses_into_otel_families() {
        let text = "# HELP a_celsius Temp.\n# TYPE a_celsius gauge\na_celsius{npu=\"0\",m=\"x\\\"y\"} 45.5\n\
                    # HELP b_total Count.\n# TYPE b_total counter\nb_total{d=\"rx\"} 7\n\
                    # HELP h_seconds Lat.\n# TYPE h_seconds histogram\nh_seconds_bucket{le=\"0.1\"} 1\nh_seconds_bucket{le=\"+Inf\"} 2\nh_seconds_sum 0.3\nh_seconds_count 2\n";
        let f = parse_exposition(text);
        let a = &f["a_celsius"];
        assert!(!a.counter);
        assert_eq!(a.help, "Temp.");
        assert_eq!(a.samples[0].0[1], ("m".to_string(), "x\"y".to_string()));
        assert_eq!(a.samples[0].1, 45.5);
        assert!(f["b"].counter);
        assert_eq!(f["b"].samples[0].1, 7.0);
        assert_eq!(f["h_seconds_bucket"].samples.len(), 2);
        assert!(f["h_seconds_bucket"].counter);
        assert_eq!(f["h_seconds_sum"].samples[0].1, 0.3);
        assert_eq!(f["h_seconds_count"].samples[0].1, 2.0);
        assert_eq!(ucum("hcclwatch_npu_temperature_celsius"), "Cel");
        assert_eq!(ucum("hcclwatch_link_bandwidth_bytes_per_second"), "By/s");
        assert_eq!(ucum("h_seconds_sum"), "s");
        assert_eq!(ucum("hcclwatch_npu_roce_packets"), "{packet}");
    }

    #[test]
    fn enabled_only_with_an_endpoint_and_only_over_http() {
        let none = |_: &str| None;
        assert_eq!(settings(&OtlpConfig::default(), &none).unwrap(), None);
        let cfg = OtlpConfig {
            endpoint: "http://c:4318/".into(),
            ..OtlpConfig::default()
        };
        let s = settings(&cfg, &none).unwrap().unwrap();
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
        let s = settings(&OtlpConfig::default(), &env).unwrap().unwrap();
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
            settings(&OtlpConfig::default(), &grpc)
                .unwrap_err()
                .contains("http/protobuf only")
        );
    }
}
