//! Runs the real `hcclwatch remediate` against the stand-in API server
//! (`fake_apiserver.rs`), with a bearer token, an audit log and a killswitch path in a
//! temporary directory.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::fake_apiserver::FakeApi;
use super::{KillOnDrop, Response, http_get, http_post, value};

pub const TOKEN: &str = "remediate-test-token-0123456789";

/// A running receiver; killed on drop.
pub struct Receiver {
    _child: KillOnDrop,
    pub addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub api: FakeApi,
}

impl Setup {
    pub fn new(nodes: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        let api = FakeApi::start();
        for n in nodes {
            api.add_node(n, &[("pool", "npu")]);
        }
        Setup { dir, api }
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// A config with the given extra top-level keys and rule body.
    pub fn config(&self, top: &str, rule: &str) -> String {
        format!(
            r#"
listen_address = "127.0.0.1:0"
audit_log = "{audit}"
killswitch_file = "{kill}"
reconcile_interval = "1s"
{top}
[auth]
bearer_token_file = "{token}"
[kubernetes]
kubeconfig = "{kubeconfig}"
[[rules]]
alertname = "HcclwatchQuarantineRecommended"
{rule}
"#,
            audit = self.audit_path().display(),
            kill = self.dir.path().join("pause").display(),
            token = self.dir.path().join("token").display(),
            kubeconfig = self.api.kubeconfig(self.dir.path()).display(),
        )
    }

    /// Starts the receiver and waits until it has read the nodes once and says so on
    /// `/-/ready`: the flag its webhook checks. (The reconcile timestamp is set inside the
    /// first read, just before that flag: waiting on it, a test's first alert could still
    /// be answered 503.)
    pub fn start(&self, config: &str) -> Receiver {
        let r = self.spawn(config);
        r.wait_metric("ready (nodes read)", |m| {
            value(
                m,
                "hcclwatch_remediation_last_reconcile_timestamp_seconds",
                &[],
            )
            .is_some_and(|v| v > 0.0)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while http_get(&r.addr, "/-/ready", None).status != 200 {
            assert!(
                Instant::now() < deadline,
                "the receiver read the nodes but is not ready:\n{}",
                r.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    /// Starts the receiver and returns once it listens (it may not have read the nodes).
    pub fn spawn(&self, config: &str) -> Receiver {
        let cfg = self.dir.path().join("remediate.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
            .args([
                "remediate",
                "--config.file",
                cfg.to_str().unwrap(),
                "--log.level",
                "debug",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let guard = KillOnDrop(Some(child));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("hcclwatch remediate listening") {
                    let _ = tx.send(line.clone());
                }
                log2.lock().unwrap().push(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!(
                    "receiver did not start:\n{}",
                    log.lock().unwrap().join("\n")
                )
            });
        let addr = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("address="))
            .unwrap()
            .to_string();
        Receiver {
            _child: guard,
            addr,
            log,
        }
    }

    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.audit_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }
}

impl Receiver {
    pub fn post(&self, body: &Value) -> Response {
        self.post_raw(&body.to_string(), Some(&format!("Bearer {TOKEN}")))
    }

    pub fn post_raw(&self, body: &str, auth: Option<&str>) -> Response {
        let mut h = vec![("Content-Type", "application/json")];
        if let Some(a) = auth {
            h.push(("Authorization", a));
        }
        http_post(&self.addr, "/webhook", &h, body.as_bytes())
    }

    pub fn metrics(&self) -> String {
        http_get(&self.addr, "/metrics", None).body
    }

    pub fn wait_metric(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let m = self.metrics();
            if pred(&m) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}:\n{m}\nlog:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}
