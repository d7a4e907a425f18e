//! An injected fault as ground truth: what it hits, when, how strongly, and how its effect
//! develops round by round (its shape, and for a varying straggler its spread).

use serde::Serialize;

use super::draw::normal_hash;
use super::scenario::{DipScope, FaultKind, Plane, Shape};

/// What a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Target {
    /// A node.
    Node(usize),
    /// A host link src → dst (and back when `both`).
    Link {
        /// Sender.
        src: usize,
        /// Receiver.
        dst: usize,
        /// Both directions.
        both: bool,
    },
    /// A global NPU port.
    Port(usize),
    /// Two global NPU ports.
    PortPair(usize, usize),
    /// A ToR.
    Tor(usize),
    /// The fabric (a share of it, or a spine, a ToR pair, a ToR's uplinks: `scope`).
    Fabric,
}

/// The golden ratio's fraction: spreads one uniform key into uncorrelated-looking subsets
/// for successive dips.
const PHI: f64 = 0.618_033_988_749_895;

/// An injected fault: ground truth, for scoring.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// Number, in order of the scenario's `[[fault]]` entries.
    pub id: usize,
    /// Kind.
    pub kind: FaultKind,
    /// Plane.
    pub plane: Plane,
    /// What it hits.
    pub target: Target,
    /// First round.
    pub onset: u64,
    /// First round after it (the run's end + 1 when persistent).
    pub end: u64,
    /// Whether it lasts to the end of the run.
    pub persistent: bool,
    /// Host-plane slowdown (fraction).
    pub magnitude: f64,
    /// Device-plane loss.
    pub loss: f64,
    /// Device-plane RTT multiplier.
    pub rtt: f64,
    /// Fabric dip: share of links.
    pub share: f64,
    /// Fabric dip: which links.
    pub scope: DipScope,
    /// Fabric dip: the spine, the ToR pair or the ToR of its scope.
    pub at: Vec<usize>,
    /// Round-to-round spread of the host slowdown, as a share of the magnitude.
    pub spread: f64,
    /// Hard fault: the node's NPU pings are lost while it lasts.
    pub silent: bool,
    /// Slow node: it shows a hardware sign on its node's interface while it is on.
    pub hardware: bool,
    /// Shape.
    pub shape: Shape,
    pub(crate) ramp_rounds: u64,
    pub(crate) period: u64,
    pub(crate) duty: f64,
    pub(crate) down_rounds: u64,
    /// Random shape: the stretches it is on, `[start, end)` in rounds, in order.
    #[serde(skip)]
    pub(crate) on_spans: Vec<(u64, u64)>,
    /// Seeds the order-free spread draws.
    #[serde(skip)]
    pub(crate) salt: u64,
}

impl Fault {
    /// The share of its full effect the fault has in round `r` (0 outside its life).
    pub fn intensity(&self, r: u64) -> f64 {
        if r < self.onset || r >= self.end {
            return 0.0;
        }
        let t = r - self.onset;
        match self.shape {
            Shape::Step => 1.0,
            Shape::Ramp => ((t + 1) as f64 / self.ramp_rounds.max(1) as f64).min(1.0),
            Shape::Intermittent => {
                let on = (self.duty * self.period as f64).round().max(1.0) as u64;
                f64::from(u8::from(t % self.period.max(1) < on))
            }
            Shape::Flapping => f64::from(u8::from(t % self.period.max(1) < self.down_rounds)),
            Shape::Random => {
                let k = self.on_spans.partition_point(|s| s.0 <= r);
                let on = k > 0 && r < self.on_spans[k - 1].1;
                f64::from(u8::from(on))
            }
        }
    }

    /// Host log slowdown in round `r`.
    pub(crate) fn host(&self, r: u64) -> f64 {
        let i = self.intensity(r);
        if i <= 0.0 {
            return 0.0;
        }
        let mut m = self.magnitude * i;
        if self.spread > 0.0 {
            // One draw per round, the same for every probe of the round: the straggler is
            // slower in some rounds than in others, not from probe to probe.
            m *= (1.0 + self.spread * normal_hash(self.salt, r, self.id)).max(0.0);
        }
        (1.0 + m).ln()
    }

    /// Device loss and log RTT factor in round `r` (a flap without loss given is down).
    pub(crate) fn device(&self, r: u64) -> (f64, f64) {
        let i = self.intensity(r);
        if i <= 0.0 {
            return (0.0, 0.0);
        }
        let loss = if self.shape == Shape::Flapping && self.loss == 0.0 && self.rtt <= 1.0 {
            1.0
        } else {
            self.loss * i
        };
        (loss, (1.0 + (self.rtt - 1.0) * i).ln())
    }

    /// Whether this fabric dip touches the pair between ToRs `ta`, `tb` and probe groups
    /// `ga`, `gb` that hashes onto `spine`; `key` is the pair's uniform dip key.
    pub(crate) fn dip_touches(
        &self,
        key: f64,
        spine: usize,
        (ta, tb): (usize, usize),
        (ga, gb): (usize, usize),
    ) -> bool {
        let share = || (key + self.id as f64 * PHI).fract() < self.share;
        let at = |k: usize| self.at.get(k).copied().unwrap_or(usize::MAX);
        match self.scope {
            // A partial dip touches a fixed share of the links, a different subset per dip.
            DipScope::Random => share(),
            DipScope::Spine => ta != tb && spine == at(0),
            DipScope::TorPair => {
                ta != tb && ((ta, tb) == (at(0), at(1)) || (tb, ta) == (at(0), at(1)))
            }
            DipScope::TorUplinks => ta != tb && (ta == at(0) || tb == at(0)),
            DipScope::CrossGroup => ga != gb && share(),
        }
    }

    /// Whether the fault is a degraded link or port pair between probe groups.
    pub fn between_groups(&self, group_of: &[usize], port_node: impl Fn(usize) -> usize) -> bool {
        match self.target {
            Target::Link { src, dst, .. } => group_of[src] != group_of[dst],
            Target::PortPair(a, b) => group_of[port_node(a)] != group_of[port_node(b)],
            _ => false,
        }
    }
}
