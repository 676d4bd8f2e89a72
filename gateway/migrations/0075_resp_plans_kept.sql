-- Plans kept (issue 39): the helpers every typed call runs per key (resp_now, resp_type,
-- resp_touch, resp_create, resp_bump, resp_settle, resp_large, resp_list_shrink, resp_list_at,
-- resp_stream_first) are PL/pgSQL instead of SQL functions, which PostgreSQL parsed and planned
-- again in every statement calling them (functions/resp_keys.sql). ZADD's pairs, HMGET's values
-- and XADD's entries are statements of their own functions, planned once (resp_zadd_steps,
-- resp_hash_values, resp_stream_append: plan_cache_mode = force_generic_plan), which PostgreSQL
-- planned again at every call.
SELECT 1;
