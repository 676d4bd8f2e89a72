//! The checker on hand-written histories whose verdict is known: it must accept what a correct
//! store may answer, concurrency and uncertainty included, and reject the defects it exists
//! to find.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::checker::{Verdict, check, minimise};
use super::ojs;
use super::recorder::{Answer, Op};
use super::resp::{self, Key};
use super::s3::{self, ListCall, ListCmd, ListReply, Lock, Resend, Versions};
use super::s3_bodies;

/// An operation of client `client` from `call` to `ret` milliseconds (`None`: no answer).
fn op<I, O>(client: usize, call: u64, ret: Option<u64>, input: I, output: O) -> Op<I, O> {
    Op {
        client,
        call: call * 1000,
        input,
        answer: match ret {
            Some(ret) => Answer::Returned { at: ret * 1000, output },
            None => Answer::Lost("connection reset".into()),
        },
    }
}

fn s3(key: &str, cmd: s3::Cmd) -> s3::Call {
    s3::Call { key: key.into(), cmd }
}

fn written(version: &str) -> s3::Reply {
    s3::Reply::Written {
        version: version.into(),
        etag: format!("\"etag-{version}\""),
    }
}

fn body(version: &str, body: &str) -> s3::Reply {
    s3::Reply::Body {
        version: version.into(),
        body: body.into(),
    }
}

fn deleted() -> s3::Reply {
    s3::Reply::Deleted { marker: None }
}

fn versions_verdict(ops: &[Op<s3::Call, s3::Reply>]) -> Verdict {
    check(&Versions::default(), ops, 100_000)
}

/// A write that changes nothing where the search first meets it (a SET of the value the key
/// holds) may still have taken effect later, after a concurrent write: the search must not
/// settle its place early. (It took every operation that left the state as it was at once, as
/// it may a read, and called this history a violation.)
#[test]
fn a_write_that_changes_nothing_now_may_take_effect_later() {
    let set = |client, call, ret, value: &str| {
        op(
            client,
            call,
            Some(ret),
            redis(resp::Cmd::Set(value.into(), None)),
            resp::Reply::Ok,
        )
    };
    let ops = [
        set(0, 0, 1, "a"),
        set(1, 2, 10, "a"),
        set(2, 3, 4, "b"),
        op(3, 11, Some(12), redis(resp::Cmd::Get), resp::Reply::Bulk("a".into())),
    ];
    assert_eq!(key_verdict(&ops), Verdict::Linearizable);
    let mut without_the_second_set = ops.to_vec();
    without_the_second_set.remove(1);
    assert_eq!(key_verdict(&without_the_second_set), Verdict::Violation);
}

#[test]
fn concurrent_writes_may_be_read_in_either_order() {
    let put = |client, body: &str, version: &str| {
        op(
            client,
            0,
            Some(10),
            s3("k", s3::Cmd::Put(body.into())),
            written(version),
        )
    };
    let ops = [
        put(0, "a", "v1"),
        put(1, "b", "v2"),
        op(2, 5, Some(20), s3("k", s3::Cmd::Get), body("v1", "a")),
        op(2, 21, Some(22), s3("k", s3::Cmd::Get), body("v1", "a")),
    ];
    assert_eq!(versions_verdict(&ops), Verdict::Linearizable);
}

#[test]
fn a_read_may_not_go_back_to_an_older_version() {
    let ops = [
        op(0, 0, Some(1), s3("k", s3::Cmd::Put("a".into())), written("v1")),
        op(0, 2, Some(3), s3("k", s3::Cmd::Put("b".into())), written("v2")),
        op(1, 4, Some(5), s3("k", s3::Cmd::Get), body("v1", "a")),
    ];
    assert_eq!(versions_verdict(&ops), Verdict::Violation);
}

/// Defect 1: two versions deleted at once, both acknowledged, one comes back as current.
#[test]
fn a_lost_version_delete_is_a_violation() {
    let ops = [
        op(0, 0, Some(1), s3("k", s3::Cmd::Put("a".into())), written("v1")),
        op(0, 2, Some(3), s3("k", s3::Cmd::Put("b".into())), written("v2")),
        op(0, 4, Some(5), s3("k", s3::Cmd::Put("c".into())), written("v3")),
        op(1, 6, Some(9), s3("k", s3::Cmd::DeleteVersion("v2".into())), deleted()),
        op(2, 6, Some(9), s3("k", s3::Cmd::DeleteVersion("v3".into())), deleted()),
        op(3, 10, Some(11), s3("k", s3::Cmd::Get), body("v2", "b")),
    ];
    assert_eq!(versions_verdict(&ops), Verdict::Violation);
    // With the one acknowledged delete unanswered instead, the version may have survived.
    let mut unanswered = ops.clone();
    unanswered[3].answer = Answer::Lost("timeout".into());
    assert_eq!(versions_verdict(&unanswered), Verdict::Linearizable);
}

#[test]
fn an_unanswered_write_may_or_may_not_have_happened() {
    let ops = |seen: s3::Reply| {
        [
            op(0, 0, Some(1), s3("k", s3::Cmd::Put("a".into())), written("v1")),
            op(1, 2, None, s3("k", s3::Cmd::Put("b".into())), written("?")),
            op(2, 3, Some(4), s3("k", s3::Cmd::Get), body("v1", "a")),
            op(2, 5, Some(6), s3("k", s3::Cmd::Get), seen),
        ]
    };
    assert_eq!(versions_verdict(&ops(body("v9", "b"))), Verdict::Linearizable);
    assert_eq!(versions_verdict(&ops(body("v1", "a"))), Verdict::Linearizable);
    assert_eq!(versions_verdict(&ops(s3::Reply::NotFound)), Verdict::Violation);
}

/// Defect 3: a delete whose If-Match names another ETag must not delete.
#[test]
fn an_ignored_delete_condition_is_a_violation() {
    let ops = [
        op(0, 0, Some(1), s3("k", s3::Cmd::Put("a".into())), written("v1")),
        op(
            0,
            2,
            Some(3),
            s3("k", s3::Cmd::DeleteIfMatch(s3::WRONG_ETAG.into())),
            s3::Reply::Deleted {
                marker: Some("m1".into()),
            },
        ),
    ];
    assert_eq!(versions_verdict(&ops), Verdict::Violation);
    let mut refused = ops.clone();
    refused[1].answer = Answer::Returned {
        at: 3000,
        output: s3::Reply::PreconditionFailed,
    };
    assert_eq!(versions_verdict(&refused), Verdict::Linearizable);
}

fn refused() -> s3::Reply {
    s3::Reply::Refused(403, "AccessDenied".into())
}

/// A delete of a version under COMPLIANCE retention must be refused and remove nothing; one
/// bypassing GOVERNANCE removes a GOVERNANCE version, but not by a key denied the bypass.
#[test]
fn a_locked_version_deleted_or_a_denied_bypass_is_a_violation() {
    let history = |lock: Lock, delete: s3::Cmd, answer: s3::Reply| {
        vec![
            op(
                0,
                0,
                Some(1),
                s3("k", s3::Cmd::PutLocked("a".into(), lock)),
                written("v1"),
            ),
            op(0, 2, Some(3), s3("k", delete), answer),
            op(0, 4, Some(5), s3("k", s3::Cmd::Get), body("v1", "a")),
        ]
    };
    let delete = || s3::Cmd::DeleteVersion("v1".into());
    let bypass = |allowed| s3::Cmd::DeleteVersionBypass("v1".into(), allowed);
    assert_eq!(
        versions_verdict(&history(Lock::Compliance, delete(), refused())),
        Verdict::Linearizable
    );
    assert_eq!(
        versions_verdict(&history(Lock::Compliance, delete(), deleted())),
        Verdict::Violation
    );
    assert_eq!(
        versions_verdict(&history(Lock::LegalHold, bypass(true), deleted())),
        Verdict::Violation
    );
    assert_eq!(
        versions_verdict(&history(Lock::Governance, bypass(false), deleted())),
        Verdict::Violation
    );
    assert_eq!(
        versions_verdict(&history(Lock::Governance, bypass(false), refused())),
        Verdict::Linearizable
    );
    // Bypassed by a key allowed to: gone, so the GET after must not find it.
    assert_eq!(
        versions_verdict(&history(Lock::Governance, bypass(true), deleted())),
        Verdict::Violation
    );
    let mut gone = history(Lock::Governance, bypass(true), deleted());
    gone[2].answer = Answer::Returned {
        at: 5000,
        output: s3::Reply::NotFound,
    };
    assert_eq!(versions_verdict(&gone), Verdict::Linearizable);
}

/// A pass may expire an aged current version, never one written after it was aged.
#[test]
fn a_pass_expiring_a_version_younger_than_its_rule_is_a_violation() {
    let done = || s3::Reply::Done;
    let ops = |pass_at: u64| {
        vec![
            op(0, 0, Some(1), s3("k", s3::Cmd::Put("a".into())), written("v1")),
            op(0, 2, Some(3), s3("k", s3::Cmd::Age), done()),
            op(0, 4, Some(5), s3("k", s3::Cmd::Put("b".into())), written("v2")),
            op(1, pass_at, Some(pass_at + 1), s3("k", s3::Cmd::Expire), done()),
            op(0, 10, Some(11), s3("k", s3::Cmd::Get), s3::Reply::NotFound),
        ]
    };
    // Over before b was written: it expired a (then b is current: the GET is wrong either way).
    assert_eq!(versions_verdict(&ops(3)), Verdict::Violation);
    // Overlapping b's write it may have expired a before it; but b is young: still wrong.
    let mut overlapping = ops(3);
    overlapping[3].call = 3000;
    overlapping[3].answer = Answer::Returned {
        at: 9000,
        output: done(),
    };
    overlapping.sort_by_key(|op| op.call);
    assert_eq!(versions_verdict(&overlapping), Verdict::Violation);
    // Without the second write, a pass hides the aged one.
    let mut aged_only = ops(6);
    aged_only.remove(2);
    assert_eq!(versions_verdict(&aged_only), Verdict::Linearizable);
}

/// While Suspended a PUT makes the null version, replacing the null one; a real version id
/// then is a violation.
#[test]
fn a_version_made_while_suspended_is_the_null_one() {
    let ops = |marker: &str| {
        vec![
            op(0, 0, Some(1), s3("k", s3::Cmd::Versioning(true)), s3::Reply::Done),
            op(0, 2, Some(3), s3("k", s3::Cmd::Put("a".into())), written("null")),
            op(0, 4, Some(5), s3("k", s3::Cmd::Put("b".into())), written("null")),
            op(
                0,
                6,
                Some(7),
                s3("k", s3::Cmd::Delete),
                s3::Reply::Deleted {
                    marker: Some(marker.into()),
                },
            ),
            op(0, 8, Some(9), s3("k", s3::Cmd::DeleteVersion("null".into())), deleted()),
            // No null version is left: not a's, replaced by b's, replaced by the marker.
            op(0, 10, Some(11), s3("k", s3::Cmd::Get), s3::Reply::NotFound),
        ]
    };
    assert_eq!(versions_verdict(&ops("null")), Verdict::Linearizable);
    assert_eq!(versions_verdict(&ops("m1")), Verdict::Violation);
    let mut a_back = ops("null");
    a_back[5].answer = Answer::Returned {
        at: 11000,
        output: body("null", "a"),
    };
    assert_eq!(versions_verdict(&a_back), Verdict::Violation);
}

/// A copy's read of its source must see a body the source had during the copy, and its
/// destination then holds that body.
#[test]
fn a_copy_of_a_body_its_source_never_had_is_a_violation() {
    use s3_bodies::{Call, Cmd, Object, Reply};
    let call = |key: &str, cmd| Call { key: key.into(), cmd };
    let ops = |copied: &str, read: &str| {
        vec![
            op(0, 0, Some(1), call("s0", Cmd::Put("a".into())), Reply::Written),
            op(0, 2, Some(3), call("s0", Cmd::Put("b".into())), Reply::Written),
            op(
                1,
                4,
                Some(6),
                call(
                    "s0",
                    Cmd::CopiedTo {
                        destination: "d0".into(),
                        part: false,
                    },
                ),
                Reply::Copied(copied.into()),
            ),
            op(
                1,
                4,
                Some(6),
                call(
                    "d0",
                    Cmd::CopyFrom {
                        source: "s0".into(),
                        part: false,
                    },
                ),
                Reply::Copied(copied.into()),
            ),
            op(2, 7, Some(8), call("d0", Cmd::Get), Reply::Body(read.into())),
        ]
    };
    let verdicts = |ops: Vec<Op<Call, Reply>>| {
        ["s0", "d0"].map(|key| {
            let on: Vec<_> = ops.iter().filter(|op| op.input.key == key).cloned().collect();
            check(&Object::default(), &on, 100_000)
        })
    };
    assert_eq!(verdicts(ops("b", "b")), [Verdict::Linearizable; 2]);
    // The source held b throughout the copy.
    assert_eq!(verdicts(ops("a", "a"))[0], Verdict::Violation);
    // The destination must hold what the copy said it carried.
    assert_eq!(verdicts(ops("b", "a"))[1], Verdict::Violation);
}

fn redis(cmd: resp::Cmd) -> resp::Call {
    resp::Call { key: "k".into(), cmd }
}

fn key_verdict(ops: &[Op<resp::Call, resp::Reply>]) -> Verdict {
    check(&Key::default(), ops, 100_000)
}

/// Defect 4: `SET k v PX 500`, after expiry `LPUSH k a; EXPIRE k 100`, then TYPE says string.
#[test]
fn a_resurrected_expired_key_is_a_violation() {
    let mut ops = vec![
        op(
            0,
            0,
            Some(1),
            redis(resp::Cmd::Set("v".into(), Some(500))),
            resp::Reply::Ok,
        ),
        op(
            0,
            1000,
            Some(1001),
            redis(resp::Cmd::LPush("a".into())),
            resp::Reply::Int(1),
        ),
        op(
            0,
            1002,
            Some(1003),
            redis(resp::Cmd::Expire(100_000)),
            resp::Reply::Int(1),
        ),
        op(
            0,
            1004,
            Some(1005),
            redis(resp::Cmd::Type),
            resp::Reply::Status("string".into()),
        ),
    ];
    assert_eq!(key_verdict(&ops), Verdict::Violation);
    ops[3].answer = Answer::Returned {
        at: 1_005_000,
        output: resp::Reply::Status("list".into()),
    };
    assert_eq!(key_verdict(&ops), Verdict::Linearizable);
}

#[test]
fn a_read_at_the_deadline_may_see_the_key_or_not_and_after_it_must_not() {
    let get = |at: u64, seen: resp::Reply| {
        vec![
            op(
                0,
                0,
                Some(1),
                redis(resp::Cmd::Set("v".into(), Some(500))),
                resp::Reply::Ok,
            ),
            op(1, at, Some(at + 1), redis(resp::Cmd::Get), seen),
        ]
    };
    let value = || resp::Reply::Bulk("v".into());
    assert_eq!(key_verdict(&get(300, value())), Verdict::Linearizable);
    assert_eq!(key_verdict(&get(300, resp::Reply::Nil)), Verdict::Violation);
    assert_eq!(key_verdict(&get(500, value())), Verdict::Linearizable);
    assert_eq!(key_verdict(&get(500, resp::Reply::Nil)), Verdict::Linearizable);
    assert_eq!(key_verdict(&get(900, value())), Verdict::Violation);
    assert_eq!(key_verdict(&get(900, resp::Reply::Nil)), Verdict::Linearizable);
}

#[test]
fn a_ttl_must_fit_the_deadline_and_the_key_must_be_there() {
    let ttl = |millis: bool, at: u64, left: i64| {
        vec![
            op(
                0,
                0,
                Some(1),
                redis(resp::Cmd::Set("v".into(), Some(500))),
                resp::Reply::Ok,
            ),
            op(
                1,
                at,
                Some(at + 1),
                redis(resp::Cmd::Ttl { millis }),
                resp::Reply::Int(left),
            ),
        ]
    };
    assert_eq!(key_verdict(&ttl(true, 200, 300)), Verdict::Linearizable);
    assert_eq!(key_verdict(&ttl(false, 200, 0)), Verdict::Linearizable);
    assert_eq!(key_verdict(&ttl(true, 200, 90_000)), Verdict::Violation);
    assert_eq!(key_verdict(&ttl(true, 200, -1)), Verdict::Violation);
    assert_eq!(key_verdict(&ttl(true, 200, -2)), Verdict::Violation);
    assert_eq!(key_verdict(&ttl(true, 900, -2)), Verdict::Linearizable);
    assert_eq!(key_verdict(&ttl(false, 900, 0)), Verdict::Violation);
}

/// The race of an expiry with a write that loaded the key alive: a read after the deadline
/// answers absent, and the EXPIRE that overlapped it succeeded, so a later read sees the hash.
#[test]
fn a_typed_key_absent_at_its_deadline_and_back_after_is_a_violation() {
    let ops = |seen: resp::Reply| {
        vec![
            op(
                0,
                0,
                Some(1),
                redis(resp::Cmd::HSet("f".into(), "a".into())),
                resp::Reply::Int(1),
            ),
            op(0, 2, Some(3), redis(resp::Cmd::Expire(500)), resp::Reply::Int(1)),
            op(
                0,
                550,
                Some(760),
                redis(resp::Cmd::Expire(100_000)),
                resp::Reply::Int(1),
            ),
            op(1, 620, Some(630), redis(resp::Cmd::HGet("f".into())), seen),
            op(1, 770, Some(771), redis(resp::Cmd::Exists), resp::Reply::Int(1)),
        ]
    };
    assert_eq!(key_verdict(&ops(resp::Reply::Bulk("a".into()))), Verdict::Linearizable);
    assert_eq!(key_verdict(&ops(resp::Reply::Nil)), Verdict::Violation);
}

#[test]
fn the_last_field_deleted_deletes_the_hash() {
    let ops = |exists: i64| {
        vec![
            op(
                0,
                0,
                Some(1),
                redis(resp::Cmd::HSet("f".into(), "a".into())),
                resp::Reply::Int(1),
            ),
            op(0, 2, Some(3), redis(resp::Cmd::HDel("f".into())), resp::Reply::Int(1)),
            op(0, 4, Some(5), redis(resp::Cmd::Exists), resp::Reply::Int(exists)),
            op(0, 6, Some(7), redis(resp::Cmd::LLen), resp::Reply::Int(0)),
        ]
    };
    assert_eq!(key_verdict(&ops(0)), Verdict::Linearizable);
    assert_eq!(key_verdict(&ops(1)), Verdict::Violation);
}

#[test]
fn a_transaction_commits_only_over_what_it_read() {
    let ops = |seen: Option<&str>| {
        vec![
            op(0, 0, Some(1), redis(resp::Cmd::Set("a".into(), None)), resp::Reply::Ok),
            op(0, 2, Some(3), redis(resp::Cmd::Set("b".into(), None)), resp::Reply::Ok),
            op(
                1,
                4,
                Some(6),
                redis(resp::Cmd::Txn("c".into())),
                resp::Reply::Committed(seen.map(str::to_owned)),
            ),
        ]
    };
    assert_eq!(key_verdict(&ops(Some("b"))), Verdict::Linearizable);
    assert_eq!(key_verdict(&ops(Some("a"))), Verdict::Violation);
}

/// The rotating script pops the head and pushes its value at the tail; popping a list's only
/// element deletes the key, TTL and all, before the push makes it again.
#[test]
fn a_rotating_script_answers_the_head_and_a_list_it_empties_loses_its_ttl() {
    let ops = |head: &str, ttl: i64| {
        vec![
            op(0, 0, Some(1), redis(resp::Cmd::LPush("a".into())), resp::Reply::Int(1)),
            op(0, 2, Some(3), redis(resp::Cmd::Expire(100_000)), resp::Reply::Int(1)),
            op(
                0,
                4,
                Some(5),
                redis(resp::Cmd::Rotate("b".into())),
                resp::Reply::Bulk(head.into()),
            ),
            op(
                0,
                6,
                Some(7),
                redis(resp::Cmd::Ttl { millis: true }),
                resp::Reply::Int(ttl),
            ),
            op(
                0,
                8,
                Some(9),
                redis(resp::Cmd::LRange),
                resp::Reply::Array(vec!["b".into()]),
            ),
        ]
    };
    assert_eq!(key_verdict(&ops("a", -1)), Verdict::Linearizable);
    assert_eq!(key_verdict(&ops("a", 99_990)), Verdict::Violation);
    assert_eq!(key_verdict(&ops("b", -1)), Verdict::Violation);
}

fn list(key: &str, cmd: ListCmd) -> ListCall {
    ListCall { key: key.into(), cmd }
}

fn listing(pages: &[&[&str]]) -> ListReply {
    ListReply::Pages(
        pages
            .iter()
            .map(|page| page.iter().map(|k| (*k).to_owned()).collect())
            .collect(),
    )
}

/// Defect 2: a listing resumed past a key that was there all along.
#[test]
fn a_skipped_listing_key_is_a_violation() {
    let lister = list(
        "",
        ListCmd::List {
            start_after: None,
            max_keys: 1,
            resend: Resend::Token,
        },
    );
    let ops = |pages: ListReply, delete_during: bool| {
        let mut ops = vec![
            op(0, 0, Some(1), list("a", ListCmd::Put), ListReply::Done),
            op(0, 2, Some(3), list("b", ListCmd::Put), ListReply::Done),
            op(1, 10, Some(20), lister.clone(), pages),
        ];
        if delete_during {
            ops.push(op(0, 12, Some(13), list("b", ListCmd::Delete), ListReply::Done));
        }
        ops.sort_by_key(|op| op.call);
        ops
    };
    assert!(s3::check_listings(&ops(listing(&[&["a"], &["b"]]), false)).is_empty());
    let skipped = s3::check_listings(&ops(listing(&[&["a"]]), false));
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].iter().any(|op| op.input.key == "b"),
        "the minimal history names b"
    );
    // A key deleted during the listing may be missing; one never written may not appear.
    assert!(s3::check_listings(&ops(listing(&[&["a"]]), true)).is_empty());
    assert_eq!(
        s3::check_listings(&ops(listing(&[&["a"], &["b"], &["c"]]), false)).len(),
        1
    );
}

#[test]
fn the_minimiser_keeps_only_what_the_failure_needs() {
    let mut ops = Vec::new();
    for i in 0..40u64 {
        ops.push(op(
            0,
            10 * i,
            Some(10 * i + 1),
            redis(resp::Cmd::Set(format!("x{i}"), None)),
            resp::Reply::Ok,
        ));
        ops.push(op(
            1,
            10 * i + 2,
            Some(10 * i + 3),
            redis(resp::Cmd::Get),
            resp::Reply::Bulk(format!("x{i}")),
        ));
    }
    // A stale read in the middle: the value of write 20 read after write 30.
    ops.push(op(
        2,
        305,
        Some(306),
        redis(resp::Cmd::Get),
        resp::Reply::Bulk("x20".into()),
    ));
    ops.sort_by_key(|op| op.call);
    assert_eq!(key_verdict(&ops), Verdict::Violation);
    let minimal = minimise(&Key::default(), &ops, 100_000, Instant::now() + Duration::from_secs(30));
    let shown = super::checker::render(&minimal.ops);
    assert_eq!(minimal.ops.len(), 1, "{shown}");
    assert_eq!(
        minimal.ops[0].output(),
        Some(&resp::Reply::Bulk("x20".into())),
        "{shown}"
    );
    assert_eq!(
        minimal.start,
        [Key {
            value: Some(resp::Value::Str("x30".into())),
            expiry: None
        }],
        "what the read should have seen"
    );
}

#[test]
fn a_job_claimed_twice_at_once_is_a_violation() {
    let claim = |attempt| ojs::Reply::Claimed {
        job: "j".into(),
        attempt,
    };
    let history = |second_claim_at: u64| {
        vec![
            op(0, 0, Some(1), ojs::Cmd::Enqueue, ojs::Reply::Enqueued("j".into())),
            op(1, 2, Some(3), ojs::Cmd::Fetch, claim(1)),
            op(2, second_claim_at, Some(second_claim_at + 1), ojs::Cmd::Fetch, claim(2)),
        ]
    };
    let states = BTreeMap::from([("j".to_owned(), "discarded".to_owned())]);
    assert_eq!(ojs::check(&history(50), &states).len(), 1);
    assert!(ojs::check(&history(2 + ojs::VISIBILITY_MS + 10), &states).is_empty());
    let mut acked_twice = history(2 + ojs::VISIBILITY_MS + 10);
    for attempt in [1, 2] {
        acked_twice.push(op(
            3,
            1000 + attempt as u64,
            Some(1010),
            ojs::Cmd::Ack {
                job: "j".into(),
                attempt,
            },
            ojs::Reply::Done,
        ));
    }
    assert_eq!(ojs::check(&acked_twice, &states).len(), 1);
}
