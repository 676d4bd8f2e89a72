//! The browser's uploads: the drop zone (with the offer of a CORS rule for this console's
//! origin when the bucket's rules would stop them) and the presigned URLs and multipart steps
//! the console's script asks for.

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::CorsRule;
use http::StatusCode;

use super::{Context, Outcome, Request, Response, sdk};
use crate::html::{esc, form};

/// How long a presigned upload URL works.
const UPLOAD_URL_LIFETIME: Duration = Duration::from_secs(3600);

impl Context<'_> {
    /// The drop zone, and, when the bucket's CORS rules would stop the browser's uploads to the
    /// gateway, the offer to add a rule for this console's origin.
    pub(super) async fn upload_zone(&self, request: &Request, bucket: &str, prefix: &str) -> String {
        let mut out = format!(
            "<section id=\"upload\" class=\"dropzone\" data-bucket=\"{}\" data-prefix=\"{}\">\
             <p>Drop files here to upload them to this folder, or <label class=\"pick\">choose files<input type=\"file\" id=\"file-input\" multiple hidden></label>.</p>\
             <ul id=\"uploads\"></ul></section>",
            esc(bucket),
            esc(prefix)
        );
        let Some(origin) = self.console_origin(request) else {
            return out;
        };
        let allowed = self.cors_rules(bucket).await.is_ok_and(|rules| {
            rules.iter().any(|rule| {
                rule.allowed_methods().iter().any(|m| m == "PUT")
                    && rule.allowed_origins().iter().any(|o| o == "*" || *o == origin)
            })
        });
        if !allowed {
            out.push_str(&form(
                "/bucket/cors-console",
                self.csrf(),
                &[("bucket", bucket), ("prefix", prefix)],
                &format!(
                    "<p class=\"hint\">The bucket's CORS rules do not let a browser on {} upload to it. \
                     <button id=\"allow-uploads\">Allow uploads from this console</button></p>",
                    esc(&origin)
                ),
            ));
        }
        out
    }

    /// This console's origin as the browser sees it.
    fn console_origin(&self, request: &Request) -> Option<String> {
        let host = request.header("host")?;
        let scheme = if self.app.tls { "https" } else { "http" };
        Some(format!("{scheme}://{host}"))
    }

    pub(super) async fn allow_console_uploads(&self, request: &Request, bucket: &str) -> Outcome {
        let origin = self.console_origin(request).ok_or("no Host header")?;
        let mut rules = self.cors_rules(bucket).await?;
        let rule = CorsRule::builder()
            .id("pgvs3-console")
            .allowed_origins(origin)
            .allowed_methods("PUT")
            .allowed_methods("GET")
            .allowed_headers("*")
            .expose_headers("ETag")
            .max_age_seconds(3600)
            .build()
            .map_err(|err| err.to_string())?;
        rules.retain(|rule| rule.id() != Some("pgvs3-console"));
        rules.push(rule);
        self.put_cors_rules(bucket, rules)
            .await
            .map(|_| "This console may now upload to the bucket.".to_owned())
    }

    /// The browser's uploads: presigned URLs for a single PUT or for each part of a multipart
    /// upload, which the browser sends to the gateway itself; the console only starts, lists
    /// and completes multipart uploads (with the parts the gateway says it has, so a part the
    /// browser resent after a network error counts once).
    pub(super) async fn upload(&self, request: &Request, step: &str) -> Response {
        let s3 = &self.session.s3;
        let presign = &self.session.presign;
        let bucket = request.arg("bucket");
        let key = request.arg("key");
        let upload_id = request.arg("upload_id");
        let presigning = PresigningConfig::expires_in(UPLOAD_URL_LIFETIME).expect("an hour is a valid lifetime");
        let answer = match step {
            "put" => presign
                .put_object()
                .bucket(bucket)
                .key(key)
                .presigned(presigning)
                .await
                .map(|url| serde_json::json!({ "url": url.uri() }))
                .map_err(|err| err.to_string()),
            "create" => {
                let content_type = request.arg("content_type");
                let mut create = s3.create_multipart_upload().bucket(bucket).key(key);
                if !content_type.is_empty() {
                    create = create.content_type(content_type);
                }
                sdk(create.send().await).map(|created| serde_json::json!({ "upload_id": created.upload_id() }))
            }
            "part" => match request.arg("part").parse::<i32>() {
                Ok(part @ 1..=10_000) => presign
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part)
                    .presigned(presigning)
                    .await
                    .map(|url| serde_json::json!({ "url": url.uri() }))
                    .map_err(|err| err.to_string()),
                _ => Err("part must be 1 to 10000".to_owned()),
            },
            "parts" => self.parts(bucket, key, upload_id).await.map(|parts| {
                let done: Vec<_> = parts
                    .iter()
                    .map(|part| serde_json::json!({ "part": part.part_number(), "size": part.size() }))
                    .collect();
                serde_json::json!({ "parts": done })
            }),
            "complete" => match self.parts(bucket, key, upload_id).await {
                Ok(parts) => {
                    let completed: Vec<_> = parts
                        .iter()
                        .map(|part| {
                            aws_sdk_s3::types::CompletedPart::builder()
                                .set_part_number(part.part_number())
                                .set_e_tag(part.e_tag().map(str::to_owned))
                                .build()
                        })
                        .collect();
                    let upload = aws_sdk_s3::types::CompletedMultipartUpload::builder()
                        .set_parts(Some(completed))
                        .build();
                    sdk(s3
                        .complete_multipart_upload()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .multipart_upload(upload)
                        .send()
                        .await)
                    .map(|_| serde_json::json!({}))
                }
                Err(err) => Err(err),
            },
            _ => Err("no such upload step".to_owned()),
        };
        match answer {
            Ok(value) => self.app.json(StatusCode::OK, value),
            Err(err) => self
                .app
                .json(StatusCode::BAD_REQUEST, serde_json::json!({ "error": err })),
        }
    }

    /// Every part the gateway holds of an upload.
    async fn parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<aws_sdk_s3::types::Part>, String> {
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = sdk(self
                .session
                .s3
                .list_parts()
                .bucket(bucket)
                .key(key)
                .upload_id(upload_id)
                .set_part_number_marker(marker.clone())
                .send()
                .await)?;
            parts.extend(page.parts().iter().cloned());
            match page
                .next_part_number_marker()
                .filter(|_| page.is_truncated() == Some(true))
            {
                Some(next) if Some(next) != marker.as_deref() => marker = Some(next.to_owned()),
                _ => return Ok(parts),
            }
        }
    }
}
