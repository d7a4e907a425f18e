//! The random source of a run: one ChaCha8 stream with the noise distributions, and
//! order-free draws (a value from a key alone, the same whichever order the simulator
//! asks in) for effects that must not move the stream when a scenario leaves them off.

use rand::RngExt as _;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng as _;
use rand_distr::{Distribution as _, Exp, Gamma, LogNormal, Pareto, StandardNormal, StudentT};

use super::scenario::{Noise, Span, Tails};

/// The random source of a run: one ChaCha8 stream, and the noise distributions.
pub struct Draw {
    rng: ChaCha8Rng,
    t: Option<StudentT<f64>>,
}

impl Draw {
    /// A stream from `seed`.
    pub fn new(seed: u64, dof: f64) -> Self {
        Draw {
            rng: ChaCha8Rng::seed_from_u64(seed),
            t: StudentT::new(dof).ok(),
        }
    }
    /// N(0, sd²).
    pub fn normal(&mut self, sd: f64) -> f64 {
        let z: f64 = StandardNormal.sample(&mut self.rng);
        z * sd
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p.min(1.0))
    }
    /// Uniform in `[lo, hi)` (lo when the range is empty).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        if hi > lo {
            self.rng.random_range(lo..hi)
        } else {
            lo
        }
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.random_range(0..n.max(1))
    }
    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        Exp::new(1.0 / mean.max(1e-9)).map_or(mean, |e| e.sample(&mut self.rng))
    }
    /// Log-normal with this mean and this standard deviation of its logarithm.
    pub fn lognormal(&mut self, mean: f64, log_sd: f64) -> f64 {
        let mu = mean.max(1e-9).ln() - log_sd * log_sd / 2.0;
        LogNormal::new(mu, log_sd).map_or(mean, |l| l.sample(&mut self.rng))
    }
    /// Pareto (a heavy tail) with this mean and tail index `alpha` (> 1, so that the
    /// mean exists).
    pub fn pareto(&mut self, mean: f64, alpha: f64) -> f64 {
        let scale = mean * (alpha - 1.0) / alpha;
        Pareto::new(scale.max(1e-9), alpha).map_or(mean, |p| p.sample(&mut self.rng))
    }
    /// A multiplier with mean 1 and coefficient of variation `cv` (gamma); 1 when cv is 0.
    pub fn jitter(&mut self, cv: f64) -> f64 {
        if cv <= 0.0 {
            return 1.0;
        }
        let shape = 1.0 / (cv * cv);
        Gamma::new(shape, 1.0 / shape).map_or(1.0, |g| g.sample(&mut self.rng))
    }
    /// One healthy probe's noise: the scenario's tails plus a spike now and then.
    pub fn noise(&mut self, n: &Noise) -> f64 {
        let base = match n.tails {
            Tails::Normal => self.normal(n.sd),
            Tails::StudentT => match self.t {
                // Scaled to standard deviation sd: Student-t's variance is ν / (ν − 2).
                Some(t) => t.sample(&mut self.rng) * n.sd / (n.dof / (n.dof - 2.0)).sqrt(),
                None => self.normal(n.sd),
            },
            Tails::Mixture => {
                if self.chance(n.mixture_share) {
                    self.normal(n.mixture_sd)
                } else {
                    self.normal(n.sd)
                }
            }
        };
        if self.chance(n.spike_rate) {
            base + self.normal(n.spike_sd).abs()
        } else {
            base
        }
    }
    /// A value of a span: itself, or uniform in its range.
    pub fn span(&mut self, s: Span) -> f64 {
        match s {
            Span::One(x) => x,
            Span::Range([a, b]) => self.uniform(a, b),
        }
    }
}

/// A uniform number in `[0, 1)` from `(seed, round, node)` alone (SplitMix64's finaliser):
/// the same whichever order the rounds and nodes are asked in.
pub fn unit_hash(seed: u64, round: u64, node: usize) -> f64 {
    let mut z = seed
        ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (node as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal number from `(seed, round, key)` alone (Box–Muller on two
/// [`unit_hash`] values).
pub fn normal_hash(seed: u64, round: u64, key: usize) -> f64 {
    let u1 = unit_hash(seed, round, key);
    let u2 = unit_hash(seed ^ 0x6e6f_726d_616c_0002, round, key);
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The new length distributions keep the asked mean (200,000 draws, within 2 %), and
    /// the order-free normal has mean 0 and deviation 1.
    #[test]
    fn lengths_keep_their_mean_and_the_hashed_normal_is_standard() {
        let mut d = Draw::new(7, 3.0);
        let n = 200_000;
        type Length = fn(&mut Draw) -> f64;
        let draws: [(&str, Length); 3] = [
            ("lognormal", |d| d.lognormal(10.0, 1.0)),
            ("pareto", |d| d.pareto(10.0, 2.5)),
            ("exponential", |d| d.exp(10.0)),
        ];
        for (name, f) in draws {
            let mean = (0..n).map(|_| f(&mut d)).sum::<f64>() / n as f64;
            assert!((mean / 10.0 - 1.0).abs() < 0.02, "{name}: mean {mean}");
        }
        let z: Vec<f64> = (0..n as u64).map(|r| normal_hash(3, r, 9)).collect();
        let mean = z.iter().sum::<f64>() / n as f64;
        let sd = (z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(mean.abs() < 0.01 && (sd - 1.0).abs() < 0.01, "{mean} {sd}");
        assert_eq!(normal_hash(3, 5, 9), normal_hash(3, 5, 9));
    }
}
