//! `health::HealthEngine::restore`: the engine state a member sends when a group forms.
//! Any bytes give `Ok` or an error; an error leaves the engine exactly as it was; a
//! restored engine has as many nodes as before, keeps working (rounds after it neither
//! panic nor name a node outside the group), and snapshots to bytes that restore again
//! to the same state, before those rounds and after them.
#![no_main]

use hcclwatch::health::hardware::Signs;
use hcclwatch::health::{HealthConfig, HealthEngine, Probe, Report, RoundInput};
use libfuzzer_sys::fuzz_target;

/// A round over `n` nodes, every one sending to the next; node 0 twice as slow, and
/// confirmations, a link re-measurement and a hard fault, so that every branch of `step`
/// reads the restored state.
fn round(n: usize, k: u64) -> RoundInput {
    let probe = |src: usize, dst: usize, seconds: f64| Probe { src, dst, seconds };
    RoundInput {
        probes: (0..n)
            .map(|i| probe(i, (i + 1) % n, if i == 0 { 2e-3 } else { 1e-3 }))
            .collect(),
        confirmations: (1..n).map(|p| probe(0, p, 2e-3)).collect(),
        hard_faults: if k == 2 && n > 2 {
            vec![(n - 1, "fuzz".into())]
        } else {
            vec![]
        },
        link_probes: vec![probe(0, n - 1, 3e-3)],
        absent: if n > 3 { vec![n - 2] } else { vec![] },
        // Each peer's own timing of its re-pairing with node 0, as the consistency check
        // reads them.
        reports: (1..n)
            .map(|reporter| Report {
                reporter,
                accused: 0,
                seconds: 2e-3,
            })
            .collect(),
        // Every other round node 0's own counters explain its slowness.
        congested: if k % 2 == 1 { vec![0] } else { vec![] },
        // Every third round node 0's own interface shows a trained-down PCIe link.
        hardware: if k % 3 == 0 {
            vec![(0, Signs::PCIE)]
        } else {
            vec![]
        },
        tors: Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, bytes)) = data.split_first() else {
        return;
    };
    let n = 1 + usize::from(first % 16);
    let mut engine = HealthEngine::new(n, HealthConfig::default());
    let before = engine.snapshot();
    if engine.restore(bytes).is_err() {
        assert_eq!(
            engine.snapshot(),
            before,
            "a refused state changed the engine"
        );
        return;
    }
    assert_eq!(engine.states().len(), n);
    let snap = engine.snapshot();
    let mut again = HealthEngine::new(n, HealthConfig::default());
    again
        .restore(&snap)
        .expect("an engine's own snapshot restores");
    assert_eq!(again.snapshot(), snap, "a snapshot round-trips");
    for k in 1..=3 {
        let out = engine.step(&round(n, k));
        assert_eq!(out.scores.len(), n);
        assert_eq!(engine.states().len(), n);
        for t in &out.transitions {
            assert!(
                t.node < n,
                "transition of node {} in a group of {n}",
                t.node
            );
        }
        for &x in &out.confirm_requests {
            assert!(x < n, "confirmation request for node {x} in a group of {n}");
        }
        for &(a, b) in out.link_verdicts.iter().chain(&out.link_requests) {
            assert!(a < n && b < n, "link ({a}, {b}) in a group of {n}");
        }
    }
    // What the engine learnt from the restored state is still a state a member takes.
    let later = engine.snapshot();
    let mut taker = HealthEngine::new(n, HealthConfig::default());
    taker
        .restore(&later)
        .expect("the state after rounds on a restored one restores");
    assert_eq!(taker.snapshot(), later, "that state round-trips");
});
