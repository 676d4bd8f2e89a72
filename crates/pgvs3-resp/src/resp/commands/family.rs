//! The key commands built on the other families' storage (SORT, HyperLogLog, GEO, DUMP and
//! RESTORE, BITOP and BITFIELD): what they share to read and write keys of a batch. They run in the gateway on the
//! batch, reading collections with the typed families' own calls (parsed from Redis's words, so
//! that each call is the one its command would make) and strings from the batch.

use bytes::Bytes;

use super::bitmap::Bitmap;
use super::dump::Dumped;
use super::geo::Geo;
use super::hyperloglog::Pf;
use super::sort::{Sort, Target};
use crate::resp::codec::Reply;
use crate::resp::typed::Typed;
use crate::store::{KeyType, KvBatch, KvValue, StoreError, StoreResult, TypedCall, TypedRow};

/// A command of these families, as the batch runs it (`KeyCommand::Family`).
#[derive(Debug, Clone)]
pub enum FamilyCommand {
    Sort(Sort),
    Pf(Pf),
    Geo(Geo),
    Dumped(Dumped),
    Bitmap(Bitmap),
}

impl FamilyCommand {
    /// Parses one of these commands; `Ok(None)` when `name` is not one. The arity is checked.
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<FamilyCommand>, Reply> {
        Ok(Some(match name {
            "sort" | "sort_ro" => FamilyCommand::Sort(Sort::parse(name == "sort_ro", args)?),
            "dump" | "restore" => FamilyCommand::Dumped(Dumped::parse(name, args)?.expect("DUMP or RESTORE")),
            "pfadd" | "pfcount" | "pfmerge" => FamilyCommand::Pf(Pf::parse(name, args)?.expect("a PF command")),
            "bitop" | "bitfield" | "bitfield_ro" => {
                FamilyCommand::Bitmap(Bitmap::parse(name, args)?.expect("a bitmap command"))
            }
            _ => match Geo::parse(name, args)? {
                Some(geo) => FamilyCommand::Geo(geo),
                None => return Ok(None),
            },
        }))
    }

    /// The keys it names (those BY and GET patterns name are found as it runs).
    pub fn keys(&self) -> Vec<&String> {
        match self {
            FamilyCommand::Sort(sort) => sort.keys(),
            FamilyCommand::Pf(pf) => pf.keys(),
            FamilyCommand::Geo(geo) => geo.keys(),
            FamilyCommand::Dumped(dumped) => dumped.keys(),
            FamilyCommand::Bitmap(bitmap) => bitmap.keys(),
        }
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> StoreResult<Reply> {
        let done = match self {
            FamilyCommand::Sort(sort) => sort.apply(batch).await,
            FamilyCommand::Pf(pf) => pf.apply(batch).await,
            FamilyCommand::Geo(geo) => geo.apply(batch).await,
            FamilyCommand::Dumped(dumped) => dumped.apply(batch).await,
            FamilyCommand::Bitmap(bitmap) => bitmap.apply(batch).await,
        };
        match done {
            Ok(reply) | Err(FamilyError::Reply(reply)) => Ok(reply),
            Err(FamilyError::Store(err)) => Err(err),
        }
    }
}

/// Why a command of these families stopped: its reply (an error), or the store failing.
#[derive(Debug)]
pub enum FamilyError {
    Reply(Reply),
    Store(StoreError),
}

impl From<StoreError> for FamilyError {
    fn from(err: StoreError) -> FamilyError {
        FamilyError::Store(err)
    }
}

impl From<Reply> for FamilyError {
    fn from(reply: Reply) -> FamilyError {
        FamilyError::Reply(reply)
    }
}

/// A typed command from its words, as a client would send it.
fn typed(words: Vec<Bytes>) -> Result<Typed, FamilyError> {
    let name = String::from_utf8_lossy(&words[0]).into_owned();
    Ok(crate::resp::typed::parse(&name, &words)?.expect("a typed command"))
}

/// The call of a typed command's words.
pub fn call(words: Vec<Bytes>) -> Result<TypedCall, FamilyError> {
    Ok(typed(words)?.call)
}

/// `command key rest...` as a client's words.
pub fn words(command: &str, key: &str, rest: impl IntoIterator<Item = Bytes>) -> Vec<Bytes> {
    [
        Bytes::copy_from_slice(command.as_bytes()),
        Bytes::copy_from_slice(key.as_bytes()),
    ]
    .into_iter()
    .chain(rest)
    .collect()
}

pub fn word(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

/// Runs typed commands (their words) in one round trip. With `limit`, each reply is refused
/// past `limit.0` bytes before it is read (`limit.1` names the command in the refusal).
/// A command's error is the answer.
pub async fn run(
    batch: &mut KvBatch,
    commands: Vec<Vec<Bytes>>,
    limit: Option<(i64, &str)>,
) -> Result<Vec<TypedRow>, FamilyError> {
    let mut calls = Vec::with_capacity(commands.len());
    for command in commands {
        calls.push(call(command)?);
    }
    run_calls(batch, calls, limit).await
}

/// [`run`] of calls built already (those no client's words make: DUMP's and RESTORE's of a
/// stream).
pub async fn run_calls(
    batch: &mut KvBatch,
    mut calls: Vec<TypedCall>,
    limit: Option<(i64, &str)>,
) -> Result<Vec<TypedRow>, FamilyError> {
    for call in &mut calls {
        call.reply_limit = limit.map(|(bytes, _)| bytes);
    }
    let refs: Vec<_> = calls.iter().collect();
    let rows = batch.typed(&refs, false).await?;
    for row in &rows {
        if let (Some(_), Some((bytes, what))) = (row.cut, limit) {
            return Err(Reply::error(format!(
                "ERR {what} would read more than {} MiB of elements (pgvs3 works on them in the gateway's memory)",
                bytes >> 20
            ))
            .into());
        }
        if let Some(err) = &row.err {
            return Err(Reply::Error(err.clone()).into());
        }
    }
    Ok(rows)
}

/// The elements `command key rest...` (LRANGE, SMEMBERS, ZRANGE) reads, refused past `limit`
/// bytes before they are read.
pub async fn read_elements(
    batch: &mut KvBatch,
    command: &str,
    key: &str,
    rest: &[&str],
    limit: i64,
    what: &str,
) -> Result<Vec<Option<Bytes>>, FamilyError> {
    let command = words(command, key, rest.iter().map(|text| word(text)));
    let row = run(batch, vec![command], Some((limit, what)))
        .await?
        .pop()
        .unwrap_or_default();
    Ok(row.items)
}

/// Looks up what each target names (a string key's value, a hash field's), `None` where
/// nothing is: the keys loaded in one statement, the fields of each hash in one call, all
/// the calls in one round trip. String values count against [`super::sort::MAX_SORT_BYTES`].
pub async fn look_up(batch: &mut KvBatch, targets: &[Target]) -> Result<Vec<Option<Bytes>>, FamilyError> {
    let mut keys: Vec<String> = targets
        .iter()
        .filter_map(|target| match target {
            Target::Key(key) | Target::Field(key, _) => Some(key.clone()),
            _ => None,
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return Ok(targets.iter().map(itself).collect());
    }
    // What the batch changed so far is written first: the reload reads it back.
    batch.write_pending().await?;
    batch.reload(&keys).await?;
    let mut fields: std::collections::BTreeMap<&str, Vec<Bytes>> = Default::default();
    let mut string_bytes = 0u64;
    for target in targets {
        match target {
            Target::Field(key, field) if batch.key_type(key) == Some(KeyType::Hash) => {
                fields.entry(key).or_default().push(field.clone())
            }
            Target::Key(key) => {
                if let Some(KvValue::Bytes(_) | KvValue::Chunked { .. }) = batch.get(key).map(|entry| &entry.value) {
                    string_bytes += batch.get(key).map_or(0, |entry| entry.value.len());
                }
            }
            _ => {}
        }
    }
    if string_bytes > super::sort::MAX_SORT_BYTES as u64 {
        return Err(Reply::error(format!(
            "ERR SORT would look up more than {} MiB of values (pgvs3 holds them in the gateway's memory)",
            super::sort::MAX_SORT_BYTES >> 20
        ))
        .into());
    }
    let rows = match fields.is_empty() {
        true => Vec::new(),
        false => {
            let commands = fields
                .iter()
                .map(|(key, fields)| words("hmget", key, fields.iter().cloned()))
                .collect();
            run(batch, commands, None).await?
        }
    };
    let mut values: std::collections::HashMap<(&str, &[u8]), Option<Bytes>> = Default::default();
    for ((key, fields), row) in fields.iter().zip(rows) {
        for (field, value) in fields.iter().zip(row.items) {
            values.insert((key, &field[..]), value);
        }
    }
    let mut found = Vec::with_capacity(targets.len());
    for target in targets {
        found.push(match target {
            Target::Key(key) => match batch.get(key).map(|entry| &entry.value) {
                Some(KvValue::Bytes(_) | KvValue::Chunked { .. }) => batch.value(key).await?,
                _ => None,
            },
            Target::Field(key, field) => values.get(&(key.as_str(), &field[..])).cloned().flatten(),
            other => itself(other),
        });
    }
    Ok(found)
}

fn itself(target: &Target) -> Option<Bytes> {
    match target {
        Target::Itself(element) => Some(element.clone()),
        _ => None,
    }
}

/// Makes `key` what `command` (RPUSH, ZADD: its words after the key) writes into it, whatever
/// it held, without an expiry; deleted when `command` is `None` (nothing to store).
pub async fn replace(batch: &mut KvBatch, key: &str, command: Option<Vec<Bytes>>) -> Result<(), FamilyError> {
    replace_with(batch, key, command.map(call).transpose()?).await
}

/// [`replace`] with a call built already.
pub async fn replace_with(batch: &mut KvBatch, key: &str, call: Option<TypedCall>) -> Result<(), FamilyError> {
    batch.delete(key);
    let Some(call) = call else {
        return Ok(());
    };
    // The delete goes out first (`typed` writes what is pending).
    run_calls(batch, vec![call], None).await?;
    batch.reload(&[key.to_owned()]).await?;
    Ok(())
}
