//! The table of every config key, its type and its limits.
//!
//! serde's `deny_unknown_fields` stops at the first problem, but `check-config` must list
//! every problem with its line. So the document is first walked against this schema,
//! which collects all unknown keys and type errors; only a clean document is handed to
//! serde. A unit test keeps the schema and the structs in step (every struct field must be
//! here, and every key here must deserialize).

use std::time::Duration;

use super::duration;

/// The type of a config value, with the limits a value must respect.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A sub-table.
    Table,
    /// `true` or `false`.
    Bool,
    /// An integer within inclusive bounds.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Any string.
    Str,
    /// A filesystem path (a string; existence is checked at run time, not here).
    Path,
    /// A duration string within inclusive bounds.
    Duration {
        /// Shortest accepted duration.
        min: Duration,
        /// Longest accepted duration.
        max: Duration,
    },
    /// One of a fixed set of strings.
    Enum(&'static [&'static str]),
    /// An array of `host:port` / `[v6]:port` socket addresses.
    AddrList,
    /// An array of distinct, non-empty label-safe names.
    NameList,
    /// An array of non-empty strings (repeats allowed).
    StrList,
    /// A number within inclusive bounds (integers are accepted).
    Float {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
}

/// One key of the config file.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Dotted path, e.g. `telemetry.intervals.health`.
    pub path: &'static str,
    /// Value type and limits.
    pub kind: Kind,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn interval() -> Kind {
    Kind::Duration {
        min: ms(100),
        max: ms(86_400_000),
    }
}

/// Every key hcclwatch accepts. Order is the order of the documented example.
pub const SCHEMA: &[Key] = &[
    Key {
        path: "web",
        kind: Kind::Table,
    },
    Key {
        path: "web.listen_address",
        kind: Kind::Str,
    },
    Key {
        path: "web.telemetry_path",
        kind: Kind::Str,
    },
    // --- HTTP hardening (issue 18): web config file and server limits ---
    Key {
        path: "web.config_file",
        kind: Kind::Path,
    },
    Key {
        path: "web.max_connections",
        kind: Kind::Int {
            min: 16,
            max: 1_000_000,
        },
    },
    Key {
        path: "web.header_read_timeout",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(300_000),
        },
    },
    Key {
        path: "web.idle_timeout",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "web.max_header_bytes",
        kind: Kind::Int {
            min: 8192,
            max: 1 << 20,
        },
    },
    // --- end of the HTTP hardening block ---
    Key {
        path: "web.pod_labels",
        kind: Kind::Bool,
    },
    Key {
        path: "log",
        kind: Kind::Table,
    },
    Key {
        path: "log.level",
        kind: Kind::Enum(&["error", "warn", "info", "debug", "trace"]),
    },
    Key {
        path: "log.format",
        kind: Kind::Enum(&["logfmt", "json"]),
    },
    Key {
        path: "telemetry",
        kind: Kind::Table,
    },
    Key {
        path: "telemetry.backend",
        kind: Kind::Enum(&["auto", "dcmi", "sim", "none"]),
    },
    Key {
        path: "telemetry.dcmi_library",
        kind: Kind::Path,
    },
    Key {
        path: "telemetry.call_deadline",
        kind: Kind::Duration {
            min: ms(10),
            max: ms(60_000),
        },
    },
    Key {
        path: "telemetry.network_health_deadline",
        kind: Kind::Duration {
            min: ms(10),
            max: ms(60_000),
        },
    },
    Key {
        path: "telemetry.max_stuck_calls",
        kind: Kind::Int { min: 1, max: 64 },
    },
    Key {
        path: "telemetry.hccs_profiling_time",
        kind: Kind::Duration {
            min: ms(1),
            max: ms(1000),
        },
    },
    Key {
        path: "telemetry.hccn_tool",
        kind: Kind::Path,
    },
    Key {
        path: "telemetry.hccn_conf",
        kind: Kind::Path,
    },
    Key {
        path: "telemetry.hccn_call_deadline",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(600_000),
        },
    },
    Key {
        path: "telemetry.hccn_ping_deadline",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(600_000),
        },
    },
    Key {
        path: "telemetry.hccn_max_calls_in_flight",
        kind: Kind::Int { min: 1, max: 64 },
    },
    Key {
        path: "telemetry.fault_levels_file",
        kind: Kind::Path,
    },
    Key {
        path: "telemetry.intervals",
        kind: Kind::Table,
    },
    Key {
        path: "telemetry.intervals.inventory",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.health",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.sensors",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.utilization",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.memory",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.network",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.host",
        kind: interval(),
    },
    Key {
        path: "telemetry.intervals.ports",
        kind: Kind::Duration {
            min: ms(1_000),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "telemetry.intervals.optics",
        kind: Kind::Duration {
            min: ms(1_000),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "telemetry.sim",
        kind: Kind::Table,
    },
    Key {
        path: "telemetry.sim.chips",
        kind: Kind::Int { min: 1, max: 64 },
    },
    Key {
        path: "telemetry.sim.seed",
        kind: Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    },
    Key {
        path: "collective",
        kind: Kind::Table,
    },
    Key {
        path: "collective.peers",
        kind: Kind::AddrList,
    },
    Key {
        path: "collective.peer_names",
        kind: Kind::NameList,
    },
    Key {
        path: "collective.peer_topology",
        kind: Kind::StrList,
    },
    Key {
        path: "collective.rank",
        kind: Kind::Int {
            min: -1,
            max: 65535,
        },
    },
    Key {
        path: "collective.peers_dns",
        kind: Kind::Str,
    },
    Key {
        path: "collective.own_address",
        kind: Kind::Str,
    },
    Key {
        path: "collective.node_name",
        kind: Kind::Str,
    },
    Key {
        path: "collective.key_file",
        kind: Kind::Path,
    },
    Key {
        path: "collective.rank_table_file",
        kind: Kind::Path,
    },
    Key {
        path: "collective.rank_table_port",
        kind: Kind::Int { min: 1, max: 65535 },
    },
    Key {
        path: "collective.channels",
        kind: Kind::Int { min: 1, max: 16 },
    },
    Key {
        path: "collective.connect_timeout",
        kind: Kind::Duration {
            min: ms(1000),
            max: ms(7_200_000),
        },
    },
    Key {
        path: "collective.exec_timeout",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "collective.algo",
        kind: Kind::Str,
    },
    Key {
        path: "collective.bind_device",
        kind: Kind::Str,
    },
    Key {
        path: "collective.authenticate_payloads",
        kind: Kind::Bool,
    },
    Key {
        path: "collective.traffic_class",
        kind: Kind::Int { min: -1, max: 255 },
    },
    Key {
        path: "probe",
        kind: Kind::Table,
    },
    Key {
        path: "probe.enabled",
        kind: Kind::Bool,
    },
    Key {
        path: "probe.interval",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "probe.small_bytes",
        kind: Kind::Int {
            min: 4,
            max: 1 << 20,
        },
    },
    Key {
        path: "probe.link_bytes",
        kind: Kind::Int {
            min: 1,
            max: 1 << 30,
        },
    },
    Key {
        path: "probe.ring_every",
        kind: Kind::Int {
            min: 0,
            max: 100_000,
        },
    },
    Key {
        path: "probe.ring_bytes",
        kind: Kind::Int {
            min: 4,
            max: 1 << 30,
        },
    },
    Key {
        path: "probe.member_timeout",
        kind: Kind::Duration {
            min: ms(1000),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "probe.dns_refresh",
        kind: Kind::Duration {
            min: ms(1000),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "probe.membership_stale_after",
        kind: Kind::Duration {
            min: ms(1000),
            max: ms(86_400_000),
        },
    },
    Key {
        path: "probe.max_group_size",
        kind: Kind::Int { min: 2, max: 1024 },
    },
    Key {
        path: "probe.budget_busy_ratio",
        kind: Kind::Float { min: 0.0, max: 1.0 },
    },
    Key {
        path: "probe.budget_bytes_per_hour",
        kind: Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    },
    Key {
        path: "probe.inject_peer_throttle",
        kind: Kind::StrList,
    },
    Key {
        path: "probe.inject_throttle_bytes_per_second",
        kind: Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    },
    Key {
        path: "probe.inject_lies",
        kind: Kind::Bool,
    },
    Key {
        path: "probe.congestion_enabled",
        kind: Kind::Bool,
    },
    Key {
        path: "probe.congestion_interface",
        kind: Kind::Str,
    },
    Key {
        path: "probe.congestion_busy_ratio",
        kind: Kind::Float {
            min: 0.05,
            max: 1.0,
        },
    },
    Key {
        path: "probe.congestion_line_rate",
        kind: Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    },
    Key {
        path: "probe.congestion_ce_packets",
        kind: Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    },
    // For tests: the reader's sysfs and procfs roots (a fake tree the test writes).
    Key {
        path: "probe.congestion_sysfs_root",
        kind: Kind::Path,
    },
    Key {
        path: "probe.congestion_procfs_root",
        kind: Kind::Path,
    },
    Key {
        path: "device_probe",
        kind: Kind::Table,
    },
    Key {
        path: "device_probe.enabled",
        kind: Kind::Bool,
    },
    Key {
        path: "device_probe.pings_per_round",
        kind: Kind::Int { min: 0, max: 16 },
    },
    Key {
        path: "device_probe.max_packets_per_second",
        kind: Kind::Float {
            min: 0.0,
            max: 10.0,
        },
    },
    Key {
        path: "device_probe.interval",
        kind: Kind::Duration {
            min: ms(1_000),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "device_probe.confirm_cap",
        kind: Kind::Int { min: 0, max: 256 },
    },
    Key {
        path: "device_probe.hccs",
        kind: Kind::Bool,
    },
    Key {
        path: "device_probe.hccs_round_interval",
        kind: Kind::Duration {
            min: ms(1_000),
            max: ms(60_000),
        },
    },
    Key {
        path: "device_probe.hccs_read_interval",
        kind: Kind::Duration {
            min: ms(2_000),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "device_probe.hccs_super_pod",
        kind: Kind::Int {
            min: 0,
            max: u32::MAX as i64,
        },
    },
    Key {
        path: "health",
        kind: Kind::Table,
    },
    Key {
        path: "health.window",
        kind: Kind::Int { min: 3, max: 1000 },
    },
    Key {
        path: "health.delta",
        kind: Kind::Float {
            min: 0.01,
            max: 2.0,
        },
    },
    Key {
        path: "health.z",
        kind: Kind::Float {
            min: 0.5,
            max: 50.0,
        },
    },
    Key {
        path: "health.mad_floor",
        kind: Kind::Float { min: 0.0, max: 1.0 },
    },
    Key {
        path: "health.confirm_peers",
        kind: Kind::Int { min: 1, max: 16 },
    },
    Key {
        path: "health.hard_hold_down",
        kind: Kind::Int {
            min: 1,
            max: 10_000,
        },
    },
    Key {
        path: "health.hard_consecutive_reads",
        kind: Kind::Int { min: 1, max: 100 },
    },
    Key {
        path: "health.hard_ecc_double_per_hour",
        kind: Kind::Int {
            min: 1,
            max: 1_000_000,
        },
    },
    Key {
        path: "health.confirm_rounds",
        kind: Kind::Int { min: 1, max: 10 },
    },
    Key {
        path: "health.confirm_hold",
        kind: Kind::Int { min: 0, max: 1000 },
    },
    Key {
        path: "health.congested_hold",
        kind: Kind::Int {
            min: 0,
            max: 10_000,
        },
    },
    Key {
        path: "health.exit_rounds",
        kind: Kind::Int {
            min: 1,
            max: 100_000,
        },
    },
    Key {
        path: "health.probation_rounds",
        kind: Kind::Int {
            min: 0,
            max: 1_000_000,
        },
    },
    Key {
        path: "health.fabric_ratio",
        kind: Kind::Float {
            min: 1.0,
            max: 10.0,
        },
    },
    Key {
        path: "health.fabric_rounds",
        kind: Kind::Int { min: 1, max: 1000 },
    },
    Key {
        path: "health.link_observations",
        kind: Kind::Int { min: 1, max: 100 },
    },
    Key {
        path: "collectors",
        kind: Kind::Table,
    },
    Key {
        path: "collectors.health",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.sensors",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.utilization",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.memory",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.network",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.host",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.ports",
        kind: Kind::Bool,
    },
    Key {
        path: "collectors.optics",
        kind: Kind::Bool,
    },
    Key {
        path: "otlp",
        kind: Kind::Table,
    },
    Key {
        path: "otlp.endpoint",
        kind: Kind::Str,
    },
    Key {
        path: "otlp.protocol",
        kind: Kind::Enum(&["http/protobuf"]),
    },
    Key {
        path: "otlp.interval",
        kind: Kind::Duration {
            min: ms(500),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "otlp.headers",
        kind: Kind::NameList,
    },
    Key {
        path: "otlp.timeout",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(300_000),
        },
    },
    Key {
        path: "otlp.compression",
        kind: Kind::Enum(&["none", "gzip"]),
    },
    Key {
        path: "otlp.traces",
        kind: Kind::Bool,
    },
    Key {
        path: "otlp.shutdown_timeout",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(60_000),
        },
    },
    Key {
        path: "attribution",
        kind: Kind::Table,
    },
    Key {
        path: "attribution.enabled",
        kind: Kind::Bool,
    },
    Key {
        path: "attribution.pod_resources_socket",
        kind: Kind::Path,
    },
    Key {
        path: "attribution.resource_prefixes",
        kind: Kind::StrList,
    },
    Key {
        path: "attribution.interval",
        kind: Kind::Duration {
            min: ms(1000),
            max: ms(3_600_000),
        },
    },
    Key {
        path: "attribution.deadline",
        kind: Kind::Duration {
            min: ms(100),
            max: ms(60_000),
        },
    },
    Key {
        path: "attribution.kubernetes_api",
        kind: Kind::Bool,
    },
    Key {
        path: "attribution.kubeconfig",
        kind: Kind::Path,
    },
    Key {
        path: "attribution.node_name",
        kind: Kind::Str,
    },
    Key {
        path: "attribution.proc_root",
        kind: Kind::Path,
    },
];

/// Looks a dotted path up in [`SCHEMA`].
pub fn lookup(path: &str) -> Option<&'static Key> {
    SCHEMA.iter().find(|k| k.path == path)
}

/// The environment variable that overrides `path`: `HCCLWATCH_` + path, upper-cased,
/// with dots as underscores.
pub fn env_name(path: &str) -> String {
    format!("HCCLWATCH_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// The parent table of a dotted path (`""` for a top-level key).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('.').map_or("", |(p, _)| p)
}

/// The valid key closest to `path` by edit distance, preferring siblings of `path`.
pub fn nearest(path: &str) -> &'static str {
    let parent_of = parent(path);
    let leaf = path.rsplit_once('.').map_or(path, |(_, l)| l);
    let siblings: Vec<&Key> = SCHEMA
        .iter()
        .filter(|k| parent(k.path) == parent_of)
        .collect();
    let candidates: Vec<&Key> = if siblings.is_empty() {
        SCHEMA.iter().collect()
    } else {
        siblings
    };
    candidates
        .into_iter()
        .min_by_key(|k| {
            let kleaf = k.path.rsplit_once('.').map_or(k.path, |(_, l)| l);
            levenshtein(leaf, kleaf)
        })
        .map_or("", |k| k.path)
}

/// Edit distance between two strings (insert, delete, substitute all cost 1).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Checks one value against its kind; the error says what was expected.
pub fn check_value(kind: Kind, value: &toml::Value) -> Result<(), String> {
    match (kind, value) {
        (Kind::Table, toml::Value::Table(_)) => Ok(()),
        (Kind::Table, v) => Err(format!("expected a table, found {}", type_name(v))),
        (Kind::Bool, toml::Value::Boolean(_)) => Ok(()),
        (Kind::Bool, v) => Err(format!("expected true or false, found {}", type_name(v))),
        (Kind::Int { min, max }, toml::Value::Integer(n)) => {
            if (min..=max).contains(n) {
                Ok(())
            } else {
                Err(format!("{n} is out of range {min}..={max}"))
            }
        }
        (Kind::Int { .. }, v) => Err(format!("expected an integer, found {}", type_name(v))),
        (Kind::Str | Kind::Path, toml::Value::String(_)) => Ok(()),
        (Kind::Str | Kind::Path, v) => Err(format!("expected a string, found {}", type_name(v))),
        (Kind::Duration { min, max }, toml::Value::String(s)) => {
            let d = duration::parse(s)?;
            if d < min || d > max {
                Err(format!(
                    "{s:?} is out of range {}..={}",
                    duration::format(min),
                    duration::format(max)
                ))
            } else {
                Ok(())
            }
        }
        (Kind::Duration { .. }, v) => Err(format!(
            "expected a duration string such as \"5s\", found {}",
            type_name(v)
        )),
        (Kind::Enum(options), toml::Value::String(s)) => {
            if options.contains(&s.as_str()) {
                Ok(())
            } else {
                Err(format!("{s:?} is not one of {}", options.join(", ")))
            }
        }
        (Kind::Enum(options), v) => Err(format!(
            "expected one of {}, found {}",
            options.join(", "),
            type_name(v)
        )),
        (Kind::AddrList, toml::Value::Array(items)) => {
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            let mut errors = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let toml::Value::String(s) = item else {
                    errors.push(format!(
                        "element {i} is {}, expected \"host:port\"",
                        type_name(item)
                    ));
                    continue;
                };
                match s.parse::<std::net::SocketAddr>() {
                    Err(_) => errors.push(format!("element {i} ({s:?}) is not an IP:port address")),
                    Ok(a) if !seen.insert(a) => {
                        errors.push(format!("element {i} ({s}) is listed twice"))
                    }
                    Ok(_) => {}
                }
            }
            summarise(errors)
        }
        (Kind::NameList, toml::Value::Array(items)) => {
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            let mut errors = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let toml::Value::String(s) = item else {
                    errors.push(format!(
                        "element {i} is {}, expected a name",
                        type_name(item)
                    ));
                    continue;
                };
                if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_control()) {
                    errors.push(format!(
                        "element {i} ({s:?}) must be 1..253 characters without control characters"
                    ));
                } else if !seen.insert(s.as_str()) {
                    errors.push(format!("element {i} ({s}) is listed twice"));
                }
            }
            summarise(errors)
        }
        (Kind::StrList, toml::Value::Array(items)) => {
            let mut errors = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    toml::Value::String(s) if !s.is_empty() && !s.chars().any(char::is_control) => {
                    }
                    toml::Value::String(s) => errors.push(format!(
                        "element {i} ({s:?}) must be non-empty, without control characters"
                    )),
                    other => errors.push(format!(
                        "element {i} is {}, expected a string",
                        type_name(other)
                    )),
                }
            }
            summarise(errors)
        }
        (Kind::StrList, v) => Err(format!(
            "expected an array of strings, found {}",
            type_name(v)
        )),
        (Kind::NameList, v) => Err(format!(
            "expected an array of name strings, found {}",
            type_name(v)
        )),
        (Kind::AddrList, v) => Err(format!(
            "expected an array of \"IP:port\" strings, found {}",
            type_name(v)
        )),
        (Kind::Float { min, max }, toml::Value::Float(x)) => {
            if x.is_finite() && (min..=max).contains(x) {
                Ok(())
            } else {
                Err(format!("{x} is out of range {min}..={max}"))
            }
        }
        (Kind::Float { min, max }, toml::Value::Integer(i)) => {
            let x = *i as f64;
            if (min..=max).contains(&x) {
                Ok(())
            } else {
                Err(format!("{x} is out of range {min}..={max}"))
            }
        }
        (Kind::Float { .. }, v) => Err(format!("expected a number, found {}", type_name(v))),
    }
}

/// How many element problems of one list are spelled out before the rest is counted.
pub const LIST_PROBLEMS_SHOWN: usize = 10;

/// Joins the problems of one list's elements: every one up to [`LIST_PROBLEMS_SHOWN`],
/// then how many more, so a generated list with thousands of bad entries stays readable.
pub fn summarise(errors: Vec<String>) -> Result<(), String> {
    if errors.is_empty() {
        return Ok(());
    }
    let n = errors.len();
    let mut text = errors
        .into_iter()
        .take(LIST_PROBLEMS_SHOWN)
        .collect::<Vec<_>>()
        .join("; ");
    if n > LIST_PROBLEMS_SHOWN {
        text.push_str(&format!("; and {} more", n - LIST_PROBLEMS_SHOWN));
    }
    Err(text)
}

/// Converts an environment variable's text to a TOML value of the key's kind.
pub fn value_from_env(kind: Kind, text: &str) -> Result<toml::Value, String> {
    match kind {
        Kind::Bool => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(toml::Value::Boolean(true)),
            "false" | "0" | "no" => Ok(toml::Value::Boolean(false)),
            other => Err(format!("{other:?} is not a boolean; use true or false")),
        },
        Kind::Int { .. } => text
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("{text:?} is not an integer")),
        Kind::Table => Err("a table cannot be set from the environment".into()),
        Kind::Float { .. } => text
            .trim()
            .parse::<f64>()
            .map(toml::Value::Float)
            .map_err(|_| format!("{text:?} is not a number")),
        Kind::AddrList | Kind::NameList | Kind::StrList => Ok(toml::Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| toml::Value::String(t.to_string()))
                .collect(),
        )),
        Kind::Str | Kind::Path | Kind::Duration { .. } | Kind::Enum(_) => {
            Ok(toml::Value::String(text.to_string()))
        }
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("backend", "backend"), 0);
        assert_eq!(levenshtein("backedn", "backend"), 2);
        assert_eq!(levenshtein("listen_adress", "listen_address"), 1);
    }

    #[test]
    fn nearest_prefers_siblings() {
        assert_eq!(nearest("web.listen_adress"), "web.listen_address");
        assert_eq!(nearest("telemetry.backnd"), "telemetry.backend");
        assert_eq!(
            nearest("telemetry.intervals.helth"),
            "telemetry.intervals.health"
        );
        assert_eq!(nearest("telemtry"), "telemetry");
    }

    #[test]
    fn env_names() {
        assert_eq!(
            env_name("web.listen_address"),
            "HCCLWATCH_WEB_LISTEN_ADDRESS"
        );
        assert_eq!(
            env_name("telemetry.intervals.health"),
            "HCCLWATCH_TELEMETRY_INTERVALS_HEALTH"
        );
    }

    #[test]
    fn env_names_are_unambiguous() {
        let mut names: Vec<String> = SCHEMA.iter().map(|k| env_name(k.path)).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(
            before,
            names.len(),
            "two keys map to one environment variable"
        );
    }

    #[test]
    fn check_value_errors_name_expectation() {
        let k = lookup("telemetry.max_stuck_calls").unwrap().kind;
        assert!(
            check_value(k, &toml::Value::Integer(0))
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            check_value(k, &toml::Value::String("x".into()))
                .unwrap_err()
                .contains("integer")
        );
        let k = lookup("telemetry.backend").unwrap().kind;
        assert!(
            check_value(k, &toml::Value::String("cuda".into()))
                .unwrap_err()
                .contains("auto, dcmi, sim, none")
        );
        let k = lookup("telemetry.call_deadline").unwrap().kind;
        assert!(
            check_value(k, &toml::Value::String("5ms".into()))
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            check_value(k, &toml::Value::Integer(5))
                .unwrap_err()
                .contains("duration string")
        );
    }

    #[test]
    fn address_lists() {
        let k = Kind::AddrList;
        let arr = |v: &[&str]| {
            toml::Value::Array(
                v.iter()
                    .map(|s| toml::Value::String(s.to_string()))
                    .collect(),
            )
        };
        assert!(check_value(k, &arr(&["10.0.0.1:60000", "[::1]:60001"])).is_ok());
        assert!(
            check_value(k, &arr(&["10.0.0.1"]))
                .unwrap_err()
                .contains("element 0")
        );
        assert!(
            check_value(k, &arr(&["10.0.0.1:1", "10.0.0.1:1"]))
                .unwrap_err()
                .contains("listed twice")
        );
        assert_eq!(value_from_env(k, "a:1, b:2").unwrap(), arr(&["a:1", "b:2"]));
    }

    #[test]
    fn env_values_typed_by_kind() {
        assert_eq!(
            value_from_env(Kind::Bool, "0").unwrap(),
            toml::Value::Boolean(false)
        );
        assert!(value_from_env(Kind::Bool, "maybe").is_err());
        assert_eq!(
            value_from_env(Kind::Int { min: 0, max: 9 }, " 7").unwrap(),
            toml::Value::Integer(7)
        );
        assert!(value_from_env(Kind::Int { min: 0, max: 9 }, "seven").is_err());
    }
}
