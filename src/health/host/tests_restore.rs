//! Taking over a group's state: a state this engine could not have written, or whose
//! later rounds would break, is refused naming its field; an older release's state is
//! taken; the state written after rounds is taken back.

use super::tests::{pcie, round};
use super::*;

/// Pins: a restored state is checked field by field; one this engine could never have
/// produced is refused and the engine left as it was.
#[test]
fn an_impossible_restored_state_is_refused() {
    let n = 4;
    let mut src = HealthEngine::new(n, HealthConfig::default());
    for r in 0..3 {
        src.step(&round(n, 1 + r % 3, &[], |_| 0.0));
    }
    let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    let long: Vec<(f64, f64)> = vec![(0.1, 1.0); 500];
    v["nodes"][0]["out_hist"] = serde_json::json!(long);
    let mut dst = HealthEngine::new(n, HealthConfig::default());
    let err = dst
        .restore(&serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("out_hist"), "{err}");
    assert_eq!(dst.rounds(), 0);
    // More rounds with a hardware sign than slow rounds: refused, naming the field.
    let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    v["nodes"][1]["slow_rounds"] = serde_json::json!(2);
    v["nodes"][1]["sign_rounds"] = serde_json::json!(3);
    let err = dst
        .restore(&serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nodes.sign_rounds"), "{err}");
    assert_eq!(dst.rounds(), 0);
    // More slow rounds its counters did not explain than slow rounds: refused too.
    let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    v["nodes"][1]["slow_rounds"] = serde_json::json!(2);
    v["nodes"][1]["unexplained"] = serde_json::json!(3);
    let err = dst
        .restore(&serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nodes.unexplained"), "{err}");
    assert_eq!(dst.rounds(), 0);
}

/// Pins: a state whose numbers no engine reaches, and whose later rounds would overflow a
/// counter or carry a value that is not finite into the next state, is refused, naming the
/// field (found by reading the restore against the fuzz target's property: each one was
/// taken before).
#[test]
fn a_state_that_would_break_later_rounds_is_refused() {
    let n = 3;
    let mut src = HealthEngine::new(n, HealthConfig::default());
    for r in 0..3 {
        src.step(&round(n, 1 + r % 3, &[], |_| 0.0));
    }
    let base: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    let huge = serde_json::json!(u64::MAX);
    /// How a case spoils the state.
    type Spoil<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;
    let cases: Vec<(&str, Spoil)> = vec![
        ("round", Box::new(|v| v["round"] = huge.clone())),
        (
            "nodes.below",
            Box::new(|v| v["nodes"][2]["below"] = huge.clone()),
        ),
        (
            "nodes.above",
            Box::new(|v| v["nodes"][0]["above"] = huge.clone()),
        ),
        (
            "nodes.quiet",
            Box::new(|v| v["nodes"][0]["quiet"] = huge.clone()),
        ),
        (
            "nodes.quiet",
            Box::new(|v| {
                v["nodes"][0]["above"] = serde_json::json!(1);
                v["nodes"][0]["quiet"] = serde_json::json!(2);
            }),
        ),
        (
            "nodes.confirmations",
            Box::new(|v| v["nodes"][1]["confirmations"] = huge.clone()),
        ),
        (
            "partial_hist",
            Box::new(|v| v["partial_hist"] = serde_json::json!([[0, u64::MAX], [0, 1]])),
        ),
        (
            "partial_hist",
            Box::new(|v| v["partial_hist"] = serde_json::json!([[5, 4]])),
        ),
        (
            "nodes.out_hist",
            Box::new(|v| v["nodes"][0]["out_hist"] = serde_json::json!([[1e300, 1.0]])),
        ),
        (
            "nodes.in_hist",
            Box::new(|v| v["nodes"][0]["in_hist"] = serde_json::json!([[0.1, 1e300]])),
        ),
        (
            "baseline",
            Box::new(|v| v["baseline"] = serde_json::json!(1e300)),
        ),
        (
            "links",
            Box::new(|v| v["links"] = serde_json::json!([[[0, 1], [1e300]]])),
        ),
        (
            "dip_normal",
            Box::new(|v| {
                v["dip_normal"] = serde_json::json!({
                    "pairs": [{"pair": [0, 1], "tors": null, "shares": [1e300, 1]}],
                    "tor_pairs": [], "tors": []
                })
            }),
        ),
    ];
    for (field, spoil) in &cases {
        let mut v = base.clone();
        spoil(&mut v);
        let mut dst = HealthEngine::new(n, HealthConfig::default());
        let before = dst.snapshot();
        let err = dst
            .restore(&serde_json::to_vec(&v).unwrap())
            .expect_err(field);
        assert!(
            matches!(&err, RestoreError::Invalid { field: f, .. } if f == field),
            "{field}: {err}"
        );
        assert!(dst.snapshot() == before, "{field}: the engine changed");
    }
    // The same state unspoilt is taken: each refusal above is the spoilt field's.
    let mut dst = HealthEngine::new(n, HealthConfig::default());
    dst.restore(&serde_json::to_vec(&base).unwrap())
        .expect("the state as written");
}

/// With no spread floor configured, a round of identical timings (no spread at all) gives
/// every node a finite z, so the state a member sends afterwards is taken by the others
/// (a z of 0/0 was kept in the windows and written as `null`, which no restore takes).
#[test]
fn a_round_without_spread_keeps_the_state_finite() {
    let n = 4;
    let cfg = HealthConfig {
        mad_floor: 0.0,
        ..HealthConfig::default()
    };
    let mut e = HealthEngine::new(n, cfg.clone());
    for r in 0..3 {
        e.step(&round(n, 1 + r % 3, &[], |_| 0.0));
    }
    let state = e.snapshot();
    let mut taker = HealthEngine::new(n, cfg);
    taker
        .restore(&state)
        .expect("a state after rounds without spread");
    assert!(taker.snapshot() == state);
}

/// A state written before the engine counted a varying straggler's unexplained slow
/// rounds (no `unexplained` or `asked_varying` on its nodes) is still taken, its
/// episodes' other counts kept.
#[test]
fn a_state_from_before_the_varying_hold_is_taken() {
    let n = 16;
    let mut src = HealthEngine::new(n, HealthConfig::default());
    for r in 0..15 {
        let mut input = round(n, 1 + r % 7, &[(5, 1.3)], |i| (i % 3) as f64 * 0.002);
        pcie(&mut input, 5);
        src.step(&input);
    }
    let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    let node = &mut v["nodes"][5];
    assert!(
        node["unexplained"].as_u64().is_some_and(|u| u > 0),
        "{node}"
    );
    let slow = node["slow_rounds"].clone();
    let obj = node.as_object_mut().unwrap();
    obj.remove("unexplained");
    obj.remove("asked_varying");
    obj.remove("agreeing");
    let mut dst = HealthEngine::new(n, HealthConfig::default());
    dst.restore(&serde_json::to_vec(&v).unwrap())
        .expect("an older state is taken");
    let back: serde_json::Value = serde_json::from_slice(&dst.snapshot()).unwrap();
    assert_eq!(back["nodes"][5]["slow_rounds"], slow);
    assert!(back["nodes"][5].get("unexplained").is_none());
}
