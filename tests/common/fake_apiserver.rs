//! A small, faithful stand-in for the Kubernetes API server, for the endpoints the
//! remediation receiver uses. No real API server can run on these machines (there is no
//! kube-apiserver package, and kind/k3s need images), so this one implements, on
//! 127.0.0.1 over real HTTP:
//!
//! - `GET /api/v1/nodes` and `GET /api/v1/nodes/{name}`;
//! - `PUT /api/v1/nodes/{name}` with optimistic concurrency: a stale `resourceVersion` gets
//!   409 Conflict, as does a PUT the test chose to race with a concurrent writer;
//! - `PATCH /api/v1/nodes/{name}` as strategic-merge, JSON merge or JSON patch (RFC 6902,
//!   a failed `test` gets 422), and `PATCH /api/v1/nodes/{name}/status` (conditions merged
//!   by `type`, as the Node schema's patch strategy says);
//! - `POST /api/v1/namespaces/{ns}/events`;
//! - `GET /api/v1/pods` (the pod attribution's read), honouring a `fieldSelector` on
//!   `spec.nodeName` or `metadata.namespace` as the real server does (other fields get
//!   400, as unsupported pod field labels do there);
//! - `GET /apis/topology.volcano.sh/v1alpha1/hypernodes` (the topology source's read) once
//!   the test has "installed" Volcano's CRD, paged by `limit` and `continue` as the real
//!   server pages a list; before that, 404 as for any resource the server does not have;
//! - `resource.k8s.io/v1` `DeviceTaintRule` and `ResourceSlice` (see `fake_dra.rs`);
//! - 404 Status for an unknown node, 403 Status for a verb the test's "RBAC" denies.
//!
//! Every write bumps `resourceVersion`. Responses are `Status` objects on errors, as the
//! real server's are, so the real kube client parses them.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

#[path = "fake_dra.rs"]
mod dra;

/// What the server holds.
#[derive(Default)]
pub struct ApiState {
    nodes: BTreeMap<String, Value>,
    rv: u64,
    /// Events created, in order.
    pub events: Vec<Value>,
    /// (verb, resource) pairs answered 403.
    deny: Vec<(String, String)>,
    /// Writes (method, path, content type), in order.
    pub writes: Vec<(String, String, String)>,
    /// PUTs still to be answered with a conflict (after a simulated concurrent write).
    conflicts: u32,
    /// Pods, in the order added.
    pods: Vec<Value>,
    /// The query string of every pod list, in order.
    pub pod_lists: Vec<String>,
    /// HyperNodes, once the CRD is "installed" (None: the resource does not exist).
    hypernodes: Option<Vec<Value>>,
    /// The query string of every HyperNode list, in order.
    pub hypernode_lists: Vec<String>,
    /// Nodes whose GET never answers (a hung API server, for the receiver's timeouts).
    hang: Vec<String>,
    /// GETs that arrived for a node in `hang` and are hanging now, by node.
    hanging: Vec<String>,
    /// DeviceTaintRules by name.
    device_taint_rules: BTreeMap<String, Value>,
    /// ResourceSlices the test seeded.
    resource_slices: Vec<Value>,
    /// The server does not serve `resource.k8s.io/v1` (a cluster without DRA): 404.
    no_dra: bool,
    /// Rung on every change a test may wait for (a node written, an event created, a GET
    /// hanging); waited on with the state's lock, so a change is never missed.
    changed: Arc<Condvar>,
}

/// The running server.
pub struct FakeApi {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    state: Arc<Mutex<ApiState>>,
    changed: Arc<Condvar>,
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Strategic merge as the Node schema defines it for the fields used here: objects merge
/// recursively (null deletes a key), `conditions` merge by `type`, other lists replace.
fn strategic_merge(target: &mut Value, patch: &Value, key: &str) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v, k);
                }
            }
        }
        (t @ Value::Array(_), Value::Array(p)) if key == "conditions" => {
            let list = t.as_array_mut().unwrap();
            for c in p {
                match list.iter_mut().find(|x| x["type"] == c["type"]) {
                    Some(x) => strategic_merge(x, c, ""),
                    None => list.push(c.clone()),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// RFC 7386 merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    if let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    } else {
        *target = patch.clone();
    }
}

impl ApiState {
    fn denied(&self, verb: &str, resource: &str, name: &str) -> Option<Response> {
        self.deny.iter().any(|(v, r)| v == verb && r == resource).then(|| {
            status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("{resource} \"{name}\" is forbidden: User \"system:serviceaccount:hcclwatch:hcclwatch-remediate\" cannot {verb} resource \"{resource}\" in API group \"\" at the cluster scope"),
            )
        })
    }

    fn bump(&mut self, name: &str) -> Value {
        self.changed.notify_all();
        self.rv += 1;
        let n = self.nodes.get_mut(name).unwrap();
        n["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        n.clone()
    }
}

async fn list(State(s): State<Arc<Mutex<ApiState>>>) -> Response {
    let s = s.lock().unwrap();
    if let Some(r) = s.denied("list", "nodes", "") {
        return r;
    }
    let items: Vec<Value> = s.nodes.values().cloned().collect();
    ok(
        StatusCode::OK,
        &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
}

async fn node(
    State(s): State<Arc<Mutex<ApiState>>>,
    method: Method,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let hang = method == Method::GET && {
        let mut s = s.lock().unwrap();
        let hang = s.hang.contains(&name);
        if hang {
            s.hanging.push(name.clone());
            s.changed.notify_all();
        }
        hang
    };
    if hang {
        // Longer than any test; the client's timeout must end the call.
        tokio::time::sleep(std::time::Duration::from_secs(300)).await;
    }
    let mut s = s.lock().unwrap();
    let verb = match method {
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        _ => {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "method not allowed".into(),
            );
        }
    };
    if let Some(r) = s.denied(verb, "nodes", &name) {
        return r;
    }
    let Some(current) = s.nodes.get(&name).cloned() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("nodes \"{name}\" not found"),
        );
    };
    if method == Method::GET {
        return ok(StatusCode::OK, &current);
    }
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    s.writes.push((
        verb.to_string(),
        format!("/api/v1/nodes/{name}"),
        ctype.clone(),
    ));
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "body is not JSON".into(),
        );
    };
    let mut next = current.clone();
    if method == Method::PUT {
        if s.conflicts > 0 {
            // Another writer got there first: it added its own taint.
            s.conflicts -= 1;
            let n = s.nodes.get_mut(&name).unwrap();
            let taints = n["spec"]
                .as_object_mut()
                .unwrap()
                .entry("taints")
                .or_insert(json!([]));
            taints.as_array_mut().unwrap().push(json!({"key": "racer.example.com/maintenance", "value": "yes", "effect": "NoSchedule"}));
            s.bump(&name);
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        if patch["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified"
                ),
            );
        }
        next = patch;
        // The main resource ignores status (it has its own subresource).
        next["status"] = current["status"].clone();
    } else if ctype.starts_with("application/json-patch+json") {
        let Ok(p) = serde_json::from_value::<json_patch::Patch>(patch) else {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "not a JSON patch".into(),
            );
        };
        if let Err(e) = json_patch::patch(&mut next, &p) {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            );
        }
    } else if ctype.starts_with("application/merge-patch+json") {
        merge_patch(&mut next, &patch);
    } else if ctype.starts_with("application/strategic-merge-patch+json") {
        strategic_merge(&mut next, &patch, "");
    } else {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {ctype}"),
        );
    }
    next["metadata"]["name"] = Value::String(name.clone());
    s.nodes.insert(name.clone(), next);
    let v = s.bump(&name);
    ok(StatusCode::OK, &v)
}

async fn node_status(
    State(s): State<Arc<Mutex<ApiState>>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = s.lock().unwrap();
    if let Some(r) = s.denied("patch", "nodes/status", &name) {
        return r;
    }
    let Some(mut next) = s.nodes.get(&name).cloned() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("nodes \"{name}\" not found"),
        );
    };
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    s.writes.push((
        "patch".into(),
        format!("/api/v1/nodes/{name}/status"),
        ctype.clone(),
    ));
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "body is not JSON".into(),
        );
    };
    if !ctype.starts_with("application/strategic-merge-patch+json") {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            ctype,
        );
    }
    // The status subresource changes only status.
    strategic_merge(&mut next["status"], &patch["status"], "status");
    s.nodes.insert(name.clone(), next);
    let v = s.bump(&name);
    ok(StatusCode::OK, &v)
}

async fn create_event(
    State(s): State<Arc<Mutex<ApiState>>>,
    UrlPath(ns): UrlPath<String>,
    body: Bytes,
) -> Response {
    let mut s = s.lock().unwrap();
    if let Some(r) = s.denied("create", "events", "") {
        return r;
    }
    let Ok(mut ev) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "body is not JSON".into(),
        );
    };
    s.rv += 1;
    let name = format!(
        "{}{:x}",
        ev["metadata"]["generateName"].as_str().unwrap_or("event."),
        s.rv
    );
    ev["metadata"]["name"] = Value::String(name);
    ev["metadata"]["namespace"] = Value::String(ns.clone());
    ev["metadata"]["resourceVersion"] = Value::String(s.rv.to_string());
    s.writes.push((
        "create".into(),
        format!("/api/v1/namespaces/{ns}/events"),
        String::new(),
    ));
    s.events.push(ev.clone());
    s.changed.notify_all();
    ok(StatusCode::CREATED, &ev)
}

/// Decodes `%XX` escapes and `+` in a query-string component.
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = (b[i] == b'%' && i + 2 < b.len())
            .then(|| Some(hex(b[i + 1])? * 16 + hex(b[i + 2])?))
            .flatten();
        match (escaped, b[i]) {
            (Some(v), _) => {
                out.push(v);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, c) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `pod` satisfies every `field=value` (or `field==value`) term of a field
/// selector; `Err` names a field the pods resource does not index.
fn pod_matches(pod: &Value, selector: &str) -> Result<bool, String> {
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let (field, want) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| format!("invalid field selector term {term:?}"))?;
        let have = match field {
            "spec.nodeName" => &pod["spec"]["nodeName"],
            "metadata.namespace" => &pod["metadata"]["namespace"],
            other => return Err(format!("field label not supported: {other}")),
        };
        if have.as_str().unwrap_or("") != want {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn list_pods(State(s): State<Arc<Mutex<ApiState>>>, RawQuery(q): RawQuery) -> Response {
    let mut s = s.lock().unwrap();
    if let Some(r) = s.denied("list", "pods", "") {
        return r;
    }
    let q = q.unwrap_or_default();
    s.pod_lists.push(q.clone());
    let selector = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "fieldSelector")
        .map(|(_, v)| percent_decode(v))
        .unwrap_or_default();
    let mut items = Vec::new();
    for p in &s.pods {
        match pod_matches(p, &selector) {
            Ok(true) => items.push(p.clone()),
            Ok(false) => {}
            Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e),
        }
    }
    ok(
        StatusCode::OK,
        &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
}

/// `GET /apis/topology.volcano.sh/v1alpha1/hypernodes`: 404 until the CRD exists; pages
/// of `limit` items with the next index as the `continue` token.
async fn list_hypernodes(State(s): State<Arc<Mutex<ApiState>>>, RawQuery(q): RawQuery) -> Response {
    let mut s = s.lock().unwrap();
    let q = q.unwrap_or_default();
    s.hypernode_lists.push(q.clone());
    s.changed.notify_all();
    if let Some(r) = s.denied("list", "hypernodes", "") {
        return r;
    }
    let Some(all) = s.hypernodes.clone() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        );
    };
    let param = |k: &str| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    };
    let from: usize = param("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = param("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    let to = from.saturating_add(limit).min(all.len());
    let items = &all[from.min(to)..to];
    let mut meta = json!({"resourceVersion": s.rv.to_string()});
    if to < all.len() {
        meta["continue"] = Value::String(to.to_string());
    }
    ok(
        StatusCode::OK,
        &json!({"kind": "HyperNodeList", "apiVersion": "topology.volcano.sh/v1alpha1", "metadata": meta, "items": items}),
    )
}

impl FakeApi {
    /// Starts the server on an ephemeral port, on its own thread and runtime.
    pub fn start() -> Self {
        let changed = Arc::new(Condvar::new());
        let state = Arc::new(Mutex::new(ApiState {
            changed: changed.clone(),
            ..ApiState::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = Router::new()
            .route("/api/v1/nodes", get(list))
            .route("/api/v1/nodes/{name}", get(node).put(node).patch(node))
            .route(
                "/api/v1/nodes/{name}/status",
                axum::routing::patch(node_status),
            )
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .route("/api/v1/pods", get(list_pods))
            .route(
                "/apis/topology.volcano.sh/v1alpha1/hypernodes",
                get(list_hypernodes),
            )
            .route(
                "/apis/resource.k8s.io/v1/devicetaintrules",
                get(dra::rules).post(dra::rules),
            )
            .route(
                "/apis/resource.k8s.io/v1/devicetaintrules/{name}",
                get(dra::rule).delete(dra::rule),
            )
            .route("/apis/resource.k8s.io/v1/resourceslices", get(dra::slices))
            .fallback(|| async {
                status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "the server could not find the requested resource".into(),
                )
            })
            .with_state(state.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(l, app).await;
            });
        });
        Self {
            addr,
            state,
            changed,
        }
    }

    /// Waits until `done` holds for the server's state, woken by each change (never
    /// polling); false if it does not within `within`.
    fn wait(&self, within: Duration, done: impl Fn(&ApiState) -> bool) -> bool {
        let until = Instant::now() + within;
        let mut s = self.state.lock().unwrap();
        while !done(&s) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self.changed.wait_timeout(s, left).unwrap().0;
        }
        true
    }

    /// Publishes a ResourceSlice as Ascend's DRA driver would for `node`'s NPUs.
    pub fn add_resource_slice(&self, node: &str, npus: &[u32]) {
        let mut s = self.state.lock().unwrap();
        s.resource_slices.push(dra::ascend_slice(node, npus));
    }

    /// Stops serving `resource.k8s.io/v1`, as a cluster without DRA does (404).
    pub fn remove_dra(&self) {
        self.state.lock().unwrap().no_dra = true;
    }

    /// The DeviceTaintRules, by name.
    pub fn device_taint_rules(&self) -> BTreeMap<String, Value> {
        self.state.lock().unwrap().device_taint_rules.clone()
    }

    /// Waits until the DeviceTaintRules satisfy `done`; false if they do not within
    /// `within`.
    pub fn wait_for_device_taint_rules(
        &self,
        within: Duration,
        done: impl Fn(&BTreeMap<String, Value>) -> bool,
    ) -> bool {
        self.wait(within, |s| done(&s.device_taint_rules))
    }

    /// Waits until node `name` satisfies `done` (the receiver writes it), and returns it;
    /// `None` if it does not within `within`.
    pub fn wait_for_node(
        &self,
        name: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        self.wait(within, |s| s.nodes.get(name).is_some_and(&done))
            .then(|| self.node(name))
    }

    /// Waits until an event with this `reason` has been created; false if none is within
    /// `within`.
    pub fn wait_for_event(&self, reason: &str, within: Duration) -> bool {
        self.wait(within, |s| s.events.iter().any(|e| e["reason"] == reason))
    }

    /// Waits until a GET of node `name` (made to hang by [`FakeApi::hang_get`]) has
    /// arrived and hangs; false if none does within `within`.
    pub fn wait_for_hung_get(&self, name: &str, within: Duration) -> bool {
        self.wait(within, |s| s.hanging.iter().any(|n| n == name))
    }

    /// Adds a Ready node with these labels.
    pub fn add_node(&self, name: &str, labels: &[(&str, &str)]) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels, "resourceVersion": s.rv.to_string()},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}]},
        });
        s.nodes.insert(name.to_string(), node);
    }

    /// "Installs" Volcano's HyperNode CRD (the list answers from then on) and adds a
    /// HyperNode of this tier whose members are given as `spec.members` JSON.
    pub fn add_hypernode(&self, name: &str, tier: u32, members: Value) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let hn = json!({
            "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": s.rv.to_string()},
            "spec": {"tier": tier, "members": members},
        });
        s.hypernodes.get_or_insert_with(Vec::new).push(hn);
    }

    /// The query string of every HyperNode list so far.
    pub fn hypernode_lists(&self) -> Vec<String> {
        self.state.lock().unwrap().hypernode_lists.clone()
    }

    /// Waits until `n` HyperNode lists have arrived; false if they do not within `within`.
    pub fn wait_for_hypernode_lists(&self, n: usize, within: Duration) -> bool {
        self.wait(within, |s| s.hypernode_lists.len() >= n)
    }

    /// Adds a pod (a full Pod object as JSON; `metadata.resourceVersion` is set here).
    pub fn add_pod(&self, mut pod: Value) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        pod["metadata"]["resourceVersion"] = Value::String(s.rv.to_string());
        s.pods.push(pod);
    }

    /// The query string of every pod list so far.
    pub fn pod_lists(&self) -> Vec<String> {
        self.state.lock().unwrap().pod_lists.clone()
    }

    /// The node as the server holds it.
    pub fn node(&self, name: &str) -> Value {
        self.state.lock().unwrap().nodes[name].clone()
    }

    /// Changes a node as another client (a human with kubectl) would; bumps the version.
    pub fn edit(&self, name: &str, f: impl FnOnce(&mut Value)) {
        let mut s = self.state.lock().unwrap();
        f(s.nodes.get_mut(name).unwrap());
        s.bump(name);
    }

    /// Answers 403 to `verb` on `resource` (e.g. "patch", "nodes/status").
    pub fn deny(&self, verb: &str, resource: &str) {
        self.state
            .lock()
            .unwrap()
            .deny
            .push((verb.into(), resource.into()));
    }

    /// Stops answering 403 to `verb` on `resource`.
    pub fn allow(&self, verb: &str, resource: &str) {
        self.state
            .lock()
            .unwrap()
            .deny
            .retain(|(v, r)| !(v == verb && r == resource));
    }

    /// Makes GET of node `name` hang (a stuck API server).
    pub fn hang_get(&self, name: &str) {
        self.state.lock().unwrap().hang.push(name.to_string());
    }

    /// Makes the next `n` PUTs race with a concurrent writer (409 after its change).
    pub fn conflict_next_puts(&self, n: u32) {
        self.state.lock().unwrap().conflicts = n;
    }

    /// Events created so far.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// Writes so far: (verb, path, content type).
    pub fn writes(&self) -> Vec<(String, String, String)> {
        self.state.lock().unwrap().writes.clone()
    }

    /// A kubeconfig that points the real kube client at this server.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: remediate\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: remediate\ncurrent-context: fake\n",
                self.addr
            ),
        )
        .unwrap();
        p
    }
}
