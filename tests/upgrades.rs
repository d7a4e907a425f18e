//! Rolling upgrades between real daemons of two releases over real TCP (loopback): the
//! release before wire-version negotiation (commit f5f3ca6, which speaks wire version 2
//! only and refuses any frame of another) and this build (2 to 4, `docs/upgrades.md`).
//!
//! The old release is the old code itself: `scripts/build-old-release.sh` builds that
//! commit from git into `target/old-release/<commit>/` once (scripts/test.sh runs it before
//! the tests; this test runs it too, and it does nothing when the binary is cached).
//!
//! - A group of both releases (3 + 1 and 2 + 2) forms, probes and judges as a group of this
//!   release alone does: the same members, the same families of series, no verdict, and it
//!   speaks version 2, the highest the old release supports.
//! - A rolling restart (`maxUnavailable: 1`) replaces every old member by a new one, one at
//!   a time, each waited for until the whole group runs rounds again: no verdict at any
//!   time, and no member counts as down (`HcclwatchPeerDown`'s expression: no member of the
//!   group has it up) outside the restarted member's own window, nor inside it unless the
//!   restarted member is down too (the others re-forming around it). Once the last old
//!   member is gone the group speaks version 4 (and signs its rows).
//!
//! The detection thresholds are the loosened ones of the other multi-daemon tests
//! (`common::with_loosened_health`): the subject here is that members of two releases read
//! each other right, not detection, and scheduler noise on two shared cores is not a
//! slowdown. A misread row is far outside even those: the fields of a row read two places
//! off put the layout's "3" and "8" in the wait and latency slots, 8 s for a
//! sub-millisecond all-reduce.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{
    Daemon, Start, loopback_peers, node_state, parse_labels, probe_config, samples, value,
    with_loosened_health, write_key,
};

/// The last release before negotiation.
const OLD_RELEASE: &str = "f5f3ca6adee8384b3a626c6a9aed6d4bb7cf1399";

/// One group of daemons at a time: two groups at once on two cores is noise, not a test.
static SERIAL: Mutex<()> = Mutex::new(());

/// The old release's binary, built by the script when it is not cached.
fn old_release() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = env!("CARGO_MANIFEST_DIR");
        let out = Command::new(format!("{root}/scripts/build-old-release.sh"))
            .arg(OLD_RELEASE)
            .output()
            .expect("run scripts/build-old-release.sh");
        assert!(
            out.status.success(),
            "scripts/build-old-release.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8(out.stdout).expect("UTF-8 path");
        let bin = PathBuf::from(path.lines().last().expect("the binary's path").trim());
        assert!(bin.is_file(), "{} is not a file", bin.display());
        bin
    })
}

fn members(s: &str) -> Option<f64> {
    value(s, "hcclwatch_probe_group_members", &[])
}

fn rounds_ok(s: &str) -> f64 {
    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap_or(0.0)
}

fn wire_version(s: &str) -> Option<f64> {
    value(s, "hcclwatch_probe_wire_version", &[])
}

/// Every peer of `peers` is up in this daemon's group of all of them.
fn whole_group(s: &str, peers: &[String]) -> bool {
    members(s) == Some(peers.len() as f64)
        && peers
            .iter()
            .all(|p| value(s, "hcclwatch_peer_up", &[("peer", p)]) == Some(1.0))
}

/// The verdicts a scrape shows that name a member or a part of the network: a node
/// confirmed slow or recommended for quarantine, a ToR or a link judged degraded. (Not the
/// fabric verdict, the group's round median against its own learned baseline: on loopback,
/// with rounds of a millisecond on two shared cores, it is on now and then in a group of
/// this release alone with no restart at all (measured: on in a four-member group after 40
/// rounds, before any restart), so it says nothing about two releases; see
/// docs/upgrades.md. A misread row is a member's verdict, and the latency check below.)
fn verdicts(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (name, labels, v) in series(s) {
        let on = v != 0.0;
        let state = labels
            .iter()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v.as_str());
        let verdict = match name.as_str() {
            "hcclwatch_node_state" => {
                on && matches!(state, Some("confirmed" | "quarantine_recommended"))
            }
            "hcclwatch_tor_degraded" | "hcclwatch_link_degraded" => on,
            _ => false,
        };
        if verdict {
            out.push(format!("{name}{labels:?}"));
        }
    }
    out
}

/// One sample of a scrape: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Every sample of a scrape.
fn series(s: &str) -> Vec<Sample> {
    s.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
                None => (series, vec![]),
            };
            Some((name.to_string(), labels, v.parse().ok()?))
        })
        .collect()
}

/// The families of the probe's series a scrape holds, each with its label names: what a
/// group exports, whatever the peers' addresses.
fn shape(s: &str) -> BTreeSet<String> {
    const PROBE: [&str; 12] = [
        "hcclwatch_probe_",
        "hcclwatch_peer_",
        "hcclwatch_node_state",
        "hcclwatch_straggler_",
        "hcclwatch_rank_arrival",
        "hcclwatch_link_",
        "hcclwatch_collective_",
        "hcclwatch_fabric_",
        "hcclwatch_tor_",
        "hcclwatch_quarantine",
        "hcclwatch_normal_",
        "hcclwatch_verdict_",
    ];
    series(s)
        .into_iter()
        .filter(|(n, _, _)| PROBE.iter().any(|p| n.starts_with(p)))
        .map(|(n, l, _)| {
            let keys: Vec<String> = l.into_iter().map(|(k, _)| k).collect();
            format!("{n}{{{}}}", keys.join(","))
        })
        .collect()
}

/// A group of `peers.len()` daemons, the ranks in `old` running the old release.
fn start_group(peers: &[String], old: &[usize], key: &Path) -> Vec<Daemon> {
    (0..peers.len())
        .map(|r| start_member(peers, r, old.contains(&r), key))
        .collect()
}

fn config(peers: &[String], rank: usize, key: &Path) -> String {
    with_loosened_health(
        probe_config(peers, rank, key, 0)
            .replace("[probe]\n", "[probe]\nmember_timeout = \"2s\"\n"),
    )
}

fn start_member(peers: &[String], rank: usize, old: bool, key: &Path) -> Daemon {
    let config = config(peers, rank, key);
    let start = Start::new(&config);
    Daemon::start(if old {
        start.binary(old_release())
    } else {
        start
    })
}

/// Waits until every daemon has run `rounds` more rounds in the whole group; returns the
/// last scrape of each.
fn settled(daemons: &[Daemon], peers: &[String], rounds: f64) -> Vec<String> {
    let from: Vec<f64> = daemons.iter().map(|d| rounds_ok(&d.scrape())).collect();
    daemons
        .iter()
        .zip(from)
        .map(|(d, f)| {
            d.wait_for("rounds in the whole group", Duration::from_secs(60), |s| {
                whole_group(s, peers) && rounds_ok(s) >= f + rounds
            })
        })
        .collect()
}

/// What one group exported once it ran: checks what every group must show, and returns the
/// new-release members' families.
fn check_group(
    scrapes: &[String],
    peers: &[String],
    old: &[usize],
    daemons: &[Daemon],
) -> BTreeSet<String> {
    // The highest version every member supports: 2 with any old member, else 3.
    let speaks = if old.is_empty() { 4.0 } else { 2.0 };
    let mut new_shape = None;
    let mut old_shapes = Vec::new();
    for (r, s) in scrapes.iter().enumerate() {
        assert!(whole_group(s, peers), "rank {r}: {s}");
        assert_eq!(
            verdicts(s),
            Vec::<String>::new(),
            "rank {r} of a group with old members {old:?}; its log:\n{}",
            daemons[r].log()
        );
        // Every member judges every peer, and no peer is past suspicion (the verdict check
        // above). A loopback group on a loaded machine may hold a peer in `suspect` for a
        // round: that is the engine watching, not a verdict, and one release watches as
        // the other does.
        for p in peers {
            let on: Vec<&str> = ["healthy", "suspect"]
                .into_iter()
                .filter(|st| node_state(s, p, st) == Some(1.0))
                .collect();
            assert_eq!(on.len(), 1, "rank {r} judges {p}: {on:?}\n{s}");
        }
        let latency = value(s, "hcclwatch_probe_latency_seconds", &[]).expect("latency");
        // A sub-millisecond all-reduce on loopback; a second would be a misread row.
        assert!(
            latency > 0.0 && latency < 1.0,
            "rank {r}: latency {latency}"
        );
        let bw = samples(s, "hcclwatch_link_bandwidth_bytes_per_second", &[]);
        assert_eq!(bw.len(), peers.len(), "rank {r}: one link per member");
        assert!(bw.iter().all(|b| b.is_finite() && *b > 0.0), "{bw:?}");
        let busbw = samples(s, "hcclwatch_collective_busbw_bytes_per_second", &[]);
        assert!(!busbw.is_empty(), "rank {r}: no ring bandwidth");
        if old.contains(&r) {
            // The old release does not export the version; it speaks 2.
            assert_eq!(wire_version(s), None, "rank {r}");
            old_shapes.push((r, shape(s)));
        } else {
            assert_eq!(wire_version(s), Some(speaks), "rank {r}");
            let this = shape(s);
            if let Some(first) = &new_shape {
                assert_eq!(&this, first, "rank {r}");
            }
            new_shape = Some(this);
        }
    }
    let new_shape = new_shape.expect("a new-release member");
    // The old members export what the new ones do, but for the series added since: the
    // wire version and the certificate mode.
    for (r, mut old_shape) in old_shapes {
        old_shape.insert("hcclwatch_probe_wire_version{}".to_string());
        old_shape.insert("hcclwatch_probe_certificate_mode{}".to_string());
        assert_eq!(old_shape, new_shape, "old rank {r}");
    }
    new_shape
}

#[test]
fn groups_of_two_releases_probe_and_judge_as_one_release_groups_do() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let old_bin = old_release();
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 4;
    let mut reference = None;
    for old in [vec![], vec![3], vec![0, 2]] {
        let peers = loopback_peers(n);
        let daemons = start_group(&peers, &old, &key);
        let scrapes = settled(&daemons, &peers, 12.0);
        let shape = check_group(&scrapes, &peers, &old, &daemons);
        match &reference {
            None => reference = Some(shape),
            Some(r) => assert_eq!(&shape, r, "old members {old:?} against one release"),
        }
        for (r, d) in daemons.into_iter().enumerate() {
            let (status, log) = d.stop_logged();
            assert!(
                status.success(),
                "rank {r} ({old_bin:?} old: {old:?}):\n{log}"
            );
            assert!(!log.contains("wire version"), "rank {r}:\n{log}");
        }
    }
}

/// One sweep of the sampler: when, and per peer whether any member has it up.
struct Sweep {
    at: Instant,
    up: Vec<bool>,
    verdicts: Vec<String>,
    answered: usize,
}

/// A scrape that may fail (a daemon stopping).
fn try_scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (head, body) = body.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
}

/// Scrapes every running member in turn until `stop`, recording each sweep.
fn sample(
    addrs: Arc<Mutex<Vec<Option<String>>>>,
    peers: Vec<String>,
    stop: Arc<AtomicBool>,
) -> Vec<Sweep> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now: Vec<String> = addrs.lock().unwrap().iter().flatten().cloned().collect();
        let scrapes: Vec<String> = now.iter().filter_map(|a| try_scrape(a)).collect();
        let up = peers
            .iter()
            .map(|p| {
                scrapes
                    .iter()
                    .any(|s| value(s, "hcclwatch_peer_up", &[("peer", p)]) == Some(1.0))
            })
            .collect();
        out.push(Sweep {
            at: Instant::now(),
            up,
            verdicts: scrapes.iter().flat_map(|s| verdicts(s)).collect(),
            answered: scrapes.len(),
        });
        // Pace the sweeps (the sampler observes; nothing waits on it).
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

#[test]
fn a_rolling_restart_from_the_old_release_keeps_every_verdict_and_every_other_member_up() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    old_release();
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let n = 4;
    let peers = loopback_peers(n);
    let all: Vec<usize> = (0..n).collect();
    let mut daemons: Vec<Option<Daemon>> = start_group(&peers, &all, &key)
        .into_iter()
        .map(Some)
        .collect();
    let wait_whole = |d: &[Option<Daemon>], rounds: f64| {
        let ds: Vec<&Daemon> = d.iter().flatten().collect();
        let from: Vec<f64> = ds.iter().map(|d| rounds_ok(&d.scrape())).collect();
        ds.iter()
            .zip(from)
            .map(|(d, f)| {
                d.wait_for("rounds in the whole group", Duration::from_secs(60), |s| {
                    whole_group(s, &peers) && rounds_ok(s) >= f + rounds
                })
            })
            .collect::<Vec<String>>()
    };
    wait_whole(&daemons, 5.0);

    let addrs = Arc::new(Mutex::new(
        daemons
            .iter()
            .map(|d| d.as_ref().map(|d| d.addr.clone()))
            .collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (addrs, peers, stop) = (addrs.clone(), peers.clone(), stop.clone());
        std::thread::spawn(move || sample(addrs, peers, stop))
    };
    // (member, start, end) of each restart.
    let mut windows = Vec::new();
    for r in 0..n {
        let start = Instant::now();
        addrs.lock().unwrap()[r] = None;
        let (status, log) = daemons[r].take().expect("running").stop_logged();
        assert!(status.success(), "old rank {r}:\n{log}");
        let d = start_member(&peers, r, false, &key);
        addrs.lock().unwrap()[r] = Some(d.addr.clone());
        daemons[r] = Some(d);
        let scrapes = wait_whole(&daemons, 5.0);
        windows.push((r, start, Instant::now()));
        // New members speak the highest version every member supports.
        let speaks = if r + 1 < n { 2.0 } else { 4.0 };
        for (k, s) in scrapes.iter().enumerate() {
            if k <= r {
                assert_eq!(wire_version(s), Some(speaks), "rank {k} after restart {r}");
            }
        }
    }
    // Rounds at version 4 only (signed), all members of this release.
    let last = wait_whole(&daemons, 12.0);
    assert!(last.iter().all(|s| wire_version(s) == Some(4.0)));
    stop.store(true, Ordering::Relaxed);
    let sweeps = sampler.join().expect("sampler");
    assert!(sweeps.len() > 20, "only {} sweeps", sweeps.len());

    let mut wrong = Vec::new();
    for w in &sweeps {
        // At most the restarted member is missing: the sampler saw the group.
        if w.answered + 1 < n {
            wrong.push(format!("only {} members answered", w.answered));
        }
        let at = w.at.saturating_duration_since(windows[0].1);
        if !w.verdicts.is_empty() {
            wrong.push(format!("verdicts at {at:?}: {:?}", w.verdicts));
        }
        let window = windows.iter().find(|(_, s, e)| *s <= w.at && w.at <= *e);
        for (p, up) in w.up.iter().enumerate() {
            match window {
                _ if *up => {}
                None => wrong.push(format!(
                    "member {p} down at {at:?}, outside every restart ({} members answered)",
                    w.answered
                )),
                Some((r, ..)) if p != *r && w.up[*r] => wrong.push(format!(
                    "member {p} down at {at:?} while restarted member {r} was up"
                )),
                Some(_) => {}
            }
        }
    }
    if !wrong.is_empty() {
        let windows: Vec<String> = windows
            .iter()
            .map(|(r, s, e)| {
                let from = s.saturating_duration_since(windows[0].1);
                format!(
                    "member {r}: {from:?} to {:?}",
                    e.saturating_duration_since(windows[0].1)
                )
            })
            .collect();
        let logs: Vec<String> = daemons.iter().flatten().map(|d| d.log()).collect();
        panic!(
            "{}\nrestarts: {windows:?}\nthe new members' logs:\n{}",
            wrong.join("\n"),
            logs.join("\n----\n")
        );
    }
    for (r, d) in daemons.into_iter().flatten().enumerate() {
        let (status, log) = d.stop_logged();
        assert!(status.success(), "rank {r}:\n{log}");
    }
}

/// With `collective.min_wire_version = 4` the members of this release leave a member of the
/// old release (which speaks 2 only) out of the group, naming why, and form without it at
/// version 4: the group never drops to a version whose rows any key holder can forge.
/// Without the setting the same members form one group at version 2 (the tests above).
#[test]
fn a_floor_on_the_wire_version_leaves_the_old_release_out_and_the_rest_sign() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    old_release();
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(3);
    let old = 0;
    let daemons: Vec<Daemon> = (0..peers.len())
        .map(|r| {
            if r == old {
                return start_member(&peers, r, true, &key);
            }
            let cfg = config(&peers, r, &key)
                .replace("[collective]\n", "[collective]\nmin_wire_version = 4\n");
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    for (r, d) in daemons.iter().enumerate().filter(|(r, _)| *r != old) {
        let s = d.wait_for(
            "rounds of the two new members at version 4",
            Duration::from_secs(60),
            |s| members(s) == Some(2.0) && wire_version(s) == Some(4.0) && rounds_ok(s) >= 5.0,
        );
        assert_eq!(
            value(
                &s,
                "hcclwatch_probe_member_excluded",
                &[("peer", &peers[old])]
            ),
            Some(1.0),
            "rank {r}\n{s}"
        );
        let state: serde_json::Value =
            serde_json::from_str(&d.get("/api/v1/state", None).body).unwrap();
        let why = state["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["node"] == peers[old].as_str())
            .map(|m| m["excluded"].to_string())
            .unwrap_or_default();
        assert!(
            why.contains("collective.min_wire_version = 4"),
            "rank {r}: the old member's exclusion says {why}"
        );
    }
}
