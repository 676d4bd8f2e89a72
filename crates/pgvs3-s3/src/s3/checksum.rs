//! Verifying what S3 clients declare about an upload: Content-MD5 and `x-amz-checksum-*`
//! values sent as headers or as trailers after an aws-chunked body. (The signed payload hash
//! is checked by s3s while the body streams.)

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::HeaderMap;
use s3s::TrailingHeaders;
use s3s::crypto::{Checksum, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};

use crate::store::{BodyObserver, StoreError, StoreResult, StoredChecksum, UploadChecksum};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64Nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ];

    /// The name S3 uses in `x-amz-checksum-algorithm` and in listings.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha1 => "x-amz-checksum-sha1",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|alg| alg.name().eq_ignore_ascii_case(name))
    }

    /// The algorithm's digest of `data`, as S3 encodes it (a CRC big-endian).
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut hasher = Hasher::new(self);
        hasher.update(data);
        hasher.finish()
    }

    fn from_header(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|alg| alg.header().eq_ignore_ascii_case(name.trim()))
    }
}

enum Hasher {
    Crc32(Crc32),
    Crc32c(Crc32c),
    Crc64Nvme(Crc64Nvme),
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Hasher {
    fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Crc32 => Hasher::Crc32(Crc32::new()),
            Algorithm::Crc32c => Hasher::Crc32c(Crc32c::new()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(Crc64Nvme::new()),
            Algorithm::Sha1 => Hasher::Sha1(Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(data),
            Hasher::Crc32c(h) => h.update(data),
            Hasher::Crc64Nvme(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().as_ref().to_vec(),
            Hasher::Crc32c(h) => h.finalize().as_ref().to_vec(),
            Hasher::Crc64Nvme(h) => h.finalize().as_ref().to_vec(),
            Hasher::Sha1(h) => h.finalize().as_ref().to_vec(),
            Hasher::Sha256(h) => h.finalize().as_ref().to_vec(),
        }
    }
}

/// Where the declared checksum value comes from.
enum Declared {
    /// Only the algorithm is known (`x-amz-sdk-checksum-algorithm`): compute and store it.
    Nothing,
    Header(String),
    /// Sent after the body; read once the stream has ended.
    Trailer(TrailingHeaders),
}

/// Checks an upload against everything its request declared; see [`BodyObserver`].
pub struct UploadCheck {
    checksum: Option<(Algorithm, Hasher, Declared)>,
    content_md5: Option<Vec<u8>>,
    /// Bytes copied from a stored object (UploadPartCopy): they declare nothing, and the
    /// checksum their upload keeps is computed as they are copied.
    copied: bool,
}

impl UploadCheck {
    /// Reads the request's declarations. Malformed ones are the client's error, reported now.
    pub fn from_request(headers: &HeaderMap, trailers: Option<TrailingHeaders>) -> Result<UploadCheck, s3s::S3Error> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let content_md5 = match text("content-md5") {
            Some(value) => Some(
                BASE64
                    .decode(value)
                    .ok()
                    .filter(|md5| md5.len() == 16)
                    .ok_or_else(|| s3s::s3_error!(InvalidDigest, "The Content-MD5 you specified was invalid."))?,
            ),
            None => None,
        };
        let in_header = Algorithm::ALL
            .into_iter()
            .find_map(|alg| text(alg.header()).map(|v| (alg, v.to_owned())));
        let in_trailer = text("x-amz-trailer").and_then(|names| names.split(',').find_map(Algorithm::from_header));
        let named = text("x-amz-sdk-checksum-algorithm").or(text("x-amz-checksum-algorithm"));
        let checksum = match (in_header, in_trailer, trailers) {
            (Some((alg, value)), _, _) => Some((alg, Declared::Header(value))),
            (None, Some(alg), Some(trailers)) => Some((alg, Declared::Trailer(trailers))),
            _ => match named {
                Some(name) => Some((
                    Algorithm::from_name(name).ok_or_else(|| {
                        s3s::s3_error!(InvalidRequest, "Value for x-amz-checksum-algorithm header is invalid.")
                    })?,
                    Declared::Nothing,
                )),
                None => None,
            },
        };
        Ok(UploadCheck {
            checksum: checksum.map(|(alg, declared)| (alg, Hasher::new(alg), declared)),
            content_md5,
            copied: false,
        })
    }

    /// The check of bytes copied from a stored object, which were verified when stored: it
    /// computes `algorithm`'s checksum of them (CopyObject's `x-amz-checksum-algorithm`), or
    /// the one their upload keeps (UploadPartCopy, see `keep`).
    pub fn copied(algorithm: Option<Algorithm>) -> UploadCheck {
        UploadCheck {
            checksum: algorithm.map(|alg| (alg, Hasher::new(alg), Declared::Nothing)),
            content_md5: None,
            copied: true,
        }
    }
}

impl BodyObserver for UploadCheck {
    fn update(&mut self, data: &[u8]) {
        if let Some((_, hasher, _)) = &mut self.checksum {
            hasher.update(data);
        }
    }

    /// As S3 does: a part must bring its upload's checksum, declared or to be computed
    /// (`x-amz-sdk-checksum-algorithm`); one of a FULL_OBJECT upload (whose parts' checksums
    /// the client need not know) or a copied one may bring none, and it is computed.
    fn keep(&mut self, kept: &UploadChecksum) -> StoreResult<()> {
        let expected = Algorithm::from_name(&kept.algorithm)
            .ok_or_else(|| StoreError::Corrupt(format!("upload checksum algorithm {:?}", kept.algorithm)))?;
        match &self.checksum {
            Some((algorithm, ..)) if *algorithm == expected => Ok(()),
            None if kept.full_object || self.copied => {
                self.checksum = Some((expected, Hasher::new(expected), Declared::Nothing));
                Ok(())
            }
            sent => Err(StoreError::InvalidRequest(format!(
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                expected.name().to_ascii_lowercase(),
                sent.as_ref().map_or("null".to_owned(), |(algorithm, ..)| algorithm
                    .name()
                    .to_ascii_lowercase())
            ))),
        }
    }

    fn finish(self: Box<Self>, _size: u64, md5: &[u8; 16]) -> StoreResult<Option<StoredChecksum>> {
        if self.content_md5.is_some_and(|expected| expected != md5) {
            return Err(StoreError::BadDigest(
                "The Content-MD5 you specified did not match what we received.".into(),
            ));
        }
        let Some((algorithm, hasher, declared)) = self.checksum else {
            return Ok(None);
        };
        let value = BASE64.encode(hasher.finish());
        let expected = match declared {
            Declared::Nothing => None,
            Declared::Header(value) => Some(value),
            // A declared trailer that never came is refused as S3 refuses it, not replaced by
            // the checksum computed here: the client asked for its own value to be checked.
            Declared::Trailer(trailers) => Some(
                trailers
                    .read(|map| {
                        map.get(algorithm.header())
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    })
                    .flatten()
                    .ok_or_else(|| StoreError::BadDigest(MALFORMED_TRAILER.into()))?,
            ),
        };
        if expected.is_some_and(|expected| expected.trim() != value) {
            return Err(StoreError::BadDigest(format!(
                "The {} you specified did not match the calculated checksum.",
                algorithm.name()
            )));
        }
        Ok(Some(StoredChecksum {
            algorithm: algorithm.name().to_owned(),
            value,
            composite: false,
        }))
    }
}

/// Marks the signed-payload mismatch so the S3 error mapping can give it S3's own code.
pub const PAYLOAD_SHA256_MISMATCH: &str =
    "The provided 'x-amz-content-sha256' header does not match what was computed.";

/// Marks a checksum trailer that `x-amz-trailer` declared and the body did not bring (or
/// brought under another name), so the S3 error mapping can give it S3's own code
/// (MalformedTrailerError) and text.
pub const MALFORMED_TRAILER: &str =
    "The request contained trailing data that was not well-formed or did not conform to our published schema.";

/// Marks an aws-chunked body whose chunk or trailer signature does not match, so the S3 error
/// mapping can give it S3's own answer (403 SignatureDoesNotMatch, not a short body).
pub const CHUNK_SIGNATURE_MISMATCH: &str =
    "The request signature we calculated does not match the signature you provided. Check your key and signing method.";

/// An error from the request body stream, as the store sees it. s3s reports a body whose
/// SHA-256 differs from the signed `x-amz-content-sha256`, and a chunk or trailer whose
/// signature does not match, only through its error text.
pub fn body_error(err: &(dyn std::error::Error + Send + Sync + 'static)) -> StoreError {
    let text = err.to_string();
    if text.contains("Sha256Mismatch") {
        StoreError::BadDigest(PAYLOAD_SHA256_MISMATCH.into())
    } else if text.contains("AwsChunkedStreamError: SignatureMismatch") {
        StoreError::BadDigest(CHUNK_SIGNATURE_MISMATCH.into())
    } else if crate::request_body::BodyError::is_idle_timeout(err) {
        StoreError::BodyTimeout(super::errors::REQUEST_TIMEOUT.into())
    } else {
        StoreError::Body(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest;
    use proptest::prelude::*;

    fn declaring(name: &str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name.parse::<http::HeaderName>().unwrap(), value.parse().unwrap());
        headers
    }

    fn md5_of(data: &[u8]) -> [u8; 16] {
        md5::Md5::digest(data).into()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A Content-MD5 is accepted exactly when it is the base64 of 16 bytes.
        #[test]
        fn content_md5_must_be_base64_of_sixteen_bytes(value in "[A-Za-z0-9+/=]{0,30}") {
            let parsed = UploadCheck::from_request(&declaring("content-md5", &value), None);
            let valid = BASE64.decode(&value).is_ok_and(|md5| md5.len() == 16);
            match parsed {
                Ok(_) => prop_assert!(valid),
                Err(err) => {
                    prop_assert!(!valid);
                    prop_assert_eq!(err.code().as_str(), "InvalidDigest");
                }
            }
        }

        /// A body passes its declared MD5 and SHA-256 exactly when it is the body they were
        /// computed from.
        #[test]
        fn a_declared_digest_passes_only_its_own_body(
            declared in proptest::collection::vec(any::<u8>(), 0..512),
            sent in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let md5 = BASE64.encode(md5_of(&declared));
            let mut check = UploadCheck::from_request(&declaring("content-md5", &md5), None).unwrap();
            check.update(&sent);
            let outcome = Box::new(check).finish(sent.len() as u64, &md5_of(&sent));
            prop_assert_eq!(outcome.is_ok(), declared == sent);

            let mut sha = Sha256::new();
            sha.update(&declared);
            let value = BASE64.encode(sha.finalize().as_ref());
            let mut check = UploadCheck::from_request(&declaring("x-amz-checksum-sha256", &value), None).unwrap();
            check.update(&sent);
            let outcome = Box::new(check).finish(sent.len() as u64, &md5_of(&sent));
            prop_assert_eq!(outcome.is_ok(), declared == sent);
        }
    }
}
