//! OJS workflows as a client describes them (`ojs-workflows.md`): a chain of steps run one after
//! another, a group of jobs run side by side, or a batch (a group with callbacks). This module
//! validates the request; [`super::queue::Queue`] stores the workflow and a trigger in the layout
//! drives it as its jobs settle.

use http::StatusCode;
use serde_json::{Value, json};

use super::OjsError;
use super::envelope::{self, NewJob};

/// Jobs in one workflow, callbacks included; a larger fan-out belongs in several workflows.
const MAX_WORKFLOW_JOBS: usize = 10_000;
const CALLBACKS: [&str; 3] = ["on_complete", "on_success", "on_failure"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chain,
    Group,
    Batch,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Chain => "chain",
            Kind::Group => "group",
            Kind::Batch => "batch",
        }
    }
}

pub struct NewWorkflow {
    pub id: String,
    pub kind: Kind,
    pub name: Option<String>,
    /// The chain's steps in order, or the group's or batch's jobs.
    pub jobs: Vec<NewJob>,
    /// A batch's callbacks, by hook name.
    pub callbacks: Vec<(&'static str, NewJob)>,
}

/// Validates a `POST /workflows` body.
pub fn parse_workflow(body: Value, max_args_bytes: usize) -> Result<NewWorkflow, OjsError> {
    let Value::Object(mut fields) = body else {
        return Err(invalid("$", "a workflow must be a JSON object"));
    };
    let kind = match fields.get("type").and_then(Value::as_str) {
        Some("chain") => Kind::Chain,
        Some("group") => Kind::Group,
        Some("batch") => Kind::Batch,
        _ => return Err(invalid("$.type", "\"type\" must be \"chain\", \"group\" or \"batch\"")),
    };
    let id = match fields.get("id") {
        None | Some(Value::Null) => envelope::new_uuid_v7(),
        Some(Value::String(id)) if envelope::is_uuid(id) => id.clone(),
        Some(_) => return Err(invalid("$.id", "\"id\" must be a UUID")),
    };
    let name = match fields.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if name.len() <= 255 => Some(name.clone()),
        Some(_) => return Err(invalid("$.name", "\"name\" must be a string of at most 255 bytes")),
    };
    let list_field = if kind == Kind::Chain { "steps" } else { "jobs" };
    let Some(Value::Array(list)) = fields.remove(list_field) else {
        return Err(invalid(
            &format!("$.{list_field}"),
            &format!("a {} needs a \"{list_field}\" array", kind.as_str()),
        ));
    };
    if list.is_empty() {
        return Err(invalid(
            &format!("$.{list_field}"),
            &format!("\"{list_field}\" must hold at least one job"),
        ));
    }
    let jobs = list
        .into_iter()
        .enumerate()
        .map(|(index, job)| member(job, &format!("$.{list_field}[{index}]"), max_args_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let callbacks = match (kind, fields.remove("callbacks")) {
        (Kind::Batch, Some(Value::Object(mut hooks))) => {
            if let Some(unknown) = hooks.keys().find(|hook| !CALLBACKS.contains(&hook.as_str())) {
                return Err(invalid(
                    &format!("$.callbacks.{unknown}"),
                    "callbacks are on_complete, on_success and on_failure",
                ));
            }
            let callbacks = CALLBACKS
                .iter()
                .filter_map(|hook| hooks.remove(*hook).map(|job| (*hook, job)))
                .map(|(hook, job)| Ok((hook, member(job, &format!("$.callbacks.{hook}"), max_args_bytes)?)))
                .collect::<Result<Vec<_>, OjsError>>()?;
            if callbacks.is_empty() {
                return Err(invalid("$.callbacks", "a batch needs at least one callback"));
            }
            callbacks
        }
        (Kind::Batch, _) => return Err(invalid("$.callbacks", "a batch needs a \"callbacks\" object")),
        (_, None | Some(Value::Null)) => Vec::new(),
        (_, Some(_)) => return Err(invalid("$.callbacks", "only a batch has callbacks")),
    };
    if jobs.len() + callbacks.len() > MAX_WORKFLOW_JOBS {
        return Err(invalid(
            &format!("$.{list_field}"),
            &format!("a workflow holds at most {MAX_WORKFLOW_JOBS} jobs"),
        ));
    }
    Ok(NewWorkflow {
        id,
        kind,
        name,
        jobs,
        callbacks,
    })
}

/// One job of a workflow: a plain job envelope. Nested workflows are not supported (yet), and
/// unique options would make a step's release depend on other jobs, so both are refused.
fn member(job: Value, path: &str, max_args_bytes: usize) -> Result<NewJob, OjsError> {
    if job.get("steps").is_some_and(Value::is_array) || job.get("jobs").is_some_and(Value::is_array) {
        return Err(invalid(path, "nested workflows are not supported; give jobs only"));
    }
    let job = envelope::parse_job(job, max_args_bytes).map_err(|error| invalid(path, &error.message))?;
    if job.unique.is_some() {
        return Err(invalid(path, "unique options are not supported in workflows"));
    }
    Ok(job)
}

fn invalid(path: &str, message: &str) -> OjsError {
    OjsError::new(
        StatusCode::BAD_REQUEST,
        "invalid_workflow",
        "validation_error",
        format!("workflow validation failed: {path}: {message}"),
    )
    .with_details(json!({ "validation_errors": [{ "path": path, "message": message }] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<NewWorkflow, OjsError> {
        parse_workflow(body, 1 << 20)
    }

    #[test]
    fn accepts_the_three_kinds() {
        let chain = parse(json!({ "type": "chain", "name": "c", "steps": [
            { "type": "a.one", "args": [] }, { "type": "a.two", "args": [1] } ] }))
        .unwrap();
        assert_eq!(
            (chain.kind, chain.jobs.len(), chain.name.as_deref()),
            (Kind::Chain, 2, Some("c"))
        );
        let group = parse(json!({ "type": "group", "jobs": [{ "type": "a.one", "args": [] }] })).unwrap();
        assert_eq!((group.kind, group.jobs.len()), (Kind::Group, 1));
        let batch = parse(json!({ "type": "batch", "jobs": [{ "type": "a.one", "args": [] }],
            "callbacks": { "on_failure": { "type": "a.alert", "args": [] },
                           "on_complete": { "type": "a.report", "args": [] } } }))
        .unwrap();
        let hooks: Vec<&str> = batch.callbacks.iter().map(|(hook, _)| *hook).collect();
        assert_eq!(hooks, ["on_complete", "on_failure"]);
    }

    #[test]
    fn refuses_malformed_workflows() {
        for (body, path) in [
            (json!({ "type": "dag", "jobs": [] }), "$.type"),
            (json!({ "type": "chain", "steps": [] }), "$.steps"),
            (
                json!({ "type": "chain", "jobs": [{ "type": "a.one", "args": [] }] }),
                "$.steps",
            ),
            (json!({ "type": "group", "jobs": [{ "type": "a.one" }] }), "$.jobs[0]"),
            (
                json!({ "type": "batch", "jobs": [{ "type": "a.one", "args": [] }] }),
                "$.callbacks",
            ),
            (
                json!({ "type": "batch", "jobs": [{ "type": "a.one", "args": [] }], "callbacks": {} }),
                "$.callbacks",
            ),
            (
                json!({ "type": "batch", "jobs": [{ "type": "a.one", "args": [] }],
                        "callbacks": { "on_done": { "type": "a.two", "args": [] } } }),
                "$.callbacks.on_done",
            ),
            (
                json!({ "type": "chain", "steps": [{ "type": "group", "jobs": [{ "type": "a.one", "args": [] }] }] }),
                "$.steps[0]",
            ),
        ] {
            let error = parse(body.clone()).err().unwrap_or_else(|| panic!("accepted {body}"));
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(error.code, "invalid_workflow", "{body}");
            assert_eq!(error.details.unwrap()["validation_errors"][0]["path"], path, "{body}");
        }
    }
}
