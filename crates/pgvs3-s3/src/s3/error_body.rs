//! Error bodies as AWS words them, completed after s3s rendered them. s3s raises some errors
//! itself (signature checks, path parsing) without a `<Message>`, which clients print as
//! "Unknown", or with wording of its own; and an `S3Error` has no room for the elements AWS adds
//! to a 416 `InvalidRange` (`ActualObjectSize`, `RangeRequested`: aws-c-s3, under every CRT
//! client, recognises an empty object only by `ActualObjectSize` 0), to a `NoSuchKey`
//! (`Key`), a `NoSuchBucket` (`BucketName`) or an expired presigned URL's `AccessDenied`
//! (`X-Amz-Expires`, `Expires`, `ServerTime`).

use http::{HeaderMap, HeaderValue, Response};

/// The size of the object a range was refused on, carried from `errors::s3_error` to
/// [`complete`] on the error's headers (an `S3Error` has no other room); never sent.
pub const ACTUAL_OBJECT_SIZE: &str = "x-pgvs3-actual-object-size";

/// What of the request an error body may need: the range it asked for, the bucket and key it
/// named, a presigned URL's validity.
#[derive(Default)]
pub struct Asked {
    range: Option<String>,
    bucket: Option<String>,
    /// The object key, unless the request copies: S3's `NoSuchKey` of a copy may be its
    /// source's, which is not named here.
    key: Option<String>,
    copy: bool,
    presigned: Option<Presigned>,
}

/// A presigned URL's `X-Amz-Expires` as sent, and the moment it ran out.
struct Presigned {
    expires: String,
    until: time::OffsetDateTime,
}

impl Asked {
    /// What a request's head says: GetObject's `Range` (or UploadPartCopy's copy source
    /// range), a presigned URL's `X-Amz-Date` and `X-Amz-Expires`.
    pub fn of(uri: &http::Uri, headers: &HeaderMap) -> Asked {
        let range = headers
            .get(http::header::RANGE)
            .or_else(|| headers.get("x-amz-copy-source-range"))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Asked {
            range,
            presigned: presigned(uri),
            copy: headers.contains_key("x-amz-copy-source"),
            ..Asked::default()
        }
    }

    /// The bucket and key s3s routed the request to.
    pub fn named(&mut self, bucket: Option<&str>, key: Option<&str>) {
        self.bucket = bucket.map(str::to_owned);
        self.key = key.filter(|_| !self.copy).map(str::to_owned);
    }
}

/// A presigned URL's validity, when its query has both parameters in their SigV4 form.
fn presigned(uri: &http::Uri) -> Option<Presigned> {
    let query = uri.query().filter(|query| query.contains("X-Amz-Expires"))?;
    let param = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    let expires = param("X-Amz-Expires")?;
    let seconds: i64 = expires.parse().ok()?;
    let format = time::format_description::parse_borrowed::<2>("[year][month][day]T[hour][minute][second]Z").ok()?;
    let signed = time::PrimitiveDateTime::parse(&param("X-Amz-Date")?, &format).ok()?;
    let until = signed.assume_utc().checked_add(time::Duration::seconds(seconds))?;
    Some(Presigned { expires, until })
}

/// A time as S3 writes it in error bodies: `2016-01-07T19:48:20Z`.
fn iso8601(at: time::OffsetDateTime) -> String {
    time::format_description::parse_borrowed::<2>("[year]-[month]-[day]T[hour]:[minute]:[second]Z")
        .ok()
        .and_then(|format| at.to_offset(time::UtcOffset::UTC).format(&format).ok())
        .unwrap_or_default()
}

/// AWS's message for an error code, where s3s gives none or its own (AWS's error code list).
fn aws_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "SignatureDoesNotMatch" => {
            "The request signature we calculated does not match the signature you provided. Check your key and signing method."
        }
        "InvalidAccessKeyId" => "The AWS access key Id you provided does not exist in our records.",
        "InvalidBucketName" => "The specified bucket is not valid.",
        "KeyTooLongError" => "Your key is too long",
        "InvalidURI" => "Couldn't parse the specified URI.",
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "IncompleteBody" => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        "NotImplemented" => "A header you provided implies functionality that is not implemented.",
        "RequestTimeTooSkewed" => "The difference between the request time and the current time is too large.",
        "AccessDenied" => "Access Denied",
        "InvalidArgument" => "Invalid Argument",
        "MalformedXML" => "The XML you provided was not well-formed or did not validate against our published schema.",
        "MalformedPOSTRequest" => "The body of your POST request is not well-formed multipart/form-data.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "InvalidDigest" => "The Content-MD5 you specified is not valid.",
        "BadDigest" => "The Content-MD5 you specified did not match what we received.",
        "EntityTooLarge" => "Your proposed upload exceeds the maximum allowed object size.",
        "InvalidRange" => "The requested range is not satisfiable",
        "PreconditionFailed" => "At least one of the pre-conditions you specified did not hold",
        "InternalError" => "We encountered an internal error. Please try again.",
        _ => return None,
    })
}

/// Whether s3s's own message for `code` is replaced by AWS's even when it has one.
fn worded_by_aws(code: &str) -> bool {
    code == "RequestTimeTooSkewed"
}

/// The response, its error body completed where it needs it; any other response unchanged.
pub fn complete(mut response: Response<s3s::Body>, asked: &Asked) -> Response<s3s::Body> {
    let actual_size = response.headers_mut().remove(ACTUAL_OBJECT_SIZE);
    if !response.status().is_client_error() && !response.status().is_server_error() {
        return response;
    }
    let Some(body) = response.body().bytes() else {
        return response;
    };
    let Some(text) = std::str::from_utf8(&body)
        .ok()
        .and_then(|text| completed(text, actual_size.as_ref(), asked))
    else {
        return response;
    };
    *response.body_mut() = s3s::Body::from(text);
    // The error's own headers (which carried the size) replaced the ones s3s set with its body.
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    response
}

/// The body with AWS's message and InvalidRange's elements, or `None` when it has all it needs.
fn completed(text: &str, actual_size: Option<&HeaderValue>, asked: &Asked) -> Option<String> {
    let code_end = text.find("</Code>")? + "</Code>".len();
    let code = text[..code_end].rsplit_once("<Code>")?.1.strip_suffix("</Code>")?;
    let mut text = text.to_owned();
    let mut changed = false;
    let message = text
        .find("<Message>")
        .and_then(|start| Some(start..text[start..].find("</Message>")? + start + "</Message>".len()));
    if let Some(aws) = aws_message(code) {
        match message {
            None => {
                text.insert_str(code_end, &format!("<Message>{aws}</Message>"));
                changed = true;
            }
            Some(range) if worded_by_aws(code) => {
                text.replace_range(range, &format!("<Message>{aws}</Message>"));
                changed = true;
            }
            Some(_) => {}
        }
    }
    // AWS's elements naming what was missing or expired, after the message.
    let named = match code {
        "NoSuchKey" => asked.key.as_deref().map(|key| format!("<Key>{}</Key>", escape(key))),
        "NoSuchBucket" => asked
            .bucket
            .as_deref()
            .map(|bucket| format!("<BucketName>{}</BucketName>", escape(bucket))),
        "AccessDenied" if text.contains("<Message>Request has expired</Message>") => {
            asked.presigned.as_ref().map(|presigned| {
                format!(
                    "<X-Amz-Expires>{}</X-Amz-Expires><Expires>{}</Expires><ServerTime>{}</ServerTime>",
                    escape(&presigned.expires),
                    iso8601(presigned.until),
                    iso8601(time::OffsetDateTime::now_utc())
                )
            })
        }
        _ => None,
    };
    if let Some(named) = named {
        let after = text.find("</Message>").map_or(code_end, |at| at + "</Message>".len());
        text.insert_str(after, &named);
        changed = true;
    }
    if code == "InvalidRange"
        && let Some(size) = actual_size.and_then(|size| size.to_str().ok())
        && let Some(end) = text.rfind("</Error>")
    {
        let mut elements = String::new();
        if let Some(range) = &asked.range {
            elements.push_str(&format!("<RangeRequested>{}</RangeRequested>", escape(range)));
        }
        elements.push_str(&format!("<ActualObjectSize>{size}</ActualObjectSize>"));
        text.insert_str(end, &elements);
        changed = true;
    }
    changed.then_some(text)
}

/// Text as XML character data.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(range: Option<&str>) -> Asked {
        Asked {
            range: range.map(str::to_owned),
            ..Asked::default()
        }
    }

    #[test]
    fn missing_keys_and_buckets_are_named() {
        let mut named = Asked::of(&"/b/k".parse().unwrap(), &HeaderMap::new());
        named.named(Some("b"), Some("a<b"));
        let body = "<Error><Code>NoSuchKey</Code><Message>m</Message><RequestId>r</RequestId></Error>";
        assert_eq!(
            completed(body, None, &named).as_deref(),
            Some("<Error><Code>NoSuchKey</Code><Message>m</Message><Key>a&lt;b</Key><RequestId>r</RequestId></Error>")
        );
        let body = "<Error><Code>NoSuchBucket</Code><Message>m</Message></Error>";
        assert_eq!(
            completed(body, None, &named).as_deref(),
            Some("<Error><Code>NoSuchBucket</Code><Message>m</Message><BucketName>b</BucketName></Error>")
        );
        // A copy's missing key may be its source: not named.
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-copy-source", HeaderValue::from_static("/b/src"));
        let mut copy = Asked::of(&"/b/k".parse().unwrap(), &headers);
        copy.named(Some("b"), Some("k"));
        let body = "<Error><Code>NoSuchKey</Code><Message>m</Message></Error>";
        assert_eq!(completed(body, None, &copy), None);
    }

    #[test]
    fn an_expired_presigned_url_says_when_it_expired() {
        let uri =
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20160107T184820Z&X-Amz-Expires=3600&X-Amz-Signature=0"
                .parse()
                .unwrap();
        let asked = Asked::of(&uri, &HeaderMap::new());
        let body =
            "<Error><Code>AccessDenied</Code><Message>Request has expired</Message><RequestId>r</RequestId></Error>";
        let text = completed(body, None, &asked).unwrap();
        let prefix = "<Error><Code>AccessDenied</Code><Message>Request has expired</Message>\
                      <X-Amz-Expires>3600</X-Amz-Expires><Expires>2016-01-07T19:48:20Z</Expires><ServerTime>";
        assert!(text.starts_with(prefix), "{text}");
        assert!(
            text.ends_with("Z</ServerTime><RequestId>r</RequestId></Error>"),
            "{text}"
        );
        // Any other AccessDenied is left alone.
        let body = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        assert_eq!(completed(body, None, &asked), None);
    }

    #[test]
    fn a_code_without_message_gets_aws_text() {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code><RequestId>r1</RequestId></Error>";
        assert_eq!(
            completed(body, None, &asked(None)).as_deref(),
            Some(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>\
                 <Message>The request signature we calculated does not match the signature you provided. \
                 Check your key and signing method.</Message><RequestId>r1</RequestId></Error>"
            )
        );
    }

    #[test]
    fn a_message_is_kept_unless_aws_words_it() {
        let body = "<Error><Code>NotImplemented</Code><Message>Unknown operation</Message></Error>";
        assert_eq!(completed(body, None, &asked(None)), None);
        let body = "<Error><Code>RequestTimeTooSkewed</Code><Message>request time is too far from server time</Message></Error>";
        assert_eq!(
            completed(body, None, &asked(None)).as_deref(),
            Some(
                "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and \
                 the current time is too large.</Message></Error>"
            )
        );
        assert_eq!(
            completed("<Error><Code>Whatever</Code></Error>", None, &asked(None)),
            None
        );
    }

    #[test]
    fn invalid_range_names_the_range_and_the_size() {
        let body = "<Error><Code>InvalidRange</Code><Message>m</Message><RequestId>r</RequestId></Error>";
        let size = HeaderValue::from_static("0");
        assert_eq!(
            completed(body, Some(&size), &asked(Some("bytes=0-<9"))).as_deref(),
            Some(
                "<Error><Code>InvalidRange</Code><Message>m</Message><RequestId>r</RequestId>\
                 <RangeRequested>bytes=0-&lt;9</RangeRequested><ActualObjectSize>0</ActualObjectSize></Error>"
            )
        );
    }
}
