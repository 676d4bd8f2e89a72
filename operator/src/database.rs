//! A Primary pool's database as the operator reaches it to write catalog rows through the SQL
//! control API: the pool's address and credentials, and the master key that seals secrets.
//! Shared by the Bucket and OriginCache controllers.
//!
//! Every catalog interaction — a connection and its statements — is bounded in time
//! ([`within`]): a database that accepts a connection and never answers (a frozen host, a
//! listener that reads nothing) holds a reconcile, and so one of the controller's few slots, for
//! at most [`Connection::timeout`] per step, and then counts as unreachable, as a refused
//! connection does. Per step, not per reconcile: the first step that does not answer ends the
//! reconcile, and a bound on the whole would only give up on steps the database had answered
//! (docs/operator.md, "A database that does not answer").

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use pgvs3_pgtls::PgTls;
use pgvs3_secret::MasterKey;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, GenericClient, Transaction};

use crate::context::{Context, Error, Result};
use crate::crd::{GatewayPool, POSTGRES_CA_KEY, PoolRole, Verdict, waiting};
use crate::kube_ops;

/// Where and as whom the operator reaches a pool's database.
#[derive(Clone, Debug)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: String,
    /// The pool's `sslMode`, and the connector that applies it (with the pool's CA).
    pub ssl_mode: pgvs3_pgtls::SslMode,
    pub tls: PgTls,
    /// The longest one catalog interaction (connecting, then its statements) may take
    /// (`--catalog-timeout`).
    pub timeout: Duration,
}

impl Connection {
    /// Where the operator tried to connect, for errors: `host:port/database as user`.
    pub fn describe(&self) -> String {
        format!("{}:{}/{} as {}", self.host, self.port, self.database, self.user)
    }
}

/// The pool, its database connection and master key.
pub struct Binding {
    pub pool: GatewayPool,
    pub connection: Connection,
    pub master_key: MasterKey,
}

/// Binds to the Primary pool `pool_name` of `namespace`, or says (as conditions) what is
/// missing: the pool, its primary role, its credentials or master key Secret.
pub async fn bind(ctx: &Context, namespace: &str, pool_name: &str) -> Result<Result<Binding, Vec<Verdict>>> {
    if !valid_object_name(pool_name) {
        // Resources admitted before the CRD's minLength rule (or with validation off): a GET of
        // "" would be a LIST, and no such pool can ever exist.
        let message = format!("gatewayPoolRef {pool_name:?} is not a valid GatewayPool name");
        return Ok(Err(waiting(INVALID_SPEC, &message)));
    }
    let pools: Api<GatewayPool> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(pool) = pools.get_opt(pool_name).await? else {
        return Ok(Err(waiting(
            "PoolNotFound",
            &format!("GatewayPool {pool_name} does not exist"),
        )));
    };
    if pool.spec.role != PoolRole::Primary {
        let message =
            format!("GatewayPool {pool_name} is a Standby pool; the catalog is written through a Primary pool");
        return Ok(Err(waiting("PoolNotPrimary", &message)));
    }
    // The pool's own refusal (its gateways are not started either): a password that could
    // reach a server nobody verified is not sent by the operator.
    if let Some(refusal) = crate::gateway_pool::build::spec_refusal(&pool) {
        return Ok(Err(waiting(
            INVALID_SPEC,
            &format!("GatewayPool {pool_name}: {refusal}"),
        )));
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let credentials_name = pool.spec.postgres.credentials_secret();
    let master_ref = pool.spec.master_key_ref(pool_name);
    let (Some(credentials), Some(master)) = (
        secrets.get_opt(&credentials_name).await?,
        secrets.get_opt(&master_ref.name).await?,
    ) else {
        let message = format!("Secrets {credentials_name} and {} must exist", master_ref.name);
        return Ok(Err(waiting("CredentialsUnavailable", &message)));
    };
    let postgres = &pool.spec.postgres;
    let host = postgres.host_from_anywhere(PoolRole::Primary, namespace);
    let roots = match postgres.ca_secret() {
        None => Vec::new(),
        Some(name) => {
            let Some(ca) = secrets.get_opt(&name).await? else {
                return Ok(Err(waiting(
                    "TlsUnavailable",
                    &format!("TLS Secret {name} does not exist"),
                )));
            };
            let pem = kube_ops::secret_text(&ca, POSTGRES_CA_KEY)?;
            pgvs3_pgtls::pem_certs(pem.as_bytes()).map_err(|err| Error::Secret {
                secret: name,
                problem: format!("{POSTGRES_CA_KEY}: {err:#}"),
            })?
        }
    };
    let mode = pgvs3_pgtls::SslMode::parse(postgres.ssl_mode().as_str()).expect("the CRD's modes are libpq's");
    let tls = PgTls::new(mode, roots, None).map_err(|err| Error::InvalidSpec(format!("{err:#}")))?;
    let tls = match postgres.ca_secret() {
        Some(name) => tls.roots_from(format!("Secret {name} ({POSTGRES_CA_KEY})")),
        None => tls,
    };
    let connection = Connection {
        host,
        port: u16::try_from(postgres.port()).unwrap_or(5432),
        database: postgres.database().to_string(),
        user: kube_ops::secret_text(&credentials, "username")?,
        password: kube_ops::secret_text(&credentials, "password")?,
        ssl_mode: mode,
        tls,
        timeout: ctx.catalog_timeout,
    };
    let master_key = MasterKey::from_text(&kube_ops::secret_text(&master, &master_ref.key)?);
    ctx.remember_connection(namespace, pool_name, &connection);
    Ok(Ok(Binding {
        pool,
        connection,
        master_key,
    }))
}

/// For a cleanup that cannot bind `pool` (it or its Secrets are gone: a namespace's deletion
/// takes them alongside the resource): revokes `key_id` through the connection the pool was
/// last bound with. `Ok(Err(why))` when this process has none or the database does not answer.
pub async fn revoke_through_last_connection(
    ctx: &Context,
    namespace: &str,
    pool: &str,
    key_id: &str,
) -> Result<std::result::Result<(), String>> {
    let Some(connection) = ctx.last_connection(namespace, pool) else {
        return Ok(Err("no connection to it since the operator started".to_string()));
    };
    let revoked = within(&connection, async {
        let client = connect(&connection).await?;
        crate::bucket::catalog::delete_access_key(&client, key_id).await
    });
    match revoked.await {
        Ok(_) => Ok(Ok(())),
        Err(err) if unreachable(&err) => Ok(Err(err.to_string())),
        Err(err) => Err(err),
    }
}

/// How much longer the cleanup of a resource (`deleted`) that cannot reach `pool`'s catalog
/// retries before it gives up (zero: it gives up now), or `None` when it never does. It gives
/// up only when the pool is being deleted too — its namespace is, or it is; the database may
/// well be going with it (a CloudNativePG cluster in the same namespace) — once `grace` has
/// passed since the later of the two deletions. A resource deleted while its pool lives waits
/// for the catalog however long it takes (`CleanupFailed` says why).
pub fn cleanup_grace_left(
    pool: &GatewayPool,
    deleted: &ObjectMeta,
    grace: Duration,
    now: Timestamp,
) -> Option<Duration> {
    let (Some(pool_deleted), Some(deleted)) = (&pool.metadata.deletion_timestamp, &deleted.deletion_timestamp) else {
        return None;
    };
    let since = pool_deleted.0.max(deleted.0);
    let passed = now.duration_since(since).try_into().unwrap_or(Duration::ZERO);
    Some(grace.saturating_sub(passed))
}

/// The reason of a resource whose spec can never be provisioned as written.
pub const INVALID_SPEC: &str = "InvalidSpec";

/// Whether `name` can name a Kubernetes object (a DNS-1123 subdomain).
pub fn valid_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The catalog's timeout by default: a healthy catalog answers the operator's few statements in
/// milliseconds; thirty seconds leave room for a loaded or failing-over one.
pub const DEFAULT_CATALOG_TIMEOUT: Duration = Duration::from_secs(30);

/// A forced drop deletes every row of a bucket's objects: a database that answers may take this
/// many catalog timeouts over it (five minutes by default) before the drop counts as not answered.
const DROP_TIMEOUTS: u32 = 10;

/// TCP keepalives and a user timeout notice a peer that vanished (a host or network gone) while
/// a statement waits, well before the kernel's two hours; a peer whose kernel still answers but
/// whose server does not is left to [`within`].
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// Runs `work` — connecting and the statements that follow — within the connection's timeout:
/// past it the work is dropped (closing its connection) and fails with
/// [`Error::CatalogTimeout`], which counts as an unreachable database ([`unreachable`]).
pub async fn within<T>(connection: &Connection, work: impl Future<Output = Result<T>>) -> Result<T> {
    within_for(connection, connection.timeout, work).await
}

/// [`within`] for a forced drop of a bucket's objects ([`DROP_TIMEOUTS`] catalog timeouts), whose
/// session must then allow statements that long ([`allow_long_statements`]).
pub async fn within_drop<T>(connection: &Connection, work: impl Future<Output = Result<T>>) -> Result<T> {
    within_for(connection, connection.timeout * DROP_TIMEOUTS, work).await
}

async fn within_for<T>(connection: &Connection, after: Duration, work: impl Future<Output = Result<T>>) -> Result<T> {
    // Boxed: the work is a reconcile step's whole future, and the futures that await it would
    // otherwise hold (and move about the stack) a copy of it.
    tokio::time::timeout(after, Box::pin(work))
        .await
        .unwrap_or_else(|_| Err(timed_out(connection, after)))
}

fn timed_out(connection: &Connection, after: Duration) -> Error {
    Error::CatalogTimeout {
        target: connection.describe(),
        after,
    }
}

/// Raises the session's `statement_timeout` (set at connect to the catalog timeout) for the
/// forced drop that [`within_drop`] bounds.
pub async fn allow_long_statements(client: &impl GenericClient, connection: &Connection) -> Result<()> {
    let millis = (connection.timeout * DROP_TIMEOUTS).as_millis();
    Ok(client
        .batch_execute(&format!("SET statement_timeout = {millis}"))
        .await?)
}

/// The COMMIT of a catalog transaction that [`within`] or [`within_drop`] may cut short. Before
/// it is sent, a timeout leaves the catalog as it was (the server rolls back the transaction of
/// a session that went away); once it is sent, nobody knows whether the transaction took effect.
/// Records what the transaction does, so that the resource can say so.
#[derive(Debug, Default)]
pub struct Commit(std::sync::OnceLock<String>);

impl Commit {
    /// Commits `transaction`, which does `what`.
    pub async fn send(&self, transaction: Transaction<'_>, what: &str) -> Result<()> {
        let _ = self.0.set(what.to_string());
        Ok(transaction.commit().await?)
    }

    /// What the transaction does, once its COMMIT was sent: after a timeout, what may or may
    /// not have happened.
    pub fn in_flight(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// Whether `error` says the database could not be reached or did not answer in time (rather
/// than that it answered with an error).
pub fn unreachable(error: &Error) -> bool {
    matches!(error, Error::CatalogConnect { .. } | Error::CatalogTimeout { .. })
}

/// Connects, within the connection's timeout whole (TCP, TLS, authentication: tokio-postgres's
/// `connect_timeout` bounds only the TCP connect). The session's `statement_timeout` is the same
/// timeout and its `lock_timeout` half of it, so the server stops a statement the operator no
/// longer waits for, and a statement stuck behind a lock fails saying so; its
/// `idle_in_transaction_session_timeout` is the timeout too, so a transaction the operator gave
/// up on over a network cut (the server never sees the connection close) is rolled back and its
/// row locks released then, not when TCP gives up hours later. They are `SET` once
/// connected rather than sent as the startup `options` parameter, which poolers such as
/// PgBouncer refuse unless told to ignore it.
pub async fn connect(connection: &Connection) -> Result<Client> {
    let timeout = connection.timeout;
    let mut config = Config::new();
    config
        .host(&connection.host)
        .port(connection.port)
        .dbname(&connection.database)
        .user(&connection.user)
        .password(&connection.password)
        .application_name("pgvs3-operator")
        .connect_timeout(timeout)
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(timeout)
        .ssl_mode(connection.ssl_mode.negotiation());
    let session = async {
        let (client, driver) =
            config
                .connect(connection.tls.clone())
                .await
                .map_err(|source| Error::CatalogConnect {
                    target: connection.describe(),
                    // tokio-postgres says only "error performing TLS handshake": why it was refused.
                    refusal: connection.tls.refusal(&source),
                    source,
                })?;
        tokio::spawn(async move {
            if let Err(err) = driver.await {
                tracing::debug!(error = %err, "catalog connection ended");
            }
        });
        client
            .batch_execute(&format!(
                "SET statement_timeout = {millis}; SET lock_timeout = {}; SET idle_in_transaction_session_timeout = {millis}",
                (timeout / 2).as_millis(),
                millis = timeout.as_millis(),
            ))
            .await?;
        Ok(client)
    };
    tokio::time::timeout(timeout, session)
        .await
        .map_err(|_| timed_out(connection, timeout))?
}

/// Whether a catalog call failed because the catalog lacks a control function or table the
/// operator uses: the pool's gateways have not migrated it to their layout yet.
pub fn catalog_outdated(error: &Error) -> bool {
    let outdated = [SqlState::UNDEFINED_FUNCTION, SqlState::UNDEFINED_TABLE];
    matches!(error, Error::Catalog(err) if err.code().is_some_and(|code| outdated.contains(code)))
}

/// Whether the catalog refused a bucket name (`pgvs3.ensure_bucket` raises 22023).
pub fn catalog_refused_name(error: &Error) -> bool {
    matches!(error, Error::Catalog(err) if err.code() == Some(&SqlState::INVALID_PARAMETER_VALUE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn deleted(seconds: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            deletion_timestamp: seconds.map(|s| Time(at(s))),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_cleanup_gives_up_only_when_the_pool_goes_too_and_the_grace_has_passed() {
        let grace = Duration::from_secs(120);
        let pool = |seconds| GatewayPool {
            metadata: deleted(seconds),
            ..serde_json::from_value(
                serde_json::json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
                "metadata": {"name": "objects"}, "spec": {"postgres": {"clusterName": "pg"}}}),
            )
            .unwrap()
        };
        let left = |pool_deleted, deleted_at, now| {
            cleanup_grace_left(&pool(pool_deleted), &deleted(deleted_at), grace, at(now))
        };
        // The pool lives: the catalog is waited for, however long.
        assert_eq!(left(None, Some(0), 100_000), None);
        // Both going: from the later deletion on.
        assert_eq!(left(Some(0), Some(10), 129), Some(Duration::from_secs(1)));
        assert_eq!(left(Some(0), Some(10), 130), Some(Duration::ZERO));
        assert_eq!(left(Some(60), Some(0), 179), Some(Duration::from_secs(1)));
        assert_eq!(left(Some(60), Some(0), 1_000), Some(Duration::ZERO));
        // A clock behind the deletion gives nothing up.
        assert_eq!(left(Some(500), Some(500), 0), Some(grace));
    }
}
