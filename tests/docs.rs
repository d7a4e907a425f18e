//! The documentation's links resolve: every relative markdown link in `README.md` and
//! `docs/*.md` names a file or directory that exists in the repository, and a link with a
//! `#fragment` into a markdown file names one of that file's headings.
//!
//! Links are found by a small scanner rather than a markdown parser: the docs use only
//! inline links (`[text](target)`), and fenced code blocks are skipped, which is all this
//! check needs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One inline link target found in a markdown file, with its 1-based line number.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
}

/// The inline link targets of `text`, outside fenced code blocks.
fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(Link {
                line: i + 1,
                target: after[..end].trim().to_string(),
            });
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, and every character
/// other than letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of a markdown text, outside fenced code blocks.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The problems with the relative links of the markdown file `file` (whose text is
/// `text`), resolved against its directory; external links are not checked.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    for link in links(text) {
        let target = link.target.as_str();
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target, None),
        };
        let resolved: PathBuf = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        let at = format!("{}:{}: ({target})", file.display(), link.line);
        if !resolved.exists() {
            problems.push(format!("{at}: {} does not exist", resolved.display()));
            continue;
        }
        if let Some(fragment) = fragment
            && resolved.extension().is_some_and(|e| e == "md")
        {
            let body = std::fs::read_to_string(&resolved).unwrap_or_default();
            if !anchors(&body).contains(fragment) {
                problems.push(format!(
                    "{at}: {} has no heading #{fragment}",
                    resolved.display()
                ));
            }
        }
    }
    problems
}

/// `README.md` and every `docs/*.md`, relative to the repository root.
fn documentation_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_relative_link_in_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = documentation_files(root);
    assert!(
        files.len() > 2,
        "expected README.md and the docs/ pages, found {files:?}"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable markdown file");
        checked += links(&text).len();
        problems.extend(broken_links(file, &text));
    }
    assert!(checked > 0, "no links found at all: the scanner is broken");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_links_every_docs_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let targets: BTreeSet<String> = links(&readme).into_iter().map(|l| l.target).collect();
    for page in documentation_files(root).iter().skip(1) {
        let name = page.file_name().unwrap().to_string_lossy();
        let wanted = format!("docs/{name}");
        assert!(
            targets
                .iter()
                .any(|t| t.split('#').next() == Some(wanted.as_str())),
            "README.md does not link {wanted}"
        );
    }
}

#[test]
fn the_checker_finds_broken_links_and_anchors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("page.md");
    let other = dir.path().join("other.md");
    std::fs::write(&other, "# Other page\n\n## Some `code`: here (too)\n").unwrap();
    let text = "\
# Page

[ok](other.md) and [ok anchor](other.md#some-code-here-too) and [self](#page)
[missing file](nope.md) [missing anchor](other.md#nowhere) [external](https://x.invalid/a)

```
[inside a fence](also-missing.md)
```
";
    std::fs::write(&page, text).unwrap();
    let problems = broken_links(&page, text);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains(":4: (nope.md)") && problems[0].contains("does not exist"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].contains(":4: (other.md#nowhere)") && problems[1].contains("no heading"),
        "{}",
        problems[1]
    );
}
