-- Layout v63: DUMP and RESTORE of a stream (resp/commands/dump.rs): functions/resp_stream.sql
-- answers `xdump` (XINFO STREAM FULL's read of everything, with the nodes) and `xrestore`
-- (a stream written whole: entries, nodes, groups, consumers, PELs). No table changes.
SELECT 1;
