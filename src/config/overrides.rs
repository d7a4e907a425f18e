//! Command-line flags over a loaded configuration. The file and environment were already
//! valid, so any problem found here was introduced by a flag and is reported as such.

use super::{Backend, Config, LogFormat, Problem, schema};

/// One flag's override: the config key, the flag as typed, and its value.
pub type Override = (&'static str, &'static str, String);

/// Applies `overrides` over `cfg` and re-validates; a problem names the flag that caused it.
pub fn apply(mut cfg: Config, overrides: &[Override]) -> Result<Config, Vec<Problem>> {
    let mut problems = Vec::new();
    for (key, flag, value) in overrides {
        match *key {
            "web.listen_address" => cfg.web.listen_address = value.clone(),
            "web.telemetry_path" => cfg.web.telemetry_path = value.clone(),
            "web.config_file" => cfg.web.config_file = Some(value.into()),
            "log.format" => {
                cfg.log.format = if value == "json" {
                    LogFormat::Json
                } else {
                    LogFormat::Logfmt
                }
            }
            "telemetry.backend" => {
                cfg.telemetry.backend = match value.as_str() {
                    "dcmi" => Backend::Dcmi,
                    "sim" => Backend::Sim,
                    "none" => Backend::None,
                    _ => Backend::Auto,
                }
            }
            "log.level" => {
                let kind = schema::lookup(key).map(|k| k.kind);
                match kind.map(|k| schema::check_value(k, &toml::Value::String(value.clone()))) {
                    Some(Err(reason)) => problems.push(Problem {
                        location: format!("flag {flag}"),
                        key: (*key).to_string(),
                        reason,
                    }),
                    _ => cfg.log.level = value.clone(),
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
    for (key, reason) in cfg.validate().into_iter().chain(files) {
        let location = overrides.iter().find(|(k, _, _)| *k == key).map_or_else(
            || "flags".to_string(),
            |(_, flag, _)| format!("flag {flag}"),
        );
        problems.push(Problem {
            location,
            key,
            reason,
        });
    }
    if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(problems)
    }
}
