//! Honest scoring of fault episodes: per episode, never per transition.
//!
//! - **Recall** is per fault episode, by kind, plane, magnitude band and shape; the times
//!   run from onset to the first verdict of each level (a verdict already open at onset
//!   counts as reached at onset).
//! - **Localisation**: a detected fault is localised when no verdict of another class
//!   pointed at its elements while it lasted (a link verdict on a slow node's pair, a node
//!   verdict on a degraded link's end, a node verdict on a port's node, …); a fabric or
//!   ToR event only when it is also named (a dip by a fabric verdict, a ToR by a ToR
//!   verdict) and none of its members was blamed.
//! - **Time targets** leave an episode out only when an event crossed the fault's own
//!   probes early on ([`Scorer`]'s `left_out`), and say why.
//!
//! Every verdict's own judgement (correct or false, and its cause) is in
//! [`super::classes`] and [`super::causes`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::scenario::{DipScope, Element, FaultKind, Plane, Shape};
use super::truth::Truth;
use super::verdicts::{Level, Verdict, Verdicts};
use super::world::{Fault, Target, World};

/// One fault episode as one engine saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The fault's number.
    pub fault: usize,
    /// Kind.
    pub kind: FaultKind,
    /// What it hit.
    pub target: Target,
    /// Onset round.
    pub onset: u64,
    /// The plane judged (a slow node on both planes is judged on each).
    pub plane: Plane,
    /// Magnitude band.
    pub band: &'static str,
    /// Shape.
    pub shape: Shape,
    /// Host slowdown (fraction).
    pub magnitude: f64,
    /// Device loss.
    pub loss: f64,
    /// Device RTT multiplier.
    pub rtt: f64,
    /// Rounds from onset to the first suspect (or stronger) verdict.
    pub suspect: Option<u64>,
    /// … to the first confirmed (or stronger).
    pub confirmed: Option<u64>,
    /// … to the first quarantine recommendation.
    pub quarantine: Option<u64>,
    /// … to the verdict that counts as detection for this kind.
    pub detected: Option<u64>,
    /// A degraded link: … to the first round the shipped link alert fired on it
    /// ([`super::link_alerts`]).
    pub alerted: Option<u64>,
    /// A verdict of another class pointed at the fault's elements.
    pub wrong: bool,
    /// Detected, named as what it is, and no verdict of another class on its elements.
    pub localised: bool,
    /// Counted by the time targets: no event crossed its own probes early on.
    pub timed: bool,
    /// Why the time targets leave it out (None: they count it).
    pub left_out: Option<String>,
    /// Its entity already had a (false) verdict open when it began: its times count from
    /// onset as 0 at that verdict's levels.
    pub open_at_onset: bool,
    /// A link or port pair between probe groups: no probe crosses it.
    pub between_groups: bool,
}

/// Rounds after onset during which an event on a fault's own probes takes it out of the
/// time targets (in the plane's engine rounds).
pub const TIMED_ROUNDS: u64 = 30;

/// A false verdict and what it overlapped.
#[derive(Debug, Clone, Serialize)]
pub struct FalseVerdict {
    /// What was accused: `node 12`, `link 3→9`, `port 40 (node 5 npu 0)`, …
    pub entity: String,
    /// Class (`suspect`, `confirmed`, `quarantine`, `cordon`, `link`, `port …`, `pair`,
    /// `device node`, `fabric (host)`, `fabric (device)`).
    pub level: String,
    /// First round.
    pub round: u64,
    /// Cause class (`uplink congestion`, `ToR congestion`, `spine congestion`, `fabric
    /// dip`, `slow ToR`, `degraded link endpoint`, `slow node endpoint`, …, `noise`).
    pub cause: String,
    /// Which episode or fault.
    pub detail: String,
}

/// Verdicts at one level.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LevelStats {
    /// Level name.
    pub level: String,
    /// Verdicts.
    pub verdicts: usize,
    /// Of which correct.
    pub correct: usize,
    /// Correct ÷ verdicts (1 when there are none).
    pub precision: f64,
    /// False verdicts per 1000 healthy node-hours.
    pub false_per_1000_node_hours: f64,
}

/// Scores a run.
pub struct Scorer<'a> {
    pub(crate) w: &'a World,
    pub(crate) v: &'a Verdicts,
    pub(crate) truth: &'a Truth,
    /// Rounds after a fault's end during which a new verdict still counts as its own.
    pub(crate) grace: u64,
    /// Rounds before a false verdict searched for its cause.
    pub(crate) lookback: u64,
    /// Probe rounds per device-plane round: the device plane's grace, look-back and timed
    /// span are as many of its own rounds, so that many times as many probe rounds.
    pub(crate) device_every: u64,
}

/// Whether two `[first, after)` spans of rounds overlap.
pub(crate) fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Rounds from the window's first round to the first span overlapping it (0 for one
/// already open).
fn span_first(spans: impl Iterator<Item = (u64, u64)>, win: (u64, u64)) -> Option<u64> {
    spans
        .filter(|s| overlaps(*s, win))
        .map(|s| s.0.saturating_sub(win.0))
        .min()
}

/// The band a fault's strength falls in.
pub fn band(f: &Fault, plane: Plane) -> &'static str {
    if f.kind == FaultKind::HardFault {
        return if f.persistent {
            "persistent"
        } else {
            "transient"
        };
    }
    if plane == Plane::Device {
        return if f.loss >= 0.05 || f.rtt >= 2.0 || f.shape == Shape::Flapping {
            "≥5% loss or ≥2× RTT"
        } else {
            "<5% loss and <2× RTT"
        };
    }
    if f.magnitude >= 0.2 - 1e-9 {
        "≥20%"
    } else if f.magnitude >= 0.1 - 1e-9 {
        "10–20%"
    } else {
        "<10%"
    }
}

impl<'a> Scorer<'a> {
    /// A scorer over a world, its truth and its verdicts; `window` is the engines' window
    /// in rounds.
    pub fn new(
        w: &'a World,
        truth: &'a Truth,
        v: &'a Verdicts,
        window: u64,
        device_every: u64,
    ) -> Self {
        Scorer {
            w,
            v,
            truth,
            grace: window + 5,
            lookback: 2 * window + 5,
            device_every: device_every.max(1),
        }
    }

    /// The grace of a device-plane verdict, in probe rounds.
    pub(crate) fn device_grace(&self) -> u64 {
        self.grace * self.device_every
    }

    /// The look-back of a device-plane verdict's cause, in probe rounds.
    pub(crate) fn device_lookback(&self) -> u64 {
        self.lookback * self.device_every
    }

    /// The rounds during which a verdict still belongs to fault `f`.
    fn window(&self, f: &Fault) -> (u64, u64) {
        (f.onset, f.end.saturating_add(self.grace))
    }

    /// Every fault episode, on every plane it touches.
    pub fn outcomes(&self) -> Vec<Outcome> {
        let mut out = Vec::new();
        for f in &self.w.faults {
            let planes: &[Plane] = match (f.kind, f.plane) {
                (FaultKind::SlowPort | FaultKind::PortPair, _) => &[Plane::Device],
                (_, Plane::Both) => &[Plane::Host, Plane::Device],
                (_, Plane::Device) => &[Plane::Device],
                _ => &[Plane::Host],
            };
            for &p in planes {
                out.push(self.outcome(f, p));
            }
        }
        out
    }

    fn outcome(&self, f: &Fault, plane: Plane) -> Outcome {
        let left_out = self.left_out(f, plane);
        let mut o = Outcome {
            fault: f.id,
            kind: f.kind,
            target: f.target,
            onset: f.onset,
            plane,
            band: band(f, plane),
            shape: f.shape,
            magnitude: f.magnitude,
            loss: f.loss,
            rtt: f.rtt,
            suspect: None,
            confirmed: None,
            quarantine: None,
            detected: None,
            alerted: None,
            wrong: false,
            localised: false,
            timed: left_out.is_none(),
            left_out,
            open_at_onset: false,
            between_groups: f.between_groups(&self.w.topo.group_of, |p| self.w.topo.port_node(p)),
        };
        if o.between_groups {
            o.band = "between groups";
        }
        let win = self.window(f);
        match (f.target, plane) {
            (Target::Node(n), Plane::Host) => self.host_node_outcome(f, n, win, &mut o),
            (Target::Node(n), _) => self.device_node_outcome(n, win, &mut o),
            (Target::Link { src, dst, .. }, _) => self.link_outcome(src, dst, win, &mut o),
            (Target::Port(p), _) => self.port_outcome(p, win, &mut o),
            (Target::PortPair(a, b), _) => {
                let key = (a.min(b), a.max(b));
                o.detected = span_first(
                    self.v
                        .pairs
                        .iter()
                        .filter(|x| x.0 == key)
                        .map(|x| (x.1, x.2)),
                    win,
                );
                o.suspect = o.detected;
                o.wrong = self
                    .v
                    .ports
                    .iter()
                    .any(|x| (x.who == a || x.who == b) && overlaps((x.start, x.end), win));
            }
            (Target::Tor(_) | Target::Fabric, _) => self.fabric_outcome(f, plane, win, &mut o),
        }
        if !matches!(f.target, Target::Tor(_) | Target::Fabric) {
            o.localised = o.detected.is_some() && !o.wrong;
        }
        o
    }

    /// Rounds from onset to the first verdict at `l` or above on an entity `who` accepts
    /// (of the fault's hardness) in the window; a verdict already open at onset counts as
    /// reached at onset.
    fn first(
        verdicts: &[Verdict],
        who: &dyn Fn(usize) -> bool,
        l: Level,
        hard: bool,
        win: (u64, u64),
    ) -> Option<u64> {
        verdicts
            .iter()
            .filter(|v| v.level >= l && v.hard == hard && who(v.who))
            .filter(|v| overlaps((v.start, v.end), win))
            .map(|v| v.start.saturating_sub(win.0))
            .min()
    }

    fn open_at(verdicts: &[Verdict], who: &dyn Fn(usize) -> bool, onset: u64) -> bool {
        verdicts
            .iter()
            .any(|v| !v.hard && who(v.who) && v.start < onset && onset < v.end)
    }

    fn host_node_outcome(&self, f: &Fault, n: usize, win: (u64, u64), o: &mut Outcome) {
        let v = self.v;
        let hard = f.kind == FaultKind::HardFault;
        let me = |x: usize| x == n;
        o.suspect = Self::first(&v.nodes, &me, Level::Suspect, hard, win);
        o.confirmed = Self::first(&v.nodes, &me, Level::Confirmed, hard, win);
        o.quarantine = Self::first(&v.nodes, &me, Level::Quarantine, hard, win);
        o.detected = o.quarantine;
        o.open_at_onset = !hard && Self::open_at(&v.nodes, &me, f.onset);
        o.wrong = !hard
            && v.links.iter().any(|((a, b), s, e)| {
                (*a == n || *b == n)
                    && overlaps((*s, *e), win)
                    && !self.congested(&[*a, *b], &[], *s)
                    && !self.link_correct(*a, *b, *s)
            });
    }

    fn device_node_outcome(&self, n: usize, win: (u64, u64), o: &mut Outcome) {
        let v = self.v;
        let topo = &self.w.topo;
        o.detected = span_first(
            v.device_nodes
                .iter()
                .filter(|x| x.0 == n)
                .map(|x| (x.1, x.2)),
            win,
        );
        o.suspect = o.detected;
        o.wrong = v.ports.iter().any(|x| {
            topo.port_node(x.who) == n && overlaps((x.start, x.end), win) && !self.port_correct(x)
        });
    }

    fn link_outcome(&self, src: usize, dst: usize, win: (u64, u64), o: &mut Outcome) {
        let v = self.v;
        // Re-measurements are exchanges (the slower direction), so a verdict on the
        // reverse direction names the same link.
        let me = |a: usize, b: usize| (a, b) == (src, dst) || (a, b) == (dst, src);
        o.detected = span_first(
            v.links
                .iter()
                .filter(|x| me(x.0.0, x.0.1))
                .map(|x| (x.1, x.2)),
            win,
        );
        o.suspect = o.detected;
        o.alerted = span_first(
            v.link_alerts
                .iter()
                .filter(|x| me(x.pair.0, x.pair.1))
                .map(|x| (x.start, x.end)),
            win,
        );
        o.wrong = v.nodes.iter().any(|x| {
            !x.hard
                && (x.who == src || x.who == dst)
                && overlaps((x.start, x.end), win)
                && !self.congested(&[x.who], &[], x.start)
                && !self.node_correct(x)
        });
    }

    fn port_outcome(&self, p: usize, win: (u64, u64), o: &mut Outcome) {
        let v = self.v;
        let topo = &self.w.topo;
        let me = |x: usize| x == p;
        o.suspect = Self::first(&v.ports, &me, Level::Suspect, false, win);
        o.confirmed = Self::first(&v.ports, &me, Level::Confirmed, false, win);
        o.quarantine = Self::first(&v.ports, &me, Level::Quarantine, false, win);
        o.detected = o.suspect;
        o.open_at_onset = Self::open_at(&v.ports, &me, win.0);
        let node = topo.port_node(p);
        o.wrong = v.ports.iter().any(|x| {
            x.who != p
                && topo.port_node(x.who) == node
                && overlaps((x.start, x.end), win)
                && !self.port_correct(x)
                && !self.congested(&[node], &[x.who], x.start)
        }) || v.device_nodes.iter().any(|x| {
            x.0 == node
                && overlaps((x.1, x.2), win)
                && !self.device_node_correct(x.0, x.1)
                && !self.congested(&[node], &self.ports_of(node), x.1)
        }) || v
            .pairs
            .iter()
            .any(|x| (x.0.0 == p || x.0.1 == p) && overlaps((x.1, x.2), win));
    }

    /// Why a fault's episode is left out of the time targets, if it is: an event crossed
    /// the fault's own probes in its first [`TIMED_ROUNDS`] rounds (of its plane's
    /// engine): congestion on its node's uplink (or its port's link), congestion or a
    /// slow ToR on its ToR, congestion on a spine its pairs cross, or a fabric dip on its
    /// pairs. Nothing else leaves an episode out.
    fn left_out(&self, f: &Fault, plane: Plane) -> Option<String> {
        let topo = &self.w.topo;
        let (nodes, ports): (Vec<usize>, Vec<usize>) = match f.target {
            Target::Node(n) => (vec![n], self.ports_of(n)),
            Target::Link { src, dst, .. } => (vec![src, dst], Vec::new()),
            Target::Port(p) => (vec![topo.port_node(p)], vec![p]),
            Target::PortPair(a, b) => (vec![topo.port_node(a), topo.port_node(b)], vec![a, b]),
            Target::Tor(_) | Target::Fabric => return None,
        };
        let timed = match plane {
            Plane::Host => TIMED_ROUNDS,
            _ => TIMED_ROUNDS * self.device_every,
        };
        let early = (f.onset, f.onset + timed);
        let on_plane = |p: Plane| {
            if plane == Plane::Host {
                p.host()
            } else {
                p.device()
            }
        };
        let tors: Vec<usize> = nodes.iter().map(|n| topo.tor(*n)).collect();
        let mut spines = vec![false; topo.spines];
        let mut peers = Vec::new();
        for &n in &nodes {
            for &m in &topo.groups[topo.group_of[n]] {
                if m != n {
                    peers.push((n, m));
                    if topo.tor(m) != topo.tor(n) {
                        spines[self.w.spine_of(n, m)] = true;
                    }
                }
            }
        }
        let live = |a: u64, b: u64| overlaps((a, b), early);
        let mut reasons = [false; 4];
        for e in self
            .w
            .episodes
            .iter()
            .filter(|e| on_plane(e.plane) && live(e.start, e.end))
        {
            match (e.on, e.plane) {
                (Element::Uplink, Plane::Device) if ports.contains(&e.element) => reasons[0] = true,
                (Element::Uplink, Plane::Host) if nodes.contains(&e.element) => reasons[0] = true,
                (Element::Tor, _) if tors.contains(&e.element) => reasons[1] = true,
                (Element::Spine, _) if spines[e.element] => reasons[2] = true,
                _ => {}
            }
        }
        for g in self
            .w
            .faults
            .iter()
            .filter(|g| on_plane(g.plane) && live(g.onset, g.end))
        {
            match g.target {
                Target::Tor(t) if tors.contains(&t) => reasons[1] = true,
                Target::Fabric if peers.iter().any(|(a, b)| self.w.dip_touches(g, *a, *b)) => {
                    reasons[3] = true;
                }
                _ => {}
            }
        }
        const WHY: [&str; 4] = [
            "congestion on its own uplink or port",
            "congestion or a slow ToR on its ToR",
            "congestion on a spine its pairs cross",
            "a fabric dip on its pairs",
        ];
        reasons.iter().position(|x| *x).map(|k| WHY[k].to_string())
    }

    /// The first round after a ToR or fabric event's onset, within `win`, of the verdict
    /// that names it (None for a dip no verdict but the fabric one names).
    fn named(&self, f: &Fault, plane: Plane, win: (u64, u64)) -> Option<u64> {
        let v = self.v;
        let groups = &self.truth.faults[f.id].groups;
        // A ToR verdict on the slow ToR (of its plane) names it.
        let tor_verdicts = if plane == Plane::Host {
            &v.host_tors
        } else {
            &v.device_tors
        };
        // A dip on one spine's pairs is named by a spine verdict of its plane in a group
        // it touches.
        let by_spine = f.kind == FaultKind::FabricDip && f.scope == DipScope::Spine;
        let spines = if plane == Plane::Host {
            &v.host_spines
        } else {
            &v.device_spines
        };
        // A dip on one ToR's uplinks is named by the host mark of that ToR's slow uplinks
        // (the device plane has none); a slow ToR by a ToR verdict, never by a mark (which
        // says the ToR is fine).
        let uplinks_of = (f.kind == FaultKind::FabricDip && f.scope == DipScope::TorUplinks)
            .then(|| f.at.first().copied())
            .flatten();
        let marks: &[(usize, u64, u64)] = if plane == Plane::Host {
            &v.host_uplinks
        } else {
            &[]
        };
        let on_tor = |list: &[(usize, u64, u64)], t: usize| {
            list.iter()
                .filter(|x| x.0 == t && overlaps((x.1, x.2), win))
                .map(|x| x.1.saturating_sub(f.onset))
                .min()
        };
        match (f.target, uplinks_of) {
            (Target::Tor(t), _) => on_tor(tor_verdicts, t),
            (_, Some(t)) => on_tor(marks, t),
            _ if by_spine => spines
                .iter()
                .filter(|x| groups.contains(&x.0) && overlaps((x.1, x.2), win))
                .map(|x| x.1.saturating_sub(f.onset))
                .min(),
            _ => None,
        }
    }

    /// A ToR or fabric event is detected by a fabric verdict in a group it touches, or by
    /// the verdict that names it; localised when it is also *named* (a dip by that fabric
    /// verdict or, on one ToR's uplinks, by the host mark of that ToR's slow uplinks; a
    /// dip on one spine's pairs only by a spine verdict of its plane; a slow ToR only by
    /// a ToR verdict on it, of its plane) and no verdict at confirmed or above
    /// fell on its members (and, for a dip, no link or pair verdict) while it lasted.
    /// Verdicts that are correct in their own right (a degraded link, a bad port pair, a
    /// slow node) or that congestion explains are not held against it: a dip says nothing
    /// of a fault that was there all along.
    fn fabric_outcome(&self, f: &Fault, plane: Plane, win: (u64, u64), o: &mut Outcome) {
        let topo = &self.w.topo;
        let v = self.v;
        let groups = &self.truth.faults[f.id].groups;
        let nodes: Vec<usize> = match f.target {
            Target::Tor(t) => topo.tor_nodes(t).collect(),
            _ => groups
                .iter()
                .flat_map(|g| topo.groups[*g].iter().copied())
                .collect(),
        };
        let mut nodes = nodes;
        nodes.sort_unstable();
        let flags = if plane == Plane::Host {
            &v.host_fabric
        } else {
            &v.device_fabric
        };
        let by_spine = f.kind == FaultKind::FabricDip && f.scope == DipScope::Spine;
        let named = self.named(f, plane, win);
        o.detected = flags
            .iter()
            .filter(|x| groups.contains(&x.0) && overlaps((x.1, x.2), win))
            .map(|x| x.1.saturating_sub(f.onset))
            .chain(named)
            .min();
        o.suspect = o.detected;
        let touched = |n: usize| nodes.binary_search(&n).is_ok();
        let dip = f.kind == FaultKind::FabricDip;
        o.wrong = if plane == Plane::Host {
            v.nodes.iter().any(|x| {
                !x.hard
                    && x.level >= Level::Confirmed
                    && touched(x.who)
                    && overlaps((x.start, x.end), win)
                    && !self.congested(&[x.who], &[], x.start)
                    && !self.node_correct(x)
            }) || dip
                && v.links.iter().any(|x| {
                    (touched(x.0.0) || touched(x.0.1))
                        && overlaps((x.1, x.2), win)
                        && !self.congested(&[x.0.0, x.0.1], &[], x.1)
                        && !self.link_correct(x.0.0, x.0.1, x.1)
                })
        } else {
            v.ports.iter().any(|x| {
                x.level >= Level::Confirmed
                    && touched(topo.port_node(x.who))
                    && overlaps((x.start, x.end), win)
                    && !self.congested(&[topo.port_node(x.who)], &[x.who], x.start)
                    && !self.port_correct(x)
            }) || v.device_nodes.iter().any(|x| {
                touched(x.0) && overlaps((x.1, x.2), win) && !self.device_node_correct(x.0, x.1)
            }) || dip
                && v.pairs.iter().any(|x| {
                    let ((a, b), start) = (x.0, x.1);
                    let nodes = [topo.port_node(a), topo.port_node(b)];
                    nodes.iter().any(|&n| touched(n))
                        && overlaps((start, x.2), win)
                        && !self.congested(&nodes, &[a, b], start)
                        && !self.pair_correct(a, b, start)
                })
        };
        // A dip is named by a fabric verdict (a spine's by a spine verdict), a slow ToR by
        // a ToR verdict on it.
        o.localised = (dip && !by_spine && o.detected.is_some() || named.is_some()) && !o.wrong;
    }

    /// Whether a congestion episode near `nodes` (their uplinks or ports, their ToRs, a
    /// spine) explains a verdict that began in round `start`: then it is not held against
    /// a fault's localisation.
    pub(crate) fn congested(&self, nodes: &[usize], ports: &[usize], start: u64) -> bool {
        let (plane, lookback) = if ports.is_empty() {
            (Plane::Host, self.lookback)
        } else {
            (Plane::Device, self.device_lookback())
        };
        let span = (start.saturating_sub(lookback), start + 1);
        self.episodes_near(plane, nodes, ports, span).is_some()
    }

    /// Whether a verdict beginning in round `start` belongs to fault `f`: it began while
    /// the fault was active, or within `grace` rounds after its end.
    fn within(f: &Fault, start: u64, grace: u64) -> bool {
        start >= f.onset && start < f.end + grace
    }

    /// Whether a host node verdict is correct: a slow node fault on it, on the host plane,
    /// active (or within the grace) when the verdict began.
    pub(crate) fn node_correct(&self, v: &Verdict) -> bool {
        self.w.faults.iter().any(|f| {
            f.kind == FaultKind::SlowNode
                && f.plane.host()
                && f.target == Target::Node(v.who)
                && Self::within(f, v.start, self.grace)
        })
    }

    /// The global ports of a node.
    pub(crate) fn ports_of(&self, node: usize) -> Vec<usize> {
        let npus = self.w.topo.npus;
        (node * npus..(node + 1) * npus).collect()
    }

    /// Whether a link verdict beginning in round `start` names a degraded link (either
    /// direction: re-measurements are exchanges, the slower direction) that was active.
    pub(crate) fn link_correct(&self, a: usize, b: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| match f.target {
            Target::Link { src, dst, .. } => {
                ((a, b) == (src, dst) || (a, b) == (dst, src)) && Self::within(f, start, self.grace)
            }
            _ => false,
        })
    }

    /// Whether a device node verdict is correct: a slow node fault on the device plane,
    /// or a hard fault that silences the node's NPUs.
    pub(crate) fn device_node_correct(&self, n: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| {
            let fits = (f.kind == FaultKind::SlowNode && f.plane.device())
                || (f.kind == FaultKind::HardFault && f.silent);
            fits && f.target == Target::Node(n) && Self::within(f, start, self.device_grace())
        })
    }

    /// Whether a port verdict is correct: a slow port fault on it.
    pub(crate) fn port_correct(&self, v: &Verdict) -> bool {
        self.w.faults.iter().any(|f| {
            f.target == Target::Port(v.who) && Self::within(f, v.start, self.device_grace())
        })
    }

    /// Whether a pair verdict on ports `a`, `b` beginning in round `start` is correct: a
    /// port-pair fault on them.
    pub(crate) fn pair_correct(&self, a: usize, b: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| {
            (f.target == Target::PortPair(a, b) || f.target == Target::PortPair(b, a))
                && Self::within(f, start, self.device_grace())
        })
    }

    /// Whether a quarantine recommendation of node `n` (by the host engine or through one
    /// of its NPU ports) beginning in round `start` is correct: a fault of the node itself
    /// (a slow node on either plane, a slow port of it, a hard fault) was active or had
    /// ended within its plane's grace.
    pub(crate) fn cordon_correct(&self, n: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| {
            let own = super::expect::own_node(f, &self.w.topo) == Some(n);
            let grace = if f.plane.host() || f.kind == FaultKind::HardFault {
                self.grace
            } else {
                self.device_grace()
            };
            own && Self::within(f, start, grace)
        })
    }

    /// Whether a fabric verdict in group `g` on `plane` beginning in round `start` is
    /// correct: a fabric-wide or ToR-wide event on that plane touched the group (a dip, a
    /// slow ToR, ToR or spine congestion, the drift 1/0.9 above normal) in the look-back
    /// before it; with that event.
    pub(crate) fn fabric_correct(&self, plane: Plane, g: usize, start: u64) -> Option<String> {
        let lookback = if plane == Plane::Host {
            self.lookback
        } else {
            self.device_lookback()
        };
        self.truth
            .fabric_event(plane, g, (start.saturating_sub(lookback), start + 1))
    }

    /// Node-hours of the run, and those of nodes without a node fault (slow node, hard
    /// fault) at the time.
    pub fn node_hours(&self) -> (f64, f64) {
        let w = self.w;
        let per_round = w.scenario.fleet.round_seconds / 3600.0;
        let total = w.topo.nodes as f64 * w.rounds as f64 * per_round;
        let mut faulty: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
        for f in &w.faults {
            if let Target::Node(n) = f.target {
                faulty
                    .entry(n)
                    .or_default()
                    .push((f.onset, f.end.min(w.rounds + 1)));
            }
        }
        let mut busy = 0u64;
        for spans in faulty.values() {
            busy += (1..=w.rounds)
                .filter(|r| spans.iter().any(|s| *r >= s.0 && *r < s.1))
                .count() as u64;
        }
        (total, total - busy as f64 * per_round)
    }
}

pub(crate) fn level_stats(
    name: &str,
    verdicts: usize,
    correct: usize,
    healthy_hours: f64,
) -> LevelStats {
    LevelStats {
        level: name.to_string(),
        verdicts,
        correct,
        precision: if verdicts == 0 {
            1.0
        } else {
            correct as f64 / verdicts as f64
        },
        false_per_1000_node_hours: (verdicts - correct) as f64 / healthy_hours.max(1e-9) * 1000.0,
    }
}

/// Nearest-rank percentile of rounds.
pub fn percentile(v: &[u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::super::scenario::Scenario;
    use super::*;

    /// A world of 16 nodes of 2 NPUs without noise or congestion, with `faults`.
    fn world(faults: &str) -> World {
        let text = format!(
            "[fleet]\nnodes = 16\ngroup_size = 16\nnpus_per_node = 2\ntor_size = 8\n\
             spines = 2\nrounds = 400\n[noise]\nsd = 0\nspike_rate = 0\ndrift_sd = 0\n\
             daily_amplitude = 0\nbusy_rate = 0\n{faults}"
        );
        let s = Scenario::from_toml(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        World::new(&s).unwrap()
    }

    /// Verdicts: a device fabric verdict on group 0 over `fabric`, and device pair verdicts.
    fn verdicts(fabric: (u64, u64), pairs: Vec<((usize, usize), u64, u64)>) -> Verdicts {
        Verdicts {
            nodes: vec![],
            ports: vec![],
            links: vec![],
            link_alerts: vec![],
            host_fabric: vec![],
            host_tors: vec![],
            host_spines: vec![],
            host_uplinks: vec![],
            device_nodes: vec![],
            pairs,
            device_fabric: vec![(0, fabric.0, fabric.1)],
            device_tors: vec![],
            device_spines: vec![],
        }
    }

    /// A device-plane dip named by a fabric verdict is localised though a correct verdict
    /// on a bad port pair that was there before it lasts through it, and is not when a
    /// healthy pair gets a verdict during it.
    #[test]
    fn a_correct_pair_verdict_during_a_dip_does_not_undo_its_localisation() {
        // Ports 0 (node 0 npu 0) and 18 (node 9 npu 0) lose 30 % from round 150; the dip
        // covers rounds 200-299.
        let w = world(
            "[[fault]]\nkind = \"port_pair\"\nport_pairs = [[0, 0, 9, 0]]\nloss = 0.3\n\
             onset = 150\n[[fault]]\nkind = \"fabric_dip\"\nplane = \"device\"\nrtt = 2.5\n\
             onset = 200\nrounds = 100\n",
        );
        let truth = Truth::of(&w);
        let dip = |pairs| {
            let v = verdicts((202, 300), pairs);
            let s = Scorer::new(&w, &truth, &v, 10, 1);
            let o = s.outcomes();
            let d: Vec<&Outcome> = o
                .iter()
                .filter(|o| o.kind == FaultKind::FabricDip)
                .collect();
            assert_eq!(d.len(), 1, "one dip outcome");
            assert!(
                d[0].detected.is_some(),
                "the fabric verdict detects the dip"
            );
            d[0].localised
        };
        assert!(
            dip(vec![]),
            "a dip with only its fabric verdict is localised"
        );
        assert!(
            dip(vec![((0, 18), 160, 400)]),
            "the bad pair's own verdict is not the dip's"
        );
        assert!(
            dip(vec![((18, 0), 160, 400)]),
            "the bad pair's verdict read the other way round is not the dip's either"
        );
        assert!(
            !dip(vec![((2, 20), 210, 300)]),
            "a healthy pair's verdict during the dip is a verdict on its members"
        );
    }

    /// A dip on one ToR's uplinks is localised by a host ToR-class span on that ToR (the
    /// mark of its slow uplinks, or a ToR verdict) without any fabric verdict, and not by
    /// one on another ToR.
    #[test]
    fn a_dip_on_a_tors_uplinks_is_named_by_a_verdict_on_that_tor() {
        // ToR 1 is nodes 8-15; its uplinks slow from round 200 for 100 rounds.
        let w = world(
            "[[fault]]\nkind = \"fabric_dip\"\nscope = \"tor_uplinks\"\nat = [1]\n\
             magnitude = 0.35\nonset = 200\nrounds = 100\n",
        );
        let truth = Truth::of(&w);
        let dip = |tor: usize| {
            let v = Verdicts {
                host_uplinks: vec![(tor, 203, 300)],
                device_fabric: vec![],
                ..verdicts((0, 0), vec![])
            };
            let o = Scorer::new(&w, &truth, &v, 10, 1).outcomes();
            let d: Vec<&Outcome> = o
                .iter()
                .filter(|o| o.kind == FaultKind::FabricDip)
                .collect();
            assert_eq!(d.len(), 1, "one dip outcome");
            (d[0].detected, d[0].localised)
        };
        assert_eq!(dip(1), (Some(3), true));
        assert_eq!(dip(0), (None, false));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 0.5), Some(10));
        assert_eq!(percentile(&v, 0.95), Some(19));
        assert_eq!(percentile(&[7], 0.95), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
