-- Layout v44: a job's answer is no longer built in SQL. The engine reads job rows by column name
-- into a typed job and the HTTP binding renders it (crates/pgvs3-ojs: engine/job.rs,
-- http/wire.rs), so a wire field change needs no migration (issue 35). ojs.job_json, which only
-- that path called, goes.
DROP FUNCTION ojs.job_json(ojs.jobs);
