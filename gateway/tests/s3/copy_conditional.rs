//! CopyObject and conditional requests through aws-sdk-s3: read preconditions (304/412 as S3
//! answers them), create-only and compare-and-swap writes under concurrency, and server-side
//! copies of every body shape.

use pgvs3_testkit as common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, MetadataDirective, ObjectIdentifier,
};
use common::s3::{
    answered_status, completion, copy_request, error_code, put_etag, put_object, put_request, read_object, refusal,
    set_versioning, start_upload, upload_part,
};
use common::{TestGateway, noise};

#[tokio::test]
async fn read_preconditions_answer_304_and_412_as_s3_does() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("cond").send().await.unwrap();
    let etag = put_etag(s3, "cond", "k", b"hello".to_vec()).await;
    let modified = s3
        .head_object()
        .bucket("cond")
        .key("k")
        .send()
        .await
        .unwrap()
        .last_modified
        .unwrap();
    let before = DateTime::from_secs(modified.secs() - 60);
    let after = DateTime::from_secs(modified.secs() + 60);
    let other = "\"0123456789abcdef0123456789abcdef\"";

    // (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since) -> status.
    type Case<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<DateTime>,
        Option<DateTime>,
        u16,
    );
    let cases: Vec<Case> = vec![
        (Some(&etag), None, None, None, 200),
        (Some("*"), None, None, None, 200),
        (Some(other), None, None, None, 412),
        (None, Some(&etag), None, None, 304),
        (None, Some("*"), None, None, 304),
        (None, Some(other), None, None, 200),
        (None, None, Some(before), None, 200),
        (None, None, Some(after), None, 304),
        (None, None, Some(modified), None, 304),
        (None, None, None, Some(before), 412),
        (None, None, None, Some(after), 200),
        (None, None, None, Some(modified), 200),
        // A passing If-Match overrides a failing If-Unmodified-Since.
        (Some(&etag), None, None, Some(before), 200),
        // A failing If-None-Match (ETag differs) overrides If-Modified-Since.
        (None, Some(other), Some(after), None, 200),
        // 412 wins over 304.
        (Some(other), Some(&etag), None, None, 412),
    ];
    for (if_match, if_none_match, modified_since, unmodified_since, expected) in cases {
        let case = format!("{if_match:?} {if_none_match:?} {modified_since:?} {unmodified_since:?}");
        let got = answered_status(
            &s3.get_object()
                .bucket("cond")
                .key("k")
                .set_if_match(if_match.map(str::to_owned))
                .set_if_none_match(if_none_match.map(str::to_owned))
                .set_if_modified_since(modified_since)
                .set_if_unmodified_since(unmodified_since)
                .send()
                .await,
        );
        assert_eq!(got, expected, "GET {case}");
        let got = answered_status(
            &s3.head_object()
                .bucket("cond")
                .key("k")
                .set_if_match(if_match.map(str::to_owned))
                .set_if_none_match(if_none_match.map(str::to_owned))
                .set_if_modified_since(modified_since)
                .set_if_unmodified_since(unmodified_since)
                .send()
                .await,
        );
        assert_eq!(got, expected, "HEAD {case}");
    }
    let failed = s3.get_object().bucket("cond").key("k").if_match(other).send().await;
    assert_eq!(error_code(&failed.unwrap_err()), "PreconditionFailed");
    // A 304 still names the version the client has.
    let cached = s3
        .get_object()
        .bucket("cond")
        .key("k")
        .if_none_match(&etag)
        .send()
        .await
        .unwrap_err();
    let headers = cached.raw_response().unwrap().headers();
    assert_eq!(headers.get("etag"), Some(etag.as_str()));
    let date = DateTime::from_str(
        headers.get("last-modified").unwrap(),
        aws_sdk_s3::primitives::DateTimeFormat::HttpDate,
    );
    assert_eq!(date.unwrap(), modified);
    let missing = s3.get_object().bucket("cond").key("nope").if_match(&etag).send().await;
    assert_eq!(error_code(&missing.unwrap_err()), "NoSuchKey");
}

#[tokio::test]
async fn conditional_puts_create_only_and_compare_and_swap() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("cond").send().await.unwrap();
    for (key, size) in [("inline", 100), ("chunked", 200_000)] {
        let first = noise(size, 1);
        let created = put_request(s3, "cond", key, first.clone())
            .if_none_match("*")
            .send()
            .await;
        let etag = created.unwrap().e_tag.unwrap();
        let again = put_request(s3, "cond", key, noise(size, 2))
            .if_none_match("*")
            .send()
            .await;
        assert_eq!(error_code(&again.unwrap_err()), "PreconditionFailed", "{key}");
        let stale = put_request(s3, "cond", key, noise(size, 3))
            .if_match("\"0123456789abcdef0123456789abcdef\"")
            .send()
            .await;
        assert_eq!(error_code(&stale.unwrap_err()), "PreconditionFailed", "{key}");
        assert!(
            read_object(s3, "cond", key).await == first,
            "{key} unchanged by refused writes"
        );
        let swapped = put_request(s3, "cond", key, noise(size, 4))
            .if_match(&etag)
            .send()
            .await
            .unwrap();
        assert_ne!(swapped.e_tag.unwrap(), etag);
        assert!(read_object(s3, "cond", key).await == noise(size, 4), "{key} swapped");
    }
    let missing = put_request(s3, "cond", "absent", b"x")
        .if_match("\"0123456789abcdef0123456789abcdef\"")
        .send()
        .await;
    assert_eq!(error_code(&missing.unwrap_err()), "NoSuchKey");
    let no_bucket = put_request(s3, "nobucket", "k", b"x").if_none_match("*").send().await;
    assert_eq!(error_code(&no_bucket.unwrap_err()), "NoSuchBucket");
    // Refused chunked writes left no chunks behind: only the two live bodies remain.
    let sql = gw.sql().await;
    let bodies: i64 = sql
        .query_one("SELECT count(DISTINCT body_id) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(
        bodies, 2,
        "the first and the swapped chunked body (the first is only retired)"
    );
}

/// Conditional deletes as S3 documents them: If-Match, x-amz-if-match-size and
/// x-amz-if-match-last-modified-time on DeleteObject (412 PreconditionFailed and nothing
/// deleted when one fails, 404 NoSuchKey for If-Match on a missing key), and the ETag, Size and
/// LastModifiedTime of DeleteObjects entries (that entry refused, the others deleted). They
/// apply to the current version in a versioned bucket; with a versionId they are refused
/// (501), never ignored. (They were ignored: every such delete answered 204 and deleted.)
#[tokio::test]
async fn conditional_deletes_delete_only_what_they_name() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("cond").send().await.unwrap();
    let wrong = "\"0123456789abcdef0123456789abcdef\"";
    let etag = put_etag(s3, "cond", "k", b"hello".to_vec()).await;
    let written = s3.head_object().bucket("cond").key("k").send().await.unwrap();
    let modified = *written.last_modified().unwrap();
    let another_time = DateTime::from_secs(modified.secs() - 60);
    let delete = |key: &str| s3.delete_object().bucket("cond").key(key);
    let refusals = [
        delete("k").if_match(wrong).send().await,
        delete("k").if_match(&etag).if_match_size(4).send().await,
        delete("k").if_match_last_modified_time(another_time).send().await,
    ];
    for refused in refusals {
        assert_eq!(refusal(&refused.unwrap_err()), (412, "PreconditionFailed".to_owned()));
    }
    assert_eq!(
        read_object(s3, "cond", "k").await,
        b"hello",
        "refused deletes deleted nothing"
    );
    delete("k")
        .if_match(&etag)
        .if_match_size(5)
        .if_match_last_modified_time(modified)
        .send()
        .await
        .unwrap();
    assert!(
        s3.head_object().bucket("cond").key("k").send().await.is_err(),
        "deleted"
    );
    let missing = delete("k").if_match(&etag).send().await.unwrap_err();
    assert_eq!(error_code(&missing), "NoSuchKey");
    let missing = delete("k").if_match("*").send().await.unwrap_err();
    assert_eq!(error_code(&missing), "NoSuchKey");
    put_etag(s3, "cond", "any", b"x".to_vec()).await;
    delete("any").if_match("*").send().await.unwrap();

    // DeleteObjects: each entry's conditions are its own.
    let etags: Vec<String> =
        futures::future::join_all(["a", "b", "c", "d"].map(|key| put_etag(s3, "cond", key, key.as_bytes().to_vec())))
            .await;
    let entry = |key: &str| ObjectIdentifier::builder().key(key);
    let out = s3
        .delete_objects()
        .bucket("cond")
        .delete(
            Delete::builder()
                .objects(entry("a").e_tag(wrong).build().unwrap())
                .objects(entry("b").e_tag(&etags[1]).build().unwrap())
                .objects(entry("c").size(2).build().unwrap())
                .objects(entry("d").build().unwrap())
                .objects(entry("gone").e_tag(&etags[1]).build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mut refused: Vec<(&str, &str)> = out
        .errors()
        .iter()
        .map(|e| (e.key().unwrap(), e.code().unwrap()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [
            ("a", "PreconditionFailed"),
            ("c", "PreconditionFailed"),
            ("gone", "NoSuchKey")
        ]
    );
    let mut deleted: Vec<&str> = out.deleted().iter().map(|d| d.key().unwrap()).collect();
    deleted.sort();
    assert_eq!(deleted, ["b", "d"]);
    assert_eq!(read_object(s3, "cond", "a").await, b"a");
    assert_eq!(read_object(s3, "cond", "c").await, b"c");

    // A versioned bucket: the conditions are on the current version.
    s3.create_bucket().bucket("vcond").send().await.unwrap();
    set_versioning(s3, "vcond", BucketVersioningStatus::Enabled).await;
    let old = put_request(s3, "vcond", "k", b"old".to_vec()).send().await.unwrap();
    let new = put_request(s3, "vcond", "k", b"new".to_vec()).send().await.unwrap();
    let vdelete = || s3.delete_object().bucket("vcond").key("k");
    let stale = vdelete()
        .if_match(old.e_tag.as_deref().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&stale), "PreconditionFailed", "a noncurrent version's ETag");
    let by_version = vdelete()
        .version_id(old.version_id.as_deref().unwrap())
        .if_match(old.e_tag.as_deref().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(refusal(&by_version), (501, "NotImplemented".to_owned()));
    let marked = vdelete().if_match(new.e_tag.as_deref().unwrap()).send().await.unwrap();
    assert_eq!(marked.delete_marker, Some(true));
    let hidden = vdelete().if_match("*").send().await.unwrap_err();
    assert_eq!(
        error_code(&hidden),
        "NoSuchKey",
        "the current version is a delete marker"
    );
    let versions = s3.list_object_versions().bucket("vcond").send().await.unwrap();
    assert_eq!(versions.versions().len(), 2, "both versions kept behind one marker");
    assert_eq!(versions.delete_markers().len(), 1);

    // Of concurrent deletes conditional on the same current version, exactly one deletes it
    // (writes one marker); the others find no current version left to match.
    let current = put_request(s3, "vcond", "k", b"again".to_vec()).send().await.unwrap();
    let etag = current.e_tag.unwrap();
    let deletes = (0..4).map(|_| {
        let (s3, etag) = (s3.clone(), etag.clone());
        tokio::spawn(async move { s3.delete_object().bucket("vcond").key("k").if_match(etag).send().await })
    });
    let mut answers = Vec::new();
    for delete in deletes.collect::<Vec<_>>() {
        answers.push(match delete.await.unwrap() {
            Ok(_) => "deleted".to_owned(),
            Err(err) => error_code(&err),
        });
    }
    answers.sort();
    assert_eq!(answers, ["NoSuchKey", "NoSuchKey", "NoSuchKey", "deleted"]);
    let versions = s3.list_object_versions().bucket("vcond").send().await.unwrap();
    assert_eq!(versions.delete_markers().len(), 2, "one more marker");
}

/// A conditional delete racing an overwrite of the key never deletes the object the overwrite
/// wrote: the delete's conditions are judged on the row it then deletes, or, when there is no
/// object, it deletes nothing (a check-then-act delete would remove the new object, whose ETag or
/// size it never compared). Each round: an `If-Match` of the old ETag, and an
/// `x-amz-if-match-size` no object has on a key not yet written, each against a PUT of new
/// bytes; in a plain and in a versioned bucket (where the loss would be a marker hiding it).
#[tokio::test]
async fn a_conditional_delete_racing_an_overwrite_never_deletes_the_new_object() {
    let gw = TestGateway::start().await;
    let s3 = Arc::new(gw.client.clone());
    for (bucket, versioned) in [("race", false), ("vrace", true)] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
        if versioned {
            set_versioning(&s3, bucket, BucketVersioningStatus::Enabled).await;
        }
        for round in 0..24 {
            let key = format!("k{round}");
            let by_etag = round % 2 == 0;
            let old_etag = if by_etag {
                Some(put_etag(&s3, bucket, &key, b"old".to_vec()).await)
            } else {
                None
            };
            let delete = {
                let (s3, key) = (Arc::clone(&s3), key.clone());
                tokio::spawn(async move {
                    let request = s3.delete_object().bucket(bucket).key(key);
                    let request = match old_etag {
                        Some(etag) => request.if_match(etag),
                        None => request.if_match_size(999),
                    };
                    answered_status(&request.send().await)
                })
            };
            let write = {
                let (s3, key) = (Arc::clone(&s3), key.clone());
                tokio::spawn(async move { put_request(&s3, bucket, &key, b"new".to_vec()).send().await.unwrap() })
            };
            let (deleted, _) = (delete.await.unwrap(), write.await.unwrap());
            // 200 is the SDK's view of a success (204).
            assert!(deleted == 200 || deleted == 412, "{bucket} round {round}: {deleted}");
            let read = s3.get_object().bucket(bucket).key(&key).send().await;
            let body = match read {
                Ok(read) => read.body.collect().await.unwrap().into_bytes().to_vec(),
                Err(err) => panic!("{bucket} round {round}: the new object is gone: {}", error_code(&err)),
            };
            assert_eq!(body, b"new", "{bucket} round {round}");
        }
    }
}

#[tokio::test]
async fn of_concurrent_conditional_writers_exactly_one_wins() {
    let gw = TestGateway::start().await;
    let s3 = Arc::new(gw.client.clone());
    s3.create_bucket().bucket("cond").send().await.unwrap();
    const WRITERS: u64 = 12;
    for (round, size) in [(0u64, 1000usize), (1, 150_000)] {
        let key = format!("race-{round}");
        // Create-only: every writer tries to create the key at once.
        let attempts = (0..WRITERS).map(|writer| {
            let s3 = Arc::clone(&s3);
            let key = key.clone();
            tokio::spawn(async move {
                let body = noise(size, round * 100 + writer);
                let outcome = put_request(&s3, "cond", &key, body).if_none_match("*").send().await;
                (writer, answered_status(&outcome))
            })
        });
        let results: Vec<(u64, u16)> = futures::future::try_join_all(attempts).await.unwrap();
        let winners: Vec<u64> = results.iter().filter(|(_, s)| *s == 200).map(|(w, _)| *w).collect();
        assert_eq!(winners.len(), 1, "create-only, size {size}: {results:?}");
        assert!(results.iter().all(|(_, s)| *s == 200 || *s == 412), "{results:?}");
        assert!(read_object(&s3, "cond", &key).await == noise(size, round * 100 + winners[0]));

        // Compare-and-swap: every writer read the same ETag and tries to replace it.
        let etag = s3
            .head_object()
            .bucket("cond")
            .key(&key)
            .send()
            .await
            .unwrap()
            .e_tag
            .unwrap();
        let attempts = (0..WRITERS).map(|writer| {
            let s3 = Arc::clone(&s3);
            let (key, etag) = (key.clone(), etag.clone());
            tokio::spawn(async move {
                let body = noise(size, round * 100 + 50 + writer);
                let outcome = put_request(&s3, "cond", &key, body).if_match(&etag).send().await;
                (writer, answered_status(&outcome))
            })
        });
        let results: Vec<(u64, u16)> = futures::future::try_join_all(attempts).await.unwrap();
        let winners: Vec<u64> = results.iter().filter(|(_, s)| *s == 200).map(|(w, _)| *w).collect();
        assert_eq!(winners.len(), 1, "compare-and-swap, size {size}: {results:?}");
        assert!(read_object(&s3, "cond", &key).await == noise(size, round * 100 + 50 + winners[0]));
    }
}

#[tokio::test]
async fn conditional_completion_refuses_an_existing_key_and_keeps_the_upload() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("cond").send().await.unwrap();
    put_object(s3, "cond", "k", b"already here").await;
    let upload_id = start_upload(s3, "cond", "k").await;
    let body = noise(1234, 5);
    let etag = upload_part(s3, "cond", "k", &upload_id, 1, &body).await;
    let parts = completion(&[(1, &etag)]);
    let refused = s3
        .complete_multipart_upload()
        .bucket("cond")
        .key("k")
        .upload_id(&upload_id)
        .if_none_match("*")
        .multipart_upload(parts.clone())
        .send()
        .await;
    assert_eq!(error_code(&refused.unwrap_err()), "PreconditionFailed");
    assert_eq!(read_object(s3, "cond", "k").await, b"already here");
    let current = s3
        .head_object()
        .bucket("cond")
        .key("k")
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();
    s3.complete_multipart_upload()
        .bucket("cond")
        .key("k")
        .upload_id(&upload_id)
        .if_match(&current)
        .multipart_upload(parts)
        .send()
        .await
        .unwrap();
    assert!(read_object(s3, "cond", "k").await == body);
}

#[tokio::test]
async fn copies_share_nothing_but_bytes_and_follow_the_metadata_directive() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("src").send().await.unwrap();
    s3.create_bucket().bucket("dst").send().await.unwrap();
    let small = b"tiny".to_vec();
    let large = noise(300_000, 9);
    put_request(s3, "src", "small", small.clone())
        .content_type("text/plain")
        .metadata("colour", "blue")
        .send()
        .await
        .unwrap();
    let large_etag = put_etag(s3, "src", "large", large.clone()).await;
    // A multipart source: one 5 MiB part and a short one.
    let upload_id = start_upload(s3, "src", "multi").await;
    let parts = [noise(5 * 1024 * 1024, 10), noise(4321, 11)];
    let mut completed = CompletedMultipartUpload::builder();
    for (i, part) in parts.iter().enumerate() {
        let number = i as i32 + 1;
        let etag = upload_part(s3, "src", "multi", &upload_id, number, part).await;
        completed = completed.parts(CompletedPart::builder().part_number(number).e_tag(etag).build());
    }
    let multi_etag = s3
        .complete_multipart_upload()
        .bucket("src")
        .key("multi")
        .upload_id(&upload_id)
        .multipart_upload(completed.build())
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();
    let multi = parts.concat();

    for (key, bytes, etag) in [("large", &large, &large_etag), ("multi", &multi, &multi_etag)] {
        let copied = copy_request(s3, "dst", &format!("copy-of-{key}"), &format!("src/{key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(copied.copy_object_result.unwrap().e_tag.as_ref(), Some(etag));
        assert!(
            read_object(s3, "dst", &format!("copy-of-{key}")).await == *bytes,
            "{key}"
        );
    }
    let ranged = s3
        .get_object()
        .bucket("dst")
        .key("copy-of-multi")
        .range("bytes=5242870-5242889")
        .send()
        .await
        .unwrap();
    let ranged = ranged.body.collect().await.unwrap().into_bytes();
    assert_eq!(ranged.as_ref(), &multi[5_242_870..5_242_890]);

    // UploadPartCopy: a 5 MiB part copied whole from the multipart source, then a range of
    // the chunked one.
    let upload_id = start_upload(s3, "dst", "assembled").await;
    let mut completed = CompletedMultipartUpload::builder();
    for (number, source, range) in [
        (1, "src/multi", Some("bytes=0-5242879")),
        (2, "src/large", Some("bytes=1000-8999")),
    ] {
        let copied = s3
            .upload_part_copy()
            .bucket("dst")
            .key("assembled")
            .upload_id(&upload_id)
            .part_number(number)
            .copy_source(source)
            .set_copy_source_range(range.map(str::to_owned))
            .send()
            .await
            .unwrap();
        let etag = copied.copy_part_result.unwrap().e_tag.unwrap();
        completed = completed.parts(CompletedPart::builder().part_number(number).e_tag(etag).build());
    }
    s3.complete_multipart_upload()
        .bucket("dst")
        .key("assembled")
        .upload_id(&upload_id)
        .multipart_upload(completed.build())
        .send()
        .await
        .unwrap();
    let assembled = [&multi[..5_242_880], &large[1000..9000]].concat();
    assert!(read_object(s3, "dst", "assembled").await == assembled);
    let bad_range = s3
        .upload_part_copy()
        .bucket("dst")
        .key("assembled")
        .upload_id(&upload_id)
        .part_number(3)
        .copy_source("src/large")
        .copy_source_range("bytes=5-")
        .send()
        .await;
    assert_eq!(error_code(&bad_range.unwrap_err()), "InvalidArgument");

    // COPY keeps the metadata, REPLACE takes the request's.
    copy_request(s3, "dst", "kept", "src/small").send().await.unwrap();
    let kept = s3.head_object().bucket("dst").key("kept").send().await.unwrap();
    assert_eq!(kept.content_type.as_deref(), Some("text/plain"));
    assert_eq!(kept.metadata.unwrap().get("colour").map(String::as_str), Some("blue"));
    copy_request(s3, "src", "small", "src/small")
        .metadata_directive(MetadataDirective::Replace)
        .content_type("application/json")
        .metadata("colour", "red")
        .send()
        .await
        .unwrap();
    let replaced = s3.head_object().bucket("src").key("small").send().await.unwrap();
    assert_eq!(replaced.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        replaced.metadata.unwrap().get("colour").map(String::as_str),
        Some("red")
    );
    assert_eq!(read_object(s3, "src", "small").await, small);

    // Bad sources and failed source preconditions.
    let to_itself = copy_request(s3, "src", "small", "src/small").send().await;
    assert_eq!(error_code(&to_itself.unwrap_err()), "InvalidRequest");
    let missing = copy_request(s3, "dst", "x", "src/nope").send().await;
    assert_eq!(error_code(&missing.unwrap_err()), "NoSuchKey");
    let no_bucket = copy_request(s3, "dst", "x", "nobucket/k").send().await;
    assert_eq!(error_code(&no_bucket.unwrap_err()), "NoSuchBucket");
    let malformed = copy_request(s3, "dst", "x", "just-a-bucket").send().await;
    assert_eq!(error_code(&malformed.unwrap_err()), "InvalidArgument");
    let stale = copy_request(s3, "dst", "x", "src/large")
        .copy_source_if_match("\"0123456789abcdef0123456789abcdef\"")
        .send()
        .await;
    assert_eq!(error_code(&stale.unwrap_err()), "PreconditionFailed");
    let unchanged = copy_request(s3, "dst", "x", "src/large")
        .copy_source_if_none_match(&large_etag)
        .send()
        .await;
    assert_eq!(error_code(&unchanged.unwrap_err()), "PreconditionFailed");
    let fresh = copy_request(s3, "dst", "x", "src/large")
        .copy_source_if_modified_since(DateTime::from(SystemTime::now() - Duration::from_secs(3600)))
        .send()
        .await;
    assert!(fresh.is_ok());

    // The copies own their bodies: deleting the sources and reaping leaves them intact.
    for key in ["small", "large", "multi"] {
        s3.delete_object().bucket("src").key(key).send().await.unwrap();
    }
    for _ in 0..3 {
        gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    }
    assert!(read_object(s3, "dst", "copy-of-large").await == large);
    assert!(read_object(s3, "dst", "copy-of-multi").await == multi);
    assert_eq!(read_object(s3, "dst", "kept").await, small);
}

/// CopyObject's `If-None-Match` / `If-Match` are conditions on its destination, as on a
/// PutObject (AWS's conditional copies): both where the bytes stay inside PostgreSQL and where
/// they stream through the gateway (`x-amz-checksum-algorithm`).
#[tokio::test]
async fn conditional_copies_write_only_when_the_destination_allows() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("ccopy").send().await.unwrap();
    let source_etag = put_etag(s3, "ccopy", "csrc", b"the source".to_vec()).await;
    let other = "\"0123456789abcdef0123456789abcdef\"";
    for through_gateway in [false, true] {
        let dst = format!("cdst-{through_gateway}");
        let copy = || {
            let request = copy_request(s3, "ccopy", &dst, "ccopy/csrc");
            match through_gateway {
                true => request.checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32),
                false => request,
            }
        };
        let dst_etag = put_etag(s3, "ccopy", &dst, b"the destination".to_vec()).await;

        let refused = copy().if_none_match("*").send().await.unwrap_err();
        assert_eq!(refusal(&refused), (412, "PreconditionFailed".into()), "{dst}");
        let refused = copy().if_match(other).send().await.unwrap_err();
        assert_eq!(refusal(&refused), (412, "PreconditionFailed".into()), "{dst}");
        let refused = copy().if_none_match(&dst_etag).send().await.unwrap_err();
        assert_eq!(refusal(&refused), (412, "PreconditionFailed".into()), "{dst}");
        assert_eq!(read_object(s3, "ccopy", &dst).await, b"the destination", "{dst}");

        copy().if_match(&dst_etag).send().await.unwrap();
        assert_eq!(read_object(s3, "ccopy", &dst).await, b"the source", "{dst}");
        // The copy is now what the destination holds: the old ETag no longer matches.
        let refused = copy().if_match(&dst_etag).send().await.unwrap_err();
        assert_eq!(refusal(&refused), (412, "PreconditionFailed".into()), "{dst}");
        copy().if_none_match(other).send().await.unwrap();

        let missing = format!("missing-{through_gateway}");
        let refused = copy_request(s3, "ccopy", &missing, "ccopy/csrc")
            .if_match(&source_etag)
            .send()
            .await
            .unwrap_err();
        assert_eq!(refusal(&refused), (404, "NoSuchKey".into()), "{missing}");
        let refused = copy_request(s3, "ccopy", &missing, "ccopy/csrc")
            .if_match("*")
            .send()
            .await
            .unwrap_err();
        assert_eq!(refusal(&refused), (404, "NoSuchKey".into()), "{missing}");
        assert!(
            s3.head_object().bucket("ccopy").key(&missing).send().await.is_err(),
            "a refused copy creates nothing"
        );
        copy_request(s3, "ccopy", &missing, "ccopy/csrc")
            .if_none_match("*")
            .send()
            .await
            .unwrap();
        assert_eq!(read_object(s3, "ccopy", &missing).await, b"the source");
    }
    gw.stop().await;
}
