-- Layout v42: RESP ACL rules (ACL SETUSER). A RESP user is an access key (or `default`, the
-- password/unauthenticated user); a row narrows what its connections may run, on top of the
-- key's own rights. `rules` is the user's description as ACL LIST prints it (without the user's
-- name and password), parsed again by every gateway. The trigger moves the catalog version, so
-- every gateway of the fleet reloads the rules on the NOTIFY, before its clients' next command.
CREATE TABLE pgvs3.resp_acl_users (
    name       text PRIMARY KEY,
    rules      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER resp_acl_users_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.resp_acl_users
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();
