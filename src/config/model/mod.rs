//! The configuration's model: one typed struct per TOML table, each declared once with
//! [`section!`]: a field's doc comment, Rust type, default, TOML kind and limits, and its
//! audience sit on one line of its section's file, and the struct, its `Default` and its
//! part of [`super::schema::SCHEMA`] all come from there.

mod attribution;
mod collective;
mod collectors;
mod compat;
mod device_probe;
mod health;
mod log;
mod otlp;
mod probe;
mod remediation;
mod telemetry;
mod topology;
mod web;

pub use self::attribution::AttributionConfig;
pub use self::collective::CollectiveConfig;
pub use self::collectors::CollectorsConfig;
pub use self::compat::CompatConfig;
pub use self::device_probe::DeviceProbeSection;
pub use self::health::HealthSection;
pub use self::log::{LogConfig, LogFormat, LogLevel};
pub use self::otlp::{Compression, OtlpConfig, OtlpProtocol};
pub use self::probe::{HARDWARE_SIGN_NAMES, ProbeSection};
pub use self::remediation::{PushConfig, RemediationConfig};
pub use self::telemetry::{Backend, Intervals, SimConfig, TelemetryConfig};
pub use self::topology::{NpuCabling, TopologyConfig};
pub use self::web::{RESERVED_PATHS, WebConfig};

use super::schema::Key;

/// Declares a configuration section: a struct whose fields are the table's keys.
///
/// Each field is `name: Type = default, spec;` under its doc comment (and any serde
/// attribute, such as the duration adapter). The struct denies unknown keys and takes
/// each missing key's default; `KEYS` lists the table's keys for the schema, in order.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $table:literal {
            $(
                $(#[$fmeta:meta])*
                $field:ident: $ty:ty = $default:expr, $spec:expr;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )+
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($field: $default,)+
                }
            }
        }

        impl $name {
            /// The keys of this table, in declaration order.
            pub const KEYS: &'static [$crate::config::schema::Key] = &[
                $(
                    $crate::config::schema::Key::new(
                        concat!($table, ".", stringify!($field)),
                        $spec,
                    ),
                )+
            ];
        }
    };
}

pub(crate) use section;

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP endpoint settings.
    pub web: WebConfig,
    /// Logging settings.
    pub log: LogConfig,
    /// Device telemetry settings.
    pub telemetry: TelemetryConfig,
    /// The collective engine: peers and transport (used by `bench --config.file` and
    /// by probing).
    pub collective: CollectiveConfig,
    /// Continuous probing between the `[collective]` peers.
    pub probe: ProbeSection,
    /// Straggler-detection thresholds.
    pub health: HealthSection,
    /// Device-plane probing: NPU port to NPU port pings.
    pub device_probe: DeviceProbeSection,
    /// Which collectors run.
    pub collectors: CollectorsConfig,
    /// OpenTelemetry (OTLP) export; off unless an endpoint is configured.
    pub otlp: OtlpConfig,
    /// Which pods and containers use each NPU.
    pub attribution: AttributionConfig,
    /// Series under other exporters' names.
    pub compat: CompatConfig,
    /// Where each node sits in the network.
    pub topology: TopologyConfig,
    /// The daemon's side of remediation: pushing hard faults to the receiver.
    pub remediation: RemediationConfig,
}

/// Every table's keys, each table before its keys, in the order of the documented example
/// (which is the order `check-config` suggests the nearest key in).
pub(crate) const SECTIONS: &[&[Key]] = &[
    &[Key::table("web")],
    WebConfig::KEYS,
    &[Key::table("log")],
    LogConfig::KEYS,
    &[Key::table("telemetry")],
    TelemetryConfig::KEYS,
    Intervals::KEYS,
    SimConfig::KEYS,
    &[Key::table("collective")],
    CollectiveConfig::KEYS,
    &[Key::table("probe")],
    ProbeSection::KEYS,
    &[Key::table("device_probe")],
    DeviceProbeSection::KEYS,
    &[Key::table("health")],
    HealthSection::KEYS,
    &[Key::table("collectors")],
    CollectorsConfig::KEYS,
    &[Key::table("otlp")],
    OtlpConfig::KEYS,
    &[Key::table("attribution")],
    AttributionConfig::KEYS,
    &[Key::table("compat")],
    CompatConfig::KEYS,
    &[Key::table("topology")],
    TopologyConfig::KEYS,
    &[Key::table("remediation")],
    RemediationConfig::KEYS,
    PushConfig::KEYS,
];
