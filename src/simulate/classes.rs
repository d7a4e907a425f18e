//! Every verdict of a run, judged one by one, and the false-verdict rate of every class of
//! verdict, always judged against its budget whether or not the scenario injected a fault
//! of that class (a fleet with no degraded link still has a false link rate).
//!
//! Classes: node suspect, confirmed and quarantine (host plane, hard faults apart); the
//! *cordon* (a node recommended for quarantine by the host engine or through one of its
//! NPU ports: the node is cordoned either way); link; NPU port suspect, confirmed and
//! quarantine; device node; port pair; ToR, per plane; fabric, per plane.
//!
//! Budgets per 1000 healthy node-hours, from the detection design's targets: 0.01 for a
//! verdict that cordons a node (node quarantine, port quarantine, cordon), 0.5 for every
//! other verdict (a ticket or an alert).

use serde::Serialize;

use super::scenario::Plane;
use super::score::{FalseVerdict, Scorer};
use super::truth::Truth;
use super::verdicts::{Level, Verdict};

/// The false-verdict budget of a class that cordons a node, per 1000 healthy node-hours.
pub const CORDON_BUDGET: f64 = 0.01;
/// The false-verdict budget of every other class (a ticket or an alert).
pub const TICKET_BUDGET: f64 = 0.5;

/// One verdict: a span of rounds during which an entity stood at a level (or above).
#[derive(Debug, Clone, Serialize)]
pub struct VerdictSpan {
    /// Class: `node`, `cordon`, `link`, `port`, `device node`, `pair`, `fabric (host)`,
    /// `fabric (device)`.
    pub class: &'static str,
    /// `suspect`, `confirmed`, `quarantine` (nodes, ports, cordons), or `verdict`.
    pub level: &'static str,
    /// The entity, e.g. `node 12`, `link 3→9`, `port 40 (node 5 npu 0)`, `group 2`.
    pub entity: String,
    /// Its numbers: a node, a global port, a link's or pair's two ends, a group.
    pub ids: Vec<usize>,
    /// First round.
    pub first: u64,
    /// Last round (inclusive; the run's last round when still open at the end).
    pub last: u64,
    /// The engine's reason for the change that raised it (nodes and ports).
    pub reason: String,
    /// Raised by a hard fault (scored apart).
    pub hard: bool,
    /// Correct by the scorer's rules.
    pub correct: bool,
    /// For a false verdict: what it overlapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// For a false verdict: which episode or fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The verdicts of one class, judged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassStats {
    /// Class name (`node suspect`, `cordon`, `link`, `port quarantine`, `ToR`, …).
    pub class: String,
    /// Verdicts (hard faults apart).
    pub verdicts: usize,
    /// Of which correct.
    pub correct: usize,
    /// Of which false.
    pub false_verdicts: usize,
    /// Correct ÷ verdicts (None: no verdict).
    pub precision: Option<f64>,
    /// False verdicts per 1000 healthy node-hours.
    pub false_per_1000_node_hours: f64,
    /// The budget of that rate.
    pub budget: f64,
    /// Whether the engines emit verdicts of this class in this run (device-plane classes
    /// only with NPU ports).
    pub emitted: bool,
}

impl ClassStats {
    /// The stats of `verdicts` verdicts of which `correct` are, over `healthy` node-hours.
    pub fn new(class: &str, verdicts: usize, correct: usize, healthy: f64, emitted: bool) -> Self {
        let false_verdicts = verdicts - correct;
        ClassStats {
            class: class.to_string(),
            verdicts,
            correct,
            false_verdicts,
            precision: (verdicts > 0).then(|| correct as f64 / verdicts as f64),
            false_per_1000_node_hours: false_verdicts as f64 / healthy.max(1e-9) * 1000.0,
            budget: budget(class),
            emitted,
        }
    }
}

/// The budget of a class.
pub fn budget(class: &str) -> f64 {
    if class.ends_with("quarantine") || class == "cordon" {
        CORDON_BUDGET
    } else {
        TICKET_BUDGET
    }
}

/// The classes in report order.
pub const CLASSES: [&str; 18] = [
    "node suspect",
    "node confirmed",
    "node quarantine",
    "cordon",
    "link",
    "link alert",
    "port suspect",
    "port confirmed",
    "port quarantine",
    "device node",
    "pair",
    "ToR",
    "ToR (device)",
    "ToR uplinks",
    "spine",
    "spine (device)",
    "fabric (host)",
    "fabric (device)",
];

/// Every verdict judged, the classes' stats, and the false verdicts with their causes.
pub struct Judged {
    /// Every verdict.
    pub spans: Vec<VerdictSpan>,
    /// Per class, in [`CLASSES`] order.
    pub classes: Vec<ClassStats>,
    /// The false ones (hard faults apart).
    pub falses: Vec<FalseVerdict>,
}

fn level_name(l: Level) -> &'static str {
    l.as_str()
}

impl Scorer<'_> {
    /// Judges every verdict of the run; rates over `healthy` node-hours.
    pub fn judge(&self, healthy: f64) -> Judged {
        let mut spans = self.held_spans();
        spans.extend(self.event_spans());
        spans.sort_by_key(|s| (s.first, s.class, s.ids.clone()));
        let classes = self.class_stats(&spans, healthy);
        let falses = spans
            .iter()
            .filter(|s| !s.correct && !s.hard)
            .map(|s| FalseVerdict {
                entity: s.entity.clone(),
                level: false_level(s),
                round: s.first,
                cause: s.cause.clone().unwrap_or_default(),
                detail: s.detail.clone().unwrap_or_default(),
            })
            .collect();
        Judged {
            spans,
            classes,
            falses,
        }
    }

    /// The spans of the verdicts a state machine holds: nodes, NPU ports, and the cordons
    /// they lead to (a port quarantine cordons its node).
    fn held_spans(&self) -> Vec<VerdictSpan> {
        let rounds = self.w.rounds;
        let last = |end: u64| end.saturating_sub(1).min(rounds);
        let mut spans = Vec::new();
        let npus = self.w.topo.npus.max(1);
        for v in &self.v.nodes {
            let correct = if v.hard { true } else { self.node_correct(v) };
            let cause = (!correct).then(|| self.node_cause(v.who, v.start));
            spans.push(
                Judgement {
                    class: "node",
                    entity: format!("node {}", v.who),
                    ids: vec![v.who],
                    rounds: (v.start, last(v.end)),
                    correct,
                    cause,
                }
                .held(level_name(v.level), v),
            );
        }
        for v in &self.v.ports {
            let correct = self.port_correct(v);
            let cause = (!correct).then(|| self.port_cause(v.who, v.start));
            let entity = format!(
                "port {} (node {} npu {})",
                v.who,
                v.who / npus,
                v.who % npus
            );
            spans.push(
                Judgement {
                    class: "port",
                    entity,
                    ids: vec![v.who],
                    rounds: (v.start, last(v.end)),
                    correct,
                    cause,
                }
                .held(level_name(v.level), v),
            );
        }
        for c in self.cordon_spans(false) {
            let correct = self.cordon_correct(c.who, c.start);
            let cause = (!correct).then(|| match c.reason.as_str() {
                r if r.starts_with("port ") => {
                    let port = r[5..]
                        .split_whitespace()
                        .next()
                        .and_then(|x| x.parse().ok());
                    self.port_cause(port.unwrap_or(c.who * npus), c.start)
                }
                _ => self.node_cause(c.who, c.start),
            });
            spans.push(
                Judgement {
                    class: "cordon",
                    entity: format!("node {}", c.who),
                    ids: vec![c.who],
                    rounds: (c.start, last(c.end)),
                    correct,
                    cause,
                }
                .held("quarantine", &c),
            );
        }
        spans
    }

    /// The spans of pair and event verdicts: links, device nodes, port pairs, and each
    /// plane's fabric events.
    fn event_spans(&self) -> Vec<VerdictSpan> {
        let rounds = self.w.rounds;
        let last = |end: u64| end.saturating_sub(1).min(rounds);
        let mut spans = Vec::new();
        let npus = self.w.topo.npus.max(1);
        for &((a, b), s, e) in &self.v.links {
            let correct = self.link_correct(a, b, s);
            let cause = (!correct).then(|| self.link_cause(a, b, s));
            spans.push(
                Judgement {
                    class: "link",
                    entity: format!("link {a}→{b}"),
                    ids: vec![a, b],
                    rounds: (s, last(e)),
                    correct,
                    cause,
                }
                .plain(),
            );
        }
        // An alert is judged as the verdict it fires on (from that verdict's start).
        for a in &self.v.link_alerts {
            let ((x, y), s) = (a.pair, a.verdict_start);
            let correct = self.link_correct(x, y, s);
            let cause = (!correct).then(|| self.link_cause(x, y, s));
            spans.push(
                Judgement {
                    class: "link alert",
                    entity: format!("link {x}→{y}"),
                    ids: vec![x, y],
                    rounds: (a.start, last(a.end)),
                    correct,
                    cause,
                }
                .plain(),
            );
        }
        for &(n, s, e) in &self.v.device_nodes {
            let correct = self.device_node_correct(n, s);
            let cause = (!correct).then(|| self.port_cause(n * npus, s));
            spans.push(
                Judgement {
                    class: "device node",
                    entity: format!("node {n}"),
                    ids: vec![n],
                    rounds: (s, last(e)),
                    correct,
                    cause,
                }
                .plain(),
            );
        }
        for &((a, b), s, e) in &self.v.pairs {
            let correct = self.pair_correct(a, b, s);
            let cause = (!correct).then(|| match self.port_cause(a, s) {
                (c, _) if c == "noise" => self.port_cause(b, s),
                x => x,
            });
            spans.push(
                Judgement {
                    class: "pair",
                    entity: format!("pair {a}–{b}"),
                    ids: vec![a, b],
                    rounds: (s, last(e)),
                    correct,
                    cause,
                }
                .plain(),
            );
        }
        spans.extend(self.tor_spans());
        spans.extend(self.spine_spans());
        for (class, plane, list) in [
            ("fabric (host)", Plane::Host, &self.v.host_fabric),
            ("fabric (device)", Plane::Device, &self.v.device_fabric),
        ] {
            for &(g, s, e) in list {
                let correct = self.fabric_correct(plane, g, s).is_some();
                let cause = (!correct).then(|| self.fabric_cause(plane, g, s));
                spans.push(
                    Judgement {
                        class,
                        entity: format!("group {g}"),
                        ids: vec![g],
                        rounds: (s, last(e)),
                        correct,
                        cause,
                    }
                    .plain(),
                );
            }
        }
        spans
    }

    /// The spans of ToR verdicts, per plane: correct when a fault or congestion episode of
    /// that plane on the ToR is live (or was within the lookback) when they begin; and of
    /// the host marks of a ToR's slow uplinks, correct only when a dip on that ToR's
    /// uplinks is (the mark says the ToR itself is fine and the cause lies past it).
    fn tor_spans(&self) -> Vec<VerdictSpan> {
        let mut spans = Vec::new();
        let rounds = self.w.rounds;
        let last = |end: u64| end.saturating_sub(1).min(rounds);
        // Each class with what makes one of its verdicts correct.
        type Event = fn(&Truth, Plane, usize, (u64, u64)) -> Option<String>;
        let tors = [
            (
                "ToR",
                Plane::Host,
                &self.v.host_tors,
                self.lookback,
                Truth::tor_event as Event,
            ),
            (
                "ToR uplinks",
                Plane::Host,
                &self.v.host_uplinks,
                self.lookback,
                Truth::uplinks_event,
            ),
            (
                "ToR (device)",
                Plane::Device,
                &self.v.device_tors,
                self.device_lookback(),
                Truth::tor_event,
            ),
        ];
        for (class, plane, list, back, event) in tors {
            for &(t, s, e) in list {
                let lookback = (s.saturating_sub(back), s + 1);
                let correct = event(self.truth, plane, t, lookback);
                spans.push(
                    Judgement {
                        class,
                        entity: format!("tor {t}"),
                        ids: vec![t],
                        rounds: (s, last(e)),
                        correct: correct.is_some(),
                        cause: correct
                            .is_none()
                            .then(|| ("noise".to_string(), format!("nothing slowed tor {t}"))),
                    }
                    .plain(),
                );
            }
        }
        spans
    }

    /// The spans of spine verdicts, per plane and group: correct when a spine dip or spine
    /// congestion of that plane touched the group (or did within the lookback) when they
    /// begin; a false one says which event it misnamed, else why the group was slow.
    fn spine_spans(&self) -> Vec<VerdictSpan> {
        let rounds = self.w.rounds;
        let last = |end: u64| end.saturating_sub(1).min(rounds);
        let mut spans = Vec::new();
        let planes = [
            ("spine", Plane::Host, &self.v.host_spines, self.lookback),
            (
                "spine (device)",
                Plane::Device,
                &self.v.device_spines,
                self.device_lookback(),
            ),
        ];
        for (class, plane, list, back) in planes {
            for &(g, s, e) in list {
                let lookback = (s.saturating_sub(back), s + 1);
                let correct = self.truth.spine_event(plane, g, lookback);
                let cause =
                    correct
                        .is_none()
                        .then(|| match self.truth.fabric_event(plane, g, lookback) {
                            Some(other) => ("another fabric event".to_string(), other),
                            None => self.fabric_cause(plane, g, s),
                        });
                spans.push(
                    Judgement {
                        class,
                        entity: format!("group {g}"),
                        ids: vec![g],
                        rounds: (s, last(e)),
                        correct: correct.is_some(),
                        cause,
                    }
                    .plain(),
                );
            }
        }
        spans
    }

    fn class_stats(&self, spans: &[VerdictSpan], healthy: f64) -> Vec<ClassStats> {
        let device = self.w.topo.npus > 0;
        CLASSES
            .iter()
            .map(|&class| {
                let of: Vec<&VerdictSpan> = spans
                    .iter()
                    .filter(|s| !s.hard && class_of(s) == class)
                    .collect();
                let correct = of.iter().filter(|s| s.correct).count();
                let emitted = match class {
                    c if c.starts_with("port") || c == "device node" || c == "pair" => device,
                    "ToR (device)" | "spine (device)" => device,
                    "fabric (device)" => device,
                    _ => true,
                };
                ClassStats::new(class, of.len(), correct, healthy, emitted)
            })
            .collect()
    }

    /// Every node's quarantine recommendations, host engine and NPU ports merged into one
    /// span per stretch (hard-fault ones only with `hard`): a cordon of the node either
    /// way. The reason is the first recommendation's (`port N …` for a port's).
    pub fn cordon_spans(&self, hard: bool) -> Vec<Verdict> {
        let npus = self.w.topo.npus.max(1);
        let mut by_node: std::collections::BTreeMap<usize, Vec<(u64, u64, String)>> =
            Default::default();
        for v in self.v.nodes.iter().filter(|v| v.level == Level::Quarantine) {
            if hard || !v.hard {
                by_node
                    .entry(v.who)
                    .or_default()
                    .push((v.start, v.end, v.reason.clone()));
            }
        }
        for v in self.v.ports.iter().filter(|v| v.level == Level::Quarantine) {
            by_node.entry(v.who / npus).or_default().push((
                v.start,
                v.end,
                format!("port {} {}", v.who, v.reason),
            ));
        }
        let mut out = Vec::new();
        for (who, mut list) in by_node {
            list.sort_by_key(|x| x.0);
            let mut cur: Option<(u64, u64, String)> = None;
            for (s, e, reason) in list {
                match &mut cur {
                    Some(c) if s <= c.1 => c.1 = c.1.max(e),
                    _ => {
                        if let Some((s0, e0, r0)) = cur.take() {
                            out.push(cordon(who, s0, e0, r0));
                        }
                        cur = Some((s, e, reason));
                    }
                }
            }
            if let Some((s0, e0, r0)) = cur {
                out.push(cordon(who, s0, e0, r0));
            }
        }
        out
    }
}

fn cordon(who: usize, start: u64, end: u64, reason: String) -> Verdict {
    Verdict {
        who,
        level: Level::Quarantine,
        start,
        end,
        hard: reason.starts_with("hard fault"),
        reason,
    }
}

/// The class a span counts in.
pub fn class_of(s: &VerdictSpan) -> &'static str {
    match (s.class, s.level) {
        ("node", "suspect") => "node suspect",
        ("node", "confirmed") => "node confirmed",
        ("node", _) => "node quarantine",
        ("port", "suspect") => "port suspect",
        ("port", "confirmed") => "port confirmed",
        ("port", _) => "port quarantine",
        (c, _) => c,
    }
}

/// The level name the false-verdict lists have always used.
fn false_level(s: &VerdictSpan) -> String {
    match s.class {
        "node" => s.level.to_string(),
        "port" => format!("port {}", s.level),
        c => c.to_string(),
    }
}

/// What every span is made of, whatever verdict it comes from: its class, the entity and
/// its ids, the rounds it covers, and how it was judged.
struct Judgement {
    class: &'static str,
    entity: String,
    ids: Vec<usize>,
    rounds: (u64, u64),
    correct: bool,
    cause: Option<(String, String)>,
}

impl Judgement {
    /// The span of a verdict a state machine holds at `level`.
    fn held(self, level: &'static str, v: &Verdict) -> VerdictSpan {
        self.span(level, v.reason.clone(), v.hard)
    }

    /// The span of a pair or event verdict: no level, reason or hard fault of its own.
    fn plain(self) -> VerdictSpan {
        self.span("verdict", String::new(), false)
    }

    fn span(self, level: &'static str, reason: String, hard: bool) -> VerdictSpan {
        let (cause, detail) = self.cause.map_or((None, None), |(c, d)| (Some(c), Some(d)));
        let (first, last) = self.rounds;
        VerdictSpan {
            class: self.class,
            level,
            entity: self.entity,
            ids: self.ids,
            first,
            last,
            reason,
            hard,
            correct: self.correct,
            cause,
            detail,
        }
    }
}
