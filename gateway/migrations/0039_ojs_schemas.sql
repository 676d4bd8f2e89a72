-- Layout v39: the OJS schema registry (ext-schema-registry, issue 35): JSON Schemas for job types'
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
