//! Congestion episodes: when each element's episodes start, how long they last, how much
//! they slow their probes. Gaps between episodes are exponential (a Poisson process per
//! element); lengths follow the process's `lengths` distribution around `mean_rounds`.

use serde::{Deserialize, Serialize};

use super::draw::Draw;
use super::scenario::{Congestion, Element, Plane};
use super::topology::Topology;

/// How a process's episode lengths are drawn; every one has mean `mean_rounds` (before
/// `max_rounds` cuts it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lengths {
    /// Exponential (memoryless: most short, a few several times the mean).
    #[default]
    Exponential,
    /// Bounded: uniform between 1 and 2 × mean − 1 rounds.
    Uniform,
    /// Lognormal, with `length_sd` the deviation of the length's logarithm.
    Lognormal,
    /// Pareto (heavy-tailed: a few episodes last very long), tail index `length_alpha`.
    Pareto,
}

impl Lengths {
    /// Whether this is the default.
    pub fn is_exponential(&self) -> bool {
        *self == Lengths::Exponential
    }
}

/// Lognormal lengths without `length_sd`: the deviation of the logarithm.
pub const DEFAULT_LENGTH_SD: f64 = 1.0;
/// Pareto lengths without `length_alpha`: the tail index.
pub const DEFAULT_LENGTH_ALPHA: f64 = 1.5;

/// A congestion episode: ground truth, for scoring.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// Number, in order of the scenario's processes.
    pub id: usize,
    /// Where.
    pub on: Element,
    /// Which plane.
    pub plane: Plane,
    /// Node (host uplink), global port (device uplink), ToR or spine number.
    pub element: usize,
    /// First round.
    pub start: u64,
    /// First round after it.
    pub end: u64,
    /// Log slowdown of its probes (mean, before jitter).
    pub magnitude: f64,
    /// Per-probe variation.
    pub jitter: f64,
    /// Device-plane packet loss.
    pub loss: f64,
    /// It shows in the counters of the nodes whose traffic it slows.
    pub visible: bool,
}

/// One episode's length in rounds (at least 1).
fn length(c: &Congestion, d: &mut Draw) -> f64 {
    let mean = c.mean_rounds;
    let len = match c.lengths {
        // As before the other distributions existed: the same draws from the stream.
        Lengths::Exponential => d.exp(mean),
        Lengths::Uniform => d.uniform(1.0, (2.0 * mean - 1.0).max(1.0)),
        Lengths::Lognormal => d.lognormal(mean, c.length_sd.unwrap_or(DEFAULT_LENGTH_SD)),
        Lengths::Pareto => d.pareto(mean, c.length_alpha.unwrap_or(DEFAULT_LENGTH_ALPHA)),
    };
    let len = c.max_rounds.map_or(len, |m| len.min(m));
    len.round().max(1.0)
}

/// Episodes of one congestion process: exponential gaps between episodes on each element,
/// lengths by the process's distribution, |N(0, sd)| magnitudes.
pub fn draw(c: &Congestion, t: &Topology, d: &mut Draw, rounds: u64, out: &mut Vec<Episode>) {
    if c.rate <= 0.0 {
        return;
    }
    let count = match (c.on, c.plane) {
        (Element::Uplink, Plane::Device) => t.nodes * t.npus,
        (Element::Uplink, _) => t.nodes,
        (Element::Tor, _) => t.tors(),
        (Element::Spine, _) => t.spines,
    };
    let elements: Vec<usize> = if c.at.is_empty() {
        (0..count).collect()
    } else {
        c.at.clone()
    };
    for element in elements {
        let mut r = 0.0;
        loop {
            r += d.exp(1.0 / c.rate).ceil().max(1.0);
            if r > rounds as f64 {
                break;
            }
            let len = length(c, d);
            out.push(Episode {
                id: out.len(),
                on: c.on,
                plane: c.plane,
                element,
                start: r as u64,
                end: (r + len) as u64,
                magnitude: d.normal(c.magnitude_sd).abs(),
                jitter: c.jitter,
                loss: c.loss,
                visible: false,
            });
            r += len;
        }
    }
}
