//! The server's settings: tuned to the memory budget, with the socket directory and TLS files
//! it is given.

use std::fs;
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result};

use super::account::{ServerAccount, write_private};
use super::{EmbeddedOptions, MB};

/// The default `shared_buffers` stops at 1 GiB: the embedded server is the single-host and
/// development setup, where several gateways (or a test suite's many clusters) share one machine
/// and a quarter of RAM each would over-commit it; the kernel's page cache still serves the
/// rest of the working set. A host dedicated to one large embedded database raises it.
pub const DEFAULT_SHARED_BUFFERS_CAP: u64 = 1024 * MB;
/// PostgreSQL refuses less than 16 buffers; below a few MB it only thrashes.
const MIN_SHARED_BUFFERS: u64 = 8 * MB;

/// Everything the server is started with (`-c`): tuned to the memory budget, listening on
/// loopback and the private socket directory, with TLS when given.
pub(super) fn server_settings(
    opts: &EmbeddedOptions,
    bin: &Path,
    socket_dir: &Path,
    cluster_dir: &Path,
    account: &ServerAccount,
) -> Result<Vec<(&'static str, String)>> {
    let memory = match opts.memory_budget {
        Some(bytes) => bytes,
        None => total_memory()?,
    };
    let mut settings = tuning(memory, opts.shared_buffers);
    settings.extend([
        ("wal_compression", wal_compression(bin).to_owned()),
        ("listen_addresses", "127.0.0.1".to_owned()),
        ("unix_socket_directories", quote_list_item(socket_dir)),
        ("unix_socket_permissions", "0700".to_owned()),
    ]);
    if let Some((cert, key)) = &opts.tls {
        settings.extend(install_tls(cert, key, cluster_dir, account)?);
    }
    Ok(settings)
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

/// glibc's malloc limits for the server's processes (`GLIBC_TUNABLES`). By default glibc maps
/// every allocation of 128 KiB or more on its own and hands the top of the heap back once 128 KiB
/// of it is free, so a backend that builds and frees large buffers for every batch (a COPY of a
/// body's 8 KiB chunks, a group commit's arrays of values) maps, faults in, zeroes and unmaps
/// fresh pages each time: page faults were 16 % of PostgreSQL's CPU while it took 10 MiB PUTs at
/// 8 workers, and 4 % with these limits. They are the ones glibc moves to by itself once a
/// process frees a large mapped block (its dynamic threshold stops at 32 MiB on 64-bit systems,
/// trimming at twice that), set from the start: a backend may keep up to 64 MiB of freed heap,
/// as glibc's own adaptation allows. A GLIBC_TUNABLES the gateway was started with is passed on
/// unchanged instead; other C libraries ignore the variable.
pub(super) const ALLOCATOR_TUNABLES: &str = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864";

/// The method that compresses full-page images in the WAL: lz4 where the server has it
/// (PostgreSQL 15 or later built `--with-lz4`, as Debian's are), otherwise pglz (`on`). After
/// every checkpoint the first change to each page logs the whole page; pglz compressing those
/// images cost PostgreSQL about a fifth more CPU per 4 KiB SET than lz4 in a side-by-side run of
/// two clusters (the WAL came out the same size). `pg_config` of the same installation says how
/// the server was built; where it is missing, pglz is the choice every server accepts.
pub(super) fn wal_compression(bin: &Path) -> &'static str {
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

/// `unix_socket_directories` is a comma-separated list, so a path must be quoted to survive
/// commas or spaces in it.
fn quote_list_item(path: &Path) -> String {
    format!("\"{}\"", path.to_string_lossy().replace('"', "\"\""))
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

fn total_memory() -> Result<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no MemTotal in /proc/meminfo; pass a memory budget explicitly")?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::super::find_pg_bin;
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
}
