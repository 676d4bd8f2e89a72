//! The routes about queues rather than jobs: queues (`/queues/...`), the dead letter, rate-limit
//! keys, and the admin API under `/admin` (ext-admin-api), which answers several of the same
//! things in its own shapes, plus stats, tenants, workers, fair scheduling and the reset.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::routes::Call;
use super::wire::*;
use super::{OjsError, OjsService, Reply, request};

impl OjsService {
    /// `/queues/...`, `/dead-letter/...` and `/rate-limits/...`.
    pub(super) async fn queue_routes(&self, call: &Call<'_>) -> Reply {
        let queue = &self.inner.queue;
        match (call.method, call.segments) {
            (&Method::GET, ["queues"]) => self.queues(call).await,
            // The bare `/queues/{name}` is no route of the binding's table; the upstream suite
            // (EXT-MT-004) and clients reading a queue there get its stats.
            (&Method::GET, ["queues", name] | ["queues", name, "stats"]) => self.queue_stats(name).await,
            (&Method::POST, ["queues", name, action]) if *action == "pause" || *action == "resume" => {
                queue.set_paused(queue_name(name)?, *action == "pause").await?;
                self.queue_stats(name).await
            }
            (&Method::GET, ["dead-letter"]) => self.dead_letter(call).await,
            (&Method::POST, ["dead-letter", id, "retry"]) => self.retry_dead_letter(id, call.tenant).await,
            (&Method::DELETE, ["dead-letter", id]) => {
                queue.delete_dead_letter(job_id(id)?, call.tenant).await?;
                Ok((StatusCode::OK, json!({ "deleted": true, "job_id": id })))
            }
            // Rate-limit keys are the request's tenant's (X-OJS-Tenant).
            (&Method::GET, ["rate-limits"]) => {
                Ok((StatusCode::OK, listing("items", queue.rate_limits(call.tenant).await?)))
            }
            (&Method::GET, ["rate-limits", key]) => Ok((StatusCode::OK, queue.rate_limit(call.tenant, key).await?)),
            _ => Err(call.no_route()),
        }
    }

    /// `/admin/...`: `rest` is the path after it.
    pub(super) async fn admin_routes(&self, call: &Call<'_>, rest: &[&str]) -> Reply {
        let queue = &self.inner.queue;
        let tenant = call.tenant;
        match (call.method, rest) {
            (&Method::GET, ["jobs", id]) => Ok((StatusCode::OK, job_answer(queue.get(job_id(id)?, tenant).await?))),
            (&Method::POST, ["jobs", "bulk", "retry"]) => {
                self.retry_in_bulk(request::json(call.body).await?, tenant).await
            }
            (method, ["schemas", rest @ ..]) => self.schemas(method, rest, call.body, true).await,
            (_, ["queues", ..]) => self.admin_queue_routes(call, &rest[1..]).await,
            (&Method::GET, ["dead-letter"]) => self.dead_letter(call).await,
            (&Method::GET, ["dead-letter", "stats"]) => {
                let total = queue.dead_letter_count().await?;
                Ok((StatusCode::OK, json!({ "total": total, "count": total })))
            }
            (&Method::POST, ["dead-letter", id, "retry"]) => self.retry_dead_letter(id, tenant).await,
            (&Method::DELETE, ["dead-letter", id]) => {
                queue.delete_dead_letter(job_id(id)?, tenant).await?;
                Ok((StatusCode::NO_CONTENT, Value::Null))
            }
            (&Method::GET, ["stats"]) => Ok((StatusCode::OK, stats_answer(&queue.stats(None).await?))),
            (&Method::GET, ["tenants"]) => Ok((StatusCode::OK, tenants_answer(queue.tenants().await?))),
            (&Method::GET, ["tenants", id, "stats"]) => {
                let mut stats = stats_answer(&queue.stats(Some(id)).await?);
                stats["tenant_id"] = json!(id);
                Ok((StatusCode::OK, stats))
            }
            (_, ["workers", ..]) => self.admin_worker_routes(call, &rest[1..]).await,
            (&Method::GET, ["scheduling", "stats"]) => {
                Ok((StatusCode::OK, scheduling_answer(&queue.dispatches().await?)))
            }
            // Worker pools (ojs-fair-scheduling §6, §10.1) would bind workers to queues, a
            // strategy and a concurrency limit; none of that is kept, so a pool is never
            // accepted (nor listed as if it could be).
            (_, ["pools", ..]) => Err(OjsError::unsupported(
                "worker pools are not offered: a fetch names its queues and its strategy \
                 (\"strategy\": \"strict\", \"round-robin\" or \"weighted\" with \"weights\")",
            )),
            (&Method::POST, ["reset"]) if self.inner.options.allow_reset => {
                queue.reset().await?;
                Ok((StatusCode::OK, json!({ "reset": true })))
            }
            _ => Err(call.no_route()),
        }
    }

    /// `/admin/queues/...`: `rest` is the path after it.
    async fn admin_queue_routes(&self, call: &Call<'_>, rest: &[&str]) -> Reply {
        let queue = &self.inner.queue;
        match (call.method, rest) {
            (&Method::GET, []) => self.queues(call).await,
            (&Method::GET, [name, "stats"]) => self.queue_stats(name).await,
            (&Method::POST, [name, action]) if *action == "pause" || *action == "resume" => {
                queue.set_paused(queue_name(name)?, *action == "pause").await?;
                let (status, mut stats) = self.queue_stats(name).await?;
                Ok((status, stats["queue"].take()))
            }
            (&Method::PUT, [name, "config"]) => {
                let settings = queue_settings(request::json(call.body).await?)?;
                let config = queue.configure_queue(queue_name(name)?, &settings).await?;
                Ok((StatusCode::OK, json!({ "queue": name, "config": config })))
            }
            (&Method::GET, [name, "config"]) => {
                let config = queue.queue_config(queue_name(name)?).await?;
                Ok((StatusCode::OK, json!({ "queue": name, "config": config })))
            }
            _ => Err(call.no_route()),
        }
    }

    /// `/admin/workers/...`: `rest` is the path after it.
    async fn admin_worker_routes(&self, call: &Call<'_>, rest: &[&str]) -> Reply {
        let queue = &self.inner.queue;
        match (call.method, rest) {
            (&Method::GET, []) => {
                // A page at a time: every tenant's workers, of which there can be any number.
                let page = Page::of(call.query)?;
                let (workers, total) = queue.active_workers(page.offset(), page.per_page).await?;
                let mut body = paged("workers", workers, total, page);
                body["summary"] = json!({ "total": body["pagination"]["total"] });
                Ok((StatusCode::OK, body))
            }
            // One worker is the request's tenant's (X-OJS-Tenant); the listing spans them all.
            (&Method::GET, [id]) => Ok((StatusCode::OK, queue.worker(call.tenant, id).await?)),
            (&Method::POST, [id, action]) => {
                let directive = match *action {
                    "quiet" => Some("quiet"),
                    "terminate" => Some("terminate"),
                    "resume" => None,
                    _ => return Err(call.no_route()),
                };
                Ok((
                    StatusCode::OK,
                    json!({ "worker": queue.direct_worker(call.tenant, id, directive).await? }),
                ))
            }
            _ => Err(call.no_route()),
        }
    }

    /// The queues, a page at a time (`?page=`, `?per_page=`): there can be any number.
    async fn queues(&self, call: &Call<'_>) -> Reply {
        let page = Page::of(call.query)?;
        let (queues, total) = self.inner.queue.list_queues(page.offset(), page.per_page).await?;
        Ok((StatusCode::OK, queues_answer(queues, total, page)))
    }

    async fn queue_stats(&self, name: &str) -> Reply {
        Ok((
            StatusCode::OK,
            queue_stats_answer(self.inner.queue.queue_stats(queue_name(name)?).await?),
        ))
    }

    /// The dead letter, newest first (`?queue=` filters, `?limit=` 1 to 1,000, default 100).
    async fn dead_letter(&self, call: &Call<'_>) -> Reply {
        let limit = call
            .query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(100)
            .clamp(1, 1000);
        let jobs = self
            .inner
            .queue
            .dead_letter(call.query.get("queue").map(String::as_str), limit, call.tenant)
            .await?;
        Ok((
            StatusCode::OK,
            listing("jobs", jobs.into_iter().map(job_answer).collect()),
        ))
    }

    async fn retry_dead_letter(&self, id: &str, tenant: &str) -> Reply {
        let job = self.inner.queue.retry_dead_letter(job_id(id)?, tenant).await?;
        Ok((StatusCode::OK, json!({ "job": job_answer(job) })))
    }
}
