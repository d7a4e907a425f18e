//! The append-only audit log: one JSON object per line, fsynced before the request is
//! answered, so every decision (including the refusals and the dry-run "would"s) is on
//! disk before Alertmanager hears back.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// One decision about one action on one node.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// RFC 3339 time of the decision.
    pub ts: String,
    /// Who asked: the authenticated caller and its address.
    pub who: String,
    /// What: the action (`cordon`, `taint`, …, or `release`).
    pub action: String,
    /// The node.
    pub node: String,
    /// Why: the alert name and its reason label.
    pub alertname: String,
    /// The alert's `reason` label, if any.
    pub reason: String,
    /// Alertmanager's fingerprint of the alert.
    pub fingerprint: String,
    /// `firing` or `resolved`.
    pub status: String,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The outcome (`applied`, `would_apply`, `already_done`, `breaker_open`, `failed`, …).
    pub result: String,
    /// Details: an error, a refusal's reason, a hook's output.
    pub detail: String,
}

/// The audit file.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends one record and fsyncs it.
    pub fn append(&self, r: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(&line)?;
        f.sync_data()
    }

    /// The file's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }
}
