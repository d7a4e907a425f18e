//! Verdicts from measurements: which node is a straggler, which link is degraded, whether
//! the whole fabric is slow. Pure code (no I/O), so the daemon, the simulator and the
//! tests all run the same engine.

pub mod engine;
pub mod sim;

pub use engine::{
    HealthConfig, HealthEngine, NodeState, Probe, RoundInput, RoundOutput, Transition,
};
