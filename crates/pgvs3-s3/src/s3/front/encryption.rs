//! Server-side encryption on the wire: what a request asks for (SSE-S3 with
//! `x-amz-server-side-encryption: AES256`, SSE-C with the three
//! `x-amz-server-side-encryption-customer-*` headers; SSE-KMS refused, there is no KMS), the
//! key a read or a copy source offers, the headers S3 answers with, and
//! Put/Get/DeleteBucketEncryption (a bucket's default, SSE-S3 only).

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::fail;
use crate::store::{CustomerKey, EncryptionMode, RequestedEncryption, SealedEncryption, StoreError};

fn kms_refused() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NotImplemented,
        "SSE-KMS is not implemented: pgvs3 has no key management service (use SSE-S3 or SSE-C)",
    )
}

/// The SSE-C fields of a request (`algorithm`, base64 `key`, base64 `key MD5`).
pub(super) struct CustomerFields<'a> {
    pub algorithm: Option<&'a str>,
    pub key: Option<&'a str>,
    pub key_md5: Option<&'a str>,
}

impl CustomerFields<'_> {
    /// The customer key these fields give, checked as S3 checks it. A key may only travel over
    /// TLS, as S3 requires, or from this host (where it never crosses a network).
    pub(super) fn key<T>(&self, req: &S3Request<T>) -> S3Result<Option<CustomerKey>> {
        let key = CustomerKey::from_headers(self.algorithm, self.key, self.key_md5).map_err(|e| fail(req, e))?;
        if key.is_some() {
            let peer = req.extensions.get::<crate::http_server::Peer>();
            let private = peer.is_none_or(|peer| peer.tls || peer.addr.ip().is_loopback());
            if !private {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidRequest,
                    "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection.",
                ));
            }
        }
        Ok(key)
    }
}

/// What a write asks for: `sse` is `x-amz-server-side-encryption`, `kms_key` its KMS key id.
pub(super) fn requested<T>(
    req: &S3Request<T>,
    sse: Option<&ServerSideEncryption>,
    kms_key: Option<&str>,
    customer: CustomerFields<'_>,
) -> S3Result<RequestedEncryption> {
    let customer = customer.key(req)?;
    match (sse.map(ServerSideEncryption::as_str), customer) {
        (None, None) if kms_key.is_none() => Ok(RequestedEncryption::None),
        (None, Some(customer)) if kms_key.is_none() => Ok(RequestedEncryption::Customer(customer)),
        (Some(_), Some(_)) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "Server Side Encryption with Customer provided key is incompatible with the encryption method specified",
        )),
        (Some(ServerSideEncryption::AES256), None) if kms_key.is_none() => Ok(RequestedEncryption::S3),
        (Some(ServerSideEncryption::AWS_KMS | ServerSideEncryption::AWS_KMS_DSSE), _) => Err(kms_refused()),
        (None | Some(ServerSideEncryption::AES256), _) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms",
        )),
        (Some(_), None) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "The encryption method specified is not supported",
        )),
    }
}

/// The headers S3 answers with for an object encrypted as `sealed`: the algorithm, or the
/// SSE-C algorithm and the MD5 of the customer's key.
pub(super) struct Answer {
    pub sse: Option<ServerSideEncryption>,
    pub customer_algorithm: Option<SSECustomerAlgorithm>,
    pub customer_key_md5: Option<SSECustomerKeyMD5>,
}

pub(super) fn answer(sealed: Option<&SealedEncryption>) -> Answer {
    match sealed {
        None => Answer {
            sse: None,
            customer_algorithm: None,
            customer_key_md5: None,
        },
        Some(sealed) if sealed.mode == EncryptionMode::S3 => Answer {
            sse: Some(ServerSideEncryption::from_static(ServerSideEncryption::AES256)),
            customer_algorithm: None,
            customer_key_md5: None,
        },
        Some(sealed) => Answer {
            sse: None,
            customer_algorithm: Some("AES256".to_owned()),
            customer_key_md5: sealed.key_md5.clone(),
        },
    }
}

/// The answer's headers for a write that asked for `requested` (the object is encrypted as
/// asked, or with the bucket's default).
pub(super) fn answer_requested(requested: &RequestedEncryption, default_encryption: bool) -> Answer {
    match requested {
        RequestedEncryption::Customer(customer) => Answer {
            sse: None,
            customer_algorithm: Some("AES256".to_owned()),
            customer_key_md5: Some(customer.key_md5.clone()),
        },
        RequestedEncryption::S3 => answer_s3(),
        RequestedEncryption::None if default_encryption => answer_s3(),
        RequestedEncryption::None => answer(None),
    }
}

fn answer_s3() -> Answer {
    Answer {
        sse: Some(ServerSideEncryption::from_static(ServerSideEncryption::AES256)),
        customer_algorithm: None,
        customer_key_md5: None,
    }
}

pub(super) async fn put_bucket_encryption(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let rules = &req.input.server_side_encryption_configuration.rules;
    let [rule] = rules.as_slice() else {
        return Err(S3Error::with_message(
            S3ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema.",
        ));
    };
    let Some(default) = &rule.apply_server_side_encryption_by_default else {
        return Err(S3Error::with_message(
            S3ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema.",
        ));
    };
    match default.sse_algorithm.as_str() {
        ServerSideEncryption::AES256 if default.kms_master_key_id.is_none() => {}
        ServerSideEncryption::AES256 => {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms or aws:kms:dsse",
            ));
        }
        ServerSideEncryption::AWS_KMS | ServerSideEncryption::AWS_KMS_DSSE => return Err(kms_refused()),
        _ => {
            return Err(S3Error::with_message(
                S3ErrorCode::MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema.",
            ));
        }
    }
    let bucket = &cx.bucket;
    bucket.set_default_encryption(true).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

pub(super) async fn get_bucket_encryption(
    cx: RequestContext<'_>,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let bucket = &cx.bucket;
    if !bucket.default_encryption() {
        return Err(fail(&req, StoreError::NoEncryptionConfiguration));
    }
    let rule = ServerSideEncryptionRule {
        apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
            kms_master_key_id: None,
            sse_algorithm: ServerSideEncryption::from_static(ServerSideEncryption::AES256),
        }),
        bucket_key_enabled: Some(false),
    };
    Ok(S3Response::new(GetBucketEncryptionOutput {
        server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration { rules: vec![rule] }),
    }))
}

pub(super) async fn delete_bucket_encryption(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    let bucket = &cx.bucket;
    bucket.set_default_encryption(false).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}
