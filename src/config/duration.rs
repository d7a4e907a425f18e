//! Human-readable durations in the config (`"500ms"`, `"5s"`, `"1m"`, `"1h"`).
//!
//! Prometheus and node_exporter users write durations this way; a bare integer would
//! leave the unit to guesswork.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but whitespace.
    #[error("empty duration; write e.g. \"5s\" or \"500ms\"")]
    Empty,
    /// A part does not start with a digit.
    #[error("{text:?} is not a duration; write e.g. \"5s\", \"500ms\" or \"1m\"")]
    NotDuration {
        /// The duration as written (trimmed).
        text: String,
    },
    /// A number does not fit 64 bits.
    #[error("{text:?}: number too large")]
    TooLarge {
        /// The duration as written (trimmed).
        text: String,
    },
    /// A number without a unit.
    #[error("{text:?} has no unit; write e.g. \"{number}s\" or \"{number}ms\"")]
    NoUnit {
        /// The duration as written (trimmed).
        text: String,
        /// The number that lacks its unit.
        number: u64,
    },
    /// A unit other than `ms`, `s`, `m` and `h`.
    #[error("{text:?} has unknown unit {unit:?}; use ms, s, m or h")]
    UnknownUnit {
        /// The duration as written (trimmed).
        text: String,
        /// The unit.
        unit: String,
    },
}

/// Parses `"<integer><unit>"` with unit `ms`, `s`, `m` or `h`. Compound forms such as
/// `"1m30s"` are accepted, as in Prometheus.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let text = || s.to_string();
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::NotDuration { text: text() });
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::TooLarge { text: text() })?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "" => {
                return Err(DurationError::NoUnit {
                    text: text(),
                    number: n,
                });
            }
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text(),
                    unit: other.to_string(),
                });
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// Formats a duration the way [`parse`] reads it, choosing the largest exact unit.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".into()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Serde adapter so config structs hold [`Duration`] but files hold strings.
pub(crate) mod serde_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Serializes as a duration string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*d))
    }

    /// Deserializes from a duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
    }

    #[test]
    fn rejects_bad_input_with_reason() {
        assert!(parse("").unwrap_err().to_string().contains("empty"));
        assert!(parse("5").unwrap_err().to_string().contains("no unit"));
        assert!(
            parse("5d")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
        assert!(
            parse("s")
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
        assert!(
            parse("99999999999999999999s")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
    }

    #[test]
    fn format_round_trips() {
        for d in [0u64, 1, 999, 1000, 1500, 60_000, 90_000, 3_600_000] {
            let d = Duration::from_millis(d);
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
