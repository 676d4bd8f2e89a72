//! A bucket's CORS rules: checked as S3 checks them when they are put, stored as JSON, and
//! matched against a browser's request (preflight or real) as S3 matches them: the first rule
//! whose origin, method and (for a preflight) requested headers all match answers.

use serde::{Deserialize, Serialize};

/// The methods a CORS rule may allow (S3 refuses any other).
const METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];
/// S3's limit on rules per configuration.
pub const MAX_RULES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// A bucket's CORS configuration, in the order the client gave its rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRules {
    pub rules: Vec<CorsRule>,
}

/// Why a configuration was refused: S3's code (`MalformedXML` or `InvalidRequest`) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsRefused {
    pub code: &'static str,
    pub message: String,
}

fn refuse(code: &'static str, message: impl Into<String>) -> CorsRefused {
    CorsRefused {
        code,
        message: message.into(),
    }
}

impl CorsRules {
    /// The rules, if S3 would take them.
    pub fn new(rules: Vec<CorsRule>) -> Result<CorsRules, CorsRefused> {
        const MALFORMED: &str =
            "The XML you provided was not well-formed or did not validate against our published schema";
        if rules.is_empty() || rules.len() > MAX_RULES {
            return Err(refuse("MalformedXML", MALFORMED));
        }
        for rule in &rules {
            if rule.allowed_origins.is_empty() || rule.allowed_methods.is_empty() {
                return Err(refuse("MalformedXML", MALFORMED));
            }
            if rule.id.as_ref().is_some_and(|id| id.len() > 255) {
                return Err(refuse(
                    "InvalidArgument",
                    "The ID of a CORS rule must be at most 255 characters",
                ));
            }
            for method in &rule.allowed_methods {
                if !METHODS.contains(&method.as_str()) {
                    return Err(refuse(
                        "InvalidRequest",
                        format!("Found unsupported HTTP method in CORS config. Unsupported method is {method}"),
                    ));
                }
            }
            for origin in &rule.allowed_origins {
                if origin.matches('*').count() > 1 {
                    return Err(refuse(
                        "InvalidRequest",
                        format!("AllowedOrigin \"{origin}\" can not have more than one wildcard."),
                    ));
                }
            }
            for header in &rule.allowed_headers {
                if header.matches('*').count() > 1 {
                    return Err(refuse(
                        "InvalidRequest",
                        format!("AllowedHeader \"{header}\" can not have more than one wildcard."),
                    ));
                }
            }
        }
        Ok(CorsRules { rules })
    }

    /// The first rule allowing `origin` to use `method` (and, for a preflight, to send
    /// `headers`, the names of Access-Control-Request-Headers).
    pub fn matching(&self, origin: &str, method: &str, headers: &[&str]) -> Option<&CorsRule> {
        self.rules.iter().find(|rule| {
            rule.allowed_origins
                .iter()
                .any(|allowed| wildcard_match(allowed, origin, false))
                && rule.allowed_methods.iter().any(|allowed| allowed == method)
                && headers.iter().all(|header| {
                    rule.allowed_headers
                        .iter()
                        .any(|allowed| wildcard_match(allowed, header, true))
                })
        })
    }
}

impl CorsRule {
    /// What S3 sends as Access-Control-Allow-Origin for `origin`: `*` when the rule allows any
    /// origin, otherwise the origin itself.
    pub fn allow_origin<'a>(&self, origin: &'a str) -> &'a str {
        match self.allowed_origins.iter().any(|allowed| allowed == "*") {
            true => "*",
            false => origin,
        }
    }
}

/// `pattern` (with at most one `*`, which matches any run of characters) against `text`.
fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| match ignore_case {
        true => a.eq_ignore_ascii_case(b),
        false => a == b,
    };
    match pattern.split_once('*') {
        None => eq(pattern, text),
        Some((head, tail)) => {
            text.len() >= head.len() + tail.len()
                && text.is_char_boundary(head.len())
                && text.is_char_boundary(text.len() - tail.len())
                && eq(&text[..head.len()], head)
                && eq(&text[text.len() - tail.len()..], tail)
        }
    }
}

/// The header names of an Access-Control-Request-Headers value.
pub fn requested_headers(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        CorsRule {
            id: None,
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_headers: headers.iter().map(|s| s.to_string()).collect(),
            expose_headers: Vec::new(),
            max_age_seconds: None,
        }
    }

    #[test]
    fn the_first_rule_matching_origin_method_and_headers_answers() {
        let rules = CorsRules::new(vec![
            rule(&["https://*.example.com"], &["GET"], &[]),
            rule(&["http://app.test"], &["PUT", "GET"], &["content-*", "x-amz-*"]),
            rule(&["*"], &["GET"], &["*"]),
        ])
        .unwrap();
        let first = &rules.rules[0];
        assert_eq!(rules.matching("https://a.example.com", "GET", &[]), Some(first));
        assert_eq!(rules.matching("https://a.example.com", "PUT", &[]), None);
        let second = &rules.rules[1];
        assert_eq!(
            rules.matching("http://app.test", "PUT", &["Content-Type", "x-amz-date"]),
            Some(second)
        );
        assert_eq!(rules.matching("http://app.test", "PUT", &["authorization"]), None);
        assert_eq!(
            rules.matching("http://APP.test", "PUT", &[]),
            None,
            "origins are case-sensitive"
        );
        let third = &rules.rules[2];
        assert_eq!(rules.matching("http://other", "GET", &["anything"]), Some(third));
        assert_eq!(third.allow_origin("http://other"), "*");
        assert_eq!(second.allow_origin("http://app.test"), "http://app.test");
        assert_eq!(rules.matching("http://other", "DELETE", &[]), None);
    }

    #[test]
    fn bad_rules_are_refused_as_s3_refuses_them() {
        let code = |rules: Vec<CorsRule>| CorsRules::new(rules).unwrap_err().code;
        assert_eq!(code(vec![]), "MalformedXML");
        assert_eq!(code(vec![rule(&["*"], &["PATCH"], &[])]), "InvalidRequest");
        assert_eq!(code(vec![rule(&["*.*"], &["GET"], &[])]), "InvalidRequest");
        assert_eq!(code(vec![rule(&["*"], &["GET"], &["a*b*"])]), "InvalidRequest");
        assert_eq!(code(vec![rule(&[], &["GET"], &[])]), "MalformedXML");
        assert_eq!(code(vec![rule(&["*"], &["GET"], &[]); MAX_RULES + 1]), "MalformedXML");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_wildcard_matches_what_lies_between_its_ends(head in "[^*]{0,8}", middle in "\\PC{0,8}", tail in "[^*]{0,8}") {
            let pattern = format!("{head}*{tail}");
            let text = format!("{head}{middle}{tail}");
            prop_assert!(wildcard_match(&pattern, &text, false));
        }

        #[test]
        fn any_text_gets_an_answer(pattern in "\\PC{0,12}", text in "\\PC{0,12}") {
            let _ = wildcard_match(&pattern, &text, true);
        }
    }
}
