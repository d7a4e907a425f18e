//! The append-only audit log: one JSON object per line, fsynced before the request is
//! answered, so every decision (including the refusals and the dry-run "would"s) is on
//! disk before Alertmanager hears back, and the intent of every change before the change.
//!
//! The file belongs to one writer thread: `write(2)` and `fsync(2)` block, sometimes for
//! long (a full or failing disk), and must never do so on the async workers. A record is
//! handed over through a bounded queue and its outcome awaited for at most
//! [`WRITE_DEADLINE`]; a full queue or a missed deadline is a failure like a write error.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Serialize, Serializer};

use super::config::Action;
use super::outcome::Outcome;
use super::payload::Status;

/// What a record is about: one of a rule's actions, or the quarantine or release as a
/// whole. Written as its bare name, as the audit log did when it was a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// `spec.unschedulable = true`.
    Cordon,
    /// The rule's taint.
    Taint,
    /// The rule's node condition.
    Condition,
    /// An Event on the node.
    Event,
    /// The rule's command.
    Exec,
    /// The rule's HTTP webhook.
    Webhook,
    /// One NPU taken out of scheduling (a `DeviceTaintRule`), or its release.
    IsolateNpu,
    /// The quarantine as a whole (its intent, before the node is marked).
    Quarantine,
    /// The release of a quarantined node.
    Release,
    /// A recurring node escalated: kept quarantined until a person releases it.
    Escalate,
    /// An operator override set or cleared (`hcclwatch override`).
    Override,
}

impl AuditAction {
    /// The name in the audit log, the metric's `action` label and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Cordon => Action::Cordon.as_str(),
            AuditAction::Taint => Action::Taint.as_str(),
            AuditAction::Condition => Action::Condition.as_str(),
            AuditAction::Event => Action::Event.as_str(),
            AuditAction::Exec => Action::Exec.as_str(),
            AuditAction::Webhook => Action::Webhook.as_str(),
            AuditAction::IsolateNpu => Action::IsolateNpu.as_str(),
            AuditAction::Quarantine => "quarantine",
            AuditAction::Release => "release",
            AuditAction::Escalate => "escalate",
            AuditAction::Override => "override",
        }
    }
}

impl From<Action> for AuditAction {
    fn from(a: Action) -> Self {
        match a {
            Action::Cordon => AuditAction::Cordon,
            Action::Taint => AuditAction::Taint,
            Action::Condition => AuditAction::Condition,
            Action::Event => AuditAction::Event,
            Action::Exec => AuditAction::Exec,
            Action::Webhook => AuditAction::Webhook,
            Action::IsolateNpu => AuditAction::IsolateNpu,
        }
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision about one action on one node. The fields are written in this order.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Time of the decision, written in RFC 3339.
    #[serde(serialize_with = "rfc3339")]
    pub ts: Timestamp,
    /// Who asked: the authenticated caller and its address.
    pub who: String,
    /// What: the action (`cordon`, `taint`, …, `quarantine` or `release`).
    pub action: AuditAction,
    /// The node.
    pub node: String,
    /// Why: the alert name and its reason label.
    pub alertname: String,
    /// The alert's `reason` label, if any.
    pub reason: String,
    /// Alertmanager's fingerprint of the alert.
    pub fingerprint: String,
    /// `firing` or `resolved`.
    pub status: Status,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The outcome (`applied`, `would_apply`, `already_done`, `breaker_open`, `failed`, …).
    pub result: Outcome,
    /// Details: an error, a refusal's reason, a hook's output.
    pub detail: String,
}

/// A timestamp as its RFC 3339 text (`2026-12-02T03:50:00.123456789Z`).
fn rfc3339<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(ts)
}

/// How long a record may take to reach the disk before the caller gives up on it.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Records waiting for the writer at most.
const QUEUE: usize = 256;

type Job = (Vec<u8>, tokio::sync::oneshot::Sender<std::io::Result<()>>);

/// The audit file, written by its own thread.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    queue: SyncSender<Job>,
}

impl AuditLog {
    /// Opens (creating) `path` for appending and starts its writer thread.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file: File = OpenOptions::new().create(true).append(true).open(path)?;
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("hcclwatch-audit".into())
            .spawn(move || {
                for (line, done) in jobs {
                    let r = file.write_all(&line).and_then(|()| file.sync_data());
                    let _ = done.send(r);
                }
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            queue,
        })
    }

    /// Appends one record and waits until it is fsynced (at most [`WRITE_DEADLINE`]).
    pub async fn append(&self, r: Record) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.queue.try_send((line, done)).map_err(|e| match e {
            TrySendError::Full(_) => {
                std::io::Error::other("the audit writer is behind (queue full)")
            }
            TrySendError::Disconnected(_) => std::io::Error::other("the audit writer stopped"),
        })?;
        match tokio::time::timeout(WRITE_DEADLINE, outcome).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(std::io::Error::other("the audit writer stopped")),
            Err(_) => Err(std::io::Error::other(format!(
                "the record was not on disk within {WRITE_DEADLINE:?}"
            ))),
        }
    }

    /// The file's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the line format: the fields in this order, the time as RFC 3339 text, the
    /// status and the outcome as their bare names (what the log held when they were
    /// strings).
    #[test]
    fn a_record_is_one_json_line_in_the_fixed_field_order() {
        let r = Record {
            ts: "2026-12-02T03:50:00.123456789Z".parse().unwrap(),
            who: "alertmanager@127.0.0.1:5000".into(),
            action: AuditAction::Cordon,
            node: "n1".into(),
            alertname: "HcclwatchQuarantineRecommended".into(),
            reason: "straggler".into(),
            fingerprint: "aa".into(),
            status: Status::Firing,
            dry_run: true,
            result: Outcome::WouldApply,
            detail: "spec.unschedulable=true".into(),
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"ts":"2026-12-02T03:50:00.123456789Z","who":"alertmanager@127.0.0.1:5000","action":"cordon","node":"n1","alertname":"HcclwatchQuarantineRecommended","reason":"straggler","fingerprint":"aa","status":"firing","dry_run":true,"result":"would_apply","detail":"spec.unschedulable=true"}"#
        );
    }

    /// Every action is written by its old string, in the log and wherever `as_str` is
    /// used (the metric label): each name spelled out here, as the string-typed engine
    /// wrote it.
    #[test]
    fn actions_keep_their_names_on_the_wire() {
        for (a, name) in [
            (AuditAction::Cordon, "cordon"),
            (AuditAction::Taint, "taint"),
            (AuditAction::Condition, "condition"),
            (AuditAction::Event, "event"),
            (AuditAction::Exec, "exec"),
            (AuditAction::Webhook, "webhook"),
            (AuditAction::Quarantine, "quarantine"),
            (AuditAction::Release, "release"),
        ] {
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{name}\""));
            assert_eq!(a.as_str(), name);
        }
        for &a in Action::ALL {
            assert_eq!(AuditAction::from(a).as_str(), a.as_str());
        }
    }
}
