//! OJS workflows as a client describes them (`ojs-workflows.md`): a chain of steps run one after
//! another, a group of jobs run side by side, or a batch (a group with callbacks). A step of a
//! chain, or a job of a group or batch, may itself be a workflow (§10), down to [`MAX_DEPTH`]
//! levels. This module validates the request; [`Queue`] stores the workflow and
//! triggers in the layout drive it as its jobs settle.

use serde_json::{Value, json};

use tokio_postgres::error::SqlState;

use super::envelope::{self, NewJob};
use super::job::{Job, State};
use super::jobs::{Answer, Placement, insert_placed};
use super::{EngineError, ErrorKind, Queue};

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
    /// Every job of the tree, callbacks included.
    fn jobs<'a>(&'a self, into: &mut Vec<&'a NewJob>) {
        for member in &self.members {
            match member {
                Member::Job(job) => into.push(job),
                Member::Workflow(inner) => inner.jobs(into),
            }
        }
        into.extend(self.callbacks.iter().map(|(_, job)| job));
    }

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
pub fn parse_workflow(body: Value, max_args_bytes: usize) -> Result<NewWorkflow, EngineError> {
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
fn parse_level(body: Value, path: &str, depth: usize, max_args_bytes: usize) -> Result<NewWorkflow, EngineError> {
    let at = |field: &str| field_path(path, field);
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
    let members = parse_members(fields.remove(list_field), kind, &at(list_field), depth, max_args_bytes)?;
    let callbacks = parse_callbacks(kind, fields.remove("callbacks"), path, max_args_bytes)?;
    Ok(NewWorkflow {
        id,
        kind,
        name,
        members,
        callbacks,
    })
}

/// Where `field` of the workflow at `path` is, for an error.
fn field_path(path: &str, field: &str) -> String {
    if path == "$" {
        format!("$.{field}")
    } else {
        format!("{path}.{field}")
    }
}

/// The chain's `steps` or the group's or batch's `jobs` (at `path`): jobs, and workflows nested
/// up to [`MAX_DEPTH`].
fn parse_members(
    list: Option<Value>,
    kind: Kind,
    path: &str,
    depth: usize,
    max_args_bytes: usize,
) -> Result<Vec<Member>, EngineError> {
    let list_field = if kind == Kind::Chain { "steps" } else { "jobs" };
    let Some(Value::Array(list)) = list else {
        return Err(invalid(
            path,
            &format!("a {} needs a \"{list_field}\" array", kind.as_str()),
        ));
    };
    if list.is_empty() {
        return Err(invalid(path, &format!("\"{list_field}\" must hold at least one job")));
    }
    list.into_iter()
        .enumerate()
        .map(|(index, item)| {
            let path = format!("{path}[{index}]");
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
        .collect()
}

/// A batch's `callbacks` (at least one, each a job); no other workflow has any.
fn parse_callbacks(
    kind: Kind,
    callbacks: Option<Value>,
    path: &str,
    max_args_bytes: usize,
) -> Result<Vec<(&'static str, NewJob)>, EngineError> {
    let at = |field: &str| field_path(path, field);
    match (kind, callbacks) {
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
                .collect::<Result<Vec<_>, EngineError>>()?;
            if callbacks.is_empty() {
                return Err(invalid(&at("callbacks"), "a batch needs at least one callback"));
            }
            Ok(callbacks)
        }
        (Kind::Batch, _) => Err(invalid(&at("callbacks"), "a batch needs a \"callbacks\" object")),
        (_, None | Some(Value::Null)) => Ok(Vec::new()),
        (_, Some(_)) => Err(invalid(&at("callbacks"), "only a batch has callbacks")),
    }
}

/// Calls `f` on every job of a `POST /workflows` body as sent (its members, those of the
/// workflows nested in it, its callbacks), before it is validated: what is not a job or a
/// workflow is left for [`parse_workflow`] to refuse.
pub fn for_each_job<E>(workflow: &mut Value, f: &mut impl FnMut(&mut Value) -> Result<(), E>) -> Result<(), E> {
    let Value::Object(fields) = workflow else {
        return Ok(());
    };
    for list in ["steps", "jobs"] {
        if let Some(Value::Array(members)) = fields.get_mut(list) {
            for member in members {
                match is_workflow(member) {
                    true => for_each_job(member, f)?,
                    false => f(member)?,
                }
            }
        }
    }
    if let Some(Value::Object(callbacks)) = fields.get_mut("callbacks") {
        for job in callbacks.values_mut().filter(|job| !is_workflow(job)) {
            f(job)?;
        }
    }
    Ok(())
}

/// A member that lists steps or jobs is a nested workflow (§10.3), whatever else it says.
fn is_workflow(member: &Value) -> bool {
    member.get("steps").is_some_and(Value::is_array) || member.get("jobs").is_some_and(Value::is_array)
}

/// One job of a workflow: a plain job envelope. Unique options would make a step's release
/// depend on other jobs, so they are refused.
fn member_job(job: Value, path: &str, max_args_bytes: usize) -> Result<NewJob, EngineError> {
    let job = envelope::parse_job(job, max_args_bytes)
        .and_then(|job| job.without_dependencies("a workflow (order its members by its kind)"))
        .map_err(|error| invalid(path, &error.message))?;
    if job.unique.is_some() {
        return Err(invalid(path, "unique options are not supported in workflows"));
    }
    Ok(job)
}

fn invalid(path: &str, message: &str) -> EngineError {
    EngineError::new(
        ErrorKind::InvalidWorkflow,
        format!("workflow validation failed: {path}: {message}"),
    )
    .with_details(json!({ "validation_errors": [{ "path": path, "message": message }] }))
}

impl Queue {
    /// Stores a workflow, its nested workflows and all their jobs in one transaction: what runs
    /// first is enqueued now (a group's or batch's jobs, a chain's first step, and so on down the
    /// nested workflows among them); later steps, callbacks and nested workflows whose turn has
    /// not come wait as `pending` for the triggers of the layout to release them.
    /// The workflow and its jobs belong to `tenant`: another tenant's reads and cancels find no
    /// such workflow.
    pub async fn create_workflow(&self, workflow: &NewWorkflow, tenant: &str) -> Result<Value, EngineError> {
        let mut jobs = Vec::new();
        workflow.jobs(&mut jobs);
        self.check_args(jobs.into_iter(), false).await?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        store_workflow(&tx, workflow, tenant, None, true).await?;
        let row = tx
            .query_one(
                "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1",
                &[&workflow.id],
            )
            .await
            .map_err(EngineError::sql)?;
        tx.commit().await.map_err(EngineError::sql)?;
        Ok(row.get("workflow"))
    }

    /// A workflow of `tenant`; another tenant's is not found.
    pub async fn get_workflow(&self, id: &str, tenant: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1 AND w.tenant = $2",
                &[&id, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("workflow")).ok_or_else(|| workflow_not_found(id))
    }

    /// Cancels a running (or, nested, still waiting) workflow: its jobs that have not started
    /// are cancelled, and so are its nested workflows with theirs; active ones may finish, but
    /// release nothing further. Another tenant's workflow is not found, and is left as it was.
    pub async fn cancel_workflow(&self, id: &str, tenant: &str) -> Result<Value, EngineError> {
        let mut client = self.client().await?;
        // Cancelling walks down the tree while a settling nested workflow walks up it, so the
        // two can deadlock; PostgreSQL then aborts one of them, and a cancel tries again.
        let mut attempts = 0;
        let cancelled = loop {
            attempts += 1;
            match cancel_workflow_once(&mut client, id, tenant).await {
                Err(CancelError::Sql(err)) if err.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) && attempts < 3 => {}
                Err(CancelError::Sql(err)) => return Err(EngineError::sql(err)),
                Err(CancelError::Ojs(error)) => return Err(error),
                Ok(cancelled) => break cancelled,
            }
        };
        // The cancel has committed: from here on it is answered as done, whatever fails (a
        // second cancel would only be told it is already cancelled).
        if !sweep_leftovers(&client, id).await || !cancelled.left_over {
            return Ok(cancelled.workflow);
        }
        // The sweep cancelled jobs the answer read before: read them again.
        match client
            .query_one(
                "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1",
                &[&id],
            )
            .await
        {
            Ok(row) => Ok(row.get("workflow")),
            Err(err) => {
                tracing::warn!(workflow_id = id, error = %err, "reading a cancelled workflow again failed");
                Ok(cancelled.workflow)
            }
        }
    }

    /// The maintenance pass's sweep: cancels the leftovers of up to `batch` stopped workflows
    /// still marked as having some (their stop's own sweep failed or never ran), skipping those
    /// another transaction holds for a later pass. Returns how many jobs it cancelled.
    pub async fn sweep_stopped_workflows(&self, batch: i32) -> Result<u64, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT ojs.workflow_sweep_marked($1) AS swept", &[&batch])
            .await
            .map_err(EngineError::sql)?;
        Ok(row.get::<_, i32>("swept").unsigned_abs().into())
    }
}

/// After a transaction that settled `job` committed: a workflow member that failed or was
/// cancelled stops its chain (and a chain it is nested in), whose waiting steps are cancelled;
/// this sweeps up those that another transaction held at that moment.
pub(super) async fn after_member_settled(client: &tokio_postgres::Client, job: &Job) {
    if let Some(workflow_id) = &job.workflow_id
        && matches!(job.state, State::Discarded | State::Cancelled)
    {
        sweep_leftovers(client, workflow_id).await;
    }
}

/// The sweep after a stop of workflow `id`, or of a chain above it, committed (a cancel, a step
/// that failed for good): cancels the jobs the stop skipped because another transaction held
/// them, waiting for those holders; now that the stop is there for all to see, waiting for them
/// deadlocks with nobody. Whether it ran: a failure is logged and left to the maintenance pass
/// (the stopped workflows stay marked), since the stop itself happened and its request answers
/// so.
async fn sweep_leftovers(client: &tokio_postgres::Client, id: &str) -> bool {
    match client.execute("SELECT ojs.workflow_cancel_leftovers($1)", &[&id]).await {
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(workflow_id = id, error = %err,
                "sweeping a stopped workflow's leftovers failed; the maintenance pass will");
            false
        }
    }
}

enum CancelError {
    Sql(tokio_postgres::Error),
    Ojs(EngineError),
}

impl From<tokio_postgres::Error> for CancelError {
    fn from(err: tokio_postgres::Error) -> Self {
        CancelError::Sql(err)
    }
}

/// A committed cancel: the workflow as it then was, and whether the cancel skipped jobs another
/// transaction held.
struct Cancelled {
    workflow: Value,
    left_over: bool,
}

async fn cancel_workflow_once(
    client: &mut deadpool_postgres::Client,
    id: &str,
    tenant: &str,
) -> Result<Cancelled, CancelError> {
    let tx = client.transaction().await?;
    let state: Option<String> = tx
        .query_opt(
            "SELECT state FROM ojs.workflows WHERE id = $1 AND tenant = $2 FOR UPDATE",
            &[&id, &tenant],
        )
        .await?
        .map(|row| row.get("state"));
    match state.as_deref() {
        None => return Err(CancelError::Ojs(workflow_not_found(id))),
        Some("running" | "pending") => {}
        Some(state) => {
            return Err(CancelError::Ojs(EngineError::conflict(format!(
                "workflow {id} is already in terminal state {state:?}"
            ))));
        }
    }
    // The workflow goes first, so the triggers see it cancelled and release nothing. Jobs
    // another transaction holds are skipped (a claim, a job's own cancel or expiry): waiting
    // for them here could deadlock with its trigger waiting for the workflow row. The caller
    // sweeps them up once this commits.
    tx.execute(
        "UPDATE ojs.workflows SET state = 'cancelled', cancelled_at = now(), completed_at = now() WHERE id = $1",
        &[&id],
    )
    .await?;
    tx.execute("SELECT ojs.workflow_cancel_members($1)", &[&id]).await?;
    // Read before the commit, so that the answer needs nothing more of the database after it.
    let row = tx
        .query_one(
            "SELECT ojs.workflow_json(w) AS workflow, w.has_leftovers FROM ojs.workflows w WHERE w.id = $1",
            &[&id],
        )
        .await?;
    tx.commit().await?;
    Ok(Cancelled {
        workflow: row.get("workflow"),
        left_over: row.get("has_leftovers"),
    })
}

/// One workflow of a tree and, recursively, the workflows nested in it. `parent` is the parent
/// workflow and the member index this one takes in it; `now` says whether it runs from the start.
fn store_workflow<'a>(
    tx: &'a deadpool_postgres::Transaction<'a>,
    workflow: &'a NewWorkflow,
    tenant: &'a str,
    parent: Option<(&'a str, i32)>,
    now: bool,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), EngineError>> + Send + 'a>> {
    Box::pin(async move {
        let (parent_id, parent_step) = parent.unzip();
        tx.execute(
            "INSERT INTO ojs.workflows (id, type, name, state, jobs_total, parent_id, parent_step, tenant)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &workflow.id,
                &workflow.kind.as_str(),
                &workflow.name,
                &if now { "running" } else { "pending" },
                &(workflow.members.len() as i32),
                &parent_id,
                &parent_step,
                &tenant,
            ],
        )
        .await
        .map_err(|err| match err.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => EngineError::duplicate("a workflow with this id already exists"),
            _ => EngineError::sql(err),
        })?;
        // A chain runs its first member first; a group or batch all of them at once.
        let runs_now = |index: usize| now && (workflow.kind != Kind::Chain || index == 0);
        let mut placement = Placement {
            workflow_id: Some(&workflow.id),
            ..Placement::of(tenant)
        };
        let mut jobs = Vec::new();
        for (index, member) in workflow.members.iter().enumerate() {
            match member {
                Member::Job(job) => {
                    jobs.push(NewJob::clone(job));
                    placement.steps.push(Some(index as i32));
                    placement.callbacks.push(None);
                    placement.held.push(!runs_now(index));
                }
                Member::Workflow(inner) => {
                    store_workflow(tx, inner, tenant, Some((&workflow.id, index as i32)), runs_now(index)).await?;
                }
            }
        }
        for (hook, job) in &workflow.callbacks {
            jobs.push(job.clone());
            placement.steps.push(None);
            placement.callbacks.push(Some(*hook));
            placement.held.push(true);
        }
        if !jobs.is_empty() {
            insert_placed(tx, &jobs, &placement, Answer::Job).await?;
        }
        Ok(())
    })
}

fn workflow_not_found(id: &str) -> EngineError {
    EngineError::not_found(format!("workflow {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<NewWorkflow, EngineError> {
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
            assert_eq!(error.kind, ErrorKind::InvalidWorkflow, "{body}");
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
        assert_eq!(error.kind, ErrorKind::InvalidWorkflow);
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
        assert_eq!(error.kind, ErrorKind::InvalidWorkflow);
    }
}
