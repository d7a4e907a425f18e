//! The library's modules import each other only along the allowed arrows, so data flows
//! one way: sources → typed snapshot → verdicts → export and actions.
//!
//! The test reads every `.rs` file under `src/`, finds each reference to `crate::<module>`
//! (in `use` lines, grouped `use crate::{a, b}` lines and inline paths, test code
//! included), and fails on any arrow between top-level modules that is not listed in
//! [`ALLOWED`], and on any circle. The binary's own modules (`main.rs`, `cli.rs`,
//! `*_cli.rs`) are the command-line edge: they may use any part of the library.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module of the library and the modules it may import. A module missing
/// from this table fails the test, so a new module has to say where it stands.
const ALLOWED: &[(&str, &[&str])] = &[
    // Plain data: depends on nothing, so everything can depend on it.
    ("snapshot", &[]),
    // The collective engine is a library of its own.
    ("collective", &[]),
    // The configuration validates rank tables and HCCL_ALGO strings with the engine's own
    // parsers (so a file check-config accepts is one the engine accepts), and takes the
    // engine's default channel count. It knows nothing of the health engine: probe turns
    // `[health]` into thresholds.
    ("config", &["collective"]),
    ("logging", &["config"]),
    ("shutdown", &[]),
    // Verdicts are pure: plain data in, plain data out.
    ("health", &["snapshot"]),
    // Sources: telemetry never sees the network, the probe group or an exporter.
    ("telemetry", &["snapshot", "config"]),
    ("probe", &["collective", "health", "snapshot", "config"]),
    // A source like telemetry: it reads the configuration and the NPU part (the processes
    // DCMI lists) and publishes its own part; it never sees an exporter or the prober.
    ("attribution", &["snapshot", "config"]),
    // A source like attribution: it reads the configuration, the topology file, the
    // Kubernetes API and the rank table (with the engine's own parser) and publishes this
    // node's place; the probe group shares the places from the snapshot.
    ("topology", &["snapshot", "config", "collective"]),
    // The simulator drives the health engine with groups cut as the daemons cut them (the
    // cutting, like the re-pairings, is the health module's pure planning).
    ("simulate", &["health", "snapshot"]),
    // Readers: exporters read the snapshot only.
    ("export", &["snapshot", "config"]),
    // Actions: the receiver shares the exporter's /metrics answer and the shutdown signal,
    // and reads the operator overrides in the snapshot's plain format (the daemon's too).
    ("remediate", &["config", "export", "shutdown", "snapshot"]),
    ("bench", &["collective"]),
    // The composition root.
    (
        "app",
        &[
            "attribution",
            "config",
            "export",
            "probe",
            "shutdown",
            "snapshot",
            "telemetry",
            "topology",
        ],
    ),
];

/// Files of the binary crate (they reach the library as `hcclwatch::`): `main.rs`,
/// `cli.rs`, `*_cli.rs`, and the submodules of a `*_cli` module (`src/demo_cli/…`).
fn is_binary(file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let parent = file.parent();
    let in_src = parent.is_some_and(|p| p.ends_with("src"));
    let in_cli_dir = parent.is_some_and(|p| {
        p.parent().is_some_and(|pp| pp.ends_with("src"))
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("_cli"))
    });
    in_cli_dir || (in_src && (name == "main.rs" || name == "cli.rs" || name.ends_with("_cli.rs")))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a library file belongs to (`src/probe/round.rs` → `probe`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let m = first.strip_suffix(".rs").unwrap_or(first);
    (m != "lib").then(|| m.to_string())
}

/// Modules named after `crate::` in `text`, including the members of grouped imports
/// (`use crate::{a::X, b}`), with line numbers.
fn imports(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // Grouped import: every item before the closing brace at this depth. A
                // group spanning lines is read to the end of the statement.
                let end = text_after(text, n, code.len() - rest.len() + 1);
                for item in top_level_items(&end) {
                    out.push((item, n + 1));
                }
                rest = group;
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((name, n + 1));
            }
        }
    }
    out
}

/// The text from line `line`, column `col`, to the statement's closing brace.
fn text_after(text: &str, line: usize, col: usize) -> String {
    let mut s = String::new();
    for (k, l) in text.lines().enumerate().skip(line) {
        s.push_str(if k == line { &l[col.min(l.len())..] } else { l });
        s.push(' ');
        if l.contains(';') {
            break;
        }
    }
    s
}

/// The first path segment of each comma-separated item at brace depth 0.
fn top_level_items(group: &str) -> Vec<String> {
    let (mut depth, mut items, mut current) = (0i32, Vec::new(), String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut current)),
            c if depth == 0 => current.push(c),
            _ => {}
        }
    }
    items.push(current);
    items
        .iter()
        .filter_map(|i| {
            let seg: String = i
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!seg.is_empty() && seg != "self").then_some(seg)
        })
        .collect()
}

/// Every arrow between top-level modules, with one place it comes from.
fn graph() -> BTreeMap<(String, String), String> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut arrows = BTreeMap::new();
    for f in files.iter().filter(|f| !is_binary(f)) {
        let Some(from) = module_of(&src, f) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (to, line) in imports(&text) {
            if to != from {
                arrows
                    .entry((from.clone(), to))
                    .or_insert_with(|| format!("{}:{line}", f.display()));
            }
        }
    }
    arrows
}

#[test]
fn modules_import_only_along_the_allowed_arrows() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let arrows = graph();
    assert!(
        arrows.len() > 15,
        "only {} arrows found: the scan is broken",
        arrows.len()
    );
    let mut bad = Vec::new();
    for ((from, to), at) in &arrows {
        match allowed.get(from.as_str()) {
            None => bad.push(format!(
                "{at}: module `{from}` is not in ALLOWED; add it with the modules it may import"
            )),
            Some(ok) if !ok.contains(&to.as_str()) => bad.push(format!(
                "{at}: `{from}` imports `{to}`, which is not allowed"
            )),
            Some(_) => {}
        }
    }
    assert!(bad.is_empty(), "forbidden imports:\n{}", bad.join("\n"));
}

#[test]
fn the_module_graph_has_no_circle() {
    let arrows = graph();
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in arrows.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search with colours: reaching a module still on the stack is a circle.
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = stack.iter().position(|s| *s == m) {
            let mut c = stack[i..].to_vec();
            c.push(m);
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, next, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    for m in next.keys() {
        if let Some(c) = visit(m, &next, &mut Vec::new(), &mut done) {
            panic!("circle between modules: {}", c.join(" → "));
        }
    }
}

#[test]
fn the_scan_sees_grouped_and_inline_imports() {
    let text = "use crate::{snapshot::Store, health::{NodeState, Probe}};\n\
                fn f() { crate::probe::spawn(); } // crate::comment\n\
                use crate::{\n    config::Config,\n    export,\n};\n";
    let found: BTreeSet<String> = imports(text).into_iter().map(|(m, _)| m).collect();
    let want: BTreeSet<String> = ["snapshot", "health", "probe", "config", "export"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
}

/// The "Allowed imports" table of `docs/architecture.md`: each row's modules (the
/// backquoted names of the first column) and the modules they may import (the backquoted
/// names of the second column, outside parentheses; "nothing" for none).
fn documented_arrows() -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text
        .split("## Allowed imports")
        .nth(1)
        .expect("docs/architecture.md has an \"Allowed imports\" section");
    let names = |cell: &str| -> BTreeSet<String> {
        let mut outside = String::new();
        let mut depth = 0usize;
        for c in cell.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => outside.push(c),
                _ => {}
            }
        }
        outside
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut table = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        if cells.len() != 2 || cells[0].trim() == "module" || cells[0].starts_with("---") {
            continue;
        }
        for module in names(cells[0]) {
            let previous = table.insert(module.clone(), names(cells[1]));
            assert!(
                previous.is_none(),
                "docs/architecture.md lists `{module}` twice"
            );
        }
    }
    table
}

#[test]
fn the_architecture_doc_lists_the_allowed_arrows() {
    let documented = documented_arrows();
    let allowed: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(m, deps)| (m.to_string(), deps.iter().map(|d| d.to_string()).collect()))
        .collect();
    // Compared row by row so that a failure names the module that disagrees.
    for (module, deps) in &allowed {
        assert_eq!(
            documented.get(module),
            Some(deps),
            "docs/architecture.md's allowed imports for `{module}` differ from tests/layering.rs"
        );
    }
    let extra: Vec<&String> = documented
        .keys()
        .filter(|m| !allowed.contains_key(*m))
        .collect();
    assert!(
        extra.is_empty(),
        "docs/architecture.md lists modules tests/layering.rs does not: {extra:?}"
    );
}
