//! What a false verdict overlapped: the congestion episode on the accused's own uplink or
//! port, else a fault nearby (a slow ToR, a degraded link at an end, a slow node at an
//! end, a bad pair, a hard fault, a fabric dip), else congestion on its ToR or a spine,
//! else the daily swing, else noise. The cause explains a verdict; it never makes it
//! correct.

use super::fault::{Fault, Target};
use super::scenario::{Element, FaultKind, Plane};
use super::score::{Scorer, overlaps};

impl Scorer<'_> {
    /// Congestion episodes on `plane` overlapping rounds `span` near `nodes` (uplinks of
    /// those nodes or `ports`, their ToRs, a spine their pairs cross).
    pub(crate) fn episodes_near(
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

    /// The cause of a false host node verdict that began in round `start`.
    pub(crate) fn node_cause(&self, node: usize, start: u64) -> (String, String) {
        let span = (start.saturating_sub(self.lookback), start + 1);
        let other = |f: &Fault| match f.target {
            Target::Link { src, dst, .. } if src == node || dst == node => {
                Some("degraded link endpoint")
            }
            Target::Node(n) if n == node && f.kind == FaultKind::HardFault => {
                Some("hard fault on the node")
            }
            Target::Node(n) if n == node => Some("after its fault ended"),
            _ => None,
        };
        self.cause(Plane::Host, &[node], &[], span, &other)
    }

    /// The most specific cause: congestion on the accused's own uplink or port, then a
    /// fault nearby (slow ToR, a neighbouring fault, a dip), then congestion on its ToR or
    /// a spine, then a daily swing of at least 5 %, else noise.
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
        let amplitude = self.w.scenario.noise.daily_amplitude;
        self.faults_near(plane, nodes, span, other)
            .or(episode)
            .unwrap_or_else(|| {
                if amplitude >= 0.05 {
                    (
                        "daily swing".into(),
                        format!("±{:.0}% per ToR", amplitude * 100.0),
                    )
                } else {
                    ("noise".into(), String::new())
                }
            })
    }

    /// The cause of a false link verdict on `a → b` that began in round `start`.
    pub(crate) fn link_cause(&self, a: usize, b: usize, start: u64) -> (String, String) {
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

    /// The cause of a false verdict on global port `port` that began in round `start`.
    pub(crate) fn port_cause(&self, port: usize, start: u64) -> (String, String) {
        let topo = &self.w.topo;
        let node = topo.port_node(port);
        let span = (start.saturating_sub(self.device_lookback()), start + 1);
        let other = |f: &Fault| match f.target {
            Target::Node(n) if n == node && f.kind == FaultKind::SlowNode => {
                Some("slow node (device)")
            }
            Target::Port(p) if p == port => Some("a faulty port at an end"),
            Target::Port(p) if topo.port_node(p) == node => Some("another port of the node"),
            Target::PortPair(x, y) if x == port || y == port => Some("bad pair endpoint"),
            _ => None,
        };
        // A silent hard fault is a host-plane fault that reaches the device plane.
        if let Some(f) = self.w.faults.iter().find(|f| {
            f.silent && f.target == Target::Node(node) && overlaps((f.onset, f.end), span)
        }) {
            return (
                "hard fault on its node (NPUs silent)".into(),
                format!("fault #{}, rounds {}–{}", f.id, f.onset, f.end),
            );
        }
        self.cause(Plane::Device, &[node], &[port], span, &other)
    }

    /// The cause of a false fabric verdict in group `g` on `plane` that began in round
    /// `start`: stragglers enough to look like a crowd, else a daily swing, else noise.
    pub(crate) fn fabric_cause(&self, plane: Plane, g: usize, start: u64) -> (String, String) {
        let lookback = if plane == Plane::Host {
            self.lookback
        } else {
            self.device_lookback()
        };
        let span = (start.saturating_sub(lookback), start + 1);
        let topo = &self.w.topo;
        let slow: Vec<usize> = self
            .w
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::SlowNode && overlaps((f.onset, f.end), span))
            .filter_map(|f| match f.target {
                Target::Node(n) if topo.group_of[n] == g => Some(n),
                _ => None,
            })
            .collect();
        if !slow.is_empty() {
            return (
                "slow nodes in the group".into(),
                format!("{} slow node(s): {slow:?}", slow.len()),
            );
        }
        let amplitude = self.w.scenario.noise.daily_amplitude;
        if amplitude >= 0.05 {
            return (
                "daily swing".into(),
                format!("±{:.0}% per ToR", amplitude * 100.0),
            );
        }
        ("noise".into(), String::new())
    }
}
