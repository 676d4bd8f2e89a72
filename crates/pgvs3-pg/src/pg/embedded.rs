//! Embedded PostgreSQL launcher.
//!
//! `pgvs3 serve` without a database URL, and the integration tests, need a PostgreSQL that
//! pgvs3 owns outright: initialized on first use, started as a child process, reachable over a
//! private Unix socket (plus loopback TCP for replication tooling), and stopped together with
//! the gateway. Everything PostgreSQL needs lives under pgvs3's data directory so that one
//! directory is the whole state to back up or move.

mod account;
mod initdb;
mod server;
mod settings;

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio::process::Child;

use self::account::{ServerAccount, ensure_private_dir, prepare_data_dir};
use self::initdb::{init_cluster, run_to_completion};
use self::server::{Launch, Server, shut_down, signal};
pub use self::settings::DEFAULT_SHARED_BUFFERS_CAP;

/// Bootstrap superuser created by initdb; a fixed name lets admin commands connect without
/// reading any configuration.
const SUPERUSER: &str = "pgvs3";
const MB: u64 = 1024 * 1024;
/// `sun_path` holds 108 bytes including the terminating NUL.
const SOCKET_PATH_MAX: usize = 107;
/// Longest socket file name PostgreSQL may create inside the socket directory.
const SOCKET_FILE_MAX: &str = "/.s.PGSQL.65535";
/// A freshly probed port can still be grabbed by someone else before postgres binds it.
const PORT_ATTEMPTS: u32 = 5;
const INSTALL_HINT: &str = "install them with `apt-get install postgresql` (or pass --pg-bin)";

pub struct EmbeddedOptions {
    /// pgvs3's data dir; PostgreSQL's cluster lives in `data_dir/pg`.
    pub data_dir: PathBuf,
    /// Explicit server binary directory (`--pg-bin`), for hosts with several PostgreSQL
    /// versions or a non-packaged build.
    pub pg_bin: Option<PathBuf>,
    /// Bytes of memory PostgreSQL may be tuned for; `None` assumes the whole machine
    /// (MemTotal), which is right when pgvs3 is the host's only significant workload.
    pub memory_budget: Option<u64>,
    /// `shared_buffers` in bytes (`--pg-shared-buffers`); `None`: a quarter of the memory
    /// budget, capped at [`DEFAULT_SHARED_BUFFERS_CAP`].
    pub shared_buffers: Option<u64>,
    /// TLS for clients on 127.0.0.1 (`--pg-embedded-tls-cert`/`-key`): the server's PEM
    /// certificate and key, copied into the cluster for the server account. The gateway
    /// itself stays on the Unix socket, where PostgreSQL never speaks TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// A running PostgreSQL child. Dropping it without [`EmbeddedPostgres::stop`] still asks the
/// server to shut down, so a panicking gateway or test does not leak a postmaster.
pub struct EmbeddedPostgres {
    child: Option<Child>,
    server: Server,
    port: u16,
}

impl EmbeddedPostgres {
    /// Initializes the cluster on first use, then starts `postgres` as a child and waits until
    /// it accepts connections, so callers can connect as soon as this returns.
    pub async fn start(opts: EmbeddedOptions) -> Result<EmbeddedPostgres> {
        let bin = find_pg_bin(opts.pg_bin.as_deref())?;
        let account = ServerAccount::resolve()?;
        let data_dir = prepare_data_dir(&opts.data_dir, &account)?;
        let cluster_dir = data_dir.join("pg");
        if !cluster_dir.join("PG_VERSION").exists() {
            init_cluster(&bin, &data_dir, &cluster_dir, &account).await?;
        }
        let socket_dir = socket_dir_for(&data_dir);
        ensure_private_dir(&socket_dir, &account)?;
        let (log, log_path) = server::open_log(&cluster_dir, &account)?;
        let settings = settings::server_settings(&opts, &bin, &socket_dir, &cluster_dir, &account)?;
        let server = Server {
            postgres: bin.join("postgres"),
            cluster_dir,
            socket_dir,
            log,
            log_path,
            settings,
            account,
        };
        EmbeddedPostgres::launch_on_a_free_port(server, &data_dir).await
    }

    /// The port of the last start first, so that connection strings handed out (a lake's
    /// attach string) stay valid across restarts; a fresh one when it is taken (probed
    /// first: the readiness check must not find another server listening there).
    async fn launch_on_a_free_port(server: Server, data_dir: &Path) -> Result<EmbeddedPostgres> {
        let recorded = recorded_port(data_dir);
        let mut attempt = 1;
        loop {
            let port = match recorded {
                Some(port) if attempt == 1 && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() => port,
                _ => free_loopback_port()?,
            };
            match server.launch(port).await? {
                Launch::Ready(child, version) => {
                    tracing::info!(
                        "PostgreSQL {version} listening on 127.0.0.1:{port} and {}",
                        server.socket_dir.display()
                    );
                    if recorded != Some(port)
                        && let Err(err) = fs::write(data_dir.join(PORT_FILE), format!("{port}\n"))
                    {
                        tracing::warn!("recording the port in {}: {err}", data_dir.display());
                    }
                    return Ok(EmbeddedPostgres {
                        child: Some(child),
                        server,
                        port,
                    });
                }
                Launch::PortTaken(tail) if attempt < PORT_ATTEMPTS => {
                    tracing::warn!("port {port} was taken before PostgreSQL could bind it, retrying: {tail}");
                    attempt += 1;
                }
                Launch::PortTaken(tail) => bail!(
                    "PostgreSQL could not bind a loopback port after {PORT_ATTEMPTS} attempts; last log lines from {}:\n{tail}",
                    server.log_path.display()
                ),
            }
        }
    }

    /// Starts a hot standby of `primary`: on first use the cluster is a `pg_basebackup -R` copy
    /// (which writes `standby.signal` and `primary_conninfo`), so it streams from the primary
    /// and serves reads only until promoted.
    pub async fn start_standby(opts: EmbeddedOptions, primary: &EmbeddedPostgres) -> Result<EmbeddedPostgres> {
        let bin = find_pg_bin(opts.pg_bin.as_deref())?;
        let account = ServerAccount::resolve()?;
        let data_dir = prepare_data_dir(&opts.data_dir, &account)?;
        let cluster_dir = data_dir.join("pg");
        if !cluster_dir.join("PG_VERSION").exists() {
            let mut command = account.command(&bin.join("pg_basebackup"));
            command
                .arg("-D")
                .arg(&cluster_dir)
                .arg("-h")
                .arg(&primary.server.socket_dir)
                .args([
                    "-p",
                    &primary.port.to_string(),
                    "-U",
                    SUPERUSER,
                    "-R",
                    "-X",
                    "stream",
                    "--checkpoint=fast",
                ])
                .stdin(Stdio::null());
            if let Err(failure) = run_to_completion(command).await? {
                bail!("pg_basebackup into {} failed:\n{failure}", cluster_dir.display());
            }
            tracing::info!("created standby cluster at {}", cluster_dir.display());
        }
        EmbeddedPostgres::start(opts).await
    }

    /// Connects over the Unix socket because local connections use trust authentication and
    /// the socket directory is private to the server account (and root).
    pub fn connect_config(&self) -> tokio_postgres::Config {
        socket_config(&self.server.socket_dir, self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn cluster_dir(&self) -> &Path {
        &self.server.cluster_dir
    }

    /// The postmaster's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Resolves when the postmaster exits by itself (killed, crashed); never while it runs or
    /// after [`EmbeddedPostgres::stop`].
    pub async fn exited(&mut self) -> io::Result<std::process::ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return std::future::pending().await;
        };
        let status = child.wait().await;
        self.child = None;
        status
    }

    /// Starts the server again after it exited, on the same port and socket so that every
    /// connection string handed out stays valid. Crash recovery runs first if it died.
    pub async fn restart(&mut self) -> Result<()> {
        ensure!(self.child.is_none(), "PostgreSQL is still running");
        match self.server.launch(self.port).await? {
            Launch::Ready(child, version) => {
                self.child = Some(child);
                tracing::info!("PostgreSQL {version} restarted on port {}", self.port);
                Ok(())
            }
            Launch::PortTaken(tail) => bail!("port {} is now taken by another process: {tail}", self.port),
        }
    }

    /// Fast shutdown: committed data is safe and the next start needs no crash recovery. Safe
    /// to call more than once.
    pub async fn stop(&mut self) -> Result<()> {
        match self.child.take() {
            Some(mut child) => shut_down(&mut child).await,
            None => Ok(()),
        }
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        // Blocking here could stall the async runtime, so only ask for a fast shutdown; the
        // postmaster finishes it on its own and tokio reaps the exited child.
        if let Some(child) = &self.child {
            signal(child, libc::SIGINT);
        }
    }
}

/// Explicit directory first so `--pg-bin` always wins, then whatever `pg_config` reports for
/// source builds and non-Debian layouts, then the newest Debian/Ubuntu packaged version.
pub fn find_pg_bin(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = explicit {
        ensure!(
            dir.join("postgres").is_file() && dir.join("initdb").is_file(),
            "PostgreSQL server binaries (postgres, initdb) were not found in {}; {INSTALL_HINT}",
            dir.display()
        );
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = pg_config_bindir()
        && dir.join("postgres").is_file()
    {
        return Ok(dir);
    }
    newest_packaged_bindir().with_context(|| format!("PostgreSQL server binaries were not found; {INSTALL_HINT}"))
}

/// Lets admin commands reach the cluster that `serve` started on the same data dir without
/// any extra state: postgres already records its port and socket directory in postmaster.pid.
pub fn running_cluster(data_dir: &Path) -> Option<tokio_postgres::Config> {
    let pid_file = fs::read_to_string(data_dir.join("pg").join("postmaster.pid")).ok()?;
    let mut lines = pid_file.lines();
    let pid: libc::pid_t = lines.next()?.trim().parse().ok()?;
    let port: u16 = lines.nth(2)?.trim().parse().ok()?;
    let socket_dir = lines.next()?.trim();
    if pid <= 0 || socket_dir.is_empty() {
        return None;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    let alive = unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then(|| socket_config(Path::new(socket_dir), port))
}

/// Waits until the server recorded in `data_dir` has exited.
pub async fn wait_for_shutdown(data_dir: &Path, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    while running_cluster(data_dir).is_some() {
        if Instant::now() >= deadline {
            bail!(
                "a PostgreSQL server still runs in {} but does not accept connections",
                data_dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Prefers `data_dir/run` so all state stays together, but Unix socket paths are limited to
/// 107 bytes, and GUC list syntax makes non-UTF-8 paths awkward; both fall back to a short,
/// stable per-data-dir directory in /tmp.
fn socket_dir_for(data_dir: &Path) -> PathBuf {
    let preferred = data_dir.join("run");
    let fits = preferred
        .to_str()
        .is_some_and(|dir| dir.len() + SOCKET_FILE_MAX.len() <= SOCKET_PATH_MAX);
    if fits {
        preferred
    } else {
        PathBuf::from(format!("/tmp/pgvs3-{:016x}", fnv1a(data_dir.as_os_str().as_bytes())))
    }
}

/// A hash that stays the same across Rust releases, unlike `DefaultHasher`, so the fallback
/// socket directory does not move when pgvs3 is rebuilt.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn free_loopback_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).context("probing for a free loopback port")?;
    Ok(listener.local_addr().context("reading probed port")?.port())
}

fn pg_config_bindir() -> Option<PathBuf> {
    let output = std::process::Command::new("pg_config").arg("--bindir").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = output.stdout.trim_ascii();
    (!dir.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(dir)))
}

fn newest_packaged_bindir() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: Vec<u32> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<_>>()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// The file in the data dir that records the loopback port of the last start.
const PORT_FILE: &str = "pg-port";

fn recorded_port(data_dir: &Path) -> Option<u16> {
    fs::read_to_string(data_dir.join(PORT_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|port| *port != 0)
}

/// How any OS user reaches the embedded server of `data_dir` listening on `port`: loopback TCP
/// with the superuser's password (the Unix socket's directory is private to the server's
/// account), for clients such as a DuckDB lake session.
pub fn tcp_config(data_dir: &Path, port: u16) -> Result<tokio_postgres::Config> {
    let path = data_dir.join("pg-password");
    let password = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(SUPERUSER)
        .password(password.trim())
        .dbname("postgres");
    Ok(config)
}

fn socket_config(socket_dir: &Path, port: u16) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(socket_dir)
        .port(port)
        .user(SUPERUSER)
        .dbname("postgres")
        // PostgreSQL never speaks TLS on a Unix socket: asking would cost a round trip.
        .ssl_mode(tokio_postgres::config::SslMode::Disable);
    config
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::MetadataExt;

    use tokio_postgres::NoTls;

    use super::settings::wal_compression;
    use super::*;

    #[test]
    fn explicit_pg_bin_without_binaries_is_rejected() {
        let error =
            find_pg_bin(Some(Path::new("/nonexistent/pgvs3/bin"))).expect_err("a missing directory must be rejected");
        let message = format!("{error:#}");
        assert!(message.contains("apt-get install postgresql"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn long_data_dirs_get_a_short_socket_dir() {
        let short = Path::new("/var/lib/pgvs3");
        assert_eq!(socket_dir_for(short), short.join("run"));
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(100)));
        let fallback = socket_dir_for(&long);
        assert!(
            fallback.to_string_lossy().starts_with("/tmp/pgvs3-"),
            "{}",
            fallback.display()
        );
        assert_eq!(fallback, socket_dir_for(&long));
        assert!(fallback.as_os_str().len() + SOCKET_FILE_MAX.len() <= SOCKET_PATH_MAX);
    }

    /// Removed on drop so a failing test does not leave clusters behind.
    pub(crate) struct ScratchDir(PathBuf);

    impl ScratchDir {
        pub(crate) fn new() -> Self {
            Self(std::env::temp_dir().join(format!("pgvs3-embedded-test-{:016x}", rand::random::<u64>())))
        }

        pub(crate) fn options(&self) -> EmbeddedOptions {
            EmbeddedOptions {
                data_dir: self.0.clone(),
                pg_bin: None,
                memory_budget: Some(512 * MB),
                shared_buffers: Some(32 * MB),
                tls: None,
            }
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            if let Err(e) = fs::remove_dir_all(&self.0) {
                eprintln!("could not remove {}: {e}", self.0.display());
            }
        }
    }

    async fn select_one(config: &tokio_postgres::Config) -> i32 {
        let (client, connection) = config.connect(NoTls).await.expect("connect");
        let connection = tokio::spawn(connection);
        let one: i32 = client
            .query_one("SELECT 1 AS one", &[])
            .await
            .expect("SELECT 1")
            .get("one");
        drop(client);
        connection.await.expect("join").expect("connection");
        one
    }

    #[tokio::test]
    async fn starts_serves_and_stops() {
        let scratch = ScratchDir::new();
        let mut pg = EmbeddedPostgres::start(scratch.options()).await.expect("start");
        assert_eq!(
            pg.cluster_dir(),
            fs::canonicalize(&scratch.0).expect("canonicalize").join("pg")
        );
        assert_eq!(select_one(&pg.connect_config()).await, 1);
        let (client, connection) = pg.connect_config().connect(NoTls).await.expect("connect");
        let connection = tokio::spawn(connection);
        let compression: String = client
            .query_one("SHOW wal_compression", &[])
            .await
            .expect("SHOW wal_compression")
            .get("wal_compression");
        let chosen = wal_compression(&find_pg_bin(None).expect("PostgreSQL server binaries"));
        assert_eq!(compression, if chosen == "on" { "pglz" } else { chosen });
        drop(client);
        connection.await.expect("join").expect("connection");

        // The server's processes run with the allocator limits (or the caller's own).
        let pid = pg.pid().expect("a running postmaster has a pid");
        let environ = fs::read(format!("/proc/{pid}/environ")).expect("the postmaster's environment");
        let tunables = environ
            .split(|byte| *byte == 0)
            .find_map(|entry| entry.strip_prefix(b"GLIBC_TUNABLES="))
            .map(|value| String::from_utf8_lossy(value).into_owned());
        let expected = std::env::var("GLIBC_TUNABLES").unwrap_or_else(|_| settings::ALLOCATOR_TUNABLES.to_owned());
        // glibc 2.36 parses the variable in place and leaves only its first item visible in
        // /proc (every item still applies; `ld.so --list-tunables` shows them).
        let tunables = tunables.expect("GLIBC_TUNABLES in the postmaster's environment");
        assert!(
            !tunables.is_empty() && expected.starts_with(&tunables),
            "{tunables:?} is not what the server was started with ({expected:?})"
        );

        let password = fs::read_to_string(scratch.0.join("pg-password")).expect("password file");
        assert_eq!(password.len(), 32);
        let mode = fs::metadata(scratch.0.join("pg-password"))
            .expect("password metadata")
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let running = running_cluster(&scratch.0).expect("cluster should be running");
        assert_eq!(running.get_ports(), [pg.port()]);
        assert_eq!(select_one(&running).await, 1);

        pg.stop().await.expect("stop");
        pg.stop().await.expect("second stop is a no-op");
        assert!(running_cluster(&scratch.0).is_none());

        // A restart reuses the cluster instead of initializing a new one.
        let mut pg = EmbeddedPostgres::start(scratch.options()).await.expect("restart");
        assert_eq!(
            fs::read_to_string(scratch.0.join("pg-password")).expect("password file"),
            password
        );
        assert_eq!(select_one(&pg.connect_config()).await, 1);
        pg.stop().await.expect("stop after restart");
    }

    #[tokio::test]
    async fn second_start_on_same_data_dir_fails() {
        let scratch = ScratchDir::new();
        let mut first = EmbeddedPostgres::start(scratch.options()).await.expect("first start");
        let error = match EmbeddedPostgres::start(scratch.options()).await {
            Ok(mut second) => {
                second.stop().await.expect("stop second");
                panic!("a second postmaster started on the same data dir");
            }
            Err(error) => format!("{error:#}"),
        };
        assert!(error.contains("postmaster.pid"), "{error}");
        assert_eq!(select_one(&first.connect_config()).await, 1);
        first.stop().await.expect("stop first");
    }
}
