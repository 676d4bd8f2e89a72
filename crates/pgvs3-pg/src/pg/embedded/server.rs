//! The postmaster process: launching it on a port until it accepts connections, and shutting it
//! down.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio::process::Child;
use tokio_postgres::NoTls;

use super::account::{ServerAccount, ensure_private_dir};
use super::settings::ALLOCATOR_TUNABLES;
use super::socket_config;

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

/// The server's log, appended to across starts.
pub(super) fn open_log(cluster_dir: &Path, account: &ServerAccount) -> Result<(File, PathBuf)> {
    let log_dir = cluster_dir.join("log");
    ensure_private_dir(&log_dir, account)?;
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
    Ok((log, log_path))
}

/// Everything needed to launch the postmaster, fixed across port retries and restarts.
pub(super) struct Server {
    pub(super) postgres: PathBuf,
    pub(super) cluster_dir: PathBuf,
    pub(super) socket_dir: PathBuf,
    pub(super) log: File,
    pub(super) log_path: PathBuf,
    pub(super) settings: Vec<(&'static str, String)>,
    pub(super) account: ServerAccount,
}

pub(super) enum Launch {
    Ready(Child, String),
    /// Carries the log tail so a retry can say why.
    PortTaken(String),
}

impl Server {
    pub(super) async fn launch(&self, port: u16) -> Result<Launch> {
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
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            command.env("GLIBC_TUNABLES", ALLOCATOR_TUNABLES);
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

pub(super) async fn shut_down(child: &mut Child) -> Result<()> {
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

pub(super) fn signal(child: &Child, signal: libc::c_int) {
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

pub(super) fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}
