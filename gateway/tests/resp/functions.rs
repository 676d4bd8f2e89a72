//! Redis Functions (FUNCTION LOAD/LIST/DELETE/FLUSH/STATS/KILL/DUMP/RESTORE/HELP, FCALL, FCALL_RO) with
//! redis-rs and redis-cli: Redis 7.0.15's replies and error texts (compared with redis-server),
//! the `no-writes` flag, and libraries kept in PostgreSQL for the whole fleet.

use crate::redis_rs;
use common::resp::live::{LiveRedis, same_replies};
use pgvs3_testkit as common;

use common::resp::{RawResp, Value as RawValue, encode};

use common::TestGateway;
use redis::Value;
use redis_rs::{connect, error, query};

const LIB1: &str = "#!lua name=lib1
redis.register_function('f1', function(keys, args) return redis.call('set', keys[1], args[1]) end)
redis.register_function{function_name='r1', callback=function(keys, args) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}";

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

fn ok() -> Value {
    Value::Okay
}

#[tokio::test]
async fn functions_load_run_and_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "LOAD", LIB1]).await,
        bulk("lib1")
    );
    assert_eq!(query::<Value>(&mut con, &["FCALL", "f1", "1", "k", "v"]).await, ok());
    assert_eq!(query::<Value>(&mut con, &["FCALL", "r1", "1", "k"]).await, bulk("v"));
    assert_eq!(query::<Value>(&mut con, &["FCALL_RO", "r1", "1", "k"]).await, bulk("v"));
    assert_eq!(
        error(&mut con, &["FCALL_RO", "f1", "1", "k", "w"]).await,
        "ERR Can not execute a script with write flag using *_ro command."
    );
    assert_eq!(
        query::<Value>(&mut con, &["GET", "k"]).await,
        bulk("v"),
        "FCALL_RO wrote nothing"
    );
    assert_eq!(error(&mut con, &["FCALL", "nope", "0"]).await, "ERR Function not found");
    assert_eq!(
        error(&mut con, &["FCALL", "f1", "5", "k"]).await,
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        error(&mut con, &["FCALL", "f1", "-1"]).await,
        "ERR Number of keys can't be negative"
    );
    assert_eq!(
        error(&mut con, &["FCALL", "f1", "x"]).await,
        "ERR Bad number of keys provided"
    );

    // A no-writes function may not write, whichever way it is called.
    let writer = "#!lua name=lib4
redis.register_function{function_name='w', callback=function(keys) return redis.call('set', keys[1], 'x') end, flags={'no-writes'}}";
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "LOAD", writer]).await,
        bulk("lib4")
    );
    assert!(
        error(&mut con, &["FCALL", "w", "1", "k"])
            .await
            .starts_with("ERR Write commands are not allowed from read-only scripts."),
    );
    assert_eq!(query::<Value>(&mut con, &["GET", "k"]).await, bulk("v"));

    // LOAD's errors, as redis-server 7.0.15 words them.
    for (code, expected) in [
        ("return 1", "ERR Missing library metadata"),
        (LIB1, "ERR Library 'lib1' already exists"),
        ("#!lua name=lib2\nlocal x = 1", "ERR No functions registered"),
        (
            "#!lua name=lib-2\nredis.register_function('g', function() return 1 end)",
            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ),
        (
            "#!lua name=lib3\nredis.register_function('f1', function() return 1 end)",
            "ERR Function f1 already exists",
        ),
        (
            "#!lua name=lib3\nredis.register_function{function_name='g', callback=function() return 1 end, flags={'bad'}}",
            "ERR Error registering functions: ERR unknown flag given",
        ),
        (
            "#!lua name=lib3\nredis.register_function('g', function() return 1 end)\nredis.register_function('g', function() return 1 end)",
            "ERR Error registering functions: ERR Function already exists in the library",
        ),
        (
            "#!lua name=lib3 foo=bar\nx",
            "ERR Invalid metadata value given: foo=bar",
        ),
        ("#!lua\nx", "ERR Library name was not given"),
        ("#!js name=x\nx", "ERR Engine 'js' not found"),
    ] {
        assert_eq!(error(&mut con, &["FUNCTION", "LOAD", code]).await, expected, "{code}");
    }
    let calls_at_load = error(
        &mut con,
        &["FUNCTION", "LOAD", "#!lua name=lib3\nredis.call('set','a','b')"],
    )
    .await;
    assert!(
        calls_at_load.starts_with("ERR Error registering functions: ")
            && calls_at_load.contains("Script attempted to access nonexistent global variable 'call'"),
        "{calls_at_load}"
    );
    assert!(
        error(&mut con, &["FUNCTION", "LOAD", "#!lua name=lib3\nsyntax error here"])
            .await
            .starts_with("ERR Error compiling function: ")
    );
    assert_eq!(query::<Value>(&mut con, &["GET", "a"]).await, Value::Nil);

    // REPLACE: the library's functions are its new ones.
    let replaced = "#!lua name=lib1\nredis.register_function('f2', function() return 2 end)";
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "LOAD", "REPLACE", replaced]).await,
        bulk("lib1")
    );
    assert_eq!(query::<Value>(&mut con, &["FCALL", "f2", "0"]).await, Value::Int(2));
    assert_eq!(error(&mut con, &["FCALL", "f1", "0"]).await, "ERR Function not found");
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "LOAD", "REPLACE", LIB1]).await,
        bulk("lib1")
    );

    let listed: Value = query(&mut con, &["FUNCTION", "LIST", "LIBRARYNAME", "lib1", "WITHCODE"]).await;
    let function = |name: &str, description: Value, flags: &[&str]| {
        Value::Array(vec![
            bulk("name"),
            bulk(name),
            bulk("description"),
            description,
            bulk("flags"),
            Value::Array(flags.iter().map(|flag| Value::SimpleString(flag.to_string())).collect()),
        ])
    };
    assert_eq!(
        listed,
        Value::Array(vec![Value::Array(vec![
            bulk("library_name"),
            bulk("lib1"),
            bulk("engine"),
            bulk("LUA"),
            bulk("functions"),
            Value::Array(vec![
                function("f1", Value::Nil, &[]),
                function("r1", bulk("reads"), &["no-writes"])
            ]),
            bulk("library_code"),
            bulk(LIB1),
        ])])
    );
    let Value::Array(all) = query::<Value>(&mut con, &["FUNCTION", "LIST"]).await else {
        panic!()
    };
    assert_eq!(all.len(), 2);
    assert_eq!(
        error(&mut con, &["FUNCTION", "LIST", "foo"]).await,
        "ERR Unknown argument foo"
    );
    assert_eq!(
        error(&mut con, &["FUNCTION", "LIST", "LIBRARYNAME"]).await,
        "ERR library name argument was not given"
    );
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "STATS"]).await,
        Value::Array(vec![
            bulk("running_script"),
            Value::Nil,
            bulk("engines"),
            Value::Array(vec![
                bulk("LUA"),
                Value::Array(vec![
                    bulk("libraries_count"),
                    Value::Int(2),
                    bulk("functions_count"),
                    Value::Int(3)
                ]),
            ]),
        ])
    );
    assert_eq!(
        error(&mut con, &["FUNCTION", "KILL"]).await,
        "NOTBUSY No scripts in execution right now."
    );
    assert_eq!(
        error(&mut con, &["FUNCTION", "DELETE", "nope"]).await,
        "ERR Library not found"
    );
    assert_eq!(query::<Value>(&mut con, &["FUNCTION", "DELETE", "lib4"]).await, ok());
    assert_eq!(error(&mut con, &["FCALL", "w", "0"]).await, "ERR Function not found");
    assert_eq!(
        error(&mut con, &["FUNCTION", "FLUSH", "bad"]).await,
        "ERR FUNCTION FLUSH only supports SYNC|ASYNC option"
    );
    assert_eq!(query::<Value>(&mut con, &["FUNCTION", "FLUSH"]).await, ok());
    assert_eq!(
        query::<Value>(&mut con, &["FUNCTION", "LIST"]).await,
        Value::Array(vec![])
    );
}

#[tokio::test]
async fn a_library_is_shared_by_the_fleet_and_survives_a_restart() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url.clone(), &args).await;
    let mut on_first = connect(&first).await;
    let mut on_second = connect(&second).await;
    assert_eq!(
        query::<Value>(&mut on_first, &["FUNCTION", "LOAD", LIB1]).await,
        bulk("lib1")
    );
    // Seen by the other gateway at once: no replication, no wait.
    assert_eq!(
        query::<Value>(&mut on_second, &["FCALL", "f1", "1", "k", "from-second"]).await,
        ok()
    );
    assert_eq!(
        query::<Value>(&mut on_first, &["FCALL_RO", "r1", "1", "k"]).await,
        bulk("from-second")
    );
    assert_eq!(
        query::<Value>(&mut on_second, &["FUNCTION", "DELETE", "lib1"]).await,
        ok()
    );
    assert_eq!(
        error(&mut on_first, &["FCALL", "f1", "1", "k", "x"]).await,
        "ERR Function not found"
    );
    assert_eq!(
        query::<Value>(&mut on_first, &["FUNCTION", "LOAD", LIB1]).await,
        bulk("lib1")
    );
    drop((on_first, on_second));
    first.stop().await;
    second.stop().await;

    // A gateway started afresh on the database has the library, and redis-cli calls it.
    let restarted = TestGateway::with_args(url, &args).await;
    let addr = restarted.resp_addr();
    let output = tokio::process::Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["FCALL", "r1", "1", "k"])
        .output()
        .await
        .expect("redis-cli is installed (scripts/test installs it; or apt-get install redis-tools)");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "from-second\n");
}

async fn restore(con: &mut RawResp, payload: &[u8], policy: Option<&str>) -> RawValue {
    let mut args: Vec<&[u8]> = vec![b"FUNCTION", b"RESTORE", payload];
    if let Some(policy) = policy {
        args.push(policy.as_bytes());
    }
    con.send(&encode(&args)).await;
    con.reply().await.expect("a reply")
}

async fn dump(con: &mut RawResp) -> Vec<u8> {
    match con.command(&["FUNCTION", "DUMP"]).await {
        RawValue::Bulk(payload) => payload,
        other => panic!("FUNCTION DUMP answered {other:?}"),
    }
}

/// FUNCTION DUMP and RESTORE in Redis's payload (FUNCTION2 records, RDB version, CRC-64):
/// pgvs3 restores what redis-server 7.0.15 dumps (its code LZF-compressed) and redis-server what
/// pgvs3 dumps, with the APPEND, REPLACE and FLUSH policies and Redis's errors, compared live.
#[tokio::test]
async fn function_dump_and_restore_move_libraries_to_and_from_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let moved = "#!lua name=moved\nlocal function add1(a) return a + 1 end -- long enough for Redis to compress\n\
                 redis.register_function('plus', function(keys, args) return add1(tonumber(args[1])) end)";
    assert_eq!(
        theirs.command(&["FUNCTION", "LOAD", moved]).await,
        RawValue::bulk("moved")
    );
    let theirs_payload = dump(&mut theirs).await;
    assert_eq!(
        restore(&mut ours, &theirs_payload, None).await,
        RawValue::Simple("OK".into())
    );
    assert_eq!(ours.command(&["FCALL", "plus", "0", "41"]).await, RawValue::Int(42));
    for policy in [None, Some("APPEND"), Some("REPLACE")] {
        let expected = restore(&mut theirs, &theirs_payload, policy).await;
        assert_eq!(
            restore(&mut ours, &theirs_payload, policy).await,
            expected,
            "{policy:?}"
        );
    }

    // pgvs3's payload into redis-server: FLUSH drops what was there first.
    let other = "#!lua name=other\nredis.register_function('seven', function() return 7 end)";
    assert_eq!(
        ours.command(&["FUNCTION", "LOAD", other]).await,
        RawValue::bulk("other")
    );
    let ours_payload = dump(&mut ours).await;
    assert_eq!(
        restore(&mut theirs, &ours_payload, Some("FLUSH")).await,
        RawValue::Simple("OK".into())
    );
    assert_eq!(theirs.command(&["FCALL", "seven", "0"]).await, RawValue::Int(7));
    assert_eq!(theirs.command(&["FCALL", "plus", "0", "1"]).await, RawValue::Int(2));

    // A function of the payload held by another library: refused even with REPLACE, and
    // nothing changes.
    let taker = "#!lua name=taker\nredis.register_function('seven', function() return 8 end)";
    for con in [&mut ours, &mut theirs] {
        assert_eq!(con.command(&["FUNCTION", "FLUSH"]).await, RawValue::Simple("OK".into()));
        assert_eq!(con.command(&["FUNCTION", "LOAD", taker]).await, RawValue::bulk("taker"));
    }
    let expected = restore(&mut theirs, &ours_payload, Some("REPLACE")).await;
    assert_eq!(expected, RawValue::Error("ERR Function seven already exists".into()));
    assert_eq!(restore(&mut ours, &ours_payload, Some("REPLACE")).await, expected);
    assert_eq!(ours.command(&["FCALL", "seven", "0"]).await, RawValue::Int(8));
    assert_eq!(
        ours.command(&["FCALL", "plus", "0", "1"]).await,
        RawValue::Error("ERR Function not found".into())
    );

    // Errors, HELP, and where an error in a function says it was raised.
    let raising = "#!lua name=raising\nredis.register_function('boom', function(keys)\n  return redis.call('incr', keys[1])\nend)\n\
                   redis.register_function('thrown', function()\n  error('thrown here')\nend)";
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["FUNCTION", "RESTORE", "bad_payload"],
            &["FUNCTION", "RESTORE", "bad_payload", "SOMETIMES"],
            &["FUNCTION", "RESTORE", "a", "b", "c"],
            &["FUNCTION", "RESTORE"],
            &["FUNCTION", "DUMP", "x"],
            &["FUNCTION", "HELP"],
            &["FUNCTION", "LOAD", raising],
            &["SET", "s", "not a number"],
            &["FCALL", "boom", "1", "s"],
            &["FCALL", "thrown", "0"],
        ],
    )
    .await;
}

/// `redis.register_function`'s argument errors, the globals a library has while it loads
/// (`redis` with `register_function`, `log` and the version alone, neither changeable) and once
/// loaded (no `register_function`; the load-time `redis` refuses it), function names found in
/// any case, and the `#!lua` line split as Redis splits it: each reply compared with
/// redis-server 7.0.15's (its `functions` unit's cases).
#[tokio::test]
async fn libraries_register_and_run_with_the_globals_and_errors_of_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let load = |code: &'static str| -> Vec<&'static str> { vec!["FUNCTION", "LOAD", "REPLACE", code] };
    let registrations = [
        "#!lua name=bad\nredis.register_function()",
        "#!lua name=bad\nredis.register_function('f')",
        "#!lua name=bad\nredis.register_function('f', function() return 1 end, 'x')",
        "#!lua name=bad\nredis.register_function({}, function() return 1 end)",
        "#!lua name=bad\nredis.register_function('f', 'x')",
        "#!lua name=bad\nredis.register_function('', function() return 1 end)",
        "#!lua name=bad\nredis.register_function{function_name=function() return 1 end, callback=function() return 1 end}",
        "#!lua name=bad\nredis.register_function{function_name='f', callback='x'}",
        "#!lua name=bad\nredis.register_function{function_name='f', callback=function() return 1 end, foo=1}",
        "#!lua name=bad\nredis.register_function{[1]='f'}",
        "#!lua name=bad\nredis.register_function{callback=function() return 1 end}",
        "#!lua name=bad\nredis.register_function{function_name='f'}",
        "#!lua name=bad\nredis.register_function{function_name='f', callback=function() return 1 end, flags='no-writes'}",
        "#!lua name=bad\nredis.register_function{function_name='f', callback=function() return 1 end, flags={'no-writes', 'bad'}}",
        "#!lua name=bad\nredis.register_function{function_name='f', callback=function() return 1 end, description=function() end}",
        "#!lua name=bad\nredis.register_function('f', function() return 1 end)\nredis.register_function('f', function() return 1 end)",
        // While it loads a library sees `redis` alone, and may not change its globals.
        "#!lua name=bad\nreturn math.random()",
        "#!lua name=bad\nreturn redis.setresp(3)",
        "#!lua name=bad\nreturn redis.set_repl(redis.REPL_NONE)",
        "#!lua name=bad\nredis.math.random()",
        "#!lua name=bad\nredis.redis.call('ping')",
        "#!lua name=bad\na = 1",
        "#!lua name=bad\nmt = getmetatable(_G)",
        "#!lua name=bad\nredis.log = 1",
        // The `#!lua` line as `sdssplitargs` splits it.
        "#!lua name=\"quoted\"\nredis.register_function('quoted', function() return 'q' end)",
        "#!LUA NAME=upper\nredis.register_function('upper', function() return 'u' end)",
        "#!lua name=\"open\nredis.register_function('open', function() return 1 end)",
        "#!lua name=nonewline",
        "#!js name=bad-name\nx",
        // Registered: the flags in any case, logging and the version at load.
        "#!lua name=mixedlib\nredis.log(redis.LOG_NOTICE, redis.REDIS_VERSION_NUM > 0 and 'loading' or '')\n\
         redis.register_function{function_name='Mixed', callback=function() return 'mixed' end, \
         flags={'allow-stale', 'NO-WRITES', 'no-writes'}, description='mixed case'}",
        "#!lua name=lib\nlocal lib = redis\n\
         redis.register_function('inner', function() redis.register_function('x', function() return 1 end) end)\n\
         redis.register_function('sneaky', function() lib.register_function('x', function() return 1 end) end)\n\
         redis.register_function('tamper', function() lib.redis = redis end)\n\
         redis.register_function('global', function() mt = getmetatable(_G) end)\n\
         redis.register_function('reads', function(keys) return math.floor(tonumber(redis.call('get', keys[1]) or '2') / 2) end)",
    ];
    for code in registrations {
        same_replies(&mut ours, &mut theirs, &[&load(code)[..]]).await;
    }
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["FUNCTION", "LIST", "LIBRARYNAME", "mixedlib"],
            &["FCALL", "mixed", "0"],
            &["FCALL", "MIXED", "0"],
            &["FCALL_RO", "mIxEd", "0"],
            &["FCALL", "QUOTED", "0"],
            &["FCALL", "reads", "1", "k"],
            // Another library may not take a name that differs only in case.
            &load("#!lua name=other\nredis.register_function('MIXED', function() return 1 end)")[..],
        ],
    )
    .await;
    // Errors raised while a function runs: the same words (where pgvs3's position suffix is
    // Redis's too).
    for name in ["inner", "sneaky", "tamper", "global"] {
        let command = ["FCALL", name, "0"];
        let (got, want) = (ours.command(&command).await, theirs.command(&command).await);
        assert_eq!(got, want, "{command:?}");
    }
}

/// FUNCTION KILL stops a running function and SCRIPT KILL an EVAL script; each answers Redis's
/// BUSY naming the other when only the other kind runs (script.c scriptKill).
#[tokio::test]
async fn function_kill_and_script_kill_each_stop_their_own_kind() {
    let gateway = TestGateway::with_resp(&["--resp-script-time-limit", "120s"]).await;
    let mut killer = connect(&gateway).await;
    let looping = "#!lua name=looping\nredis.register_function('spin', function() while true do end end)";
    assert_eq!(
        query::<Value>(&mut killer, &["FUNCTION", "LOAD", looping]).await,
        bulk("looping")
    );
    for (run, wrong_kill, right_kill, other) in [
        (&["FCALL", "spin", "0"][..], "SCRIPT", "FUNCTION", "FUNCTION KILL"),
        (
            &["EVAL", "while true do end", "0"][..],
            "FUNCTION",
            "SCRIPT",
            "SCRIPT KILL",
        ),
    ] {
        let mut runner = connect(&gateway).await;
        let words: Vec<String> = run.iter().map(|word| word.to_string()).collect();
        let running = tokio::spawn(async move {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            error(&mut runner, &words).await
        });
        // NOTBUSY until it runs; then the wrong KILL is BUSY, naming the right one.
        let busy = loop {
            let reply = redis::cmd(wrong_kill)
                .arg("KILL")
                .query_async::<Value>(&mut killer)
                .await
                .expect_err("the wrong KILL stops nothing");
            if reply.code() == Some("BUSY") {
                break reply.detail().unwrap_or_default().to_owned();
            }
            assert_eq!(reply.code(), Some("NOTBUSY"), "{reply}");
            tokio::task::yield_now().await;
        };
        assert_eq!(
            busy,
            format!("Redis is busy running a script. You can only call {other} or SHUTDOWN NOSAVE.")
        );
        assert!(!running.is_finished(), "{run:?} ended on its own");
        assert_eq!(query::<Value>(&mut killer, &[right_kill, "KILL"]).await, ok());
        let answer = running.await.unwrap();
        assert!(answer.contains("Script killed by user"), "{answer}");
    }
}

/// A library whose load runs past 500 ms is refused with Redis's `FUNCTION LOAD timeout`,
/// whatever the script time limit (5 s here), and nothing is loaded; compared live.
#[tokio::test]
async fn a_load_that_runs_too_long_times_out_as_in_redis() {
    let gateway = TestGateway::with_resp(&["--resp-script-time-limit", "5s"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let endless = "#!lua name=endless\nlocal a = 1\nwhile 1 do a = a + 1 end";
    same_replies(
        &mut ours,
        &mut theirs,
        &[&["FUNCTION", "LOAD", endless], &["FUNCTION", "LIST"]],
    )
    .await;
    let mut con = connect(&gateway).await;
    assert_eq!(
        error(&mut con, &["FUNCTION", "LOAD", endless]).await,
        "ERR Error registering functions: ERR FUNCTION LOAD timeout"
    );
}
