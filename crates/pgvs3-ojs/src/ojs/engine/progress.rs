//! Job progress (ojs-progress: `PUT`/`GET /ojs/v1/jobs/{id}/progress`): a worker's reports,
//! checked, stored on its active job and logged as `job.progress`.

use serde_json::{Value, json};

use super::claims::Claim;
use super::job::Job;
use super::{EngineError, Queue};

/// A progress report (ojs-progress §5, §6): `progress` a fraction, clamped to 0–1 (a report is
/// fire-and-forget, so a value out of range is not an error); `data` and `checkpoint` objects;
/// at least one of `progress` and `data`. The SDKs' older `percentage` (0–100, clamped too) is
/// taken as `progress / 100`, and their `message` goes into `data`.
pub struct ProgressReport {
    pub progress: Option<f64>,
    pub data: Option<Value>,
    pub checkpoint: Option<Value>,
}

pub fn parse_progress(body: &Value) -> Result<ProgressReport, EngineError> {
    let number = |field: &str, scale: f64| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .filter(|n| n.is_finite())
            .map(|n| Some((n / scale).clamp(0.0, 1.0)))
            .ok_or_else(|| EngineError::invalid(format!("\"{field}\" must be a number"))),
    };
    let progress = match number("progress", 1.0)? {
        Some(progress) => Some(progress),
        None => number("percentage", 100.0)?,
    };
    let object = |field: &str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => Ok(Some(value.clone())),
        Some(_) => Err(EngineError::invalid(format!("\"{field}\" must be an object"))),
    };
    let mut data = object("data")?;
    if let Some(message) = body.get("message").and_then(Value::as_str) {
        data.get_or_insert_with(|| json!({}))["message"] = Value::String(message.to_string());
    }
    let checkpoint = object("checkpoint")?;
    if progress.is_none() && data.is_none() {
        return Err(EngineError::invalid(
            "a progress report needs \"progress\" (0 to 1) or \"data\"",
        ));
    }
    Ok(ProgressReport {
        progress,
        data,
        checkpoint,
    })
}

/// Stores an active job's progress and logs `job.progress`, in one statement: the numeric
/// progress never decreases within an attempt, `data` is replaced when given, the checkpoint
/// kept until a new one comes, and the claim is extended as by a heartbeat (ojs-progress §6.3).
/// The claim is fenced as an ack's is: the worker, when named, must be the one that claimed the
/// job (not another, nor an anonymous fetch), and the attempt, when given, the current one (a
/// worker whose claim lapsed and was taken again reports into no later attempt).
const REPORT_PROGRESS: &str = "
WITH reported AS (
    UPDATE ojs.jobs j SET
        progress = jsonb_strip_nulls(jsonb_build_object(
            'attempt', j.attempt,
            'progress', to_jsonb(greatest($2::float8, CASE WHEN (j.progress ->> 'attempt')::int = j.attempt
                                                           THEN (j.progress ->> 'progress')::float8 END)),
            'data', coalesce($3::jsonb, CASE WHEN (j.progress ->> 'attempt')::int = j.attempt THEN j.progress -> 'data' END),
            'checkpoint', coalesce($4::jsonb, j.progress -> 'checkpoint'),
            'updated_at', ojs.ts(now()))),
        -- A report extends the claim, never shortens one a heartbeat made longer.
        visible_until = greatest(j.visible_until, now() + j.visibility_ms * interval '1 ms')
     WHERE id = $1 AND tenant = $6 AND state = 'active' AND ($5::text IS NULL OR worker_id = $5)
       AND ($7::int IS NULL OR attempt = $7)
    RETURNING id, queue, type, attempt, worker_id, envelope, progress
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.progress', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'worker_id', worker_id)
           || jsonb_strip_nulls(jsonb_build_object(
                  'progress', progress -> 'progress', 'data', progress -> 'data',
                  -- ojs-events §3.2 names these two.
                  'progress_percent', (progress ->> 'progress')::float8 * 100,
                  'progress_message', progress #> '{data,message}'))
           || ojs.trace_of(envelope)
      FROM reported
)
SELECT 1 FROM reported";

impl Queue {
    /// Records a progress report; whether the job took it (one that is not active, or not of
    /// the report's claim, is ignored, as §6.1 asks). Either way the answer is the job, whose
    /// progress the binding shows.
    pub async fn report_progress(&self, claim: &Claim, report: &ProgressReport) -> Result<(bool, Job), EngineError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(REPORT_PROGRESS).await.map_err(EngineError::sql)?;
        let taken = client
            .query_opt(
                &statement,
                &[
                    &claim.job_id,
                    &report.progress,
                    &report.data,
                    &report.checkpoint,
                    &claim.worker_id,
                    &claim.tenant,
                    &claim.attempt,
                ],
            )
            .await
            .map_err(EngineError::sql)?
            .is_some();
        Ok((taken, self.get(&claim.job_id, &claim.tenant).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reports_are_checked() {
        let progress = |body: Value| parse_progress(&body).map(|report| report.progress);
        assert_eq!(progress(json!({ "progress": 0.5 })).unwrap(), Some(0.5));
        assert_eq!(progress(json!({ "progress": 1.5 })).unwrap(), Some(1.0), "clamped");
        assert_eq!(progress(json!({ "progress": -1 })).unwrap(), Some(0.0), "clamped");
        assert_eq!(progress(json!({ "percentage": 25 })).unwrap(), Some(0.25));
        assert!(parse_progress(&json!({ "checkpoint": {} })).is_err());
        assert!(parse_progress(&json!({ "progress": "half" })).is_err());
        assert_eq!(
            parse_progress(&json!({ "data": { "rows": 3 }, "message": "m" }))
                .unwrap()
                .data,
            Some(json!({ "rows": 3, "message": "m" }))
        );
    }
}
