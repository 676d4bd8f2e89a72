//! Running key commands: a connection's run of consecutive key commands as one statement (reads)
//! or one transaction (writes, shared with other connections' by group commit), within the
//! command time limits and the output limit, and a large read again within the buffer budget.

use std::time::Instant;

use bytes::BytesMut;

use super::codec::Reply;
use super::command::{KeyCommand, Spec};
use super::commands::transactions::{Fingerprint, fingerprint};
use super::connection::{Connection, store_error};
use super::deadline::timed_out;
use super::group_commit::{Failed, Submitted};
use super::keys;
use super::script::Step;
use crate::store::{Access, Watches};

/// A read's reply the database may send without its memory reserved from the buffer budget
/// (about twice this as a datum: see `TypedCall::reply_limit`).
const UNBUDGETED_REPLY: i64 = 1024 * 1024;
/// What a read gets whose reply does not fit in the buffer budget now.
const REPLY_OVER_BUDGET: &str =
    "OOM command not allowed: the reply does not fit in the server's buffer budget now, retry later";

/// A run of consecutive key commands, executed together: as one statement when all of them
/// read, else as one transaction (reads then see the writes before them, as they would in
/// Redis, and the whole run costs one commit). Or a run of consecutive scripts, executed in
/// one batch (`Scripts::run_pipeline`); never both.
#[derive(Default)]
pub(crate) struct Run {
    pub(crate) write: bool,
    pub(crate) commands: Vec<(KeyCommand, &'static Spec)>,
    pub(crate) scripts: Vec<(Step, &'static Spec)>,
}

/// The most pipelined scripts one batch runs: its keys stay locked from the first one's start
/// to the last one's commit, so a long pipeline is cut into batches that other clients' runs
/// on the same keys can come between.
pub(crate) const MAX_PIPELINED_SCRIPTS: usize = 64;

impl Connection {
    /// Bytes the batch's replies may still take after `out`.
    fn output_room(&self, out: &BytesMut) -> i64 {
        match self.server.settings.output_limit {
            Some(limit) => i64::try_from(limit.saturating_sub(out.len())).unwrap_or(i64::MAX),
            None => i64::MAX,
        }
    }

    /// A read whose reply was cut at its share of the limit or at [`UNBUDGETED_REPLY`], read
    /// again alone once the memory it takes is reserved from the buffer budget: cut at what is
    /// left of the limit, or `-OOM` while the budget cannot cover it.
    async fn read_again(
        &mut self,
        mut command: KeyCommand,
        spec: &'static Spec,
        cut: crate::store::Cut,
        out: &BytesMut,
    ) -> Reply {
        let room = self.output_room(out);
        if cut.least_reply_bytes() > room as u64 {
            return Reply::OverLimit(Some(cut));
        }
        let Some(reservation) = self.server.buffers.try_reserve(cut.memory_bytes(), "resp_reply") else {
            return Reply::error(REPLY_OVER_BUDGET);
        };
        self.reply_memory.push(reservation);
        command.limit_reply(room);
        Box::pin(self.execute(&[(command, spec)], false, &[], None))
            .await
            .map_or_else(|reply| reply, |mut replies| replies.pop().unwrap_or(Reply::Nil))
    }

    /// Executes a pending run of key commands or scripts and encodes their replies.
    pub(crate) async fn flush(&mut self, run: &mut Run, out: &mut BytesMut) {
        if run.commands.is_empty() && run.scripts.is_empty() {
            return;
        }
        // A gone client's run has not started: it never does (see `Connection::run`).
        if self.peer_gone.load(std::sync::atomic::Ordering::Relaxed) {
            *run = Run::default();
            return;
        }
        if !run.scripts.is_empty() {
            return self.flush_scripts(run, out).await;
        }
        let mut commands = std::mem::take(&mut run.commands);
        let write = std::mem::take(&mut run.write);
        // The run's replies share what is left of the limit, each cut in the database past its
        // share, so that a pipeline of whole-collection reads cannot fill the memory. A read's
        // reply is besides cut at `UNBUDGETED_REPLY`: a larger one is read again alone, within
        // the buffer budget. (A write's is not: it must not run twice.)
        let share = self.output_room(out) / commands.len() as i64;
        for (command, spec) in &mut commands {
            command.limit_reply(match spec.is_write() {
                true => share,
                false => share.min(UNBUDGETED_REPLY),
            });
        }
        let started = Instant::now();
        let replies = Box::pin(self.execute(&commands, write, &[], None))
            .await
            .unwrap_or_else(|reply| vec![reply; commands.len()]);
        // The run's COMMIT, if any, is answered: the command after it may be dropped again.
        self.commit.clear();
        // The run's commands share one statement: each is counted its share of its time.
        let share = started.elapsed() / commands.len() as u32;
        for ((command, spec), reply) in commands.into_iter().zip(replies) {
            let again = Instant::now();
            let reply = match reply {
                Reply::OverLimit(Some(cut)) if !spec.is_write() && !self.over_limit => {
                    self.read_again(command, spec, cut, out).await
                }
                reply => reply,
            };
            self.finish(spec, share + again.elapsed(), reply, out);
        }
    }

    /// Executes a pending run of scripts, each answered as if it ran alone.
    async fn flush_scripts(&mut self, run: &mut Run, out: &mut BytesMut) {
        let (steps, specs): (Vec<Step>, Vec<&'static Spec>) = std::mem::take(&mut run.scripts).into_iter().unzip();
        let started = Instant::now();
        let replies = Box::pin(self.run_pipelined(&steps)).await;
        self.commit.clear();
        let share = started.elapsed() / steps.len() as u32;
        for (spec, reply) in specs.into_iter().zip(replies) {
            self.finish(spec, share, reply, out);
        }
    }

    /// Runs key commands as one batch: one statement for reads, one transaction for writes.
    /// When a `watched` key changed since WATCH, nothing runs and the error is the null array
    /// EXEC answers with.
    pub(crate) async fn execute(
        &self,
        commands: &[(KeyCommand, &'static Spec)],
        write: bool,
        watched: &[(String, Fingerprint)],
        watches: Option<Watches>,
    ) -> Result<Vec<Reply>, Reply> {
        if write && watched.is_empty() && watches.is_none() {
            // A shared commit keeps the time limit itself (group_commit.rs).
            return self.execute_shared(commands).await;
        }
        self.within(write, self.execute_now(commands, write, watched, watches, false))
            .await?
    }

    /// Runs a MULTI/EXEC's key commands as [`execute`](Self::execute) does, except that a
    /// read-only one whose typed calls would run apart from its load (after commands read in
    /// the gateway, or keys it WATCHed) holds its keys' locks as a write would, so that every
    /// command sees the same moment, as in Redis. (A gateway on a hot standby takes no locks:
    /// there its reads may see replayed writes land between them.)
    pub(crate) async fn execute_transaction(
        &self,
        commands: &[(KeyCommand, &'static Spec)],
        write: bool,
        watched: &[(String, Fingerprint)],
        watches: Option<Watches>,
    ) -> Result<Vec<Reply>, Reply> {
        let typed = |command: &KeyCommand| matches!(command, KeyCommand::Typed(_));
        let one_statement = commands.iter().all(|(command, _)| !typed(command))
            || (watched.is_empty() && watches.is_none() && commands.iter().all(|(command, _)| typed(command)));
        if write || one_statement || self.server.replica.is_standby() {
            return self.execute(commands, write, watched, watches).await;
        }
        self.within(false, self.execute_now(commands, false, watched, watches, true))
            .await?
    }

    /// Database work of a command, within its class's time limits: `--resp-read-timeout`, past
    /// which the work is dropped, which cancels its statement; for a write, those of
    /// deadline.rs (dropped and rolled back only before its COMMIT is sent).
    pub(crate) async fn within<T>(&self, write: bool, work: impl Future<Output = T>) -> Result<T, Reply> {
        let settings = &self.server.settings;
        if write {
            return settings.write_limits.run(Some(&self.commit), work).await.answer();
        }
        let Some(limit) = settings.read_timeout else {
            return Ok(work.await);
        };
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| timed_out(limit, false))
    }

    /// Writes in a transaction shared with other connections' writes.
    async fn execute_shared(&self, commands: &[(KeyCommand, &'static Spec)]) -> Result<Vec<Reply>, Reply> {
        let keyspace = self.keyspace(Access::Write).await?;
        let commands = commands.iter().map(|(command, _)| command.clone()).collect();
        match self.server.group_commit.submit(&keyspace, commands, self.id()).await {
            Submitted::Answered(outcome) => outcome.map_err(|failed| match failed {
                Failed::Store(err) => store_error(err),
                Failed::Limit(fate) => fate,
            }),
            Submitted::Withdrawn(limit) => Err(timed_out(limit, true)),
        }
    }

    async fn execute_now(
        &self,
        commands: &[(KeyCommand, &'static Spec)],
        write: bool,
        watched: &[(String, Fingerprint)],
        watches: Option<Watches>,
        locked_read: bool,
    ) -> Result<Vec<Reply>, Reply> {
        let keyspace = self.keyspace(if write { Access::Write } else { Access::Read }).await?;
        let unwatched = watched.is_empty() && watches.is_none();
        if !write
            && unwatched
            && commands
                .iter()
                .all(|(command, _)| matches!(command, KeyCommand::Typed(_)))
        {
            // Typed reads need nothing loaded: their calls are the one round trip.
            let typed: Vec<&super::typed::Typed> = commands
                .iter()
                .filter_map(|(command, _)| match command {
                    KeyCommand::Typed(typed) => Some(&**typed),
                    _ => None,
                })
                .collect();
            let calls: Vec<_> = typed.iter().map(|typed| &typed.call).collect();
            let rows = keyspace.typed_read(&calls).await.map_err(store_error)?;
            return Ok(typed.iter().zip(rows).map(|(typed, row)| typed.reply(row)).collect());
        }
        let mut keys: Vec<String> = commands
            .iter()
            .flat_map(|(command, _)| command.keys())
            .chain(watched.iter().map(|(key, _)| key))
            .cloned()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let batch = if write {
            keyspace.write(&keys).await
        } else if locked_read {
            keyspace.read_locked(&keys).await
        } else if unwatched {
            // Shares a statement with other connections' reads.
            self.server.group_commit.load(&keyspace, keys).await
        } else {
            keyspace.read(&keys).await
        };
        let mut batch = batch.map_err(store_error)?;
        let untouched = match watches {
            Some(watches) => batch.watches_untouched(watches).await.map_err(store_error)?,
            None => true,
        };
        if !untouched || watched.iter().any(|(key, seen)| fingerprint(batch.get(key)) != *seen) {
            batch.rollback().await.map_err(store_error)?;
            return Err(Reply::NilArray);
        }
        let commands: Vec<&KeyCommand> = commands.iter().map(|(command, _)| command).collect();
        if write {
            let events = &self.server.pubsub.events;
            let flags = events.flags(keyspace.bucket()).await.map_err(store_error)?;
            let clients = match flags.tracked() {
                true => vec![self.id(); commands.len()],
                false => Vec::new(),
            };
            let writers = super::notify::Writers {
                token: events.token,
                clients: &clients,
            };
            let (replies, changed) = super::notify::apply_and_commit(flags, &commands, writers, batch)
                .await
                .map_err(store_error)?;
            changed.tell(&self.server.pubsub.tracking, keyspace.bucket());
            return Ok(replies);
        }
        let replies = keys::apply_all(&commands, &mut batch, true)
            .await
            .map_err(store_error)?;
        batch.commit().await.map_err(store_error)?;
        Ok(replies)
    }
}
