//! The OS account the embedded server runs as, and the directories and private files it owns.

use std::ffi::{CStr, CString};
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use tokio::process::Command;

/// PostgreSQL refuses to run as root, so root hands the server to this account.
const SERVER_ACCOUNT: &str = "postgres";

/// The identity PostgreSQL runs as: the current user, or `postgres` when pgvs3 runs as root.
pub(super) struct ServerAccount {
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// Supplementary groups to switch to before exec; `None` when no switch is needed because
    /// pgvs3 already runs as this account.
    switch_groups: Option<Vec<libc::gid_t>>,
}

impl ServerAccount {
    pub(super) fn resolve() -> Result<Self> {
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

    pub(super) fn command(&self, program: &Path) -> Command {
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
    pub(super) fn chown(&self, path: &Path) -> Result<()> {
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
pub(super) fn prepare_data_dir(data_dir: &Path, account: &ServerAccount) -> Result<PathBuf> {
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
pub(super) fn ensure_private_dir(dir: &Path, account: &ServerAccount) -> Result<()> {
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

pub(super) fn write_private(path: &Path, contents: &str) -> Result<()> {
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
