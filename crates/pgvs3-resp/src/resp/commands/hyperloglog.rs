//! PFADD, PFCOUNT and PFMERGE on string values holding Redis's HyperLogLog (hll.rs), worked in
//! the gateway on the batch's strings. PFCOUNT answers a valid cached count as Redis does, but
//! does not write a count it computed back into the value (Redis does, as a side effect of a
//! read; here PFCOUNT stays a read).

use bytes::Bytes;

use super::family::FamilyError;
use super::hll::{self, CORRUPTED, Hll, MAX_HLL_BYTES, NOT_AN_HLL, REGISTERS};
use crate::resp::codec::Reply;
use crate::resp::command::key;
use crate::store::{KvBatch, KvValue, StringForm};

#[derive(Debug, Clone)]
pub enum Pf {
    Add {
        key: String,
        elements: Vec<Bytes>,
    },
    Count {
        keys: Vec<String>,
    },
    /// The destination is also the first source, as in Redis.
    Merge {
        keys: Vec<String>,
    },
}

impl Pf {
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Pf>, Reply> {
        let keys = || args[1..].iter().map(key).collect::<Result<Vec<_>, _>>();
        Ok(Some(match name {
            "pfadd" => Pf::Add {
                key: key(&args[1])?,
                elements: args[2..].to_vec(),
            },
            "pfcount" => Pf::Count { keys: keys()? },
            "pfmerge" => Pf::Merge { keys: keys()? },
            _ => return Ok(None),
        }))
    }

    pub fn keys(&self) -> Vec<&String> {
        match self {
            Pf::Add { key, .. } => vec![key],
            Pf::Count { keys } | Pf::Merge { keys } => keys.iter().collect(),
        }
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        match self {
            Pf::Add { key, elements } => {
                let (mut hll, mut updated) = match load(batch, key).await? {
                    Some(hll) => (hll, false),
                    None => (Hll::empty(), true),
                };
                for element in elements {
                    updated |= hll.add(element).map_err(|()| corrupted())?;
                }
                if updated {
                    hll.invalidate_cache();
                    store(batch, key, hll);
                }
                Ok(Reply::Integer(i64::from(updated)))
            }
            Pf::Count { keys } if keys.len() == 1 => Ok(Reply::Integer(match load(batch, &keys[0]).await? {
                None => 0,
                Some(hll) => match hll.cached() {
                    Some(count) => count as i64,
                    None => hll::count(&hll.registers().ok_or_else(corrupted)?) as i64,
                },
            })),
            Pf::Count { keys } => {
                let (max, _) = union(batch, keys).await?;
                Ok(Reply::Integer(hll::count(&max) as i64))
            }
            Pf::Merge { keys } => {
                let (max, dense) = union(batch, keys).await?;
                let mut hll = load(batch, &keys[0]).await?.unwrap_or_else(Hll::empty);
                hll.merge_registers(&max, dense).map_err(|()| corrupted())?;
                store(batch, &keys[0], hll);
                Ok(Reply::OK)
            }
        }
    }
}

fn corrupted() -> FamilyError {
    FamilyError::Reply(Reply::error(CORRUPTED))
}

/// The key's HLL; `None` when the key does not exist. A string that is not one (or is too long
/// to be one, then not read) answers Redis's error.
async fn load(batch: &mut KvBatch, key: &str) -> Result<Option<Hll>, FamilyError> {
    match batch.get(key).map(|entry| &entry.value) {
        None => return Ok(None),
        Some(KvValue::Typed(_)) => return Err(FamilyError::Reply(crate::resp::keys::wrongtype())),
        Some(value) if value.len() > MAX_HLL_BYTES => return Err(FamilyError::Reply(Reply::error(NOT_AN_HLL))),
        Some(_) => {}
    }
    let bytes = batch.value(key).await?.unwrap_or_default();
    Hll::from_bytes(&bytes)
        .map(Some)
        .ok_or_else(|| FamilyError::Reply(Reply::error(NOT_AN_HLL)))
}

/// The registers' maxima over the keys (missing ones empty), and whether one of them is dense.
async fn union(batch: &mut KvBatch, keys: &[String]) -> Result<(Vec<u8>, bool), FamilyError> {
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for key in keys {
        let Some(hll) = load(batch, key).await? else {
            continue;
        };
        dense |= hll.is_dense();
        let registers = hll.registers().ok_or_else(corrupted)?;
        for (max, value) in max.iter_mut().zip(registers) {
            *max = (*max).max(value);
        }
    }
    Ok((max, dense))
}

/// Writes the HLL, keeping the key's expiry; Redis changes HLLs in place (`raw`).
fn store(batch: &mut KvBatch, key: &str, hll: Hll) {
    let expires_at = batch.get(key).and_then(|entry| entry.expires_at);
    batch.write(key, Bytes::from(hll.into_bytes()), expires_at, StringForm::Raw);
}
