//! Placing a scenario's faults: listed targets as written, the rest on distinct free nodes
//! drawn with the seed; onsets, lengths and strengths drawn from their spans; a dip's
//! spine or ToRs and a random fault's on and off stretches.

use super::draw::{Draw, unit_hash};
use super::fault::{Fault, Target};
use super::scenario::{DipScope, FaultKind, FaultSpec, Scenario, Shape};
use super::topology::Topology;
use super::validate::{fault_count, fault_plane};

/// Seeds the stream of a random-shape fault's on and off stretches (one stream per fault,
/// so that other faults draw what they drew before such faults existed).
const RANDOM_SHAPE_SEED: u64 = 0x7261_6e64_6f6d_0001;
/// Seeds the order-free draw of whether a slow node shows a hardware sign.
const HARDWARE_SEED: u64 = 0x6877_7369_676e_0001;
/// Seeds the order-free spread of varying stragglers.
const SPREAD_SEED: u64 = 0x7370_7265_6164_0001;

/// Places every fault; onsets uniform between the warm-up and the last stretch of the run
/// (a pair of a probe group meets once per group − 1 rounds, so faults start at least
/// three such cycles, and at least 60 rounds, before the end). Fails (with `(key,
/// reason)`) only when random placement cannot find room.
pub fn faults(
    s: &Scenario,
    t: &Topology,
    d: &mut Draw,
    rounds: u64,
) -> Result<Vec<Fault>, Vec<(String, String)>> {
    let mut free = vec![true; t.nodes];
    let g = s.fleet.group_size.min(t.nodes);
    let tail = (3 * g.saturating_sub(1) as u64).max(60);
    let last = rounds.saturating_sub(tail).max(s.fleet.warmup_rounds + 1);
    // Whole ToRs first, then pairs within a group, then single nodes, so that random
    // placement finds room; numbers follow the file's order.
    let rank = |k: &FaultKind| match k {
        FaultKind::SlowTor => 0,
        FaultKind::DegradedLink | FaultKind::PortPair => 1,
        _ => 2,
    };
    let mut order: Vec<usize> = (0..s.faults.len()).collect();
    order.sort_by_key(|&k| rank(&s.faults[k].kind));
    let mut placed: Vec<(usize, usize, Fault)> = Vec::new();
    for k in order {
        let spec = &s.faults[k];
        for j in 0..fault_count(s, spec) {
            let target = place(spec, j, t, d, &mut free).ok_or_else(|| {
                vec![(
                    format!("fault[{k}]"),
                    format!(
                        "no room to place {} {} at random on distinct nodes (within one probe group for a link or pair, unless between_groups)",
                        fault_count(s, spec),
                        spec.kind.as_str()
                    ),
                )]
            })?;
            let onset = match spec.onset {
                Some(x) => d.span(x).round() as u64,
                None => d.uniform(s.fleet.warmup_rounds as f64, last as f64) as u64,
            };
            let end = spec
                .rounds
                .map_or(rounds + 1, |x| onset + d.span(x).round().max(1.0) as u64);
            let mut f = fault(spec, target, onset, end, rounds, d);
            f.at = scope_elements(spec, t, d);
            placed.push((k, j, f));
        }
    }
    placed.sort_by_key(|(k, j, _)| (*k, *j));
    let seed = s.fleet.seed;
    Ok(placed
        .into_iter()
        .enumerate()
        .map(|(id, (k, _, f))| {
            let mut f = Fault {
                id,
                salt: seed ^ SPREAD_SEED,
                ..f
            };
            if f.shape == Shape::Random {
                f.on_spans = on_spans(&s.faults[k], &f, seed);
            }
            let chance = s.faults[k].hardware.unwrap_or(0.0);
            f.hardware = chance > 0.0 && unit_hash(seed ^ HARDWARE_SEED, id as u64, 0) < chance;
            f
        })
        .collect())
}

/// The spine, ToR pair or ToR a scoped dip touches: listed, else drawn.
fn scope_elements(spec: &FaultSpec, t: &Topology, d: &mut Draw) -> Vec<usize> {
    if !spec.at.is_empty() {
        return spec.at.clone();
    }
    match spec.scope {
        Some(DipScope::Spine) => vec![d.below(t.spines)],
        Some(DipScope::TorUplinks) => vec![d.below(t.tors())],
        Some(DipScope::TorPair) => {
            let a = d.below(t.tors());
            let b = (a + 1 + d.below(t.tors().saturating_sub(1))) % t.tors().max(1);
            vec![a, b]
        }
        _ => Vec::new(),
    }
}

/// A random-shape fault's on stretches: from onset, on first, exponential lengths with
/// the spec's means, until the fault ends.
fn on_spans(spec: &FaultSpec, f: &Fault, seed: u64) -> Vec<(u64, u64)> {
    let (on, off) = (
        spec.on_rounds.unwrap_or(1.0),
        spec.off_rounds.unwrap_or(1.0),
    );
    let mut d = Draw::new(
        seed ^ RANDOM_SHAPE_SEED ^ (f.id as u64).wrapping_mul(0x9e37),
        3.0,
    );
    let mut out = Vec::new();
    let mut r = f.onset;
    while r < f.end {
        let len = d.exp(on).round().max(1.0) as u64;
        out.push((r, (r + len).min(f.end)));
        r += len + d.exp(off).round().max(1.0) as u64;
    }
    out
}

fn fault(
    spec: &FaultSpec,
    target: Target,
    onset: u64,
    end: u64,
    rounds: u64,
    d: &mut Draw,
) -> Fault {
    Fault {
        id: 0,
        kind: spec.kind,
        plane: fault_plane(spec),
        target,
        onset,
        end: end.min(rounds + 1),
        persistent: end > rounds,
        magnitude: spec.magnitude.map_or(0.0, |m| d.span(m)),
        loss: spec.loss.map_or(0.0, |m| d.span(m)),
        rtt: spec.rtt.map_or(1.0, |m| d.span(m)),
        share: spec.share.unwrap_or(1.0),
        scope: spec.scope.unwrap_or(DipScope::Random),
        at: Vec::new(),
        spread: spec.spread.unwrap_or(0.0),
        silent: spec.silent,
        // Decided once the fault has its number (in `faults`): its own draw, so that the
        // chance moves no other draw of the scenario.
        hardware: false,
        shape: spec.shape,
        ramp_rounds: spec.ramp_rounds.unwrap_or(1),
        period: spec.period.unwrap_or(1),
        duty: spec.duty.unwrap_or(1.0),
        down_rounds: spec.down_rounds.unwrap_or(0),
        on_spans: Vec::new(),
        salt: 0,
    }
}

/// A free node drawn at random (within group `within` if given), now taken.
fn take(t: &Topology, d: &mut Draw, free: &mut [bool], within: Option<usize>) -> Option<usize> {
    let pool: Vec<usize> = (0..t.nodes)
        .filter(|&i| free[i] && within.is_none_or(|g| t.group_of[i] == g))
        .collect();
    let x = *pool.get(d.below(pool.len()))?;
    free[x] = false;
    Some(x)
}

/// A free node drawn at random outside group `g`, now taken.
fn take_outside(t: &Topology, d: &mut Draw, free: &mut [bool], g: usize) -> Option<usize> {
    let pool: Vec<usize> = (0..t.nodes)
        .filter(|&i| free[i] && t.group_of[i] != g)
        .collect();
    let x = *pool.get(d.below(pool.len()))?;
    free[x] = false;
    Some(x)
}

/// Two free nodes of one probe group (or, `between` groups, of two). The first end is drawn
/// among the free nodes that have a free partner, so that a node without one is neither
/// taken nor lost to later faults (drawing it and then failing used to take it for good,
/// and a fleet with room for the pair could run out); where every free node has a partner,
/// the draws are the ones they always were.
fn pair(t: &Topology, d: &mut Draw, free: &mut [bool], between: bool) -> Option<(usize, usize)> {
    let mut in_group = vec![0usize; t.groups.len()];
    for i in (0..t.nodes).filter(|&i| free[i]) {
        in_group[t.group_of[i]] += 1;
    }
    let all: usize = in_group.iter().sum();
    let has_partner = |i: usize| {
        let own = in_group[t.group_of[i]];
        if between { all > own } else { own > 1 }
    };
    let pool: Vec<usize> = (0..t.nodes)
        .filter(|&i| free[i] && has_partner(i))
        .collect();
    let a = *pool.get(d.below(pool.len()))?;
    free[a] = false;
    let b = if between {
        take_outside(t, d, free, t.group_of[a])
    } else {
        take(t, d, free, Some(t.group_of[a]))
    };
    // A partner exists by the pool's construction.
    b.map(|b| (a, b))
}

/// The `j`-th target of a spec: listed, or drawn among free nodes.
fn place(
    spec: &FaultSpec,
    j: usize,
    t: &Topology,
    d: &mut Draw,
    free: &mut [bool],
) -> Option<Target> {
    let npus = t.npus.max(1);
    let port = |node: usize, npu: usize| node * npus + npu;
    let link = |a, b| Target::Link {
        src: a,
        dst: b,
        both: spec.both_directions,
    };
    Some(match spec.kind {
        FaultKind::SlowNode | FaultKind::HardFault => match spec.nodes.get(j) {
            Some(&n) => Target::Node(n),
            None => Target::Node(take(t, d, free, None)?),
        },
        FaultKind::SlowPort => match spec.ports.get(j) {
            Some(&[n, p]) => Target::Port(port(n, p)),
            None => {
                let n = take(t, d, free, None)?;
                Target::Port(port(n, d.below(npus)))
            }
        },
        FaultKind::DegradedLink => match spec.links.get(j) {
            Some(&[a, b]) => link(a, b),
            None => {
                let (a, b) = pair(t, d, free, spec.between_groups)?;
                link(a, b)
            }
        },
        FaultKind::PortPair => match spec.port_pairs.get(j) {
            Some(&[a, p, b, q]) => Target::PortPair(port(a, p), port(b, q)),
            None => {
                let (a, b) = pair(t, d, free, spec.between_groups)?;
                Target::PortPair(port(a, d.below(npus)), port(b, d.below(npus)))
            }
        },
        FaultKind::SlowTor => match spec.tors.get(j) {
            Some(&x) => Target::Tor(x),
            None => {
                let ok: Vec<usize> = (0..t.tors())
                    .filter(|&x| t.tor_nodes(x).all(|n| free[n]))
                    .collect();
                let x = *ok.get(d.below(ok.len()))?;
                for n in t.tor_nodes(x) {
                    free[n] = false;
                }
                Target::Tor(x)
            }
        },
        FaultKind::FabricDip => Target::Fabric,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six nodes in two probe groups of three.
    fn two_groups() -> Topology {
        let text = "[fleet]\nnodes = 6\ngroup_size = 3\ntor_size = 3\nrounds = 100\n";
        let s = Scenario::from_toml(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let t = Topology::new(&s);
        assert_eq!(
            t.group_of,
            [0, 0, 0, 1, 1, 1],
            "the layout the test assumes"
        );
        t
    }

    /// A node alone in its group is never drawn as a pair's first end, so it stays free
    /// for a later fault: drawing it and failing to find it a partner used to take it for
    /// good (a quarter of the first draws here).
    #[test]
    fn a_pair_leaves_a_node_without_a_partner_free() {
        let t = two_groups();
        for seed in 0..20 {
            let mut free = vec![true, false, false, true, true, true];
            let (a, b) = pair(&t, &mut Draw::new(seed, 3.0), &mut free, false)
                .unwrap_or_else(|| panic!("seed {seed}: room in group 1"));
            assert!(a >= 3 && b >= 3 && a != b, "seed {seed}: {a}, {b}");
            assert!(free[0], "seed {seed}: node 0 was taken");
            assert_eq!(free.iter().filter(|f| **f).count(), 2, "seed {seed}");
        }
    }

    /// With no free node outside the only group that has any, a pair between groups finds
    /// no room and takes nothing.
    #[test]
    fn a_pair_between_groups_without_room_takes_nothing() {
        let t = two_groups();
        let mut free = vec![true, true, true, false, false, false];
        assert_eq!(pair(&t, &mut Draw::new(1, 3.0), &mut free, true), None);
        assert_eq!(free, [true, true, true, false, false, false]);
        let mut free = vec![true, false, false, false, false, true];
        let got = pair(&t, &mut Draw::new(1, 3.0), &mut free, true);
        let (a, b) = got.expect("one node in each group");
        assert_eq!((a.min(b), a.max(b)), (0, 5));
    }
}
