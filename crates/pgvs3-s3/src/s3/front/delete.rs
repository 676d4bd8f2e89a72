//! Deletes: DeleteObject and DeleteObjects.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checks;
use super::context::RequestContext;
use super::lock;
use super::wire::{fail, to_etag_condition, to_system_time};
use crate::s3::authorize::PolicyGrant;
use crate::store::{self, DeleteCondition, StoreError};

pub(super) async fn delete_object(
    cx: RequestContext<'_>,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let bucket = &cx.bucket;
    let condition = DeleteCondition {
        if_match: to_etag_condition(&req.input.if_match),
        last_modified: to_system_time(&req.input.if_match_last_modified_time),
        size: req.input.if_match_size.map(size_condition),
    };
    let deleted = bucket
        .delete(
            &req.input.key,
            req.input.version_id.as_deref(),
            lock::bypasses_governance(&req.input.bypass_governance_retention),
            &condition,
        )
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: deleted.delete_marker.then_some(true),
        version_id: deleted.version_id,
        ..Default::default()
    }))
}

pub(super) async fn delete_objects(
    cx: RequestContext<'_>,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    checks::require_body_digest(&req.headers)?;
    let identifiers = &req.input.delete.objects;
    if identifiers.len() > 1000 {
        return Err(s3s::s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema."
        ));
    }
    let bucket = &cx.bucket;
    let (keys, mut errors) = deletable(&cx, &req);
    let mut deleted = Vec::with_capacity(keys.len());
    let bypass = lock::bypasses_governance(&req.input.bypass_governance_retention);
    // An entry's ETag, LastModifiedTime and Size are its delete's conditions.
    let condition = |id: &ObjectIdentifier| DeleteCondition {
        if_match: id.e_tag.as_ref().map(|etag| match etag.value() {
            "*" => store::EtagCondition::Any,
            value => store::EtagCondition::Tag(value.to_owned()),
        }),
        last_modified: to_system_time(&id.last_modified_time),
        size: id.size.map(size_condition),
    };
    // Unconditional entries of a plain bucket go in one statement; the others (each writes
    // a delete marker, deletes its version or checks its conditions) one at a time.
    let (one_by_one, batch): (Vec<_>, Vec<_>) = keys
        .into_iter()
        .partition(|id| bucket.versioning().is_some() || !condition(id).is_unconditional());
    if !batch.is_empty() {
        let names: Vec<String> = batch.iter().map(|id| id.key.clone()).collect();
        bucket.delete_many(&names).await.map_err(|e| fail(&req, e))?;
        deleted.extend(names.into_iter().map(|key| DeletedObject {
            key: Some(key),
            ..Default::default()
        }));
    }
    for id in one_by_one {
        match bucket
            .delete(&id.key, id.version_id.as_deref(), bypass, &condition(id))
            .await
        {
            Ok(outcome) => deleted.push(DeletedObject {
                key: Some(id.key.clone()),
                version_id: id.version_id.clone(),
                delete_marker: outcome.delete_marker.then_some(true),
                // The marker written, or the marker removed by its version id (S3 names the
                // version deleted then, as DeleteObject's `x-amz-version-id` does).
                delete_marker_version_id: outcome.version_id.filter(|_| outcome.delete_marker),
            }),
            Err(err) => {
                let err = fail(&req, err);
                let message = err.message().unwrap_or_default().to_owned();
                errors.push(entry_error(id, err.code().as_str(), message));
            }
        }
    }
    let quiet = req.input.delete.quiet.unwrap_or(false);
    let deleted = (!quiet).then_some(deleted);
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted,
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}

/// The entries of a DeleteObjects to delete, and the errors of those S3 would refuse, each
/// reported on its own.
fn deletable<'a>(
    cx: &RequestContext<'_>,
    req: &'a S3Request<DeleteObjectsInput>,
) -> (Vec<&'a ObjectIdentifier>, Vec<s3s::dto::Error>) {
    let identifiers = &req.input.delete.objects;
    let mut keys = Vec::with_capacity(identifiers.len());
    let mut errors = Vec::new();
    for id in identifiers {
        if id.key.len() > 1024 {
            errors.push(entry_error(id, "KeyTooLongError", StoreError::KeyTooLong.to_string()));
        } else if id.key.contains('\0') {
            errors.push(entry_error(
                id,
                "InvalidArgument",
                "Object keys cannot contain a NUL character.".into(),
            ));
        } else if let Err(err) = cx.bucket.version(id.version_id.as_deref()) {
            errors.push(entry_error(id, "NoSuchVersion", err.to_string()));
        } else if let Some(grant) = req.extensions.get::<PolicyGrant>()
            && !grant.may_delete(&id.key, id.version_id.is_some(), &req.headers)
        {
            errors.push(entry_error(id, "AccessDenied", "Access Denied".into()));
        } else {
            keys.push(id);
        }
    }
    (keys, errors)
}

/// A DeleteObjects entry's error.
fn entry_error(id: &ObjectIdentifier, code: &str, message: String) -> s3s::dto::Error {
    s3s::dto::Error {
        code: Some(code.into()),
        key: Some(id.key.clone()),
        message: Some(message),
        version_id: id.version_id.clone(),
    }
}

/// A delete's size condition: a negative size matches no object.
fn size_condition(size: i64) -> u64 {
    u64::try_from(size).unwrap_or(u64::MAX)
}
