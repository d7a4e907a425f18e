//! `/api/v1/state` as the daemons really serve it satisfies the documented schema,
//! `docs/state.schema.json`, and the schema is strict enough to reject a response that
//! drifts from it (a missing or extra field, an unknown state).

mod common;

use std::time::Duration;

use common::{Daemon, Start, fake_config, loopback_peers, value, write_key};
use serde_json::{Value, json};

fn validator() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/state.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .expect("docs/state.schema.json is JSON");
    jsonschema::validator_for(&schema).expect("docs/state.schema.json is a valid schema")
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| e.to_string()).collect()
}

#[test]
fn served_state_matches_the_schema_and_the_schema_rejects_drift() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(2);
    let list = peers
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let daemons: Vec<Daemon> = (0..2)
        .map(|r| {
            let cfg = fake_config(&format!(
                "[collectors]\nhost = false\n[collective]\npeers = [{list}]\npeer_names = [\"node-a\", \"node-b\"]\nrank = {r}\nkey_file = \"{}\"\nconnect_timeout = \"5s\"\nexec_timeout = \"5s\"\n[probe]\nenabled = true\ninterval = \"200ms\"\nsmall_bytes = 1024\nlink_bytes = 65536\n",
                key.display()
            ));
            Daemon::start(Start::new(&cfg).scenario(include_str!("fake-dcmi/scenarios/example.json")))
        })
        .collect();
    daemons[0].wait_for("two probe rounds", Duration::from_secs(60), |s| {
        value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 2.0)
    });
    let r = daemons[0].get("/api/v1/state", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let doc: Value = serde_json::from_str(&r.body).unwrap();
    let v = validator();
    assert_eq!(errors(&v, &doc), Vec::<String>::new(), "{doc:#}");
    // The content is this group's: both named members, healthy, in the round.
    let names: Vec<&str> = doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node-a", "node-b"]);
    assert!(doc["rounds"]["ok"].as_u64().unwrap() >= 2);
    assert_eq!(doc["membership"]["group_members"], 2);
    assert_eq!(doc["matrix"].as_array().unwrap().len(), 2);

    // Drift is caught: a missing field, an extra field, an unknown state.
    let mut missing = doc.clone();
    missing.as_object_mut().unwrap().remove("matrix");
    assert!(!errors(&v, &missing).is_empty());
    let mut extra = doc.clone();
    extra["members"][0]["rank"] = json!(0);
    assert!(!errors(&v, &extra).is_empty());
    let mut unknown = doc.clone();
    unknown["members"][1]["state"] = json!("sick");
    assert!(!errors(&v, &unknown).is_empty());
}

#[test]
fn state_without_probing_is_a_documented_404() {
    let cfg = fake_config("[collectors]\nhost = false\n");
    let d =
        Daemon::start(Start::new(&cfg).scenario(include_str!("fake-dcmi/scenarios/example.json")));
    let r = d.get("/api/v1/state", None);
    assert_eq!(r.status, 404);
    let doc: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(errors(&validator(), &doc), Vec::<String>::new());
    assert!(doc["error"].as_str().unwrap().contains("probe.enabled"));
}
