//! Listings: ListObjects, ListObjectsV2 and ListObjectVersions.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::acl;
use super::context::RequestContext;
use super::wire::{fail, timestamp};
use crate::bucket::BucketHandle;
use crate::store::{self, Catalog, ListRequest, StoreError};

pub(super) async fn list_objects_v2(
    cx: RequestContext<'_>,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = &req.input;
    let request = ListRequest {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone(),
        start_after: input.start_after.clone(),
        // An empty token is no token (S3 starts from the beginning).
        continuation: input.continuation_token.clone().filter(|token| !token.is_empty()),
        max_keys: max_keys(input.max_keys)?,
    };
    let fetch_owner = input.fetch_owner.unwrap_or(false);
    let url_encode = url_encoding(input.encoding_type.as_ref())?;
    let bucket = &cx.bucket;
    let listing = listing(bucket, cx.front.buckets.catalog(), &request, url_encode, fetch_owner)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket.clone()),
        prefix: Some(listing.encode(request.prefix)),
        delimiter: request.delimiter.filter(|d| !d.is_empty()).map(|d| listing.encode(d)),
        start_after: request.start_after.map(|s| listing.encode(s)),
        max_keys: Some(request.max_keys.min(i32::MAX as usize) as i32),
        key_count: Some(listing.key_count),
        continuation_token: input.continuation_token.clone(),
        is_truncated: Some(listing.truncated),
        next_continuation_token: listing.next_token,
        contents: Some(listing.contents),
        common_prefixes: Some(listing.common_prefixes),
        encoding_type: input.encoding_type.clone(),
        ..Default::default()
    }))
}

pub(super) async fn list_objects(
    cx: RequestContext<'_>,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = &req.input;
    let request = ListRequest {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone(),
        start_after: input.marker.clone(),
        continuation: None,
        max_keys: max_keys(input.max_keys)?,
    };
    let url_encode = url_encoding(input.encoding_type.as_ref())?;
    let bucket = &cx.bucket;
    let listing = listing(bucket, cx.front.buckets.catalog(), &request, url_encode, true)
        .await
        .map_err(|e| fail(&req, e))?;
    // S3 sends NextMarker only with a delimiter; without one, clients resume after the last key.
    let next_marker = listing
        .next_marker
        .clone()
        .filter(|_| request.delimiter.as_deref().is_some_and(|d| !d.is_empty()));
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket.clone()),
        // S3 sends a v1 listing's Prefix as it was sent, `encoding-type=url` or not (botocore,
        // which asks every v1 listing for url encoding, decodes every field but this one).
        prefix: Some(request.prefix),
        marker: Some(input.marker.clone().map(|m| listing.encode(m)).unwrap_or_default()),
        delimiter: request.delimiter.filter(|d| !d.is_empty()).map(|d| listing.encode(d)),
        max_keys: Some(request.max_keys.min(i32::MAX as usize) as i32),
        is_truncated: Some(listing.truncated),
        next_marker,
        contents: Some(listing.contents),
        common_prefixes: Some(listing.common_prefixes),
        encoding_type: input.encoding_type.clone(),
        ..Default::default()
    }))
}

/// Every version of every key, keys in order and each key's versions newest first; a
/// bucket that never had versioning lists each object as its only version, "null".
pub(super) async fn list_object_versions(
    cx: RequestContext<'_>,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = &req.input;
    let request = store::VersionsRequest {
        list: ListRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            start_after: input.key_marker.clone().filter(|marker| !marker.is_empty()),
            continuation: None,
            max_keys: max_keys(input.max_keys)?,
        },
        version_id_marker: input.version_id_marker.clone().filter(|marker| !marker.is_empty()),
    };
    let encode = key_encoder(url_encoding(input.encoding_type.as_ref())?);
    let bucket = &cx.bucket;
    let page = bucket.list_versions(&request).await.map_err(|e| fail(&req, e))?;
    let owner = acl::bucket_owner(bucket, cx.front.buckets.catalog());
    let (versions, delete_markers) = version_entries(page.entries, &owner, &encode);
    let (next_key_marker, next_version_id_marker) = match page.next {
        Some((key, version)) => (Some(encode(key)), version),
        None => (None, None),
    };
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket.clone()),
        prefix: Some(encode(request.list.prefix)),
        delimiter: request.list.delimiter.filter(|d| !d.is_empty()).map(encode),
        key_marker: Some(encode(input.key_marker.clone().unwrap_or_default())),
        version_id_marker: Some(input.version_id_marker.clone().unwrap_or_default()),
        max_keys: Some(request.list.max_keys.min(i32::MAX as usize) as i32),
        is_truncated: Some(next_key_marker.is_some()),
        next_key_marker,
        next_version_id_marker,
        versions: Some(versions),
        delete_markers: Some(delete_markers),
        common_prefixes: Some(
            page.common_prefixes
                .into_iter()
                .map(|prefix| CommonPrefix {
                    prefix: Some(encode(prefix)),
                })
                .collect(),
        ),
        encoding_type: input.encoding_type.clone(),
        ..Default::default()
    }))
}

/// A page's entries as ListObjectVersions answers them: versions and delete markers apart.
fn version_entries(
    entries: Vec<store::VersionEntry>,
    owner: &Owner,
    encode: &impl Fn(String) -> String,
) -> (Vec<ObjectVersion>, Vec<DeleteMarkerEntry>) {
    let mut versions = Vec::new();
    let mut delete_markers = Vec::new();
    for entry in entries {
        if entry.delete_marker {
            delete_markers.push(DeleteMarkerEntry {
                is_latest: Some(entry.is_latest),
                key: Some(encode(entry.key)),
                last_modified: Some(timestamp(entry.last_modified)),
                owner: Some(owner.clone()),
                version_id: Some(entry.version_id),
            });
        } else {
            versions.push(ObjectVersion {
                e_tag: Some(ETag::Strong(entry.etag)),
                is_latest: Some(entry.is_latest),
                key: Some(encode(entry.key)),
                last_modified: Some(timestamp(entry.last_modified)),
                owner: Some(owner.clone()),
                size: Some(entry.size as i64),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                version_id: Some(entry.version_id),
                ..Default::default()
            });
        }
    }
    (versions, delete_markers)
}

/// `max-keys` as S3 checks it; absent means 1,000.
fn max_keys(max_keys: Option<i32>) -> S3Result<usize> {
    match max_keys {
        Some(n) if n < 0 => Err(s3s::s3_error!(
            InvalidArgument,
            "Argument maxKeys must be an integer between 0 and 2147483647"
        )),
        Some(n) => Ok(n as usize),
        None => Ok(store::LIST_MAX_KEYS),
    }
}

/// One page of a listing in wire types, shared by ListObjects, ListObjectsV2 and
/// ListObjectVersions.
struct Listing {
    contents: Vec<Object>,
    common_prefixes: Vec<CommonPrefix>,
    key_count: i32,
    truncated: bool,
    next_token: Option<String>,
    /// The last key or common prefix of a cut page (encoded like the keys).
    next_marker: Option<String>,
    url_encode: bool,
}

impl Listing {
    fn encode(&self, text: String) -> String {
        encode_key(self.url_encode, text)
    }
}

/// Whether a listing's `encoding-type` asks for its key fields percent-encoded: `url` does,
/// none does not, and any other is refused as S3 refuses it.
pub(super) fn url_encoding(encoding_type: Option<&EncodingType>) -> S3Result<bool> {
    match encoding_type.map(EncodingType::as_str) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(_) => Err(s3s::s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request"
        )),
    }
}

/// How a listing answers its key fields: percent-encoded for `encoding-type=url`, as they are
/// otherwise.
pub(super) fn key_encoder(url_encode: bool) -> impl Fn(String) -> String + Copy {
    move |text| encode_key(url_encode, text)
}

fn encode_key(url_encode: bool, text: String) -> String {
    if url_encode {
        crate::s3::percent_encode(&text, true)
    } else {
        text
    }
}

/// One page of `bucket`'s listing in wire types (`fetch_owner`: each object with its owner).
async fn listing(
    bucket: &BucketHandle<'_>,
    catalog: &Catalog,
    request: &ListRequest,
    url_encode: bool,
    fetch_owner: bool,
) -> Result<Listing, StoreError> {
    let page = bucket.list(request).await?;
    let owner = fetch_owner.then(|| acl::bucket_owner(bucket, catalog));
    let mut listing = Listing {
        contents: Vec::new(),
        common_prefixes: Vec::new(),
        key_count: (page.objects.len() + page.common_prefixes.len()) as i32,
        truncated: page.next_token.is_some(),
        next_token: page.next_token.clone(),
        next_marker: None,
        url_encode,
    };
    listing.next_marker = page
        .next_token
        .is_some()
        .then(|| page.last_entry.clone().map(|last| listing.encode(last)))
        .flatten();
    listing.contents = page
        .objects
        .into_iter()
        .map(|object| Object {
            key: Some(listing.encode(object.key)),
            size: Some(object.size as i64),
            e_tag: Some(ETag::Strong(object.etag)),
            last_modified: Some(timestamp(object.last_modified)),
            storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
            owner: owner.clone(),
            ..Default::default()
        })
        .collect();
    listing.common_prefixes = page
        .common_prefixes
        .into_iter()
        .map(|prefix| CommonPrefix {
            prefix: Some(listing.encode(prefix)),
        })
        .collect();
    Ok(listing)
}
