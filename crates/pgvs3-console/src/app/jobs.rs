//! The jobs pages (OJS): queues with their depth and jobs by state, the dead letter with each
//! job's last error and retry/delete, cron schedules, and one job with its errors. OJS
//! authorizes by bearer token, not by access key, so these pages are for root-key sessions only
//! and use the gateway's operator token (`--ojs-token`) in-process: a root key may do anything
//! the operator may, and no other key gains OJS powers through the console (docs/console.md).

use std::fmt::Write;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Context, Outcome, Request, Response};
use crate::html::{button, esc, form, link, name};

/// Dead-lettered jobs on one page (the OJS route's own bound is 1,000).
const DEAD_LETTER_PAGE: &str = "100";
/// Queues shown a page (`GET /queues` answers a page at a time: there can be any number).
const QUEUES_PAGE: u64 = 100;
/// Jobs of one state on one page.
const JOBS_PAGE: i64 = 50;
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

/// A time as RFC 3339, to the second.
fn moment(time: std::time::SystemTime) -> String {
    aws_sdk_s3::primitives::DateTime::from(time)
        .fmt(aws_sdk_s3::primitives::DateTimeFormat::DateTime)
        .unwrap_or_default()
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

/// A job's history from its own record (OJS keeps each moment of it there, and every failed
/// attempt's error with its time): what happened when, in time order.
fn history(job: &Value) -> String {
    let mut moments: Vec<(&str, String)> = [
        ("enqueued_at", "enqueued"),
        ("scheduled_at", "scheduled to run"),
        ("started_at", "started (latest attempt)"),
        ("next_attempt_at", "next attempt"),
        ("completed_at", "completed"),
        ("discarded_at", "discarded"),
        ("cancelled_at", "cancelled"),
        ("expires_at", "expires"),
    ]
    .into_iter()
    // A discarded job's completed_at is its discarded_at: shown once, as the latter.
    .filter(|(field, _)| *field != "completed_at" || job["discarded_at"].is_null())
    .filter_map(|(field, what)| job[field].as_str().map(|at| (at, what.to_owned())))
    .collect();
    for error in job["errors"].as_array().into_iter().flatten() {
        let at = error["occurred_at"].as_str().or(error["at"].as_str());
        if let Some(at) = at {
            let code = error["code"].as_str().or(error["type"].as_str()).unwrap_or("error");
            let attempt = error["attempt"].as_i64().map(|n| format!(" {n}")).unwrap_or_default();
            moments.push((at, format!("attempt{attempt} failed: {}", name(code))));
        }
    }
    // RFC 3339 times sort as text. The end of a job comes last whatever its stamp: the
    // database stamps it at its transaction's start, the failure that caused it a moment later.
    let ending = |what: &str| ["completed", "discarded", "cancelled"].contains(&what);
    moments.sort_by(|a, b| (ending(&a.1), a.0).cmp(&(ending(&b.1), b.0)));
    let mut out = String::from("<section><h2>History</h2><ol id=\"history\">");
    for (at, what) in &moments {
        let _ = write!(out, "<li><time>{}</time> {what}</li>", name(at));
    }
    out.push_str("</ol></section>");
    out
}

/// The queues of a tenant (`GET /queues`) with their counts and the last minute's `rates`.
fn queues_table(queues: &Value, rates: &Result<Vec<crate::QueueRates>, String>, tenant: &str) -> String {
    let mut out = String::new();
    let queues = queues["queues"].as_array().cloned().unwrap_or_default();
    if queues.is_empty() {
        out.push_str("<p>No queues yet.</p>");
    } else {
        out.push_str(
            "<table id=\"queues\"><thead><tr><th>Queue</th><th>Status</th><th>Available</th><th>Scheduled</th>\
             <th>Retryable</th><th>Active</th><th>Enqueued a minute</th><th>Completed a minute</th>\
             <th>Failed a minute</th></tr></thead><tbody>",
        );
        for queue in &queues {
            let queue_name = queue["name"].as_str().unwrap_or_default();
            let count = |state: &str| queue["counts"][state].as_i64().unwrap_or(0);
            let _ = write!(
                out,
                "<tr class=\"queue\"><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}</tr>",
                esc(&link("/jobs/queue", &[("name", queue_name), ("tenant", tenant)])),
                name(queue_name),
                text(&queue["status"]),
                count("available"),
                count("scheduled"),
                count("retryable"),
                count("active"),
                rate_of(rates, queue_name),
            );
        }
        out.push_str("</tbody></table>");
        match rates {
            Ok(_) => out.push_str(
                "<p class=\"hint\">Rates: the last minute's jobs of this tenant, from the database's event log, so every gateway's work counts.</p>",
            ),
            Err(err) => out.push_str(&refused(&format!("Rates: {err}"))),
        }
    }
    out
}

/// Links to the previous and next pages of queues, when there are more than one.
fn queues_pager(queues: &Value, tenant: &str) -> String {
    let page = queues["pagination"]["page"].as_u64().unwrap_or(1);
    let pages = queues["pagination"]["total_pages"].as_u64().unwrap_or(1);
    if pages <= 1 {
        return String::new();
    }
    let to = |page: u64| {
        esc(&link(
            "/jobs",
            &[("tenant", tenant), ("queues_page", &page.to_string())],
        ))
    };
    let mut out = format!("<p class=\"pager\" id=\"queues-pager\">Page {page} of {pages} ");
    if page > 1 {
        let _ = write!(out, "<a href=\"{}\" id=\"queues-previous\">Previous</a> ", to(page - 1));
    }
    if page < pages {
        let _ = write!(out, "<a href=\"{}\" id=\"queues-next\">Next</a>", to(page + 1));
    }
    out.push_str("</p>");
    out
}

/// A queue's cells of `rates`. A queue without events in the last minute has rates of 0;
/// unknown ones are blank.
fn rate_of(rates: &Result<Vec<crate::QueueRates>, String>, queue: &str) -> String {
    match rates {
        Ok(rates) => {
            let found = rates.iter().find(|rates| rates.queue == queue);
            let (enqueued, completed, failed) =
                found.map_or((0, 0, 0), |rates| (rates.enqueued, rates.completed, rates.failed));
            format!(
                "<td class=\"rate\">{enqueued}</td><td class=\"rate\">{completed}</td><td class=\"rate\">{failed}</td>"
            )
        }
        Err(_) => "<td></td><td></td><td></td>".to_owned(),
    }
}

/// The cron schedules of a tenant (`GET /cron`), in either of the shapes OJS gives them.
fn cron_table(cron: &Value) -> String {
    let mut out = String::new();
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
    out
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
        let rates = async {
            match &self.app.gateway.admin {
                Some(admin) => admin.queue_rates(tenant.to_owned()).await,
                None => Err("not asked".to_owned()),
            }
        };
        let queues_page = request.arg("queues_page").parse::<u64>().unwrap_or(1).max(1);
        let queues_path = format!("/queues?page={queues_page}&per_page={QUEUES_PAGE}");
        let (queues, dead, cron, rates) = tokio::join!(
            ojs.call(Method::GET, &queues_path, tenant),
            ojs.call(Method::GET, &dead_letter, tenant),
            ojs.call(Method::GET, "/cron", tenant),
            rates,
        );
        out.push_str("<section><h2>Queues</h2>");
        match queues {
            Err(err) => out.push_str(&refused(&err)),
            Ok(queues) => {
                out.push_str(&queues_table(&queues, &rates, tenant));
                out.push_str(&queues_pager(&queues, tenant));
            }
        }
        out.push_str("</section><section><h2>Dead letter</h2>");
        match dead {
            Err(err) => out.push_str(&refused(&err)),
            Ok(dead) => out.push_str(&self.dead_letter_table(&dead, tenant)),
        }
        out.push_str("</section><section><h2>Cron schedules</h2>");
        match cron {
            Err(err) => out.push_str(&refused(&err)),
            Ok(cron) => out.push_str(&cron_table(&cron)),
        }
        out.push_str("</section>");
        Ok(out)
    }

    /// The dead-lettered jobs of a tenant (`GET /dead-letter`), each with *Retry* and *Delete*.
    fn dead_letter_table(&self, dead: &Value, tenant: &str) -> String {
        let mut out = String::new();
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
        out
    }

    /// One queue: its jobs counted by state, each state a link to its jobs; with `state`, a
    /// page of that state's jobs, newest first, and a link to the next (older) page.
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
            let stats = ojs.call(Method::GET, &format!("/queues/{queue}/stats"), tenant).await?;
            let listing = match request.arg("state") {
                "" => None,
                state => Some(self.jobs_listing(request, tenant, queue, state).await?),
            };
            Ok((tenant, stats, listing))
        }
        .await;
        match answer {
            Err(err) => body.push_str(&refused(&err)),
            Ok((tenant, stats, listing)) => {
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
                    let _ = write!(
                        body,
                        "<tr><td><a href=\"{}\">{state}</a></td><td>{}</td></tr>",
                        esc(&link(
                            "/jobs/queue",
                            &[("name", queue), ("tenant", tenant), ("state", state)]
                        )),
                        text(&stats[*state])
                    );
                }
                body.push_str("</tbody></table>");
                body.push_str(&listing.unwrap_or_default());
            }
        }
        self.page(StatusCode::OK, "Queue", body)
    }

    /// A page of a queue's jobs in `state` (from the database, as OJS has no route listing
    /// them), newest first, [`JOBS_PAGE`] at a time below the `before` keyset.
    async fn jobs_listing(&self, request: &Request, tenant: &str, queue: &str, state: &str) -> Result<String, String> {
        if !STATES.contains(&state) {
            return Err("That is not a job state.".to_owned());
        }
        let before = match request.arg("before") {
            "" => None,
            before => Some(
                before
                    .parse::<i64>()
                    .map_err(|_| "That is not a page of this listing.".to_owned())?,
            ),
        };
        let admin = self
            .app
            .gateway
            .admin
            .as_ref()
            .ok_or("The gateway lists no jobs to this console.")?;
        let mut jobs = admin
            .jobs_in_state(crate::JobsPage {
                tenant: tenant.to_owned(),
                queue: queue.to_owned(),
                state: state.to_owned(),
                before,
                limit: JOBS_PAGE + 1,
            })
            .await?;
        let more = jobs.len() as i64 > JOBS_PAGE;
        jobs.truncate(JOBS_PAGE as usize);
        let mut out = format!("<section><h2>Jobs {state}</h2>");
        if jobs.is_empty() {
            out.push_str("<p>None.</p></section>");
            return Ok(out);
        }
        out.push_str(
            "<table id=\"jobs\"><thead><tr><th>Job</th><th>Type</th><th>Attempt</th><th>Created</th><th>Runs at</th>\
             <th>Last error</th></tr></thead><tbody>",
        );
        for job in &jobs {
            let _ = write!(
                out,
                "<tr class=\"job\" data-job=\"{}\"><td><a href=\"{}\"><code>{}</code></a></td><td>{}</td><td>{} of {}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&job.id),
                esc(&link("/job", &[("id", &job.id), ("tenant", tenant)])),
                name(&job.id),
                name(&job.job_type),
                job.attempt,
                job.max_attempts,
                moment(job.created),
                moment(job.run_at),
                last_error(&json!({ "error": job.error.clone() })),
            );
        }
        out.push_str("</tbody></table>");
        if let (true, Some(last)) = (more, jobs.last()) {
            let _ = write!(
                out,
                "<p><a id=\"older\" href=\"{}\">Older jobs</a></p>",
                esc(&link(
                    "/jobs/queue",
                    &[
                        ("name", queue),
                        ("tenant", tenant),
                        ("state", state),
                        ("before", &last.seq.to_string())
                    ]
                ))
            );
        }
        out.push_str("</section>");
        Ok(out)
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
                body.push_str(&history(job));
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
