//! RESP cases: GET, SET, MGET and INCR over one connection per worker (like redis-benchmark's
//! clients), each request a pipeline of `pipeline` commands. Values read are compared byte for
//! byte with what was written; any error reply counts as an error under its code.

use bytes::Bytes;
use redis::aio::MultiplexedConnection;

use super::Outcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Get,
    Set,
    Mget,
    Incr,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    pub operation: Operation,
    /// Value size (GET, SET, MGET).
    pub size: u64,
    /// Distinct keys the case cycles through.
    pub keys: u64,
    /// Commands per request (one round trip).
    pub pipeline: u64,
    /// Keys per MGET.
    pub mget_keys: u64,
    pub prefix: String,
}

pub struct Runner {
    connections: Vec<MultiplexedConnection>,
    case: Case,
    value: Bytes,
}

impl Runner {
    /// Opens `workers` connections to `url` (`redis://host:port`).
    pub async fn connect(url: &str, workers: usize, case: Case) -> anyhow::Result<Runner> {
        let client = redis::Client::open(url)?;
        // No response timeout of the client's own (its default is 500 ms): the load generator
        // times requests out itself, as an error of its own kind.
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(std::time::Duration::from_secs(10)));
        let mut connections = Vec::with_capacity(workers);
        for _ in 0..workers.max(1) {
            connections.push(client.get_multiplexed_async_connection_with_config(&config).await?);
        }
        let value = super::payload(case.size);
        Ok(Runner {
            connections,
            case,
            value,
        })
    }

    fn key(&self, index: u64) -> String {
        format!("{}{index:08}", self.case.prefix)
    }

    /// Writes the values GET and MGET read, 1000 per pipeline.
    pub async fn prepare(&self) -> anyhow::Result<()> {
        if !matches!(self.case.operation, Operation::Get | Operation::Mget) {
            return Ok(());
        }
        let mut connection = self.connections[0].clone();
        for start in (0..self.case.keys).step_by(1000) {
            let mut pipe = redis::pipe();
            for index in start..self.case.keys.min(start + 1000) {
                pipe.set(self.key(index), &self.value[..]).ignore();
            }
            pipe.query_async::<()>(&mut connection).await?;
        }
        Ok(())
    }

    /// Checks one reply; returns the value bytes it carried (SET counts what it wrote).
    fn verify(&self, reply: &redis::Value) -> Result<u64, &'static str> {
        use redis::Value;
        let size = self.value.len() as u64;
        match (self.case.operation, reply) {
            (Operation::Get, Value::BulkString(value)) if value[..] == self.value[..] => Ok(size),
            (Operation::Get, Value::Nil) => Err("missing value"),
            (Operation::Get, _) => Err("wrong value"),
            (Operation::Set, Value::Okay) => Ok(size),
            (Operation::Set, _) => Err("SET answered other than OK"),
            (Operation::Incr, Value::Int(n)) if *n >= 1 => Ok(0),
            (Operation::Incr, _) => Err("INCR answered other than a positive integer"),
            (Operation::Mget, Value::Array(values)) if values.len() as u64 == self.case.mget_keys => values
                .iter()
                .map(|value| match value {
                    Value::BulkString(value) if value[..] == self.value[..] => Ok(size),
                    _ => Err("wrong value"),
                })
                .sum(),
            (Operation::Mget, _) => Err("MGET answered other than an array of the keys' values"),
        }
    }

    fn pick(&self, worker: usize, slot: u64) -> u64 {
        (worker as u64 * 7919 + slot * 104_729) % self.case.keys.max(1)
    }
}

impl super::Request for Runner {
    async fn once(&self, worker: usize, sequence: u64) -> Outcome {
        let case = &self.case;
        let mut pipe = redis::pipe();
        for command in 0..case.pipeline {
            let slot = sequence * case.pipeline + command;
            match case.operation {
                Operation::Get => pipe.get(self.key(self.pick(worker, slot))),
                Operation::Set => pipe.set(self.key(self.pick(worker, slot)), &self.value[..]),
                Operation::Incr => pipe.incr(self.key(self.pick(worker, slot)), 1),
                Operation::Mget => {
                    let keys: Vec<String> = (0..case.mget_keys)
                        .map(|k| self.key(self.pick(worker, slot * case.mget_keys + k)))
                        .collect();
                    pipe.mget(keys)
                }
            };
        }
        let mut connection = self.connections[worker % self.connections.len()].clone();
        let replies: Vec<redis::Value> = match pipe.query_async(&mut connection).await {
            Ok(replies) => replies,
            Err(error) => return Outcome::Error(error_kind(&error)),
        };
        if replies.len() as u64 != case.pipeline {
            return Outcome::Error("wrong reply count".into());
        }
        let mut bytes = 0;
        for reply in &replies {
            match self.verify(reply) {
                Ok(read) => bytes += read,
                Err(kind) => return Outcome::Error(kind.into()),
            }
        }
        Outcome::Batch {
            bytes,
            items: case.pipeline,
        }
    }
}

/// The error's code (`BUSY`, `ERR`, ...) or, for transport errors, its category.
fn error_kind(error: &redis::RedisError) -> String {
    match error.code() {
        Some(code) => code.to_owned(),
        None => format!("{:?}", error.kind()),
    }
}
