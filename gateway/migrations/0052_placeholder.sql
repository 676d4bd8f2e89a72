-- A placeholder for session 29's other migration numbered 0052 (this branch was given 0053):
-- dropped at merge, when that migration takes its place.
SELECT 1;
