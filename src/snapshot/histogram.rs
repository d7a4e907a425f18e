//! A fixed-bucket histogram the probe loop fills and the exporter reads.
//!
//! The metrics registry is built from snapshots (one collector reads the shared store), so
//! the probe loop keeps its own bucket counts here instead of a live registry metric; the
//! exporter encodes them as a Prometheus histogram.

/// Upper bounds, in seconds, for probe timings: 10 µs to 10 s, roughly ×2.5 per step, which
/// spans a loopback exchange and a multi-megabyte ring over a congested fabric.
pub const SECONDS_BUCKETS: &[f64] = &[
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds, in seconds, for a verdict's way from its first evidence to the
/// recommendation: 1 s (a hard fault, recommended in the round that sees it) to 1 h.
pub const EPISODE_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
];

/// Observation counts per bucket (not cumulative), plus sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the overflow (+Inf) bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value. A NaN or negative value is a measurement bug upstream, not a
    /// duration, so it is dropped rather than skewing the sum.
    pub fn observe(&mut self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Sum of observed values.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observed values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// `(upper bound, count in that bucket)` pairs, ending with `+Inf`; counts are per
    /// bucket, which is what the encoder accumulates.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new(SECONDS_BUCKETS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_holds_them() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 1.0, 3.0, f64::NAN, -1.0] {
            h.observe(v);
        }
        assert_eq!(h.buckets(), vec![(0.1, 2), (1.0, 2), (f64::INFINITY, 1)]);
        assert_eq!(h.count(), 5);
        assert!((h.sum() - 4.65).abs() < 1e-12);
    }
}
