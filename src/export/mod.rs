//! Everything that leaves the process: the Prometheus exposition, OTLP, the JSON state API
//! and the HTTP server that serves them.
//!
//! Exporters read the [`crate::snapshot::Store`]; they never trigger a collection.

pub mod otlp;
pub mod prometheus;
pub mod server;
pub mod state;
pub mod web;
