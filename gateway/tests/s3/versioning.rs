//! S3 versioning with aws-sdk-s3, as AWS S3 behaves: version ids on writes, reads by version,
//! delete markers and their 404/405, permanent deletes that bring the previous version back,
//! suspended buckets and the null version, ListObjectVersions paged by key and version-id
//! markers over more versions than one page, copies from a version, multipart completions,
//! and bodies of deleted versions reaped. RESP (redis-rs) on a versioned bucket writes versions
//! and delete markers S3 sees, under the bucket's default retention. Concurrent overwrites of a
//! key number their versions in the order they commit.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{BucketVersioningStatus, Delete, ObjectIdentifier};
use common::s3::{completion, copy_request, http_status, put_object, put_request, set_versioning, upload_part};
use common::{TestGateway, noise};
use pgvs3_gateway::store::{Access, DeleteCondition, Principal};

async fn put(s3: &Client, bucket: &str, key: &str, body: &[u8]) -> Option<String> {
    put_object(s3, bucket, key, body).await.version_id
}

async fn get_version(
    s3: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<(Vec<u8>, Option<String>), (u16, Option<String>)> {
    match s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
    {
        Ok(out) => {
            let version = out.version_id.clone();
            Ok((out.body.collect().await.unwrap().to_vec(), version))
        }
        Err(err) => {
            let raw = err.raw_response().unwrap();
            let status = raw.status().as_u16();
            let marker = raw.headers().get("x-amz-delete-marker").map(str::to_owned);
            Err((status, marker))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versions_delete_markers_and_permanent_deletes() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("ver").send().await.unwrap();
    let status = s3.get_bucket_versioning().bucket("ver").send().await.unwrap();
    assert_eq!(status.status, None, "a new bucket has no versioning status");
    assert_eq!(
        put(s3, "ver", "before", b"null version").await,
        None,
        "unversioned: no version id"
    );

    set_versioning(s3, "ver", BucketVersioningStatus::Enabled).await;
    let status = s3.get_bucket_versioning().bucket("ver").send().await.unwrap();
    assert_eq!(status.status, Some(BucketVersioningStatus::Enabled));
    let v1 = put(s3, "ver", "doc", b"one").await.expect("a version id");
    let v2 = put(s3, "ver", "doc", &noise(200_000, 2)).await.expect("a version id");
    assert_ne!(v1, v2);
    assert_eq!(
        get_version(s3, "ver", "doc", None).await.unwrap(),
        (noise(200_000, 2), Some(v2.clone()))
    );
    assert_eq!(
        get_version(s3, "ver", "doc", Some(&v1)).await.unwrap(),
        (b"one".to_vec(), Some(v1.clone()))
    );
    let head = s3
        .head_object()
        .bucket("ver")
        .key("doc")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (head.content_length, head.version_id.as_deref()),
        (Some(3), Some(v1.as_str()))
    );
    // The object written before versioning is the null version.
    assert_eq!(
        get_version(s3, "ver", "before", Some("null")).await.unwrap().0,
        b"null version"
    );

    // A plain DELETE writes a delete marker: the key reads as missing, its versions stay.
    let deleted = s3.delete_object().bucket("ver").key("doc").send().await.unwrap();
    assert_eq!(deleted.delete_marker, Some(true));
    let marker = deleted.version_id.expect("the marker's version id");
    assert_eq!(
        get_version(s3, "ver", "doc", None).await,
        Err((404, Some("true".into())))
    );
    assert_eq!(
        get_version(s3, "ver", "doc", Some(&marker)).await,
        Err((405, Some("true".into())))
    );
    assert_eq!(
        get_version(s3, "ver", "doc", Some(&v2)).await.unwrap().0,
        noise(200_000, 2)
    );
    let missing = get_version(s3, "ver", "doc", Some("00000000000000ff")).await;
    assert_eq!(missing.map(|_| ()), Err((404, None)), "NoSuchVersion");
    let bogus = s3
        .get_object()
        .bucket("ver")
        .key("doc")
        .version_id("not-a-version")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&bogus), 400);

    // Deleting the marker brings v2 back; deleting v2 for good brings v1 back.
    let undone = s3
        .delete_object()
        .bucket("ver")
        .key("doc")
        .version_id(&marker)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (undone.delete_marker, undone.version_id.as_deref()),
        (Some(true), Some(marker.as_str()))
    );
    assert_eq!(get_version(s3, "ver", "doc", None).await.unwrap().1, Some(v2.clone()));
    s3.delete_object()
        .bucket("ver")
        .key("doc")
        .version_id(&v2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        get_version(s3, "ver", "doc", None).await.unwrap(),
        (b"one".to_vec(), Some(v1.clone()))
    );
    assert_eq!(
        get_version(s3, "ver", "doc", Some(&v2)).await.map(|_| ()),
        Err((404, None))
    );

    // The deleted version's chunked body is retired and reaped; v1's stays.
    let store = &gw.gateway.store;
    let reaped = store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies, 1, "{reaped:?}");
    assert_eq!(get_version(s3, "ver", "doc", Some(&v1)).await.unwrap().0, b"one");

    // A bucket with versions is not empty, even when every key reads as deleted.
    s3.delete_object().bucket("ver").key("doc").send().await.unwrap();
    s3.delete_object().bucket("ver").key("before").send().await.unwrap();
    let refused = s3.delete_bucket().bucket("ver").send().await.unwrap_err();
    assert_eq!(http_status(&refused), 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_suspended_bucket_writes_and_deletes_the_null_version() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sus").send().await.unwrap();
    set_versioning(s3, "sus", BucketVersioningStatus::Enabled).await;
    let kept = put(s3, "sus", "k", b"versioned").await.unwrap();
    set_versioning(s3, "sus", BucketVersioningStatus::Suspended).await;
    // The null version is written without x-amz-version-id, as S3's PutObject reference shows
    // for a versioning-suspended bucket (Ceph's s3-tests
    // test_versioning_bucket_atomic_upload_return_version_id).
    assert_eq!(put(s3, "sus", "k", b"null one").await.as_deref(), None);
    assert_eq!(
        put(s3, "sus", "k", &noise(100_000, 3)).await.as_deref(),
        None,
        "replaces the null version"
    );
    let versions = s3.list_object_versions().bucket("sus").send().await.unwrap();
    let ids: Vec<(&str, bool)> = versions
        .versions()
        .iter()
        .map(|v| (v.version_id().unwrap(), v.is_latest().unwrap()))
        .collect();
    assert_eq!(ids, [("null", true), (kept.as_str(), false)]);
    // A suspended DELETE removes the null version and leaves a null delete marker.
    let deleted = s3.delete_object().bucket("sus").key("k").send().await.unwrap();
    assert_eq!(
        (deleted.delete_marker, deleted.version_id.as_deref()),
        (Some(true), Some("null"))
    );
    let versions = s3.list_object_versions().bucket("sus").send().await.unwrap();
    assert_eq!(versions.versions().len(), 1);
    assert_eq!(versions.delete_markers()[0].version_id(), Some("null"));
    assert_eq!(versions.delete_markers()[0].is_latest(), Some(true));
    assert_eq!(get_version(s3, "sus", "k", Some(&kept)).await.unwrap().0, b"versioned");
    let reaped = gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies, 1, "the replaced 100 kB null version's body: {reaped:?}");
}

/// A write of the null version is answered without `x-amz-version-id`, as S3's PutObject
/// reference shows for a versioning-suspended bucket; so are a copy and a multipart completion
/// into one (Ceph's s3-tests `test_versioning_bucket_atomic_upload_return_version_id`,
/// `test_versioning_bucket_multipart_upload_return_version_id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_suspended_bucket_names_no_version_on_writes() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sus").send().await.unwrap();
    set_versioning(s3, "sus", BucketVersioningStatus::Suspended).await;
    assert_eq!(put(s3, "sus", "k", b"null one").await, None);
    let copied = copy_request(s3, "sus", "copy", "sus/k").send().await.unwrap();
    assert_eq!(copied.version_id, None);
    let upload = common::s3::start_upload(s3, "sus", "parts").await;
    let etag = upload_part(s3, "sus", "parts", &upload, 1, b"one part").await;
    let completed = s3
        .complete_multipart_upload()
        .bucket("sus")
        .key("parts")
        .upload_id(&upload)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    assert_eq!(completed.version_id, None);
    // Each is the key's null version all the same.
    let versions = s3.list_object_versions().bucket("sus").send().await.unwrap();
    let ids: Vec<(&str, &str)> = versions
        .versions()
        .iter()
        .map(|v| (v.key().unwrap(), v.version_id().unwrap()))
        .collect();
    assert_eq!(ids, [("copy", "null"), ("k", "null"), ("parts", "null")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_versions_page_by_key_and_version_markers() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("many").send().await.unwrap();
    set_versioning(s3, "many", BucketVersioningStatus::Enabled).await;
    // 3 keys under a/ with 700 versions each, and one key outside.
    let mut written = Vec::new();
    for round in 0..700 {
        for key in ["a/1", "a/2", "a/3"] {
            let version = put(s3, "many", key, format!("{key}:{round}").as_bytes()).await.unwrap();
            written.push((key.to_owned(), version));
        }
    }
    put(s3, "many", "b", b"b").await.unwrap();
    s3.delete_object().bucket("many").key("a/2").send().await.unwrap();

    let mut seen: Vec<(String, String, bool, bool)> = Vec::new();
    let (mut key_marker, mut version_marker): (Option<String>, Option<String>) = (None, None);
    for _ in 0..20 {
        let page = s3
            .list_object_versions()
            .bucket("many")
            .prefix("a/")
            .max_keys(500)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .unwrap();
        let mut entries: Vec<(String, String, bool, bool)> = page
            .versions()
            .iter()
            .map(|v| {
                (
                    v.key().unwrap().to_owned(),
                    v.version_id().unwrap().to_owned(),
                    v.is_latest().unwrap(),
                    false,
                )
            })
            .chain(page.delete_markers().iter().map(|m| {
                (
                    m.key().unwrap().to_owned(),
                    m.version_id().unwrap().to_owned(),
                    m.is_latest().unwrap(),
                    true,
                )
            }))
            .collect();
        assert!(entries.len() <= 500);
        // Within a page: keys in order, each key's versions newest first (ids ascend with age).
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        seen.extend(entries);
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker.clone();
        version_marker = page.next_version_id_marker.clone();
    }
    assert_eq!(seen.len(), 2100 + 1, "every version once, and the delete marker");
    let latest: Vec<(&str, bool)> = seen.iter().filter(|e| e.2).map(|e| (e.0.as_str(), e.3)).collect();
    assert_eq!(latest, [("a/1", false), ("a/2", true), ("a/3", false)]);
    let mut expected: Vec<(String, String)> = written;
    expected.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let listed: Vec<(String, String)> = seen
        .iter()
        .filter(|e| !e.3)
        .map(|e| (e.0.clone(), e.1.clone()))
        .collect();
    assert_eq!(listed, expected);

    // With a delimiter, the a/ keys fold into one common prefix.
    let folded = s3
        .list_object_versions()
        .bucket("many")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = folded.common_prefixes().iter().filter_map(|p| p.prefix()).collect();
    assert_eq!(prefixes, ["a/"]);
    assert_eq!(folded.versions().len(), 1, "only b");
}

/// A page that ended on the null version, which is then deleted: the next page, resumed from
/// the null marker, still lists the key's older versions (as a client emptying a versioned
/// bucket, page by page, relies on). It once found no place for the gone marker and skipped
/// the rest of the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_null_marker_skips_no_older_version() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("nullmark").send().await.unwrap();
    set_versioning(s3, "nullmark", BucketVersioningStatus::Enabled).await;
    let v1 = put(s3, "nullmark", "k", b"one").await.unwrap();
    set_versioning(s3, "nullmark", BucketVersioningStatus::Suspended).await;
    put(s3, "nullmark", "k", b"null").await;
    set_versioning(s3, "nullmark", BucketVersioningStatus::Enabled).await;
    let v3 = put(s3, "nullmark", "k", b"three").await.unwrap();

    let first = s3
        .list_object_versions()
        .bucket("nullmark")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    let ids: Vec<&str> = first.versions().iter().filter_map(|v| v.version_id()).collect();
    assert_eq!(ids, [v3.as_str(), "null"]);
    assert_eq!(first.is_truncated(), Some(true));
    assert_eq!(first.next_version_id_marker(), Some("null"));

    s3.delete_object()
        .bucket("nullmark")
        .key("k")
        .version_id("null")
        .send()
        .await
        .unwrap();
    let second = s3
        .list_object_versions()
        .bucket("nullmark")
        .max_keys(2)
        .set_key_marker(first.next_key_marker.clone())
        .set_version_id_marker(first.next_version_id_marker.clone())
        .send()
        .await
        .unwrap();
    let ids: Vec<&str> = second.versions().iter().filter_map(|v| v.version_id()).collect();
    assert!(ids.contains(&v1.as_str()), "v1 is still a version of k: {ids:?}");
    assert!(
        !ids.contains(&"null"),
        "the deleted null version is not listed: {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_from_versions_and_completions_get_version_ids() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("src").send().await.unwrap();
    set_versioning(s3, "src", BucketVersioningStatus::Enabled).await;
    let old = put(s3, "src", "k", b"old").await.unwrap();
    put(s3, "src", "k", b"new").await.unwrap();
    let copied = copy_request(s3, "src", "copy", &format!("src/k?versionId={old}"))
        .send()
        .await
        .unwrap();
    assert_eq!(copied.copy_source_version_id.as_deref(), Some(old.as_str()));
    assert!(copied.version_id.is_some());
    assert_eq!(get_version(s3, "src", "copy", None).await.unwrap().0, b"old");

    let upload = s3
        .create_multipart_upload()
        .bucket("src")
        .key("mp")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id.unwrap();
    let etag = upload_part(s3, "src", "mp", &upload_id, 1, b"part").await;
    let done = s3
        .complete_multipart_upload()
        .bucket("src")
        .key("mp")
        .upload_id(&upload_id)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    let version = done.version_id.expect("a completion makes a version");
    assert_eq!(get_version(s3, "src", "mp", Some(&version)).await.unwrap().0, b"part");

    // DeleteObjects in a versioned bucket: markers for keys, permanent deletes for versions.
    let result = s3
        .delete_objects()
        .bucket("src")
        .delete(
            Delete::builder()
                .objects(ObjectIdentifier::builder().key("copy").build().unwrap())
                .objects(ObjectIdentifier::builder().key("k").version_id(&old).build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let deleted = result.deleted();
    assert_eq!(deleted.len(), 2, "{result:?}");
    assert!(
        deleted
            .iter()
            .any(|d| d.key() == Some("copy") && d.delete_marker() == Some(true))
    );
    assert!(
        deleted
            .iter()
            .any(|d| d.key() == Some("k") && d.version_id() == Some(old.as_str()))
    );
    assert_eq!(
        get_version(s3, "src", "k", Some(&old)).await.map(|_| ()),
        Err((404, None))
    );
    assert_eq!(get_version(s3, "src", "k", None).await.unwrap().0, b"new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tags_of_a_version_by_id() {
    use aws_sdk_s3::types::{Tag, Tagging};
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("tagged").send().await.unwrap();
    set_versioning(s3, "tagged", BucketVersioningStatus::Enabled).await;
    let old = put(s3, "tagged", "k", b"old").await.unwrap();
    let new = put(s3, "tagged", "k", b"new").await.unwrap();
    let tagging = |value: &str| {
        Tagging::builder()
            .tag_set(Tag::builder().key("stage").value(value).build().unwrap())
            .build()
            .unwrap()
    };
    // A noncurrent version and the current one, each by id, each keeping its own tags.
    for (version, value) in [(&old, "archived"), (&new, "live")] {
        s3.put_object_tagging()
            .bucket("tagged")
            .key("k")
            .version_id(version)
            .tagging(tagging(value))
            .send()
            .await
            .unwrap();
    }
    let tags_of = |version: String| async move {
        s3.get_object_tagging()
            .bucket("tagged")
            .key("k")
            .version_id(version)
            .send()
            .await
            .unwrap()
            .tag_set
            .into_iter()
            .map(|tag| tag.value)
            .collect::<Vec<_>>()
    };
    assert_eq!(tags_of(old.clone()).await, vec!["archived".to_owned()]);
    assert_eq!(tags_of(new.clone()).await, vec!["live".to_owned()]);
    let head = s3.head_object().bucket("tagged").key("k").send().await.unwrap();
    assert_eq!(
        head.version_id.as_deref(),
        Some(new.as_str()),
        "tagging made no new version"
    );
    s3.delete_object_tagging()
        .bucket("tagged")
        .key("k")
        .version_id(&old)
        .send()
        .await
        .unwrap();
    assert!(tags_of(old.clone()).await.is_empty());
    assert_eq!(tags_of(new).await, vec!["live".to_owned()]);
    let missing = s3
        .put_object_tagging()
        .bucket("tagged")
        .key("k")
        .version_id("00000000000000ff")
        .tagging(tagging("x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&missing), 404);
}

/// Key, version id, whether current, whether a delete marker: the bucket's versions of `prefix`
/// as ListObjectVersions lists them (each key's newest first).
async fn versions_of(s3: &Client, bucket: &str, prefix: &str) -> Vec<(String, String, bool, bool)> {
    let listed = s3
        .list_object_versions()
        .bucket(bucket)
        .prefix(prefix)
        .send()
        .await
        .unwrap();
    let mut all: Vec<(String, String, bool, bool)> = listed
        .versions()
        .iter()
        .map(|v| {
            let id = v.version_id().unwrap().to_owned();
            (v.key().unwrap().to_owned(), id, v.is_latest().unwrap(), false)
        })
        .chain(listed.delete_markers().iter().map(|m| {
            let id = m.version_id().unwrap().to_owned();
            (m.key().unwrap().to_owned(), id, m.is_latest().unwrap(), true)
        }))
        .collect();
    // Ids sort like the versions they name (the null version aside).
    all.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    all
}

async fn redis_on(gw: &TestGateway, db: u32) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{}/{db}", gw.resp_addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn redis_query<T: redis::FromRedisValue>(con: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con)
        .await
        .unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

async fn redis_error(con: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let err = cmd.query_async::<redis::Value>(con).await.unwrap_err();
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resp_writes_versions_and_delete_markers_in_a_versioned_bucket() {
    let gw = TestGateway::with_resp(&[]).await;
    let s3 = &gw.client;
    let mut con = redis_on(&gw, 0).await;
    // Database 0's bucket exists once the gateway runs.
    let _: () = redis_query(&mut con, &["SET", "before", "unversioned"]).await;
    set_versioning(s3, "resp", BucketVersioningStatus::Enabled).await;

    let _: () = redis_query(&mut con, &["SET", "k", "one"]).await;
    // A pipeline of SETs, as a pipelined client sends them: one batch, a version each.
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("k")
        .arg("two")
        .ignore()
        .cmd("SET")
        .arg("k")
        .arg(noise(100_000, 7))
        .ignore()
        .cmd("SET")
        .arg("other")
        .arg("x")
        .ignore()
        .query_async(&mut con)
        .await
        .unwrap();
    let got: Vec<u8> = redis_query(&mut con, &["GET", "k"]).await;
    assert_eq!(got, noise(100_000, 7), "GET reads the current version");
    let versions = versions_of(s3, "resp", "k").await;
    assert_eq!(versions.len(), 3, "{versions:?}");
    assert!(versions[0].2 && !versions[1].2 && !versions[2].2, "{versions:?}");
    assert!(versions.iter().all(|v| v.1 != "null" && !v.3), "{versions:?}");
    let (current, middle, oldest) = (versions[0].1.clone(), versions[1].1.clone(), versions[2].1.clone());
    assert_eq!(
        get_version(s3, "resp", "k", None).await.unwrap(),
        (noise(100_000, 7), Some(current.clone()))
    );
    assert_eq!(get_version(s3, "resp", "k", Some(&middle)).await.unwrap().0, b"two");
    assert_eq!(get_version(s3, "resp", "k", Some(&oldest)).await.unwrap().0, b"one");

    // Overwriting the chunked version keeps its body: it is noncurrent, not retired.
    let _: () = redis_query(&mut con, &["SET", "k", "four"]).await;
    let reaped = gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies, 0, "{reaped:?}");
    assert_eq!(
        get_version(s3, "resp", "k", Some(&current)).await.unwrap().0,
        noise(100_000, 7)
    );

    // DEL writes a delete marker; the versions stay. A DEL of a deleted key writes nothing.
    let deleted: i64 = redis_query(&mut con, &["DEL", "k", "never"]).await;
    assert_eq!(deleted, 1);
    let gone: Option<String> = redis_query(&mut con, &["GET", "k"]).await;
    assert_eq!(gone, None);
    assert_eq!(
        get_version(s3, "resp", "k", None).await,
        Err((404, Some("true".into())))
    );
    let deleted: i64 = redis_query(&mut con, &["DEL", "k"]).await;
    assert_eq!(deleted, 0);
    let versions = versions_of(s3, "resp", "k").await;
    assert_eq!(versions.len(), 5, "four versions and one marker: {versions:?}");
    assert!(versions[0].2 && versions[0].3, "the marker is the latest: {versions:?}");
    assert!(versions_of(s3, "resp", "never").await.is_empty());
    // The object written before versioning is the null version, and DEL keeps it as one.
    let deleted: i64 = redis_query(&mut con, &["DEL", "before"]).await;
    assert_eq!(deleted, 1);
    assert_eq!(
        get_version(s3, "resp", "before", Some("null")).await.unwrap().0,
        b"unversioned"
    );
    // SET after the marker makes the key current again.
    let _: () = redis_query(&mut con, &["SET", "k", "five"]).await;
    assert_eq!(get_version(s3, "resp", "k", None).await.unwrap().0, b"five");

    // A string's TTL would remove a version for good: refused. Typed keys are not objects.
    let refused = redis_error(&mut con, &["SET", "t", "v", "EX", "100"]).await;
    assert!(refused.contains("S3 versioning"), "{refused}");
    let refused = redis_error(&mut con, &["EXPIRE", "other", "100"]).await;
    assert!(refused.contains("S3 versioning"), "{refused}");
    let ttl: i64 = redis_query(&mut con, &["TTL", "other"]).await;
    assert_eq!(ttl, -1);
    let _: i64 = redis_query(&mut con, &["HSET", "h", "f", "v"]).await;
    let set: i64 = redis_query(&mut con, &["EXPIRE", "h", "100"]).await;
    assert_eq!(set, 1);
    let deleted: i64 = redis_query(&mut con, &["DEL", "h"]).await;
    assert_eq!(deleted, 1);
    assert!(
        versions_of(s3, "resp", "h").await.is_empty(),
        "no marker for a typed key"
    );

    // Suspended: writes replace the null version, DEL makes the null version a marker.
    set_versioning(s3, "resp", BucketVersioningStatus::Suspended).await;
    let _: () = redis_query(&mut con, &["SET", "s", "first"]).await;
    let _: () = redis_query(&mut con, &["SET", "s", "second"]).await;
    let _: () = redis_query(&mut con, &["SET", "k", "six"]).await;
    assert_eq!(
        versions_of(s3, "resp", "s").await,
        vec![("s".into(), "null".into(), true, false)]
    );
    assert_eq!(
        get_version(s3, "resp", "s", None).await.unwrap(),
        (b"second".to_vec(), Some("null".into()))
    );
    let k = versions_of(s3, "resp", "k").await;
    assert_eq!(k.iter().filter(|v| v.1 == "null").count(), 1, "{k:?}");
    let deleted: i64 = redis_query(&mut con, &["DEL", "s"]).await;
    assert_eq!(deleted, 1);
    assert_eq!(
        versions_of(s3, "resp", "s").await,
        vec![("s".into(), "null".into(), true, true)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resp_versions_get_the_default_retention_and_stay_locked() {
    // The gateway creates the buckets its databases map to; object lock is turned on after.
    let gw = TestGateway::with_resp(&["--resp-databases", "1=vault"]).await;
    let s3 = &gw.client;
    set_versioning(s3, "vault", BucketVersioningStatus::Enabled).await;
    let rule = aws_sdk_s3::types::ObjectLockRule::builder()
        .default_retention(
            aws_sdk_s3::types::DefaultRetention::builder()
                .mode(aws_sdk_s3::types::ObjectLockRetentionMode::Governance)
                .days(1)
                .build(),
        )
        .build();
    s3.put_object_lock_configuration()
        .bucket("vault")
        .object_lock_configuration(
            aws_sdk_s3::types::ObjectLockConfiguration::builder()
                .object_lock_enabled(aws_sdk_s3::types::ObjectLockEnabled::Enabled)
                .rule(rule)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut con = redis_on(&gw, 1).await;
    let _: () = redis_query(&mut con, &["SET", "backup", "v1"]).await;
    let versions = versions_of(s3, "vault", "backup").await;
    let locked = versions[0].1.clone();
    let retention = s3
        .get_object_retention()
        .bucket("vault")
        .key("backup")
        .version_id(&locked)
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(
        retention.mode,
        Some(aws_sdk_s3::types::ObjectLockRetentionMode::Governance)
    );
    let until = std::time::SystemTime::try_from(retention.retain_until_date.unwrap()).unwrap();
    let left = until.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(
        left > Duration::from_secs(86_400 - 3600) && left <= Duration::from_secs(86_400),
        "{left:?}"
    );

    // RESP overwrites and deletes: new versions and a marker, the locked version kept.
    let _: () = redis_query(&mut con, &["SET", "backup", "v2"]).await;
    let _: () = redis_query(&mut con, &["RENAME", "backup", "moved"]).await;
    let versions = versions_of(s3, "vault", "backup").await;
    assert_eq!(versions.len(), 3, "{versions:?}");
    assert!(versions[0].3, "a marker first: {versions:?}");
    assert_eq!(
        get_version(s3, "vault", "backup", Some(&locked)).await.unwrap().0,
        b"v1"
    );
    assert_eq!(get_version(s3, "vault", "moved", None).await.unwrap().0, b"v2");
    let refused = s3
        .delete_object()
        .bucket("vault")
        .key("backup")
        .version_id(&locked)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 403);
}

async fn bucket_id(sql: &tokio_postgres::Client, name: &str) -> i64 {
    sql.query_one("SELECT id FROM pgvs3.buckets WHERE name = $1", &[&name])
        .await
        .unwrap()
        .get("id")
}

/// A transaction holding an uncommitted insert of `key`: the key's writers queue behind it until
/// it rolls back, which makes their race deterministic.
async fn hold_key(gw: &TestGateway, bucket_id: i64, key: &str) -> tokio_postgres::Client {
    let holder = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "INSERT INTO s3p.objects (bucket_id, key, size, etag, inline) VALUES ($1, $2, 0, 'held', '')",
            &[&bucket_id, &key],
        )
        .await
        .unwrap();
    holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_overwrites_make_the_last_committed_version_current() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("race").send().await.unwrap();
    set_versioning(s3, "race", BucketVersioningStatus::Enabled).await;
    let sql = gw.sql().await;
    let bucket_id = bucket_id(&sql, "race").await;
    // Two PUTs of a key wait on a third transaction's uncommitted insert of it; when that rolls
    // back, they race for the key. Whichever commits last must be the current version, with the
    // newest id. (Numbers drawn before the key's lock made the loser of the race current with
    // the older id about half the time.)
    for round in 0..12 {
        let key = format!("k{round}");
        let holder = hold_key(&gw, bucket_id, &key).await;
        let puts: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|body| {
                let (s3, key) = (s3.clone(), key.clone());
                tokio::spawn(async move { put(&s3, "race", &key, body.as_bytes()).await.unwrap() })
            })
            .collect();
        common::eventually(Duration::from_secs(30), "both PUTs waiting on the held key", || async {
            (common::lock_waiters(&sql).await == 2).then_some(())
        })
        .await;
        holder.batch_execute("ROLLBACK").await.unwrap();
        let mut ids = Vec::new();
        for put in puts {
            ids.push(put.await.unwrap());
        }
        let versions = versions_of(s3, "race", &key).await;
        assert_eq!(versions.len(), 2, "{versions:?}");
        assert!(
            versions[0].2,
            "round {round}: the newest id is the current version: {versions:?}"
        );
        let (body, current) = get_version(s3, "race", &key, None).await.unwrap();
        assert_eq!(current.as_deref(), Some(versions[0].1.as_str()), "round {round}");
        assert!(ids.contains(&versions[0].1), "{ids:?} {versions:?}");
        assert!(body == b"a" || body == b"b");
    }
}

/// The bucket's quota usage: bytes and objects.
async fn usage(gw: &TestGateway, bucket: &str) -> (i64, i64) {
    let quota = gw
        .gateway
        .store
        .catalog()
        .bucket_quota(bucket)
        .await
        .unwrap()
        .expect("the bucket has a quota");
    (quota.used_bytes, quota.used_objects)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_count_noncurrent_versions_and_delete_markers() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let catalog = gw.gateway.store.catalog();
    s3.create_bucket().bucket("metered").send().await.unwrap();
    set_versioning(s3, "metered", BucketVersioningStatus::Enabled).await;
    // Versions written before the quota are counted when it is set.
    let first = put(s3, "metered", "k", &noise(3_000, 1)).await.unwrap();
    put(s3, "metered", "k", &noise(3_000, 2)).await.unwrap();
    catalog
        .set_bucket_quota("metered", Some(10_000), Some(5))
        .await
        .unwrap();
    assert_eq!(usage(&gw, "metered").await, (6_000, 2));

    // An overwrite keeps what it replaces: it grows the bucket by its whole size.
    put(s3, "metered", "k", &noise(3_000, 3)).await.unwrap();
    assert_eq!(usage(&gw, "metered").await, (9_000, 3));
    let refused = put_request(s3, "metered", "k", noise(1_001, 4))
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 400);
    assert_eq!(usage(&gw, "metered").await, (9_000, 3));

    // A delete marker is an object of no bytes; a delete is never refused, and removing a
    // version for good frees its bytes.
    s3.delete_object().bucket("metered").key("k").send().await.unwrap();
    assert_eq!(usage(&gw, "metered").await, (9_000, 4));
    s3.delete_object()
        .bucket("metered")
        .key("k")
        .version_id(&first)
        .send()
        .await
        .unwrap();
    assert_eq!(usage(&gw, "metered").await, (6_000, 3));
    put(s3, "metered", "k", &noise(4_000, 5)).await.unwrap();
    assert_eq!(usage(&gw, "metered").await, (10_000, 4));
    let refused = put_request(s3, "metered", "other", noise(1, 6))
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 400);

    // Suspended: a write replaces the null version (here the null delete marker), so only its
    // growth counts, even at the object limit.
    catalog
        .set_bucket_quota("metered", Some(20_000), Some(5))
        .await
        .unwrap();
    set_versioning(s3, "metered", BucketVersioningStatus::Suspended).await;
    s3.delete_object().bucket("metered").key("k").send().await.unwrap();
    let (bytes, objects) = usage(&gw, "metered").await;
    // Null versions, written without a version id.
    assert_eq!(put(s3, "metered", "k", &noise(10, 7)).await, None);
    assert_eq!(put(s3, "metered", "k", &noise(20, 8)).await, None);
    assert_eq!(objects, 5);
    assert_eq!(usage(&gw, "metered").await, (bytes + 20, objects));

    // The usage is what the tables hold.
    let counted = gw
        .sql()
        .await
        .query_one(
            "SELECT sum(size)::bigint AS bytes, count(*) AS objects FROM (
                 SELECT size FROM s3p.objects o JOIN pgvs3.buckets b ON b.id = o.bucket_id WHERE b.name = 'metered'
                 UNION ALL
                 SELECT size FROM s3p.versions v JOIN pgvs3.buckets b ON b.id = v.bucket_id WHERE b.name = 'metered') c",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        usage(&gw, "metered").await,
        (counted.get("bytes"), counted.get("objects"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_operations_need_the_version_actions_of_a_policy() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("shared").send().await.unwrap();
    set_versioning(s3, "shared", BucketVersioningStatus::Enabled).await;
    let old = put(s3, "shared", "doc", b"old").await.unwrap();
    let current = put(s3, "shared", "doc", b"current").await.unwrap();
    let bob = common::s3::add_key(&gw, "BOBKEY").await;
    // Bob may read objects and tag them, list the bucket, and nothing of versions.
    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},
         "Action":["s3:GetObject","s3:GetObjectTagging","s3:PutObjectTagging","s3:DeleteObjectTagging",
                   "s3:GetObjectAcl","s3:PutObjectAcl","s3:DeleteObject"],
         "Resource":"arn:aws:s3:::shared/*"},
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::shared"}]}"#;
    s3.put_bucket_policy()
        .bucket("shared")
        .policy(policy)
        .send()
        .await
        .unwrap();
    let status = |err: Option<u16>| err.unwrap_or(200);
    fn refused<T, E>(result: Result<T, aws_sdk_s3::error::SdkError<E>>) -> Option<u16> {
        result
            .err()
            .map(|err| err.raw_response().map_or(0, |raw| raw.status().as_u16()))
    }

    assert_eq!(get_version(&bob, "shared", "doc", None).await.unwrap().0, b"current");
    assert_eq!(get_version(&bob, "shared", "doc", Some(&old)).await, Err((403, None)));
    assert_eq!(
        get_version(&bob, "shared", "doc", Some(&current)).await,
        Err((403, None))
    );
    let head = bob
        .head_object()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .send()
        .await;
    assert_eq!(status(refused(head)), 403);
    let tags = bob.get_object_tagging().bucket("shared").key("doc").send().await;
    assert_eq!(status(refused(tags)), 200);
    let tags = bob
        .get_object_tagging()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .send()
        .await;
    assert_eq!(status(refused(tags)), 403);
    let tagging = aws_sdk_s3::types::Tagging::builder()
        .tag_set(aws_sdk_s3::types::Tag::builder().key("a").value("b").build().unwrap())
        .build()
        .unwrap();
    let tag = bob
        .put_object_tagging()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .tagging(tagging.clone())
        .send()
        .await;
    assert_eq!(status(refused(tag)), 403);
    let tag = bob
        .put_object_tagging()
        .bucket("shared")
        .key("doc")
        .tagging(tagging)
        .send()
        .await;
    assert_eq!(status(refused(tag)), 200);
    let untag = bob
        .delete_object_tagging()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .send()
        .await;
    assert_eq!(status(refused(untag)), 403);
    let acl = bob
        .get_object_acl()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .send()
        .await;
    assert_eq!(status(refused(acl)), 403);
    let acl = bob.get_object_acl().bucket("shared").key("doc").send().await;
    assert_eq!(status(refused(acl)), 200);
    let listed = bob.list_object_versions().bucket("shared").send().await;
    assert_eq!(status(refused(listed)), 403);
    let listed = bob.list_objects_v2().bucket("shared").send().await;
    assert_eq!(status(refused(listed)), 200);
    let removed = bob
        .delete_object()
        .bucket("shared")
        .key("doc")
        .version_id(&old)
        .send()
        .await;
    assert_eq!(status(refused(removed)), 403);
    assert_eq!(get_version(s3, "shared", "doc", Some(&old)).await.unwrap().0, b"old");
    // A DeleteObject without a version (a delete marker) is s3:DeleteObject.
    let marked = bob.delete_object().bucket("shared").key("doc").send().await;
    assert_eq!(status(refused(marked)), 200);
}

/// A client that reports a 500 instead of retrying it away.
fn without_retries(s3: &Client) -> Client {
    let config = s3
        .config()
        .to_builder()
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .build();
    Client::from_conf(config)
}

/// Parallel permanent deletes of one key's versions (rclone's `cleanup-hidden`, any parallel
/// purge): every 204 is final whatever the interleaving. After each round exactly the versions
/// not deleted remain, ListObjectVersions names the newest one latest, and HEAD reads it (or
/// 404 when none is left); a PUT racing the deletes stays current. No delete answers 500.
/// (Without the key's lock, a delete of a version the delete of the newest one was promoting
/// found it in neither table and answered 204 while the version came back as current, and two
/// deletes could deadlock into a 500: several rounds of 30 failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_permanent_deletes_of_versions_are_all_final() {
    let gw = TestGateway::start().await;
    let s3 = &without_retries(&gw.client);
    s3.create_bucket().bucket("purge").send().await.unwrap();
    set_versioning(s3, "purge", BucketVersioningStatus::Enabled).await;
    for round in 0..30 {
        let key = format!("k{round:02}");
        let mut ids = Vec::new();
        for body in ["one", "two", "three"] {
            ids.push(put(s3, "purge", &key, body.as_bytes()).await.unwrap());
        }
        let marker = s3.delete_object().bucket("purge").key(&key).send().await.unwrap();
        ids.push(marker.version_id.unwrap());
        // Round kinds: every version goes; all but the oldest go (it must become current);
        // every version goes while a PUT adds a new one (it must stay current).
        let kind = round % 3;
        let doomed: Vec<String> = if kind == 1 { ids[1..].to_vec() } else { ids.clone() };
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(doomed.len() + usize::from(kind == 2)));
        let mut deletes = Vec::new();
        for id in &doomed {
            let (s3, key, id, barrier) = (s3.clone(), key.clone(), id.clone(), barrier.clone());
            deletes.push(tokio::spawn(async move {
                barrier.wait().await;
                s3.delete_object()
                    .bucket("purge")
                    .key(&key)
                    .version_id(&id)
                    .send()
                    .await
            }));
        }
        let racing_put = (kind == 2).then(|| {
            let (s3, key, barrier) = (s3.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                put(&s3, "purge", &key, b"new").await
            })
        });
        for (delete, id) in deletes.into_iter().zip(&doomed) {
            let answer = delete.await.unwrap();
            assert!(answer.is_ok(), "round {round}: delete of {id}: {answer:?}");
        }
        let mut expected: Vec<String> = ids.iter().filter(|id| !doomed.contains(id)).cloned().collect();
        if let Some(put) = racing_put {
            expected.push(put.await.unwrap().unwrap());
        }
        let versions = versions_of(s3, "purge", &key).await;
        let listed: Vec<&str> = versions.iter().map(|v| v.1.as_str()).collect();
        assert_eq!(
            listed.len(),
            expected.len(),
            "round {round}: {versions:?}, expected {expected:?}"
        );
        assert!(
            expected.iter().all(|id| listed.contains(&id.as_str())),
            "round {round}: {versions:?}, expected {expected:?}"
        );
        match versions.first() {
            None => {
                let gone = s3.head_object().bucket("purge").key(&key).send().await.unwrap_err();
                assert_eq!(http_status(&gone), 404, "round {round}");
            }
            Some((_, newest, latest, marker)) => {
                assert!(*latest && !marker, "round {round}: {versions:?}");
                let head = s3.head_object().bucket("purge").key(&key).send().await.unwrap();
                assert_eq!(head.version_id.as_deref(), Some(newest.as_str()), "round {round}");
            }
        }
    }
}

/// Issue 34: MinIO's versioning extensions (`ExcludedPrefixes`, `ExcludeFolders`) are refused
/// with 501 NotImplemented, never answered 200 and dropped (s3s reads the document as AWS's and
/// skipped them, so versioning was enabled for every key while the client believed some were
/// excluded). Without them the same document enables versioning.
#[tokio::test]
async fn minio_versioning_exclusions_are_refused_not_dropped() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("vexcl").send().await.unwrap();
    let document = |extra: &str| {
        format!(
            "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Status>Enabled</Status>{extra}</VersioningConfiguration>"
        )
    };
    for extra in [
        "<ExcludedPrefixes><Prefix>tmp/</Prefix></ExcludedPrefixes>",
        "<ExcludeFolders>true</ExcludeFolders>",
    ] {
        let refused = gw
            .signed("PUT", "/vexcl?versioning", &[], document(extra).as_bytes())
            .await;
        assert_eq!(
            (refused.status, refused.code()),
            (501, Some("NotImplemented")),
            "{}",
            refused.body
        );
    }
    let status = gw.client.get_bucket_versioning().bucket("vexcl").send().await.unwrap();
    assert_eq!(status.status(), None, "nothing was applied");
    let enabled = gw
        .signed("PUT", "/vexcl?versioning", &[], document("").as_bytes())
        .await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    let status = gw.client.get_bucket_versioning().bucket("vexcl").send().await.unwrap();
    assert_eq!(status.status(), Some(&BucketVersioningStatus::Enabled));
    gw.stop().await;
}

/// Bodies written in batches ahead of their row (issue 30 item 2) keep a write's integrity:
/// concurrent 3 MiB PUTs of one key (each several batches) leave, in a versioned bucket, a
/// version per PUT with exactly its bytes and the latest one current; in an unversioned bucket
/// exactly one of the bodies, whole — never a mix of batches. Nothing is left leased.
#[tokio::test]
async fn concurrent_large_puts_of_one_key_each_keep_their_own_bytes() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    for bucket in ["racing-versions", "racing-plain"] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
    }
    set_versioning(s3, "racing-versions", BucketVersioningStatus::Enabled).await;
    let bodies: Vec<Vec<u8>> = (0..4).map(|seed| noise(3 << 20, 40 + seed)).collect();
    let read = |bucket: &'static str, version: Option<String>| async move {
        let got = s3
            .get_object()
            .bucket(bucket)
            .key("k")
            .set_version_id(version)
            .send()
            .await
            .unwrap();
        got.body.collect().await.unwrap().into_bytes().to_vec()
    };
    for bucket in ["racing-versions", "racing-plain"] {
        let puts = bodies.iter().map(|body| put_object(s3, bucket, "k", body.clone()));
        let written = futures::future::join_all(puts).await;
        let current = read(bucket, None).await;
        assert!(
            bodies.contains(&current),
            "{bucket}: the current body is one PUT's, whole"
        );
        if bucket == "racing-versions" {
            let mut seen = Vec::new();
            for out in &written {
                let bytes = read(bucket, out.version_id().map(str::to_owned)).await;
                let index = bodies.iter().position(|body| *body == bytes).expect("a PUT's bytes");
                seen.push(index);
            }
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2, 3], "each version holds its own PUT's bytes");
        }
    }
    let sql = gw.sql().await;
    for bucket in ["racing-versions", "racing-plain"] {
        let ns: String = sql
            .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = $1", &[&bucket])
            .await
            .unwrap()
            .get("namespace");
        let leased: i64 = sql
            .query_one(
                &format!("SELECT count(*) FROM \"{ns}\".retired_bodies WHERE retired_at > now()"),
                &[],
            )
            .await
            .unwrap()
            .get("count");
        assert_eq!(leased, 0, "{bucket}: no body is left leased");
    }
    gw.stop().await;
}

/// A write of a new key that waits on another transaction's insert of it while a delete marker
/// is written: whichever of the two commits last is the key's latest version, and stays in that
/// place when a newer version is deleted for good. The write is an S3 PUT or a RESP SET (which
/// share the key's locks). (A write that drew its version number before the marker drew its
/// own, then committed after it, was current with the lower number: deleting the newer version
/// then promoted the marker over it and the key read as deleted; seen as a non-linearizable
/// history under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_racing_a_delete_marker_keeps_its_place_among_the_versions() {
    let gw = TestGateway::with_resp(&[]).await;
    let s3 = &gw.client;
    let mut con = redis_on(&gw, 0).await;
    let _: () = redis_query(&mut con, &["SET", "before", "unversioned"]).await;
    set_versioning(s3, "resp", BucketVersioningStatus::Enabled).await;
    let sql = gw.sql().await;
    let bucket_id = bucket_id(&sql, "resp").await;
    let waiting = || common::lock_waiters(&sql);
    for (round, by_resp) in [false, true, false, true].into_iter().enumerate() {
        let key = format!("raced{round}");
        let holder = hold_key(&gw, bucket_id, &key).await;
        let write = {
            let (s3, key, mut con) = (s3.clone(), key.clone(), redis_on(&gw, 0).await);
            tokio::spawn(async move {
                match by_resp {
                    true => redis_query::<()>(&mut con, &["SET", &key, "written"]).await,
                    false => drop(put(&s3, "resp", &key, b"written").await),
                }
            })
        };
        common::eventually(Duration::from_secs(30), "the write waiting on the held key", || async {
            (waiting().await == 1).then_some(())
        })
        .await;
        let marker = {
            let (s3, key) = (s3.clone(), key.clone());
            tokio::spawn(async move { s3.delete_object().bucket("resp").key(&key).send().await.unwrap() })
        };
        // The marker either commits at once or waits behind the write.
        common::eventually(Duration::from_secs(30), "the delete done or waiting", || async {
            (marker.is_finished() || waiting().await == 2).then_some(())
        })
        .await;
        holder.batch_execute("ROLLBACK").await.unwrap();
        write.await.unwrap();
        marker.await.unwrap();
        let latest = get_version(s3, "resp", &key, None).await.map(|(body, _)| body);
        let versions = versions_of(s3, "resp", &key).await;
        assert_eq!(versions.len(), 2, "round {round}: {versions:?}");
        assert!(
            versions[0].2,
            "round {round}: the newest listed is the latest: {versions:?}"
        );
        assert_eq!(
            latest.is_ok(),
            !versions[0].3,
            "round {round}: the latest listed is what GET reads: {latest:?} {versions:?}"
        );
        // A newer version, deleted for good: the latest before it is latest again.
        let newer = put(s3, "resp", &key, b"newer").await.unwrap();
        s3.delete_object()
            .bucket("resp")
            .key(&key)
            .version_id(&newer)
            .send()
            .await
            .unwrap();
        let after = get_version(s3, "resp", &key, None).await.map(|(body, _)| body);
        assert_eq!(after, latest, "round {round} (resp: {by_resp}): {versions:?}");
    }
}

/// GETs and HEADs of a noncurrent version while a delete of the current version promotes it:
/// each finds it, in whichever table it is. (A read that saw another version current looked for
/// this one in `versions` by a second statement, after the promotion had moved it to `objects`,
/// and answered NoSuchVersion; seen as a non-linearizable history under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_read_while_a_delete_promotes_it_finds_it() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("promote").send().await.unwrap();
    set_versioning(s3, "promote", BucketVersioningStatus::Enabled).await;
    let mut missed = Vec::new();
    for round in 0..40 {
        let key = format!("k{round}");
        let older = put(s3, "promote", &key, b"older").await.unwrap();
        let newer = put(s3, "promote", &key, b"newer").await.unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|reader| {
                let (s3, key, older, done) = (s3.clone(), key.clone(), older.clone(), done.clone());
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    // At least a few reads, and on until the delete has committed.
                    for read in 0.. {
                        if read >= 3 && done.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        let answer = match reader {
                            0 => s3
                                .head_object()
                                .bucket("promote")
                                .key(&key)
                                .version_id(&older)
                                .send()
                                .await
                                .map(|out| out.version_id)
                                .map_err(|err| http_status(&err)),
                            _ => get_version(&s3, "promote", &key, Some(&older))
                                .await
                                .map(|(body, version)| {
                                    assert_eq!(body, b"older");
                                    version
                                })
                                .map_err(|(status, _)| status),
                        };
                        answers.push(answer);
                    }
                    answers
                })
            })
            .collect();
        s3.delete_object()
            .bucket("promote")
            .key(&key)
            .version_id(&newer)
            .send()
            .await
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for reader in readers {
            for answer in reader.await.unwrap() {
                if answer.as_ref().ok() != Some(&Some(older.clone())) {
                    missed.push((round, answer));
                }
            }
        }
    }
    assert!(
        missed.is_empty(),
        "reads of the promoted version that missed it: {missed:?}"
    );
}

/// One page of a rolled-up listing: its entries, its common prefixes, and where the next starts.
struct RolledUpPage {
    entries: Vec<(String, bool)>,
    prefixes: Vec<String>,
    next: Option<(Option<String>, Option<String>)>,
}

/// A page of ListObjectVersions (`uploads` false) or ListMultipartUploads rolled up by `/`.
async fn rolled_up_page(
    s3: &Client,
    bucket: &str,
    max: i32,
    uploads: bool,
    from: (Option<String>, Option<String>),
) -> RolledUpPage {
    let (key_marker, id_marker) = from;
    if uploads {
        let out = s3
            .list_multipart_uploads()
            .bucket(bucket)
            .delimiter("/")
            .max_uploads(max)
            .set_key_marker(key_marker)
            .set_upload_id_marker(id_marker)
            .send()
            .await
            .unwrap();
        RolledUpPage {
            entries: out
                .uploads()
                .iter()
                .map(|u| (u.key().unwrap().to_owned(), false))
                .collect(),
            prefixes: out
                .common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_owned))
                .collect(),
            next: (out.is_truncated() == Some(true)).then(|| {
                (
                    out.next_key_marker().map(str::to_owned),
                    out.next_upload_id_marker().map(str::to_owned),
                )
            }),
        }
    } else {
        let out = s3
            .list_object_versions()
            .bucket(bucket)
            .delimiter("/")
            .max_keys(max)
            .set_key_marker(key_marker)
            .set_version_id_marker(id_marker)
            .send()
            .await
            .unwrap();
        RolledUpPage {
            entries: out
                .versions()
                .iter()
                .map(|v| (format!("{}@{}", v.key().unwrap(), v.version_id().unwrap()), false))
                .chain(out.delete_markers().iter().map(|m| {
                    (
                        format!("{}@{} (marker)", m.key().unwrap(), m.version_id().unwrap()),
                        false,
                    )
                }))
                .collect(),
            prefixes: out
                .common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_owned))
                .collect(),
            next: (out.is_truncated() == Some(true)).then(|| {
                (
                    out.next_key_marker().map(str::to_owned),
                    out.next_version_id_marker().map(str::to_owned),
                )
            }),
        }
    }
}

/// Pages of ListObjectVersions or ListMultipartUploads rolled up by `/`, as (entry, is a common
/// prefix) in listing order, each page at most `max` long.
async fn rolled_up_pages(s3: &Client, bucket: &str, max: i32, uploads: bool) -> Vec<(String, bool)> {
    let mut seen = Vec::new();
    let mut from = (None, None);
    for _ in 0..200 {
        let RolledUpPage {
            mut entries,
            prefixes,
            next,
        } = rolled_up_page(s3, bucket, max, uploads, from).await;
        assert!(
            entries.len() + prefixes.len() <= max as usize,
            "a page of {max} at most"
        );
        entries.extend(prefixes.into_iter().map(|p| (p, true)));
        // Within a page, entries and prefixes interleave in key order (ids newest first).
        entries.sort_by(|a, b| {
            let key = |e: &(String, bool)| e.0.split('@').next().unwrap().to_owned();
            key(a).cmp(&key(b)).then(b.0.cmp(&a.0))
        });
        seen.extend(entries);
        match next {
            Some(next) => from = next,
            None => return seen,
        }
    }
    panic!("the listing did not end in 200 pages");
}

/// ListObjectVersions and ListMultipartUploads with a delimiter jump past each common prefix and
/// read a few rows after each jump: prefixes bigger than those windows (40 keys), keys between
/// them, and every page size list every prefix and entry once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_and_upload_listings_roll_up_large_prefixes_once_each() {
    use futures::StreamExt;
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("dirs").send().await.unwrap();
    set_versioning(s3, "dirs", BucketVersioningStatus::Enabled).await;
    let dirs: Vec<String> = (0..9).map(|d| format!("d{d}/")).collect();
    let mut keys: Vec<String> = dirs
        .iter()
        .flat_map(|dir| (0..40).map(move |k| format!("{dir}{k:02}")))
        .collect();
    keys.extend(["a", "d3", "d5+x", "z"].map(str::to_owned));
    let writes: Vec<_> = futures::stream::iter(keys.clone())
        .map(|key| async move { (key.clone(), put(s3, "dirs", &key, b"v").await.unwrap()) })
        .buffer_unordered(16)
        .collect()
        .await;
    let starts: Vec<_> = futures::stream::iter(keys.clone())
        .map(|key| async move {
            s3.create_multipart_upload()
                .bucket("dirs")
                .key(&key)
                .send()
                .await
                .unwrap();
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(starts.len(), keys.len());
    // The loose keys get a second version and `d3` a delete marker on top.
    let mut loose: Vec<(String, String)> = writes.into_iter().filter(|(key, _)| !key.contains('/')).collect();
    for key in ["a", "d3", "d5+x", "z"] {
        loose.push((key.to_owned(), put(s3, "dirs", key, b"w").await.unwrap()));
    }
    let marker = s3.delete_object().bucket("dirs").key("d3").send().await.unwrap();
    let marker = marker.version_id().unwrap().to_owned();

    let mut expected: Vec<(String, bool)> = dirs.iter().map(|dir| (dir.clone(), true)).collect();
    expected.extend(loose.iter().map(|(key, id)| (format!("{key}@{id}"), false)));
    expected.push((format!("d3@{marker} (marker)"), false));
    let key_of = |e: &(String, bool)| e.0.split('@').next().unwrap().to_owned();
    expected.sort_by(|a, b| key_of(a).cmp(&key_of(b)).then(b.0.cmp(&a.0)));
    for max in [1000, 7, 1] {
        assert_eq!(
            rolled_up_pages(s3, "dirs", max, false).await,
            expected,
            "versions, pages of {max}"
        );
    }

    let mut expected: Vec<(String, bool)> = dirs.iter().map(|dir| (dir.clone(), true)).collect();
    expected.extend(["a", "d3", "d5+x", "z"].map(|key| (key.to_owned(), false)));
    expected.sort();
    for max in [1000, 7, 1] {
        assert_eq!(
            rolled_up_pages(s3, "dirs", max, true).await,
            expected,
            "uploads, pages of {max}"
        );
    }

    // With EncodingType=url every key field comes back encoded, the KeyMarker echoed too.
    let out = s3
        .list_object_versions()
        .bucket("dirs")
        .key_marker("d9+x")
        .encoding_type(aws_sdk_s3::types::EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(out.key_marker(), Some("d9%2Bx"), "the SDK does not decode");
    let versions: Vec<&str> = out.versions().iter().filter_map(|v| v.key()).collect();
    assert_eq!(versions, ["z", "z"]);

    // A delete marker removed by its version id: the entry says so and names the version.
    let out = s3
        .delete_objects()
        .bucket("dirs")
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("d3")
                        .version_id(&marker)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let deleted = &out.deleted()[0];
    assert_eq!(deleted.delete_marker(), Some(true));
    assert_eq!(deleted.delete_marker_version_id(), Some(marker.as_str()));
    assert_eq!(deleted.version_id(), Some(marker.as_str()));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_keeps_versions_as_the_bucket_keeps_them_now() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("flip").send().await.unwrap();
    set_versioning(s3, "flip", BucketVersioningStatus::Suspended).await;
    put(s3, "flip", "k", b"null version").await;
    // The bucket as a gateway that has not seen it Enabled yet has it: Suspended, where a
    // delete removes the null version for good.
    let stale = gw.gateway.store.catalog().bucket("flip").await.unwrap();
    set_versioning(s3, "flip", BucketVersioningStatus::Enabled).await;
    let root = Principal {
        access_key: common::ROOT_ACCESS_KEY.into(),
        is_root: true,
        read_only: false,
    };
    let buckets = crate::large_uploads::buckets(&gw);
    let handle = buckets.open_resolved(&root, stale, Access::Write, false).unwrap();
    let marker = handle
        .delete("k", None, false, &DeleteCondition::default())
        .await
        .unwrap();
    assert!(marker.delete_marker);
    assert_ne!(marker.version_id.as_deref(), Some("null"), "an Enabled bucket's marker");
    let (kept, _) = get_version(s3, "flip", "k", Some("null")).await.unwrap();
    assert_eq!(kept, b"null version");
}

/// A write that waited judges versioning as the bucket has it once it holds the key, not as its
/// statement's snapshot (taken before the wait) had it. A second session holds the keyspace's
/// shared lock (while the bucket is versioned) or the key's row (while it never was), a
/// versioning change and writers queue behind it, then it lets go. (A PUT read the state from
/// before the switch: in a Suspended bucket it replaced the null version instead of adding one;
/// in a never-versioned bucket it overwrote the object a GET after the switch had read instead
/// of keeping it as version null. Found by the history checker's Suspended case.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_waited_for_its_key_writes_under_the_versioning_of_now() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let sql = gw.sql().await;
    let waiting = |n: i64| {
        let sql = &sql;
        common::eventually(
            Duration::from_secs(30),
            "writers waiting on the held key",
            move || async move { (common::lock_waiters(sql).await == n).then_some(()) },
        )
    };

    // Suspended, then Enabled while a PUT waits for the keyspace's lock (a versioning change
    // takes it exclusively; a writer of a key takes it shared): the PUT's statement began before
    // the change committed, so its snapshot still says Suspended, and it must write under Enabled
    // (a new version beside the null one, not the null version replaced).
    s3.create_bucket().bucket("suspended").send().await.unwrap();
    set_versioning(s3, "suspended", BucketVersioningStatus::Suspended).await;
    put(s3, "suspended", "k", b"null version").await;
    let holder = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    let id = bucket_id(&sql, "suspended").await;
    holder
        .execute("SELECT pg_advisory_xact_lock_shared(-($1::int8))", &[&id])
        .await
        .unwrap();
    let switch = {
        let s3 = s3.clone();
        tokio::spawn(async move { set_versioning(&s3, "suspended", BucketVersioningStatus::Enabled).await })
    };
    waiting(1).await;
    let write = {
        let s3 = s3.clone();
        tokio::spawn(async move { put(&s3, "suspended", "k", b"written").await })
    };
    waiting(2).await;
    holder.batch_execute("COMMIT").await.unwrap();
    switch.await.unwrap();
    let written = write.await.unwrap();
    let written = written.expect("a PUT into an Enabled bucket names its version");
    assert_ne!(written, "null");
    let (body, current) = get_version(s3, "suspended", "k", None).await.unwrap();
    assert_eq!(
        (body.as_slice(), current.as_deref()),
        (&b"written"[..], Some(written.as_str()))
    );
    let versions = versions_of(s3, "suspended", "k").await;
    assert_eq!(versions.len(), 2, "the null version and the PUT's: {versions:?}");
    let (kept, _) = get_version(s3, "suspended", "k", Some("null")).await.unwrap();
    assert_eq!(kept, b"null version");

    // Never versioned, then Enabled while a PUT waits for the key's row, which a GET after the
    // switch reads: that object stays, as the null version.
    s3.create_bucket().bucket("plain").send().await.unwrap();
    put(s3, "plain", "k", b"before").await;
    let id = bucket_id(&sql, "plain").await;
    let holder = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM s3p.objects WHERE bucket_id = $1 AND key = $2 FOR UPDATE",
            &[&id, &"k"],
        )
        .await
        .unwrap();
    let write = {
        let s3 = s3.clone();
        tokio::spawn(async move { put(&s3, "plain", "k", b"written").await })
    };
    waiting(1).await;
    set_versioning(s3, "plain", BucketVersioningStatus::Enabled).await;
    let (read, _) = get_version(s3, "plain", "k", None).await.unwrap();
    assert_eq!(read, b"before");
    holder.batch_execute("COMMIT").await.unwrap();
    let written = write.await.unwrap();
    let written = written.expect("a PUT into an Enabled bucket names its version");
    let versions = versions_of(s3, "plain", "k").await;
    assert_eq!(versions.len(), 2, "the object read, kept, and the PUT's: {versions:?}");
    assert!(
        versions.iter().any(|v| v.1 == written && v.2),
        "{written}: {versions:?}"
    );
    let (kept, _) = get_version(s3, "plain", "k", Some("null")).await.unwrap();
    assert_eq!(kept, b"before");
    gw.stop().await;
}
