//! hcclwatch: a fleet health monitor for Ascend NPU training clusters.
//!
//! A daemon on every node reads NPU telemetry from DCMI and host telemetry from the OS,
//! and exports both to Prometheus. The crate is organised by role, and data flows one way:
//!
//! - [`config`]: the TOML file, environment overrides and validation;
//! - [`telemetry`]: device sources (DCMI, simulator) and the host collector, run by
//!   poller threads into a shared [`telemetry::store::Store`];
//! - [`export`]: renders the store for `/metrics` and serves HTTP;
//! - [`app`]: wiring and lifecycle;
//! - [`logging`]: logfmt/JSON structured logs.
//!
//! All FFI lives in `telemetry::dcmi::ffi`; the rest of the crate denies `unsafe`.

#![deny(unsafe_code)]

pub mod app;
pub mod bench;
pub mod collective;
pub mod config;
pub mod export;
pub mod health;
pub mod logging;
pub mod probe;
pub mod remediate;
pub mod telemetry;
