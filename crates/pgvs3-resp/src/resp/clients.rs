//! The registry of connected clients: what CLIENT LIST and INFO show, what CLIENT KILL finds,
//! and the count that `--resp-max-clients` bounds. A connection holds its entry as a guard that removes it on
//! drop, so a connection task that ends in any way, a panic included, gives its slot back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What CLIENT LIST shows about a connection.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    pub name: String,
    pub lib_name: String,
    pub lib_version: String,
    pub db: u32,
    pub resp: u8,
    pub connected: Instant,
    pub last_active: Instant,
    /// The command running now, else the last one, by its full name (`client|list`).
    pub last_command: String,
    /// `qbuf=`: the bytes of the CLIENT request running now, as RESP (Redis's query buffer
    /// still holds it while it runs); 0 otherwise.
    pub query_bytes: usize,
    /// Commands queued in MULTI (-1 outside one), as CLIENT LIST's `multi=`.
    pub queued: i64,
    /// The ACL user (`user=`): `default`, or the access key AUTH named.
    pub user: String,
    /// Channels, patterns and shard channels subscribed to (`sub=`, `psub=`, `ssub=`).
    pub subscriptions: [usize; 3],
    /// Wakes the connection's task to close it (CLIENT KILL).
    kill: Arc<tokio::sync::Notify>,
    /// Set while the client waits in a blocking command (BLPOP, XREAD BLOCK, ...): what
    /// CLIENT UNBLOCK wakes it with.
    pub blocked: Option<Arc<Unblock>>,
    /// Where pushes to the client wait (pub/sub messages, invalidations), once it has one: a
    /// subscriber or a tracking client. CLIENT TRACKING's REDIRECT finds it here.
    pub inbox: Option<Arc<super::pubsub::Mailbox>>,
}

/// CLIENT UNBLOCK's call to a blocked client: wake, and whether to answer an error rather
/// than what a timeout answers.
#[derive(Debug, Default)]
pub struct Unblock {
    woken: tokio::sync::Notify,
    error: std::sync::atomic::AtomicBool,
}

impl Unblock {
    /// Resolves once CLIENT UNBLOCK chose this client (at once if it already did), with
    /// whether it asked for an error.
    pub async fn woken(&self) -> bool {
        self.woken.notified().await;
        self.error.load(Ordering::Relaxed)
    }
}

impl ClientInfo {
    /// A client that just connected.
    pub fn new(addr: SocketAddr, local_addr: SocketAddr) -> ClientInfo {
        let now = Instant::now();
        ClientInfo {
            addr,
            local_addr,
            name: String::new(),
            lib_name: String::new(),
            lib_version: String::new(),
            db: 0,
            resp: 2,
            connected: now,
            last_active: now,
            last_command: "NULL".to_owned(),
            query_bytes: 0,
            queued: -1,
            user: "default".into(),
            subscriptions: [0; 3],
            kill: Arc::new(tokio::sync::Notify::new()),
            blocked: None,
            inbox: None,
        }
    }

    /// A line of CLIENT LIST, with Redis 7's fields in Redis's order. Buffers are per batch
    /// here, not per client, so the buffer and memory fields but `qbuf` are 0, and every client
    /// is a normal one (a subscriber too: its flags stay `N`).
    fn line(&self, id: u64) -> String {
        format!(
            "id={id} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db={} sub={} psub={} ssub={} multi={} \
             qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} \
             user={} redir=-1 resp={} lib-name={} lib-ver={}\n",
            self.addr,
            self.local_addr,
            self.name,
            self.connected.elapsed().as_secs(),
            self.last_active.elapsed().as_secs(),
            self.db,
            self.subscriptions[0],
            self.subscriptions[1],
            self.subscriptions[2],
            self.queued,
            self.query_bytes,
            self.last_command,
            self.user,
            self.resp,
            self.lib_name,
            self.lib_version,
        )
    }
}

/// Which clients CLIENT KILL closes: every given filter must match.
#[derive(Debug, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    /// Connected for at least this many seconds.
    pub max_age: Option<u64>,
    /// TYPE master, replica or pubsub: no pgvs3 client is one (every client is `normal`).
    pub other_type: bool,
    /// The client asking, unless SKIPME no.
    pub skip: Option<u64>,
    /// The user whose clients alone may be closed (a key that is not the root key's own).
    pub owner: Option<String>,
}

impl KillFilter {
    fn matches(&self, id: u64, info: &ClientInfo) -> bool {
        self.id.is_none_or(|wanted| wanted == id)
            && self.addr.as_ref().is_none_or(|addr| *addr == info.addr.to_string())
            && self
                .laddr
                .as_ref()
                .is_none_or(|laddr| *laddr == info.local_addr.to_string())
            && self.max_age.is_none_or(|age| info.connected.elapsed().as_secs() >= age)
            && !self.other_type
            && self.skip != Some(id)
            && self.owner.as_ref().is_none_or(|owner| *owner == info.user)
    }
}

#[derive(Debug, Default)]
pub struct Clients {
    connected: Mutex<HashMap<u64, ClientInfo>>,
    last_id: AtomicU64,
}

impl Clients {
    /// The map, even if a thread panicked while holding it: the entries are plain data and
    /// stay consistent, and one panic must not take every later connection down with it.
    fn connected(&self) -> MutexGuard<'_, HashMap<u64, ClientInfo>> {
        self.connected.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a client unless `max` are connected already.
    pub fn register(self: &Arc<Self>, max: usize, info: ClientInfo) -> Option<Registration> {
        let mut connected = self.connected();
        if connected.len() >= max {
            return None;
        }
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        let kill = Arc::clone(&info.kill);
        connected.insert(id, info);
        Some(Registration {
            clients: Arc::clone(self),
            id,
            kill,
        })
    }

    /// Connections accepted since the start (INFO's `total_connections_received`).
    pub fn total_registered(&self) -> u64 {
        self.last_id.load(Ordering::Relaxed)
    }

    /// Closes every client `filter` matches; returns how many.
    pub fn kill(&self, filter: &KillFilter) -> usize {
        let connected = self.connected();
        let mut killed = 0;
        for (id, info) in connected.iter().filter(|(id, info)| filter.matches(**id, info)) {
            tracing::debug!(client = id, "CLIENT KILL");
            info.kill.notify_one();
            killed += 1;
        }
        killed
    }

    /// CLIENT UNBLOCK: wakes client `id` if it is blocked (and `owner`'s, when given); whether
    /// it was.
    pub fn unblock(&self, id: u64, error: bool, owner: Option<&str>) -> bool {
        let mut connected = self.connected();
        let Some(unblock) = connected
            .get_mut(&id)
            .filter(|info| owner.is_none_or(|owner| owner == info.user))
            .and_then(|info| info.blocked.take())
        else {
            return false;
        };
        unblock.error.store(error, Ordering::Relaxed);
        unblock.woken.notify_one();
        true
    }

    pub fn len(&self) -> usize {
        self.connected().len()
    }

    /// Changes what is shown about client `id`.
    pub fn update(&self, id: u64, change: impl FnOnce(&mut ClientInfo)) {
        if let Some(info) = self.connected().get_mut(&id) {
            change(info);
        }
    }

    pub fn name(&self, id: u64) -> Option<String> {
        self.connected()
            .get(&id)
            .map(|info| info.name.clone())
            .filter(|name| !name.is_empty())
    }

    /// Whether client `id` is connected to this gateway (and `owner`'s, when given).
    pub fn exists(&self, id: u64, owner: Option<&str>) -> bool {
        self.connected()
            .get(&id)
            .is_some_and(|info| owner.is_none_or(|owner| owner == info.user))
    }

    /// Client `id`'s inbox, protocol and whether it is subscribed; `None` when it is gone (or,
    /// `owner` given, is not `owner`'s now: it may have signed in as another key since).
    pub fn inbox(&self, id: u64, owner: Option<&str>) -> Option<(Option<Arc<super::pubsub::Mailbox>>, u8, bool)> {
        let connected = self.connected();
        let info = connected
            .get(&id)
            .filter(|info| owner.is_none_or(|owner| owner == info.user));
        info.map(|info| {
            (
                info.inbox.clone(),
                info.resp,
                info.subscriptions.iter().any(|count| *count > 0),
            )
        })
    }

    /// Client `id`'s address.
    pub fn addr(&self, id: u64) -> Option<SocketAddr> {
        self.connected().get(&id).map(|info| info.addr)
    }

    /// CLIENT INFO's line for client `id`.
    pub fn line(&self, id: u64) -> Option<String> {
        self.connected().get(&id).map(|info| info.line(id))
    }

    /// CLIENT INFO's line for client `id`, if it is `owner`'s (any one's for `None`): CLIENT
    /// LIST ID's.
    pub fn line_of(&self, id: u64, owner: Option<&str>) -> Option<String> {
        self.connected()
            .get(&id)
            .filter(|info| owner.is_none_or(|owner| owner == info.user))
            .map(|info| info.line(id))
    }

    /// CLIENT LIST's text: a line per client (of `owner`'s, when given), in order of
    /// connection.
    pub fn list(&self, owner: Option<&str>) -> String {
        let connected = self.connected();
        let mut ids: Vec<&u64> = connected
            .iter()
            .filter(|(_, info)| owner.is_none_or(|owner| owner == info.user))
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        ids.into_iter().map(|id| connected[id].line(*id)).collect()
    }
}

/// A client's entry in the registry, removed when this is dropped.
#[derive(Debug)]
pub struct Registration {
    clients: Arc<Clients>,
    id: u64,
    kill: Arc<tokio::sync::Notify>,
}

impl Registration {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Resolves once CLIENT KILL chose this client (at once if it already did).
    pub async fn killed(&self) {
        self.kill.notified().await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.clients.connected().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ClientInfo {
        let addr = "127.0.0.1:1".parse().unwrap();
        ClientInfo::new(addr, addr)
    }

    #[tokio::test]
    async fn a_panicking_connection_gives_its_slot_back() {
        let clients = Arc::new(Clients::default());
        let first = clients.register(2, info()).unwrap();
        let second = clients.register(2, info()).unwrap();
        assert!(clients.register(2, info()).is_none(), "at the limit");
        assert_ne!(first.id(), second.id());
        // A task that panics while holding its registration, and while holding the lock.
        let holder = Arc::clone(&clients);
        let panicked = tokio::spawn(async move {
            let _registration = second;
            let _locked = holder.connected();
            panic!("a connection task panics");
        })
        .await;
        assert!(panicked.unwrap_err().is_panic());
        assert_eq!(clients.len(), 1);
        assert!(clients.list(None).starts_with(&format!("id={} ", first.id())));
        drop(first);
        assert_eq!(clients.len(), 0);
        assert!(clients.register(2, info()).is_some());
    }
}
