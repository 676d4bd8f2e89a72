//! A fake Kubernetes API server behind `tower-test`'s mock service: enough of the REST
//! semantics (get/list/watch/create/apply/status/merge and JSON patch/delete, 404 and 409) for
//! the operator's reconcilers, its controllers and its lease, with every request recorded and
//! faults injectable. Watches stream every later change of a matching object.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
    /// The `Accept` header (`…;as=PartialObjectMetadataList…` for a metadata-only list).
    pub accept: String,
}

struct Fault {
    method: Method,
    path_suffix: String,
    code: u16,
    remaining: u32,
}

/// An open watch: the collection it covers and where its events go.
struct Watch {
    collection: Collection,
    events: mpsc::UnboundedSender<Bytes>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    faults: Vec<Fault>,
    watches: Vec<Watch>,
    next_uid: u64,
}

impl State {
    /// Sends a watch event about the object at `path` to every watch that covers it.
    fn notify(&mut self, type_: &str, path: &str, object: &Value) {
        let mut line = serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap();
        line.push(b'\n');
        let line = Bytes::from(line);
        self.watches
            .retain(|watch| !watch.collection.covers(path) || watch.events.unbounded_send(line.clone()).is_ok());
    }

    /// Stores `object` at `path` with a new resourceVersion and tells the watches, unless it
    /// equals what is stored: like the API server, a no-op write changes nothing and sends no
    /// event (otherwise every status write would trigger the next reconcile, forever).
    fn store(&mut self, path: String, mut object: Value) -> Value {
        let type_ = match self.objects.get(&path) {
            Some(old) => {
                object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                if &object == old {
                    return object;
                }
                "MODIFIED"
            }
            None => "ADDED",
        };
        bump_resource_version(&mut object);
        self.notify(type_, &path, &object);
        self.objects.insert(path, object.clone());
        object
    }

    fn delete(&mut self, path: &str) -> Option<Value> {
        let object = self.objects.remove(path)?;
        self.notify("DELETED", path, &object);
        Some(object)
    }
}

/// A collection's REST path, split: `/api/v1` or `/apis/<group>/<version>`, the namespace
/// (`None`: all namespaces), and the plural.
#[derive(Clone, Debug, PartialEq)]
struct Collection {
    prefix: String,
    namespace: Option<String>,
    plural: String,
}

impl Collection {
    /// The collection a request path names (`None` when it names an object).
    fn parse(path: &str) -> Option<Collection> {
        let (prefix, rest) = split_prefix(path)?;
        match rest.as_slice() {
            [plural] => Some(Collection {
                prefix,
                namespace: None,
                plural: plural.to_string(),
            }),
            ["namespaces", namespace, plural] => Some(Collection {
                prefix,
                namespace: Some(namespace.to_string()),
                plural: plural.to_string(),
            }),
            _ => None,
        }
    }

    /// Whether the object stored at `path` belongs to this collection.
    fn covers(&self, path: &str) -> bool {
        let Some((prefix, rest)) = split_prefix(path) else {
            return false;
        };
        let (namespace, plural) = match rest.as_slice() {
            [plural, _name] => (None, *plural),
            ["namespaces", namespace, plural, _name] => (Some(*namespace), *plural),
            _ => return false,
        };
        prefix == self.prefix
            && plural == self.plural
            && self.namespace.as_deref().is_none_or(|wanted| Some(wanted) == namespace)
    }
}

fn split_prefix(path: &str) -> Option<(String, Vec<&str>)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match *segments.first()? {
        "api" if segments.len() > 2 => Some((format!("/api/{}", segments[1]), segments[2..].to_vec())),
        "apis" if segments.len() > 3 => {
            Some((format!("/apis/{}/{}", segments[1], segments[2]), segments[3..].to_vec()))
        }
        _ => None,
    }
}

/// API discovery of a group version (`/apis/<group>/<version>`): the resources of the stored
/// CustomResourceDefinitions of that group, 404 when there are none (as for an absent group).
/// `None` when `path` is not a group version.
fn discovery(objects: &BTreeMap<String, Value>, path: &str) -> Option<Reply> {
    let ["apis", group, version] = path.trim_start_matches('/').split('/').collect::<Vec<_>>()[..] else {
        return None;
    };
    let suffix = format!(".{group}");
    let resources: Vec<Value> = objects
        .values()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter_map(|o| {
            o["metadata"]["name"]
                .as_str()?
                .strip_suffix(&suffix)
                .map(str::to_string)
        })
        .map(|plural| json!({"name": plural, "namespaced": true, "kind": "", "singularName": "", "verbs": []}))
        .collect();
    if resources.is_empty() {
        return Some(status(404, "NotFound", "the server could not find the requested resource").into());
    }
    let list = json!({"kind": "APIResourceList", "apiVersion": "v1",
                      "groupVersion": format!("{group}/{version}"), "resources": resources});
    Some(Reply::Json(StatusCode::OK, list))
}

/// What the fake answers: a JSON document, or the event stream of a watch.
enum Reply {
    Json(StatusCode, Value),
    Watch(mpsc::UnboundedReceiver<Bytes>),
}

impl From<(StatusCode, Value)> for Reply {
    fn from((code, value): (StatusCode, Value)) -> Reply {
        Reply::Json(code, value)
    }
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
        let fake = FakeApi {
            state: Arc::new(Mutex::new(State::default())),
        };
        (fake.client(), fake)
    }

    /// Another client of the same fake API server (e.g. for a second operator replica).
    pub fn client(&self) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<ResponseBody>>();
        let server = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
                };
                let content_type = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let accept = parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let reply = server.handle(
                    parts.method,
                    parts.uri.path().to_string(),
                    parts.uri.query().unwrap_or_default().to_string(),
                    (&content_type, accept),
                    body,
                );
                let response = match reply {
                    Reply::Json(code, value) => Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(serde_json::to_vec(&value).unwrap())).boxed_unsync()),
                    Reply::Watch(events) => Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/json")
                        .body(StreamBody::new(events.map(|line| Ok(hyper::body::Frame::data(line)))).boxed_unsync()),
                };
                send.send_response(response.unwrap());
            }
        });
        Client::new(service, "default")
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
        state.store(path_of(&value), value)
    }

    /// Serves `document` at `path`, a URL that is no resource (the service-account issuer's
    /// OIDC discovery and keys).
    pub fn serve(&self, path: &str, document: Value) {
        self.state.lock().unwrap().objects.insert(path.to_string(), document);
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
        let mut object = state
            .objects
            .get(path)
            .cloned()
            .unwrap_or_else(|| panic!("no object at {path}"));
        change(&mut object);
        state.store(path.to_string(), object);
    }

    pub fn remove(&self, path: &str) {
        self.state.lock().unwrap().delete(path);
    }

    /// Whether a watch is open on the collection at `path` (e.g. `/api/v1/secrets`).
    pub fn watched(&self, path: &str) -> bool {
        let collection = Collection::parse(path).expect("a collection path");
        let state = self.state.lock().unwrap();
        state
            .watches
            .iter()
            .any(|watch| watch.collection == collection && !watch.events.is_closed())
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
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

    /// The note of the last Event with `reason`.
    pub fn event_note(&self, reason: &str) -> Option<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.contains("/events") && (r.method == Method::POST || r.method == Method::PATCH))
            .filter(|r| r.body["reason"] == reason)
            .filter_map(|r| r.body["note"].as_str().map(str::to_string))
            .next_back()
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

    /// `headers`: the request's content type and `Accept`.
    fn handle(&self, method: Method, path: String, query: String, headers: (&str, String), body: Value) -> Reply {
        let (content_type, accept) = headers;
        let mut state = self.state.lock().unwrap();
        state.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
            accept,
        });
        if let Some(fault) = state
            .faults
            .iter_mut()
            .find(|f| f.remaining > 0 && f.method == method && path.ends_with(&f.path_suffix))
        {
            fault.remaining -= 1;
            let reason = if fault.code == 409 { "Conflict" } else { "InternalError" };
            return status(fault.code, reason, "injected fault").into();
        }
        if method == Method::GET
            && let Some(list) = discovery(&state.objects, &path)
        {
            return list;
        }
        let collection = Collection::parse(&path);
        if method == Method::GET
            && let Some(collection) = collection.clone()
            && query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1")
        {
            let (events, stream) = mpsc::unbounded();
            state.watches.push(Watch { collection, events });
            return Reply::Watch(stream);
        }
        let apply = content_type.starts_with("application/apply-patch");
        let (object_path, subresource) = match path.strip_suffix("/status") {
            Some(object) if state.objects.contains_key(object) => (object.to_string(), Some("status")),
            _ => (path.clone(), None),
        };
        let reply = match method {
            Method::GET => match (state.objects.get(&object_path), collection) {
                (Some(object), _) => (StatusCode::OK, object.clone()),
                (None, Some(collection)) => {
                    let items: Vec<Value> = state
                        .objects
                        .iter()
                        .filter(|(path, _)| collection.covers(path))
                        .map(|(_, o)| o.clone())
                        .collect();
                    (
                        StatusCode::OK,
                        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                    )
                }
                (None, None) => status(404, "NotFound", &format!("{path} not found")),
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
                    return status(409, "AlreadyExists", "already exists").into();
                }
                state.next_uid += 1;
                object["metadata"]["uid"] = json!(format!("created-{}", state.next_uid));
                object["metadata"]["generation"] = json!(1);
                (StatusCode::CREATED, state.store(object_path, object))
            }
            Method::PATCH if apply && subresource == Some("status") => {
                let mut object = state.objects.get(&object_path).unwrap().clone();
                object["status"] = body["status"].clone();
                (StatusCode::OK, state.store(object_path, object))
            }
            Method::PATCH if apply => {
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
                    for field in ["name", "namespace", "uid", "resourceVersion"] {
                        object["metadata"][field] = old["metadata"][field].clone();
                    }
                }
                object["metadata"]["generation"] = json!(generation);
                (StatusCode::OK, state.store(object_path, object))
            }
            Method::PATCH => {
                let Some(mut object) = state.objects.get(&object_path).cloned() else {
                    return status(404, "NotFound", "not found").into();
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
                    if json_patch::patch(&mut object, &patch.0).is_err() {
                        return status(422, "Invalid", "JSON patch test failed").into();
                    }
                } else {
                    // Merge and strategic merge patches: maps merge, null removes.
                    json_patch::merge(&mut object, &body);
                }
                // The API server removes an object being deleted once its last finalizer goes.
                let finalizers_gone = object["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
                let object = state.store(object_path.clone(), object);
                if !object["metadata"]["deletionTimestamp"].is_null() && finalizers_gone {
                    state.delete(&object_path);
                }
                (StatusCode::OK, object)
            }
            Method::DELETE => match state.delete(&object_path) {
                Some(object) => (StatusCode::OK, object),
                None => status(404, "NotFound", "not found"),
            },
            _ => status(405, "MethodNotAllowed", "unsupported"),
        };
        reply.into()
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
        // The Unix socket trusts; TCP (through a proxy) authenticates.
        let password = config.get_password().map_or("unused-with-trust-auth".to_string(), |p| {
            String::from_utf8_lossy(p).into_owned()
        });
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
        };
        self.insert(json!({
            "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
            "metadata": {"name": "objects", "namespace": "team"},
            "spec": {
                "role": "Primary",
                "postgres": {"host": host, "port": config.get_ports()[0], "database": config.get_dbname().unwrap(), "secretRef": "login", "sendPasswordToUnverifiedServer": true},
                "masterKeySecretRef": {"name": "master"},
            },
            // Its gateways available: a Bucket is Ready only when its pool is.
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }));
        self.insert(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login", "namespace": "team"},
            "data": {"username": b64(config.get_user().unwrap()), "password": b64(&password)},
        }));
        self.insert(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "master", "namespace": "team"},
            "data": {"masterKey": b64(master_key)},
        }));
    }
}

fn bump_resource_version(object: &mut Value) {
    let version: u64 = object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    object["metadata"]["resourceVersion"] = json!((version + 1).to_string());
}
