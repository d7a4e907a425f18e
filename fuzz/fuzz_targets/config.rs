//! `config::load_str`: the TOML configuration file, with environment overrides. Any text
//! gives a configuration or the list of its problems (each naming a key and a location);
//! a configuration that loads passes its own validation.
#![no_main]

use hcclwatch::config::{ConfigError, load_str};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A line `#env NAME=VALUE` at the top becomes an environment override (a comment to
    // TOML), so the overrides are fuzzed with the file.
    let env: Vec<(String, String)> = text
        .lines()
        .map_while(|l| l.strip_prefix("#env "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match load_str(text, Some("fuzz.toml"), &env) {
        Ok(config) => {
            let problems = config.validate();
            assert!(problems.is_empty(), "loaded but invalid: {problems:?}");
        }
        Err(ConfigError::Invalid(problems)) => {
            assert!(!problems.is_empty(), "refused without a reason");
            for p in &problems {
                assert!(!p.key.is_empty() && !p.reason.is_empty(), "{p:?}");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
