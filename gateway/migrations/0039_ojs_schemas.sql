-- Layout v39 (issue 35): the OJS schema registry (ext-schema-registry): JSON Schemas for job types'
-- `args`, one row per (type, version). A version is SemVer `MAJOR.MINOR.PATCH`, or a plain
-- integer `N` (the admin routes' form, ordered as `N.0.0`); both spellings of one precedence are
-- one version, hence the key on the numbers. `version` keeps the spelling the client used.
CREATE TABLE ojs.schemas (
    job_type   text NOT NULL,
    major      int NOT NULL,
    minor      int NOT NULL,
    patch      int NOT NULL,
    version    text NOT NULL,
    schema     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_type, major, minor, patch)
);

-- ojs-cron §2.2 and §8.5: a schedule can be disabled without being removed (it keeps its
-- registration and does not fire), and counts the jobs it has enqueued. Both defaults are
-- constants, so adding them rewrites nothing; existing schedules stay enabled, counted from 0.
ALTER TABLE ojs.cron
    ADD COLUMN enabled boolean NOT NULL DEFAULT true,
    ADD COLUMN run_count bigint NOT NULL DEFAULT 0;
