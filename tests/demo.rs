//! `hcclwatch demo` end to end: six real daemons on loopback, node 2 slowed by default. The
//! final JSON must name node 2, and only node 2, for quarantine, and a `--kill`ed node must
//! show as not alive. A `--bad-link` must give a link verdict and no node verdict. The demo
//! must leave no daemon or temporary directory behind. With `--npus`, a `--lossy-port` must
//! be that port's verdict, and only that port's, in every daemon's view. The daemons run the
//! shipped `[health]` thresholds.

use std::io::BufRead;
use std::process::{Command, Stdio};

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
    assert_cleaned_up(&stdout, nodes);
}

/// The demo's working directory (named by its pid, printed in `stdout`) is gone, and so
/// are its daemons.
fn assert_cleaned_up(stdout: &str, nodes: &[serde_json::Value]) {
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
    let cases: [(&[&str], &str); 6] = [
        (
            &["--slow-tor", "2=0.5"],
            "--slow-tor \"2=0.5\": ToR 2 does not exist (with --tors 2 the ToRs are 0..1)",
        ),
        (
            &["--tors", "3", "--slow-tor", "0=1.5"],
            "FACTOR must be between 0 and 1",
        ),
        (&["--slow-tor", "0"], "expected TOR=FACTOR"),
        (&["--lossy-tor", "1=0.1"], "--lossy-tor needs --npus K"),
        (&["--tors", "9"], "--tors must be 1..=6"),
        (
            &["--npus", "2", "--lossy-tor", "1=2"],
            "LOSS must be a fraction from 0 to 1",
        ),
    ];
    for (args, want) in cases {
        let out = demo(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
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

/// Port states that are a verdict on the port.
const ELEVATED: [&str; 3] = ["suspect", "confirmed", "quarantine_recommended"];

#[test]
fn demo_npus_a_lossy_port_is_that_port_and_no_other() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("final.json");
    let err_file = dir.path().join("stderr");
    // `--duration` only bounds the test: it stops the demo (SIGTERM, as Ctrl-C) as soon as
    // the view shows the port's verdict in every daemon's view.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["demo", "--npus", "4", "--lossy-port", "2:1=0.2"])
        .args(["--duration", "150", "--json-out"])
        .arg(&out_file)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut stdout = String::new();
    let mut stopped = false;
    // Whether the screen being read says every daemon has all 24 ports (the group re-forms
    // while nodes' ports are being found).
    let mut formed = false;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("NPU ports:") {
            formed = line.starts_with("NPU ports: 24 in 6 daemons' views");
        }
        let verdict = formed
            && line.starts_with("port 2:1 ")
            && ELEVATED
                .iter()
                .any(|s| line.split_whitespace().nth(2) == Some(s))
            && line.split_whitespace().nth(3) == Some("6/6");
        if verdict && !stopped {
            eprintln!("port verdict in every view after {:?}", started.elapsed());
            rustix::process::kill_process(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::TERM,
            )
            .unwrap();
            stopped = true;
        }
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stopped,
        "no verdict on port 2:1 in all six views:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("port 2:1: loses 0.2 of its packets"),
        "{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(doc["device"]["npus"], 4);
    // The demo's summary: that port, and only it.
    let ports = doc["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(
        (&ports[0]["node"], &ports[0]["npu"]),
        (&2.into(), &1.into())
    );
    assert!(
        ELEVATED.contains(&ports[0]["state"].as_str().unwrap()),
        "{}",
        ports[0]
    );
    // And every daemon's own view, read directly: 24 ports, only node 2's NPU 1 not healthy.
    let nodes = doc["nodes"].as_array().unwrap();
    let lossy = nodes[2]["probe_address"].as_str().unwrap();
    for n in nodes {
        assert_eq!(n["alive"], true, "{n}");
        let device = &n["view"]["device"];
        let all = device["ports"].as_array().unwrap();
        assert_eq!(all.len(), 6 * 4, "node {}: {device}", n["node"]);
        let bad: Vec<(&str, u64, &str)> = all
            .iter()
            .filter(|p| p["state"] != "healthy")
            .map(|p| {
                (
                    p["node"].as_str().unwrap(),
                    p["npu"].as_u64().unwrap(),
                    p["state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(bad.len(), 1, "node {}: {bad:?}", n["node"]);
        assert_eq!((bad[0].0, bad[0].1), (lossy, 1), "node {}", n["node"]);
        assert!(ELEVATED.contains(&bad[0].2), "node {}: {bad:?}", n["node"]);
    }
    assert_cleaned_up(&stdout, nodes);
}

#[test]
fn demo_rejects_bad_port_options_with_a_reason() {
    let cases: [(&[&str], &str); 11] = [
        (&["--lossy-port", "2:1=0.2"], "--lossy-port needs --npus K"),
        (&["--down-port", "2:1"], "--down-port needs --npus K"),
        (&["--npus", "0"], "--npus must be 1..=16 (got 0)"),
        (&["--npus", "17"], "--npus must be 1..=16 (got 17)"),
        (
            &["--npus", "4", "--lossy-port", "9:1=0.2"],
            "--lossy-port \"9:1=0.2\": node 9 does not exist",
        ),
        (
            &["--npus", "4", "--lossy-port", "2:4=0.2"],
            "--lossy-port \"2:4=0.2\": NPU 4 does not exist",
        ),
        (
            &["--npus", "4", "--lossy-port", "2:1=1.5"],
            "--lossy-port \"2:1=1.5\": LOSS must be a fraction from 0 to 1",
        ),
        (
            &["--npus", "4", "--lossy-port", "2-1=0.2"],
            "--lossy-port \"2-1=0.2\": expected NODE:NPU=LOSS",
        ),
        (
            &["--npus", "4", "--down-port", "2:x"],
            "--down-port \"2:x\": \"x\" is not an NPU index",
        ),
        (
            &["--npus", "4", "--down-port", "2"],
            "--down-port \"2\": expected NODE:NPU",
        ),
        (
            &["--npus", "4", "--hccn-tool", "/nonexistent/fake-hccn"],
            "--hccn-tool /nonexistent/fake-hccn: no such file",
        ),
    ];
    for (args, want) in cases {
        let out = demo(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Without --hccn-tool the fake is looked for next to the executable: a copy of
    // hcclwatch (a hard link, in the target directory) with no fake-hccn beside it says so.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = dir.path().join("hcclwatch");
    std::fs::hard_link(env!("CARGO_BIN_EXE_hcclwatch"), &exe).unwrap();
    let out = Command::new(&exe)
        .args(["demo", "--npus", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let missing = dir.path().join("fake-hccn");
    assert!(
        err.contains(&format!("{} is missing", missing.display())) && err.contains("--hccn-tool"),
        "{err}"
    );
}
