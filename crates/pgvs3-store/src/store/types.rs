//! RESP's typed keys (hashes, sets, sorted sets, lists, streams) in the store: each command is one call
//! of its family's SQL function (gateway/migrations/functions/resp_*.sql), made here with the
//! bucket's namespace so that the function knows which of its keys are strings.

use bytes::Bytes;
use tokio_postgres::types::ToSql;

use super::kv::UnderWay;
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

/// One command as its function takes it: the operation, its keys, and its arguments (bytes,
/// and the integers and floats the gateway parsed).
#[derive(Debug, Clone)]
pub struct TypedCall {
    pub family: Family,
    pub op: &'static str,
    pub keys: Vec<String>,
    pub args: Vec<Bytes>,
    pub ints: Vec<Option<i64>>,
    pub floats: Vec<f64>,
    /// Bytes the call's reply may take (`None`: any). PostgreSQL drops the elements of a
    /// larger one before they are sent, so a whole-collection read (LRANGE 0 -1 of millions of
    /// elements) never comes into the gateway's memory; its row says `cut` instead.
    pub reply_limit: Option<i64>,
}

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

/// What a call answered: a Redis error, or its integer, strings (`None`: nil) and scores.
#[derive(Debug, Clone, Default)]
pub struct TypedRow {
    pub err: Option<String>,
    pub n: Option<i64>,
    pub items: Vec<Option<Bytes>>,
    pub scores: Vec<Option<f64>>,
    /// The reply passed the call's `reply_limit`: its elements were left out.
    pub cut: Option<Cut>,
}

/// The statements of one namespace: a call per family, and the typed keys' share of the
/// keyspace statements.
#[derive(Debug)]
pub(super) struct TypedSql {
    calls: [String; 7],
}

impl TypedSql {
    pub(super) fn new(ns: &str) -> TypedSql {
        // A reply is cut ($7) when its elements surely encode to more than the limit: an
        // element of an array datum takes at most 7 bytes besides its data (a 4-byte length and
        // alignment) where its reply takes at least 5, and a float8 score 8 where its reply
        // takes at least 3, so half the datum (and 3 bytes an element) is below the reply's
        // size (`Cut::least_reply_bytes`). What is cut is never sent, only its size; what is
        // not is at most about twice the limit.
        let call = |family: &str| {
            format!(
                "SELECT err, n, CASE WHEN cut THEN NULL ELSE items END, CASE WHEN cut THEN NULL ELSE scores END,
                        CASE WHEN cut THEN bytes END, CASE WHEN cut THEN elements END
                   FROM (SELECT *, coalesce($7::bigint < bytes / 2 - 64 OR $7::bigint < 3 * elements, false) AS cut
                           FROM (SELECT r.err, r.n, r.items, r.scores,
                                        coalesce(pg_column_size(r.items), 0)::bigint
                                          + coalesce(pg_column_size(r.scores), 0) AS bytes,
                                        coalesce(cardinality(r.items), 0)::bigint
                                          + coalesce(cardinality(r.scores), 0) AS elements
                                   FROM pgvs3.resp_{family}($1, $2, $3,
                                        ARRAY(SELECT key FROM {ns}.objects WHERE bucket_id = $2 AND key = ANY($3)
                                               AND (expires_at IS NULL OR expires_at > clock_timestamp())),
                                        $4, $5, $6) r) sized) called"
            )
        };
        TypedSql {
            calls: FAMILIES.map(call),
        }
    }
}

/// The reaper's statement for expired typed keys (their elements go with them).
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM pgvs3.resp_keys WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM pgvs3.resp_keys WHERE expires_at <= clock_timestamp() LIMIT $1))";

/// Sends the calls on `client` one after the other without waiting between them (one round
/// trip), with `before` sent first and `after` last; PostgreSQL runs them in that order.
pub(super) async fn send_calls<B, A>(
    client: &deadpool_postgres::Object,
    bucket: &BucketInfo,
    calls: &[&TypedCall],
    before: B,
    after: A,
) -> StoreResult<Vec<TypedRow>>
where
    B: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
    A: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    let mut statements: [Option<tokio_postgres::Statement>; 7] = Default::default();
    for call in calls {
        let index = call.family as usize;
        if statements[index].is_none() {
            statements[index] = Some(client.prepare_cached(&bucket.sql.types.calls[index]).await?);
        }
    }
    let args: Vec<Vec<&[u8]>> = calls
        .iter()
        .map(|call| call.args.iter().map(|arg| &arg[..]).collect())
        .collect();
    let params: Vec<[&(dyn ToSql + Sync); 7]> = calls
        .iter()
        .zip(&args)
        .map(|(call, args)| -> [&(dyn ToSql + Sync); 7] {
            [
                &call.op,
                &bucket.id,
                &call.keys,
                args,
                &call.ints,
                &call.floats,
                &call.reply_limit,
            ]
        })
        .collect();
    let queries = calls.iter().zip(&params).map(|(call, params)| {
        let statement = statements[call.family as usize].as_ref().expect("prepared above");
        client.query_one(statement, params)
    });
    let (_, rows, _) = futures::try_join!(before, futures::future::try_join_all(queries), after)?;
    Ok(rows
        .iter()
        .map(|row| TypedRow {
            err: row.get(0),
            n: row.get(1),
            items: row
                .get::<_, Option<Vec<Option<Vec<u8>>>>>(2)
                .unwrap_or_default()
                .into_iter()
                .map(|item| item.map(Bytes::from))
                .collect(),
            scores: row.get::<_, Option<Vec<Option<f64>>>>(3).unwrap_or_default(),
            cut: row.get::<_, Option<i64>>(4).map(|bytes| Cut {
                datum_bytes: bytes.max(0) as u64,
                elements: row.get::<_, Option<i64>>(5).unwrap_or(0).max(0) as u64,
            }),
        })
        .collect())
}

impl Store {
    /// Runs typed reads in one round trip, in a REPEATABLE READ transaction of their own: in
    /// READ COMMITTED every statement of a PL/pgSQL function takes a new snapshot, so a read
    /// racing an overwrite of its key by another type (SET over a set) could pass the type check
    /// in one snapshot and miss the members in the next, answering an empty set that never
    /// existed (found by the history checker, seed 422561153). One snapshot for the whole read;
    /// a transaction that only reads never fails to serialize.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_typed_read", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_typed_read(&self, bucket: &BucketInfo, calls: &[&TypedCall]) -> StoreResult<Vec<TypedRow>> {
        let under_way = UnderWay::new(self.client().await?, self.cancel.as_ref());
        let client = under_way.client();
        // Sent with the calls on the first poll: still one round trip.
        let begin = client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ");
        let rows = send_calls(client, bucket, calls, begin, client.batch_execute("COMMIT")).await;
        under_way.done();
        rows
    }
}

impl KvBatch {
    /// Runs typed calls inside the batch, after whatever the batch has changed so far (which is
    /// written first); `commit` ends the batch with them, in the same round trip.
    pub async fn typed(&mut self, calls: &[&TypedCall], commit: bool) -> StoreResult<Vec<TypedRow>> {
        self.write_pending().await?;
        self.typed_calls(calls, commit).await
    }
}
