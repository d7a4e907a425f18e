//! `docs/configuration.md` against the schema: each key has exactly one row, in the main
//! table or (a key for tests and the demo) in the table under [`TESTS_HEADING`], and its
//! type, default and accepted values are the ones the code declares. The meaning column is
//! prose and is only required to be there.
//!
//! On a mismatch the test prints every row as the code would write it (the meaning taken
//! from the document), so the fix is a paste.

use std::collections::BTreeMap;

use super::Config;
use super::duration;
use super::schema::{Audience, Key, Kind, SCHEMA};

/// The heading of the table of keys for tests and the demo.
const TESTS_HEADING: &str = "## Keys for tests and the demo";

/// The type column.
fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Table => "table",
        Kind::Bool => "bool",
        Kind::Int { .. } => "int",
        Kind::Str => "string",
        Kind::Path => "path",
        Kind::Duration { .. } => "duration",
        Kind::Enum(_) => "enum",
        Kind::AddrList | Kind::NameList | Kind::StrList => "array",
        Kind::Float { .. } => "float",
    }
}

/// The "accepted" column: the inclusive range, or the choices.
fn accepted(kind: Kind) -> String {
    match kind {
        Kind::Int { min, max: i64::MAX } => format!("{min} or more"),
        Kind::Int { min, max } => format!("{min} to {max}"),
        Kind::Float { min, max } => format!("{min} to {max}"),
        Kind::Duration { min, max } => {
            format!("{} to {}", duration::format(min), duration::format(max))
        }
        Kind::Enum(names) => names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    }
}

/// A TOML value as the default column shows it.
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) if x.fract() == 0.0 => format!("{x:.1}"),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => format!(
            "[{}]",
            items.iter().map(shown).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// The default column of `path`: the shipped value, or `unset`.
fn default_of(defaults: &toml::Table, path: &str) -> String {
    let mut cur = defaults;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        match cur.get(*part) {
            Some(toml::Value::Table(t)) if i + 1 < parts.len() => cur = t,
            Some(v) if i + 1 == parts.len() => return format!("`{}`", shown(v)),
            _ => break,
        }
    }
    "unset".into()
}

/// One table row of the document.
#[derive(Debug)]
struct Row {
    cells: Vec<String>,
    tests: bool,
}

fn rows(doc: &str) -> BTreeMap<String, Vec<Row>> {
    let mut out: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut tests = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            tests = line == TESTS_HEADING;
        }
        let Some(inner) = line.strip_prefix("| `").and_then(|l| l.strip_suffix(" |")) else {
            continue;
        };
        let cells: Vec<String> = format!("`{inner}")
            .split(" | ")
            .map(str::to_string)
            .collect();
        let key = cells[0].trim_matches('`').to_string();
        out.entry(key).or_default().push(Row { cells, tests });
    }
    out
}

fn expected_row(key: &Key, defaults: &toml::Table, meaning: &str) -> String {
    format!(
        "| `{}` | {} | {} | {} | {} |",
        key.path,
        type_name(key.kind),
        default_of(defaults, key.path),
        accepted(key.kind),
        meaning
    )
}

#[test]
fn every_key_has_one_row_that_agrees_with_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    let mut found = rows(&doc);
    let mut wrong = Vec::new();
    let mut expected = (String::new(), String::new());
    for key in SCHEMA.iter().filter(|k| !matches!(k.kind, Kind::Table)) {
        let tests = key.audience == Audience::Tests;
        let rows = found.remove(key.path).unwrap_or_default();
        let meaning = rows.first().and_then(|r| r.cells.get(4)).cloned();
        let want = expected_row(key, &defaults, meaning.as_deref().unwrap_or("…"));
        let table = if tests {
            &mut expected.1
        } else {
            &mut expected.0
        };
        table.push_str(&want);
        table.push('\n');
        match rows.as_slice() {
            [row] if row.tests != tests => wrong.push(format!(
                "{}: in the {} table, but it is for {}",
                key.path,
                if row.tests { "tests'" } else { "main" },
                if tests { "tests" } else { "operators" }
            )),
            [row] if row.cells.join(" | ") != want[2..want.len() - 2] => {
                wrong.push(format!("{}: the row is not\n  {want}", key.path))
            }
            [row] if row.cells[4].trim().is_empty() => {
                wrong.push(format!("{}: no meaning", key.path))
            }
            [_] => {}
            [] => wrong.push(format!("{}: no row", key.path)),
            _ => wrong.push(format!("{}: {} rows", key.path, rows.len())),
        }
    }
    wrong.extend(found.keys().map(|k| format!("{k}: a row for no key")));
    assert!(
        wrong.is_empty(),
        "docs/configuration.md disagrees with the code:\n{}\n\nThe main table as the code \
         has it:\n{}\nThe tests' table:\n{}",
        wrong.join("\n"),
        expected.0,
        expected.1
    );
}

#[test]
fn the_checker_finds_a_wrong_default_and_a_missing_row() {
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    let key = SCHEMA
        .iter()
        .find(|k| k.path == "web.max_connections")
        .unwrap();
    let row = expected_row(key, &defaults, "m");
    assert_eq!(
        row,
        "| `web.max_connections` | int | `4096` | 16 to 1000000 | m |"
    );
    let found = rows(&format!("{}\n", row.replace("4096", "4097")));
    let cells = &found["web.max_connections"][0].cells;
    assert_ne!(cells.join(" | "), row[2..row.len() - 2]);
    assert!(!rows("| `web.idle_timeout` | duration |").contains_key("web.max_connections"));
}
