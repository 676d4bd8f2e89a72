//! Scripting: EVAL, EVALSHA and their read-only forms, SCRIPT. The interpreter and its
//! batches are `resp/script.rs` and `resp/lua.rs`.

use bytes::Bytes;

use super::transactions::{Fingerprint, fingerprint};
use crate::resp::codec::Reply;
use crate::resp::command::Spec;
use crate::resp::connection::{Connection, store_error};
use crate::resp::script::{self, Ran, Step};
use crate::store::Access;

impl Connection {
    pub(crate) async fn scripting_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            "script" => self.server.scripts.command(args, self.principal()),
            _ => {
                let steps = match self
                    .server
                    .scripts
                    .request(spec.name, args, &self.principal().access_key)
                {
                    Ok(request) => [Step::Script(request.called_by(self.caller()))],
                    Err(reply) => return reply,
                };
                match self.run_scripted(&steps, &[], None).await {
                    Ok(mut replies) => replies.pop().unwrap_or(Reply::Nil),
                    Err(reply) => reply,
                }
            }
        }
    }

    /// What the scripts' calls are checked against: this connection's user, when narrowed.
    pub(crate) fn caller(&self) -> Option<crate::resp::acl::Caller> {
        (!self.user.unrestricted()).then(|| crate::resp::acl::Caller {
            user: std::sync::Arc::clone(&self.user),
            username: self.username.clone(),
            client_info: self.client_info(),
            acl: std::sync::Arc::clone(&self.server.acl),
        })
    }

    /// Who the scripts run for: this client, and whether its reads are remembered.
    fn run_by(&self) -> script::RunBy {
        script::RunBy {
            id: self.id(),
            remembers_reads: self.remembers_reads(),
            channels: self.channel_namespace(),
            db: self.db,
        }
    }

    /// A pipelined EVAL, EVALSHA (and their read-only forms) or FCALL(_RO) as the step a
    /// batch of the client's scripts runs (`Scripts::run_pipeline`); `Err`: its answer, when it
    /// cannot run (an unknown script or function, bad arguments).
    pub(crate) async fn pipelined_script(&mut self, spec: &'static Spec, args: &[Bytes]) -> Result<Step, Reply> {
        let request = match spec.name {
            "fcall" | "fcall_ro" => self.fcall_request(spec.name == "fcall_ro", args).await?,
            _ => self
                .server
                .scripts
                .request(spec.name, args, &self.principal().access_key)?
                .called_by(self.caller()),
        };
        Ok(Step::Script(request))
    }

    /// Runs a client's pipelined scripts in one batch, each answered as if it ran alone (see
    /// `Scripts::run_pipeline`), within the time limits of [`Self::run_scripted`].
    pub(crate) async fn run_pipelined(&self, steps: &[Step]) -> Vec<Reply> {
        let standby = self.server.replica.is_standby();
        let write = !standby && script::writes(steps);
        let keyspace = match self.keyspace(if write { Access::Write } else { Access::Read }).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return vec![reply; steps.len()],
        };
        let run = self
            .server
            .scripts
            .run_pipeline(&keyspace, steps, standby, self.run_by());
        let limits = crate::resp::deadline::WriteLimits {
            write: None,
            ..self.server.settings.write_limits
        };
        match limits.run(Some(&self.commit), run).await.answer() {
            Ok(Ok(replies)) => replies,
            Ok(Err(err)) => vec![store_error(err); steps.len()],
            Err(reply) => vec![reply; steps.len()],
        }
    }

    /// Runs scripts (and key commands queued with them) in one batch: see `script.rs`. A
    /// `watched` key that changed since WATCH answers the null array, as [`Self::execute`].
    /// The scripts' run is bounded by the script time limit; their COMMIT, once sent, by
    /// `--resp-commit-timeout`, as any write's (deadline.rs).
    pub(crate) async fn run_scripted(
        &self,
        steps: &[Step],
        watched: &[(String, Fingerprint)],
        watches: Option<crate::store::Watches>,
    ) -> Result<Vec<Reply>, Reply> {
        let standby = self.server.replica.is_standby();
        let write = !standby && script::writes(steps);
        let keyspace = self.keyspace(if write { Access::Write } else { Access::Read }).await?;
        let watched_keys: Vec<String> = watched.iter().map(|(key, _)| key.clone()).collect();
        let unchanged =
            |batch: &crate::store::KvBatch| watched.iter().all(|(key, seen)| fingerprint(batch.get(key)) == *seen);
        let run = self.server.scripts.run(
            &keyspace,
            steps,
            write,
            standby,
            &watched_keys,
            watches,
            &unchanged,
            self.run_by(),
            None,
        );
        let limits = crate::resp::deadline::WriteLimits {
            write: None,
            ..self.server.settings.write_limits
        };
        // Run together, all or nothing, as EXEC: a stopped script's error answers every step.
        match limits.run(Some(&self.commit), run).await.answer()? {
            Ok(Ran::Done(Some(replies))) => Ok(replies),
            Ok(Ran::Done(None)) => Err(Reply::NilArray),
            Ok(Ran::Stopped { reply, .. }) => Ok(vec![reply; steps.len()]),
            Err(err) => Err(store_error(err)),
        }
    }
}
