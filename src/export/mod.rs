//! Everything that leaves the process: the Prometheus exposition and its HTTP server.
//!
//! Exporters read the [`crate::telemetry::store::Store`]; they never trigger a collection.

pub mod metrics;
pub mod otlp;
pub mod server;
