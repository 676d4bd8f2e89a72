-- Layout v34: an access key can be disabled (and enabled again) without deleting it. The
-- gateways' key lookup skips a disabled key, so S3 and RESP refuse it as an unknown key; the
-- access_keys trigger moves the catalog version, so every gateway of the fleet reloads at once.
ALTER TABLE pgvs3.access_keys ADD COLUMN disabled boolean NOT NULL DEFAULT false;
