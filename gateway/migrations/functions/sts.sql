-- STS (layout v32): the control API the operator and `pgvs3 admin` call (issuers, roles) and
-- the gateways' own calls (sessions). crates/pgvs3-catalog/src/sts.rs is the typed client.
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- Upserts an issuer and its key set. Replacing the set is how a rotation reaches every gateway
-- (a key the API server stops publishing is gone). Re-putting the same set changes no row.
CREATE OR REPLACE FUNCTION pgvs3.put_oidc_issuer(p_issuer text, p_jwks jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(p_jwks -> 'keys') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'a JSON Web Key Set is an object with a "keys" array' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_jwks::text) > 65536 OR jsonb_array_length(p_jwks -> 'keys') > 64 THEN
        RAISE EXCEPTION 'the key set is over 64 KiB or 64 keys' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgvs3.oidc_issuers AS i (issuer, jwks) VALUES (p_issuer, p_jwks)
    ON CONFLICT (issuer) DO UPDATE
        SET jwks = EXCLUDED.jwks, version = i.version + 1, updated_at = now()
        WHERE i.jwks IS DISTINCT FROM EXCLUDED.jwks;
END $$;

-- Forgets an issuer: its tokens are refused from then on. False when there was none.
CREATE OR REPLACE FUNCTION pgvs3.delete_oidc_issuer(p_issuer text) RETURNS boolean LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM pgvs3.oidc_issuers WHERE issuer = p_issuer RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

-- An issuer's key set and its version (no row when the issuer is not registered).
CREATE OR REPLACE FUNCTION pgvs3.oidc_issuer_jwks(p_issuer text, OUT jwks jsonb, OUT version bigint)
RETURNS SETOF record LANGUAGE sql STABLE AS $$
    SELECT i.jwks, i.version FROM pgvs3.oidc_issuers i WHERE i.issuer = p_issuer
$$;

-- Upserts a role. Trust: {"issuer": url, "audience": text, "subjects": [text, ...]} (a subject
-- `system:serviceaccount:<ns>:*` is every ServiceAccount of the namespace); policy: an IAM
-- identity policy document (checked by the gateway that evaluates it). Re-putting the same role
-- changes no row.
CREATE OR REPLACE FUNCTION pgvs3.put_role(p_name text, p_trust jsonb, p_policy jsonb, p_max_session_seconds integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(p_trust -> 'issuer') IS DISTINCT FROM 'string'
       OR jsonb_typeof(p_trust -> 'audience') IS DISTINCT FROM 'string'
       OR jsonb_typeof(p_trust -> 'subjects') IS DISTINCT FROM 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_trust -> 'subjects') s WHERE jsonb_typeof(s) <> 'string') THEN
        RAISE EXCEPTION 'a role trust is {"issuer": text, "audience": text, "subjects": [text, ...]}'
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(p_policy -> 'Statement') IS NULL OR octet_length(p_policy::text) > 20480 THEN
        RAISE EXCEPTION 'a role policy is a policy document with a Statement, at most 20 KiB'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgvs3.sts_roles AS r (name, trust, policy, max_session_seconds)
    VALUES (p_name, p_trust, p_policy, p_max_session_seconds)
    ON CONFLICT (name) DO UPDATE
        SET trust = EXCLUDED.trust, policy = EXCLUDED.policy, max_session_seconds = EXCLUDED.max_session_seconds
        WHERE (r.trust, r.policy, r.max_session_seconds)
              IS DISTINCT FROM (EXCLUDED.trust, EXCLUDED.policy, EXCLUDED.max_session_seconds);
END $$;

-- Deletes a role and so every live session it handed out (the sessions' foreign key cascades;
-- the catalog version bump makes every gateway drop the sessions it cached).
CREATE OR REPLACE FUNCTION pgvs3.delete_role(p_name text) RETURNS void LANGUAGE sql AS $$
    DELETE FROM pgvs3.sts_roles WHERE name = p_name
$$;

-- Every role, by name.
CREATE OR REPLACE FUNCTION pgvs3.list_roles()
RETURNS TABLE (name text, trust jsonb, policy jsonb, max_session_seconds integer, live_sessions bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.name, r.trust, r.policy, r.max_session_seconds,
           (SELECT count(*) FROM pgvs3.sts_sessions s WHERE s.role = r.name AND s.expires_at > now())
      FROM pgvs3.sts_roles r ORDER BY r.name
$$;

-- One role with its issuer's key set version (NULL when the issuer is not registered).
CREATE OR REPLACE FUNCTION pgvs3.sts_role(p_name text)
RETURNS TABLE (trust jsonb, policy jsonb, max_session_seconds integer, issuer_version bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.trust, r.policy, r.max_session_seconds, i.version
      FROM pgvs3.sts_roles r LEFT JOIN pgvs3.oidc_issuers i ON i.issuer = r.trust ->> 'issuer'
     WHERE r.name = p_name
$$;

-- Stores a session the gateway issued; its expiry (the database's clock, which every gateway
-- checks against). Fails with a foreign key violation when the role was deleted meanwhile.
CREATE OR REPLACE FUNCTION pgvs3.sts_open_session(p_access_key text, p_secret_encrypted bytea, p_token_sha256 bytea,
                                                  p_role text, p_subject text, p_session_name text, p_seconds integer)
RETURNS timestamptz LANGUAGE sql AS $$
    INSERT INTO pgvs3.sts_sessions (access_key, secret_encrypted, token_sha256, role, subject, session_name, expires_at)
    VALUES (p_access_key, p_secret_encrypted, p_token_sha256, p_role, p_subject, p_session_name,
            now() + make_interval(secs => p_seconds))
    RETURNING expires_at
$$;

-- A session with its role's current policy: no row when unknown (or its role is gone). Expired
-- sessions are answered too, so the gateway can say ExpiredToken rather than InvalidAccessKeyId.
CREATE OR REPLACE FUNCTION pgvs3.sts_session(p_access_key text)
RETURNS TABLE (secret_encrypted bytea, token_sha256 bytea, role text, subject text, session_name text,
               expires_at timestamptz, policy jsonb, seconds_left double precision)
LANGUAGE sql STABLE AS $$
    SELECT s.secret_encrypted, s.token_sha256, s.role, s.subject, s.session_name, s.expires_at, r.policy,
           extract(epoch FROM s.expires_at - now())::double precision
      FROM pgvs3.sts_sessions s JOIN pgvs3.sts_roles r ON r.name = s.role
     WHERE s.access_key = p_access_key
$$;

-- Deletes sessions that expired more than `grace` ago (kept that long so their keys are answered
-- ExpiredToken, not InvalidAccessKeyId); how many.
CREATE OR REPLACE FUNCTION pgvs3.sts_reap_sessions(grace interval DEFAULT '1 hour') RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM pgvs3.sts_sessions WHERE expires_at < now() - grace RETURNING 1)
    SELECT count(*) FROM gone
$$;
