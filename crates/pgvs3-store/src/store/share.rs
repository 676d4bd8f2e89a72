//! The pool connections streams may hold at once: uploads' writes and downloads' reads of
//! chunked bodies, whose length is the client's to set (a client reading at 20 KiB/s keeps its
//! GET's connection for as long as it reads). Together they get the pool less a quarter (at
//! least one connection is kept for other requests; at least one is the streams'), so RESP,
//! OJS and small requests always find some of the pool free however many slow streams there
//! are. A stream beyond the share waits for a place, holding no connection meanwhile, up to
//! the pool's wait timeout (then 503, as when the pool itself is exhausted).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Store;
use super::{StoreError, StoreResult};

#[derive(Clone)]
pub(super) struct StreamShare {
    permits: Arc<Semaphore>,
}

impl StreamShare {
    pub(super) fn of(pool: &Pool) -> StreamShare {
        let pool_size = pool.status().max_size;
        let size = pool_size.saturating_sub((pool_size / 4).max(1)).max(1);
        StreamShare {
            permits: Arc::new(Semaphore::new(size)),
        }
    }
}

/// A pool connection taken for a stream, within the [`StreamShare`].
pub struct StreamClient {
    client: Object,
    _share: OwnedSemaphorePermit,
}

impl std::ops::Deref for StreamClient {
    type Target = Object;
    fn deref(&self) -> &Object {
        &self.client
    }
}

impl std::ops::DerefMut for StreamClient {
    fn deref_mut(&mut self) -> &mut Object {
        &mut self.client
    }
}

impl Store {
    /// A connection for a stream: first a place in the share, then one of the pool, both
    /// within the pool's wait timeout.
    pub(super) async fn stream_client(&self) -> StoreResult<StreamClient> {
        let wait = self.pool.timeouts().wait.unwrap_or(Duration::from_secs(30));
        let share = tokio::time::timeout(wait, Arc::clone(&self.streams.permits).acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| StoreError::Unavailable("timed out waiting for a connection for streams".into()))?;
        Ok(StreamClient {
            client: self.client().await?,
            _share: share,
        })
    }

    /// `client`, about to stream a body, within the share: kept when there is room, else given
    /// back to the pool while the stream waits for a place (the body it reads cannot change:
    /// a retired body outlives the grace, see the reaper).
    pub(super) async fn streaming(&self, client: Object) -> StoreResult<StreamClient> {
        match Arc::clone(&self.streams.permits).try_acquire_owned() {
            Ok(share) => Ok(StreamClient { client, _share: share }),
            Err(_) => {
                drop(client);
                self.stream_client().await
            }
        }
    }
}
