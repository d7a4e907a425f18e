//! Actions for fleets that are not (only) Kubernetes: an exec hook and a generic HTTP
//! webhook. Both get the same facts: the node, the alert and whether it fires or resolved.
//!
//! The exec hook takes an argv (no shell, so alert labels can never become shell code), the
//! alert as `HCCLWATCH_*` environment variables and as JSON on stdin, and a timeout after
//! which it is killed. Its exit status and the first few KiB of its output go to the audit
//! log. The webhook POSTs JSON and retries with doubling backoff.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::config::{ExecConfig, WebhookConfig};
use super::payload::Alert;

/// Output kept per stream in the audit log.
const OUTPUT_LIMIT: usize = 4096;

/// A hook that failed; the message goes to the audit log.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The exec hook's program could not be started.
    #[error("starting {program:?}: {error}")]
    Start {
        /// `argv[0]`.
        program: String,
        /// Why.
        error: std::io::Error,
    },
    /// The exec hook exited non-zero or was killed by a signal.
    #[error("{0}")]
    Exit(ExecOutput),
    /// Waiting for the exec hook failed.
    #[error("waiting for {program:?}: {error}")]
    Wait {
        /// `argv[0]`.
        program: String,
        /// Why.
        error: std::io::Error,
    },
    /// The exec hook ran past its timeout and was killed.
    #[error("{program:?} timed out after {timeout:?} and was killed")]
    Timeout {
        /// `argv[0]`.
        program: String,
        /// The configured timeout.
        timeout: Duration,
    },
    /// The webhook request could not be built (a bad URL).
    #[error("building the request to {url}: {error}")]
    Request {
        /// The configured URL.
        url: String,
        /// Why.
        error: hyper::http::Error,
    },
    /// Every webhook attempt failed.
    #[error("{last} (gave up after {attempts} attempts)")]
    GaveUp {
        /// How the last attempt failed.
        last: String,
        /// Attempts made.
        attempts: u32,
    },
}

/// How an exec hook ended, as the audit log shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code; None when a signal ended it.
    pub code: Option<i32>,
    /// The start of its standard output, trimmed.
    pub stdout: String,
    /// The start of its standard error, trimmed.
    pub stderr: String,
}

impl std::fmt::Display for ExecOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "exit {c}")?,
            None => write!(f, "exit signal")?,
        }
        write!(f, "; stdout: {}; stderr: {}", self.stdout, self.stderr)
    }
}

/// The JSON both hooks receive.
pub fn hook_body(node: &str, alert: &Alert) -> serde_json::Value {
    serde_json::json!({
        "node": node,
        "status": alert.status.as_str(),
        "alertname": alert.name(),
        "fingerprint": alert.fingerprint,
        "labels": alert.labels,
        "annotations": alert.annotations,
        "startsAt": alert.starts_at,
    })
}

/// Environment name for a label: `HCCLWATCH_LABEL_` + the label upper-cased, with anything
/// not alphanumeric as `_`.
fn env_name(label: &str) -> String {
    let mut s = String::from("HCCLWATCH_LABEL_");
    s.extend(label.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

/// Runs the hook; `Ok` carries the captured output (for the audit log), `Err` says what
/// went wrong (with whatever output there was).
pub async fn run_exec(cfg: &ExecConfig, node: &str, alert: &Alert) -> Result<String, HookError> {
    let mut cmd = tokio::process::Command::new(&cfg.argv[0]);
    cmd.args(&cfg.argv[1..])
        .env("HCCLWATCH_NODE", node)
        .env("HCCLWATCH_ALERTNAME", alert.name())
        .env("HCCLWATCH_STATUS", alert.status.as_str())
        .env("HCCLWATCH_FINGERPRINT", &alert.fingerprint)
        .env(
            "HCCLWATCH_REASON",
            alert.labels.get("reason").map(String::as_str).unwrap_or(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in &alert.labels {
        cmd.env(env_name(k), v);
    }
    let program = || cfg.argv[0].clone();
    let mut child = cmd.spawn().map_err(|error| HookError::Start {
        program: program(),
        error,
    })?;
    let input = hook_body(node, alert).to_string();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        if let Some(s) = stdin.as_mut() {
            // A hook that does not read stdin closes it; that is not an error.
            let _ = s.write_all(input.as_bytes()).await;
        }
        drop(stdin);
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(OUTPUT_LIMIT as u64).read_to_end(&mut out).await;
        }
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(OUTPUT_LIMIT as u64).read_to_end(&mut err).await;
        }
        let status = child.wait().await;
        (status, out, err)
    };
    match tokio::time::timeout(cfg.timeout, work).await {
        Ok((Ok(status), out, err)) => {
            let output = ExecOutput {
                code: status.code(),
                stdout: String::from_utf8_lossy(&out).trim().to_string(),
                stderr: String::from_utf8_lossy(&err).trim().to_string(),
            };
            if status.success() {
                Ok(output.to_string())
            } else {
                Err(HookError::Exit(output))
            }
        }
        Ok((Err(error), _, _)) => Err(HookError::Wait {
            program: program(),
            error,
        }),
        // Dropping the future drops the child, and kill_on_drop kills it.
        Err(_) => Err(HookError::Timeout {
            program: program(),
            timeout: cfg.timeout,
        }),
    }
}

/// POSTs the alert, retrying with doubling backoff; returns the attempts' outcome (for the
/// audit log).
pub async fn run_webhook(
    cfg: &WebhookConfig,
    node: &str,
    alert: &Alert,
) -> Result<String, HookError> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let body = Bytes::from(hook_body(node, alert).to_string());
    let mut backoff = cfg.backoff;
    let mut last = String::new();
    for attempt in 0..=cfg.retries {
        if attempt > 0 {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(60));
        }
        let req = hyper::Request::post(&cfg.url)
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("hcclwatch-remediate/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(body.clone()))
            .map_err(|error| HookError::Request {
                url: cfg.url.clone(),
                error,
            })?;
        match tokio::time::timeout(cfg.timeout, client.request(req)).await {
            Ok(Ok(resp)) if resp.status().is_success() => {
                return Ok(format!(
                    "{} after {} attempt(s)",
                    resp.status(),
                    attempt + 1
                ));
            }
            Ok(Ok(resp)) => last = format!("{} answered {}", cfg.url, resp.status()),
            Ok(Err(e)) => last = format!("{}: {e}", cfg.url),
            Err(_) => last = format!("{}: no answer within {:?}", cfg.url, cfg.timeout),
        }
    }
    Err(HookError::GaveUp {
        last,
        attempts: cfg.retries + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_env_names_are_safe() {
        assert_eq!(env_name("reason"), "HCCLWATCH_LABEL_REASON");
        assert_eq!(env_name("k8s.io/x-y"), "HCCLWATCH_LABEL_K8S_IO_X_Y");
    }
}
