//! The bit commands and LCS on string values, over the wire, with Redis's replies and errors.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};

#[tokio::test]
async fn setbit_getbit_bitcount_and_bitpos() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SETBIT", "bits", "7", "1"]).await, Value::Int(0));
    assert_eq!(raw.command(&["SETBIT", "bits", "7", "1"]).await, Value::Int(1));
    assert_eq!(raw.command(&["GET", "bits"]).await, Value::bulk("\u{1}"));
    assert_eq!(raw.command(&["GETBIT", "bits", "7"]).await, Value::Int(1));
    assert_eq!(raw.command(&["GETBIT", "bits", "100000"]).await, Value::Int(0));
    assert_eq!(raw.command(&["SETBIT", "bits", "23", "1"]).await, Value::Int(0));
    assert_eq!(
        raw.command(&["STRLEN", "bits"]).await,
        Value::Int(3),
        "grown with zero bytes"
    );
    assert_eq!(
        raw.command(&["SETBIT", "bits", "4294967296", "1"]).await.error(),
        "ERR bit offset is not an integer or out of range"
    );
    assert_eq!(
        raw.command(&["SETBIT", "bits", "1", "2"]).await.error(),
        "ERR bit is not an integer or out of range"
    );

    assert_eq!(
        raw.command(&["SET", "word", "foobar"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(raw.command(&["BITCOUNT", "word"]).await, Value::Int(26));
    assert_eq!(raw.command(&["BITCOUNT", "word", "1", "1"]).await, Value::Int(6));
    assert_eq!(
        raw.command(&["BITCOUNT", "word", "5", "30", "BIT"]).await,
        Value::Int(17)
    );
    assert_eq!(
        raw.command(&["BITCOUNT", "word", "1"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(raw.command(&["BITCOUNT", "missing"]).await, Value::Int(0));
    // Both ends from the end and reversed select nothing, as in Redis 7.0.15 (clamped, they
    // would select the first byte); BITPOS clamps them (Redis's BITPOS does too).
    assert_eq!(raw.command(&["BITCOUNT", "word", "-6", "-7"]).await, Value::Int(0));
    assert_eq!(raw.command(&["BITCOUNT", "word", "-7", "0"]).await, Value::Int(4));
    assert_eq!(
        raw.command(&["BITCOUNT", "word", "-6", "-7", "BIT"]).await,
        Value::Int(0)
    );
    assert_eq!(raw.command(&["GETRANGE", "word", "-6", "-7"]).await, Value::bulk(""));
    assert_eq!(
        raw.command(&["GETRANGE", "word", "-100", "-100"]).await,
        Value::bulk("f")
    );
    assert_eq!(raw.command(&["BITPOS", "word", "1", "-6", "-7"]).await, Value::Int(1));
    assert_eq!(raw.command(&["BITPOS", "word", "1"]).await, Value::Int(1));
    assert_eq!(raw.command(&["BITPOS", "missing", "0"]).await, Value::Int(0));
    assert_eq!(raw.command(&["BITPOS", "missing", "1"]).await, Value::Int(-1));
    assert_eq!(
        raw.command(&["BITPOS", "word", "2"]).await.error(),
        "ERR The bit argument must be 1 or 0."
    );
    // Bits survive a round trip through S3: the value is the object's bytes.
    let object = gateway
        .client
        .get_object()
        .bucket("resp")
        .key("bits")
        .send()
        .await
        .unwrap();
    assert_eq!(object.body.collect().await.unwrap().to_vec(), [1, 0, 1]);
}

#[tokio::test]
async fn lcs_answers_the_sequence_its_length_and_its_ranges() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["SET", "key1", "ohmytext"]).await;
    raw.command(&["SET", "key2", "mynewtext"]).await;
    assert_eq!(raw.command(&["LCS", "key1", "key2"]).await, Value::bulk("mytext"));
    assert_eq!(raw.command(&["LCS", "key1", "key2", "LEN"]).await, Value::Int(6));
    let int = Value::Int;
    let range = |a: i64, b: i64| Value::Array(vec![int(a), int(b)]);
    assert_eq!(
        raw.command(&["LCS", "key1", "key2", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"])
            .await,
        Value::Array(vec![
            Value::bulk("matches"),
            Value::Array(vec![Value::Array(vec![range(4, 7), range(5, 8), int(4)])]),
            Value::bulk("len"),
            int(6),
        ])
    );
    assert_eq!(
        raw.command(&["LCS", "key1", "key2", "IDX"]).await,
        Value::Array(vec![
            Value::bulk("matches"),
            Value::Array(vec![
                Value::Array(vec![range(4, 7), range(5, 8)]),
                Value::Array(vec![range(2, 3), range(0, 1)]),
            ]),
            Value::bulk("len"),
            int(6),
        ])
    );
    assert_eq!(
        raw.command(&["LCS", "key1", "key2", "LEN", "IDX"]).await.error(),
        "ERR If you want both the length and indexes, please just use IDX."
    );
    assert_eq!(raw.command(&["LCS", "key1", "nothing"]).await, Value::bulk(""));
}
