//! Verdicts from measurements: which node is a straggler, which link is degraded, whether
//! the whole fabric is slow. Pure code (no I/O), so the daemon, the simulator and the
//! tests all run the same engine. [`engine`] judges nodes and links of the host plane from
//! collective timings; [`device`] judges NPU ports from device-plane pings. It reads and writes only plain data from
//! [`crate::snapshot`].

pub mod device;
pub mod engine;

pub use crate::snapshot::probe::{NodeState, Transition};
pub use engine::{HealthConfig, HealthEngine, Probe, RoundInput, RoundOutput};
