//! What `check-config`, `run` (its flag checks) and `remediate --check` print for a corpus
//! of valid and invalid configurations: every message, its location and its order, and
//! the exit status.
//!
//! The expected output in `tests/golden/config_messages.json` was recorded from the
//! binary built before the configuration was typed at load (issue 25), so this test holds
//! the refactor, and every later change, to the messages users already know. The corpus
//! covers each schema error (unknown key, every type, ranges, durations, list elements),
//! each semantic check, each value parsed at load (listen and peer addresses, the DNS
//! target, the peer throttle, the traffic class, `HCCL_ALGO`, OTLP headers), rank tables,
//! key files, web config files, environment overrides, command-line flags, the shipped
//! configurations, and the remediation receiver's file. A case whose output depends on
//! the machine's resolver is not in it.
//!
//! A change of message that is meant is made by editing the case's expected text in the
//! JSON, so that the change shows in review.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

#[derive(serde::Deserialize)]
struct Golden {
    files: BTreeMap<String, File>,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct File {
    text: String,
    mode: u32,
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    exit: i32,
    stdout: String,
    stderr: String,
}

#[test]
fn every_message_is_the_one_users_know() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/golden/config_messages.json"
    );
    let golden: Golden = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(golden.cases.len() > 100, "{} cases", golden.cases.len());
    let dir = tempfile::tempdir().unwrap();
    for (name, f) in &golden.files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &f.text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.mode)).unwrap();
    }
    let mut differ = Vec::new();
    for case in &golden.cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcclwatch"));
        cmd.args(&case.args).current_dir(dir.path());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HCCLWATCH_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(&case.env);
        let out = cmd.output().unwrap();
        let got = (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        let want = (case.exit, case.stdout.clone(), case.stderr.clone());
        if got != want {
            differ.push(format!(
                "{}: {:?}\n  expected exit {}, stdout {:?}\n  stderr:\n{}\n  got exit {}, stdout {:?}\n  stderr:\n{}",
                case.name, case.args, want.0, want.1, want.2, got.0, got.1, got.2
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} cases differ:\n\n{}",
        differ.len(),
        golden.cases.len(),
        differ.join("\n\n")
    );
}
