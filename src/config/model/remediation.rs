//! `[remediation]` and `[remediation.push]`: the daemon's side of remediation, a fast path
//! that pushes this node's hard faults straight to the `hcclwatch remediate` receiver
//! (Alertmanager stays the path for everything else, and the backstop).

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};

section! {
    /// `[remediation]`: what the daemon itself does towards remediation.
    pub struct RemediationConfig in "remediation" {
        /// Pushing hard faults to the remediation receiver.
        push: PushConfig = PushConfig::default(), Spec::TABLE;
    }
}

section! {
    /// `[remediation.push]`: post this node's hard faults (an NPU lost, health critical
    /// for `health.hard_consecutive_reads` reads, a fault code at SeparateNPU or worse, or
    /// the probe group's hard-fault verdict about this node) to the receiver's `/v1/push`
    /// the moment they are read, and their end after `resolve_after`.
    pub struct PushConfig in "remediation.push" {
        /// Push at all.
        enabled: bool = false, Spec::BOOL;
        /// The receiver's base URL, `https://host:port` (its `/v1/push` is posted to);
        /// `http://` only for a receiver on loopback or behind a TLS proxy.
        url: String = String::new(), Spec::STR;
        /// File holding the bearer token (the receiver's `auth.bearer_token_file` token).
        bearer_token_file: Option<PathBuf> = None, Spec::PATH;
        /// PEM file of the CA that signed the receiver's certificate (the only one
        /// trusted); required for `https`.
        ca_file: Option<PathBuf> = None, Spec::PATH;
        /// This node's Kubernetes name; empty: the `NODE_NAME` environment variable, else
        /// the host name.
        node_name: String = String::new(), Spec::STR;
        /// Bound on one request (connect, TLS, answer).
        #[serde(with = "duration::serde_str")]
        timeout: Duration = secs(5), Spec::duration(ms(100), ms(60_000));
        /// How long the node's chips must show no hard fault (and the probe group no
        /// hard-fault verdict about it) before the push resolves: the engine's hold-down
        /// (`health.hard_hold_down` rounds of `probe.interval`) by default.
        #[serde(with = "duration::serde_str")]
        resolve_after: Duration = secs(300), Spec::duration(ms(0), ms(86_400_000));
    }
}
