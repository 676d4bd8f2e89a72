//! What each protocol crate's `start()` is handed by the binary that wires the gateway, and what
//! it hands back. The binary makes the shared parts once (metrics, the buffer budget, replica
//! lag, the shutdown signal); each feature configures itself from its own flags.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::admission::{BufferBudget, Limits};
use crate::args::HttpArgs;
use crate::http_server::{self, Shutdown};
use crate::metrics::Metrics;
use crate::replica_lag::ReplicaLag;

/// The parts of one gateway every feature shares.
#[derive(Clone)]
pub struct Shared {
    pub metrics: Metrics,
    pub lag: ReplicaLag,
    pub buffers: BufferBudget,
    pub shutdown: Shutdown,
    /// How long shutdown waits for in-flight requests.
    pub drain: Duration,
    /// The bounds every HTTP listener shares.
    pub http: HttpArgs,
    pub admission: AdmissionDefaults,
}

/// What a protocol's admission limits default to when its flags say 0.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionDefaults {
    /// The database pool's size: work beyond twice it only waits for a connection.
    pub pool_size: usize,
    /// `--admission-wait`: how long a request waits for a slot.
    pub wait: Duration,
}

impl AdmissionDefaults {
    /// 0 active: twice the pool size; 0 waiting: twice the active limit.
    pub fn limits(&self, max_active: usize, max_waiting: usize) -> Limits {
        let max_active = if max_active == 0 {
            self.pool_size * 2
        } else {
            max_active
        };
        Limits {
            max_active,
            max_waiting: if max_waiting == 0 { max_active * 2 } else { max_waiting },
            max_wait: self.wait,
        }
    }
}

/// Where a feature listens: its address, the plaintext twin kept during a move to TLS (if any),
/// and the TLS the main listener speaks.
pub struct Listen {
    pub addr: SocketAddr,
    pub plaintext: Option<SocketAddr>,
    pub tls: Option<TlsAcceptor>,
}

impl Listen {
    /// Binds both listeners; `name` and the flags that change each address are for the error.
    pub async fn bind(
        &self,
        name: &str,
        flag: &str,
        plaintext_flag: &str,
    ) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
        let listener = TcpListener::bind(self.addr)
            .await
            .with_context(|| format!("binding {name} on {} (change it with {flag})", self.addr))?;
        let plaintext = match self.plaintext {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding {addr} ({plaintext_flag})"))?,
            ),
            None => None,
        };
        Ok((listener, plaintext))
    }
}

/// A started feature: where it listens and the tasks it runs.
pub struct Started {
    pub addr: SocketAddr,
    pub plaintext_addr: Option<SocketAddr>,
    /// Listeners: awaited at shutdown while they drain.
    pub servers: Vec<JoinHandle<()>>,
    /// Loops that run beside the listeners (tickers, samplers): aborted at shutdown.
    pub background: Vec<JoinHandle<()>>,
}

impl Started {
    /// The addresses of a feature's listeners once bound (port 0 becomes the port the system
    /// chose); no tasks yet.
    pub fn bound(listener: &TcpListener, plaintext: Option<&TcpListener>) -> anyhow::Result<Started> {
        Ok(Started {
            addr: listener.local_addr()?,
            plaintext_addr: plaintext.map(TcpListener::local_addr).transpose()?,
            servers: Vec::new(),
            background: Vec::new(),
        })
    }
}

/// Serves `service` on a listener and on its plaintext twin, if any (which shares the name,
/// hence the metrics, and has a connection cap of its own).
pub fn spawn_http<S, B>(
    (listener, plaintext): (TcpListener, Option<TcpListener>),
    service: S,
    settings: http_server::Listener,
    shared: &Shared,
) -> Vec<JoinHandle<()>>
where
    S: hyper::service::Service<
            http::Request<crate::request_body::RequestBody>,
            Response = http::Response<B>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut servers = Vec::new();
    if let Some(plaintext) = plaintext {
        let settings = http_server::Listener {
            tls: None,
            ..settings.clone()
        };
        servers.push(tokio::spawn(http_server::serve(
            plaintext,
            service.clone(),
            shared.shutdown.clone(),
            shared.drain,
            settings,
            shared.metrics.clone(),
        )));
    }
    servers.push(tokio::spawn(http_server::serve(
        listener,
        service,
        shared.shutdown.clone(),
        shared.drain,
        settings,
        shared.metrics.clone(),
    )));
    servers
}
