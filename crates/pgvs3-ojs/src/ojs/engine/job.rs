//! A job as the engine answers it: an `ojs.jobs` row decoded by column name into [`Job`], with
//! what a read at the statement's time sees (a lapsed claim, a due retry) already decided. The
//! binding renders it (`http/wire.rs`); no JSON is built in SQL for it.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, Type};

/// The columns [`Job::from_row`] reads, for a statement's SELECT or RETURNING list, `j` being
/// the job row: every column but `envelope`, which a statement adds (`j.envelope`) unless it
/// answers a summary, and `now()` — the statement's time, at which the read decides what the
/// job's state is, as the promotion would at that moment.
macro_rules! job_columns {
    () => {
        "j.id, j.type, j.queue, j.priority, j.state, j.attempt, j.max_attempts, j.run_at, j.visible_until, \
         j.retry_delay_ms, j.worker_id, j.expires_at, j.workflow_id, j.result, j.error, j.errors, j.created_at, \
         j.started_at, j.completed_at, j.cancelled_at, j.progress, now() AS read_at, \
         ojs.workflow_cancelled(j.workflow_id) AS workflow_cancelled"
    };
}
pub(crate) use job_columns;

/// A job's state (`ojs.jobs.state`, whose check constraint lists the same eight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Scheduled,
    Available,
    Pending,
    Active,
    Completed,
    Retryable,
    Cancelled,
    Discarded,
}

impl State {
    /// Every state, in the order counts by state are listed.
    pub const ALL: [State; 8] = [
        State::Scheduled,
        State::Available,
        State::Pending,
        State::Active,
        State::Completed,
        State::Retryable,
        State::Cancelled,
        State::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "scheduled",
            State::Available => "available",
            State::Pending => "pending",
            State::Active => "active",
            State::Completed => "completed",
            State::Retryable => "retryable",
            State::Cancelled => "cancelled",
            State::Discarded => "discarded",
        }
    }
}

impl<'a> FromSql<'a> for State {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<State, Box<dyn std::error::Error + Sync + Send>> {
        Ok(match <&str>::from_sql(ty, raw)? {
            "scheduled" => State::Scheduled,
            "available" => State::Available,
            "pending" => State::Pending,
            "active" => State::Active,
            "completed" => State::Completed,
            "retryable" => State::Retryable,
            "cancelled" => State::Cancelled,
            "discarded" => State::Discarded,
            other => return Err(format!("unknown job state {other:?}").into()),
        })
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

/// A `timestamptz`, to the microsecond PostgreSQL keeps. It reads (`Display`, and serializes) as
/// RFC 3339 in UTC, with microseconds unless the time is whole seconds — the form every job
/// time of this binding has always had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    /// Microseconds since 1970-01-01 UTC.
    micros: i64,
}

/// PostgreSQL counts from 2000-01-01: this many microseconds after the Unix epoch.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl<'a> FromSql<'a> for Timestamp {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Timestamp, Box<dyn std::error::Error + Sync + Send>> {
        let since_2000 = i64::from_be_bytes(raw.try_into()?);
        // ±infinity are i64::MAX and i64::MIN; no job time is infinite.
        if since_2000 == i64::MAX || since_2000 == i64::MIN {
            return Err("an infinite timestamp".into());
        }
        Ok(Timestamp {
            micros: since_2000 + PG_EPOCH_MICROS,
        })
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, micros) = (
            self.micros.div_euclid(86_400_000_000),
            self.micros.rem_euclid(86_400_000_000),
        );
        let (year, month, day) = civil_from_days(days);
        let seconds = micros / 1_000_000;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )?;
        match micros % 1_000_000 {
            0 => f.write_str("Z"),
            fraction => write!(f, ".{fraction:06}Z"),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`),
/// for any year PostgreSQL can store.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A job as a read shows it. Fields that only hold in some states are `None` outside them.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    pub job_type: String,
    pub queue: String,
    pub priority: i32,
    /// The state as read now: a claim whose visibility lapsed reads `available` (`discarded`
    /// on its last attempt), a scheduled or retryable job that is due reads `available` — what
    /// the promotion will make them — so reads never write and work on a standby.
    pub state: State,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: Timestamp,
    /// When a `scheduled` job is due.
    pub scheduled_at: Option<Timestamp>,
    /// When a `retryable` job is due.
    pub next_attempt_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub cancelled_at: Option<Timestamp>,
    /// When a `discarded` job was.
    pub discarded_at: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
    /// The holder of an `active` job's claim, and until when it holds it.
    pub worker_id: Option<String>,
    pub visible_until: Option<Timestamp>,
    pub workflow_id: Option<String>,
    pub retry_delay_ms: Option<i64>,
    /// What the ack sent.
    pub result: Option<Value>,
    /// The last failure; a lapsed claim's reads as `visibility_timeout`.
    pub error: Option<Value>,
    /// Every failure, oldest first.
    pub errors: Vec<Value>,
    /// ojs-progress: the current attempt's fraction (a retry starts without one; 1.0 once
    /// completed) and data, when the last report came (of any attempt), and the last
    /// checkpoint of any attempt, to resume from.
    pub progress: Option<Value>,
    pub progress_data: Option<Value>,
    pub progress_updated_at: Option<Value>,
    pub last_checkpoint: Option<Value>,
    /// What the client sent (unknown fields included), as stored; empty when the statement did
    /// not read it.
    pub envelope: Map<String, Value>,
}

impl Job {
    /// Decodes a row of [`job_columns!`] (and `envelope`, when the statement read it).
    pub fn from_row(row: &Row) -> Job {
        let stored: State = row.get("state");
        let read_at: Timestamp = row.get("read_at");
        let attempt: i32 = row.get("attempt");
        let max_attempts: i32 = row.get("max_attempts");
        let run_at: Timestamp = row.get("run_at");
        let visible_until: Option<Timestamp> = row.get("visible_until");
        let completed_at: Option<Timestamp> = row.get("completed_at");
        // A cancelled workflow's job that lapsed or came due is cancelled by the next promotion
        // (claims.rs PROMOTE), not offered again: it reads as what that promotion makes it.
        let workflow_cancelled: bool = row.get("workflow_cancelled");
        let lapsed = stored == State::Active && visible_until.is_some_and(|until| until < read_at);
        let due = matches!(stored, State::Scheduled | State::Retryable) && run_at <= read_at;
        let state = match stored {
            _ if (lapsed || due) && workflow_cancelled => State::Cancelled,
            State::Active if lapsed && attempt >= max_attempts => State::Discarded,
            State::Active if lapsed => State::Available,
            _ if due => State::Available,
            stored => stored,
        };
        let error = if lapsed {
            Some(json!({ "code": "visibility_timeout", "type": "visibility_timeout",
                         "message": "the claim lapsed before an ack, nack or heartbeat" }))
        } else {
            row.get("error")
        };
        let errors = match row.get::<_, Value>("errors") {
            Value::Array(errors) => errors,
            _ => Vec::new(),
        };
        let report: Option<Value> = row.get("progress");
        let current = report
            .as_ref()
            .filter(|report| report.get("attempt").and_then(Value::as_i64) == Some(i64::from(attempt)));
        let progress = match (&report, stored) {
            (None, _) => None,
            (Some(_), State::Completed) => Some(json!(1.0)),
            (Some(_), _) => current.and_then(|report| report.get("progress").cloned()),
        };
        let envelope = match row.try_get::<_, Value>("envelope") {
            Ok(Value::Object(envelope)) => envelope,
            _ => Map::new(),
        };
        Job {
            id: row.get("id"),
            job_type: row.get("type"),
            queue: row.get("queue"),
            priority: row.get("priority"),
            state,
            attempt,
            max_attempts,
            created_at: row.get("created_at"),
            scheduled_at: (stored == State::Scheduled).then_some(run_at),
            next_attempt_at: (stored == State::Retryable).then_some(run_at),
            started_at: row.get("started_at"),
            completed_at,
            cancelled_at: row.get("cancelled_at"),
            discarded_at: completed_at.filter(|_| stored == State::Discarded),
            expires_at: row.get("expires_at"),
            worker_id: row
                .get::<_, Option<String>>("worker_id")
                .filter(|_| stored == State::Active),
            visible_until: visible_until.filter(|_| stored == State::Active),
            workflow_id: row.get("workflow_id"),
            retry_delay_ms: row.get("retry_delay_ms"),
            result: row.get("result"),
            error,
            errors,
            progress_data: current.and_then(|report| report.get("data").cloned()),
            progress_updated_at: report.as_ref().and_then(|report| report.get("updated_at").cloned()),
            last_checkpoint: report.as_ref().and_then(|report| report.get("checkpoint").cloned()),
            progress,
            envelope,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: i64) -> String {
        Timestamp { micros }.to_string()
    }

    #[test]
    fn timestamps_read_as_rfc3339_with_microseconds_unless_whole_seconds() {
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_764_806_400_000_000), "2025-12-04T00:00:00Z");
        assert_eq!(at(1_764_806_400_000_001), "2025-12-04T00:00:00.000001Z");
        assert_eq!(at(1_764_806_400_500_000), "2025-12-04T00:00:00.500000Z");
        assert_eq!(at(951_868_800_000_000 - 1), "2000-02-29T23:59:59.999999Z");
        assert_eq!(at(-1), "1969-12-31T23:59:59.999999Z");
        // PostgreSQL's to_char: four digits at least, more when the year needs them.
        assert_eq!(at(-59_042_995_200_000_000), "0099-01-01T00:00:00Z");
        assert_eq!(at(316_516_204_800_000_000), "12000-01-01T00:00:00Z");
    }
}
