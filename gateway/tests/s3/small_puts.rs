//! Small PUTs that arrive together share one transaction and one commit (the store's write
//! lanes, store/put_lanes.rs), through aws-sdk-s3: each PUT is still answered with its own
//! ETag, each key holds the bytes of a PUT that was acknowledged for it, and a refusal of one
//! (a quota) refuses that one alone.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use common::s3::{put_request, refusal};
use common::{TestGateway, noise};
use md5::Digest;

fn quoted_md5(data: &[u8]) -> String {
    format!("\"{}\"", hex::encode(md5::Md5::digest(data)))
}

async fn get(s3: &Client, bucket: &str, key: &str) -> (Vec<u8>, String) {
    let object = s3.get_object().bucket(bucket).key(key).send().await.unwrap();
    let etag = object.e_tag().unwrap().to_string();
    (object.body.collect().await.unwrap().to_vec(), etag)
}

async fn shared_commits(gw: &TestGateway) -> f64 {
    gw.metric(r#"pgvs3_put_lane_writes_total{commit="shared"}"#)
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn puts_sharing_a_commit_each_get_their_own_answer_and_bytes() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("lanes").send().await.unwrap();
    // Rounds of 48 PUTs at once, 8 of them to one key, until some shared a commit (on two
    // cores the first round does; the bound keeps a failure finite).
    for round in 0..10u64 {
        let writes: Vec<(String, Vec<u8>)> = (0..48u64)
            .map(|i| {
                let key = match i < 8 {
                    true => format!("r{round}/same"),
                    false => format!("r{round}/k{i}"),
                };
                (key, noise(4096 + i as usize, round * 100 + i))
            })
            .collect();
        let answers = futures::future::join_all(
            writes
                .iter()
                .map(|(key, body)| put_request(s3, "lanes", key, body.clone()).send()),
        )
        .await;
        for ((key, body), answer) in writes.iter().zip(answers) {
            let answer = answer.unwrap_or_else(|err| panic!("PUT {key}: {err:?}"));
            assert_eq!(answer.e_tag(), Some(quoted_md5(body).as_str()), "{key}");
        }
        for (key, body) in writes.iter().skip(8) {
            assert_eq!(&get(s3, "lanes", key).await.0, body, "{key}");
        }
        // The one key written 8 times at once holds one of the 8 bodies, with its ETag.
        let (stored, etag) = get(s3, "lanes", &format!("r{round}/same")).await;
        assert!(writes[..8].iter().any(|(_, body)| *body == stored), "r{round}/same");
        assert_eq!(etag, quoted_md5(&stored));
        if shared_commits(&gw).await > 0.0 {
            return;
        }
    }
    panic!("48 PUTs at once never shared a commit in 10 rounds");
}

#[tokio::test]
async fn a_quota_refuses_only_the_puts_past_it_when_they_share_a_commit() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("capped").send().await.unwrap();
    gw.gateway
        .store
        .catalog()
        .set_bucket_quota("capped", None, Some(20))
        .await
        .unwrap();
    let keys: Vec<String> = (0..48).map(|i| format!("k{i}")).collect();
    let answers = futures::future::join_all(
        keys.iter()
            .zip(0..)
            .map(|(key, seed)| put_request(s3, "capped", key, noise(1024, seed)).send()),
    )
    .await;
    let mut accepted = Vec::new();
    for (key, answer) in keys.iter().zip(&answers) {
        match answer {
            Ok(_) => accepted.push(key.clone()),
            Err(err) => assert_eq!(
                refusal(err),
                (400, "XMinioAdminBucketQuotaExceeded".to_string()),
                "{key}"
            ),
        }
    }
    assert_eq!(accepted.len(), 20);
    let listed: Vec<String> = s3
        .list_objects_v2()
        .bucket("capped")
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .map(|object| object.key().unwrap().to_string())
        .collect();
    accepted.sort();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, accepted, "exactly the acknowledged PUTs are stored");
}
