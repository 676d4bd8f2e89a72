//! OJS webhook subscriptions (ojs-webhooks: `/ojs/v1/webhooks/subscriptions`, a URL, event
//! patterns, a filter and a signing secret; the deliveries still owed). A subscription's events are owed to it
//! in the transaction that logs them (functions/events.sql) and delivered by the outbox
//! (gateway/src/webhooks.rs); this module registers, lists and reports.

use serde_json::{Value, json};

use super::envelope;
use super::{EngineError, Queue};

/// A subscription as registered (ojs-webhooks §5.1): checked, not yet stored.
pub struct NewWebhook {
    url: String,
    events: Vec<String>,
    filter: Option<Value>,
    active: bool,
    /// The client's, or one generated (`whsec_…`); shown only in the creation answer.
    secret: String,
    metadata: Value,
}

/// A `PATCH`: the fields given, checked.
#[derive(Default)]
pub struct WebhookUpdate {
    url: Option<String>,
    events: Option<Vec<String>>,
    /// `Some(None)`: the filter removed.
    filter: Option<Option<Value>>,
    active: Option<bool>,
    metadata: Option<Value>,
}

const MAX_URL: usize = 2048;
const MAX_PATTERNS: usize = 64;

/// Checks a create body. The extension asks for HTTPS endpoints; plain HTTP is taken too, for
/// receivers on a trusted network (a sidecar, the same host).
pub fn parse_webhook(body: Value) -> Result<NewWebhook, EngineError> {
    if !body.is_object() {
        return Err(EngineError::invalid("a subscription is a JSON object"));
    }
    let update = parse_update(&body)?;
    let (Some(url), Some(events)) = (update.url, update.events) else {
        return Err(EngineError::invalid("a subscription needs \"url\" and \"events\""));
    };
    let secret = match body.get("secret") {
        None | Some(Value::Null) => new_secret(),
        Some(Value::String(secret)) if !secret.is_empty() && secret.len() <= 1024 => secret.clone(),
        Some(_) => return Err(EngineError::invalid("\"secret\" must be a non-empty string")),
    };
    Ok(NewWebhook {
        url,
        events,
        filter: update.filter.flatten(),
        active: update.active.unwrap_or(true),
        secret,
        metadata: update.metadata.unwrap_or_else(|| json!({})),
    })
}

/// A signing secret: 24 random bytes, `whsec_<hex>`.
fn new_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

/// Checks the fields of a create or `PATCH` body that are present.
pub fn parse_update(body: &Value) -> Result<WebhookUpdate, EngineError> {
    let Some(fields) = body.as_object() else {
        return Err(EngineError::invalid("the request body must be a JSON object"));
    };
    let mut update = WebhookUpdate::default();
    if let Some(url) = fields.get("url") {
        match url.as_str() {
            Some(url) if valid_url(url) => update.url = Some(url.to_string()),
            _ => return Err(EngineError::invalid("\"url\" must be an http:// or https:// URL")),
        }
    }
    if let Some(events) = fields.get("events") {
        update.events = Some(string_list(events, "events", MAX_PATTERNS)?);
    }
    match fields.get("filter") {
        None => {}
        Some(Value::Null) => update.filter = Some(None),
        Some(Value::Object(filter)) => {
            let mut checked = serde_json::Map::new();
            for (key, value) in filter {
                if key != "queues" && key != "job_types" {
                    return Err(EngineError::invalid(format!(
                        "unknown filter {key:?} (queues, job_types)"
                    )));
                }
                checked.insert(key.clone(), json!(string_list(value, key, 1000)?));
            }
            update.filter = Some((!checked.is_empty()).then_some(Value::Object(checked)));
        }
        Some(_) => return Err(EngineError::invalid("\"filter\" must be an object")),
    }
    match fields.get("active") {
        None => {}
        Some(Value::Bool(active)) => update.active = Some(*active),
        Some(_) => return Err(EngineError::invalid("\"active\" must be true or false")),
    }
    match fields.get("metadata") {
        None => {}
        Some(Value::Null) => update.metadata = Some(json!({})),
        Some(metadata @ Value::Object(_)) => update.metadata = Some(metadata.clone()),
        Some(_) => return Err(EngineError::invalid("\"metadata\" must be an object")),
    }
    Ok(update)
}

fn string_list(value: &Value, field: &str, max: usize) -> Result<Vec<String>, EngineError> {
    let invalid = || EngineError::invalid(format!("\"{field}\" must be an array of 1 to {max} non-empty strings"));
    let Value::Array(items) = value else {
        return Err(invalid());
    };
    if items.is_empty() || items.len() > max {
        return Err(invalid());
    }
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(text) if !text.is_empty() && text.len() <= 255 => Ok(text.to_string()),
            _ => Err(invalid()),
        })
        .collect()
}

/// An absolute http(s) URL with a host, no longer than [`MAX_URL`].
pub fn valid_url(url: &str) -> bool {
    url.len() <= MAX_URL
        && url.parse::<http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|host| !host.is_empty())
        })
}

const WEBHOOK_JSON: &str = "ojs.webhook_json(w) AS webhook";

impl Queue {
    /// Stores a subscription; the first one also installs the trigger that owes events to
    /// subscriptions (so a database without any pays nothing per event). The answer is the one
    /// place its secret is shown (§6.1).
    pub async fn create_webhook(&self, webhook: &NewWebhook) -> Result<Value, EngineError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        tx.execute("SELECT ojs.ensure_webhook_trigger()", &[])
            .await
            .map_err(EngineError::sql)?;
        let id = format!("sub_{}", envelope::new_uuid_v7());
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO ojs.webhooks AS w (id, url, events, filter, active, secret, metadata)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {WEBHOOK_JSON}"
                ),
                &[
                    &id,
                    &webhook.url,
                    &webhook.events,
                    &webhook.filter,
                    &webhook.active,
                    &webhook.secret,
                    &webhook.metadata,
                ],
            )
            .await
            .map_err(EngineError::sql)?;
        tx.commit().await.map_err(EngineError::sql)?;
        let mut created: Value = row.get("webhook");
        created["secret"] = Value::String(webhook.secret.clone());
        Ok(created)
    }

    pub async fn update_webhook(&self, id: &str, update: &WebhookUpdate) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let filter_given = update.filter.is_some();
        let filter = update.filter.clone().flatten();
        client
            .query_opt(
                &format!(
                    "UPDATE ojs.webhooks w SET url = coalesce($2, url), events = coalesce($3, events),
                            filter = CASE WHEN $4 THEN $5 ELSE filter END, active = coalesce($6, active),
                            metadata = coalesce($7, metadata)
                      WHERE id = $1 RETURNING {WEBHOOK_JSON}"
                ),
                &[
                    &id,
                    &update.url,
                    &update.events,
                    &filter_given,
                    &filter,
                    &update.active,
                    &update.metadata,
                ],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("webhook"))
            .ok_or_else(|| webhook_not_found(id))
    }

    /// A new signing secret, from now on for what is still owed too; shown once.
    pub async fn rotate_webhook_secret(&self, id: &str) -> Result<Value, EngineError> {
        let secret = new_secret();
        let client = self.client().await?;
        let mut rotated: Value = client
            .query_opt(
                &format!("UPDATE ojs.webhooks w SET secret = $2 WHERE id = $1 RETURNING {WEBHOOK_JSON}"),
                &[&id, &secret],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("webhook"))
            .ok_or_else(|| webhook_not_found(id))?;
        rotated["secret"] = Value::String(secret);
        Ok(rotated)
    }

    /// A subscription's URL and secret (for the test delivery).
    pub async fn webhook_endpoint(&self, id: &str) -> Result<(String, String), EngineError> {
        let client = self.client().await?;
        client
            .query_opt("SELECT url, secret FROM ojs.webhooks WHERE id = $1", &[&id])
            .await
            .map_err(EngineError::sql)?
            .map(|row| (row.get("url"), row.get("secret")))
            .ok_or_else(|| webhook_not_found(id))
    }

    pub async fn list_webhooks(&self) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {WEBHOOK_JSON} FROM ojs.webhooks w ORDER BY created_at, id"),
                &[],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(|row| row.get("webhook")).collect())
    }

    pub async fn webhook(&self, id: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("SELECT {WEBHOOK_JSON} FROM ojs.webhooks w WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("webhook"))
            .ok_or_else(|| webhook_not_found(id))
    }

    /// Drops a subscription and what is still owed to it (§6.5: pending deliveries cancelled).
    pub async fn delete_webhook(&self, id: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("DELETE FROM ojs.webhooks w WHERE id = $1 RETURNING {WEBHOOK_JSON}"),
                &[&id],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("webhook"))
            .ok_or_else(|| webhook_not_found(id))
    }

    /// What is still owed to OJS subscriptions (all, or one's; pending, retrying or dead),
    /// oldest first.
    pub async fn webhook_deliveries(
        &self,
        subscription: Option<&str>,
        status: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT d FROM pgvs3.outbox o, ojs.delivery_json(o) AS d
                  WHERE o.webhook_id IS NOT NULL AND ($1::text IS NULL OR o.webhook_id = $1)
                    AND ($2::text IS NULL OR d ->> 'status' = $2)
                  ORDER BY o.id LIMIT $3",
                &[&subscription, &status, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(|row| row.get("d")).collect())
    }

    pub async fn webhook_delivery(&self, delivery_id: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        client
            .query_opt(
                "SELECT ojs.delivery_json(o) AS delivery FROM pgvs3.outbox o WHERE delivery_id = $1 AND webhook_id IS NOT NULL",
                &[&delivery_id],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("delivery"))
            .ok_or_else(|| {
                EngineError::not_found(format!(
                    "no delivery {delivery_id} is owed (delivered ones are not kept)"
                ))
            })
    }

    /// Makes a dead delivery due again, with its attempts reset.
    pub async fn retry_webhook_delivery(&self, delivery_id: &str) -> Result<Value, EngineError> {
        let current = self.webhook_delivery(delivery_id).await?;
        if current["status"] != "dead" {
            return Err(EngineError::conflict(format!(
                "delivery {delivery_id} is {}, not dead: it is retried already",
                current["status"]
            )));
        }
        let client = self.client().await?;
        client
            .query_opt(
                "UPDATE pgvs3.outbox o SET dead = false, attempts = 0, due_at = now(), last_error = NULL
                  WHERE delivery_id = $1 AND webhook_id IS NOT NULL RETURNING ojs.delivery_json(o) AS delivery",
                &[&delivery_id],
            )
            .await
            .map_err(EngineError::sql)?
            .map(|row| row.get("delivery"))
            .ok_or_else(|| EngineError::not_found(format!("no delivery {delivery_id} is owed")))
    }
}

fn webhook_not_found(id: &str) -> EngineError {
    EngineError::not_found(format!("webhook {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_checked() {
        let good = parse_webhook(json!({ "url": "https://example.com/hook", "events": ["job.*"] })).unwrap();
        assert!(good.secret.starts_with("whsec_") && good.active);
        let filtered = parse_webhook(json!({ "url": "http://h/", "events": ["*"], "secret": "s",
                                             "filter": { "queues": ["q"] } }))
        .unwrap();
        assert_eq!(
            (filtered.secret.as_str(), filtered.filter),
            ("s", Some(json!({ "queues": ["q"] })))
        );
        for bad in [
            json!({ "url": "ftp://example.com", "events": ["job.*"] }),
            json!({ "url": "https://example.com", "events": [] }),
            json!({ "url": "https://example.com" }),
            json!({ "url": "/relative", "events": ["job.*"] }),
            json!({ "url": "https://example.com", "events": ["*"], "filter": { "states": ["x"] } }),
            json!({ "url": "https://example.com", "events": ["*"], "secret": "" }),
        ] {
            assert!(parse_webhook(bad).is_err());
        }
    }
}
