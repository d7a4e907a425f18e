//! What changed between two configurations, as dotted keys: on SIGHUP the daemon re-checks
//! the file and names the keys that will apply at the next restart.

use super::Config;

/// Dotted keys whose values differ between two configurations.
pub fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = serde_json::Value::Null;
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(path.to_string()),
            _ => {}
        }
    }
    let (Ok(a), Ok(b)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return vec!["(configuration not comparable)".to_string()];
    };
    let mut out = Vec::new();
    walk("", &a, &b, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_exactly_the_keys_that_differ() {
        let a = Config::default();
        assert!(changed_keys(&a, &a.clone()).is_empty());
        let mut b = a.clone();
        b.probe.interval = std::time::Duration::from_secs(7);
        b.web.telemetry_path = "/m".into();
        assert_eq!(
            changed_keys(&a, &b),
            vec!["probe.interval", "web.telemetry_path"]
        );
    }
}
