//! `hcclwatch simulate`: the health engines fed synthetic measurements of a scenario with
//! known faults, so that their verdicts can be scored against ground truth.
//!
//! - [`scenario`]: the scenario file (fleet, noise, congestion, faults) and its checks
//!   ([`validate`]);
//! - [`world`]: the scenario made concrete with its seed; every effect is a function of the
//!   round, and the engines learn of it only through [`world::World::host_probe`] and
//!   [`world::World::device_ping`];
//! - [`device`]: NPU ports pinging on the prober's rotating plan;
//! - [`run`]: one host engine and one device engine per probe group, as the daemons run
//!   them;
//! - [`verdicts`], [`score`], [`targets`], [`report`]: honest scoring (per verdict and per
//!   fault episode) and the report;
//! - [`cadence`]: a scenario written in rounds of one length, run at another probe
//!   interval (the same world in wall-clock time);
//! - [`ood`]: out-of-distribution held-out scenarios, every axis past the shipped ranges
//!   (`--generate`); [`generate`]: the older in-sample ones, new seeds of the shipped world
//!   (`--generate-in-sample`); both with seeds disjoint from the shipped ones.
//! - [`draw`], [`topology`], [`fault`], [`place`], [`episodes`], [`counters`]: the world's
//!   parts; [`truth`]: its ground truth as the scorer and the JSON report carry it;
//! - [`classes`], [`causes`]: every verdict judged, its cause, and every class's false
//!   rate against its budget; [`expect`]: a scenario's expectation of the verdicts;
//!   [`inference`]: the ToR inference's groups against the true ToRs; [`text`]: the
//!   report as text.

pub mod batch;
pub(crate) mod cadence;
pub(crate) mod causes;
pub(crate) mod classes;
pub(crate) mod counters;
pub(crate) mod device;
pub(crate) mod draw;
pub(crate) mod episodes;
pub(crate) mod expect;
pub(crate) mod fault;
pub mod generate;
pub(crate) mod inference;
pub(crate) mod link_alerts;
pub mod ood;
pub(crate) mod place;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod scenario;
pub(crate) mod score;
pub(crate) mod targets;
pub mod text;
pub(crate) mod topology;
pub(crate) mod truth;
pub(crate) mod validate;
pub(crate) mod verdicts;
pub(crate) mod world;
#[cfg(test)]
mod world_tests;

pub use report::{Report, text};
pub use scenario::{FaultKind, Scenario, ScenarioError};

use std::time::Duration;

use crate::health::HealthConfig;
use crate::health::device::DeviceConfig;

/// The thresholds of both engines.
#[derive(Debug, Clone, PartialEq)]
pub struct Engines {
    /// Host plane.
    pub health: HealthConfig,
    /// Device plane.
    pub device: DeviceConfig,
    /// Probe rounds per device-plane round (`device_probe.interval` over the probe
    /// interval; 0 is taken as 1).
    pub device_every: u64,
}

impl Default for Engines {
    /// The shipped thresholds, and the shipped device-plane interval at the shipped probe
    /// interval.
    fn default() -> Self {
        Engines {
            health: HealthConfig::default(),
            device: DeviceConfig::default(),
            device_every: crate::health::plan::shipped_device_every(),
        }
    }
}

/// Command-line overrides of a scenario (today's `simulate` flags).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--nodes`.
    pub nodes: Option<usize>,
    /// `--hours`.
    pub hours: Option<f64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--group-size`.
    pub group_size: Option<usize>,
    /// `--no-congestion`: drop every congestion process.
    pub no_congestion: bool,
    /// `--probe-interval`: the cadence the scenario is run at (None: the shipped
    /// `probe.interval`); a scenario written in other rounds is rescaled to it
    /// ([`cadence::at_interval`]).
    pub probe_interval: Option<Duration>,
}

impl Overrides {
    /// The scenario with these overrides, checked again (`file` names it in messages).
    pub fn apply(&self, mut s: Scenario, file: &str) -> Result<Scenario, ScenarioError> {
        if let Some(n) = self.nodes {
            s.fleet.nodes = n;
        }
        if let Some(h) = self.hours {
            s.fleet.hours = Some(h);
            s.fleet.rounds = None;
        }
        if let Some(x) = self.seed {
            s.fleet.seed = x;
        }
        if let Some(g) = self.group_size {
            s.fleet.group_size = g;
        }
        if self.no_congestion {
            s.congestion.clear();
        }
        let s = s.check(file)?;
        let interval = self
            .probe_interval
            .unwrap_or(crate::health::plan::SHIPPED_PROBE_INTERVAL);
        let from = s.fleet.round_seconds;
        if from == interval.as_secs_f64() {
            return Ok(s);
        }
        // The file was fine as written; a problem now comes from the rescaling (a rate
        // above 1 per round at a longer interval, say), and the message says so.
        cadence::at_interval(&s, interval)
            .check(file)
            .map_err(|e| match e {
                ScenarioError::Invalid(problems) => ScenarioError::Invalid(
                    problems
                        .into_iter()
                        .map(|mut p| {
                            p.reason = format!(
                                "{} (the scenario's {from} s rounds rescaled to a {} s probe interval)",
                                p.reason,
                                interval.as_secs_f64()
                            );
                            p
                        })
                        .collect(),
                ),
                other => other,
            })
    }
}

/// Runs a checked scenario through the engines and scores it.
///
/// ```
/// use hcclwatch::simulate::{Engines, FaultKind, Overrides, Scenario, simulate};
///
/// // Sixteen nodes probed for two hours; node 5 is 50 % slower on every probe it sends or
/// // receives, and nothing else is wrong.
/// let written = Scenario::from_toml(
///     r#"
///     name = "one-slow-node"
///     [fleet]
///     nodes = 16
///     hours = 2
///     seed = 7
///
///     [[fault]]
///     kind = "slow_node"
///     nodes = [5]
///     magnitude = 0.5
///     "#,
///     "example.toml",
/// )?;
/// // As `hcclwatch simulate` runs it: the scenario's 30 s rounds rescaled to the shipped
/// // probe interval.
/// let scenario = Overrides::default().apply(written, "example.toml")?;
/// let report = simulate(&scenario, &Engines::default())?;
/// // Two hours of the shipped 10 s probe rounds.
/// assert_eq!(report.rounds, 2 * 3600 / 10);
/// // One slow-node episode, and it is detected (recommended for quarantine).
/// let slow = report.rows.iter().find(|r| r.kind == FaultKind::SlowNode).unwrap();
/// assert_eq!((slow.injected, slow.detected), (1, 1));
/// // No other node is recommended for quarantine.
/// assert_eq!(report.false_quarantines_per_1000_node_hours, 0.0);
/// # Ok::<(), hcclwatch::simulate::ScenarioError>(())
/// ```
pub fn simulate(s: &Scenario, e: &Engines) -> Result<Report, ScenarioError> {
    let w = world::World::new(s).map_err(|p| {
        ScenarioError::Invalid(
            p.into_iter()
                .map(|(key, reason)| scenario::Problem {
                    location: s.name.clone(),
                    key,
                    reason,
                })
                .collect(),
        )
    })?;
    let t = run::run(&w, &e.health, &e.device, e.device_every);
    Ok(report::report(&w, &t, e.health.window as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped scenarios at reduced sizes (nodes, hours), so that the suite stays
    /// quick, run at the shipped probe interval; `scripts/simulate-all.sh` runs them at
    /// full size. With so few port episodes the pooled port-time p95 is the slowest one:
    /// at 3 h it was 12 device rounds over 8 episodes, at 4 h 7 over 7, at 6 h 11 over 9
    /// (the full-size pool and the held-out batch, 52 episodes, judge that target: 10 and
    /// 7).
    const REDUCED: &[(&str, Option<usize>, f64)] = &[
        ("campaign", None, 3.0),
        ("shapes", Some(192), 3.0),
        ("tor-fabric", Some(128), 6.0),
        ("device", Some(48), 4.0),
        ("hard-faults", None, 3.0),
        ("sweep", Some(1024), 4.0),
        ("quiet", Some(256), 4.0),
    ];

    fn shipped(name: &str) -> Scenario {
        let path = format!("{}/scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
        Scenario::load(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The targets the thresholds were tuned to (issues 15 and 17), as the scorer names
    /// them now: the false-quarantine target counts NPU-port quarantines too (a cordon).
    /// The targets issue 24 added (every class's false-verdict budget, the localisation of
    /// ToR and fabric events, port precision) record today's engines, failures included;
    /// `docs/detection.md` has them.
    const TUNED: &[&str] = &[
        "straggler precision",
        "recall ≥ 0.95, slow nodes ≥ 20 %",
        "link precision",
        "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp)",
        "slow nodes ≥ 20 % (step)",
        "false node quarantine verdicts",
        "false cordon verdicts",
        "no quarantine from",
        "hard faults recommended",
        "ports with ≥ 5 % loss",
        "those ports localised",
        "no port quarantine from",
        "device-plane probe traffic",
    ];

    /// The tuned target today's engines miss on the pooled runs once a time target times
    /// every episode an event did not cross on its own probes (issue 24: before, any dip
    /// or ToR event anywhere left the episode out): the NPU-port suspect time, p95 17
    /// device rounds over the 20 timed episodes of the in-sample held-out pool, against
    /// 10. The reduced shipped set met it once the device engine judged a ToR's ports
    /// against their ToR (issue 26; p95 52 over its 10 timed episodes before).
    /// `docs/detection.md` records it; a test that still lists it once it is met fails, so
    /// that the list stays true.
    const MISSED_POOLED: &[&str] =
        &["ports with ≥ 5 % loss or ≥ 2× RTT (step) suspected within 10 device-plane rounds"];

    /// The tuned target the persistence horizon costs on the shipped set (issue 26): a
    /// straggler whose own interface shows no hardware sign is recommended only after
    /// `health.uncorroborated_hold` (180 rounds) of steady slowness its counters did not
    /// explain, because steady congestion they miss looks the same until it ends; none of
    /// the shipped scenarios' stragglers shows one (their `hardware` chance is 0), so
    /// sweep's p95 is about 200 rounds against 20. `docs/detection.md` records it.
    const MISSED_SHIPPED: &[&str] = &["slow nodes ≥ 20 % (step) recommended within 20 rounds"];

    /// The reduced `shapes` (192 nodes, 3 hours, its shipped seed) misses one degraded
    /// link of six since varying stragglers that move as one are recommended (issue 26):
    /// more nodes re-paired change the simulator's later draws, node 138 becomes a
    /// suspect by chance 28 rounds before its link to node 136 degrades, and the link's
    /// slow probes keep it from the 60 clean rounds it needs to leave suspect until the
    /// run ends, so the pair never has two healthy ends for its verdict. The same world
    /// with seeds 1 to 8 finds 6/6 links before and after, and the full-size `shapes`
    /// 12 of 12. `docs/detection.md` records it; a test that still lists it once it is
    /// met fails, so that the list stays true. Pinned to its count, so that another link
    /// lost there still fails.
    /// The link alert cannot fire on the link that has no verdict: the same miss.
    const MISSED_SHAPES: &[&str] = &[
        "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link verdict: 5/6 =",
        "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link alert: 5/6 =",
    ];

    /// The same miss in the pool of the reduced runs (14 degraded links).
    const MISSED_SHAPES_POOLED: &[&str] = &[
        "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link verdict: 13/14 =",
        "recall ≥ 0.95, degraded links ≥ 20 % (step, ramp): link alert: 13/14 =",
    ];

    /// The pooled misses, by target, must be exactly `known`.
    fn pooled_misses_are(r: &Report, known: &[&str]) {
        let missed = not_met(r);
        let is_known = |m: &String| known.iter().any(|k| m.contains(k));
        assert!(missed.iter().all(is_known), "{missed:#?}");
        assert_eq!(missed.len(), known.len(), "{missed:#?}");
    }

    fn not_met(r: &Report) -> Vec<String> {
        r.targets
            .iter()
            .filter(|t| t.ok == Some(false) && TUNED.iter().any(|p| t.target.starts_with(p)))
            .map(|t| format!("{}: {}: {}", r.scenario, t.target, t.value))
            .collect()
    }

    /// Every shipped scenario meets every tuned target it has faults for, and the time
    /// targets hold on their pooled episodes.
    #[test]
    fn every_shipped_scenario_meets_its_targets_at_reduced_size() {
        let mut runs = Vec::new();
        for &(name, nodes, hours) in REDUCED {
            let o = Overrides {
                nodes,
                hours: Some(hours),
                ..Overrides::default()
            };
            let s = o.apply(shipped(name), name).unwrap();
            let r = simulate(&s, &Engines::default()).unwrap();
            let known: &[&str] = match name {
                "sweep" => MISSED_SHIPPED,
                "shapes" => MISSED_SHAPES,
                _ => &[],
            };
            pooled_misses_are(&r, known);
            runs.push(r);
        }
        let pooled = batch::pool(&runs);
        // The pool's degraded links are 14, so shapes' one missed link is a pooled miss too.
        pooled_misses_are(&pooled, &[MISSED_SHIPPED, MISSED_SHAPES_POOLED].concat());
        // Every kind of fault and every shape is exercised by the shipped set.
        let kinds: std::collections::BTreeSet<_> = pooled.rows.iter().map(|r| r.kind).collect();
        let shapes: std::collections::BTreeSet<_> = pooled.rows.iter().map(|r| r.shape).collect();
        assert_eq!(kinds.len(), 7, "{kinds:?}");
        assert_eq!(shapes.len(), 4, "{shapes:?}");
    }

    fn without_timing(mut r: Report) -> Report {
        r.node_rounds_per_second = 0.0;
        if let Some(d) = &mut r.device {
            d.port_rounds_per_second = 0.0;
        }
        r
    }

    #[test]
    fn a_seed_gives_one_report_and_another_seed_another() {
        let o = |seed| Overrides {
            nodes: Some(64),
            hours: Some(1.5),
            seed: Some(seed),
            ..Overrides::default()
        };
        let run = |seed| {
            let s = o(seed).apply(Scenario::campaign(), "campaign").unwrap();
            without_timing(simulate(&s, &Engines::default()).unwrap())
        };
        let (a, b, c) = (run(3), run(3), run(4));
        let json = |r: &Report| serde_json::to_string(r).unwrap();
        assert_eq!(json(&a), json(&b));
        assert_ne!(json(&a), json(&c));
    }

    /// Scenarios the thresholds were never tuned on, two of each family, pooled: every
    /// target holds but the known miss ([`MISSED_POOLED`]) (the time targets where the pool
    /// has 20 episodes or more; the script runs a hundred).
    #[test]
    fn held_out_generated_scenarios_meet_the_targets() {
        let runs: Vec<Report> = (0..2 * generate::FAMILIES.len() as u64)
            .map(|k| {
                // Drawn in 30 s rounds, run at the shipped probe interval.
                let s = generate::generate(generate::HELD_OUT_SEEDS + 500 + k).unwrap();
                let s = Overrides::default().apply(s, "generated").unwrap();
                simulate(&s, &Engines::default()).unwrap()
            })
            .collect();
        let mut pooled = batch::pool(&runs);
        pooled.targets = targets::check(&pooled, &pooled.episodes);
        pooled_misses_are(&pooled, MISSED_POOLED);
        assert!(pooled.targets.iter().filter(|t| t.ok == Some(true)).count() >= 8);
    }

    /// Links between probe groups are in the world but no probe crosses them: the report
    /// lists them apart and their recall target says they were not found, instead of
    /// the validator refusing them.
    #[test]
    fn links_between_probe_groups_are_reported_not_found() {
        let path = format!(
            "{}/scenarios/world/cross-group.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let s = Scenario::load(std::path::Path::new(&path)).unwrap();
        let o = Overrides {
            hours: Some(3.0),
            probe_interval: Some(Duration::from_secs(30)),
            ..Overrides::default()
        };
        let r = simulate(&o.apply(s, "cross-group").unwrap(), &Engines::default()).unwrap();
        let far = r.rows.iter().find(|x| x.band == "between groups").unwrap();
        assert_eq!((far.injected, far.detected), (3, 0));
        let t = r
            .targets
            .iter()
            .find(|t| t.target.contains("between probe groups"))
            .unwrap();
        assert_eq!((t.status, t.value.as_str()), ("not met", "0/3 = 0.000"));
        // The dip between groups reaches no probe group: nothing can flag it.
        let dip = r
            .episodes
            .iter()
            .find(|o| o.kind == scenario::FaultKind::FabricDip);
        assert_eq!(dip.map(|o| o.detected), Some(None));
    }

    /// The ToR inference is scored against the true ToRs: a ToR slow for a while is one
    /// group and nothing else is; a fleet where nothing is slow infers nothing, and says
    /// so (no precision), never a made-up group.
    #[test]
    fn the_tor_inference_is_scored_against_the_true_tors() {
        let scenario = |faults: &str| {
            let text = format!(
                "name = \"infer\"\ndescription = \"t\"\n[fleet]\nnodes = 48\ngroup_size = 48\ntor_size = 8\nhours = 2\nseed = 5\n{faults}"
            );
            let s: Scenario = toml::from_str(&text).unwrap();
            Overrides::default().apply(s, "infer").unwrap()
        };
        // ToR 1 (nodes 8–15) 30 % slow for 100 rounds.
        let slow = "[[fault]]\nkind = \"slow_tor\"\ntors = [1]\nmagnitude = 0.3\nonset = 200\nrounds = 100\n";
        let r = simulate(&scenario(slow), &Engines::default()).unwrap();
        let a = r.topology_inference.clone().expect("the fleet has ToRs");
        // Six ToRs of eight in one probe group: 6 × 28 same-ToR pairs; ToR 1 found whole.
        assert_eq!(a.pairs_same_tor, 168);
        assert_eq!((a.groups, a.pure_groups, a.nodes_placed), (1, 1, 8));
        assert_eq!(a.inferred, vec![(8..16).collect::<Vec<usize>>()]);
        assert_eq!(a.precision, Some(1.0));
        assert_eq!(a.recall, Some(28.0 / 168.0));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["topology_inference"]["pairs_right"], 28);
        assert!(text(&r).contains("Topology inference"), "{}", text(&r));
        let quiet = simulate(&scenario(""), &Engines::default()).unwrap();
        let q = quiet.topology_inference.expect("the fleet has ToRs");
        assert_eq!((q.groups, q.precision), (0, None));
    }

    /// A dip on one ToR's uplinks (every probe between its eight members and the rest of
    /// the group 35 % slower for 700 rounds, none between two of them) is no member's: at
    /// the shipped settings none is recommended for quarantine (before, four of them
    /// were, one by one, past the persistence horizon: re-pairings with known-good peers
    /// elsewhere cross the same uplinks). A 25 % straggler behind those uplinks is still
    /// recommended, and only it.
    #[test]
    fn a_tor_whose_uplinks_are_slow_cordons_none_of_its_members_but_its_straggler() {
        let scenario = |faults: &str| {
            let text = format!(
                "name = \"uplinks\"\ndescription = \"t\"\n[fleet]\nnodes = 96\ngroup_size = 96\n\
                 tor_size = 8\nspines = 5\nhours = 3\nseed = 5\n[[fault]]\nkind = \"fabric_dip\"\n\
                 scope = \"tor_uplinks\"\nat = [8]\nmagnitude = 0.35\nonset = 200\nrounds = 700\n{faults}"
            );
            let s: Scenario = toml::from_str(&text).unwrap();
            let s = Overrides::default().apply(s, "uplinks").unwrap();
            simulate(&s, &Engines::default()).unwrap()
        };
        let recommended = |r: &Report| -> Vec<(String, bool)> {
            r.verdicts
                .iter()
                .filter(|v| v.class == "node" && v.level == "quarantine")
                .map(|v| (v.entity.clone(), v.correct))
                .collect()
        };
        let r = scenario("");
        // The dip reached the members (nodes 64-71 were suspected), and none was
        // recommended.
        let members: Vec<String> = (64..72).map(|i| format!("node {i}")).collect();
        let suspected: std::collections::BTreeSet<&str> = r
            .verdicts
            .iter()
            .filter(|v| v.class == "node" && v.first >= 200 && members.contains(&v.entity))
            .map(|v| v.entity.as_str())
            .collect();
        assert!(suspected.len() >= 4, "only {suspected:?} were suspected");
        assert_eq!(recommended(&r), vec![]);
        // The uplinks are named for the network team: one mark on ToR 8 (its own class),
        // begun within a turn of the stride after the dip's onset (the mark waits for the
        // ToR's own probes measured since, which 96 rounds measure once each), on no other
        // ToR, and no ToR verdict (the ToR's own probes are fine).
        let onset = r
            .episodes
            .iter()
            .find(|e| e.kind == FaultKind::FabricDip)
            .unwrap()
            .onset;
        let tors: Vec<(&str, &str, bool, bool)> = r
            .verdicts
            .iter()
            .filter(|v| v.class.starts_with("ToR"))
            .map(|v| (v.class, v.entity.as_str(), v.correct, v.first <= onset + 96))
            .collect();
        assert_eq!(tors, [("ToR uplinks", "tor 8", true, true)]);
        let r = scenario(
            "[[fault]]\nkind = \"slow_node\"\nnodes = [66]\nmagnitude = 0.25\nonset = 300\n",
        );
        assert_eq!(recommended(&r), vec![("node 66".to_string(), true)]);
    }

    /// A quiet fleet (no fault at all) is still judged on every class: its false suspects
    /// (congestion is real slowness, which the suspect level cannot tell from a
    /// straggler) break their budget, and the report says so instead of `n/a`; the ToR
    /// class is judged too.
    #[test]
    fn a_fleet_without_faults_is_judged_on_every_class() {
        let o = Overrides {
            nodes: Some(128),
            hours: Some(2.0),
            ..Overrides::default()
        };
        let s = o.apply(shipped("quiet"), "quiet").unwrap();
        let r = simulate(&s, &Engines::default()).unwrap();
        assert_eq!(r.classes.len(), classes::CLASSES.len());
        let status = |prefix: &str| {
            r.targets
                .iter()
                .find(|t| t.target.starts_with(prefix))
                .map(|t| t.status)
        };
        let suspects = &r.classes[0];
        assert_eq!(suspects.class, "node suspect");
        // 128 nodes × 2 h: any false suspect is over a budget of 0.5 per 1000 node-h.
        assert!(
            suspects.false_verdicts > 0 && suspects.correct == 0,
            "{suspects:?}"
        );
        assert_eq!(status("false node suspect verdicts"), Some("not met"));
        assert_eq!(status("false link verdicts"), Some("met"));
        // Judged, whatever it found: since the dips change (issue 26, item 5) this
        // reduced world makes one one-round false ToR verdict from noise (round 201; the
        // full-size quiet world makes 2, against 4 before).
        let tors = status("false ToR verdicts");
        assert!(matches!(tors, Some("met" | "not met")), "{tors:?}");
        assert_eq!(
            status("false port suspect verdicts"),
            Some("nothing to judge")
        );
        // Nothing to time is said, never met.
        assert_eq!(
            status("slow nodes ≥ 20 % (step) recommended"),
            Some("nothing to judge")
        );
        assert_eq!(status("straggler precision"), Some("nothing to judge"));
    }
}
