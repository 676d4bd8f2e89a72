//! Browser uploads (POST Object: a multipart form to a bucket) on their way into s3s. s3s checks
//! the form's signature and policy and holds the file in memory before any access check runs,
//! so the form is bounded here first: a Content-Length is required, the form may not exceed
//! `--s3-post-max-size`, and its bucket must exist. The fields before the file are held until
//! the file part's headers come, and noted — s3s drops the file part's name and every field it
//! has no input member for (the form's `acl`, for one) — for the operation; `${filename}` in the
//! `key` field is replaced by the file's name before s3s reads it, so s3s checks the policy on
//! the key as S3 does. Then the form passes its [`Gate`] before s3s reads a byte of the file: an unsigned
//! form only where its bucket's policy or ACLs let anyone write the key it names (the PutObject
//! the access check decides later, decided now on the same key and fields), and the bytes s3s
//! will hold are reserved from the buffer budget only then — for a signed form, after s3s
//! verified its signature — so clients that have shown no credential, or no right to write,
//! hold no byte of the shared budget, only the fields' window of their own connection. The
//! whole form must arrive within [`form_time`] of its head, so that a form that may write
//! cannot hold its reservation by sending a byte now and then.

use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::admission::{BufferBudget, Reservation};
use crate::http_server::Peer;
use crate::request_body::{BodyError, RequestBody};
use crate::s3::authorize;
use crate::store::BucketInfo;

/// S3's limit on the form fields before the file ("MaxPostPreDataLengthExceeded"); s3s is
/// configured with it too.
pub const MAX_FIELDS_SIZE: usize = 20 * 1024;

/// Parts of a form: S3's forms have a field per setting, a few dozen at most.
pub const MAX_PARTS: usize = 200;

/// The most form bytes before the file part that are kept to find its headers: the fields, their
/// part headers and the file's own part headers fit well inside.
const NOTE_WINDOW: usize = 3 * MAX_FIELDS_SIZE;

/// The slowest a form may arrive on average: a form must be in within the body idle timeout
/// (`--http-body-idle-timeout`) plus its length at this rate. Its file's memory is reserved
/// from the shared buffer budget while it arrives, and a form that sends a byte now and then,
/// never idle for long, would otherwise hold it for as long as its client likes. 64 KiB/s is
/// a slow mobile uplink: the largest form of the default `--s3-post-max-size` (64 MiB) gets
/// 17 minutes.
const FORM_MIN_RATE: u64 = 64 << 10;

/// How long a form of `length` bytes may take to arrive.
fn form_time(length: u64, idle: Duration) -> Duration {
    idle.saturating_add(Duration::from_secs(length / FORM_MIN_RATE))
}

/// A form that did not arrive in time ([`form_time`]): S3's answer to a body that stalls.
const REQUEST_TIMEOUT: Refusal = (
    StatusCode::BAD_REQUEST,
    "RequestTimeout",
    crate::s3::errors::REQUEST_TIMEOUT,
);

/// Bounds on browser uploads.
#[derive(Clone)]
pub struct PostLimits {
    /// The largest file a form may carry (s3s's `post_object_max_file_size`).
    pub max_file: u64,
    pub budget: BufferBudget,
}

/// Why a form was turned away before a byte of it was read: status, S3 code, message.
pub type Refusal = (StatusCode, &'static str, &'static str);

/// A POST of a multipart form: its boundary.
pub struct FormPost {
    boundary: Vec<u8>,
}

impl FormPost {
    /// The form of a browser upload, if this is one (POST with a multipart/form-data body).
    pub fn of<B>(request: &Request<B>) -> Option<FormPost> {
        if request.method() != http::Method::POST {
            return None;
        }
        let content_type = request.headers().get(http::header::CONTENT_TYPE)?.to_str().ok()?;
        let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
        if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
            return None;
        }
        let boundary = params.split(';').find_map(|param| {
            let (name, value) = param.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| value.trim().trim_matches('"').as_bytes().to_vec())
        })?;
        (!boundary.is_empty()).then_some(FormPost { boundary })
    }

    /// The form's length, when it is declared and within bounds.
    pub fn length(&self, headers: &HeaderMap, limits: &PostLimits) -> Result<u64, Refusal> {
        let length = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok())
            .ok_or((
                StatusCode::LENGTH_REQUIRED,
                "MissingContentLength",
                "You must provide the Content-Length HTTP header.",
            ))?;
        if length > limits.max_file.saturating_add(NOTE_WINDOW as u64) {
            return Err((
                StatusCode::BAD_REQUEST,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed object size.",
            ));
        }
        Ok(length)
    }

    /// The request with a body that notes the form's fields on the way and then passes `gate`,
    /// and the notes in its extensions (where the operation finds them).
    pub fn observe(self, request: Request<RequestBody>, gate: Gate) -> Request<s3s::Body> {
        let notes = gate.notes.clone();
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(notes.clone());
        let deadline = tokio::time::sleep(form_time(gate.length, body.idle_timeout()));
        let body = NotingBody {
            inner: body,
            boundary: self.boundary,
            window: Vec::new(),
            notes,
            noting: true,
            deadline: Box::pin(deadline),
            gate: Some(gate),
            queued: None,
            ended: false,
        };
        Request::from_parts(parts, s3s::Body::http_body(body))
    }
}

/// What a form must pass once its fields are in, before s3s reads its file.
pub struct Gate {
    notes: FormNotes,
    /// What decides an unsigned form; `None` where its bucket has no rules (a policy, or ACLs)
    /// that could let one write, and the access check would refuse it anyway.
    unsigned: Option<UnsignedForm>,
    /// The form's declared length: what s3s may hold of it.
    length: u64,
    budget: BufferBudget,
    /// The fields went by on an earlier read: s3s has checked the signature (if the form has
    /// one) and is reading the file.
    armed: bool,
}

/// An unsigned form's request as its bucket's rules see it: they decide the key its fields
/// name once they are in.
pub struct UnsignedForm {
    pub bucket: Arc<BucketInfo>,
    pub peer: Option<Peer>,
    pub headers: HeaderMap,
    pub query: Option<String>,
}

impl UnsignedForm {
    /// Whether its bucket's policy or ACLs let the form write the key it names; a form whose
    /// `key` field does not come before its file names none, as S3 says.
    fn may_write(&self, fields: Option<&FormFields>) -> Result<(), Refusal> {
        let fields = fields.filter(|fields| fields.key().is_some()).ok_or((
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields.",
        ))?;
        match authorize::unsigned_form_may_write(&self.bucket, self.peer, &self.headers, self.query.as_deref(), fields)
        {
            true => Ok(()),
            false => Err((StatusCode::FORBIDDEN, "AccessDenied", "Access Denied")),
        }
    }
}

impl Gate {
    pub fn new(length: u64, unsigned: Option<UnsignedForm>, limits: &PostLimits) -> Gate {
        Gate {
            notes: FormNotes::default(),
            unsigned,
            length,
            budget: limits.budget.clone(),
            armed: false,
        }
    }

    /// Lets the form's file be read, its memory reserved; or the answer that refuses it.
    fn pass(&self) -> Result<(), Refusal> {
        let signed = self
            .notes
            .get()
            .is_some_and(|fields| fields.field("x-amz-signature").is_some() || fields.field("signature").is_some());
        if !signed {
            match &self.unsigned {
                None => return Err((StatusCode::FORBIDDEN, "AccessDenied", "Access Denied")),
                Some(unsigned) => unsigned.may_write(self.notes.get())?,
            }
        }
        let held = self.budget.try_reserve(self.length, "post_object").ok_or((
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate (the gateway's upload buffers are in use).",
        ))?;
        *self.notes.0.held.lock().expect("form reservation") = Some(held);
        Ok(())
    }
}

/// What is known of a form upload: its fields before the file, once the body has streamed past
/// them, and the object it was stored as (for the answer, which s3s builds from the form's key).
#[derive(Clone, Default)]
pub struct FormNotes(Arc<Notes>);

#[derive(Default)]
struct Notes {
    fields: OnceLock<FormFields>,
    stored: OnceLock<Stored>,
    /// The memory s3s holds for the file, reserved at the gate; returned with the last clone
    /// of the notes, once the response is built.
    held: Mutex<Option<Reservation>>,
    /// The gate's refusal: the answer, instead of s3s's to the body it could not read.
    refused: OnceLock<Refusal>,
}

struct Stored {
    bucket: String,
    key: String,
    etag: String,
}

impl FormNotes {
    pub fn get(&self) -> Option<&FormFields> {
        self.0.fields.get()
    }

    /// Why the form was refused before its file was read, if it was.
    pub fn refused(&self) -> Option<Refusal> {
        self.0.refused.get().copied()
    }

    /// Notes the object the upload became.
    pub fn stored(&self, bucket: &str, key: &str, etag: &str) {
        let _ = self.0.stored.set(Stored {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            etag: etag.to_owned(),
        });
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct FormFields {
    /// The file part's `filename` (what `${filename}` in the key is replaced by).
    pub filename: Option<String>,
    /// Every field before the file, names lower-cased as s3s reads them.
    pub fields: Vec<(String, String)>,
}

impl FormFields {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    /// Whether the policy's `expiration` (if it has a policy s3s could read) is ISO 8601 as S3
    /// reads it (`2030-01-01T00:00:00.000Z`). s3s reads it as RFC 3339, which takes any character
    /// between the date and the time, so `2030-01-01 00:00:00+00:00` (Python's `str(datetime)`)
    /// passed where S3 answers 400; s3s checks the rest of the date itself.
    pub fn expiration_is_iso(&self) -> bool {
        use base64::Engine;
        let expiration = self
            .field("policy")
            .and_then(|policy| base64::engine::general_purpose::STANDARD.decode(policy.trim()).ok())
            .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
            .and_then(|policy| policy.get("expiration")?.as_str().map(str::to_owned));
        expiration.is_none_or(|expiration| expiration.as_bytes().get(10) == Some(&b'T'))
    }

    /// The key the form stores its file as: its `key` field (`${filename}` already replaced
    /// when the form has a file name, see `NotingBody`).
    pub fn key(&self) -> Option<&str> {
        self.field("key")
    }

    /// The form's settings as the request headers a PutObject would carry them in (the form's
    /// `acl` is the header `x-amz-acl`).
    pub fn settings(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.fields {
            let name = if name == "acl" { "x-amz-acl" } else { name.as_str() };
            if !name.starts_with("x-amz-") {
                continue;
            }
            if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_str(value)) {
                headers.append(name, value);
            }
        }
        headers
    }
}

/// What a form's key names the uploaded file's name by.
pub const FILENAME: &str = "${filename}";

/// A form's key with `${filename}` replaced by the uploaded file's name, as S3 does.
fn substitute_filename(key: &str, filename: &str) -> String {
    key.replace(FILENAME, filename)
}

/// The request body on its way to s3s: the bytes before the file part are held until its
/// headers have come (at most the note window and one frame), then passed on with `${filename}`
/// in the `key` field replaced by the file's name, so that s3s checks the form's policy on the
/// key the object is stored as, as S3 does (a `starts-with $key` condition on the file's name
/// holds); the rest passes unchanged, held at its gate.
struct NotingBody {
    inner: RequestBody,
    boundary: Vec<u8>,
    window: Vec<u8>,
    notes: FormNotes,
    /// The fields are being looked for: false once they are noted (or the window is full
    /// without a file part).
    noting: bool,
    /// When the whole form must have arrived ([`form_time`]).
    deadline: Pin<Box<Sleep>>,
    /// `None` once passed.
    gate: Option<Gate>,
    /// A frame that arrived while the fields were held, answered right after them.
    queued: Option<Frame<Bytes>>,
    /// The body ended while the fields were held: they were the last frame.
    ended: bool,
}

impl NotingBody {
    /// Stops holding: the held bytes (rewritten if the fields were found), the gate armed.
    fn release(&mut self, found: Option<(FormFields, Option<std::ops::Range<usize>>)>) -> Bytes {
        let mut held = std::mem::take(&mut self.window);
        if let Some((mut fields, key)) = found {
            if let (Some(filename), Some(key)) = (fields.filename.clone(), key) {
                let value = String::from_utf8_lossy(&held[key.clone()]).into_owned();
                if value.contains(FILENAME) {
                    let value = substitute_filename(&value, &filename);
                    held.splice(key, value.bytes());
                    if let Some((_, noted)) = fields.fields.iter_mut().find(|(name, _)| name == "key") {
                        *noted = value;
                    }
                }
            }
            let _ = self.notes.0.fields.set(fields);
        }
        self.noting = false;
        if let Some(gate) = &mut self.gate {
            gate.armed = true;
        }
        Bytes::from(held)
    }

    /// The next frame of the form; one that stalled for the body idle timeout is answered as
    /// S3 answers it (s3s would call it an unreadable file stream).
    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(BodyError::IdleTimeout(_)))) = &polled {
            let _ = self.notes.0.refused.set(REQUEST_TIMEOUT);
        }
        polled
    }
}

impl Body for NotingBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(frame) = this.queued.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        if !this.inner.is_end_stream() && this.deadline.as_mut().poll(cx).is_ready() {
            let _ = this.notes.0.refused.set(REQUEST_TIMEOUT);
            return Poll::Ready(Some(Err(BodyError::Refused)));
        }
        if let Some(gate) = this.gate.take_if(|gate| gate.armed)
            && let Err(refusal) = gate.pass()
        {
            let _ = gate.notes.0.refused.set(refusal);
            return Poll::Ready(Some(Err(BodyError::Refused)));
        }
        if !this.noting {
            return this.poll_inner(cx);
        }
        loop {
            let frame = match std::task::ready!(this.poll_inner(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(err)) => return Poll::Ready(Some(Err(err))),
                None => {
                    this.ended = true;
                    let found = fields_before_file(&this.window, &this.boundary);
                    let held = this.release(found);
                    return Poll::Ready((!held.is_empty()).then(|| Ok(Frame::data(held))));
                }
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(other) => {
                    this.queued = Some(other);
                    let held = this.release(None);
                    return Poll::Ready(Some(Ok(Frame::data(held))));
                }
            };
            this.window.extend_from_slice(&data);
            if let Some(found) = fields_before_file(&this.window, &this.boundary) {
                return Poll::Ready(Some(Ok(Frame::data(this.release(Some(found))))));
            }
            if this.window.len() >= NOTE_WINDOW {
                return Poll::Ready(Some(Ok(Frame::data(this.release(None)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.queued.is_none() && (self.ended || (!self.noting && self.inner.is_end_stream()))
    }

    /// The held fields may change length, so nothing exact is said until they are passed on.
    fn size_hint(&self) -> SizeHint {
        match self.noting {
            true => SizeHint::default(),
            false => self.inner.size_hint(),
        }
    }
}

/// The answer to a form upload as S3 gives it, where s3s's differs: a field that breaks a
/// condition of the form's policy is 403 AccessDenied (s3s: 400 InvalidPolicyDocument), and the
/// body of a 201 and the redirect of a 303 name the key, bucket and ETag the object was stored
/// with, as the front noted them.
pub fn finish(
    mut response: http::Response<s3s::Body>,
    notes: &FormNotes,
    request_id: &str,
) -> http::Response<s3s::Body> {
    let status = response.status();
    if status == StatusCode::BAD_REQUEST
        && let Some(body) = response.body().bytes()
        && let Some(message) = condition_failure(&body)
    {
        let message = format!("Invalid according to Policy: Policy Condition failed: {message}");
        return super::error_response(StatusCode::FORBIDDEN, "AccessDenied", &message, request_id);
    }
    let Some(stored) = notes.0.stored.get() else {
        return response;
    };
    let query = format!(
        "bucket={}&key={}&etag={}",
        super::percent_encode(&stored.bucket, false),
        super::percent_encode(&stored.key, false),
        super::percent_encode(&stored.etag, false)
    );
    match status {
        StatusCode::CREATED => {
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><PostResponse><Location>{}</Location><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                xml_escape(location),
                xml_escape(&stored.bucket),
                xml_escape(&stored.key),
                xml_escape(&stored.etag)
            );
            response.headers_mut().remove(http::header::CONTENT_LENGTH);
            *response.body_mut() = s3s::Body::from(body);
        }
        StatusCode::SEE_OTHER => {
            let redirect = notes
                .get()
                .and_then(|fields| fields.field("success_action_redirect").or(fields.field("redirect")));
            if let Some(redirect) = redirect {
                let base = redirect.split_once('?').map_or(redirect, |(base, _)| base);
                let kept = redirect
                    .split_once('?')
                    .map(|(_, query)| query)
                    .filter(|query| !query.is_empty());
                let location = match kept {
                    Some(kept) => format!("{base}?{kept}&{query}"),
                    None => format!("{base}?{query}"),
                };
                if let Ok(value) = http::HeaderValue::from_str(&location) {
                    response.headers_mut().insert(http::header::LOCATION, value);
                }
            }
        }
        _ => {}
    }
    response
}

/// The message of s3s's refusal of a form that breaks its policy's conditions.
fn condition_failure(body: &[u8]) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    if !body.contains("<Code>InvalidPolicyDocument</Code>") {
        return None;
    }
    let message = body.split_once("<Message>")?.1.split_once("</Message>")?.0;
    let breaks_condition = message.starts_with("Policy condition") || message.starts_with("Bucket in form field");
    breaks_condition.then(|| message.to_owned())
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The fields of a multipart form up to its `file` part, that part's filename, and where in
/// `form` the (first) `key` field's value is; `None` while `form` (a prefix of the body) does
/// not reach the file part's headers yet.
fn fields_before_file(form: &[u8], boundary: &[u8]) -> Option<(FormFields, Option<std::ops::Range<usize>>)> {
    let delimiter = [b"--".as_slice(), boundary].concat();
    let mut rest = &form[find(form, &delimiter)? + delimiter.len()..];
    let mut fields = Vec::new();
    let mut key = None;
    loop {
        // A delimiter followed by "--" closes a form that had no file part.
        if rest.starts_with(b"--") {
            return Some((FormFields { filename: None, fields }, key));
        }
        let rest_after_crlf = rest.strip_prefix(b"\r\n")?;
        let headers_end = find(rest_after_crlf, b"\r\n\r\n")?;
        let headers = std::str::from_utf8(&rest_after_crlf[..headers_end]).ok()?;
        let (name, filename) = disposition(headers)?;
        let content = &rest_after_crlf[headers_end + 4..];
        if name.eq_ignore_ascii_case("file") {
            return Some((FormFields { filename, fields }, key));
        }
        let closing = [b"\r\n".as_slice(), &delimiter].concat();
        let value_end = find(content, &closing)?;
        let value = String::from_utf8_lossy(&content[..value_end]).into_owned();
        let name = name.to_ascii_lowercase();
        if name == "key" && key.is_none() {
            let start = form.len() - content.len();
            key = Some(start..start + value_end);
        }
        fields.push((name, value));
        rest = &content[value_end + closing.len()..];
    }
}

/// The `name` and `filename` of a part's Content-Disposition header.
fn disposition(headers: &str) -> Option<(String, Option<String>)> {
    let value = headers.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim().eq_ignore_ascii_case("content-disposition").then_some(value)
    })?;
    let mut name = None;
    let mut filename = None;
    for param in value.split(';').skip(1) {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_owned();
        match key.trim() {
            "name" => name = Some(value),
            "filename" => filename = Some(value),
            _ => {}
        }
    }
    Some((name?, filename))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORM: &str = "--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nuploads/${filename}\r\n\
        --XyZ\r\ncontent-disposition: form-data; name=\"ACL\"\r\n\r\nprivate\r\n\
        --XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"photo 1.jpg\"\r\n\
        Content-Type: image/jpeg\r\n\r\nJPEGDATA\r\n--XyZ--\r\n";

    #[test]
    fn the_fields_and_the_file_name_are_read_from_a_complete_prefix() {
        let (fields, key) = fields_before_file(FORM.as_bytes(), b"XyZ").unwrap();
        assert_eq!(fields.filename.as_deref(), Some("photo 1.jpg"));
        assert_eq!(fields.field("key"), Some("uploads/${filename}"));
        assert_eq!(fields.field("acl"), Some("private"));
        assert_eq!(&FORM[key.unwrap()], "uploads/${filename}");
    }

    #[test]
    fn a_prefix_short_of_the_file_headers_is_not_enough() {
        let cut = FORM.find("Content-Type: image").unwrap();
        for end in [0, 10, 60, cut] {
            assert_eq!(fields_before_file(&FORM.as_bytes()[..end], b"XyZ"), None, "{end}");
        }
    }

    #[test]
    fn a_form_without_a_file_part_has_no_file_name() {
        let form = "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--b--\r\n";
        let (fields, _) = fields_before_file(form.as_bytes(), b"b").unwrap();
        assert_eq!(fields.filename, None);
        assert_eq!(fields.field("key"), Some("k"));
    }

    #[test]
    fn the_boundary_comes_from_the_content_type() {
        let post = |content_type: &str| {
            let request = Request::post("/bucket")
                .header(http::header::CONTENT_TYPE, content_type)
                .body(())
                .unwrap();
            FormPost::of(&request).map(|form| form.boundary)
        };
        assert_eq!(post("multipart/form-data; boundary=abc"), Some(b"abc".to_vec()));
        assert_eq!(
            post("Multipart/Form-Data; charset=utf-8; boundary=\"a b\""),
            Some(b"a b".to_vec())
        );
        assert_eq!(post("multipart/form-data"), None);
        assert_eq!(post("application/xml"), None);
    }
}
