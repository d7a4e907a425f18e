//! Verdicts from measurements: which node is a straggler, which link is degraded, whether
//! the whole fabric is slow. Pure code (no I/O), so the daemon, the simulator and the
//! tests all run the same engines. It reads and writes only plain data from
//! [`crate::snapshot`].
//!
//! Two planes, one skeleton. The host-plane engine ([`HealthEngine`]) judges nodes and
//! links from collective timings; the device-plane engine ([`device::DeviceEngine`]) judges
//! NPU ports, nodes and port pairs from device-plane pings. Both score each measurement
//! against its round (`stats`), judge the round as a whole against a learned baseline and
//! base rate and count crowds (`fabric`), remember what a partial event explains (`dips`), move each entity through the same lifecycle
//! with hysteresis (`lifecycle`), record why in the same evidence keys (`evidence`), and
//! hold pair verdicts the same way (`pairs`); only what is measured and how an entity is
//! elevated differ. `plan` holds the pure planning the daemon and the simulator share;
//! `infer` groups nodes whose slowdowns move together when no source gives their ToRs;
//! `horizon` learns how long the group's congestion lasts, which a straggler nothing
//! corroborates must outlast;
//! `spine` tells a dip on one spine's pairs from the other dips.

pub mod device;
mod dips;
mod evidence;
mod fabric;
pub mod hardware;
mod horizon;
mod host;
mod infer;
mod lifecycle;
mod pairs;
pub(crate) mod plan;
mod spine;
mod stats;
mod tor;

pub use crate::snapshot::probe::{NodeState, Transition};
pub use evidence::{MIN_REPORTERS, STEADY_RATIO};
pub use fabric::{
    CROWD_MIN, CROWD_SHARE, PARTIAL_ALPHA, PARTIAL_MIN_PROBES, PARTIAL_ROUNDS, SLOW_RATE_FLOOR,
};
pub use horizon::{
    HORIZON_BRIDGE, HORIZON_CAP, HORIZON_MARGIN, HORIZON_MIN_RUN, HORIZON_MIN_RUNS,
    HORIZON_QUANTILE, HORIZON_RUNS, Horizon,
};
pub use host::{
    CONTRADICTIONS, HealthConfig, HealthEngine, LINK_REMEASURES, Probe, REPORT_WINDOW, Report,
    RestoreError, RoundInput, RoundOutput, max_state_bytes,
};
pub use infer::{InferConfig, TorInference};
pub use spine::SpineVerdict;
pub use stats::median;
pub use tor::{TOR_MIN_MEMBERS, TorVerdict};
