//! Error bodies as AWS words them, completed after s3s rendered them. s3s raises some errors
//! itself (signature checks, path parsing) without a `<Message>`, which clients print as
//! "Unknown", or with wording of its own; and an `S3Error` has no room for the elements AWS adds
//! to a 416 `InvalidRange` (`ActualObjectSize`, `RangeRequested`: aws-c-s3, under every CRT
//! client, recognises an empty object only by `ActualObjectSize` 0).

use http::{HeaderMap, HeaderValue, Response};

/// The size of the object a range was refused on, carried from `errors::s3_error` to
/// [`complete`] on the error's headers (an `S3Error` has no other room); never sent.
pub const ACTUAL_OBJECT_SIZE: &str = "x-pgvs3-actual-object-size";

/// What of the request an error body may need: the range it asked for.
pub struct Asked {
    range: Option<String>,
}

impl Asked {
    /// The range a request names: GetObject's `Range`, UploadPartCopy's copy source range.
    pub fn of(headers: &HeaderMap) -> Asked {
        let range = headers
            .get(http::header::RANGE)
            .or_else(|| headers.get("x-amz-copy-source-range"))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Asked { range }
    }
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
        }
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
