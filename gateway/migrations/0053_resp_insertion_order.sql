-- The order a small hash answers HGETALL, HKEYS, HVALS and HSCAN in (layout v53): Redis's
-- listpack keeps fields in the order they were first added (a field deleted and set again goes
-- to the end), and clients see it (type/hash's `Hash ziplist of various encodings`). `added`
-- numbers a field when it is inserted, from one sequence for every hash (only the order within
-- a key matters; CACHE 1, so that numbers follow commit order across backends of the same key,
-- whose writes serialize on its resp_keys row); an update keeps it. Fields of before this
-- layout have none and come first, in byte order. Added without a default first, then given
-- one: no rewrite of the table.
CREATE SEQUENCE pgvs3.resp_hash_added;
ALTER TABLE pgvs3.resp_hash ADD COLUMN added bigint;
ALTER TABLE pgvs3.resp_hash ALTER COLUMN added SET DEFAULT nextval('pgvs3.resp_hash_added');
