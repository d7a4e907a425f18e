//! `hcclwatch demo` end to end: six real daemons on loopback, node 2 slowed by default. The
//! final JSON must name node 2, and only node 2, for quarantine, and a `--kill`ed node must
//! show as not alive. A `--bad-link` must give a link verdict and no node verdict. The demo
//! must leave no daemon or temporary directory behind.

use std::process::Command;

/// Twelve daemons on two cores would drown the signal in scheduler noise: one fleet at a
/// time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn demo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .arg("demo")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn demo_finds_the_slowed_node_and_cleans_up() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("final.json");
    let out = demo(&[
        "--duration",
        "30",
        "--kill",
        "5@25",
        "--json-out",
        out_file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("/metrics"),
        "scrape URLs are printed:\n{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    // Every live node reports its view of node 2 the same way.
    for n in nodes.iter().filter(|n| n["alive"] == true) {
        let members = n["view"]["members"].as_array().unwrap();
        for (i, m) in members.iter().enumerate() {
            let want = if i == 2 {
                "quarantine_recommended"
            } else {
                "healthy"
            };
            assert_eq!(m["state"], want, "node {} sees member {i}: {n}", n["node"]);
        }
    }
    assert_eq!(nodes[2]["state"], "quarantine_recommended");
    assert!(
        nodes[2]["reason"]
            .as_str()
            .unwrap()
            .contains("confirmed straggler"),
        "{}",
        nodes[2]
    );
    assert_eq!(nodes[5]["alive"], false);
    // The demo's working directory (named by its pid) is gone.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            stdout.contains(&name) && name.starts_with("hcclwatch-demo-")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // No daemon of this demo survives it: its web ports no longer answer.
    for n in nodes {
        let port = n["web_port"].as_u64().unwrap() as u16;
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "node {} still listening on {port}",
            n["node"]
        );
    }
}

#[test]
fn demo_rejects_bad_options_with_a_reason() {
    let out = demo(&["--slow", "9=0.5"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--slow \"9=0.5\": node 9 does not exist"),
        "{err}"
    );
    let out = demo(&["--slow", "1=1.5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("FACTOR must be between 0 and 1"));
    let out = demo(&["--kill", "1@soon"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"soon\" is not a number"));
    let out = demo(&["--bad-link", "1-1=0.5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("a link needs two different nodes"));
    let out = demo(&["--bad-link", "1-9=0.5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("node 9 does not exist"));
    let out = demo(&["--bad-link", "1+2=0.5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected A-B=FACTOR"));
}

#[test]
fn demo_bad_link_is_a_link_verdict_and_no_node_verdict() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("final.json");
    let out = demo(&[
        "--healthy",
        "--bad-link",
        "1-4=0.3",
        "--duration",
        "30",
        "--json-out",
        out_file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("link 1-4: slowed to 0.3 of nominal"),
        "{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let nodes = doc["nodes"].as_array().unwrap();
    let name = |i: usize| nodes[i]["probe_address"].as_str().unwrap().to_string();
    let ends = [name(1), name(4)];
    for n in nodes {
        let view = &n["view"];
        for m in view["members"].as_array().unwrap() {
            assert_eq!(m["state"], "healthy", "node {} sees {m}", n["node"]);
        }
        // The 1-4 link, in at least one direction. (A pair elsewhere can be judged slow
        // for a round by scheduler noise on two shared cores; the alert's `for:` is what
        // filters such blips. No node is ever blamed: asserted above.)
        let links = view["link_degraded"].as_array().unwrap();
        let is = |l: &serde_json::Value, a: &str, b: &str| l["src"] == a && l["dst"] == b;
        assert!(
            links
                .iter()
                .any(|l| is(l, &ends[0], &ends[1]) || is(l, &ends[1], &ends[0])),
            "node {} does not judge the 1-4 link degraded: {view}",
            n["node"]
        );
    }
    assert!(
        stdout
            .lines()
            .filter(|l| l.contains("degraded links:"))
            .any(|l| l.contains("1→4") || l.contains("4→1")),
        "the view shows the link verdict:\n{stdout}"
    );
}
