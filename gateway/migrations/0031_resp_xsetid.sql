-- Layout v31: functions/resp_stream.sql answers XSETID (a stream's last ID, entries added and
-- greatest deleted ID set as Redis sets them). No table changes.
SELECT 1;
