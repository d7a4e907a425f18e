//! The rougher world's effects, each measured on a world without noise (no drift, swing,
//! offsets, noise or spikes), where a healthy probe takes exactly one unit and a ping
//! exactly `rtt_us` with no loss: whatever differs is the effect under test.

use super::draw::Draw;
use super::scenario::Scenario;
use super::world::World;

const QUIET: &str = "[noise]\nsd = 0\nlink_offset_sd = 0\nspike_rate = 0\ndrift_sd = 0\n\
                     daily_amplitude = 0\nbusy_rate = 0\ntails = \"normal\"\n\
                     [device]\nrtt_sd = 0\nloss = 0\n";

fn world(fleet: &str, rest: &str) -> World {
    let text = format!("[fleet]\n{fleet}\n{QUIET}{rest}");
    let s = Scenario::from_toml(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    World::new(&s).unwrap()
}

/// A dip along the topology slows exactly the pairs of its element: one spine's cross-ToR
/// pairs, the pairs between two ToRs, every pair with an end on one ToR and the other
/// elsewhere.
#[test]
fn a_scoped_dip_slows_exactly_the_pairs_of_its_element() {
    let fleet = "nodes = 32\ngroup_size = 32\ntor_size = 8\nspines = 4\nrounds = 200";
    let dip = |scope: &str, at: &str| {
        world(
            fleet,
            &format!(
                "[[fault]]\nkind = \"fabric_dip\"\nscope = \"{scope}\"\nat = {at}\nmagnitude = 0.5\nonset = 50\nrounds = 100\n"
            ),
        )
    };
    let tor = |n: usize| n / 8;
    type Touched<'a> = &'a dyn Fn(&World, usize, usize) -> bool;
    let cases: [(&str, &str, Touched); 3] = [
        ("spine", "[2]", &|w, a, b| {
            tor(a) != tor(b) && w.spine_of(a, b) == 2
        }),
        ("tor_pair", "[0, 3]", &|_, a, b| {
            let mut t = [tor(a), tor(b)];
            t.sort_unstable();
            t == [0, 3]
        }),
        ("tor_uplinks", "[1]", &|_, a, b| {
            tor(a) != tor(b) && (tor(a) == 1 || tor(b) == 1)
        }),
    ];
    for (scope, at, touched) in cases {
        let w = dip(scope, at);
        let mut d = Draw::new(1, 3.0);
        let (mut hit, mut pairs) = (0, 0);
        for a in 0..32 {
            for b in (0..32).filter(|b| *b != a) {
                let during = w.host_probe(&mut d, 100, a, b);
                let before = w.host_probe(&mut d, 10, a, b);
                assert!(
                    (before - 1.0).abs() < 1e-12,
                    "{scope}: {a}→{b} before {before}"
                );
                let want = if touched(&w, a, b) { 1.5 } else { 1.0 };
                assert!(
                    (during - want).abs() < 1e-9,
                    "{scope}: {a}→{b}: {during}, want {want}"
                );
                hit += usize::from(touched(&w, a, b));
                pairs += 1;
            }
        }
        assert!(hit > 0 && hit < pairs, "{scope}: {hit} of {pairs}");
    }
}

/// A varying straggler's slowdown changes from round to round around its magnitude (the
/// same for every probe of a round); a random one is on about on ÷ (on + off) of the time.
#[test]
fn a_varying_straggler_varies_by_round_and_a_random_one_comes_and_goes() {
    let w = world(
        "nodes = 8\ntor_size = 8\nrounds = 20000\nwarmup_rounds = 40",
        "[[fault]]\nkind = \"slow_node\"\nnodes = [2]\nmagnitude = 0.2\nspread = 0.5\nonset = 40\n\
         [[fault]]\nkind = \"slow_node\"\nnodes = [5]\nmagnitude = 0.2\nshape = \"random\"\non_rounds = 10\noff_rounds = 30\nonset = 40\n",
    );
    let mut d = Draw::new(1, 3.0);
    let slow: Vec<f64> = (100..10100)
        .map(|r| {
            let x = w.host_probe(&mut d, r, 2, 0);
            assert_eq!(x, w.host_probe(&mut d, r, 2, 1), "one draw per round");
            x - 1.0
        })
        .collect();
    let mean = slow.iter().sum::<f64>() / slow.len() as f64;
    let sd = (slow.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / slow.len() as f64).sqrt();
    // magnitude × (1 + 0.5 z), cut at 0 (z < −2 happens 2 % of rounds): mean about 0.2,
    // spread about 0.1.
    assert!((mean - 0.2).abs() < 0.005, "mean {mean}");
    assert!((sd - 0.1).abs() < 0.01, "sd {sd}");
    let on = (100..20000)
        .filter(|r| w.host_probe(&mut d, *r, 5, 0) > 1.1)
        .count() as f64
        / 19900.0;
    assert!(
        (on - 0.25).abs() < 0.04,
        "on {on} of the time, want 10 / 40"
    );
}

/// A silent hard fault loses every ping to and from its node's NPU ports while it lasts,
/// and nothing else; device-plane ToR congestion loses packets on the ToR's pings.
#[test]
fn a_silent_hard_fault_and_tor_loss_drop_device_pings() {
    let w = world(
        "nodes = 16\nnpus_per_node = 2\ntor_size = 8\nrounds = 400",
        "[[fault]]\nkind = \"hard_fault\"\nnodes = [3]\nsilent = true\nonset = 100\nrounds = 50\n\
         [[congestion]]\non = \"tor\"\nplane = \"device\"\nat = [1]\nrate = 1\nmean_rounds = 100000\nmagnitude_sd = 0\nloss = 0.5\n",
    );
    let mut d = Draw::new(1, 3.0);
    // Node 3's ports are 6 and 7; node 4 (port 8) is on ToR 0 too; ToR 1 holds nodes 8-15.
    let got = |d: &mut Draw, r: u64, a: usize, b: usize| w.device_ping(d, r, a, b).received;
    assert_eq!(got(&mut d, 120, 6, 8), 0);
    assert_eq!(got(&mut d, 120, 8, 7), 0);
    assert_eq!(got(&mut d, 60, 6, 8), 3);
    assert_eq!(got(&mut d, 200, 6, 8), 3);
    let (mut sent, mut received) = (0, 0);
    for r in 10..2000 {
        let p = w.device_ping(&mut d, 10 + r % 380, 0, 20);
        sent += p.sent;
        received += p.received;
    }
    let lost = 1.0 - f64::from(received) / f64::from(sent);
    assert!(
        (lost - 0.5).abs() < 0.03,
        "lost {lost} through the lossy ToR"
    );
}

/// Device-plane congestion shows in the NPU ports' own counters as `signal` says: a port
/// whose own link is congested by a visible episode is flagged, and with `signal = 0`
/// no port is (the scenario's episodes are the same either way).
#[test]
fn device_congestion_shows_in_the_ports_counters_by_its_signal() {
    let with = |signal: &str| {
        world(
            "nodes = 8\nnpus_per_node = 2\ntor_size = 4\nrounds = 400",
            &format!(
                "[[congestion]]\non = \"uplink\"\nplane = \"device\"\nat = [5]\nrate = 1\nmean_rounds = 100000\nmagnitude_sd = 0\nsignal = {signal}\n"
            ),
        )
    };
    let ports: Vec<usize> = (0..16).collect();
    let flagged = |w: &World| w.device_congested(200, &ports, &[]);
    assert_eq!(flagged(&with("1")).into_iter().collect::<Vec<_>>(), [5]);
    assert!(flagged(&with("0")).is_empty());
}
