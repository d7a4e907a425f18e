//! The fast path for hard faults: this node's hard fault, pushed straight to the
//! remediation receiver (`hcclwatch remediate`, `/v1/push`) the moment it is read.
//!
//! Through Prometheus and Alertmanager a hard fault waits for the next probe round, a
//! scrape, a rule evaluation and Alertmanager's group wait: tens of seconds. A lost NPU,
//! critical health or a fault code that isolates the chip needs no group to be judged, so
//! the daemon judges its own chips from each telemetry read (a DCMI fault event makes the
//! poller re-read at once) and posts the verdict itself. The receiver runs it through the
//! same rules, guards, audit and idempotence as an Alertmanager notification; Alertmanager
//! stays the path for everything else and the backstop for this one.
//!
//! One verdict per node: its fingerprint is derived from the node name, so a retry, a
//! repeat after a restart and the resolution all name the same quarantine. The push
//! resolves once the chips (and the probe group's verdict about this node) have been free
//! of hard faults for `resolve_after`. After a start the daemon does not know what it
//! pushed before, so it assumes a verdict may be open and resolves it after the same
//! wait (the receiver records `not_ours` when there was none). Each request is bounded by
//! `timeout` and retried with backoff until the receiver accepts it or a newer verdict
//! replaces it.

mod client;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use self::client::{Client, ClientSetupError};
use self::wire::{Push, PushStatus as Wire, VERSION};
use crate::config::Config;
use crate::snapshot::Store;
use crate::snapshot::npu::{ChipReadings, FaultLevel, NpuSnapshot};
use crate::snapshot::probe::{ProbeSnapshot, QuarantineReason};
use crate::snapshot::status::PushStatus;

/// How often the store is looked at: well under a health read interval.
const TICK: Duration = Duration::from_millis(100);
/// First retry delay; doubled per failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// Longest retry delay.
const MAX_BACKOFF: Duration = Duration::from_secs(15);
/// Largest CA file read.
const CA_LIMIT: u64 = 1 << 20;

/// Why pushing cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PushSetupError {
    /// The bearer token file.
    #[error("remediation.push.bearer_token_file: {0}")]
    Token(#[source] crate::config::file::SecretError),
    /// No token file configured.
    #[error("remediation.push.enabled needs remediation.push.bearer_token_file")]
    NoToken,
    /// The CA file could not be read.
    #[error("remediation.push.ca_file {path}: {source}")]
    CaRead {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] ClientSetupError),
}

/// What pushing needs, resolved from the configuration.
pub struct Settings {
    client: Client,
    node: String,
    critical_reads: u32,
    resolve_after: Duration,
    /// `health.hard_npu_scoped`: a chip's own fault is pushed as that NPU's.
    npu_scoped: bool,
}

impl Settings {
    /// The settings when `remediation.push.enabled`, else `None`.
    pub fn from_config(cfg: &Config) -> Result<Option<Self>, PushSetupError> {
        let p = &cfg.remediation.push;
        if !p.enabled {
            return Ok(None);
        }
        let path = p
            .bearer_token_file
            .as_deref()
            .ok_or(PushSetupError::NoToken)?;
        let token = crate::config::file::read_secret(path, crate::config::file::SECRET_LIMIT, 1)
            .map_err(PushSetupError::Token)?;
        let token = String::from_utf8_lossy(&token.bytes).into_owned();
        let ca = match &p.ca_file {
            Some(path) => {
                use std::io::Read as _;
                let mut pem = Vec::new();
                std::fs::File::open(path)
                    .and_then(|f| f.take(CA_LIMIT).read_to_end(&mut pem))
                    .map_err(|source| PushSetupError::CaRead {
                        path: path.display().to_string(),
                        source,
                    })?;
                Some((path.display().to_string(), pem))
            }
            None => None,
        };
        let client = Client::new(
            &p.url,
            ca.as_ref().map(|(p, pem)| (p.as_str(), pem.as_slice())),
            token,
            p.timeout,
        )?;
        Ok(Some(Self {
            client,
            node: node_name(&p.node_name),
            critical_reads: cfg.health.hard_consecutive_reads,
            resolve_after: p.resolve_after,
            npu_scoped: cfg.health.hard_npu_scoped,
        }))
    }

    /// The node pushed about.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Where pushes go.
    pub fn target(&self) -> String {
        self.client.uri().to_string()
    }
}

/// `node_name`, else `NODE_NAME`, else the host name.
fn node_name(configured: &str) -> String {
    if !configured.is_empty() {
        return configured.to_string();
    }
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_default()
}

/// The fingerprint of `node`'s hard-fault verdict: 16 hex digits of a hash of its name.
pub fn fingerprint(node: &str) -> String {
    let h = blake3::hash(format!("hcclwatch-push\0{node}").as_bytes());
    h.to_hex()[..16].to_string()
}

/// The fingerprint of the verdict about NPU `npu` of `node` (`health.hard_npu_scoped`).
pub fn npu_fingerprint(node: &str, npu: u32) -> String {
    let h = blake3::hash(format!("hcclwatch-push\0{node}\0npu{npu}").as_bytes());
    h.to_hex()[..16].to_string()
}

/// The reason of a node verdict.
const NODE_REASON: &str = "hard_fault";

/// The hard fault one chip shows: the isolation reason when it is the chip's own (None for
/// a lost card, which is the node's), and the words.
fn chip_fault(
    id: u32,
    c: &ChipReadings,
    critical_reads: u32,
) -> Option<(Option<&'static str>, String)> {
    if c.dropped {
        return Some((None, format!("NPU {id} lost (card dropped)")));
    }
    if c.health == Some(3) && c.critical_reads >= critical_reads {
        return Some((
            Some(wire::NPU_REASONS[0]),
            format!("NPU {id} health critical for {} reads", c.critical_reads),
        ));
    }
    c.faults.iter().flatten().find_map(|f| {
        (f.state.in_effect()
            && matches!(
                f.level,
                FaultLevel::SeparateNPU | FaultLevel::ManuallySeparateNPU
            ))
        .then(|| {
            (
                Some(wire::NPU_REASONS[1]),
                format!(
                    "NPU {id} fault code {:#010X} at level {}",
                    f.code,
                    f.level.as_str()
                ),
            )
        })
    })
}

/// This node's hard-fault verdicts now, keyed by whom they are about: `None` the node
/// (the first chip's fault, else the probe group's hard-fault verdict about `node`), and
/// with `npu_scoped` `Some(id)` for each chip whose fault is its own (a lost card stays
/// the node's). Each with its reason and its words. A chip an operator holds healthy
/// (`held_healthy`) makes none, as in the probe's hard faults.
pub fn verdicts(
    npu: &NpuSnapshot,
    probe: Option<&ProbeSnapshot>,
    node: &str,
    critical_reads: u32,
    npu_scoped: bool,
    held_healthy: &dyn Fn(u32) -> bool,
) -> BTreeMap<Option<u32>, (&'static str, String)> {
    let mut out = BTreeMap::new();
    for (id, c) in npu.state.chips.iter().filter(|(id, _)| !held_healthy(**id)) {
        let Some((own, why)) = chip_fault(*id, c, critical_reads) else {
            continue;
        };
        match (npu_scoped, own) {
            (true, Some(reason)) => {
                out.insert(Some(*id), (reason, why));
            }
            _ => {
                out.entry(None).or_insert((NODE_REASON, why));
            }
        }
    }
    let group = probe.is_some_and(|p| {
        p.members
            .iter()
            .any(|m| m.name == node && m.quarantine == Some(QuarantineReason::HardFault))
    });
    if group {
        out.entry(None).or_insert((
            NODE_REASON,
            "the probe group's hard-fault verdict".to_string(),
        ));
    }
    out
}

/// This node's hard fault now, in words: the first chip's that shows one, else the probe
/// group's hard-fault verdict about `node` (the node verdict of [`verdicts`] without
/// NPU scoping).
pub fn judge(
    npu: &NpuSnapshot,
    probe: Option<&ProbeSnapshot>,
    node: &str,
    critical_reads: u32,
) -> Option<String> {
    verdicts(npu, probe, node, critical_reads, false, &|_| false)
        .remove(&None)
        .map(|(_, why)| why)
}

/// The verdict as pushed: open (with its onset) or not, and since when it has been clear.
#[derive(Debug)]
struct Verdict {
    /// `Some` while a verdict may be open: its onset (None: assumed open since the start).
    open: Option<Option<Timestamp>>,
    clear_since: Option<Instant>,
    /// The reason it was last pushed with (its resolution says the same).
    reason: Option<&'static str>,
}

impl Verdict {
    /// After a start: a verdict may be open from before it.
    fn new() -> Self {
        Self {
            open: Some(None),
            clear_since: None,
            reason: None,
        }
    }

    /// Known not open (an NPU first seen faulty after the start).
    fn idle() -> Self {
        Self {
            open: None,
            clear_since: None,
            reason: None,
        }
    }

    /// Whether it is pushed as firing now.
    fn is_open_now(&self) -> bool {
        matches!(self.open, Some(Some(_)))
    }

    /// The push the reading calls for, if any: (status, onset, summary).
    fn step(
        &mut self,
        fault: Option<String>,
        now: Instant,
        wall: Timestamp,
        resolve_after: Duration,
    ) -> Option<(Wire, Timestamp, String)> {
        match (fault, self.open) {
            (Some(_), Some(Some(_))) => {
                self.clear_since = None;
                None
            }
            (Some(why), _) => {
                self.open = Some(Some(wall));
                self.clear_since = None;
                Some((Wire::Firing, wall, why))
            }
            (None, Some(onset)) => {
                let since = *self.clear_since.get_or_insert(now);
                if now.saturating_duration_since(since) < resolve_after {
                    return None;
                }
                self.open = None;
                self.clear_since = None;
                let why = match onset {
                    Some(_) => format!("no hard fault for {resolve_after:?}"),
                    None => format!(
                        "no hard fault for {resolve_after:?} after a start (releases a quarantine pushed before it)"
                    ),
                };
                Some((Wire::Resolved, onset.unwrap_or(wall), why))
            }
            (None, None) => None,
        }
    }
}

/// Pushes until the runtime stops: one verdict for the node, and with
/// `health.hard_npu_scoped` one per NPU, each with its own fingerprint, pushed as it opens
/// and resolved after `resolve_after` clear. After a start every one may be open from
/// before it (the node's, and each NPU's seen at the first read).
pub async fn run(s: Settings, store: Arc<Store>) {
    let mut open: BTreeMap<Option<u32>, Verdict> = BTreeMap::from([(None, Verdict::new())]);
    let mut first_read = true;
    let mut pending: BTreeMap<Option<u32>, Push> = BTreeMap::new();
    let mut backoff = MIN_BACKOFF;
    let mut next_try = Instant::now();
    let mut status = PushStatus::default();
    store.publish_push(status.clone());
    loop {
        let npu_read = !store.not_ready().iter().any(|(c, _)| *c == "npu");
        if npu_read {
            let npu = store.npu();
            let held = store.overrides();
            let wall = std::time::SystemTime::now();
            let held_healthy = |id: u32| {
                held.as_ref()
                    .and_then(|h| h.active.npu_at(id, wall))
                    .is_some_and(|o| o.state == crate::snapshot::overrides::Held::Healthy)
            };
            let mut now_faults = verdicts(
                &npu,
                store.probe().as_deref(),
                &s.node,
                s.critical_reads,
                s.npu_scoped,
                &held_healthy,
            );
            if std::mem::take(&mut first_read) && s.npu_scoped {
                for id in npu.state.chips.keys() {
                    open.entry(Some(*id)).or_insert_with(Verdict::new);
                }
            }
            for key in now_faults.keys() {
                open.entry(*key).or_insert_with(Verdict::idle);
            }
            let now = Instant::now();
            let mut changed = false;
            for (key, verdict) in open.iter_mut() {
                let fault = now_faults.remove(key);
                let reason = fault.as_ref().map(|(r, _)| *r);
                let Some((st, onset, summary)) = verdict.step(
                    fault.map(|(_, w)| w),
                    now,
                    Timestamp::now(),
                    s.resolve_after,
                ) else {
                    continue;
                };
                tracing::warn!(node = %s.node, npu = ?key, status = st.as_str(), %onset, summary = %summary, "hard-fault push");
                let reason = reason.or(verdict.reason).unwrap_or(NODE_REASON);
                verdict.reason = Some(reason);
                pending.insert(
                    *key,
                    Push {
                        version: VERSION.into(),
                        node: s.node.clone(),
                        status: st,
                        reason: reason.into(),
                        onset: onset.to_string(),
                        fingerprint: match key {
                            None => fingerprint(&s.node),
                            Some(id) => npu_fingerprint(&s.node, *id),
                        },
                        summary,
                        npu: *key,
                    },
                );
                changed = true;
            }
            if changed {
                backoff = MIN_BACKOFF;
                next_try = now;
                status.firing = open.values().any(Verdict::is_open_now);
                store.publish_push(status.clone());
            }
        }
        if Instant::now() >= next_try && !pending.is_empty() {
            if flush(&s.client, &mut pending, &mut status).await {
                next_try = Instant::now() + backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            store.publish_push(status.clone());
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Sends every pending push once, counting each result; the ones to retry stay pending.
/// True when any must be retried.
async fn flush(
    client: &Client,
    pending: &mut BTreeMap<Option<u32>, Push>,
    status: &mut PushStatus,
) -> bool {
    let mut retry = false;
    for (key, p) in std::mem::take(pending) {
        let result = send(client, &p).await;
        *status
            .requests
            .entry((p.status.as_str(), result))
            .or_default() += 1;
        match result {
            "retry" => {
                retry = true;
                pending.insert(key, p);
            }
            "ok" => status.last_success = Some(Timestamp::now().as_millisecond() as f64 / 1e3),
            _ => {}
        }
    }
    retry
}

/// One attempt: `ok`, `retry` (no answer, or 5xx/429: the receiver asks for it), or
/// `rejected` (another 4xx: the push or its credentials are wrong; logged as an error).
async fn send(client: &Client, p: &Push) -> &'static str {
    let body = match serde_json::to_vec(p) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "cannot encode the push");
            return "rejected";
        }
    };
    match client.post(body).await {
        Ok(a) if a.status.is_success() => {
            tracing::info!(status = p.status.as_str(), answer = %a.text, "hard-fault push accepted");
            "ok"
        }
        Ok(a) if a.status.is_server_error() || a.status.as_u16() == 429 => {
            tracing::warn!(status = p.status.as_str(), code = a.status.as_u16(), answer = %a.text, "hard-fault push answered with a retry; retrying");
            "retry"
        }
        Ok(a) => {
            tracing::error!(status = p.status.as_str(), code = a.status.as_u16(), answer = %a.text, "hard-fault push rejected; check remediation.push (token, node name) against the receiver; Alertmanager remains the path");
            "rejected"
        }
        Err(e) => {
            tracing::warn!(status = p.status.as_str(), error = %e, "hard-fault push failed; retrying");
            "retry"
        }
    }
}

#[cfg(test)]
mod tests;
