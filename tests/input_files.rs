//! The files a configuration names are input (issue 18): they must be regular files of a
//! bounded size, read without ever blocking, and `check-config` checks every one of them,
//! the shared key included. Each test says which behaviour it pins.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::KillOnDrop;

/// Runs `hcclwatch ARGS`, killed after `limit`; `None` if it had to be killed.
fn run_bounded(args: &[&str], limit: Duration) -> Option<Output> {
    let child = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut guard = KillOnDrop(Some(child));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(_status) = guard.0.as_mut().unwrap().try_wait().unwrap() {
            return Some(guard.0.take().unwrap().wait_with_output().unwrap());
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Pins: a config file that is a FIFO is refused at once; `check-config` used to block in
/// `open(2)` forever, waiting for a writer.
#[test]
fn a_fifo_config_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("hcclwatch.toml");
    mkfifo(&fifo);
    let out = run_bounded(
        &["check-config", fifo.to_str().unwrap()],
        Duration::from_secs(10),
    )
    .expect("check-config blocked on a FIFO");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is a FIFO, not a regular file"),
        "{}",
        stderr(&out)
    );
}

/// Pins: a rank table that is a FIFO or too large is refused, without blocking.
#[test]
fn rank_table_must_be_a_small_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rank_table.json");
    mkfifo(&fifo);
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("[collective]\nrank_table_file = \"{}\"\n", fifo.display()),
    )
    .unwrap();
    let out = run_bounded(
        &["check-config", cfg.to_str().unwrap()],
        Duration::from_secs(10),
    )
    .expect("check-config blocked on a FIFO rank table");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is a FIFO"), "{}", stderr(&out));

    let big = dir.path().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(hcclwatch::config::file::RANK_TABLE_LIMIT + 1)
        .unwrap();
    std::fs::write(
        &cfg,
        format!("[collective]\nrank_table_file = \"{}\"\n", big.display()),
    )
    .unwrap();
    let out = run_bounded(
        &["check-config", cfg.to_str().unwrap()],
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is larger than"), "{}", stderr(&out));
}

/// Pins: `check-config` checks the key file: inner whitespace is an error (it used to be
/// removed silently, so "abc def…" and "abcdef…" were the same key), a short or missing key
/// is an error, a world-readable one a warning; surrounding whitespace is trimmed.
#[test]
fn check_config_checks_the_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("[collective]\nkey_file = \"{}\"\n", key.display()),
    )
    .unwrap();
    let check = || {
        run_bounded(
            &["check-config", cfg.to_str().unwrap()],
            Duration::from_secs(10),
        )
        .unwrap()
    };

    std::fs::write(&key, "\n  0123456789abcdef0123456789abcdef \n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = check();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = check();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning:") && stderr(&out).contains("readable by every user"),
        "{}",
        stderr(&out)
    );

    std::fs::write(&key, "0123456789abcdef 0123456789abcdef\n").unwrap();
    let out = check();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("collective.key_file") && stderr(&out).contains("whitespace inside"),
        "{}",
        stderr(&out)
    );

    std::fs::write(&key, "short\n").unwrap();
    let out = check();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("at least 16"), "{}", stderr(&out));

    std::fs::remove_file(&key).unwrap();
    let out = check();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot open"), "{}", stderr(&out));
}

/// Pins: `--web.telemetry-path` naming another route is refused with a message at start;
/// `run` used to panic in the router ("Overlapping method route").
#[test]
fn a_colliding_telemetry_path_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[web]\nlisten_address = \"127.0.0.1:0\"\n[telemetry]\nbackend = \"none\"\n",
    )
    .unwrap();
    for path in hcclwatch::config::RESERVED_PATHS {
        let out = run_bounded(
            &[
                "run",
                "--config.file",
                cfg.to_str().unwrap(),
                "--web.telemetry-path",
                path,
            ],
            Duration::from_secs(20),
        )
        .expect("run did not exit");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{path}: {err}");
        assert!(!err.contains("panicked"), "{path}: {err}");
        assert!(
            err.contains("flag --web.telemetry-path: web.telemetry_path")
                && err.contains("reserved"),
            "{path}: {err}"
        );
    }
}
