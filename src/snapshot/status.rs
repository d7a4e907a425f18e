//! The daemon's account of itself: how each collector's last run went, whether the
//! configuration on disk last checked out, how OTLP exports fare, and what build this is.

use std::time::{Duration, SystemTime};

/// How the last run of one collector went.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorStatus {
    /// `collector` label value.
    pub name: String,
    /// No reading of the last run failed.
    pub success: bool,
    /// How long the last run took.
    pub duration: Duration,
    /// When the collector last succeeded.
    pub last_success: Option<SystemTime>,
}

/// The last configuration check: whether the file on disk loaded and validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReloadStatus {
    /// The last check passed.
    pub ok: bool,
    /// When a check last passed.
    pub last_success: Option<SystemTime>,
}

/// Export outcomes of one OTLP signal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SignalExports {
    /// Export attempts, each counted once after its retries.
    pub exports: u64,
    /// Attempts that failed after their retries.
    pub failures: u64,
    /// Unix time (seconds) of the last success.
    pub last_success: Option<f64>,
}

/// OTLP export outcomes, per signal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OtlpSnapshot {
    /// Metrics.
    pub metrics: SignalExports,
    /// Traces, when `otlp.traces` is on.
    pub traces: Option<SignalExports>,
}

/// Hard-fault pushes to the remediation receiver, when `[remediation.push]` is on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushStatus {
    /// Requests by (status pushed: firing or resolved, result: ok, retry or rejected).
    pub requests: std::collections::BTreeMap<(&'static str, &'static str), u64>,
    /// Whether this node's hard fault is pushed as firing now.
    pub firing: bool,
    /// Unix time of the last request the receiver accepted.
    pub last_success: Option<f64>,
}

/// Build metadata for `hcclwatch_build_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// Crate version.
    pub version: &'static str,
    /// Git commit.
    pub revision: &'static str,
    /// Build date (UTC, ISO 8601).
    pub build_date: &'static str,
}

impl BuildInfo {
    /// This binary's build info (set by `build.rs`).
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            revision: env!("BUILD_INFO_GIT_COMMIT"),
            build_date: env!("BUILD_INFO_DATE"),
        }
    }
}

/// The daemon's own part of the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelfSnapshot {
    /// The last configuration check (start-up or SIGHUP).
    pub reload: Option<ReloadStatus>,
    /// OTLP export outcomes, when OTLP export runs.
    pub otlp: Option<OtlpSnapshot>,
    /// Hard-fault pushes, when they are on.
    pub push: Option<PushStatus>,
}
