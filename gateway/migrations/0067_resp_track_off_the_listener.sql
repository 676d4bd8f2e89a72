-- Layout v67: CLIENT TRACKING's marks are made on a pooled connection, naming the gateway's
-- LISTEN connection by its backend (functions/resp_pubsub.sql gains resp_track's `listener`; the
-- form without it stays for gateways of v66). Made on the LISTEN connection, the mark's DDL
-- waited there for the writers of the namespace's objects table, past the connection's liveness
-- probe, which gave it up and opened it again (and the DDL with it), again and again.
SELECT 1;
