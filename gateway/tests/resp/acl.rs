//! ACL: users that are access keys, narrowed by ACL SETUSER (never widened), checked for every
//! command, in MULTI, in scripts and functions; rules kept in PostgreSQL for the whole fleet;
//! replies and error texts compared with redis-server 7.0.15's; redis-py's ACL calls.

use std::time::{Duration, Instant};

use common::resp::live::LiveRedis;
use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};

/// Keys besides the root (admin) key, none an admin; `READER` is read-only. A key that is not
/// the root key uses a RESP database whose bucket it owns (see `give`).
const OPS: (&str, &str) = ("OPSKEY", "OPSKEY-secret");
const READER: (&str, &str) = ("READERKEY", "READERKEY-secret");
const PLAIN: (&str, &str) = ("PLAINKEY", "PLAINKEY-secret");

async fn add_keys(gateway: &TestGateway) {
    let catalog = gateway.gateway.store.catalog();
    for ((key, secret), read_only) in [(OPS, false), (READER, true), (PLAIN, false)] {
        catalog
            .put_access_key(&pgvs3_gateway::store::NewAccessKey {
                access_key: key.into(),
                secret: secret.into(),
                is_root: false,
                read_only,
                description: String::new(),
            })
            .await
            .unwrap();
    }
}

/// Makes `key` the owner of database 0's bucket, and has `gateways` know at once.
async fn give(key: &str, gateways: &[&TestGateway]) {
    let sql = gateways[0].sql().await;
    sql.execute("UPDATE pgvs3.buckets SET owner = $1 WHERE name = 'resp'", &[&key])
        .await
        .unwrap();
    for gateway in gateways {
        gateway.gateway.store.catalog().reload_now().await.unwrap();
    }
}

/// A connection signed in as `key`.
async fn signed_in(addr: std::net::SocketAddr, (key, secret): (&str, &str)) -> RawResp {
    let mut raw = RawResp::connect(addr).await;
    assert_eq!(raw.command(&["AUTH", key, secret]).await, ok());
    raw
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

const NOPERM_COMMAND: &str = "NOPERM this user has no permissions to run the 'incr' command";
const NOPERM_KEY: &str = "NOPERM this user has no permissions to access one of the keys used as arguments";
const NOPERM_CHANNEL: &str = "NOPERM this user has no permissions to access one of the channels used as arguments";

/// BITOP writes its destination and reads its sources; BITFIELD only reads its key when it has
/// no SET or INCRBY (Redis's key specs and `bitfieldGetKeys`): a user's read-only and
/// write-only key patterns are checked by that, as redis-server checks them.
#[tokio::test]
async fn bit_commands_keys_are_checked_by_how_they_are_used() {
    let gateway = TestGateway::with_resp(&[]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let redis = LiveRedis::start().await;
    let mut theirs = redis.connect().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let rules = ["on", "resetkeys", "%R~read*", "%W~write*", "~rw*", "+@all"];
    let password = format!(">{}", OPS.1);
    let mut theirs_setuser = vec!["ACL", "SETUSER", OPS.0, password.as_str()];
    theirs_setuser.extend(rules);
    assert_eq!(theirs.command(&theirs_setuser).await, ok());
    let mut ours_setuser = vec!["ACL", "SETUSER", OPS.0];
    ours_setuser.extend(rules);
    assert_eq!(ours.command(&ours_setuser).await, ok());
    for command in [
        &["bitfield", "readstr", "get", "u4", "0"][..],
        &["bitfield", "readstr", "overflow", "sat", "get", "u4", "0"],
        &["bitfield", "readstr", "set", "u4", "0", "1"],
        &["bitfield", "readstr", "get", "u4", "0", "set", "u4", "0", "1"],
        &["bitfield", "readstr", "incrby", "u4", "0", "1"],
        &["bitfield", "writestr", "get", "u4", "0"],
        &["bitfield", "writestr", "set", "u4", "0", "1"],
        &["bitfield", "rwstr", "get", "u4", "0", "incrby", "u4", "0", "1"],
        &["bitfield_ro", "readstr", "get", "u4", "0"],
        &["bitfield_ro", "writestr", "get", "u4", "0"],
        &["bitop", "and", "write1", "read1", "read2"],
        &["bitop", "and", "read1", "read2"],
        &["bitop", "and", "write1", "write2"],
        &["bitop", "not", "rw1", "rw1"],
        // SET overwrites unless GET reads; MSET overwrites; a move reads and deletes from its
        // source and inserts into its destination; SORT reads its key, overwrites its STORE.
        &["set", "writestr", "v"],
        &["set", "writestr", "v", "get"],
        &["set", "readstr", "v"],
        &["mset", "write1", "v", "write2", "v"],
        &["lmove", "rw1", "write1", "left", "right"],
        &["lmove", "write1", "rw1", "left", "right"],
        &["sort", "read1", "store", "write1"],
        &["sort", "write1", "store", "read1"],
    ] {
        let mut dryrun = vec!["ACL", "DRYRUN", OPS.0];
        dryrun.extend_from_slice(command);
        assert_eq!(
            ours.command(&dryrun).await,
            theirs.command(&dryrun).await,
            "{command:?}"
        );
    }
}

/// The same rules on redis-server (its user made with a password) and on pgvs3 (the access
/// key): GETUSER's reply, and the replies of allowed and denied commands, are Redis's.
#[tokio::test]
async fn setuser_getuser_and_denials_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let redis = LiveRedis::start().await;
    let mut theirs_admin = redis.connect().await;
    let mut ours_admin = RawResp::connect(gateway.resp_addr()).await;
    let rules = [
        "on",
        "resetkeys",
        "~foo*",
        "%R~bar*",
        "resetchannels",
        "&chan*",
        "nocommands",
        "+get",
        "+set",
        "+publish",
        "+subscribe",
        "+config|get",
    ];
    let password = format!(">{}", OPS.1);
    let mut theirs_setuser = vec!["ACL", "SETUSER", OPS.0, password.as_str()];
    theirs_setuser.extend(rules);
    assert_eq!(theirs_admin.command(&theirs_setuser).await, ok());
    let mut ours_setuser = vec!["ACL", "SETUSER", OPS.0];
    ours_setuser.extend(rules);
    assert_eq!(ours_admin.command(&ours_setuser).await, ok());
    let getuser = ["ACL", "GETUSER", OPS.0];
    let theirs = theirs_admin.command(&getuser).await;
    let ours = ours_admin.command(&getuser).await;
    // Redis lists the password's hash (a key's secret is not shown), and its command rules in
    // the order of its command table (pgvs3: in the order given).
    let comparable = |reply: Value, passwords: bool| match reply {
        Value::Array(mut fields) => {
            if !passwords {
                fields[3] = Value::Array(Vec::new());
            }
            let Value::Bulk(commands) = &fields[5] else {
                panic!("commands is a string");
            };
            let mut rules: Vec<String> = String::from_utf8_lossy(commands)
                .split(' ')
                .map(str::to_owned)
                .collect();
            rules[1..].sort();
            fields[5] = Value::bulk(&rules.join(" "));
            Value::Array(fields)
        }
        other => panic!("GETUSER answers an array in RESP2: {other:?}"),
    };
    assert_eq!(comparable(ours, true), comparable(theirs, false));
    assert_eq!(
        ours_admin.command(&["ACL", "GETUSER", "NOSUCHKEY"]).await,
        theirs_admin.command(&["ACL", "GETUSER", "NOSUCHKEY"]).await
    );

    let mut theirs = redis.connect().await;
    assert_eq!(theirs.command(&["AUTH", OPS.0, OPS.1]).await, ok());
    let mut ours = signed_in(gateway.resp_addr(), OPS).await;
    for command in [
        &["SET", "foo1", "v"][..],
        &["GET", "foo1"],
        &["GET", "bar1"],
        &["SET", "bar1", "v"],
        &["GET", "other"],
        &["INCR", "foo1"],
        &["PUBLISH", "chan1", "m"],
        &["PUBLISH", "other", "m"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["ACL", "WHOAMI"],
        &["MULTI"],
        &["GET", "other"],
        &["GET", "foo1"],
        &["EXEC"],
    ] {
        assert_eq!(
            ours.command(command).await,
            theirs.command(command).await,
            "{command:?}"
        );
    }
    assert_eq!(ours.command(&["INCR", "foo1"]).await.error(), NOPERM_COMMAND);
    assert_eq!(ours.command(&["GET", "other"]).await.error(), NOPERM_KEY);
    assert_eq!(ours.command(&["SUBSCRIBE", "other"]).await.error(), NOPERM_CHANNEL);
    assert_eq!(
        ours.command(&["CONFIG", "SET", "maxmemory", "1"]).await.error(),
        "NOPERM this user has no permissions to run the 'config|set' command"
    );

    // DRYRUN, bad rules, the other subcommands' texts.
    for command in [
        &["ACL", "DRYRUN", OPS.0, "get", "foo"][..],
        &["ACL", "DRYRUN", OPS.0, "incr", "foo"],
        &["ACL", "DRYRUN", OPS.0, "get", "zzz"],
        &["ACL", "DRYRUN", OPS.0, "publish", "zzz", "m"],
        &["ACL", "DRYRUN", "NOSUCHKEY", "get", "x"],
        &["ACL", "DRYRUN", OPS.0, "nosuchcmd"],
        &["ACL", "DRYRUN", OPS.0, "get"],
        &["ACL", "SETUSER", OPS.0, "nosuchrule"],
        &["ACL", "SETUSER", OPS.0, "+nosuch"],
        &["ACL", "SETUSER", OPS.0, "+@nosuch"],
        &["ACL", "SETUSER", OPS.0, "~*", "~foo"],
        &["ACL", "SETUSER", OPS.0, "&*", "&foo"],
        &["ACL", "SETUSER", OPS.0, "%X~foo"],
        &["ACL", "SETUSER", OPS.0, "+config|get|x"],
        &["ACL", "DELUSER", "default"],
        &["ACL", "CAT", "nosuch"],
        &["ACL", "CAT"],
        &["ACL", "GENPASS", "0"],
        &["ACL", "GENPASS", "5000"],
        &["ACL", "LOG", "x"],
        &["ACL", "SAVE"],
        &["ACL", "LOAD"],
        &["ACL", "GETUSER"],
        &["ACL", "NOSUCH"],
        &["ACL", "HELP"],
    ] {
        assert_eq!(
            ours_admin.command(command).await,
            theirs_admin.command(command).await,
            "{command:?}"
        );
    }
    // The categories pgvs3's commands are in, as Redis has them, for the categories rules
    // name most: @dangerous, @admin, @write, @read.
    let Value::Array(ours_commands) = ours_admin.command(&["COMMAND", "LIST"]).await else {
        panic!("COMMAND LIST answers an array");
    };
    for category in ["dangerous", "admin", "write", "read"] {
        let Value::Array(theirs) = theirs_admin.command(&["ACL", "CAT", category]).await else {
            panic!("ACL CAT answers an array");
        };
        let Value::Array(ours) = ours_admin.command(&["ACL", "CAT", category]).await else {
            panic!("ACL CAT answers an array");
        };
        for command in &ours_commands {
            // Redis lists a container's subcommands (`config|get`); pgvs3 the container.
            let Value::Bulk(name) = command else { panic!() };
            let name = String::from_utf8_lossy(name).into_owned();
            let in_theirs = theirs.contains(command)
                || theirs.iter().any(
                    |listed| matches!(listed, Value::Bulk(listed) if listed.starts_with(format!("{name}|").as_bytes())),
                );
            if [
                "acl", "client", "command", "config", "object", "memory", "xinfo", "xgroup", "function", "script",
                "pubsub",
            ]
            .contains(&name.as_str())
            {
                continue;
            }
            assert_eq!(ours.contains(command), in_theirs, "{name} in @{category}");
        }
    }
    let Value::Bulk(password) = ours_admin.command(&["ACL", "GENPASS", "5"]).await else {
        panic!("GENPASS answers a bulk string");
    };
    assert_eq!(password.len(), 2);

    // ACL LOG: the denials, newest first, in Redis's fields.
    let Value::Array(entries) = ours_admin.command(&["ACL", "LOG", "1"]).await else {
        panic!("ACL LOG answers an array");
    };
    let Value::Array(fields) = &entries[0] else {
        panic!("an entry is a map (an array in RESP2)");
    };
    let names: Vec<&Value> = fields.iter().step_by(2).collect();
    let expected: Vec<Value> = [
        "count",
        "reason",
        "context",
        "object",
        "username",
        "age-seconds",
        "client-info",
    ]
    .iter()
    .map(|name| Value::bulk(name))
    .collect();
    assert_eq!(names, expected.iter().collect::<Vec<_>>());
    assert_eq!(fields[3], Value::bulk("command"));
    assert_eq!(fields[5], Value::bulk("toplevel"));
    assert_eq!(fields[7], Value::bulk("config|set"));
    assert_eq!(fields[9], Value::bulk(OPS.0));
    assert_eq!(ours_admin.command(&["ACL", "LOG", "RESET"]).await, ok());
    assert_eq!(ours_admin.command(&["ACL", "LOG"]).await, Value::Array(Vec::new()));

    // LIST and USERS: every key is a user, `default` too.
    let Value::Array(users) = ours_admin.command(&["ACL", "USERS"]).await else {
        panic!("USERS answers an array");
    };
    for name in ["default", OPS.0, READER.0, PLAIN.0, common::ROOT_ACCESS_KEY] {
        assert!(users.contains(&Value::bulk(name)), "{name} in {users:?}");
    }
    let Value::Array(lines) = ours_admin.command(&["ACL", "LIST"]).await else {
        panic!("LIST answers an array");
    };
    assert!(
        lines.contains(&Value::bulk("user default on nopass ~* &* +@all")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&Value::bulk(&format!(
            "user {} on ~foo* %R~bar* resetchannels &chan* -@all +get +set +publish +subscribe +config|get",
            OPS.0
        ))),
        "{lines:?}"
    );
}

/// A user can only be narrowed: a read-only key with +@all still cannot write; only the admin
/// (root) key changes users, and not once narrowed out of it; `off` refuses AUTH; DELUSER gives
/// the key its own rights back.
#[tokio::test]
async fn users_are_only_narrowed_and_only_admins_change_them() {
    let gateway = TestGateway::with_resp(&["--resp-password", "sesame"]).await;
    add_keys(&gateway).await;
    give(READER.0, &[&gateway]).await;
    let mut admin = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(admin.command(&["AUTH", "sesame"]).await, ok());
    assert_eq!(
        admin.command(&["ACL", "SETUSER", READER.0, "+@all", "allkeys"]).await,
        ok()
    );
    let mut reader = signed_in(gateway.resp_addr(), READER).await;
    assert_eq!(reader.command(&["GET", "k"]).await, Value::Nil);
    assert_eq!(
        reader.command(&["SET", "k", "v"]).await.error(),
        "NOPERM this user has no permissions to access this database's bucket"
    );

    let mut plain = signed_in(gateway.resp_addr(), PLAIN).await;
    assert_eq!(plain.command(&["ACL", "WHOAMI"]).await, Value::bulk(PLAIN.0));
    assert_eq!(
        plain.command(&["ACL", "SETUSER", PLAIN.0, "+@all"]).await.error(),
        "NOPERM this user has no permissions to run the 'acl|setuser' command"
    );
    assert_eq!(
        plain.command(&["ACL", "DELUSER", READER.0]).await.error(),
        "NOPERM this user has no permissions to run the 'acl|deluser' command"
    );
    // Users are access keys: none is made up by SETUSER.
    assert!(
        admin
            .command(&["ACL", "SETUSER", "newuser", "on"])
            .await
            .error()
            .starts_with("ERR pgvs3 users are access keys")
    );
    // Passwords are the keys' secrets.
    assert!(
        admin
            .command(&["ACL", "SETUSER", OPS.0, ">pw"])
            .await
            .error()
            .starts_with("ERR Error in ACL SETUSER modifier '>...'")
    );

    // The admin key narrowed out of @admin cannot widen itself.
    let root = (common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    assert_eq!(admin.command(&["ACL", "SETUSER", root.0, "-@admin"]).await, ok());
    let mut narrowed_root = signed_in(gateway.resp_addr(), root).await;
    assert_eq!(
        narrowed_root
            .command(&["ACL", "SETUSER", root.0, "+@all"])
            .await
            .error(),
        "NOPERM this user has no permissions to run the 'acl|setuser' command"
    );
    assert_eq!(narrowed_root.command(&["SET", "k", "v"]).await, ok());

    // Off: AUTH is refused (and logged); the connections signed in before keep working, as in
    // Redis.
    assert_eq!(admin.command(&["ACL", "SETUSER", root.0, "off"]).await, ok());
    let mut refused = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        refused.command(&["AUTH", root.0, root.1]).await.error(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(narrowed_root.command(&["GET", "k"]).await, Value::bulk("v"));
    let Value::Array(entries) = admin.command(&["ACL", "LOG", "1"]).await else {
        panic!("ACL LOG answers an array");
    };
    let Value::Array(fields) = &entries[0] else {
        panic!("an entry is a map");
    };
    assert_eq!(
        &fields[2..10],
        &[
            Value::bulk("reason"),
            Value::bulk("auth"),
            Value::bulk("context"),
            Value::bulk("toplevel"),
            Value::bulk("object"),
            Value::bulk("AUTH"),
            Value::bulk("username"),
            Value::bulk(root.0),
        ]
    );
    assert_eq!(
        admin.command(&["ACL", "DELUSER", root.0, READER.0, "nosuch"]).await,
        Value::Int(2)
    );
    assert_eq!(refused.command(&["AUTH", root.0, root.1]).await, ok());
}

/// Scripts' and functions' calls are checked as their caller's, as Redis checks them; so are
/// the keys EVAL and FCALL name, and the commands MULTI queues.
#[tokio::test]
async fn scripts_functions_and_multi_are_checked() {
    let gateway = TestGateway::with_resp(&[]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let mut admin = RawResp::connect(gateway.resp_addr()).await;
    let library = "#!lua name=acllib\nredis.register_function('getter', function(keys, args) return redis.call('get', args[1]) end)";
    assert_eq!(
        admin.command(&["FUNCTION", "LOAD", library]).await,
        Value::bulk("acllib")
    );
    assert_eq!(
        admin
            .command(&[
                "ACL",
                "SETUSER",
                OPS.0,
                "resetkeys",
                "~k*",
                "resetchannels",
                "&ch*",
                "-config"
            ])
            .await,
        ok()
    );
    let mut ops = signed_in(gateway.resp_addr(), OPS).await;
    let undeclared = "return redis.call('get', 'x')";
    assert_eq!(
        ops.command(&["EVAL", undeclared, "1", "k1"]).await.error(),
        format!(
            "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: {}, on @user_script:1.",
            sha1_hex(undeclared)
        )
    );
    assert_eq!(
        ops.command(&["EVAL", "return redis.call('get', KEYS[1])", "1", "x"])
            .await
            .error(),
        NOPERM_KEY
    );
    assert_eq!(
        ops.command(&["EVAL", "return redis.call('set', KEYS[1], 'v')", "1", "k1"])
            .await,
        ok()
    );
    let publish = "return redis.call('publish', 'zz', 'x')";
    assert_eq!(
        ops.command(&["EVAL", publish, "0"]).await.error(),
        format!(
            "ERR The user executing the script can't publish to the channel mentioned in the command script: {}, on @user_script:1.",
            sha1_hex(publish)
        )
    );
    assert!(
        ops.command(&["FCALL", "getter", "0", "x"])
            .await
            .error()
            .starts_with("ERR The user executing the script can't access at least one of the keys")
    );
    assert_eq!(ops.command(&["FCALL", "getter", "0", "k1"]).await, Value::bulk("v"));
    assert_eq!(
        ops.command(&["FCALL", "getter", "1", "x", "k1"]).await.error(),
        NOPERM_KEY
    );

    assert_eq!(ops.command(&["MULTI"]).await, ok());
    assert_eq!(ops.command(&["SET", "x", "v"]).await.error(), NOPERM_KEY);
    assert_eq!(ops.command(&["SET", "k2", "v"]).await, Value::Simple("QUEUED".into()));
    assert_eq!(
        ops.command(&["EXEC"]).await.error(),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(ops.command(&["EXISTS", "k2"]).await, Value::Int(0));
    assert_eq!(
        ops.command(&["CONFIG", "GET", "maxmemory"]).await.error(),
        "NOPERM this user has no permissions to run the 'config|get' command"
    );
    // The log says where each denial was.
    let Value::Array(entries) = admin.command(&["ACL", "LOG"]).await else {
        panic!("ACL LOG answers an array");
    };
    let contexts: Vec<Value> = entries
        .iter()
        .map(|entry| match entry {
            Value::Array(fields) => fields[5].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    for context in ["toplevel", "multi", "lua"] {
        assert!(contexts.contains(&Value::bulk(context)), "{context} in {contexts:?}");
    }
}

fn sha1_hex(body: &str) -> String {
    let output = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(body.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&output.stdout)[..40].to_owned()
}

/// Rules are the fleet's: SETUSER on one gateway narrows the user's open connections on another
/// at their next command, and holds after a restart.
#[tokio::test]
async fn rules_hold_for_the_fleet_and_survive_a_restart() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url.clone(), &args).await;
    add_keys(&first).await;
    give(OPS.0, &[&first, &second]).await;
    let mut on_second = signed_in(second.resp_addr(), OPS).await;
    assert_eq!(on_second.command(&["SET", "k", "v"]).await, ok());
    let mut admin = RawResp::connect(first.resp_addr()).await;
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-set"]).await, ok());
    // At its next command once the other gateway heard of the change (its catalog NOTIFY).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match on_second.command(&["SET", "other", "w"]).await {
            Value::Error(error) => {
                assert_eq!(error, "NOPERM this user has no permissions to run the 'set' command");
                break;
            }
            _ => assert!(Instant::now() < deadline, "the rule did not reach the other gateway"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(on_second.command(&["GET", "k"]).await, Value::bulk("v"));
    first.stop().await;
    second.stop().await;
    let restarted = TestGateway::with_args(url, &args).await;
    let mut again = signed_in(restarted.resp_addr(), OPS).await;
    assert_eq!(
        again.command(&["SET", "k", "w"]).await.error(),
        "NOPERM this user has no permissions to run the 'set' command"
    );
    let mut admin = RawResp::connect(restarted.resp_addr()).await;
    assert_eq!(
        admin.command(&["ACL", "GETUSER", OPS.0]).await,
        Value::Array(vec![
            Value::bulk("flags"),
            Value::Array(vec![Value::bulk("on")]),
            Value::bulk("passwords"),
            Value::Array(vec![]),
            Value::bulk("commands"),
            Value::bulk("+@all -set"),
            Value::bulk("keys"),
            Value::bulk("~*"),
            Value::bulk("channels"),
            Value::bulk("&*"),
            Value::bulk("selectors"),
            Value::Array(vec![]),
        ])
    );
}

/// A disabled (or deleted) access key's open connections are closed at their next command, as
/// Redis closes a deleted user's.
#[tokio::test]
async fn a_disabled_key_s_open_connection_is_closed() {
    let gateway = TestGateway::with_resp(&[]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let mut ops = signed_in(gateway.resp_addr(), OPS).await;
    assert_eq!(ops.command(&["SET", "k", "v"]).await, ok());
    let catalog = gateway.gateway.store.catalog();
    assert!(catalog.set_access_key_disabled(OPS.0, true).await.unwrap());
    // This gateway reloaded its catalog before answering: the very next command is refused.
    ops.send(&common::resp::encode(&[b"GET", b"k"])).await;
    assert_eq!(ops.reply().await, None, "the connection of a disabled key is closed");
    let mut refused = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        refused.command(&["AUTH", OPS.0, OPS.1]).await.error(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert!(catalog.set_access_key_disabled(OPS.0, false).await.unwrap());
    let mut again = signed_in(gateway.resp_addr(), OPS).await;
    assert_eq!(again.command(&["GET", "k"]).await, Value::bulk("v"));
    assert!(catalog.delete_access_key(OPS.0).await.unwrap());
    // A deletion reaches the connections with the catalog's NOTIFY.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        again.send(&common::resp::encode(&[b"GET", b"k"])).await;
        if again.reply().await.is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "the connection of a deleted key stays open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ACL DELUSER closes the connections of the users whose rules it dropped, on every gateway,
/// idle or not, as Redis 7.0 closes a deleted user's connections (before, they went on with all
/// their key may do: wider than the rules they were given); a new AUTH gets the key's rights
/// (the key stays). `off` leaves signed-in connections working, as in Redis. A rule's change
/// applies from the connection's next command, also within a pipeline it is running (before,
/// from its next batch: a command after a BLPOP ran with the rights of before).
#[tokio::test]
async fn deluser_closes_the_user_s_connections_and_rules_apply_per_command() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url, &args).await;
    add_keys(&first).await;
    give(OPS.0, &[&first, &second]).await;
    let mut admin = RawResp::connect(first.resp_addr()).await;
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-incr"]).await, ok());
    let mut here = signed_in(first.resp_addr(), OPS).await;
    let mut there = signed_in(second.resp_addr(), OPS).await;
    // The second gateway has the rules (its catalog NOTIFY came) once its connection is denied.
    let deadline = Instant::now() + Duration::from_secs(10);
    while there.command(&["INCR", "n"]).await != Value::Error(NOPERM_COMMAND.into()) {
        assert!(Instant::now() < deadline, "the rules did not reach the other gateway");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Within a pipeline: the SET after a BLPOP is judged by the rules as they are when it comes.
    let mut blocked = signed_in(first.resp_addr(), OPS).await;
    let mut pipeline = common::resp::encode(&[b"BLPOP", b"q", b"0"]);
    pipeline.extend_from_slice(&common::resp::encode(&[b"SET", b"after", b"v"]));
    blocked.send(&pipeline).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(admin.command(&["INFO", "clients"]).await, Value::Bulk(info) if String::from_utf8_lossy(&info).contains("blocked_clients:1"))
    {
        assert!(Instant::now() < deadline, "the BLPOP did not block");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-set"]).await, ok());
    assert_eq!(admin.command(&["RPUSH", "q", "x"]).await, Value::Int(1));
    assert_eq!(
        blocked.reply().await,
        Some(Value::Array(vec![Value::bulk("q"), Value::bulk("x")]))
    );
    assert_eq!(
        blocked.reply().await.unwrap().error(),
        "NOPERM this user has no permissions to run the 'set' command"
    );
    // `off`: no new AUTH, but the signed-in connections work on.
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "off"]).await, ok());
    assert_eq!(here.command(&["GET", "k"]).await, Value::Nil);
    let mut refused = RawResp::connect(first.resp_addr()).await;
    assert_eq!(
        refused.command(&["AUTH", OPS.0, OPS.1]).await.error(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "on"]).await, ok());
    assert_eq!(admin.command(&["ACL", "DELUSER", OPS.0]).await, Value::Int(1));
    // Idle connections, here and on the other gateway, are closed without a word.
    assert!(here.closed().await, "a deleted user's connection stays open");
    assert!(
        there.closed().await,
        "a deleted user's connection on another gateway stays open"
    );
    assert!(blocked.closed().await, "a deleted user's connection stays open");
    let mut again = signed_in(first.resp_addr(), OPS).await;
    assert_eq!(again.command(&["INCR", "n"]).await, Value::Int(1));
}

/// Sends BLPOP `list` 0 and GET k as one pipeline on `client`, and waits until `info` (a
/// connection to the same gateway) counts `blocked` blocked clients. The connection looked at
/// its user before the BLPOP; it looks again only before the GET.
async fn block_then_get(client: &mut RawResp, list: &str, info: &mut RawResp, blocked: usize) {
    let mut pipeline = common::resp::encode(&[b"BLPOP", list.as_bytes(), b"0"]);
    pipeline.extend_from_slice(&common::resp::encode(&[b"GET", b"k"]));
    client.send(&pipeline).await;
    let counted = format!("blocked_clients:{blocked}\r");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(info.command(&["INFO", "clients"]).await, Value::Bulk(info) if String::from_utf8_lossy(&info).contains(&counted))
    {
        assert!(Instant::now() < deadline, "the BLPOP did not block");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The BLPOP of [`block_then_get`] is served; then the connection closes instead of the GET.
async fn served_then_closed(client: &mut RawResp, list: &str, who: &str) {
    assert_eq!(
        client.reply().await,
        Some(Value::Array(vec![Value::bulk(list), Value::bulk("x")]))
    );
    assert_eq!(client.reply().await, None, "{who}: the deleted user's GET was answered");
}

/// A user deleted between two looks of a connection (while a BLPOP of its runs: it looks
/// before each command, on this gateway and on another) closes it, whatever ACL SETUSER did
/// around the deletion: a user given rules and deleted, and a user deleted and given its rules
/// again, are no longer the user the connection signed in as, as in Redis, where the user
/// made again is a new user. Before, a connection compared whether rules were stored: it took
/// the first for a user never narrowed and the second for the same narrowed user, and went on.
#[tokio::test]
async fn a_user_deleted_between_two_looks_of_a_connection_is_gone_for_it() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url, &args).await;
    add_keys(&first).await;
    give(OPS.0, &[&first, &second]).await;
    let mut admin = RawResp::connect(first.resp_addr()).await;
    let mut info = RawResp::connect(second.resp_addr()).await;
    // The second gateway reloads its catalog when told here, not on its own: what it reads
    // comes after both changes.
    let catalog = second.gateway.store.catalog();

    // Signed in while no rule narrowed the user; given rules, then deleted.
    let mut here = signed_in(first.resp_addr(), OPS).await;
    let mut there = signed_in(second.resp_addr(), OPS).await;
    block_then_get(&mut here, "q1", &mut admin, 1).await;
    block_then_get(&mut there, "q2", &mut info, 1).await;
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-incr"]).await, ok());
    assert_eq!(admin.command(&["ACL", "DELUSER", OPS.0]).await, Value::Int(1));
    catalog.reload_now().await.unwrap();
    assert_eq!(admin.command(&["RPUSH", "q1", "x"]).await, Value::Int(1));
    served_then_closed(&mut here, "q1", "given rules and deleted, here").await;
    assert_eq!(admin.command(&["RPUSH", "q2", "x"]).await, Value::Int(1));
    served_then_closed(&mut there, "q2", "given rules and deleted, on another gateway").await;

    // Signed in under rules; deleted, then given the same rules again.
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-incr"]).await, ok());
    catalog.reload_now().await.unwrap();
    let mut here = signed_in(first.resp_addr(), OPS).await;
    let mut there = signed_in(second.resp_addr(), OPS).await;
    block_then_get(&mut here, "q3", &mut admin, 1).await;
    block_then_get(&mut there, "q4", &mut info, 1).await;
    assert_eq!(admin.command(&["ACL", "DELUSER", OPS.0]).await, Value::Int(1));
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "-incr"]).await, ok());
    catalog.reload_now().await.unwrap();
    assert_eq!(admin.command(&["RPUSH", "q3", "x"]).await, Value::Int(1));
    served_then_closed(&mut here, "q3", "deleted and made again, here").await;
    assert_eq!(admin.command(&["RPUSH", "q4", "x"]).await, Value::Int(1));
    served_then_closed(&mut there, "q4", "deleted and made again, on another gateway").await;

    // A change that deletes nothing keeps the connections, under the new rules; a new AUTH
    // is the user made again.
    let mut again = signed_in(second.resp_addr(), OPS).await;
    assert_eq!(again.command(&["INCR", "n"]).await, Value::Error(NOPERM_COMMAND.into()));
    block_then_get(&mut again, "q5", &mut info, 1).await;
    assert_eq!(admin.command(&["ACL", "SETUSER", OPS.0, "+incr", "-get"]).await, ok());
    catalog.reload_now().await.unwrap();
    assert_eq!(admin.command(&["RPUSH", "q5", "x"]).await, Value::Int(1));
    assert_eq!(
        again.reply().await,
        Some(Value::Array(vec![Value::bulk("q5"), Value::bulk("x")]))
    );
    assert_eq!(
        again.reply().await.unwrap().error(),
        "NOPERM this user has no permissions to run the 'get' command"
    );
    assert_eq!(again.command(&["INCR", "n"]).await, Value::Int(1));
}

/// redis-py's ACL calls.
#[tokio::test]
async fn redis_py_acl_calls() {
    let gateway = TestGateway::with_resp(&[]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let addr = gateway.resp_addr();
    let python = format!(
        r#"
import redis
r = redis.Redis(host="{host}", port={port}, decode_responses=True)
assert r.acl_whoami() == "default"
assert r.acl_setuser("{ops}", enabled=True, reset_keys=True, keys=["app:*"], commands=["-@all", "+get", "+set", "+acl|whoami"])
user = r.acl_getuser("{ops}")
assert user["enabled"] and user["keys"] == ["~app:*"], user
assert "+get" in user["commands"] and "+set" in user["commands"], user
assert "{ops}" in r.acl_users()
assert "read" in r.acl_cat()
assert "get" in r.acl_cat("read")
ops = redis.Redis(host="{host}", port={port}, username="{ops}", password="{secret}", decode_responses=True)
assert ops.acl_whoami() == "{ops}"
ops.set("app:1", "v")
try:
    ops.get("other")
    raise SystemExit("a denied key was read")
except redis.exceptions.NoPermissionError as err:
    assert "keys used as arguments" in str(err), err
log = r.acl_log()
assert log[0]["reason"] == "key" and log[0]["username"] == "{ops}", log
assert r.acl_deluser("{ops}") == 1
print("done")
"#,
        host = addr.ip(),
        port = addr.port(),
        ops = OPS.0,
        secret = OPS.1,
    );
    gateway.python_passes(&python, "done").await;
}

/// MONITOR: this gateway's commands in Redis's format (credentials redacted, admin commands not
/// shown), for the root key only and users allowed `monitor`; a monitor that does not read is
/// disconnected once its lines pass `--resp-pubsub-output-limit`, not buffered without bound.
#[tokio::test]
async fn monitor_shows_commands_as_redis_and_drops_a_slow_monitor() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&["--resp-pubsub-output-limit", "1MiB"]).await;
    add_keys(&gateway).await;
    give(OPS.0, &[&gateway]).await;
    let addr = gateway.resp_addr();
    let mut monitor = RawResp::connect(addr).await;
    assert_eq!(monitor.command(&["MONITOR"]).await, ok());
    let mut client = RawResp::connect(addr).await;
    assert_eq!(client.command(&["SET", "a b", "x\"y\nz"]).await, ok());
    assert_eq!(
        client.command(&["CONFIG", "GET", "maxmemory"]).await,
        Value::Array(vec![Value::bulk("maxmemory"), Value::bulk("0")])
    );
    assert_eq!(client.command(&["AUTH", OPS.0, OPS.1]).await, ok());
    client.send(&common::resp::encode(&[b"ECHO", b"\x01\xff"])).await;
    assert_eq!(client.reply().await, Some(Value::Bulk(b"\x01\xff".to_vec())));
    let local = client_addr(&mut client).await;
    let mut lines = Vec::new();
    for _ in 0..4 {
        let Some(Value::Simple(line)) = monitor.reply().await else {
            panic!("a monitor line is a simple string");
        };
        lines.push(line);
    }
    let (time, rest) = lines[0].split_once(' ').unwrap();
    let (seconds, micros) = time.split_once('.').unwrap();
    assert!(
        seconds.parse::<u64>().unwrap() > 1_700_000_000 && micros.len() == 6,
        "{time}"
    );
    assert_eq!(rest, format!("[0 {local}] \"SET\" \"a b\" \"x\\\"y\\nz\""));
    assert!(
        lines[1].ends_with(&format!("[0 {local}] \"AUTH\" \"(redacted)\" \"(redacted)\"")),
        "{lines:?}"
    );
    assert!(
        lines[2].ends_with(&format!("[0 {local}] \"ECHO\" \"\\x01\\xff\"")),
        "{lines:?}"
    );
    assert!(lines[3].ends_with("\"CLIENT\" \"INFO\""), "{lines:?}");

    // Only the root key; a user's ACL rules may take MONITOR away.
    let mut ops = signed_in(addr, OPS).await;
    assert_eq!(
        ops.command(&["MONITOR"]).await.error(),
        "NOPERM this user has no permissions to run the 'monitor' command"
    );
    let mut admin = RawResp::connect(addr).await;
    assert_eq!(admin.command(&["ACL", "SETUSER", "default", "-monitor"]).await, ok());
    assert_eq!(
        admin.command(&["MONITOR"]).await.error(),
        "NOPERM this user has no permissions to run the 'monitor' command"
    );
    assert_eq!(admin.command(&["ACL", "SETUSER", "default", "+monitor"]).await, ok());

    // A monitor that reads nothing: 64 MiB of lines are more than the socket buffers and the
    // 1 MiB limit hold; it is closed without reading a byte, and the clients go on.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    slow.write_all(&common::resp::encode(&[b"CLIENT", b"ID"]))
        .await
        .unwrap();
    slow.write_all(&common::resp::encode(&[b"MONITOR"])).await.unwrap();
    let mut answered = Vec::new();
    while !answered.ends_with(b"+OK\r\n") {
        let mut byte = [0u8; 1];
        slow.read_exact(&mut byte).await.unwrap();
        answered.push(byte[0]);
    }
    let answered = String::from_utf8(answered).unwrap();
    let slow_id = answered.trim_start_matches(':').split('\r').next().unwrap().to_owned();
    let big = "a".repeat(512 * 1024);
    for _ in 0..128 {
        assert_eq!(client.command(&["ECHO", &big]).await, Value::bulk(&big));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Value::Bulk(list) = client.command(&["CLIENT", "LIST"]).await else {
            panic!("CLIENT LIST answers a bulk string");
        };
        if !String::from_utf8_lossy(&list).contains(&format!("id={slow_id} ")) {
            break;
        }
        assert!(Instant::now() < deadline, "the slow monitor was not closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(client.command(&["PING"]).await, Value::Simple("PONG".into()));
}

/// The client's own address, as the gateway sees it (CLIENT INFO's `addr=`).
async fn client_addr(client: &mut RawResp) -> String {
    let Value::Bulk(info) = client.command(&["CLIENT", "INFO"]).await else {
        panic!("CLIENT INFO answers a bulk string");
    };
    let info = String::from_utf8(info).unwrap();
    info.split(' ')
        .find_map(|field| field.strip_prefix("addr="))
        .unwrap()
        .to_owned()
}
