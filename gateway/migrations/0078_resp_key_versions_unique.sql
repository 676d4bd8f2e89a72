-- Key versions never reused (issue 39): a typed key's version comes from one sequence, at its
-- creation and at every change (functions/resp_*.sql), where it started at 1 and counted up by
-- one. A key deleted and made again started over at 1, and RENAME carried its count onto the
-- destination, so two states of one key name could share a version: a working set (resp/
-- working_set/) holding the older one would take it for the newer. The sequence starts above
-- every version in use, so each version given from here on is new to every key.
CREATE SEQUENCE pgvs3.resp_key_versions AS bigint OWNED BY pgvs3.resp_keys.version;
SELECT setval('pgvs3.resp_key_versions', (SELECT coalesce(max(version), 0) + 1 FROM pgvs3.resp_keys), false);
ALTER TABLE pgvs3.resp_keys ALTER COLUMN version SET DEFAULT nextval('pgvs3.resp_key_versions');
