//! The keyspace's SQL, one set per namespace: loads, locks, writes and keyspace-wide scans.

use std::sync::atomic::AtomicBool;

use super::FINE_LOCK_LIMIT;
use crate::store::key_probes::{named_keys, rows_of_keys};

/// The keyspace SQL of one namespace.
#[derive(Debug)]
pub(in crate::store) struct KvSql {
    /// Some bucket of the namespace has typed keys (sticky; see the module's doc). Until then
    /// the `*_strings` statements serve.
    pub(super) typed: AtomicBool,
    pub(super) load: String,
    pub(super) load_one: String,
    pub(super) load_strings: String,
    pub(super) load_one_strings: String,
    pub(super) delete: String,
    pub(super) mark_deleted: String,
    pub(super) lock: String,
    pub(super) lock_keyspace: String,
    await_key_writers: String,
    pub(super) try_lock: String,
    /// See [`borrowed_sql`].
    pub(super) lock_borrowed: String,
    pub(super) check_borrowed: String,
    pub(super) upsert: Upsert,
    pub(super) upsert_plain: Upsert,
    pub(super) upsert_strings: Upsert,
    pub(super) set_expiry: String,
    pub(super) delete_expired_strings: String,
    pub(super) scan: String,
    pub(super) count: String,
    pub(super) random: String,
    pub(super) flush: String,
}

/// The clock row's column saying whether the bucket keeps S3 versions, as committed (NULL when
/// the bucket is gone): a write batch judges TTLs by it ([`KvBatch::versioned`]), not by the
/// catalog cache, which may not have seen a change yet.
///
/// [`KvBatch::versioned`]: super::KvBatch::versioned
const VERSIONED: &str = "(SELECT versioning IS NOT NULL FROM pgvs3.buckets WHERE id = $1) AS versioned";

/// Which setting of the keyspace's encoding parameters the load saw (the `xmin` of their row,
/// which every CONFIG SET of one replaces; NULL while none was ever set): see
/// [`KvBatch::encodings`](super::KvBatch::encodings).
pub(crate) const ENCODINGS: &str =
    "(SELECT xmin::text FROM pgvs3.resp_encoding_parameters WHERE bucket_id = $1) AS encodings";

/// The batch's clock. The first load of a batch's transaction fixes `pgvs3.resp_now`
/// (transaction-local), which its later loads and its typed calls (`pgvs3.resp_now()`,
/// functions/resp_keys.sql) read: a script or MULTI/EXEC judges every key at one instant,
/// as Redis 7.0 freezes its clock for them (a script that set a TTL and ran past it saw its
/// hash empty in HGET, then a new one made by HSET, without its TTL, where Redis answers
/// the values and the key expires after). The load runs after the batch's locks, so a key that
/// expired while the batch waited for them is still judged by the clock after the wait. A read
/// outside a transaction fixes nothing: each statement has its own.
const BATCH_CLOCK: &str = "set_config('pgvs3.resp_now', coalesce(nullif(current_setting('pgvs3.resp_now', true), ''), clock_timestamp()::text), true)::timestamptz";

/// The keys a load reads: one (`$2` is text) or several (`$2` is a text array).
#[derive(Debug, Clone, Copy)]
enum Named {
    One,
    Many,
}

impl Named {
    /// The rows of the named keys in bucket `$1` of `table`, as the `FROM` item `alias`, and
    /// the condition that joins them.
    fn rows(self, table: &str, alias: &str) -> (String, String) {
        match self {
            Named::One => (
                format!("{table} {alias}"),
                format!("{alias}.bucket_id = $1 AND {alias}.key = $2"),
            ),
            Named::Many => (rows_of_keys(table, alias, "$1", "$2"), "true".to_owned()),
        }
    }
}

/// Strings and typed keys: a typed key's version is its `version` counter (WATCH compares it),
/// its type the tenth column (NULL for a string). An
/// expired typed row comes too (its expiry at or before the row's clock): the key is absent,
/// but a string written over it must delete the row, which could otherwise come back to life
/// with an EXPIRE or PERSIST of the string. An expired string row comes as well and is taken as
/// absent (typed writes delete it, see `delete_expired_strings`): a read that meets an expired
/// row waits for the key's writer first ([`KvBatch::load`](super::KvBatch::load)). Every row
/// is judged by one clock, the batch's: a key alive by an earlier one and expired by the
/// batch's would be written as alive and then passed over by `set_expiry`.
fn load_sql(ns: &str, named: Named) -> String {
    let (objects, objects_named) = named.rows(&format!("{ns}.objects"), "o");
    let (typed, typed_named) = named.rows("pgvs3.resp_keys", "r");
    format!(
        "WITH t AS MATERIALIZED (SELECT {BATCH_CLOCK} AS now, {VERSIONED}, {ENCODINGS})
         SELECT o.key, o.size, o.etag, o.last_modified, o.expires_at, o.inline, o.body_id, t.now,
                o.meta ? 'pc' AS multipart, NULL::\"char\" AS type, o.meta ? 'se' AS sealed,
                o.meta ->> 're' AS form, t.versioned, t.encodings
           FROM t
           LEFT JOIN {objects} ON {objects_named}
         UNION ALL
         SELECT r.key, 0, 't' || r.version, to_timestamp(0), r.expires_at, NULL, NULL, t.now,
                false, r.type, false, NULL, t.versioned, t.encodings
           FROM t, {typed}
          WHERE {typed_named}"
    )
}

/// A script run's borrowed keys (a working set answered their calls without loading them):
/// their locks, tried (`lock_borrowed`), then, in the next statement (so under the locks, with
/// a snapshot taken after them), whether each is still as the run took it (`check_borrowed`,
/// see [`Borrowed`](crate::store::Borrowed)): `$3` the typed version it took the key at, or
/// `$4` the string's value inline in its row with `$5` its expiry and `$6` its form's mark, or
/// neither for a key taken as absent; the live rows of the name, judged by the batch's clock,
/// must be that one alone, or none. Either raises (`pgvs3.resp_expect`) when not, so that the
/// statements pipelined behind fail and the run starts over without speculation, as for any
/// call answered otherwise than predicted.
fn borrowed_sql(ns: &str) -> (String, String) {
    let lock = "SELECT pgvs3.resp_expect(bool_and(pg_try_advisory_xact_lock($1::int4, h)))
                  FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k) AS keys"
        .to_owned();
    let check = format!(
        "WITH l AS ({load})
         SELECT pgvs3.resp_expect(bool_and(c.ok))
           FROM (SELECT count(l.key) = CASE WHEN b.v IS NULL AND b.s IS NULL THEN 0 ELSE 1 END
                        AND count(l.key) = count(l.key) FILTER (WHERE
                            CASE WHEN b.v IS NOT NULL THEN l.etag = b.v
                                 ELSE l.type IS NULL AND NOT l.sealed AND l.inline = b.s
                                      AND l.expires_at IS NOT DISTINCT FROM b.x
                                      AND l.form IS NOT DISTINCT FROM b.f END) AS ok
                   FROM unnest($2::text[], $3::text[], $4::bytea[], $5::timestamptz[], $6::text[]) AS b(k, v, s, x, f)
                   LEFT JOIN l ON l.key = b.k AND (l.expires_at IS NULL OR l.expires_at > l.now)
                  GROUP BY b.k, b.v, b.s, b.x, b.f) c",
        load = load_sql(ns, Named::Many)
    );
    (lock, check)
}

/// Strings only, for a keyspace without typed keys; the last column says whether the bucket has
/// typed keys after all (then the load is done again with [`load_sql`]).
fn load_strings_sql(ns: &str, named: Named) -> String {
    let (objects, objects_named) = named.rows(&format!("{ns}.objects"), "o");
    format!(
        "SELECT o.key, o.size, o.etag, o.last_modified, o.expires_at, o.inline, o.body_id, t.now,
                o.meta ? 'pc' AS multipart, NULL::\"char\" AS type, o.meta ? 'se' AS sealed,
                o.meta ->> 're' AS form, t.versioned, t.encodings, t.typed
           FROM (SELECT {BATCH_CLOCK} AS now, {VERSIONED}, {ENCODINGS},
                        EXISTS (SELECT 1 FROM pgvs3.resp_typed WHERE bucket_id = $1) AS typed) t
           LEFT JOIN {objects} ON {objects_named}"
    )
}

/// A string upsert in its two shapes: for values all written whole, and for a batch that changed
/// some in place ([`StringForm`](super::StringForm)), whose `$9` marks each key's form. The
/// plain shape, SET's, carries nothing per key for forms.
#[derive(Debug)]
pub(super) struct Upsert {
    pub(super) whole: String,
    pub(super) marked: String,
}

impl Upsert {
    fn new(ns: &str, typed: &str, guard: &str) -> Upsert {
        Upsert {
            whole: upsert_sql(ns, typed, guard, false),
            marked: upsert_sql(ns, typed, guard, true),
        }
    }
}

/// The string upsert; `typed` is what goes before it about typed keys of the same names. `$8`
/// is the new versions' metadata (their object lock retention, else empty); with `marked`,
/// `$9` has each key's `re` mark (NULL for a value written whole). In a versioned bucket
/// (as committed, not as the catalog cache has it) a write is a new version, numbered as an S3
/// PUT's is; the objects_keep_version trigger keeps the version it replaces. A version takes no
/// TTL (one kept from before the bucket was versioned included): at its expiry the reaper would
/// remove it for good.
fn upsert_sql(ns: &str, typed: &str, guard: &str, marked: bool) -> String {
    let (meta, marks, mark) = match marked {
        true => (
            "CASE WHEN u.mark IS NULL THEN $8::jsonb ELSE $8::jsonb || jsonb_build_object('re', u.mark) END",
            ", $9::text[]",
            ", mark",
        ),
        false => ("$8::jsonb", "", ""),
    };
    // A subquery with a volatile output is not flattened, so each key draws one number.
    format!(
        "{typed}
         INSERT INTO {ns}.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id, expires_at,
                                        version_seq, version_id)
         SELECT $1, u.key, u.size, u.etag, clock_timestamp(), {meta}, u.inline, u.body_id,
                CASE WHEN u.seq IS NULL THEN u.expires_at END, u.seq,
                CASE WHEN u.enabled THEN lpad(to_hex(u.seq), 16, '0') END
           FROM (SELECT u.*, b.versioning = 'Enabled' AS enabled,
                        CASE WHEN b.versioning IS NOT NULL THEN nextval('{ns}.version_seqs') END AS seq
                   FROM pgvs3.buckets b,
                        unnest($2::text[], $3::int8[], $4::text[], $5::bytea[], $6::int8[], $7::timestamptz[]{marks})
                        AS u(key, size, etag, inline, body_id, expires_at{mark})
                  WHERE b.id = $1{guard}) u
         ON CONFLICT (bucket_id, key) DO UPDATE
            SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                expires_at = EXCLUDED.expires_at, {redrawn}",
        redrawn = crate::store::objects::version_drawn_under_lock(
            ns,
            "EXCLUDED.version_seq IS NOT NULL",
            "EXCLUDED.version_id IS NOT NULL"
        ),
    )
}

impl KvSql {
    pub(in crate::store) fn new(ns: &str) -> KvSql {
        let (lock_borrowed, check_borrowed) = borrowed_sql(ns);
        KvSql {
            lock_borrowed,
            check_borrowed,
            // The clock row makes the statement answer even when no key exists, and gives the
            // batch the database's notion of "now" for TTLs.
            load: load_sql(ns, Named::Many),
            // One key is the common case. Its own statement lets PostgreSQL keep one generic plan
            // (a unique index probe) instead of planning every execution, as it must for ANY($2):
            // planning was a quarter of the server's time on single GETs.
            load_one: load_sql(ns, Named::One),
            load_strings: load_strings_sql(ns, Named::Many),
            load_one_strings: load_strings_sql(ns, Named::One),
            typed: AtomicBool::new(false),
            delete: delete_sql(ns),
            mark_deleted: mark_deleted_sql(ns),
            // Two-int advisory locks live apart from the single-bigint ones the gateway uses
            // elsewhere. Hash collisions only serialize a little more.
            lock: "SELECT count(pg_advisory_xact_lock($1::int4, h))
                     FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY h) AS sorted"
                .to_owned(),
            // The single-bigint lock space, negated bucket ids: apart from the gateway's other
            // (positive) advisory locks. (A write batch takes it with its bucket's write lock:
            // kv/write.rs `HOLD_KEYSPACE`.)
            lock_keyspace: "SELECT pg_advisory_xact_lock(-$1::int8)".to_owned(),
            // A read's wait for the writers of keys it found expired (see `Waited`): shared, in
            // the writers' order (keyspace, then keys), held only for this statement.
            await_key_writers: "SELECT pg_advisory_xact_lock_shared(-$1::int8),
                                   (SELECT count(pg_advisory_xact_lock_shared($2::int4, h))
                                      FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($3::text[]) AS k
                                             ORDER BY h) AS sorted)"
                .to_owned(),
            // Out of the sorted order, so never waiting: see `KvBatch::try_lock`.
            try_lock: "SELECT bool_and(pg_try_advisory_xact_lock($1::int4, h)) AS locked
                         FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k) AS keys"
                .to_owned(),
            // A string written over a typed key replaces it.
            upsert: Upsert::new(
                ns,
                &format!(
                    "WITH typed AS (DELETE FROM pgvs3.resp_keys r USING {} WHERE r.bucket_id = $1 AND r.key = n.k)",
                    named_keys("$2", "n")
                ),
                "",
            ),
            // Keys known to have no typed row (loaded under the batch's locks).
            upsert_plain: Upsert::new(ns, "", ""),
            // Keys not loaded, in a keyspace believed to have no typed keys: the bucket's
            // `resp_typed` row, if any, raises (and the batch is written again with `upsert`).
            upsert_strings: Upsert::new(
                ns,
                "",
                "
            AND NOT EXISTS (SELECT 1 FROM pgvs3.resp_typed WHERE bucket_id = $1 AND pgvs3.resp_typed_conflict())",
            ),
            set_expiry: set_expiry_sql(ns),
            // Before a write batch's typed calls: the expired strings among their keys, which a
            // typed key made there must not leave behind (see `set_expiry`). The reaper's
            // statement, for these keys now.
            delete_expired_strings: format!(
                "DELETE FROM {ns}.objects o USING {named}
                  WHERE o.bucket_id = $1 AND o.key = n.k AND o.expires_at <= pgvs3.resp_now()",
                named = named_keys("$2", "n")
            ),
            scan: scan_sql(ns),
            count: count_sql(ns),
            random: random_sql(ns),
            flush: flush_sql(ns),
        }
    }
}

/// In a versioned bucket (as committed) a deleted key's current version is kept as S3's DELETE
/// keeps it: noncurrent (Enabled), or gone when it is the null version of a Suspended bucket,
/// whose noncurrent null version goes too. The marker follows in [`mark_deleted_sql`], a
/// statement of its own: a Suspended bucket's new null marker must not meet the null version
/// this one deletes in the same statement.
fn delete_sql(ns: &str) -> String {
    format!(
        "WITH typed AS (DELETE FROM pgvs3.resp_keys r USING {named} WHERE r.bucket_id = $1 AND r.key = n.k),
              gone AS (DELETE FROM {ns}.objects o USING {named} WHERE o.bucket_id = $1 AND o.key = n.k RETURNING o.*),
              dropped AS (DELETE FROM {ns}.versions v USING pgvs3.buckets b, {named}
                           WHERE b.id = $1 AND b.versioning = 'Suspended'
                             AND v.bucket_id = $1 AND v.key = n.k AND v.version_id = 'null'
                          RETURNING v.body_id),
              retired AS (INSERT INTO {ns}.retired_bodies (body_id)
                          SELECT body_id FROM dropped WHERE body_id IS NOT NULL ON CONFLICT DO NOTHING)
         INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta,
                                    inline, body_id)
         SELECT g.bucket_id, g.key, coalesce(g.version_id, 'null'), g.version_seq, g.size, g.etag,
                g.last_modified, g.meta, g.inline, g.body_id
           FROM gone g JOIN pgvs3.buckets b ON b.id = $1
          WHERE b.versioning = 'Enabled' OR (b.versioning = 'Suspended' AND g.version_id IS NOT NULL)",
        named = named_keys("$2", "n"),
    )
}

/// The delete markers of deleted strings, in a versioned bucket: a new version id when
/// Enabled, the null version when Suspended (as S3's DELETE writes them).
fn mark_deleted_sql(ns: &str) -> String {
    format!(
        "INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, is_delete_marker, size, etag,
                                    last_modified)
         SELECT $1, m.key, CASE WHEN m.enabled THEN lpad(to_hex(m.seq), 16, '0') ELSE 'null' END, m.seq, true,
                0, '', clock_timestamp()
           FROM (SELECT k AS key, b.versioning = 'Enabled' AS enabled, nextval('{ns}.version_seqs') AS seq
                   FROM pgvs3.buckets b, unnest($2::text[]) AS k
                  WHERE b.id = $1 AND b.versioning IS NOT NULL) m"
    )
}

/// Only rows that were live when the batch loaded them (`$4`, its clock then): an expired row
/// of the other table under the same name stays expired, where setting its expiry would bring
/// its old value back over the live key. Never an S3 version: a TTL is refused in a versioned
/// bucket (as committed, see [`VERSIONED`]); the condition on the bucket's state stays as a
/// guard, since the reaper would delete a version for good.
fn set_expiry_sql(ns: &str) -> String {
    format!(
        "WITH typed AS (
             UPDATE pgvs3.resp_keys r SET expires_at = u.expires_at, version = nextval('pgvs3.resp_key_versions')
               FROM unnest($2::text[], $3::timestamptz[]) AS u(key, expires_at)
              WHERE r.bucket_id = $1 AND r.key = u.key AND (r.expires_at IS NULL OR r.expires_at > $4))
         UPDATE {ns}.objects o SET expires_at = u.expires_at
           FROM unnest($2::text[], $3::timestamptz[]) AS u(key, expires_at)
          WHERE o.bucket_id = $1 AND o.key = u.key AND (o.expires_at IS NULL OR o.expires_at > $4)
            AND o.version_seq IS NULL AND NOT EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = $1 AND versioning IS NOT NULL)"
    )
}

/// The condition of a live row, for the keyspace-wide statements: by the batch's clock inside
/// one (MULTI/EXEC's KEYS, DBSIZE...: see [`BATCH_CLOCK`]).
const LIVE: &str = "(expires_at IS NULL OR expires_at > pgvs3.resp_now())";

/// Both kinds of key in one order; a name that is both (an S3 write over a typed key) is the
/// string, as loads have it.
fn scan_sql(ns: &str) -> String {
    format!(
        "SELECT DISTINCT ON (key) key, t FROM (
            (SELECT key, NULL::\"char\" AS t FROM {ns}.objects
              WHERE bucket_id = $1 AND key > $2 AND key >= $3 AND starts_with(key, $3) AND {LIVE}
              ORDER BY key LIMIT $4)
            UNION ALL
            (SELECT key, type FROM pgvs3.resp_keys
              WHERE bucket_id = $1 AND key > $2 AND key >= $3 AND starts_with(key, $3) AND {LIVE}
              ORDER BY key LIMIT $4)) u
          ORDER BY key, t IS NOT NULL LIMIT $4"
    )
}

fn count_sql(ns: &str) -> String {
    format!(
        "SELECT o.keys + r.keys AS keys, o.expiring + r.expiring AS expiring
           FROM (SELECT count(*) AS keys, count(expires_at) AS expiring FROM {ns}.objects
                  WHERE bucket_id = $1 AND {LIVE}) o,
                (SELECT count(*) AS keys, count(expires_at) AS expiring FROM pgvs3.resp_keys
                  WHERE bucket_id = $1 AND {LIVE}) r"
    )
}

fn random_sql(ns: &str) -> String {
    format!(
        "SELECT key FROM (SELECT key FROM {ns}.objects WHERE bucket_id = $1 AND {LIVE}
                          UNION ALL
                          SELECT key FROM pgvs3.resp_keys WHERE bucket_id = $1 AND {LIVE}) k
          ORDER BY random() LIMIT 1"
    )
}

/// Never the objects of a versioned bucket (FLUSHDB refuses it; this holds should the catalog
/// cache not know yet): deleting them would remove versions for good. Nor a row a versioned
/// write made while the statement waited for it (`version_seq`).
fn flush_sql(ns: &str) -> String {
    format!(
        "WITH typed AS (DELETE FROM pgvs3.resp_keys WHERE bucket_id = $1)
         DELETE FROM {ns}.objects WHERE bucket_id = $1 AND version_seq IS NULL
            AND NOT EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = $1 AND versioning IS NOT NULL)"
    )
}

impl KvSql {
    /// The statement that waits for the writers of `count` keys (see [`await_writers`]): a
    /// shared lock per key, held for the statement; past [`FINE_LOCK_LIMIT`] keys the
    /// keyspace's lock exclusively for a moment instead, which waits for every writer of the
    /// keyspace, so that no read (an MGET or WATCH of thousands of keys) can exhaust
    /// PostgreSQL's lock table.
    ///
    /// [`await_writers`]: super::load::await_writers
    pub(in crate::store) fn await_writers(&self, count: usize) -> &str {
        match count > FINE_LOCK_LIMIT {
            true => &self.lock_keyspace,
            false => &self.await_key_writers,
        }
    }
}
