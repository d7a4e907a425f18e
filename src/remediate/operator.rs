//! `hcclwatch override`: a person sets or clears an operator override on a node (or one
//! of its NPUs), or releases an escalated node, through the Kubernetes API.
//!
//! It leaves the same trail as the receiver: a record in the JSON-lines audit log, written
//! and synced before the node is changed (`intent`), then the change as one conditional
//! update guarded by the node's `resourceVersion` (re-read and retried on a conflict), the
//! outcome recorded, and an Event on the node. The command only writes annotations; the
//! daemon and the receiver read them and act (the receiver undoes an escalated or
//! overridden quarantine at its next reconcile), so there is one actor on the node's
//! scheduling, and one record of who asked for what.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use super::audit::{AuditAction, AuditLog, Record};
use super::kube::{ApiError, ConnectError, Kube};
use super::lifecycle as life;
use super::outcome::Outcome;
use super::payload::Status;
use crate::snapshot::overrides::{self as ov, Held, NpuValue};

/// Conflicting writers tolerated before giving up.
const ATTEMPTS: usize = 5;

/// What the person asks for.
#[derive(Debug, Clone)]
pub enum Request {
    /// Hold the node (or one NPU) in `state` until `until`.
    Set {
        /// The NPU, or the whole node.
        npu: Option<u32>,
        /// Healthy or quarantined.
        state: Held,
        /// When it ends.
        until: SystemTime,
        /// Why.
        reason: String,
    },
    /// End the node's (or one NPU's) override now.
    Clear {
        /// The NPU, or the whole node.
        npu: Option<u32>,
    },
    /// Release an escalated node: the escalation and its incidents are removed, and the
    /// receiver undoes its quarantine.
    Release {
        /// Why.
        reason: String,
    },
}

/// How to reach the API and where to audit.
#[derive(Debug, Clone)]
pub struct Options {
    /// A kubeconfig file (none: in-cluster or `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// The audit log (the receiver's format).
    pub audit_log: PathBuf,
    /// The namespace of the Event.
    pub event_namespace: String,
    /// Bound of each API call.
    pub timeout: Duration,
    /// Who asks (recorded as `override-by` and in the audit log).
    pub by: String,
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The audit log cannot be opened: nothing is changed without it.
    #[error("opening the audit log {}: {source}; nothing is changed without a record", path.display())]
    Audit {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The audit record cannot be written: nothing was changed.
    #[error("writing the audit log: {0}; nothing was changed")]
    AuditWrite(std::io::Error),
    /// The runtime could not start.
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// No API client.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// An API call failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The node is not escalated: nothing to release.
    #[error(
        "node {0} is not escalated; nothing to release (to end an override: hcclwatch override clear)"
    )]
    NotEscalated(String),
    /// The end time is already past.
    #[error("--until is in the past; an override needs an end in the future")]
    Past,
}

/// Parses `--until`: a duration from now (`2h`, `30m`) or an RFC 3339 time.
pub fn parse_until(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Some(t) = ov::parse_time(s) {
        return Ok(t);
    }
    crate::config::duration::parse(s)
        .map(|d| now + d)
        .map_err(|e| format!("{s:?} is neither an RFC 3339 time nor a duration ({e})"))
}

/// Sets the annotations `req` asks for on `annotations`; the audit detail.
fn change(
    req: &Request,
    a: &mut BTreeMap<String, String>,
    node: &str,
    by: &str,
) -> Result<String, OperatorError> {
    match req {
        Request::Set {
            npu: None,
            state,
            until,
            reason,
        } => {
            a.insert(ov::OVERRIDE.into(), state.as_str().into());
            a.insert(ov::OVERRIDE_UNTIL.into(), ov::time_text(*until));
            a.insert(ov::OVERRIDE_REASON.into(), reason.clone());
            a.insert(ov::OVERRIDE_BY.into(), by.into());
            Ok(format!(
                "set {}={} until {}",
                ov::OVERRIDE,
                state.as_str(),
                ov::time_text(*until)
            ))
        }
        Request::Set {
            npu: Some(i),
            state,
            until,
            reason,
        } => {
            let v = NpuValue {
                state: *state,
                until: ov::time_text(*until),
                reason: reason.clone(),
                by: by.into(),
            };
            let key = format!("{}{i}", ov::NPU_PREFIX);
            let text = serde_json::to_string(&v).unwrap_or_default();
            a.insert(key.clone(), text.clone());
            Ok(format!("set {key}={text}"))
        }
        Request::Clear { npu: None } => {
            for k in [
                ov::OVERRIDE,
                ov::OVERRIDE_UNTIL,
                ov::OVERRIDE_REASON,
                ov::OVERRIDE_BY,
            ] {
                a.remove(k);
            }
            Ok(format!("cleared {}", ov::OVERRIDE))
        }
        Request::Clear { npu: Some(i) } => {
            let key = format!("{}{i}", ov::NPU_PREFIX);
            a.remove(&key);
            Ok(format!("cleared {key}"))
        }
        Request::Release { .. } => {
            let why = a.remove(life::ESCALATED_REASON).unwrap_or_default();
            if a.remove(life::ESCALATED_AT).is_none() {
                return Err(OperatorError::NotEscalated(node.into()));
            }
            a.remove(life::INCIDENTS);
            Ok(format!(
                "released the escalation ({why}); the receiver undoes its quarantine at its next reconcile"
            ))
        }
    }
}

impl Request {
    fn reason(&self) -> &str {
        match self {
            Request::Set { reason, .. } | Request::Release { reason } => reason,
            Request::Clear { .. } => "",
        }
    }

    fn action(&self) -> AuditAction {
        match self {
            Request::Release { .. } => AuditAction::Release,
            _ => AuditAction::Override,
        }
    }

    fn event_reason(&self) -> &'static str {
        match self {
            Request::Set { .. } => "HcclwatchOverrideSet",
            Request::Clear { .. } => "HcclwatchOverrideCleared",
            Request::Release { .. } => "HcclwatchEscalationReleased",
        }
    }
}

/// Runs the request against `node`; the text says what was done.
pub fn run(node: &str, req: &Request, opts: &Options) -> Result<String, OperatorError> {
    if let Request::Set { until, .. } = req
        && *until <= SystemTime::now()
    {
        return Err(OperatorError::Past);
    }
    let audit = AuditLog::open(&opts.audit_log).map_err(|source| OperatorError::Audit {
        path: opts.audit_log.clone(),
        source,
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OperatorError::Runtime)?;
    rt.block_on(apply(node, req, opts, &audit))
}

async fn apply(
    node: &str,
    req: &Request,
    opts: &Options,
    audit: &AuditLog,
) -> Result<String, OperatorError> {
    let kube = Kube::connect(
        opts.kubeconfig.as_deref(),
        &opts.event_namespace,
        opts.timeout,
    )
    .await?;
    let who = format!("cli:{}", opts.by);
    let record = |result: Outcome, detail: String| Record {
        ts: Timestamp::now(),
        who: who.clone(),
        action: req.action(),
        node: node.to_string(),
        alertname: String::new(),
        reason: req.reason().to_string(),
        fingerprint: String::new(),
        status: if matches!(req, Request::Set { .. }) {
            Status::Firing
        } else {
            Status::Resolved
        },
        dry_run: false,
        result,
        detail,
    };
    let mut last = None;
    for attempt in 0..ATTEMPTS {
        let mut n: Node = kube.get(node).await?;
        let a = n.metadata.annotations.get_or_insert_default();
        let detail = change(req, a, node, &opts.by)?;
        if attempt == 0 {
            audit
                .append(record(Outcome::Intent, detail.clone()))
                .await
                .map_err(OperatorError::AuditWrite)?;
        }
        match kube.replace(&n).await {
            Ok(done) => {
                audit
                    .append(record(Outcome::Applied, detail.clone()))
                    .await
                    .map_err(OperatorError::AuditWrite)?;
                let message = format!("{detail} (by {}: {})", opts.by, req.reason());
                if let Err(e) = kube
                    .event(&done, "Normal", req.event_reason(), &message)
                    .await
                {
                    tracing::warn!(error = %e, "the event could not be written");
                }
                return Ok(detail);
            }
            Err(e @ ApiError::Conflict(_)) => last = Some(e),
            Err(e) => {
                let _ = audit.append(record(Outcome::Failed, e.to_string())).await;
                return Err(e.into());
            }
        }
    }
    let e = last.unwrap_or_else(|| ApiError::Conflict(format!("node {node} kept changing")));
    let _ = audit.append(record(Outcome::Failed, e.to_string())).await;
    Err(e.into())
}
