//! The calls tools make besides reading and writing objects: ListObjects v1, ListObjectVersions
//! and GetBucketVersioning on an unversioned bucket, ACL getters, GetObjectAttributes, and
//! S3's NotImplemented for what the gateway does not do.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{ObjectAttributes, Permission, Tag, Tagging};
use common::TestGateway;
use common::s3::{copy_request, head_object, put_object, put_request};

async fn put(s3: &Client, key: &str, body: &'static [u8]) {
    put_object(s3, "tools", key, body).await;
}

#[tokio::test]
async fn list_objects_v1_pages_by_marker_and_next_marker() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("tools").send().await.unwrap();
    for key in ["a", "b/1", "b/2", "c", "d/1", "e"] {
        put(s3, key, b"x").await;
    }
    // Without a delimiter: no NextMarker; the client resumes after the last key.
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let page = s3
            .list_objects()
            .bucket("tools")
            .max_keys(4)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(page.next_marker, None);
        let keys: Vec<String> = page.contents().iter().filter_map(|o| o.key.clone()).collect();
        assert!(
            page.contents().iter().all(|o| o.owner.is_some()),
            "v1 always lists owners"
        );
        marker = keys.last().cloned();
        seen.extend(keys);
        if page.is_truncated != Some(true) {
            break;
        }
    }
    assert_eq!(seen, ["a", "b/1", "b/2", "c", "d/1", "e"]);

    // With a delimiter: NextMarker names the last key or common prefix of a cut page.
    let first = s3
        .list_objects()
        .bucket("tools")
        .delimiter("/")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    assert_eq!(first.is_truncated, Some(true));
    assert_eq!(first.next_marker.as_deref(), Some("b/"));
    let prefixes: Vec<&str> = first
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix.as_deref())
        .collect();
    assert_eq!(prefixes, ["b/"]);
    let second = s3
        .list_objects()
        .bucket("tools")
        .delimiter("/")
        .marker("b/")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = second.contents().iter().filter_map(|o| o.key.as_deref()).collect();
    let prefixes: Vec<&str> = second
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix.as_deref())
        .collect();
    assert_eq!((keys, prefixes), (vec!["c"], vec!["d/"]));
    assert_eq!(second.next_marker.as_deref(), Some("d/"));
    let missing = s3.list_objects().bucket("nobucket").send().await.unwrap_err();
    assert_eq!(missing.into_service_error().meta().code(), Some("NoSuchBucket"));
}

#[tokio::test]
async fn an_unversioned_bucket_answers_versioning_acl_and_attribute_calls() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("tools").send().await.unwrap();
    put(s3, "one", b"1").await;
    put(s3, "two", b"22").await;

    let versioning = s3.get_bucket_versioning().bucket("tools").send().await.unwrap();
    assert_eq!(versioning.status, None);
    let versions = s3.list_object_versions().bucket("tools").send().await.unwrap();
    let listed: Vec<(String, String, bool, i64)> = versions
        .versions()
        .iter()
        .map(|v| {
            (
                v.key.clone().unwrap(),
                v.version_id.clone().unwrap(),
                v.is_latest.unwrap(),
                v.size.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("one".to_owned(), "null".to_owned(), true, 1),
            ("two".to_owned(), "null".to_owned(), true, 2)
        ]
    );
    assert!(versions.delete_markers().is_empty());

    let acl = s3.get_bucket_acl().bucket("tools").send().await.unwrap();
    assert_eq!(acl.grants().len(), 1);
    assert_eq!(acl.grants()[0].permission, Some(Permission::FullControl));
    let acl = s3.get_object_acl().bucket("tools").key("one").send().await.unwrap();
    assert_eq!(acl.owner.unwrap().id.as_deref(), Some(common::ROOT_ACCESS_KEY));
    let missing = s3
        .get_object_acl()
        .bucket("tools")
        .key("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(missing.into_service_error().meta().code(), Some("NoSuchKey"));

    let attributes = s3
        .get_object_attributes()
        .bucket("tools")
        .key("two")
        .object_attributes(ObjectAttributes::Etag)
        .object_attributes(ObjectAttributes::ObjectSize)
        .send()
        .await
        .unwrap();
    assert_eq!(attributes.object_size, Some(2));
    let head = head_object(s3, "tools", "two").await;
    assert_eq!(
        attributes.e_tag.as_deref().map(|e| e.trim_matches('"')),
        head.e_tag.as_deref().map(|e| e.trim_matches('"'))
    );
    assert_eq!(attributes.storage_class, None, "only what was asked for");
    // boto3 and the AWS CLI send the attributes comma-separated in one header.
    let one_header = gw
        .signed(
            "GET",
            "/tools/two?attributes",
            &[("x-amz-object-attributes", "ETag,ObjectSize")],
            b"",
        )
        .await;
    assert_eq!(one_header.status, 200, "{}", one_header.body);
    assert!(
        one_header.body.contains("<ObjectSize>2</ObjectSize>"),
        "{}",
        one_header.body
    );
    assert!(one_header.body.contains("<ETag>"), "{}", one_header.body);

    let policy = s3
        .put_bucket_policy()
        .bucket("tools")
        .policy("{}")
        .send()
        .await
        .unwrap_err();
    // A document without statements is S3's MalformedPolicy (policies: tests/s3_policy.rs).
    let raw_status = policy.raw_response().map(|r| r.status().as_u16());
    assert_eq!(policy.into_service_error().meta().code(), Some("MalformedPolicy"));
    assert_eq!(raw_status, Some(400));
}

#[tokio::test]
async fn object_and_bucket_tags_are_kept_apart_from_the_body() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("tools").send().await.unwrap();
    let put = put_request(s3, "tools", "k", b"body")
        .tagging("team=data&note=a%20b")
        .send()
        .await
        .unwrap();
    let pairs = |set: &[Tag]| -> Vec<(String, String)> {
        set.iter().map(|t| (t.key().to_owned(), t.value().to_owned())).collect()
    };
    let tags = s3.get_object_tagging().bucket("tools").key("k").send().await.unwrap();
    assert_eq!(
        pairs(tags.tag_set()),
        [
            ("note".to_owned(), "a b".to_owned()),
            ("team".to_owned(), "data".to_owned())
        ]
    );
    let got = s3.get_object().bucket("tools").key("k").send().await.unwrap();
    assert_eq!(got.tag_count, Some(2));
    let before = got.last_modified;

    let one = Tagging::builder()
        .tag_set(Tag::builder().key("stage").value("gold").build().unwrap())
        .build()
        .unwrap();
    s3.put_object_tagging()
        .bucket("tools")
        .key("k")
        .tagging(one)
        .send()
        .await
        .unwrap();
    let tags = s3.get_object_tagging().bucket("tools").key("k").send().await.unwrap();
    assert_eq!(pairs(tags.tag_set()), [("stage".to_owned(), "gold".to_owned())]);
    let head = head_object(s3, "tools", "k").await;
    assert_eq!(
        (head.e_tag, head.last_modified),
        (put.e_tag, before),
        "tags leave ETag and date alone"
    );

    copy_request(s3, "tools", "copy", "tools/k").send().await.unwrap();
    let copied = s3
        .get_object_tagging()
        .bucket("tools")
        .key("copy")
        .send()
        .await
        .unwrap();
    assert_eq!(pairs(copied.tag_set()), [("stage".to_owned(), "gold".to_owned())]);

    s3.delete_object_tagging()
        .bucket("tools")
        .key("k")
        .send()
        .await
        .unwrap();
    let tags = s3.get_object_tagging().bucket("tools").key("k").send().await.unwrap();
    assert!(tags.tag_set().is_empty());
    assert_eq!(
        s3.get_object().bucket("tools").key("k").send().await.unwrap().tag_count,
        None
    );

    let duplicate = Tagging::builder()
        .tag_set(Tag::builder().key("a").value("1").build().unwrap())
        .tag_set(Tag::builder().key("a").value("2").build().unwrap())
        .build()
        .unwrap();
    let err = s3
        .put_object_tagging()
        .bucket("tools")
        .key("k")
        .tagging(duplicate)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.into_service_error().meta().code(), Some("InvalidTag"));
    let missing = s3
        .get_object_tagging()
        .bucket("tools")
        .key("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(missing.into_service_error().meta().code(), Some("NoSuchKey"));

    let none = s3.get_bucket_tagging().bucket("tools").send().await.unwrap_err();
    assert_eq!(none.into_service_error().meta().code(), Some("NoSuchTagSet"));
    let bucket_tags = Tagging::builder()
        .tag_set(Tag::builder().key("cost-centre").value("42").build().unwrap())
        .build()
        .unwrap();
    s3.put_bucket_tagging()
        .bucket("tools")
        .tagging(bucket_tags)
        .send()
        .await
        .unwrap();
    let tags = s3.get_bucket_tagging().bucket("tools").send().await.unwrap();
    assert_eq!(pairs(tags.tag_set()), [("cost-centre".to_owned(), "42".to_owned())]);
    s3.delete_bucket_tagging().bucket("tools").send().await.unwrap();
    let none = s3.get_bucket_tagging().bucket("tools").send().await.unwrap_err();
    assert_eq!(none.into_service_error().meta().code(), Some("NoSuchTagSet"));
}
