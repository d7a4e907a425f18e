//! The OTLP/HTTP exporters, wrapped with a per-request timeout, bounded retries with
//! backoff, and an account of every outcome that `/metrics` shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::snapshot::Store;
use crate::snapshot::status::{OtlpSnapshot, SignalExports};

/// Retries after a failed export, each after a doubling backoff.
const RETRIES: u32 = 2;
/// The first backoff.
const BACKOFF: Duration = Duration::from_millis(500);

/// Export outcomes of one signal, counted from the exporter's thread.
#[derive(Debug, Default)]
struct SignalCounts {
    exports: AtomicU64,
    failures: AtomicU64,
    last_success: AtomicU64,
}

impl SignalCounts {
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

    fn read(&self) -> SignalExports {
        let t = f64::from_bits(self.last_success.load(Ordering::Relaxed));
        SignalExports {
            exports: self.exports.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_success: (t > 0.0).then_some(t),
        }
    }
}

/// Both signals' outcomes; each record publishes a fresh [`OtlpSnapshot`] to the store.
#[derive(Debug)]
pub struct Outcomes {
    metrics: SignalCounts,
    traces: Option<SignalCounts>,
    store: Arc<Store>,
}

impl Outcomes {
    /// Outcomes published to `store`; `traces` when trace export is on. Publishes the
    /// all-zero start at once, so `/metrics` shows the export before its first attempt.
    pub fn new(store: Arc<Store>, traces: bool) -> Arc<Self> {
        let o = Arc::new(Self {
            metrics: SignalCounts::default(),
            traces: traces.then(SignalCounts::default),
            store,
        });
        o.publish();
        o
    }

    fn publish(&self) {
        self.store.publish_otlp(OtlpSnapshot {
            metrics: self.metrics.read(),
            traces: self.traces.as_ref().map(SignalCounts::read),
        });
    }

    fn record_metrics(&self, ok: bool) {
        self.metrics.record(ok);
        self.publish();
    }

    fn record_traces(&self, ok: bool) {
        if let Some(t) = &self.traces {
            t.record(ok);
            self.publish();
        }
    }
}

/// Runs an export future on the exporters' runtime with a timeout and bounded retries.
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

/// How many metric collections have finished. The SDK's periodic reader runs a collection
/// (every instrument's callback), then hands it to [`MetricsOut::export`], which counts it
/// before anything else; the next collection starts after that export returns. So
/// callbacks that read the same count belong to the same collection (see the bridge).
#[derive(Debug, Default)]
pub struct Collections(AtomicU64);

impl Collections {
    /// Collections whose export has started.
    pub fn finished(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Marks the collection being exported as over.
    pub(super) fn finish(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// The metric exporter with retries and accounting.
pub struct MetricsOut {
    /// The SDK's OTLP/HTTP exporter.
    pub inner: opentelemetry_otlp::MetricExporter,
    /// The exporters' runtime.
    pub rt: tokio::runtime::Handle,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Where outcomes go.
    pub outcomes: Arc<Outcomes>,
    /// Counted at every export: the collection it carries is over.
    pub collections: Arc<Collections>,
}

impl PushMetricExporter for MetricsOut {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.collections.finish();
        let r = with_retries(&self.rt, self.timeout, "metrics", || {
            self.inner.export(metrics)
        });
        self.outcomes.record_metrics(r.is_ok());
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
pub struct SpansOut {
    /// The SDK's OTLP/HTTP exporter.
    pub inner: opentelemetry_otlp::SpanExporter,
    /// The exporters' runtime.
    pub rt: tokio::runtime::Handle,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Where outcomes go.
    pub outcomes: Arc<Outcomes>,
}

impl SpanExporter for SpansOut {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let r = with_retries(&self.rt, self.timeout, "traces", || {
            self.inner.export(batch.clone())
        });
        self.outcomes.record_traces(r.is_ok());
        std::future::ready(r)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
