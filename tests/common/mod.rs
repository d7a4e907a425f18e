//! Shared harness for black-box tests: start the real `hcclwatch` binary, learn its port
//! from its own log line, scrape it over real TCP, and parse the exposition.

#![allow(dead_code)]

pub mod alert_chain;
pub mod ca;
pub mod fake_apiserver;
pub mod helm;
pub mod netns;
pub mod receiver;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The signals [`Daemon::signal`] sends.
pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process};

/// Path of `libfake_dcmi.so`, built by `cargo build --workspace`.
pub fn fake_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("FAKE_DCMI_LIB") {
        return PathBuf::from(p);
    }
    // Test binaries live in target/<profile>/deps; the cdylib in target/<profile>.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let lib = profile_dir.join("libfake_dcmi.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --workspace` (or `cargo build -p fake-dcmi`) before the tests",
        lib.display()
    );
    lib
}

/// Path of the fake `hccn_tool` (`tests/fake-hccn`), built by `cargo build --workspace`.
pub fn fake_hccn() -> PathBuf {
    if let Some(p) = std::env::var_os("FAKE_HCCN_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = profile_dir.join("fake-hccn");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` (or `cargo build -p fake-hccn`) before the tests",
        bin.display()
    );
    bin
}

/// One fake node's `hccn_tool`: a wrapper script (hcclwatch runs the tool with only
/// `PATH` and `LD_LIBRARY_PATH`, so the wrapper sets the fake's variables and `exec`s it),
/// its scenario, its invocation log and an `hccn.conf`.
pub struct FakeHccn {
    /// The wrapper: the path for `telemetry.hccn_tool`.
    pub tool: PathBuf,
    /// `FAKE_HCCN_SCENARIO`.
    pub scenario: PathBuf,
    /// `FAKE_HCCN_LOG`: one line per run, its argv.
    pub log: PathBuf,
    /// An `hccn.conf` for `telemetry.hccn_conf` (empty until written).
    pub conf: PathBuf,
}

impl FakeHccn {
    /// Writes the scenario and the wrapper under `dir`; `fabric` is the shared
    /// `FAKE_FABRIC` file, if the test pings.
    pub fn new(dir: &Path, scenario: &str, fabric: Option<&Path>) -> FakeHccn {
        use std::os::unix::fs::PermissionsExt;
        let f = FakeHccn {
            tool: dir.join("hccn_tool"),
            scenario: dir.join("hccn-scenario.json"),
            log: dir.join("hccn-calls.log"),
            conf: dir.join("hccn.conf"),
        };
        f.set_scenario(scenario);
        std::fs::write(&f.conf, "").unwrap();
        let fabric = fabric
            .map(|p| format!("export FAKE_FABRIC='{}'\n", p.display()))
            .unwrap_or_default();
        let script = format!(
            "#!/bin/sh\nexport FAKE_HCCN_SCENARIO='{}'\nexport FAKE_HCCN_LOG='{}'\n{fabric}exec '{}' \"$@\"\n",
            f.scenario.display(),
            f.log.display(),
            fake_hccn().display()
        );
        std::fs::write(&f.tool, script).unwrap();
        std::fs::set_permissions(&f.tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        f
    }

    /// Replaces the scenario atomically (write + rename).
    pub fn set_scenario(&self, json: &str) {
        let tmp = self.scenario.with_extension("tmp");
        std::fs::write(&tmp, json).unwrap();
        std::fs::rename(&tmp, &self.scenario).unwrap();
    }

    /// How many runs had exactly this argv (e.g. `-i 0 -optical -g`).
    pub fn runs(&self, argv: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == argv)
            .count()
    }
}

/// A daemon config reading NPU ports through `hccn`, with fast passes; `extra` is
/// appended (further sections).
pub fn hccn_config(hccn: &FakeHccn, telemetry: &str, extra: &str) -> String {
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"

[log]
level = "debug"

[telemetry]
backend = "none"
hccn_tool = "{tool}"
hccn_conf = "{conf}"
{telemetry}

[telemetry.intervals]
ports = "1s"
optics = "1s"

[collectors]
host = false
{extra}
"#,
        tool = hccn.tool.display(),
        conf = hccn.conf.display(),
    )
}

/// A running daemon; killed on drop.
pub struct Daemon {
    child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

/// How to start a daemon.
pub struct Start<'a> {
    pub config: &'a str,
    pub scenario: Option<&'a str>,
    pub env: Vec<(&'a str, String)>,
    pub args: Vec<&'a str>,
    /// Another hcclwatch binary than this build's (another release: tests/upgrades.rs).
    pub bin: Option<&'a Path>,
}

impl<'a> Start<'a> {
    pub fn new(config: &'a str) -> Self {
        Self {
            config,
            scenario: None,
            env: vec![],
            args: vec![],
            bin: None,
        }
    }

    pub fn binary(mut self, bin: &'a Path) -> Self {
        self.bin = Some(bin);
        self
    }

    pub fn scenario(mut self, s: &'a str) -> Self {
        self.scenario = Some(s);
        self
    }
}

/// A config using the fake library on an ephemeral loopback port, with fast intervals.
pub fn fake_config(extra: &str) -> String {
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"

[log]
level = "debug"

[telemetry]
backend = "dcmi"
dcmi_library = "{lib}"
call_deadline = "500ms"
network_health_deadline = "300ms"

[telemetry.intervals]
inventory = "2s"
health = "300ms"
sensors = "300ms"
utilization = "300ms"
memory = "300ms"
network = "300ms"
host = "1s"
{extra}
"#,
        lib = fake_lib().display()
    )
}

impl Daemon {
    /// Starts the daemon and waits for its "listening" log line.
    pub fn start(s: Start<'_>) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("hcclwatch.toml");
        std::fs::write(&cfg, s.config).expect("write config");
        let bin = s.bin.unwrap_or(Path::new(env!("CARGO_BIN_EXE_hcclwatch")));
        let mut cmd = Command::new(bin);
        cmd.arg("run").arg("--config.file").arg(&cfg).args(&s.args);
        if let Some(scen) = s.scenario {
            let p = dir.path().join("scenario.json");
            std::fs::write(&p, scen).expect("write scenario");
            cmd.env("FAKE_DCMI_SCENARIO", &p);
        }
        for (k, v) in &s.env {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn hcclwatch");
        let stderr = child.stderr.take().expect("stderr");
        // From here on the child is owned by a guard, so any panic below kills it.
        let mut guard = KillOnDrop(Some(child));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("hcclwatch listening") {
                    let _ = tx.send(line.clone());
                }
                log2.lock().unwrap().push(line);
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                panic!(
                    "daemon did not start; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let addr = if line.starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
            v["address"].as_str().expect("address field").to_string()
        } else {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix("address="))
                .expect("address in listening line")
                .to_string()
        };
        let child = guard.0.take().expect("child");
        Daemon {
            child,
            addr,
            dir,
            log,
        }
    }

    pub fn scenario_path(&self) -> PathBuf {
        self.dir.path().join("scenario.json")
    }

    /// Replaces the scenario atomically (write + rename), so the fake never reads half a file.
    pub fn set_scenario(&self, json: &str) {
        let tmp = self.dir.path().join("scenario.json.tmp");
        std::fs::write(&tmp, json).unwrap();
        std::fs::rename(&tmp, self.scenario_path()).unwrap();
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn get(&self, path: &str, accept: Option<&str>) -> Response {
        http_get(&self.addr, path, accept)
    }

    pub fn scrape(&self) -> String {
        let r = self.get("/metrics", None);
        assert_eq!(r.status, 200, "scrape failed: {}", r.body);
        r.body
    }

    /// Scrapes until `pred` holds, at most `timeout`; returns the matching scrape.
    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.scrape();
            if pred(&s) {
                return s;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out waiting for {what}; last scrape:\n{s}\nlog:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal to the daemon.
    pub fn signal(&self, sig: Signal) {
        kill_process(Pid::from_child(&self.child), sig)
            .unwrap_or_else(|e| panic!("sending {sig:?} to the daemon: {e}"));
    }

    /// The config file the daemon was started with.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("hcclwatch.toml")
    }

    /// Sends SIGTERM, waits for exit, and returns the status with the whole log.
    pub fn stop_logged(self) -> (std::process::ExitStatus, String) {
        let log = self.log.clone();
        let status = self.stop();
        // The reader thread ends with the pipe; give it a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let text = log.lock().unwrap().join("\n");
        (status, text)
    }

    /// Whether the daemon has exited (reaping it if so).
    pub fn try_wait(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Sends SIGTERM and waits for exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = kill_process(Pid::from_child(&self.child), Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("daemon did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Kills and reaps the child on drop, so a failing test leaves no process behind.
pub struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP response.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// HTTP/1.1 GET over a fresh TCP connection.
pub fn http_get(addr: &str, path: &str, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    http_request(addr, "GET", path, &headers, b"")
}

/// HTTP/1.1 POST of `body` with extra headers.
pub fn http_post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    http_request(addr, "POST", path, headers, body)
}

fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let len = if method == "GET" {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}{len}Connection: close\r\n\r\n"
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body split");
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Response {
        status,
        headers,
        body,
    }
}

/// Decodes an HTTP/1.1 chunked body (Go servers chunk large responses).
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n..];
        rest = rest.strip_prefix("\r\n").unwrap_or(rest);
    }
    out
}

/// Percent-encodes a query-string value.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Parses the label set of an exposition line into pairs.
pub fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((k, after)) = rest.split_once("=\"") {
        let mut val = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        val.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => val.push(c),
            }
        }
        out.push((k.trim_start_matches(',').trim().to_string(), val));
        rest = &after[end..];
    }
    out
}

/// Every sample of `name` whose labels include all of `want`.
pub fn samples(text: &str, name: &str, want: &[(&str, &str)]) -> Vec<f64> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let (metric, labels) = match series.split_once('{') {
            Some((m, l)) => (m, parse_labels(l.trim_end_matches('}'))),
            None => (series, vec![]),
        };
        if metric != name {
            continue;
        }
        if want
            .iter()
            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
        {
            out.push(value.parse().expect("numeric sample"));
        }
    }
    out
}

/// The single sample of `name` with labels `want`, or `None` if absent. Panics if
/// several series match: a test must name the series it means.
pub fn value(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let v = samples(text, name, want);
    assert!(v.len() <= 1, "{name}{want:?} matches {} series", v.len());
    v.first().copied()
}

/// A loopback port that was free a moment ago (the listener is dropped, so a daemon can
/// bind it), taken below the kernel's ephemeral range. A port from that range (what
/// binding port 0 gives) is handed out again as the source port of any outgoing
/// connection: under load a daemon that starts late can find its listening port taken by
/// another daemon's connection and wait out its bind backoff (the likely cause of a group
/// that never formed in tests/upgrades.rs with a core busy elsewhere; that member's log
/// was not kept). Below the range only a deliberate bind takes a port.
pub fn free_port() -> u16 {
    // Every port this test process handed out is remembered and never returned again (a
    // test would otherwise list a peer twice).
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // The range's low end, read once per test process.
    static EPHEMERAL_LOW: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let ephemeral_low = *EPHEMERAL_LOW.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768)
    });
    // 10,000 ports under the range, starting where this process's id points, so that
    // test processes running at once rarely try the same ports first.
    let span: u32 = 10_000;
    let floor = u32::from(ephemeral_low).saturating_sub(span).max(1024);
    let width = u32::from(ephemeral_low).saturating_sub(floor);
    assert!(
        width > 0,
        "no ports below the ephemeral range {ephemeral_low}"
    );
    let start = std::process::id().wrapping_mul(7919) % width;
    for k in 0..width {
        let port = u16::try_from(floor + (start + k) % width).expect("a port below 65536");
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port between {floor} and {ephemeral_low}");
}

/// Writes a shared collective key (32 bytes) into `dir` as `name` and returns its path.
pub fn write_key(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    std::fs::write(&key, "0123456789abcdef0123456789abcdef").unwrap();
    key
}

/// A Grafana panel expression with the dashboard variables replaced by match-everything
/// values and the interval macros by fixed windows, so Prometheus can run it.
pub fn substitute_grafana_vars(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$__interval", "30s")
        .replace("$cluster", ".*")
        .replace("$node", ".*")
        .replace("$npu", ".*")
}

/// Every panel query of every shipped dashboard: ("file/panel title", substituted expr).
pub fn dashboard_queries() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let d: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).expect("read dashboard"))
                .expect("dashboard JSON");
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        for p in d["panels"].as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let title = p["title"].as_str().unwrap_or("?");
                    out.push((format!("{name}/{title}"), substitute_grafana_vars(e)));
                }
            }
        }
    }
    out
}

/// `n` probe addresses on 127.0.0.1, each on a port free when asked.
pub fn loopback_peers(n: usize) -> Vec<String> {
    (0..n)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect()
}

/// Starts Debian's `bin` (package `package`) with `args`, its stderr in `log`, and waits
/// (up to a minute) until `addr` answers `/-/ready`.
pub fn start_server(
    bin: &str,
    package: &str,
    args: &[String],
    addr: &str,
    log: &Path,
) -> KillOnDrop {
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("starting {bin}: {e}; install {package} (scripts/test.sh does)")
        });
    let guard = KillOnDrop(Some(child));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(TcpStream::connect(addr).is_ok() && http_get(addr, "/-/ready", None).status == 200) {
        assert!(
            Instant::now() < deadline,
            "{bin} not ready on {addr}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    guard
}

/// Debian's Alertmanager on `addr` with `dir/alertmanager.yml`, its data and log in `dir`.
pub fn start_alertmanager(dir: &Path, addr: &str) -> KillOnDrop {
    std::fs::create_dir_all(dir.join("am-data")).unwrap();
    start_server(
        "prometheus-alertmanager",
        "prometheus-alertmanager",
        &[
            format!("--config.file={}", dir.join("alertmanager.yml").display()),
            format!("--storage.path={}", dir.join("am-data").display()),
            format!("--web.listen-address={addr}"),
            "--cluster.listen-address=".to_string(),
        ],
        addr,
        &dir.join("alertmanager.log"),
    )
}

/// Debian's Prometheus on `addr` with `dir/prometheus.yml`, its TSDB and log in `dir`.
pub fn start_prometheus(dir: &Path, addr: &str) -> KillOnDrop {
    start_server(
        "prometheus",
        "prometheus",
        &[
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address={addr}"),
        ],
        addr,
        &dir.join("prometheus.log"),
    )
}

/// `items` as the inside of a TOML array of strings: `"a", "b"`.
pub fn toml_strings(items: &[String]) -> String {
    items
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The send throttle, bytes a second, that slows the straggler of the loopback tests. Six
/// daemons share two cores there. With one core taken by another process (as on a loaded
/// CI runner), at 20 MB/s the alerting test's straggler took 86 to 220 s to be recommended
/// (the healthy probes' scheduler noise scattered its residuals past the steadiness test),
/// and tests/probe.rs and tests/membership.rs missed their 90 s waits (not diagnosed;
/// likely the same); at 5 MB/s all three passed, the straggler recommended within 23 s
/// (docs/deployment.md, "The end-to-end test").
pub const SLOW_THROTTLE: u64 = 5_000_000;

/// A probing daemon config for loopback tests: fast rounds, the shipped detection
/// thresholds, and an optional send throttle (the engine's fault injection). A throttled
/// node stands for a slow component, so it also reports the hardware sign such a
/// component's interface shows (a PCIe link trained down): with it, the shipped
/// thresholds recommend it after the short hold instead of the persistence horizon, which
/// at these 150 ms rounds would be half a minute of steady slowness more. (Loopback has
/// no PCIe link to read; the reader itself is tested on a fake sysfs tree and in
/// tests/netns.rs.)
pub fn probe_config(peers: &[String], rank: usize, key: &std::path::Path, throttle: u64) -> String {
    let list = toml_strings(peers);
    let signs = if throttle > 0 { r#"["pcie"]"# } else { "[]" };
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "none"
[collective]
peers = [{list}]
rank = {rank}
key_file = "{key}"
connect_timeout = "5s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "150ms"
small_bytes = 1024
link_bytes = 262144
ring_every = 5
ring_bytes = 262144
inject_throttle_bytes_per_second = {throttle}
inject_hardware_signs = {signs}
"#,
        key = key.display()
    )
}

/// `config` with the detection thresholds widened for tests whose subject is not detection
/// (the alert chain, membership hand-over) and that load two shared cores further (fake
/// DCMI, Prometheus, Alertmanager next to six daemons): there the round median swings far
/// more than on a real fabric, so the fabric threshold is raised (scheduler noise is not a
/// fabric dip) and `z` lowered (the same jitter inflates the robust spread); the effect
/// size (delta) stays at 8 %. Detection itself is tested with the shipped `[health]` in
/// tests/probe.rs and tests/netns.rs.
pub fn with_loosened_health(config: String) -> String {
    assert!(
        !config.contains("[health]"),
        "the config already has a [health] section"
    );
    config + "[health]\nfabric_ratio = 3.0\nz = 2.0\n"
}

/// The `hcclwatch_node_state` sample of `node` in `st`.
pub fn node_state(s: &str, node: &str, st: &str) -> Option<f64> {
    value(s, "hcclwatch_node_state", &[("node", node), ("state", st)])
}

/// A fresh CA and a server certificate for `name` signed by it, as PEM:
/// (CA certificate, server certificate, server key).
pub fn test_ca(name: &str) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}
