//! The vocabulary the collectors write in: a metric family is a name, a help text, a type
//! and its series. A [`Sink`] receives families; the Prometheus encoder is one sink and the
//! OTLP bridge another, so both read the same typed snapshot through the same collectors
//! and neither parses the other's output.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::snapshot::View;
use crate::snapshot::histogram::Histogram;

/// A series' labels, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// Where collectors write their families. A family with no series is not written at all
/// (no `# HELP` without samples).
pub trait Sink {
    /// A gauge family.
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> fmt::Result;
    /// A counter family; `name` is without `_total` (the Prometheus encoder appends it,
    /// OpenTelemetry names counters without it).
    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> fmt::Result;
    /// A histogram family; histograms with no observation yet are left out.
    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: Vec<(Labels, &Histogram)>,
    ) -> fmt::Result;
}

/// A domain's collector: renders its part of the snapshot as families.
pub trait Render: fmt::Debug + Send + Sync {
    /// Writes every family of this domain from `view`, in a fixed order. Every collector
    /// of one exposition gets the same view, so the families agree with each other.
    fn render(&self, view: &View, out: &mut dyn Sink) -> fmt::Result;
}

/// The Prometheus encoder as a [`Sink`].
pub struct Encoder<'a, 'b> {
    enc: &'a mut DescriptorEncoder<'b>,
}

impl<'a, 'b> Encoder<'a, 'b> {
    /// Wraps prometheus-client's descriptor encoder.
    pub fn new(enc: &'a mut DescriptorEncoder<'b>) -> Self {
        Self { enc }
    }
}

impl Sink for Encoder<'_, '_> {
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> fmt::Result {
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in &series {
            ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> fmt::Result {
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, v) in &series {
            ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        mut series: Vec<(Labels, &Histogram)>,
    ) -> fmt::Result {
        series.retain(|(_, h)| h.count() > 0);
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (labels, h) in &series {
            m.encode_family(labels)?.encode_histogram::<NoLabelSet>(
                h.sum(),
                h.count(),
                &h.buckets(),
                None,
            )?;
        }
        Ok(())
    }
}

/// `labels` with `extra` appended.
pub fn with(mut labels: Labels, extra: &[(&'static str, String)]) -> Labels {
    labels.extend(extra.iter().cloned());
    labels
}

/// 1 for true, 0 for false.
pub fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
