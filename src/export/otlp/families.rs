//! The collectors' families as OpenTelemetry sees them: a [`Sink`] that keeps them typed,
//! keyed by the exported name.
//!
//! Counters lose their `_total` (OpenTelemetry names counters without it; Prometheus' OTLP
//! ingestion adds it back). The SDK has no observable histogram, so a histogram becomes
//! three counters, `<name>_bucket` (cumulative, with `le`), `<name>_sum` and
//! `<name>_count`, exactly as the Prometheus exposition shows them.

use std::collections::BTreeMap;
use std::fmt;

use crate::export::prometheus::family::{Labels, Sink};
use crate::snapshot::histogram::Histogram;

/// A series' attributes.
pub type Attributes = Vec<(String, String)>;

/// One exported family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Exported as a monotonic sum (else a gauge).
    pub counter: bool,
    /// Description.
    pub help: String,
    /// Series and values.
    pub samples: Vec<(Attributes, f64)>,
}

/// Families by exported name.
pub type Families = BTreeMap<String, Family>;

/// A [`Sink`] that collects families for OTLP.
#[derive(Debug, Default)]
pub struct Collected(pub Families);

fn attributes(labels: &Labels) -> Attributes {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

impl Collected {
    fn push(&mut self, name: String, counter: bool, help: &str, samples: Vec<(Attributes, f64)>) {
        if samples.is_empty() {
            return;
        }
        self.0
            .entry(name)
            .or_insert_with(|| Family {
                counter,
                help: help.to_string(),
                samples: Vec::new(),
            })
            .samples
            .extend(samples);
    }
}

/// A bucket bound as the Prometheus text 0.0.4 encoder writes it (Go's shortest `%g`:
/// `1e-05`, `0.25`, `1`, `+Inf`), so the `le` attribute reads the same over both exports.
fn le(bound: f64) -> String {
    if bound.is_infinite() {
        return if bound > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if bound.fract() == 0.0 && bound.abs() < 1e6 {
        return format!("{}", bound as i64);
    }
    if (1e-4..1e6).contains(&bound.abs()) {
        return format!("{bound}");
    }
    let sci = format!("{bound:e}");
    match sci.split_once('e') {
        Some((mantissa, exp)) => match exp.parse::<i32>() {
            Ok(e) => format!("{mantissa}e{e:+03}"),
            Err(_) => sci,
        },
        None => sci,
    }
}

impl Sink for Collected {
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> fmt::Result {
        let samples = series.iter().map(|(l, v)| (attributes(l), *v)).collect();
        self.push(name.to_string(), false, help, samples);
        Ok(())
    }

    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> fmt::Result {
        let samples = series
            .iter()
            .map(|(l, v)| (attributes(l), *v as f64))
            .collect();
        self.push(name.to_string(), true, help, samples);
        Ok(())
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: Vec<(Labels, &Histogram)>,
    ) -> fmt::Result {
        let (mut buckets, mut sums, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        for (labels, h) in series.iter().filter(|(_, h)| h.count() > 0) {
            let base = attributes(labels);
            let mut cumulative = 0;
            for (bound, n) in h.buckets() {
                cumulative += n;
                let mut a = base.clone();
                a.push(("le".to_string(), le(bound)));
                buckets.push((a, cumulative as f64));
            }
            sums.push((base.clone(), h.sum()));
            counts.push((base, h.count() as f64));
        }
        self.push(format!("{name}_bucket"), true, help, buckets);
        self.push(format!("{name}_sum"), true, help, sums);
        self.push(format!("{name}_count"), true, help, counts);
        Ok(())
    }
}

/// The UCUM unit of an exported name, from its Prometheus suffix.
pub fn ucum(name: &str) -> &'static str {
    const UNITS: &[(&str, &str)] = &[
        ("_bytes_per_second", "By/s"),
        ("_bits_per_second", "bit/s"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_drop_total_and_histograms_become_three_cumulative_counters() {
        let mut c = Collected::default();
        c.gauge(
            "a_celsius",
            "Temp.",
            vec![(vec![("npu", "0".into())], 45.5)],
        )
        .unwrap();
        c.counter("b", "Count.", vec![(vec![("d", "rx".into())], 7)])
            .unwrap();
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 3.0] {
            h.observe(v);
        }
        c.histogram("h_seconds", "Lat.", vec![(vec![], &h)])
            .unwrap();
        c.gauge("empty", "No series.", vec![]).unwrap();
        let f = c.0;
        assert!(!f["a_celsius"].counter);
        assert_eq!(f["a_celsius"].help, "Temp.");
        assert_eq!(f["a_celsius"].samples[0].1, 45.5);
        assert!(f["b"].counter);
        assert_eq!(f["b"].samples[0].1, 7.0);
        let buckets: Vec<(String, f64)> = f["h_seconds_bucket"]
            .samples
            .iter()
            .map(|(a, v)| (a[0].1.clone(), *v))
            .collect();
        assert_eq!(
            buckets,
            vec![("0.1".into(), 1.0), ("1".into(), 2.0), ("+Inf".into(), 3.0)]
        );
        assert!((f["h_seconds_sum"].samples[0].1 - 3.55).abs() < 1e-12);
        assert_eq!(f["h_seconds_count"].samples[0].1, 3.0);
        assert!(!f.contains_key("empty"));
        assert_eq!(le(1e-5), "1e-05");
        assert_eq!(le(2.5e-5), "2.5e-05");
        assert_eq!(le(2.5), "2.5");
        assert_eq!(le(1e7), "1e+07");
        assert_eq!(ucum("hcclwatch_npu_temperature_celsius"), "Cel");
        assert_eq!(ucum("hcclwatch_link_bandwidth_bytes_per_second"), "By/s");
        assert_eq!(ucum("hcclwatch_npu_port_speed_bits_per_second"), "bit/s");
        assert_eq!(ucum("h_seconds_sum"), "s");
        assert_eq!(ucum("hcclwatch_npu_roce_packets"), "{packet}");
    }
}
