//! `scripts/check-size.py` holds the library to its size limits (no file in `src/` over
//! 1,000 lines, no function over 100). These tests show the script finds what it must
//! (a function one line over, a file one line over) and is not fooled by braces inside
//! strings, raw strings, chars and comments, then run it on `src/`.

use std::path::Path;
use std::process::Command;

fn check(root: &Path) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-size.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(root)
        .current_dir(root)
        .output()
        .expect("python3 runs scripts/check-size.py");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A function whose body makes it exactly `lines` lines long, `fn` line and closing brace
/// included, with brace-like text in a string, a raw string, a char and comments.
fn function(name: &str, lines: usize) -> String {
    assert!(lines >= 7);
    let mut s = format!("fn {name}() {{\n");
    s.push_str("    let _a = \"}}}\"; // a comment with }\n");
    s.push_str("    let _b = r#\"{ \"} \"#; /* { nested /* } */ */\n");
    s.push_str("    let _c = '}';\n");
    for _ in 0..lines - 6 {
        s.push_str("    let _ = 1;\n");
    }
    s.push_str("    let _d: &'static str = \"\";\n}\n");
    s
}

#[test]
fn the_script_finds_a_function_one_line_over_and_passes_one_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.rs"),
        function("at_limit", 100) + &function("over", 101),
    )
    .unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok, "a 101-line function passed:\n{out}");
    // `over` starts on line 101, after the 100 lines of `at_limit`.
    assert_eq!(out.trim(), "a.rs:101: function of 101 lines (limit 100)");
}

#[test]
fn the_script_finds_a_file_one_line_over() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.rs"), "// x\n".repeat(1000)).unwrap();
    let (ok, out) = check(dir.path());
    assert!(ok, "a 1,000-line file failed:\n{out}");
    std::fs::write(dir.path().join("big.rs"), "// x\n".repeat(1001)).unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok);
    assert!(out.starts_with("big.rs: 1001 lines (limit 1000)"), "{out}");
}

#[test]
fn the_library_keeps_its_size_limits() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (ok, out) = check(&src);
    assert!(ok, "over the size limits:\n{out}");
}
