//! Read lanes: a few PostgreSQL connections, each shared by many one-statement reads at once.
//!
//! A small GET or HEAD is one statement. Through the pool it takes a connection for itself and
//! pays for the whole exchange alone: a `send` of the statement, two or three `recv`s of the
//! answer, and the wake-up of the backend (and of the connection's task) per request. That kernel
//! work was about half of the gateway's CPU per 4 KiB GET (session 24's profile in
//! docs/benchmarks.md). tokio-postgres pipelines what is issued concurrently on one client: its
//! connection task writes every queued statement with one `send` and reads as many answers as one
//! `recv` holds, in order, and the backend finds several statements per wake-up. So reads that
//! need no transaction go through a lane when one has room. Each is still one statement with its
//! own snapshot, exactly as on a pooled connection outside a transaction.
//!
//! A lane is never waited for. A read takes the pool when every lane is full ([`IN_FLIGHT`] reads
//! on one: a stalled backend holds at most that many) or has no live connection. A connection
//! that broke is replaced in the background, one attempt at a time, while reads take the pool;
//! reads in flight on it fail as a pooled read's would (the connection lost: `Unavailable`). A
//! lane's connection is opened and tracked like the pool's, so the health probe's severing ends
//! it too. Statements whose answer streams (a chunked body) never run on a lane: a slow reader of
//! a stream would stall every read queued behind it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::{ClientWrapper, Connect};
use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::metrics::Metrics;
use crate::pg::connections::Connections;

/// Reads one lane carries at once. Past it a read takes the pool, whose own bound and wait
/// apply; 16 lets a lane pipeline a whole c16 load when the other lanes are busy.
const IN_FLIGHT: usize = 16;
/// After a failed connection attempt, the next waits this long (reads take the pool meanwhile),
/// so an outage costs one attempt a second per lane, not one per read.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The lanes of one store, and how to open their connections.
pub(super) struct ReadLanes {
    lanes: Box<[Lane]>,
    /// Where the next read starts looking for room, so reads spread over the lanes.
    next: AtomicUsize,
    opener: Opener,
    reads: LaneCounters,
}

struct Opener {
    connections: Connections,
    config: tokio_postgres::Config,
    /// The whole of opening a connection, as the pool bounds its own (`create_timeout`).
    timeout: Option<Duration>,
}

#[derive(Default)]
struct Lane {
    state: Mutex<LaneState>,
    in_flight: AtomicUsize,
}

#[derive(Default)]
struct LaneState {
    client: Option<Arc<ClientWrapper>>,
    connecting: bool,
    failed_at: Option<Instant>,
}

/// How many reads took a lane and how many the pool (`pgvs3_db_lane_reads_total`).
struct LaneCounters {
    lane: IntCounter,
    pool: IntCounter,
}

impl ReadLanes {
    /// `count` lanes (none open yet: each opens on the first read that finds it closed).
    pub(super) fn new(
        count: usize,
        connections: Connections,
        config: tokio_postgres::Config,
        timeout: Option<Duration>,
        metrics: &Metrics,
    ) -> ReadLanes {
        let reads = IntCounterVec::new(
            Opts::new(
                "pgvs3_db_lane_reads_total",
                "One-statement reads by how they reached PostgreSQL: a shared read lane or a pooled connection",
            ),
            &["path"],
        )
        .expect("metric");
        metrics.register(Box::new(reads.clone()));
        ReadLanes {
            lanes: (0..count).map(|_| Lane::default()).collect(),
            next: AtomicUsize::new(0),
            opener: Opener {
                connections,
                config,
                timeout,
            },
            reads: LaneCounters {
                lane: reads.with_label_values(&["lane"]),
                pool: reads.with_label_values(&["pool"]),
            },
        }
    }

    /// A lane with room and a live connection, if there is one now; `None`: take the pool. A
    /// closed lane met on the way gets a new connection in the background.
    pub(super) fn take(self: &Arc<Self>) -> Option<LaneRead<'_>> {
        let count = self.lanes.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for index in (0..count).map(|i| (start + i) % count) {
            let lane = &self.lanes[index];
            if !lane.reserve() {
                continue;
            }
            match lane.live() {
                Some(client) => {
                    self.reads.lane.inc();
                    return Some(LaneRead { lane, client });
                }
                None => {
                    lane.in_flight.fetch_sub(1, Ordering::AcqRel);
                    self.reopen(index);
                }
            }
        }
        self.reads.pool.inc();
        None
    }

    /// Opens lane `index`'s connection on a task of its own, unless an attempt is under way or
    /// the last one failed less than [`RETRY_AFTER`] ago.
    fn reopen(self: &Arc<Self>, index: usize) {
        {
            let mut state = self.lanes[index].state.lock().expect("lane lock");
            let resting = state.failed_at.is_some_and(|at| at.elapsed() < RETRY_AFTER);
            if state.connecting || resting {
                return;
            }
            state.connecting = true;
        }
        let lanes = Arc::clone(self);
        tokio::spawn(async move {
            let opened = lanes.opener.open().await;
            let mut state = lanes.lanes[index].state.lock().expect("lane lock");
            state.connecting = false;
            match opened {
                Ok(client) => {
                    state.client = Some(Arc::new(client));
                    state.failed_at = None;
                }
                Err(error) => {
                    // The health probe reports an outage once; the lanes add nothing to it.
                    tracing::debug!(%error, lane = index, "a read lane could not connect");
                    state.failed_at = Some(Instant::now());
                }
            }
        });
    }
}

impl Opener {
    async fn open(&self) -> Result<ClientWrapper, String> {
        let connecting = Connect::connect(&self.connections, &self.config);
        let (client, driver) = match self.timeout {
            Some(limit) => tokio::time::timeout(limit, connecting)
                .await
                .map_err(|_| format!("no connection within {limit:?}"))?,
            None => connecting.await,
        }
        .map_err(|err| err.to_string())?;
        // The wrapper ends the driver when the lane drops it, and caches the lane's statements.
        Ok(ClientWrapper::new(client, driver))
    }
}

impl Lane {
    /// Counts a read in unless the lane carries [`IN_FLIGHT`] already.
    fn reserve(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < IN_FLIGHT).then_some(n + 1)
            })
            .is_ok()
    }

    /// The lane's connection if it is open; a closed one is dropped (its driver has ended).
    fn live(&self) -> Option<Arc<ClientWrapper>> {
        let mut state = self.state.lock().expect("lane lock");
        match &state.client {
            Some(client) if !client.is_closed() => Some(Arc::clone(client)),
            Some(_) => {
                state.client = None;
                None
            }
            None => None,
        }
    }
}

/// A read's place on a lane, given back when the read is done with the connection.
pub(super) struct LaneRead<'a> {
    lane: &'a Lane,
    client: Arc<ClientWrapper>,
}

impl std::ops::Deref for LaneRead<'_> {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        &self.client
    }
}

impl Drop for LaneRead<'_> {
    fn drop(&mut self) {
        self.lane.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connection of a one-statement read: a lane's when one has room, else the pool's.
pub(super) enum Reader<'a> {
    Lane(LaneRead<'a>),
    Pooled(deadpool_postgres::Object),
}

impl std::ops::Deref for Reader<'_> {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        match self {
            Reader::Lane(read) => read,
            Reader::Pooled(client) => client,
        }
    }
}

impl Reader<'_> {
    /// A pooled connection for what follows the read's statement and must not run on a lane
    /// (a chunked body's stream): this one if it is pooled, else one from the pool.
    pub(super) async fn pooled(self, store: &super::Store) -> super::StoreResult<deadpool_postgres::Object> {
        match self {
            Reader::Pooled(client) => Ok(client),
            Reader::Lane(read) => {
                drop(read);
                store.client().await
            }
        }
    }
}
