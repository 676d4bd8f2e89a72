//! `pgvs3 serve`: database, layout, catalog, then the S3 and admin listeners, until a signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::admin::AdminService;
use crate::cache::CacheTier;
use crate::config::{DatabaseArgs, ServeArgs, TlsListener};
use crate::http_server::{self, ShutdownTrigger};
use crate::master_key::{MasterKey, random_token};
use crate::metrics::Metrics;
use crate::pg::checkout::checkout;
use crate::pg::connections::{Dedicated, Liveness};
use crate::pg::health::DatabaseHealth;
use crate::pg::{Database, migrate};
use crate::replica_lag::ReplicaLag;
use crate::store::{Catalog, NewAccessKey, Store};
use pgvs3_base::feature::{Listen, Shared, Started, spawn_http};
use pgvs3_ojs::OperatorToken;

/// A gateway that is up: its bound addresses, and what it needs to stop cleanly.
pub struct RunningGateway {
    pub s3_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The RESP endpoint, unless switched off.
    pub resp_addr: Option<SocketAddr>,
    /// The OJS endpoint, unless disabled.
    pub ojs_addr: Option<SocketAddr>,
    /// The plaintext S3 twin of a TLS endpoint (`--s3-plaintext-addr`).
    pub s3_plaintext_addr: Option<SocketAddr>,
    pub store: Store,
    shutdown: ShutdownTrigger,
    servers: Vec<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
    database: Database,
}

/// The master key for a database: given explicitly, or the embedded default's own.
pub fn master_key(args: &DatabaseArgs) -> anyhow::Result<MasterKey> {
    match (&args.master_key, &args.database_url) {
        (Some(text), _) => Ok(MasterKey::from_text(text)),
        (None, None) => MasterKey::load_or_create(&args.data_dir),
        (None, Some(_)) => anyhow::bail!(
            "PGVS3_MASTER_KEY (or --master-key) is required with --database-url: it encrypts access-key secrets"
        ),
    }
}

impl RunningGateway {
    pub async fn start(args: &ServeArgs) -> anyhow::Result<RunningGateway> {
        let core = Core::open(args).await?;
        let (shared, tls, pool) = (&core.shared, &core.tls, &core.database.pool);
        let buckets = crate::bucket::Buckets::new(core.store.clone(), core.cache.clone());
        let s3 = pgvs3_s3::start(
            &args.s3,
            buckets.clone(),
            shared,
            Listen {
                addr: args.s3.s3_addr,
                plaintext: args.tls.s3_plaintext_addr,
                tls: tls.s3.clone(),
            },
            &args.simulate,
        )
        .await?;
        let admin = start_admin(args, core.admin_service(args), tls.admin.clone(), shared).await?;
        let resp = pgvs3_resp::start(
            &args.resp,
            buckets,
            shared,
            args.tls.resp_plaintext_addr,
            tls.resp.clone(),
            core.dedicated(args),
        )
        .await?;
        let (ojs_token, token_follower) = ojs_token(args, &core.store).await?;
        let ojs = pgvs3_ojs::start(
            &args.ojs,
            &args.webhooks,
            ojs_token.clone(),
            (pool.clone(), Arc::new(core.readiness.clone())),
            shared,
            args.tls.ojs_plaintext_addr,
            tls.ojs.clone(),
        )
        .await?;
        let (s3_addr, s3_plaintext_addr) = (s3.addr, s3.plaintext_addr);
        let resp_addr = resp.as_ref().map(|resp| resp.addr);
        let ojs_addr = ojs.as_ref().map(|ojs| ojs.addr);
        let admin_addr = admin.addr;
        let console = start_console(args, &core, &s3, resp.as_ref(), ojs.as_ref(), ojs_token, admin_addr).await?;
        let (mut servers, mut background) = (admin.servers, Vec::from_iter(token_follower));
        for started in [Some(s3), resp, ojs].into_iter().flatten() {
            servers.extend(started.servers);
            background.extend(started.background);
        }
        let console_addr = console.map(|console| {
            servers.push(console.task);
            console.addr
        });
        let listeners = serde_json::json!({
            "s3": s3_addr.to_string(),
            "admin": admin_addr.to_string(),
            "resp": resp_addr.map(|addr| addr.to_string()),
            "ojs": ojs_addr.map(|addr| addr.to_string()),
            "console": console_addr.map(|addr| addr.to_string()),
        });
        background.extend(core.spawn_background(args, listeners)?);
        tracing::info!(%s3_addr, %admin_addr, ?resp_addr, ?ojs_addr, "pgvs3 gateway ready");
        Ok(RunningGateway {
            s3_addr,
            admin_addr,
            resp_addr,
            ojs_addr,
            s3_plaintext_addr,
            store: core.store,
            shutdown: core.shutdown,
            servers,
            background,
            database: core.database,
        })
    }

    /// Stops accepting, drains in-flight requests, then stops the embedded PostgreSQL if any.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.trigger();
        for server in self.servers {
            let _ = server.await;
        }
        for task in self.background {
            task.abort();
        }
        self.database.close().await
    }
}

/// What the features are started on: the database (supervised) and its store, the cache tier,
/// what every listener shares, the listeners' TLS and the trigger of their shutdown.
struct Core {
    database: Database,
    health: DatabaseHealth,
    /// The admin port's /readyz and the OJS health routes ask it, off the request pool.
    readiness: crate::readiness::Readiness,
    store: Store,
    cache: CacheTier,
    lag: ReplicaLag,
    shared: Shared,
    tls: crate::tls::ListenerTls,
    shutdown: ShutdownTrigger,
}

impl Core {
    async fn open(args: &ServeArgs) -> anyhow::Result<Core> {
        let master_key = master_key(&args.database)?;
        // Before anything starts: a certificate that does not load stops the start.
        let tls = crate::tls::ListenerTls::from_args(&args.tls)?;
        let mut database = Database::open(&args.database).await?;
        let metrics = Metrics::new();
        // An embedded server is supervised from here on, so one lost during the rest of the
        // start is restarted too.
        let health = database.watch(
            args.supervision.pg_probe_timeout,
            args.supervision.pg_restart_attempts,
            &metrics,
        );
        let (store, standby) = open_store(args, &database, master_key).await?;
        store.register_metrics(&metrics);

        let open_files = http_server::raise_open_file_limit();
        warn_if_descriptors_short(args, open_files);
        let (shutdown, signal) = http_server::shutdown_channel();
        let buffers = crate::admission::BufferBudget::new(args.buffer_budget, &metrics);
        let cache = CacheTier::new(store.clone(), args.cache.settings()?, &metrics, buffers.clone());
        let lag = ReplicaLag::new(
            standby,
            (!args.max_replication_lag.is_zero()).then_some(args.max_replication_lag),
        );
        let shared = Shared {
            metrics,
            lag: lag.clone(),
            buffers,
            shutdown: signal,
            drain: args.shutdown_timeout,
            http: args.http.clone(),
            admission: args.admission_defaults(),
        };
        Ok(Core {
            readiness: crate::readiness::Readiness::new(&database, health.clone()),
            database,
            health,
            store,
            cache,
            lag,
            shared,
            tls,
            shutdown,
        })
    }

    /// How the LISTEN connections (the catalog's, RESP's) reach the database and make sure it
    /// still answers them: by the health probe's interval and timeout.
    fn dedicated(&self, args: &ServeArgs) -> Dedicated {
        Dedicated {
            config: self.database.config.clone(),
            connections: self.database.connections.clone(),
            liveness: Liveness {
                every: args.supervision.pg_probe_interval,
                timeout: args.supervision.pg_probe_timeout,
            },
        }
    }

    /// /healthz, /readyz and /metrics.
    fn admin_service(&self, args: &ServeArgs) -> AdminService {
        AdminService::new(
            &self.database,
            self.shared.metrics.clone(),
            args.require_role,
            self.lag.clone(),
            self.health.clone(),
            self.readiness.clone(),
        )
    }

    /// The loops beside the listeners: database probe, catalog refresh and notifications, the
    /// cache's uploader, lag sampler, heartbeat (naming `listeners`), maintenance and the
    /// webhook outbox's deliverer (OJS webhooks, bucket notification webhook targets).
    fn spawn_background(&self, args: &ServeArgs, listeners: serde_json::Value) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let (pool, metrics, database) = (&self.database.pool, &self.shared.metrics, &self.database);
        let catalog = self.store.catalog();
        let deliverer =
            crate::webhooks::spawn_deliverer(pool.clone(), args.webhooks.delivery(), self.shared.shutdown.clone())?;
        Ok(vec![
            self.health
                .spawn_probe(database.config.clone(), args.supervision.pg_probe_interval),
            catalog.spawn_refresher(args.catalog_poll),
            // On a standby it waits for a promotion.
            catalog.spawn_listener(self.dedicated(args)),
            crate::cache::spawn_uploader(self.cache.clone(), pool.clone()),
            self.lag
                .spawn_sampler(pool.clone(), metrics.clone(), Duration::from_millis(500)),
            crate::heartbeat::spawn(
                pool.clone(),
                metrics.clone(),
                self.lag.clone(),
                crate::heartbeat::Beat {
                    host: crate::heartbeat::host_name(),
                    listeners,
                },
            ),
            crate::maintenance::spawn_leader_loop(
                self.store.clone(),
                pool.clone(),
                metrics.clone(),
                args.body_grace,
                args.maintenance_interval,
                args.s3.multipart_max_age,
                args.ojs.ojs_job_retention,
            ),
            deliverer,
        ])
    }
}

/// The OJS bearer token: `--ojs-token`, or the root key's credentials when asked to be, with
/// the task that keeps the latter what the catalog holds (a rotated root secret replaces it).
async fn ojs_token(args: &ServeArgs, store: &Store) -> anyhow::Result<(Option<OperatorToken>, Option<JoinHandle<()>>)> {
    let token = args.ojs.token();
    if args.ojs.ojs_addr.0.is_none() || !args.ojs.root_key_is_token() {
        return Ok((token, None));
    }
    let Some(root) = token.clone() else {
        return Ok((token, None));
    };
    let catalog = store.catalog().clone();
    let (access_key, secret) = root_credentials(&catalog).await?;
    root.set(Some(pgvs3_ojs::args::root_key_token(&access_key, &secret)));
    let mut reloads = catalog.watch_version();
    let follower = tokio::spawn(async move {
        // Each reload of the catalog (the listener's, on every committed change) may carry a
        // new root secret; a change this gateway made itself dropped the key from the cache,
        // which `access_key` reads back from the database.
        while reloads.changed().await.is_ok() {
            match catalog.access_key(&access_key).await {
                Ok(key) => root.set(key.map(|key| pgvs3_ojs::args::root_key_token(&key.access_key, &key.secret))),
                Err(err) => tracing::warn!(%err, "could not read the root key for the OJS token; keeping the last one"),
            }
        }
    });
    Ok((token, Some(follower)))
}

/// The web console: a client of the listeners above (docs/console.md), and of this gateway
/// in-process for its admin pages.
async fn start_console(
    args: &ServeArgs,
    core: &Core,
    s3: &Started,
    resp: Option<&Started>,
    ojs: Option<&Started>,
    ojs_token: Option<OperatorToken>,
    admin_addr: SocketAddr,
) -> anyhow::Result<Option<pgvs3_console::Console>> {
    let tls = &core.tls;
    if args.console.console_addr.is_some() && args.tls.tls_cert.is_some() && tls.console.is_none() {
        // Its session cookie and sign-in form would cross the network in the clear.
        tracing::warn!(
            "the console speaks plaintext HTTP although --tls-cert is given: it follows the S3 listener, which --tls-plaintext s3 leaves plaintext; put TLS in front of it"
        );
    }
    if args.console.console_addr.is_some() && tls.s3.is_some() && s3.plaintext_addr.is_none() {
        tracing::warn!(
            "the console signs in through the S3 listener over TLS on loopback, which fails unless its certificate names 127.0.0.1 and the system's roots trust it: give --s3-plaintext-addr 127.0.0.1:PORT"
        );
    }
    let mut gateway =
        pgvs3_console::Gateway::loopback(s3.addr, s3.plaintext_addr, args.s3.region.clone(), tls.console.clone());
    if let Some(resp) = resp {
        gateway = gateway.with_resp(resp.addr, resp.plaintext_addr, tls.resp.is_some());
    }
    if let Some(ojs) = ojs {
        let token = ojs_token.map(|token| Arc::new(move || token.get()) as pgvs3_console::Token);
        gateway = gateway.with_ojs(ojs.addr, ojs.plaintext_addr, tls.ojs.is_some(), token);
    }
    let gateway = gateway
        .with_admin(Arc::new(ConsoleAdmin {
            catalog: core.store.catalog().clone(),
            pool: core.database.pool.clone(),
        }))
        .with_admin_listener(admin_addr, tls.admin.is_some());
    let mut stop = core.shared.shutdown.clone();
    pgvs3_console::start(&args.console, gateway, async move { stop.wait().await }).await
}

/// Brings the database's layout and catalog up to date (a standby waits for its primary's) and
/// opens the store; says whether the database is a standby.
async fn open_store(args: &ServeArgs, database: &Database, master_key: MasterKey) -> anyhow::Result<(Store, bool)> {
    let pool = database.pool.clone();
    let standby = crate::pg::is_standby(&pool).await?;
    if standby {
        wait_for_layout(&pool).await?;
    } else {
        migrate::migrate(&pool).await?;
    }
    let catalog = Catalog::load(pool.clone(), master_key).await?;
    if standby {
        wait_for_root_key(&catalog).await?;
    } else {
        ensure_root_key(&catalog, args).await?;
    }
    let store = Store::new(pool, catalog).cancelling_with(database.connections.clone());
    Ok((store, standby))
}

/// Binds `--admin-addr` and serves /healthz, /readyz and /metrics on its own connection budget.
async fn start_admin(
    args: &ServeArgs,
    admin: AdminService,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: &Shared,
) -> anyhow::Result<Started> {
    let listen = Listen {
        addr: args.admin_addr,
        plaintext: None,
        tls,
    };
    let listeners = listen.bind("admin", "--admin-addr", "").await?;
    let mut started = Started::bound(&listeners.0, None)?;
    let settings = http_server::Listener {
        name: "admin",
        limits: args.http.limits(args.admin_max_connections),
        busy_response: http_server::busy_response("text/plain", "too many connections\n"),
        tls: listen.tls,
    };
    started.servers = spawn_http(listeners, admin, settings, shared);
    Ok(started)
}

/// What the web console asks of this gateway in-process for its admin (root-key) pages.
pub struct ConsoleAdmin {
    pub catalog: Arc<Catalog>,
    pub pool: deadpool_postgres::Pool,
}

impl pgvs3_console::Admin for ConsoleAdmin {
    fn is_root(&self, access_key: String) -> pgvs3_console::BoxFuture<'_, bool> {
        Box::pin(async move { matches!(self.catalog.access_key(&access_key).await, Ok(Some(key)) if key.is_root) })
    }

    fn list_keys(&self) -> pgvs3_console::BoxFuture<'_, Result<Vec<pgvs3_console::KeyInfo>, String>> {
        Box::pin(async move {
            let keys = self.catalog.list_access_keys().await.map_err(|err| err.to_string())?;
            let disabled = self
                .catalog
                .disabled_access_keys()
                .await
                .map_err(|err| err.to_string())?;
            let root = crate::store::Principal {
                access_key: String::new(),
                is_root: true,
                read_only: false,
            };
            let mut owners: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
            for bucket in self.catalog.list_buckets(&root).await.map_err(|err| err.to_string())? {
                if let Ok(info) = self.catalog.bucket(&bucket.name).await
                    && let Some(owner) = &info.owner
                {
                    owners.entry(owner.clone()).or_default().push(bucket.name);
                }
            }
            Ok(keys
                .into_iter()
                .map(|key| pgvs3_console::KeyInfo {
                    buckets: owners.remove(&key.access_key).unwrap_or_default(),
                    policy: key.policy_text,
                    disabled: disabled.contains(&key.access_key),
                    access_key: key.access_key,
                    is_root: key.is_root,
                    read_only: key.read_only,
                    description: key.description,
                    created: key.created_at,
                })
                .collect())
        })
    }

    fn create_key(&self, key: pgvs3_console::NewKey) -> pgvs3_console::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let key = NewAccessKey {
                access_key: key.access_key,
                secret: key.secret,
                is_root: false,
                read_only: key.read_only,
                description: key.description,
            };
            key.check()?;
            // put_access_key updates a key that exists (a disabled one too): refuse rather than
            // replace its secret.
            if self
                .catalog
                .access_key_exists(&key.access_key)
                .await
                .map_err(|err| err.to_string())?
            {
                return Err(format!("access key {} exists already", key.access_key));
            }
            self.catalog.put_access_key(&key).await.map_err(|err| err.to_string())
        })
    }

    fn delete_key(&self, access_key: String) -> pgvs3_console::BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            self.catalog
                .delete_access_key(&access_key)
                .await
                .map_err(|err| err.to_string())
        })
    }

    fn set_key_disabled(
        &self,
        access_key: String,
        disabled: bool,
    ) -> pgvs3_console::BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            self.catalog
                .set_access_key_disabled(&access_key, disabled)
                .await
                .map_err(|err| err.to_string())
        })
    }

    fn bucket_quota(
        &self,
        bucket: String,
    ) -> pgvs3_console::BoxFuture<'_, Result<Option<pgvs3_console::Quota>, String>> {
        Box::pin(async move {
            let quota = self
                .catalog
                .bucket_quota(&bucket)
                .await
                .map_err(|err| err.to_string())?;
            Ok(quota.map(|quota| pgvs3_console::Quota {
                max_bytes: quota.max_bytes,
                max_objects: quota.max_objects,
                used_bytes: quota.used_bytes,
                used_objects: quota.used_objects,
            }))
        })
    }

    fn set_bucket_quota(
        &self,
        bucket: String,
        max_bytes: Option<i64>,
        max_objects: Option<i64>,
    ) -> pgvs3_console::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.catalog
                .set_bucket_quota(&bucket, max_bytes, max_objects)
                .await
                .map_err(|err| err.to_string())
        })
    }

    fn standbys(&self) -> pgvs3_console::BoxFuture<'_, Result<Vec<pgvs3_console::Standby>, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            let rows = client
                .query(
                    "SELECT coalesce(application_name, '') AS name, coalesce(host(client_addr), '') AS address,
                            coalesce(state, '') AS state, coalesce(sync_state, '') AS sync_state,
                            extract(epoch FROM replay_lag)::float8 AS replay_lag_seconds
                       FROM pg_stat_replication ORDER BY application_name LIMIT 100",
                    &[],
                )
                .await
                .map_err(|err| err.to_string())?;
            Ok(rows
                .iter()
                .map(|row| pgvs3_console::Standby {
                    name: row.get("name"),
                    address: row.get("address"),
                    state: row.get("state"),
                    sync_state: row.get("sync_state"),
                    replay_lag_seconds: row.get("replay_lag_seconds"),
                })
                .collect())
        })
    }

    fn database_size(&self) -> pgvs3_console::BoxFuture<'_, Result<i64, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            let row = client
                .query_one("SELECT pg_database_size(current_database()) AS bytes", &[])
                .await
                .map_err(|err| err.to_string())?;
            Ok(row.get("bytes"))
        })
    }

    fn set_key_policy(
        &self,
        access_key: String,
        policy: Option<String>,
    ) -> pgvs3_console::BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            self.catalog
                .set_key_policy(&access_key, policy.as_deref())
                .await
                .map_err(|err| err.to_string())
        })
    }

    fn gateways(&self) -> pgvs3_console::BoxFuture<'_, Result<Vec<pgvs3_console::GatewayBeat>, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            let rows = client
                .query(
                    "SELECT id, host, version, started, listeners, stats,
                            extract(epoch FROM clock_timestamp() - beat)::float8 AS seconds_since_beat,
                            (SELECT coalesce(jsonb_agg(sample || jsonb_build_object('ago',
                                        extract(epoch FROM clock_timestamp()) - (sample ->> 'at')::float8) ORDER BY n), '[]')
                               FROM jsonb_array_elements(history) WITH ORDINALITY AS ring(sample, n)
                              WHERE jsonb_typeof(sample -> 'at') = 'number') AS history
                       FROM pgvs3.gateways ORDER BY started, id LIMIT 100",
                    &[],
                )
                .await
                .map_err(|err| err.to_string())?;
            Ok(rows
                .iter()
                .map(|row| pgvs3_console::GatewayBeat {
                    id: row.get("id"),
                    host: row.get("host"),
                    version: row.get("version"),
                    started: row.get("started"),
                    listeners: row.get("listeners"),
                    stats: row.get("stats"),
                    seconds_since_beat: row.get("seconds_since_beat"),
                    history: row.get("history"),
                })
                .collect())
        })
    }

    fn wal_position(&self) -> pgvs3_console::BoxFuture<'_, Result<pgvs3_console::WalPosition, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            // A standby's position is what it has replayed; a primary's, what it has written.
            let row = client
                .query_one(
                    "SELECT lsn::text AS lsn, (lsn - '0/0')::float8 AS bytes
                       FROM (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                                         ELSE pg_current_wal_lsn() END AS lsn) AS position",
                    &[],
                )
                .await
                .map_err(|err| err.to_string())?;
            Ok(pgvs3_console::WalPosition {
                lsn: row.get::<_, Option<String>>("lsn").unwrap_or_default(),
                bytes: row.get::<_, Option<f64>>("bytes").unwrap_or(0.0),
            })
        })
    }

    fn jobs_in_state(
        &self,
        page: pgvs3_console::JobsPage,
    ) -> pgvs3_console::BoxFuture<'_, Result<Vec<pgvs3_console::JobRow>, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            // A backward range of jobs_listing (queue, tenant, state, seq): no sort, no OFFSET.
            let rows = client
                .query(
                    "SELECT seq, id, type, attempt, max_attempts, created_at, run_at,
                            coalesce(error, errors -> -1, 'null') AS error
                       FROM ojs.jobs
                      WHERE queue = $1 AND tenant = $2 AND state = $3 AND seq < $4
                      ORDER BY seq DESC LIMIT $5",
                    &[
                        &page.queue,
                        &page.tenant,
                        &page.state,
                        &page.before.unwrap_or(i64::MAX),
                        &page.limit,
                    ],
                )
                .await
                .map_err(|err| err.to_string())?;
            Ok(rows
                .iter()
                .map(|row| pgvs3_console::JobRow {
                    seq: row.get("seq"),
                    id: row.get("id"),
                    job_type: row.get("type"),
                    attempt: row.get("attempt"),
                    max_attempts: row.get("max_attempts"),
                    created: row.get("created_at"),
                    run_at: row.get("run_at"),
                    error: row.get("error"),
                })
                .collect())
        })
    }

    fn queue_rates(
        &self,
        tenant: String,
    ) -> pgvs3_console::BoxFuture<'_, Result<Vec<pgvs3_console::QueueRates>, String>> {
        Box::pin(async move {
            let client = checkout(&self.pool).await.map_err(|err| err.to_string())?;
            // Events carry no tenant: their jobs do (a job deleted within the minute is not
            // counted).
            let rows = client
                .query(
                    "SELECT e.queue,
                            count(*) FILTER (WHERE e.type = 'job.enqueued') AS enqueued,
                            count(*) FILTER (WHERE e.type = 'job.completed') AS completed,
                            count(*) FILTER (WHERE e.type = 'job.failed') AS failed
                       FROM ojs.events e JOIN ojs.jobs j ON j.id = e.job_id
                      WHERE e.time > now() - interval '1 minute'
                        AND e.type IN ('job.enqueued', 'job.completed', 'job.failed')
                        AND j.tenant = $1 AND e.queue IS NOT NULL
                      GROUP BY e.queue ORDER BY e.queue LIMIT 1000",
                    &[&tenant],
                )
                .await
                .map_err(|err| err.to_string())?;
            Ok(rows
                .iter()
                .map(|row| pgvs3_console::QueueRates {
                    queue: row.get("queue"),
                    enqueued: row.get("enqueued"),
                    completed: row.get("completed"),
                    failed: row.get("failed"),
                })
                .collect())
        })
    }
}

/// Every connection the gateway may hold at once is a descriptor: say so at start when the
/// caps and the pool add up to more than the process may open, instead of failing later with
/// `Too many open files`.
fn warn_if_descriptors_short(args: &ServeArgs, open_files: u64) {
    let resp = if args.resp.resp_addr.0.is_some() {
        args.resp.resp_max_clients
    } else {
        0
    };
    let ojs = if args.ojs.ojs_addr.0.is_some() {
        args.ojs.ojs_max_connections
    } else {
        0
    };
    // Listeners, PostgreSQL connections, logs, origin clients: a margin for the rest.
    let wanted = args.s3.s3_max_connections + args.admin_max_connections + resp + ojs + args.database.pool_size + 256;
    if wanted as u64 > open_files {
        tracing::warn!(
            open_files,
            wanted,
            "the connection caps add up to more than this process may open (RLIMIT_NOFILE): lower \
             --s3-max-connections, --ojs-max-connections or --resp-max-clients, or raise the limit"
        );
    }
}

/// Serves until SIGINT or SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    crate::ojs::check_limits(args.ojs.ojs_max_args_bytes, args.ojs.ojs_max_body_bytes)?;
    check_root_key(&args)?;
    // Handlers first: a signal that arrives once "ready" is printed (or while starting) must
    // stop the gateway gracefully, not by the signal's default action.
    let signals = Signals::install()?;
    let gateway = RunningGateway::start(&args).await?;
    // Every listener is bound: only now can a generated secret be shown without the risk of a
    // failed start having used up its one showing.
    show_generated_root_key(gateway.store.catalog()).await?;
    // Before the S3 line, which scripts (and the CLI tests) read as "ready" and then may stop
    // reading stdout.
    let tls = |listener| args.tls.tls_cert.is_some() && !args.tls.tls_plaintext.contains(&listener);
    let http = |listener| if tls(listener) { "https" } else { "http" };
    if let Some(resp_addr) = gateway.resp_addr {
        let scheme = if tls(TlsListener::Resp) { "rediss" } else { "redis" };
        println!("pgvs3 RESP endpoint: {scheme}://{resp_addr}");
    }
    // One line: whoever reads it may close the pipe right after.
    let ojs = gateway
        .ojs_addr
        .map(|addr| format!("  OJS: {}://{addr}/ojs/v1", http(TlsListener::Ojs)))
        .unwrap_or_default();
    println!(
        "pgvs3 S3 endpoint: {}://{}  (metrics: {}://{}/metrics){ojs}",
        http(TlsListener::S3),
        gateway.s3_addr,
        http(TlsListener::Admin),
        gateway.admin_addr
    );

    signals.wait().await;
    tracing::info!("shutting down");
    gateway.shutdown().await
}

/// SIGTERM and SIGINT, caught from the moment they are installed.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// A standby cannot migrate; it waits until the primary's migration has replayed.
async fn wait_for_layout(pool: &deadpool_postgres::Pool) -> anyhow::Result<()> {
    loop {
        let version = migrate::current_version(pool).await?;
        anyhow::ensure!(
            version <= migrate::LAYOUT_VERSION,
            "the database has layout v{version}, newer than this gateway's v{}",
            migrate::LAYOUT_VERSION
        );
        if version == migrate::LAYOUT_VERSION {
            return Ok(());
        }
        tracing::info!(version, "standby: waiting for the primary to migrate the layout");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// A standby cannot write the root key either: the primary creates it right after migrating,
/// so a standby started with it may see the layout replayed before the key is.
async fn wait_for_root_key(catalog: &Catalog) -> anyhow::Result<()> {
    while catalog.root_key().await?.is_none() {
        tracing::info!("standby: waiting for the primary to create the root access key");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// The description of a generated root key whose secret has not been shown yet: it is shown
/// (and the description becomes [`ROOT_DESCRIPTION`]) by the first `serve` that gets ready.
const ROOT_NOT_SHOWN: &str = "root (secret not shown yet)";
const ROOT_DESCRIPTION: &str = "root";

/// A root key given by flag or environment is checked before anything starts: the catalog
/// would refuse it only once the cluster is initialised and migrated.
fn check_root_key(args: &ServeArgs) -> anyhow::Result<()> {
    let checks = [
        args.root_access_key.as_deref().map(NewAccessKey::check_access_key),
        args.root_secret_key.as_deref().map(NewAccessKey::check_secret),
    ];
    for check in checks.into_iter().flatten() {
        check.map_err(|why| {
            anyhow::anyhow!(
                "{why} (from --root-access-key/PGVS3_ROOT_ACCESS_KEY or --root-secret-key/PGVS3_ROOT_SECRET_KEY)"
            )
        })?;
    }
    Ok(())
}

/// Creates the root key on first start so the endpoint is usable at once; it is kept (its
/// secret encrypted) in the catalog. A generated secret is not printed here, amid a start that
/// may still fail: the key is marked not shown, for [`show_generated_root_key`].
async fn ensure_root_key(catalog: &Catalog, args: &ServeArgs) -> anyhow::Result<()> {
    if catalog.root_key().await?.is_some() {
        return Ok(());
    }
    let generated = args.root_access_key.is_none() || args.root_secret_key.is_none();
    let key = NewAccessKey {
        access_key: args.root_access_key.clone().unwrap_or_else(generate_access_key),
        secret: args.root_secret_key.clone().unwrap_or_else(|| random_token(30)),
        is_root: true,
        read_only: false,
        description: if generated { ROOT_NOT_SHOWN } else { ROOT_DESCRIPTION }.into(),
    };
    match catalog.put_access_key(&key).await {
        Ok(()) => {
            tracing::info!(access_key = %key.access_key, generated, "created the root access key");
            Ok(())
        }
        // Another gateway created the root key at the same moment.
        Err(_) if catalog.root_key().await?.is_some() => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The root access key and its secret (the RESP and OJS credentials by default).
async fn root_credentials(catalog: &Catalog) -> anyhow::Result<(String, String)> {
    let access_key = catalog
        .root_key()
        .await?
        .ok_or_else(|| anyhow::anyhow!("no root access key"))?;
    let key = catalog
        .access_key(&access_key)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the root access key {access_key} is missing"))?;
    Ok((key.access_key.clone(), key.secret.clone()))
}

/// Prints a generated root key whose secret no ready gateway has shown yet (the first start,
/// or a later one after the first failed), framed apart from the log lines, then marks it shown.
async fn show_generated_root_key(catalog: &Catalog) -> anyhow::Result<()> {
    let Some(access_key) = catalog.root_key().await? else {
        return Ok(());
    };
    let Some(root) = catalog.access_key(&access_key).await? else {
        return Ok(());
    };
    if root.description != ROOT_NOT_SHOWN {
        return Ok(());
    }
    let rule = "=".repeat(72);
    println!("{rule}");
    println!("pgvs3 created the root access key. Its secret is shown this once; keep it:");
    println!("  AWS_ACCESS_KEY_ID={}", root.access_key);
    println!("  AWS_SECRET_ACCESS_KEY={}", root.secret);
    println!("It is also what RESP and OJS clients present (unless --resp-auth none / --ojs-auth none):");
    println!("  RESP: AUTH {} {}", root.access_key, root.secret);
    println!("  OJS:  Authorization: Bearer {}:{}", root.access_key, root.secret);
    println!("More keys: pgvs3 admin key create (see `pgvs3 admin key --help`).");
    println!("{rule}");
    // Marked after printing: a crash in between shows the key again rather than never.
    catalog
        .put_access_key(&NewAccessKey {
            access_key: root.access_key.clone(),
            secret: root.secret.clone(),
            is_root: true,
            read_only: root.read_only,
            description: ROOT_DESCRIPTION.into(),
        })
        .await?;
    Ok(())
}

/// An access key id in AWS's shape: 20 upper-case letters and digits.
pub fn generate_access_key() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut rng = rand::rng();
    let tail: String = (0..15)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("PGVS3{tail}")
}
