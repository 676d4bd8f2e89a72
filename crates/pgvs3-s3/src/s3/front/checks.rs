//! What the S3 front accepts: settings pgvs3 does not keep are refused, never silently dropped,
//! and request text PostgreSQL cannot store is the client's error, found before any work.

use http::HeaderMap;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The kind of request a header check is for: each takes its own settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    CreateBucket,
    /// PutObject and CreateMultipartUpload: the request that declares a new object.
    NewObject,
    CopyObject,
    /// GetObject, HeadObject: an SSE-C key may come with them, no other encryption setting.
    Read,
    /// UploadPart, UploadPartCopy: only encryption keys apply.
    Other,
}

/// Refuses request headers asking for guarantees pgvs3 does not give: storage classes and
/// website redirects. One pass over the headers, and only `x-amz-*` names are
/// looked at, so a request without such headers pays a prefix test per header. ACL headers are
/// the ACLs' own (front/acl.rs), as they depend on the bucket's ownership.
pub fn refuse_unkept(headers: &HeaderMap, request: Request) -> S3Result<()> {
    let writes = matches!(request, Request::NewObject | Request::CopyObject);
    for (name, value) in headers {
        let Some(setting) = name.as_str().strip_prefix("x-amz-") else {
            continue;
        };
        let value = value.to_str().unwrap_or_default().trim();
        // Server-side encryption headers are the operations' own (front/encryption.rs).
        match (request, setting) {
            (_, "storage-class") if writes && value != "STANDARD" => return Err(storage_class_refused(value)),
            (_, "website-redirect-location") if writes => {
                return Err(not_implemented("Website redirects are not implemented"));
            }
            // A read decrypts with what the object was written with: S3 refuses a read that
            // asks for an encryption (SSE-C's key headers are the read's own).
            (
                Request::Read,
                "server-side-encryption"
                | "server-side-encryption-aws-kms-key-id"
                | "server-side-encryption-context"
                | "server-side-encryption-bucket-key-enabled",
            ) => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("x-amz-{setting} header is not supported for this operation."),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn not_implemented(message: &'static str) -> S3Error {
    S3Error::with_message(S3ErrorCode::NotImplemented, message)
}

fn storage_class_refused(class: &str) -> S3Error {
    const AWS_CLASSES: [&str; 11] = [
        "REDUCED_REDUNDANCY",
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER",
        "DEEP_ARCHIVE",
        "OUTPOSTS",
        "GLACIER_IR",
        "SNOW",
        "EXPRESS_ONEZONE",
        "FSX_OPENZFS",
    ];
    if AWS_CLASSES.contains(&class) {
        not_implemented("Only the STANDARD storage class is implemented")
    } else {
        S3Error::with_message(
            S3ErrorCode::InvalidStorageClass,
            "The storage class you specified is not valid",
        )
    }
}

/// S3's limit on user metadata: the UTF-8 bytes of every `x-amz-meta-*` name and value.
pub const MAX_USER_METADATA: usize = 2048;

pub fn check_user_metadata<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> S3Result<()> {
    let size: usize = pairs.into_iter().map(|(name, value)| name.len() + value.len()).sum();
    if size > MAX_USER_METADATA {
        return Err(S3Error::with_message(
            S3ErrorCode::MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size.",
        ));
    }
    Ok(())
}

/// Refuses a request carrying a NUL character in its key, a query parameter (prefix, marker,
/// delimiter, upload id, ...), its copy source or its tags: PostgreSQL text cannot hold one.
/// A NUL can only arrive percent-encoded (HTTP forbids a raw one in the request line and in
/// header values), so looking for `%00` in the raw request finds every one.
pub fn refuse_nul(uri: &http::Uri, headers: &HeaderMap) -> S3Result<()> {
    let encoded_nul = |text: &[u8]| text.windows(3).any(|w| w == b"%00");
    let in_headers = ["x-amz-copy-source", "x-amz-tagging"]
        .iter()
        .filter_map(|name| headers.get(*name))
        .any(|value| encoded_nul(value.as_bytes()));
    let in_uri = uri
        .path_and_query()
        .is_some_and(|pq| encoded_nul(pq.as_str().as_bytes()));
    if in_uri || in_headers {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "Object keys and request parameters cannot contain a NUL character (%00).",
        ));
    }
    Ok(())
}

/// Refuses a multi-object delete that declares no digest of its body, as S3 does.
pub fn require_body_digest(headers: &HeaderMap) -> S3Result<()> {
    let declared = headers.contains_key("content-md5")
        || headers
            .keys()
            .any(|name| name.as_str().starts_with("x-amz-checksum-") && name.as_str() != "x-amz-checksum-type");
    if !declared {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "Missing required header for this request: Content-MD5",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (n.parse::<http::HeaderName>().unwrap(), v.parse().unwrap()))
            .collect()
    }

    fn code(result: S3Result<()>) -> Option<String> {
        result.err().map(|e| e.code().as_str().to_owned())
    }

    #[test]
    fn settings_that_are_not_kept_are_refused_per_request() {
        // ACLs are kept (s3/front/acl.rs decides them with the bucket's ownership).
        for acl in [("x-amz-acl", "public-read"), ("x-amz-grant-read", "id=\"AKB\"")] {
            assert_eq!(code(refuse_unkept(&headers(&[acl]), Request::NewObject)), None);
            assert_eq!(code(refuse_unkept(&headers(&[acl]), Request::CreateBucket)), None);
        }
        let class = |c: &str| {
            code(refuse_unkept(
                &headers(&[("x-amz-storage-class", c)]),
                Request::NewObject,
            ))
        };
        assert_eq!(class("STANDARD"), None);
        assert_eq!(class("GLACIER").as_deref(), Some("NotImplemented"));
        assert_eq!(class("COLD").as_deref(), Some("InvalidStorageClass"));
        // Object lock is kept (s3/front/lock.rs): its headers pass this check.
        for lock in [
            ("x-amz-bucket-object-lock-enabled", "true"),
            ("x-amz-object-lock-mode", "GOVERNANCE"),
        ] {
            assert_eq!(code(refuse_unkept(&headers(&[lock]), Request::CreateBucket)), None);
            assert_eq!(code(refuse_unkept(&headers(&[lock]), Request::NewObject)), None);
        }
    }

    #[test]
    fn metadata_is_limited_to_two_kibibytes_of_names_and_values() {
        let fits = [("n".to_owned(), "v".repeat(MAX_USER_METADATA - 1))];
        assert!(check_user_metadata(fits.iter().map(|(n, v)| (n, v))).is_ok());
        let over = [("n".to_owned(), "v".repeat(MAX_USER_METADATA))];
        assert_eq!(
            code(check_user_metadata(over.iter().map(|(n, v)| (n, v)))).as_deref(),
            Some("MetadataTooLarge")
        );
    }

    #[test]
    fn a_multi_object_delete_must_declare_a_digest() {
        assert!(require_body_digest(&headers(&[("content-md5", "x")])).is_ok());
        assert!(require_body_digest(&headers(&[("x-amz-checksum-crc32", "x")])).is_ok());
        assert!(require_body_digest(&headers(&[("x-amz-checksum-type", "FULL_OBJECT")])).is_err());
        assert!(require_body_digest(&HeaderMap::new()).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A request is refused for a NUL exactly when one of its decoded parts would hold one.
        #[test]
        fn nul_is_found_wherever_it_is_encoded(key in "[a-z/%0-9]{0,12}", query in "[a-z=&%0-9]{0,12}") {
            let uri = format!("/bkt/{key}?{query}").parse::<http::Uri>();
            prop_assume!(uri.is_ok());
            let expected = percent_decodes_to_nul(&key) || percent_decodes_to_nul(&query);
            prop_assert_eq!(refuse_nul(&uri.unwrap(), &HeaderMap::new()).is_err(), expected);
        }

        #[test]
        fn header_checks_never_panic(name in "x-amz-[a-z-]{0,30}", value in "[ -~]{0,40}") {
            let headers = headers(&[(name.as_str(), value.as_str())]);
            for request in [Request::CreateBucket, Request::NewObject, Request::CopyObject, Request::Other] {
                let _ = refuse_unkept(&headers, request);
            }
        }
    }

    /// Whether percent-decoding `text` (once, as s3s does) yields a NUL byte: the reference
    /// `refuse_nul` is held to.
    fn percent_decodes_to_nul(text: &str) -> bool {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let escape = bytes
                .get(i + 1..i + 3)
                .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit));
            match (bytes[i], escape) {
                (b'%', Some(hex)) if hex == b"00" => return true,
                (b'%', Some(_)) => i += 3,
                _ => i += 1,
            }
        }
        false
    }
}
