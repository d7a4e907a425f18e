//! `config::web::WebConfigFile::from_str`: the exporter-toolkit web config (YAML) that
//! `export::web` serves from. Any text gives a configuration or its problems (at least
//! one); an accepted one has only users that are non-empty, without `:` and with a
//! bcrypt hash, a rate limit with a burst when it has an interval, valid extra headers,
//! and HTTP/2 only with TLS.
#![no_main]

use hcclwatch::config::web::WebConfigFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Relative certificate paths resolve against a directory with nothing in it.
    let base = std::path::Path::new("/nonexistent/hcclwatch-fuzz");
    let cfg = match WebConfigFile::from_str(text, base) {
        Ok(c) => c,
        Err(problems) => {
            assert!(!problems.is_empty(), "refused without a reason");
            return;
        }
    };
    for (user, hash) in &cfg.basic_auth_users {
        assert!(!user.is_empty() && !user.contains(':'), "user {user:?}");
        assert!(hash.starts_with("$2"), "hash {hash:?} for {user:?}");
    }
    if let Some(r) = &cfg.rate_limit {
        assert!(r.interval.is_zero() || r.burst >= 1);
    }
    for (name, value) in &cfg.http_server_config.headers {
        assert!(!name.is_empty(), "empty header name");
        assert!(
            !value.contains(['\r', '\n']),
            "header {name} with a line break"
        );
    }
    assert!(!cfg.http_server_config.http2 || cfg.tls_server_config.is_some());
    // TLS that was accepted is TLS that loads (the file was checked as a whole).
    if let Ok(Some(tls)) = cfg.tls() {
        assert!(tls.min_version <= tls.max_version);
    } else {
        assert!(
            cfg.tls_server_config.is_none(),
            "accepted TLS that does not check"
        );
    }
});
