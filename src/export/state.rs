//! `/api/v1/state`: the probe group and the health engine's verdicts as JSON, for people
//! and for tools (the demo's live view reads it).
//!
//! The types here are the documented schema (`docs/state.schema.json`, checked against the
//! daemon's real output in `tests/state_api.rs`); they are built from the typed
//! [`ProbeSnapshot`], never assembled ad hoc.

use serde::Serialize;

use crate::snapshot::probe::{ProbeSnapshot, Transition};

/// The whole response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct State {
    /// Probing runs and the group is formed.
    pub active: bool,
    /// Why probing is paused, if it is.
    pub last_error: Option<String>,
    /// Rounds by result.
    pub rounds: Rounds,
    /// The whole group is slow against its baseline (blocks quarantine recommendations).
    pub fabric_degraded: bool,
    /// Pairs judged degraded links.
    pub link_degraded: Vec<Pair>,
    /// The group as formed.
    pub membership: Membership,
    /// Every candidate member, in candidate order.
    pub members: Vec<Member>,
    /// The last permutation round's links.
    pub matrix: Vec<Link>,
    /// The latest state changes, oldest first, with their evidence.
    pub transitions: Vec<TransitionView>,
}

/// Rounds by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rounds {
    /// Completed.
    pub ok: u64,
    /// Failed, including failures to form the group.
    pub failed: u64,
}

/// A directed pair of members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
}

/// The group as formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Membership {
    /// Members of the formed group (0 while it is not formed).
    pub group_members: usize,
    /// The member list could not be refreshed (probing stops, fail-closed).
    pub stale: bool,
}

/// One candidate member.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    /// Its name.
    pub node: String,
    /// It took part in the last round.
    pub up: bool,
    /// Its health state (`healthy`, `suspect`, `confirmed`, `quarantine_recommended`,
    /// `probation`).
    pub state: &'static str,
    /// Window score (median log residual against its peers), when measured this round.
    pub score: Option<f64>,
    /// Its arrival lag at the last barrier, seconds.
    pub arrival_lag_seconds: Option<f64>,
}

/// A measured link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
    /// Exchange bandwidth.
    pub bytes_per_second: f64,
}

/// One number behind a verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// What it is.
    pub what: String,
    /// Its value (`null` when not finite).
    pub value: f64,
}

/// A state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionView {
    /// Engine round of the change.
    pub round: u64,
    /// The node.
    pub node: String,
    /// Old state.
    pub from: &'static str,
    /// New state.
    pub to: &'static str,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Vec<Evidence>,
}

impl TransitionView {
    fn new(p: &ProbeSnapshot, t: &Transition) -> Self {
        Self {
            round: t.round,
            node: p.name(t.node),
            from: t.from.as_str(),
            to: t.to.as_str(),
            reason: t.reason.clone(),
            evidence: t
                .evidence
                .iter()
                .map(|(what, value)| Evidence {
                    what: what.clone(),
                    value: *value,
                })
                .collect(),
        }
    }
}

impl From<&ProbeSnapshot> for State {
    fn from(p: &ProbeSnapshot) -> Self {
        let pair = |a: usize, b: usize| Pair {
            src: p.name(a),
            dst: p.name(b),
        };
        State {
            active: p.active,
            last_error: p.last_error.clone(),
            rounds: Rounds {
                ok: p.rounds_ok,
                failed: p.rounds_failed,
            },
            fabric_degraded: p.fabric_degraded,
            link_degraded: p.link_degraded.iter().map(|(a, b)| pair(*a, *b)).collect(),
            membership: Membership {
                group_members: p.group_members,
                stale: p.membership_stale,
            },
            members: p
                .members
                .iter()
                .map(|m| Member {
                    node: m.name.clone(),
                    up: m.up,
                    state: m.state.as_str(),
                    score: m.score,
                    arrival_lag_seconds: m.arrival_lag,
                })
                .collect(),
            matrix: p
                .links
                .iter()
                .map(|l| Link {
                    src: p.name(l.src),
                    dst: p.name(l.dst),
                    bytes_per_second: l.bytes_per_second,
                })
                .collect(),
            transitions: p
                .transitions
                .iter()
                .map(|t| TransitionView::new(p, t))
                .collect(),
        }
    }
}

/// The body of the 404 answer when probing is off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotEnabled {
    /// Why there is no state.
    pub error: &'static str,
}

impl NotEnabled {
    /// Probing is off in the configuration.
    pub const PROBING_OFF: NotEnabled = NotEnabled {
        error: "probing is not enabled (probe.enabled = false)",
    };
}
