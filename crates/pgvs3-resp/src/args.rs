//! The RESP endpoint's flags (`RespArgs`, flattened into `pgvs3 serve`).

use std::time::Duration;

use clap::Args;
use pgvs3_base::args::{ListenAddr, parse_bytes, parse_duration, parse_listen_addr};

#[derive(Debug, Clone, Args)]
pub struct RespArgs {
    /// Listen address of the RESP (Redis protocol) endpoint, or `off`.
    #[arg(long, env = "PGVS3_RESP_ADDR", default_value = "127.0.0.1:6380", value_parser = parse_listen_addr)]
    pub resp_addr: ListenAddr,

    /// Bucket that holds RESP database 0 (created on first start, owned by the root key).
    #[arg(long, env = "PGVS3_RESP_BUCKET", default_value = "resp")]
    pub resp_bucket: String,

    /// Further RESP databases for SELECT, as `index=bucket` pairs: `1=cache,2=sessions`.
    #[arg(long, env = "PGVS3_RESP_DATABASES", value_delimiter = ',', value_parser = parse_resp_database)]
    pub resp_databases: Vec<(u32, String)>,

    /// Whether RESP clients must AUTH: `key` (the default) on every listener, with an access key
    /// and its secret (`AUTH <access-key> <secret>`: the root key printed at the first start, or
    /// any other) or `--resp-password`; `none` lets clients of a loopback listener in without
    /// AUTH when no password is set (for test suites that cannot send one, such as Redis's own).
    #[arg(long, env = "PGVS3_RESP_AUTH", value_enum, default_value_t = RespAuth::Key)]
    pub resp_auth: RespAuth,

    /// Password for `AUTH <password>` (besides access keys and their secrets).
    #[arg(long, env = "PGVS3_RESP_PASSWORD", hide_env_values = true)]
    pub resp_password: Option<String>,

    /// Allow FLUSHDB (off by default: it deletes every object of the database's bucket).
    #[arg(long, env = "PGVS3_RESP_FLUSHDB")]
    pub resp_flushdb: bool,

    /// Most RESP clients connected at once; more are refused with `-ERR max number of clients reached`.
    #[arg(long, env = "PGVS3_RESP_MAX_CLIENTS", default_value_t = 10_000)]
    pub resp_max_clients: usize,

    /// Batches of RESP commands served at once (0: twice the pool size); beyond it they wait.
    #[arg(long, env = "PGVS3_RESP_MAX_ACTIVE", default_value_t = 0)]
    pub resp_max_active: usize,

    /// RESP batches that may wait for a slot (0: twice the active limit); beyond it, and after
    /// --admission-wait, every command of the batch gets `-BUSY`.
    #[arg(long, env = "PGVS3_RESP_MAX_WAITING", default_value_t = 0)]
    pub resp_max_waiting: usize,

    /// How often a client blocked in BLPOP and its kin tries again without being told of new
    /// elements while the gateway has no working LISTEN connection. With one, it is told by
    /// NOTIFY at once, and tries again untold only about once a minute, as a safety net.
    #[arg(long, env = "PGVS3_RESP_BLOCK_POLL", default_value = "1s", value_parser = parse_duration)]
    pub resp_block_poll: Duration,

    /// Bytes of published messages a RESP subscriber may have waiting unread before its
    /// connection is closed (Redis's `client-output-buffer-limit pubsub` hard limit, 32 MiB).
    #[arg(long, env = "PGVS3_RESP_PUBSUB_OUTPUT_LIMIT", default_value = "32MiB", value_parser = parse_bytes)]
    pub resp_pubsub_output_limit: u64,

    /// Bytes of replies one RESP batch (the commands a client pipelined at once) may produce;
    /// past them the connection is closed without them, as Redis closes a normal client past
    /// its `client-output-buffer-limit` hard limit. Whole-collection replies larger than this
    /// are cut in PostgreSQL, before they reach the gateway's memory (`0`: no limit).
    #[arg(long, env = "PGVS3_RESP_OUTPUT_LIMIT", default_value = "64MiB", value_parser = parse_bytes)]
    pub resp_output_limit: u64,

    /// How long a Lua script (EVAL, EVALSHA) may run before it is stopped and its writes rolled
    /// back (Redis's `lua-time-limit`, 5 s; Redis only starts to answer BUSY then).
    #[arg(long, env = "PGVS3_RESP_SCRIPT_TIME_LIMIT", default_value = "5s", value_parser = parse_duration)]
    pub resp_script_time_limit: Duration,

    /// Memory one Lua script's interpreter may allocate; past it the script fails and its writes
    /// are rolled back.
    #[arg(long, env = "PGVS3_RESP_SCRIPT_MAX_MEMORY", default_value = "64MiB", value_parser = parse_bytes)]
    pub resp_script_max_memory: u64,

    /// Memory for the working set: the values of typed keys (hashes, lists, sets, sorted sets,
    /// streams' last IDs) that scripts touched, kept so that a script's calls on them are
    /// answered at once and checked in the database together when the script commits (issue
    /// 39; a key with more than 10,000 elements, or past a quarter of this, is not kept).
    /// `0`: every call of a script runs in the database as it is made.
    #[arg(long, env = "PGVS3_RESP_WORKING_SET", default_value = "64MiB", value_parser = parse_bytes)]
    pub resp_working_set: u64,

    /// Lua scripts that may run at once (default: the machine's cores, at least 2); a script
    /// that finds them all busy for `--admission-wait` is answered `BUSY`, as Redis answers
    /// while a script runs. Bounds the CPU and memory scripts can take (this times
    /// `--resp-script-max-memory`).
    #[arg(long, env = "PGVS3_RESP_MAX_RUNNING_SCRIPTS", value_parser = clap::value_parser!(u16).range(1..))]
    pub resp_max_running_scripts: Option<u16>,

    /// How long the database work of a RESP command that only reads (a run of pipelined reads,
    /// KEYS, SCAN) may take; past it the command answers an error and its statement is
    /// cancelled (`0s`: no limit, as in Redis).
    #[arg(long, env = "PGVS3_RESP_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub resp_read_timeout: Duration,

    /// The same for commands that write (and MULTI/EXEC): past it the command answers an error
    /// and its transaction is cancelled and rolled back, unless it shares its commit with
    /// other clients' writes still waiting for it (`0s`: no limit).
    #[arg(long, env = "PGVS3_RESP_WRITE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub resp_write_timeout: Duration,

    /// How long a write (a script's included) waits for the answer to its COMMIT once it is
    /// sent, past `--resp-write-timeout` if need be: a COMMIT on the wire cannot be cancelled
    /// (one waiting for a synchronous standby commits all the same), so the write is not
    /// answered "cancelled" but waits; past this it answers that its outcome is unknown and
    /// its connection is closed (`0s`: wait as long as it takes).
    #[arg(long, env = "PGVS3_RESP_COMMIT_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub resp_commit_timeout: Duration,

    /// Channels, patterns and shard channels one RESP connection may subscribe to.
    #[arg(long, env = "PGVS3_RESP_MAX_SUBSCRIPTIONS", default_value_t = 10_000)]
    pub resp_max_subscriptions: usize,

    /// Largest message (bytes) PUBLISH and SPUBLISH take, a script's included: each goes
    /// through PostgreSQL to every gateway of the fleet (Redis's bound is `proto-max-bulk-len`).
    #[arg(long, env = "PGVS3_RESP_MAX_MESSAGE", default_value = "1MiB", value_parser = parse_bytes)]
    pub resp_max_message: u64,

    /// Longest pattern (bytes) PSUBSCRIBE takes.
    #[arg(long, env = "PGVS3_RESP_MAX_PATTERN", default_value_t = 1024)]
    pub resp_max_pattern: usize,

    /// Patterns one RESP connection may PSUBSCRIBE to: every message published is matched
    /// against each pattern of the gateway's subscribers.
    #[arg(long, env = "PGVS3_RESP_MAX_PATTERNS", default_value_t = 1000)]
    pub resp_max_patterns: usize,

    /// Close RESP connections idle this long (`0s`: never, as Redis's default `timeout 0`).
    #[arg(long, env = "PGVS3_RESP_IDLE_TIMEOUT", default_value = "0s", value_parser = parse_duration)]
    pub resp_idle_timeout: Duration,

    /// Close RESP connections that send nothing this long after connecting (`0s`: never).
    /// Clients write as soon as they connect; a silent connection only holds a descriptor.
    #[arg(long, env = "PGVS3_RESP_FIRST_BYTE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub resp_first_byte_timeout: Duration,

    /// Close RESP connections that must AUTH and have not this long after connecting (or
    /// after RESET) (`0s`: never).
    #[arg(long, env = "PGVS3_RESP_AUTH_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub resp_auth_timeout: Duration,
}

/// `--resp-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RespAuth {
    Key,
    None,
}

fn parse_resp_database(text: &str) -> Result<(u32, String), String> {
    let (index, bucket) = text
        .split_once('=')
        .ok_or_else(|| format!("expected index=bucket, got {text:?}"))?;
    let index: u32 = index
        .trim()
        .parse()
        .map_err(|_| format!("invalid database index in {text:?}"))?;
    if index == 0 {
        return Err("database 0 is --resp-bucket".into());
    }
    Ok((index, bucket.trim().to_owned()))
}
