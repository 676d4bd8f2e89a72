//! Pub/sub: PUBLISH, SPUBLISH, the subscribe commands (whose confirmations are pushes) and
//! PUBSUB's introspection, in the namespace of the client's key (the root key's: the names as
//! given). The fan-out itself is `resp/pubsub.rs`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::resp::codec::Reply;
use crate::resp::command::Spec;
use crate::resp::connection::{Connection, ReplyMode};
use crate::resp::pubsub;

pub(crate) const STANDBY_PUBSUB: &str = "ERR pub/sub is not available on a standby gateway: NOTIFY does not reach a hot standby; use a gateway of the primary";

pub(crate) fn is_subscription(name: &str) -> bool {
    matches!(
        name,
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe" | "sunsubscribe"
    )
}

impl Connection {
    pub(crate) async fn publish(&self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        if self.server.replica.is_standby() {
            return Reply::error(STANDBY_PUBSUB);
        }
        match self
            .server
            .pubsub
            .publish(&self.channel_namespace(), spec.name == "spublish", &args[1], &args[2])
            .await
        {
            Ok(receivers) => Reply::Integer(receivers),
            Err(reply) => reply,
        }
    }

    /// SUBSCRIBE and its kin: one reply per channel or pattern, as Redis sends them.
    pub(crate) fn subscription(&mut self, name: &'static str, targets: &[Bytes], out: &mut BytesMut) {
        let pubsub = Arc::clone(&self.server.pubsub);
        let id = self.id();
        let subscribing = matches!(name, "subscribe" | "psubscribe" | "ssubscribe");
        if subscribing && self.server.replica.is_standby() {
            self.emit(Reply::error(STANDBY_PUBSUB), out);
            return;
        }
        // Confirmations are pushes (in RESP2 too): sent whatever CLIENT REPLY says, as
        // redis-server 7.0 sends them; the command still uses up a SKIP.
        if self.reply_mode == ReplyMode::SkipNext {
            self.reply_mode = ReplyMode::On;
        }
        let shard = matches!(name, "ssubscribe" | "sunsubscribe");
        let mailbox = self.inbox();
        let all: Vec<Bytes>;
        let targets = match targets {
            [] if !subscribing => {
                all = match name {
                    "unsubscribe" => self.channels.iter().cloned().collect(),
                    "punsubscribe" => self.patterns.iter().cloned().collect(),
                    _ => self.shard_channels.iter().cloned().collect(),
                };
                if all.is_empty() {
                    // Redis's answer names no channel and counts what is left.
                    let count = match shard {
                        true => self.shard_channels.len(),
                        false => self.channels.len() + self.patterns.len(),
                    };
                    Reply::Push(vec![Reply::text(name), Reply::Nil, Reply::Integer(count as i64)])
                        .encode(self.resp3, out);
                    return;
                }
                &all[..]
            }
            targets => targets,
        };
        let limits = pubsub.limits;
        for target in targets {
            if subscribing && !self.has_subscription(name, target) {
                if self.channels.len() + self.patterns.len() + self.shard_channels.len() >= limits.max_subscriptions {
                    self.emit(
                        Reply::error(format!(
                            "ERR max number of subscriptions per connection reached ({}, --resp-max-subscriptions)",
                            limits.max_subscriptions
                        )),
                        out,
                    );
                    continue;
                }
                if name != "psubscribe"
                    && let Err(reply) = pubsub::check_channel(target)
                {
                    self.emit(reply, out);
                    continue;
                }
                if name == "psubscribe" && self.patterns.len() >= limits.max_patterns {
                    self.emit(
                        Reply::error(format!(
                            "ERR max number of patterns per connection reached ({}, --resp-max-patterns)",
                            limits.max_patterns
                        )),
                        out,
                    );
                    continue;
                }
                if name == "psubscribe" && target.len() > limits.max_pattern {
                    self.emit(
                        Reply::error(format!(
                            "ERR pattern longer than {} bytes (--resp-max-pattern)",
                            limits.max_pattern
                        )),
                        out,
                    );
                    continue;
                }
            }
            match name {
                "subscribe" if self.channels.insert(target.clone()) => pubsub.subscribe(false, target, id, &mailbox),
                "ssubscribe" if self.shard_channels.insert(target.clone()) => {
                    pubsub.subscribe(true, target, id, &mailbox)
                }
                "psubscribe" if self.patterns.insert(target.clone()) => pubsub.psubscribe(target, id, &mailbox),
                "unsubscribe" if self.channels.remove(target) => pubsub.unsubscribe(false, target, id),
                "sunsubscribe" if self.shard_channels.remove(target) => pubsub.unsubscribe(true, target, id),
                "punsubscribe" if self.patterns.remove(target) => pubsub.punsubscribe(target, id),
                _ => {}
            }
            let count = if shard {
                self.shard_channels.len()
            } else {
                self.channels.len() + self.patterns.len()
            };
            Reply::Push(vec![
                Reply::text(name),
                Reply::Bulk(target.clone()),
                Reply::Integer(count as i64),
            ])
            .encode(self.resp3, out);
        }
        if !self.subscribed() {
            // Messages that came before the last unsubscription are not for it any more.
            self.drop_inbox();
        }
        let counts = [self.channels.len(), self.patterns.len(), self.shard_channels.len()];
        self.set_client(|info| info.subscriptions = counts);
    }

    fn has_subscription(&self, name: &str, target: &Bytes) -> bool {
        match name {
            "subscribe" => self.channels.contains(target),
            "psubscribe" => self.patterns.contains(target),
            _ => self.shard_channels.contains(target),
        }
    }

    pub(crate) fn unsubscribe_all(&mut self) {
        let pubsub = &self.server.pubsub;
        let id = self.registration.id();
        for channel in self.channels.drain() {
            pubsub.unsubscribe(false, &channel, id);
        }
        for channel in self.shard_channels.drain() {
            pubsub.unsubscribe(true, &channel, id);
        }
        for pattern in self.patterns.drain() {
            pubsub.punsubscribe(&pattern, id);
        }
        self.drop_inbox();
    }

    /// PUBSUB CHANNELS / NUMSUB / NUMPAT / SHARDCHANNELS / SHARDNUMSUB: this gateway's
    /// subscribers (those of other gateways are not known here) in the client's namespace, or
    /// in every one for the root key.
    pub(crate) fn pubsub_introspection(&self, args: &[Bytes]) -> Reply {
        let pubsub = &self.server.pubsub;
        let namespace = self.channel_namespace();
        let view = (!self.is_root()).then_some(&namespace[..]);
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match (sub.as_str(), &args[2..]) {
            ("channels" | "shardchannels", [] | [_]) => Reply::Array(
                pubsub
                    .channels(view, sub == "shardchannels", args.get(2).map(|pattern| &pattern[..]))
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
            ("numsub" | "shardnumsub", channels) => Reply::Array(
                channels
                    .iter()
                    .flat_map(|channel| {
                        [
                            Reply::Bulk(channel.clone()),
                            Reply::Integer(pubsub.numsub(view, sub == "shardnumsub", channel)),
                        ]
                    })
                    .collect(),
            ),
            ("numpat", []) => Reply::Integer(pubsub.numpat(view)),
            ("help", []) => Reply::Array(
                [
                    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "CHANNELS [<pattern>]",
                    "NUMPAT",
                    "NUMSUB [<channel> ...]",
                    "SHARDCHANNELS [<pattern>]",
                    "SHARDNUMSUB [<channel> ...]",
                    "HELP",
                ]
                .into_iter()
                .map(|line| Reply::Status(line.to_owned()))
                .collect(),
            ),
            _ => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }
}
