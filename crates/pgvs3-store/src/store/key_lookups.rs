//! The bound on database lookups of access keys the catalog cache does not hold. Such a lookup
//! runs before the request's signature is checked and before admission, so whoever can reach
//! the port can cause one per request with a new made-up key id; unbounded, a flood of them
//! takes the data pool's connections from authenticated requests. So: one lookup at a time per
//! name (those that wait for it then read its answer from the cache), at most
//! [`CONCURRENT_LOOKUPS`] at once, and a lookup that cannot start within [`LOOKUP_WAIT`] is
//! answered 503 (retried by SDKs) rather than InvalidAccessKeyId, which a key that exists must
//! never get.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedMutexGuard, Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::{StoreError, StoreResult};

/// Lookups of uncached keys running at once (each holds a data pool connection).
pub(super) const CONCURRENT_LOOKUPS: usize = 2;
/// How long a lookup waits for its turn before the request is answered 503.
pub(super) const LOOKUP_WAIT: Duration = Duration::from_secs(1);

pub(super) struct KeyLookups {
    permits: Semaphore,
    /// The names being looked up, each with its lock and how many requests hold or wait for it.
    flights: Mutex<HashMap<String, Flight>>,
}

struct Flight {
    lock: Arc<tokio::sync::Mutex<()>>,
    users: usize,
}

/// A request's turn to look up `name`: no other lookup of that name runs meanwhile.
pub(super) struct Turn<'a> {
    seat: Seat<'a>,
    deadline: Instant,
    _held: OwnedMutexGuard<()>,
}

/// A request's count in its name's flight, from before it waits for the name's lock: dropped
/// however the request ends (turned away, done, or cancelled while it waits, which drops the
/// future mid-await), so no name outlives its last user.
struct Seat<'a> {
    lookups: &'a KeyLookups,
    name: String,
}

impl Default for KeyLookups {
    fn default() -> KeyLookups {
        KeyLookups {
            permits: Semaphore::new(CONCURRENT_LOOKUPS),
            flights: Mutex::default(),
        }
    }
}

impl KeyLookups {
    /// Waits for the turn to look up `name` (another request's lookup of it first).
    pub(super) async fn turn(&self, name: &str) -> StoreResult<Turn<'_>> {
        let deadline = Instant::now() + LOOKUP_WAIT;
        let lock = {
            let mut flights = self.flights.lock().expect("key lookups");
            let flight = flights.entry(name.to_owned()).or_insert_with(|| Flight {
                lock: Arc::default(),
                users: 0,
            });
            flight.users += 1;
            Arc::clone(&flight.lock)
        };
        let seat = Seat {
            lookups: self,
            name: name.to_owned(),
        };
        let held = tokio::time::timeout_at(deadline, lock.lock_owned())
            .await
            .map_err(|_| busy())?;
        Ok(Turn {
            seat,
            deadline,
            _held: held,
        })
    }

    fn leave(&self, name: &str) {
        let mut flights = self.flights.lock().expect("key lookups");
        if let Some(flight) = flights.get_mut(name) {
            flight.users -= 1;
            if flight.users == 0 {
                flights.remove(name);
            }
        }
    }
}

impl<'a> Turn<'a> {
    /// Waits, within the turn's deadline, for one of the few lookups that may run at once.
    pub(super) async fn permit(&self) -> StoreResult<SemaphorePermit<'a>> {
        match tokio::time::timeout_at(self.deadline, self.seat.lookups.permits.acquire()).await {
            Ok(permit) => Ok(permit.expect("the semaphore is never closed")),
            Err(_) => Err(busy()),
        }
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        self.lookups.leave(&self.name);
    }
}

fn busy() -> StoreError {
    StoreError::Unavailable("too many lookups of access keys not in the catalog cache".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_lookup_per_name_and_a_few_at_once() {
        let lookups = KeyLookups::default();
        let first = lookups.turn("a").await.unwrap();
        // The same name waits for the first lookup; past the deadline it is turned away.
        assert!(matches!(lookups.turn("a").await, Err(StoreError::Unavailable(_))));
        let other = lookups.turn("b").await.unwrap();
        let third = lookups.turn("c").await.unwrap();
        let _p1 = first.permit().await.unwrap();
        let _p2 = other.permit().await.unwrap();
        assert!(matches!(third.permit().await, Err(StoreError::Unavailable(_))));
        drop(first);
        let again = lookups.turn("a").await.unwrap();
        drop((again, other, third));
        assert!(lookups.flights.lock().unwrap().is_empty(), "no name left behind");
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_no_name_behind() {
        let lookups = KeyLookups::default();
        let holder = lookups.turn("a").await.unwrap();
        let mut waiter = Box::pin(lookups.turn("a"));
        // Polled once, the waiter has joined the flight and waits for the holder's lock.
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        assert_eq!(lookups.flights.lock().unwrap()["a"].users, 2);
        // A request cancelled there (its client gone) drops the future mid-wait.
        drop(waiter);
        drop(holder);
        assert!(lookups.flights.lock().unwrap().is_empty(), "no name left behind");
    }
}
