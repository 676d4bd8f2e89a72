//! A bucket's configurations beyond versioning and policy: object lock defaults, lifecycle rules,
//! CORS rules, default encryption and notification rules, shown and edited. Each is the S3
//! API's own, read and written with the session's key; a section the key may not read shows the
//! gateway's refusal, a change it may not make comes back as the gateway's error.

use std::fmt::Write;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, CorsConfiguration, CorsRule, DefaultRetention,
    ExpirationStatus, FilterRule, FilterRuleName, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
    NoncurrentVersionExpiration, NotificationConfiguration, NotificationConfigurationFilter, ObjectLockConfiguration,
    ObjectLockEnabled, ObjectLockRetentionMode, ObjectLockRule, ServerSideEncryption, ServerSideEncryptionByDefault,
    ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
};

use super::{Context, Outcome, Request, sdk};
use crate::gateway::describe;
use crate::html::{button, esc, form, name};

/// Lifecycle and CORS rules a bucket may hold (S3 allows 1,000 lifecycle rules and 100 CORS
/// rules; the gateway enforces its own bounds, this bounds what a page renders).
const MAX_RULES_SHOWN: usize = 1000;
/// The longest rule id S3 takes.
const MAX_RULE_ID: usize = 255;
/// Retention and expiry periods are whole days, at most a century.
const MAX_DAYS: i32 = 36_500;

/// A configuration the bucket may not have: `None` when the gateway answers `absent`.
pub(super) fn optional<T, E, R>(result: Result<T, SdkError<E, R>>, absent: &str) -> Result<Option<T>, String>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.as_service_error().and_then(|e| e.code()) == Some(absent) => Ok(None),
        Err(err) => Err(describe(&err)),
    }
}

fn refused(err: &str) -> String {
    format!("<p class=\"flash error\">{}</p>", name(err))
}

/// A form field of whole days: empty is none.
fn days(request: &Request, field: &str, label: &str) -> Result<Option<i32>, String> {
    let text = request.arg(field).trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<i32>() {
        Ok(days @ 1..=MAX_DAYS) => Ok(Some(days)),
        _ => Err(format!("{label}: a whole number of days from 1 to {MAX_DAYS}")),
    }
}

/// A rule id from a form: required (rules are deleted by it), S3's length.
fn rule_id(request: &Request) -> Result<&str, String> {
    let id = request.arg("rule_id").trim();
    if id.is_empty() || id.len() > MAX_RULE_ID {
        return Err(format!("A rule needs an id of 1 to {MAX_RULE_ID} characters."));
    }
    Ok(id)
}

/// A list field: one entry per line or separated by commas.
fn entries(text: &str) -> Vec<String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_owned)
        .collect()
}

fn joined(values: &[String]) -> String {
    values.iter().map(|v| name(v)).collect::<Vec<_>>().join(", ")
}

impl Context<'_> {
    /// The sections of the bucket page this module owns, read at once.
    pub(super) async fn settings(&self, bucket: &str) -> String {
        let (lock, lifecycle, cors, encryption, notifications) = tokio::join!(
            self.object_lock_section(bucket),
            self.lifecycle_section(bucket),
            self.cors_section(bucket),
            self.encryption_section(bucket),
            self.notifications_section(bucket),
        );
        let mut out = String::new();
        for section in [lock, lifecycle, cors, encryption, notifications] {
            out.push_str(&section);
        }
        out.push_str(&self.quota_section(bucket).await);
        out
    }

    /// A change of this module's, or `None` when `path` is not one.
    pub(super) async fn change_setting(&self, request: &Request, bucket: &str) -> Option<Outcome> {
        Some(match request.path.as_str() {
            "/bucket/object-lock" => self.put_object_lock(request, bucket).await,
            "/bucket/lifecycle/add" => self.add_lifecycle_rule(request, bucket).await,
            "/bucket/lifecycle/delete" => self.delete_lifecycle_rule(bucket, request.arg("rule_id")).await,
            "/bucket/cors/add" => self.add_cors_rule(request, bucket).await,
            "/bucket/cors/delete" => self.delete_cors_rule(bucket, request.arg("rule_id")).await,
            "/bucket/encryption" => self.put_encryption(bucket, request.arg("default")).await,
            "/bucket/notifications/add" => self.add_notification_rule(request, bucket).await,
            "/bucket/notifications/delete" => self.delete_notification_rule(bucket, request.arg("rule_id")).await,
            "/bucket/quota" => self.set_quota(request, bucket).await,
            _ => return None,
        })
    }

    /// Quotas are not part of the S3 API: a root-key session sees and sets them, asked of the
    /// gateway in-process (as `pgvs3 admin quota` does); other sessions are told where they live.
    async fn quota_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"quota\"><h2>Quota</h2>");
        let admin = self.app.gateway.admin.as_ref().filter(|_| self.session.admin);
        match admin {
            Some(admin) => match admin.bucket_quota(bucket.to_owned()).await {
                Err(err) => out.push_str(&refused(&err)),
                Ok(None) => out.push_str("<p id=\"quota-status\">No quota.</p>"),
                Ok(Some(quota)) => {
                    let limit = |max: Option<i64>, show: &dyn Fn(i64) -> String| max.map_or("unlimited".to_owned(), show);
                    let _ = write!(
                        out,
                        "<p id=\"quota-status\">{} of {}; {} of {} objects.</p>",
                        esc(&crate::html::size(quota.used_bytes)),
                        esc(&limit(quota.max_bytes, &crate::html::size)),
                        quota.used_objects,
                        esc(&limit(quota.max_objects, &|n| n.to_string())),
                    );
                }
            },
            None => out.push_str(
                "<p class=\"hint\">Bucket quotas are not part of the S3 API; the root key's sessions see them here.</p>",
            ),
        }
        if admin.is_some() {
            out.push_str(&form(
                "/bucket/quota",
                self.csrf(),
                &[("bucket", bucket)],
                "<label>Most bytes <input name=\"max_size\" id=\"quota-size\" maxlength=\"32\" placeholder=\"e.g. 10 GiB; empty: unlimited\"></label>\
                 <label>Most objects <input name=\"max_objects\" id=\"quota-objects\" maxlength=\"20\" inputmode=\"numeric\" placeholder=\"empty: unlimited\"></label>\
                 <button id=\"set-quota\">Set quota</button> <button name=\"remove\" value=\"on\" id=\"remove-quota\" class=\"danger\">Remove quota</button>",
            ));
        }
        out.push_str(
            "<p class=\"hint\">Also set with <code>pgvs3 admin quota</code> or a Bucket&#39;s <code>spec.quota</code> (the operator \
             puts that one back). A write past one is refused with <code>XMinioAdminBucketQuotaExceeded</code>, which the upload shows.</p></section>",
        );
        out
    }

    /// Sets or removes the bucket's quota (root-key sessions only).
    async fn set_quota(&self, request: &Request, bucket: &str) -> Outcome {
        let Some(admin) = self.app.gateway.admin.as_ref().filter(|_| self.session.admin) else {
            return Err("Bucket quotas are set by the root key's sessions.".to_owned());
        };
        let (max_bytes, max_objects) = match request.arg("remove") {
            "on" => (None, None),
            _ => (
                parse_size(request.arg("max_size"))?,
                match request.arg("max_objects").trim() {
                    "" => None,
                    count => Some(
                        count
                            .parse::<i64>()
                            .ok()
                            .filter(|count| *count >= 0)
                            .ok_or_else(|| format!("{count:?} is not a number of objects"))?,
                    ),
                },
            ),
        };
        admin
            .set_bucket_quota(bucket.to_owned(), max_bytes, max_objects)
            .await
            .map(|()| match (max_bytes, max_objects) {
                (None, None) => "Quota removed.".to_owned(),
                _ => "Quota set.".to_owned(),
            })
    }

    async fn object_lock_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"object-lock\"><h2>Object lock</h2>");
        let answer = self
            .session
            .s3
            .get_object_lock_configuration()
            .bucket(bucket)
            .send()
            .await;
        let config = match optional(answer, "ObjectLockConfigurationNotFoundError") {
            Err(err) => return out + &refused(&err) + "</section>",
            Ok(found) => found.and_then(|answer| answer.object_lock_configuration().cloned()),
        };
        let enabled = config
            .as_ref()
            .is_some_and(|config| config.object_lock_enabled() == Some(&ObjectLockEnabled::Enabled));
        if !enabled {
            out.push_str(
                "<p id=\"object-lock-status\">Off. S3 turns object lock on only when a bucket is created \
                 (<em>with object lock</em> on the buckets page).</p></section>",
            );
            return out;
        }
        let retention = config
            .as_ref()
            .and_then(|config| config.rule())
            .and_then(|rule| rule.default_retention());
        let mode = retention.and_then(|r| r.mode()).map(|m| m.as_str()).unwrap_or("");
        let period = retention
            .and_then(|r| r.days().map(|d| (d, "days")).or(r.years().map(|y| (y, "years"))))
            .map(|(n, unit)| format!("{n} {unit}"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<p id=\"object-lock-status\">On. Default retention: <strong>{}</strong></p>",
            if mode.is_empty() {
                "none".to_owned()
            } else {
                format!("{} for {}", esc(mode), esc(&period))
            }
        );
        let option = |value: &str, label: &str| {
            format!(
                "<option value=\"{value}\"{}>{label}</option>",
                if value == mode { " selected" } else { "" }
            )
        };
        out.push_str(&form(
            "/bucket/object-lock",
            self.csrf(),
            &[("bucket", bucket)],
            &format!(
                "<label>Mode <select name=\"mode\" id=\"lock-mode\">{}{}{}</select></label> \
                 <label>Days <input name=\"days\" id=\"lock-days\" type=\"number\" min=\"1\" max=\"{MAX_DAYS}\" value=\"{}\"></label> \
                 <button id=\"save-object-lock\">Save default retention</button>",
                option("", "none"),
                option("GOVERNANCE", "GOVERNANCE"),
                option("COMPLIANCE", "COMPLIANCE"),
                retention.and_then(|r| r.days()).map(|d| d.to_string()).unwrap_or_default(),
            ),
        ));
        out.push_str("</section>");
        out
    }

    async fn put_object_lock(&self, request: &Request, bucket: &str) -> Outcome {
        let mut config = ObjectLockConfiguration::builder().object_lock_enabled(ObjectLockEnabled::Enabled);
        let message = match request.arg("mode") {
            "" => "Objects get no default retention now.".to_owned(),
            mode @ ("GOVERNANCE" | "COMPLIANCE") => {
                let days = days(request, "days", "Retention")?.ok_or("Retention: give the days it lasts.")?;
                config = config.rule(
                    ObjectLockRule::builder()
                        .default_retention(
                            DefaultRetention::builder()
                                .mode(ObjectLockRetentionMode::from(mode))
                                .days(days)
                                .build(),
                        )
                        .build(),
                );
                format!("New objects are now kept {days} days ({mode}).")
            }
            _ => return Err("The mode is GOVERNANCE, COMPLIANCE or none.".to_owned()),
        };
        sdk(self
            .session
            .s3
            .put_object_lock_configuration()
            .bucket(bucket)
            .object_lock_configuration(config.build())
            .send()
            .await)
        .map(|_| message)
    }

    /// The bucket's lifecycle rules; none is an empty list.
    async fn lifecycle_rules(&self, bucket: &str) -> Result<Vec<LifecycleRule>, String> {
        let answer = self
            .session
            .s3
            .get_bucket_lifecycle_configuration()
            .bucket(bucket)
            .send()
            .await;
        Ok(optional(answer, "NoSuchLifecycleConfiguration")?
            .map(|config| config.rules().to_vec())
            .unwrap_or_default())
    }

    /// Saves `rules` as the whole configuration (none: deletes it, as S3 has no empty one).
    async fn put_lifecycle_rules(&self, bucket: &str, rules: Vec<LifecycleRule>) -> Result<(), String> {
        let s3 = &self.session.s3;
        if rules.is_empty() {
            return sdk(s3.delete_bucket_lifecycle().bucket(bucket).send().await).map(|_| ());
        }
        let config = BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules))
            .build()
            .map_err(|err| err.to_string())?;
        sdk(s3
            .put_bucket_lifecycle_configuration()
            .bucket(bucket)
            .lifecycle_configuration(config)
            .send()
            .await)
        .map(|_| ())
    }

    async fn lifecycle_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"lifecycle\"><h2>Lifecycle rules</h2>");
        match self.lifecycle_rules(bucket).await {
            Err(err) => out.push_str(&refused(&err)),
            Ok(rules) if rules.is_empty() => out.push_str("<p>No lifecycle rules.</p>"),
            Ok(rules) => {
                out.push_str(
                    "<table id=\"lifecycle-rules\"><thead><tr><th>Id</th><th>Status</th><th>Prefix</th><th>Expire current after</th>\
                     <th>Expire noncurrent after</th><th>Abort uploads after</th><th>Expired delete markers</th><th></th></tr></thead><tbody>",
                );
                for rule in rules.iter().take(MAX_RULES_SHOWN) {
                    let after = |days: Option<i32>| days.map(|d| format!("{d} days")).unwrap_or_default();
                    // Rules written with S3's older top-level Prefix (deprecated, still taken).
                    #[allow(deprecated)]
                    let prefix = rule.filter().and_then(|f| f.prefix()).or(rule.prefix()).unwrap_or("");
                    let filtered_more = rule.filter().is_some_and(|f| {
                        f.tag().is_some()
                            || f.and().is_some()
                            || f.object_size_greater_than().is_some()
                            || f.object_size_less_than().is_some()
                    });
                    let id = rule.id().unwrap_or("");
                    let delete = if id.is_empty() {
                        String::new()
                    } else {
                        form(
                            "/bucket/lifecycle/delete",
                            self.csrf(),
                            &[("bucket", bucket), ("rule_id", id)],
                            &button("Delete", "danger", Some("Delete this lifecycle rule?")),
                        )
                    };
                    let _ = write!(
                        out,
                        "<tr class=\"lifecycle-rule\"><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}</td></tr>",
                        name(id),
                        esc(rule.status().as_str()),
                        name(prefix),
                        if filtered_more {
                            " <em>(and more filters)</em>"
                        } else {
                            ""
                        },
                        after(rule.expiration().and_then(|e| e.days())),
                        after(rule.noncurrent_version_expiration().and_then(|e| e.noncurrent_days())),
                        after(
                            rule.abort_incomplete_multipart_upload()
                                .and_then(|a| a.days_after_initiation())
                        ),
                        if rule.expiration().and_then(|e| e.expired_object_delete_marker()) == Some(true) {
                            "removed"
                        } else {
                            ""
                        },
                        delete
                    );
                }
                out.push_str("</tbody></table>");
            }
        }
        out.push_str(&form(
            "/bucket/lifecycle/add",
            self.csrf(),
            &[("bucket", bucket)],
            &format!(
                "<fieldset><legend>Add or replace a rule</legend>\
                 <label>Id <input name=\"rule_id\" id=\"lifecycle-id\" required maxlength=\"{MAX_RULE_ID}\"></label>\
                 <label>Prefix <input name=\"prefix\" id=\"lifecycle-prefix\"></label>\
                 <label>Expire current versions after (days) <input name=\"expire_days\" id=\"lifecycle-expire\" type=\"number\" min=\"1\" max=\"{MAX_DAYS}\"></label>\
                 <label>Expire noncurrent versions after (days) <input name=\"noncurrent_days\" id=\"lifecycle-noncurrent\" type=\"number\" min=\"1\" max=\"{MAX_DAYS}\"></label>\
                 <label>Abort incomplete uploads after (days) <input name=\"abort_days\" id=\"lifecycle-abort\" type=\"number\" min=\"1\" max=\"{MAX_DAYS}\"></label>\
                 <label><input name=\"delete_markers\" id=\"lifecycle-markers\" type=\"checkbox\" value=\"on\"> Remove expired delete markers</label>\
                 <button id=\"add-lifecycle-rule\">Save rule</button></fieldset>"
            ),
        ));
        out.push_str("</section>");
        out
    }

    async fn add_lifecycle_rule(&self, request: &Request, bucket: &str) -> Outcome {
        let id = rule_id(request)?;
        let expire = days(request, "expire_days", "Expire current versions")?;
        let noncurrent = days(request, "noncurrent_days", "Expire noncurrent versions")?;
        let abort = days(request, "abort_days", "Abort incomplete uploads")?;
        let markers = request.arg("delete_markers") == "on";
        if expire.is_none() && noncurrent.is_none() && abort.is_none() && !markers {
            return Err("A rule needs at least one action.".to_owned());
        }
        let expiration = (expire.is_some() || markers).then(|| {
            LifecycleExpiration::builder()
                .set_days(expire)
                .set_expired_object_delete_marker(markers.then_some(true))
                .build()
        });
        let rule = LifecycleRule::builder()
            .id(id)
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix(request.arg("prefix")).build())
            .set_expiration(expiration)
            .set_noncurrent_version_expiration(
                noncurrent.map(|days| NoncurrentVersionExpiration::builder().noncurrent_days(days).build()),
            )
            .set_abort_incomplete_multipart_upload(abort.map(|days| {
                AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(days)
                    .build()
            }))
            .build()
            .map_err(|err| err.to_string())?;
        // The other rules as the gateway has them, whatever this form can express.
        let mut rules = self.lifecycle_rules(bucket).await?;
        rules.retain(|rule| rule.id() != Some(id));
        rules.push(rule);
        self.put_lifecycle_rules(bucket, rules).await?;
        Ok(format!("Lifecycle rule {id} saved."))
    }

    async fn delete_lifecycle_rule(&self, bucket: &str, id: &str) -> Outcome {
        let mut rules = self.lifecycle_rules(bucket).await?;
        let before = rules.len();
        rules.retain(|rule| rule.id() != Some(id));
        if rules.len() == before {
            return Err(format!("No lifecycle rule {id}."));
        }
        self.put_lifecycle_rules(bucket, rules).await?;
        Ok(format!("Lifecycle rule {id} deleted."))
    }

    /// The bucket's CORS rules; none is an empty list.
    pub(super) async fn cors_rules(&self, bucket: &str) -> Result<Vec<CorsRule>, String> {
        let answer = self.session.s3.get_bucket_cors().bucket(bucket).send().await;
        Ok(optional(answer, "NoSuchCORSConfiguration")?
            .map(|cors| cors.cors_rules().to_vec())
            .unwrap_or_default())
    }

    /// Saves `rules` as the whole CORS configuration (none: deletes it).
    pub(super) async fn put_cors_rules(&self, bucket: &str, rules: Vec<CorsRule>) -> Result<(), String> {
        let s3 = &self.session.s3;
        if rules.is_empty() {
            return sdk(s3.delete_bucket_cors().bucket(bucket).send().await).map(|_| ());
        }
        let config = CorsConfiguration::builder()
            .set_cors_rules(Some(rules))
            .build()
            .map_err(|err| err.to_string())?;
        sdk(s3
            .put_bucket_cors()
            .bucket(bucket)
            .cors_configuration(config)
            .send()
            .await)
        .map(|_| ())
    }

    async fn cors_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"cors\"><h2>CORS rules</h2>");
        match self.cors_rules(bucket).await {
            Err(err) => out.push_str(&refused(&err)),
            Ok(rules) if rules.is_empty() => {
                out.push_str("<p>No CORS rules: browsers on other sites may not call the bucket.</p>")
            }
            Ok(rules) => {
                out.push_str(
                    "<table id=\"cors-rules\"><thead><tr><th>Id</th><th>Origins</th><th>Methods</th><th>Headers</th><th>Exposed</th><th>Max age</th><th></th></tr></thead><tbody>",
                );
                for rule in rules.iter().take(MAX_RULES_SHOWN) {
                    let id = rule.id().unwrap_or("");
                    let delete = if id.is_empty() {
                        String::new()
                    } else {
                        form(
                            "/bucket/cors/delete",
                            self.csrf(),
                            &[("bucket", bucket), ("rule_id", id)],
                            &button("Delete", "danger", Some("Delete this CORS rule?")),
                        )
                    };
                    let _ = write!(
                        out,
                        "<tr class=\"cors-rule\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}</td></tr>",
                        name(id),
                        joined(rule.allowed_origins()),
                        joined(rule.allowed_methods()),
                        joined(rule.allowed_headers()),
                        joined(rule.expose_headers()),
                        rule.max_age_seconds().map(|s| format!("{s} s")).unwrap_or_default(),
                        delete
                    );
                }
                out.push_str("</tbody></table>");
            }
        }
        let methods: String = ["GET", "PUT", "POST", "DELETE", "HEAD"]
            .iter()
            .map(|m| {
                format!(
                    "<label><input type=\"checkbox\" name=\"method_{m}\" value=\"on\" id=\"cors-{m}\"> {m}</label> "
                )
            })
            .collect();
        out.push_str(&form(
            "/bucket/cors/add",
            self.csrf(),
            &[("bucket", bucket)],
            &format!(
                "<fieldset><legend>Add or replace a rule</legend>\
                 <label>Id <input name=\"rule_id\" id=\"cors-id\" required maxlength=\"{MAX_RULE_ID}\"></label>\
                 <label>Origins <input name=\"origins\" id=\"cors-origins\" placeholder=\"https://app.example.com, …\" required></label>\
                 <p>{methods}</p>\
                 <label>Allowed headers <input name=\"headers\" id=\"cors-headers\" placeholder=\"*\"></label>\
                 <label>Exposed headers <input name=\"expose\" id=\"cors-expose\" placeholder=\"ETag\"></label>\
                 <label>Max age (seconds) <input name=\"max_age\" id=\"cors-max-age\" type=\"number\" min=\"0\"></label>\
                 <button id=\"add-cors-rule\">Save rule</button></fieldset>"
            ),
        ));
        out.push_str("</section>");
        out
    }

    async fn add_cors_rule(&self, request: &Request, bucket: &str) -> Outcome {
        let id = rule_id(request)?;
        let methods: Vec<String> = ["GET", "PUT", "POST", "DELETE", "HEAD"]
            .into_iter()
            .filter(|m| request.arg(&format!("method_{m}")) == "on")
            .map(str::to_owned)
            .collect();
        let origins = entries(request.arg("origins"));
        if origins.is_empty() || methods.is_empty() {
            return Err("A CORS rule needs at least one origin and one method.".to_owned());
        }
        let max_age = match request.arg("max_age").trim() {
            "" => None,
            text => Some(
                text.parse::<i32>()
                    .ok()
                    .filter(|s| *s >= 0)
                    .ok_or("Max age: a whole number of seconds.")?,
            ),
        };
        let rule = CorsRule::builder()
            .id(id)
            .set_allowed_origins(Some(origins))
            .set_allowed_methods(Some(methods))
            .set_allowed_headers(Some(entries(request.arg("headers"))))
            .set_expose_headers(Some(entries(request.arg("expose"))))
            .set_max_age_seconds(max_age)
            .build()
            .map_err(|err| err.to_string())?;
        let mut rules = self.cors_rules(bucket).await?;
        rules.retain(|rule| rule.id() != Some(id));
        rules.push(rule);
        self.put_cors_rules(bucket, rules).await?;
        Ok(format!("CORS rule {id} saved."))
    }

    async fn delete_cors_rule(&self, bucket: &str, id: &str) -> Outcome {
        let mut rules = self.cors_rules(bucket).await?;
        let before = rules.len();
        rules.retain(|rule| rule.id() != Some(id));
        if rules.len() == before {
            return Err(format!("No CORS rule {id}."));
        }
        self.put_cors_rules(bucket, rules).await?;
        Ok(format!("CORS rule {id} deleted."))
    }

    async fn encryption_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"encryption\"><h2>Default encryption</h2>");
        let answer = self.session.s3.get_bucket_encryption().bucket(bucket).send().await;
        let algorithm = match optional(answer, "ServerSideEncryptionConfigurationNotFoundError") {
            Err(err) => return out + &refused(&err) + "</section>",
            Ok(found) => found
                .and_then(|answer| answer.server_side_encryption_configuration().cloned())
                .and_then(|config| {
                    config.rules().iter().find_map(|rule| {
                        rule.apply_server_side_encryption_by_default()
                            .map(|d| d.sse_algorithm().as_str().to_owned())
                    })
                }),
        };
        let (status, next, label) = match &algorithm {
            Some(algorithm) => (
                format!("New objects are encrypted with {} by default.", esc(algorithm)),
                "none",
                "Remove the default",
            ),
            None => (
                "None: objects are encrypted only when a request asks for it.".to_owned(),
                "AES256",
                "Encrypt new objects by default (SSE-S3)",
            ),
        };
        let _ = write!(
            out,
            "<p id=\"encryption-status\">{status}</p>{}</section>",
            form(
                "/bucket/encryption",
                self.csrf(),
                &[("bucket", bucket), ("default", next)],
                &format!("<button id=\"encryption-toggle\">{label}</button>"),
            )
        );
        out
    }

    async fn put_encryption(&self, bucket: &str, default: &str) -> Outcome {
        let s3 = &self.session.s3;
        if default == "none" {
            return sdk(s3.delete_bucket_encryption().bucket(bucket).send().await)
                .map(|_| "Default encryption removed.".to_owned());
        }
        let by_default = ServerSideEncryptionByDefault::builder()
            .sse_algorithm(ServerSideEncryption::from(default))
            .build()
            .map_err(|err| err.to_string())?;
        let config = ServerSideEncryptionConfiguration::builder()
            .rules(
                ServerSideEncryptionRule::builder()
                    .apply_server_side_encryption_by_default(by_default)
                    .build(),
            )
            .build()
            .map_err(|err| err.to_string())?;
        sdk(s3
            .put_bucket_encryption()
            .bucket(bucket)
            .server_side_encryption_configuration(config)
            .send()
            .await)
        .map(|_| format!("New objects are now encrypted with {default} by default."))
    }

    async fn notification_rules(&self, bucket: &str) -> Result<NotificationConfiguration, String> {
        let answer = sdk(self
            .session
            .s3
            .get_bucket_notification_configuration()
            .bucket(bucket)
            .send()
            .await)?;
        Ok(NotificationConfiguration::builder()
            .set_queue_configurations(answer.queue_configurations)
            .set_topic_configurations(answer.topic_configurations)
            .set_lambda_function_configurations(answer.lambda_function_configurations)
            .set_event_bridge_configuration(answer.event_bridge_configuration)
            .build())
    }

    async fn put_notification_rules(&self, bucket: &str, rules: NotificationConfiguration) -> Result<(), String> {
        sdk(self
            .session
            .s3
            .put_bucket_notification_configuration()
            .bucket(bucket)
            .notification_configuration(rules)
            .send()
            .await)
        .map(|_| ())
    }

    /// Adds a rule (a queue configuration: every target of this gateway is one, docs/events.md),
    /// or replaces the one of its id; the others go back as the gateway returned them. The
    /// form is checked first; what the gateway still refuses (an unknown queue or webhook, an
    /// event name it does not know, overlapping filters) comes back as its own error.
    async fn add_notification_rule(&self, request: &Request, bucket: &str) -> Outcome {
        let id = rule_id(request)?;
        let target = request.arg("target").trim();
        let kind = ["arn:pgvs3:ojs:::", "arn:pgvs3:webhook:::", "arn:pgvs3:pubsub:::"]
            .into_iter()
            .find(|kind| target.starts_with(kind));
        if kind.is_none_or(|kind| target.len() == kind.len()) || target.len() > MAX_TARGET {
            return Err(
                "Target: arn:pgvs3:ojs:::<queue>, arn:pgvs3:webhook:::<name> or arn:pgvs3:pubsub:::<channel>."
                    .to_owned(),
            );
        }
        let events = entries(request.arg("events"));
        if events.is_empty() || events.iter().any(|event| !event.starts_with("s3:")) {
            return Err("Events: one or more S3 event names, such as s3:ObjectCreated:*.".to_owned());
        }
        let mut filter = Vec::new();
        for (field, rule) in [("prefix", FilterRuleName::Prefix), ("suffix", FilterRuleName::Suffix)] {
            let value = request.arg(field);
            if value.len() > 1024 {
                return Err(format!("The {field} is longer than a key (1,024 bytes)."));
            }
            if !value.is_empty() {
                filter.push(FilterRule::builder().name(rule).value(value).build());
            }
        }
        let mut queue = aws_sdk_s3::types::QueueConfiguration::builder()
            .id(id)
            .queue_arn(target)
            .set_events(Some(
                events
                    .iter()
                    .map(|e| aws_sdk_s3::types::Event::from(e.as_str()))
                    .collect(),
            ));
        if !filter.is_empty() {
            queue = queue.filter(
                NotificationConfigurationFilter::builder()
                    .key(
                        aws_sdk_s3::types::S3KeyFilter::builder()
                            .set_filter_rules(Some(filter))
                            .build(),
                    )
                    .build(),
            );
        }
        let queue = queue.build().map_err(|err| err.to_string())?;
        let (rules, _) = without_rule(self.notification_rules(bucket).await?, id);
        let mut queues = rules.queue_configurations().to_vec();
        queues.push(queue);
        let rules = NotificationConfiguration::builder()
            .set_queue_configurations(Some(queues))
            .set_topic_configurations(rules.topic_configurations)
            .set_lambda_function_configurations(rules.lambda_function_configurations)
            .set_event_bridge_configuration(rules.event_bridge_configuration)
            .build();
        self.put_notification_rules(bucket, rules).await?;
        Ok(format!("Notification rule {id} saved."))
    }

    async fn delete_notification_rule(&self, bucket: &str, id: &str) -> Outcome {
        let (rules, found) = without_rule(self.notification_rules(bucket).await?, id);
        if !found {
            return Err(format!("No notification rule {id}."));
        }
        self.put_notification_rules(bucket, rules).await?;
        Ok(format!("Notification rule {id} deleted."))
    }

    /// Notification rules: targets are OJS queues, webhooks and RESP channels of this gateway
    /// (docs/events.md).
    async fn notifications_section(&self, bucket: &str) -> String {
        let mut out = String::from("<section id=\"notifications\"><h2>Event notifications</h2>");
        let answer = match self.notification_rules(bucket).await {
            Err(err) => return out + &refused(&err) + "</section>",
            Ok(answer) => answer,
        };
        let rows = notification_rows(&answer);
        if rows.is_empty() {
            out.push_str("<p>No notification rules.</p>");
        } else {
            out.push_str(
                "<table id=\"notification-rules\"><thead><tr><th>Id</th><th>Target</th><th>Events</th><th>Filter</th><th></th></tr></thead><tbody>",
            );
            for (id, target, events, filter) in rows.into_iter().take(MAX_RULES_SHOWN) {
                let id = id.unwrap_or("");
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td><code>{}</code></td><td>{events}</td><td>{filter}</td><td class=\"actions\">{}</td></tr>",
                    name(id),
                    name(target),
                    form(
                        "/bucket/notifications/delete",
                        self.csrf(),
                        &[("bucket", bucket), ("rule_id", id)],
                        &button("Delete", "danger", Some("Delete this notification rule?")),
                    ),
                );
            }
            out.push_str("</tbody></table>");
        }
        out.push_str(&form(
            "/bucket/notifications/add",
            self.csrf(),
            &[("bucket", bucket)],
            "<h3>Add or replace a rule</h3>\
             <label>Id <input name=\"rule_id\" id=\"notification-id\" required maxlength=\"255\"></label> \
             <label>Target <input name=\"target\" id=\"notification-target\" required size=\"40\" \
             placeholder=\"arn:pgvs3:ojs:::queue\"></label> \
             <label>Events <input name=\"events\" id=\"notification-events\" value=\"s3:ObjectCreated:*\" size=\"40\"></label> \
             <label>Prefix <input name=\"prefix\" id=\"notification-prefix\"></label> \
             <label>Suffix <input name=\"suffix\" id=\"notification-suffix\"></label> \
             <button id=\"add-notification\">Save rule</button>\
             <p class=\"hint\">Targets: <code>arn:pgvs3:ojs:::queue</code> (an OJS queue of this database), \
             <code>arn:pgvs3:webhook:::name</code> (a registered webhook target), \
             <code>arn:pgvs3:pubsub:::channel</code> (a RESP channel). Events separated by commas \
             (<code>s3:ObjectCreated:*</code>, <code>s3:ObjectRemoved:*</code>, ...). A rule of the same id is replaced.</p>",
        ));
        out.push_str("</section>");
        out
    }
}

/// A notification rule's key filter as text: `prefix x, suffix y`.
fn filter_text(filter: Option<&NotificationConfigurationFilter>) -> String {
    filter
        .and_then(|f| f.key())
        .map(|key| {
            key.filter_rules()
                .iter()
                .map(|rule| {
                    format!(
                        "{} {}",
                        esc(rule.name().map(|n| n.as_str()).unwrap_or("")),
                        name(rule.value().unwrap_or(""))
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn events_text(events: &[aws_sdk_s3::types::Event]) -> String {
    events.iter().map(|e| name(e.as_str())).collect::<Vec<_>>().join(", ")
}

/// The rules of every target kind, in one list: (id, target, events, filter).
fn notification_rows(answer: &NotificationConfiguration) -> Vec<(Option<&str>, &str, String, String)> {
    let mut rows = Vec::new();
    for queue in answer.queue_configurations() {
        rows.push((
            queue.id(),
            queue.queue_arn(),
            events_text(queue.events()),
            filter_text(queue.filter()),
        ));
    }
    for topic in answer.topic_configurations() {
        rows.push((
            topic.id(),
            topic.topic_arn(),
            events_text(topic.events()),
            filter_text(topic.filter()),
        ));
    }
    for lambda in answer.lambda_function_configurations() {
        rows.push((
            lambda.id(),
            lambda.lambda_function_arn(),
            events_text(lambda.events()),
            filter_text(lambda.filter()),
        ));
    }
    rows
}

/// The longest notification target ARN taken from the form.
const MAX_TARGET: usize = 1024;

/// `rules` without the rule `id` (of any kind), and whether it had one.
fn without_rule(rules: NotificationConfiguration, id: &str) -> (NotificationConfiguration, bool) {
    let before = rules.queue_configurations().len()
        + rules.topic_configurations().len()
        + rules.lambda_function_configurations().len();
    let keep = |rule_id: Option<&str>| rule_id != Some(id);
    let rules = NotificationConfiguration::builder()
        .set_queue_configurations(Some(
            rules
                .queue_configurations()
                .iter()
                .filter(|rule| keep(rule.id()))
                .cloned()
                .collect(),
        ))
        .set_topic_configurations(Some(
            rules
                .topic_configurations()
                .iter()
                .filter(|rule| keep(rule.id()))
                .cloned()
                .collect(),
        ))
        .set_lambda_function_configurations(Some(
            rules
                .lambda_function_configurations()
                .iter()
                .filter(|rule| keep(rule.id()))
                .cloned()
                .collect(),
        ))
        .set_event_bridge_configuration(rules.event_bridge_configuration)
        .build();
    let after = rules.queue_configurations().len()
        + rules.topic_configurations().len()
        + rules.lambda_function_configurations().len();
    (rules, after < before)
}

/// `10 GiB`, `512MiB`, `1000` (bytes): a quota's size; empty is unlimited.
fn parse_size(text: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "kib" => 10,
        "mib" => 20,
        "gib" => 30,
        "tib" => 40,
        _ => return Err(format!("{text:?}: the unit is B, KiB, MiB, GiB or TiB")),
    };
    number
        .parse::<i64>()
        .ok()
        .and_then(|number| number.checked_mul(1 << shift))
        .map(Some)
        .ok_or_else(|| format!("{text:?} is not a size"))
}
