//! Browsing a bucket: the listing by folder, an object's page (metadata, preview, tags, lock,
//! versions) and the changes made there (restore or delete a version, delete, tags), with
//! presigned download links.

use std::fmt::Write;

use aws_sdk_s3::operation::list_object_versions::ListObjectVersionsOutput;
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{Tag, Tagging};
use http::StatusCode;

use super::{Context, DOWNLOAD_URL_LIFETIME, Outcome, Request, Response, date, sdk};
use crate::gateway::describe;
use crate::html::{self, button, esc, form, link, name};

/// Objects per listing page.
const PAGE_SIZE: i32 = 100;

impl Context<'_> {
    /// A change made from the object pages; `None` when `path` names none.
    pub(super) async fn object_change(&self, request: &Request, path: &str) -> Option<Response> {
        let s3 = &self.session.s3;
        let bucket = request.arg("bucket");
        let key = request.arg("key");
        let object_page = link("/object", &[("bucket", bucket), ("key", key)]);
        // A lock change returns to the version it was about.
        let version_page = match request.arg("version") {
            "" => object_page.clone(),
            version => link("/object", &[("bucket", bucket), ("key", key), ("version", version)]),
        };
        Some(match path {
            "/object/restore" => {
                let version = request.arg("version");
                let source = format!(
                    "{}/{}?versionId={}",
                    bucket,
                    copy_source_key(key),
                    copy_source_key(version)
                );
                let outcome = sdk(s3
                    .copy_object()
                    .bucket(bucket)
                    .key(key)
                    .copy_source(source)
                    .send()
                    .await)
                .map(|_| "That version is now the current one.".to_owned());
                self.done(outcome, &object_page)
            }
            "/object/delete-version" => {
                let version = request.arg("version");
                let outcome = sdk(s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .version_id(version)
                    .send()
                    .await)
                .map(|_| "Version deleted permanently.".to_owned());
                self.done(outcome, &object_page)
            }
            "/object/delete" => {
                let outcome =
                    sdk(s3.delete_object().bucket(bucket).key(key).send().await).map(|_| "Object deleted.".to_owned());
                let parent = key.rfind('/').map(|end| &key[..=end]).unwrap_or("");
                self.done(outcome, &link("/objects", &[("bucket", bucket), ("prefix", parent)]))
            }
            "/object/retention" => {
                let outcome = self.put_retention(request).await;
                self.done(outcome, &version_page)
            }
            "/object/legal-hold" => {
                let outcome = self.put_legal_hold(request).await;
                self.done(outcome, &version_page)
            }
            "/object/tags" => {
                let outcome = self.put_tags(bucket, key, request.arg("tags")).await;
                self.done(outcome, &object_page)
            }
            _ => return None,
        })
    }

    pub(super) async fn objects(&self, request: &Request, bucket: &str) -> Response {
        let prefix = request.arg("prefix");
        let token = request.arg("token");
        let mut listing = self
            .session
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .delimiter("/")
            .max_keys(PAGE_SIZE);
        if !prefix.is_empty() {
            listing = listing.prefix(prefix);
        }
        if !token.is_empty() {
            listing = listing.continuation_token(token);
        }
        let mut body = objects_heading(bucket, prefix);
        body.push_str(&self.upload_zone(request, bucket, prefix).await);
        match sdk(listing.send().await) {
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
            Ok(page) => body.push_str(&self.objects_table(bucket, prefix, &page).await),
        }
        self.page(StatusCode::OK, "Objects", body)
    }

    /// One page of a listing: its folders, its objects, and the link to the next page.
    async fn objects_table(&self, bucket: &str, prefix: &str, page: &ListObjectsV2Output) -> String {
        let mut body = String::new();
        body.push_str(
            "<table id=\"objects\"><thead><tr><th>Name</th><th>Size</th><th>Modified</th><th></th></tr></thead><tbody>",
        );
        for folder in page.common_prefixes() {
            let full = folder.prefix().unwrap_or_default();
            let _ = write!(
                body,
                "<tr><td><a class=\"folder\" href=\"{}\">{}/</a></td><td></td><td></td><td></td></tr>",
                esc(&link("/objects", &[("bucket", bucket), ("prefix", full)])),
                name(full[prefix.len().min(full.len())..].trim_end_matches('/'))
            );
        }
        for object in page.contents() {
            let key = object.key().unwrap_or_default();
            let download = self.download_url(bucket, key, None).await;
            let _ = write!(
                body,
                "<tr><td><a class=\"object\" href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"actions\"><a href=\"{}\" rel=\"noreferrer\">Download</a></td></tr>",
                esc(&link("/object", &[("bucket", bucket), ("key", key)])),
                name(&key[prefix.len().min(key.len())..]),
                esc(&html::size(object.size().unwrap_or(0))),
                esc(&date(object.last_modified())),
                esc(&download),
            );
        }
        body.push_str("</tbody></table>");
        if page.contents().is_empty() && page.common_prefixes().is_empty() {
            body.push_str("<p>Nothing here.</p>");
        }
        if let Some(next) = page
            .next_continuation_token()
            .filter(|_| page.is_truncated() == Some(true))
        {
            let _ = write!(
                body,
                "<p><a id=\"next-page\" href=\"{}\">Next page</a></p>",
                esc(&link(
                    "/objects",
                    &[("bucket", bucket), ("prefix", prefix), ("token", next)]
                ))
            );
        }
        body
    }

    /// An object's page; `version` names the version whose retention and legal hold it shows
    /// (the current one without).
    pub(super) async fn object(&self, bucket: &str, key: &str, version: Option<&str>) -> Response {
        let s3 = &self.session.s3;
        let parent = key.rfind('/').map(|end| &key[..=end]).unwrap_or("");
        let mut body = format!(
            "<h1><a href=\"{}\">{}</a> / <span class=\"name\">{}</span></h1>",
            esc(&link("/objects", &[("bucket", bucket), ("prefix", parent)])),
            name(bucket),
            name(key)
        );
        match s3.head_object().bucket(bucket).key(key).send().await {
            Ok(head) => {
                let download = self.download_url(bucket, key, None).await;
                let _ = write!(
                    body,
                    "<dl class=\"meta\"><dt>Size</dt><dd>{}</dd><dt>Type</dt><dd>{}</dd><dt>ETag</dt><dd>{}</dd><dt>Modified</dt><dd>{}</dd>",
                    esc(&html::size(head.content_length().unwrap_or(0))),
                    name(head.content_type().unwrap_or("")),
                    name(head.e_tag().unwrap_or("")),
                    esc(&date(head.last_modified())),
                );
                if let Some(metadata) = head.metadata() {
                    let mut pairs: Vec<_> = metadata.iter().collect();
                    pairs.sort();
                    for (meta_key, value) in pairs {
                        let _ = write!(body, "<dt>x-amz-meta-{}</dt><dd>{}</dd>", name(meta_key), name(value));
                    }
                }
                let _ = write!(
                    body,
                    "</dl><p class=\"actions\"><a id=\"download\" href=\"{}\" rel=\"noreferrer\">Download</a>{}</p>",
                    esc(&download),
                    form(
                        "/object/delete",
                        self.csrf(),
                        &[("bucket", bucket), ("key", key)],
                        &button(
                            "Delete",
                            "danger",
                            Some("Delete this object? With versioning on, older versions stay.")
                        ),
                    )
                );
                body.push_str(&self.preview(bucket, key, &head).await);
                if let Ok(tags) = s3.get_object_tagging().bucket(bucket).key(key).send().await {
                    body.push_str("<section><h2>Tags</h2>");
                    body.push_str(&form(
                        "/object/tags",
                        self.csrf(),
                        &[("bucket", bucket), ("key", key)],
                        &format!(
                            "<textarea name=\"tags\" id=\"tags\" rows=\"4\" spellcheck=\"false\">{}</textarea>\
                             <p class=\"hint\">One <code>key=value</code> per line (at most 10).</p><button id=\"save-tags\">Save tags</button>",
                            esc(&tags_text(tags.tag_set()))
                        ),
                    ));
                    body.push_str("</section>");
                }
            }
            Err(err) => {
                let _ = write!(
                    body,
                    "<p class=\"hint\">No current version ({}).</p>",
                    name(&describe(&err))
                );
            }
        }
        let lock = self.lock_section(bucket, key, version).await;
        body.push_str(&lock);
        body.push_str(&self.versions(bucket, key, !lock.is_empty()).await);
        self.page(StatusCode::OK, "Object", body)
    }

    /// The versions of a key; `locks`: each links to its retention and legal hold.
    pub(super) async fn versions(&self, bucket: &str, key: &str, locks: bool) -> String {
        let listed = sdk(self
            .session
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(key)
            .max_keys(1000)
            .send()
            .await);
        let listed = match listed {
            Ok(listed) => listed,
            Err(err) => return format!("<p class=\"flash error\">{}</p>", name(&err)),
        };
        let rows = version_rows(&listed, key);
        let mut out = String::from(
            "<section><h2>Versions</h2><table id=\"versions\"><thead><tr><th>Version</th><th>Modified</th><th>Size</th><th></th></tr></thead><tbody>",
        );
        for (version, latest, when, size) in &rows {
            let actions = self
                .version_actions(bucket, key, version, *latest, size.is_some(), locks)
                .await;
            let _ = write!(
                out,
                "<tr class=\"version{}\" data-version=\"{}\"><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}</td></tr>",
                if *latest { " latest" } else { "" },
                esc(version),
                name(version),
                if *latest { " <em>current</em>" } else { "" },
                esc(when),
                size.map(html::size).unwrap_or_else(|| "delete marker".to_owned()),
                actions
            );
        }
        out.push_str("</tbody></table>");
        if listed.is_truncated() == Some(true) {
            out.push_str("<p class=\"hint\">Only the newest 1,000 versions are shown.</p>");
        }
        out.push_str("</section>");
        out
    }

    /// A version's actions: for a stored version (not a delete marker) its download, its lock
    /// (`locks`) and, unless it is the latest, restore; for every one, delete.
    async fn version_actions(
        &self,
        bucket: &str,
        key: &str,
        version: &str,
        latest: bool,
        stored: bool,
        locks: bool,
    ) -> String {
        let mut actions = String::new();
        if stored {
            let download = self.download_url(bucket, key, Some(version)).await;
            let _ = write!(
                actions,
                "<a href=\"{}\" rel=\"noreferrer\">Download</a>",
                esc(&download)
            );
            if locks {
                let _ = write!(
                    actions,
                    "<a class=\"lock\" href=\"{}#lock\">Retention</a>",
                    esc(&link(
                        "/object",
                        &[("bucket", bucket), ("key", key), ("version", version)]
                    ))
                );
            }
            if !latest {
                actions.push_str(&form(
                    "/object/restore",
                    self.csrf(),
                    &[("bucket", bucket), ("key", key), ("version", version)],
                    &button("Restore", "restore", None),
                ));
            }
        }
        actions.push_str(&form(
            "/object/delete-version",
            self.csrf(),
            &[("bucket", bucket), ("key", key), ("version", version)],
            &button(
                "Delete permanently",
                "danger",
                Some("Delete this version permanently? It cannot be brought back."),
            ),
        ));
        actions
    }

    async fn put_tags(&self, bucket: &str, key: &str, text: &str) -> Outcome {
        let mut tags = Vec::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            let (tag, value) = line.split_once('=').unwrap_or((line, ""));
            tags.push(
                Tag::builder()
                    .key(tag.trim())
                    .value(value.trim())
                    .build()
                    .map_err(|err| err.to_string())?,
            );
        }
        let tagging = Tagging::builder()
            .set_tag_set(Some(tags))
            .build()
            .map_err(|err| err.to_string())?;
        sdk(self
            .session
            .s3
            .put_object_tagging()
            .bucket(bucket)
            .key(key)
            .tagging(tagging)
            .send()
            .await)
        .map(|_| "Tags saved.".to_owned())
    }

    async fn download_url(&self, bucket: &str, key: &str, version: Option<&str>) -> String {
        let Ok(config) = PresigningConfig::expires_in(DOWNLOAD_URL_LIFETIME) else {
            return String::new();
        };
        let file = key.rsplit('/').next().unwrap_or(key);
        let disposition = format!(
            "attachment; filename*=UTF-8''{}",
            copy_source_key(file).replace('/', "%2F")
        );
        self.session
            .presign
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .response_content_disposition(disposition)
            .presigned(config)
            .await
            .map(|request| request.uri().to_owned())
            .unwrap_or_default()
    }
}

/// The listing's heading: the bucket, then each folder of `prefix`, each a link to its
/// listing; then the link to the bucket's settings.
fn objects_heading(bucket: &str, prefix: &str) -> String {
    let mut body = format!(
        "<h1><a href=\"{}\">{}</a>",
        esc(&link("/objects", &[("bucket", bucket)])),
        name(bucket)
    );
    let mut at = 0;
    for part in prefix.split_inclusive('/') {
        at += part.len();
        let _ = write!(
            body,
            " / <a href=\"{}\">{}</a>",
            esc(&link("/objects", &[("bucket", bucket), ("prefix", &prefix[..at])])),
            name(part.trim_end_matches('/'))
        );
    }
    let _ = write!(
        body,
        "</h1><p><a href=\"{}\">Bucket settings</a></p>",
        esc(&link("/bucket", &[("bucket", bucket)]))
    );
    body
}

/// The versions and delete markers of `key` (the listing by prefix may hold other keys), newest
/// first: (version id, latest, when, size or `None` for a delete marker).
fn version_rows(listed: &ListObjectVersionsOutput, key: &str) -> Vec<(String, bool, String, Option<i64>)> {
    let mut rows: Vec<(String, bool, String, Option<i64>)> = Vec::new();
    for version in listed.versions().iter().filter(|v| v.key() == Some(key)) {
        rows.push((
            version.version_id().unwrap_or("null").to_owned(),
            version.is_latest() == Some(true),
            date(version.last_modified()),
            Some(version.size().unwrap_or(0)),
        ));
    }
    for marker in listed.delete_markers().iter().filter(|m| m.key() == Some(key)) {
        rows.push((
            marker.version_id().unwrap_or("null").to_owned(),
            marker.is_latest() == Some(true),
            date(marker.last_modified()),
            None,
        ));
    }
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)));
    rows
}

/// The `Key: value` lines of a tag set, and back.
fn tags_text(tags: &[Tag]) -> String {
    tags.iter()
        .map(|tag| format!("{}={}\n", tag.key(), tag.value()))
        .collect()
}

/// A key (or version id) as CopyObject's `x-amz-copy-source` wants it: percent-encoded, `/` kept.
fn copy_source_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}
