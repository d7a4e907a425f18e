//! The scorer's false-verdict rates, computed again from the JSON report alone: every
//! verdict span (entity, class, level, first and last round) judged against the ground
//! truth the report carries (every fault with its target, onset and end, every congestion
//! episode, the rounds the fleet's drift is 1/0.9 slow), with the scoring rules as
//! `docs/simulation.md` states them, written here again. Run on every scenario file in
//! `scenarios/` (the shipped set and the world-class suite).
//!
//! Sizes: each scenario runs at its own 30 s rounds (no rescaling: the rules are the same
//! at any cadence, and a third as many rounds keeps the debug-build test near a minute
//! and a half on two shared cores), cut to at most 256 nodes and 3 hours where the file's
//! listed nodes and onsets allow it, else as written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hcclwatch::simulate::{Engines, Overrides, Scenario, simulate};
use serde_json::Value;

/// The shipped engine window (`health.window`, 10 rounds) plus the 5 rounds of grace the
/// scoring rules give a verdict after its fault ends (docs/simulation.md, "Scoring").
const GRACE: u64 = 10 + 5;
/// The look-back a fabric verdict's event is searched in: twice the window plus 5.
const LOOKBACK: u64 = 2 * 10 + 5;

fn scenario_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut out = Vec::new();
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "toml" || x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The scenario cut as small as its file allows, at its own 30 s rounds.
fn reduced(path: &Path) -> Scenario {
    let s = Scenario::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let at_30s = Some(Duration::from_secs(30));
    let nodes = Some(s.fleet.nodes.min(256));
    let hours = Some(s.fleet.hours.unwrap_or(3.0).min(3.0));
    let tries = [(nodes, hours), (None, hours), (nodes, None), (None, None)];
    let name = path.display().to_string();
    for (nodes, hours) in tries {
        let o = Overrides {
            nodes,
            hours,
            probe_interval: at_30s,
            ..Overrides::default()
        };
        if let Ok(s) = o.apply(s.clone(), &name) {
            return s;
        }
    }
    panic!("{name}: does not run as written");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// A fault of the ground truth, as the JSON carries it.
struct Fault {
    kind: String,
    plane: String,
    target: Value,
    onset: u64,
    end: u64,
    silent: bool,
    groups: Vec<u64>,
    /// A dip's scope (`tor_uplinks`, …) and the elements it names.
    scope: String,
    at: Vec<u64>,
}

impl Fault {
    fn host(&self) -> bool {
        self.plane == "host" || self.plane == "both"
    }
    fn device(&self) -> bool {
        self.plane == "device" || self.plane == "both"
    }
    fn node(&self) -> Option<u64> {
        self.target.get("Node").map(u)
    }
    /// A verdict that began in `first` is this fault's: during it, or within `grace`
    /// rounds after.
    fn owns(&self, first: u64, grace: u64) -> bool {
        first >= self.onset && first < self.end + grace
    }
}

struct Run {
    faults: Vec<Fault>,
    /// (plane, on, groups, start, end) of the ToR and spine episodes.
    shared: Vec<(String, String, Vec<u64>, u64, u64)>,
    /// (plane, ToR, start, end) of the ToR episodes.
    tor_episodes: Vec<(String, u64, u64, u64)>,
    drift_slow: Vec<(u64, u64)>,
    npus: u64,
    device_every: u64,
}

fn truth(r: &Value) -> Run {
    let t = &r["truth"];
    let groups = |v: &Value| v.as_array().unwrap().iter().map(u).collect::<Vec<_>>();
    let faults = t["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| Fault {
            kind: f["kind"].as_str().unwrap().into(),
            plane: f["plane"].as_str().unwrap().into(),
            target: f["target"].clone(),
            onset: u(&f["onset"]),
            end: u(&f["end"]),
            silent: f["silent"].as_bool().unwrap(),
            groups: groups(&f["groups"]),
            scope: f["scope"].as_str().unwrap_or_default().into(),
            at: f["at"]
                .as_array()
                .map(|a| a.iter().map(u).collect())
                .unwrap_or_default(),
        })
        .collect();
    let shared = t["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["on"] != "uplink")
        .map(|e| {
            (
                e["plane"].as_str().unwrap().to_string(),
                e["on"].as_str().unwrap().to_string(),
                groups(&e["groups"]),
                u(&e["start"]),
                u(&e["end"]),
            )
        })
        .collect();
    let tor_episodes = t["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["on"] == "tor")
        .map(|e| {
            (
                e["plane"].as_str().unwrap().to_string(),
                u(&e["element"]),
                u(&e["start"]),
                u(&e["end"]),
            )
        })
        .collect();
    let drift_slow = t["drift_slow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (u(&d[0]), u(&d[1])))
        .collect();
    Run {
        faults,
        shared,
        tor_episodes,
        drift_slow,
        npus: u(&r["npus_per_node"]),
        device_every: u(&r["device_every"]),
    }
}

/// Healthy node-hours: every node-round without a node fault (slow node, hard fault).
fn healthy_hours(r: &Value, run: &Run) -> f64 {
    let rounds = u(&r["rounds"]);
    let nodes = u(&r["nodes"]);
    let mut busy: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for f in &run.faults {
        if let Some(n) = f.node() {
            busy.entry(n)
                .or_default()
                .push((f.onset, f.end.min(rounds + 1)));
        }
    }
    let faulty: u64 = busy
        .values()
        .map(|spans| {
            (1..=rounds)
                .filter(|r| spans.iter().any(|s| *r >= s.0 && *r < s.1))
                .count() as u64
        })
        .sum();
    (nodes * rounds - faulty) as f64 * r["round_seconds"].as_f64().unwrap() / 3600.0
}

fn ids(s: &Value) -> Vec<u64> {
    s["ids"].as_array().unwrap().iter().map(u).collect()
}

/// Whether a verdict span is correct, by the rules of docs/simulation.md.
fn correct(run: &Run, s: &Value) -> bool {
    let first = u(&s["first"]);
    let id = ids(s);
    let dg = GRACE * run.device_every;
    let f = &run.faults;
    match s["class"].as_str().unwrap() {
        "node" => f.iter().any(|f| {
            f.kind == "slow_node" && f.host() && f.node() == Some(id[0]) && f.owns(first, GRACE)
        }),
        "link" => f.iter().any(|f| {
            let l = &f.target["Link"];
            f.kind == "degraded_link"
                && ((u(&l["src"]), u(&l["dst"])) == (id[0], id[1])
                    || (u(&l["src"]), u(&l["dst"])) == (id[1], id[0]))
                && f.owns(first, GRACE)
        }),
        "port" => f
            .iter()
            .any(|f| f.target.get("Port").map(u) == Some(id[0]) && f.owns(first, dg)),
        "device node" => f.iter().any(|f| {
            let fits =
                (f.kind == "slow_node" && f.device()) || (f.kind == "hard_fault" && f.silent);
            fits && f.node() == Some(id[0]) && f.owns(first, dg)
        }),
        "pair" => f.iter().any(|f| {
            let p = &f.target["PortPair"];
            f.kind == "port_pair"
                && p.is_array()
                && ((u(&p[0]), u(&p[1])) == (id[0], id[1])
                    || (u(&p[0]), u(&p[1])) == (id[1], id[0]))
                && f.owns(first, dg)
        }),
        "cordon" => cordon_correct(run, id[0], first),
        c @ ("ToR" | "ToR (device)") => tor_correct(run, c, id[0], first),
        "ToR uplinks" => uplinks_correct(run, id[0], first),
        c @ ("spine" | "spine (device)") => spine_correct(run, c, id[0], first),
        c => fabric_correct(run, c, id[0], first),
    }
}

/// A cordon of node `n` is correct when a fault of the node itself was active (or had just
/// ended): a slow node on either plane, a slow port of it, a hard fault.
fn cordon_correct(run: &Run, n: u64, first: u64) -> bool {
    run.faults.iter().any(|f| {
        let own = match f.kind.as_str() {
            "slow_node" | "hard_fault" => f.node() == Some(n),
            "slow_port" => f.target.get("Port").map(u).map(|p| p / run.npus.max(1)) == Some(n),
            _ => false,
        };
        let grace = if f.host() || f.kind == "hard_fault" {
            GRACE
        } else {
            GRACE * run.device_every
        };
        own && f.owns(first, grace)
    })
}

/// A ToR verdict on ToR `t` is correct when, in the look-back before it began, a slow-ToR
/// fault of its plane on `t`, a fabric dip on `t`'s uplinks, or a congestion episode of
/// its plane on `t` was live.
fn tor_correct(run: &Run, class: &str, t: u64, first: u64) -> bool {
    let (plane, lookback) = match class {
        "ToR" => ("host", LOOKBACK),
        _ => ("device", LOOKBACK * run.device_every),
    };
    let on = |p: &str| p == plane || p == "both";
    let span = (first.saturating_sub(lookback), first + 1);
    let live = |a: u64, b: u64| a < span.1 && span.0 < b;
    let fault = run.faults.iter().any(|f| {
        let here = f.target.get("Tor").map(u) == Some(t)
            || (f.kind == "fabric_dip" && f.scope == "tor_uplinks" && f.at.first() == Some(&t));
        here && on(&f.plane) && live(f.onset, f.end)
    });
    let episode = run
        .tor_episodes
        .iter()
        .any(|(p, x, s, e)| on(p) && *x == t && live(*s, *e));
    fault || episode
}

/// A host mark of ToR `t`'s slow uplinks is correct when, in the look-back before it
/// began, a host fabric dip on `t`'s uplinks was live (and nothing else: the mark says the
/// ToR itself is fine).
fn uplinks_correct(run: &Run, t: u64, first: u64) -> bool {
    let span = (first.saturating_sub(LOOKBACK), first + 1);
    run.faults.iter().any(|f| {
        f.kind == "fabric_dip"
            && f.scope == "tor_uplinks"
            && f.at.first() == Some(&t)
            && (f.plane == "host" || f.plane == "both")
            && f.onset < span.1
            && span.0 < f.end
    })
}

/// A spine verdict in group `g` is correct when, in the look-back before it began, a dip
/// of its plane on one spine's pairs or a spine congestion episode of its plane touched
/// the group.
fn spine_correct(run: &Run, class: &str, g: u64, first: u64) -> bool {
    let (plane, lookback) = match class {
        "spine" => ("host", LOOKBACK),
        _ => ("device", LOOKBACK * run.device_every),
    };
    let on = |p: &str| p == plane || p == "both";
    let span = (first.saturating_sub(lookback), first + 1);
    let live = |a: u64, b: u64| a < span.1 && span.0 < b;
    let fault = run.faults.iter().any(|f| {
        f.kind == "fabric_dip"
            && f.scope == "spine"
            && on(&f.plane)
            && f.groups.contains(&g)
            && live(f.onset, f.end)
    });
    let episode = run
        .shared
        .iter()
        .any(|(p, x, groups, s, e)| on(p) && x == "spine" && groups.contains(&g) && live(*s, *e));
    fault || episode
}

/// A fabric verdict is correct when a fabric-wide or ToR-wide event of its plane touched
/// its group in the look-back before it began.
fn fabric_correct(run: &Run, class: &str, g: u64, first: u64) -> bool {
    let (plane, lookback) = match class {
        "fabric (host)" => ("host", LOOKBACK),
        "fabric (device)" => ("device", LOOKBACK * run.device_every),
        c => panic!("unknown verdict class {c}"),
    };
    let on = |p: &str| p == plane || p == "both";
    let span = (first.saturating_sub(lookback), first + 1);
    let live = |a: u64, b: u64| a < span.1 && span.0 < b;
    let fault = run.faults.iter().any(|f| {
        (f.kind == "fabric_dip" || f.kind == "slow_tor")
            && on(&f.plane)
            && f.groups.contains(&g)
            && live(f.onset, f.end)
    });
    let episode = run
        .shared
        .iter()
        .any(|(p, _, groups, s, e)| on(p) && groups.contains(&g) && live(*s, *e));
    fault || episode || run.drift_slow.iter().any(|d| live(d.0, d.1))
}

/// The cordons, merged again from the node and port quarantine spans.
fn cordons(spans: &[Value], npus: u64) -> Vec<(u64, u64, u64)> {
    let mut by: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for s in spans {
        let q = s["level"] == "quarantine" && !s["hard"].as_bool().unwrap();
        match s["class"].as_str().unwrap() {
            "node" if q => by.entry(ids(s)[0]).or_default(),
            "port" if q => by.entry(ids(s)[0] / npus.max(1)).or_default(),
            _ => continue,
        }
        .push((u(&s["first"]), u(&s["last"])));
    }
    let mut out = Vec::new();
    for (n, mut list) in by {
        list.sort_unstable();
        let mut cur: Option<(u64, u64)> = None;
        for (a, b) in list {
            cur = match cur {
                Some((s, e)) if a <= e + 1 => Some((s, e.max(b))),
                Some((s, e)) => {
                    out.push((n, s, e));
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((s, e)) = cur {
            out.push((n, s, e));
        }
    }
    out
}

fn class_of(s: &Value) -> String {
    match (s["class"].as_str().unwrap(), s["level"].as_str().unwrap()) {
        (c @ ("node" | "port"), l) => format!("{c} {l}"),
        (c, _) => c.to_string(),
    }
}

/// The link verdict a link alert fires on: the one of the same link whose span holds the
/// alert's first round (an alert is judged as that verdict, from its start).
fn alerted_verdict(spans: &[Value], alert: &Value) -> Value {
    let first = u(&alert["first"]);
    spans
        .iter()
        .find(|v| {
            v["class"] == "link"
                && v["entity"] == alert["entity"]
                && u(&v["first"]) <= first
                && first <= u(&v["last"])
        })
        .unwrap_or_else(|| panic!("a link alert with no link verdict under it: {alert}"))
        .clone()
}

/// Every class's (verdicts, false) from the spans, judged here.
fn judge(r: &Value, run: &Run) -> BTreeMap<String, (usize, usize)> {
    let spans: Vec<Value> = r["verdicts"].as_array().unwrap().to_vec();
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in spans.iter().filter(|s| !s["hard"].as_bool().unwrap()) {
        if s["class"] == "cordon" {
            continue;
        }
        let e = out.entry(class_of(s)).or_default();
        e.0 += 1;
        let judged = if s["class"] == "link alert" {
            alerted_verdict(&spans, s)
        } else {
            s.clone()
        };
        e.1 += usize::from(!correct(run, &judged));
    }
    let merged = cordons(&spans, run.npus);
    let wrong = merged
        .iter()
        .filter(|(n, first, _)| !cordon_correct(run, *n, *first))
        .count();
    out.insert("cordon".into(), (merged.len(), wrong));
    out
}

#[test]
fn every_scenario_false_rates_agree_with_an_independent_reading_of_the_json() {
    let files = scenario_files();
    assert!(files.len() >= 7 + 9, "{files:?}");
    let (mut falses, mut verdicts, mut disagreements) = (0, 0, Vec::new());
    for path in &files {
        let s = reduced(path);
        let report = simulate(&s, &Engines::default()).unwrap();
        let r = serde_json::to_value(&report).unwrap();
        let run = truth(&r);
        let healthy = healthy_hours(&r, &run);
        let name = path.file_name().unwrap().to_string_lossy();
        let scorer_healthy = r["healthy_node_hours"].as_f64().unwrap();
        assert!(
            (scorer_healthy - healthy).abs() < 1e-6 * healthy,
            "{name}: healthy node-hours {scorer_healthy} vs {healthy}"
        );
        let mine = judge(&r, &run);
        for c in r["classes"].as_array().unwrap() {
            let class = c["class"].as_str().unwrap();
            let (n, wrong) = mine.get(class).copied().unwrap_or_default();
            let rate = wrong as f64 / healthy * 1000.0;
            let theirs = c["false_per_1000_node_hours"].as_f64().unwrap();
            let same = u(&c["verdicts"]) as usize == n
                && u(&c["false_verdicts"]) as usize == wrong
                && (theirs - rate).abs() <= 1e-9 * rate.max(1.0);
            if !same {
                disagreements.push(format!(
                    "{name}: {class}: scorer {} verdicts, {} false, {theirs:.4}/1000 node-h; here {n}, {wrong}, {rate:.4}",
                    c["verdicts"], c["false_verdicts"]
                ));
            }
            falses += wrong;
            verdicts += n;
        }
        // The headline rate is the cordon class's.
        let cordon = mine["cordon"].1 as f64 / healthy * 1000.0;
        let headline = r["false_quarantines_per_1000_node_hours"].as_f64().unwrap();
        assert!(
            (headline - cordon).abs() <= 1e-9 * cordon.max(1.0),
            "{name}"
        );
        // The ToR class is reported on every scenario (the host engine makes ToR verdicts
        // at the shipped settings whenever the topology is known; the comparison above
        // re-judged them), with or without verdicts.
        let tor = r["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["class"] == "ToR");
        assert!(tor.is_some(), "{name}: no ToR class");
    }
    assert_eq!(disagreements, Vec::<String>::new());
    // The comparison judged something: verdicts of both kinds over the set.
    assert!(
        verdicts > 100 && falses > 10,
        "{verdicts} verdicts, {falses} false"
    );
}
