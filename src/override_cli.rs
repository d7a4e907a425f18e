//! `hcclwatch override`: a person's override of the verdicts on a node or one NPU, and the
//! release of an escalated node, written through the Kubernetes API with the receiver's
//! audit trail (see `hcclwatch::remediate::operator` and docs/overrides.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use hcclwatch::remediate::operator::{self, Options, Request};
use hcclwatch::snapshot::overrides::Held;

/// Flags of `hcclwatch override`.
#[derive(Debug, Clone, Args)]
pub struct OverrideArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: OverrideAction,
    /// A kubeconfig file (default: in-cluster, or `KUBECONFIG`, or ~/.kube/config).
    #[arg(long, value_name = "PATH", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The JSON-lines audit log to append to (the receiver's format); the record is synced
    /// before the node is changed, and nothing is changed without it.
    #[arg(long = "audit-log", value_name = "PATH", global = true)]
    pub audit_log: Option<PathBuf>,
    /// Who asks (default: $USER).
    #[arg(long, value_name = "NAME", global = true)]
    pub by: Option<String>,
    /// The namespace of the Event written about the node.
    #[arg(
        long = "event-namespace",
        value_name = "NS",
        default_value = "default",
        global = true
    )]
    pub event_namespace: String,
    /// Bound of each Kubernetes API call.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration, global = true)]
    pub timeout: std::time::Duration,
}

/// The override subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum OverrideAction {
    /// Hold NODE (or one of its NPUs) healthy or quarantined until a time.
    Set {
        /// The Kubernetes node.
        node: String,
        /// `healthy` or `quarantined`.
        #[arg(long, value_parser = held)]
        state: Held,
        /// When it ends: a duration from now (`4h`) or an RFC 3339 time.
        #[arg(long, value_name = "DURATION|TIME")]
        until: String,
        /// Only this NPU (its index, as `npu` in the metrics).
        #[arg(long, value_name = "N")]
        npu: Option<u32>,
        /// Why (recorded on the node, in the audit log and in the Event).
        #[arg(long)]
        reason: String,
    },
    /// End NODE's (or one NPU's) override now.
    Clear {
        /// The Kubernetes node.
        node: String,
        /// Only this NPU's.
        #[arg(long, value_name = "N")]
        npu: Option<u32>,
    },
    /// Release an escalated NODE: the receiver then undoes its quarantine.
    Release {
        /// The Kubernetes node.
        node: String,
        /// Why (recorded in the audit log and the Event).
        #[arg(long)]
        reason: String,
    },
}

fn held(s: &str) -> Result<Held, String> {
    Held::parse(s).ok_or_else(|| format!("{s:?} is not healthy or quarantined"))
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    hcclwatch::config::duration::parse(s).map_err(|e| e.to_string())
}

/// Runs `hcclwatch override`.
pub fn main(a: &OverrideArgs) -> ExitCode {
    let (node, req) = match &a.action {
        OverrideAction::Set {
            node,
            state,
            until,
            npu,
            reason,
        } => match operator::parse_until(until, SystemTime::now()) {
            Ok(until) => (
                node,
                Request::Set {
                    npu: *npu,
                    state: *state,
                    until,
                    reason: reason.clone(),
                },
            ),
            Err(e) => {
                eprintln!("hcclwatch override: --until: {e}");
                return ExitCode::from(2);
            }
        },
        OverrideAction::Clear { node, npu } => (node, Request::Clear { npu: *npu }),
        OverrideAction::Release { node, reason } => (
            node,
            Request::Release {
                reason: reason.clone(),
            },
        ),
    };
    let Some(audit_log) = a.audit_log.clone() else {
        eprintln!(
            "hcclwatch override: --audit-log is required: nothing is changed without a record"
        );
        return ExitCode::from(2);
    };
    let opts = Options {
        kubeconfig: a.kubeconfig.clone(),
        audit_log,
        event_namespace: a.event_namespace.clone(),
        timeout: a.timeout,
        by: a
            .by
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".into()),
    };
    match operator::run(node, &req, &opts) {
        Ok(done) => {
            println!("{node}: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hcclwatch override: {node}: {e}");
            ExitCode::FAILURE
        }
    }
}
