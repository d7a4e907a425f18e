//! The persistence horizon as the operator hears of it: a log line when an engine's
//! horizon becomes learnt (longer than `uncorroborated_hold`, from the congestion the
//! counters reported or the slow episodes that ended by themselves) or configured again. Its value is in the snapshot and exported every
//! round; the log says when a slow node starts waiting longer than the configuration says,
//! and why.

use crate::snapshot::probe::Horizon;

/// Logs a persistence horizon that became learnt, or configured again (not each change
/// of a learnt one: it moves as the runs under way grow).
pub(super) fn log_horizon(was: Option<Horizon>, now: Horizon, plane: &'static str) {
    match (was.as_ref().is_some_and(Horizon::learnt), now.learnt()) {
        (false, true) => tracing::info!(
            plane,
            rounds = now.rounds,
            configured = now.configured,
            runs = now.runs,
            "the persistence horizon is learnt from the congestion the counters reported or the slow episodes that ended by themselves: a straggler nothing corroborates waits longer than configured"
        ),
        (true, false) => tracing::info!(
            plane,
            rounds = now.rounds,
            "the persistence horizon is as configured again"
        ),
        _ => {}
    }
}
