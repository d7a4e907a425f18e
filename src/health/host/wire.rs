//! The engine's state is a wire form: members hash it (`probe::group`) and take over the
//! majority's, so members of two versions must write the same bytes for the same state.

use super::*;

/// Two nodes, one round of two 1 s probes, worked out by hand: residuals and z 0 (the
/// round median is 1 s, the spread its floor), both nodes within bounds once, the
/// baseline at ln 1, two probes judged and none slow (too few for a partial-fabric
/// test, or for the base rate's warm-up: it stays unknown).
#[test]
fn one_quiet_round_has_this_wire_form() {
    let mut e = HealthEngine::new(2, HealthConfig::default());
    e.step(&RoundInput {
        probes: vec![
            Probe {
                src: 0,
                dst: 1,
                seconds: 1.0,
            },
            Probe {
                src: 1,
                dst: 0,
                seconds: 1.0,
            },
        ],
        ..RoundInput::default()
    });
    let node = r#"{"state":"Healthy","out_hist":[[0.0,0.0]],"in_hist":[[0.0,0.0]],"below":1,"above":0,"quiet":0,"since":0,"confirm_pending":false,"confirmations":0,"hard_clear":null,"reports":[]}"#;
    let want = format!(
        r#"{{"nodes":[{node},{node}],"round":1,"baseline":0.0,"fabric_hist":[false],"slow_rate":null,"partial_hist":[[0,2]],"links":[],"held":[]}}"#
    );
    assert_eq!(String::from_utf8(e.snapshot()).unwrap(), want);
}

/// Eight nodes through 60 rounds that reach every field: node 5 steadily slow and
/// re-paired (suspect, confirmed, recommended), a hard fault on node 2 (its hold-down
/// counting), a reporter (6) the others contradict, a slow pair (6, 7) re-measured,
/// node 5's uplink congested every other round and its PCIe link trained down, node 3 absent for a while, and a
/// fabric-wide slowdown in rounds 44 to 49.
fn rich_run() -> Vec<Vec<u8>> {
    let n = 8;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let jitter = |i: usize| (i % 3) as f64 * 0.002;
    let (mut confirm, mut links): (Vec<usize>, Vec<(usize, usize)>) = (vec![], vec![]);
    let mut snaps = Vec::new();
    for r in 0..60usize {
        let mut input = RoundInput {
            hard_faults: if (10..14).contains(&r) {
                vec![(2, "card dropped".into())]
            } else {
                vec![]
            },
            reports: [(1, 1.3), (4, 1.3), (3, 10.0), (6, 1.0)]
                .map(|(reporter, seconds)| Report {
                    reporter,
                    accused: 5,
                    seconds,
                })
                .to_vec(),
            congested: if r % 2 == 0 { vec![5] } else { vec![] },
            hardware: vec![(5, Signs::PCIE)],
            absent: if (30..35).contains(&r) {
                vec![3]
            } else {
                vec![]
            },
            ..RoundInput::default()
        };
        let stride = 1 + r % 7;
        for i in 0..n {
            let j = (i + stride) % n;
            if (30..35).contains(&r) && (i == 3 || j == 3) {
                continue;
            }
            let mut s = 1.0 + jitter(i);
            if i == 5 || j == 5 {
                s *= 1.3;
            }
            if (i, j) == (6, 7) {
                s *= 1.5;
            }
            if (44..50).contains(&r) {
                s *= 1.25;
            }
            input.probes.push(Probe {
                src: i,
                dst: j,
                seconds: s,
            });
        }
        for &s in &confirm {
            for k in [1, 3, 6] {
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + k) % n,
                    seconds: if s == 5 { 1.3 } else { 1.0 },
                });
            }
        }
        for &(a, b) in &links {
            input.link_probes.push(Probe {
                src: a,
                dst: b,
                seconds: if (a, b) == (6, 7) { 1.5 } else { 1.0 },
            });
        }
        let out = e.step(&input);
        confirm = out.confirm_requests;
        links = out.link_requests;
        if [12, 25, 40, 47, 59].contains(&r) {
            snaps.push(e.snapshot());
        }
    }
    snaps
}

/// The states of [`rich_run`] as the engine wrote them before it was split into
/// `health/host/` (recorded with `UPDATE_GOLDEN=1`; a change here is a change of the
/// wire form, and members of two versions would stop agreeing on their digests).
#[test]
fn a_rich_run_keeps_its_wire_form() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/golden/health-engine-state.jsonl"
    );
    let mut got = Vec::new();
    for s in rich_run() {
        got.extend(s);
        got.push(b'\n');
    }
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &got).unwrap();
    }
    let want = std::fs::read(path).unwrap();
    assert!(got == want, "the engine state's wire form changed");
}

/// Each state of [`rich_run`], taken over by a new engine, is written back byte for byte:
/// a member that takes a group's state over holds what the members that hold it do, so the
/// group's digests agree at the next formation.
#[test]
fn a_state_taken_over_is_written_back_as_it_came() {
    for (i, state) in rich_run().into_iter().enumerate() {
        let mut taker = HealthEngine::new(8, HealthConfig::default());
        taker.restore(&state).expect("the engine's own state");
        assert!(taker.snapshot() == state, "state {i} came back changed");
    }
}
