//! The webhook delivery outbox: every gateway's deliverer, which POSTs the rows of
//! `pgvs3.outbox` (written by functions/events.sql inside the transactions that owe them) to
//! their endpoints, signed, with retries and a dead letter. At least once: a row is deleted only
//! after its endpoint answered 2xx, so a gateway that dies between the answer and the delete
//! leaves it to be delivered again when its lease ends (same delivery id).
//!
//! The write path never waits for a delivery: it only inserts the row. Deliverers claim due rows
//! with `FOR UPDATE SKIP LOCKED` and push their `due_at` past the HTTP timeout (the lease), so
//! gateways share the work without delivering a row twice while it is in flight.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::http_server::Shutdown;

/// What an operator can tune (`--webhook-*` flags).
#[derive(Debug, Clone)]
pub struct DeliveryOptions {
    /// Deliveries in flight at once on this gateway; 0 turns this gateway's deliverer off.
    pub concurrency: usize,
    /// How long one POST may take, connection included.
    pub timeout: Duration,
    /// Deliveries tried before a row is dead-lettered.
    pub max_attempts: i32,
    /// The wait after the first failure; it doubles with each further one, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How often an idle deliverer looks for due rows.
    pub poll: Duration,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One delivery claimed from the outbox.
struct Claimed {
    id: i64,
    delivery_id: String,
    event_type: String,
    body: String,
    attempts: i32,
    url: String,
    secret: Option<String>,
    /// OJS webhooks sign with the extension's `X-OJS-*` headers, bucket targets with `X-Pgvs3-*`.
    ojs: bool,
}

/// Claims up to $1 due rows and leases them for $2 ms. The endpoint is read now, so a changed
/// URL or secret applies to what is still owed.
const CLAIM: &str = "
WITH due AS (
    SELECT id FROM pgvs3.outbox WHERE NOT dead AND due_at <= now()
     ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE pgvs3.outbox o SET due_at = now() + $2::bigint * interval '1 ms'
  FROM due
 WHERE o.id = due.id
RETURNING o.id, o.delivery_id, o.event_type, o.body::text, o.attempts,
          coalesce((SELECT url FROM ojs.webhooks WHERE id = o.webhook_id),
                   (SELECT url FROM pgvs3.webhook_targets WHERE name = o.target)),
          coalesce((SELECT secret FROM ojs.webhooks WHERE id = o.webhook_id),
                   (SELECT secret FROM pgvs3.webhook_targets WHERE name = o.target)),
          o.webhook_id IS NOT NULL";

const DELIVERED: &str = "DELETE FROM pgvs3.outbox WHERE id = $1";

/// A failure: counted, backed off by $3 ms, dead after $4 attempts.
const FAILED: &str = "
UPDATE pgvs3.outbox SET attempts = attempts + 1, last_error = $2, due_at = now() + $3::bigint * interval '1 ms',
                        dead = attempts + 1 >= $4::int
 WHERE id = $1
RETURNING dead";

/// Runs this gateway's deliverer until shutdown (nothing when `concurrency` is 0). On a standby
/// claims fail (read only) and it keeps polling, so a promotion starts it delivering.
pub fn spawn_deliverer(
    pool: deadpool_postgres::Pool,
    options: DeliveryOptions,
    mut shutdown: Shutdown,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let deliverer = Deliverer::new(pool, options)?;
    Ok(tokio::spawn(async move {
        if deliverer.options.concurrency == 0 {
            return;
        }
        loop {
            let claimed = match deliverer.round().await {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::debug!(%error, "webhook outbox: claiming failed");
                    0
                }
            };
            // A full batch means more may be due now.
            if claimed == deliverer.options.concurrency {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(deliverer.options.poll) => {}
                _ = shutdown.wait() => return,
            }
        }
    }))
}

struct Deliverer {
    pool: deadpool_postgres::Pool,
    options: DeliveryOptions,
    client: HttpsClient,
}

impl Deliverer {
    fn new(pool: deadpool_postgres::Pool, options: DeliveryOptions) -> anyhow::Result<Deliverer> {
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(options.concurrency.max(1))
            .build(https);
        Ok(Deliverer { pool, options, client })
    }

    /// Claims a batch, delivers it concurrently, and records each outcome; how many it claimed.
    async fn round(&self) -> anyhow::Result<usize> {
        let client = self.pool.get().await?;
        // The lease outlasts the POST (and the outcome's write) by a margin.
        let lease_ms = (self.options.timeout * 2 + Duration::from_secs(5)).as_millis() as i64;
        let statement = client.prepare_cached(CLAIM).await?;
        let rows = client
            .query(&statement, &[&(self.options.concurrency as i64), &lease_ms])
            .await?;
        let claimed: Vec<Claimed> = rows
            .iter()
            .map(|row| Claimed {
                id: row.get(0),
                delivery_id: row.get(1),
                event_type: row.get(2),
                body: row.get(3),
                attempts: row.get(4),
                url: row.get(5),
                secret: row.get(6),
                ojs: row.get(7),
            })
            .collect();
        let outcomes = futures::future::join_all(claimed.iter().map(|delivery| self.post(delivery))).await;
        for (delivery, outcome) in claimed.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    client.execute(DELIVERED, &[&delivery.id]).await?;
                }
                Err(error) => {
                    let wait = backoff(&self.options, delivery.attempts).as_millis() as i64;
                    let row = client
                        .query_opt(FAILED, &[&delivery.id, &error, &wait, &self.options.max_attempts])
                        .await?;
                    let dead = row.is_some_and(|row| row.get::<_, bool>(0));
                    if dead {
                        tracing::warn!(url = %delivery.url, delivery = %delivery.delivery_id, %error,
                                       "webhook delivery dead-lettered after its last attempt");
                    } else {
                        tracing::debug!(url = %delivery.url, delivery = %delivery.delivery_id, %error,
                                        "webhook delivery failed; it will be retried");
                    }
                }
            }
        }
        Ok(claimed.len())
    }

    /// One POST; anything but a 2xx answer within the timeout is a failure (its text).
    async fn post(&self, delivery: &Claimed) -> Result<(), String> {
        let prefix = if delivery.ojs { "x-ojs" } else { "x-pgvs3" };
        let timestamp = time::OffsetDateTime::now_utc().unix_timestamp().to_string();
        let mut request = http::Request::post(&delivery.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, concat!("pgvs3/", env!("CARGO_PKG_VERSION")))
            .header(format!("{prefix}-delivery-id"), &delivery.delivery_id)
            .header(format!("{prefix}-event-type"), &delivery.event_type)
            .header(format!("{prefix}-timestamp"), &timestamp);
        if let Some(secret) = &delivery.secret {
            request = request.header(
                format!("{prefix}-signature"),
                signature(secret, &timestamp, &delivery.body),
            );
        }
        let request = request
            .body(Full::new(Bytes::from(delivery.body.clone())))
            .map_err(|error| format!("invalid request: {error}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| error.to_string())?;
            let status = response.status();
            // Read (a bounded part of) the answer so the connection can be reused.
            let _ = http_body_util::Limited::new(response.into_body(), 64 << 10)
                .collect()
                .await;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("the endpoint answered {status}"))
            }
        };
        match tokio::time::timeout(self.options.timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no answer within {:?}", self.options.timeout)),
        }
    }
}

/// `sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`, as the OJS webhooks extension
/// signs; a receiver recomputes it over the raw body and rejects old timestamps.
pub fn signature(secret: &str, timestamp: &str, body: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait after the `failures + 1`-th failure: doubling from `backoff`, capped, ±20% so that
/// endpoints coming back are not hit by every retry at once.
fn backoff(options: &DeliveryOptions, failures: i32) -> Duration {
    use rand::Rng;
    let doubled = options
        .backoff
        .saturating_mul(1u32 << failures.clamp(0, 20) as u32)
        .min(options.max_backoff);
    doubled.mul_f64(rand::rng().random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let options = DeliveryOptions {
            concurrency: 1,
            timeout: Duration::from_secs(1),
            max_attempts: 5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            poll: Duration::from_secs(1),
        };
        let third = backoff(&options, 2);
        assert!(third >= Duration::from_millis(3200) && third <= Duration::from_millis(4800));
        assert!(backoff(&options, 30) <= Duration::from_secs(12));
    }
}
