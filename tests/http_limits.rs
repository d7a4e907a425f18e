//! The daemon's HTTP server bounds what a client can hold (issue 18): HTTP/1 only (no
//! cleartext HTTP/2), a deadline for request heads, a cap on head size, and a connection
//! cap that a flood of idle connections cannot turn into a lockout. Each test says which
//! behaviour it pins.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Daemon, KillOnDrop, Start, http_get};

fn config(extra: &str) -> String {
    format!(
        "[web]\nlisten_address = \"127.0.0.1:0\"\n{extra}\n[telemetry]\nbackend = \"none\"\n[collectors]\nhost = false\n"
    )
}

/// Reads until the peer closes or `limit` passes; returns the bytes and whether it closed.
fn read_until_close(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// Pins: cleartext HTTP/2 with prior knowledge is not spoken. It used to be (hyper's
/// `http2` feature is on in the build and `axum::serve` accepts h2c), which is how 20
/// connections of 200 stalled streams each grew the daemon by 250 MB.
#[test]
fn no_cleartext_http2() {
    let d = Daemon::start(Start::new(&config("")));
    let mut s = TcpStream::connect(&d.addr).unwrap();
    // The client preface, then an empty SETTINGS frame.
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .unwrap();
    let (got, _) = read_until_close(&mut s, Duration::from_secs(3));
    let is_h2_settings = got.len() >= 9 && got[3] == 0x04;
    assert!(
        !is_h2_settings,
        "the server answered the HTTP/2 preface with a SETTINGS frame: {got:?}"
    );
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

/// Pins: a client that never finishes its request head is disconnected after
/// `web.header_read_timeout` (slowloris); before, the connection stayed open.
#[test]
fn slow_request_heads_are_cut_off() {
    let d = Daemon::start(Start::new(&config("header_read_timeout = \"500ms\"")));
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t = Instant::now();
    let (_, closed) = read_until_close(&mut s, Duration::from_secs(8));
    assert!(closed, "a half-sent head kept its connection for 8 s");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // A connection that sends nothing at all is closed the same way.
    let mut idle = TcpStream::connect(&d.addr).unwrap();
    let (_, closed) = read_until_close(&mut idle, Duration::from_secs(8));
    assert!(closed, "an idle connection stayed open");
    assert_eq!(http_get(&d.addr, "/metrics", None).status, 200);
}

/// Pins: a request head over `web.max_header_bytes` is refused (it used to be read up to
/// hyper's default of about 400 KB and answered).
#[test]
fn oversized_heads_are_refused() {
    let d = Daemon::start(Start::new(&config("max_header_bytes = 8192")));
    let mut s = TcpStream::connect(&d.addr).unwrap();
    let big = "a".repeat(64 << 10);
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\nConnection: close\r\n\r\n"
    );
    let (got, _) = read_until_close(&mut s, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
}

/// Pins: idle connections cannot lock out a scraper. With the open-file limit at 256, 400
/// idle connections used to exhaust the daemon's descriptors, `accept` failed, and
/// `/metrics` timed out; now the connection cap closes the idle ones to make room.
///
/// The test shows that its flood is one that exhausts the descriptors without the cap:
/// the limit of 256 is in force in the daemon (read back from `/proc`), the flood holds
/// more connections than that at once, and the daemon took every one of them in (it
/// closed all but the 64 the cap keeps), which it could not have done holding them.
#[test]
fn idle_connection_flood_does_not_block_metrics() {
    const LIMIT: u64 = 256;
    const CAP: usize = 64;
    const FLOOD: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, config(&format!("max_connections = {CAP}"))).unwrap();
    // The hard limit too, so the daemon cannot simply raise its soft limit past the flood.
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["run", "--config.file", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux)");
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let _guard = KillOnDrop(Some(child));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix("address="))
            {
                let _ = tx.send(a.to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("daemon started");
    // prlimit runs the daemon in its own process: the limit is the daemon's, and it kept it.
    assert_eq!(open_file_limit(pid), (LIMIT, LIMIT));
    let mut idle = Vec::new();
    for _ in 0..FLOOD {
        if let Ok(s) = TcpStream::connect(&addr) {
            idle.push(s);
        }
    }
    assert!(
        idle.len() as u64 > LIMIT,
        "only {} of {FLOOD} connections were made: not more than the daemon's {LIMIT} descriptors",
        idle.len()
    );
    // The daemon has taken the whole flood in once it closed all but CAP of it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = idle.len();
    let open = rt.block_on(close_watch(idle, held - CAP, Duration::from_secs(10)));
    let (tx, rx) = mpsc::channel();
    let a = addr.clone();
    std::thread::spawn(move || {
        let _ = tx.send(http_get(&a, "/metrics", None).status);
    });
    let status = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("/metrics did not answer within 5 s while idle connections were held");
    assert_eq!(status, 200);
    drop(open);
}

/// The soft and hard open-file limits of process `pid`.
fn open_file_limit(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open-file limit in:\n{limits}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

/// Waits until the peer has closed `closed` of `conns` (each read ends when its
/// connection closes); returns the set still waiting on the others, which holds them open.
async fn close_watch(
    conns: Vec<TcpStream>,
    closed: usize,
    within: Duration,
) -> tokio::task::JoinSet<()> {
    use tokio::io::AsyncReadExt as _;
    let mut set = tokio::task::JoinSet::new();
    for s in conns {
        s.set_nonblocking(true).unwrap();
        let mut s = tokio::net::TcpStream::from_std(s).unwrap();
        set.spawn(async move {
            let mut b = [0u8; 1];
            let _ = s.read(&mut b).await;
        });
    }
    let mut seen = 0;
    let all = async {
        while seen < closed {
            set.join_next()
                .await
                .expect("a watched connection")
                .unwrap();
            seen += 1;
        }
    };
    if tokio::time::timeout(within, all).await.is_err() {
        panic!(
            "the daemon closed only {seen} of the flood's connections within {within:?}, not {closed}"
        );
    }
    set
}
