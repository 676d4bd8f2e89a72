//! The fleet-wide RESP state kept in catalog tables: Redis Functions libraries, each keyspace's
//! notification setting and encoding parameters, and the count of keys the reaper expired.

use super::write::NOTIFY;
use crate::pg::checkout::checkout;
use crate::store::{Catalog, StoreResult};

/// A library of Redis Functions (FUNCTION LOAD), kept in `pgvs3.resp_function_libraries`: one
/// set of libraries per keyspace (bucket), as Redis keeps one per server, so that tenants
/// neither see nor run each other's (layout v55).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionLibrary {
    pub name: String,
    /// The library's source, its `#!lua name=...` line included.
    pub code: String,
    /// What it registered, in order: name, flags, description.
    pub functions: Vec<RegisteredFunction>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredFunction {
    pub name: String,
    pub flags: Vec<String>,
    pub description: Option<String>,
}

/// Why libraries were not stored.
#[derive(Debug, Clone, PartialEq)]
pub enum LibraryRefusal {
    /// A library of this name exists (and the policy is not to replace it).
    Exists(String),
    /// Another library has a function of this name.
    FunctionExists(String),
    /// The keyspace would hold more libraries than it may.
    TooMany,
}

/// What storing libraries does with those already there (FUNCTION LOAD [REPLACE], FUNCTION
/// RESTORE's APPEND, REPLACE and FLUSH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryPolicy {
    /// A library whose name is taken is refused.
    Append,
    /// A library whose name is taken replaces the one there.
    Replace,
    /// Every library there goes first.
    Flush,
}

/// Redis's encoding parameters that pgvs3 keeps per keyspace, in
/// `pgvs3.resp_encoding_parameters` (0051_resp_encodings.sql): the limits within which a hash,
/// set or sorted set is in its small encoding (functions/resp_keys.sql `resp_grown`), and how
/// many entries a stream's node takes (0060_resp_stream_nodes.sql), which XADD's and XTRIM's
/// `~` trims by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingParameter {
    HashEntries,
    HashValue,
    SetEntries,
    ZsetEntries,
    ZsetValue,
    StreamEntries,
}

impl EncodingParameter {
    pub const ALL: [EncodingParameter; 6] = [
        EncodingParameter::HashEntries,
        EncodingParameter::HashValue,
        EncodingParameter::SetEntries,
        EncodingParameter::ZsetEntries,
        EncodingParameter::ZsetValue,
        EncodingParameter::StreamEntries,
    ];

    /// Its column, and `pgvs3.resp_encodings`' output of the same name.
    fn column(self) -> &'static str {
        match self {
            EncodingParameter::HashEntries => "hash_entries",
            EncodingParameter::HashValue => "hash_value",
            EncodingParameter::SetEntries => "set_entries",
            EncodingParameter::ZsetEntries => "zset_entries",
            EncodingParameter::ZsetValue => "zset_value",
            EncodingParameter::StreamEntries => "stream_entries",
        }
    }
}

impl Catalog {
    /// The encoding parameters of `bucket`'s keyspace, in [`EncodingParameter::ALL`]'s order:
    /// Redis 7.0.15's defaults where none was set (or the bucket does not exist yet).
    pub async fn encoding_parameters(&self, bucket: &str) -> StoreResult<Vec<i64>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_one(
                "SELECT * FROM pgvs3.resp_encodings((SELECT id FROM pgvs3.buckets WHERE name = $1))",
                &[&bucket],
            )
            .await?;
        Ok(EncodingParameter::ALL
            .iter()
            .map(|parameter| row.get::<_, i64>(parameter.column()))
            .collect())
    }

    /// Sets some of them, in one statement: what the keyspace's writes judge by from then on.
    /// Keys already in their large encoding stay in it, as in Redis.
    pub async fn set_encoding_parameters(&self, bucket: &str, values: &[(EncodingParameter, i64)]) -> StoreResult<()> {
        if values.is_empty() {
            return Ok(());
        }
        let columns: Vec<&str> = values.iter().map(|(parameter, _)| parameter.column()).collect();
        let placeholders: Vec<String> = (0..values.len()).map(|i| format!("${}::bigint", i + 2)).collect();
        let updates: Vec<String> = columns
            .iter()
            .map(|column| format!("{column} = excluded.{column}"))
            .collect();
        let statement = format!(
            "INSERT INTO pgvs3.resp_encoding_parameters (bucket_id, {})
             SELECT id, {} FROM pgvs3.buckets WHERE name = $1
             ON CONFLICT (bucket_id) DO UPDATE SET {}",
            columns.join(", "),
            placeholders.join(", "),
            updates.join(", ")
        );
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&bucket];
        params.extend(
            values
                .iter()
                .map(|(_, value)| value as &(dyn tokio_postgres::types::ToSql + Sync)),
        );
        let client = checkout(self.pool()).await?;
        client.execute(&statement, &params).await?;
        Ok(())
    }

    /// Every library of keyspace `bucket_id`, by name.
    pub async fn function_libraries(&self, bucket_id: i64) -> StoreResult<Vec<FunctionLibrary>> {
        let client = checkout(self.pool()).await?;
        let rows = client
            .query(
                "SELECT name, code, functions, flags, descriptions FROM pgvs3.resp_function_libraries
                  WHERE bucket_id = $1 ORDER BY name",
                &[&bucket_id],
            )
            .await?;
        Ok(rows.iter().map(library_row).collect())
    }

    /// The library of keyspace `bucket_id` that holds function `function`, named in any case:
    /// Redis's dictionary of functions compares names case-insensitively (function names are
    /// ASCII).
    pub async fn function_library_of(&self, bucket_id: i64, function: &str) -> StoreResult<Option<FunctionLibrary>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt(
                "SELECT name, code, functions, flags, descriptions FROM pgvs3.resp_function_libraries
                  WHERE bucket_id = $1 AND EXISTS (SELECT 1 FROM unnest(functions) f WHERE lower(f) = lower($2))",
                &[&bucket_id, &function],
            )
            .await?;
        Ok(row.as_ref().map(library_row))
    }

    /// Stores `libraries` in keyspace `bucket_id` as `policy` says, all or none, so that it
    /// holds at most `max_libraries`: under a lock of the keyspace's row, so that two gateways
    /// storing at once cannot both pass the checks. As Redis checks them: library names first,
    /// then function names.
    pub async fn put_function_libraries(
        &self,
        bucket_id: i64,
        libraries: &[FunctionLibrary],
        policy: LibraryPolicy,
        max_libraries: i64,
    ) -> StoreResult<Result<(), LibraryRefusal>> {
        let mut client = checkout(self.pool()).await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT 1 FROM pgvs3.buckets WHERE id = $1 FOR NO KEY UPDATE",
            &[&bucket_id],
        )
        .await?;
        if policy == LibraryPolicy::Flush {
            tx.execute(
                "DELETE FROM pgvs3.resp_function_libraries WHERE bucket_id = $1",
                &[&bucket_id],
            )
            .await?;
        }
        let names: Vec<&str> = libraries.iter().map(|library| library.name.as_str()).collect();
        if policy == LibraryPolicy::Append {
            let existing = tx
                .query_opt(
                    "SELECT name FROM pgvs3.resp_function_libraries WHERE bucket_id = $1 AND name = ANY ($2)
                      ORDER BY name LIMIT 1",
                    &[&bucket_id, &names],
                )
                .await?;
            if let Some(existing) = existing {
                return Ok(Err(LibraryRefusal::Exists(existing.get("name"))));
            }
        }
        let functions: Vec<&str> = libraries
            .iter()
            .flat_map(|library| library.functions.iter().map(|function| function.name.as_str()))
            .collect();
        let taken = tx
            .query_opt(
                "SELECT n AS function FROM pgvs3.resp_function_libraries, unnest(functions) f, unnest($3::text[]) n
                  WHERE bucket_id = $1 AND name <> ALL ($2) AND lower(f) = lower(n) LIMIT 1",
                &[&bucket_id, &names, &functions],
            )
            .await?;
        if let Some(taken) = taken {
            return Ok(Err(LibraryRefusal::FunctionExists(taken.get("function"))));
        }
        let others: i64 = tx
            .query_one(
                "SELECT count(*) AS libraries FROM pgvs3.resp_function_libraries
                  WHERE bucket_id = $1 AND name <> ALL ($2)",
                &[&bucket_id, &names],
            )
            .await?
            .get("libraries");
        if others + libraries.len() as i64 > max_libraries {
            return Ok(Err(LibraryRefusal::TooMany));
        }
        for library in libraries {
            let functions: Vec<&str> = library
                .functions
                .iter()
                .map(|function| function.name.as_str())
                .collect();
            let flags: Vec<String> = library
                .functions
                .iter()
                .map(|function| function.flags.join(" "))
                .collect();
            let descriptions: Vec<Option<&str>> = library
                .functions
                .iter()
                .map(|function| function.description.as_deref())
                .collect();
            tx.execute(
                "INSERT INTO pgvs3.resp_function_libraries (bucket_id, name, code, functions, flags, descriptions)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (bucket_id, name) DO UPDATE SET code = excluded.code, functions = excluded.functions,
                     flags = excluded.flags, descriptions = excluded.descriptions, loaded_at = now()",
                &[
                    &bucket_id,
                    &library.name,
                    &library.code,
                    &functions,
                    &flags,
                    &descriptions,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Deletes keyspace `bucket_id`'s library `name`; false when there is none.
    pub async fn delete_function_library(&self, bucket_id: i64, name: &str) -> StoreResult<bool> {
        let client = checkout(self.pool()).await?;
        let deleted = client
            .execute(
                "DELETE FROM pgvs3.resp_function_libraries WHERE bucket_id = $1 AND name = $2",
                &[&bucket_id, &name],
            )
            .await?;
        Ok(deleted > 0)
    }

    /// FUNCTION FLUSH: every library of keyspace `bucket_id` goes.
    pub async fn flush_function_libraries(&self, bucket_id: i64) -> StoreResult<()> {
        let client = checkout(self.pool()).await?;
        client
            .execute(
                "DELETE FROM pgvs3.resp_function_libraries WHERE bucket_id = $1",
                &[&bucket_id],
            )
            .await?;
        Ok(())
    }
}

impl Catalog {
    /// The keyspace notifications setting of `bucket`'s keyspace (`None`: never set).
    pub async fn keyspace_events(&self, bucket: &str) -> StoreResult<Option<String>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt(
                "SELECT flags FROM pgvs3.resp_keyspace_events WHERE bucket = $1",
                &[&bucket],
            )
            .await?;
        Ok(row.map(|row| row.get("flags")))
    }

    /// Whether a live gateway has CLIENT TRACKING clients for `bucket`'s keyspace
    /// (`pgvs3.resp_tracked`, functions/resp_pubsub.sql).
    pub async fn keyspace_tracked(&self, bucket: &str) -> StoreResult<bool> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_one("SELECT pgvs3.resp_tracked($1) AS tracked", &[&bucket])
            .await?;
        Ok(row.get("tracked"))
    }

    /// The keys of `buckets` the reaper deleted at their expiry (INFO's `expired_keys`).
    pub async fn expired_keys(&self, buckets: &[&str]) -> StoreResult<i64> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(e.keys), 0)::bigint AS keys FROM pgvs3.resp_expired e
                   JOIN pgvs3.buckets b ON b.id = e.bucket_id WHERE b.name = ANY ($1)",
                &[&buckets],
            )
            .await?;
        Ok(row.get("keys"))
    }

    /// Sets it, and tells every gateway with `pgvs3.resp_notify(channel, flags, inline_limit)`
    /// in the same transaction; a setting that publishes events has the keyspace's S3 writes
    /// watched from then on (`pgvs3.resp_watch_objects`).
    pub async fn set_keyspace_events(
        &self,
        bucket: &str,
        flags: &str,
        channel: &[u8],
        inline_limit: i32,
    ) -> StoreResult<()> {
        let mut client = checkout(self.pool()).await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO pgvs3.resp_keyspace_events (bucket, flags) VALUES ($1, $2)
             ON CONFLICT (bucket) DO UPDATE SET flags = excluded.flags",
            &[&bucket, &flags],
        )
        .await?;
        tx.execute(NOTIFY, &[&channel, &flags.as_bytes(), &inline_limit])
            .await?;
        tx.execute("SELECT pgvs3.resp_watch_objects($1)", &[&bucket]).await?;
        tx.commit().await?;
        Ok(())
    }
}

fn library_row(row: &tokio_postgres::Row) -> FunctionLibrary {
    let names: Vec<String> = row.get("functions");
    let flags: Vec<String> = row.get("flags");
    let descriptions: Vec<Option<String>> = row.get("descriptions");
    FunctionLibrary {
        name: row.get("name"),
        code: row.get("code"),
        functions: names
            .into_iter()
            .enumerate()
            .map(|(i, name)| RegisteredFunction {
                name,
                flags: flags
                    .get(i)
                    .map(|flags| flags.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
                description: descriptions.get(i).cloned().flatten(),
            })
            .collect(),
    }
}
