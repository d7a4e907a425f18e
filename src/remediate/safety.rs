//! The safety rails between an alert and a node: label selectors, the fleet-wide circuit
//! breaker and the global rate limit. (Cooldowns live on the node as annotations, see
//! `state`, so they survive a restart.)
//!
//! The breaker exists because the failure that quarantines half a fleet is never half the
//! fleet failing: it is the monitor, the fabric or a bad rule. When more than N nodes, or P %
//! of the fleet, would be quarantined within the window, the receiver stops acting, says so
//! loudly and exports it, and starts again only once the window has slid past.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Why a selector string is not a valid selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// Two commas in a row, or a trailing comma.
    #[error("{selector:?} has an empty requirement")]
    EmptyRequirement {
        /// The whole selector.
        selector: String,
    },
    /// `a=b=c`.
    #[error("{requirement:?} has more than one '='")]
    SeveralEquals {
        /// The requirement.
        requirement: String,
    },
    /// The key is not a Kubernetes label key.
    #[error("{key:?} in {requirement:?} is not a valid label key")]
    BadKey {
        /// The key.
        key: String,
        /// The requirement it is in.
        requirement: String,
    },
}

/// The circuit breaker refused a quarantine: too many in the window.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "circuit breaker open: {recent} node(s) quarantined in the last {window:?} and the limit is {limit} (breaker.max_nodes {max_nodes}, breaker.max_percent {max_percent} of {fleet} nodes); not quarantining {node}"
)]
pub struct BreakerOpen {
    /// Quarantines in the window.
    pub recent: usize,
    /// The window.
    pub window: Duration,
    /// Quarantines allowed in the window for this fleet.
    pub limit: usize,
    /// `breaker.max_nodes`.
    pub max_nodes: usize,
    /// `breaker.max_percent`.
    pub max_percent: f64,
    /// Nodes in the fleet.
    pub fleet: usize,
    /// The node that was not quarantined.
    pub node: String,
}

/// The global rate limit refused a quarantine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate limit: {recent} quarantines in the last minute (limits.max_actions_per_minute)")]
pub struct RateLimited {
    /// Quarantines in the last 60 s.
    pub recent: usize,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    Absent(String),
}

/// A Kubernetes-style equality label selector: `a=b,c!=d,e,!f` (all must hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Vec<Req>);

impl Selector {
    /// Parses a selector; the error says which requirement is wrong.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(SelectorError::EmptyRequirement { selector: s.into() });
            }
            let key_ok = |k: &str| super::payload::valid_qualified_name(k);
            let req = if let Some((k, v)) = part.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                if v.contains('=') {
                    return Err(SelectorError::SeveralEquals {
                        requirement: part.into(),
                    });
                }
                Req::Eq(k.trim().trim_end_matches('=').into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Req::Absent(k.trim().into())
            } else {
                Req::Exists(part.into())
            };
            let (Req::Eq(k, _) | Req::Ne(k, _) | Req::Exists(k) | Req::Absent(k)) = &req;
            if !key_ok(k) {
                return Err(SelectorError::BadKey {
                    key: k.clone(),
                    requirement: part.into(),
                });
            }
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::Ne(k, v) => labels.get(k) != Some(v),
            Req::Exists(k) => labels.contains_key(k),
            Req::Absent(k) => !labels.contains_key(k),
        })
    }
}

/// Allow and deny selectors together.
#[derive(Debug, Clone, Default)]
pub struct NodeFilter {
    allow: Vec<Selector>,
    deny: Vec<Selector>,
}

impl NodeFilter {
    /// From validated selector strings.
    pub fn new(allow: &[String], deny: &[String]) -> Result<Self, SelectorError> {
        Ok(Self {
            allow: allow
                .iter()
                .map(|s| Selector::parse(s))
                .collect::<Result<_, _>>()?,
            deny: deny
                .iter()
                .map(|s| Selector::parse(s))
                .collect::<Result<_, _>>()?,
        })
    }

    /// `None` if the node may be acted on, else why not.
    pub fn refuse(&self, labels: &BTreeMap<String, String>) -> Option<&'static str> {
        if self.deny.iter().any(|s| s.matches(labels)) {
            Some("the node matches a deny selector")
        } else if !self.allow.is_empty() && !self.allow.iter().any(|s| s.matches(labels)) {
            Some("the node matches no allow selector")
        } else {
            None
        }
    }
}

/// The fleet-wide circuit breaker over a sliding window of quarantines.
#[derive(Debug, Clone)]
pub struct Breaker {
    max_nodes: usize,
    max_percent: f64,
    window: Duration,
    recent: Vec<(String, SystemTime)>,
    open: bool,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(max_nodes: usize, max_percent: f64, window: Duration) -> Self {
        Self {
            max_nodes,
            max_percent,
            window,
            recent: Vec::new(),
            open: false,
        }
    }

    /// Quarantines allowed in the window for a fleet of `fleet` nodes: the smaller of the
    /// two limits, and at least one (a percentage of a small fleet rounds to zero).
    pub fn limit(&self, fleet: usize) -> usize {
        let by_percent = (self.max_percent / 100.0 * fleet as f64).floor() as usize;
        self.max_nodes.min(by_percent.max(1))
    }

    /// Replaces the window with quarantines known from the nodes (after a restart).
    pub fn rebuild(&mut self, recent: Vec<(String, SystemTime)>, now: SystemTime) {
        self.recent = recent;
        self.prune(now);
    }

    fn prune(&mut self, now: SystemTime) {
        let w = self.window;
        self.recent
            .retain(|(_, t)| now.duration_since(*t).map_or(true, |age| age < w));
    }

    /// Re-evaluates the window; returns true when the breaker closes again.
    pub fn refresh(&mut self, fleet: usize, now: SystemTime) -> bool {
        self.prune(now);
        if self.open && self.recent.len() < self.limit(fleet) {
            self.open = false;
            return true;
        }
        false
    }

    /// Admits one more quarantine of `node`, or trips and says why.
    pub fn admit(&mut self, node: &str, fleet: usize, now: SystemTime) -> Result<(), BreakerOpen> {
        self.refresh(fleet, now);
        let limit = self.limit(fleet);
        if self.open || self.recent.len() + 1 > limit {
            self.open = true;
            return Err(BreakerOpen {
                recent: self.recent.len(),
                window: self.window,
                limit,
                max_nodes: self.max_nodes,
                max_percent: self.max_percent,
                fleet,
                node: node.into(),
            });
        }
        self.recent.push((node.to_string(), now));
        Ok(())
    }

    /// Forgets a quarantine that did not happen after all (the API call failed).
    pub fn forget(&mut self, node: &str) {
        if let Some(i) = self.recent.iter().rposition(|(n, _)| n == node) {
            self.recent.remove(i);
        }
    }

    /// Whether the breaker is open.
    pub fn is_open(&self) -> bool {
        self.open
    }
}

/// At most `per_minute` quarantines in any 60 s.
#[derive(Debug, Clone)]
pub struct RateLimit {
    per_minute: usize,
    recent: Vec<SystemTime>,
}

impl RateLimit {
    /// A limiter.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute: per_minute as usize,
            recent: Vec::new(),
        }
    }

    /// Takes a slot, or says when one frees up.
    pub fn take(&mut self, now: SystemTime) -> Result<(), RateLimited> {
        self.recent.retain(|t| {
            now.duration_since(*t)
                .map_or(true, |age| age < Duration::from_secs(60))
        });
        if self.recent.len() >= self.per_minute {
            return Err(RateLimited {
                recent: self.recent.len(),
            });
        }
        self.recent.push(now);
        Ok(())
    }

    /// Gives back the slot taken at `now` by a quarantine that did not happen.
    pub fn give_back(&mut self, now: SystemTime) {
        if let Some(i) = self.recent.iter().rposition(|t| *t == now) {
            self.recent.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors() {
        let s =
            Selector::parse("accelerator=huawei-Ascend910, !node-role.kubernetes.io/control-plane")
                .unwrap();
        assert!(s.matches(&labels(&[("accelerator", "huawei-Ascend910")])));
        assert!(!s.matches(&labels(&[
            ("accelerator", "huawei-Ascend910"),
            ("node-role.kubernetes.io/control-plane", "")
        ])));
        assert!(Selector::parse("a=b=c").is_err());
        assert!(Selector::parse("a,,b").is_err());
        let f = NodeFilter::new(&["pool=npu".into()], &["hcclwatch.io/exclude".into()]).unwrap();
        assert_eq!(f.refuse(&labels(&[("pool", "npu")])), None);
        assert!(f.refuse(&labels(&[("pool", "cpu")])).is_some());
        assert!(
            f.refuse(&labels(&[("pool", "npu"), ("hcclwatch.io/exclude", "1")]))
                .is_some()
        );
    }

    #[test]
    fn breaker_trips_at_the_limit_and_recovers_when_the_window_slides() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut b = Breaker::new(2, 50.0, Duration::from_secs(600));
        assert_eq!(b.limit(100), 2);
        assert_eq!(b.limit(3), 1);
        assert!(b.admit("a", 100, t0).is_ok());
        assert!(b.admit("b", 100, t0 + Duration::from_secs(10)).is_ok());
        let e = b
            .admit("c", 100, t0 + Duration::from_secs(20))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("circuit breaker open") && e.contains("not quarantining c"),
            "{e}"
        );
        assert!(b.is_open());
        // Still open while both are inside the window.
        assert!(!b.refresh(100, t0 + Duration::from_secs(599)));
        assert!(b.admit("c", 100, t0 + Duration::from_secs(599)).is_err());
        // The first quarantine leaves the window: the breaker closes.
        assert!(b.refresh(100, t0 + Duration::from_secs(601)));
        assert!(!b.is_open());
        assert!(b.admit("c", 100, t0 + Duration::from_secs(602)).is_ok());
    }

    #[test]
    fn rate_limit_per_minute() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut r = RateLimit::new(2);
        assert!(r.take(t0).is_ok());
        assert!(r.take(t0).is_ok());
        assert!(r.take(t0 + Duration::from_secs(59)).is_err());
        assert!(r.take(t0 + Duration::from_secs(61)).is_ok());
    }
}
