//! Server-sent events: `GET /ojs/v1/events/stream` pushes the event log as it grows.
//!
//! One poller per gateway reads new events while anyone listens (one query per [`POLL`], however
//! many streams are open) and broadcasts them; each stream keeps what its filters ask for. The
//! log is ordered by `seq`, but sequence numbers are taken when a transaction inserts, not when
//! it commits, so a lower `seq` can become visible after a higher one: the poller re-reads from
//! the lowest undecided `seq` and waits up to [`GAP_WAIT`] for a gap to fill (a transaction
//! still committing) before taking it as a rolled-back insert. A stream that resumes
//! (`Last-Event-ID` or `?after=`) first replays the log from there, each page's query within an
//! admission slot like any request's (`?after=0` on a long log is many queries, and any number of
//! streams could run them at once); one that falls too far behind the broadcast is closed, and
//! its client resumes from the last id it got, as SSE clients do.

use std::collections::{BTreeSet, HashSet};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use tokio::sync::{broadcast, mpsc};

use super::super::engine::Queue;
use super::super::engine::events::LoggedEvent;
use crate::admission::Admission;
use crate::http_server::Shutdown;

/// How often the poller looks for new events while streams are open.
const POLL: Duration = Duration::from_millis(100);
/// How long a gap in `seq` is waited for before it is taken as a rolled-back insert.
const GAP_WAIT: Duration = Duration::from_secs(2);
/// Events read per query (poller and replays).
const BATCH: i64 = 1000;
/// Batches a stream may fall behind the broadcast before it is closed.
const BROADCAST_DEPTH: usize = 256;
/// A comment line this often keeps proxies from closing an idle stream and finds gone clients.
const KEEPALIVE: Duration = Duration::from_secs(15);

type Batch = Arc<[LoggedEvent]>;

/// The gateway's event poller and its listeners.
#[derive(Clone)]
pub struct EventHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    queue: Queue,
    /// The OJS requests' admission, which replays' queries take a slot of.
    admission: Admission,
    sender: broadcast::Sender<Batch>,
    /// Whether the poller runs; taken with subscribing, so the poller never stops while a
    /// listener that just subscribed expects it to run.
    polling: Mutex<bool>,
}

/// What one stream asks for; empty lists match everything.
#[derive(Debug, Default)]
pub struct Filter {
    /// Exact types, or prefixes written `job.*`.
    pub types: Vec<String>,
    pub queues: Vec<String>,
    pub job_id: Option<String>,
}

impl Filter {
    fn matches(&self, event: &LoggedEvent) -> bool {
        let type_matches = self.types.is_empty()
            || self.types.iter().any(|wanted| match wanted.strip_suffix('*') {
                Some(prefix) => event.kind.starts_with(prefix),
                None => event.kind == *wanted,
            });
        let queue_matches =
            self.queues.is_empty() || event.queue.as_ref().is_some_and(|queue| self.queues.contains(queue));
        let job_matches = self.job_id.is_none() || event.job_id == self.job_id;
        type_matches && queue_matches && job_matches
    }
}

impl EventHub {
    pub fn new(queue: Queue, admission: Admission) -> EventHub {
        EventHub {
            inner: Arc::new(HubInner {
                queue,
                admission,
                sender: broadcast::channel(BROADCAST_DEPTH).0,
                polling: Mutex::new(false),
            }),
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Batch> {
        let mut polling = self.inner.polling.lock().expect("hub lock");
        let receiver = self.inner.sender.subscribe();
        if !*polling {
            *polling = true;
            tokio::spawn(Arc::clone(&self.inner).poll());
        }
        receiver
    }

    /// Opens a stream: the replay after `after` (if given), then live events, until the client
    /// goes away, falls too far behind, or the gateway shuts down.
    pub fn open(&self, filter: Filter, after: Option<i64>, mut shutdown: Shutdown) -> EventStream {
        let (sender, receiver) = mpsc::channel(64);
        let live = self.subscribe();
        let (queue, admission) = (self.inner.queue.clone(), self.inner.admission.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.wait() => {}
                _ = deliver(queue, admission, filter, after, live, sender) => {}
            }
        });
        EventStream(receiver)
    }
}

impl HubInner {
    async fn poll(self: Arc<Self>) {
        let mut cursor = loop {
            match self.queue.event_floor(GAP_WAIT).await {
                Ok(floor) => break LogCursor::new(floor),
                Err(error) => {
                    tracing::debug!(?error, "event stream: reading the log failed");
                    if self.stop_if_unheard() {
                        return;
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        };
        loop {
            tokio::time::sleep(POLL).await;
            if self.stop_if_unheard() {
                return;
            }
            match self.queue.events_since(cursor.floor, BATCH).await {
                Ok(rows) => {
                    let fresh = cursor.take_new(rows);
                    if !fresh.is_empty() {
                        // Nobody listening is fine: the next poll may find no listener and stop.
                        let _ = self.sender.send(fresh.into());
                    }
                    cursor.advance(Instant::now());
                }
                Err(error) => tracing::debug!(?error, "event stream: reading the log failed"),
            }
        }
    }

    fn stop_if_unheard(&self) -> bool {
        let mut polling = self.polling.lock().expect("hub lock");
        if self.sender.receiver_count() == 0 {
            *polling = false;
            return true;
        }
        false
    }
}

/// How far the poller has read: everything up to `floor` is decided; `seen` holds what was read
/// above a gap that is still being waited for.
#[derive(Debug)]
struct LogCursor {
    floor: i64,
    seen: BTreeSet<i64>,
    gap_since: Option<Instant>,
}

impl LogCursor {
    fn new(floor: i64) -> LogCursor {
        LogCursor {
            floor,
            seen: BTreeSet::new(),
            gap_since: None,
        }
    }

    /// The rows not read before (rows above a gap are read again until the gap is decided).
    fn take_new(&mut self, rows: Vec<LoggedEvent>) -> Vec<LoggedEvent> {
        rows.into_iter().filter(|event| self.seen.insert(event.seq)).collect()
    }

    /// Moves the floor over every contiguous `seq` read, and over a gap waited for long enough.
    fn advance(&mut self, now: Instant) {
        loop {
            let before = self.floor;
            while self.seen.remove(&(self.floor + 1)) {
                self.floor += 1;
            }
            if self.floor != before {
                self.gap_since = None;
            }
            let Some(&next) = self.seen.first() else {
                self.gap_since = None;
                return;
            };
            let since = *self.gap_since.get_or_insert(now);
            if now.duration_since(since) < GAP_WAIT {
                return;
            }
            self.floor = next - 1;
        }
    }
}

/// Replays from `after`, then forwards live batches, until the client or the broadcast is gone.
async fn deliver(
    queue: Queue,
    admission: Admission,
    filter: Filter,
    after: Option<i64>,
    mut live: broadcast::Receiver<Batch>,
    sender: mpsc::Sender<Bytes>,
) {
    // Clients reconnect a second after a drop, with the last id they got.
    if sender.send(Bytes::from_static(b"retry: 1000\n\n")).await.is_err() {
        return;
    }
    // Live batches may repeat what the replay sent (the poller re-reads its last seconds).
    let mut replayed = HashSet::new();
    if let Some(mut cursor) = after {
        loop {
            // The stream's own slot was given back when it opened. This one is waited for in
            // turn, outside the bounded line (streams are bounded by connections, and a replay
            // refused halfway would only be asked again), and held for the query only, not
            // while a slow client takes the frames.
            let Ok(slot) = admission.admit_again().await else {
                return;
            };
            let Ok(page) = queue.events_since(cursor, BATCH).await else {
                return;
            };
            drop(slot);
            for event in &page {
                cursor = event.seq;
                if filter.matches(event) {
                    replayed.insert(event.seq);
                    if sender.send(frame(event)).await.is_err() {
                        return;
                    }
                }
            }
            if (page.len() as i64) < BATCH {
                break;
            }
        }
    }
    let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    loop {
        let batch = tokio::select! {
            batch = live.recv() => batch,
            _ = keepalive.tick() => {
                if sender.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                    return;
                }
                continue;
            }
        };
        // Lagged: closing makes the client resume from its last id, losing nothing.
        let Ok(batch) = batch else { return };
        for event in batch.iter() {
            if replayed.remove(&event.seq) || !filter.matches(event) {
                continue;
            }
            if sender.send(frame(event)).await.is_err() {
                return;
            }
        }
    }
}

fn frame(event: &LoggedEvent) -> Bytes {
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {}\n\n",
        event.seq, event.kind, event.json
    ))
}

/// The response body of an event stream: frames as the stream's task produces them.
pub struct EventStream(mpsc::Receiver<Bytes>);

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: &str, queue: &str) -> LoggedEvent {
        LoggedEvent {
            seq,
            kind: kind.into(),
            queue: Some(queue.into()),
            job_id: Some(format!("job-{seq}")),
            json: "{}".into(),
        }
    }

    fn seqs(events: &[LoggedEvent]) -> Vec<i64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_late_commit_below_the_newest_event_is_still_delivered_once() {
        let start = Instant::now();
        let mut cursor = LogCursor::new(10);
        // 12 committed before 11: 12 is delivered, the floor waits at 10.
        assert_eq!(seqs(&cursor.take_new(vec![event(12, "job.started", "q")])), [12]);
        cursor.advance(start);
        assert_eq!(cursor.floor, 10);
        // The next read returns 11 and 12 again: only 11 is new, and the floor moves past both.
        let again = vec![event(11, "job.enqueued", "q"), event(12, "job.started", "q")];
        assert_eq!(seqs(&cursor.take_new(again)), [11]);
        cursor.advance(start + Duration::from_millis(100));
        assert_eq!((cursor.floor, cursor.seen.len()), (12, 0));
    }

    #[test]
    fn a_gap_that_never_fills_is_given_up_after_the_wait() {
        let start = Instant::now();
        let mut cursor = LogCursor::new(0);
        cursor.take_new(vec![event(2, "job.enqueued", "q"), event(3, "job.enqueued", "q")]);
        cursor.advance(start);
        cursor.advance(start + GAP_WAIT / 2);
        assert_eq!(cursor.floor, 0, "waiting for seq 1");
        cursor.advance(start + GAP_WAIT);
        assert_eq!((cursor.floor, cursor.seen.len()), (3, 0), "seq 1 rolled back");
    }

    #[test]
    fn filters_match_types_by_name_or_prefix_queues_and_jobs() {
        let completed = event(1, "job.completed", "mail");
        let any = Filter::default();
        assert!(any.matches(&completed));
        let prefix = Filter {
            types: vec!["job.*".into()],
            ..Filter::default()
        };
        assert!(prefix.matches(&completed));
        assert!(!prefix.matches(&event(2, "workflow.completed", "mail")));
        let other_queue = Filter {
            queues: vec!["sms".into()],
            ..Filter::default()
        };
        assert!(!other_queue.matches(&completed));
        let one_job = Filter {
            job_id: Some("job-1".into()),
            ..Filter::default()
        };
        assert!(one_job.matches(&completed));
        assert!(!one_job.matches(&event(2, "job.completed", "mail")));
    }
}
