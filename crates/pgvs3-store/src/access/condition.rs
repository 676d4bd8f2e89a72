//! Policy conditions: the operators and keys a bucket policy's `Condition` block may use,
//! checked when the policy is put, and the values a request gives those keys.
//!
//! `s3:ExistingObjectTag/<tag>` is the tag of the object the request acts on. It has a value only
//! for actions on an existing object ([`EXISTING_OBJECT_ACTIONS`]); for those, a request whose
//! object's tags have not been read yet cannot tell, and a statement then counts as its effect
//! demands least: a Deny applies, an Allow does not (see [`Condition::holds`]).

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::SystemTime;

use serde_json::Value;

use super::policy::{PolicyRefused, RequestContext, Requester, glob, malformed};

#[derive(Debug)]
pub(super) struct Condition {
    operator: Operator,
    if_exists: bool,
    /// Lowercase (condition keys are case-insensitive), but for the tag key of
    /// `s3:existingobjecttag/<tag>`, kept as written: S3's tag keys are case-sensitive.
    key: String,
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    StringEquals,
    StringNotEquals,
    StringEqualsIgnoreCase,
    StringNotEqualsIgnoreCase,
    StringLike,
    StringNotLike,
    NumericEquals,
    NumericNotEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    DateEquals,
    DateNotEquals,
    DateLessThan,
    DateLessThanEquals,
    DateGreaterThan,
    DateGreaterThanEquals,
    Bool,
    IpAddress,
    NotIpAddress,
    ArnEquals,
    ArnNotEquals,
    ArnLike,
    ArnNotLike,
    Null,
}

const OPERATORS: &[(&str, Operator)] = &[
    ("StringEquals", Operator::StringEquals),
    ("StringNotEquals", Operator::StringNotEquals),
    ("StringEqualsIgnoreCase", Operator::StringEqualsIgnoreCase),
    ("StringNotEqualsIgnoreCase", Operator::StringNotEqualsIgnoreCase),
    ("StringLike", Operator::StringLike),
    ("StringNotLike", Operator::StringNotLike),
    ("NumericEquals", Operator::NumericEquals),
    ("NumericNotEquals", Operator::NumericNotEquals),
    ("NumericLessThan", Operator::NumericLessThan),
    ("NumericLessThanEquals", Operator::NumericLessThanEquals),
    ("NumericGreaterThan", Operator::NumericGreaterThan),
    ("NumericGreaterThanEquals", Operator::NumericGreaterThanEquals),
    ("DateEquals", Operator::DateEquals),
    ("DateNotEquals", Operator::DateNotEquals),
    ("DateLessThan", Operator::DateLessThan),
    ("DateLessThanEquals", Operator::DateLessThanEquals),
    ("DateGreaterThan", Operator::DateGreaterThan),
    ("DateGreaterThanEquals", Operator::DateGreaterThanEquals),
    ("Bool", Operator::Bool),
    ("IpAddress", Operator::IpAddress),
    ("NotIpAddress", Operator::NotIpAddress),
    ("ArnEquals", Operator::ArnEquals),
    ("ArnNotEquals", Operator::ArnNotEquals),
    ("ArnLike", Operator::ArnLike),
    ("ArnNotLike", Operator::ArnNotLike),
    ("Null", Operator::Null),
];

/// The condition keys evaluated here (lowercase). Other `aws:`/`s3:` keys are valid IAM but
/// not evaluated: a policy naming one is refused with NotImplemented rather than half-applied.
const CONDITION_KEYS: &[&str] = &[
    "aws:sourceip",
    "aws:securetransport",
    "aws:currenttime",
    "aws:epochtime",
    "aws:useragent",
    "aws:referer",
    "aws:principaltype",
    "aws:username",
    "aws:userid",
    "aws:sourcearn",
    "aws:sourceaccount",
    "s3:prefix",
    "s3:delimiter",
    "s3:max-keys",
    "s3:versionid",
    "s3:x-amz-acl",
    "s3:x-amz-content-sha256",
    "s3:x-amz-copy-source",
    "s3:x-amz-metadata-directive",
    "s3:x-amz-storage-class",
    "s3:x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-customer-algorithm",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "s3:x-amz-grant-read",
    "s3:x-amz-grant-write",
    "s3:x-amz-grant-read-acp",
    "s3:x-amz-grant-write-acp",
    "s3:x-amz-grant-full-control",
    "s3:x-amz-website-redirect-location",
    "s3:object-lock-mode",
    "s3:object-lock-retain-until-date",
    "s3:object-lock-legal-hold",
    "s3:authtype",
    "s3:signatureversion",
];

/// The condition key naming a tag of the existing object (lowercase), before the tag's key.
const EXISTING_OBJECT_TAG: &str = "s3:existingobjecttag/";

/// The actions (lowercase, `s3:` included) that act on an existing object, for which
/// `s3:ExistingObjectTag/<tag>` has a value, as AWS's service authorization reference lists
/// them. Any other action (PutObject, DeleteObject, ListBucket, ...) has no existing object: the
/// key is absent.
const EXISTING_OBJECT_ACTIONS: &[&str] = &[
    "s3:getobject",
    "s3:getobjectversion",
    "s3:getobjectacl",
    "s3:getobjectversionacl",
    "s3:putobjectacl",
    "s3:putobjectversionacl",
    "s3:getobjecttagging",
    "s3:getobjectversiontagging",
    "s3:putobjecttagging",
    "s3:putobjectversiontagging",
    "s3:deleteobjecttagging",
    "s3:deleteobjectversiontagging",
    "s3:getobjectattributes",
    "s3:getobjectversionattributes",
    "s3:getobjectretention",
    "s3:putobjectretention",
    "s3:getobjectlegalhold",
    "s3:putobjectlegalhold",
    "s3:restoreobject",
];

impl Condition {
    /// Whether the condition pins who or where the requester is to fixed values, so that an
    /// Allow for everyone under it is not public, as AWS's "meaning of public" for Block Public
    /// Access counts it: a set of addresses (`aws:SourceIp`, each block no wider than
    /// [`NARROWEST_PUBLIC_V4`]/[`NARROWEST_PUBLIC_V6`] bits of prefix: `0.0.0.0/0` is everyone),
    /// or a fixed `aws:userid`, `aws:SourceAccount` or `aws:SourceArn` (no wildcard, no policy
    /// variable). A negated operator, an
    /// `...IfExists` one, or `aws:username` (not in AWS's list) pins nothing.
    pub(super) fn narrows_requester(&self) -> bool {
        if self.if_exists || self.values.is_empty() {
            return false;
        }
        let fixed = |value: &String| !value.contains(['*', '?']) && !value.contains("${");
        match (self.key.as_str(), self.operator) {
            ("aws:sourceip", Operator::IpAddress) => self
                .values
                .iter()
                .all(|value| parse_cidr(value).is_some_and(|block| !block.is_broad())),
            (
                "aws:userid" | "aws:sourceaccount",
                Operator::StringEquals | Operator::StringEqualsIgnoreCase | Operator::StringLike,
            ) => self.values.iter().all(fixed),
            (
                "aws:sourcearn",
                Operator::ArnEquals | Operator::ArnLike | Operator::StringEquals | Operator::StringLike,
            ) => self.values.iter().all(fixed),
            _ => false,
        }
    }

    /// Whether the condition looks at the existing object's tags.
    pub(super) fn on_object_tags(&self) -> bool {
        self.key.starts_with(EXISTING_OBJECT_TAG)
    }

    pub(super) fn parse_block(value: &Value) -> Result<Vec<Condition>, PolicyRefused> {
        let Value::Object(operators) = value else {
            return malformed("Policy has an invalid condition block");
        };
        let mut conditions = Vec::new();
        for (name, keys) in operators {
            // A single-valued key is its own only value: ForAnyValue/ForAllValues add nothing.
            let bare = name
                .strip_prefix("ForAnyValue:")
                .or_else(|| name.strip_prefix("ForAllValues:"))
                .unwrap_or(name);
            let (bare, if_exists) = match bare.strip_suffix("IfExists") {
                Some(base) if base != "Null" => (base, true),
                _ => (bare, false),
            };
            let Some(&(_, operator)) = OPERATORS.iter().find(|(known, _)| *known == bare) else {
                return match bare.starts_with("Binary") {
                    true => Err(PolicyRefused::NotImplemented(format!(
                        "condition operator {name} is not supported here"
                    ))),
                    false => malformed(format!("Invalid Condition type : {name}")),
                };
            };
            let Value::Object(keys) = keys else {
                return malformed("Policy has an invalid condition block");
            };
            for (key, values) in keys {
                let mut lower = key.to_ascii_lowercase();
                let tag = lower.strip_prefix(EXISTING_OBJECT_TAG).map(str::len);
                if let Some(tag_len) = tag {
                    // The prefix is ASCII: the tag key is the same bytes at the end of `key`.
                    if tag_len == 0 {
                        return malformed("Policy has an invalid condition key");
                    }
                    lower.replace_range(EXISTING_OBJECT_TAG.len().., &key[key.len() - tag_len..]);
                } else if !CONDITION_KEYS.contains(&lower.as_str()) {
                    return match lower.starts_with("aws:") || lower.starts_with("s3:") {
                        true => Err(PolicyRefused::NotImplemented(format!(
                            "condition key {key} is not supported here"
                        ))),
                        false => malformed("Policy has an invalid condition key"),
                    };
                }
                let values: Vec<String> = match values {
                    Value::Array(list) if !list.is_empty() => list.iter().map(scalar).collect::<Option<_>>(),
                    one => scalar(one).map(|v| vec![v]),
                }
                .ok_or_else(|| PolicyRefused::Malformed("Policy has an invalid condition block".into()))?;
                let condition = Condition {
                    operator,
                    if_exists,
                    key: lower,
                    values,
                };
                condition.check_values()?;
                conditions.push(condition);
            }
        }
        Ok(conditions)
    }

    /// Values the operator cannot compare are refused when the policy is put.
    fn check_values(&self) -> Result<(), PolicyRefused> {
        let ok = |valid: bool, what: &str| match valid {
            true => Ok(()),
            false => malformed(format!("Invalid {what} in condition: {}", self.values.join(", "))),
        };
        match self.operator {
            Operator::IpAddress | Operator::NotIpAddress => {
                ok(self.values.iter().all(|v| parse_cidr(v).is_some()), "IP address")
            }
            Operator::Bool | Operator::Null => ok(
                self.values
                    .iter()
                    .all(|v| v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false")),
                "boolean",
            ),
            Operator::NumericEquals
            | Operator::NumericNotEquals
            | Operator::NumericLessThan
            | Operator::NumericLessThanEquals
            | Operator::NumericGreaterThan
            | Operator::NumericGreaterThanEquals => ok(self.values.iter().all(|v| v.parse::<f64>().is_ok()), "number"),
            Operator::DateEquals
            | Operator::DateNotEquals
            | Operator::DateLessThan
            | Operator::DateLessThanEquals
            | Operator::DateGreaterThan
            | Operator::DateGreaterThanEquals => ok(self.values.iter().all(|v| parse_date(v).is_some()), "date"),
            _ => Ok(()),
        }
    }

    /// Whether the condition holds for the request; `None` when the request cannot tell yet (a
    /// tag of an existing object whose tags have not been read).
    pub(super) fn holds(&self, cx: &RequestContext<'_>) -> Option<bool> {
        let value = match self.key.strip_prefix(EXISTING_OBJECT_TAG) {
            Some(tag) => cx.existing_object_tag(tag)?,
            None => cx.value(&self.key),
        };
        Some(self.holds_on(value))
    }

    fn holds_on(&self, value: Option<Cow<'_, str>>) -> bool {
        if self.operator == Operator::Null {
            let absent = value.is_none();
            return self.values.iter().any(|v| v.eq_ignore_ascii_case("true") == absent);
        }
        let negated = matches!(
            self.operator,
            Operator::StringNotEquals
                | Operator::StringNotEqualsIgnoreCase
                | Operator::StringNotLike
                | Operator::NumericNotEquals
                | Operator::DateNotEquals
                | Operator::NotIpAddress
                | Operator::ArnNotEquals
                | Operator::ArnNotLike
        );
        let Some(value) = value else {
            // IAM: a missing key matches nothing, so a negated condition holds.
            return self.if_exists || negated;
        };
        let matched = self.values.iter().any(|wanted| self.compare(&value, wanted));
        matched != negated
    }

    /// The positive form of the operator on one value.
    fn compare(&self, actual: &str, wanted: &str) -> bool {
        use Operator::*;
        let number = || Some((actual.parse::<f64>().ok()?, wanted.parse::<f64>().ok()?));
        let date = || Some((parse_date(actual)?, parse_date(wanted)?));
        match self.operator {
            StringEquals | StringNotEquals => actual == wanted,
            StringEqualsIgnoreCase | StringNotEqualsIgnoreCase => actual.eq_ignore_ascii_case(wanted),
            StringLike | StringNotLike => glob(wanted, actual),
            Bool => actual.eq_ignore_ascii_case(wanted),
            IpAddress | NotIpAddress => match (actual.parse::<IpAddr>(), parse_cidr(wanted)) {
                (Ok(ip), Some(net)) => net.contains(ip),
                _ => false,
            },
            NumericEquals | NumericNotEquals => number().is_some_and(|(a, w)| a == w),
            NumericLessThan => number().is_some_and(|(a, w)| a < w),
            NumericLessThanEquals => number().is_some_and(|(a, w)| a <= w),
            NumericGreaterThan => number().is_some_and(|(a, w)| a > w),
            NumericGreaterThanEquals => number().is_some_and(|(a, w)| a >= w),
            DateEquals | DateNotEquals => date().is_some_and(|(a, w)| a == w),
            DateLessThan => date().is_some_and(|(a, w)| a < w),
            DateLessThanEquals => date().is_some_and(|(a, w)| a <= w),
            DateGreaterThan => date().is_some_and(|(a, w)| a > w),
            DateGreaterThanEquals => date().is_some_and(|(a, w)| a >= w),
            // IAM: the two are the same test (ArnEquals takes wildcards too).
            ArnEquals | ArnNotEquals | ArnLike | ArnNotLike => arn_matches(wanted, actual),
            Null => false,
        }
    }
}

/// IAM's ARN comparison: each of the six colon-separated parts (`arn`, partition, service,
/// region, account, resource; the resource keeps its own colons) is matched on its own, so a
/// wildcard never reaches into the next part. A value that is not an ARN matches nothing.
fn arn_matches(pattern: &str, arn: &str) -> bool {
    const PARTS: usize = 6;
    let (pattern, arn): (Vec<&str>, Vec<&str>) =
        (pattern.splitn(PARTS, ':').collect(), arn.splitn(PARTS, ':').collect());
    pattern.len() == PARTS && arn.len() == PARTS && pattern.iter().zip(&arn).all(|(part, value)| glob(part, value))
}

/// A condition value as text (IAM takes numbers and booleans unquoted too).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

impl RequestContext<'_> {
    /// The value of the existing object's tag `tag`: `None` while its tags are unread, `Some(None)`
    /// when the object has no such tag or the action acts on no existing object.
    fn existing_object_tag(&self, tag: &str) -> Option<Option<Cow<'_, str>>> {
        if !EXISTING_OBJECT_ACTIONS.contains(&self.action.to_ascii_lowercase().as_str()) {
            return Some(None);
        }
        let tags = self.object_tags?;
        Some(tags.get(tag).map(|value| Cow::Borrowed(value.as_str())))
    }

    /// The value of a condition key (lowercase) for this request, if it has one.
    fn value(&self, key: &str) -> Option<Cow<'_, str>> {
        let header = |name: &str| self.headers.get(name)?.to_str().ok().map(Cow::Borrowed);
        let query = |name: &str| {
            form_urlencoded::parse(self.query?.as_bytes())
                .find(|(param, _)| param == name)
                .map(|(_, value)| Cow::Owned(value.into_owned()))
        };
        let epoch = || {
            self.now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs()
        };
        match key {
            "aws:sourceip" => self.source_ip.map(|ip| Cow::Owned(ip.to_string())),
            "aws:securetransport" => Some(Cow::Borrowed(if self.secure_transport { "true" } else { "false" })),
            "aws:currenttime" => {
                let now = time::OffsetDateTime::from_unix_timestamp(epoch() as i64).ok()?;
                now.format(&time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(Cow::Owned)
            }
            "aws:epochtime" => Some(Cow::Owned(epoch().to_string())),
            "aws:useragent" => header("user-agent"),
            "aws:referer" => header("referer"),
            "aws:principaltype" => Some(Cow::Borrowed(match self.requester {
                Requester::Anonymous => "Anonymous",
                Requester::Key { is_root: true, .. } => "Account",
                Requester::Key { .. } => "User",
            })),
            "aws:username" | "aws:userid" => match self.requester {
                Requester::Key { access_key, .. } => Some(Cow::Borrowed(access_key)),
                Requester::Anonymous => None,
            },
            // Present only on a request an AWS service makes on a resource's behalf (as the
            // logging service's delivery): no request reaching the S3 front is one.
            "aws:sourcearn" | "aws:sourceaccount" => None,
            "s3:prefix" => query("prefix"),
            "s3:delimiter" => query("delimiter"),
            "s3:max-keys" => query("max-keys"),
            "s3:versionid" => query("versionId"),
            "s3:authtype" => match self.requester {
                Requester::Anonymous => None,
                Requester::Key { .. } if self.headers.contains_key(http::header::AUTHORIZATION) => {
                    Some(Cow::Borrowed("REST-HEADER"))
                }
                Requester::Key { .. } => Some(Cow::Borrowed("REST-QUERY-STRING")),
            },
            "s3:signatureversion" => match self.requester {
                Requester::Anonymous => None,
                Requester::Key { .. } => Some(Cow::Borrowed("AWS4-HMAC-SHA256")),
            },
            // The object lock keys name the headers without their `x-amz-`.
            "s3:object-lock-mode" => header("x-amz-object-lock-mode"),
            "s3:object-lock-retain-until-date" => header("x-amz-object-lock-retain-until-date"),
            "s3:object-lock-legal-hold" => header("x-amz-object-lock-legal-hold"),
            other => header(other.strip_prefix("s3:")?),
        }
    }
}

/// ISO 8601 (as IAM writes dates) or epoch seconds, as seconds since the epoch.
fn parse_date(text: &str) -> Option<i64> {
    if let Ok(secs) = text.parse::<i64>() {
        return Some(secs);
    }
    use time::format_description::well_known::{Iso8601, Rfc3339};
    if let Ok(at) = time::OffsetDateTime::parse(text, &Rfc3339) {
        return Some(at.unix_timestamp());
    }
    if let Ok(at) = time::OffsetDateTime::parse(text, &Iso8601::DEFAULT) {
        return Some(at.unix_timestamp());
    }
    let day = time::Date::parse(text, &Iso8601::DEFAULT).ok()?;
    Some(day.midnight().assume_utc().unix_timestamp())
}

/// An address block: `a.b.c.d/n`, an IPv6 block, or one address.
struct Cidr {
    net: IpAddr,
    bits: u32,
}

fn parse_cidr(text: &str) -> Option<Cidr> {
    let (addr, bits) = match text.split_once('/') {
        Some((addr, bits)) => (addr.parse::<IpAddr>().ok()?, Some(bits.parse::<u32>().ok()?)),
        None => (text.parse::<IpAddr>().ok()?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some(Cidr { net: addr, bits })
}

/// The widest address blocks that still pin where a request comes from (pgvs3's line; AWS
/// documents none): an IPv4 `/8` is one network's, a `/7` and wider, up to `0.0.0.0/0`, count
/// as everyone; in IPv6, a `/32` (one provider's allocation) and narrower.
const NARROWEST_PUBLIC_V4: u32 = 7;
const NARROWEST_PUBLIC_V6: u32 = 31;

impl Cidr {
    /// Whether the block is too wide to pin where a request comes from.
    fn is_broad(&self) -> bool {
        match self.net {
            IpAddr::V4(_) => self.bits <= NARROWEST_PUBLIC_V4,
            IpAddr::V6(_) => self.bits <= NARROWEST_PUBLIC_V6,
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.net, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            _ => ip,
        };
        let prefix = |net: u128, ip: u128, width: u32| {
            let shift = width - self.bits;
            self.bits == 0 || (net >> shift) == (ip >> shift)
        };
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix(u32::from(net) as u128, u32::from(ip) as u128, 32),
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix(u128::from(net), u128::from(ip), 128),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::arn_matches;

    #[test]
    fn arns_match_part_by_part() {
        assert!(arn_matches("arn:aws:s3:::src", "arn:aws:s3:::src"));
        assert!(arn_matches("arn:aws:s3:::s?c*", "arn:aws:s3:::src-logs"));
        assert!(
            arn_matches("arn:*:s3:*:*:*", "arn:aws:s3:::bkt"),
            "each part its own wildcard"
        );
        assert!(arn_matches("arn:aws:iam::*:user/*", "arn:aws:iam::123456789012:user/a"));
        assert!(
            arn_matches("arn:aws:s3:::bkt:*", "arn:aws:s3:::bkt:x:y"),
            "the resource keeps its colons"
        );
        assert!(!arn_matches("arn:aws:s3:::src", "arn:aws:s3:::SRC"), "case-sensitive");
        assert!(
            !arn_matches("arn:aws:*", "arn:aws:s3:::bkt"),
            "a wildcard stays in its part"
        );
        assert!(
            !arn_matches("arn:aws:s3:*:bkt", "arn:aws:s3:::bkt"),
            "five parts are no ARN"
        );
        assert!(!arn_matches("arn:aws:s3:::*", "not-an-arn"));
        assert!(!arn_matches("*", "arn:aws:s3:::bkt"));
    }
}
