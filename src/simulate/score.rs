//! Honest scoring: per fault episode and per verdict, never per transition.
//!
//! - **Precision** at a level (suspect, confirmed, quarantine) is correct verdicts ÷ all
//!   verdicts at that level. A verdict is correct when it names the entity of a fault of
//!   the matching class that was active when the verdict began (or ended at most a
//!   window's length before). A node verdict on a slow ToR's node, on an endpoint of a
//!   degraded link or on a congested node is false. Hard faults are scored apart.
//! - **Recall** is per fault episode, by kind, plane, magnitude band and shape; the times
//!   run from onset to the first verdict of each level.
//! - **Localisation**: a detected fault is localised when no verdict of another class
//!   pointed at its elements while it lasted (a link verdict on a slow node's pair, a node
//!   verdict on a degraded link's end, a node verdict on a port's node, …).
//! - **False verdicts** are listed with their cause: the congestion episode, dip, slow ToR
//!   or neighbouring fault they overlapped, or noise.

use std::collections::BTreeMap;

use serde::Serialize;

use super::scenario::{Element, FaultKind, Plane, Shape};
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
    /// A verdict of another class pointed at the fault's elements.
    pub wrong: bool,
    /// Counted by the time targets: no fabric-wide or ToR-wide event (a fabric dip, a slow
    /// ToR, congestion on a ToR or a spine) touched its plane and group in its first
    /// [`TIMED_ROUNDS`] rounds (they block escalation by design), and its entity was not
    /// already accused when it began.
    pub timed: bool,
}

/// Rounds after onset during which an injected fabric-wide event takes a fault out of the
/// time targets.
pub const TIMED_ROUNDS: u64 = 30;

/// A false verdict and what it overlapped.
#[derive(Debug, Clone, Serialize)]
pub struct FalseVerdict {
    /// What was accused: `node 12`, `link 3→9`, `port 40 (node 5 npu 0)`, …
    pub entity: String,
    /// Level (`suspect`, `confirmed`, `quarantine`, `link`, `port …`, `pair`, `device node`).
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
    w: &'a World,
    v: &'a Verdicts,
    /// Rounds after a fault's end during which a new verdict still counts as its own.
    grace: u64,
    /// Rounds before a false verdict searched for its cause.
    lookback: u64,
    /// Probe rounds per device-plane round: the device plane's grace, look-back and timed
    /// span are as many of its own rounds, so that many times as many probe rounds.
    device_every: u64,
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
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
    /// A scorer over a world and its verdicts; `window` is the engines' window in rounds.
    pub fn new(w: &'a World, v: &'a Verdicts, window: u64, device_every: u64) -> Self {
        Scorer {
            w,
            v,
            grace: window + 5,
            lookback: 2 * window + 5,
            device_every: device_every.max(1),
        }
    }

    /// The grace of a device-plane verdict, in probe rounds.
    fn device_grace(&self) -> u64 {
        self.grace * self.device_every
    }

    /// The look-back of a device-plane verdict's cause, in probe rounds.
    fn device_lookback(&self) -> u64 {
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
        let win = self.window(f);
        let since = |start: u64| start.saturating_sub(f.onset);
        let first = |levels: &[Verdict], who: &dyn Fn(usize) -> bool, l: Level, hard: bool| {
            levels
                .iter()
                .filter(|v| v.level >= l && v.hard == hard && who(v.who))
                .filter(|v| v.start >= win.0 && v.start < win.1)
                .map(|v| since(v.start))
                .min()
        };
        let span_first = |spans: &mut dyn Iterator<Item = (u64, u64)>| {
            spans
                .filter(|s| overlaps(*s, win))
                .map(|s| since(s.0))
                .min()
        };
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
            wrong: false,
            timed: !self.event_near(f, plane),
        };
        let topo = &self.w.topo;
        let v = self.v;
        match (f.target, plane) {
            (Target::Node(n), Plane::Host) => {
                let hard = f.kind == FaultKind::HardFault;
                let me = |x: usize| x == n;
                o.suspect = first(&v.nodes, &me, Level::Suspect, hard);
                o.confirmed = first(&v.nodes, &me, Level::Confirmed, hard);
                o.quarantine = first(&v.nodes, &me, Level::Quarantine, hard);
                o.detected = o.quarantine;
                o.wrong = !hard
                    && v.links.iter().any(|((a, b), s, e)| {
                        (*a == n || *b == n)
                            && overlaps((*s, *e), win)
                            && !self.congested(&[*a, *b], &[], *s)
                            && !self.link_correct(*a, *b, *s)
                    });
            }
            (Target::Node(n), _) => {
                o.detected = span_first(
                    &mut v
                        .device_nodes
                        .iter()
                        .filter(|x| x.0 == n)
                        .map(|x| (x.1, x.2)),
                );
                o.suspect = o.detected;
                let mine = |p: usize| topo.port_node(p) == n;
                o.wrong = v.ports.iter().any(|x| {
                    mine(x.who) && overlaps((x.start, x.end), win) && !self.port_correct(x)
                });
            }
            (Target::Link { src, dst, both }, _) => {
                // Re-measurements are exchanges (the slower direction), so a verdict on the
                // reverse direction names the same link.
                let _ = both;
                let me = |a: usize, b: usize| (a, b) == (src, dst) || (a, b) == (dst, src);
                o.detected = span_first(
                    &mut v
                        .links
                        .iter()
                        .filter(|x| me(x.0.0, x.0.1))
                        .map(|x| (x.1, x.2)),
                );
                o.suspect = o.detected;
                o.wrong = v.nodes.iter().any(|x| {
                    !x.hard
                        && (x.who == src || x.who == dst)
                        && overlaps((x.start, x.end), win)
                        && !self.congested(&[x.who], &[], x.start)
                        && !self.node_correct(x)
                });
            }
            (Target::Port(p), _) => {
                let me = |x: usize| x == p;
                o.suspect = first(&v.ports, &me, Level::Suspect, false);
                o.confirmed = first(&v.ports, &me, Level::Confirmed, false);
                o.quarantine = first(&v.ports, &me, Level::Quarantine, false);
                o.detected = o.suspect;
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
            (Target::PortPair(a, b), _) => {
                let key = (a.min(b), a.max(b));
                o.detected =
                    span_first(&mut v.pairs.iter().filter(|x| x.0 == key).map(|x| (x.1, x.2)));
                o.suspect = o.detected;
                o.wrong = v
                    .ports
                    .iter()
                    .any(|x| (x.who == a || x.who == b) && overlaps((x.start, x.end), win));
            }
            (Target::Tor(_) | Target::Fabric, _) => self.fabric_outcome(f, plane, win, &mut o),
        }
        o.timed &= !self.accused_at_onset(f, plane);
        o
    }

    /// Whether an injected fabric dip or slow ToR on `plane` touched the group of `f`
    /// during its first [`TIMED_ROUNDS`] rounds.
    fn event_near(&self, f: &Fault, plane: Plane) -> bool {
        let topo = &self.w.topo;
        let node = match f.target {
            Target::Node(n) | Target::Link { src: n, .. } => n,
            Target::Port(p) | Target::PortPair(p, _) => topo.port_node(p),
            Target::Tor(_) | Target::Fabric => return false,
        };
        let group = topo.group_of[node];
        let on_plane = |g: &Fault| {
            if plane == Plane::Host {
                g.plane.host()
            } else {
                g.plane.device()
            }
        };
        let timed = match plane {
            Plane::Host => TIMED_ROUNDS,
            _ => TIMED_ROUNDS * self.device_every,
        };
        let early = (f.onset, f.onset + timed);
        let tor_in_group = |t: usize| topo.tor_nodes(t).any(|n| topo.group_of[n] == group);
        let faults = self.w.faults.iter().filter(|g| on_plane(g)).any(|g| {
            let touches = match g.target {
                Target::Fabric => true,
                Target::Tor(t) => tor_in_group(t),
                _ => false,
            };
            touches && overlaps((g.onset, g.end), early)
        });
        let on_plane = |e: &super::world::Episode| {
            if plane == Plane::Host {
                e.plane.host()
            } else {
                e.plane.device()
            }
        };
        let episodes = self.w.episodes.iter().filter(|e| on_plane(e)).any(|e| {
            let touches = match e.on {
                Element::Tor => tor_in_group(e.element),
                Element::Spine => true,
                Element::Uplink => false,
            };
            touches && overlaps((e.start, e.end), early)
        });
        faults || episodes
    }

    /// Whether the fault's node or port already had a verdict open when it began.
    fn accused_at_onset(&self, f: &Fault, plane: Plane) -> bool {
        let open = |v: &Verdict| v.start < f.onset && f.onset < v.end && !v.hard;
        match (f.target, plane) {
            (Target::Node(n), Plane::Host) => self.v.nodes.iter().any(|v| v.who == n && open(v)),
            (Target::Port(p), _) => self.v.ports.iter().any(|v| v.who == p && open(v)),
            _ => false,
        }
    }

    /// A ToR or fabric event is detected by a fabric verdict in a group it touches, and
    /// mislocalised by any node or port verdict at confirmed or above (and, for a dip, any
    /// link or pair verdict) while it lasts.
    fn fabric_outcome(&self, f: &Fault, plane: Plane, win: (u64, u64), o: &mut Outcome) {
        let topo = &self.w.topo;
        let v = self.v;
        let nodes: Vec<usize> = match f.target {
            Target::Tor(t) => topo.tor_nodes(t).collect(),
            _ => (0..topo.nodes).collect(),
        };
        let groups: std::collections::BTreeSet<usize> =
            nodes.iter().map(|n| topo.group_of[*n]).collect();
        let flags = if plane == Plane::Host {
            &v.host_fabric
        } else {
            &v.device_fabric
        };
        o.detected = flags
            .iter()
            .filter(|x| groups.contains(&x.0) && overlaps((x.1, x.2), win))
            .map(|x| x.1.saturating_sub(f.onset))
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
                    overlaps((x.1, x.2), win)
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
            }) || dip && v.pairs.iter().any(|x| overlaps((x.1, x.2), win))
        };
    }

    /// Whether a congestion episode near `nodes` (their uplinks or ports, their ToRs, a
    /// spine) explains a verdict that began in round `start`: then it is not held against
    /// a fault's localisation.
    fn congested(&self, nodes: &[usize], ports: &[usize], start: u64) -> bool {
        let (plane, lookback) = if ports.is_empty() {
            (Plane::Host, self.lookback)
        } else {
            (Plane::Device, self.device_lookback())
        };
        let span = (start.saturating_sub(lookback), start + 1);
        self.episodes_near(plane, nodes, ports, span).is_some()
    }

    /// Whether a host node verdict is correct: a slow node fault on it, on the host plane,
    /// active (or within the grace) when the verdict began.
    fn node_correct(&self, v: &Verdict) -> bool {
        self.w.faults.iter().any(|f| {
            f.kind == FaultKind::SlowNode
                && f.plane.host()
                && f.target == Target::Node(v.who)
                && v.start >= f.onset
                && v.start < f.end + self.grace
        })
    }

    /// The global ports of a node.
    fn ports_of(&self, node: usize) -> Vec<usize> {
        let npus = self.w.topo.npus;
        (node * npus..(node + 1) * npus).collect()
    }

    /// Whether a link verdict beginning in round `start` names a degraded link (either
    /// direction: re-measurements are exchanges, the slower direction) that was active.
    fn link_correct(&self, a: usize, b: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| match f.target {
            Target::Link { src, dst, .. } => {
                ((a, b) == (src, dst) || (a, b) == (dst, src))
                    && start >= f.onset
                    && start < f.end + self.grace
            }
            _ => false,
        })
    }

    /// Whether a device node verdict is correct: a slow node fault on the device plane.
    fn device_node_correct(&self, n: usize, start: u64) -> bool {
        self.w.faults.iter().any(|f| {
            f.kind == FaultKind::SlowNode
                && f.plane.device()
                && f.target == Target::Node(n)
                && start >= f.onset
                && start < f.end + self.device_grace()
        })
    }

    /// Whether a port verdict is correct: a slow port fault on it.
    fn port_correct(&self, v: &Verdict) -> bool {
        self.w.faults.iter().any(|f| {
            f.target == Target::Port(v.who)
                && v.start >= f.onset
                && v.start < f.end + self.device_grace()
        })
    }

    /// Host node verdicts (hard faults apart) by level, with the false ones listed.
    pub fn node_levels(&self, healthy_hours: f64) -> (Vec<LevelStats>, Vec<FalseVerdict>) {
        let mut stats = Vec::new();
        let mut falses = Vec::new();
        for l in Level::ALL {
            let vs: Vec<&Verdict> = self
                .v
                .nodes
                .iter()
                .filter(|v| v.level == l && !v.hard)
                .collect();
            let correct = vs.iter().filter(|v| self.node_correct(v)).count();
            for v in vs.iter().filter(|v| !self.node_correct(v)) {
                let (cause, detail) = self.node_cause(v.who, v.start);
                falses.push(FalseVerdict {
                    entity: format!("node {}", v.who),
                    level: l.as_str().into(),
                    round: v.start,
                    cause,
                    detail,
                });
            }
            stats.push(level_stats(l.as_str(), vs.len(), correct, healthy_hours));
        }
        (stats, falses)
    }

    /// Host link verdicts: (stats, false ones).
    pub fn link_levels(&self, healthy_hours: f64) -> (LevelStats, Vec<FalseVerdict>) {
        let mut correct = 0;
        let mut falses = Vec::new();
        for &((a, b), start, _) in &self.v.links {
            if self.link_correct(a, b, start) {
                correct += 1;
            } else {
                let (cause, detail) = self.link_cause(a, b, start);
                falses.push(FalseVerdict {
                    entity: format!("link {a}→{b}"),
                    level: "link".into(),
                    round: start,
                    cause,
                    detail,
                });
            }
        }
        (
            level_stats("link", self.v.links.len(), correct, healthy_hours),
            falses,
        )
    }

    /// Device port verdicts by level, device node and pair verdicts: stats and false ones.
    pub fn device_levels(&self, healthy_hours: f64) -> (Vec<LevelStats>, Vec<FalseVerdict>) {
        let mut stats = Vec::new();
        let mut falses = Vec::new();
        let npus = self.w.topo.npus.max(1);
        for l in Level::ALL {
            let vs: Vec<&Verdict> = self.v.ports.iter().filter(|v| v.level == l).collect();
            let correct = vs.iter().filter(|v| self.port_correct(v)).count();
            for v in vs.iter().filter(|v| !self.port_correct(v)) {
                let (cause, detail) = self.port_cause(v.who, v.start);
                falses.push(FalseVerdict {
                    entity: format!(
                        "port {} (node {} npu {})",
                        v.who,
                        v.who / npus,
                        v.who % npus
                    ),
                    level: format!("port {}", l.as_str()),
                    round: v.start,
                    cause,
                    detail,
                });
            }
            stats.push(level_stats(
                &format!("port {}", l.as_str()),
                vs.len(),
                correct,
                healthy_hours,
            ));
        }
        let mut correct = 0;
        for &(n, s, _) in &self.v.device_nodes {
            if self.device_node_correct(n, s) {
                correct += 1;
            } else {
                let (cause, detail) = self.port_cause(n * npus, s);
                falses.push(FalseVerdict {
                    entity: format!("node {n}"),
                    level: "device node".into(),
                    round: s,
                    cause,
                    detail,
                });
            }
        }
        stats.push(level_stats(
            "device node",
            self.v.device_nodes.len(),
            correct,
            healthy_hours,
        ));
        let mut correct = 0;
        for &((a, b), s, _) in &self.v.pairs {
            let ok = self.w.faults.iter().any(|f| {
                (f.target == Target::PortPair(a, b) || f.target == Target::PortPair(b, a))
                    && s >= f.onset
                    && s < f.end + self.device_grace()
            });
            if ok {
                correct += 1;
            } else {
                let (cause, detail) = match self.port_cause(a, s) {
                    (c, _) if c == "noise" => self.port_cause(b, s),
                    x => x,
                };
                falses.push(FalseVerdict {
                    entity: format!("pair {a}–{b}"),
                    level: "pair".into(),
                    round: s,
                    cause,
                    detail,
                });
            }
        }
        stats.push(level_stats(
            "pair",
            self.v.pairs.len(),
            correct,
            healthy_hours,
        ));
        (stats, falses)
    }

    /// Congestion episodes on `plane` overlapping rounds `span` near `nodes` (uplinks of
    /// those nodes or `ports`, their ToRs, any spine).
    fn episodes_near(
        &self,
        plane: Plane,
        nodes: &[usize],
        ports: &[usize],
        span: (u64, u64),
    ) -> Option<(String, String)> {
        let topo = &self.w.topo;
        let mut best: Option<(u8, String, String)> = None;
        for e in &self.w.episodes {
            let on_plane = if plane == Plane::Host {
                e.plane.host()
            } else {
                e.plane.device()
            };
            if !on_plane || !overlaps((e.start, e.end), span) {
                continue;
            }
            let (rank, what) = match e.on {
                Element::Uplink if e.plane == Plane::Device && ports.contains(&e.element) => {
                    (0, format!("port {}'s link", e.element))
                }
                Element::Uplink if e.plane != Plane::Device && nodes.contains(&e.element) => {
                    (0, format!("node {}'s uplink", e.element))
                }
                Element::Tor if nodes.iter().any(|n| topo.tor(*n) == e.element) => {
                    (1, format!("ToR {}", e.element))
                }
                Element::Spine => (2, format!("spine {}", e.element)),
                _ => continue,
            };
            if best.as_ref().is_none_or(|b| rank < b.0) {
                let class =
                    ["uplink congestion", "ToR congestion", "spine congestion"][rank as usize];
                let detail = format!(
                    "episode #{} on {what}, rounds {}–{}, +{:.0}%",
                    e.id,
                    e.start,
                    e.end,
                    e.magnitude.exp_m1() * 100.0
                );
                best = Some((rank, class.to_string(), detail));
            }
        }
        best.map(|(_, c, d)| (c, d))
    }

    /// Faults of another class near the accused: slow ToR, dip, a neighbouring fault, or
    /// a fault on the same entity that had ended.
    fn faults_near(
        &self,
        plane: Plane,
        nodes: &[usize],
        span: (u64, u64),
        other: &dyn Fn(&Fault) -> Option<&'static str>,
    ) -> Option<(String, String)> {
        let topo = &self.w.topo;
        let on_plane = |f: &Fault| {
            if plane == Plane::Host {
                f.plane.host()
            } else {
                f.plane.device()
            }
        };
        let mut dip = None;
        for f in self
            .w
            .faults
            .iter()
            .filter(|f| on_plane(f) && overlaps((f.onset, f.end), span))
        {
            let hit = match f.target {
                Target::Tor(t) => nodes
                    .iter()
                    .any(|n| topo.tor(*n) == t)
                    .then_some("slow ToR"),
                Target::Fabric => Some("fabric dip"),
                _ => other(f),
            };
            let found = hit.map(|class| {
                (
                    class.to_string(),
                    format!(
                        "fault #{} ({}), rounds {}–{}",
                        f.id,
                        f.kind.as_str(),
                        f.onset,
                        f.end
                    ),
                )
            });
            match (hit, found) {
                (Some("fabric dip"), found) => dip = dip.or(found),
                (_, Some(found)) => return Some(found),
                _ => {}
            }
        }
        dip
    }

    fn node_cause(&self, node: usize, start: u64) -> (String, String) {
        let span = (start.saturating_sub(self.lookback), start + 1);
        let other = |f: &Fault| match f.target {
            Target::Link { src, dst, .. } if src == node || dst == node => {
                Some("degraded link endpoint")
            }
            Target::Node(n) if n == node => Some("after its fault ended"),
            _ => None,
        };
        self.cause(Plane::Host, &[node], &[], span, &other)
    }

    /// The most specific cause: congestion on the accused's own uplink or port, then a
    /// fault nearby (slow ToR, a neighbouring fault, a dip), then congestion on its ToR or
    /// a spine, else noise.
    fn cause(
        &self,
        plane: Plane,
        nodes: &[usize],
        ports: &[usize],
        span: (u64, u64),
        other: &dyn Fn(&Fault) -> Option<&'static str>,
    ) -> (String, String) {
        let episode = self.episodes_near(plane, nodes, ports, span);
        if let Some(e) = episode.as_ref().filter(|e| e.0 == "uplink congestion") {
            return e.clone();
        }
        self.faults_near(plane, nodes, span, other)
            .or(episode)
            .unwrap_or_else(|| ("noise".into(), String::new()))
    }

    fn link_cause(&self, a: usize, b: usize, start: u64) -> (String, String) {
        let span = (start.saturating_sub(self.lookback), start + 1);
        let other = |f: &Fault| match f.target {
            Target::Node(n) if (n == a || n == b) && f.kind == FaultKind::SlowNode => {
                Some("slow node endpoint")
            }
            Target::Link { src, dst, .. } if [src, dst].iter().any(|x| *x == a || *x == b) => {
                Some("another degraded link")
            }
            _ => None,
        };
        self.cause(Plane::Host, &[a, b], &[], span, &other)
    }

    fn port_cause(&self, port: usize, start: u64) -> (String, String) {
        let topo = &self.w.topo;
        let node = topo.port_node(port);
        let span = (start.saturating_sub(self.device_lookback()), start + 1);
        let other = |f: &Fault| match f.target {
            Target::Node(n) if n == node => Some("slow node (device)"),
            Target::Port(p) if p == port => Some("a faulty port at an end"),
            Target::Port(p) if topo.port_node(p) == node => Some("another port of the node"),
            Target::PortPair(x, y) if x == port || y == port => Some("bad pair endpoint"),
            _ => None,
        };
        self.cause(Plane::Device, &[node], &[port], span, &other)
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
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 0.5), Some(10));
        assert_eq!(percentile(&v, 0.95), Some(19));
        assert_eq!(percentile(&[7], 0.95), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
