//! The topology file (`topology.file`): the project's own TOML format, written by hand by
//! whoever knows the cabling. Two kinds of table, both optional and freely mixed:
//!
//! ```toml
//! [[tor]]                      # one ToR (leaf) switch and the nodes behind it
//! name = "tor-a"
//! spine = "spine-1"            # optional
//! super_pod = "sp0"            # optional
//! nodes = ["node-1", "node-2"]
//!
//! [[node]]                     # one node on its own
//! name = "node-9"
//! tor = "tor-c"                # each of the three optional
//! spine = "spine-2"
//! super_pod = "sp1"
//! ```
//!
//! It is checked like the configuration, each problem as `PATH:LINE: key: reason`
//! ([`Problem`]): a mistake in the file's shape (an unknown key or table, a missing or
//! mistyped value) is reported first and alone, as the TOML decoder stops there; once the
//! shape is right, every problem of the content is reported at once: a node named twice,
//! empty or unprintable names, names longer than [`NAME_MAX`] bytes (the group exchange's
//! field), a `[[tor]]` without nodes. A file over [`FILE_LIMIT`] bytes is not read. A bad
//! file gives no topology at all, never half of one.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::config::Problem;
use crate::config::file::{self, FileError};
use crate::snapshot::topology::Place;

/// Largest topology file: 4 MiB holds well over 100,000 nodes at ~30 bytes a name.
pub const FILE_LIMIT: u64 = 4 << 20;

/// Longest name (node, ToR, spine, super pod), bytes: what the group exchange carries.
pub const NAME_MAX: usize = 128;

/// Why the topology file gave no topology.
#[derive(Debug, thiserror::Error)]
pub enum TopologyFileError {
    /// The file could not be read (missing, not a regular file, too large, hung mount).
    #[error("topology.file: {0}")]
    Read(#[from] FileError),
    /// The file is not UTF-8 text.
    #[error("topology.file: {path} is not UTF-8 text")]
    NotText {
        /// The file.
        path: String,
    },
    /// The file was read but is wrong; every problem, each with its line and key.
    #[error("{}", Problem::lines(.0))]
    Invalid(Vec<Problem>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    tor: Vec<TorTable>,
    #[serde(default)]
    node: Vec<NodeTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TorTable {
    name: Spanned<String>,
    spine: Option<Spanned<String>>,
    super_pod: Option<Spanned<String>>,
    nodes: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeTable {
    name: Spanned<String>,
    tor: Option<Spanned<String>>,
    spine: Option<Spanned<String>>,
    super_pod: Option<Spanned<String>>,
}

/// Reads and checks `path` within `deadline`: each listed node's place.
pub fn read(path: &Path, deadline: Duration) -> Result<BTreeMap<String, Place>, TopologyFileError> {
    let c = file::read_regular_within(path, FILE_LIMIT, deadline)?;
    let text = String::from_utf8(c.bytes).map_err(|_| TopologyFileError::NotText {
        path: path.display().to_string(),
    })?;
    parse(&text, &path.display().to_string()).map_err(TopologyFileError::Invalid)
}

/// Why a name is not acceptable, if it is not.
pub fn name_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        Some("empty; give a name".into())
    } else if s.len() > NAME_MAX {
        Some(format!("{} bytes long; at most {NAME_MAX}", s.len()))
    } else if !s.chars().all(|c| c.is_ascii_graphic()) {
        Some(format!(
            "{s:?} has characters other than printable ASCII without spaces"
        ))
    } else {
        None
    }
}

/// Checks the names and the unique listing of the file's text; `at` names the file in
/// problems.
pub fn parse(text: &str, at: &str) -> Result<BTreeMap<String, Place>, Vec<Problem>> {
    let line = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let doc: FileDoc = toml::from_str(text).map_err(|e| {
        let loc = e
            .span()
            .map_or(at.to_string(), |s| format!("{at}:{}", line(s.start)));
        vec![Problem::new(loc, "", e.message().trim())]
    })?;
    let mut problems = Vec::new();
    let mut out = BTreeMap::new();
    // Where each node was first listed (key, line), for the "listed twice" problem.
    let mut first: BTreeMap<String, (String, usize)> = BTreeMap::new();
    let mut check = |key: String, v: &Spanned<String>, problems: &mut Vec<Problem>| {
        let bad = name_problem(v.get_ref());
        if let Some(why) = &bad {
            problems.push(Problem::new(
                format!("{at}:{}", line(v.span().start)),
                key,
                why,
            ));
        }
        bad.is_none().then(|| v.get_ref().clone())
    };
    let mut add = |key: String, v: &Spanned<String>, place: Place, problems: &mut Vec<Problem>| {
        let n = v.get_ref().clone();
        let here = line(v.span().start);
        if let Some((k, l)) = first.get(&n) {
            problems.push(Problem::new(
                format!("{at}:{here}"),
                key,
                format!("node {n:?} is already placed by {k} (line {l}); list each node once"),
            ));
        } else {
            first.insert(n.clone(), (key, here));
            out.insert(n, place);
        }
    };
    for (i, t) in doc.tor.iter().enumerate() {
        let place = Place {
            tor: check(format!("tor[{i}].name"), &t.name, &mut problems),
            spine: opt(
                &mut check,
                format!("tor[{i}].spine"),
                &t.spine,
                &mut problems,
            ),
            super_pod: opt(
                &mut check,
                format!("tor[{i}].super_pod"),
                &t.super_pod,
                &mut problems,
            ),
        };
        if t.nodes.is_empty() {
            problems.push(Problem::new(
                format!("{at}:{}", line(t.name.span().start)),
                format!("tor[{i}].nodes"),
                "empty; list the nodes behind this ToR",
            ));
        }
        for (j, n) in t.nodes.iter().enumerate() {
            let key = format!("tor[{i}].nodes[{j}]");
            if check(key.clone(), n, &mut problems).is_some() {
                add(key, n, place.clone(), &mut problems);
            }
        }
    }
    for (i, n) in doc.node.iter().enumerate() {
        let place = Place {
            tor: opt(&mut check, format!("node[{i}].tor"), &n.tor, &mut problems),
            spine: opt(
                &mut check,
                format!("node[{i}].spine"),
                &n.spine,
                &mut problems,
            ),
            super_pod: opt(
                &mut check,
                format!("node[{i}].super_pod"),
                &n.super_pod,
                &mut problems,
            ),
        };
        let key = format!("node[{i}].name");
        if check(key.clone(), &n.name, &mut problems).is_some() {
            add(key, &n.name, place, &mut problems);
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// An optional field through `check`.
fn opt(
    check: &mut impl FnMut(String, &Spanned<String>, &mut Vec<Problem>) -> Option<String>,
    key: String,
    v: &Option<Spanned<String>>,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    v.as_ref().and_then(|v| check(key, v, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        parse(text, "topo.toml")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn tor_tables_and_node_tables_give_each_node_its_place() {
        let text = r#"
[[tor]]
name = "tor-a"
spine = "spine-1"
super_pod = "sp0"
nodes = ["node-1", "node-2"]

[[tor]]
name = "tor-b"
nodes = ["node-3"]

[[node]]
name = "node-9"
super_pod = "sp1"
"#;
        let m = parse(text, "topo.toml").unwrap();
        assert_eq!(m.len(), 4);
        let p = |tor: Option<&str>, spine: Option<&str>, sp: Option<&str>| Place {
            tor: tor.map(String::from),
            spine: spine.map(String::from),
            super_pod: sp.map(String::from),
        };
        assert_eq!(m["node-1"], p(Some("tor-a"), Some("spine-1"), Some("sp0")));
        assert_eq!(m["node-2"], m["node-1"]);
        assert_eq!(m["node-3"], p(Some("tor-b"), None, None));
        assert_eq!(m["node-9"], p(None, None, Some("sp1")));
    }

    #[test]
    fn an_empty_file_places_nothing() {
        assert!(parse("# nothing yet\n", "topo.toml").unwrap().is_empty());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let p = problems("[[tor]]\nname = \"t\"\nnodes = [\"n\"]\nleaf = \"x\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("topo.toml:4: "), "{p:?}");
        assert!(p[0].contains("unknown field `leaf`"), "{p:?}");
    }

    #[test]
    fn an_unknown_table_is_named_with_its_line() {
        let p = problems("[[tor]]\nname = \"t\"\nnodes = [\"n\"]\n\n[[spine]]\nname = \"s\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("topo.toml:5: "), "{p:?}");
        assert!(p[0].contains("unknown field `spine`"), "{p:?}");
    }

    #[test]
    fn a_node_listed_twice_names_both_places() {
        let text = "[[tor]]\nname = \"a\"\nnodes = [\"n1\", \"n2\"]\n[[tor]]\nname = \"b\"\nnodes = [\"n3\", \"n1\"]\n[[node]]\nname = \"n2\"\ntor = \"c\"\n";
        let p = problems(text);
        assert_eq!(
            p,
            vec![
                "topo.toml:6: tor[1].nodes[1]: node \"n1\" is already placed by tor[0].nodes[0] (line 3); list each node once",
                "topo.toml:8: node[0].name: node \"n2\" is already placed by tor[0].nodes[1] (line 3); list each node once",
            ]
        );
    }

    #[test]
    fn empty_and_unprintable_names_are_problems_each_with_its_key() {
        let text = "[[tor]]\nname = \"\"\nnodes = [\"ok\", \"\"]\n[[node]]\nname = \"n 2\"\nspine = \"\"\n";
        let p = problems(text);
        assert_eq!(
            p,
            vec![
                "topo.toml:2: tor[0].name: empty; give a name",
                "topo.toml:3: tor[0].nodes[1]: empty; give a name",
                "topo.toml:6: node[0].spine: empty; give a name",
                "topo.toml:5: node[0].name: \"n 2\" has characters other than printable ASCII without spaces",
            ]
        );
    }

    #[test]
    fn a_tor_without_nodes_and_an_overlong_name_are_problems() {
        let long = "x".repeat(NAME_MAX + 1);
        let text = format!("[[tor]]\nname = \"t\"\nnodes = []\n[[node]]\nname = \"{long}\"\n");
        let p = problems(&text);
        assert_eq!(
            p,
            vec![
                "topo.toml:2: tor[0].nodes: empty; list the nodes behind this ToR".to_string(),
                format!(
                    "topo.toml:5: node[0].name: {} bytes long; at most {NAME_MAX}",
                    NAME_MAX + 1
                ),
            ]
        );
    }

    #[test]
    fn a_missing_name_and_a_wrong_type_are_problems() {
        let p = problems("[[tor]]\nnodes = [\"n\"]\n");
        assert!(p[0].contains("missing field `name`"), "{p:?}");
        let p = problems("[[tor]]\nname = \"t\"\nnodes = \"n\"\n");
        assert!(p[0].starts_with("topo.toml:3: "), "{p:?}");
    }

    #[test]
    fn an_oversize_file_is_refused_naming_the_file_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        let line = "# padding padding padding padding padding padding padding padding\n";
        let big = line.repeat((FILE_LIMIT as usize / line.len()) + 2);
        std::fs::write(&path, big).unwrap();
        let e = read(&path, Duration::from_secs(5)).unwrap_err().to_string();
        assert!(e.contains("big.toml"), "{e}");
        assert!(e.contains(&FILE_LIMIT.to_string()), "{e}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let e = read(Path::new("/nonexistent/topo.toml"), Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("topology.file: "), "{e}");
        assert!(e.contains("/nonexistent/topo.toml"), "{e}");
    }
}
