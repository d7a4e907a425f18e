//! `[log]`: the level and the format of the daemon's log lines.

use super::section;
use crate::config::enums::config_enum;
use crate::config::schema::Spec;

config_enum! {
    /// How much is logged.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum LogLevel {
        /// Errors only.
        Error = "error",
        /// Warnings and errors.
        Warn = "warn",
        /// What the daemon does (the default).
        #[default]
        Info = "info",
        /// Details for finding a problem.
        Debug = "debug",
        /// Everything.
        Trace = "trace",
    }
}

config_enum! {
    /// Log line format.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum LogFormat {
        /// `key=value` pairs, as Prometheus components log.
        #[default]
        Logfmt = "logfmt",
        /// One JSON object per line.
        Json = "json",
    }
}

section! {
    /// `[log]`.
    pub struct LogConfig in "log" {
        /// `error`, `warn`, `info`, `debug` or `trace`.
        level: LogLevel = LogLevel::Info, Spec::one_of(LogLevel::NAMES);
        /// Output format.
        format: LogFormat = LogFormat::Logfmt, Spec::one_of(LogFormat::NAMES);
    }
}
