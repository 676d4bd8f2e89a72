//! Embedded PostgreSQL launcher.
//!
//! `pgvs3 serve` without a database URL, and the integration tests, need a PostgreSQL that
//! pgvs3 owns outright: initialized on first use, started as a child process, reachable over a
//! private Unix socket (plus loopback TCP for replication tooling), and stopped together with
//! the gateway. Everything PostgreSQL needs lives under pgvs3's data directory so that one
//! directory is the whole state to back up or move.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rand::Rng;
use tokio::process::{Child, Command};
use tokio_postgres::NoTls;

/// Bootstrap superuser created by initdb; a fixed name lets admin commands connect without
/// reading any configuration.
const SUPERUSER: &str = "pgvs3";
/// PostgreSQL refuses to run as root, so root hands the server to this account.
const SERVER_ACCOUNT: &str = "postgres";
const MB: u64 = 1024 * 1024;
/// `sun_path` holds 108 bytes including the terminating NUL.
const SOCKET_PATH_MAX: usize = 107;
/// Longest socket file name PostgreSQL may create inside the socket directory.
const SOCKET_FILE_MAX: &str = "/.s.PGSQL.65535";
/// A freshly probed port can still be grabbed by someone else before postgres binds it.
const PORT_ATTEMPTS: u32 = 5;
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// A server that says it is starting up is replaying WAL (crash recovery after a kill), which
/// takes as long as the WAL since the last checkpoint; it is given this long instead.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const READY_POLL: Duration = Duration::from_millis(100);
/// Fast shutdown aborts transactions but still checkpoints, which can take a while on a
/// large `shared_buffers`; after this we fall back to an immediate shutdown.
const FAST_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
const IMMEDIATE_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
const LOG_TAIL_LINES: usize = 20;
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

/// The default `shared_buffers` stops at 1 GiB: the embedded server is the single-host and
/// development setup, where several gateways (or a test suite's many clusters) share one machine
/// and a quarter of RAM each would over-commit it; the kernel's page cache still serves the
/// rest of the working set. A host dedicated to one large embedded database raises it.
pub const DEFAULT_SHARED_BUFFERS_CAP: u64 = 1024 * MB;
/// PostgreSQL refuses less than 16 buffers; below a few MB it only thrashes.
const MIN_SHARED_BUFFERS: u64 = 8 * MB;

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
        let log_dir = cluster_dir.join("log");
        ensure_private_dir(&log_dir, &account)?;
        let log_path = log_dir.join("postgres.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        // The server itself must be able to read everything in its data directory, or
        // pg_basebackup of this cluster fails on the log file.
        account.chown(&log_path)?;

        let memory = match opts.memory_budget {
            Some(bytes) => bytes,
            None => total_memory()?,
        };
        let mut settings = tuning(memory, opts.shared_buffers);
        settings.extend([
            ("wal_compression", wal_compression(&bin).to_owned()),
            ("listen_addresses", "127.0.0.1".to_owned()),
            ("unix_socket_directories", quote_list_item(&socket_dir)),
            ("unix_socket_permissions", "0700".to_owned()),
        ]);
        if let Some((cert, key)) = &opts.tls {
            settings.extend(install_tls(cert, key, &cluster_dir, &account)?);
        }

        let server = Server {
            postgres: bin.join("postgres"),
            cluster_dir,
            socket_dir,
            log,
            log_path,
            settings,
            account,
        };
        // The port of the last start first, so that connection strings handed out (a lake's
        // attach string) stay valid across restarts; a fresh one when it is taken (probed
        // first: the readiness check must not find another server listening there).
        let recorded = recorded_port(&data_dir);
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

/// Settings derived from the memory budget, plus fixed ones that suit an object store: large
/// WAL between checkpoints for bulk writes, replication enabled so a standby can be attached
/// later without a restart, SSD-friendly planner costs. Durability settings are spelled out so a
/// hand-edited postgresql.conf cannot silently weaken them.
fn tuning(memory: u64, shared_buffers: Option<u64>) -> Vec<(&'static str, String)> {
    let mb = |bytes: u64| format!("{}MB", bytes / MB);
    let fixed = |value: &str| value.to_owned();
    let shared_buffers = shared_buffers
        .unwrap_or((memory / 4).clamp(128 * MB, DEFAULT_SHARED_BUFFERS_CAP))
        .max(MIN_SHARED_BUFFERS);
    vec![
        ("shared_buffers", mb(shared_buffers)),
        ("effective_cache_size", mb((memory / 2).max(256 * MB))),
        ("work_mem", mb((memory / 256).clamp(4 * MB, 64 * MB))),
        ("maintenance_work_mem", mb((memory / 32).clamp(64 * MB, 1024 * MB))),
        ("wal_buffers", fixed("16MB")),
        ("max_connections", fixed("200")),
        ("max_wal_size", fixed("4GB")),
        ("min_wal_size", fixed("256MB")),
        ("checkpoint_timeout", fixed("15min")),
        ("checkpoint_completion_target", fixed("0.9")),
        ("wal_level", fixed("replica")),
        ("max_wal_senders", fixed("10")),
        ("hot_standby", fixed("on")),
        ("random_page_cost", fixed("1.1")),
        ("fsync", fixed("on")),
        ("synchronous_commit", fixed("on")),
        ("full_page_writes", fixed("on")),
        ("logging_collector", fixed("off")),
        ("log_min_messages", fixed("warning")),
        ("dynamic_shared_memory_type", fixed("posix")),
        ("huge_pages", fixed("try")),
    ]
}

/// The method that compresses full-page images in the WAL: lz4 where the server has it
/// (PostgreSQL 15 or later built `--with-lz4`, as Debian's are), otherwise pglz (`on`). After
/// every checkpoint the first change to each page logs the whole page; pglz compressing those
/// images cost PostgreSQL about a fifth more CPU per 4 KiB SET than lz4 in a side-by-side run of
/// two clusters (the WAL came out the same size). `pg_config` of the same installation says how
/// the server was built; where it is missing, pglz is the choice every server accepts.
fn wal_compression(bin: &Path) -> &'static str {
    let built = std::process::Command::new(bin.join("pg_config"))
        .args(["--version", "--configure"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match built {
        Ok(output) if output.status.success() => lz4_or_pglz(&String::from_utf8_lossy(&output.stdout)),
        _ => "on",
    }
}

/// Reads `pg_config --version --configure`: a version line ("PostgreSQL 15.18 (Debian ...)"),
/// then the configure options.
fn lz4_or_pglz(pg_config: &str) -> &'static str {
    let major = pg_config
        .split_whitespace()
        .nth(1)
        .and_then(|version| version.split('.').next())
        .and_then(|major| major.parse::<u32>().ok());
    let with_lz4 = pg_config.contains("'--with-lz4'");
    match major {
        Some(major) if major >= 15 && with_lz4 => "lz4",
        _ => "on",
    }
}

/// The identity PostgreSQL runs as: the current user, or `postgres` when pgvs3 runs as root.
struct ServerAccount {
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// Supplementary groups to switch to before exec; `None` when no switch is needed because
    /// pgvs3 already runs as this account.
    switch_groups: Option<Vec<libc::gid_t>>,
}

impl ServerAccount {
    fn resolve() -> Result<Self> {
        // SAFETY: these calls cannot fail and have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if euid != 0 {
            return Ok(Self {
                uid: euid,
                gid: egid,
                switch_groups: None,
            });
        }
        let name = CString::new(SERVER_ACCOUNT).context("account name contains NUL")?;
        let (uid, gid) = lookup_account(&name)?.with_context(|| {
            format!(
                "PostgreSQL refuses to run as root and there is no `{SERVER_ACCOUNT}` user to run it as; \
                 `apt-get install postgresql` creates one, or run pgvs3 as a non-root user"
            )
        })?;
        let groups = group_list(&name, gid)?;
        Ok(Self {
            uid,
            gid,
            switch_groups: Some(groups),
        })
    }

    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        // The caller's working directory (e.g. /root) may be unreadable for the server account.
        command.current_dir("/");
        if let Some(groups) = &self.switch_groups {
            let (uid, gid, groups) = (self.uid, self.gid, groups.clone());
            // Groups are resolved up front because NSS lookups allocate and may take locks,
            // which is unsafe between fork and exec in a multi-threaded process; std's own
            // `uid`/`gid` would drop all supplementary groups instead.
            let switch = move || -> io::Result<()> {
                // SAFETY: plain system calls on data owned by the closure; async-signal-safe.
                unsafe {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            };
            // SAFETY: the closure only makes async-signal-safe system calls and does not allocate.
            unsafe {
                command.pre_exec(switch);
            }
        }
        command
    }

    /// Files root creates on the server's behalf must belong to the server account, or postgres
    /// (and pg_basebackup through it) cannot use them.
    fn chown(&self, path: &Path) -> Result<()> {
        if self.switch_groups.is_some() {
            std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
                .with_context(|| format!("changing owner of {} to {SERVER_ACCOUNT}", path.display()))?;
        }
        Ok(())
    }

    /// Mirrors the kernel's permission check (owner bits, else group bits, else other bits).
    fn can_search(&self, meta: &fs::Metadata) -> bool {
        let mode = meta.mode();
        if meta.uid() == self.uid {
            mode & 0o100 != 0
        } else if meta.gid() == self.gid
            || self
                .switch_groups
                .as_ref()
                .is_some_and(|groups| groups.contains(&meta.gid()))
        {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    }
}

fn lookup_account(name: &CStr) -> Result<Option<(libc::uid_t, libc::gid_t)>> {
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: passwd is a plain C struct; all-zero is a valid (empty) value.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer refers to live, correctly sized storage owned by this frame.
        let rc = unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                &raw mut entry,
                buf.as_mut_ptr(),
                buf.len(),
                &raw mut found,
            )
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some((entry.pw_uid, entry.pw_gid))),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            _ => {
                return Err(io::Error::from_raw_os_error(rc))
                    .with_context(|| format!("looking up user {}", name.to_string_lossy()));
            }
        }
    }
}

fn group_list(name: &CStr, gid: libc::gid_t) -> Result<Vec<libc::gid_t>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut count = libc::c_int::try_from(groups.len()).context("too many groups")?;
        // SAFETY: `groups` has room for `count` entries, which getgrouplist never exceeds.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &raw mut count) };
        if rc >= 0 {
            groups.truncate(usize::try_from(count).context("negative group count")?);
            return Ok(groups);
        }
        ensure!(
            groups.len() < 65536,
            "cannot list the groups of {}",
            name.to_string_lossy()
        );
        let needed = usize::try_from(count).unwrap_or(0);
        groups.resize(needed.max(groups.len() * 2), 0);
    }
}

/// Returns the canonical data directory, owned by the server account so postgres can create
/// and reach its cluster inside it.
fn prepare_data_dir(data_dir: &Path, account: &ServerAccount) -> Result<PathBuf> {
    if let Some(parent) = data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let created = match DirBuilder::new().mode(0o700).create(data_dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => {
            return Err(e).with_context(|| format!("creating data directory {}", data_dir.display()));
        }
    };
    let data_dir =
        fs::canonicalize(data_dir).with_context(|| format!("resolving data directory {}", data_dir.display()))?;
    let meta = fs::metadata(&data_dir).with_context(|| format!("inspecting {}", data_dir.display()))?;
    ensure!(
        meta.is_dir(),
        "data directory {} is not a directory",
        data_dir.display()
    );
    if account.switch_groups.is_some() {
        if let Err(e) = check_reachable(&data_dir, account) {
            if created {
                // Best effort: leave no empty directory behind that could never be used.
                let _ = fs::remove_dir(&data_dir);
            }
            return Err(e);
        }
        if meta.uid() != account.uid {
            account.chown(&data_dir)?;
        }
    }
    Ok(data_dir)
}

/// initdb's own error for an unreachable data dir is an obscure "permission denied" on some
/// path component; the usual cause is a data dir under root's home.
fn check_reachable(data_dir: &Path, account: &ServerAccount) -> Result<()> {
    for ancestor in data_dir.ancestors().skip(1) {
        let meta = fs::metadata(ancestor).with_context(|| format!("inspecting {}", ancestor.display()))?;
        ensure!(
            account.can_search(&meta),
            "PostgreSQL runs as the `{SERVER_ACCOUNT}` user, which cannot reach {} because {} (mode {:o}) is not searchable by it; \
             pass a --data-dir the `{SERVER_ACCOUNT}` user can reach, e.g. /var/lib/pgvs3",
            data_dir.display(),
            ancestor.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Creates (or takes over) a directory only the server account may use. A directory owned by
/// anyone else is refused rather than reused, since it may be a trap planted in /tmp.
fn ensure_private_dir(dir: &Path, account: &ServerAccount) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(e).with_context(|| format!("creating {}", dir.display()));
        }
        _ => {}
    }
    let meta = fs::symlink_metadata(dir).with_context(|| format!("inspecting {}", dir.display()))?;
    ensure!(meta.is_dir(), "{} exists but is not a directory", dir.display());
    if meta.uid() != account.uid {
        // SAFETY: cannot fail and has no preconditions.
        let euid = unsafe { libc::geteuid() };
        ensure!(
            meta.uid() == euid,
            "{} is owned by uid {}, not by the PostgreSQL user; remove it and retry",
            dir.display(),
            meta.uid()
        );
        account.chown(dir)?;
    }
    fs::set_permissions(dir, Permissions::from_mode(0o700))
        .with_context(|| format!("restricting permissions of {}", dir.display()))
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

/// `unix_socket_directories` is a comma-separated list, so a path must be quoted to survive
/// commas or spaces in it.
fn quote_list_item(path: &Path) -> String {
    format!("\"{}\"", path.to_string_lossy().replace('"', "\"\""))
}

async fn init_cluster(bin: &Path, data_dir: &Path, cluster_dir: &Path, account: &ServerAccount) -> Result<()> {
    // Two processes racing to initialize the same fresh data dir would corrupt each other's
    // cluster and password file; the loser waits and then finds the cluster ready.
    let _lock = lock_exclusive(data_dir).await?;
    if cluster_dir.join("PG_VERSION").exists() {
        return Ok(());
    }

    let password: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect();
    let password_path = data_dir.join("pg-password");
    let staged = data_dir.join("pg-password.tmp");
    write_private(&staged, &password)?;
    fs::rename(&staged, &password_path).with_context(|| format!("writing {}", password_path.display()))?;

    // pg-password stays private to pgvs3's user, so initdb gets its own copy it can read.
    let pwfile = data_dir.join(format!(".initdb-pwfile-{:016x}", rand::random::<u64>()));
    write_private(&pwfile, &password)?;
    let result = match account.chown(&pwfile) {
        Ok(()) => run_initdb(bin, cluster_dir, &pwfile, account).await,
        Err(e) => Err(e),
    };
    if let Err(e) = fs::remove_file(&pwfile) {
        tracing::warn!("could not remove {}: {e}", pwfile.display());
    }
    result?;
    tracing::info!("initialized PostgreSQL cluster at {}", cluster_dir.display());
    Ok(())
}

/// C.UTF-8 gives byte-order collation (stable across glibc upgrades, so indexes never need
/// rebuilding) with UTF-8 character classes; hosts without that locale get plain C.
async fn run_initdb(bin: &Path, cluster_dir: &Path, pwfile: &Path, account: &ServerAccount) -> Result<()> {
    let mut pwfile_arg = OsString::from("--pwfile=");
    pwfile_arg.push(pwfile);
    let initdb = |locale: &'static str| {
        let mut command = account.command(&bin.join("initdb"));
        command
            .arg("-D")
            .arg(cluster_dir)
            .args([
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-U",
                SUPERUSER,
                "--encoding=UTF8",
                locale,
            ])
            .arg(&pwfile_arg)
            .stdin(Stdio::null());
        command
    };
    let Err(locale_failure) = run_to_completion(initdb("--locale=C.UTF-8")).await? else {
        return Ok(());
    };
    tracing::warn!(
        "initdb with --locale=C.UTF-8 failed, retrying with --no-locale: {}",
        locale_failure.lines().last().unwrap_or_default()
    );
    if let Err(failure) = run_to_completion(initdb("--no-locale")).await? {
        bail!("initdb failed for {}:\n{failure}", cluster_dir.display());
    }
    Ok(())
}

/// Outer error: the program could not be run at all. Inner error: it ran and failed, with the
/// tail of its output.
async fn run_to_completion(mut command: Command) -> Result<Result<(), String>> {
    let program = command.as_std().get_program().to_string_lossy().into_owned();
    let output = command.output().await.with_context(|| format!("running {program}"))?;
    if output.status.success() {
        return Ok(Ok(()));
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok(Err(format!(
        "{program} exited with {}:\n{}",
        output.status,
        tail(&text)
    )))
}

async fn lock_exclusive(dir: &Path) -> Result<File> {
    let file = File::open(dir).with_context(|| format!("opening {} for locking", dir.display()))?;
    let locked = tokio::task::spawn_blocking(move || {
        // SAFETY: the descriptor stays open for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            Ok(file)
        } else {
            Err(io::Error::last_os_error())
        }
    })
    .await
    .context("lock task panicked")?;
    locked.with_context(|| format!("locking {}", dir.display()))
}

/// Copies the server certificate and key where the server account can read them and only it
/// (PostgreSQL refuses a key others may read), and names them in the server's settings.
fn install_tls(
    cert: &Path,
    key: &Path,
    cluster_dir: &Path,
    account: &ServerAccount,
) -> Result<[(&'static str, String); 3]> {
    let mut installed = Vec::new();
    for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
        let pem = fs::read_to_string(from).with_context(|| format!("reading {}", from.display()))?;
        let to = cluster_dir.join(name);
        write_private(&to, &pem)?;
        account.chown(&to)?;
        // A plain path: `-c` takes a string setting's value as it is.
        installed.push(to.to_string_lossy().into_owned());
    }
    let [cert, key] = <[String; 2]>::try_from(installed).expect("two files");
    Ok([("ssl", "on".to_owned()), ("ssl_cert_file", cert), ("ssl_key_file", key)])
}

fn write_private(path: &Path, contents: &str) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    // `mode` only applies when the file is created; a leftover file keeps its old mode.
    file.set_permissions(Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(contents.as_bytes()))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

fn total_memory() -> Result<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no MemTotal in /proc/meminfo; pass a memory budget explicitly")?;
    Ok(kib * 1024)
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

/// Everything needed to launch the postmaster, fixed across port retries and restarts.
struct Server {
    postgres: PathBuf,
    cluster_dir: PathBuf,
    socket_dir: PathBuf,
    log: File,
    log_path: PathBuf,
    settings: Vec<(&'static str, String)>,
    account: ServerAccount,
}

enum Launch {
    Ready(Child, String),
    /// Carries the log tail so a retry can say why.
    PortTaken(String),
}

impl Server {
    async fn launch(&self, port: u16) -> Result<Launch> {
        let log_start = self
            .log
            .metadata()
            .with_context(|| format!("inspecting {}", self.log_path.display()))?
            .len();
        let output = |what: &str| {
            self.log
                .try_clone()
                .with_context(|| format!("duplicating log handle for {what}"))
        };
        let mut command = self.account.command(&self.postgres);
        command.arg("-D").arg(&self.cluster_dir).arg("-p").arg(port.to_string());
        for (name, value) in &self.settings {
            command.arg("-c").arg(format!("{name}={value}"));
        }
        command
            .stdin(Stdio::null())
            .stdout(output("stdout")?)
            .stderr(output("stderr")?)
            .kill_on_drop(false)
            // The gateway forwards shutdown itself; a terminal Ctrl-C must not reach postgres
            // directly and start a shutdown the gateway is not expecting.
            .process_group(0);
        // If the gateway dies without stopping the server (SIGKILL, a test process ending),
        // the kernel asks postgres for a fast shutdown instead of leaving an orphan holding the
        // data dir. The signal follows the *thread* that spawns the server, so callers start it
        // from a thread that lives as long as they need it (the main thread for `pgvs3`).
        // SAFETY: prctl is async-signal-safe; it runs after the account switch, which would
        // otherwise clear it.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", self.postgres.display()))?;

        let mut config = socket_config(&self.socket_dir, port);
        config.connect_timeout(Duration::from_secs(2));
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().context("checking on PostgreSQL")? {
                let tail = log_tail(&self.log_path, log_start);
                if is_port_conflict(&tail) {
                    return Ok(Launch::PortTaken(tail));
                }
                bail!(
                    "PostgreSQL exited during startup ({status}); last log lines from {}:\n{tail}",
                    self.log_path.display()
                );
            }
            match server_version(&config).await {
                Ok(version) => return Ok(Launch::Ready(child, version)),
                Err(e) if started.elapsed() >= ready_timeout(&e) => {
                    if let Err(stop_error) = shut_down(&mut child).await {
                        tracing::warn!("stopping unresponsive PostgreSQL: {stop_error:#}");
                    }
                    bail!(
                        "PostgreSQL did not accept connections within {}s ({e}); last log lines from {}:\n{}",
                        started.elapsed().as_secs(),
                        self.log_path.display(),
                        log_tail(&self.log_path, log_start)
                    );
                }
                Err(_) => tokio::time::sleep(READY_POLL).await,
            }
        }
    }
}

/// How long a launch may take, given the last reason the server refused a connection.
fn ready_timeout(refusal: &tokio_postgres::Error) -> Duration {
    if refusal.code() == Some(&tokio_postgres::error::SqlState::CANNOT_CONNECT_NOW) {
        RECOVERY_TIMEOUT
    } else {
        READY_TIMEOUT
    }
}

fn is_port_conflict(log: &str) -> bool {
    log.contains("could not bind IPv4 address") || log.contains("Address already in use")
}

async fn server_version(config: &tokio_postgres::Config) -> Result<String, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    let connection = tokio::spawn(connection);
    let version = client.query_one("SHOW server_version", &[]).await;
    drop(client);
    // The connection task ends once the client is gone; its outcome adds nothing here.
    let _ = connection.await;
    Ok(version?.get("server_version"))
}

async fn shut_down(child: &mut Child) -> Result<()> {
    signal(child, libc::SIGINT);
    if let Ok(status) = tokio::time::timeout(FAST_SHUTDOWN_GRACE, child.wait()).await {
        let status = status.context("waiting for PostgreSQL to exit")?;
        ensure!(status.success(), "PostgreSQL exited with {status} during shutdown");
        return Ok(());
    }
    tracing::warn!(
        "PostgreSQL did not finish a fast shutdown within {}s; requesting an immediate shutdown",
        FAST_SHUTDOWN_GRACE.as_secs()
    );
    signal(child, libc::SIGQUIT);
    if let Ok(status) = tokio::time::timeout(IMMEDIATE_SHUTDOWN_GRACE, child.wait()).await {
        status.context("waiting for PostgreSQL to exit")?;
        return Ok(());
    }
    tracing::warn!("PostgreSQL ignored an immediate shutdown request; killing it");
    child.kill().await.context("killing PostgreSQL")
}

fn signal(child: &Child, signal: libc::c_int) {
    // `id` is None once the child has been reaped, so the pid cannot have been reused.
    if let Some(pid) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
        // SAFETY: sending a signal to our own unreaped child has no memory-safety implications.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Only the part of the log written since `start`, so an error shows this attempt's failure
/// rather than an older run's.
fn log_tail(path: &Path, start: u64) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => tail(&text),
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn setting(memory: u64, name: &str) -> String {
        setting_with(memory, None, name)
    }

    fn setting_with(memory: u64, shared_buffers: Option<u64>, name: &str) -> String {
        tuning(memory, shared_buffers)
            .into_iter()
            .find_map(|(n, value)| (n == name).then_some(value))
            .unwrap_or_else(|| panic!("no setting {name}"))
    }

    #[test]
    fn tuning_follows_the_memory_budget() {
        const GB: u64 = 1024 * MB;
        let cases = [
            // memory, shared_buffers, effective_cache_size, work_mem, maintenance_work_mem
            (256 * MB, "128MB", "256MB", "4MB", "64MB"),
            (GB, "256MB", "512MB", "4MB", "64MB"),
            // shared_buffers stops at 1 GiB unless asked for more.
            (16 * GB, "1024MB", "8192MB", "64MB", "512MB"),
            (64 * GB, "1024MB", "32768MB", "64MB", "1024MB"),
            // Sizes that are not whole megabytes are rounded down.
            (3 * GB + 123_456, "768MB", "1536MB", "12MB", "96MB"),
        ];
        for (memory, shared, cache, work, maintenance) in cases {
            assert_eq!(setting(memory, "shared_buffers"), shared, "memory {memory}");
            assert_eq!(setting(memory, "effective_cache_size"), cache, "memory {memory}");
            assert_eq!(setting(memory, "work_mem"), work, "memory {memory}");
            assert_eq!(setting(memory, "maintenance_work_mem"), maintenance, "memory {memory}");
        }
        // An explicit size wins either way, within PostgreSQL's useful minimum.
        assert_eq!(setting_with(64 * GB, Some(8 * GB), "shared_buffers"), "8192MB");
        assert_eq!(setting_with(GB, Some(32 * MB), "shared_buffers"), "32MB");
        assert_eq!(setting_with(GB, Some(1), "shared_buffers"), "8MB");
        for durability in ["fsync", "synchronous_commit", "full_page_writes"] {
            assert_eq!(setting(GB, durability), "on");
        }
    }

    #[test]
    fn wal_compression_is_lz4_only_where_the_server_has_it() {
        let debian = "PostgreSQL 15.18 (Debian 15.18-0+deb12u1)\n '--prefix=/usr' '--with-lz4' '--with-zstd'";
        assert_eq!(lz4_or_pglz(debian), "lz4");
        assert_eq!(lz4_or_pglz("PostgreSQL 16.4\n '--prefix=/usr/local/pgsql'"), "on");
        // PostgreSQL 14 has lz4 for TOAST but not for the WAL.
        assert_eq!(lz4_or_pglz("PostgreSQL 14.13\n '--with-lz4'"), "on");
        assert_eq!(lz4_or_pglz(""), "on");
        // This machine's server (the one the tests run on) is Debian's, built with lz4.
        let bin = find_pg_bin(None).expect("PostgreSQL server binaries");
        assert_eq!(wal_compression(&bin), "lz4");
    }

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
