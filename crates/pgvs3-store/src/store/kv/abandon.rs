//! Statements whose caller went away: cancelled on the server, their connection closed.

use crate::pg::connections::Connections;

/// A connection with a statement under way outside a batch: dropped before
/// [`UnderWay::done`] (its caller went away), the statement is abandoned.
pub(in crate::store) struct UnderWay<'a> {
    client: Option<deadpool_postgres::Object>,
    cancel: Option<&'a Connections>,
}

impl<'a> UnderWay<'a> {
    pub(in crate::store) fn new(client: deadpool_postgres::Object, cancel: Option<&'a Connections>) -> UnderWay<'a> {
        UnderWay {
            client: Some(client),
            cancel,
        }
    }

    pub(in crate::store) fn client(&self) -> &deadpool_postgres::Object {
        self.client.as_ref().expect("until done")
    }

    /// The statement ended: the connection goes back to the pool.
    pub(in crate::store) fn done(mut self) {
        self.client = None;
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            abandon(client, self.cancel);
        }
    }
}

/// The connection of a statement whose caller went away (its future was dropped: the RESP
/// client disconnected, or its command ran past its time limit). PostgreSQL would run the
/// statement to its end, holding a backend, its locks and maybe minutes of work: the server is
/// asked to cancel it, and the connection is closed rather than handed to anyone else (a
/// cancel arriving late would hit the next statement).
pub(super) fn abandon(client: deadpool_postgres::Object, cancel: Option<&Connections>) {
    let client = deadpool_postgres::Object::take(client);
    if let (Some(connections), Ok(runtime)) = (cancel, tokio::runtime::Handle::try_current()) {
        let token = client.cancel_token();
        let tls = connections.tls();
        runtime.spawn(async move {
            if let Err(err) = token.cancel_query(tls).await {
                tracing::warn!(error = %err, "cancelling an abandoned statement");
            }
        });
    }
}
