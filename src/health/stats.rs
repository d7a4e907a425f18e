//! The robust statistics both planes judge by: the median, the robust spread (1.4826 ×
//! the median absolute deviation, the normal's σ for normal data), a round's reference
//! (what each measurement's residual is taken against) and binomial tails.

use statrs::distribution::{Binomial, DiscreteCDF};

/// Scales a median absolute deviation to the σ of normal data.
const MAD_SCALE: f64 = 1.4826;

/// Median of a slice (NaN-free input); 0 for an empty slice. Sorts the slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Absolute deviations of `v` from `centre`.
pub(crate) fn deviations(v: &[f64], centre: f64) -> Vec<f64> {
    v.iter().map(|x| (x - centre).abs()).collect()
}

/// Robust spread from absolute deviations: 1.4826 × their median (0 for none). Sorts them.
pub(crate) fn spread_of(deviations: &mut [f64]) -> f64 {
    MAD_SCALE * median(deviations)
}

/// Robust spread of a sample around its own median.
pub(crate) fn robust_spread(v: &[f64]) -> f64 {
    let m = median(&mut v.to_vec());
    spread_of(&mut deviations(v, m))
}

/// The largest log value or residual a state taken from a peer may carry: no two positive
/// finite timings are further apart in log than about 1,455, so 10,000 holds every value an
/// engine computes, while sums and differences of a window of them stay finite.
pub(crate) const MAX_LOG: f64 = 1e4;

/// The least spread a round is given whatever the configured floor (which may be 0): a
/// round of identical timings would otherwise divide by zero, and its z (infinite, or not
/// a number) would be kept in the windows and in the state a member sends.
pub(crate) const MIN_SPREAD: f64 = 1e-9;

/// What a round's measurements are judged against: the median of their logs and the robust
/// spread around it (floored, so that tight data cannot manufacture a large z). Each
/// measurement's residual is its log minus the median: peer-relative, so a dip everything
/// shares moves the median, not the residuals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reference {
    /// Median log of the round's measurements (0 without any).
    pub median_log: f64,
    /// Robust spread of the logs around it, at least the floor.
    pub spread: f64,
}

impl Reference {
    /// The reference of `logs`, its spread floored at `floor` and at [`MIN_SPREAD`].
    pub fn of(logs: &[f64], floor: f64) -> Self {
        let median_log = median(&mut logs.to_vec());
        let spread = spread_of(&mut deviations(logs, median_log))
            .max(floor)
            .max(MIN_SPREAD);
        Reference { median_log, spread }
    }

    /// A value's log residual against the round.
    pub fn residual(&self, value: f64) -> f64 {
        value.ln() - self.median_log
    }
}

/// P(X ≥ `k`) for X ~ Bin(`n`, `p`): how unlikely `k` events in `n` trials are at rate `p`.
/// 1 when `k` or `n` is 0, or when `p` is not a probability.
pub(crate) fn upper_tail(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 || n == 0 {
        return 1.0;
    }
    Binomial::new(p, n).map_or(1.0, |b| b.sf(k - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_cases() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn the_binomial_tail_is_what_it_says() {
        // P(X ≥ 1) for Bin(10, 0.1) = 1 − 0.9^10.
        assert!((upper_tail(1, 10, 0.1) - (1.0 - 0.9f64.powi(10))).abs() < 1e-12);
        assert_eq!(upper_tail(0, 10, 0.1), 1.0);
        // P(X ≥ 10) for Bin(10, 0.5) = 0.5^10.
        assert!((upper_tail(10, 10, 0.5) - 0.5f64.powi(10)).abs() < 1e-12);
        assert_eq!(upper_tail(3, 0, 0.5), 1.0);
    }

    /// 1, 2, 3, 4, 100: median 3, deviations 2, 1, 0, 1, 97, their median 1.
    #[test]
    fn the_robust_spread_ignores_an_outlier() {
        assert!((robust_spread(&[1.0, 2.0, 3.0, 4.0, 100.0]) - 1.4826).abs() < 1e-12);
        let r = Reference::of(&[0.0, 0.0, 0.0], 0.01);
        assert_eq!((r.median_log, r.spread), (0.0, 0.01));
    }
}
