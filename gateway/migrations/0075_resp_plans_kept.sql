-- Plans kept (issue 39; functions/resp_keys.sql): the helpers every typed call runs per key
-- (resp_now, resp_type, resp_touch, resp_create, resp_bump, resp_settle, resp_large,
-- resp_list_shrink, resp_list_at, resp_stream_first) are PL/pgSQL instead of SQL functions, which
-- PostgreSQL parsed and planned again in every statement calling them.
SELECT 1;
