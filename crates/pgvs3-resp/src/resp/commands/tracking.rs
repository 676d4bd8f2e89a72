//! CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO, and what a tracking connection does
//! around its commands: remember the keys it reads, and keep its inbox (resp/tracking.rs has the
//! tables and the invalidations).

use std::sync::Arc;

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{self, KeyCommand, Spec};
use crate::resp::connection::Connection;
use crate::resp::pubsub::Mailbox;
use crate::resp::tracking::{self, Mode};

/// A tracking connection's own state: its options, and CLIENT CACHING's flag for the next
/// command.
pub(crate) struct ClientTracking {
    mode: Mode,
    /// CLIENT CACHING YES (OPTIN) or NO (OPTOUT) applies to the next command.
    caching: bool,
    /// The last command was a CLIENT command (which leaves the flag as it is, as in Redis).
    after_client: bool,
}

const STANDBY: &str = "ERR CLIENT TRACKING is not available on a standby gateway: invalidations travel by NOTIFY, which does not reach a standby";

impl Connection {
    /// CLIENT TRACKING ON|OFF [options]. A REDIRECT names one of the caller's own connections
    /// (any, for the root key), as CLIENT LIST and KILL see them: another tenant's is not found,
    /// so its connection never gets this one's invalidations.
    pub(crate) async fn client_tracking(&mut self, args: &[Bytes]) -> Reply {
        let clients = Arc::clone(&self.server.clients);
        let owner = self.own_clients();
        let mode = match Mode::parse(&args[3..], |id| clients.exists(id, owner)) {
            Ok(mode) => mode,
            Err(reply) => return reply,
        };
        match args[2].to_ascii_lowercase().as_slice() {
            b"on" => {}
            b"off" => {
                self.stop_tracking();
                return Reply::OK;
            }
            _ => return command::syntax_error(),
        }
        let current = self.tracking.as_ref().map(|tracking| &tracking.mode);
        if let Err(reply) = tracking::check_on(&mode, current) {
            return reply;
        }
        if self.server.replica.is_standby() {
            return Reply::error(STANDBY);
        }
        self.refresh_readable().await;
        let pubsub = Arc::clone(&self.server.pubsub);
        let owner = self.own_clients().map(str::to_owned);
        pubsub.tracking.enable(self.id(), mode, self.readable.clone(), owner);
        let mode = pubsub.tracking.mode(self.id()).unwrap_or_default();
        let caching = self.tracking.as_ref().is_some_and(|tracking| tracking.caching);
        self.tracking = Some(ClientTracking {
            mode,
            caching,
            after_client: true,
        });
        self.inbox();
        // The keyspaces are marked before the OK: from then on every gateway's writes to them
        // send their keys (see resp/tracking.rs).
        match pubsub.mark_tracked(false).await {
            Ok(()) => Reply::OK,
            Err(reply) => {
                self.stop_tracking();
                reply
            }
        }
    }

    /// CLIENT CACHING YES|NO, with Redis's errors.
    pub(crate) fn client_caching(&mut self, args: &[Bytes]) -> Reply {
        let Some(tracking) = &mut self.tracking else {
            return Reply::error(
                "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
            );
        };
        match args[2].to_ascii_lowercase().as_slice() {
            b"yes" if tracking.mode.optin => tracking.caching = true,
            b"yes" => {
                return Reply::error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.");
            }
            b"no" if tracking.mode.optout => tracking.caching = true,
            b"no" => {
                return Reply::error("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
            }
            _ => return command::syntax_error(),
        }
        Reply::OK
    }

    /// CLIENT GETREDIR.
    pub(crate) fn client_getredir(&self) -> Reply {
        match &self.tracking {
            Some(tracking) => Reply::Integer(tracking.mode.redirect as i64),
            None => Reply::Integer(-1),
        }
    }

    /// CLIENT TRACKINGINFO.
    pub(crate) fn client_trackinginfo(&self) -> Reply {
        let caching = self.tracking.as_ref().is_some_and(|tracking| tracking.caching);
        self.server.pubsub.tracking.info(self.id(), caching)
    }

    /// Before each command of a tracking connection: CLIENT CACHING's flag lasts for one
    /// command after it (or for a whole MULTI), as Redis's `resetClient` keeps it.
    pub(crate) fn tracking_command_starts(&mut self, name: &str) {
        let in_multi = self.multi.is_some();
        if let Some(tracking) = &mut self.tracking {
            if !tracking.after_client && !in_multi {
                tracking.caching = false;
            }
            tracking.after_client = name == "client";
        }
    }

    /// Whether the keys this command reads are remembered (default mode; OPTIN/OPTOUT as
    /// CLIENT CACHING says).
    pub(crate) fn remembers_reads(&self) -> bool {
        self.tracking
            .as_ref()
            .is_some_and(|tracking| tracking.mode.remembers(tracking.caching))
    }

    /// Remembers the keys a read-only command of a tracking connection reads, before it runs
    /// (a change committed while it reads is then told, never missed). Scripts remember their
    /// declared keys once they call a read-only command (script.rs), as Redis 7.0 does.
    pub(crate) fn remember_reads(&self, spec: &'static Spec, command: Option<&KeyCommand>) {
        if !self.remembers_reads() || !spec.flags.contains(&"readonly") {
            return;
        }
        if let Some(command) = command {
            let server = &self.server;
            let bucket = &server.settings.databases[&self.db];
            let keys = command.keys();
            server
                .pubsub
                .tracking
                .remember(self.id(), bucket, keys.iter().map(|key| key.as_bytes()));
        }
    }

    /// CLIENT TRACKING OFF, RESET, or the connection's end: its keyspaces are unmarked (in the
    /// background) once this gateway has no tracking client left.
    pub(crate) fn stop_tracking(&mut self) {
        if self.tracking.take().is_none() {
            return;
        }
        let pubsub = Arc::clone(&self.server.pubsub);
        pubsub.tracking.disable(self.id());
        if !self.subscribed() {
            self.drop_inbox();
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = pubsub.mark_tracked(false).await {
                    tracing::debug!(error = ?err, "CLIENT TRACKING: keyspaces not unmarked");
                }
            });
        }
    }

    /// The connection's inbox (pub/sub messages, invalidations), made on first use and shown
    /// to the other clients (a REDIRECT finds it).
    pub(crate) fn inbox(&mut self) -> Arc<Mailbox> {
        if let Some(mailbox) = &self.mailbox {
            return Arc::clone(mailbox);
        }
        let mailbox: Arc<Mailbox> = Arc::default();
        mailbox.set_audience(self.audience());
        self.mailbox = Some(Arc::clone(&mailbox));
        let shown = Arc::clone(&mailbox);
        self.set_client(|info| info.inbox = Some(shown));
        mailbox
    }

    /// Drops the inbox (with what waits in it) once nothing is sent to it any more: not while
    /// the client tracks, subscribes, or speaks RESP3 (a redirect's pushes may come).
    pub(crate) fn drop_inbox(&mut self) {
        if self.tracking.is_some() || self.subscribed() || self.resp3 || self.mailbox.take().is_none() {
            return;
        }
        self.set_client(|info| info.inbox = None);
    }
}
