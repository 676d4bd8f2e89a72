//! Request bodies: read whole within `--ojs-max-body-bytes`, and what they cost in memory
//! counted in the gateway's buffer budget (`--buffer-budget`, shared with S3 and RESP) before
//! the JSON tree is built. A JSON tree can take far more memory than its text (`[0,0,…]`: 32
//! bytes a value, 16 times the text; `[{"a":0},…]`: a map node a value, about 80 times), so a
//! few concurrent 4 MiB enqueues could otherwise hold gigabytes. The body's tree is measured by
//! a pass over the text that allocates nothing; a request whose body and tree fit in
//! [`FREE_BYTES`] takes nothing from the budget (every ordinary request), a larger one reserves
//! them or is turned away with 429 `rate_limited` (retryable) when the budget is spent now, or
//! with 413 when it is larger than the whole budget.
//!
//! The passes over a body's text (the measure, the parse) of a large body run on the blocking
//! pool, not on the runtime: the runtime's threads also serve S3 and RESP, and parsing a hostile
//! 4 MiB body takes one of them for milliseconds at a time. At most [`parse_slots`] such passes
//! run at once; more wait their turn without holding a thread.

use std::sync::{Arc, LazyLock};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::OjsError;
use crate::admission::{BufferBudget, Reservation};
use crate::request_body::RequestBody;

/// What one request may hold without drawing on the budget: its body, and separately its tree
/// and the copies made of it, each up to this.
pub const FREE_BYTES: u64 = 1 << 20;

/// Bodies this small cannot build a tree of more than [`FREE_BYTES`] (about 100 times the
/// text at most), so they are not measured.
const UNMEASURED_BYTES: usize = 4 << 10;

/// Bodies past this are measured and parsed on the blocking pool. A pass over this much JSON
/// takes well under a millisecond, sending it to another thread and back some microseconds:
/// below it, the hop would cost about what it frees.
const BLOCKING_BYTES: usize = 64 << 10;

/// How many passes over large bodies run at once: half the cores (at least one), so that a flood
/// of hostile bodies leaves the runtime's threads cores to run on.
fn parse_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1))
}

static PARSE_SLOTS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(parse_slots())));

/// Runs `pass` over `text`: in place when the text is small, else on the blocking pool once a
/// slot is free. The pass holds its slot to its end, even when the request is dropped meanwhile
/// (a client that hangs up does not free a slot its pass still uses).
async fn pass_over<T: Send + 'static>(text: &Bytes, pass: impl FnOnce(&[u8]) -> T + Send + 'static) -> T {
    if text.len() <= BLOCKING_BYTES {
        return pass(text);
    }
    let slot = Arc::clone(&PARSE_SLOTS)
        .acquire_owned()
        .await
        .expect("the parse slots are never closed");
    let text = text.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        pass(&text)
    })
    .await
    .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
}

/// A request's body, and the memory reserved for it (held until the request is answered).
pub struct Body {
    pub bytes: Bytes,
    _reserved: Vec<Reservation>,
}

/// Reads a body to its end: refused with 413 past `limit`, with 429 when its memory does not
/// fit in the budget.
pub async fn read(mut body: RequestBody, limit: u64, budget: &BufferBudget) -> Result<Body, OjsError> {
    if body.size_hint().lower() > limit {
        return Err(OjsError::too_large(limit));
    }
    let mut reserved = Vec::new();
    // A declared length is reserved before any of it is read; a body without one once it
    // passes the allowance, for as much as it may still grow to.
    let declared = body.size_hint().exact();
    if let Some(length) = declared.filter(|length| *length > FREE_BYTES) {
        reserved.push(reserve(budget, length)?);
    }
    let mut bytes = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            if crate::request_body::BodyError::is_idle_timeout(&error) {
                invalid_payload("the request body stalled: nothing arrived within the body idle timeout")
            } else {
                invalid_payload("the request body was cut off")
            }
        })?;
        let Ok(data) = frame.into_data() else { continue };
        let length = (bytes.len() + data.len()) as u64;
        if length > limit {
            return Err(OjsError::too_large(limit));
        }
        if reserved.is_empty() && length > FREE_BYTES {
            reserved.push(reserve(budget, limit)?);
        }
        bytes.extend_from_slice(&data);
    }
    let bytes = bytes.freeze();
    if bytes.len() > UNMEASURED_BYTES {
        // The tree, the answer's (an enqueue answers with the job as stored, read back into a
        // tree), and the copies of the text on the way (to the database, back, the answer).
        let cost = pass_over(&bytes, tree_bytes)
            .await
            .saturating_mul(2)
            .saturating_add(3 * bytes.len() as u64);
        if cost > FREE_BYTES {
            reserved.push(reserve(budget, cost)?);
        }
    }
    Ok(Body {
        bytes,
        _reserved: reserved,
    })
}

/// Refused with 429 when the budget is spent now, with 413 when it could never hold it.
fn reserve(budget: &BufferBudget, bytes: u64) -> Result<Reservation, OjsError> {
    if bytes > budget.total().min(u64::from(u32::MAX)) {
        return Err(OjsError::beyond_memory(bytes, budget.total()));
    }
    budget
        .try_reserve(bytes, "ojs_request")
        .ok_or_else(|| OjsError::out_of_memory(bytes))
}

/// The body as JSON; empty is an error.
pub async fn json(body: &Body) -> Result<Value, OjsError> {
    if body.bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(invalid_payload("the request body is empty; send a JSON object"));
    }
    pass_over(&body.bytes, |text| serde_json::from_slice(text))
        .await
        .map_err(|err| invalid_payload(&format!("the request body is not valid JSON: {err}")))
}

/// The body of a per-job route (`/jobs/{id}/ack`): optional, an object, the path naming the job.
pub async fn job_json(id: &str, body: &Body) -> Result<Value, OjsError> {
    let id = super::wire::job_id(id)?.to_string();
    let mut value = if body.bytes.is_empty() {
        serde_json::json!({})
    } else {
        json(body).await?
    };
    let Some(fields) = value.as_object_mut() else {
        return Err(invalid_payload("the request body must be a JSON object"));
    };
    fields.insert("job_id".into(), Value::String(id));
    fields.remove("id");
    Ok(value)
}

pub fn invalid_payload(message: &str) -> OjsError {
    OjsError::new(
        http::StatusCode::BAD_REQUEST,
        "invalid_payload",
        "validation_error",
        message,
    )
}

/// Bytes of a `serde_json::Value` slot, and of what a map costs beyond its entries' slots:
/// a B-tree leaf (11 entries of a 24-byte key and a 32-byte value), or an index map's
/// table; generous for both.
const VALUE: u64 = 32;
const MAP: u64 = 640;
const MAP_ENTRY: u64 = 128;

/// About how many bytes `serde_json::from_slice::<Value>(text)` allocates (never less), found
/// without allocating; invalid JSON costs what was seen of it (the parse that follows refuses it).
fn tree_bytes(text: &[u8]) -> u64 {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let mut cost = 0;
    let _ = deserializer.deserialize_any(Measure { cost: &mut cost });
    VALUE + cost
}

/// Adds to `cost` what one value holds beyond its own slot.
struct Measure<'a> {
    cost: &'a mut u64,
}

impl<'de> Visitor<'de> for Measure<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, text: &str) -> Result<(), E> {
        // An allocation is at least 16 bytes; an empty string has none.
        if !text.is_empty() {
            *self.cost += (text.len() as u64).next_multiple_of(16);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let cost = self.cost;
        let mut count = 0u64;
        while items.next_element_seed(Seed { cost: &mut *cost })?.is_some() {
            count += 1;
        }
        // A vector grown by doubling from 4 holds the next power of two of its items, and
        // briefly the old buffer (half that) beside the new one.
        if count > 0 {
            *cost += VALUE * count.next_power_of_two().max(4) * 3 / 2;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let cost = self.cost;
        let mut count = 0u64;
        while entries.next_key_seed(Seed { cost: &mut *cost })?.is_some() {
            entries.next_value_seed(Seed { cost: &mut *cost })?;
            count += 1;
        }
        if count > 0 {
            *cost += MAP + MAP_ENTRY * count;
        }
        Ok(())
    }
}

/// A value inside a container: measured the same way.
struct Seed<'a> {
    cost: &'a mut u64,
}

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Measure { cost: self.cost })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large body's pass runs off the runtime: on a runtime of one thread, the pass waits for
    /// a task of that runtime, which could never run were the pass holding its only thread. (The
    /// wait's bound only ends a failing run; a passing one never reaches it.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_bodys_pass_leaves_the_runtime_free() {
        let (ran, seen) = std::sync::mpsc::channel();
        let large = Bytes::from(vec![b' '; BLOCKING_BYTES + 1]);
        let pass = pass_over(&large, move |_| {
            seen.recv_timeout(std::time::Duration::from_secs(30)).is_ok()
        });
        let other = async move { ran.send(()).expect("the pass is waiting") };
        let (saw_the_task, ()) = tokio::join!(pass, other);
        assert!(saw_the_task, "the runtime's task ran while the pass did");

        let small = Bytes::from_static(b"[1]");
        let here = std::thread::current().id();
        assert_eq!(pass_over(&small, |_| std::thread::current().id()).await, here);
    }

    #[tokio::test]
    async fn a_large_invalid_body_is_refused_as_any_invalid_body() {
        let mut text = vec![b'['; 1];
        text.extend(b"0,".repeat(BLOCKING_BYTES));
        let body = Body {
            bytes: Bytes::from(text),
            _reserved: Vec::new(),
        };
        let error = json(&body).await.unwrap_err();
        assert_eq!((error.status.as_u16(), error.code), (400, "invalid_payload"));
        assert!(
            error
                .message
                .starts_with("the request body is not valid JSON: EOF while parsing"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_tree_is_measured_at_no_less_than_it_costs() {
        let zeros = format!("[{}0]", "0,".repeat(100_000));
        let maps = format!("[{}{{}}]", "{\"a\":0},".repeat(100_000));
        let strings = format!("[{}\"\"]", "\"0123456789abcdef\",".repeat(100_000));
        for (text, at_least) in [(&zeros, 32), (&maps, 600), (&strings, 40)] {
            let per_item = tree_bytes(text.as_bytes()) / 100_000;
            assert!(per_item >= at_least, "{per_item} bytes an item");
        }
        assert_eq!(tree_bytes(b"17"), VALUE);
        assert!(
            tree_bytes(b"[1, {\"a\": [tru") > 0,
            "invalid JSON costs what was seen of it"
        );
    }
}
