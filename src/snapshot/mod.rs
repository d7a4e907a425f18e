//! Plain, typed data between the sources and the readers.
//!
//! Sources (the NPU and host pollers, the prober, the OTLP exporter, the SIGHUP check)
//! write their part; readers (the Prometheus collectors, OTLP, `/api/v1/state`, the health
//! engine's inputs) read it. Nothing here does I/O or knows a metrics library, and this
//! module imports nothing else of the crate, so every other module can depend on it
//! without a cycle: data flows one way, sources → snapshot → verdicts → export and actions.

pub mod attribution;
#[cfg(test)]
pub(crate) mod fixture;
pub(crate) mod histogram;
pub mod host;
pub mod npu;
pub mod overrides;
pub(crate) mod port;
pub(crate) mod probe;
pub mod status;
pub(crate) mod store;
pub mod topology;

pub use store::{Store, View};
