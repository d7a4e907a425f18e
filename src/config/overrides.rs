//! Command-line flags over a loaded configuration. The file and environment were already
//! valid, so any problem found here was introduced by a flag and is reported as such.

use super::check::{self, Unparsed};
use super::schema::{self, ValueError};
use super::{Backend, Config, LogFormat, LogLevel, Problem};

/// One flag's override: the config key, the flag as typed, and its value.
pub type Override = (&'static str, &'static str, String);

/// Applies `overrides` over `cfg` and re-validates; a problem names the flag that caused it.
pub fn apply(mut cfg: Config, overrides: &[Override]) -> Result<Config, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut unparsed = Unparsed::default();
    for (key, flag, value) in overrides {
        match *key {
            "web.listen_address" => match value.parse() {
                Ok(a) => cfg.web.listen_address = a,
                Err(e) => unparsed.insert("web.listen_address", vec![ValueError::from(e)]),
            },
            "web.telemetry_path" => cfg.web.telemetry_path = value.clone(),
            "web.config_file" => cfg.web.config_file = Some(value.into()),
            // The command line already refused any other spelling of these two.
            "log.format" => cfg.log.format = LogFormat::from_name(value).unwrap_or_default(),
            "telemetry.backend" => {
                cfg.telemetry.backend = Backend::from_name(value).unwrap_or_default()
            }
            "log.level" => {
                let kind = schema::lookup(key).map(|k| k.kind);
                match kind.map(|k| schema::check_value(k, &toml::Value::String(value.clone()))) {
                    Some(Err(reason)) => {
                        problems.push(Problem::new(format!("flag {flag}"), *key, reason))
                    }
                    _ => cfg.log.level = LogLevel::from_name(value).unwrap_or_default(),
                }
            }
            _ => {}
        }
    }
    // A flag can name a file (the web config): check the files as loading did.
    let files = if overrides.is_empty() {
        Vec::new()
    } else {
        cfg.file_problems().errors
    };
    for p in check::problems(&cfg, unparsed).into_iter().chain(files) {
        let location = overrides.iter().find(|(k, _, _)| *k == p.key).map_or_else(
            || "flags".to_string(),
            |(_, flag, _)| format!("flag {flag}"),
        );
        problems.push(p.at(location));
    }
    if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(problems)
    }
}
