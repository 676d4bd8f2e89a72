//! A connection from the pool while the database refuses this gateway new ones.
//!
//! A database password is rotated in two steps, `ALTER ROLE` and the gateways' Secret, and
//! between them (and until every gateway started with the old password has been replaced)
//! PostgreSQL refuses each new connection such a gateway opens, while the connections it has
//! open stay authenticated and serve. The same holds when the server is at its
//! `max_connections`. A request that needed one connection more than the pool has open would
//! fail for that alone; [`checkout`] waits for one of the open ones instead.

use std::time::Duration;

use deadpool_postgres::tokio_postgres;
use deadpool_postgres::{Object, Pool, PoolError, Timeouts};
use tokio::time::Instant;

/// How often a waiting checkout looks for a connection given back to the pool. The pool tells
/// no one when that happens; this wait only runs while new connections are refused.
const RETURN_POLL: Duration = Duration::from_millis(5);

/// Whether the server refused to open a connection for this gateway, as opposed to not being
/// there: SQLSTATE class 28 (invalid authorization: a wrong password, a role that may no longer
/// log in, no `pg_hba.conf` entry) or 53300 (too many connections).
pub fn refuses_new_connection(err: &tokio_postgres::Error) -> bool {
    err.code()
        .is_some_and(|code| code.code().starts_with("28") || code.code() == "53300")
}

/// A connection from `pool`, as [`Pool::get`]; when the server refuses to open a new one, a
/// connection the pool already has is waited for (up to the pool's wait timeout) instead of the
/// refusal being the request's answer. With no connection open at all the refusal is returned
/// at once: none will come back.
pub async fn checkout(pool: &Pool) -> Result<Object, PoolError> {
    let mut refusal = match pool.get().await {
        Err(PoolError::Backend(err)) if refuses_new_connection(&err) => err,
        other => return other,
    };
    let timeouts = pool.timeouts();
    let deadline = Instant::now() + timeouts.wait.unwrap_or(Duration::from_secs(10));
    loop {
        let status = pool.status();
        let now = Instant::now();
        if status.size == 0 || now >= deadline {
            return Err(PoolError::Backend(refusal));
        }
        if status.available > 0 {
            // An idle connection is taken before a new one is tried; another task may have
            // taken it first, and then this one is refused again and waits on. Within what is
            // left of the wait.
            let left = Timeouts {
                wait: Some(deadline - now),
                ..timeouts
            };
            match pool.timeout_get(&left).await {
                Err(PoolError::Backend(err)) if refuses_new_connection(&err) => refusal = err,
                other => return other,
            }
        }
        tokio::time::sleep(RETURN_POLL).await;
    }
}

// Tested against a real server with pgvs3-pg's (`pg::health`'s tests), which can start one.
