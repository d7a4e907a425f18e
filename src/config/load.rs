//! Loading: a TOML file, overridden by `HCCLWATCH_<SECTION>_<KEY>` environment variables.
//!
//! Loading never stops at the first mistake. The document is walked against
//! [`schema::SCHEMA`] so that every unknown key (with the nearest valid key), every type
//! error and every out-of-range value is reported; values with a type of their own are
//! parsed; then the semantic checks run on the rest ([`super::check`]). Each problem is
//! placed at the line (or variable) that set its key: `PATH:LINE: key.path: reason`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::check::{self, Unparsed};
use super::{Config, Problem, file, schema};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: it is missing, not a regular file, too large, or the read hung.
        source: file::FileError,
    },
    /// The configuration has problems; every one is listed.
    #[error("invalid configuration:\n{}", Problem::lines(.0))]
    Invalid(Vec<Problem>),
}

/// A configuration with the warnings found while checking it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Problems that do not stop the daemon (a world-readable key file).
    pub warnings: Vec<Problem>,
}

/// Where each key's value came from, for error messages.
#[derive(Debug, Default)]
struct Origins {
    file: Option<String>,
    text: String,
    spans: HashMap<String, usize>,
    env: HashMap<String, String>,
    /// Offsets of the line starts after the first, once indexed: a line number is then a
    /// binary search, not a scan, however many problems a long file has.
    line_starts: Vec<usize>,
}

impl Origins {
    fn index_lines(&mut self) {
        self.line_starts = self
            .text
            .bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
    }

    fn line_of(&self, offset: usize) -> usize {
        if self.line_starts.is_empty() {
            return self.text[..offset.min(self.text.len())]
                .matches('\n')
                .count()
                + 1;
        }
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    fn locate(&self, path: &str) -> String {
        if let Some(var) = self.env.get(path) {
            return format!("env:{var}");
        }
        let file = self.file.as_deref().unwrap_or("<defaults>");
        // Fall back to the nearest enclosing table that appears in the file.
        let mut p = path;
        loop {
            if let Some(off) = self.spans.get(p) {
                return format!("{file}:{}", self.line_of(*off));
            }
            if p.is_empty() {
                return file.to_string();
            }
            p = schema::parent(p);
        }
    }
}

/// Loads the configuration from an optional file plus environment overrides.
///
/// `env` is passed in (rather than read here) so that tests never mutate the process
/// environment. The files the configuration names are not opened (except a rank table,
/// which fills `collective.peers`); [`load_checked`] also checks them.
pub fn load(file: Option<&Path>, env: &[(String, String)]) -> Result<Config, ConfigError> {
    load_inner(file, env, false).map(|l| l.config)
}

/// [`load`], and also checks the files the configuration names (the shared key, the web
/// config and its certificates), as `check-config`, start-up and SIGHUP do.
pub fn load_checked(file: Option<&Path>, env: &[(String, String)]) -> Result<Loaded, ConfigError> {
    load_inner(file, env, true)
}

fn load_inner(
    file: Option<&Path>,
    env: &[(String, String)],
    check_files: bool,
) -> Result<Loaded, ConfigError> {
    let (text, name) = match file {
        Some(p) => (
            file::read_text(p, file::CONFIG_LIMIT).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
            Some(p.display().to_string()),
        ),
        None => (String::new(), None),
    };
    load_str_inner(&text, name.as_deref(), env, check_files)
}

/// Loads from TOML text; `name` is used in messages (the file path).
pub fn load_str(
    text: &str,
    name: Option<&str>,
    env: &[(String, String)],
) -> Result<Config, ConfigError> {
    load_str_inner(text, name, env, false).map(|l| l.config)
}

/// Every problem is collected: a key that fails the schema is reported and then removed
/// (so it takes its default), and the semantic checks still run on the rest, so one run
/// shows all of it. Every step is linear in the size of the document.
fn load_str_inner(
    text: &str,
    name: Option<&str>,
    env: &[(String, String)],
    check_files: bool,
) -> Result<Loaded, ConfigError> {
    let mut origins = Origins {
        file: name.map(str::to_string),
        text: text.to_string(),
        ..Origins::default()
    };
    let (mut table, mut problems) = read_document(text, name, env, &mut origins)?;

    // Keys that failed the schema take their defaults, so the rest can still be checked;
    // so do values that did not parse into their types (reported with the checks).
    for p in &problems {
        let parts: Vec<&str> = p.key.split('.').collect();
        remove_path(&mut table, &parts);
    }
    let unparsed = parse_values(&mut table);
    let mut config: Config = match toml::Value::Table(table).try_into() {
        Ok(c) => c,
        Err(e) => {
            let e: toml::de::Error = e;
            problems.push(Problem::new(
                name.unwrap_or("<input>"),
                "(document)",
                e.message(),
            ));
            return Err(ConfigError::Invalid(problems));
        }
    };
    let reported: HashSet<String> = problems.iter().map(|p| p.key.clone()).collect();
    let mut semantic = Vec::new();
    if let Err(p) = config.collective.resolve_rank_table() {
        semantic.push(p);
    }
    semantic.extend(check::problems(&config, unparsed));
    let mut warnings = Vec::new();
    if check_files {
        let files = config.file_problems();
        semantic.extend(files.errors);
        warnings.extend(files.warnings.into_iter().map(|w| {
            let at = origins.locate(&w.key);
            w.at(at)
        }));
    }
    for p in semantic {
        if reported.contains(&p.key) {
            continue;
        }
        let at = origins.locate(&p.key);
        problems.push(p.at(at));
    }
    if problems.is_empty() {
        Ok(Loaded { config, warnings })
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

/// The document as a table with the environment's overrides, and the problems the schema
/// found in both. A syntax error ends the load: nothing else can be checked.
fn read_document(
    text: &str,
    name: Option<&str>,
    env: &[(String, String)],
    origins: &mut Origins,
) -> Result<(toml::Table, Vec<Problem>), ConfigError> {
    let mut problems = Vec::new();
    // Pass 1: spans of every key, for line numbers.
    match toml::de::DeTable::parse(text) {
        Ok(doc) => collect_spans(doc.get_ref(), "", &mut origins.spans),
        Err(e) => {
            let line = e.span().map_or(1, |s| origins.line_of(s.start));
            let msg = e.message().trim().replace('\n', " ");
            problems.push(Problem::new(
                format!("{}:{line}", name.unwrap_or("<input>")),
                "(document)",
                format!("TOML syntax error: {msg}"),
            ));
            return Err(ConfigError::Invalid(problems));
        }
    }
    origins.index_lines();

    // Pass 2: the values, checked against the schema.
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        ConfigError::Invalid(vec![Problem::new(
            name.unwrap_or("<input>"),
            "(document)",
            e.message(),
        )])
    })?;
    walk(&table, "", origins, &mut problems);

    // Environment overrides.
    apply_env(&mut table, env, origins, &mut problems);
    Ok((table, problems))
}

/// Parses every value that has a type of its own; one that does not parse is removed (so
/// it takes its default) and its problems are kept for the checks.
fn parse_values(table: &mut toml::Table) -> Unparsed {
    let mut unparsed = Unparsed::default();
    for key in schema::SCHEMA {
        let Some(parse) = key.parse else { continue };
        let parts: Vec<&str> = key.path.split('.').collect();
        let Some(value) = get_path(table, &parts) else {
            continue;
        };
        let errors = parse(value);
        if !errors.is_empty() {
            unparsed.insert(key.path, errors);
            remove_path(table, &parts);
        }
    }
    unparsed
}

/// The value at a dotted path, if the document has one.
fn get_path<'a>(table: &'a toml::Table, parts: &[&str]) -> Option<&'a toml::Value> {
    match parts {
        [] => None,
        [leaf] => table.get(*leaf),
        [head, rest @ ..] => match table.get(*head) {
            Some(toml::Value::Table(t)) => get_path(t, rest),
            _ => None,
        },
    }
}

/// Removes a dotted path from `table` (nothing if it is not there).
fn remove_path(table: &mut toml::Table, parts: &[&str]) {
    match parts {
        [] => {}
        [leaf] => {
            table.remove(*leaf);
        }
        [head, rest @ ..] => {
            if let Some(toml::Value::Table(t)) = table.get_mut(*head) {
                remove_path(t, rest);
            }
        }
    }
}

fn collect_spans(table: &toml::de::DeTable<'_>, prefix: &str, out: &mut HashMap<String, usize>) {
    for (k, v) in table.iter() {
        let path = join(prefix, k.get_ref());
        out.insert(path.clone(), k.span().start);
        if let toml::de::DeValue::Table(t) = v.get_ref() {
            collect_spans(t, &path, out);
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A key as TOML would write it: bare when it can be, else quoted (an empty key, or one
/// with dots or spaces, must still be visible in a message).
fn shown_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn walk(table: &toml::Table, prefix: &str, origins: &Origins, problems: &mut Vec<Problem>) {
    for (k, v) in table {
        let path = join(prefix, k);
        let Some(key) = schema::lookup(&path) else {
            problems.push(Problem::new(
                origins.locate(&path),
                join(prefix, &shown_key(k)),
                format!("unknown key; did you mean `{}`?", schema::nearest(&path)),
            ));
            continue;
        };
        match schema::check_value(key.kind, v) {
            Ok(()) => {
                if let toml::Value::Table(t) = v {
                    walk(t, &path, origins, problems);
                }
            }
            Err(reason) => problems.push(Problem::new(origins.locate(&path), path, reason)),
        }
    }
}

fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    origins: &mut Origins,
    problems: &mut Vec<Problem>,
) {
    for (var, text) in env {
        let Some(_) = var.strip_prefix("HCCLWATCH_") else {
            continue;
        };
        let leaves = || {
            schema::SCHEMA
                .iter()
                .filter(|k| !matches!(k.kind, schema::Kind::Table))
        };
        let Some(key) = leaves().find(|k| schema::env_name(k.path) == *var) else {
            let guess = leaves()
                .map(|k| schema::env_name(k.path))
                .min_by_key(|n| schema::levenshtein(n, var))
                .unwrap_or_default();
            problems.push(Problem::new(
                format!("env:{var}"),
                var.clone(),
                format!("unknown environment override; did you mean {guess}?"),
            ));
            continue;
        };
        origins.env.insert(key.path.to_string(), var.clone());
        let value = match schema::value_from_env(key.kind, text).and_then(|v| {
            schema::check_value(key.kind, &v)?;
            Ok(v)
        }) {
            Ok(v) => v,
            Err(reason) => {
                problems.push(Problem::new(format!("env:{var}"), key.path, reason));
                continue;
            }
        };
        let parts: Vec<&str> = key.path.split('.').collect();
        insert_path(table, &parts, value);
    }
}

/// Sets `parts` (a dotted path) in `table`, creating tables on the way. A non-table in
/// the way was already reported by the schema walk, so it is left alone.
fn insert_path(table: &mut toml::Table, parts: &[&str], value: toml::Value) {
    match parts {
        [] => {}
        [leaf] => {
            table.insert((*leaf).to_string(), value);
        }
        [head, rest @ ..] => {
            let entry = table
                .entry((*head).to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(t) = entry {
                insert_path(t, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Backend, RESERVED_PATHS};

    #[test]
    fn members_come_from_a_rank_table_one_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("rank_table.json");
        std::fs::write(
            &table,
            r#"{"version":"1.0","server_list":[
              {"server_id":"node_0","host_ip":"10.0.0.1","device":[
                {"device_id":"0","device_ip":"192.168.1.8","rank_id":"0"},
                {"device_id":"1","device_ip":"192.168.1.9","rank_id":"1"}]},
              {"server_id":"node_1","device":[
                {"device_id":"0","device_ip":"192.168.2.8","rank_id":"2"},
                {"device_id":"1","device_ip":"192.168.2.9","rank_id":"3"}]}]}"#,
        )
        .unwrap();
        let text = format!(
            "[collective]\nrank_table_file = \"{}\"\nrank_table_port = 7000\n",
            table.display()
        );
        let cfg = load_str(&text, Some("t.toml"), &[]).unwrap();
        assert_eq!(
            cfg.collective.peers,
            vec!["10.0.0.1:7000".to_string(), "192.168.2.8:7000".to_string()]
        );

        let both = format!("{text}peers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n");
        let err = load_str(&both, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml:2: collective.rank_table_file: set either"),
            "{err}"
        );

        std::fs::write(&table, "{\"version\":\"1.0\"}").unwrap();
        let err = load_str(&text, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{}: server_list: missing", table.display())),
            "{err}"
        );

        let missing = text.replace("rank_table.json", "absent.json");
        let err = load_str(&missing, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot read") && err.contains("absent.json"),
            "{err}"
        );
    }

    /// The fuzzer's finding: an empty (quoted) key was reported with an empty key name.
    #[test]
    fn an_empty_or_quoted_unknown_key_is_shown_quoted() {
        let p = problems("\"\" = 1\n[web]\n\"a b\" = 2\n", &[]);
        assert!(p.iter().any(|l| l.contains(": \"\": unknown key")), "{p:?}");
        assert!(
            p.iter().any(|l| l.contains(": web.\"a b\": unknown key")),
            "{p:?}"
        );
    }

    fn problems(text: &str, env: &[(&str, &str)]) -> Vec<String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        match load_str(text, Some("test.toml"), &env) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid(p)) => p.iter().map(ToString::to_string).collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn empty_document_is_defaults() {
        assert_eq!(load_str("", None, &[]).unwrap(), Config::default());
    }

    #[test]
    fn every_struct_field_is_in_the_schema() {
        // Serializing the defaults yields every field; walking that document against the
        // schema must find no unknown key.
        let mut cfg = Config::default();
        cfg.telemetry.dcmi_library = Some("/x/libdcmi.so".into());
        cfg.telemetry.fault_levels_file = Some("/x/faultCode.json".into());
        cfg.collective.key_file = Some("/x/key".into());
        cfg.collective.identity_cert_file = Some("/x/tls.crt".into());
        cfg.collective.identity_key_file = Some("/x/tls.key".into());
        cfg.collective.identity_ca_file = Some("/x/ca.crt".into());
        cfg.collective.bind_device = Some("eth0".into());
        cfg.attribution.kubeconfig = Some("/x/kubeconfig".into());
        cfg.topology.file = Some("/x/topology.toml".into());
        cfg.web.config_file = Some("/x/web.yml".into());
        cfg.web.node_label = Some("node-1".into());
        cfg.device_probe.hccs_super_pod = Some(0);
        cfg.remediation.push.bearer_token_file = Some("/x/token".into());
        cfg.remediation.push.ca_file = Some("/x/ca.crt".into());
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("rank_table.json");
        std::fs::write(
            &table,
            r#"{"version":"1.0","server_list":[{"server_id":"a","host_ip":"10.0.0.1",
              "device":[{"device_id":"0","device_ip":"10.1.0.1","rank_id":"0"}]}]}"#,
        )
        .unwrap();
        cfg.collective.rank_table_file = Some(table);
        let text = toml::to_string(&cfg).unwrap();
        assert_eq!(problems(&text, &[]), Vec::<String>::new(), "{text}");
        // And the converse: every schema leaf is set in that document.
        let table: toml::Table = toml::from_str(&text).unwrap();
        for key in schema::SCHEMA {
            let mut cur = &table;
            let mut found = true;
            let parts: Vec<&str> = key.path.split('.').collect();
            for (i, part) in parts.iter().enumerate() {
                match cur.get(*part) {
                    Some(toml::Value::Table(t)) => cur = t,
                    Some(_) if i == parts.len() - 1 => {}
                    _ => found = false,
                }
            }
            assert!(found, "schema key {} is not a struct field", key.path);
        }
    }

    #[test]
    fn reports_every_problem_with_line_and_nearest_key() {
        let text = "\
[web]
listen_adress = \":9478\"

[telemetry]
backend = \"cuda\"
call_deadline = 5
max_stuck_calls = 0

[telemetry.intervals]
helth = \"5s\"
";
        let p = problems(text, &[]);
        assert_eq!(p.len(), 5, "{p:#?}");
        for expected in [
            "test.toml:2: web.listen_adress: unknown key; did you mean `web.listen_address`?",
            "test.toml:5: telemetry.backend: \"cuda\" is not one of auto, dcmi, sim, none",
            "test.toml:6: telemetry.call_deadline: expected a duration string such as \"5s\", found an integer",
            "test.toml:7: telemetry.max_stuck_calls: 0 is out of range 1..=64",
            "test.toml:10: telemetry.intervals.helth: unknown key; did you mean `telemetry.intervals.health`?",
        ] {
            assert!(
                p.iter().any(|l| l == expected),
                "missing {expected:?} in {p:#?}"
            );
        }
    }

    #[test]
    fn syntax_error_has_line() {
        let p = problems("[web]\nlisten_address = \n", &[]);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with("test.toml:2: (document): TOML syntax error"),
            "{p:?}"
        );
    }

    #[test]
    fn table_where_value_expected_and_vice_versa() {
        let p = problems("web = 3\n", &[]);
        assert_eq!(
            p,
            vec!["test.toml:1: web: expected a table, found an integer"]
        );
        let p = problems("[collectors.host]\nx = 1\n", &[]);
        assert_eq!(
            p,
            vec!["test.toml:1: collectors.host: expected true or false, found a table"]
        );
    }

    #[test]
    fn semantic_errors_are_located() {
        let p = problems(
            "[web]\nlisten_address = \"nonsense\"\ntelemetry_path = \"metrics\"\n",
            &[],
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("test.toml:2: web.listen_address: \"nonsense\" has no port"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("test.toml:3: web.telemetry_path: \"metrics\" must start with '/'"),
            "{p:?}"
        );
        let p = problems("[web]\ntelemetry_path = \"/-/ready\"\n", &[]);
        assert!(p[0].contains("reserved"), "{p:?}");
        let p = problems("[telemetry]\ndcmi_library = \"\"\n", &[]);
        assert!(p[0].contains("empty path"), "{p:?}");
        let p = problems("[web]\nlisten_address = \":99999\"\n", &[]);
        assert!(p[0].contains("not a number in 0..=65535"), "{p:?}");
    }

    #[test]
    fn env_overrides_file_and_is_checked() {
        let env = vec![
            ("HCCLWATCH_TELEMETRY_BACKEND".to_string(), "sim".to_string()),
            ("HCCLWATCH_COLLECTORS_HOST".to_string(), "false".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let cfg = load_str("[telemetry]\nbackend = \"dcmi\"\n", None, &env).unwrap();
        assert_eq!(cfg.telemetry.backend, Backend::Sim);
        assert!(!cfg.collectors.host);

        let p = problems("", &[("HCCLWATCH_TELEMETRY_BACKND", "sim")]);
        assert_eq!(
            p,
            vec![
                "env:HCCLWATCH_TELEMETRY_BACKND: HCCLWATCH_TELEMETRY_BACKND: unknown environment override; did you mean HCCLWATCH_TELEMETRY_BACKEND?"
            ]
        );
        let p = problems("", &[("HCCLWATCH_TELEMETRY_SIM_CHIPS", "many")]);
        assert_eq!(
            p,
            vec![
                "env:HCCLWATCH_TELEMETRY_SIM_CHIPS: telemetry.sim.chips: \"many\" is not an integer"
            ]
        );
        let p = problems("", &[("HCCLWATCH_WEB_LISTEN_ADDRESS", "bad")]);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with("env:HCCLWATCH_WEB_LISTEN_ADDRESS: web.listen_address:"),
            "{p:?}"
        );
    }

    #[test]
    fn collective_section() {
        let cfg = load_str(
            "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nrank = 1\nalgo = \"level0:NA;level1:ring\"\n",
            None,
            &[],
        )
        .unwrap();
        assert_eq!(cfg.collective.peers.len(), 2);
        let p = problems(
            "[collective]\npeers = [\"127.0.0.1:1\"]\nrank = 3\ntraffic_class = 130\nalgo = \"level1:fast\"\n",
            &[],
        );
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].starts_with(
                "test.toml:3: collective.rank: rank 3 but collective.peers lists 1 members"
            ),
            "{p:?}"
        );
        assert!(
            p[1].contains("collective.traffic_class: 130 is not a multiple of 4"),
            "{p:?}"
        );
        assert!(
            p[2].contains("collective.algo: algo \"fast\" is not supported"),
            "{p:?}"
        );
        let p = problems("[collective]\npeers = [\"nowhere\"]\n", &[]);
        assert_eq!(
            p,
            vec![
                "test.toml:2: collective.peers: element 0 (\"nowhere\") is not an IP:port address"
            ]
        );
    }

    #[test]
    fn health_section() {
        let cfg = load_str("[health]\nwindow = 20\ndelta = 0.1\nz = 4\n", None, &[]).unwrap();
        let e = &cfg.health;
        assert_eq!((e.window, e.delta, e.z), (20, 0.1, 4.0));
        let p = problems(
            "[health]\ndelta = \"big\"\nz = 100.0\nwindow = 5\nfabric_rounds = 6\n",
            &[],
        );
        // Every problem, the schema's and the semantic ones together (issue 18).
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[2].contains("health.fabric_rounds: 6 is more than"),
            "{p:?}"
        );
        assert_eq!(
            p[0],
            "test.toml:2: health.delta: expected a number, found a string"
        );
        assert_eq!(p[1], "test.toml:3: health.z: 100 is out of range 0.5..=50");
        let p = problems("[health]\nwindow = 5\nfabric_rounds = 6\n", &[]);
        assert!(
            p[0].starts_with("test.toml:3: health.fabric_rounds: 6 is more than health.window (5)"),
            "{p:?}"
        );
        let p = problems(
            "[probe]\ninterval = \"10s\"\n[device_probe]\ninterval = \"5s\"\n",
            &[],
        );
        assert!(
            p[0].contains("device_probe.interval: 5s is shorter than probe.interval (10s)"),
            "{p:?}"
        );
        let p = problems("[health]\nconfirm_hold = 9\ncongested_hold = 4\n", &[]);
        assert!(
            p[0].contains("health.congested_hold: 4 is less than health.confirm_hold (9)"),
            "{p:?}"
        );
        let p = problems("[health]\nconfirm_hold = 9\nuncorroborated_hold = 8\n", &[]);
        assert!(
            p[0].contains("health.uncorroborated_hold: 8 is less than health.confirm_hold (9)"),
            "{p:?}"
        );
        let p = problems(
            "[probe]\ninject_hardware_signs = [\"pcie\", \"fan\"]\n",
            &[],
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("probe.inject_hardware_signs: element 1 (\"fan\") is not a hardware sign; one of link_speed, pcie, frame_errors"),
            "{p:?}"
        );
        let cfg = load_str("", None, &[("HCCLWATCH_HEALTH_DELTA".into(), "0.2".into())]).unwrap();
        assert_eq!(cfg.health.delta, 0.2);
    }

    #[test]
    fn hccs_intervals_are_checked() {
        let ok = "[device_probe]\nhccs_round_interval = \"2s\"\nhccs_read_interval = \"3s\"\n";
        assert_eq!(problems(ok, &[]), Vec::<String>::new());
        let p = problems("[device_probe]\nhccs_round_interval = \"1500ms\"\n", &[]);
        assert!(p.iter().any(|l| l.contains("not whole seconds")), "{p:?}");
        let p = problems(
            "[device_probe]\nhccs_round_interval = \"10s\"\nhccs_read_interval = \"10s\"\n",
            &[],
        );
        assert!(
            p.iter()
                .any(|l| l.contains("device_probe.hccs_read_interval") && l.contains("plus 1 s")),
            "{p:?}"
        );
        let p = problems("[device_probe]\nhccs_round_interval = \"61s\"\n", &[]);
        assert!(
            p.iter()
                .any(|l| l.contains("device_probe.hccs_round_interval")),
            "{p:?}"
        );
    }

    #[test]
    fn peer_names_need_one_distinct_name_per_member() {
        let ok = "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\npeer_names = [\"node-a\", \"node-b\"]\n";
        let cfg = load_str(ok, Some("t.toml"), &[]).unwrap();
        assert_eq!(cfg.collective.peer_names, vec!["node-a", "node-b"]);

        let short = ok.replace(", \"node-b\"", "");
        let err = load_str(&short, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml:3: collective.peer_names: 1 names for 2 members"),
            "{err}"
        );

        let twice = ok.replace("node-b", "node-a");
        let err = load_str(&twice, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("collective.peer_names: element 1 (node-a) is listed twice"),
            "{err}"
        );
    }

    #[test]
    fn topology_labels_match_the_members_and_leave_nobody_alone() {
        let base = "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"]\n";
        let short = format!("{base}peer_topology = [\"a\", \"a\"]\n");
        let err = load_str(&short, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("collective.peer_topology: 2 labels for 3 members"),
            "{err}"
        );
        let alone = format!(
            "{base}peer_topology = [\"a\", \"a\", \"b\"]\nkey_file = \"/k\"\n[probe]\nenabled = true\n"
        );
        let err = load_str(&alone, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("label \"b\" has a single member"), "{err}");
        let ok = format!("{base}peer_topology = [\"a\", \"a\", \"a\"]\n");
        assert!(load_str(&ok, Some("t.toml"), &[]).is_ok());
    }

    /// Pins: every problem is reported, not only the first: each bad element of a list,
    /// and the semantic problems next to the schema's (before, a range error hid the rest).
    #[test]
    fn every_problem_not_only_the_first() {
        let p = problems(
            "[web]\ntelemetry_path = \"/api/v1/state\"\n[collective]\npeers = [\"x\", \"127.0.0.1:1\", \"y\", \"127.0.0.1:1\"]\nchannels = 99\n",
            &[],
        );
        let text = p.join("\n");
        for want in [
            "element 0 (\"x\") is not an IP:port address",
            "element 2 (\"y\") is not an IP:port address",
            "element 3 (127.0.0.1:1) is listed twice",
            "collective.channels: 99 is out of range 1..=16",
            "web.telemetry_path: \"/api/v1/state\" is reserved",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }

    /// Pins: a telemetry path that collides with any route of the server is refused (a
    /// path equal to /api/v1/state used to pass and then panic the router at start).
    #[test]
    fn telemetry_path_cannot_shadow_a_route() {
        for path in RESERVED_PATHS {
            let p = problems(&format!("[web]\ntelemetry_path = \"{path}\"\n"), &[]);
            assert_eq!(p.len(), 1, "{path}: {p:?}");
            assert!(p[0].contains("is reserved"), "{path}: {p:?}");
        }
    }

    /// Pins: validation is linear in the number of members. Duplicates used to be found
    /// by comparing every pair (50,000 peers: over a billion comparisons); a list this long
    /// with a duplicate at the end now takes well under the bound.
    #[test]
    fn long_member_lists_are_checked_in_linear_time() {
        let n = 50_000;
        let peers: Vec<String> = (0..n)
            .map(|i| format!("\"10.{}.{}.{}:60100\"", i / 65536, (i / 256) % 256, i % 256))
            .collect();
        let names: Vec<String> = (0..n).map(|i| format!("\"node-{i}\"")).collect();
        let topo: Vec<String> = (0..n).map(|i| format!("\"rack-{}\"", i / 8)).collect();
        let text = format!(
            "[collective]\npeers = [{}, \"10.0.0.0:60100\"]\npeer_names = [{}, \"node-0\"]\npeer_topology = [{}, \"rack-0\"]\nkey_file = \"/k\"\n[probe]\nenabled = true\n",
            peers.join(","),
            names.join(","),
            topo.join(",")
        );
        let t = std::time::Instant::now();
        let p = problems(&text, &[]);
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        let text = p.join("\n");
        assert!(
            text.contains("element 50000 (10.0.0.0:60100) is listed twice"),
            "{text}"
        );
        assert!(
            text.contains("element 50000 (node-0) is listed twice"),
            "{text}"
        );
    }
}
