//! OJS workflows as a client describes them (`ojs-workflows.md`): a chain of steps run one after
//! another, a group of jobs run side by side, or a batch (a group with callbacks). A step of a
//! chain, or a job of a group or batch, may itself be a workflow (§10), down to [`MAX_DEPTH`]
//! levels. This module validates the request; [`super::queue::Queue`] stores the workflow and
//! triggers in the layout drive it as its jobs settle.

use http::StatusCode;
use serde_json::{Value, json};

use super::OjsError;
use super::envelope::{self, NewJob};

/// Jobs in one workflow, nested ones and callbacks included; a larger fan-out belongs in several
/// workflows.
const MAX_WORKFLOW_JOBS: usize = 10_000;
/// Levels of workflows, the outermost included: §10.2 asks for at least three and for deeper
/// ones to be refused at creation.
pub const MAX_DEPTH: usize = 4;
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
    pub members: Vec<Member>,
    /// A batch's callbacks, by hook name.
    pub callbacks: Vec<(&'static str, NewJob)>,
}

/// A chain step, or a job of a group or batch.
pub enum Member {
    Job(Box<NewJob>),
    Workflow(NewWorkflow),
}

impl NewWorkflow {
    /// Jobs in the whole tree, callbacks included.
    fn job_count(&self) -> usize {
        let members: usize = self
            .members
            .iter()
            .map(|member| match member {
                Member::Job(_) => 1,
                Member::Workflow(inner) => inner.job_count(),
            })
            .sum();
        members + self.callbacks.len()
    }
}

/// Validates a `POST /workflows` body.
pub fn parse_workflow(body: Value, max_args_bytes: usize) -> Result<NewWorkflow, OjsError> {
    let workflow = parse_level(body, "$", 1, max_args_bytes)?;
    if workflow.job_count() > MAX_WORKFLOW_JOBS {
        return Err(invalid(
            "$",
            &format!("a workflow holds at most {MAX_WORKFLOW_JOBS} jobs, nested ones included"),
        ));
    }
    Ok(workflow)
}

/// One workflow at `path`, `depth` levels down (the outermost is 1).
fn parse_level(body: Value, path: &str, depth: usize, max_args_bytes: usize) -> Result<NewWorkflow, OjsError> {
    let at = |field: &str| {
        if path == "$" {
            format!("$.{field}")
        } else {
            format!("{path}.{field}")
        }
    };
    let Value::Object(mut fields) = body else {
        return Err(invalid(path, "a workflow must be a JSON object"));
    };
    let kind = match fields.get("type").and_then(Value::as_str) {
        Some("chain") => Kind::Chain,
        Some("group") => Kind::Group,
        Some("batch") => Kind::Batch,
        _ => {
            return Err(invalid(
                &at("type"),
                "\"type\" must be \"chain\", \"group\" or \"batch\"",
            ));
        }
    };
    let id = match fields.get("id") {
        None | Some(Value::Null) => envelope::new_uuid_v7(),
        Some(Value::String(id)) if envelope::is_uuid(id) => id.clone(),
        Some(_) => return Err(invalid(&at("id"), "\"id\" must be a UUID")),
    };
    let name = match fields.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if name.len() <= 255 => Some(name.clone()),
        Some(_) => return Err(invalid(&at("name"), "\"name\" must be a string of at most 255 bytes")),
    };
    let list_field = if kind == Kind::Chain { "steps" } else { "jobs" };
    let Some(Value::Array(list)) = fields.remove(list_field) else {
        return Err(invalid(
            &at(list_field),
            &format!("a {} needs a \"{list_field}\" array", kind.as_str()),
        ));
    };
    if list.is_empty() {
        return Err(invalid(
            &at(list_field),
            &format!("\"{list_field}\" must hold at least one job"),
        ));
    }
    let members = list
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let path = format!("{}[{index}]", at(list_field));
            if !is_workflow(&item) {
                return member_job(item, &path, max_args_bytes).map(|job| Member::Job(Box::new(job)));
            }
            if depth >= MAX_DEPTH {
                return Err(invalid(
                    &path,
                    &format!("workflows nest at most {MAX_DEPTH} levels deep, the outermost included"),
                ));
            }
            parse_level(item, &path, depth + 1, max_args_bytes).map(Member::Workflow)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let callbacks = match (kind, fields.remove("callbacks")) {
        (Kind::Batch, Some(Value::Object(mut hooks))) => {
            if let Some(unknown) = hooks.keys().find(|hook| !CALLBACKS.contains(&hook.as_str())) {
                return Err(invalid(
                    &at(&format!("callbacks.{unknown}")),
                    "callbacks are on_complete, on_success and on_failure",
                ));
            }
            let callbacks = CALLBACKS
                .iter()
                .filter_map(|hook| hooks.remove(*hook).map(|job| (*hook, job)))
                .map(|(hook, job)| {
                    let path = at(&format!("callbacks.{hook}"));
                    if is_workflow(&job) {
                        return Err(invalid(&path, "a callback is a job, not a workflow"));
                    }
                    Ok((hook, member_job(job, &path, max_args_bytes)?))
                })
                .collect::<Result<Vec<_>, OjsError>>()?;
            if callbacks.is_empty() {
                return Err(invalid(&at("callbacks"), "a batch needs at least one callback"));
            }
            callbacks
        }
        (Kind::Batch, _) => return Err(invalid(&at("callbacks"), "a batch needs a \"callbacks\" object")),
        (_, None | Some(Value::Null)) => Vec::new(),
        (_, Some(_)) => return Err(invalid(&at("callbacks"), "only a batch has callbacks")),
    };
    Ok(NewWorkflow {
        id,
        kind,
        name,
        members,
        callbacks,
    })
}

/// A member that lists steps or jobs is a nested workflow (§10.3), whatever else it says.
fn is_workflow(member: &Value) -> bool {
    member.get("steps").is_some_and(Value::is_array) || member.get("jobs").is_some_and(Value::is_array)
}

/// One job of a workflow: a plain job envelope. Unique options would make a step's release
/// depend on other jobs, so they are refused.
fn member_job(job: Value, path: &str, max_args_bytes: usize) -> Result<NewJob, OjsError> {
    let job = envelope::parse_job(job, max_args_bytes)
        .and_then(|job| job.without_dependencies("a workflow (order its members by its kind)"))
        .map_err(|error| invalid(path, &error.message))?;
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
            (chain.kind, chain.members.len(), chain.name.as_deref()),
            (Kind::Chain, 2, Some("c"))
        );
        let group = parse(json!({ "type": "group", "jobs": [{ "type": "a.one", "args": [] }] })).unwrap();
        assert_eq!((group.kind, group.members.len()), (Kind::Group, 1));
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
                json!({ "type": "chain", "steps": [{ "type": "fan", "jobs": [{ "type": "a.one", "args": [] }] }] }),
                "$.steps[0].type",
            ),
            (
                json!({ "type": "chain", "steps": [{ "type": "group", "jobs": [{ "type": "a.one" }] }] }),
                "$.steps[0].jobs[0]",
            ),
            (
                json!({ "type": "batch", "jobs": [{ "type": "a.one", "args": [] }],
                        "callbacks": { "on_complete": { "type": "group", "jobs": [{ "type": "a.two", "args": [] }] } } }),
                "$.callbacks.on_complete",
            ),
        ] {
            let error = parse(body.clone()).err().unwrap_or_else(|| panic!("accepted {body}"));
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(error.code, "invalid_workflow", "{body}");
            assert_eq!(error.details.unwrap()["validation_errors"][0]["path"], path, "{body}");
        }
    }

    /// Levels of `chain` around one job: 1 is a plain chain.
    fn nested(levels: usize) -> Value {
        (1..levels).fold(
            json!({ "type": "chain", "steps": [{ "type": "a.one", "args": [] }] }),
            |inner, _| json!({ "type": "group", "jobs": [{ "type": "a.two", "args": [] }, inner] }),
        )
    }

    #[test]
    fn accepts_nesting_down_to_the_limit_and_refuses_deeper() {
        let workflow = parse(nested(MAX_DEPTH)).unwrap();
        let mut depth = 1;
        let mut level = &workflow;
        while let Some(Member::Workflow(inner)) = level.members.last() {
            depth += 1;
            level = inner;
        }
        assert_eq!((depth, level.kind), (MAX_DEPTH, Kind::Chain));

        let error = parse(nested(MAX_DEPTH + 1)).err().expect("one level too deep");
        assert_eq!(
            (error.status, error.code),
            (StatusCode::BAD_REQUEST, "invalid_workflow")
        );
        let path = format!("${}", ".jobs[1]".repeat(MAX_DEPTH));
        assert_eq!(error.details.unwrap()["validation_errors"][0]["path"], path.as_str());
    }

    #[test]
    fn counts_nested_jobs_against_the_limit() {
        let half: Vec<Value> = (0..MAX_WORKFLOW_JOBS / 2 + 1)
            .map(|_| json!({ "type": "a.one", "args": [] }))
            .collect();
        let body = json!({ "type": "chain", "steps": [
            { "type": "group", "jobs": half.clone() }, { "type": "group", "jobs": half } ] });
        let error = parse(body).err().expect("too many jobs in all");
        assert_eq!(error.code, "invalid_workflow");
    }
}
