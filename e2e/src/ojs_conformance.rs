//! A runner for the OJS conformance cases (the JSON test DSL of `openjobspec/ojs-conformance`,
//! `docs/test-case-reference.md`): it reads the cases from disk, plays each one's steps against a
//! live OJS endpoint over plain HTTP, and reports which assertions failed.
//!
//! The cases are not part of this repository; [`suites_dir`] finds them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Where the cases are: `PGVS3_OJS_CONFORMANCE_DIR`, else `<workspace>/../shared/ojs-conformance`,
/// else `/work/shared/ojs-conformance`. Missing cases are an error, never a silent skip.
pub fn suites_dir() -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates: Vec<PathBuf> = std::env::var_os("PGVS3_OJS_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            workspace.join("../shared/ojs-conformance"),
            PathBuf::from("/work/shared/ojs-conformance"),
        ])
        .collect();
    for candidate in &candidates {
        let suites = candidate.join("suites");
        if suites.is_dir() {
            return Ok(suites);
        }
    }
    bail!(
        "the OJS conformance cases were not found (looked for suites/ in {candidates:?}); \
         set PGVS3_OJS_CONFORMANCE_DIR to a checkout of openjobspec/ojs-conformance"
    )
}

/// One case from disk.
#[derive(Debug, Clone)]
pub struct Case {
    pub test_id: String,
    /// `level-0-core/envelope/valid-minimal-job.json` style, relative to the suites dir.
    pub path: String,
    /// The suite directory: `level-0-core`, `ext-dead-letter`, ...
    pub suite: String,
    pub body: Value,
}

impl Case {
    /// The longest sleep the case asks for, to group slow cases.
    pub fn waits_ms(&self) -> u64 {
        self.steps()
            .map(|step| {
                step.get("duration_ms").and_then(Value::as_u64).unwrap_or(0)
                    + step.get("delay_ms").and_then(Value::as_u64).unwrap_or(0)
            })
            .sum()
    }

    fn steps(&self) -> impl Iterator<Item = &Value> {
        ["setup", "steps", "teardown"]
            .into_iter()
            .filter_map(|part| match self.body.get(part) {
                Some(Value::Array(steps)) => Some(steps.iter()),
                Some(Value::Object(object)) => object.get("steps").and_then(Value::as_array).map(|s| s.iter()),
                _ => None,
            })
            .flatten()
    }
}

/// All cases under `suites`, sorted by path.
pub fn load_cases(suites: &Path) -> anyhow::Result<Vec<Case>> {
    let mut files = Vec::new();
    collect_json(suites, &mut files)?;
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let body: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
            let path = file.strip_prefix(suites)?.to_string_lossy().into_owned();
            Ok(Case {
                test_id: body["test_id"].as_str().unwrap_or(&path).to_string(),
                suite: path.split('/').next().unwrap_or_default().to_string(),
                path,
                body,
            })
        })
        .collect()
}

fn collect_json(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_json(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// What happened to one case: empty `failures` means it passed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub test_id: String,
    pub path: String,
    pub suite: String,
    pub failures: Vec<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Plays cases against `base` (`http://host:port`).
pub struct Runner {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Called before each case to give it an empty queue (the server's reset endpoint).
    reset_path: Option<String>,
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    text: String,
    body: Value,
}

impl Runner {
    pub fn new(base: impl Into<String>, reset_path: Option<String>) -> Runner {
        Runner {
            base: base.into(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            reset_path,
        }
    }

    pub async fn run(&self, case: &Case) -> Outcome {
        let mut failures = Vec::new();
        if let Some(reset) = &self.reset_path
            && let Err(err) = self.send("POST", reset, &HashMap::new(), None).await
        {
            failures.push(format!("reset failed: {err:#}"));
        }
        let mut context = Templates::default();
        for step in case.steps() {
            if let Err(failure) = self.step(step, &mut context).await {
                let id = step.get("id").and_then(Value::as_str).unwrap_or("?");
                failures.push(format!("{id}: {failure}"));
                break;
            }
        }
        Outcome {
            test_id: case.test_id.clone(),
            path: case.path.clone(),
            suite: case.suite.clone(),
            failures,
        }
    }

    async fn step(&self, step: &Value, context: &mut Templates) -> Result<(), String> {
        let action = step.get("action").and_then(Value::as_str).unwrap_or("");
        let wait = |field: &str| step.get(field).and_then(Value::as_u64).unwrap_or(0);
        if action == "WAIT" {
            let ms = if wait("duration_ms") > 0 {
                wait("duration_ms")
            } else {
                wait("delay_ms")
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Ok(());
        }
        if wait("delay_ms") > 0 {
            tokio::time::sleep(Duration::from_millis(wait("delay_ms"))).await;
        }
        let empty = json!({});
        let assertions = context.substitute(step.get("assertions").unwrap_or(&empty));
        if action == "ASSERT" {
            return check_cross_step(&assertions, context);
        }
        let path = context.substitute_text(step.get("path").and_then(Value::as_str).unwrap_or("/"));
        let headers: HashMap<String, String> = step
            .get("headers")
            .and_then(Value::as_object)
            .map(|headers| {
                headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let body = step.get("body").map(|body| context.substitute(body));
        let started = Instant::now();
        let response = self
            .send(action, &path, &headers, body.as_ref())
            .await
            .map_err(|err| format!("{action} {path}: {err:#}"))?;
        let elapsed = started.elapsed();
        let id = step.get("id").and_then(Value::as_str).unwrap_or("").to_string();
        context.responses.insert(id, response.body.clone());
        if let Some(Value::Object(captures)) = step.get("capture").or_else(|| step.get("captures")) {
            for (name, path) in captures {
                if let Some(value) = path.as_str().and_then(|p| json_path(&response.body, p)) {
                    context.variables.insert(name.clone(), value);
                }
            }
        }
        check_response(&assertions, &response, elapsed).map_err(|failure| {
            format!(
                "{action} {path}: {failure} (status {}, body {})",
                response.status,
                truncate(&response.text, 600)
            )
        })
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &HashMap<String, String>,
        body: Option<&Value>,
    ) -> anyhow::Result<Response> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let payload = match body {
            None | Some(Value::Null) => Bytes::new(),
            Some(body) => Bytes::from(body.to_string()),
        };
        if !payload.is_empty() && !headers.keys().any(|h| h.eq_ignore_ascii_case("content-type")) {
            request = request.header("content-type", "application/json");
        }
        let response = tokio::time::timeout(
            Duration::from_secs(60),
            self.client.request(request.body(Full::new(payload))?),
        )
        .await
        .context("no response within 60 s")??;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let bytes = response.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Response {
            status,
            headers,
            text,
            body,
        })
    }
}

/// Earlier responses (by step id) and captured variables, for `{{...}}` templates.
#[derive(Default)]
struct Templates {
    responses: HashMap<String, Value>,
    variables: HashMap<String, Value>,
}

impl Templates {
    fn resolve(&self, reference: &str) -> Option<Value> {
        if let Some(rest) = reference.strip_prefix("steps.") {
            let (step, path) = rest.split_once(".response.body")?;
            let body = self.responses.get(step)?;
            let path = path.strip_prefix('.').unwrap_or(path);
            return if path.is_empty() {
                Some(body.clone())
            } else {
                json_path(body, &format!("$.{path}"))
            };
        }
        self.variables.get(reference).cloned()
    }

    /// Replaces every `{{reference}}` it can resolve; unresolved ones stay as written.
    fn substitute_text(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            let Some(end) = rest[start..].find("}}") else { break };
            let reference = rest[start + 2..start + end].trim();
            out.push_str(&rest[..start]);
            match self.resolve(reference) {
                Some(Value::String(s)) => out.push_str(&s),
                Some(value) => out.push_str(&value.to_string()),
                None => out.push_str(&rest[start..start + end + 2]),
            }
            rest = &rest[start + end + 2..];
        }
        out.push_str(rest);
        out
    }

    fn substitute(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.substitute_text(text)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.substitute(v)).collect()),
            Value::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (self.substitute_text(k), self.substitute(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

fn check_response(assertions: &Value, response: &Response, elapsed: Duration) -> Result<(), String> {
    let status = json!(response.status);
    if let Some(expected) = assertions.get("status")
        && !matches(&status, Some(expected))
    {
        return Err(format!("status {} does not match {expected}", response.status));
    }
    if let Some(Value::Array(allowed)) = assertions.get("status_in")
        && !allowed.contains(&status)
    {
        return Err(format!("status {} not in {allowed:?}", response.status));
    }
    if let Some(body) = assertions.get("body") {
        check_body(body, &response.body)?;
    }
    if let Some(Value::Array(paths)) = assertions.get("body_absent") {
        for path in paths.iter().filter_map(Value::as_str) {
            if json_path(&response.body, path).is_some() {
                return Err(format!("{path} is present"));
            }
        }
    }
    if let Some(Value::Array(needles)) = assertions.get("body_contains") {
        for needle in needles.iter().filter_map(Value::as_str) {
            if !response.text.contains(needle) {
                return Err(format!("body lacks {needle:?}"));
            }
        }
    }
    if let Some(Value::Object(headers)) = assertions.get("headers") {
        for (name, expected) in headers {
            let actual = response
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| Value::String(v.clone()));
            if !matches_header(actual.as_ref(), expected) {
                return Err(format!("header {name}: {actual:?} does not match {expected}"));
            }
        }
    }
    if let Some(Value::Object(timing)) = assertions.get("timing_ms") {
        let ms = elapsed.as_millis() as f64;
        if let Some(limit) = timing.get("less_than").and_then(Value::as_f64)
            && ms >= limit
        {
            return Err(format!("took {ms} ms, not under {limit}"));
        }
        if let Some(limit) = timing.get("greater_than").and_then(Value::as_f64)
            && ms <= limit
        {
            return Err(format!("took {ms} ms, not over {limit}"));
        }
        if let Some(target) = timing.get("approximate").and_then(Value::as_f64)
            && !approximately(ms, target)
        {
            return Err(format!("took {ms} ms, not about {target}"));
        }
    }
    Ok(())
}

fn matches_header(actual: Option<&Value>, expected: &Value) -> bool {
    match expected {
        // Exact, though a media type may carry parameters (`; charset=utf-8`).
        Value::String(text) => actual
            .and_then(Value::as_str)
            .is_some_and(|a| a == text || a.split(';').next().is_some_and(|m| m.trim() == text)),
        other => matches(actual.unwrap_or(&Value::Null), Some(other)) && actual.is_some(),
    }
}

fn check_body(assertions: &Value, body: &Value) -> Result<(), String> {
    let Value::Object(assertions) = assertions else {
        return Ok(());
    };
    for (path, expected) in assertions {
        if path == "$or" {
            let alternatives = expected.as_array().cloned().unwrap_or_default();
            if !alternatives
                .iter()
                .any(|alternative| check_body(alternative, body).is_ok())
            {
                return Err(format!("no alternative of $or matched: {expected}"));
            }
            continue;
        }
        let actual = json_path(body, path);
        if !matches_at(actual.as_ref(), expected) {
            return Err(format!(
                "{path} = {} does not match {expected}",
                describe(actual.as_ref())
            ));
        }
    }
    Ok(())
}

fn describe(value: Option<&Value>) -> String {
    value.map_or("(absent)".to_string(), |v| truncate(&v.to_string(), 300))
}

/// A matcher against a value that may be absent.
fn matches_at(actual: Option<&Value>, expected: &Value) -> bool {
    match expected {
        Value::String(text) if text == "absent" => actual.is_none(),
        Value::String(text) if text == "exists" => actual.is_some(),
        Value::Object(ops) if ops.contains_key("$exists") => {
            let wanted = ops["$exists"].as_bool().unwrap_or(true);
            if actual.is_some() != wanted {
                return false;
            }
            let rest: serde_json::Map<String, Value> = ops
                .iter()
                .filter(|(k, _)| *k != "$exists")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            rest.is_empty() || actual.is_some_and(|a| matches(a, Some(&Value::Object(rest))))
        }
        Value::Object(ops) if ops.contains_key("$or") => ops["$or"]
            .as_array()
            .is_some_and(|alternatives| alternatives.iter().any(|alt| matches_at(actual, alt))),
        Value::Object(ops) if ops.contains_key("$empty") => {
            let empty = match actual {
                None | Some(Value::Null) => true,
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::String(s)) => s.is_empty(),
                _ => false,
            };
            empty == ops["$empty"].as_bool().unwrap_or(true)
        }
        _ => actual.is_some() && matches(actual.unwrap_or(&Value::Null), Some(expected)),
    }
}

fn matches(actual: &Value, expected: Option<&Value>) -> bool {
    let Some(expected) = expected else { return true };
    match expected {
        Value::String(text) => matches_text(actual, text),
        Value::Array(items) => actual
            .as_array()
            .is_some_and(|a| a.len() == items.len() && a.iter().zip(items).all(|(x, m)| matches_at(Some(x), m))),
        Value::Object(ops) if ops.keys().any(|k| k.starts_with('$') || k == "range") => {
            ops.iter().all(|(op, arg)| match op.as_str() {
                "$type" => type_name(actual) == arg.as_str().unwrap_or(""),
                "$match" => actual
                    .as_str()
                    .zip(arg.as_str())
                    .is_some_and(|(a, pattern)| regex_lite::Regex::new(pattern).is_ok_and(|re| re.is_match(a))),
                "$in" => arg
                    .as_array()
                    .is_some_and(|options| options.iter().any(|option| matches(actual, Some(option)))),
                "$eq" => actual == arg,
                "$size" => {
                    let len = actual.as_array().map(Vec::len);
                    match arg {
                        Value::Object(bounds) => len.is_some_and(|len| {
                            bounds
                                .get("$gte")
                                .and_then(Value::as_u64)
                                .is_none_or(|min| len as u64 >= min)
                                && bounds
                                    .get("$lte")
                                    .and_then(Value::as_u64)
                                    .is_none_or(|max| len as u64 <= max)
                        }),
                        other => len.is_some_and(|len| Some(len as u64) == other.as_u64()),
                    }
                }
                "$gte" | "$gt" | "$lte" | "$lt" => {
                    actual
                        .as_f64()
                        .zip(arg.as_f64())
                        .is_some_and(|(a, b)| match op.as_str() {
                            "$gte" => a >= b,
                            "$gt" => a > b,
                            "$lte" => a <= b,
                            _ => a < b,
                        })
                }
                "range" => actual.as_f64().is_some_and(|n| {
                    arg.get("min").and_then(Value::as_f64).is_none_or(|min| n >= min)
                        && arg.get("max").and_then(Value::as_f64).is_none_or(|max| n <= max)
                }),
                "$or" | "$exists" | "$empty" => matches_at(Some(actual), &json!({ op: arg })),
                _ => false,
            })
        }
        Value::Object(fields) => actual.as_object().is_some_and(|object| {
            fields
                .iter()
                .all(|(key, expected)| matches_at(object.get(key), expected))
        }),
        Value::Number(n) => actual.as_f64().is_some_and(|a| Some(a) == n.as_f64()),
        other => actual == other,
    }
}

/// A text matcher of the suite (`string:uuid`, `number:range(1,5)`, `array:length(2)`,
/// `one_of:a,b`, `contains:x`, `~100`, `any`), or a literal string.
fn matches_text(actual: &Value, text: &str) -> bool {
    if let Some(rest) = text.strip_prefix("string:") {
        return actual.as_str().is_some_and(|s| matches_string(s, rest));
    }
    if let Some(rest) = text.strip_prefix("number:") {
        return actual.as_f64().is_some_and(|n| matches_number(n, rest));
    }
    if let Some(rest) = text.strip_prefix("one_of:") {
        let shown = actual.as_str().map_or_else(|| actual.to_string(), String::from);
        return rest.split(',').any(|option| option.trim() == shown);
    }
    if let Some(rest) = text.strip_prefix("array:") {
        return actual.as_array().is_some_and(|items| matches_array(items, rest));
    }
    if let Some(element) = text.strip_prefix("not_contains:") {
        return actual
            .as_array()
            .is_some_and(|items| !items.iter().any(|item| display(item) == element));
    }
    if let Some(element) = text.strip_prefix("contains:") {
        return actual
            .as_array()
            .is_some_and(|items| items.iter().any(|item| display(item) == element));
    }
    if let Some(target) = text.strip_prefix('~').and_then(|t| t.parse::<f64>().ok()) {
        return actual.as_f64().is_some_and(|n| approximately(n, target));
    }
    match text {
        "any" => !actual.is_null(),
        _ => actual.as_str() == Some(text),
    }
}

/// `string:<rest>`: nonempty, uuid, uuidv7, datetime, contains:<needle>, pattern(<regex>).
fn matches_string(s: &str, rest: &str) -> bool {
    match rest {
        "nonempty" | "non_empty" => !s.is_empty(),
        "uuid" => is_pattern(s, "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
        "uuidv7" => is_pattern(
            s,
            "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
        ),
        "datetime" => is_pattern(s, r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"),
        _ => {
            if let Some(needle) = rest.strip_prefix("contains:") {
                s.contains(needle)
            } else if let Some(pattern) = rest.strip_prefix("pattern(").and_then(|p| p.strip_suffix(')')) {
                is_pattern(s, pattern)
            } else {
                false
            }
        }
    }
}

/// `number:<rest>`: positive, non_negative, range(<low>,<high>).
fn matches_number(n: f64, rest: &str) -> bool {
    match rest {
        "positive" => n > 0.0,
        "non_negative" => n >= 0.0,
        _ => rest
            .strip_prefix("range(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.split_once(','))
            .and_then(|(a, b)| Some((a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?)))
            .is_some_and(|(low, high)| low <= n && n <= high),
    }
}

/// `array:<rest>`: nonempty, empty, length(<n>), min_length(<n>) (or min:<n>).
fn matches_array(items: &[Value], rest: &str) -> bool {
    let count = |spec: &str| {
        spec.trim_matches(|c| c == '(' || c == ')' || c == ':')
            .parse::<usize>()
            .ok()
    };
    match rest {
        "nonempty" => !items.is_empty(),
        "empty" => items.is_empty(),
        _ => {
            if let Some(n) = rest.strip_prefix("length").and_then(count) {
                items.len() == n
            } else if let Some(n) = rest
                .strip_prefix("min_length")
                .or_else(|| rest.strip_prefix("min"))
                .and_then(count)
            {
                items.len() >= n
            } else {
                false
            }
        }
    }
}

fn approximately(actual: f64, target: f64) -> bool {
    let tolerance = (target * 0.5).max(100.0);
    (actual - target).abs() <= tolerance
}

fn display(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn is_pattern(text: &str, pattern: &str) -> bool {
    regex_lite::Regex::new(pattern).is_ok_and(|re| re.is_match(text))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `ASSERT` steps: `exclusive_claim` over several fetches, `equality` of earlier bodies.
fn check_cross_step(assertions: &Value, context: &Templates) -> Result<(), String> {
    if let Some(claim) = assertions.get("exclusive_claim") {
        let job_id = claim["job_id"].as_str().unwrap_or_default();
        let fetches: Vec<Vec<Value>> = claim["fetches"]
            .as_array()
            .map(|fetches| {
                fetches
                    .iter()
                    .map(|fetch| match fetch {
                        Value::String(text) => serde_json::from_str(text).unwrap_or_default(),
                        Value::Array(items) => items.clone(),
                        _ => Vec::new(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let holders = fetches
            .iter()
            .filter(|jobs| jobs.iter().any(|job| job["id"] == job_id))
            .count();
        let empties = fetches.iter().filter(|jobs| jobs.is_empty()).count();
        if claim.get("exactly_one_has_job").and_then(Value::as_bool) == Some(true) && holders != 1 {
            return Err(format!("{holders} fetches hold job {job_id}, expected exactly one"));
        }
        if claim.get("exactly_one_empty").and_then(Value::as_bool) == Some(true) && empties != 1 {
            return Err(format!("{empties} fetches were empty, expected exactly one"));
        }
    }
    if let Some(Value::Object(pairs)) = assertions.get("equality") {
        for (left, right) in pairs {
            let reference = left.trim_start_matches("$.");
            let left_value = context.resolve(reference);
            let right_value = match right {
                Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| right.clone()),
                other => other.clone(),
            };
            if left_value.as_ref() != Some(&right_value) {
                return Err(format!(
                    "{left} differs from {}",
                    truncate(&right_value.to_string(), 300)
                ));
            }
        }
    }
    Ok(())
}

/// The JSONPath subset the cases use: `$.a.b`, `[0]`, `[*]`, `[?(@.field=='value')]`.
pub fn json_path(root: &Value, path: &str) -> Option<Value> {
    let rest = path.strip_prefix('$')?;
    let mut current = vec![root.clone()];
    let mut wildcard = false;
    let mut chars = rest.char_indices().peekable();
    let bytes = rest;
    while let Some((i, c)) = chars.next() {
        match c {
            '.' => {
                let end = bytes[i + 1..].find(['.', '[']).map_or(bytes.len(), |e| e + i + 1);
                let key = &bytes[i + 1..end];
                current = current.iter().filter_map(|v| v.get(key).cloned()).collect();
                while chars.peek().is_some_and(|(j, _)| *j < end) {
                    chars.next();
                }
            }
            '[' => {
                let close = find_bracket_end(bytes, i)?;
                let inner = &bytes[i + 1..close];
                current = if inner == "*" {
                    wildcard = true;
                    current
                        .iter()
                        .filter_map(Value::as_array)
                        .flat_map(|items| items.iter().cloned())
                        .collect()
                } else if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                    let (field, value) = filter.split_once("==")?;
                    let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
                    current
                        .iter()
                        .filter_map(|v| {
                            v.as_array()?
                                .iter()
                                .find(|item| item.get(field.trim()).is_some_and(|f| display(f) == value))
                                .cloned()
                        })
                        .collect()
                } else {
                    let index: usize = inner.trim_matches(|c| c == '\'' || c == '"').parse().ok()?;
                    current.iter().filter_map(|v| v.get(index).cloned()).collect()
                };
                while chars.peek().is_some_and(|(j, _)| *j <= close) {
                    chars.next();
                }
            }
            _ => return None,
        }
    }
    if wildcard {
        Some(Value::Array(current))
    } else {
        current.into_iter().next()
    }
}

fn find_bracket_end(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Pass counts per suite: (passed, total).
pub fn tally(outcomes: &[Outcome]) -> BTreeMap<String, (usize, usize)> {
    let mut counts = BTreeMap::new();
    for outcome in outcomes {
        let entry = counts.entry(outcome.suite.clone()).or_insert((0, 0));
        entry.1 += 1;
        if outcome.passed() {
            entry.0 += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths_resolve() {
        let body = json!({"jobs": [{"id": "a", "state": "x"}, {"id": "b", "state": "y", "args": [[1, 2]]}]});
        assert_eq!(json_path(&body, "$.jobs[1].id"), Some(json!("b")));
        assert_eq!(json_path(&body, "$.jobs[1].args[0][1]"), Some(json!(2)));
        assert_eq!(json_path(&body, "$.jobs[*].id"), Some(json!(["a", "b"])));
        assert_eq!(json_path(&body, "$.jobs[?(@.id=='b')].state"), Some(json!("y")));
        assert_eq!(json_path(&body, "$.jobs[?(@.id=='c')]"), None);
        assert_eq!(json_path(&body, "$.missing"), None);
    }

    #[test]
    fn matchers_match_and_refuse() {
        assert!(matches_at(Some(&json!(201)), &json!({"$in": [200, 201]})));
        assert!(!matches_at(Some(&json!(404)), &json!("number:range(400,403)")));
        assert!(matches_at(None, &json!({"$exists": false})));
        assert!(!matches_at(None, &json!({"$exists": true, "$type": "string"})));
        assert!(matches_at(Some(&json!(1400)), &json!("~1000")));
        assert!(!matches_at(Some(&json!(2000)), &json!("~1000")));
        assert!(matches_at(Some(&json!([1, "a"])), &json!([1, "string:nonempty"])));
        assert!(matches_at(
            Some(&json!("2026-01-02T03:04:05.123Z")),
            &json!("string:datetime")
        ));
        assert!(!matches_at(Some(&json!("2026-01-02")), &json!("string:datetime")));
    }
}
