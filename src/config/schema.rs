//! The table of every config key, its type and its limits.
//!
//! serde's `deny_unknown_fields` stops at the first problem, but `check-config` must list
//! every problem with its line. So the document is first walked against this schema,
//! which collects all unknown keys and type errors; only a clean document is handed to
//! serde. The table is built from the sections' own declarations (`config/model/`), so a
//! key, its type, its default and its limits are written in one place.

use std::collections::HashSet;
use std::time::Duration;

use super::duration::{self, DurationError};
use super::types::{
    DnsTargetError, ListenAddrError, PeerAddrError, PeerThrottleError, TrafficClassError,
};
use crate::collective::algo::select::AlgoError;

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

/// Turns a value of the right shape into its type; the reasons it does not parse, each its
/// own problem (one per bad element of a list).
pub type Parser = fn(&toml::Value) -> Vec<ValueError>;

/// Who a key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Operators: documented in the main table of `docs/configuration.md`.
    Operators,
    /// Tests and the demo (fault injection, fake system trees): documented in their own
    /// table, and never needed in production.
    Tests,
}

/// A key's declaration in its section: the kind, how its value is parsed beyond its
/// shape, and who it is for.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Value type and limits.
    pub kind: Kind,
    /// The parse beyond the shape, for values with a type of their own.
    pub parse: Option<Parser>,
    /// Who it is for.
    pub audience: Audience,
}

impl Spec {
    /// A key of `kind`.
    pub const fn of(kind: Kind) -> Self {
        Self {
            kind,
            parse: None,
            audience: Audience::Operators,
        }
    }
    /// A sub-table.
    pub const TABLE: Self = Self::of(Kind::Table);
    /// `true` or `false`.
    pub const BOOL: Self = Self::of(Kind::Bool);
    /// Any string.
    pub const STR: Self = Self::of(Kind::Str);
    /// A path.
    pub const PATH: Self = Self::of(Kind::Path);
    /// An array of socket addresses.
    pub const ADDR_LIST: Self = Self::of(Kind::AddrList);
    /// An array of distinct names.
    pub const NAME_LIST: Self = Self::of(Kind::NameList);
    /// An array of strings.
    pub const STR_LIST: Self = Self::of(Kind::StrList);

    /// An integer in `min..=max`.
    pub const fn int(min: i64, max: i64) -> Self {
        Self::of(Kind::Int { min, max })
    }

    /// A number in `min..=max`.
    pub const fn float(min: f64, max: f64) -> Self {
        Self::of(Kind::Float { min, max })
    }

    /// A duration in `min..=max`.
    pub const fn duration(min: Duration, max: Duration) -> Self {
        Self::of(Kind::Duration { min, max })
    }

    /// One of `names` (a `config_enum!` enum's `NAMES`).
    pub const fn one_of(names: &'static [&'static str]) -> Self {
        Self::of(Kind::Enum(names))
    }

    /// Also parsed by `parse` once its shape is right.
    pub const fn parsed(mut self, parse: Parser) -> Self {
        self.parse = Some(parse);
        self
    }

    /// For tests and the demo only.
    pub const fn for_tests(mut self) -> Self {
        self.audience = Audience::Tests;
        self
    }
}

/// One key of the config file.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Dotted path, e.g. `telemetry.intervals.health`.
    pub path: &'static str,
    /// Value type and limits.
    pub kind: Kind,
    /// The parse beyond the shape ([`Spec::parsed`]); its problems are reported with the
    /// semantic checks of the key's section, in the order `check-config` always gave them.
    pub parse: Option<Parser>,
    /// Who it is for.
    pub audience: Audience,
}

impl Key {
    /// The key `path`, declared by `spec`.
    pub const fn new(path: &'static str, spec: Spec) -> Self {
        Self {
            path,
            kind: spec.kind,
            parse: spec.parse,
            audience: spec.audience,
        }
    }

    /// The table `path`.
    pub const fn table(path: &'static str) -> Self {
        Self::new(path, Spec::TABLE)
    }
}

/// Milliseconds, for limits.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Seconds, for limits and defaults.
pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The range of a collection interval.
pub const fn interval() -> Spec {
    Spec::duration(ms(100), ms(86_400_000))
}

const fn count(parts: &[&[Key]]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

const fn concat<const N: usize>(parts: &[&[Key]]) -> [Key; N] {
    let mut out = [Key::table(""); N];
    let (mut i, mut k) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            j += 1;
            k += 1;
        }
        i += 1;
    }
    out
}

const ALL: [Key; count(super::model::SECTIONS)] = concat(super::model::SECTIONS);

/// Every key hcclwatch accepts. Order is the order of the documented example.
pub const SCHEMA: &[Key] = &ALL;

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

/// What a value should have been, in "expected …, found …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A table.
    Table,
    /// A boolean.
    Bool,
    /// An integer.
    Integer,
    /// A string.
    String,
    /// A duration string.
    Duration,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// An array of strings.
    Strings,
    /// An array of names.
    Names,
    /// An array of addresses.
    Addresses,
    /// A number.
    Number,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expected::Table => f.write_str("a table"),
            Expected::Bool => f.write_str("true or false"),
            Expected::Integer => f.write_str("an integer"),
            Expected::String => f.write_str("a string"),
            Expected::Duration => f.write_str("a duration string such as \"5s\""),
            Expected::OneOf(names) => write!(f, "one of {}", names.join(", ")),
            Expected::Strings => f.write_str("an array of strings"),
            Expected::Names => f.write_str("an array of name strings"),
            Expected::Addresses => f.write_str("an array of \"IP:port\" strings"),
            Expected::Number => f.write_str("a number"),
        }
    }
}

/// What is wrong with one element of a list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElementError {
    /// Not a string.
    #[error("element {index} is {found}, expected {expected}")]
    NotString {
        /// Position in the list.
        index: usize,
        /// Its TOML type.
        found: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// Not `IP:port`.
    #[error("element {index} ({text:?}) is not an IP:port address")]
    NotAddress {
        /// Position in the list.
        index: usize,
        /// The element.
        text: String,
    },
    /// The same as an earlier element.
    #[error("element {index} ({text}) is listed twice")]
    Repeated {
        /// Position in the list.
        index: usize,
        /// The element (an address as parsed, a name as written).
        text: String,
    },
    /// Not a usable name.
    #[error("element {index} ({text:?}) must be 1..253 characters without control characters")]
    BadName {
        /// Position in the list.
        index: usize,
        /// The element.
        text: String,
    },
    /// Empty or with control characters.
    #[error("element {index} ({text:?}) must be non-empty, without control characters")]
    BadString {
        /// Position in the list.
        index: usize,
        /// The element.
        text: String,
    },
}

/// How many element problems of one list are spelled out before the rest is counted.
pub const LIST_PROBLEMS_SHOWN: usize = 10;

/// The problems of one list's elements: every one up to [`LIST_PROBLEMS_SHOWN`], then how
/// many more, so a generated list with thousands of bad entries stays readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elements(pub Vec<ElementError>);

impl std::fmt::Display for Elements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().take(LIST_PROBLEMS_SHOWN).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        if self.0.len() > LIST_PROBLEMS_SHOWN {
            write!(f, "; and {} more", self.0.len() - LIST_PROBLEMS_SHOWN)?;
        }
        Ok(())
    }
}

/// Why one value was refused.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// The wrong TOML type.
    #[error("expected {expected}, found {found}")]
    Type {
        /// What it should be.
        expected: Expected,
        /// Its TOML type.
        found: &'static str,
    },
    /// An integer out of range.
    #[error("{value} is out of range {min}..={max}")]
    IntRange {
        /// The value.
        value: i64,
        /// Smallest accepted.
        min: i64,
        /// Largest accepted.
        max: i64,
    },
    /// A number out of range.
    #[error("{value} is out of range {min}..={max}")]
    FloatRange {
        /// The value.
        value: f64,
        /// Smallest accepted.
        min: f64,
        /// Largest accepted.
        max: f64,
    },
    /// A duration out of range.
    #[error("{text:?} is out of range {}..={}", duration::format(*min), duration::format(*max))]
    DurationRange {
        /// The duration as written.
        text: String,
        /// Shortest accepted.
        min: Duration,
        /// Longest accepted.
        max: Duration,
    },
    /// Not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// Not one of the accepted strings.
    #[error("{text:?} is not one of {}", names.join(", "))]
    NotOneOf {
        /// The string.
        text: String,
        /// The accepted ones.
        names: &'static [&'static str],
    },
    /// Bad elements of a list.
    #[error("{0}")]
    Elements(Elements),
    /// An environment value that is not a boolean.
    #[error("{0:?} is not a boolean; use true or false")]
    NotBool(String),
    /// An environment value that is not an integer.
    #[error("{0:?} is not an integer")]
    NotInteger(String),
    /// An environment value that is not a number.
    #[error("{0:?} is not a number")]
    NotNumber(String),
    /// An environment variable naming a table.
    #[error("a table cannot be set from the environment")]
    TableFromEnv,
    /// Not a listen address.
    #[error(transparent)]
    ListenAddr(#[from] ListenAddrError),
    /// Not `IP:port`.
    #[error(transparent)]
    PeerAddr(#[from] PeerAddrError),
    /// Not `host:port`.
    #[error(transparent)]
    DnsTarget(#[from] DnsTargetError),
    /// A bad peer throttle element.
    #[error("element {index} ({text:?}): {error}")]
    Throttle {
        /// Position in the list.
        index: usize,
        /// The element.
        text: String,
        /// Why.
        error: PeerThrottleError,
    },
    /// A bad OTLP header element.
    #[error("element {index} ({text:?}) is not name=value")]
    Header {
        /// Position in the list.
        index: usize,
        /// The element.
        text: String,
    },
    /// Not DSCP × 4.
    #[error(transparent)]
    TrafficClass(#[from] TrafficClassError),
    /// Not `HCCL_ALGO` syntax.
    #[error(transparent)]
    Algo(#[from] AlgoError),
}

fn wrong(expected: Expected, v: &toml::Value) -> ValueError {
    ValueError::Type {
        expected,
        found: type_name(v),
    }
}

/// Checks one value against its kind; the error says what was expected.
pub fn check_value(kind: Kind, value: &toml::Value) -> Result<(), ValueError> {
    use toml::Value as V;
    match (kind, value) {
        (Kind::Table, V::Table(_))
        | (Kind::Bool, V::Boolean(_))
        | (Kind::Str | Kind::Path, V::String(_)) => Ok(()),
        (Kind::Table, v) => Err(wrong(Expected::Table, v)),
        (Kind::Bool, v) => Err(wrong(Expected::Bool, v)),
        (Kind::Int { min, max }, V::Integer(n)) => {
            if (min..=max).contains(n) {
                Ok(())
            } else {
                Err(ValueError::IntRange {
                    value: *n,
                    min,
                    max,
                })
            }
        }
        (Kind::Int { .. }, v) => Err(wrong(Expected::Integer, v)),
        (Kind::Str | Kind::Path, v) => Err(wrong(Expected::String, v)),
        (Kind::Duration { min, max }, V::String(s)) => {
            let d = duration::parse(s)?;
            if d < min || d > max {
                Err(ValueError::DurationRange {
                    text: s.clone(),
                    min,
                    max,
                })
            } else {
                Ok(())
            }
        }
        (Kind::Duration { .. }, v) => Err(wrong(Expected::Duration, v)),
        (Kind::Enum(names), V::String(s)) => {
            if names.contains(&s.as_str()) {
                Ok(())
            } else {
                Err(ValueError::NotOneOf {
                    text: s.clone(),
                    names,
                })
            }
        }
        (Kind::Enum(names), v) => Err(wrong(Expected::OneOf(names), v)),
        (Kind::AddrList, V::Array(items)) => elements(address_errors(items)),
        (Kind::NameList, V::Array(items)) => elements(name_errors(items)),
        (Kind::StrList, V::Array(items)) => elements(string_errors(items)),
        (Kind::StrList, v) => Err(wrong(Expected::Strings, v)),
        (Kind::NameList, v) => Err(wrong(Expected::Names, v)),
        (Kind::AddrList, v) => Err(wrong(Expected::Addresses, v)),
        (Kind::Float { min, max }, V::Float(x)) => float_in(*x, min, max, x.is_finite()),
        (Kind::Float { min, max }, V::Integer(i)) => float_in(*i as f64, min, max, true),
        (Kind::Float { .. }, v) => Err(wrong(Expected::Number, v)),
    }
}

fn float_in(value: f64, min: f64, max: f64, finite: bool) -> Result<(), ValueError> {
    if finite && (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ValueError::FloatRange { value, min, max })
    }
}

fn elements(errors: Vec<ElementError>) -> Result<(), ValueError> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValueError::Elements(Elements(errors)))
    }
}

fn address_errors(items: &[toml::Value]) -> Vec<ElementError> {
    let mut seen = HashSet::with_capacity(items.len());
    let mut errors = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let toml::Value::String(s) = item else {
            errors.push(ElementError::NotString {
                index,
                found: type_name(item),
                expected: "\"host:port\"",
            });
            continue;
        };
        match s.parse::<std::net::SocketAddr>() {
            Err(_) => errors.push(ElementError::NotAddress {
                index,
                text: s.clone(),
            }),
            Ok(a) if !seen.insert(a) => errors.push(ElementError::Repeated {
                index,
                text: s.clone(),
            }),
            Ok(_) => {}
        }
    }
    errors
}

fn name_errors(items: &[toml::Value]) -> Vec<ElementError> {
    let mut seen = HashSet::with_capacity(items.len());
    let mut errors = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let toml::Value::String(s) = item else {
            errors.push(ElementError::NotString {
                index,
                found: type_name(item),
                expected: "a name",
            });
            continue;
        };
        if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_control()) {
            errors.push(ElementError::BadName {
                index,
                text: s.clone(),
            });
        } else if !seen.insert(s.as_str()) {
            errors.push(ElementError::Repeated {
                index,
                text: s.clone(),
            });
        }
    }
    errors
}

fn string_errors(items: &[toml::Value]) -> Vec<ElementError> {
    let mut errors = Vec::new();
    for (index, item) in items.iter().enumerate() {
        match item {
            toml::Value::String(s) if !s.is_empty() && !s.chars().any(char::is_control) => {}
            toml::Value::String(s) => errors.push(ElementError::BadString {
                index,
                text: s.clone(),
            }),
            other => errors.push(ElementError::NotString {
                index,
                found: type_name(other),
                expected: "a string",
            }),
        }
    }
    errors
}

/// Converts an environment variable's text to a TOML value of the key's kind.
pub fn value_from_env(kind: Kind, text: &str) -> Result<toml::Value, ValueError> {
    match kind {
        Kind::Bool => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(toml::Value::Boolean(true)),
            "false" | "0" | "no" => Ok(toml::Value::Boolean(false)),
            other => Err(ValueError::NotBool(other.to_string())),
        },
        Kind::Int { .. } => text
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| ValueError::NotInteger(text.to_string())),
        Kind::Table => Err(ValueError::TableFromEnv),
        Kind::Float { .. } => text
            .trim()
            .parse::<f64>()
            .map(toml::Value::Float)
            .map_err(|_| ValueError::NotNumber(text.to_string())),
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
                .to_string()
                .contains("out of range")
        );
        assert!(
            check_value(k, &toml::Value::String("x".into()))
                .unwrap_err()
                .to_string()
                .contains("integer")
        );
        let k = lookup("telemetry.backend").unwrap().kind;
        assert!(
            check_value(k, &toml::Value::String("cuda".into()))
                .unwrap_err()
                .to_string()
                .contains("auto, dcmi, sim, none")
        );
        let k = lookup("telemetry.call_deadline").unwrap().kind;
        assert!(
            check_value(k, &toml::Value::String("5ms".into()))
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        assert!(
            check_value(k, &toml::Value::Integer(5))
                .unwrap_err()
                .to_string()
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
                .to_string()
                .contains("element 0")
        );
        assert!(
            check_value(k, &arr(&["10.0.0.1:1", "10.0.0.1:1"]))
                .unwrap_err()
                .to_string()
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
