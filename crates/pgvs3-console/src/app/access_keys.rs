//! The access keys page (root-key sessions): every key with its role, description, own policy
//! and the buckets it owns; create one (its secret made here and shown once, never again),
//! disable or enable one, edit its own policy, and delete one. The key catalog has no S3 API, so these are asked of the gateway in-process
//! (the `Admin` interface), for the root key's sessions only.

use std::fmt::Write;

use http::StatusCode;
use rand::Rng;

use super::{Context, Request, Response};
use crate::html::{button, esc, form, name};

/// Buckets named per key; more are counted.
const BUCKETS_SHOWN: usize = 20;

/// An access key id in the style of the others: 20 upper-case letters and digits.
fn new_key_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl Context<'_> {
    fn admin(&self) -> Result<&dyn crate::Admin, String> {
        match &self.app.gateway.admin {
            Some(admin) if self.session.admin => Ok(admin.as_ref()),
            _ => Err("The access keys page is for the root key's sessions.".to_owned()),
        }
    }

    /// The page; `created` is a key just made, with its secret, shown this once.
    pub(super) async fn access_keys(&self, created: Option<(&str, &str)>) -> Response {
        let mut body = String::from("<h1>Access keys</h1>");
        let admin = match self.admin() {
            Ok(admin) => admin,
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\" role=\"alert\">{}</p>", name(&err));
                return self.page(StatusCode::FORBIDDEN, "Access keys", body);
            }
        };
        if let Some((key, secret)) = created {
            let _ = write!(
                body,
                "<section class=\"flash ok\" id=\"created\" role=\"status\"><p>Key <code id=\"new-access-key\">{}</code> created. \
                 Its secret, shown this once (the console keeps no copy):</p><p><code id=\"new-secret\">{}</code></p></section>",
                name(key),
                esc(secret)
            );
        }
        body.push_str(&form(
            "/access-keys/create",
            self.csrf(),
            &[],
            "<fieldset><legend>New key</legend>\
             <label>Access key <input name=\"access_key\" id=\"key-id\" maxlength=\"128\" placeholder=\"generated when empty\"></label>\
             <label>Description <input name=\"description\" id=\"key-description\" maxlength=\"256\"></label>\
             <label><input type=\"checkbox\" name=\"read_only\" id=\"key-read-only\" value=\"on\"> read-only</label>\
             <button id=\"create-key-button\">Create</button></fieldset>",
        ));
        match admin.list_keys().await {
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
            Ok(keys) => {
                body.push_str(
                    "<table id=\"access-keys\"><thead><tr><th>Access key</th><th>Role</th><th>State</th><th>Description</th>\
                     <th>Own policy</th><th>Buckets owned</th><th>Created</th><th></th></tr></thead><tbody>",
                );
                for key in &keys {
                    body.push_str(&self.key_row(key));
                }
                body.push_str("</tbody></table>");
            }
        }
        body.push_str(
            "<p class=\"hint\">A key's own policy (an IAM identity policy) is edited on its page here, or with <code>pgvs3 admin key policy</code>. \
             A disabled key keeps its buckets, secret and policy; every gateway of this database refuses it \
             (S3 and new RESP connections) until it is enabled again.</p>",
        );
        self.page(StatusCode::OK, "Access keys", body)
    }

    /// A key's row: its role, state, description, own policy, buckets, creation and actions.
    fn key_row(&self, key: &crate::KeyInfo) -> String {
        let mut buckets = key
            .buckets
            .iter()
            .take(BUCKETS_SHOWN)
            .map(|bucket| name(bucket))
            .collect::<Vec<_>>()
            .join(", ");
        if key.buckets.len() > BUCKETS_SHOWN {
            let _ = write!(buckets, " and {} more", key.buckets.len() - BUCKETS_SHOWN);
        }
        let role = match (key.is_root, key.read_only) {
            (true, _) => "root",
            (false, true) => "read-only",
            (false, false) => "read-write",
        };
        let actions = self.key_actions(key);
        let state = if key.disabled { "disabled" } else { "active" };
        let created = aws_sdk_s3::primitives::DateTime::from(key.created)
            .fmt(aws_sdk_s3::primitives::DateTimeFormat::DateTime)
            .unwrap_or_default();
        format!(
            "<tr class=\"access-key {state}\" data-key=\"{}\"><td><code>{}</code></td><td>{role}</td><td class=\"state\">{state}</td>\
             <td>{}</td><td>{}</td><td>{buckets}</td><td>{}</td><td class=\"actions\">{actions}</td></tr>",
            esc(&key.access_key),
            name(&key.access_key),
            name(&key.description),
            match (key.is_root, &key.policy) {
                (true, _) => "everything".to_owned(),
                (false, policy) => format!(
                    "{}<a class=\"key-policy\" href=\"{}\">{}</a>",
                    if policy.is_some() { "yes · " } else { "" },
                    esc(&crate::html::link("/access-key", &[("access_key", &key.access_key)])),
                    if policy.is_some() { "Edit" } else { "Attach" },
                ),
            },
            esc(&created),
        )
    }

    /// A key's actions: enable or disable, and delete (none for the root key).
    fn key_actions(&self, key: &crate::KeyInfo) -> String {
        if key.is_root {
            String::new()
        } else {
            let toggle = match key.disabled {
                true => form(
                    "/access-keys/enable",
                    self.csrf(),
                    &[("access_key", &key.access_key)],
                    &button("Enable", "enable", None),
                ),
                false => form(
                    "/access-keys/disable",
                    self.csrf(),
                    &[("access_key", &key.access_key)],
                    &button(
                        "Disable",
                        "disable",
                        Some("Disable this key? Every gateway refuses it until it is enabled again."),
                    ),
                ),
            };
            toggle
                + &form(
                    "/access-keys/delete",
                    self.csrf(),
                    &[("access_key", &key.access_key)],
                    &button(
                        "Delete",
                        "danger",
                        Some("Delete this key? Its buckets pass to the root key."),
                    ),
                )
        }
    }

    /// A key's own policy in an editor; `edited` is a document that was not saved, and why.
    pub(super) async fn key_policy(&self, access_key: &str, edited: Option<(&str, Vec<String>)>) -> Response {
        let mut body = format!(
            "<h1>Policy of key <code class=\"name\">{}</code></h1>",
            name(access_key)
        );
        let admin = match self.admin() {
            Ok(admin) => admin,
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\" role=\"alert\">{}</p>", name(&err));
                return self.page(StatusCode::FORBIDDEN, "Key policy", body);
            }
        };
        let (text, problems) = match edited {
            Some((text, problems)) => (text.to_owned(), problems),
            None => match admin.list_keys().await {
                Ok(keys) => match keys
                    .into_iter()
                    .find(|key| key.access_key == access_key && !key.is_root)
                {
                    Some(key) => (key.policy.unwrap_or_default(), Vec::new()),
                    None => {
                        let _ = write!(
                            body,
                            "<p class=\"flash error\">No key {} that may have a policy of its own (the root key may do everything).</p>",
                            name(access_key)
                        );
                        return self.page(StatusCode::NOT_FOUND, "Key policy", body);
                    }
                },
                Err(err) => (String::new(), vec![err]),
            },
        };
        body.push_str(&self.policy_editor(
            ("/access-keys/policy", ("access_key", access_key)),
            &text,
            &problems,
            "An IAM identity policy: statements of Effect, Action and Resource, no Principal (the key is the principal). \
             Checked here and again by the gateway before it is saved. Empty detaches it.",
        ));
        let status = if problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        self.page(status, "Key policy", body)
    }

    pub(super) async fn set_key_policy(&self, request: &Request) -> Response {
        let access_key = request.arg("access_key");
        let admin = match self.admin() {
            Ok(admin) => admin,
            Err(err) => return self.done(Err(err), "/access-keys"),
        };
        let text = request.arg("policy");
        let policy = match text.trim() {
            "" => None,
            _ => {
                let problems = crate::policy::problems(text, true);
                if !problems.is_empty() {
                    return self.key_policy(access_key, Some((text, problems))).await;
                }
                Some(text.to_owned())
            }
        };
        let detached = policy.is_none();
        match admin.set_key_policy(access_key.to_owned(), policy).await {
            Ok(true) if detached => self.done(
                Ok(format!("Key {access_key} has no policy of its own now.")),
                "/access-keys",
            ),
            Ok(true) => self.done(Ok(format!("Policy of key {access_key} saved.")), "/access-keys"),
            Ok(false) => self.done(
                Err(format!(
                    "No key {access_key} that may have a policy of its own (the root key may do everything)."
                )),
                "/access-keys",
            ),
            Err(err) => self.key_policy(access_key, Some((text, vec![err]))).await,
        }
    }

    pub(super) async fn create_access_key(&self, request: &Request) -> Response {
        let admin = match self.admin() {
            Ok(admin) => admin,
            Err(err) => return self.done(Err(err), "/access-keys"),
        };
        let access_key = match request.arg("access_key").trim() {
            "" => new_key_id(),
            given => given.to_owned(),
        };
        let description = request.arg("description").trim();
        if description.len() > 256 {
            return self.done(Err("A description is at most 256 bytes.".to_owned()), "/access-keys");
        }
        let secret = crate::session::random_token();
        let key = crate::NewKey {
            access_key: access_key.clone(),
            secret: secret.clone(),
            read_only: request.arg("read_only") == "on",
            description: description.to_owned(),
        };
        match admin.create_key(key).await {
            Ok(()) => self.access_keys(Some((&access_key, &secret))).await,
            Err(err) => self.done(Err(err), "/access-keys"),
        }
    }

    /// Disables (`disabled`) or enables a key; a disabled key's console sessions end.
    pub(super) async fn set_access_key_disabled(&self, request: &Request, disabled: bool) -> Response {
        let access_key = request.arg("access_key");
        let outcome = match self.admin() {
            Err(err) => Err(err),
            Ok(admin) => match admin.set_key_disabled(access_key.to_owned(), disabled).await {
                Ok(true) if disabled => {
                    self.app.sessions.end_key(access_key);
                    Ok(format!("Key {access_key} disabled."))
                }
                Ok(true) => Ok(format!("Key {access_key} enabled.")),
                Ok(false) => Err(format!(
                    "No key {access_key} that may be disabled (the root key may not)."
                )),
                Err(err) => Err(err),
            },
        };
        self.done(outcome, "/access-keys")
    }

    pub(super) async fn delete_access_key(&self, request: &Request) -> Response {
        let access_key = request.arg("access_key");
        let outcome = match self.admin() {
            Err(err) => Err(err),
            Ok(admin) => match admin.delete_key(access_key.to_owned()).await {
                Ok(true) => {
                    // Its console sessions end with it (their RESP connections too).
                    self.app.sessions.end_key(access_key);
                    Ok(format!("Key {access_key} deleted; its buckets passed to the root key."))
                }
                Ok(false) => Err(format!(
                    "No key {access_key} that may be deleted (the root key may not)."
                )),
                Err(err) => Err(err),
            },
        };
        self.done(outcome, "/access-keys")
    }
}
