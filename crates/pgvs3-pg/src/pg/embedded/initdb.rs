//! Creating the cluster on first use: initdb, once, under a lock on the data dir.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use rand::Rng;
use tokio::process::Command;

use super::SUPERUSER;
use super::account::{ServerAccount, write_private};
use super::server::tail;

pub(super) async fn init_cluster(
    bin: &Path,
    data_dir: &Path,
    cluster_dir: &Path,
    account: &ServerAccount,
) -> Result<()> {
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
pub(super) async fn run_to_completion(mut command: Command) -> Result<Result<(), String>> {
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
