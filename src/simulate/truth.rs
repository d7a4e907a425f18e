//! The ground truth of a run as the scorer reads it, and as the report's JSON carries it:
//! every fault and congestion episode with the probe groups whose probes it touches, and
//! the rounds in which the fleet's common-mode drift alone makes it 1/0.9 slower. With
//! it and the verdict spans, a reader can judge every verdict again without the scorer.

use serde::Serialize;

use super::episodes::Episode;
use super::fault::{Fault, Target};
use super::scenario::{DipScope, Element, FaultKind, Plane};
use super::world::World;

/// A fault and where its effect reaches the probes.
#[derive(Debug, Clone, Serialize)]
pub struct FaultTruth {
    /// The fault.
    #[serde(flatten)]
    pub fault: Fault,
    /// Probe groups some probe of which it slows (none for a link between groups).
    pub groups: Vec<usize>,
    /// A degraded link or port pair whose ends are in different probe groups.
    pub between_groups: bool,
}

/// A congestion episode and where its effect reaches the probes.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeTruth {
    /// The episode.
    #[serde(flatten)]
    pub episode: Episode,
    /// Probe groups some probe of which it slows.
    pub groups: Vec<usize>,
}

/// Everything the world did, for scoring.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// Faults.
    pub faults: Vec<FaultTruth>,
    /// Congestion episodes.
    pub episodes: Vec<EpisodeTruth>,
    /// `[first, after)` spans of rounds in which the common-mode drift is at least
    /// ln(1/0.9): the whole fleet 1/0.9 slower, what the engines call fabric-slow.
    pub drift_slow: Vec<(u64, u64)>,
    /// Each node's probe group.
    pub group_of: Vec<usize>,
    /// Each node's ToR.
    pub tor_of: Vec<usize>,
}

/// The drift that makes a round fabric-slow: the fleet 1/0.9 slower than usual.
pub fn drift_limit() -> f64 {
    (1.0_f64 / 0.9).ln()
}

impl Truth {
    /// The truth of a world.
    pub fn of(w: &World) -> Truth {
        let t = &w.topo;
        let spine_groups = spine_groups(w);
        let faults = w
            .faults
            .iter()
            .map(|f| {
                let between = f.between_groups(&t.group_of, |p| t.port_node(p));
                let groups = match f.target {
                    _ if between => Vec::new(),
                    Target::Node(n) | Target::Link { src: n, .. } => vec![t.group_of[n]],
                    Target::Port(p) | Target::PortPair(p, _) => vec![t.group_of[t.port_node(p)]],
                    Target::Tor(x) => t.groups_of_tor(x),
                    Target::Fabric => dip_groups(w, f),
                };
                FaultTruth {
                    fault: f.clone(),
                    groups,
                    between_groups: between,
                }
            })
            .collect();
        let episodes = w
            .episodes
            .iter()
            .map(|e| EpisodeTruth {
                groups: match (e.on, e.plane) {
                    (Element::Uplink, Plane::Device) => vec![t.group_of[t.port_node(e.element)]],
                    (Element::Uplink, _) => vec![t.group_of[e.element]],
                    (Element::Tor, _) => t.groups_of_tor(e.element),
                    (Element::Spine, _) => spine_groups[e.element].clone(),
                },
                episode: e.clone(),
            })
            .collect();
        let mut drift_slow = Vec::new();
        let mut open: Option<u64> = None;
        for r in 1..=w.rounds + 1 {
            let slow = r <= w.rounds && w.drift(r) >= drift_limit();
            match (open, slow) {
                (None, true) => open = Some(r),
                (Some(s), false) => {
                    drift_slow.push((s, r));
                    open = None;
                }
                _ => {}
            }
        }
        Truth {
            faults,
            episodes,
            drift_slow,
            group_of: t.group_of.clone(),
            tor_of: (0..t.nodes).map(|n| t.tor(n)).collect(),
        }
    }

    /// Whether a fabric-wide or ToR-wide event on `plane` (a fabric dip or a slow ToR,
    /// ToR or spine congestion, the drift above [`drift_limit`]) touched group `g` in the
    /// rounds `span`; with its description.
    pub fn fabric_event(&self, plane: Plane, g: usize, span: (u64, u64)) -> Option<String> {
        let on = |p: Plane| reaches(p, plane);
        let live = |a: u64, b: u64| a < span.1 && span.0 < b;
        for f in &self.faults {
            let x = &f.fault;
            let shared = matches!(x.kind, FaultKind::FabricDip | FaultKind::SlowTor);
            if shared && on(x.plane) && f.groups.contains(&g) && live(x.onset, x.end) {
                return Some(format!("fault #{} ({})", x.id, x.kind.as_str()));
            }
        }
        for e in &self.episodes {
            let x = &e.episode;
            let shared = matches!(x.on, Element::Tor | Element::Spine);
            if shared && on(x.plane) && e.groups.contains(&g) && live(x.start, x.end) {
                return Some(
                    format!("episode #{} on {:?} {}", x.id, x.on, x.element).to_lowercase(),
                );
            }
        }
        self.drift_slow
            .iter()
            .find(|d| live(d.0, d.1))
            .map(|d| format!("common-mode drift, rounds {}–{}", d.0, d.1))
    }
}

impl Truth {
    /// What makes a spine verdict in group `g` of `plane` correct in `span`: a fabric dip
    /// on one spine's pairs, or a congestion episode on a spine, that touched the group.
    pub fn spine_event(&self, plane: Plane, g: usize, span: (u64, u64)) -> Option<String> {
        let on = |p: Plane| reaches(p, plane);
        let live = |a: u64, b: u64| a < span.1 && span.0 < b;
        for f in &self.faults {
            let x = &f.fault;
            let spine = x.kind == FaultKind::FabricDip && x.scope == DipScope::Spine;
            if spine && on(x.plane) && f.groups.contains(&g) && live(x.onset, x.end) {
                return Some(format!("fault #{} (spine dip)", x.id));
            }
        }
        self.episodes
            .iter()
            .find(|e| {
                let x = &e.episode;
                x.on == Element::Spine
                    && on(x.plane)
                    && e.groups.contains(&g)
                    && live(x.start, x.end)
            })
            .map(|e| format!("episode #{} on spine {}", e.episode.id, e.episode.element))
    }

    /// What makes a ToR verdict on ToR `t` of `plane` correct in `span`: a slow-ToR fault
    /// on it, a fabric dip on its uplinks (every pair that leaves it is slow: the ToR's
    /// uplinks are where the network team looks), or a congestion episode on it (the ToR is
    /// really slow; the verdict is for the network team either way).
    pub fn tor_event(&self, plane: Plane, t: usize, span: (u64, u64)) -> Option<String> {
        let on = |p: Plane| reaches(p, plane);
        let live = |a: u64, b: u64| a < span.1 && span.0 < b;
        for f in &self.faults {
            let x = &f.fault;
            let uplinks = x.kind == FaultKind::FabricDip
                && x.scope == DipScope::TorUplinks
                && x.at.first() == Some(&t);
            if (x.target == Target::Tor(t) || uplinks) && on(x.plane) && live(x.onset, x.end) {
                return Some(format!("fault #{} ({})", x.id, x.kind.as_str()));
            }
        }
        self.episodes
            .iter()
            .map(|e| &e.episode)
            .find(|x| x.on == Element::Tor && x.element == t && on(x.plane) && live(x.start, x.end))
            .map(|x| format!("episode #{} on tor {}", x.id, x.element))
    }

    /// What makes a mark of ToR `t`'s slow uplinks on `plane` correct in `span`: a fabric
    /// dip on its uplinks (every pair that leaves it slow, none inside it).
    pub fn uplinks_event(&self, plane: Plane, t: usize, span: (u64, u64)) -> Option<String> {
        let live = |a: u64, b: u64| a < span.1 && span.0 < b;
        self.faults
            .iter()
            .map(|f| &f.fault)
            .find(|x| {
                x.kind == FaultKind::FabricDip
                    && x.scope == DipScope::TorUplinks
                    && x.at.first() == Some(&t)
                    && reaches(x.plane, plane)
                    && live(x.onset, x.end)
            })
            .map(|x| format!("fault #{} ({} on tor {t}'s uplinks)", x.id, x.kind.as_str()))
    }
}

/// Whether an event of plane `p` (host, device or both) is one of `plane`'s.
fn reaches(p: Plane, plane: Plane) -> bool {
    if plane == Plane::Host {
        p.host()
    } else {
        p.device()
    }
}

/// The groups with a cross-ToR pair hashing onto each spine.
fn spine_groups(w: &World) -> Vec<Vec<usize>> {
    let t = &w.topo;
    let mut out = vec![Vec::new(); t.spines];
    for (g, members) in t.groups.iter().enumerate() {
        let mut seen = vec![false; t.spines];
        for (i, &a) in members.iter().enumerate() {
            for &b in &members[i + 1..] {
                if t.tor(a) != t.tor(b) {
                    seen[w.spine_of(a, b)] = true;
                }
            }
        }
        for (s, hit) in seen.into_iter().enumerate() {
            if hit {
                out[s].push(g);
            }
        }
    }
    out
}

/// The groups with a pair a fabric dip touches.
fn dip_groups(w: &World, f: &Fault) -> Vec<usize> {
    let t = &w.topo;
    t.groups
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.iter()
                .enumerate()
                .any(|(i, &a)| m[i + 1..].iter().any(|&b| w.dip_touches(f, a, b)))
        })
        .map(|(g, _)| g)
        .collect()
}
