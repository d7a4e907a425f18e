//! Everything that leaves the process: the Prometheus exposition, OTLP, the JSON state API
//! and the HTTP server that serves them.
//!
//! Exporters read the [`crate::snapshot::Store`]; they never trigger a collection.

pub(crate) mod otlp;
pub mod prometheus;
pub mod push;
pub(crate) mod server;
pub(crate) mod state;
pub(crate) mod web;
