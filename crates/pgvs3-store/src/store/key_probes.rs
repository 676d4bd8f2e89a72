//! Rows of a bucket's keys named by an array, read one primary-key probe per key.
//!
//! `bucket_id = $1 AND key = ANY($2)` looks like one index probe per key, but a statement the
//! gateway prepares runs, after its fifth execution, on a generic plan, made without the array,
//! whose length PostgreSQL then guesses (ten). While the table is small or has never been
//! analyzed, PostgreSQL also guesses that a bucket holds a handful of rows, and then prefers
//! to read the whole bucket through the index's first column and filter the keys: that plan
//! stays cached on the connection as the bucket grows. Measured in a BullMQ run on a fresh data
//! directory (session 37): the keyspace's typed probe read 25 buffers, every index entry of the
//! bucket dead or alive, where one key's probe reads 3. Here each key is looked up by a
//! subquery PostgreSQL does not merge into a join (`OFFSET 0` over a `LATERAL` reference), so
//! its only index plan is the probe of both columns; no guess about the bucket's size or the
//! array's length can make it walk the bucket.
//!
//! A statement whose array names its keys this way would cost, in a generic plan, ten probes
//! (the array's length guessed), and a plan made for the one or two keys of one execution
//! looks cheaper: PostgreSQL then plans every execution anew (a typed call's string keys,
//! session 37: 9,020 plans in 9,017 executions, 70 µs each; a typed read's expired keys,
//! session 38: 5,032 plans in 5,000 HGETs, 470 µs each, more than the rest of the read). So
//! the keys are taken from the array under `LIMIT cardinality(keys)`, which never cuts but
//! counts, in a generic plan, one key: the generic plan is as cheap as a custom one and kept.

/// A `FROM` item of the rows of `table` (as `alias`, all its columns) in bucket `bucket` whose
/// key is one of the text array `keys` (SQL expressions, usually parameters), in no particular
/// order: a row per key as often as the array names it.
pub fn rows_of_keys(table: &str, alias: &str, bucket: &str, keys: &str) -> String {
    format!(
        "(SELECT {alias}.* FROM {wanted},
                LATERAL (SELECT * FROM {table} AS {alias}
                          WHERE {alias}.bucket_id = {bucket} AND {alias}.key = wanted.k OFFSET 0) AS {alias}) AS {alias}",
        wanted = named_keys(keys, "wanted"),
    )
}

/// A `USING` item of a `DELETE` or `UPDATE` of the named keys' rows: each key of the text array
/// `keys`, as `{alias}.k`, for a join by `key = {alias}.k` beside the bucket's id (a row named
/// twice is deleted or updated once). Under the limit (see the module's doc) PostgreSQL counts
/// it as one row, so it probes the primary key for each key; joined this way, a row another
/// transaction changed meanwhile is judged again by its key, as `key = ANY(keys)` judged it.
pub(crate) fn named_keys(keys: &str, alias: &str) -> String {
    format!("(SELECT k FROM unnest({keys}::text[]) AS k LIMIT cardinality({keys}::text[])) AS {alias}")
}

#[cfg(test)]
mod tests {
    use super::rows_of_keys;

    #[test]
    fn each_key_is_probed_by_both_columns() {
        let from = rows_of_keys("pgvs3.resp_keys", "r", "$1", "$2");
        assert!(
            from.contains("r.bucket_id = $1 AND r.key = wanted.k OFFSET 0"),
            "{from}"
        );
        assert!(
            from.contains("FROM (SELECT k FROM unnest($2::text[]) AS k LIMIT cardinality($2::text[])) AS wanted,"),
            "{from}"
        );
        assert!(from.ends_with("AS r"), "{from}");
    }
}
