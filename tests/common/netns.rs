//! Helpers for tests that build Linux network namespaces (they need root and iproute2,
//! which CI has; a test fails with that reason rather than passing when it cannot).

use std::process::Command;

/// Runs `ip` with `args`; panics with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root and iproute2)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// GET from inside namespace `ns` with curl (the test process lives in the host namespace,
/// which has no route into the test network, by design). None on any failure.
pub fn get(ns: &str, url: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}
