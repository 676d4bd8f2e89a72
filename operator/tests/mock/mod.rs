//! A fake Kubernetes API server behind `tower-test`'s mock service: enough of the REST
//! semantics (get/list/create/apply/status/JSON patch/delete, 404 and 409) for the operator's
//! reconcilers, with every request recorded and faults injectable.

#![allow(dead_code)] // each test binary uses a different part of the fake

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

struct Fault {
    method: Method,
    path_suffix: String,
    code: u16,
    remaining: u32,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    faults: Vec<Fault>,
    next_uid: u64,
}

#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// The REST path of a stored object.
pub fn path_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    let plural = plural(kind);
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{prefix}/namespaces/{namespace}/{plural}/{name}"),
        None => format!("{prefix}/{plural}/{name}"),
    }
}

fn plural(kind: &str) -> String {
    match kind {
        "PodDisruptionBudget" => "poddisruptionbudgets".into(),
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers".into(),
        "CustomResourceDefinition" => "customresourcedefinitions".into(),
        "OriginCache" => "origincaches".into(),
        other => format!("{}s", other.to_lowercase()),
    }
}

fn status(code: u16, reason: &str, message: &str) -> (StatusCode, Value) {
    (
        StatusCode::from_u16(code).unwrap(),
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": code}),
    )
}

impl FakeApi {
    /// A client talking to a new fake API server.
    pub fn start() -> (Client, FakeApi) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = FakeApi {
            state: Arc::new(Mutex::new(State::default())),
        };
        let server = fake.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
                };
                let (code, value) = server.handle(
                    parts.method,
                    parts.uri.path().to_string(),
                    parts.uri.query().unwrap_or_default().to_string(),
                    body,
                );
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&value).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        (Client::new(service, "default"), fake)
    }

    /// Stores an object as if it had been created earlier (uid and generation filled in).
    pub fn insert(&self, object: impl serde::Serialize) -> Value {
        let mut value = serde_json::to_value(object).unwrap();
        let mut state = self.state.lock().unwrap();
        state.next_uid += 1;
        let uid = format!("00000000-0000-0000-0000-{:012}", state.next_uid);
        let metadata = value["metadata"].as_object_mut().unwrap();
        metadata.entry("uid").or_insert(json!(uid));
        metadata.entry("generation").or_insert(json!(1));
        metadata.entry("resourceVersion").or_insert(json!("1"));
        state.objects.insert(path_of(&value), value.clone());
        value
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Reads a stored object as a typed resource.
    pub fn typed<K: serde::de::DeserializeOwned>(&self, path: &str) -> K {
        serde_json::from_value(self.get(path).unwrap_or_else(|| panic!("no object at {path}"))).unwrap()
    }

    pub fn update(&self, path: &str, change: impl FnOnce(&mut Value)) {
        let mut state = self.state.lock().unwrap();
        let object = state
            .objects
            .get_mut(path)
            .unwrap_or_else(|| panic!("no object at {path}"));
        change(object);
        bump_resource_version(object);
    }

    pub fn remove(&self, path: &str) {
        self.state.lock().unwrap().objects.remove(path);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.state.lock().unwrap().requests.clear();
    }

    /// Requests with this method whose path ends with `suffix`.
    pub fn requests_to(&self, method: Method, suffix: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }

    /// Status and reason of a condition in the stored object's status.
    pub fn condition(&self, path: &str, type_: &str) -> (String, String) {
        let object = self.get(path).unwrap_or_else(|| panic!("no object at {path}"));
        let conditions = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let found = conditions
            .iter()
            .find(|c| c["type"] == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {object}"));
        (
            found["status"].as_str().unwrap().into(),
            found["reason"].as_str().unwrap().into(),
        )
    }

    /// Events recorded for objects, as (type, reason).
    pub fn events(&self) -> Vec<(String, String)> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.contains("/events") && (r.method == Method::POST || r.method == Method::PATCH))
            .map(|r| {
                (
                    r.body["type"].as_str().unwrap_or_default().to_string(),
                    r.body["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The next `times` requests with this method to a path ending in `suffix` fail with `code`.
    pub fn fail(&self, method: Method, suffix: &str, code: u16, times: u32) {
        self.state.lock().unwrap().faults.push(Fault {
            method,
            path_suffix: suffix.into(),
            code,
            remaining: times,
        });
    }

    fn handle(&self, method: Method, path: String, query: String, body: Value) -> (StatusCode, Value) {
        let mut state = self.state.lock().unwrap();
        state.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        });
        if let Some(fault) = state
            .faults
            .iter_mut()
            .find(|f| f.remaining > 0 && f.method == method && path.ends_with(&f.path_suffix))
        {
            fault.remaining -= 1;
            let reason = if fault.code == 409 { "Conflict" } else { "InternalError" };
            return status(fault.code, reason, "injected fault");
        }
        let (object_path, subresource) = match path.strip_suffix("/status") {
            Some(object) if state.objects.contains_key(object) => (object.to_string(), Some("status")),
            _ => (path.clone(), None),
        };
        match method {
            Method::GET => match state.objects.get(&object_path) {
                Some(object) => (StatusCode::OK, object.clone()),
                None if is_collection(&path) => {
                    let prefix = format!("{path}/");
                    let items: Vec<Value> = state
                        .objects
                        .iter()
                        .filter(|(p, _)| p.starts_with(&prefix) && !p[prefix.len()..].contains('/'))
                        .map(|(_, o)| o.clone())
                        .collect();
                    (
                        StatusCode::OK,
                        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                    )
                }
                None => status(404, "NotFound", &format!("{path} not found")),
            },
            Method::POST => {
                let mut object = body;
                if object["metadata"]["name"].is_null() {
                    state.next_uid += 1;
                    let generated = format!(
                        "{}{}",
                        object["metadata"]["generateName"].as_str().unwrap_or("event-"),
                        state.next_uid
                    );
                    object["metadata"]["name"] = json!(generated);
                }
                let object_path = format!("{path}/{}", object["metadata"]["name"].as_str().unwrap());
                if state.objects.contains_key(&object_path) {
                    return status(409, "AlreadyExists", "already exists");
                }
                state.next_uid += 1;
                object["metadata"]["uid"] = json!(format!("created-{}", state.next_uid));
                object["metadata"]["resourceVersion"] = json!("1");
                object["metadata"]["generation"] = json!(1);
                state.objects.insert(object_path, object.clone());
                (StatusCode::CREATED, object)
            }
            Method::PATCH if query.contains("fieldManager") && subresource == Some("status") => {
                let object = state.objects.get_mut(&object_path).unwrap();
                object["status"] = body["status"].clone();
                bump_resource_version(object);
                (StatusCode::OK, object.clone())
            }
            Method::PATCH if query.contains("fieldManager") => {
                // Server-side apply: the applied object replaces our fields; status, uid and
                // generation are the server's.
                let mut object = body;
                let previous = state.objects.get(&object_path).cloned();
                let generation = match &previous {
                    Some(old) if old["spec"] != object["spec"] || old["data"] != object["data"] => {
                        old["metadata"]["generation"].as_i64().unwrap_or(1) + 1
                    }
                    Some(old) => old["metadata"]["generation"].as_i64().unwrap_or(1),
                    None => 1,
                };
                if let Some(old) = &previous {
                    object["status"] = old["status"].clone();
                    object["metadata"]["uid"] = old["metadata"]["uid"].clone();
                    object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                }
                object["metadata"]["generation"] = json!(generation);
                bump_resource_version(&mut object);
                state.objects.insert(object_path, object.clone());
                (StatusCode::OK, object)
            }
            Method::PATCH => {
                let Some(object) = state.objects.get_mut(&object_path) else {
                    return status(404, "NotFound", "not found");
                };
                if let Value::Array(operations) = body {
                    // Like the API server, a `test` for null passes when the path is absent.
                    let operations: Vec<Value> = operations
                        .into_iter()
                        .filter(|op| {
                            let path = op["path"].as_str().unwrap_or_default();
                            !(op["op"] == "test" && op["value"].is_null() && object.pointer(path).is_none())
                        })
                        .collect();
                    let patch: json_patch::Patch = serde_json::from_value(Value::Array(operations)).unwrap();
                    if json_patch::patch(object, &patch.0).is_err() {
                        return status(422, "Invalid", "JSON patch test failed");
                    }
                } else {
                    json_patch::merge(object, &body);
                }
                bump_resource_version(object);
                let object = object.clone();
                // The API server removes an object being deleted once its last finalizer goes.
                let finalizers_gone = object["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
                if !object["metadata"]["deletionTimestamp"].is_null() && finalizers_gone {
                    state.objects.remove(&object_path);
                }
                (StatusCode::OK, object)
            }
            Method::DELETE => match state.objects.remove(&object_path) {
                Some(object) => (StatusCode::OK, object),
                None => status(404, "NotFound", "not found"),
            },
            _ => status(405, "MethodNotAllowed", "unsupported"),
        }
    }
}

pub fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

impl FakeApi {
    /// A Primary GatewayPool `objects` in namespace `team` bound by explicit host to the
    /// database at `database_url` (the test cluster's socket directory), with its login Secret
    /// and a master key Secret holding `master_key`.
    pub fn insert_primary_pool(&self, database_url: &str, master_key: &str) {
        let config: tokio_postgres::Config = database_url.parse().unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
        };
        self.insert(json!({
            "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
            "metadata": {"name": "objects", "namespace": "team"},
            "spec": {
                "role": "Primary",
                "postgres": {"host": host, "port": config.get_ports()[0], "database": config.get_dbname().unwrap(), "secretRef": "login"},
                "masterKeySecretRef": {"name": "master"},
            },
        }));
        self.insert(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login", "namespace": "team"},
            "data": {"username": b64(config.get_user().unwrap()), "password": b64("unused-with-trust-auth")},
        }));
        self.insert(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "master", "namespace": "team"},
            "data": {"masterKey": b64(master_key)},
        }));
    }
}

fn is_collection(path: &str) -> bool {
    let segments: Vec<_> = path.trim_start_matches('/').split('/').collect();
    // /api/v1/<plural>, /api/v1/namespaces/<ns>/<plural>, /apis/<g>/<v>/..., with no name.
    let rest = if segments[0] == "api" {
        &segments[2..]
    } else {
        &segments[3.min(segments.len())..]
    };
    matches!(rest.len(), 1) || (rest.len() == 3 && rest[0] == "namespaces")
}

fn bump_resource_version(object: &mut Value) {
    let version: u64 = object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    object["metadata"]["resourceVersion"] = json!((version + 1).to_string());
}
