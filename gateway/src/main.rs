//! The `pgvs3` command line.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use pgvs3_gateway::cache::CacheTier;
use pgvs3_gateway::config::{DatabaseArgs, LogFormat, ServeArgs, parse_bytes, parse_duration};
use pgvs3_gateway::master_key::random_token;
use pgvs3_gateway::pg::{Database, migrate};
use pgvs3_gateway::serve::{self, generate_access_key};
use pgvs3_gateway::store::{CacheMode, Catalog, NewAccessKey, Origin, Store};
use pgvs3_gateway::telemetry;

/// A small request makes dozens of short-lived allocations on whichever worker thread runs it;
/// mimalloc's thread-local free lists serve them for fewer instructions than glibc's arenas
/// (docs/benchmarks.md, "Where a small GET's CPU goes"). Built without transparent huge pages
/// (`no_thp`: mimalloc does not ask for them): a page it purged and took back was faulted in as
/// 2 MiB zeroed by the kernel, about one a BullMQ job, and the resident set was twice as large
/// (docs/benchmarks.md, "Scripts: an interpreter kept for the next script").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "pgvs3", version, about = "S3 on PostgreSQL")]
struct Cli {
    /// Log format.
    #[arg(long, env = "PGVS3_LOG_FORMAT", value_enum, default_value_t, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (with an embedded PostgreSQL unless --database-url is given).
    Serve(Box<ServeArgs>),
    /// Create or upgrade the storage layout, then exit.
    Migrate(DatabaseArgs),
    /// Manage access keys and run maintenance by hand. The database flags (--data-dir,
    /// --database-url...) go before or after the subcommand.
    Admin {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// DuckLake lakes whose catalog lives in pgvs3's PostgreSQL and whose files live in a bucket.
    Lake {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(subcommand)]
        command: LakeCommand,
    },
}

#[derive(Subcommand)]
enum LakeCommand {
    /// Print the DuckDB statements (S3 secret and ATTACH) that open a DuckLake with its catalog in
    /// this database and its data files in BUCKET, as the given access key (default: the root
    /// key). Run it where `pgvs3 serve` runs: the statements name the database it serves.
    AttachString {
        #[arg(long)]
        bucket: String,
        #[arg(long)]
        access_key: Option<String>,
        /// The gateway's S3 endpoint as DuckDB reaches it.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        endpoint: String,
        #[arg(long, default_value = "us-east-1")]
        region: String,
        /// The name DuckDB attaches the lake as.
        #[arg(long, default_value = "lake")]
        alias: String,
        /// The PostgreSQL schema of the lake's catalog tables (default `ducklake_<bucket>`, `-`
        /// and `.` as `_`): each lake its own, so lakes in several buckets share the database.
        #[arg(long)]
        metadata_schema: Option<String>,
        /// Attach read-only: for a reader on a standby (its database and its gateway).
        #[arg(long)]
        read_only: bool,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Access keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Cache buckets in front of remote S3 origins.
    #[command(subcommand)]
    Origin(OriginCommand),
    /// A bucket's quota and usage: shown, set (either limit or both) or removed.
    Quota {
        #[arg(long)]
        bucket: String,
        /// Most bytes the bucket's objects may hold (e.g. 10GiB).
        #[arg(long, value_parser = parse_bytes)]
        max_bytes: Option<u64>,
        /// Most objects the bucket may hold.
        #[arg(long)]
        max_objects: Option<u64>,
        /// Remove the bucket's quota.
        #[arg(long, conflicts_with_all = ["max_bytes", "max_objects"])]
        remove: bool,
    },
    /// OpenID issuers whose web identity tokens STS accepts (e.g. a Kubernetes cluster's
    /// service-account issuer), with their key sets.
    #[command(subcommand)]
    OidcIssuer(OidcIssuerCommand),
    /// STS roles: who may assume them with a web identity token, and what they grant.
    #[command(subcommand)]
    Role(RoleCommand),
    /// Run the maintenance reaper once and report what it removed.
    Maintenance {
        #[arg(long, required = true)]
        run_once: bool,
        /// Reap bodies retired longer ago than this.
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        grace: Duration,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create (or update) an access key; it owns the buckets it creates.
    Create {
        #[arg(long)]
        access_key: Option<String>,
        #[arg(long)]
        secret_key: Option<String>,
        /// The key may read but not write.
        #[arg(long)]
        read_only: bool,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List access keys (secrets are not shown).
    List,
    /// Delete an access key; its buckets pass to the root key.
    Delete { access_key: String },
    /// Disable an access key: every gateway refuses it at once (S3, RESP, the console), its
    /// buckets, secret and policy kept. Not for the root key.
    Disable { access_key: String },
    /// Enable a disabled access key again.
    Enable { access_key: String },
    /// Show, attach (`--file`) or detach (`--clear`) a key's own policy: an IAM identity policy
    /// (no Principal; resources in any bucket) that narrows what the key may do, its own buckets
    /// included — e.g. only reads, or only one prefix. Not for the root key.
    Policy {
        access_key: String,
        /// The policy document (JSON) to attach.
        #[arg(long, conflicts_with = "clear")]
        file: Option<std::path::PathBuf>,
        /// Detach the key's policy.
        #[arg(long)]
        clear: bool,
    },
}

#[derive(Subcommand)]
enum OidcIssuerCommand {
    /// Register ISSUER (its tokens' `iss`) with its JSON Web Key Set, or replace the set (a key
    /// rotation: tokens of keys no longer in the set are refused). For a Kubernetes cluster:
    /// `kubectl get --raw /openid/v1/jwks > jwks.json` and the `iss` of
    /// `kubectl get --raw /.well-known/openid-configuration`.
    Put {
        #[arg(long)]
        issuer: String,
        #[arg(long)]
        jwks_file: std::path::PathBuf,
    },
    /// Forget ISSUER: its tokens are refused from then on.
    Delete {
        #[arg(long)]
        issuer: String,
    },
}

#[derive(Subcommand)]
enum RoleCommand {
    /// Create or replace role NAME (its ARN: arn:aws:iam::000000000000:role/NAME).
    Create {
        name: String,
        /// The issuer whose tokens may assume the role (registered with `oidc-issuer put`).
        #[arg(long)]
        issuer: String,
        /// The audience the tokens must carry.
        #[arg(long, default_value = pgvs3_catalog::sts::DEFAULT_AUDIENCE)]
        audience: String,
        /// A subject that may assume the role, e.g. system:serviceaccount:NS:NAME, or
        /// system:serviceaccount:NS:* for every ServiceAccount of NS. Repeatable.
        #[arg(long = "subject", required = true)]
        subjects: Vec<String>,
        /// The role's IAM identity policy (JSON): what its sessions may do;
        /// ${aws:username} is the ServiceAccount as NAMESPACE/NAME.
        #[arg(long)]
        policy_file: std::path::PathBuf,
        /// The longest session the role hands out, in seconds (900 to 43200).
        #[arg(long, default_value_t = 3600)]
        max_session_seconds: i32,
    },
    /// Delete role NAME; its live sessions end on every gateway.
    Delete { name: String },
    /// List roles with their trust and live sessions.
    List,
}

#[derive(Subcommand)]
enum OriginCommand {
    /// Create or update the cache bucket BUCKET in front of an origin bucket. Checks that the
    /// origin answers with these credentials first.
    Put(Box<OriginPut>),
    /// List cache buckets and their origins (secrets are not shown).
    List,
    /// Drop a cache bucket and what it cached (the origin is untouched).
    Delete {
        #[arg(long)]
        bucket: String,
        /// Drop even bodies still waiting for their upload (they are lost).
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::Args)]
struct OriginPut {
    /// The cache bucket (created when absent).
    #[arg(long)]
    bucket: String,
    /// The origin's S3 endpoint, e.g. https://s3.eu-west-1.amazonaws.com.
    #[arg(long)]
    endpoint: String,
    #[arg(long)]
    origin_bucket: String,
    #[arg(long, default_value = "us-east-1")]
    region: String,
    #[arg(long, env = "PGVS3_ORIGIN_ACCESS_KEY")]
    access_key: String,
    #[arg(long, env = "PGVS3_ORIGIN_SECRET_KEY", hide_env_values = true)]
    secret_key: String,
    #[arg(long, default_value = "write-back")]
    mode: CacheMode,
    /// Address the origin bucket virtual-host style (bucket.endpoint) instead of by path.
    #[arg(long)]
    virtual_host: bool,
    /// How long a cached entry is served without asking the origin.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    ttl: Duration,
    /// How long a 404 from the origin is remembered (`0s`: not at all).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    negative_ttl: Duration,
    /// Fills of this cache running at once in each gateway.
    #[arg(long, default_value_t = Origin::DEFAULT_FILL_CONCURRENCY)]
    fill_concurrency: u32,
    /// Most bytes of cached bodies; least recently used entries are evicted beyond it.
    #[arg(long, value_parser = parse_bytes)]
    size_limit: Option<u64>,
    /// In write-back mode, bodies this large or larger are acknowledged before their upload.
    #[arg(long, default_value = "8MiB", value_parser = parse_bytes)]
    write_back_threshold: u64,
    /// Range reads of objects not cached whole fill aligned chunks of this size (64KiB..64MiB).
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes)]
    range_chunk_size: u64,
    /// Save without checking that the origin answers.
    #[arg(long)]
    no_verify: bool,
    /// A PEM bundle of CA certificates to verify the origin's TLS certificate with (besides
    /// the system's roots), for this check; gateways take theirs from `serve --origin-ca-file`.
    #[arg(long, env = "PGVS3_ORIGIN_CA_FILE", value_delimiter = ',')]
    origin_ca_file: Vec<std::path::PathBuf>,
    /// Lets the origin be at a loopback or link-local address for this check, as
    /// `serve --origin-allow-local-addresses` lets gateways reach it.
    #[arg(long, env = "PGVS3_ORIGIN_ALLOW_LOCAL_ADDRESSES", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    origin_allow_local_addresses: bool,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let telemetry = telemetry::init(cli.log_format);
    let outcome = run(cli.command).await;
    telemetry.shutdown().await;
    if let Err(err) = outcome {
        eprintln!("pgvs3: {err:#}");
        std::process::exit(1);
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Migrate(args) => {
            let database = Database::open(&args).await?;
            let version = migrate::migrate(&database.pool).await?;
            println!("layout v{version}");
            database.close().await
        }
        Command::Admin { database, command } => {
            let (db, catalog) = open_catalog(&database).await?;
            let result = admin(&catalog, db.pool.clone(), command).await;
            db.close().await?;
            result
        }
        Command::Lake { database, command } => {
            let (db, catalog) = open_catalog(&database).await?;
            // A URL's every setting (TLS checks, client certificate, channel binding) goes into
            // the attach string, so DuckDB connects as carefully as the gateway does.
            let conninfo = match &database.database_url {
                Some(url) => pgvs3_pgtls::libpq_settings(url).map(|settings| {
                    let pairs: Vec<(&str, &str)> = settings
                        .iter()
                        .map(|(name, value)| (name.as_str(), value.as_str()))
                        .collect();
                    pgvs3_catalog::lake::conninfo_of(&pairs)
                }),
                // The embedded server over loopback TCP: its port is kept across restarts,
                // and its socket directory is private to the server's account.
                None => pgvs3_gateway::pg::embedded::tcp_config(&database.data_dir, db.config.get_ports()[0])
                    .map(|config| pgvs3_catalog::lake::conninfo(&config)),
            };
            let result = match conninfo {
                Ok(conninfo) => lake(&catalog, &conninfo, command).await,
                Err(err) => Err(err),
            };
            db.close().await?;
            result
        }
    }
}

async fn lake(catalog: &Catalog, conninfo: &str, command: LakeCommand) -> anyhow::Result<()> {
    let LakeCommand::AttachString {
        bucket,
        access_key,
        endpoint,
        region,
        alias,
        metadata_schema,
        read_only,
    } = command;
    anyhow::ensure!(
        pgvs3_catalog::lake::valid_alias(&alias),
        "--alias is a plain SQL name (letters, digits, _): {alias:?}"
    );
    let access_key = match access_key {
        Some(key) => key,
        None => catalog.root_key().await?.context("the catalog has no root key")?,
    };
    let key = catalog
        .access_key(&access_key)
        .await?
        .with_context(|| format!("no such access key: {access_key}"))?;
    let info = catalog
        .bucket(&bucket)
        .await
        .with_context(|| format!("bucket {bucket}"))?;
    anyhow::ensure!(
        key.is_root || info.owner.as_deref() == Some(key.access_key.as_str()),
        "access key {access_key} does not own bucket {bucket}"
    );
    anyhow::ensure!(
        info.origin.is_none(),
        "bucket {bucket} is a cache bucket; a lake's files belong in a plain bucket"
    );
    print!(
        "{}",
        pgvs3_catalog::lake::attach_sql(&pgvs3_catalog::lake::LakeTarget {
            conninfo,
            bucket: &bucket,
            data_prefix: "",
            access_key: &key.access_key,
            secret_key: &key.secret,
            endpoint: &endpoint,
            region: &region,
            alias: &alias,
            metadata_schema: &metadata_schema.unwrap_or_else(|| pgvs3_catalog::lake::metadata_schema(&bucket)),
            read_only,
        })
    );
    Ok(())
}

/// The database an admin or lake command works on, and its catalog.
async fn open_catalog(database: &DatabaseArgs) -> anyhow::Result<(Database, Arc<Catalog>)> {
    require_data_dir(database)?;
    let master_key = serve::master_key(database)?;
    let db = Database::open(database).await?;
    let catalog = Catalog::load(db.pool.clone(), master_key)
        .await
        .context("reading the catalog (has `pgvs3 serve` or `pgvs3 migrate` run on this database?)")?;
    Ok((db, catalog))
}

/// An admin command reaches an existing database: with the embedded default, it refuses a data
/// dir that `pgvs3 serve` never initialized rather than create an empty one there.
fn require_data_dir(database: &DatabaseArgs) -> anyhow::Result<()> {
    if database.database_url.is_some() {
        return Ok(());
    }
    let dir = &database.data_dir;
    if dir.join("pg").join("PG_VERSION").is_file() {
        return Ok(());
    }
    let shown = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
    anyhow::bail!(
        "no pgvs3 data dir at {} (from --data-dir or PGVS3_DATA_DIR, default ./.pgvs3): run the command \
         where `pgvs3 serve` keeps its data, or pass --data-dir DIR or --database-url URL",
        shown.display()
    )
}

async fn set_key_disabled(catalog: &Catalog, access_key: &str, disabled: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        catalog.set_access_key_disabled(access_key, disabled).await?,
        "no such access key, or it is the root key: {access_key}"
    );
    println!("{} {access_key}", if disabled { "disabled" } else { "enabled" });
    Ok(())
}

async fn admin(catalog: &Arc<Catalog>, pool: deadpool_postgres::Pool, command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::Key(command) => admin_key(catalog, command).await,
        AdminCommand::Origin(command) => admin_origin(catalog, command).await,
        AdminCommand::OidcIssuer(command) => admin_oidc_issuer(&*pool.get().await?, command).await,
        AdminCommand::Role(command) => admin_role(&*pool.get().await?, command).await,
        AdminCommand::Quota {
            bucket,
            max_bytes,
            max_objects,
            remove,
        } => admin_quota(catalog, &bucket, max_bytes, max_objects, remove).await,
        AdminCommand::Maintenance { run_once: _, grace } => admin_maintenance(catalog, pool, grace).await,
    }
}

async fn admin_key(catalog: &Catalog, command: KeyCommand) -> anyhow::Result<()> {
    match command {
        KeyCommand::Create {
            access_key,
            secret_key,
            read_only,
            description,
        } => {
            let key = NewAccessKey {
                access_key: access_key.unwrap_or_else(generate_access_key),
                secret: secret_key.unwrap_or_else(|| random_token(30)),
                is_root: false,
                read_only,
                description,
            };
            key.check().map_err(anyhow::Error::msg)?;
            catalog.put_access_key(&key).await?;
            println!("AWS_ACCESS_KEY_ID={}", key.access_key);
            println!("AWS_SECRET_ACCESS_KEY={}", key.secret);
        }
        KeyCommand::List => {
            let disabled = catalog.disabled_access_keys().await?;
            println!(
                "{:<24} {:<6} {:<10} {:<9} DESCRIPTION",
                "ACCESS KEY", "ROOT", "READ-ONLY", "DISABLED"
            );
            for key in catalog.list_access_keys().await? {
                println!(
                    "{:<24} {:<6} {:<10} {:<9} {}",
                    key.access_key,
                    key.is_root,
                    key.read_only,
                    disabled.contains(&key.access_key),
                    key.description
                );
            }
        }
        KeyCommand::Policy {
            access_key,
            file,
            clear,
        } => key_policy(catalog, &access_key, file, clear).await?,
        KeyCommand::Delete { access_key } => {
            anyhow::ensure!(
                catalog.delete_access_key(&access_key).await?,
                "no such access key, or it is the root key: {access_key}"
            );
            println!("deleted {access_key}");
        }
        KeyCommand::Disable { access_key } => set_key_disabled(catalog, &access_key, true).await?,
        KeyCommand::Enable { access_key } => set_key_disabled(catalog, &access_key, false).await?,
    }
    Ok(())
}

/// Attaches the policy in `file`, detaches it (`clear`), or shows it (neither).
async fn key_policy(
    catalog: &Catalog,
    access_key: &str,
    file: Option<std::path::PathBuf>,
    clear: bool,
) -> anyhow::Result<()> {
    let text = file
        .map(|file| std::fs::read_to_string(&file).map_err(|err| anyhow::anyhow!("{}: {err}", file.display())))
        .transpose()?;
    if text.is_none() && !clear {
        let key = catalog
            .list_access_keys()
            .await?
            .into_iter()
            .find(|key| key.access_key == access_key)
            .ok_or_else(|| anyhow::anyhow!("no such access key: {access_key}"))?;
        match key.policy_text {
            Some(text) => println!("{text}"),
            None => println!("{access_key} has no policy of its own"),
        }
        return Ok(());
    }
    anyhow::ensure!(
        catalog.set_key_policy(access_key, text.as_deref()).await?,
        "no such access key, or it is the root key: {access_key}"
    );
    match text {
        Some(_) => println!("attached a policy to {access_key}"),
        None => println!("detached the policy of {access_key}"),
    }
    Ok(())
}

/// Sets the bucket's quota when asked to (`remove`: no limits), then shows it.
async fn admin_quota(
    catalog: &Catalog,
    bucket: &str,
    max_bytes: Option<u64>,
    max_objects: Option<u64>,
    remove: bool,
) -> anyhow::Result<()> {
    if remove || max_bytes.is_some() || max_objects.is_some() {
        let limit = |value: Option<u64>| value.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        catalog
            .set_bucket_quota(bucket, limit(max_bytes), limit(max_objects))
            .await?;
    }
    match catalog.bucket_quota(bucket).await? {
        Some(quota) => {
            let limit = |value: Option<i64>| value.map_or("unlimited".to_string(), |v| v.to_string());
            println!(
                "{bucket}: {} of {} bytes, {} of {} objects",
                quota.used_bytes,
                limit(quota.max_bytes),
                quota.used_objects,
                limit(quota.max_objects)
            );
        }
        None => println!("{bucket}: no quota"),
    }
    Ok(())
}

/// One lifecycle pass and one reaper pass, as the leader's loop runs them.
async fn admin_maintenance(
    catalog: &Arc<Catalog>,
    pool: deadpool_postgres::Pool,
    grace: std::time::Duration,
) -> anyhow::Result<()> {
    let store = Store::new(pool, Arc::clone(catalog));
    let lifecycle = store.apply_lifecycle(pgvs3_gateway::store::LIFECYCLE_BATCH).await?;
    println!(
        "lifecycle: {} objects expired, {} noncurrent versions and {} delete markers removed, {} uploads aborted",
        lifecycle.expired, lifecycle.noncurrent_deleted, lifecycle.delete_markers_removed, lifecycle.uploads_aborted
    );
    let stats = store.reap_retired(grace).await?;
    println!(
        "reaped {} retired bodies ({} chunks) and {} expired objects",
        stats.bodies, stats.chunks, stats.expired_objects
    );
    Ok(())
}

async fn admin_oidc_issuer(client: &tokio_postgres::Client, command: OidcIssuerCommand) -> anyhow::Result<()> {
    use pgvs3_catalog::sts;
    match command {
        OidcIssuerCommand::Put { issuer, jwks_file } => {
            let text = std::fs::read_to_string(&jwks_file).with_context(|| jwks_file.display().to_string())?;
            let jwks: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not JSON", jwks_file.display()))?;
            sts::put_oidc_issuer(client, &issuer, &jwks).await?;
            println!("registered {issuer}");
        }
        OidcIssuerCommand::Delete { issuer } => {
            anyhow::ensure!(
                sts::delete_oidc_issuer(client, &issuer).await?,
                "no such issuer: {issuer}"
            );
            println!("deleted {issuer}");
        }
    }
    Ok(())
}

async fn admin_role(client: &tokio_postgres::Client, command: RoleCommand) -> anyhow::Result<()> {
    use pgvs3_catalog::sts::{self, Trust};
    match command {
        RoleCommand::Create {
            name,
            issuer,
            audience,
            subjects,
            policy_file,
            max_session_seconds,
        } => {
            let text = std::fs::read_to_string(&policy_file).with_context(|| policy_file.display().to_string())?;
            // Checked as the gateways will read it at each session's requests.
            pgvs3_gateway::access::policy::BucketPolicy::parse_identity(&text)
                .map_err(|err| anyhow::anyhow!("{}: {err}", policy_file.display()))?;
            let policy: serde_json::Value = serde_json::from_str(&text)?;
            let trust = Trust {
                issuer,
                audience,
                subjects,
                service_account_uids: None,
            };
            sts::put_role(client, &name, &trust, &policy, max_session_seconds).await?;
            println!("AWS_ROLE_ARN={}", sts::role_arn(&name));
        }
        RoleCommand::Delete { name } => {
            sts::delete_role(client, &name).await?;
            println!("deleted {name}");
        }
        RoleCommand::List => {
            println!("{:<24} {:<8} {:<10} TRUST", "ROLE", "SESSIONS", "MAX SECS");
            for role in sts::list_roles(client).await? {
                println!(
                    "{:<24} {:<8} {:<10} {} aud={} {}",
                    role.name,
                    role.live_sessions,
                    role.max_session_seconds,
                    role.trust.issuer,
                    role.trust.audience,
                    role.trust.subjects.join(",")
                );
            }
        }
    }
    Ok(())
}

async fn admin_origin(catalog: &Catalog, command: OriginCommand) -> anyhow::Result<()> {
    match command {
        OriginCommand::Put(put) => {
            let OriginPut {
                bucket,
                endpoint,
                origin_bucket,
                region,
                access_key,
                secret_key,
                mode,
                virtual_host,
                ttl,
                negative_ttl,
                fill_concurrency,
                size_limit,
                write_back_threshold,
                range_chunk_size,
                no_verify,
                origin_ca_file,
                origin_allow_local_addresses,
            } = *put;
            let origin = Origin {
                endpoint,
                region,
                origin_bucket,
                access_key,
                secret_key,
                path_style: !virtual_host,
                mode,
                ttl,
                negative_ttl,
                fill_concurrency,
                size_limit,
                write_back_threshold,
                range_chunk: range_chunk_size.min(u32::MAX as u64) as u32,
            };
            if !no_verify {
                let tls = pgvs3_gateway::cache::origin::OriginTls::load(&origin_ca_file).context("--origin-ca-file")?;
                let addresses = pgvs3_gateway::cache::addresses::OriginAddresses {
                    allow_local: origin_allow_local_addresses,
                };
                CacheTier::verify(&origin, Duration::from_secs(10), &tls, addresses)
                    .await
                    .with_context(|| {
                        format!("checking origin bucket {} at {}", origin.origin_bucket, origin.endpoint)
                    })?;
            }
            catalog.put_origin(&bucket, &origin).await?;
            println!(
                "{bucket} -> {}/{} ({})",
                origin.endpoint, origin.origin_bucket, origin.mode
            );
        }
        OriginCommand::List => {
            println!("{:<24} {:<14} {:<8} ORIGIN", "BUCKET", "MODE", "TTL");
            for entry in catalog.list_origins().await? {
                println!(
                    "{:<24} {:<14} {:<8} {}/{}",
                    entry.bucket,
                    entry.origin.mode,
                    format!("{}s", entry.origin.ttl.as_secs()),
                    entry.origin.endpoint.trim_end_matches('/'),
                    entry.origin.origin_bucket
                );
            }
        }
        OriginCommand::Delete { bucket, force } => {
            anyhow::ensure!(
                catalog.drop_origin(&bucket, force).await?,
                "no cache bucket named {bucket}"
            );
            println!("deleted cache bucket {bucket}");
        }
    }
    Ok(())
}
