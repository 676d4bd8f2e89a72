//! The jobs pages (OJS): queues with their depth and jobs by state, the dead letter with each
//! job's last error and retry/delete, cron schedules, and one job with its errors. OJS
//! authorizes by bearer token, not by access key, so these pages are for root-key sessions only
//! and use the gateway's operator token (`--ojs-token`) in-process: a root key may do anything
//! the operator may, and no other key gains OJS powers through the console (docs/console.md).

use std::fmt::Write;

use http::{Method, StatusCode};
use serde_json::Value;

use super::{Context, Outcome, Request, Response};
use crate::html::{button, esc, form, link, name};

/// Dead-lettered jobs on one page (the OJS route's own bound is 1,000).
const DEAD_LETTER_PAGE: &str = "100";
/// Characters of a job's args or result shown.
const JSON_CHARS: usize = 4096;
/// Queue states OJS counts, in the order shown.
const STATES: [&str; 8] = [
    "available",
    "scheduled",
    "retryable",
    "active",
    "completed",
    "discarded",
    "cancelled",
    "pending",
];

pub(super) fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => name(text),
        other => name(&other.to_string()),
    }
}

/// A JSON value, pretty, at most [`JSON_CHARS`] characters, as text.
fn json_block(value: &Value) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    let shown = match pretty.char_indices().nth(JSON_CHARS) {
        Some((end, _)) => format!("{}\n…", &pretty[..end]),
        None => pretty,
    };
    format!("<pre class=\"value\">{}</pre>", crate::html::value(&shown))
}

/// A job id as a path segment: OJS ids are UUIDs; anything else is refused before it is sent.
pub(super) fn job_id(id: &str) -> Result<&str, String> {
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(id).ok_or_else(|| "That is not a job id.".to_owned())
}

/// A tenant (X-OJS-Tenant) from a request: `default` when none.
pub(super) fn tenant(request: &Request) -> Result<&str, String> {
    match request.arg("tenant").trim() {
        "" => Ok("default"),
        tenant if tenant.len() <= 128 && tenant.bytes().all(|b| b.is_ascii_graphic()) => Ok(tenant),
        _ => Err("A tenant is printable ASCII, at most 128 characters.".to_owned()),
    }
}

pub(super) fn refused(err: &str) -> String {
    format!("<p class=\"flash error\" role=\"alert\">{}</p>", name(err))
}

/// The last error of a job: `code: message`.
fn last_error(job: &Value) -> String {
    let error = if job["error"].is_object() {
        &job["error"]
    } else {
        job["errors"]
            .as_array()
            .and_then(|errors| errors.last())
            .unwrap_or(&Value::Null)
    };
    match (
        error["code"].as_str().or(error["type"].as_str()),
        error["message"].as_str(),
    ) {
        (Some(code), Some(message)) => format!("{}: {}", name(code), name(message)),
        (None, Some(message)) => name(message),
        (Some(code), None) => name(code),
        (None, None) => String::new(),
    }
}

impl Context<'_> {
    /// The OJS client, for root-key sessions with an OJS listener; else why not.
    pub(super) fn ojs(&self) -> Result<&crate::ojs::Ojs, String> {
        if !self.session.admin {
            return Err("The jobs pages are for the root key's sessions: OJS authorizes by its operator token, not by access key.".to_owned());
        }
        self.app.gateway.ojs.as_ref().ok_or_else(|| {
            "The console reaches no OJS listener: it is off, or speaks TLS without a plaintext twin on loopback (--ojs-plaintext-addr)."
                .to_owned()
        })
    }

    pub(super) async fn jobs(&self, request: &Request) -> Response {
        let mut body = String::from("<h1>Jobs</h1>");
        let status = match self.jobs_overview(request).await {
            Ok(page) => {
                body.push_str(&page);
                StatusCode::OK
            }
            Err(err) => {
                body.push_str(&refused(&err));
                StatusCode::FORBIDDEN
            }
        };
        self.page(status, "Jobs", body)
    }

    async fn jobs_overview(&self, request: &Request) -> Result<String, String> {
        let ojs = self.ojs()?;
        let tenant = tenant(request)?;
        let mut out = format!(
            "<form method=\"get\" action=\"/jobs\" class=\"search\"><label>Tenant <input name=\"tenant\" id=\"tenant\" value=\"{}\"></label> \
             <button>Show</button></form>\
             <form method=\"get\" action=\"/job\" class=\"search\"><input type=\"hidden\" name=\"tenant\" value=\"{}\">\
             <label>Job id <input name=\"id\" id=\"job-id\" required maxlength=\"64\"></label> <button id=\"find-job\">Open</button></form>\
             <form method=\"get\" action=\"/jobs/workflow\" class=\"search\"><input type=\"hidden\" name=\"tenant\" value=\"{}\">\
             <label>Workflow id <input name=\"id\" id=\"workflow-id\" required maxlength=\"64\"></label> <button id=\"find-workflow\">Graph</button></form>",
            esc(tenant),
            esc(tenant),
            esc(tenant)
        );
        let dead_letter = format!("/dead-letter?limit={DEAD_LETTER_PAGE}");
        let (queues, dead, cron) = tokio::join!(
            ojs.call(Method::GET, "/queues", tenant),
            ojs.call(Method::GET, &dead_letter, tenant),
            ojs.call(Method::GET, "/cron", tenant),
        );
        out.push_str("<section><h2>Queues</h2>");
        match queues {
            Err(err) => out.push_str(&refused(&err)),
            Ok(queues) => {
                let queues = queues["queues"].as_array().cloned().unwrap_or_default();
                if queues.is_empty() {
                    out.push_str("<p>No queues yet.</p>");
                } else {
                    out.push_str(
                        "<table id=\"queues\"><thead><tr><th>Queue</th><th>Status</th><th>Available</th><th>Scheduled</th>\
                         <th>Retryable</th><th>Active</th></tr></thead><tbody>",
                    );
                    for queue in &queues {
                        let queue_name = queue["name"].as_str().unwrap_or_default();
                        let count = |state: &str| queue["counts"][state].as_i64().unwrap_or(0);
                        let _ = write!(
                            out,
                            "<tr class=\"queue\"><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            esc(&link("/jobs/queue", &[("name", queue_name), ("tenant", tenant)])),
                            name(queue_name),
                            text(&queue["status"]),
                            count("available"),
                            count("scheduled"),
                            count("retryable"),
                            count("active"),
                        );
                    }
                    out.push_str("</tbody></table>");
                }
            }
        }
        out.push_str("</section><section><h2>Dead letter</h2>");
        match dead {
            Err(err) => out.push_str(&refused(&err)),
            Ok(dead) => {
                let jobs = dead["jobs"].as_array().cloned().unwrap_or_default();
                if jobs.is_empty() {
                    out.push_str("<p>No dead-lettered jobs.</p>");
                } else {
                    out.push_str(
                        "<table id=\"dead-letter\"><thead><tr><th>Job</th><th>Type</th><th>Queue</th><th>Attempts</th>\
                         <th>Last error</th><th></th></tr></thead><tbody>",
                    );
                    for job in &jobs {
                        let id = job["id"].as_str().unwrap_or_default();
                        let fields = [("id", id), ("tenant", tenant)];
                        let _ = write!(
                            out,
                            "<tr class=\"dead\" data-job=\"{}\"><td><a href=\"{}\"><code>{}</code></a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}{}</td></tr>",
                            esc(id),
                            esc(&link("/job", &fields)),
                            name(id),
                            text(&job["type"]),
                            text(&job["queue"]),
                            text(&job["attempt"]),
                            last_error(job),
                            form("/jobs/retry", self.csrf(), &fields, &button("Retry", "retry", None)),
                            form(
                                "/jobs/delete",
                                self.csrf(),
                                &fields,
                                &button("Delete", "danger", Some("Delete this job for good?"))
                            ),
                        );
                    }
                    out.push_str("</tbody></table>");
                    if jobs.len().to_string() == DEAD_LETTER_PAGE {
                        let _ = write!(
                            out,
                            "<p class=\"hint\">The oldest {DEAD_LETTER_PAGE} are shown; retry or delete some to see more.</p>"
                        );
                    }
                }
            }
        }
        out.push_str("</section><section><h2>Cron schedules</h2>");
        match cron {
            Err(err) => out.push_str(&refused(&err)),
            Ok(cron) => {
                let schedules = cron["crons"].as_array().cloned().unwrap_or_default();
                if schedules.is_empty() {
                    out.push_str("<p>No cron schedules.</p>");
                } else {
                    out.push_str(
                        "<table id=\"cron\"><thead><tr><th>Name</th><th>Schedule</th><th>Time zone</th><th>Job type</th>\
                         <th>Queue</th><th>Next run</th><th>Last run</th></tr></thead><tbody>",
                    );
                    for schedule in &schedules {
                        let expression = if schedule["cron"].is_null() {
                            &schedule["expression"]
                        } else {
                            &schedule["cron"]
                        };
                        let job_type = if schedule["type"].is_null() {
                            &schedule["job_template"]["type"]
                        } else {
                            &schedule["type"]
                        };
                        let queue = if schedule["options"]["queue"].is_null() {
                            &schedule["job_template"]["options"]["queue"]
                        } else {
                            &schedule["options"]["queue"]
                        };
                        let _ = write!(
                            out,
                            "<tr class=\"cron\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            text(&schedule["name"]),
                            text(expression),
                            text(&schedule["timezone"]),
                            text(job_type),
                            text(queue),
                            text(&schedule["next_run_at"]),
                            text(&schedule["last_run_at"]),
                        );
                    }
                    out.push_str("</tbody></table>");
                }
            }
        }
        out.push_str("</section>");
        Ok(out)
    }

    /// One queue: its jobs counted by state.
    pub(super) async fn jobs_queue(&self, request: &Request) -> Response {
        let queue = request.arg("name");
        let mut body = format!(
            "<h1><a href=\"/jobs\">Jobs</a> / queue <span class=\"name\">{}</span></h1>",
            name(queue)
        );
        let answer = async {
            let ojs = self.ojs()?;
            let tenant = tenant(request)?;
            // OJS's own rule for queue names, checked before the name goes into a path.
            if queue.is_empty()
                || queue.len() > 255
                || !queue
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
            {
                return Err("That is not a queue name.".to_owned());
            }
            ojs.call(Method::GET, &format!("/queues/{queue}/stats"), tenant).await
        }
        .await;
        match answer {
            Err(err) => body.push_str(&refused(&err)),
            Ok(stats) => {
                let stats = &stats["stats"];
                let _ = write!(
                    body,
                    "<dl class=\"meta\"><dt>Status</dt><dd>{}</dd><dt>Depth</dt><dd id=\"depth\">{}</dd><dt>Depth bound</dt><dd>{}</dd></dl>\
                     <table id=\"states\"><thead><tr><th>State</th><th>Jobs</th></tr></thead><tbody>",
                    text(&stats["status"]),
                    text(&stats["depth"]),
                    if stats["max_depth"].is_null() {
                        "none".to_owned()
                    } else {
                        text(&stats["max_depth"])
                    },
                );
                for state in STATES.iter().filter(|state| !stats[**state].is_null()) {
                    let _ = write!(body, "<tr><td>{state}</td><td>{}</td></tr>", text(&stats[*state]));
                }
                body.push_str("</tbody></table>");
            }
        }
        self.page(StatusCode::OK, "Queue", body)
    }

    /// One job: its state, attempts, every error, args and result.
    pub(super) async fn job(&self, request: &Request) -> Response {
        let mut body = String::from("<h1><a href=\"/jobs\">Jobs</a> / job</h1>");
        let answer = async {
            let ojs = self.ojs()?;
            let tenant = tenant(request)?;
            let id = job_id(request.arg("id").trim())?;
            ojs.call(Method::GET, &format!("/jobs/{id}"), tenant).await
        }
        .await;
        match answer {
            Err(err) => body.push_str(&refused(&err)),
            Ok(job) => {
                let job = if job["job"].is_object() { &job["job"] } else { &job };
                let _ = write!(
                    body,
                    "<dl class=\"meta\"><dt>Id</dt><dd><code>{}</code></dd><dt>Type</dt><dd>{}</dd><dt>Queue</dt><dd>{}</dd>\
                     <dt>State</dt><dd id=\"job-state\">{}</dd><dt>Attempt</dt><dd>{} of {}</dd><dt>Created</dt><dd>{}</dd></dl>",
                    text(&job["id"]),
                    text(&job["type"]),
                    text(&job["queue"]),
                    text(&job["state"]),
                    text(&job["attempt"]),
                    text(&job["max_attempts"]),
                    text(&job["created_at"]),
                );
                body.push_str("<section><h2>Errors</h2>");
                let errors = job["errors"].as_array().cloned().unwrap_or_default();
                if errors.is_empty() {
                    body.push_str("<p>None.</p>");
                } else {
                    body.push_str(
                        "<table id=\"job-errors\"><thead><tr><th>#</th><th>Code</th><th>Message</th><th>At</th></tr></thead><tbody>",
                    );
                    for (n, error) in errors.iter().enumerate() {
                        let code = if error["code"].is_null() {
                            &error["type"]
                        } else {
                            &error["code"]
                        };
                        let when = if error["occurred_at"].is_null() {
                            &error["at"]
                        } else {
                            &error["occurred_at"]
                        };
                        let _ = write!(
                            body,
                            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            n + 1,
                            text(code),
                            text(&error["message"]),
                            text(when)
                        );
                    }
                    body.push_str("</tbody></table>");
                }
                body.push_str("</section><section><h2>Args</h2>");
                body.push_str(&json_block(&job["args"]));
                if !job["result"].is_null() {
                    body.push_str("<h2>Result</h2>");
                    body.push_str(&json_block(&job["result"]));
                }
                body.push_str("</section>");
            }
        }
        self.page(StatusCode::OK, "Job", body)
    }

    /// Retry or delete a dead-lettered job.
    pub(super) async fn dead_letter_change(&self, request: &Request, retry: bool) -> Response {
        let tenant_name = tenant(request).unwrap_or("default");
        let outcome: Outcome = async {
            let ojs = self.ojs()?;
            let id = job_id(request.arg("id"))?;
            if retry {
                ojs.call(Method::POST, &format!("/dead-letter/{id}/retry"), tenant_name)
                    .await
                    .map(|_| format!("Job {id} is queued again."))
            } else {
                ojs.call(Method::DELETE, &format!("/dead-letter/{id}"), tenant_name)
                    .await
                    .map(|_| format!("Job {id} deleted."))
            }
        }
        .await;
        self.done(outcome, &link("/jobs", &[("tenant", tenant_name)]))
    }
}
