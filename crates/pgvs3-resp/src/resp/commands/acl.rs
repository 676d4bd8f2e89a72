//! ACL and its subcommands (see `resp/acl.rs` for what a user is here): SETUSER and DELUSER
//! change the fleet's rules (admin keys only), the rest read them.

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;

use crate::resp::acl::{self, User};
use crate::resp::codec::Reply;
use crate::resp::command::{self, COMMANDS, parse_integer};
use crate::resp::command_info;
use crate::resp::connection::{Connection, store_error};

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

impl Connection {
    pub(crate) async fn acl_command(&mut self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        // Redis's arity of each subcommand, counting ACL and the subcommand.
        let arity: i64 = match sub.as_str() {
            "cat" | "genpass" | "log" => -2,
            "deluser" | "setuser" => -3,
            "dryrun" => -4,
            "getuser" => 3,
            "list" | "load" | "save" | "users" | "whoami" | "help" => 2,
            _ => {
                return Reply::error(format!(
                    "ERR unknown subcommand '{}'. Try ACL HELP.",
                    String::from_utf8_lossy(&args[1])
                ));
            }
        };
        let fits = match arity {
            arity if arity < 0 => args.len() as i64 >= -arity,
            arity => args.len() as i64 == arity,
        };
        // CAT, GENPASS and LOG take one argument at most.
        if !fits || (arity == -2 && args.len() > 3) {
            return command::wrong_arity(&format!("acl|{sub}"));
        }
        if matches!(sub.as_str(), "users" | "list" | "log")
            && let Err(reply) = self.admin(&sub)
        {
            return reply;
        }
        match sub.as_str() {
            "whoami" => Reply::text(&self.username),
            "cat" => categories(args.get(2)),
            "genpass" => genpass(args.get(2)),
            "help" => Reply::Array(HELP.iter().map(|line| Reply::Status((*line).to_owned())).collect()),
            "save" | "load" => Reply::error(NO_ACL_FILE),
            "log" => match args.get(2) {
                None => self.server.acl.log_reply(10),
                Some(reset) if reset.eq_ignore_ascii_case(b"reset") => {
                    self.server.acl.reset_log();
                    Reply::OK
                }
                Some(count) => match parse_integer(count) {
                    Some(count) => self.server.acl.log_reply(usize::try_from(count).unwrap_or(0)),
                    None => command::not_an_integer(),
                },
            },
            "users" => match self.user_names().await {
                Ok(names) => Reply::Array(names.iter().map(|name| Reply::text(name)).collect()),
                Err(reply) => reply,
            },
            "list" => self.list().await,
            "getuser" => self.getuser(&args[2]).await,
            "dryrun" => self.dryrun(&args[2..]).await,
            "setuser" => self.setuser(&args[2..]).await,
            "deluser" => self.deluser(&args[2..]).await,
            _ => unreachable!("subcommand {sub} is matched above"),
        }
    }

    /// Only an admin (root) key changes users, or lists them and the log (which name every
    /// tenant's keys); any other key's denial names the subcommand.
    fn admin(&self, sub: &str) -> Result<(), Reply> {
        self.root_only(&format!("acl|{sub}"))
    }

    /// Whether `name` is a user: `default`, or a static access key that is not disabled.
    async fn is_user(&self, name: &str) -> Result<bool, Reply> {
        if name == "default" {
            return Ok(true);
        }
        match self.server.buckets.catalog().access_key(name).await {
            Ok(key) => Ok(key.is_some_and(|key| key.session.is_none())),
            Err(err) => Err(store_error(err)),
        }
    }

    /// `name`'s rules: its own, or everything its key may do.
    async fn rules_of(&self, name: &str) -> Result<Arc<User>, Reply> {
        let catalog = self.server.buckets.catalog();
        match self.server.acl.user(catalog, name).await {
            Ok((user, _)) => Ok(user),
            Err(err) => Err(store_error(err)),
        }
    }

    /// Every user, sorted as Redis sorts them.
    async fn user_names(&self) -> Result<Vec<String>, Reply> {
        let catalog = self.server.buckets.catalog();
        let keys = catalog.list_access_keys().await.map_err(store_error)?;
        let disabled = catalog.disabled_access_keys().await.map_err(store_error)?;
        let mut names: Vec<String> = keys
            .into_iter()
            .filter(|key| key.session.is_none() && !disabled.contains(&key.access_key))
            .map(|key| key.access_key)
            .chain(std::iter::once("default".to_owned()))
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// ACL LIST: a line per user in Redis's config format, without passwords (a key's is its
    /// secret; `default`'s is `--resp-password`, `nopass` without one).
    async fn list(&self) -> Reply {
        let names = match self.user_names().await {
            Ok(names) => names,
            Err(reply) => return reply,
        };
        let mut lines = Vec::with_capacity(names.len());
        for name in names {
            let user = match self.rules_of(&name).await {
                Ok(user) => user,
                Err(reply) => return reply,
            };
            let description = user.describe();
            let line = match self.nopass(&name) {
                true => {
                    let (state, rest) = description.split_once(' ').unwrap_or((&description, ""));
                    format!("user {name} {state} nopass {rest}")
                }
                false => format!("user {name} {description}"),
            };
            lines.push(Reply::text(&line));
        }
        Reply::Array(lines)
    }

    /// Whether `name` signs in without a password: `default` without `--resp-password`.
    fn nopass(&self, name: &str) -> bool {
        name == "default" && self.server.settings.password.is_none()
    }

    async fn getuser(&self, name: &Bytes) -> Reply {
        let name = String::from_utf8_lossy(name);
        match self.is_user(&name).await {
            Ok(true) => {}
            Ok(false) => return Reply::Nil,
            Err(reply) => return reply,
        }
        let user = match self.rules_of(&name).await {
            Ok(user) => user,
            Err(reply) => return reply,
        };
        let mut flags = vec![Reply::text(if user.enabled { "on" } else { "off" })];
        if self.nopass(&name) {
            flags.push(Reply::text("nopass"));
        }
        Reply::Map(vec![
            (Reply::text("flags"), Reply::Array(flags)),
            (Reply::text("passwords"), Reply::Array(Vec::new())),
            (Reply::text("commands"), Reply::text(&user.commands())),
            (Reply::text("keys"), Reply::text(&user.keys())),
            (Reply::text("channels"), Reply::text(&user.channels())),
            (Reply::text("selectors"), Reply::Array(Vec::new())),
        ])
    }

    async fn dryrun(&self, args: &[Bytes]) -> Reply {
        let name = String::from_utf8_lossy(&args[0]);
        match self.is_user(&name).await {
            Ok(true) => {}
            Ok(false) => return Reply::error(format!("ERR User '{name}' not found")),
            Err(reply) => return reply,
        }
        let command_name = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let Some(spec) = command::lookup(&command_name) else {
            return Reply::error(format!("ERR Command '{command_name}' not found"));
        };
        if !spec.arity_ok(args.len() - 1) {
            return command::wrong_arity(spec.name);
        }
        let user = match self.rules_of(&name).await {
            Ok(user) => user,
            Err(reply) => return reply,
        };
        match user.check(spec, &args[1..]) {
            Ok(()) => Reply::OK,
            Err(denied) => Reply::text(&denied.dry_run()),
        }
    }

    /// ACL SETUSER: the rules apply in order on top of the user's present ones (a user no rule
    /// narrowed yet starts from everything its key may do); all or none are kept.
    async fn setuser(&mut self, args: &[Bytes]) -> Reply {
        if let Err(reply) = self.admin("setuser") {
            return reply;
        }
        let name = String::from_utf8_lossy(&args[0]).into_owned();
        match self.is_user(&name).await {
            Ok(true) => {}
            Ok(false) => {
                return Reply::error(format!(
                    "ERR pgvs3 users are access keys: there is no access key '{name}' (create it first; see docs/resp-compatibility.md)"
                ));
            }
            Err(reply) => return reply,
        }
        let mut user = match self.rules_of(&name).await {
            Ok(user) => User::clone(&user),
            Err(reply) => return reply,
        };
        for rule in &args[1..] {
            if let Err(text) = user.apply(&String::from_utf8_lossy(rule)) {
                return Reply::Error(text);
            }
        }
        let catalog = self.server.buckets.catalog();
        match catalog.put_resp_acl_user(&name, &user.describe(), acl::MAX_USERS).await {
            Ok(true) => Reply::OK,
            Ok(false) => Reply::error(format!(
                "ERR pgvs3 keeps ACL rules for at most {} users",
                acl::MAX_USERS
            )),
            Err(err) => store_error(err),
        }
    }

    /// ACL DELUSER: drops users' rules, so each has all its key may do again (the keys stay:
    /// they are deleted with the admin API). Counts the users that had rules.
    async fn deluser(&mut self, args: &[Bytes]) -> Reply {
        if let Err(reply) = self.admin("deluser") {
            return reply;
        }
        let names: Vec<String> = args
            .iter()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
        if names.iter().any(|name| name == "default") {
            return Reply::error("ERR The 'default' user cannot be removed");
        }
        match self.server.buckets.catalog().delete_resp_acl_users(&names).await {
            Ok(deleted) => Reply::Integer(deleted as i64),
            Err(err) => store_error(err),
        }
    }
}

/// ACL CAT: the categories, or a category's commands.
fn categories(category: Option<&Bytes>) -> Reply {
    let Some(category) = category else {
        return Reply::Array(acl::CATEGORIES.iter().map(|name| Reply::text(name)).collect());
    };
    let name = String::from_utf8_lossy(category).to_ascii_lowercase();
    if !acl::CATEGORIES.contains(&name.as_str()) {
        return Reply::error(format!("ERR Unknown category '{}'", String::from_utf8_lossy(category)));
    }
    let category = format!("@{name}");
    Reply::Array(
        COMMANDS
            .iter()
            .filter(|spec| command_info::acl_categories(spec).contains(&category.as_str()))
            .map(|spec| Reply::text(spec.name))
            .collect(),
    )
}

/// ACL GENPASS [bits]: that many random bits in hex (256 by default), from the kernel's source.
fn genpass(bits: Option<&Bytes>) -> Reply {
    let bits = match bits {
        None => 256,
        Some(bits) => match parse_integer(bits) {
            Some(bits @ 1..=4096) => bits as usize,
            Some(_) => {
                return Reply::error(
                    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
                );
            }
            None => return command::not_an_integer(),
        },
    };
    let chars = bits.div_ceil(4);
    let mut random = vec![0u8; chars.div_ceil(2)];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut source| source.read_exact(&mut random))
        .is_err()
    {
        return Reply::error("ERR no source of random bytes");
    }
    let mut password = hex::encode(random);
    password.truncate(chars);
    Reply::text(&password)
}
