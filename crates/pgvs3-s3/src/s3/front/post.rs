//! PostObject (browser uploads): s3s turns the form into a PutObject; here the form's own part of
//! it is finished as S3 does — a `${filename}` in the key that no file name replaced is refused, the
//! form's settings are held to the same refusals as a PutObject's headers, and the answer
//! carries the object's ETag and Location.

use http::{HeaderMap, HeaderValue};
use s3s::dto::PutObjectInput;
use s3s::{S3Request, S3Result};

use super::checks::{self, Request};
use crate::s3::post_form::{FILENAME, FormFields, FormNotes};

/// The form a PutObject came from, if it is a browser upload.
pub struct FormUpload {
    notes: FormNotes,
    /// The form's settings as request headers.
    settings: HeaderMap,
}

impl FormUpload {
    /// For a PutObject made from a POST form: refuses what the form asks for and pgvs3 does not
    /// keep, and a key whose `${filename}` has no file name to stand for.
    pub fn of(req: &mut S3Request<PutObjectInput>) -> S3Result<Option<FormUpload>> {
        let Some(notes) = req.extensions.get::<FormNotes>().cloned() else {
            return Ok(None);
        };
        let fields = notes.get();
        if fields.is_some_and(|fields| !fields.expiration_is_iso()) {
            return Err(s3s::s3_error!(
                InvalidPolicyDocument,
                "Invalid Policy: Invalid 'expiration' value."
            ));
        }
        let settings = fields.map(FormFields::settings).unwrap_or_default();
        checks::refuse_unkept(&settings, Request::NewObject)?;
        // The key's `${filename}` was replaced on the way in (`post_form::NotingBody`) when the
        // file part has a name; without one there is nothing to replace it with.
        if req.input.key.contains(FILENAME) {
            return Err(s3s::s3_error!(
                InvalidArgument,
                "POST requires exactly one file upload per request."
            ));
        }
        Ok(Some(FormUpload { notes, settings }))
    }

    /// The form's settings as the headers a PutObject would carry them in (its ACL, for one).
    pub fn settings(&self) -> &HeaderMap {
        &self.settings
    }

    /// The headers S3 answers an upload with (whatever the status the form asked for); the
    /// stored object is also noted for the answer's body and redirect, built around s3s.
    pub fn answer(&self, req: &S3Request<PutObjectInput>, etag: &str, headers: &mut HeaderMap) {
        let (bucket, key) = (&req.input.bucket, &req.input.key);
        self.notes.stored(bucket, key, etag);
        if let Ok(value) = HeaderValue::from_str(etag) {
            headers.insert(http::header::ETAG, value);
        }
        let scheme = match req.extensions.get::<crate::http_server::Peer>() {
            Some(peer) if peer.tls => "https",
            _ => "http",
        };
        if let Some(host) = req.headers.get(http::header::HOST).and_then(|host| host.to_str().ok()) {
            let location = format!("{scheme}://{host}/{bucket}/{}", crate::s3::percent_encode(key, true));
            if let Ok(value) = HeaderValue::from_str(&location) {
                headers.insert(http::header::LOCATION, value);
            }
        }
    }
}
