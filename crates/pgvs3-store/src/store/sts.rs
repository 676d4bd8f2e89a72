//! STS sessions and roles as the gateway reads and writes them (`functions/sts.sql`): a role's
//! trust for an assumption, an issuer's key set, a new session's row, and a session's
//! credentials for the requests signed with them. The control API (issuers, roles) is
//! `pgvs3_catalog::sts`.

use std::time::SystemTime;

use pgvs3_catalog::sts::Trust;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Json;

use super::catalog::{AccessKey, Catalog};
use super::{StoreError, StoreResult};
use crate::pg::checkout::checkout;

/// Whether `access_key` names a session (`ASIA` and 16 of A-Z, 2-7: the form the gateway issues;
/// `pgvs3.sts_sessions` checks it too). Static keys of this form are never looked up as keys.
pub fn is_session_key(access_key: &str) -> bool {
    access_key.len() == 20
        && access_key.starts_with("ASIA")
        && access_key[4..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// What a session adds to its key: the token it must be presented with and its expiry.
#[derive(Debug, Clone)]
pub struct Session {
    pub role: String,
    /// The `RoleSessionName` it was issued under.
    pub session_name: String,
    /// The token's `sub` (`system:serviceaccount:<ns>:<name>`).
    pub subject: String,
    /// What `${aws:username}` is in the role's policy: `<namespace>/<name>` for a ServiceAccount,
    /// else the subject.
    pub username: String,
    pub token_sha256: Vec<u8>,
    pub expires_at: SystemTime,
}

impl Session {
    /// Whether `token` is this session's (compared in constant time).
    pub fn token_matches(&self, token: &str) -> bool {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(token.as_bytes());
        digest.len() == self.token_sha256.len()
            && digest
                .iter()
                .zip(&self.token_sha256)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    pub fn expired(&self) -> bool {
        SystemTime::now() >= self.expires_at
    }
}

/// `${aws:username}` of a subject: `<namespace>/<name>` for a ServiceAccount.
fn username_of(subject: &str) -> String {
    match subject
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, name)) => format!("{namespace}/{name}"),
        None => subject.to_owned(),
    }
}

/// A role as an assumption reads it.
pub struct RoleTrust {
    pub trust: Trust,
    pub max_session_seconds: i32,
}

/// A session to store.
pub struct NewSession<'a> {
    pub access_key: &'a str,
    pub secret: &'a str,
    pub token_sha256: &'a [u8],
    pub role: &'a str,
    pub subject: &'a str,
    pub session_name: &'a str,
    pub seconds: i32,
}

impl Catalog {
    /// The role `name`, `None` when there is none.
    pub async fn sts_role(&self, name: &str) -> StoreResult<Option<RoleTrust>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt("SELECT trust, max_session_seconds FROM pgvs3.sts_role($1)", &[&name])
            .await?;
        Ok(row.map(|row| RoleTrust {
            trust: row.get::<_, Json<Trust>>("trust").0,
            max_session_seconds: row.get("max_session_seconds"),
        }))
    }

    /// The version of `issuer`'s key set, with the set unless its version is `known` (the one
    /// the caller parsed already: a verification then transfers no keys); `None` when the
    /// issuer is not registered.
    pub async fn oidc_issuer_keys(
        &self,
        issuer: &str,
        known: Option<i64>,
    ) -> StoreResult<Option<(i64, Option<serde_json::Value>)>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt(
                "SELECT version, CASE WHEN version IS DISTINCT FROM $2 THEN jwks END AS jwks
                   FROM pgvs3.oidc_issuer_jwks($1)",
                &[&issuer, &known],
            )
            .await?;
        Ok(row.map(|row| {
            let jwks: Option<Json<serde_json::Value>> = row.get("jwks");
            (row.get("version"), jwks.map(|jwks| jwks.0))
        }))
    }

    /// Stores a session (its secret sealed); its expiry on the database's clock. `None` when the
    /// role was deleted meanwhile.
    pub async fn open_session(&self, session: &NewSession<'_>) -> StoreResult<Option<SystemTime>> {
        let sealed = self.master_key().seal(session.secret);
        let client = checkout(self.pool()).await?;
        let opened = client
            .query_one(
                "SELECT pgvs3.sts_open_session($1, $2, $3, $4, $5, $6, $7) AS expires_at",
                &[
                    &session.access_key,
                    &sealed,
                    &session.token_sha256,
                    &session.role,
                    &session.subject,
                    &session.session_name,
                    &session.seconds,
                ],
            )
            .await;
        match opened {
            Ok(row) => Ok(Some(row.get("expires_at"))),
            Err(err) if err.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// A session's credentials as a key (its policy the role's, read now), with the catalog
    /// version of the snapshot; `None` when there is no such session (or its role is gone).
    pub(super) async fn session_key(&self, access_key: &str) -> StoreResult<Option<(AccessKey, i64)>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt(
                "SELECT secret_encrypted, token_sha256, role, subject, expires_at, policy::text AS policy,
                        (SELECT version FROM pgvs3.catalog_version) AS catalog_version, session_name
                   FROM pgvs3.sts_session($1)",
                &[&access_key],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let corrupt = |what: String| StoreError::Corrupt(format!("session {access_key}: {what}"));
        let sealed: Vec<u8> = row.get("secret_encrypted");
        let secret = self
            .master_key()
            .open(&sealed)
            .map_err(|err| corrupt(err.to_string()))?;
        let policy_text: String = row.get("policy");
        let policy = crate::access::policy::BucketPolicy::parse_identity(&policy_text)
            .map_err(|err| corrupt(format!("its role's policy: {err}")))?;
        let subject: String = row.get("subject");
        let role: String = row.get("role");
        let key = AccessKey {
            access_key: access_key.to_owned(),
            secret,
            policy: Some(std::sync::Arc::new(policy)),
            policy_text: Some(policy_text),
            is_root: false,
            read_only: false,
            description: format!("session of role {role} for {subject}"),
            created_at: SystemTime::now(),
            session: Some(Session {
                username: username_of(&subject),
                subject,
                role,
                session_name: row.get("session_name"),
                token_sha256: row.get("token_sha256"),
                expires_at: row.get("expires_at"),
            }),
        };
        Ok(Some((key, row.get("catalog_version"))))
    }

    /// Deletes sessions expired for more than an hour (until then their keys are answered
    /// ExpiredToken); how many.
    pub async fn reap_sessions(&self) -> StoreResult<i64> {
        let client = checkout(self.pool()).await?;
        Ok(client
            .query_one("SELECT pgvs3.sts_reap_sessions() AS reaped", &[])
            .await?
            .get("reaped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_and_usernames() {
        assert!(is_session_key("ASIAABCDEFGH23456723"));
        assert!(!is_session_key("ASIAabcdefgh23456723"));
        assert!(!is_session_key("AKIAABCDEFGH23456723"));
        assert!(!is_session_key("ASIA"));
        assert_eq!(username_of("system:serviceaccount:apps:reader"), "apps/reader");
        assert_eq!(username_of("alice"), "alice");
        // A static key of that form would never be found: refused when it is made.
        assert!(super::super::NewAccessKey::check_access_key("ASIAABCDEFGH23456723").is_err());
        assert!(super::super::NewAccessKey::check_access_key("AKIAABCDEFGH23456723").is_ok());
    }
}
