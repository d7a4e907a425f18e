//! hcclwatch: a fleet health monitor for Ascend NPU training clusters.
//!
//! A daemon on every node reads NPU telemetry from DCMI and host telemetry from the OS,
//! probes the network between nodes with an embedded HCCL-compatible collective engine,
//! decides which node or link is bad, and exports all of it to Prometheus and OTLP. Data
//! flows one way, sources → typed snapshot → verdicts → export and actions:
//!
//! - [`config`]: the TOML file, environment overrides and validation;
//! - [`snapshot`]: plain typed data between sources and readers (depends on nothing);
//! - [`telemetry`]: device sources (DCMI, simulator) and the host collector, run by
//!   poller threads into the shared [`snapshot::Store`];
//! - [`attribution`]: which pods and containers use each NPU (kubelet pod-resources, the
//!   Kubernetes API, process cgroups), on its own thread into the store;
//! - [`topology`]: this node's ToR, spine group and super pod (a topology file, node
//!   labels, Volcano HyperNodes, the rank table), on its own thread into the store;
//! - [`collective`]: the HCCL-compatible collective engine (a library on its own);
//! - [`health`]: the verdict engine (pure, no I/O);
//! - [`probe`]: probe rounds over the engine, feeding the health engine;
//! - [`simulate`]: the fleet simulator that judges the health engine's thresholds;
//! - [`export`]: Prometheus collectors, OTLP, the state API and the HTTP server;
//! - [`remediate`]: the guarded Alertmanager receiver that cordons nodes;
//! - [`bench`]: `hcclwatch bench`, the engine's benchmark;
//! - [`app`]: the composition root; [`shutdown`]: the shared shutdown signal;
//! - [`logging`]: logfmt/JSON structured logs.
//!
//! All FFI and `unsafe` code lives in `telemetry::dcmi::ffi` (DCMI, and the one
//! `pre_exec` hook the `hccn_tool` runs need); the rest of the crate denies `unsafe`.
//! `tests/layering.rs` checks the allowed imports between these modules.

#![deny(unsafe_code)]

pub mod app;
pub mod attribution;
pub mod bench;
pub mod collective;
pub mod config;
pub mod export;
pub mod health;
pub mod logging;
pub mod probe;
pub mod remediate;
pub(crate) mod shutdown;
pub mod simulate;
pub mod snapshot;
pub mod telemetry;
pub mod topology;
