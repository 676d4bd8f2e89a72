-- Layout v32: STS (AssumeRoleWithWebIdentity). OpenID issuers with the key sets their tokens are
-- verified against, roles (who may assume them, what they grant) and the temporary credentials
-- issued, which every gateway of the fleet reads. Functions: functions/sts.sql.

-- An issuer (`iss` of the tokens) and its JSON Web Key Set as published at /openid/v1/jwks.
-- `version` moves on every change of the set: gateways keep parsed keys per issuer and version.
CREATE TABLE pgvs3.oidc_issuers (
    issuer     text PRIMARY KEY CHECK (length(issuer) BETWEEN 1 AND 2048),
    jwks       jsonb NOT NULL,
    version    bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A role: its trust (issuer, audience, subjects that may assume it), its identity policy and
-- the longest session it hands out. Its ARN is arn:aws:iam::000000000000:role/<name>.
CREATE TABLE pgvs3.sts_roles (
    name                text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9+=,.@_-]{1,64}$'),
    trust               jsonb NOT NULL,
    policy              jsonb NOT NULL,
    max_session_seconds integer NOT NULL CHECK (max_session_seconds BETWEEN 900 AND 43200),
    created_at          timestamptz NOT NULL DEFAULT now()
);
-- A role's change or deletion reaches every gateway at once: they drop the sessions they cached.
CREATE TRIGGER sts_roles_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.sts_roles
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();

-- Temporary credentials. The secret is sealed under the master key as static secrets are; the
-- session token is kept only as its SHA-256. Deleting the role ends its sessions.
CREATE TABLE pgvs3.sts_sessions (
    access_key       text PRIMARY KEY CHECK (access_key ~ '^ASIA[A-Z0-9]{16}$'),
    secret_encrypted bytea NOT NULL,
    token_sha256     bytea NOT NULL CHECK (octet_length(token_sha256) = 32),
    role             text NOT NULL REFERENCES pgvs3.sts_roles (name) ON DELETE CASCADE,
    subject          text NOT NULL,
    session_name     text NOT NULL,
    expires_at       timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sts_sessions_expiry ON pgvs3.sts_sessions (expires_at);
CREATE INDEX sts_sessions_role ON pgvs3.sts_sessions (role);
