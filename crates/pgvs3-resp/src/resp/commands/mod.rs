//! The commands, one module per Redis command group: each holds its commands' parsing, their
//! work and their replies. The connection loop (`resp/connection.rs`) dispatches here.

mod acl;
pub(crate) mod bitmap;
mod client;
pub(crate) mod dump;
pub(crate) mod family;
mod functions;
pub(crate) mod generic;
pub(crate) mod geo;
mod geohash;
pub(crate) mod hash;
mod hll;
pub(crate) mod hyperloglog;
pub(crate) mod list;
pub(crate) mod object;
pub(crate) mod pubsub;
mod rdb;
mod scripting;
pub(crate) mod server;
pub(crate) mod set;
pub(crate) mod sort;
pub(crate) mod stream;
mod stream_dump;
pub(crate) mod stream_group;
pub(crate) mod strings;
pub(crate) mod tracking;
pub(crate) mod transactions;
pub(crate) mod zset;

use bytes::Bytes;

use super::codec::Reply;
use super::command::Spec;
use super::connection::Connection;

impl Connection {
    /// Everything that is not a key command, to its group.
    pub(crate) async fn other_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            "ping" | "echo" | "quit" | "reset" | "auth" | "hello" | "select" | "client" => {
                self.connection_command(spec, args).await
            }
            "acl" => self.acl_command(args).await,
            "monitor" => self.start_monitor(),
            "publish" | "spublish" => self.publish(spec, args).await,
            "pubsub" => self.pubsub_introspection(args),
            "multi" => self.multi(),
            "discard" => self.discard(),
            "exec" => self.exec().await,
            "watch" => self.watch(args).await,
            "unwatch" => self.unwatch(),
            "function" | "fcall" | "fcall_ro" => self.functions_command(spec, args).await,
            "time" | "command" | "config" | "info" | "dbsize" | "flushdb" | "flushall" | "memory" => {
                self.server_command(spec, args).await
            }
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "script" => self.scripting_command(spec, args).await,
            // XGROUP HELP and XINFO HELP (the other subcommands are key commands).
            "xgroup" => super::stream_group::help(),
            "xinfo" => super::stream::help(),
            "object" => object::help(),
            "randomkey" => self.randomkey().await,
            "keys" => self.keys(&args[1]).await,
            "scan" => self.scan(args).await,
            other => unreachable!("{other} is in the command table but not handled"),
        }
    }
}
