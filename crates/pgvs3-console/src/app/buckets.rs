//! The bucket list and a bucket's page (versioning, its settings, its policy), and the
//! changes made from them: create and delete a bucket, versioning, policy, CORS for uploads.

use std::fmt::Write;

use aws_sdk_s3::types::BucketVersioningStatus;
use http::StatusCode;

use super::{Context, Request, Response, date, sdk, settings};
use crate::html::{button, esc, form, link, name};

impl Context<'_> {
    /// A change made from the bucket pages; `None` when `path` names none.
    pub(super) async fn bucket_change(&self, request: &Request, path: &str) -> Option<Response> {
        let s3 = &self.session.s3;
        let bucket = request.arg("bucket");
        let bucket_page = link("/bucket", &[("bucket", bucket)]);
        Some(match path {
            "/buckets/create" => {
                // Object lock is chosen at creation only (S3 turns it on no later).
                let mut create = s3.create_bucket().bucket(bucket);
                if request.arg("object_lock") == "on" {
                    create = create.object_lock_enabled_for_bucket(true);
                }
                let outcome = sdk(create.send().await).map(|_| format!("Bucket {bucket} created."));
                self.done(outcome, "/buckets")
            }
            "/buckets/delete" => {
                let outcome =
                    sdk(s3.delete_bucket().bucket(bucket).send().await).map(|_| format!("Bucket {bucket} deleted."));
                self.done(outcome, "/buckets")
            }
            "/bucket/versioning" => {
                let status = BucketVersioningStatus::from(request.arg("status"));
                let config = aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(status.clone())
                    .build();
                let outcome = sdk(s3
                    .put_bucket_versioning()
                    .bucket(bucket)
                    .versioning_configuration(config)
                    .send()
                    .await)
                .map(|_| format!("Versioning is now {}.", status.as_str()));
                self.done(outcome, &bucket_page)
            }
            "/bucket/policy" => {
                let text = request.arg("policy");
                if text.trim().is_empty() {
                    let outcome = sdk(s3.delete_bucket_policy().bucket(bucket).send().await)
                        .map(|_| "Bucket policy removed.".to_owned());
                    return Some(self.done(outcome, &bucket_page));
                }
                let problems = crate::policy::problems(text, false);
                if !problems.is_empty() {
                    return Some(self.bucket(bucket, Some((text, problems))).await);
                }
                match sdk(s3.put_bucket_policy().bucket(bucket).policy(text).send().await) {
                    Ok(_) => self.done(Ok("Bucket policy saved.".to_owned()), &bucket_page),
                    Err(err) => self.bucket(bucket, Some((text, vec![err]))).await,
                }
            }
            "/bucket/cors-console" => {
                let outcome = self.allow_console_uploads(request, bucket).await;
                self.done(
                    outcome,
                    &link("/objects", &[("bucket", bucket), ("prefix", request.arg("prefix"))]),
                )
            }
            _ => return None,
        })
    }

    pub(super) async fn buckets(&self) -> Response {
        let listed = sdk(self.session.s3.list_buckets().send().await);
        let mut body = String::from("<h1>Buckets</h1>");
        body.push_str(&form(
            "/buckets/create",
            self.csrf(),
            &[],
            "<label>New bucket <input name=\"bucket\" id=\"new-bucket\" required minlength=\"3\" maxlength=\"63\"></label> \
             <label><input type=\"checkbox\" name=\"object_lock\" id=\"new-bucket-lock\" value=\"on\"> with object lock</label> \
             <button id=\"create-bucket\">Create</button>",
        ));
        match listed {
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
            Ok(listed) if listed.buckets().is_empty() => body.push_str("<p>No buckets yet.</p>"),
            Ok(listed) => {
                body.push_str("<table><thead><tr><th>Name</th><th>Created</th><th></th></tr></thead><tbody>");
                for bucket in listed.buckets() {
                    let bucket_name = bucket.name().unwrap_or_default();
                    let _ = write!(
                        body,
                        "<tr><td><a class=\"bucket\" href=\"{}\">{}</a></td><td>{}</td><td class=\"actions\"><a href=\"{}\">Settings</a>{}</td></tr>",
                        esc(&link("/objects", &[("bucket", bucket_name)])),
                        name(bucket_name),
                        esc(&date(bucket.creation_date())),
                        esc(&link("/bucket", &[("bucket", bucket_name)])),
                        form(
                            "/buckets/delete",
                            self.csrf(),
                            &[("bucket", bucket_name)],
                            &button("Delete", "danger", Some("Delete this bucket? It must be empty.")),
                        ),
                    );
                }
                body.push_str("</tbody></table>");
            }
        }
        self.page(StatusCode::OK, "Buckets", body)
    }

    /// A bucket's settings; `edited` is a policy that was not saved, and why.
    pub(super) async fn bucket(&self, bucket: &str, edited: Option<(&str, Vec<String>)>) -> Response {
        let s3 = &self.session.s3;
        let mut body = format!(
            "<h1>Bucket <span class=\"name\">{}</span></h1><p><a href=\"{}\">Browse objects</a></p>",
            name(bucket),
            esc(&link("/objects", &[("bucket", bucket)]))
        );
        body.push_str("<section><h2>Versioning</h2>");
        match sdk(s3.get_bucket_versioning().bucket(bucket).send().await) {
            Ok(versioning) => {
                let status = versioning.status().map(|s| s.as_str()).unwrap_or("Unversioned");
                let (next, label) = if status == "Enabled" {
                    ("Suspended", "Suspend versioning")
                } else {
                    ("Enabled", "Enable versioning")
                };
                let _ = write!(
                    body,
                    "<p>Status: <strong id=\"versioning-status\">{}</strong></p>{}",
                    esc(status),
                    form(
                        "/bucket/versioning",
                        self.csrf(),
                        &[("bucket", bucket), ("status", next)],
                        &format!("<button id=\"versioning-toggle\">{label}</button>"),
                    )
                );
            }
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
        }
        body.push_str("</section>");
        body.push_str(&self.settings(bucket).await);
        body.push_str("<section><h2>Bucket policy</h2>");
        let (text, problems) = match edited {
            Some((text, problems)) => (text.to_owned(), problems),
            None => {
                match settings::optional(s3.get_bucket_policy().bucket(bucket).send().await, "NoSuchBucketPolicy") {
                    Ok(policy) => (policy.and_then(|p| p.policy).unwrap_or_default(), Vec::new()),
                    Err(err) => (String::new(), vec![err]),
                }
            }
        };
        let status = if problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        body.push_str(&self.policy_editor(
            ("/bucket/policy", ("bucket", bucket)),
            &text,
            &problems,
            "JSON, checked here and again by the gateway before it is saved. Empty removes the policy.",
        ));
        body.push_str("</section>");
        self.page(status, "Bucket", body)
    }
}
