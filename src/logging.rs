//! Structured logs to stderr, as `logfmt` (the Prometheus ecosystem's default) or JSON.
//!
//! tracing-subscriber has no logfmt formatter, so a small one lives here: `ts=… level=…
//! target=… msg="…" key=value …`, with values quoted when they contain spaces, quotes or
//! `=`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, LogLevel};

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The level string is not a valid filter.
    #[error("invalid log level {level:?}: {reason}; use error, warn, info, debug or trace")]
    Level {
        /// What was given.
        level: String,
        /// Parser message.
        reason: String,
    },
}

/// Installs the global subscriber. Calling it twice is harmless (the second call is a
/// no-op), which keeps tests that start the app in-process simple.
pub fn init(level: &str, format: LogFormat) -> Result<(), LogError> {
    if LogLevel::from_name(level).is_none() {
        return Err(LogError::Level {
            level: level.to_string(),
            reason: "not a level".into(),
        });
    }
    let filter = EnvFilter::try_new(level).map_err(|e| LogError::Level {
        level: level.to_string(),
        reason: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Logfmt => builder.event_format(Logfmt).try_init(),
    };
    Ok(())
}

/// The logfmt event formatter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(
            w,
            "ts={} level={} target={}",
            rfc3339_now(),
            meta.level().as_str().to_ascii_lowercase(),
            meta.target()
        )?;
        let mut v = KvVisitor::default();
        event.record(&mut v);
        if let Some(msg) = &v.message {
            write!(w, " msg={}", quote(msg))?;
        }
        for (k, val) in &v.fields {
            write!(w, " {k}={}", quote(val))?;
        }
        writeln!(w)
    }
}

#[derive(Default)]
struct KvVisitor {
    message: Option<String>,
    fields: Vec<(String, String)>,
}

impl Visit for KvVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.fields
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let s = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(s);
        } else {
            self.fields.push((field.name().to_string(), s));
        }
    }
}

/// Quotes a logfmt value when needed.
pub fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '"', '=', '\n', '\t']) {
        return v.to_string();
    }
    let escaped = v
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_millis())
}

/// Formats Unix seconds as RFC 3339 UTC.
pub fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("two words"), "\"two words\"");
        assert_eq!(quote("a=b"), "\"a=b\"");
        assert_eq!(quote("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_795_564_800, 0), "2026-11-25T00:00:00.000Z");
    }

    #[test]
    fn bad_level_is_an_error() {
        assert!(init("loud=", LogFormat::Logfmt).is_err());
    }
}
