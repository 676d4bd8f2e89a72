//! A version's object lock on the object page: its retention (mode and date) and legal hold,
//! read with GetObjectRetention / GetObjectLegalHold and changed with PutObjectRetention /
//! PutObjectLegalHold as the session's key. The gateway enforces every rule (COMPLIANCE only
//! ever extended, GOVERNANCE shortened or removed only with the bypass header and a key that may
//! write the bucket); its refusal is shown as it answered.

use std::fmt::Write;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::{DateTime, DateTimeFormat};
use aws_sdk_s3::types::{ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockRetention, ObjectLockRetentionMode};

use super::settings::optional;
use super::{Context, Outcome, Request, date, sdk};
use crate::html::{esc, form, name};

/// A retain-until date from a form: `2030-01-31` (midnight UTC) or RFC 3339.
fn retain_until(text: &str) -> Result<DateTime, String> {
    let text = text.trim();
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_owned()
    };
    DateTime::from_str(&full, DateTimeFormat::DateTime)
        .map_err(|_| format!("Retain until: a date such as 2030-01-31 or 2030-01-31T12:00:00Z, not {text:?}."))
}

impl Context<'_> {
    /// The lock section of a version (`None`: the current one), or nothing when the bucket has
    /// no object lock (the gateway answers `InvalidRequest`).
    pub(super) async fn lock_section(&self, bucket: &str, key: &str, version: Option<&str>) -> String {
        let s3 = &self.session.s3;
        let (retention, hold) = tokio::join!(
            s3.get_object_retention()
                .bucket(bucket)
                .key(key)
                .set_version_id(version.map(str::to_owned))
                .send(),
            s3.get_object_legal_hold()
                .bucket(bucket)
                .key(key)
                .set_version_id(version.map(str::to_owned))
                .send(),
        );
        if let Err(err) = &retention
            && err.as_service_error().and_then(|err| err.code()) == Some("InvalidRequest")
        {
            return String::new();
        }
        let mut fields = vec![("bucket", bucket), ("key", key)];
        if let Some(version) = version {
            fields.push(("version", version));
        }
        let mut out = format!(
            "<section id=\"lock\"><h2>Retention and legal hold</h2><p class=\"hint\">Of {}.</p>",
            match version {
                Some(version) => format!("version <code>{}</code>", name(version)),
                None => "the current version".to_owned(),
            }
        );
        match optional(retention, "NoSuchObjectLockConfiguration") {
            Ok(retention) => out.push_str(&self.retention_form(retention.and_then(|r| r.retention), &fields)),
            Err(err) => {
                let _ = write!(out, "<p class=\"flash error\">{}</p>", name(&err));
            }
        }
        match optional(hold, "NoSuchObjectLockConfiguration") {
            Ok(hold) => {
                let on = hold
                    .and_then(|hold| hold.legal_hold)
                    .and_then(|hold| hold.status)
                    .is_some_and(|status| status == ObjectLockLegalHoldStatus::On);
                let (state, next, label) = if on {
                    ("ON", "OFF", "Release the legal hold")
                } else {
                    ("OFF", "ON", "Place a legal hold")
                };
                let _ = write!(
                    out,
                    "<p>Legal hold: <strong id=\"legal-hold\">{state}</strong></p>{}",
                    form(
                        "/object/legal-hold",
                        self.csrf(),
                        &[fields.as_slice(), &[("status", next)]].concat(),
                        &format!("<button id=\"toggle-legal-hold\">{label}</button>"),
                    )
                );
            }
            Err(err) => {
                let _ = write!(out, "<p class=\"flash error\">{}</p>", name(&err));
            }
        }
        out.push_str("</section>");
        out
    }

    /// A version's retention (`None`: none) and the form changing it; `fields` name the version.
    fn retention_form(&self, retention: Option<ObjectLockRetention>, fields: &[(&str, &str)]) -> String {
        let mode = retention.as_ref().and_then(|r| r.mode()).map(|m| m.as_str().to_owned());
        let until = retention
            .as_ref()
            .map(|r| date(r.retain_until_date()))
            .unwrap_or_default();
        let mut out = format!(
            "<p>Retention: <strong id=\"retention\">{}</strong></p>",
            match &mode {
                Some(mode) => format!("{} until {}", name(mode), esc(&until)),
                None => "none".to_owned(),
            }
        );
        let selected = |option: &str| {
            if mode.as_deref() == Some(option) {
                " selected"
            } else {
                ""
            }
        };
        out.push_str(&form(
            "/object/retention",
            self.csrf(),
            fields,
            &format!(
                "<label>Mode <select name=\"mode\" id=\"retention-mode\">\
                 <option value=\"GOVERNANCE\"{}>GOVERNANCE</option><option value=\"COMPLIANCE\"{}>COMPLIANCE</option>\
                 <option value=\"\">none (remove)</option></select></label> \
                 <label>Retain until <input name=\"until\" id=\"retention-until\" value=\"{}\" placeholder=\"2030-01-31\" maxlength=\"40\"></label> \
                 <label><input type=\"checkbox\" name=\"bypass\" value=\"on\" id=\"retention-bypass\"> bypass GOVERNANCE retention</label> \
                 <button id=\"save-retention\">Save retention</button>\
                 <p class=\"hint\">COMPLIANCE can only be extended. Shortening or removing a GOVERNANCE retention, \
                 or making it COMPLIANCE, needs the bypass.</p>",
                selected("GOVERNANCE"),
                selected("COMPLIANCE"),
                esc(&until),
            ),
        ));
        out
    }

    /// Sets (or, with no mode, removes) a version's retention.
    pub(super) async fn put_retention(&self, request: &Request) -> Outcome {
        let mode = request.arg("mode");
        let retention = match mode {
            "" => ObjectLockRetention::builder().build(),
            "GOVERNANCE" | "COMPLIANCE" => ObjectLockRetention::builder()
                .mode(ObjectLockRetentionMode::from(mode))
                .retain_until_date(retain_until(request.arg("until"))?)
                .build(),
            _ => return Err("Mode: GOVERNANCE, COMPLIANCE or none.".to_owned()),
        };
        let version = Some(request.arg("version")).filter(|v| !v.is_empty());
        let mut put = self
            .session
            .s3
            .put_object_retention()
            .bucket(request.arg("bucket"))
            .key(request.arg("key"))
            .set_version_id(version.map(str::to_owned))
            .retention(retention);
        if request.arg("bypass") == "on" {
            put = put.bypass_governance_retention(true);
        }
        sdk(put.send().await).map(|_| match mode {
            "" => "Retention removed.".to_owned(),
            mode => format!("Retention set: {mode}."),
        })
    }

    pub(super) async fn put_legal_hold(&self, request: &Request) -> Outcome {
        let status = match request.arg("status") {
            "ON" => ObjectLockLegalHoldStatus::On,
            "OFF" => ObjectLockLegalHoldStatus::Off,
            _ => return Err("Legal hold: ON or OFF.".to_owned()),
        };
        let version = Some(request.arg("version")).filter(|v| !v.is_empty());
        sdk(self
            .session
            .s3
            .put_object_legal_hold()
            .bucket(request.arg("bucket"))
            .key(request.arg("key"))
            .set_version_id(version.map(str::to_owned))
            .legal_hold(ObjectLockLegalHold::builder().status(status.clone()).build())
            .send()
            .await)
        .map(|_| format!("Legal hold {}.", status.as_str()))
    }
}
