-- ojs.ts formats every timestamp of every job the API returns. Declared IMMUTABLE over a body
-- of STABLE functions (to_char, date_trunc on timestamptz), PostgreSQL would not inline it: each
-- call ran as a separate SQL-function execution, about half the cost of ojs.job_json. STABLE
-- is what it is, and lets the planner fold it into the queries that call it.
ALTER FUNCTION ojs.ts(timestamptz) STABLE;
