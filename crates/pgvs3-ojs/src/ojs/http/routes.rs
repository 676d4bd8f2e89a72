//! The routes under `/ojs/v1` and their handlers: each reads its request into the engine's
//! typed values, calls the engine, and shapes the answer. [`OjsService::route`] sends a
//! request to its family (jobs and workers, workflows, cron, webhooks, schemas here; queues and
//! `/admin` in [`super::admin`]).

use std::collections::HashMap;

use http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::super::engine::claims::{Beat, Failure, FetchRequest};
use super::super::engine::envelope::{self, NewJob};
use super::super::engine::jobs::Answer;
use super::super::engine::{cron, now_rfc3339, progress, schemas, webhooks, workflow};
use super::wire::*;
use super::{MAX_BATCH, MAX_FETCH, OjsError, OjsService, Reply, request, tenant};
use crate::request_body::RequestBody;

impl OjsService {
    /// Serves one request; `headers` collects response headers beyond the usual ones.
    pub(super) async fn route(
        &self,
        request: Request<RequestBody>,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().trim_end_matches('/').to_string();
        let query = parse_query(parts.uri.query().unwrap_or(""));
        match path.as_str() {
            "/ojs/manifest" => return Ok((StatusCode::OK, self.manifest())),
            "/health" => return Ok(self.health().await),
            "/ready" => {
                let (status, body) = self.health().await;
                let ready = if status == StatusCode::OK { "ready" } else { "not_ready" };
                return Ok((status, json!({ "status": ready, "backend": body["backend"] })));
            }
            _ => {}
        }
        let Some(route) = path.strip_prefix("/ojs/v1") else {
            return Err(OjsError::not_found(format!("no OJS route {path}")));
        };
        let segments: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
        let acting = if route == "/health" {
            tenant::Acting::default_tenant()
        } else {
            self.authorize(&parts.headers)?
        };
        if acting.bound && !tenant::is_scoped(&segments) {
            return Err(OjsError::forbidden(format!(
                "a tenant token reaches the job routes only, not {path}"
            )));
        }
        let method = parts.method.clone();
        let body = request::read(body, self.inner.options.max_body_bytes, &self.inner.budget).await?;
        let call = Call {
            method: &method,
            path: &path,
            segments: &segments,
            body: &body,
            query: &query,
            tenant: acting.tenant.as_str(),
        };
        match (&method, segments.as_slice()) {
            (&Method::GET, ["health"]) => Ok(self.health().await),
            (_, ["jobs", ..] | ["workers", ..]) => self.job_routes(&call, &acting, headers).await,
            // The webhooks extension's routes are under /webhooks/subscriptions; the website's
            // shorter /webhooks form is the same.
            (method, ["webhooks", rest @ ..]) => {
                let rest = match rest {
                    ["subscriptions", rest @ ..] => rest,
                    rest => rest,
                };
                self.webhooks(method, rest, &body, &query).await
            }
            (method, ["schemas", rest @ ..]) => self.schemas(method, rest, &body, false).await,
            (_, ["queues", ..] | ["dead-letter", ..] | ["rate-limits", ..]) => self.queue_routes(&call).await,
            (_, ["admin", rest @ ..]) => self.admin_routes(&call, rest).await,
            (_, ["workflows", ..]) => self.workflow_routes(&call, &acting).await,
            (_, ["cron", ..]) => self.cron_routes(&call).await,
            (&Method::GET, ["events"]) => self.events(&query).await,
            _ => Err(call.no_route()),
        }
    }

    /// `/jobs/...` and `/workers/...`: enqueue, read, cancel, and the worker protocol.
    async fn job_routes(
        &self,
        call: &Call<'_>,
        acting: &tenant::Acting,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let (queue, tenant, body) = (&self.inner.queue, call.tenant, call.body);
        match (call.method, call.segments) {
            (&Method::POST, ["jobs"]) => self.enqueue(request::json(body).await?, acting, headers).await,
            (&Method::POST, ["jobs", "batch"]) => self.enqueue_batch(request::json(body).await?, acting, headers).await,
            (&Method::GET, ["jobs", id]) => Ok((
                StatusCode::OK,
                json!({ "job": job_answer(queue.get(job_id(id)?, tenant).await?) }),
            )),
            (&Method::DELETE, ["jobs", id]) | (&Method::POST, ["jobs", id, "cancel"]) => Ok((
                StatusCode::OK,
                json!({ "job": job_answer(queue.cancel(job_id(id)?, tenant).await?) }),
            )),
            (&Method::POST, ["workers", "fetch"]) => self.fetch(request::json(body).await?, tenant).await,
            (&Method::POST, ["workers", "ack"]) => self.ack(request::json(body).await?, tenant).await,
            (&Method::POST, ["workers", "nack"]) => self.nack(request::json(body).await?, tenant).await,
            // The per-job forms: the job is the path's, the body (optional) the rest.
            (&Method::POST, ["jobs", id, "ack"]) => self.ack(request::job_json(id, body).await?, tenant).await,
            (&Method::POST, ["jobs", id, "nack"]) => self.nack(request::job_json(id, body).await?, tenant).await,
            (&Method::PUT | &Method::POST, ["jobs", id, "progress"]) => {
                self.progress(request::job_json(id, body).await?, tenant).await
            }
            (&Method::POST, ["workers", "progress"]) => self.progress(request::json(body).await?, tenant).await,
            (&Method::GET, ["jobs", id, "progress"]) => {
                let progress = progress_answer(queue.get(job_id(id)?, tenant).await?);
                progress_headers(&progress, headers);
                Ok((StatusCode::OK, progress))
            }
            (&Method::POST, ["workers", "heartbeat"]) | (&Method::POST, ["workers", "beat"]) => {
                self.heartbeat(request::json(body).await?, tenant).await
            }
            (&Method::GET, ["workers", id, "health"]) => Ok((StatusCode::OK, queue.worker(tenant, id).await?)),
            _ => Err(call.no_route()),
        }
    }

    /// `/workflows/...` (ojs-workflows).
    async fn workflow_routes(&self, call: &Call<'_>, acting: &tenant::Acting) -> Reply {
        let queue = &self.inner.queue;
        match (call.method, call.segments) {
            (&Method::POST, ["workflows"]) => {
                let mut body = request::json(call.body).await?;
                let mut tenant = tenant::OneTenant::of(acting, "workflow");
                workflow::for_each_job(&mut body, &mut |job| tenant.add(job))?;
                let workflow = workflow::parse_workflow(body, self.inner.options.max_args_bytes)?;
                let workflow = queue.create_workflow(&workflow, &tenant.tenant()).await?;
                Ok((StatusCode::CREATED, json!({ "workflow": workflow })))
            }
            (&Method::GET, ["workflows", id]) => Ok((
                StatusCode::OK,
                json!({ "workflow": queue.get_workflow(workflow_id(id)?, call.tenant).await? }),
            )),
            (&Method::DELETE, ["workflows", id]) | (&Method::POST, ["workflows", id, "cancel"]) => Ok((
                StatusCode::OK,
                json!({ "workflow": queue.cancel_workflow(workflow_id(id)?, call.tenant).await? }),
            )),
            _ => Err(call.no_route()),
        }
    }

    /// `/cron/...` (ojs-cron §8).
    async fn cron_routes(&self, call: &Call<'_>) -> Reply {
        let queue = &self.inner.queue;
        match (call.method, call.segments) {
            (&Method::POST, ["cron"]) => self.register_cron(request::json(call.body).await?, None).await,
            (&Method::PUT, ["cron", name]) => self.register_cron(request::json(call.body).await?, Some(*name)).await,
            (&Method::GET, ["cron"]) => {
                let enabled = match call.query.get("enabled").map(String::as_str) {
                    None => None,
                    Some("true") => Some(true),
                    Some("false") => Some(false),
                    Some(_) => return Err(OjsError::invalid("\"enabled\" filters by true or false")),
                };
                let crons = queue.list_crons(enabled).await?;
                let mut body = listing("crons", crons);
                body["cron_jobs"] = body["items"].clone();
                body["count"] = body["pagination"]["total"].clone();
                Ok((StatusCode::OK, body))
            }
            (&Method::GET, ["cron", name]) => Ok((StatusCode::OK, cron_answer(queue.get_cron(name).await?))),
            (&Method::PATCH, ["cron", name]) => {
                let enabled = match request::json(call.body).await? {
                    Value::Object(fields)
                        if fields.len() == 1 && fields.get("enabled").is_some_and(Value::is_boolean) =>
                    {
                        fields["enabled"].as_bool().unwrap_or(true)
                    }
                    _ => {
                        return Err(OjsError::invalid(
                            "PATCH /cron/{name} takes {\"enabled\": true|false}; PUT /cron/{name} replaces a schedule",
                        ));
                    }
                };
                Ok((
                    StatusCode::OK,
                    cron_answer(queue.set_cron_enabled(name, enabled).await?),
                ))
            }
            (&Method::DELETE, ["cron", name]) => {
                Ok((StatusCode::OK, json!({ "cron": queue.delete_cron(name).await? })))
            }
            _ => Err(call.no_route()),
        }
    }

    async fn enqueue(
        &self,
        mut body: Value,
        acting: &tenant::Acting,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let tenant = acting.tenant_of_job(&mut body)?;
        let job = envelope::parse_job(body, self.inner.options.max_args_bytes)?;
        let inserted = self
            .inner
            .queue
            .enqueue(std::slice::from_ref(&job), &tenant, Answer::Job)
            .await?;
        pressure_headers(&inserted, headers);
        if let Some(limit) = &job.rate_limit {
            self.rate_limit_headers(&tenant, &limit.key, headers).await?;
        }
        let status = if inserted.duplicate {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let job = inserted_answers(inserted)
            .pop()
            .ok_or_else(|| OjsError::backend("enqueue returned no job"))?;
        Ok((status, json!({ "job": job })))
    }

    async fn enqueue_batch(
        &self,
        body: Value,
        acting: &tenant::Acting,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let list = match body {
            Value::Object(mut fields) => fields.remove("jobs"),
            array @ Value::Array(_) => Some(array),
            _ => None,
        };
        let Some(Value::Array(list)) = list else {
            return Err(OjsError::invalid("a batch is {\"jobs\": [...]}"));
        };
        if list.is_empty() || list.len() > MAX_BATCH {
            return Err(OjsError::invalid(format!("a batch holds 1 to {MAX_BATCH} jobs")));
        }
        // One batch is one tenant's: the jobs' `meta.tenant_id`s (or the request's) must agree.
        let mut tenant = tenant::OneTenant::of(acting, "batch");
        let jobs = list
            .into_iter()
            .enumerate()
            .map(|(index, mut job)| {
                let parsed = tenant
                    .add(&mut job)
                    .and_then(|()| envelope::parse_job(job, self.inner.options.max_args_bytes).map_err(OjsError::from));
                parsed.map_err(|mut error| {
                    error.message = format!("jobs[{index}]: {}", error.message);
                    error
                })
            })
            .collect::<Result<Vec<NewJob>, _>>()?;
        let tenant = tenant.tenant();
        if jobs.iter().any(|job| job.unique.is_some()) {
            return Err(OjsError::invalid(
                "unique options are not supported in batches; enqueue such jobs singly",
            ));
        }
        // A job may wait for jobs earlier in the batch, never later ones: every dependency is
        // older than its dependent, so no cycle can form.
        let positions: HashMap<&str, usize> = jobs.iter().enumerate().map(|(i, job)| (job.id.as_str(), i)).collect();
        for (index, job) in jobs.iter().enumerate() {
            let later = job
                .depends_on
                .iter()
                .find(|id| positions.get(id.as_str()).is_some_and(|at| *at >= index));
            if let Some(later) = later {
                return Err(OjsError::invalid(format!(
                    "jobs[{index}]: options.depends_on names job {later}, which is not enqueued before it"
                )));
            }
        }
        let inserted = self.inner.queue.enqueue(&jobs, &tenant, Answer::Summary).await?;
        pressure_headers(&inserted, headers);
        let stored = inserted_answers(inserted);
        let count = stored.len();
        Ok((StatusCode::CREATED, json!({ "jobs": stored, "count": count })))
    }

    /// What the job's rate limit key (its tenant's) allows now, in the X-RateLimit-* headers'
    /// terms: the limit (the window's count, else the concurrency), the starts left, and when
    /// one more frees up.
    async fn rate_limit_headers(
        &self,
        tenant: &str,
        key: &str,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Result<(), OjsError> {
        let state = self.inner.queue.rate_limit(tenant, key).await?;
        let limit = state
            .pointer("/rate/limit")
            .or_else(|| state.pointer("/concurrency/limit"))
            .and_then(Value::as_i64);
        if let Some(limit) = limit {
            let reset = state
                .pointer("/rate/window_resets_unix")
                .and_then(Value::as_i64)
                .unwrap_or_else(|| time::OffsetDateTime::now_utc().unix_timestamp());
            headers.push(("x-ratelimit-limit", limit.to_string()));
            headers.push((
                "x-ratelimit-remaining",
                state["room"].as_i64().unwrap_or(0).min(limit).to_string(),
            ));
            headers.push(("x-ratelimit-reset", reset.to_string()));
        }
        Ok(())
    }

    async fn fetch(&self, body: Value, tenant: &str) -> Reply {
        let queues = fetch_queues(&body)?;
        let count = match body.get("count").or_else(|| body.get("max_jobs")) {
            None => 1,
            Some(count) => count
                .as_i64()
                .filter(|n| (1..=MAX_FETCH).contains(n))
                .ok_or_else(|| OjsError::invalid(format!("\"count\" must be from 1 to {MAX_FETCH}")))?,
        };
        let strategy = fetch_strategy(&body, &queues)?;
        let request = FetchRequest {
            queues,
            count,
            strategy,
            tenant: tenant.to_string(),
            worker_id: worker_id(&body)?,
            visibility_ms: optional_ms(&body, "visibility_timeout_ms")?,
        };
        let jobs: Vec<Value> = self
            .inner
            .queue
            .fetch(&request)
            .await?
            .into_iter()
            .map(job_answer)
            .collect();
        Ok((StatusCode::OK, json!({ "jobs": jobs })))
    }

    async fn ack(&self, body: Value, tenant: &str) -> Reply {
        let claim = claim(&body, tenant)?;
        let result = body.get("result").cloned();
        let job = self.inner.queue.ack(&claim, result).await?;
        Ok((StatusCode::OK, settled(job_answer(job), "acknowledged")))
    }

    async fn nack(&self, body: Value, tenant: &str) -> Reply {
        let claim = claim(&body, tenant)?;
        let error = match body.get("error") {
            Some(error @ (Value::Object(_) | Value::String(_))) => error.clone(),
            None => json!({ "message": "the worker reported a failure" }),
            Some(_) => return Err(OjsError::invalid("\"error\" must be an object")),
        };
        let requeue = body.get("requeue").and_then(Value::as_bool).unwrap_or(false);
        let job = self.inner.queue.nack(&claim, Failure { error, requeue }).await?;
        Ok((StatusCode::OK, settled(job_answer(job), "nacked")))
    }

    /// A worker's progress on its active job (ojs-progress §6): stored on the job, logged as a
    /// `job.progress` event, and a heartbeat. A report on a job that is not active is ignored,
    /// not refused (`accepted: false`).
    async fn progress(&self, body: Value, tenant: &str) -> Reply {
        let claim = claim(&body, tenant)?;
        job_id(&claim.job_id)?;
        let report = progress::parse_progress(&body)?;
        let (accepted, job) = self.inner.queue.report_progress(&claim, &report).await?;
        let mut progress = progress_answer(job);
        progress["accepted"] = Value::Bool(accepted);
        Ok((StatusCode::OK, progress))
    }

    /// The webhooks extension (ojs-webhooks §10): `rest` is the path after `/webhooks` (and
    /// `/subscriptions`): subscriptions by id, or `deliveries`.
    async fn webhooks(
        &self,
        method: &Method,
        rest: &[&str],
        body: &request::Body,
        query: &HashMap<String, String>,
    ) -> Reply {
        let queue = &self.inner.queue;
        match (method, rest) {
            (&Method::POST, []) => {
                let webhook = webhooks::parse_webhook(request::json(body).await?)?;
                Ok((StatusCode::CREATED, subscription(queue.create_webhook(&webhook).await?)))
            }
            (&Method::GET, []) => Ok((StatusCode::OK, listing("subscriptions", queue.list_webhooks().await?))),
            (&Method::GET, ["deliveries"]) => {
                let count = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100)
                    .clamp(1, 1000);
                let subscription = query.get("subscription_id").map(String::as_str);
                let status = query.get("status").map(String::as_str);
                let deliveries = queue.webhook_deliveries(subscription, status, count).await?;
                Ok((StatusCode::OK, listing("deliveries", deliveries)))
            }
            (&Method::GET, ["deliveries", id]) => {
                Ok((StatusCode::OK, json!({ "delivery": queue.webhook_delivery(id).await? })))
            }
            (&Method::POST, ["deliveries", id, "retry"]) => Ok((
                StatusCode::OK,
                json!({ "delivery": queue.retry_webhook_delivery(id).await? }),
            )),
            (&Method::GET, [id]) => Ok((StatusCode::OK, subscription(queue.webhook(id).await?))),
            (&Method::PATCH, [id]) => {
                let update = webhooks::parse_update(&request::json(body).await?)?;
                Ok((StatusCode::OK, subscription(queue.update_webhook(id, &update).await?)))
            }
            (&Method::DELETE, [id]) => {
                let mut deleted = subscription(queue.delete_webhook(id).await?);
                deleted["deleted"] = Value::Bool(true);
                Ok((StatusCode::OK, deleted))
            }
            (&Method::POST, [id, "rotate-secret"]) => {
                Ok((StatusCode::OK, subscription(queue.rotate_webhook_secret(id).await?)))
            }
            (&Method::POST, [id, "test"]) => self.test_webhook(id).await,
            _ => Err(OjsError::not_found(format!(
                "no OJS webhooks route {method} {}",
                rest.join("/")
            ))),
        }
    }

    /// The schema registry (ext-schema-registry §10): under `/schemas` with the spec's answers
    /// (`{"schema": {...}}`), and under `/admin/schemas` with the conformance suite's (the stored
    /// schema itself; integer versions in the path). `POST` registers from the body, `PUT
    /// {type}/{version}` from the path; a version that exists is 409 either way.
    pub(super) async fn schemas(&self, method: &Method, rest: &[&str], body: &request::Body, admin: bool) -> Reply {
        let queue = &self.inner.queue;
        let wrap = |record: Value| if admin { record } else { json!({ "schema": record }) };
        match (method, rest) {
            (&Method::POST, []) => {
                let fields = schema_registration(body).await?;
                let job_type = fields
                    .get("job_type")
                    .or_else(|| fields.get("type"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| OjsError::invalid("missing required field \"job_type\""))?;
                let version = fields
                    .get("version")
                    .ok_or_else(|| OjsError::invalid("missing required field \"version\""))?;
                let new = schemas::parse_schema(job_type, version, fields.get("schema").cloned())?;
                Ok((StatusCode::CREATED, wrap(queue.register_schema(&new).await?)))
            }
            (&Method::PUT, [job_type, version]) => {
                let schema = schema_registration(body).await?.get_mut("schema").map(Value::take);
                let new = schemas::parse_schema(job_type, &json!(version), schema)?;
                Ok((StatusCode::CREATED, wrap(queue.register_schema(&new).await?)))
            }
            (&Method::GET, []) => Ok((StatusCode::OK, listing("schemas", queue.list_schemas().await?))),
            (&Method::GET, [job_type]) => Ok((StatusCode::OK, wrap(queue.schema(job_type, None).await?))),
            (&Method::GET, [job_type, "versions"]) => Ok((
                StatusCode::OK,
                json!({ "job_type": job_type, "versions": queue.schema_versions(job_type).await? }),
            )),
            (&Method::GET, [job_type, version]) => {
                let version = schemas::Version::parse(version)?;
                Ok((StatusCode::OK, wrap(queue.schema(job_type, Some(&version)).await?)))
            }
            (&Method::DELETE, [job_type, version]) => {
                let mut deleted = queue
                    .delete_schema(job_type, &schemas::Version::parse(version)?)
                    .await?;
                deleted["deleted"] = Value::Bool(true);
                Ok((StatusCode::OK, wrap(deleted)))
            }
            _ => Err(OjsError::not_found(format!(
                "no OJS schemas route {method} {}",
                rest.join("/")
            ))),
        }
    }

    /// Sends a `webhook.test` event to a subscription's endpoint now, outside the outbox, and
    /// says whether it accepted it (ojs-webhooks §6.6). Every failure answers alike, and only
    /// once the whole timeout has passed: a refused connection, an open port that does not speak
    /// HTTP, a silent one and a non-2xx answer must look the same, or the route scans ports
    /// (the gateway's log has the cause). An internal destination is refused before any
    /// connection, so saying so tells nothing about the port.
    async fn test_webhook(&self, id: &str) -> Reply {
        let (url, secret) = self.inner.queue.webhook_endpoint(id).await?;
        let event_id = format!("evt_{}", envelope::new_uuid_v7());
        let body = json!({ "specversion": "1.0", "id": event_id, "type": "webhook.test",
                           "source": "ojs://pgvs3/gateway", "time": now_rfc3339(), "subject": id, "data": {} });
        let delivery = crate::webhooks::Delivery {
            delivery_id: format!("del_{}", envelope::new_uuid_v7()),
            event_type: "webhook.test".into(),
            body: body.to_string(),
            url,
            secret: Some(secret),
            subscription: Some(id.to_string()),
        };
        let timeout = self.inner.options.webhook_timeout;
        let client = crate::webhooks::WebhookClient::new(timeout, 1, self.inner.options.webhook_destinations.clone())
            .map_err(OjsError::backend)?;
        let started = tokio::time::Instant::now();
        let mut answer = match client.post(&delivery).await {
            crate::webhooks::Outcome::Delivered => {
                json!({ "success": true, "response_time_ms": started.elapsed().as_millis() as u64 })
            }
            crate::webhooks::Outcome::Forbidden(error) => json!({ "success": false, "error": error }),
            crate::webhooks::Outcome::Failed(error) | crate::webhooks::Outcome::Refused(error) => {
                tracing::info!(subscription = id, %error, "webhook test delivery failed");
                tokio::time::sleep_until(started + timeout).await;
                json!({ "success": false, "error": "the endpoint did not accept the delivery (no 2xx answer in time)" })
            }
        };
        answer["delivery_id"] = json!(delivery.delivery_id);
        Ok((StatusCode::OK, answer))
    }

    async fn heartbeat(&self, body: Value, tenant: &str) -> Reply {
        let worker_id = worker_id(&body)?;
        let mut ids: Vec<String> = match body.get("active_jobs").or_else(|| body.get("job_ids")) {
            Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_str).map(String::from).collect(),
            _ => Vec::new(),
        };
        if let Some(id) = optional_string(&body, "job_id")? {
            ids.push(id);
        }
        let state = match optional_string(&body, "state")?.as_deref() {
            None => None,
            Some(state @ ("running" | "quiet" | "drain" | "terminate")) => Some(state.to_string()),
            Some("draining") => Some("drain".to_string()),
            Some(other) => {
                return Err(OjsError::invalid(format!(
                    "unknown worker state {other:?} (running, quiet, drain or terminate)"
                )));
            }
        };
        // A count, or the list of jobs the worker holds.
        let active_jobs = match body.get("active_jobs") {
            Some(Value::Array(jobs)) => Some(jobs.len() as i32),
            Some(count) => count.as_i64().and_then(|n| i32::try_from(n).ok()),
            None => None,
        };
        let beat = Beat {
            worker_id: worker_id.as_deref(),
            job_ids: &ids,
            tenant,
            visibility_ms: optional_ms(&body, "visibility_timeout_ms")?,
            state: state.as_deref(),
            active_jobs,
        };
        let mut reply = self.inner.queue.heartbeat(&beat).await?;
        if self.inner.options.allow_reset && reply.directive.is_none() {
            reply.directive = reply
                .test_directive
                .filter(|directive| matches!(directive.as_str(), "quiet" | "terminate"));
        }
        // A directive overrides what the worker reported: it is what the worker should become.
        let state = reply.directive.clone().unwrap_or(reply.state);
        Ok((
            StatusCode::OK,
            json!({ "acknowledged": true, "state": state, "directive": reply.directive.as_deref().unwrap_or("continue"),
                    "jobs_extended": reply.extended, "server_time": now_rfc3339() }),
        ))
    }

    /// Retrying many jobs at once is easy to regret, so the request must say `confirm: true`.
    pub(super) async fn retry_in_bulk(&self, body: Value, tenant: &str) -> Reply {
        if body.get("confirm").and_then(Value::as_bool) != Some(true) {
            return Err(OjsError::invalid(
                "bulk retry changes many jobs: send \"confirm\": true",
            ));
        }
        let state = match body.pointer("/filter/state").and_then(Value::as_str) {
            Some(state @ ("discarded" | "cancelled")) => state,
            _ => return Err(OjsError::invalid("filter.state must be \"discarded\" or \"cancelled\"")),
        };
        let queue = body.pointer("/filter/queue").and_then(Value::as_str);
        let retried = self.inner.queue.retry_in_bulk(state, queue, tenant).await?;
        Ok((StatusCode::OK, json!({ "retried": retried, "count": retried })))
    }

    /// Registers a cron schedule (`POST /cron`; an existing name is 409), or registers or
    /// replaces one by name (`PUT /cron/{name}`).
    async fn register_cron(&self, mut body: Value, path_name: Option<&str>) -> Reply {
        if let (Some(path_name), Some(fields)) = (path_name, body.as_object_mut()) {
            match fields.get("name") {
                None => {
                    fields.insert("name".into(), Value::String(path_name.to_string()));
                }
                Some(name) if name == path_name => {}
                Some(_) => return Err(OjsError::invalid("the body's \"name\" is not the path's")),
            }
        }
        let registration = cron::parse_registration(body)?;
        // The job a tick would build, checked now (its args against its type's schema too) so a
        // bad template fails here rather than at every tick.
        let template = cron::tick_job(
            &registration.name,
            &registration.definition,
            &now_rfc3339(),
            self.inner.options.max_args_bytes,
        )?
        .without_dependencies("a cron template")?;
        self.inner.queue.check_args(std::iter::once(&template), false).await?;
        let replace = path_name.is_some();
        let cron = self.inner.queue.put_cron(&registration, replace).await?;
        let status = if replace { StatusCode::OK } else { StatusCode::CREATED };
        Ok((status, json!({ "cron": cron })))
    }

    async fn events(&self, query: &HashMap<String, String>) -> Reply {
        let after = query.get("after").and_then(|v| v.parse().ok()).unwrap_or(0);
        let limit = query
            .get("limit")
            .and_then(|v| v.parse().ok())
            .unwrap_or(100)
            .clamp(1, 1000);
        let events = self
            .inner
            .queue
            .events(&list_param(query, "types"), &list_param(query, "queues"), after, limit)
            .await?;
        Ok((StatusCode::OK, json!({ "events": events })))
    }
}

/// A schema registration's body: a JSON object that asks for no lenient validation.
async fn schema_registration(body: &request::Body) -> Result<Value, OjsError> {
    let fields = request::json(body).await?;
    if !fields.is_object() {
        return Err(OjsError::invalid("a schema registration is a JSON object"));
    }
    refuse_lenient_validation(&fields)?;
    Ok(fields)
}

/// Only the `strict` validation mode (ojs-schema-registry §7) is offered: a type's schemas bind
/// every enqueue of it. A registration asking for `warn` or `off` (under `validation`, as §7.1
/// spells the setting, or as a bare `mode`) is refused rather than stored and enforced strictly.
fn refuse_lenient_validation(fields: &Value) -> Result<(), OjsError> {
    let asked = [
        fields.get("mode"),
        fields.pointer("/validation/mode"),
        fields.pointer("/validation/default_mode"),
    ];
    match asked.into_iter().flatten().find(|mode| mode.as_str() != Some("strict")) {
        None => Ok(()),
        Some(mode) => Err(OjsError::unsupported(format!(
            "validation mode {mode} is not offered: only \"strict\" (a type's schemas refuse jobs that do not \
             match; delete them to stop validating)"
        ))),
    }
}

/// One request as the route families see it, after auth and with its body read.
pub(super) struct Call<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    /// The path after `/ojs/v1`, split at `/`.
    pub segments: &'a [&'a str],
    pub body: &'a request::Body,
    pub query: &'a HashMap<String, String>,
    /// The tenant the request acts as ([`tenant::Acting`]).
    pub tenant: &'a str,
}

impl Call<'_> {
    pub fn no_route(&self) -> OjsError {
        OjsError::not_found(format!("no OJS route {} {}", self.method, self.path))
    }
}
