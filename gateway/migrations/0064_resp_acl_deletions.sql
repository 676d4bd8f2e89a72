-- Layout v64: how many times ACL DELUSER deleted each RESP user (the user's row in
-- resp_acl_users goes; this one stays). A RESP connection remembers the count when it signs in
-- and closes once it moved, whatever SETUSER did since: a user deleted and made again, or given
-- rules and deleted, between two looks of a connection is no longer taken for the user it
-- signed in as (Redis closes a deleted user's connections). Written in the statement that
-- deletes the rules, whose trigger moves the catalog version. A table of its own, so that the
-- gateways of v61 still running during a rolling upgrade read resp_acl_users as they did.
CREATE TABLE pgvs3.resp_acl_deletions (
    name      text PRIMARY KEY,
    deletions bigint NOT NULL
);
