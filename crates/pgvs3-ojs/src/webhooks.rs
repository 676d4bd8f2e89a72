//! The webhook delivery outbox: every gateway's deliverer, which POSTs the rows of
//! `pgvs3.outbox` (written by functions/events.sql inside the transactions that owe them) to
//! their endpoints, signed, with retries and a dead letter. At least once: a row is deleted only
//! after its endpoint answered 2xx, so a gateway that dies between the answer and the delete
//! leaves it to be delivered again when its lease ends (same delivery id).
//!
//! The write path never waits for a delivery: it only inserts the row. Deliverers claim due rows
//! with `FOR UPDATE SKIP LOCKED` and push their `due_at` past the HTTP timeout (the lease), so
//! gateways share the work without delivering a row twice while it is in flight.
//!
//! Deliveries go to public addresses only, unless an operator allows a network
//! (`--webhook-allow-networks`): whoever may register a subscription or a notification target
//! must not make the gateway reach its own host, the cloud metadata service or the private
//! network behind it ([`Destinations`]).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioIo};

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
    /// The internal networks deliveries may reach (`--webhook-allow-networks`).
    pub destinations: Destinations,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// An address block of `--webhook-allow-networks`: `a.b.c.d/n`, an IPv6 block, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressBlock {
    net: IpAddr,
    bits: u32,
}

impl std::str::FromStr for AddressBlock {
    type Err = String;

    fn from_str(text: &str) -> Result<AddressBlock, String> {
        let invalid = || format!("{text:?} is not an address or an address block (10.0.0.0/8, fd00::/8, 127.0.0.1)");
        let (net, bits) = match text.split_once('/') {
            Some((net, bits)) => (net, Some(bits.parse::<u32>().map_err(|_| invalid())?)),
            None => (text, None),
        };
        let net = net.parse::<IpAddr>().map_err(|_| invalid())?;
        let width = if net.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(width);
        if bits > width {
            return Err(invalid());
        }
        Ok(AddressBlock { net, bits })
    }
}

impl AddressBlock {
    fn contains(&self, ip: IpAddr) -> bool {
        let same_prefix = |net: u128, ip: u128, width: u32| {
            self.bits == 0 || (net >> (width - self.bits)) == (ip >> (width - self.bits))
        };
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => same_prefix(u32::from(net).into(), u32::from(ip).into(), 32),
            (IpAddr::V6(net), IpAddr::V6(ip)) => same_prefix(u128::from(net), u128::from(ip), 128),
            _ => false,
        }
    }
}

/// Where deliveries may go: public addresses, and the internal ones an operator allowed.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    allowed: Arc<[AddressBlock]>,
}

impl Destinations {
    pub fn allowing(blocks: &[AddressBlock]) -> Destinations {
        Destinations { allowed: blocks.into() }
    }

    /// Whether a delivery may connect to `ip`. An IPv6 address that carries an IPv4 one
    /// (`::ffff:a.b.c.d`, the older `::a.b.c.d`) is judged as both: internal if either is, allowed
    /// if either is in an allowed block.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let carried = match ip {
            IpAddr::V6(v6) => v6.to_ipv4().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let forms = || std::iter::once(ip).chain(carried);
        !forms().any(is_internal) || forms().any(|form| self.allowed.iter().any(|block| block.contains(form)))
    }
}

/// Why a delivery was not attempted: its endpoint is at an internal address not allowed.
#[derive(Debug)]
struct InternalDestination(IpAddr);

impl std::fmt::Display for InternalDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the endpoint is at {}, an internal address: webhooks reach only public ones unless --webhook-allow-networks allows it",
            self.0
        )
    }
}

impl std::error::Error for InternalDestination {}

/// Addresses that are not the public internet's: this host, link-local (the cloud metadata
/// service, 169.254.169.254), private and shared (carrier NAT) networks, IPv6 unique-local and
/// site-local, unspecified, multicast, broadcast and reserved blocks, and IPv6's translations of
/// IPv4 (NAT64, 6to4), which a router turns back into any IPv4 address. (Addresses that carry
/// an IPv4 one are judged by [`Destinations::permits`].)
fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                || first == 0x2002
                || (first == 0x64 && v6.segments()[1] == 0xff9b)
        }
    }
}

/// Resolves a delivery's host name and refuses it when any of its addresses is internal, so
/// the addresses checked are the ones connected to (a name cannot change its answer between a
/// check and the connection).
#[derive(Clone)]
struct GuardedResolver {
    destinations: Destinations,
}

type Resolving = Pin<Box<dyn Future<Output = std::io::Result<std::vec::IntoIter<SocketAddr>>> + Send>>;

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Resolving {
        let destinations = self.destinations.clone();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            match addresses.iter().find(|address| !destinations.permits(address.ip())) {
                Some(internal) => Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    InternalDestination(internal.ip()),
                )),
                None => Ok(addresses.into_iter()),
            }
        })
    }
}

/// The TCP connector of deliveries: a host written as an address (which the HTTP connector
/// connects to without resolving) is checked here, a name by [`GuardedResolver`]. Redirects are
/// not followed (a 3xx answer is a failed attempt), so nothing else chooses where to connect.
#[derive(Clone)]
pub struct GuardedConnector {
    http: HttpConnector<GuardedResolver>,
    destinations: Destinations,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<tokio::net::TcpStream>, BoxError>> + Send>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for GuardedConnector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Connecting {
        let literal = uri
            .host()
            .map(|host| host.trim_start_matches('[').trim_end_matches(']'))
            .and_then(|host| host.parse::<IpAddr>().ok());
        if let Some(ip) = literal.filter(|ip| !self.destinations.permits(*ip)) {
            return Box::pin(async move { Err(InternalDestination(ip).into()) });
        }
        let connecting = self.http.call(uri);
        Box::pin(async move { connecting.await.map_err(Into::into) })
    }
}

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
    /// The endpoint is at an internal address this gateway may not reach (nothing was sent):
    /// dead-lettered at once too, until an operator allows its network and retries it.
    Forbidden(String),
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
RETURNING o.id, o.delivery_id, o.event_type, o.body::text AS body, o.attempts,
          coalesce((SELECT url FROM ojs.webhooks WHERE id = o.webhook_id),
                   (SELECT url FROM pgvs3.webhook_targets WHERE name = o.target)) AS url,
          coalesce((SELECT secret FROM ojs.webhooks WHERE id = o.webhook_id),
                   (SELECT secret FROM pgvs3.webhook_targets WHERE name = o.target)) AS secret,
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
        let client = WebhookClient::new(
            options.timeout,
            options.concurrency.max(1),
            options.destinations.clone(),
        )?;
        Ok(Deliverer { pool, options, client })
    }

    /// Claims a batch, delivers it concurrently, and records each outcome; how many it claimed.
    async fn round(&self) -> anyhow::Result<usize> {
        let client = pgvs3_base::checkout::checkout(&self.pool).await?;
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
                    delivery_id: row.get("delivery_id"),
                    event_type: row.get("event_type"),
                    body: row.get("body"),
                    url: row.get("url"),
                    secret: row.get("secret"),
                    subscription: row.get("webhook_id"),
                };
                (row.get("id"), row.get("attempts"), delivery)
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
                Outcome::Refused(error) | Outcome::Forbidden(error) => (error, true),
            };
            let wait = backoff(&self.options, *attempts).as_millis() as i64;
            let row = client
                .query_opt(FAILED, &[id, &error, &wait, &self.options.max_attempts, &refused])
                .await?;
            if row.is_some_and(|row| row.get::<_, bool>("dead")) {
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
    pub fn new(
        timeout: Duration,
        max_idle_per_host: usize,
        destinations: Destinations,
    ) -> anyhow::Result<WebhookClient> {
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
        let mut http = HttpConnector::new_with_resolver(GuardedResolver {
            destinations: destinations.clone(),
        });
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = builder
            .https_or_http()
            .enable_http1()
            .wrap_connector(GuardedConnector { http, destinations });
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
                Err(error) => return failure(&error),
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

/// A request that got no answer: [`Outcome::Forbidden`] when the destination was refused,
/// else a failure worth retrying.
fn failure(error: &hyper_util::client::legacy::Error) -> Outcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        // The resolver's refusal comes wrapped in an io::Error, whose source() skips it.
        let inner = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if let Some(refusal) = [Some(cause), inner]
            .into_iter()
            .flatten()
            .find_map(|error| error.downcast_ref::<InternalDestination>())
        {
            return Outcome::Forbidden(refusal.to_string());
        }
        source = cause.source();
    }
    Outcome::Failed(error.to_string())
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
            destinations: Destinations::default(),
        };
        let third = backoff(&options, 2);
        assert!(third >= Duration::from_millis(12_800) && third <= Duration::from_millis(19_200));
        assert!(backoff(&options, 30) <= Duration::from_secs(120));
    }

    #[test]
    fn internal_addresses_are_refused_unless_allowed() {
        let none = Destinations::default();
        for internal in [
            "127.0.0.1",
            "127.255.0.9",
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "ff02::1",
        ] {
            assert!(!none.permits(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(none.permits(public.parse().unwrap()), "{public}");
        }
        let blocks: Vec<AddressBlock> = ["127.0.0.0/8", "fd00::/8", "10.0.0.7"]
            .iter()
            .map(|b| b.parse().unwrap())
            .collect();
        let some = Destinations::allowing(&blocks);
        for allowed in ["127.0.0.1", "::ffff:127.0.0.2", "fd00::5", "10.0.0.7", "8.8.8.8"] {
            assert!(some.permits(allowed.parse().unwrap()), "{allowed}");
        }
        assert!(Destinations::allowing(&["::1".parse().unwrap()]).permits("::1".parse().unwrap()));
        for refused in ["10.0.0.8", "::1", "169.254.169.254", "fc00::1"] {
            assert!(!some.permits(refused.parse().unwrap()), "{refused}");
        }
        for bad in ["", "10.0.0.0/33", "::/129", "example.com", "10.0.0.0/x", "1.2.3/8"] {
            assert!(bad.parse::<AddressBlock>().is_err(), "{bad}");
        }
        assert!(
            "0.0.0.0/0"
                .parse::<AddressBlock>()
                .unwrap()
                .contains("10.9.9.9".parse().unwrap())
        );
    }
}
