//! The engines' output as verdicts: a verdict is one span of rounds during which one
//! entity (a node, a port, a link, a pair, a group's fabric) stood at one level or above.
//! A node that goes suspect → confirmed → quarantine_recommended is one verdict at each
//! of the three levels, not three transitions; scoring counts verdicts.

use serde::Serialize;

use super::link_alerts::{self, LinkAlert};
use super::run::{Change, Trace};
use crate::health::NodeState;

/// How far a verdict goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A ticket: the engine suspects.
    Suspect,
    /// Re-pairing with known-good peers reproduced it.
    Confirmed,
    /// A quarantine (cordon) recommendation.
    Quarantine,
}

impl Level {
    /// All levels, lowest first.
    pub const ALL: [Level; 3] = [Level::Suspect, Level::Confirmed, Level::Quarantine];

    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Suspect => "suspect",
            Level::Confirmed => "confirmed",
            Level::Quarantine => "quarantine",
        }
    }

    fn of(s: NodeState) -> Option<Level> {
        match s {
            NodeState::Suspect => Some(Level::Suspect),
            NodeState::Confirmed => Some(Level::Confirmed),
            NodeState::QuarantineRecommended => Some(Level::Quarantine),
            _ => None,
        }
    }
}

/// One verdict on a node or port.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Node (host plane) or global port (device plane).
    pub who: usize,
    /// Level.
    pub level: Level,
    /// First round.
    pub start: u64,
    /// First round after.
    pub end: u64,
    /// The reason of the change that raised it to this level.
    pub reason: String,
    /// Raised by a hard fault (scored apart from stragglers).
    pub hard: bool,
}

/// Verdicts of every node or port, from its state changes: a span per level, from the
/// change that reaches the level to the change that falls below it.
pub fn from_changes(changes: &[Change], end: u64) -> Vec<Verdict> {
    let mut by_who: std::collections::BTreeMap<usize, Vec<&Change>> = Default::default();
    for c in changes {
        by_who.entry(c.who).or_default().push(c);
    }
    let mut out = Vec::new();
    for (who, cs) in by_who {
        let mut open: [Option<(u64, String)>; 3] = Default::default();
        for c in cs {
            let level = Level::of(c.to);
            for (k, l) in Level::ALL.iter().enumerate() {
                let reaches = level.is_some_and(|x| x >= *l);
                match (&open[k], reaches) {
                    (None, true) => open[k] = Some((c.round, c.reason.clone())),
                    (Some(_), false) => {
                        let (start, reason) = open[k].take().unwrap_or_default();
                        out.push(verdict(who, *l, start, c.round, reason));
                    }
                    _ => {}
                }
            }
        }
        for (k, l) in Level::ALL.iter().enumerate() {
            if let Some((start, reason)) = open[k].take() {
                out.push(verdict(who, *l, start, end, reason));
            }
        }
    }
    out.sort_by_key(|v| (v.start, v.who, v.level));
    out
}

fn verdict(who: usize, level: Level, start: u64, end: u64, reason: String) -> Verdict {
    Verdict {
        who,
        level,
        start,
        end,
        hard: reason.starts_with("hard fault"),
        reason,
    }
}

/// Every verdict of a run, by kind.
pub struct Verdicts {
    /// Host node verdicts.
    pub nodes: Vec<Verdict>,
    /// Device port verdicts.
    pub ports: Vec<Verdict>,
    /// Host link verdicts: (src, dst, start, end).
    pub links: Vec<((usize, usize), u64, u64)>,
    /// The spans the shipped link alert fires over them ([`super::link_alerts`]).
    pub link_alerts: Vec<LinkAlert>,
    /// Host fabric verdicts per group.
    pub host_fabric: Vec<(usize, u64, u64)>,
    /// Host ToR verdicts: (ToR, first round, first round after).
    pub host_tors: Vec<(usize, u64, u64)>,
    /// Host spine verdicts: (probe group, first round, first round after).
    pub host_spines: Vec<(usize, u64, u64)>,
    /// Host ToRs whose uplinks were marked slow: (ToR, first round, first round after).
    pub host_uplinks: Vec<(usize, u64, u64)>,
    /// Device node verdicts.
    pub device_nodes: Vec<(usize, u64, u64)>,
    /// Device pair verdicts.
    pub pairs: Vec<((usize, usize), u64, u64)>,
    /// Device fabric verdicts per group.
    pub device_fabric: Vec<(usize, u64, u64)>,
    /// Device ToR verdicts: (ToR, first round, first round after).
    pub device_tors: Vec<(usize, u64, u64)>,
    /// Device spine verdicts: (probe group, first round, first round after).
    pub device_spines: Vec<(usize, u64, u64)>,
}

impl Verdicts {
    /// The verdicts of a trace of `rounds` rounds of `round_seconds` each.
    pub fn of(t: &Trace, rounds: u64, round_seconds: f64) -> Self {
        Verdicts {
            nodes: from_changes(&t.nodes, rounds + 1),
            ports: from_changes(&t.ports, rounds + 1),
            links: t.links.spans.clone(),
            link_alerts: link_alerts::alerts(
                &t.links.spans,
                rounds,
                link_alerts::Rule::shipped(round_seconds),
            ),
            host_fabric: t.host_fabric.spans.clone(),
            host_tors: t.host_tors.spans.clone(),
            host_spines: t.host_spines.spans.clone(),
            host_uplinks: t.host_uplinks.spans.clone(),
            device_nodes: t.device_nodes.spans.clone(),
            pairs: t.pairs.spans.clone(),
            device_fabric: t.device_fabric.spans.clone(),
            device_tors: t.device_tors.spans.clone(),
            device_spines: t.device_spines.spans.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(round: u64, to: NodeState, reason: &str) -> Change {
        Change {
            round,
            who: 7,
            from: NodeState::Healthy,
            to,
            reason: reason.into(),
        }
    }

    /// One straggler's whole path is one verdict per level; a hard fault's jump straight to
    /// quarantine is one verdict per level too, marked hard.
    #[test]
    fn a_path_through_the_states_is_one_verdict_per_level() {
        let cs = vec![
            change(10, NodeState::Suspect, "slow"),
            change(12, NodeState::Confirmed, "re-paired"),
            change(20, NodeState::QuarantineRecommended, "confirmed straggler"),
            change(90, NodeState::Probation, "back"),
            change(95, NodeState::Suspect, "slow again"),
            change(99, NodeState::Healthy, "not reproduced"),
            change(
                150,
                NodeState::QuarantineRecommended,
                "hard fault: device lost",
            ),
        ];
        let v = from_changes(&cs, 200);
        let spans: Vec<(Level, u64, u64, bool)> = v
            .iter()
            .map(|v| (v.level, v.start, v.end, v.hard))
            .collect();
        assert_eq!(
            spans,
            vec![
                (Level::Suspect, 10, 90, false),
                (Level::Confirmed, 12, 90, false),
                (Level::Quarantine, 20, 90, false),
                (Level::Suspect, 95, 99, false),
                (Level::Suspect, 150, 200, true),
                (Level::Confirmed, 150, 200, true),
                (Level::Quarantine, 150, 200, true),
            ]
        );
        assert_eq!(v[2].reason, "confirmed straggler");
    }
}
