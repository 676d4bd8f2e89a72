//! STS (`AssumeRoleWithWebIdentity`): the OpenID issuers whose tokens the gateways verify, and
//! the roles those tokens may become. The operator publishes each cluster's key set (the API
//! server's `/openid/v1/jwks`) and a role per Bucket's `spec.access.serviceAccounts`; `pgvs3
//! admin oidc-issuer` / `pgvs3 admin role` do the same on plain installs. Functions:
//! gateway/migrations/functions/sts.sql.

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Json;

use crate::{ErrorKind, Refusal, Refusals, Result, classify};

/// The account id of every role ARN (pgvs3 has one account).
pub const ACCOUNT_ID: &str = "000000000000";

/// The audience a token must carry when the role names no other (the projected token's
/// `audience: pgvs3`).
pub const DEFAULT_AUDIENCE: &str = "pgvs3";

/// The ARN of role `name`, as clients pass it in `RoleArn` (`AWS_ROLE_ARN`):
/// `arn:aws:iam::000000000000:role/<name>`.
pub fn role_arn(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT_ID}:role/{name}")
}

/// The role name of an ARN [`role_arn`] writes (a path, `role/a/b/name`, ends in the name as
/// IAM's do); `None` for anything else.
pub fn role_name(arn: &str) -> Option<&str> {
    let rest = arn.strip_prefix("arn:aws:iam::")?;
    let (_account, resource) = rest.split_once(':')?;
    let path = resource.strip_prefix("role/")?;
    let name = path.rsplit('/').next()?;
    (!name.is_empty()).then_some(name)
}

/// The subject of ServiceAccount `name` in `namespace` as the API server writes it in `sub`
/// (`name` `*`: every ServiceAccount of the namespace).
pub fn service_account_subject(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Who may assume a role: tokens of `issuer`, for `audience`, whose `sub` is one of
/// `subjects` (an entry ending in `*` matches every subject with that prefix, as
/// `system:serviceaccount:<ns>:*` does every ServiceAccount of a namespace) and, when the trust
/// pins them, whose ServiceAccount is one of `service_account_uids`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    pub issuer: String,
    pub audience: String,
    pub subjects: Vec<String>,
    /// The UIDs of the ServiceAccounts that exist now (the operator's roles pin them, and
    /// rewrite them as ServiceAccounts come and go): a token's `kubernetes.io` →
    /// `serviceaccount` → `uid` must be one of them. A token stays valid offline until its
    /// `exp` however its ServiceAccount fares; this is what refuses one replayed after the
    /// ServiceAccount's deletion, and one of a deleted account recreated under the same name
    /// (which gets a new UID). `None`: subjects alone (`pgvs3 admin role` without UIDs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_uids: Option<Vec<String>>,
}

impl Trust {
    /// Whether a token of `subject`, of the ServiceAccount `uid` (its claim, when it has one),
    /// is one this trust admits.
    pub fn admits(&self, subject: &str, uid: Option<&str>) -> bool {
        let named = self.subjects.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => subject.starts_with(prefix),
            None => pattern == subject,
        });
        named
            && self
                .service_account_uids
                .as_ref()
                .is_none_or(|uids| uid.is_some_and(|uid| uids.iter().any(|pinned| pinned == uid)))
    }
}

/// A role as the catalog keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    pub name: String,
    pub trust: Trust,
    /// An IAM identity policy document (Version, Statement with Effect/Action/Resource).
    pub policy: serde_json::Value,
    pub max_session_seconds: i32,
    /// Unexpired sessions it handed out.
    pub live_sessions: i64,
}

/// The shortest and longest session a role may allow (`DurationSeconds`' range, as IAM's).
pub const MIN_SESSION_SECONDS: i32 = 900;
pub const MAX_SESSION_SECONDS: i32 = 43_200;

/// Registers `issuer` (a token's `iss`) with its JSON Web Key Set as published at
/// `/openid/v1/jwks`, or replaces the set: replacing it is how a key rotation reaches every
/// gateway (tokens signed by a key no longer in the set are refused). Re-putting the same set
/// changes nothing. A set that is not `{"keys": [...]}`, or over 64 KiB or 64 keys, is
/// [`ErrorKind::Refused`].
pub async fn put_oidc_issuer(client: &impl GenericClient, issuer: &str, jwks: &serde_json::Value) -> Result<()> {
    const REFUSALS: Refusals = &[
        (Refusal::Code(SqlState::INVALID_PARAMETER_VALUE), ErrorKind::Refused),
        (Refusal::Code(SqlState::CHECK_VIOLATION), ErrorKind::Refused),
    ];
    client
        .execute("SELECT pgvs3.put_oidc_issuer($1, $2)", &[&issuer, &Json(jwks)])
        .await
        .map_err(classify(REFUSALS))?;
    Ok(())
}

/// Forgets `issuer`: its tokens are refused from then on. False when it was not registered.
pub async fn delete_oidc_issuer(client: &impl GenericClient, issuer: &str) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.delete_oidc_issuer($1) AS deleted", &[&issuer])
        .await
        .map_err(classify(&[]))?;
    Ok(row.get("deleted"))
}

/// Creates or replaces role `name` (its ARN: [`role_arn`]). A malformed trust or a policy
/// without a `Statement` (or over 20 KiB) is [`ErrorKind::Refused`]; a name IAM refuses
/// (`[A-Za-z0-9+=,.@_-]{1,64}`) or `max_session_seconds` outside
/// [`MIN_SESSION_SECONDS`]..=[`MAX_SESSION_SECONDS`] is [`ErrorKind::InvalidSetting`]. The
/// policy is read by the gateways at each session's requests, so a change applies to live
/// sessions too. Re-putting the same role changes nothing.
pub async fn put_role(
    client: &impl GenericClient,
    name: &str,
    trust: &Trust,
    policy: &serde_json::Value,
    max_session_seconds: i32,
) -> Result<()> {
    const REFUSALS: Refusals = &[
        (Refusal::Code(SqlState::INVALID_PARAMETER_VALUE), ErrorKind::Refused),
        (Refusal::Code(SqlState::CHECK_VIOLATION), ErrorKind::InvalidSetting),
    ];
    client
        .execute(
            "SELECT pgvs3.put_role($1, $2, $3, $4)",
            &[&name, &Json(trust), &Json(policy), &max_session_seconds],
        )
        .await
        .map_err(classify(REFUSALS))?;
    Ok(())
}

/// Deletes role `name` and ends every session it handed out, on every gateway at once. Deleting
/// a role that does not exist is not an error.
pub async fn delete_role(client: &impl GenericClient, name: &str) -> Result<()> {
    client
        .execute("SELECT pgvs3.delete_role($1)", &[&name])
        .await
        .map_err(classify(&[]))?;
    Ok(())
}

/// Every role, by name.
pub async fn list_roles(client: &impl GenericClient) -> Result<Vec<Role>> {
    let rows = client
        .query(
            "SELECT name, trust, policy, max_session_seconds, live_sessions FROM pgvs3.list_roles()",
            &[],
        )
        .await
        .map_err(classify(&[]))?;
    Ok(rows
        .iter()
        .map(|row| Role {
            name: row.get("name"),
            trust: row.get::<_, Json<Trust>>("trust").0,
            policy: row.get::<_, Json<serde_json::Value>>("policy").0,
            max_session_seconds: row.get("max_session_seconds"),
            live_sessions: row.get("live_sessions"),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_arns_name_their_role() {
        assert_eq!(role_arn("reader"), "arn:aws:iam::000000000000:role/reader");
        assert_eq!(role_name(&role_arn("reader")), Some("reader"));
        assert_eq!(role_name("arn:aws:iam::123456789012:role/team/reader"), Some("reader"));
        for not_a_role in [
            "reader",
            "arn:aws:iam::0:user/reader",
            "arn:aws:iam::0:role/",
            "arn:aws:s3:::b",
        ] {
            assert_eq!(role_name(not_a_role), None, "{not_a_role}");
        }
    }

    #[test]
    fn trust_matches_subjects_and_namespace_wildcards() {
        let trust = Trust {
            issuer: "https://kubernetes.default.svc".into(),
            audience: DEFAULT_AUDIENCE.into(),
            subjects: vec![
                service_account_subject("apps", "reader"),
                service_account_subject("batch", "*"),
            ],
            service_account_uids: None,
        };
        assert!(trust.admits("system:serviceaccount:apps:reader", None));
        assert!(!trust.admits("system:serviceaccount:apps:reader2", None));
        assert!(!trust.admits("system:serviceaccount:apps:writer", None));
        assert!(trust.admits("system:serviceaccount:batch:anyone", Some("u")));
        assert!(!trust.admits("system:serviceaccount:batch2:anyone", None));
    }

    #[test]
    fn pinned_uids_refuse_other_and_missing_ones() {
        let trust = Trust {
            issuer: "https://kubernetes.default.svc".into(),
            audience: DEFAULT_AUDIENCE.into(),
            subjects: vec![service_account_subject("apps", "reader")],
            service_account_uids: Some(vec!["uid-now".into()]),
        };
        let reader = "system:serviceaccount:apps:reader";
        assert!(trust.admits(reader, Some("uid-now")));
        assert!(
            !trust.admits(reader, Some("uid-before")),
            "a recreated account's old token"
        );
        assert!(!trust.admits(reader, None), "a token without the claim");
        assert!(!trust.admits("system:serviceaccount:apps:writer", Some("uid-now")));
        // Stored without the field when none are pinned, read back as before.
        let plain = Trust {
            service_account_uids: None,
            ..trust.clone()
        };
        assert!(!serde_json::to_string(&plain).unwrap().contains("service_account_uids"));
        let back: Trust = serde_json::from_str(&serde_json::to_string(&trust).unwrap()).unwrap();
        assert_eq!(back, trust);
    }
}
