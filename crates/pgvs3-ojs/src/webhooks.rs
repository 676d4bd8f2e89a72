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
    /// The wait after the first failure; it grows fourfold with each further one (30 s, 2 min,
    /// 8 min, 32 min, … with the default: about the OJS webhooks extension's schedule), up to
    /// `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How often an idle deliverer looks for due rows.
    pub poll: Duration,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One delivery: claimed from the outbox, or the test delivery of a subscription.
pub struct Delivery {
    pub delivery_id: String,
    pub event_type: String,
    pub body: String,
    pub url: String,
    pub secret: Option<String>,
    /// An OJS subscription's id (deliveries then carry the extension's `X-OJS-*` headers);
    /// `None` for a bucket notification target (`X-Pgvs3-*`).
    pub subscription: Option<String>,
}

/// How an attempt ended.
pub enum Outcome {
    Delivered,
    /// A failure worth retrying: a 5xx, a 429, a timeout, a connection error (its text).
    Failed(String),
    /// A 4xx other than 429 (ojs-webhooks §7.1): the endpoint refuses it, retrying will not
    /// help, so it is dead-lettered at once.
    Refused(String),
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
          o.webhook_id";

const DELIVERED: &str = "DELETE FROM pgvs3.outbox WHERE id = $1";

/// A failure: counted, backed off by $3 ms, dead after $4 attempts or when refused ($5).
const FAILED: &str = "
UPDATE pgvs3.outbox SET attempts = attempts + 1, last_error = $2, due_at = now() + $3::bigint * interval '1 ms',
                        dead = attempts + 1 >= $4::int OR $5::boolean
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
    client: WebhookClient,
}

impl Deliverer {
    fn new(pool: deadpool_postgres::Pool, options: DeliveryOptions) -> anyhow::Result<Deliverer> {
        let client = WebhookClient::new(options.timeout, options.concurrency.max(1))?;
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
        let claimed: Vec<(i64, i32, Delivery)> = rows
            .iter()
            .map(|row| {
                let delivery = Delivery {
                    delivery_id: row.get(1),
                    event_type: row.get(2),
                    body: row.get(3),
                    url: row.get(5),
                    secret: row.get(6),
                    subscription: row.get(7),
                };
                (row.get(0), row.get(4), delivery)
            })
            .collect();
        let outcomes =
            futures::future::join_all(claimed.iter().map(|(_, _, delivery)| self.client.post(delivery))).await;
        for ((id, attempts, delivery), outcome) in claimed.iter().zip(outcomes) {
            let (error, refused) = match outcome {
                Outcome::Delivered => {
                    client.execute(DELIVERED, &[id]).await?;
                    continue;
                }
                Outcome::Failed(error) => (error, false),
                Outcome::Refused(error) => (error, true),
            };
            let wait = backoff(&self.options, *attempts).as_millis() as i64;
            let row = client
                .query_opt(FAILED, &[id, &error, &wait, &self.options.max_attempts, &refused])
                .await?;
            if row.is_some_and(|row| row.get::<_, bool>(0)) {
                tracing::warn!(url = %delivery.url, delivery = %delivery.delivery_id, %error,
                               "webhook delivery dead-lettered");
            } else {
                tracing::debug!(url = %delivery.url, delivery = %delivery.delivery_id, %error,
                                "webhook delivery failed; it will be retried");
            }
        }
        Ok(claimed.len())
    }
}

/// The HTTP(S) client deliveries are POSTed with (system roots for HTTPS), and its timeout.
pub struct WebhookClient {
    client: HttpsClient,
    timeout: Duration,
}

impl WebhookClient {
    pub fn new(timeout: Duration, max_idle_per_host: usize) -> anyhow::Result<WebhookClient> {
        use tokio_rustls::rustls;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = match hyper_rustls::HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone())
        {
            Ok(builder) => builder,
            // A host without CA certificates (a minimal image) still delivers to http://
            // endpoints; https:// ones fail, each delivery saying why.
            Err(error) => {
                tracing::warn!(%error, "no system CA certificates: webhook deliveries to https:// endpoints will fail");
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
            }
        };
        let https = builder.https_or_http().enable_http1().build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(max_idle_per_host)
            .build(https);
        Ok(WebhookClient { client, timeout })
    }

    /// One POST, signed when the endpoint has a secret.
    pub async fn post(&self, delivery: &Delivery) -> Outcome {
        let prefix = if delivery.subscription.is_some() {
            "x-ojs"
        } else {
            "x-pgvs3"
        };
        let timestamp = time::OffsetDateTime::now_utc().unix_timestamp().to_string();
        let mut request = http::Request::post(&delivery.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("pgvs3-webhook/", env!("CARGO_PKG_VERSION")),
            )
            .header(format!("{prefix}-delivery-id"), &delivery.delivery_id)
            .header(format!("{prefix}-event-type"), &delivery.event_type)
            .header(format!("{prefix}-timestamp"), &timestamp);
        if let Some(subscription) = &delivery.subscription {
            request = request.header("x-ojs-subscription-id", subscription);
        }
        if let Some(secret) = &delivery.secret {
            request = request.header(
                format!("{prefix}-signature"),
                signature(secret, &timestamp, &delivery.body),
            );
        }
        let request = match request.body(Full::new(Bytes::from(delivery.body.clone()))) {
            Ok(request) => request,
            Err(error) => return Outcome::Refused(format!("the endpoint's URL cannot be requested: {error}")),
        };
        let exchange = async {
            let response = match self.client.request(request).await {
                Ok(response) => response,
                Err(error) => return Outcome::Failed(error.to_string()),
            };
            let status = response.status();
            // Read (a bounded part of) the answer so the connection can be reused.
            let _ = http_body_util::Limited::new(response.into_body(), 64 << 10)
                .collect()
                .await;
            if status.is_success() {
                Outcome::Delivered
            } else if status.is_client_error() && status != http::StatusCode::TOO_MANY_REQUESTS {
                Outcome::Refused(format!("the endpoint answered {status}"))
            } else {
                Outcome::Failed(format!("the endpoint answered {status}"))
            }
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Failed(format!("no answer within {:?}", self.timeout)),
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

/// The wait after the `failures + 1`-th failure: fourfold from `backoff` each time, capped, ±20%
/// so that endpoints coming back are not hit by every retry at once.
fn backoff(options: &DeliveryOptions, failures: i32) -> Duration {
    use rand::Rng;
    let grown = options
        .backoff
        .saturating_mul(4u32.saturating_pow(failures.clamp(0, 16) as u32))
        .min(options.max_backoff);
    grown.mul_f64(rand::rng().random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_fourfold_up_to_its_cap() {
        let options = DeliveryOptions {
            concurrency: 1,
            timeout: Duration::from_secs(1),
            max_attempts: 5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(100),
            poll: Duration::from_secs(1),
        };
        let third = backoff(&options, 2);
        assert!(third >= Duration::from_millis(12_800) && third <= Duration::from_millis(19_200));
        assert!(backoff(&options, 30) <= Duration::from_secs(120));
    }
}
