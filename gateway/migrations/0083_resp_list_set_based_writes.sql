-- A script run's list writes set-based (issue 39): functions/resp_list.sql gains
-- pgvs3.resp_list_apply, which writes what a run's speculated pushes, pops, LMOVEs and LREMs
-- changed of one list in one call (the elements removed deleted by position, each checked, the
-- elements pushed put past the bounds, length, bounds and key once), instead of replaying each
-- call in resp_list. Function files only.
SELECT 1;
