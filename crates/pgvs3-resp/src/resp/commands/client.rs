//! Redis's "connection" group: PING, ECHO, QUIT, RESET, AUTH, HELLO, SELECT and CLIENT — the
//! state of this one connection (its authentication, protocol, database, name, reply mode).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::server::REDIS_VERSION;
use crate::resp::clients::{ClientInfo, KillFilter};
use crate::resp::codec::Reply;
use crate::resp::command::{self, Spec, syntax_error, wrong_arity};
use crate::resp::connection::{Connection, ReplyMode, STS_REFUSED, WRONGPASS, store_error};

/// The longest client name, lib-name or lib-ver.
const MAX_CLIENT_ATTRIBUTE: usize = 512;
/// The longest CLIENT PAUSE: a longer one ends then (CLIENT UNPAUSE ends any sooner).
const MAX_PAUSE: Duration = Duration::from_secs(3600);

impl Connection {
    pub(crate) async fn connection_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            // A RESP2 subscriber's PING answers in the shape of its messages.
            "ping" if !self.resp3 && self.subscribed() => Reply::Array(vec![
                Reply::text("pong"),
                Reply::Bulk(args.get(1).cloned().unwrap_or_default()),
            ]),
            "ping" => match args {
                [_] => Reply::Simple("PONG"),
                [_, message] => Reply::Bulk(message.clone()),
                _ => wrong_arity("ping"),
            },
            "echo" => Reply::Bulk(args[1].clone()),
            "quit" => {
                self.quit = true;
                Reply::OK
            }
            "reset" => {
                self.stop_tracking();
                self.unsubscribe_all();
                self.monitor = None;
                self.multi = None;
                self.multi_failed = false;
                self.unwatch_all();
                self.cursors.clear();
                self.db = 0;
                self.resp3 = false;
                self.drop_inbox();
                // Back to the `default` user, as in Redis: signed out where AUTH is needed.
                self.principal = match self.server.settings.require_auth {
                    true => None,
                    false => Some(self.server.root.clone()),
                };
                self.unauthenticated_since = Instant::now();
                self.username = "default".into();
                self.acl_version = i64::MIN;
                self.acl_deletions = 0;
                self.set_client(|info| info.user = "default".into());
                self.set_client(|info| info.name.clear());
                Reply::Simple("RESET")
            }
            "auth" => match args {
                [_, password] => self.authenticate(None, password).await,
                [_, user, password] => self.authenticate(Some(user), password).await,
                _ => syntax_error(),
            },
            "hello" => self.hello(args).await,
            "select" => match command::parse_integer(&args[1]) {
                None => command::not_an_integer(),
                Some(db) if u32::try_from(db).is_ok_and(|db| self.server.settings.databases.contains_key(&db)) => {
                    // A database whose bucket the key may not read is refused here, as its
                    // commands would be: a tenant does not learn by OK which databases exist.
                    if let Err(reply) = self.keyspace_of(db as u32, crate::store::Access::Read).await {
                        return reply;
                    }
                    self.db = db as u32;
                    Reply::OK
                }
                Some(_) => Reply::error("ERR DB index is out of range"),
            },
            "client" => self.client(args).await,
            other => unreachable!("{other} is not a connection command"),
        }
    }

    async fn authenticate(&mut self, user: Option<&Bytes>, password: &Bytes) -> Reply {
        match self.check_credentials(user, password).await {
            Ok(()) => Reply::OK,
            Err(reply) => reply,
        }
    }

    /// Checks a user name (none: `default`) and password, and makes that user this connection's:
    /// an access key with its secret, or `default` with `--resp-password`; a user ACL SETUSER
    /// turned `off` is refused as a wrong password is (and logged in ACL LOG, as Redis does).
    async fn check_credentials(&mut self, user: Option<&Bytes>, password: &Bytes) -> Result<(), Reply> {
        let configured = self.server.settings.password.as_deref();
        let username = match user {
            None => "default".to_owned(),
            Some(user) => String::from_utf8_lossy(user).into_owned(),
        };
        let principal = match username.as_str() {
            "default" => match configured {
                Some(configured) if constant_time_eq(configured.as_bytes(), password) => Ok(self.server.root.clone()),
                None if user.is_none() => {
                    return Err(Reply::error(
                        "ERR AUTH <password> called without any password configured for the default user. \
                         Are you sure your configuration is correct?",
                    ));
                }
                _ => Err(Reply::error(WRONGPASS)),
            },
            access_key => match self.server.buckets.catalog().access_key(access_key).await {
                // AUTH cannot carry a session token, without which temporary credentials
                // are not to be used (docs/resp-compatibility.md).
                Ok(Some(key)) if key.session.is_some() => Err(Reply::error(STS_REFUSED)),
                Ok(Some(key)) if constant_time_eq(key.secret.as_bytes(), password) => Ok(key.principal()),
                Ok(_) => Err(Reply::error(WRONGPASS)),
                Err(err) => return Err(store_error(err)),
            },
        };
        let signed_in = match principal {
            Ok(principal) => {
                let (stored, version) = self
                    .server
                    .acl
                    .stored(self.server.buckets.catalog(), &username)
                    .await
                    .map_err(store_error)?;
                let deletions = stored.deletions;
                let rules = stored.rules.unwrap_or_else(crate::resp::acl::unnarrowed);
                match rules.enabled {
                    true => self
                        .keeps_subscriptions(&rules)
                        .map(|()| (principal, rules, version, deletions)),
                    false => Err(Reply::error(WRONGPASS)),
                }
            }
            Err(reply) => Err(reply),
        };
        match signed_in {
            Ok((principal, rules, version, deletions)) => {
                let tenant = self.channel_namespace();
                self.principal = Some(principal);
                self.user = rules;
                self.acl_version = version;
                self.acl_deletions = deletions;
                self.set_client(|info| info.user.clone_from(&username));
                self.username = username;
                self.signed_in(tenant).await;
                Ok(())
            }
            Err(reply) => {
                let client_info = self.client_info();
                self.server
                    .acl
                    .log("auth", "toplevel", "AUTH".into(), &username, client_info);
                Err(reply)
            }
        }
    }

    async fn hello(&mut self, args: &[Bytes]) -> Reply {
        let mut protocol = if self.resp3 { 3 } else { 2 };
        if let Some(version) = args.get(1) {
            protocol = match command::parse_integer(version) {
                Some(version @ (2 | 3)) => version,
                Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
                None => return Reply::error("ERR Protocol version is not an integer or out of range"),
            };
        }
        let mut name = None;
        let mut i = 2;
        while i < args.len() {
            let option = args[i].to_ascii_lowercase();
            match option.as_slice() {
                b"auth" if i + 2 < args.len() => {
                    if let Err(reply) = self.check_credentials(Some(&args[i + 1]), &args[i + 2]).await {
                        return reply;
                    }
                    i += 3;
                }
                b"setname" if i + 1 < args.len() => {
                    name = Some(args[i + 1].clone());
                    i += 2;
                }
                _ => {
                    return Reply::error(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(&args[i])
                    ));
                }
            }
        }
        if self.principal.is_none() {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
                 HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
                 select the RESP protocol version at the same time",
            );
        }
        if let Some(name) = name {
            let reply = self.set_name(&name);
            if reply.is_error() {
                return reply;
            }
        }
        self.resp3 = protocol == 3;
        // A RESP3 client can be sent pushes it did not ask for: the invalidations of the
        // clients that redirect their tracking to it (CLIENT TRACKING ... REDIRECT), even with
        // CLIENT REPLY OFF, as in Redis. Its inbox is open from HELLO 3 on.
        match self.resp3 {
            true => drop(self.inbox()),
            false => self.drop_inbox(),
        }
        let role = if self.server.replica.is_standby() {
            "replica"
        } else {
            "master"
        };
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("redis")),
            (Reply::text("version"), Reply::text(REDIS_VERSION)),
            (Reply::text("proto"), Reply::Integer(protocol)),
            (Reply::text("id"), Reply::Integer(self.id() as i64)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text(role)),
            (Reply::text("modules"), Reply::Array(Vec::new())),
        ])
    }

    pub(crate) fn set_client(&self, update: impl FnOnce(&mut ClientInfo)) {
        self.server.clients.update(self.id(), update);
    }

    fn set_name(&self, name: &[u8]) -> Reply {
        match client_attribute(name, "Client names") {
            Ok(name) => {
                self.set_client(|info| info.name = name);
                Reply::OK
            }
            Err(reply) => reply,
        }
    }

    async fn client(&mut self, args: &[Bytes]) -> Reply {
        let subcommand = args[1].to_ascii_lowercase();
        match (subcommand.as_slice(), args.len()) {
            (b"id", 2) => Reply::Integer(self.id() as i64),
            (b"setname", 3) => self.set_name(&args[2]),
            (b"getname", 2) => self
                .server
                .clients
                .name(self.id())
                .map_or(Reply::Nil, |name| Reply::text(&name)),
            (b"list", _) => self.client_list(&args[2..]),
            (b"info", 2) => self
                .server
                .clients
                .line(self.id())
                .map_or(Reply::Nil, |line| Reply::text(&line)),
            (b"setinfo", 4) => {
                let attribute = String::from_utf8_lossy(&args[2]);
                let value = match args[2].to_ascii_lowercase().as_slice() {
                    b"lib-name" | b"lib-ver" => match client_attribute(&args[3], &attribute) {
                        Ok(value) => value,
                        Err(reply) => return reply,
                    },
                    _ => String::new(),
                };
                match args[2].to_ascii_lowercase().as_slice() {
                    b"lib-name" => self.set_client(|info| info.lib_name = value),
                    b"lib-ver" => self.set_client(|info| info.lib_version = value),
                    _ => {
                        return Reply::error(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&args[2])
                        ));
                    }
                }
                Reply::OK
            }
            // Nothing is evicted, and no access time is kept (OBJECT IDLETIME is 0): both
            // modes have nothing to change here.
            (b"no-evict" | b"no-touch", 3) => match args[2].to_ascii_lowercase().as_slice() {
                b"on" | b"off" => Reply::OK,
                _ => syntax_error(),
            },
            (b"pause", 3 | 4) => {
                if let Err(reply) = self.root_only("client|pause") {
                    return reply;
                }
                let Some(timeout) = command::parse_integer(&args[2]) else {
                    return Reply::error("ERR timeout is not an integer or out of range");
                };
                let Ok(timeout) = u64::try_from(timeout) else {
                    return Reply::error("ERR timeout is negative");
                };
                let all = match args.get(3).map(|mode| mode.to_ascii_lowercase()) {
                    None => true,
                    Some(mode) if mode == b"all" => true,
                    Some(mode) if mode == b"write" => false,
                    Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
                };
                // Capped: a pause past the cap would hold every client of the gateway for as
                // long as it says (CLIENT UNPAUSE still ends it).
                let Some(until) = Instant::now().checked_add(Duration::from_millis(timeout).min(MAX_PAUSE)) else {
                    return Reply::error("ERR timeout is not an integer or out of range");
                };
                self.server.pause.pause(until, all);
                Reply::OK
            }
            (b"unpause", 2) => {
                if let Err(reply) = self.root_only("client|unpause") {
                    return reply;
                }
                self.server.pause.unpause();
                Reply::OK
            }
            (b"unblock", 3 | 4) => {
                let Some(id) = command::parse_integer(&args[2]) else {
                    return command::not_an_integer();
                };
                let error = match args.get(3).map(|reason| reason.to_ascii_lowercase()) {
                    None => false,
                    Some(reason) if reason == b"timeout" => false,
                    Some(reason) if reason == b"error" => true,
                    Some(_) => return Reply::error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
                };
                let unblocked =
                    u64::try_from(id).is_ok_and(|id| self.server.clients.unblock(id, error, self.own_clients()));
                Reply::Integer(i64::from(unblocked))
            }
            (b"reply", 3) => match args[2].to_ascii_lowercase().as_slice() {
                b"on" => {
                    self.reply_mode = ReplyMode::On;
                    Reply::OK
                }
                // These two answer nothing, the mode already applying to their own reply.
                b"off" => {
                    self.reply_mode = ReplyMode::Off;
                    Reply::OK
                }
                b"skip" => {
                    self.reply_mode = ReplyMode::SkipThisAndNext;
                    Reply::OK
                }
                _ => syntax_error(),
            },
            // Redis's arity for the subcommand (which would otherwise be an empty filter that
            // matches every client).
            (b"kill", 2) => wrong_arity("client|kill"),
            (b"kill", 3) => {
                // The old form: CLIENT KILL addr:port.
                let filter = KillFilter {
                    addr: Some(String::from_utf8_lossy(&args[2]).into_owned()),
                    owner: self.own_clients().map(str::to_owned),
                    ..Default::default()
                };
                match self.server.clients.kill(&filter) {
                    0 => Reply::error("ERR No such client"),
                    _ => Reply::OK,
                }
            }
            (b"kill", _) => match self.kill_filter(&args[2..]) {
                Ok(filter) => Reply::Integer(self.server.clients.kill(&filter) as i64),
                Err(reply) => reply,
            },
            // Client-side caching: commands/tracking.rs.
            (b"tracking", 3..) => self.client_tracking(args).await,
            (b"caching", 3) => self.client_caching(args),
            (b"getredir", 2) => self.client_getredir(),
            (b"trackinginfo", 2) => self.client_trackinginfo(),
            (
                b"id" | b"setname" | b"getname" | b"info" | b"setinfo" | b"no-evict" | b"no-touch" | b"reply"
                | b"unblock" | b"pause" | b"unpause" | b"tracking" | b"caching" | b"getredir" | b"trackinginfo",
                _,
            ) => wrong_arity(&format!("client|{}", String::from_utf8_lossy(&subcommand))),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }

    /// CLIENT LIST's options, as Redis 7 reads them: `TYPE <type>`, or `ID <id> [<id> ...]`
    /// (the clients among them that exist, in the order given). A key that is not the root key
    /// sees its own user's clients alone.
    fn client_list(&self, options: &[Bytes]) -> Reply {
        let clients = &self.server.clients;
        let owner = self.own_clients();
        match options {
            [] => Reply::text(&clients.list(owner)),
            [option, kind] if option.eq_ignore_ascii_case(b"type") => match client_type(kind) {
                // Every client of pgvs3 is a normal one.
                Ok(normal) => Reply::text(&if normal { clients.list(owner) } else { String::new() }),
                Err(reply) => reply,
            },
            [option, ids @ ..] if option.eq_ignore_ascii_case(b"id") && !ids.is_empty() => {
                let mut text = String::new();
                for id in ids {
                    let Some(id) = command::parse_integer(id) else {
                        return Reply::error("ERR Invalid client ID");
                    };
                    if let Some(line) = u64::try_from(id).ok().and_then(|id| clients.line_of(id, owner)) {
                        text.push_str(&line);
                    }
                }
                Reply::text(&text)
            }
            _ => syntax_error(),
        }
    }

    /// CLIENT KILL's filters (`ID`, `ADDR`, `LADDR`, `TYPE`, `USER`, `MAXAGE`, `SKIPME`), in
    /// pairs, read in order as Redis reads them (so the first bad one is the error).
    fn kill_filter(&self, args: &[Bytes]) -> Result<KillFilter, Reply> {
        let mut filter = KillFilter {
            skip: Some(self.id()),
            owner: self.own_clients().map(str::to_owned),
            ..Default::default()
        };
        for pair in args.chunks(2) {
            let [option, value] = pair else {
                return Err(syntax_error());
            };
            let text = String::from_utf8_lossy(value).into_owned();
            match option.to_ascii_lowercase().as_slice() {
                b"id" => {
                    let id = command::parse_integer(value)
                        .and_then(|id| u64::try_from(id).ok())
                        .filter(|id| *id > 0)
                        .ok_or_else(|| Reply::error("ERR client-id should be greater than 0"))?;
                    filter.id = Some(id);
                }
                b"addr" => filter.addr = Some(text),
                b"laddr" => filter.laddr = Some(text),
                b"maxage" => {
                    let age = command::parse_integer(value)
                        .and_then(|age| u64::try_from(age).ok())
                        .ok_or_else(command::not_an_integer)?;
                    filter.max_age = Some(age);
                }
                b"type" => filter.other_type = !client_type(value)?,
                // Every connection acts as Redis's `default` user (CLIENT LIST's `user=`).
                b"user" if text == "default" => {}
                b"user" => return Err(Reply::error(format!("ERR No such user '{text}'"))),
                b"skipme" => match text.to_ascii_lowercase().as_str() {
                    "yes" => filter.skip = Some(self.id()),
                    "no" => filter.skip = None,
                    _ => return Err(syntax_error()),
                },
                _ => return Err(syntax_error()),
            }
        }
        Ok(filter)
    }
}

/// A client type of CLIENT LIST and CLIENT KILL: true for `normal`, false for the types no
/// pgvs3 client has (`master`, `replica`/`slave`, `pubsub`: subscribers count as normal), and
/// Redis's error for any other.
fn client_type(name: &[u8]) -> Result<bool, Reply> {
    match name.to_ascii_lowercase().as_slice() {
        b"normal" => Ok(true),
        b"master" | b"replica" | b"slave" | b"pubsub" => Ok(false),
        _ => Err(Reply::error(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(name)
        ))),
    }
}

/// A client name, lib-name or lib-ver (`what` in the error), as Redis 7.2 takes them: printable
/// ASCII without spaces, so that a CLIENT LIST line stays one line of `field=value` words; and,
/// unlike Redis, at most [`MAX_CLIENT_ATTRIBUTE`] bytes, since every one is kept (and listed)
/// for as long as its connection lasts.
fn client_attribute(value: &[u8], what: &str) -> Result<String, Reply> {
    if value.iter().any(|&byte| !(b'!'..=b'~').contains(&byte)) {
        return Err(Reply::error(format!(
            "ERR {what} cannot contain spaces, newlines or special characters."
        )));
    }
    if value.len() > MAX_CLIENT_ATTRIBUTE {
        return Err(Reply::error(format!(
            "ERR pgvs3 takes client names, lib-name and lib-ver of at most {MAX_CLIENT_ATTRIBUTE} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(value).into_owned())
}

fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len() && expected.iter().zip(given).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}
