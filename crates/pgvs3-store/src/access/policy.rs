//! Bucket policies: the IAM policy language subset S3 bucket policies use, checked when put
//! (refused with S3's MalformedPolicy texts, or NotImplemented for parts of the language pgvs3
//! does not evaluate), kept parsed with the catalog, and evaluated per request as IAM does: an
//! explicit Deny wins, then any Allow; otherwise the policy has no opinion. Conditions are
//! `super::condition`'s.
//!
//! Principals: `*` (everyone, anonymous included), and under `AWS` (or `CanonicalUser`) an
//! access key, `arn:aws:iam::<account>:user/<access key>`, or `arn:aws:iam::<account>:root`
//! (or a bare 12-digit account id) for the root keys. A `Service` principal is taken and
//! matches no request of the S3 front.
//!
//! The same language serves an access key's own policy (`pgvs3 admin key policy`), as IAM
//! attaches a policy to a user: no Principal (it applies to its key), resources in any bucket.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::SystemTime;

use serde_json::Value;

use super::condition::Condition;

/// S3's limit on a bucket policy's size.
pub const MAX_POLICY_BYTES: usize = 20 * 1024;

/// A bucket policy (or a key's own policy), parsed.
#[derive(Debug)]
pub struct BucketPolicy {
    statements: Vec<Statement>,
    /// Some condition looks at the existing object's tags (`s3:ExistingObjectTag/<tag>`).
    on_object_tags: bool,
}

#[derive(Debug)]
struct Statement {
    deny: bool,
    principals: Principals,
    /// Lowercase patterns (action names are case-insensitive).
    actions: Vec<String>,
    not_action: bool,
    resources: Vec<String>,
    not_resource: bool,
    conditions: Vec<Condition>,
}

#[derive(Debug)]
enum Principals {
    Anyone,
    /// Access keys, and whether the root keys are named (`...:root`).
    Keys {
        keys: Vec<String>,
        root: bool,
    },
}

/// Object-level actions (lowercase, without `s3:`): their resources are `bucket/key`.
const OBJECT_ACTIONS: &[&str] = &[
    "getobject",
    "getobjectversion",
    "putobject",
    "deleteobject",
    "deleteobjectversion",
    "getobjectacl",
    "getobjectversionacl",
    "putobjectacl",
    "putobjectversionacl",
    "getobjecttagging",
    "getobjectversiontagging",
    "putobjecttagging",
    "putobjectversiontagging",
    "deleteobjecttagging",
    "deleteobjectversiontagging",
    "getobjectattributes",
    "getobjectversionattributes",
    "abortmultipartupload",
    "listmultipartuploadparts",
    "restoreobject",
    "getobjectretention",
    "putobjectretention",
    "getobjectlegalhold",
    "putobjectlegalhold",
    "bypassgovernanceretention",
    "getobjecttorrent",
    "getobjectversiontorrent",
    "replicateobject",
    "replicatedelete",
    "replicatetags",
    "objectowneroverridetobucketowner",
];

/// Bucket-level actions (lowercase, without `s3:`): their resource is the bucket.
const BUCKET_ACTIONS: &[&str] = &[
    "createbucket",
    "deletebucket",
    "listbucket",
    "listbucketversions",
    "listbucketmultipartuploads",
    "getbucketlocation",
    "getbucketpolicy",
    "putbucketpolicy",
    "deletebucketpolicy",
    "getbucketpolicystatus",
    "getbucketacl",
    "putbucketacl",
    "getbucketcors",
    "putbucketcors",
    "getbucketversioning",
    "putbucketversioning",
    "getbuckettagging",
    "putbuckettagging",
    "getlifecycleconfiguration",
    "putlifecycleconfiguration",
    "getbucketwebsite",
    "putbucketwebsite",
    "deletebucketwebsite",
    "getbucketlogging",
    "putbucketlogging",
    "getbucketnotification",
    "putbucketnotification",
    "getencryptionconfiguration",
    "putencryptionconfiguration",
    "getbucketobjectlockconfiguration",
    "putbucketobjectlockconfiguration",
    "getbucketpublicaccessblock",
    "putbucketpublicaccessblock",
    "getbucketownershipcontrols",
    "putbucketownershipcontrols",
    "getreplicationconfiguration",
    "putreplicationconfiguration",
    "getaccelerateconfiguration",
    "putaccelerateconfiguration",
    "getbucketrequestpayment",
    "putbucketrequestpayment",
    "listallmybuckets",
];

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyRefused {
    /// S3's MalformedPolicy, with its text.
    Malformed(String),
    /// Valid IAM that pgvs3 does not evaluate.
    NotImplemented(String),
}

impl std::fmt::Display for PolicyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyRefused::Malformed(message) => write!(f, "malformed policy: {message}"),
            PolicyRefused::NotImplemented(message) => write!(f, "not implemented: {message}"),
        }
    }
}

pub(super) fn malformed<T>(message: impl Into<String>) -> Result<T, PolicyRefused> {
    Err(PolicyRefused::Malformed(message.into()))
}

/// What a policy says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A statement denies it: nothing else can allow it.
    Deny,
    Allow,
    /// No statement applies.
    Silent,
}

/// Who sends a request.
#[derive(Debug, Clone, Copy)]
pub enum Requester<'a> {
    Anonymous,
    Key { access_key: &'a str, is_root: bool },
}

/// A request as a policy sees it. Condition values are looked up only when a statement has
/// conditions.
pub struct RequestContext<'a> {
    pub requester: Requester<'a>,
    /// `s3:GetObject` and the like.
    pub action: &'a str,
    pub bucket: &'a str,
    /// The object, for object-level actions.
    pub key: Option<&'a str>,
    pub source_ip: Option<IpAddr>,
    pub secure_transport: bool,
    pub now: SystemTime,
    pub headers: &'a http::HeaderMap,
    pub query: Option<&'a str>,
    /// The tags of the existing object (of the version the request names) once its row is
    /// read; `None` before. Looked at only for actions on an existing object.
    pub object_tags: Option<&'a BTreeMap<String, String>>,
    /// The bucket's RestrictPublicBuckets is on: public grants (see
    /// [`BucketPolicy::is_public`]) allow nothing.
    pub restrict_public: bool,
}

/// What a policy document is attached to.
enum Scope<'a> {
    /// A bucket's policy: principals name who it applies to; resources are in the bucket.
    Bucket {
        name: &'a str,
        known_key: &'a dyn Fn(&str) -> bool,
    },
    /// An access key's own (identity) policy: it applies to that key, so no Principal; its
    /// resources may be in any bucket.
    Key,
}

impl BucketPolicy {
    /// Parses `text` as the policy of `bucket`; `known_key` says whether an access key exists
    /// (S3 refuses principals that do not).
    pub fn parse(text: &str, bucket: &str, known_key: &dyn Fn(&str) -> bool) -> Result<BucketPolicy, PolicyRefused> {
        BucketPolicy::parse_in(
            text,
            &Scope::Bucket {
                name: bucket,
                known_key,
            },
        )
    }

    /// Parses `text` as an access key's own policy, as IAM takes a user's policy: no
    /// Principal, resources in any bucket.
    pub fn parse_identity(text: &str) -> Result<BucketPolicy, PolicyRefused> {
        BucketPolicy::parse_in(text, &Scope::Key)
    }

    fn parse_in(text: &str, scope: &Scope<'_>) -> Result<BucketPolicy, PolicyRefused> {
        const NOT_JSON: &str = "Policies must be valid JSON and the first byte must be '{'";
        if text.len() > MAX_POLICY_BYTES {
            return malformed("Policy exceeds the maximum allowed document size.");
        }
        if !text.trim_start().starts_with('{') {
            return malformed(NOT_JSON);
        }
        let Ok(Value::Object(document)) = serde_json::from_str::<Value>(text) else {
            return malformed(NOT_JSON);
        };
        let mut statements = None;
        for (field, value) in &document {
            match field.as_str() {
                "Version" => match value.as_str() {
                    Some("2012-10-17" | "2008-10-17") => {}
                    _ => return malformed("The policy must contain a valid version string"),
                },
                "Id" if value.is_string() => {}
                "Statement" => statements = Some(value),
                other => return malformed(format!("Unknown field {other}")),
            }
        }
        let statements: Vec<&Value> = match statements {
            Some(Value::Array(list)) if !list.is_empty() => list.iter().collect(),
            Some(one @ Value::Object(_)) => vec![one],
            _ => return malformed("Missing required field Statement"),
        };
        let statements: Vec<Statement> = statements
            .into_iter()
            .map(|statement| Statement::parse(statement, scope))
            .collect::<Result<_, _>>()?;
        let on_object_tags = statements
            .iter()
            .flat_map(|statement| &statement.conditions)
            .any(Condition::on_object_tags);
        Ok(BucketPolicy {
            statements,
            on_object_tags,
        })
    }

    /// Whether some condition looks at the existing object's tags: a request on an existing
    /// object is then decided once they are read (see `s3/authorize.rs`).
    pub fn on_object_tags(&self) -> bool {
        self.on_object_tags
    }

    /// Explicit Deny, Allow, or nothing said.
    pub fn evaluate(&self, cx: &RequestContext<'_>) -> Decision {
        let resource = match cx.key {
            Some(key) => format!("arn:aws:s3:::{}/{key}", cx.bucket),
            None => format!("arn:aws:s3:::{}", cx.bucket),
        };
        let action = cx.action.to_ascii_lowercase();
        let mut decision = Decision::Silent;
        // RestrictPublicBuckets on a public policy: its public grants allow nothing, and no
        // grant of it reaches an anonymous request ("public and cross-account access derived
        // from any public policy, including non-public delegation", as AWS words it).
        let restricted = cx.restrict_public && self.is_public();
        let anonymous = matches!(cx.requester, Requester::Anonymous);
        for statement in &self.statements {
            if restricted && !statement.deny && (anonymous || statement.public_grant()) {
                continue;
            }
            if statement.applies(cx, &action, &resource) {
                if statement.deny {
                    return Decision::Deny;
                }
                decision = Decision::Allow;
            }
        }
        decision
    }

    /// Whether the policy makes the bucket public, as GetBucketPolicyStatus reports it and
    /// BlockPublicPolicy refuses it: an Allow for everyone not pinned by a condition to fixed
    /// requesters or addresses (see `Condition::narrows_requester`).
    pub fn is_public(&self) -> bool {
        self.statements.iter().any(Statement::public_grant)
    }
}

/// One string or a list of strings, as IAM takes most fields.
fn strings<'v>(value: &'v Value, invalid: &str) -> Result<Vec<&'v str>, PolicyRefused> {
    match value {
        Value::String(one) => Ok(vec![one.as_str()]),
        Value::Array(list) if !list.is_empty() => list
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| PolicyRefused::Malformed(invalid.to_owned()))
            })
            .collect(),
        _ => malformed(invalid),
    }
}

/// Which of the fields a statement must have its parse has met.
#[derive(Default)]
struct Seen {
    effect: bool,
    principal: bool,
    action: bool,
    resource: bool,
}

impl Statement {
    /// An Allow for everyone not pinned by a condition to fixed requesters or addresses.
    fn public_grant(&self) -> bool {
        !self.deny
            && matches!(self.principals, Principals::Anyone)
            && !self.conditions.iter().any(Condition::narrows_requester)
    }

    fn parse(value: &Value, scope: &Scope<'_>) -> Result<Statement, PolicyRefused> {
        let Value::Object(fields) = value else {
            return malformed("Missing required field Statement");
        };
        let mut statement = Statement {
            deny: false,
            principals: Principals::Keys {
                keys: Vec::new(),
                root: false,
            },
            actions: Vec::new(),
            not_action: false,
            resources: Vec::new(),
            not_resource: false,
            conditions: Vec::new(),
        };
        // IAM takes NotPrincipal with Deny only: with Allow the statement is invalid (400), not
        // a part of the language pgvs3 leaves out (NotImplemented below).
        if fields.contains_key("NotPrincipal") && fields.get("Effect").and_then(Value::as_str) == Some("Allow") {
            return malformed("Invalid principal in policy");
        }
        let mut seen = Seen::default();
        for (field, value) in fields {
            statement.parse_field(field, value, scope, &mut seen)?;
        }
        if !seen.effect {
            return malformed("Missing required field Effect");
        }
        match scope {
            Scope::Bucket { .. } if !seen.principal => return malformed("Missing required field Principal"),
            Scope::Bucket { .. } => {}
            Scope::Key => statement.principals = Principals::Anyone,
        }
        if !seen.action {
            return malformed("Missing required field Action");
        }
        if !seen.resource {
            return malformed("Missing required field Resource");
        }
        if !statement.not_action && !statement.not_resource && !statement.some_action_applies() {
            return malformed("Action does not apply to any resource(s) in statement");
        }
        Ok(statement)
    }

    /// Takes one field of a statement's JSON object; `seen` notes the fields a statement must
    /// have.
    fn parse_field(
        &mut self,
        field: &str,
        value: &Value,
        scope: &Scope<'_>,
        seen: &mut Seen,
    ) -> Result<(), PolicyRefused> {
        match field {
            "Sid" if value.is_string() => {}
            "Sid" => return malformed("Statement IDs (SID) must be alpha-numeric."),
            "Effect" => {
                seen.effect = true;
                self.deny = match value.as_str() {
                    Some("Allow") => false,
                    Some("Deny") => true,
                    _ => return malformed(format!("Invalid effect: {}", value.as_str().unwrap_or_default())),
                };
            }
            "Principal" => match scope {
                Scope::Bucket { known_key, .. } => {
                    seen.principal = true;
                    self.principals = Principals::parse(value, *known_key)?;
                }
                Scope::Key => return malformed("Policy document should not specify a principal."),
            },
            "NotPrincipal" => {
                return Err(PolicyRefused::NotImplemented(
                    "NotPrincipal is not supported in bucket policies here".into(),
                ));
            }
            "Action" | "NotAction" => {
                if seen.action {
                    return malformed("Statement may not contain both Action and NotAction");
                }
                seen.action = true;
                self.not_action = field == "NotAction";
                for name in strings(value, "Policy has invalid action")? {
                    self.actions.push(parse_action(name)?);
                }
            }
            "Resource" | "NotResource" => {
                if seen.resource {
                    return malformed("Statement may not contain both Resource and NotResource");
                }
                seen.resource = true;
                self.not_resource = field == "NotResource";
                for arn in strings(value, "Policy has invalid resource")? {
                    self.resources.push(parse_resource(arn, scope)?);
                }
            }
            "Condition" => self.conditions = Condition::parse_block(value)?,
            other => return malformed(format!("Unknown field {other}")),
        }
        Ok(())
    }

    /// Whether some action of the statement can act on some of its resources (S3 refuses a
    /// statement pairing only bucket actions with object resources, or the reverse).
    fn some_action_applies(&self) -> bool {
        self.actions.iter().any(|action| {
            let name = &action[3..];
            let wild = name.contains(['*', '?']);
            self.resources.iter().any(|resource| {
                let path = &resource["arn:aws:s3:::".len()..];
                let object = path.contains('/');
                let either = path.contains(['*', '?']);
                wild || either
                    || (object && OBJECT_ACTIONS.contains(&name))
                    || (!object && BUCKET_ACTIONS.contains(&name))
            })
        })
    }

    fn applies(&self, cx: &RequestContext<'_>, action: &str, resource: &str) -> bool {
        self.principals.include(cx.requester)
            && self.actions.iter().any(|pattern| glob(pattern, action)) != self.not_action
            && self.resources.iter().any(|pattern| glob(pattern, resource)) != self.not_resource
            // A condition the request cannot tell yet (the object's tags unread) counts as its
            // effect demands least: a Deny applies, an Allow does not.
            && self.conditions.iter().all(|condition| condition.holds(cx).unwrap_or(self.deny))
    }
}

impl Principals {
    fn parse(value: &Value, known_key: &dyn Fn(&str) -> bool) -> Result<Principals, PolicyRefused> {
        const INVALID: &str = "Invalid principal in policy";
        let entries = match value {
            Value::String(star) if star == "*" => return Ok(Principals::Anyone),
            Value::Object(map) if !map.is_empty() => {
                let mut entries = Vec::new();
                for (kind, names) in map {
                    match kind.as_str() {
                        "AWS" | "CanonicalUser" => entries.extend(strings(names, INVALID)?),
                        // An AWS service (`logging.s3.amazonaws.com` delivering access logs)
                        // acting for a resource: none of its requests reaches the S3 front, so
                        // it names no requester here.
                        "Service" => {
                            strings(names, INVALID)?;
                        }
                        _ => return malformed(INVALID),
                    }
                }
                entries
            }
            _ => return malformed(INVALID),
        };
        let (mut keys, mut root) = (Vec::new(), false);
        for entry in entries {
            if entry == "*" {
                return Ok(Principals::Anyone);
            }
            if let Some(rest) = entry.strip_prefix("arn:aws:iam::") {
                let Some((_account, name)) = rest.split_once(':') else {
                    return malformed(INVALID);
                };
                match name.strip_prefix("user/") {
                    Some(key) if known_key(key) => keys.push(key.to_owned()),
                    _ if name == "root" => root = true,
                    _ => return malformed(INVALID),
                }
            } else if entry.len() == 12 && entry.bytes().all(|b| b.is_ascii_digit()) && !known_key(entry) {
                root = true;
            } else if known_key(entry) {
                keys.push(entry.to_owned());
            } else {
                return malformed(INVALID);
            }
        }
        Ok(Principals::Keys { keys, root })
    }

    fn include(&self, requester: Requester<'_>) -> bool {
        match (self, requester) {
            (Principals::Anyone, _) => true,
            (Principals::Keys { .. }, Requester::Anonymous) => false,
            (Principals::Keys { keys, root }, Requester::Key { access_key, is_root }) => {
                (*root && is_root) || keys.iter().any(|key| key == access_key)
            }
        }
    }
}

/// An action pattern, lowercase: `s3:` and a known action name, or a pattern with wildcards.
fn parse_action(name: &str) -> Result<String, PolicyRefused> {
    let lower = name.to_ascii_lowercase();
    if lower == "*" {
        return Ok("s3:*".into());
    }
    let Some(rest) = lower.strip_prefix("s3:") else {
        return malformed("Policy has invalid action");
    };
    let known = rest.contains(['*', '?']) || OBJECT_ACTIONS.contains(&rest) || BUCKET_ACTIONS.contains(&rest);
    if rest.is_empty() || !known {
        return malformed("Policy has invalid action");
    }
    Ok(lower)
}

/// A resource ARN: of a bucket's policy, naming that bucket or objects in it; of a key's, any
/// bucket's.
fn parse_resource(arn: &str, scope: &Scope<'_>) -> Result<String, PolicyRefused> {
    // IAM's "every resource", in a key's policy.
    if arn == "*" && matches!(scope, Scope::Key) {
        return Ok("arn:aws:s3:::*".into());
    }
    let Some(path) = arn.strip_prefix("arn:aws:s3:::") else {
        return malformed("Policy has invalid resource");
    };
    let bucket_part = path.split('/').next().unwrap_or_default();
    // `bkt`, `bk*` or `*` reach this bucket; a pattern that cannot is another bucket's.
    let elsewhere = match scope {
        Scope::Bucket { name, .. } => !glob(bucket_part, name),
        Scope::Key => false,
    };
    if bucket_part.is_empty() || elsewhere {
        return malformed("Policy has invalid resource");
    }
    Ok(arn.to_owned())
}

/// IAM wildcards: `*` any run of characters (`/` included), `?` any one character. Linear
/// backtracking on the last `*` only, so no pattern is exponential.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if let Some((star_p, star_t)) = star {
            pi = star_p + 1;
            ti = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn known(key: &str) -> bool {
        matches!(key, "alice" | "bob")
    }

    fn parse(text: &str) -> Result<BucketPolicy, PolicyRefused> {
        BucketPolicy::parse(text, "bkt", &known)
    }

    #[test]
    fn a_keys_policy_has_no_principal_and_reaches_any_bucket() {
        let with_principal =
            r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::a/*"}}"#;
        assert!(matches!(
            BucketPolicy::parse_identity(with_principal),
            Err(PolicyRefused::Malformed(message)) if message == "Policy document should not specify a principal."
        ));
        let any = r#"{"Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":["arn:aws:s3:::a/*","arn:aws:s3:::b/x*"]},
                                   {"Effect":"Allow","Action":"s3:ListBucket","Resource":"*"}]}"#;
        let policy = BucketPolicy::parse_identity(any).unwrap();
        let headers = http::HeaderMap::new();
        let decide = |action: &str, bucket: &str, key: Option<&str>| {
            policy.evaluate(&RequestContext {
                requester: ALICE,
                action,
                bucket,
                key,
                source_ip: None,
                secure_transport: false,
                now: SystemTime::UNIX_EPOCH,
                headers: &headers,
                query: None,
                object_tags: None,
                restrict_public: false,
            })
        };
        assert_eq!(decide("s3:GetObject", "b", Some("xy")), Decision::Allow);
        assert_eq!(decide("s3:GetObject", "b", Some("yx")), Decision::Silent);
        assert_eq!(decide("s3:ListBucket", "c", None), Decision::Allow);
        // A bucket's policy keeps refusing resources of other buckets and a missing Principal.
        assert!(BucketPolicy::parse(any, "a", &known).is_err());
    }

    fn decide(
        policy: &BucketPolicy,
        who: Requester<'_>,
        action: &str,
        key: Option<&str>,
        query: Option<&str>,
    ) -> Decision {
        let headers = http::HeaderMap::new();
        policy.evaluate(&RequestContext {
            requester: who,
            action,
            bucket: "bkt",
            key,
            source_ip: Some("10.1.2.3".parse().unwrap()),
            secure_transport: false,
            now: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            headers: &headers,
            query,
            object_tags: None,
            restrict_public: false,
        })
    }

    const ALICE: Requester<'static> = Requester::Key {
        access_key: "alice",
        is_root: false,
    };

    #[test]
    fn deny_wins_over_allow_and_prefixes_limit_grants() {
        let policy = parse(
            r#"{"Version":"2012-10-17","Statement":[
                {"Sid":"read","Effect":"Allow","Principal":{"AWS":["arn:aws:iam::123456789012:user/alice"]},
                 "Action":["s3:Get*"],"Resource":"arn:aws:s3:::bkt/shared/*"},
                {"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/shared/secret*"},
                {"Effect":"Allow","Principal":{"AWS":"alice"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::bkt",
                 "Condition":{"StringLike":{"s3:prefix":"shared/*"}}}]}"#,
        )
        .unwrap();
        let get = |key| decide(&policy, ALICE, "s3:GetObject", Some(key), None);
        assert_eq!(get("shared/a"), Decision::Allow);
        assert_eq!(get("shared/secret.txt"), Decision::Deny);
        assert_eq!(get("private/a"), Decision::Silent);
        let list = |query| decide(&policy, ALICE, "s3:ListBucket", None, query);
        assert_eq!(list(Some("list-type=2&prefix=shared%2Fx")), Decision::Allow);
        assert_eq!(list(Some("prefix=private")), Decision::Silent);
        assert_eq!(list(None), Decision::Silent);
        let bob = Requester::Key {
            access_key: "bob",
            is_root: false,
        };
        assert_eq!(
            decide(&policy, bob, "s3:GetObject", Some("shared/a"), None),
            Decision::Silent
        );
        assert_eq!(
            decide(
                &policy,
                Requester::Anonymous,
                "s3:GetObject",
                Some("shared/secret"),
                None
            ),
            Decision::Deny
        );
        assert!(!policy.is_public());
    }

    #[test]
    fn conditions_on_addresses_times_and_missing_keys() {
        let policy = parse(
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*",
                "Condition":{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","::1"]},
                             "DateLessThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"},
                             "Bool":{"aws:SecureTransport":false},
                             "StringNotEquals":{"s3:x-amz-acl":"public-read-write"}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            decide(&policy, Requester::Anonymous, "s3:GetObject", Some("k"), None),
            Decision::Allow
        );
        assert!(!policy.is_public(), "limited to an address block");
        let late = parse(
            r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/*",
                "Condition":{"DateGreaterThan":{"aws:CurrentTime":"2030-01-01"},"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            decide(&late, Requester::Anonymous, "s3:GetObject", Some("k"), None),
            Decision::Silent
        );
        assert!(late.is_public());
    }

    /// AWS's "meaning of public": an Allow for everyone is public unless a condition pins
    /// fixed addresses or requesters; broad blocks, wildcards, negations and `IfExists` pin
    /// nothing.
    #[test]
    fn public_is_what_aws_counts_as_public() {
        let with = |condition: &str| {
            parse(&format!(
                r#"{{"Statement":{{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{condition}}}}}"#
            ))
            .unwrap()
            .is_public()
        };
        for public in [
            r#"{"IpAddress":{"aws:SourceIp":"0.0.0.0/0"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","0.0.0.0/1"]}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"::/0"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"2001::/16"}}"#,
            r#"{"IpAddressIfExists":{"aws:SourceIp":"10.0.0.1"}}"#,
            r#"{"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}"#,
            r#"{"StringLike":{"aws:userid":"AROAEXAMPLE:*"}}"#,
            r#"{"StringEquals":{"aws:userid":"${aws:username}"}}"#,
            r#"{"StringEquals":{"aws:username":"alice"}}"#,
            r#"{"StringNotEquals":{"aws:userid":"alice"}}"#,
            r#"{"Bool":{"aws:SecureTransport":"true"}}"#,
        ] {
            assert!(with(public), "{public} is public");
        }
        for pinned in [
            r#"{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":["192.0.2.1","2001:db8::/32"]}}"#,
            r#"{"StringEquals":{"aws:userid":"AIDAEXAMPLE"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"0.0.0.0/0"},"StringEquals":{"aws:userid":"AIDAEXAMPLE"}}"#,
        ] {
            assert!(!with(pinned), "{pinned} is not public");
        }
    }

    #[test]
    fn bad_policies_get_s3s_messages() {
        let refused = |text: &str| match parse(text) {
            Err(PolicyRefused::Malformed(message)) => message,
            other => panic!("{text}: {other:?}"),
        };
        let statement = |body: &str| format!(r#"{{"Version":"2012-10-17","Statement":[{{{body}}}]}}"#);
        assert!(refused("not json").contains("valid JSON"));
        assert!(refused("{").contains("valid JSON"));
        assert_eq!(
            refused(r#"{"Version":"2012-10-17"}"#),
            "Missing required field Statement"
        );
        assert_eq!(
            refused(r#"{"Version":"1999","Statement":[]}"#),
            "The policy must contain a valid version string"
        );
        let base = r#""Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*""#;
        assert_eq!(
            refused(&statement(&format!(r#""Effect":"Maybe",{base}"#))),
            "Invalid effect: Maybe"
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*""#
            )),
            "Missing required field Principal"
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Principal":"*","Action":"s3:Fly","Resource":"arn:aws:s3:::bkt/*""#
            )),
            "Policy has invalid action"
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*""#
            )),
            "Policy has invalid resource"
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::oth*""#
            )),
            "Policy has invalid resource"
        );
        assert!(
            parse(&statement(
                r#""Effect":"Allow","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::b*","arn:aws:s3:::*/*"]"#
            ))
            .is_ok()
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Principal":{"AWS":"mallory"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*""#
            )),
            "Invalid principal in policy"
        );
        assert_eq!(
            refused(&statement(
                r#""Effect":"Allow","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bkt/k""#
            )),
            "Action does not apply to any resource(s) in statement"
        );
        assert!(
            refused(&statement(&format!(
                r#""Effect":"Allow",{base},"Condition":{{"Maybe":{{"s3:prefix":"a"}}}}"#
            )))
            .contains("Invalid Condition type")
        );
        assert!(
            refused(&statement(&format!(
                r#""Effect":"Allow",{base},"Condition":{{"StringEquals":{{"s3:ExistingObjectTag/":"a"}}}}"#
            )))
            .contains("invalid condition key")
        );
        assert!(matches!(
            parse(&statement(&format!(
                r#""Effect":"Allow",{base},"Condition":{{"StringEquals":{{"s3:RequestObjectTag/x":"a"}}}}"#
            ))),
            Err(PolicyRefused::NotImplemented(_))
        ));
    }

    #[test]
    fn existing_object_tags_decide_once_read_and_are_absent_where_no_object_exists() {
        let policy = parse(
            r#"{"Statement":[
                {"Effect":"Allow","Principal":{"AWS":"alice"},"Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::bkt/*",
                 "Condition":{"StringEquals":{"s3:ExistingObjectTag/Share":"yes"}}},
                {"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/*",
                 "Condition":{"StringEquals":{"s3:ExistingObjectTag/class":"secret"}}}]}"#,
        )
        .unwrap();
        assert!(policy.on_object_tags());
        assert!(!parse(r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}}"#).unwrap().on_object_tags());
        let headers = http::HeaderMap::new();
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let decide = |action: &str, object_tags: Option<&BTreeMap<String, String>>| {
            policy.evaluate(&RequestContext {
                requester: ALICE,
                action,
                bucket: "bkt",
                key: Some("k"),
                source_ip: None,
                secure_transport: false,
                now: SystemTime::UNIX_EPOCH,
                headers: &headers,
                query: None,
                object_tags,
                restrict_public: false,
            })
        };
        let shared = tags(&[("Share", "yes")]);
        assert_eq!(decide("s3:GetObject", Some(&shared)), Decision::Allow);
        assert_eq!(
            decide("s3:GetObject", Some(&tags(&[("Share", "no")]))),
            Decision::Silent
        );
        assert_eq!(
            decide("s3:GetObject", Some(&tags(&[("share", "yes")]))),
            Decision::Silent,
            "tag keys are case-sensitive"
        );
        assert_eq!(decide("s3:GetObject", Some(&tags(&[]))), Decision::Silent);
        assert_eq!(
            decide("s3:GetObject", Some(&tags(&[("Share", "yes"), ("class", "secret")]))),
            Decision::Deny
        );
        // Tags not read yet: the Deny is taken to apply, the Allow not.
        assert_eq!(decide("s3:GetObject", None), Decision::Deny);
        // PutObject has no existing object: the key is absent, so neither statement applies.
        assert_eq!(decide("s3:PutObject", None), Decision::Silent);
    }

    /// AWS's log-delivery policy: a `Service` principal and `ArnLike` on `aws:SourceArn`. It is
    /// taken (it was 501) and grants no request of the S3 front, which carries no
    /// `aws:SourceArn`; the `Arn*` operators compare each of an ARN's six parts on its own.
    #[test]
    fn arn_operators_compare_part_by_part_and_service_principals_name_no_requester() {
        let delivery = parse(
            r#"{"Statement":{"Effect":"Allow","Principal":{"Service":"logging.s3.amazonaws.com"},"Action":"s3:PutObject",
                "Resource":"arn:aws:s3:::bkt/log/","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::src"},
                "StringEquals":{"aws:SourceAccount":"123456789012"}}}}"#,
        )
        .unwrap();
        for who in [ALICE, Requester::Anonymous] {
            assert_eq!(
                decide(&delivery, who, "s3:PutObject", Some("log/"), None),
                Decision::Silent
            );
        }
        assert!(!delivery.is_public());
        // An Allow for everyone is public unless it pins the source to a fixed value.
        let everyone = |condition: &str| {
            parse(&format!(
                r#"{{"Statement":{{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{condition}}}}}"#
            ))
            .unwrap()
        };
        assert!(!everyone(r#"{"ArnEquals":{"aws:SourceArn":"arn:aws:s3:::src"}}"#).is_public());
        assert!(!everyone(r#"{"StringEquals":{"aws:SourceAccount":"123456789012"}}"#).is_public());
        assert!(everyone(r#"{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::*"}}"#).is_public());
        assert!(everyone(r#"{"ArnNotEquals":{"aws:SourceArn":"arn:aws:s3:::src"}}"#).is_public());
        // Absent from every front request: the negated forms and `...IfExists` hold, as IAM says.
        for (condition, holds) in [
            (r#"{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::*"}}"#, false),
            (r#"{"ArnNotLike":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
            (r#"{"ArnEqualsIfExists":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
            (r#"{"ArnNotEqualsIfExists":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
        ] {
            let decision = decide(&everyone(condition), ALICE, "s3:PutObject", Some("k"), None);
            assert_eq!(decision == Decision::Allow, holds, "{condition}");
        }
        // A Service principal with other principals keeps those.
        let mixed = parse(
            r#"{"Statement":{"Effect":"Allow","Principal":{"Service":"logging.s3.amazonaws.com","AWS":"alice"},
                "Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}}"#,
        )
        .unwrap();
        assert_eq!(decide(&mixed, ALICE, "s3:GetObject", Some("k"), None), Decision::Allow);
        assert!(matches!(
            parse(
                r#"{"Statement":{"Effect":"Allow","Principal":{"Service":7},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}}"#
            ),
            Err(PolicyRefused::Malformed(_))
        ));
    }

    #[test]
    fn globs_match_as_iam_does() {
        assert!(glob("s3:get*", "s3:getobject"));
        assert!(glob("arn:aws:s3:::b/a?c/*", "arn:aws:s3:::b/abc/d/e"));
        assert!(!glob("arn:aws:s3:::b/a?c/*", "arn:aws:s3:::b/ac/d"));
        assert!(glob("*", ""));
        assert!(glob("*", "*x"), "a `*` in the text is a character like any other");
        assert!(glob("a*", "a*b"));
        assert!(!glob("a*b", "ac"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_star_matches_any_middle(head in "[a-z/]{0,6}", middle in "\\PC{0,10}", tail in "[a-z/]{0,6}") {
            let pattern = format!("{head}*{tail}");
            let text = format!("{head}{middle}{tail}");
            prop_assert!(glob(&pattern, &text));
        }

        #[test]
        fn any_document_gets_an_answer(text in "\\PC{0,200}") {
            let _ = parse(&text);
        }
    }
}
