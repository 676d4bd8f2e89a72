//! The cluster's service-account token issuer, as the gateways verify workload identity tokens
//! (STS AssumeRoleWithWebIdentity, docs/operator.md "Workload identity"): the operator reads the
//! API server's OIDC discovery (`issuer`) and signing keys (`/openid/v1/jwks`) and publishes
//! them into every Primary pool's catalog with `pgvs3.put_oidc_issuer`, so no gateway needs API
//! access. Refreshed every [`REFRESH`]; a rotated signing key reaches the catalogs within that.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use sha2::{Digest, Sha256};

use crate::context::{Context, Error, Result};
use crate::crd::{GatewayPool, PoolRole};
use crate::database::{self, Binding};

/// How often the API server's issuer and keys are read, and the catalogs that lack them
/// written: the longest a rotated signing key waits before gateways accept its tokens.
pub const REFRESH: Duration = Duration::from_secs(15);
/// A catalog is written again after this even when nothing changed (a database restored from
/// a backup, a catalog recreated under the same pool).
const REPUBLISH: Duration = Duration::from_secs(600);
/// Bounds on what the API server sends: a discovery document and a key set are a few KiB.
const MAX_DOCUMENT: usize = 256 << 10;

/// The issuer of the cluster's ServiceAccount tokens and its public keys (a JWK Set).
#[derive(Clone, Debug, PartialEq)]
pub struct Issuer {
    pub issuer: String,
    pub jwks: serde_json::Value,
}

impl Issuer {
    /// A digest of issuer and keys: what a catalog was last given.
    fn digest(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(self.issuer.as_bytes());
        hash.update([0]);
        hash.update(self.jwks.to_string().as_bytes());
        hex::encode(&hash.finalize()[..16])
    }
}

/// The issuer last read, and what each catalog was last given.
#[derive(Default)]
pub struct IssuerState {
    current: Mutex<Option<Arc<Issuer>>>,
    /// Per pool (`namespace/pool`): the catalog it was published into (`host:port/db`), the
    /// digest published, and when.
    published: Mutex<HashMap<String, (String, String, Instant)>>,
}

impl IssuerState {
    /// Whether `pool`'s catalog (`catalog`; `None`: whichever it was) got `digest` less than
    /// [`REPUBLISH`] ago.
    fn has(&self, pool: &str, catalog: Option<&str>, digest: &str) -> bool {
        let published = self.published.lock().expect("published");
        published.get(pool).is_some_and(|(at, given, when)| {
            catalog.is_none_or(|catalog| catalog == at) && given == digest && when.elapsed() < REPUBLISH
        })
    }
}

/// The key of a pool in [`IssuerState`].
fn pool_key(pool: &GatewayPool) -> String {
    format!("{}/{}", pool.namespace().unwrap_or_default(), pool.name_any())
}

/// Reads the issuer from the API server's OIDC discovery and its keys from `/openid/v1/jwks`
/// (the chart grants `get` on both nonResourceURLs).
pub async fn fetch(client: &Client) -> Result<Issuer> {
    let discovery = get_json(client, "/.well-known/openid-configuration").await?;
    let issuer = discovery
        .get("issuer")
        .and_then(|issuer| issuer.as_str())
        .filter(|issuer| !issuer.is_empty())
        .ok_or_else(|| Error::Issuer("the OIDC discovery document has no issuer".into()))?
        .to_string();
    let jwks = get_json(client, "/openid/v1/jwks").await?;
    if !jwks.get("keys").is_some_and(|keys| keys.is_array()) {
        return Err(Error::Issuer("/openid/v1/jwks is no JWK Set (no `keys` array)".into()));
    }
    Ok(Issuer { issuer, jwks })
}

async fn get_json(client: &Client, path: &str) -> Result<serde_json::Value> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|err| Error::Issuer(format!("{path}: {err}")))?;
    let text = client.request_text(request).await?;
    if text.len() > MAX_DOCUMENT {
        return Err(Error::Issuer(format!(
            "{path}: {} bytes, more than {MAX_DOCUMENT}",
            text.len()
        )));
    }
    serde_json::from_str(&text).map_err(|err| Error::Issuer(format!("{path}: {err}")))
}

/// The issuer: the one last read, or read now when there is none yet.
pub async fn current(ctx: &Context) -> Result<Arc<Issuer>> {
    if let Some(issuer) = ctx.issuer.current.lock().expect("issuer").clone() {
        return Ok(issuer);
    }
    refresh(ctx).await
}

/// Reads the issuer again and keeps it.
async fn refresh(ctx: &Context) -> Result<Arc<Issuer>> {
    let issuer = Arc::new(fetch(&ctx.client).await?);
    let mut current = ctx.issuer.current.lock().expect("issuer");
    if current.as_deref() != Some(&*issuer) {
        tracing::info!(issuer = %issuer.issuer, keys = issuer.jwks["keys"].as_array().map_or(0, Vec::len), "service-account issuer read");
    }
    *current = Some(issuer.clone());
    Ok(issuer)
}

/// Writes `issuer` into the catalog of `binding`'s pool unless that catalog already has it.
pub async fn publish(ctx: &Context, binding: &Binding, issuer: &Issuer) -> Result<()> {
    let pool = pool_key(&binding.pool);
    let catalog = binding.connection.describe();
    let digest = issuer.digest();
    if ctx.issuer.has(&pool, Some(&catalog), &digest) {
        return Ok(());
    }
    database::within(&binding.connection, async {
        let client = database::connect(&binding.connection).await?;
        Ok(pgvs3_catalog::sts::put_oidc_issuer(&client, &issuer.issuer, &issuer.jwks).await?)
    })
    .await?;
    tracing::info!(%pool, %catalog, issuer = %issuer.issuer, "service-account issuer published");
    ctx.issuer
        .published
        .lock()
        .expect("published")
        .insert(pool, (catalog, digest, Instant::now()));
    Ok(())
}

/// Every [`REFRESH`]: reads the issuer and publishes it into each Primary pool's catalog that
/// lacks it (a pool whose catalog cannot be written yet is tried again next time). Each pool is
/// published on a task of its own, at most one at a time per pool, each bounded by its catalog
/// timeout: a pool whose database does not answer delays no other pool's keys, and its
/// attempts do not pile up.
pub async fn publisher(ctx: Arc<Context>, pools: Store<GatewayPool>) {
    let publishing: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut ticks = tokio::time::interval(REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let issuer = match refresh(&ctx).await {
            Ok(issuer) => issuer,
            Err(error) => {
                tracing::warn!(%error, "reading the service-account issuer");
                ctx.metrics.failure("Issuer", error.reason());
                continue;
            }
        };
        let digest = issuer.digest();
        for pool in pools.state() {
            let key = pool_key(&pool);
            // Binding reads the pool's Secrets: only for a catalog that lacks the keys.
            if pool.spec.role != PoolRole::Primary || ctx.issuer.has(&key, None, &digest) {
                continue;
            }
            let Some(publishing) = Publishing::start(&publishing, key) else {
                continue;
            };
            tokio::spawn(publish_pool(ctx.clone(), pool, issuer.clone(), publishing));
        }
    }
}

/// One pool's publication by [`publisher`]; `_publishing` marks it under way until it ends.
async fn publish_pool(ctx: Arc<Context>, pool: Arc<GatewayPool>, issuer: Arc<Issuer>, _publishing: Publishing) {
    let Some(namespace) = pool.namespace() else { return };
    let published = match database::bind(&ctx, &namespace, &pool.name_any()).await {
        Ok(Ok(binding)) => publish(&ctx, &binding, &issuer).await,
        // Not bindable yet (credentials missing): its own status says why.
        Ok(Err(_)) => Ok(()),
        Err(error) => Err(error),
    };
    if let Err(error) = published {
        tracing::debug!(pool = %pool.name_any(), %namespace, %error, "publishing the service-account issuer");
    }
}

/// A pool's publication under way: its key in the set while it lives (a task that ends or
/// panics drops it).
struct Publishing {
    set: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Publishing {
    /// `None` when `key`'s pool is being published already.
    fn start(set: &Arc<Mutex<HashSet<String>>>, key: String) -> Option<Publishing> {
        set.lock()
            .expect("publishing")
            .insert(key.clone())
            .then(|| Publishing { set: set.clone(), key })
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.set.lock().expect("publishing").remove(&self.key);
    }
}
