//! The event log (`ojs.events`): what the polled and streamed event APIs read. Every lifecycle
//! event is an INSERT into it by the statement that makes the change; the event as clients
//! see it is `ojs.event_json` (functions/ojs.sql), the one definition webhooks deliver too.

use std::time::Duration;

use serde_json::Value;

use super::{EngineError, Queue};

/// An `ojs.events` row (as `e`) as clients see it: functions/ojs.sql defines the envelope once,
/// for these reads and for webhook deliveries.
const EVENT_JSON: &str = "ojs.event_json(e.id, e.seq, e.type, e.time, e.queue, e.job_id, e.data)";

/// One row of the event log, with what stream filters look at.
#[derive(Debug, Clone)]
pub struct LoggedEvent {
    pub seq: i64,
    pub kind: String,
    pub queue: Option<String>,
    pub job_id: Option<String>,
    /// The event, serialized (one line).
    pub json: String,
}

impl Queue {
    /// Events after `after` (a sequence number), oldest first.
    pub async fn events(
        &self,
        types: &[String],
        queues: &[String],
        after: i64,
        limit: i64,
    ) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {EVENT_JSON} AS event FROM ojs.events e
                     WHERE seq > $1 AND (cardinality($2::text[]) = 0 OR type = ANY($2))
                       AND (cardinality($3::text[]) = 0 OR queue = ANY($3))
                     ORDER BY seq LIMIT $4"
                ),
                &[&after, &types, &queues, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(|row| row.get("event")).collect())
    }

    /// Events after `after` in log order, unfiltered, serialized for the event stream.
    pub async fn events_since(&self, after: i64, limit: i64) -> Result<Vec<LoggedEvent>, EngineError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT seq, type, queue, job_id, ({EVENT_JSON})::text AS json FROM ojs.events e
                 WHERE seq > $1 ORDER BY seq LIMIT $2"
            ))
            .await
            .map_err(EngineError::sql)?;
        let rows = client
            .query(&statement, &[&after, &limit])
            .await
            .map_err(EngineError::sql)?;
        Ok(rows
            .iter()
            .map(|row| LoggedEvent {
                seq: row.get("seq"),
                kind: row.get("type"),
                queue: row.get("queue"),
                job_id: row.get("job_id"),
                json: row.get("json"),
            })
            .collect())
    }

    /// Where a new event stream starts: the last event logged `settled_for` ago or earlier, so
    /// that events of transactions still committing then are read as new.
    pub async fn event_floor(&self, settled_for: Duration) -> Result<i64, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce(max(seq), 0) AS seq FROM ojs.events WHERE time < now() - $1::float8 * interval '1 s'",
                &[&settled_for.as_secs_f64()],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(row.get("seq"))
    }

    /// Drops events older than `retention`, a bounded batch at a time.
    pub async fn prune_events(&self, retention: std::time::Duration) -> Result<u64, EngineError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM ojs.events WHERE seq IN (
                     SELECT seq FROM ojs.events WHERE time < now() - $1 * interval '1 s' LIMIT 10000)",
                &[&retention.as_secs_f64()],
            )
            .await
            .map_err(EngineError::sql)
    }
}
