//! The stand-in API server's `resource.k8s.io/v1` part: `DeviceTaintRule` and
//! `ResourceSlice`, both cluster-scoped, as the real server serves them (Kubernetes 1.37):
//!
//! - `GET /apis/resource.k8s.io/v1/devicetaintrules` (a `labelSelector` of `k=v` terms),
//!   `POST` (201 with `uid`, `resourceVersion`, `generation` 1 and the taint's `timeAdded`
//!   filled in; 409 `AlreadyExists` for a taken name; 422 `Invalid` for an effect other
//!   than None, NoSchedule or NoExecute, an empty key, or a selector that names no
//!   device), `GET` and `DELETE` of one (404 `NotFound`; a `DeleteOptions` body whose
//!   `preconditions.resourceVersion` differs gets 409 `Conflict`; 200 with the deleted
//!   object otherwise);
//! - `GET /apis/resource.k8s.io/v1/resourceslices` with a `fieldSelector` on
//!   `spec.nodeName` and `spec.driver` (the fields the real server indexes; others 400).
//!
//! With [`super::FakeApi::remove_dra`] every one of these answers 404, as a cluster that
//! does not serve `resource.k8s.io/v1` does. Slices are seeded by the test ([`super::FakeApi::add_resource_slice`]); the DRA driver
//! is not run.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{ApiState, ok, percent_decode, status};

const API_VERSION: &str = "resource.k8s.io/v1";

/// What the real server answers for a group/version it does not serve.
fn not_served() -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource".into(),
    )
}

fn param(q: &str, key: &str) -> Option<String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

fn labels_match(obj: &Value, selector: &str) -> Result<bool, String> {
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| format!("unable to parse requirement: {term:?}"))?;
        if obj["metadata"]["labels"][k].as_str() != Some(v) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn invalid(rule: &Value) -> Option<String> {
    let taint = &rule["spec"]["taint"];
    let effect = taint["effect"].as_str().unwrap_or("");
    if !matches!(effect, "None" | "NoSchedule" | "NoExecute") {
        return Some(format!(
            "spec.taint.effect: Unsupported value: {effect:?}: supported values: \"NoExecute\", \"NoSchedule\", \"None\""
        ));
    }
    if taint["key"].as_str().unwrap_or("").is_empty() {
        return Some("spec.taint.key: Required value".into());
    }
    if rule["metadata"]["name"].as_str().unwrap_or("").is_empty() {
        return Some("metadata.name: Required value: name or generateName is required".into());
    }
    None
}

/// `GET` (list) and `POST` on the collection.
pub async fn rules(
    State(s): State<Arc<Mutex<ApiState>>>,
    method: Method,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let mut s = s.lock().unwrap();
    if s.no_dra {
        return not_served();
    }
    let q = q.unwrap_or_default();
    if method == Method::GET {
        if let Some(r) = s.denied("list", "devicetaintrules", "") {
            return r;
        }
        let selector = param(&q, "labelSelector").unwrap_or_default();
        let mut items = Vec::new();
        for r in s.device_taint_rules.values() {
            match labels_match(r, &selector) {
                Ok(true) => items.push(r.clone()),
                Ok(false) => {}
                Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e),
            }
        }
        return ok(
            StatusCode::OK,
            &json!({"kind": "DeviceTaintRuleList", "apiVersion": API_VERSION, "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
        );
    }
    let Ok(mut rule) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body is not JSON".into(),
        );
    };
    let name = rule["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Some(r) = s.denied("create", "devicetaintrules", &name) {
        return r;
    }
    if let Some(why) = invalid(&rule) {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("DeviceTaintRule.resource.k8s.io {name:?} is invalid: {why}"),
        );
    }
    if s.device_taint_rules.contains_key(&name) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("devicetaintrules.resource.k8s.io {name:?} already exists"),
        );
    }
    s.rv += 1;
    rule["apiVersion"] = json!(API_VERSION);
    rule["kind"] = json!("DeviceTaintRule");
    rule["metadata"]["resourceVersion"] = json!(s.rv.to_string());
    rule["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", s.rv));
    rule["metadata"]["generation"] = json!(1);
    rule["metadata"]["creationTimestamp"] = json!("2026-12-02T00:00:00Z");
    if rule["spec"]["taint"]["timeAdded"].is_null() {
        rule["spec"]["taint"]["timeAdded"] = json!("2026-12-02T00:00:00Z");
    }
    s.device_taint_rules.insert(name.clone(), rule.clone());
    s.writes.push((
        "POST".into(),
        format!("devicetaintrules/{name}"),
        "application/json".into(),
    ));
    s.changed.notify_all();
    ok(StatusCode::CREATED, &rule)
}

/// `GET` and `DELETE` of one rule.
pub async fn rule(
    State(s): State<Arc<Mutex<ApiState>>>,
    method: Method,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    let mut s = s.lock().unwrap();
    let verb = if method == Method::DELETE {
        "delete"
    } else {
        "get"
    };
    if let Some(r) = s.denied(verb, "devicetaintrules", &name) {
        return r;
    }
    let Some(existing) = s.device_taint_rules.get(&name).cloned() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("devicetaintrules.resource.k8s.io {name:?} not found"),
        );
    };
    if method == Method::GET {
        return ok(StatusCode::OK, &existing);
    }
    let opts: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let have = existing["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("");
    if let Some(want) = opts["preconditions"]["resourceVersion"].as_str()
        && want != have
    {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on devicetaintrules.resource.k8s.io {name:?}: Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
            ),
        );
    }
    s.device_taint_rules.remove(&name);
    s.rv += 1;
    s.writes.push((
        "DELETE".into(),
        format!("devicetaintrules/{name}"),
        String::new(),
    ));
    s.changed.notify_all();
    ok(StatusCode::OK, &existing)
}

/// `GET` of the slices, filtered by field selector.
pub async fn slices(State(s): State<Arc<Mutex<ApiState>>>, RawQuery(q): RawQuery) -> Response {
    let s = s.lock().unwrap();
    if s.no_dra {
        return not_served();
    }
    if let Some(r) = s.denied("list", "resourceslices", "") {
        return r;
    }
    let selector = param(&q.unwrap_or_default(), "fieldSelector").unwrap_or_default();
    let mut items = Vec::new();
    'slice: for slice in &s.resource_slices {
        for term in selector.split(',').filter(|t| !t.is_empty()) {
            let Some((field, want)) = term.split_once("==").or_else(|| term.split_once('=')) else {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("invalid field selector term {term:?}"),
                );
            };
            let have = match field {
                "spec.nodeName" => &slice["spec"]["nodeName"],
                "spec.driver" => &slice["spec"]["driver"],
                other => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        format!("field label not supported: {other}"),
                    );
                }
            };
            if have.as_str() != Some(want) {
                continue 'slice;
            }
        }
        items.push(slice.clone());
    }
    ok(
        StatusCode::OK,
        &json!({"kind": "ResourceSliceList", "apiVersion": API_VERSION, "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
}

/// A slice as Ascend's DRA driver publishes it for `node`: one pool named after the node,
/// one device `npu-<id>` per physical id, with its `physicId` attribute.
pub fn ascend_slice(node: &str, npus: &[u32]) -> Value {
    let devices: Vec<Value> = npus
        .iter()
        .map(|id| {
            json!({"name": format!("npu-{id}"), "attributes": {
                "type": {"string": "npu"}, "physicId": {"int": id}, "deviceKind": {"string": "physical"}}})
        })
        .collect();
    json!({
        "apiVersion": API_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-npu.huawei.com-abcde"), "resourceVersion": "1"},
        "spec": {"driver": "npu.huawei.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    })
}
