-- Writes judge versioning after they hold the key's locks (layout v59): functions/objects.sql
-- gains versioning_now(), the bucket's state as committed when it is called. An object write
-- read it from its statement's snapshot, taken before it waited for a key's locks or row, and
-- wrote under a state a switch that committed meanwhile had replaced (a null version on top of
-- an Enabled delete marker; an overwrite that kept no version in a bucket just Enabled).
SELECT 1;
