//! RESP's typed keys (hashes, sets, sorted sets, lists, streams) in the store: each command is one call
//! of its family's SQL function (gateway/migrations/functions/resp_*.sql), made here with the
//! bucket's namespace so that the function knows which of its keys are strings.

use bytes::Bytes;
use tokio_postgres::types::ToSql;

use super::key_probes::rows_of_keys;
use super::kv::{UnderWay, Waited, await_writers};
use super::{BucketInfo, KvBatch, Store, StoreResult};

/// The type of a typed key, as `pgvs3.resp_keys.type` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Hash,
    Set,
    Zset,
    List,
    Stream,
}

impl KeyType {
    pub(super) fn from_code(code: i8) -> Option<KeyType> {
        match code as u8 {
            b'h' => Some(KeyType::Hash),
            b's' => Some(KeyType::Set),
            b'z' => Some(KeyType::Zset),
            b'l' => Some(KeyType::List),
            b'x' => Some(KeyType::Stream),
            _ => None,
        }
    }

    /// The name TYPE answers.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Hash => "hash",
            KeyType::Set => "set",
            KeyType::Zset => "zset",
            KeyType::List => "list",
            KeyType::Stream => "stream",
        }
    }
}

/// Which SQL function a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// RENAME and COPY of a typed key.
    Keys,
    Hash,
    Set,
    Zset,
    List,
    Stream,
    /// A stream's consumer groups.
    StreamGroup,
}

const FAMILIES: [&str; 7] = ["keys", "hash", "set", "zset", "list", "stream", "stream_group"];

/// An operation of a family's SQL function: the `op` its `CASE op` switches on. Each family's
/// operations are one enum (below), so a call can name only an operation its function has; the
/// test `ops_agree_with_the_sql_functions` holds the enums and the function files together.
pub trait SqlOp: Copy + std::fmt::Debug + 'static {
    const FAMILY: Family;
    const ALL: &'static [Self];
    fn code(self) -> &'static str;
}

macro_rules! sql_ops {
    ($(#[$meta:meta])* $name:ident for $family:ident { $($variant:ident = $code:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($variant,)*
        }

        impl SqlOp for $name {
            const FAMILY: Family = Family::$family;
            const ALL: &'static [$name] = &[$($name::$variant,)*];

            fn code(self) -> &'static str {
                match self {
                    $($name::$variant => $code,)*
                }
            }
        }
    };
}

sql_ops! {
    /// The operations of `pgvs3.resp_keys`: RENAME and COPY of a typed key.
    KeysOp for Keys {
        Copy = "copy",
        Rename = "rename",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_hash` (resp_hash.sql).
    HashOp for Hash {
        Hdel = "hdel",
        Hexists = "hexists",
        Hget = "hget",
        Hgetall = "hgetall",
        Hincrby = "hincrby",
        Hincrbyfloat = "hincrbyfloat",
        Hkeys = "hkeys",
        Hlen = "hlen",
        Hmget = "hmget",
        Hrandfield = "hrandfield",
        Hscan = "hscan",
        Hset = "hset",
        Hsetnx = "hsetnx",
        Hstrlen = "hstrlen",
        Hvals = "hvals",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_set` (resp_set.sql).
    SetOp for Set {
        Sadd = "sadd",
        Scard = "scard",
        Sdiff = "sdiff",
        Sdiffstore = "sdiffstore",
        Sinter = "sinter",
        Sintercard = "sintercard",
        Sinterstore = "sinterstore",
        Sismember = "sismember",
        Smembers = "smembers",
        Smismember = "smismember",
        Smove = "smove",
        Spop = "spop",
        Srandmember = "srandmember",
        Srem = "srem",
        Sscan = "sscan",
        Sunion = "sunion",
        Sunionstore = "sunionstore",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_zset` (resp_zset.sql).
    ZsetOp for Zset {
        Bzpopmax = "bzpopmax",
        Bzpopmin = "bzpopmin",
        Zadd = "zadd",
        Zcard = "zcard",
        Zcount = "zcount",
        Zdiff = "zdiff",
        Zdiffstore = "zdiffstore",
        Zincrby = "zincrby",
        Zinter = "zinter",
        Zintercard = "zintercard",
        Zinterstore = "zinterstore",
        Zlexcount = "zlexcount",
        Zmpop = "zmpop",
        Zmscore = "zmscore",
        Zpopmax = "zpopmax",
        Zpopmin = "zpopmin",
        Zrandmember = "zrandmember",
        Zrange = "zrange",
        Zrangestore = "zrangestore",
        Zrank = "zrank",
        Zrem = "zrem",
        Zremrangebylex = "zremrangebylex",
        Zremrangebyrank = "zremrangebyrank",
        Zremrangebyscore = "zremrangebyscore",
        Zrevrank = "zrevrank",
        Zscan = "zscan",
        Zscore = "zscore",
        Zunion = "zunion",
        Zunionstore = "zunionstore",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_list` (resp_list.sql).
    ListOp for List {
        Blpop = "blpop",
        Brpop = "brpop",
        Lindex = "lindex",
        Linsert = "linsert",
        Llen = "llen",
        Lmove = "lmove",
        Lmpop = "lmpop",
        Lpop = "lpop",
        Lpos = "lpos",
        Lpush = "lpush",
        Lpushx = "lpushx",
        Lrange = "lrange",
        Lrem = "lrem",
        Lset = "lset",
        Ltrim = "ltrim",
        Rpop = "rpop",
        Rpush = "rpush",
        Rpushx = "rpushx",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_stream` (resp_stream.sql).
    StreamOp for Stream {
        Xadd = "xadd",
        Xdel = "xdel",
        Xdump = "xdump",
        Xinfo = "xinfo",
        Xlast = "xlast",
        Xlen = "xlen",
        Xrange = "xrange",
        Xrestore = "xrestore",
        Xread = "xread",
        Xrevrange = "xrevrange",
        Xsetid = "xsetid",
        Xtrim = "xtrim",
    }
}

sql_ops! {
    /// The operations of `pgvs3.resp_stream_group` (resp_stream_group.sql): consumer groups.
    StreamGroupOp for StreamGroup {
        Xack = "xack",
        Xautoclaim = "xautoclaim",
        Xclaim = "xclaim",
        XgroupCreate = "xgroup_create",
        XgroupCreateconsumer = "xgroup_createconsumer",
        XgroupDelconsumer = "xgroup_delconsumer",
        XgroupDestroy = "xgroup_destroy",
        XgroupSetid = "xgroup_setid",
        XinfoConsumers = "xinfo_consumers",
        XinfoGroups = "xinfo_groups",
        Xpending = "xpending",
        Xreadgroup = "xreadgroup",
    }
}

/// One command as its function takes it: the operation, its keys, and its arguments (bytes,
/// and the integers and floats the gateway parsed).
#[derive(Debug, Clone)]
pub struct TypedCall {
    family: Family,
    op: &'static str,
    pub keys: Vec<String>,
    pub args: Vec<Bytes>,
    pub ints: Vec<Option<i64>>,
    pub floats: Vec<f64>,
    /// Bytes the call's reply may take (`None`: any). PostgreSQL drops the elements of a
    /// larger one before they are sent, so a whole-collection read (LRANGE 0 -1 of millions of
    /// elements) never comes into the gateway's memory; its row says `cut` instead.
    pub reply_limit: Option<i64>,
}

impl TypedCall {
    pub fn new<O: SqlOp>(op: O, keys: Vec<String>, args: Vec<Bytes>) -> TypedCall {
        TypedCall {
            family: O::FAMILY,
            op: op.code(),
            keys,
            args,
            ints: Vec::new(),
            floats: Vec::new(),
            reply_limit: None,
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Its operation's code (the SQL function's `op`, named after the Redis command).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Whether the call is `op`.
    pub fn is<O: SqlOp>(&self, op: O) -> bool {
        self.family == O::FAMILY && self.op == op.code()
    }

    /// Whether the two calls are of the same operation.
    pub fn same_op(&self, other: &TypedCall) -> bool {
        self.family == other.family && self.op == other.op
    }

    /// Whether the call may change what its keys hold: its function's `write` (each family
    /// file's `write boolean := op [NOT] IN (...)`; every call of `pgvs3.resp_keys` writes).
    /// A call that does not write answers from its keys' state and leaves nothing behind: no
    /// row, no version, no event (the test `ops_agree_with_the_sql_functions`).
    pub fn writes(&self) -> bool {
        match self.family {
            Family::Keys => true,
            Family::Hash => HASH_WRITES.contains(&self.op),
            Family::Set => SET_WRITES.contains(&self.op),
            Family::Zset => ZSET_WRITES.contains(&self.op),
            Family::List => LIST_WRITES.contains(&self.op),
            Family::Stream => STREAM_WRITES.contains(&self.op),
            Family::StreamGroup => !STREAM_GROUP_READS.contains(&self.op),
        }
    }
}

const HASH_WRITES: &[&str] = &["hset", "hsetnx", "hdel", "hincrby", "hincrbyfloat"];
const SET_WRITES: &[&str] = &[
    "sadd",
    "srem",
    "spop",
    "smove",
    "sinterstore",
    "sunionstore",
    "sdiffstore",
];
const ZSET_WRITES: &[&str] = &[
    "zadd",
    "zrem",
    "zincrby",
    "zpopmin",
    "zpopmax",
    "zrangestore",
    "zunionstore",
    "zinterstore",
    "zdiffstore",
    "zremrangebyrank",
    "zremrangebyscore",
    "zremrangebylex",
    "bzpopmin",
    "bzpopmax",
    "zmpop",
];
const LIST_WRITES: &[&str] = &[
    "lpush", "rpush", "lpushx", "rpushx", "lpop", "rpop", "lset", "linsert", "lrem", "ltrim", "lmove", "blpop",
    "brpop", "lmpop",
];
const STREAM_WRITES: &[&str] = &["xadd", "xdel", "xtrim", "xsetid", "xrestore"];
const STREAM_GROUP_READS: &[&str] = &["xpending", "xinfo_groups", "xinfo_consumers"];

/// The size of a reply cut at its call's `reply_limit`, as PostgreSQL built it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Bytes of its array datums (the items' and the scores').
    pub datum_bytes: u64,
    /// Its items and scores.
    pub elements: u64,
}

impl Cut {
    /// The least its reply takes encoded: what the statement's cut is sure of.
    pub fn least_reply_bytes(&self) -> u64 {
        (self.datum_bytes / 2).saturating_sub(64).max(3 * self.elements)
    }

    /// About the memory the gateway takes to read it whole: the row as received, its elements
    /// copied out of it, their encoding, and some 128 bytes an element of values around them.
    pub fn memory_bytes(&self) -> u64 {
        3 * self.datum_bytes + 128 * self.elements
    }
}

/// The error codes the family functions answer in `err` (gateway/migrations/functions/resp_*.sql),
/// and Redis's text for each: the texts live here only. `nogroup` is worded again by the gateway
/// with the group's name (resp/commands/stream_group.rs).
pub const SQL_ERRORS: &[(&str, &str)] = &[
    (
        "wrongtype",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
    ),
    ("no_such_key", "ERR no such key"),
    ("same_object", "ERR source and destination objects are the same"),
    ("hash_not_integer", "ERR hash value is not an integer"),
    ("hash_not_float", "ERR hash value is not a float"),
    ("overflow", "ERR increment or decrement would overflow"),
    ("nan_or_infinity", "ERR increment would produce NaN or Infinity"),
    ("zset_nan", "ERR resulting score is not a number (NaN)"),
    ("index_out_of_range", "ERR index out of range"),
    (
        "stream_exhausted",
        "ERR The stream has exhausted the last possible ID, unable to add more items",
    ),
    (
        "xadd_id_too_small",
        "ERR The ID specified in XADD is equal or smaller than the target stream top item",
    ),
    (
        "xsetid_id_too_small",
        "ERR The ID specified in XSETID is smaller than the target stream top item",
    ),
    (
        "xsetid_entries_too_small",
        "ERR The entries_added specified in XSETID is smaller than the target stream length",
    ),
    (
        "xgroup_needs_key",
        "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
    ),
    ("nogroup", "NOGROUP"),
    ("busygroup", "BUSYGROUP Consumer Group name already exists"),
];

/// Redis's text for an error code of the family functions. A code missing from [`SQL_ERRORS`]
/// (the unit test keeps that from happening) still answers an error, never a panic.
pub fn sql_error_text(code: &str) -> String {
    SQL_ERRORS.iter().find(|(known, _)| *known == code).map_or_else(
        || format!("ERR internal error code '{code}'"),
        |(_, text)| (*text).to_owned(),
    )
}

/// What a call answered: a Redis error, or its integer, strings (`None`: nil) and scores.
#[derive(Debug, Clone, Default)]
pub struct TypedRow {
    /// Redis's error text (the function's code worded by [`sql_error_text`]).
    pub err: Option<String>,
    pub n: Option<i64>,
    pub items: Vec<Option<Bytes>>,
    pub scores: Vec<Option<f64>>,
    /// The reply passed the call's `reply_limit`: its elements were left out.
    pub cut: Option<Cut>,
}

/// A typed key's elements as a working set's load statement answered them, in the shape its
/// family's predictor reads (pgvs3-resp's `working_set`). A load statement takes `$1` the
/// bucket's id, `$2` the key and `$3` the most elements it loads, and answers one row:
/// `present` (the key exists, judged by the batch's clock), `too_large` (it has more elements
/// than `$3`: the arrays then come empty), and the arrays `items`, `vals`, `scores`, `ints`
/// (NULL for empty).
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub present: bool,
    pub too_large: bool,
    pub items: Vec<Bytes>,
    pub vals: Vec<Bytes>,
    pub scores: Vec<f64>,
    pub ints: Vec<i64>,
}

/// What a write batch's typed calls carry for a working set (pgvs3-resp's `working_set`).
#[derive(Debug, Default)]
pub struct Speculation<'a> {
    /// The rows predicted for the calls, by position (`None`: the call runs as usual).
    pub expected: Vec<Option<&'a TypedRow>>,
    /// Keys loaded after the calls, each by its statement (see [`Loaded`]), in order.
    pub loads: Vec<(&'static str, String)>,
    /// The most elements a load takes.
    pub load_limit: i64,
    /// Keys whose typed versions are read after the calls and loads (the versions the batch's
    /// loads give a typed key, `t<version>`), absent keys left out.
    pub versions: Vec<String>,
    /// Hashes' and sorted sets' changes written set-based, ahead of the calls (see
    /// [`ElementWrites`]).
    pub hash_writes: Vec<HashWrite>,
    pub zset_writes: Vec<ZsetWrite>,
    /// Sets' changes written set-based, ahead of the calls (see [`SetWrite`]).
    pub set_writes: Vec<SetWrite>,
    /// Streams' changes written set-based, ahead of the calls (see [`StreamWrite`]).
    pub stream_writes: Vec<StreamWrite>,
    /// Lists' changes written set-based, ahead of the calls (see [`ListWrite`]).
    pub list_writes: Vec<ListWrite>,
    /// Keys the run's working set answered calls on without loading them, each with what it
    /// took the key to be: locked and checked ahead of everything else, and the batch fails
    /// with [`StoreError::Mispredicted`] unless each still is so (see `KvSql`'s
    /// `check_borrowed`).
    ///
    /// [`StoreError::Mispredicted`]: crate::store::StoreError
    pub borrowed: Vec<(String, Borrowed)>,
}

/// What a run took a key it borrowed to be (see [`Speculation::borrowed`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Borrowed {
    /// No live key of the name.
    Absent,
    /// The typed key at this version (`t<version>`, as the batch's loads give it), and no live
    /// string of the name.
    Typed(String),
    /// A string with this value (inline in its row), expiry and form, and no live typed key of
    /// the name.
    String(super::kv::StringValue),
}

/// What a script run's speculated writes changed of one key's elements, written with the other
/// keys' of its type in the round trip in one call (`pgvs3.resp_hash_apply`,
/// functions/resp_hash.sql, which says what each part means, `pgvs3.resp_zset_apply` and
/// `pgvs3.resp_set_apply`) instead of the calls themselves. Each element comes with the value
/// the run found it at, and the call fails the batch with
/// [`StoreError::Mispredicted`](crate::store::StoreError) unless the key and every row it
/// writes were so.
#[derive(Debug, Clone)]
pub struct ElementWrites<V> {
    pub key: String,
    pub existed: bool,
    pub emptied: bool,
    pub bump: bool,
    pub peak: i64,
    pub longest: i64,
    /// Elements removed, with the values found.
    pub gone: Vec<(Bytes, V)>,
    /// Elements overwritten in place: the element, the value found, the value written.
    pub changed: Vec<(Bytes, V, V)>,
    /// New elements and their values, in the order they were added.
    pub added: Vec<(Bytes, V)>,
}

/// A hash's fields and their values.
pub type HashWrite = ElementWrites<Bytes>;
/// A sorted set's members and their scores.
pub type ZsetWrite = ElementWrites<f64>;
/// A set's members (`pgvs3.resp_set_apply`, functions/resp_set.sql), which have no values and
/// are never changed in place: members removed and added. `longest` is 1 when a write that
/// added named a member that is no integer (what an intset cannot hold), else 0.
pub type SetWrite = ElementWrites<()>;

impl<V> ElementWrites<V> {
    pub fn new(key: &str, existed: bool, emptied: bool, bump: bool) -> ElementWrites<V> {
        ElementWrites {
            key: key.to_owned(),
            existed,
            emptied,
            bump,
            peak: 0,
            longest: 0,
            gone: Vec::new(),
            changed: Vec::new(),
            added: Vec::new(),
        }
    }

    /// Whether it writes nothing (removals of elements that were not there).
    pub fn is_empty(&self) -> bool {
        !self.emptied && !self.bump && self.gone.is_empty() && self.changed.is_empty() && self.added.is_empty()
    }
}

/// A stream entry's ID as stored: (ms, seq), each half with its sign bit flipped
/// (0022_resp_streams.sql).
pub type StreamId = (i64, i64);

/// A stream node's row (0060_resp_stream_nodes.sql) but its first ID: the ID of the last entry
/// it was given, how many it was given, how many it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamNode {
    pub last: StreamId,
    pub given: i64,
    pub live: i64,
}

/// What a script run's speculated XADD and XTRIM calls changed of one stream, written in one
/// call (`pgvs3.resp_stream_apply`, functions/resp_stream.sql, which says what each part means)
/// instead of the calls themselves. The call fails the batch with
/// [`StoreError::Mispredicted`](crate::store::StoreError) unless the stream, and every node it
/// touches, were as the run found them.
#[derive(Debug, Clone)]
pub struct StreamWrite {
    pub key: String,
    pub existed: bool,
    /// The last ID and length found.
    pub found: (StreamId, i64),
    /// The last ID and length left.
    pub left: (StreamId, i64),
    /// Entries the calls added, those trimmed since included.
    pub added: i64,
    pub went: Option<StreamId>,
    /// The entries added that are left, in order: IDs, and fields and values.
    pub entries: Vec<(StreamId, Vec<Bytes>)>,
    /// The nodes touched, by first ID: as found and as left (`None`: absent).
    pub nodes: Vec<(StreamId, Option<StreamNode>, Option<StreamNode>)>,
    /// The node size they were judged by (`None`: not loaded).
    pub node_size: Option<i64>,
}

impl StreamWrite {
    /// Whether it writes nothing (trims that removed nothing).
    pub fn is_empty(&self) -> bool {
        self.added == 0 && self.left.1 == self.found.1
    }
}

/// What a script run's speculated pushes, pops, LMOVEs and LREMs changed of one list, written in
/// one call (`pgvs3.resp_list_apply`, functions/resp_list.sql, which says what each part means)
/// instead of the calls themselves. Elements go by their positions (`resp_list.pos`). The call
/// fails the batch with [`StoreError::Mispredicted`](crate::store::StoreError) unless the list
/// and every element it removes were as the run found them.
#[derive(Debug, Clone)]
pub struct ListWrite {
    pub key: String,
    pub existed: bool,
    pub emptied: bool,
    /// The length and bounds found (those of an absent key: 0 and 0, 0).
    pub found: (i64, i64, i64),
    /// The elements found that went, by position, with their values.
    pub gone: Vec<(i64, Bytes)>,
    /// The elements pushed that are left, with the positions given them.
    pub added: Vec<(i64, Bytes)>,
    /// The length and bounds left (`None`: no key).
    pub left: Option<(i64, i64, i64)>,
}

impl ListWrite {
    /// Whether it writes nothing (pops and removals that found nothing).
    pub fn is_empty(&self) -> bool {
        !self.emptied && self.gone.is_empty() && self.added.is_empty()
    }
}

/// The statements of a batch's [`ElementWrites`] of hashes and of sorted sets, each every key's
/// in one call: `$1` the bucket, then the keys' parts and the elements' as arrays, in the
/// functions' order (functions/resp_hash.sql).
pub(super) const HASH_APPLY: &str = "SELECT pgvs3.resp_expect(pgvs3.resp_hash_apply($1, $2, $3, $4, $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)) AS kept";
pub(super) const ZSET_APPLY: &str = "SELECT pgvs3.resp_expect(pgvs3.resp_zset_apply($1, $2, $3, $4, $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)) AS kept";
/// The statement of a batch's [`SetWrite`]s, every key's in one call.
pub(super) const SET_APPLY: &str = "SELECT pgvs3.resp_expect(pgvs3.resp_set_apply($1, $2, $3, $4, $5, $6, $7,
    $8, $9, $10, $11, $12)) AS kept";
/// The statement of a [`StreamWrite`].
pub(super) const STREAM_APPLY: &str = "SELECT pgvs3.resp_expect(pgvs3.resp_stream_apply($1, $2, $3, $4, $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)) AS kept";
/// The statement of a [`ListWrite`].
pub(super) const LIST_APPLY: &str = "SELECT pgvs3.resp_expect(pgvs3.resp_list_apply($1, $2, $3, $4, $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14)) AS kept";

/// What the calls of a [`Speculation`] answered.
#[derive(Debug, Default)]
pub struct Speculated {
    pub rows: Vec<TypedRow>,
    pub loaded: Vec<Loaded>,
    pub versions: Vec<Committed>,
}

/// A typed key as a batch left it: its version, whether it is in its large encoding (`None`:
/// not judged, before layout v51), and the keyspace's `hash-max-listpack-entries` and `-value`
/// then: what a hash the batch made knows of its encoding only once the database judged it.
#[derive(Debug)]
pub struct Committed {
    pub key: String,
    pub version: String,
    pub large: Option<bool>,
    pub hash_limits: (i64, i64),
    /// The setting of the encoding parameters then (see `KvBatch::encodings`).
    pub encodings: Option<String>,
}

/// The statements of one namespace: a call per family, and the typed keys' share of the
/// keyspace statements.
#[derive(Debug)]
pub(super) struct TypedSql {
    calls: [String; 7],
    /// The calls sent with the row the gateway predicted for them (`$8`..`$10`: `n`, `items`,
    /// `scores`): they answer only whether the function answered the same, and abort the
    /// transaction when not (`pgvs3.resp_expect`). No cut: a prediction is never of a reply
    /// past the call's limit.
    expecting: [String; 7],
    /// The keys among `$2` past their expiry and not yet removed, typed or strings, with their
    /// deadlines: what typed reads that ran before it (in its snapshot, by an earlier clock)
    /// may have taken as absent ([`read_calls`]).
    lapsed: String,
}

impl TypedSql {
    pub(super) fn new(ns: &str) -> TypedSql {
        // A reply is cut ($7) when its elements surely encode to more than the limit: an
        // element of an array datum takes at most 7 bytes besides its data (a 4-byte length and
        // alignment) where its reply takes at least 5, and a float8 score 8 where its reply
        // takes at least 3, so half the datum (and 3 bytes an element) is below the reply's
        // size (`Cut::least_reply_bytes`). What is cut is never sent, only its size; what is
        // not is at most about twice the limit. `$8`: the batch has just deleted the expired
        // strings among the keys under their locks, so every row left was a live string then
        // (judged again by a later clock, one that expired in between would be neither deleted
        // nor seen, and a typed key would be made beside it).
        let call = |family: &str| {
            format!(
                "SELECT err, n, CASE WHEN cut THEN NULL ELSE items END AS items,
                        CASE WHEN cut THEN NULL ELSE scores END AS scores,
                        CASE WHEN cut THEN bytes END AS cut_bytes, CASE WHEN cut THEN elements END AS cut_elements
                   FROM (SELECT *, coalesce($7::bigint < bytes / 2 - 64 OR $7::bigint < 3 * elements, false) AS cut
                           FROM (SELECT r.err, r.n, r.items, r.scores,
                                        coalesce(pg_column_size(r.items), 0)::bigint
                                          + coalesce(pg_column_size(r.scores), 0) AS bytes,
                                        coalesce(cardinality(r.items), 0)::bigint
                                          + coalesce(cardinality(r.scores), 0) AS elements
                                   FROM pgvs3.resp_{family}($1, $2, $3, {strings}, $4, $5, $6) r) sized) called",
                strings = live_strings(ns, "$8"),
            )
        };
        let expecting = |family: &str| {
            format!(
                "SELECT pgvs3.resp_expect(r.err IS NULL AND r.n IS NOT DISTINCT FROM $8::bigint
                          AND coalesce(r.items, '{{}}') IS NOT DISTINCT FROM coalesce($9::bytea[], '{{}}')
                          AND coalesce(r.scores, '{{}}') IS NOT DISTINCT FROM coalesce($10::float8[], '{{}}')) AS kept
                   FROM pgvs3.resp_{family}($1, $2, $3, {strings}, $4, $5, $6) r",
                strings = live_strings(ns, "$7"),
            )
        };
        TypedSql {
            calls: FAMILIES.map(call),
            expecting: FAMILIES.map(expecting),
            lapsed: format!(
                "SELECT coalesce(array_agg(key), '{{}}') AS lapsed, coalesce(array_agg(expires_at), '{{}}') AS deadlines
                   FROM (SELECT key, expires_at FROM {typed} WHERE expires_at <= clock_timestamp()
                         UNION ALL
                         SELECT key, expires_at FROM {strings} WHERE expires_at <= clock_timestamp()) l",
                typed = rows_of_keys("pgvs3.resp_keys", "r", "$1", "$2"),
                strings = rows_of_keys(&format!("{ns}.objects"), "o", "$1", "$2"),
            ),
        }
    }
}

/// The call's string keys: those of the call's keys (`$3`) with a string row in bucket `$2`
/// live by the statement's clock, or with any string row when `all_live` (a SQL boolean) says
/// the expired ones were just deleted. (A key named twice comes twice, which the functions
/// take as once.)
fn live_strings(ns: &str, all_live: &str) -> String {
    let strings = rows_of_keys(&format!("{ns}.objects"), "o", "$2", "$3");
    format!(
        "ARRAY(SELECT o.key FROM {strings}
                WHERE {all_live} OR o.expires_at IS NULL OR o.expires_at > clock_timestamp())"
    )
}

/// The reaper's statement for expired typed keys (their elements go with them).
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM pgvs3.resp_keys WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM pgvs3.resp_keys WHERE expires_at <= clock_timestamp() LIMIT $1))";

/// Sends the calls on `client` one after the other without waiting between them (one round
/// trip), with `before` sent first and `after` last; PostgreSQL runs them in that order. The
/// calls' rows, and what `after` answered. A call with a row in `expected` (by position) is
/// sent to be checked against it, and answers it (see [`TypedSql::expecting`]). `expired_strings_deleted`: `before` deletes the
/// expired strings among the keys, so the calls take every string row left as live.
#[allow(clippy::too_many_arguments)]
pub(super) async fn send_calls<B, A, T>(
    client: &deadpool_postgres::Object,
    bucket: &BucketInfo,
    calls: &[&TypedCall],
    expected: &[Option<&TypedRow>],
    expired_strings_deleted: bool,
    before: B,
    after: A,
    ahead_done: impl FnOnce(),
) -> StoreResult<(Vec<TypedRow>, T)>
where
    B: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
    A: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
{
    let expectation = |k: usize| expected.get(k).copied().flatten();
    let mut statements: [Option<tokio_postgres::Statement>; 7] = Default::default();
    let mut checks: [Option<tokio_postgres::Statement>; 7] = Default::default();
    for (k, call) in calls.iter().enumerate() {
        let index = call.family as usize;
        let (slot, sql) = match expectation(k) {
            Some(_) => (&mut checks[index], &bucket.sql.types.expecting[index]),
            None => (&mut statements[index], &bucket.sql.types.calls[index]),
        };
        if slot.is_none() {
            *slot = Some(client.prepare_cached(sql).await?);
        }
    }
    let args: Vec<Vec<&[u8]>> = calls
        .iter()
        .map(|call| call.args.iter().map(|arg| &arg[..]).collect())
        .collect();
    // A predicted row's items as the check's parameter takes them, beside the row.
    type Predicted<'a> = Option<(Vec<Option<&'a [u8]>>, &'a TypedRow)>;
    let predicted: Vec<Predicted> = (0..calls.len())
        .map(|k| expectation(k).map(|row| (row.items.iter().map(|item| item.as_deref()).collect(), row)))
        .collect();
    let (statements, checks) = (&statements, &checks);
    let queries = calls
        .iter()
        .zip(&args)
        .zip(&predicted)
        .map(|((call, args), predicted)| {
            let index = call.family as usize;
            async move {
                match predicted {
                    Some((items, row)) => {
                        let params: [&(dyn ToSql + Sync); 10] = [
                            &call.op,
                            &bucket.id,
                            &call.keys,
                            args,
                            &call.ints,
                            &call.floats,
                            &expired_strings_deleted,
                            &row.n,
                            items,
                            &row.scores,
                        ];
                        let statement = checks[index].as_ref().expect("prepared above");
                        client.query_one(statement, &params).await.map(|_| None)
                    }
                    None => {
                        let params: [&(dyn ToSql + Sync); 8] = [
                            &call.op,
                            &bucket.id,
                            &call.keys,
                            args,
                            &call.ints,
                            &call.floats,
                            &call.reply_limit,
                            &expired_strings_deleted,
                        ];
                        let statement = statements[index].as_ref().expect("prepared above");
                        client.query_one(statement, &params).await.map(Some)
                    }
                }
            }
        });
    // `ahead_done` once `before` and the calls answered, `after` still under way.
    let ahead = async {
        let ahead = futures::try_join!(before, futures::future::try_join_all(queries));
        if ahead.is_ok() {
            ahead_done();
        }
        ahead
    };
    let ((_, rows), after) = futures::try_join!(ahead, after)?;
    let rows = rows
        .iter()
        .enumerate()
        .map(|(k, row)| match row {
            None => expectation(k).cloned().unwrap_or_default(),
            Some(row) => TypedRow {
                err: row.get::<_, Option<&str>>("err").map(sql_error_text),
                n: row.get("n"),
                items: row
                    .get::<_, Option<Vec<Option<Vec<u8>>>>>("items")
                    .unwrap_or_default()
                    .into_iter()
                    .map(|item| item.map(Bytes::from))
                    .collect(),
                scores: row.get::<_, Option<Vec<Option<f64>>>>("scores").unwrap_or_default(),
                cut: row.get::<_, Option<i64>>("cut_bytes").map(|bytes| Cut {
                    datum_bytes: bytes.max(0) as u64,
                    elements: row.get::<_, Option<i64>>("cut_elements").unwrap_or(0).max(0) as u64,
                }),
            },
        })
        .collect();
    Ok((rows, after))
}

/// Runs typed reads in one round trip, in a REPEATABLE READ transaction of their own: in READ
/// COMMITTED every statement of a PL/pgSQL function takes a new snapshot, so a read racing an
/// overwrite of its key by another type (SET over a set) could pass the type check in one
/// snapshot and miss the members in the next, answering an empty set that never existed (found
/// by the history checker, seed 422561153). One snapshot for the whole read; a transaction
/// that only reads never fails to serialize.
///
/// The functions take a key past its expiry as absent, by their clock. The transaction ends
/// with the keys of the calls that are past their expiry by a later clock, in the same
/// snapshot: every key a call may have taken as absent for its expiry is among them. When
/// there are some, the reads wait for those keys' writers and run again (see
/// [`Waited`](super::kv::Waited)): one more round trip, only then.
pub(super) async fn read_calls(
    client: &deadpool_postgres::Object,
    bucket: &BucketInfo,
    calls: &[&TypedCall],
) -> StoreResult<Vec<TypedRow>> {
    let keys: Vec<&str> = calls.iter().flat_map(|call| &call.keys).map(String::as_str).collect();
    let lapsed = client.prepare_cached(&bucket.sql.types.lapsed).await?;
    let mut waited = Waited::default();
    let mut fresh: Vec<String> = Vec::new();
    loop {
        let wait = match fresh.is_empty() {
            true => None,
            false => Some(client.prepare_cached(bucket.sql.kv.await_writers(fresh.len())).await?),
        };
        // Sent in this order on the first poll: the wait (outside the transaction, so that its
        // snapshot is taken once the writers are done), BEGIN, the calls, the check, COMMIT.
        let before = async {
            let wait = async {
                match &wait {
                    Some(statement) => await_writers(client, statement, bucket.id, &fresh).await,
                    None => Ok(()),
                }
            };
            let begin = client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ");
            futures::try_join!(wait, begin).map(drop)
        };
        let after = async {
            let params: [&(dyn ToSql + Sync); 2] = [&bucket.id, &keys];
            let (row, _) = futures::try_join!(client.query_one(&lapsed, &params), client.batch_execute("COMMIT"))?;
            let keys = row.get::<_, Vec<String>>("lapsed");
            let deadlines = row.get::<_, Vec<std::time::SystemTime>>("deadlines");
            Ok(keys.into_iter().zip(deadlines).collect::<Vec<_>>())
        };
        let (rows, lapsed) = send_calls(client, bucket, calls, &[], false, before, after, || {}).await?;
        fresh = waited.fresh(lapsed);
        if fresh.is_empty() {
            return Ok(rows);
        }
    }
}

impl Store {
    /// Runs typed reads: see [`read_calls`].
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_typed_read", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_typed_read(&self, bucket: &BucketInfo, calls: &[&TypedCall]) -> StoreResult<Vec<TypedRow>> {
        let under_way = UnderWay::new(self.client().await?, self.cancel.as_ref());
        let rows = read_calls(under_way.client(), bucket, calls).await;
        under_way.done();
        rows
    }
}

impl KvBatch {
    /// Runs typed calls inside the batch, after whatever the batch has changed so far (which is
    /// written first); `commit` ends the batch with them, in the same round trip.
    pub async fn typed(&mut self, calls: &[&TypedCall], commit: bool) -> StoreResult<Vec<TypedRow>> {
        self.write_pending().await?;
        Ok(self.typed_calls(calls, &Speculation::default(), commit).await?.rows)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A token of PL/pgSQL, as far as finding its `op` arms needs: a word (lower case), a
    /// string literal, or one symbol.
    #[derive(Debug, Clone, PartialEq)]
    enum Token {
        Word(String),
        Str(String),
        Symbol(String),
    }

    fn tokens(text: &str) -> Vec<Token> {
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '-' && chars.get(i + 1) == Some(&'-') {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            } else if c == '\'' {
                let mut literal = String::new();
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\'' {
                        if chars.get(i + 1) == Some(&'\'') {
                            literal.push('\'');
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    literal.push(chars[i]);
                    i += 1;
                }
                i += 1;
                tokens.push(Token::Str(literal));
            } else if c.is_alphanumeric() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                    i += 1;
                }
                tokens.push(Token::Word(chars[start..i].iter().collect::<String>().to_lowercase()));
            } else if c.is_whitespace() {
                i += 1;
            } else if c == '<' && chars.get(i + 1) == Some(&'>') {
                tokens.push(Token::Symbol("<>".into()));
                i += 2;
            } else {
                tokens.push(Token::Symbol(c.to_string()));
                i += 1;
            }
        }
        tokens
    }

    fn word(token: Option<&Token>, expected: &str) -> bool {
        matches!(token, Some(Token::Word(word)) if word == expected)
    }

    /// The operations the family's function names (`CASE op WHEN 'a', 'b'`, `op = 'a'`,
    /// `op <> 'a'`, `op [NOT] IN ('a', ...)`), and the patterns of its `op LIKE '...'`.
    fn sql_ops(family: &str, text: &str) -> (BTreeSet<String>, Vec<String>) {
        let head = format!("FUNCTION pgvs3.resp_{family}(op text");
        let start = text.find(&head).unwrap_or_else(|| panic!("{head} not found"));
        let end = text[start + 1..]
            .find("CREATE OR REPLACE FUNCTION")
            .map_or(text.len(), |end| start + 1 + end);
        let tokens = tokens(&text[start..end]);
        let (mut named, mut patterns) = (BTreeSet::new(), Vec::new());
        // Open CASE expressions and blocks: true for a `CASE op`.
        let mut open: Vec<bool> = Vec::new();
        for (k, token) in tokens.iter().enumerate() {
            let next = tokens.get(k + 1);
            match token {
                Token::Word(w) if w == "case" => open.push(word(next, "op")),
                Token::Word(w) if w == "begin" => open.push(false),
                Token::Word(w) if w == "end" && !word(next, "if") && !word(next, "loop") => {
                    open.pop();
                }
                Token::Word(w) if w == "when" && open.last() == Some(&true) => {
                    for token in &tokens[k + 1..] {
                        match token {
                            Token::Str(op) => named.insert(op.clone()),
                            Token::Symbol(comma) if comma == "," => continue,
                            _ => break,
                        };
                    }
                }
                Token::Word(w) if w == "op" => {
                    let mut j = k + 1;
                    match (tokens.get(j), tokens.get(j + 1)) {
                        (Some(Token::Symbol(cmp)), Some(Token::Str(op))) if cmp == "=" || cmp == "<>" => {
                            named.insert(op.clone());
                            continue;
                        }
                        (Some(Token::Word(like)), Some(Token::Str(pattern))) if like == "like" => {
                            patterns.push(pattern.clone());
                            continue;
                        }
                        _ => {}
                    }
                    if word(tokens.get(j), "not") {
                        j += 1;
                    }
                    if word(tokens.get(j), "in") {
                        for token in &tokens[j + 2..] {
                            match token {
                                Token::Str(op) => named.insert(op.clone()),
                                Token::Symbol(s) if s == ")" => break,
                                _ => continue,
                            };
                        }
                    }
                }
                _ => {}
            }
        }
        (named, patterns)
    }

    /// SQL LIKE with `%` only (what the functions use).
    fn like(pattern: &str, text: &str) -> bool {
        let parts: Vec<&str> = pattern.split('%').collect();
        let mut rest = text;
        for (i, part) in parts.iter().enumerate() {
            if i == 0 {
                let Some(after) = rest.strip_prefix(part) else {
                    return false;
                };
                rest = after;
            } else if i == parts.len() - 1 {
                return rest.ends_with(part);
            } else {
                let Some(at) = rest.find(part) else { return false };
                rest = &rest[at + part.len()..];
            }
        }
        rest.is_empty()
    }

    fn agree<O: SqlOp>(file: &str, text: &str) {
        let family = FAMILIES[O::FAMILY as usize];
        let (named, patterns) = sql_ops(family, text);
        let codes: BTreeSet<String> = O::ALL.iter().map(|op| op.code().to_owned()).collect();
        let unknown: Vec<&String> = named.difference(&codes).collect();
        assert!(
            unknown.is_empty(),
            "{file} switches on ops {unknown:?} that {} lacks",
            std::any::type_name::<O>()
        );
        let missing: Vec<&String> = codes
            .iter()
            .filter(|code| !named.contains(*code) && !patterns.iter().any(|pattern| like(pattern, code)))
            .collect();
        assert!(
            missing.is_empty(),
            "{} has ops {missing:?} that {file} never names",
            std::any::type_name::<O>()
        );
    }

    /// The operation enums and [`TypedCall::writes`] agree with the function files.
    #[test]
    fn ops_agree_with_the_sql_functions() {
        macro_rules! check {
            ($op:ty, $file:literal) => {{
                let text = include_str!(concat!("../../../../gateway/migrations/functions/", $file));
                agree::<$op>($file, text);
                writes_agree::<$op>(text);
            }};
        }
        check!(KeysOp, "resp_keys.sql");
        check!(HashOp, "resp_hash.sql");
        check!(SetOp, "resp_set.sql");
        check!(ZsetOp, "resp_zset.sql");
        check!(ListOp, "resp_list.sql");
        check!(StreamOp, "resp_stream.sql");
        check!(StreamGroupOp, "resp_stream_group.sql");
    }

    /// The operations a family file's `write boolean := op [NOT] IN (...)` names, and whether
    /// it says NOT (they are then the reads).
    fn sql_writes(family: &str, text: &str) -> (BTreeSet<String>, bool) {
        let head = format!("FUNCTION pgvs3.resp_{family}(op text");
        let start = text.find(&head).unwrap_or_else(|| panic!("{head} not found"));
        let tokens = tokens(&text[start..]);
        let at = tokens
            .windows(4)
            .position(|w| {
                word(Some(&w[0]), "write")
                    && word(Some(&w[1]), "boolean")
                    && w[2] == Token::Symbol(":".into())
                    && w[3] == Token::Symbol("=".into())
            })
            .unwrap_or_else(|| panic!("resp_{family} declares no `write boolean :=`"));
        let mut j = at + 4;
        assert!(word(tokens.get(j), "op"), "resp_{family}'s `write` is not a test of op");
        j += 1;
        let not = word(tokens.get(j), "not");
        if not {
            j += 1;
        }
        assert!(
            word(tokens.get(j), "in"),
            "resp_{family}'s `write` is not `op [NOT] IN (...)`"
        );
        let mut named = BTreeSet::new();
        for token in &tokens[j + 2..] {
            match token {
                Token::Str(op) => {
                    named.insert(op.clone());
                }
                Token::Symbol(s) if s == ")" => break,
                _ => {}
            }
        }
        (named, not)
    }

    /// [`TypedCall::writes`] answers the family file's `write` for every operation (every call
    /// of `resp_keys` writes: it has no `write`).
    fn writes_agree<O: SqlOp>(text: &str) {
        let family = FAMILIES[O::FAMILY as usize];
        if O::FAMILY == Family::Keys {
            for op in O::ALL {
                assert!(TypedCall::new(*op, vec!["k".to_owned()], Vec::new()).writes());
            }
            return;
        }
        let (named, not) = sql_writes(family, text);
        for op in O::ALL {
            let call = TypedCall::new(*op, vec!["k".to_owned()], Vec::new());
            assert_eq!(
                call.writes(),
                named.contains(op.code()) != not,
                "resp_{family}'s `write` and TypedCall::writes disagree on {}",
                op.code()
            );
        }
    }

    /// The error codes a function file answers: the literals assigned to `err` (`err := 'code'`,
    /// `err := CASE ... THEN 'code' ELSE 'code' END`) and what `pgvs3.resp_wrongtype()` returns.
    fn sql_error_codes(text: &str) -> BTreeSet<String> {
        let tokens = tokens(text);
        let mut codes = BTreeSet::new();
        for (k, token) in tokens.iter().enumerate() {
            let assigned = word(Some(token), "err")
                && tokens.get(k + 1) == Some(&Token::Symbol(":".into()))
                && tokens.get(k + 2) == Some(&Token::Symbol("=".into()));
            let wrongtype = word(Some(token), "pgvs3.resp_wrongtype") && word(tokens.get(k + 3), "returns");
            if !(assigned || wrongtype) {
                continue;
            }
            // A code is a value of the expression (after `:=`, THEN or ELSE), not an argument
            // of a call in it (`err := pgvs3.resp_check(..., 'h', ...)`) nor what a comparison
            // in it tests against (`CASE WHEN op = 'lmove' ...`).
            for (j, token) in tokens.iter().enumerate().skip(k + 1) {
                match token {
                    Token::Str(code)
                        if wrongtype
                            || (matches!(&tokens[j - 1], Token::Symbol(s) if s == "=")
                                && matches!(&tokens[j - 2], Token::Symbol(s) if s == ":"))
                            || word(Some(&tokens[j - 1]), "then")
                            || word(Some(&tokens[j - 1]), "else") =>
                    {
                        codes.insert(code.clone());
                        if wrongtype {
                            break;
                        }
                    }
                    Token::Symbol(end) if end == ";" => break,
                    _ => {}
                }
            }
        }
        codes
    }

    #[test]
    fn every_sql_error_code_has_redis_text_and_every_text_a_code() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../gateway/migrations/functions");
        let mut raised = BTreeSet::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.starts_with("resp_") && name.ends_with(".sql")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Redis's texts live in SQL_ERRORS only: no literal of a function file is one.
            for token in tokens(&text) {
                if let Token::Str(literal) = token {
                    let redis_text = ["ERR ", "WRONGTYPE", "NOGROUP", "BUSYGROUP"]
                        .iter()
                        .any(|prefix| literal.starts_with(prefix));
                    assert!(!redis_text, "{name} holds the Redis text {literal:?}: answer a code");
                }
            }
            raised.extend(sql_error_codes(&text));
        }
        let table: BTreeSet<String> = SQL_ERRORS.iter().map(|(code, _)| (*code).to_owned()).collect();
        assert_eq!(table.len(), SQL_ERRORS.len(), "a code twice in SQL_ERRORS");
        let unworded: Vec<&String> = raised.difference(&table).collect();
        assert!(
            unworded.is_empty(),
            "the SQL answers codes {unworded:?} without a text in SQL_ERRORS"
        );
        let unused: Vec<&String> = table.difference(&raised).collect();
        assert!(
            unused.is_empty(),
            "SQL_ERRORS has codes {unused:?} that no function answers"
        );
        assert_eq!(sql_error_text("wrongtype"), SQL_ERRORS[0].1);
        assert_eq!(sql_error_text("nonsense"), "ERR internal error code 'nonsense'");
    }

    #[test]
    fn the_error_code_finder_sees_assignments_and_cases() {
        let text = "CREATE OR REPLACE FUNCTION pgvs3.resp_wrongtype() RETURNS text AS $$ SELECT 'a' $$;
            BEGIN err := 'b'; x := 'not_a_code';
            CASE op WHEN 'op_name' THEN err := CASE WHEN y THEN 'c' ELSE 'd' END; END CASE;
            -- err := 'commented';
            err := pgvs3.resp_check(b, ks, '{}', 'h', true); END";
        assert_eq!(
            sql_error_codes(text).into_iter().collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn the_op_finder_sees_every_kind_of_arm() {
        let text = "CREATE OR REPLACE FUNCTION pgvs3.resp_hash(op text) AS $$
            DECLARE w boolean := op IN ('a', 'b'); BEGIN
            IF op = 'c' OR op <> 'd' OR op LIKE 'e%' THEN END IF;
            x := CASE kind WHEN 'not_an_op' THEN 1 END;
            -- WHEN 'commented' THEN
            CASE op WHEN 'f', 'g' THEN y := CASE WHEN op NOT IN ('h') THEN 1 END; WHEN 'i' THEN END CASE;
            END $$;";
        let (named, patterns) = sql_ops("hash", text);
        assert_eq!(
            named.into_iter().collect::<Vec<_>>(),
            ["a", "b", "c", "d", "f", "g", "h", "i"]
        );
        assert_eq!(patterns, ["e%"]);
        assert!(like("e%", "ex") && like("%store", "sinterstore") && !like("e%", "xe"));
    }
}
