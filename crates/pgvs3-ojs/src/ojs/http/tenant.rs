//! Tenants of the OJS endpoint: which tenant a request acts as (its `X-OJS-Tenant` header, or
//! the tenant its bearer token is bound to by `--ojs-tenant-token TENANT=TOKEN`), and the check
//! that a tenant name is one the job store keeps.
//!
//! What this enforces: every job and workflow a request enqueues belongs to its tenant, and the
//! job routes (read, cancel, ack, nack, progress, heartbeat, fetch, dead letter, workflows) see
//! only that tenant's jobs, workflows, workers and rate-limit keys (a worker id or key another
//! tenant uses too is another one).
//! Without tenant tokens the header is a claim: any client that may reach the endpoint (or holds
//! `--ojs-token`) may act as any tenant. A tenant token makes it a credential: that token acts as
//! its tenant only, and reaches only the routes scoped by tenant ([`is_scoped`]); the others
//! (events, webhooks, cron, queues, admin) span all tenants and stay the operator's.

use std::sync::{Arc, RwLock};

use http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use super::super::engine::DEFAULT_TENANT;
use super::OjsError;

pub const TENANT_HEADER: &str = "x-ojs-tenant";
/// Longest tenant name: a tenant is an identifier, not a payload.
const MAX_TENANT_BYTES: usize = 128;

/// `--ojs-tenant-token TENANT=TOKEN`: a bearer token that authenticates its holder as TENANT.
#[derive(Debug, Clone)]
pub struct TenantToken {
    pub tenant: String,
    pub token: String,
}

impl std::str::FromStr for TenantToken {
    type Err = String;

    fn from_str(text: &str) -> Result<TenantToken, String> {
        let (tenant, token) = text
            .split_once('=')
            .ok_or_else(|| "expected TENANT=TOKEN".to_string())?;
        check_name(tenant).map_err(|error| error.message)?;
        if token.is_empty() {
            return Err("the token after TENANT= is empty".into());
        }
        Ok(TenantToken {
            tenant: tenant.to_string(),
            token: token.to_string(),
        })
    }
}

/// Whom a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acting {
    pub tenant: String,
    /// Authenticated by a tenant token: limited to the routes scoped by tenant.
    pub bound: bool,
    /// The tenant was named (by the header or a tenant token), not defaulted: a job's
    /// `meta.tenant_id` must then agree with it.
    pub named: bool,
}

impl Acting {
    /// The tenant a request acts as when it names none (health, internal jobs).
    pub fn default_tenant() -> Acting {
        Acting {
            tenant: DEFAULT_TENANT.to_string(),
            bound: false,
            named: false,
        }
    }

    /// The tenant of a job this request enqueues (ojs-multi-tenancy §5.1, §5.3): its
    /// `meta.tenant_id` when the request names no tenant (the spec's default strategy); the
    /// request's tenant otherwise, written into `meta.tenant_id` when the job carries none. A
    /// `meta.tenant_id` that disagrees with the header is 400, with a tenant token 403 (the
    /// token acts as its tenant only). A malformed `meta` is left to the envelope's checks.
    pub fn tenant_of_job(&self, job: &mut Value) -> Result<String, OjsError> {
        let Some(meta) = job.get_mut("meta").and_then(Value::as_object_mut) else {
            if self.named
                && let Some(fields) = job.as_object_mut()
                && !fields.contains_key("meta")
            {
                fields.insert("meta".into(), serde_json::json!({ "tenant_id": self.tenant }));
            }
            return Ok(self.tenant.clone());
        };
        let Some(given) = meta.get("tenant_id") else {
            if self.named {
                meta.insert("tenant_id".into(), Value::String(self.tenant.clone()));
            }
            return Ok(self.tenant.clone());
        };
        let Some(given) = given.as_str() else {
            return Err(OjsError::invalid("meta.tenant_id must be a string"));
        };
        check_name(given).map_err(|error| OjsError::invalid(format!("meta.tenant_id: {}", error.message)))?;
        if !self.named || given == self.tenant {
            return Ok(given.to_string());
        }
        if self.bound {
            return Err(OjsError::forbidden(format!(
                "this token acts as tenant {:?} only, not meta.tenant_id {given:?}",
                self.tenant
            )));
        }
        Err(OjsError::invalid(format!(
            "X-OJS-Tenant {:?} and meta.tenant_id {given:?} disagree",
            self.tenant
        ))
        .with_details(serde_json::json!({ "header": self.tenant, "meta_tenant_id": given })))
    }
}

/// The tenant of the jobs one request sends together (a batch, a workflow's members): each job's
/// as [`Acting::tenant_of_job`] finds it, and the same for all, since such a request is one
/// tenant's (for workflows, ojs-multi-tenancy §15.2: a member of another tenant is refused).
pub struct OneTenant<'a> {
    acting: &'a Acting,
    /// What the jobs form, for the error: "batch" or "workflow".
    what: &'static str,
    tenant: Option<String>,
}

impl<'a> OneTenant<'a> {
    pub fn of(acting: &'a Acting, what: &'static str) -> OneTenant<'a> {
        OneTenant {
            acting,
            what,
            tenant: None,
        }
    }

    /// Takes one more job's tenant (writing it into the job's `meta` as for a job alone).
    pub fn add(&mut self, job: &mut Value) -> Result<(), OjsError> {
        let of_job = self.acting.tenant_of_job(job)?;
        match &self.tenant {
            Some(first) if *first != of_job => Err(OjsError::invalid(format!(
                "meta.tenant_id {of_job:?} is not the {what}'s tenant {first:?}; a {what} is one tenant's",
                what = self.what
            ))),
            _ => {
                self.tenant = Some(of_job);
                Ok(())
            }
        }
    }

    /// The jobs' tenant; the request's when no job was taken.
    pub fn tenant(self) -> String {
        self.tenant.unwrap_or_else(|| self.acting.tenant.clone())
    }
}

/// Whether a route under `/ojs/v1` (its path segments) sees only the request's tenant's jobs.
pub fn is_scoped(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["health"]
            | ["jobs", ..]
            | ["workers", "fetch" | "ack" | "nack" | "progress" | "heartbeat" | "beat"]
            | ["workers", _, "health"]
            | ["dead-letter", ..]
            | ["rate-limits", ..]
            | ["workflows", ..]
    )
}

/// The token that authenticates without binding a tenant: `--ojs-token` as configured, or the
/// root key's `<access-key>:<secret>` as the catalog holds it now. The gateway sets the latter
/// again on every catalog reload, so a rotated root secret replaces the old token (which stops
/// working) without a restart. Empty (the root key is gone): no token matches.
#[derive(Debug, Clone, Default)]
pub struct OperatorToken(Arc<RwLock<Option<String>>>);

impl OperatorToken {
    pub fn new(token: Option<String>) -> OperatorToken {
        OperatorToken(Arc::new(RwLock::new(token)))
    }

    pub fn set(&self, token: Option<String>) {
        *self.0.write().expect("token lock") = token;
    }

    pub fn get(&self) -> Option<String> {
        self.0.read().expect("token lock").clone()
    }
}

/// Who may call the job routes, and as which tenant.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `--ojs-token` or the root key's: authenticates without binding a tenant (the header
    /// chooses).
    pub token: Option<OperatorToken>,
    pub tenant_tokens: Vec<TenantToken>,
}

impl Credentials {
    fn required(&self) -> bool {
        self.token.is_some() || !self.tenant_tokens.is_empty()
    }

    /// The tenant a request acts as: 401 without an accepted token (when tokens are
    /// configured), 400 for a malformed header, 403 for a header that names another tenant
    /// than the one the request's tenant token is bound to.
    pub fn tenant_of(&self, headers: &HeaderMap) -> Result<Acting, OjsError> {
        let claimed = match headers.get(TENANT_HEADER) {
            None => None,
            Some(value) => Some(
                value
                    .to_str()
                    .map_err(|_| OjsError::invalid("X-OJS-Tenant must be printable ASCII"))
                    .and_then(|name| check_name(name).map(|()| name))?,
            ),
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let matches = |token: &str| presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes()));
        if let Some(bound) = self.tenant_tokens.iter().find(|bound| matches(&bound.token)) {
            return match claimed {
                Some(name) if name != bound.tenant => Err(OjsError::forbidden(format!(
                    "this token acts as tenant {:?} only, not {name:?}",
                    bound.tenant
                ))),
                _ => Ok(Acting {
                    tenant: bound.tenant.clone(),
                    bound: true,
                    named: true,
                }),
            };
        }
        let operator = self.token.as_ref().and_then(OperatorToken::get);
        if self.required() && !operator.as_deref().is_some_and(matches) {
            return Err(OjsError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "unauthenticated",
                "missing or wrong bearer token",
            ));
        }
        Ok(Acting {
            tenant: claimed.unwrap_or(DEFAULT_TENANT).to_string(),
            bound: false,
            named: claimed.is_some(),
        })
    }
}

/// A tenant name: 1 to [`MAX_TENANT_BYTES`] printable ASCII characters, no spaces.
fn check_name(name: &str) -> Result<(), OjsError> {
    if name.is_empty() || name.len() > MAX_TENANT_BYTES || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(OjsError::invalid(format!(
            "a tenant is 1 to {MAX_TENANT_BYTES} printable ASCII characters without spaces"
        )));
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn bound() -> Credentials {
        Credentials {
            token: Some(OperatorToken::new(Some("operator".into()))),
            tenant_tokens: vec!["acme=acme-secret".parse().unwrap()],
        }
    }

    #[test]
    fn without_tokens_the_header_chooses_and_defaults() {
        let open = Credentials::default();
        assert_eq!(open.tenant_of(&headers(&[])).unwrap().tenant, DEFAULT_TENANT);
        let claimed = open.tenant_of(&headers(&[(TENANT_HEADER, "acme")])).unwrap();
        assert_eq!((claimed.tenant.as_str(), claimed.bound), ("acme", false));
        assert_eq!(
            open.tenant_of(&headers(&[(TENANT_HEADER, "a b")])).unwrap_err().status,
            400
        );
        let long = "t".repeat(MAX_TENANT_BYTES + 1);
        assert_eq!(
            open.tenant_of(&headers(&[(TENANT_HEADER, &long)])).unwrap_err().status,
            400
        );
    }

    #[test]
    fn a_tenant_token_acts_as_its_tenant_only() {
        let credentials = bound();
        let acme = [("authorization", "Bearer acme-secret")];
        let as_acme = Acting {
            tenant: "acme".into(),
            bound: true,
            named: true,
        };
        assert_eq!(credentials.tenant_of(&headers(&acme)).unwrap(), as_acme);
        let claimed = [acme[0], (TENANT_HEADER, "acme")];
        assert_eq!(credentials.tenant_of(&headers(&claimed)).unwrap(), as_acme);
        let other = [acme[0], (TENANT_HEADER, "globex")];
        assert_eq!(credentials.tenant_of(&headers(&other)).unwrap_err().status, 403);
        let operator = [("authorization", "Bearer operator"), (TENANT_HEADER, "globex")];
        let as_operator = credentials.tenant_of(&headers(&operator)).unwrap();
        assert_eq!((as_operator.tenant.as_str(), as_operator.bound), ("globex", false));
        let wrong = [("authorization", "Bearer guess"), (TENANT_HEADER, "acme")];
        assert_eq!(credentials.tenant_of(&headers(&wrong)).unwrap_err().status, 401);
        assert_eq!(credentials.tenant_of(&headers(&[])).unwrap_err().status, 401);
    }

    #[test]
    fn tenant_tokens_parse_as_tenant_equals_token() {
        assert!("acme".parse::<TenantToken>().is_err());
        assert!("acme=".parse::<TenantToken>().is_err());
        assert!("=secret".parse::<TenantToken>().is_err());
        let parsed: TenantToken = "acme=s=cret".parse().unwrap();
        assert_eq!((parsed.tenant.as_str(), parsed.token.as_str()), ("acme", "s=cret"));
    }
}
