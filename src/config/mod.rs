//! Configuration: a TOML file, overridden by `HCCLWATCH_<SECTION>_<KEY>` environment
//! variables, overridden by command-line flags.
//!
//! Each table is a typed struct declared once in `model/` (doc, type, default, limits);
//! the schema every document is walked against is built from those declarations
//! ([`schema::SCHEMA`]). Values with a type of their own (addresses, the rank, the traffic
//! class, `HCCL_ALGO`, …, see [`types`]) are parsed when the file is loaded, so their users
//! never parse them again.
//!
//! Loading never stops at the first mistake ([`load()`]): every unknown key (with the
//! nearest valid key), every type error, every value that does not parse and every
//! semantic problem (`check.rs`) is reported at once, each as `PATH:LINE: key.path:
//! reason`. That is what an SRE editing a ConfigMap needs: one run of `hcclwatch
//! check-config` shows all of it.

mod check;
pub(crate) mod diff;
pub mod duration;
pub(crate) mod enums;
pub mod file;
pub mod identity;
mod load;
mod model;
pub mod overrides;
mod problem;
#[cfg(test)]
mod reference;
pub mod schema;
pub mod types;
pub mod web;

pub use self::check::FileProblems;
pub use self::load::{ConfigError, Loaded, load, load_checked, load_str};
pub use self::model::{
    AttributionConfig, Backend, CollectiveConfig, CollectorsConfig, CompatConfig, Compression,
    Config, DeviceProbeSection, HARDWARE_SIGN_NAMES, HealthSection, Intervals, LogConfig,
    LogFormat, LogLevel, NpuCabling, OtlpConfig, OtlpProtocol, ProbeSection, PushConfig,
    RESERVED_PATHS, RemediationConfig, SimConfig, TelemetryConfig, TopologyConfig, WebConfig,
};
pub use self::problem::Problem;
