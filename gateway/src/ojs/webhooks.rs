//! OJS webhook subscriptions (the webhooks extension: `POST /ojs/v1/webhooks` with a URL, event
//! patterns and a secret) and job progress reports (`PUT /ojs/v1/jobs/{id}/progress`). A
//! subscription's events are owed to it in the transaction that logs them (functions/events.sql)
//! and delivered by the outbox (gateway/src/webhooks.rs); this module only registers and lists.

use serde_json::{Value, json};

use super::OjsError;
use super::envelope;
use super::queue::Queue;

/// A subscription as registered: checked, not yet stored.
pub struct NewWebhook {
    url: String,
    events: Vec<String>,
    secret: String,
    metadata: Value,
}

const MAX_URL: usize = 2048;
const MAX_PATTERNS: usize = 64;

/// Checks a `POST /webhooks` body. The extension asks for HTTPS endpoints; plain HTTP is taken
/// too, for receivers on a trusted network (a sidecar, the same host).
pub fn parse_webhook(body: Value) -> Result<NewWebhook, OjsError> {
    let url = match body.get("url") {
        Some(Value::String(url)) if valid_url(url) => url.clone(),
        _ => return Err(OjsError::invalid("\"url\" must be an http:// or https:// URL")),
    };
    let events = match body.get("events") {
        Some(Value::Array(events)) if !events.is_empty() && events.len() <= MAX_PATTERNS => events
            .iter()
            .map(|event| match event.as_str() {
                Some(name) if !name.is_empty() && name.len() <= 128 => Ok(name.to_string()),
                _ => Err(OjsError::invalid("\"events\" holds event types or patterns like job.*")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(OjsError::invalid(format!(
                "\"events\" must be an array of 1 to {MAX_PATTERNS} event types (job.completed, job.*, *)"
            )));
        }
    };
    let secret = match body.get("secret") {
        Some(Value::String(secret)) if !secret.is_empty() && secret.len() <= 1024 => secret.clone(),
        _ => {
            return Err(OjsError::invalid(
                "\"secret\" (the HMAC key deliveries are signed with) is required",
            ));
        }
    };
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => json!({}),
        Some(metadata @ Value::Object(_)) => metadata.clone(),
        Some(_) => return Err(OjsError::invalid("\"metadata\" must be an object")),
    };
    Ok(NewWebhook {
        url,
        events,
        secret,
        metadata,
    })
}

/// An absolute http(s) URL with a host, no longer than [`MAX_URL`] (the database's own check
/// is the same prefix rule; the HTTP client refuses what it cannot parse at delivery).
pub fn valid_url(url: &str) -> bool {
    url.len() <= MAX_URL
        && url.parse::<http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|host| !host.is_empty())
        })
}

/// A progress report: `progress` a fraction from 0 to 1, `data` and `checkpoint` objects; at
/// least one of `progress` and `data` (ojs-progress §6.1). The SDKs' older `percentage`
/// (0–100) is taken as `progress / 100`.
pub fn parse_progress(body: &Value) -> Result<Value, OjsError> {
    let progress = match (body.get("progress"), body.get("percentage")) {
        (Some(value), _) if !value.is_null() => Some(
            value
                .as_f64()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| OjsError::invalid("\"progress\" must be a number from 0 to 1"))?,
        ),
        (_, Some(value)) if !value.is_null() => Some(
            value
                .as_f64()
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| OjsError::invalid("\"percentage\" must be a number from 0 to 100"))?
                / 100.0,
        ),
        _ => None,
    };
    let object = |field: &str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => Ok(Some(value.clone())),
        Some(_) => Err(OjsError::invalid(format!("\"{field}\" must be an object"))),
    };
    let mut data = object("data")?;
    if let Some(message) = body.get("message").and_then(Value::as_str) {
        data.get_or_insert_with(|| json!({}))["message"] = Value::String(message.to_string());
    }
    let checkpoint = object("checkpoint")?;
    if progress.is_none() && data.is_none() {
        return Err(OjsError::invalid(
            "a progress report needs \"progress\" (0 to 1) or \"data\"",
        ));
    }
    let mut report = json!({ "updated_at": super::now_rfc3339() });
    if let Some(progress) = progress {
        report["progress"] = json!(progress);
    }
    if let Some(data) = data {
        report["data"] = data;
    }
    if let Some(checkpoint) = checkpoint {
        report["checkpoint"] = checkpoint;
    }
    Ok(report)
}

/// Stores an active job's progress and logs `job.progress`, in one statement. The worker, when
/// named, must hold the job.
const REPORT_PROGRESS: &str = "
WITH reported AS (
    UPDATE ojs.jobs j SET progress = $2
     WHERE id = $1 AND state = 'active' AND ($3::text IS NULL OR worker_id IS NULL OR worker_id = $3)
    RETURNING ojs.job_json(j) AS job, id, queue, type, attempt, worker_id, envelope
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.progress', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'worker_id', worker_id)
           || jsonb_strip_nulls(jsonb_build_object('progress', $2 -> 'progress', 'data', $2 -> 'data'))
           || ojs.trace_of(envelope)
      FROM reported
)
SELECT job FROM reported";

const WEBHOOK_COLUMNS: &str = "ojs.webhook_json(w)";

impl Queue {
    pub async fn report_progress(
        &self,
        job_id: &str,
        worker_id: Option<&str>,
        report: &Value,
    ) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(REPORT_PROGRESS).await.map_err(OjsError::sql)?;
        let row = client
            .query_opt(&statement, &[&job_id, report, &worker_id])
            .await
            .map_err(OjsError::sql)?;
        if let Some(row) = row {
            return Ok(row.get(0));
        }
        let state = client
            .query_opt("SELECT state FROM ojs.jobs WHERE id = $1", &[&job_id])
            .await
            .map_err(OjsError::sql)?;
        Err(match state {
            None => OjsError::job_not_found(job_id),
            Some(row) => OjsError::conflict(format!(
                "job {job_id} is {} (or claimed by another worker): only an active job reports progress",
                row.get::<_, String>(0)
            )),
        })
    }

    /// Stores a subscription; the first one also installs the trigger that owes events to
    /// subscriptions (so a database without any pays nothing per event).
    pub async fn create_webhook(&self, webhook: &NewWebhook) -> Result<Value, OjsError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        tx.execute("SELECT ojs.ensure_webhook_trigger()", &[])
            .await
            .map_err(OjsError::sql)?;
        let id = envelope::new_uuid_v7();
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO ojs.webhooks AS w (id, url, events, secret, metadata) VALUES ($1, $2, $3, $4, $5)
                     RETURNING {WEBHOOK_COLUMNS}"
                ),
                &[&id, &webhook.url, &webhook.events, &webhook.secret, &webhook.metadata],
            )
            .await
            .map_err(OjsError::sql)?;
        tx.commit().await.map_err(OjsError::sql)?;
        Ok(row.get(0))
    }

    pub async fn list_webhooks(&self) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {WEBHOOK_COLUMNS} FROM ojs.webhooks w ORDER BY created_at, id"),
                &[],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    pub async fn webhook(&self, id: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("SELECT {WEBHOOK_COLUMNS} FROM ojs.webhooks w WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(OjsError::sql)?
            .map(|row| row.get(0))
            .ok_or_else(|| webhook_not_found(id))
    }

    /// Drops a subscription and what is still owed to it.
    pub async fn delete_webhook(&self, id: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("DELETE FROM ojs.webhooks w WHERE id = $1 RETURNING {WEBHOOK_COLUMNS}"),
                &[&id],
            )
            .await
            .map_err(OjsError::sql)?
            .map(|row| row.get(0))
            .ok_or_else(|| webhook_not_found(id))
    }

    /// What is still owed to a subscription (pending and dead-lettered), oldest first.
    pub async fn webhook_deliveries(&self, id: &str, limit: i64) -> Result<Vec<Value>, OjsError> {
        self.webhook(id).await?;
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT jsonb_strip_nulls(jsonb_build_object(
                        'delivery_id', delivery_id, 'event_type', event_type, 'attempts', attempts,
                        'status', CASE WHEN dead THEN 'dead_letter' ELSE 'pending' END,
                        'next_attempt_at', CASE WHEN NOT dead THEN ojs.ts(due_at) END,
                        'last_error', last_error, 'created_at', ojs.ts(created_at), 'event', body))
                   FROM pgvs3.outbox WHERE webhook_id = $1 ORDER BY id LIMIT $2",
                &[&id, &limit],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Makes a subscription's dead-lettered deliveries due again; how many.
    pub async fn retry_webhook_deliveries(&self, id: &str) -> Result<i64, OjsError> {
        self.webhook(id).await?;
        let client = self.client().await?;
        let row = client
            .query_one("SELECT pgvs3.retry_dead_deliveries($1)", &[&id])
            .await
            .map_err(OjsError::sql)?;
        Ok(row.get(0))
    }
}

fn webhook_not_found(id: &str) -> OjsError {
    OjsError::not_found(format!("webhook {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_and_progress_reports_are_checked() {
        let good = json!({ "url": "https://example.com/hook", "events": ["job.*"], "secret": "s" });
        assert!(parse_webhook(good).is_ok());
        for bad in [
            json!({ "url": "ftp://example.com", "events": ["job.*"], "secret": "s" }),
            json!({ "url": "https://example.com", "events": [], "secret": "s" }),
            json!({ "url": "https://example.com", "events": ["job.*"] }),
            json!({ "url": "/relative", "events": ["job.*"], "secret": "s" }),
        ] {
            assert!(parse_webhook(bad).is_err());
        }
        assert_eq!(parse_progress(&json!({ "progress": 0.5 })).unwrap()["progress"], 0.5);
        assert_eq!(parse_progress(&json!({ "percentage": 25 })).unwrap()["progress"], 0.25);
        assert!(parse_progress(&json!({ "progress": 2 })).is_err());
        assert!(parse_progress(&json!({ "checkpoint": {} })).is_err());
        assert_eq!(
            parse_progress(&json!({ "data": { "rows": 3 }, "message": "m" })).unwrap()["data"],
            json!({ "rows": 3, "message": "m" })
        );
    }
}
