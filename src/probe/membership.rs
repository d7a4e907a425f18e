//! Probe-group membership: who the candidates are, and which of them form the group.
//!
//! Candidates come from the config (a static list or an HCCL rank table, already cut to
//! this node's topology group) or from a DNS name that resolves to every member, such as a
//! Kubernetes headless Service. The name is re-resolved periodically; a change carries the
//! health engine over by address, so nobody's history is reset because somebody joined.
//!
//! Which candidates take part is decided each time the group forms. A candidate that has
//! not accepted a connection for `member_timeout` is left out, so the survivors keep
//! probing; it is re-admitted as soon as it accepts again. There is no coordinator: every
//! member decides from what it sees, and the member list is folded into the communicator
//! id, so two members whose views differ fail authentication with each other instead of
//! forming mismatched groups, and the next attempts converge once the views agree.
//!
//! Fail closed: a DNS view that could not be refreshed for `stale_after` is stale. Probing
//! stops until it refreshes; telemetry goes on.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Where the candidates come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A fixed list (config `collective.peers` or a rank table), with this node's index.
    Static {
        /// Listen addresses, in rank order.
        peers: Vec<SocketAddr>,
        /// Label for each (same order).
        names: Vec<String>,
        /// This node's index.
        rank: usize,
    },
    /// A DNS name resolving to every member; all listen on `port`.
    Dns {
        /// The name (e.g. `hcclwatch.monitoring.svc.cluster.local`).
        host: String,
        /// The probe port of every member.
        port: u16,
        /// This node's own address; None finds it among the resolved addresses by a local
        /// interface address.
        own: Option<SocketAddr>,
        /// Time between resolutions.
        refresh: Duration,
        /// A view older than this is stale (probing stops).
        stale_after: Duration,
        /// At most this many members per group; a larger set is cut into balanced groups.
        max_group_size: usize,
    },
}

/// A candidate member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its probe listen address.
    pub addr: SocketAddr,
    /// Its label in metrics and logs.
    pub name: String,
}

/// Why a DNS refresh did not produce a view (the previous view stays in place).
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The name did not resolve.
    #[error("resolving {host}: {error}")]
    Resolve {
        /// The DNS name.
        host: String,
        /// The resolver's error.
        error: std::io::Error,
    },
    /// None of the addresses is this node's.
    #[error(
        "{host} resolves to {count} addresses and none is this node's{}; the member list does not include this node yet",
        .own.map(|o| format!(" ({o})")).unwrap_or_default()
    )]
    NotAMember {
        /// The DNS name.
        host: String,
        /// Addresses it resolved to.
        count: usize,
        /// `collective.own_address`, when set.
        own: Option<SocketAddr>,
    },
    /// Several addresses are this host's, so its own cannot be told.
    #[error("{host} resolves to {count} addresses of this host; set collective.own_address")]
    SeveralOwn {
        /// The DNS name.
        host: String,
        /// This host's addresses among them.
        count: usize,
    },
}

/// What a refresh found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// Same candidates as before.
    Unchanged,
    /// New candidates: `map[old] = Some(new)` for each old candidate still present.
    Changed(Vec<Option<usize>>),
}

/// The membership view of one node.
#[derive(Debug)]
pub struct Membership {
    source: Source,
    candidates: Vec<Candidate>,
    me: Option<usize>,
    /// Since when each candidate has not accepted a connection (None: it did last time).
    down_since: Vec<Option<Instant>>,
    /// Candidates left out of forming until a time, with why (a member that broke a group
    /// exchange, see [`Membership::exclude`]).
    excluded: Vec<Option<(Instant, String)>>,
    member_timeout: Duration,
    resolved_at: Option<Instant>,
    next_resolve: Instant,
    last_error: Option<String>,
}

impl Membership {
    /// A view over `source`; a DNS source resolves at the first [`Membership::refresh`].
    pub fn new(source: Source, member_timeout: Duration, now: Instant) -> Self {
        let (candidates, me) = match &source {
            Source::Static { peers, names, rank } => (
                peers
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Candidate {
                        addr: *a,
                        name: names.get(i).cloned().unwrap_or_else(|| a.to_string()),
                    })
                    .collect(),
                Some(*rank),
            ),
            Source::Dns { .. } => (Vec::new(), None),
        };
        let n = candidates.len();
        Self {
            source,
            candidates,
            me,
            down_since: vec![None; n],
            excluded: vec![None; n],
            member_timeout,
            resolved_at: Some(now),
            next_resolve: now,
            last_error: None,
        }
    }

    /// The candidates, in index order (the health engine's node indices).
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// This node's index among the candidates (None until a DNS view includes it).
    pub fn me(&self) -> Option<usize> {
        self.me
    }

    /// Whether the candidates come from DNS (members then announce their own names).
    pub fn is_dns(&self) -> bool {
        matches!(self.source, Source::Dns { .. })
    }

    /// Re-resolves the DNS name when it is due. `resolve` maps (host, port) to addresses;
    /// the daemon passes the system resolver. An error leaves the previous view in place
    /// (it goes stale after `stale_after`) and is returned for the log.
    pub fn refresh(
        &mut self,
        now: Instant,
        resolve: impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
        is_local: impl Fn(&SocketAddr) -> bool,
    ) -> Result<Refresh, RefreshError> {
        let Source::Dns {
            host,
            port,
            own,
            refresh,
            max_group_size,
            ..
        } = &self.source
        else {
            return Ok(Refresh::Unchanged);
        };
        if now < self.next_resolve {
            return Ok(Refresh::Unchanged);
        }
        self.next_resolve = now + *refresh;
        // The stale message carries the last failure, so it is kept as text.
        let fail = |this: &mut Self, why: RefreshError| {
            this.last_error = Some(why.to_string());
            Err(why)
        };
        let mut addrs = match resolve(host, *port) {
            Ok(a) => a,
            Err(error) => {
                let host = host.clone();
                return fail(self, RefreshError::Resolve { host, error });
            }
        };
        addrs.sort();
        addrs.dedup();
        let mine: Vec<usize> = match own {
            Some(o) => addrs.iter().position(|a| a == o).into_iter().collect(),
            None => (0..addrs.len()).filter(|i| is_local(&addrs[*i])).collect(),
        };
        let me = match mine.as_slice() {
            [one] => *one,
            [] => {
                let why = RefreshError::NotAMember {
                    host: host.clone(),
                    count: addrs.len(),
                    own: *own,
                };
                return fail(self, why);
            }
            _ => {
                let why = RefreshError::SeveralOwn {
                    host: host.clone(),
                    count: mine.len(),
                };
                return fail(self, why);
            }
        };
        let group = probe_group(&[], me, addrs.len(), *max_group_size);
        let me = group.iter().position(|&i| i == me).unwrap_or(0);
        let addrs: Vec<SocketAddr> = group.iter().map(|&i| addrs[i]).collect();
        self.resolved_at = Some(now);
        self.last_error = None;
        let old: Vec<SocketAddr> = self.candidates.iter().map(|c| c.addr).collect();
        if old == addrs && self.me == Some(me) {
            return Ok(Refresh::Unchanged);
        }
        let map: Vec<Option<usize>> = old
            .iter()
            .map(|a| addrs.iter().position(|b| b == a))
            .collect();
        let mut down = vec![None; addrs.len()];
        let mut excluded = vec![None; addrs.len()];
        for (o, n) in map.iter().enumerate() {
            if let Some(n) = n {
                down[*n] = self.down_since[o];
                excluded[*n] = self.excluded.get(o).cloned().flatten();
            }
        }
        self.down_since = down;
        self.excluded = excluded;
        self.candidates = addrs
            .iter()
            .map(|a| Candidate {
                addr: *a,
                name: a.to_string(),
            })
            .collect();
        self.me = Some(me);
        Ok(Refresh::Changed(map))
    }

    /// Why the view is stale, if it is: the DNS name has not resolved to a view including
    /// this node for `stale_after`.
    pub fn stale(&self, now: Instant) -> Option<String> {
        let Source::Dns {
            host, stale_after, ..
        } = &self.source
        else {
            return None;
        };
        let age = self
            .resolved_at
            .map_or(Duration::MAX, |t| now.saturating_duration_since(t));
        if self.me.is_none() || age > *stale_after {
            Some(format!(
                "membership view is stale: {host} last resolved {}{}",
                if self.me.is_none() {
                    "never (with this node in it)".to_string()
                } else {
                    format!(
                        "{:.0} s ago (stale after {:.0} s)",
                        age.as_secs_f64(),
                        stale_after.as_secs_f64()
                    )
                },
                self.last_error
                    .as_ref()
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            ))
        } else {
            None
        }
    }

    /// Records whether candidate `i` accepted a connection at `now`.
    pub fn record(&mut self, i: usize, reachable: bool, now: Instant) {
        if let Some(d) = self.down_since.get_mut(i) {
            match (reachable, *d) {
                (true, _) => *d = None,
                (false, None) => *d = Some(now),
                (false, Some(_)) => {}
            }
        }
    }

    /// Records that candidate `i` announced it is leaving: it is out at once (not after
    /// `member_timeout`), until it accepts connections again.
    pub fn left(&mut self, i: usize, now: Instant) {
        if let Some(d) = self.down_since.get_mut(i) {
            *d = Some(now.checked_sub(self.member_timeout).unwrap_or(now));
        }
    }

    /// Whether candidate `i` has been unreachable for `member_timeout` (left out of the
    /// group until it accepts again).
    pub fn removed(&self, i: usize, now: Instant) -> bool {
        Some(i) != self.me
            && self
                .down_since
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|t| now.saturating_duration_since(t) >= self.member_timeout)
    }

    /// The candidates that form the group now, in index order (this node included).
    pub fn members(&self, now: Instant) -> Vec<usize> {
        (0..self.candidates.len())
            .filter(|i| !self.removed(*i, now) && self.excluded(*i, now).is_none())
            .collect()
    }

    /// Leaves candidate `i` out of the group until `until`, whether it answers or not: it
    /// broke an exchange every member saw it break (its engine-state hand-over was larger
    /// than any state can be, or not the state it announced). Its own view is never
    /// excluded: a member cannot leave itself out.
    pub fn exclude(&mut self, i: usize, until: Instant, why: String) {
        if Some(i) == self.me {
            return;
        }
        if let Some(e) = self.excluded.get_mut(i) {
            *e = Some((until, why));
        }
    }

    /// Why candidate `i` is left out now, if it is excluded (see [`Membership::exclude`]).
    pub fn excluded(&self, i: usize, now: Instant) -> Option<&str> {
        match self.excluded.get(i)? {
            Some((until, why)) if now < *until => Some(why.as_str()),
            _ => None,
        }
    }

    /// A communicator id for a group of `members`: the base id with the members' addresses
    /// folded in (FNV-1a), so that members with different views never authenticate to each
    /// other.
    pub fn comm_id(&self, base: u64, members: &[usize]) -> u64 {
        members
            .iter()
            .filter_map(|i| self.candidates.get(*i))
            .flat_map(|c| c.addr.to_string().into_bytes().into_iter().chain([b';']))
            .fold(base ^ 0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
    }
}

/// Which of `addrs` accept a TCP connection within `timeout`, tried in parallel. The
/// connection is closed at once; the member's engine drops it unauthenticated.
pub fn reachable(addrs: &[SocketAddr], timeout: Duration) -> Vec<bool> {
    std::thread::scope(|scope| {
        let tries: Vec<_> = addrs
            .iter()
            .map(|a| scope.spawn(move || TcpStream::connect_timeout(a, timeout).is_ok()))
            .collect();
        tries
            .into_iter()
            .map(|t| t.join().unwrap_or(false))
            .collect()
    })
}

/// The system resolver (getaddrinfo: `/etc/hosts`, then DNS, per nsswitch).
pub fn system_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// Whether `addr`'s IP belongs to this host (an interface address).
pub fn is_local(addr: &SocketAddr) -> bool {
    crate::collective::bootstrap::env::interfaces()
        .iter()
        .any(|i| i.addr == addr.ip())
}

/// The members (config ranks, in order) of `rank`'s probe group: those with its topology
/// label (all, without labels), cut into contiguous groups of balanced size, at most `max`
/// each unless that would leave a member alone.
pub fn probe_group(topology: &[String], rank: usize, n: usize, max: usize) -> Vec<usize> {
    let same: Vec<usize> = (0..n)
        .filter(|i| topology.is_empty() || topology.get(*i) == topology.get(rank))
        .collect();
    let pos = same.iter().position(|&i| i == rank).unwrap_or(0);
    crate::health::plan::balanced_groups(same.len(), max)
        .into_iter()
        .find(|g| g.contains(&pos))
        .unwrap_or_default()
        .into_iter()
        .map(|p| same[p])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn dns(own: Option<&str>) -> Source {
        Source::Dns {
            host: "grp.test".into(),
            port: 7000,
            own: own.map(a),
            refresh: Duration::from_secs(10),
            stale_after: Duration::from_secs(60),
            max_group_size: 64,
        }
    }

    #[test]
    fn a_silent_member_is_removed_after_the_timeout_and_readmitted_when_it_answers() {
        let t0 = Instant::now();
        let src = Source::Static {
            peers: vec![a("10.0.0.1:1"), a("10.0.0.2:1"), a("10.0.0.3:1")],
            names: vec!["n1".into(), "n2".into(), "n3".into()],
            rank: 0,
        };
        let mut m = Membership::new(src, Duration::from_secs(30), t0);
        assert_eq!(m.members(t0), vec![0, 1, 2]);
        m.record(2, false, t0);
        m.record(2, false, t0 + Duration::from_secs(20));
        assert_eq!(m.members(t0 + Duration::from_secs(29)), vec![0, 1, 2]);
        assert_eq!(m.members(t0 + Duration::from_secs(30)), vec![0, 1]);
        // Never this node itself, whatever was recorded.
        m.record(0, false, t0);
        assert!(m.members(t0 + Duration::from_secs(99)).contains(&0));
        m.record(2, true, t0 + Duration::from_secs(40));
        assert_eq!(m.members(t0 + Duration::from_secs(40)), vec![0, 1, 2]);
        let full = m.comm_id(7, &[0, 1, 2]);
        assert_ne!(full, m.comm_id(7, &[0, 1]));
        assert_ne!(full, m.comm_id(8, &[0, 1, 2]));
        assert_eq!(full, m.comm_id(7, &[0, 1, 2]));
    }

    #[test]
    fn an_excluded_member_is_out_until_its_time_whether_it_answers_or_not() {
        let t0 = Instant::now();
        let src = Source::Static {
            peers: vec![a("10.0.0.1:1"), a("10.0.0.2:1"), a("10.0.0.3:1")],
            names: vec!["n1".into(), "n2".into(), "n3".into()],
            rank: 0,
        };
        let mut m = Membership::new(src, Duration::from_secs(30), t0);
        m.exclude(2, t0 + Duration::from_secs(60), "oversize hand-over".into());
        m.record(2, true, t0 + Duration::from_secs(1));
        assert_eq!(m.members(t0 + Duration::from_secs(59)), vec![0, 1]);
        assert_eq!(m.excluded(2, t0), Some("oversize hand-over"));
        assert_eq!(m.members(t0 + Duration::from_secs(60)), vec![0, 1, 2]);
        assert_eq!(m.excluded(2, t0 + Duration::from_secs(60)), None);
        // A member never leaves itself out.
        m.exclude(0, t0 + Duration::from_secs(60), "self".into());
        assert_eq!(m.excluded(0, t0), None);
    }

    #[test]
    fn dns_view_resolves_maps_changes_by_address_and_goes_stale() {
        let t0 = Instant::now();
        let mut m = Membership::new(dns(Some("10.0.0.2:7000")), Duration::from_secs(30), t0);
        assert!(m.stale(t0).unwrap().contains("never"));
        let three = |_: &str, _: u16| {
            Ok(vec![
                a("10.0.0.3:7000"),
                a("10.0.0.1:7000"),
                a("10.0.0.2:7000"),
            ])
        };
        let r = m.refresh(t0, three, |_| false).unwrap();
        assert_eq!(r, Refresh::Changed(vec![]));
        assert_eq!(m.me(), Some(1));
        assert_eq!(m.candidates()[0].addr, a("10.0.0.1:7000"));
        assert!(m.stale(t0).is_none());
        // Not due yet: no lookup at all.
        let r = m.refresh(
            t0 + Duration::from_secs(5),
            |_: &str, _: u16| -> std::io::Result<Vec<SocketAddr>> { panic!("resolved early") },
            |_| false,
        );
        assert_eq!(r.ok(), Some(Refresh::Unchanged));
        m.record(2, false, t0);
        // 10.0.0.1 leaves, 10.0.0.0 joins: old indices follow their addresses.
        let t1 = t0 + Duration::from_secs(10);
        let r = m
            .refresh(
                t1,
                |_: &str, _: u16| {
                    Ok(vec![
                        a("10.0.0.0:7000"),
                        a("10.0.0.2:7000"),
                        a("10.0.0.3:7000"),
                    ])
                },
                |_| false,
            )
            .unwrap();
        assert_eq!(r, Refresh::Changed(vec![None, Some(1), Some(2)]));
        assert_eq!(m.me(), Some(1));
        assert!(
            m.removed(2, t0 + Duration::from_secs(30)),
            "the silence of 10.0.0.3 carried over"
        );
        // Failures keep the view until it is older than stale_after.
        let t2 = t1 + Duration::from_secs(10);
        let err = m
            .refresh(
                t2,
                |_: &str, _: u16| Err(std::io::Error::other("SERVFAIL")),
                |_| false,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("grp.test") && err.contains("SERVFAIL"),
            "{err}"
        );
        assert!(m.stale(t2).is_none());
        let late = t1 + Duration::from_secs(61);
        let why = m.stale(late).expect("stale");
        assert!(
            why.contains("grp.test") && why.contains("SERVFAIL"),
            "{why}"
        );
    }

    #[test]
    fn dns_view_without_this_node_is_an_error_naming_the_host() {
        let t0 = Instant::now();
        let mut m = Membership::new(dns(None), Duration::from_secs(30), t0);
        let err = m
            .refresh(
                t0,
                |_: &str, _: u16| Ok(vec![a("10.0.0.1:7000")]),
                |_| false,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("grp.test") && err.contains("none is this node's"),
            "{err}"
        );
        assert!(m.stale(t0).is_some());
        let mut m = Membership::new(dns(None), Duration::from_secs(30), t0);
        let two = |_: &str, _: u16| Ok(vec![a("10.0.0.1:7000"), a("10.0.0.2:7000")]);
        let err = m.refresh(t0, two, |_| true).unwrap_err().to_string();
        assert!(err.contains("own_address"), "{err}");
        let mut m = Membership::new(dns(None), Duration::from_secs(30), t0);
        m.refresh(t0, two, |x| x.ip().to_string() == "10.0.0.2")
            .unwrap();
        assert_eq!(m.me(), Some(1));
    }

    #[test]
    fn dns_view_is_cut_to_the_group_size() {
        let t0 = Instant::now();
        let mut src = dns(Some("10.0.0.7:7000"));
        if let Source::Dns { max_group_size, .. } = &mut src {
            *max_group_size = 4;
        }
        let mut m = Membership::new(src, Duration::from_secs(30), t0);
        let eight = |_: &str, _: u16| Ok((1..=8).map(|i| a(&format!("10.0.0.{i}:7000"))).collect());
        m.refresh(t0, eight, |_| false).unwrap();
        let got: Vec<String> = m
            .candidates()
            .iter()
            .map(|c| c.addr.ip().to_string())
            .collect();
        assert_eq!(got, ["10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"]);
        assert_eq!(m.me(), Some(2));
    }

    #[test]
    fn reachability_tells_a_listener_from_a_closed_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = l.local_addr().unwrap();
        let closed = {
            let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            t.local_addr().unwrap()
        };
        assert_eq!(
            reachable(&[open, closed], Duration::from_secs(2)),
            vec![true, false]
        );
    }

    #[test]
    fn groups_are_balanced_capped_and_never_singletons() {
        assert_eq!(probe_group(&[], 0, 4, 64), vec![0, 1, 2, 3]);
        assert_eq!(probe_group(&[], 1, 4, 2), vec![0, 1]);
        assert_eq!(probe_group(&[], 3, 4, 2), vec![2, 3]);
        // 5 members, at most 2 per group: 3 + 2, not 2 + 2 + a lonely fifth.
        assert_eq!(probe_group(&[], 0, 5, 2), vec![0, 1, 2]);
        assert_eq!(probe_group(&[], 4, 5, 2), vec![3, 4]);
        assert_eq!(probe_group(&[], 2, 3, 2), vec![0, 1, 2]);
        // 100 members, at most 32: 4 groups of 25.
        let g = probe_group(&[], 99, 100, 32);
        assert_eq!(g.len(), 25);
        assert_eq!(g[0], 75);
        let t: Vec<String> = ["a", "b", "a", "b", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(probe_group(&t, 1, 5, 64), vec![1, 3]);
        assert_eq!(probe_group(&t, 4, 5, 64), vec![0, 2, 4]);
    }
}
