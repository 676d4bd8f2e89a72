//! An object's preview on its page, each kind bounded and read with the session's key: text (its
//! first 64 KiB by a ranged GET, shown as text), raster images (an `img` of a presigned URL: the
//! bytes go from the gateway to the browser, and the CSP's `img-src` names only the S3 origin),
//! and a Parquet file's schema (its footer by two ranged GETs, parsed by `crate::parquet`).

use std::fmt::Write;

use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::presigning::PresigningConfig;

use super::{Context, DOWNLOAD_URL_LIFETIME, sdk};
use crate::html::{esc, name, value};
use crate::parquet;

/// How much of a text object is shown.
const TEXT_PREVIEW: usize = 64 * 1024;
/// Larger images are not previewed (the browser would fetch them whole).
const IMAGE_PREVIEW: i64 = 20 << 20;
/// Schema rows shown; more are counted.
const COLUMNS_SHOWN: usize = 1000;

/// Types a browser shows as an image without running anything (not SVG).
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"];

const TEXT_EXTENSIONS: &[&str] = &[
    "txt", "md", "csv", "tsv", "json", "jsonl", "ndjson", "log", "yaml", "yml", "xml", "toml", "ini", "conf", "sql",
    "html", "css", "js", "ts", "py", "rs", "go", "sh", "svg",
];

enum Kind {
    Text,
    Image(String),
    Parquet,
}

fn kind(key: &str, content_type: &str) -> Option<Kind> {
    let content_type = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let extension = key
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase())
        .unwrap_or_default();
    if IMAGE_TYPES.contains(&content_type.as_str()) {
        return Some(Kind::Image(content_type));
    }
    if extension == "parquet"
        || matches!(
            content_type.as_str(),
            "application/vnd.apache.parquet" | "application/x-parquet"
        )
    {
        return Some(Kind::Parquet);
    }
    let textual = content_type.starts_with("text/")
        || content_type.ends_with("+json")
        || content_type.ends_with("+xml")
        || matches!(
            content_type.as_str(),
            "application/json"
                | "application/xml"
                | "application/x-yaml"
                | "application/yaml"
                | "application/javascript"
        );
    (textual || TEXT_EXTENSIONS.contains(&extension.as_str())).then_some(Kind::Text)
}

impl Context<'_> {
    /// The preview section for the current version `head` of `key`.
    pub(super) async fn preview(&self, bucket: &str, key: &str, head: &HeadObjectOutput) -> String {
        let size = head.content_length().unwrap_or(0);
        let shown = match kind(key, head.content_type().unwrap_or("")) {
            None => "<p class=\"hint\">No preview for this type (text, PNG, JPEG, GIF, WebP, AVIF and Parquet have one).</p>".to_owned(),
            Some(Kind::Text) => match self.range(bucket, key, 0, TEXT_PREVIEW).await {
                Ok(bytes) => {
                    let text = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
                    let mut out = String::new();
                    if size > bytes.len() as i64 {
                        let _ = write!(
                            out,
                            "<p class=\"hint\">The first {} of {}.</p>",
                            crate::html::size(bytes.len() as i64),
                            crate::html::size(size)
                        );
                    }
                    let _ = write!(out, "<pre id=\"preview-text\">{}</pre>", value(&text));
                    out
                }
                Err(err) => format!("<p class=\"flash error\">{}</p>", name(&err)),
            },
            Some(Kind::Image(_)) if size > IMAGE_PREVIEW => {
                "<p class=\"hint\">Too large to preview (over 20 MiB): download it.</p>".to_owned()
            }
            Some(Kind::Image(content_type)) => match self.inline_url(bucket, key, &content_type).await {
                Some(url) => format!(
                    "<img id=\"preview-image\" src=\"{}\" alt=\"{}\" referrerpolicy=\"no-referrer\">",
                    esc(&url),
                    esc(key)
                ),
                None => "<p class=\"flash error\">No URL could be made for the image.</p>".to_owned(),
            },
            Some(Kind::Parquet) => match self.parquet_schema(bucket, key, size).await {
                Ok(schema) => schema_table(&schema),
                Err(err) => format!(
                    "<p class=\"flash error\" id=\"preview-error\">Not previewed: {}.</p>",
                    name(&err)
                ),
            },
        };
        format!("<section id=\"preview\"><h2>Preview</h2>{shown}</section>")
    }

    /// Bytes `start..start + len` of the current version, read no further than `len`.
    async fn range(&self, bucket: &str, key: &str, start: u64, len: usize) -> Result<Vec<u8>, String> {
        let end = start + len as u64 - 1;
        let object = sdk(self
            .session
            .s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .range(format!("bytes={start}-{end}"))
            .send()
            .await)?;
        let mut body = object.body;
        let mut bytes = Vec::new();
        while let Some(chunk) = body.try_next().await.map_err(|err| err.to_string())? {
            let room = len - bytes.len();
            bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if bytes.len() == len {
                break;
            }
        }
        Ok(bytes)
    }

    /// A presigned GET the browser shows inline, as `content_type`.
    async fn inline_url(&self, bucket: &str, key: &str, content_type: &str) -> Option<String> {
        let config = PresigningConfig::expires_in(DOWNLOAD_URL_LIFETIME).ok()?;
        self.session
            .presign
            .get_object()
            .bucket(bucket)
            .key(key)
            .response_content_type(content_type)
            .response_content_disposition("inline")
            .presigned(config)
            .await
            .ok()
            .map(|request| request.uri().to_owned())
    }

    async fn parquet_schema(&self, bucket: &str, key: &str, size: i64) -> Result<parquet::FileSchema, String> {
        let size = u64::try_from(size).unwrap_or(0);
        if size < 12 {
            return Err("it is too short to be a Parquet file".to_owned());
        }
        let tail = self.range(bucket, key, size - 8, 8).await?;
        let footer = parquet::footer_length(&tail)?;
        if footer > parquet::MAX_FOOTER {
            return Err(format!(
                "its footer is {footer} bytes, more than the {} this preview reads",
                parquet::MAX_FOOTER
            ));
        }
        if footer == 0 || u64::from(footer) > size - 12 {
            return Err("its footer length does not fit the file".to_owned());
        }
        let footer = self
            .range(bucket, key, size - 8 - u64::from(footer), footer as usize)
            .await?;
        parquet::schema(&footer)
    }
}

fn schema_table(schema: &parquet::FileSchema) -> String {
    let mut out = format!(
        "<p id=\"preview-rows\">{} rows{}</p><table id=\"parquet-schema\"><thead><tr><th>Column</th><th>Type</th>\
         <th>Repetition</th><th>Annotation</th></tr></thead><tbody>",
        schema.num_rows,
        schema
            .created_by
            .as_deref()
            .map(|by| format!(", written by {}", name(by)))
            .unwrap_or_default()
    );
    for column in schema.columns.iter().take(COLUMNS_SHOWN) {
        let _ = write!(
            out,
            "<tr class=\"column depth-{}\"><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            column.depth.min(9),
            "· ".repeat(column.depth.min(32)),
            name(&column.name),
            column.physical.unwrap_or("group"),
            column.repetition.unwrap_or(""),
            esc(column.annotation.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    if schema.columns.len() > COLUMNS_SHOWN {
        let _ = write!(
            out,
            "<p class=\"hint\">And {} more columns.</p>",
            schema.columns.len() - COLUMNS_SHOWN
        );
    }
    out
}
