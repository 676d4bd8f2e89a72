-- Layout v35: one definition of the OJS event envelope, ojs.event_json (functions/ojs.sql), which
-- the event APIs and the webhook trigger (functions/events.sql) both call; until now each built it
-- and a comment asked that they match (issue 35). No table changes.
SELECT 1;
