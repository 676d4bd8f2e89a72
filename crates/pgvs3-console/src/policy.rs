//! A bucket policy, or a key's own (identity) policy, checked before it is sent: JSON, and the
//! shape S3 and IAM require, so the editor can say what is wrong where. The gateway still has
//! the last word.

use serde_json::Value;

/// The problems with `text` as a bucket policy (or, `identity`, as a key's own policy, which
/// names no principal: the key is the principal); empty when it may be saved.
pub fn problems(text: &str, identity: bool) -> Vec<String> {
    let document: Value = match serde_json::from_str(text) {
        Ok(document) => document,
        Err(err) => return vec![format!("not JSON: {err}")],
    };
    let Some(document) = document.as_object() else {
        return vec!["the policy must be a JSON object".to_owned()];
    };
    let mut problems = Vec::new();
    match document.get("Version").map(Value::as_str) {
        None | Some(Some("2012-10-17" | "2008-10-17")) => {}
        _ => problems.push("Version must be \"2012-10-17\" (or \"2008-10-17\")".to_owned()),
    }
    let statements = match document.get("Statement") {
        Some(Value::Array(list)) if !list.is_empty() => list.iter().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        _ => {
            problems.push("Statement must be a statement or a non-empty list of them".to_owned());
            Vec::new()
        }
    };
    for (index, statement) in statements.iter().enumerate() {
        let at = format!("Statement {}", index + 1);
        let Some(statement) = statement.as_object() else {
            problems.push(format!("{at} must be an object"));
            continue;
        };
        match statement.get("Effect").and_then(Value::as_str) {
            Some("Allow" | "Deny") => {}
            _ => problems.push(format!("{at}: Effect must be \"Allow\" or \"Deny\"")),
        }
        for (one, not) in [
            ("Principal", "NotPrincipal"),
            ("Action", "NotAction"),
            ("Resource", "NotResource"),
        ] {
            match (statement.get(one), statement.get(not)) {
                (Some(_), _) | (_, Some(_)) if identity && one == "Principal" => problems.push(format!(
                    "{at}: a key's own policy names no {one} (the key is the principal)"
                )),
                (None, None) if identity && one == "Principal" => {}
                (Some(_), Some(_)) => problems.push(format!("{at}: {one} and {not} cannot both be given")),
                (None, None) => problems.push(format!("{at}: {one} (or {not}) is required")),
                (Some(value), None) | (None, Some(value)) => {
                    if one != "Principal" && !strings(value) {
                        problems.push(format!("{at}: {one} must be a string or a list of strings"));
                    }
                }
            }
        }
    }
    problems
}

fn strings(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(list) => !list.is_empty() && list.iter().all(Value::is_string),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::problems;

    #[test]
    fn a_valid_policy_has_no_problems() {
        let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*",
            "Action":["s3:GetObject"],"Resource":"arn:aws:s3:::b/*"}]}"#;
        assert!(problems(policy, false).is_empty(), "{:?}", problems(policy, false));
        let identity = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"s3:GetObject",
            "Resource":"arn:aws:s3:::b/*"}]}"#;
        assert!(problems(identity, true).is_empty(), "{:?}", problems(identity, true));
        assert_eq!(
            problems(policy, true),
            ["Statement 1: a key's own policy names no Principal (the key is the principal)"]
        );
    }

    #[test]
    fn each_problem_is_named() {
        assert!(problems("{", false).first().unwrap().starts_with("not JSON"));
        assert_eq!(problems("[]", true), ["the policy must be a JSON object"]);
        let found = problems(
            r#"{"Version":"2020","Statement":[{"Effect":"allow","Action":3}]}"#,
            false,
        );
        assert_eq!(
            found,
            [
                "Version must be \"2012-10-17\" (or \"2008-10-17\")",
                "Statement 1: Effect must be \"Allow\" or \"Deny\"",
                "Statement 1: Principal (or NotPrincipal) is required",
                "Statement 1: Action must be a string or a list of strings",
                "Statement 1: Resource (or NotResource) is required",
            ]
        );
    }
}
