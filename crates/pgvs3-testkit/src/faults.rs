//! Database faults on demand: a TCP proxy in front of PostgreSQL that can switch its target
//! (a failover behind one address) or stop forwarding without closing anything (a network cut),
//! one that silences one kind of connection alone, a gateway on its own embedded PostgreSQL, and
//! the probes the fault tests poll.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, raw, s3_client};
use pgvs3_gateway::serve::RunningGateway;

/// Where the proxy sends new (and keeps existing) connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    To(SocketAddr),
    /// Accepts, then neither forwards nor closes: every socket through it hangs.
    Blackhole,
}

/// A TCP proxy on 127.0.0.1. A switch to another target closes the connections to the old
/// one (as a failover does: the old server is gone). A blackhole keeps them open but silent for
/// as long as the proxy lives, even after the route is restored, as a partition that lost the
/// path's state does: only the gateway can give up on them.
pub struct Proxy {
    pub addr: SocketAddr,
    route: watch::Sender<Route>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(route: Route) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (sender, _) = watch::channel(route);
        let routes = sender.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, routes.subscribe()));
            }
        });
        Proxy {
            addr,
            route: sender,
            accept,
        }
    }

    pub fn set(&self, route: Route) {
        self.route.send_replace(route);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(mut client: TcpStream, mut routes: watch::Receiver<Route>) {
    let route = *routes.borrow_and_update();
    let Route::To(target) = route else {
        return hold(routes, (client, None)).await;
    };
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    tokio::select! {
        // The switch first: once it is made, nothing more goes to the old target, even what
        // arrived at the same moment.
        biased;
        _ = routes.changed() => {
            if *routes.borrow_and_update() == Route::Blackhole {
                hold(routes, (client, Some(server))).await;
            }
        }
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}

/// Keeps the sockets open and unread until the proxy goes away.
async fn hold(mut routes: watch::Receiver<Route>, _sockets: (TcpStream, Option<TcpStream>)) {
    while routes.changed().await.is_ok() {}
}

/// A TCP proxy on 127.0.0.1 to one server that silences, without closing anything, the
/// connections open now whose client sent `marker` (a statement only one kind of a gateway's
/// connections sends, such as its LISTEN), and no other: as a firewall or NAT that lost one
/// connection's state drops its packets alone (keepalives are still answered, by the proxy's
/// kernel). Connections opened later pass, so that a gateway can open its connection again.
pub struct Silencer {
    pub addr: SocketAddr,
    /// How many times [`Silencer::silence`] was called.
    silenced: watch::Sender<i64>,
    /// Connections whose client sent the marker.
    marked: Arc<AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl Silencer {
    pub async fn start(target: SocketAddr, marker: &'static [u8]) -> Silencer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (silenced, _) = watch::channel(0);
        let marked = Arc::new(AtomicUsize::new(0));
        let (cuts, counted) = (silenced.clone(), Arc::clone(&marked));
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                // The cut count when the marker went through; -1: not sent.
                let seen = Arc::new(AtomicI64::new(-1));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let up = Pump {
                    marker: Some((marker, Arc::clone(&counted))),
                    seen: Arc::clone(&seen),
                    cuts: cuts.subscribe(),
                };
                let down = Pump {
                    marker: None,
                    seen,
                    cuts: cuts.subscribe(),
                };
                tokio::spawn(up.run(client_read, server_write));
                tokio::spawn(down.run(server_read, client_write));
            }
        });
        Silencer {
            addr,
            silenced,
            marked,
            accept,
        }
    }

    /// Silences the marked connections open now.
    pub fn silence(&self) {
        self.silenced.send_modify(|cuts| *cuts += 1);
    }

    /// How many connections sent the marker so far.
    pub fn marked(&self) -> usize {
        self.marked.load(Ordering::SeqCst)
    }
}

impl Drop for Silencer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One direction of a [`Silencer`]'s connection.
struct Pump {
    /// What marks the connection, looked for in this direction, and the count of marked ones.
    marker: Option<(&'static [u8], Arc<AtomicUsize>)>,
    seen: Arc<AtomicI64>,
    cuts: watch::Receiver<i64>,
}

impl Pump {
    async fn run(mut self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf) {
        let mut buffer = vec![0; 64 * 1024];
        // What was read lately, for a marker split between two reads.
        let mut recent: Vec<u8> = Vec::new();
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if let Some((marker, marked)) = &self.marker
                && self.seen.load(Ordering::SeqCst) < 0
            {
                recent.extend_from_slice(&buffer[..read]);
                if recent.windows(marker.len()).any(|window| window == *marker) {
                    self.seen.store(*self.cuts.borrow(), Ordering::SeqCst);
                    marked.fetch_add(1, Ordering::SeqCst);
                }
                recent.drain(..recent.len().saturating_sub(marker.len()));
            }
            let seen = self.seen.load(Ordering::SeqCst);
            if seen >= 0 && *self.cuts.borrow() > seen {
                // This and all that follows goes nowhere; both sockets stay open (this half's
                // and the other's) until the proxy goes away.
                let _sockets = (from, to);
                while self.cuts.changed().await.is_ok() {}
                return;
            }
            if to.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    }
}

/// The TCP address of a test cluster and its superuser password (TCP connections authenticate;
/// the Unix socket trusts).
pub fn tcp_url(port: u16, password: &str, database: &str) -> String {
    format!("host=127.0.0.1 port={port} user=pgvs3 password={password} dbname={database}")
}

pub fn password_of(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("pg-password")).expect("the cluster's password file")
}

/// The data dir of a pair started by [`super::primary_and_standby`].
pub fn pair_dir(name: &str, member: &str) -> PathBuf {
    std::env::temp_dir()
        .join(format!("pgvs3-test-{}-pair-{name}", std::process::id()))
        .join(member)
}

/// The postmaster's pid, from the cluster's own lock file.
pub fn postmaster_pid(data_dir: &Path) -> i32 {
    let pid_file = std::fs::read_to_string(data_dir.join("pg").join("postmaster.pid")).expect("postmaster.pid");
    pid_file.lines().next().unwrap().trim().parse().unwrap()
}

pub fn kill9(pid: i32) {
    // SAFETY: sending a signal has no memory-safety implications.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill -9 {pid}");
}

/// A gateway on an embedded PostgreSQL of its own in `data_dir` (no --database-url), with RESP
/// and OJS on.
pub async fn embedded_gateway(data_dir: &Path, extra: &[&str]) -> TestGateway {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: pgvs3_gateway::config::ServeArgs,
    }
    let data_dir = data_dir.to_str().unwrap();
    let mut argv = vec![
        "pgvs3",
        "--data-dir",
        data_dir,
        "--pg-shared-buffers",
        "32MB",
        "--s3-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--ojs-addr",
        "127.0.0.1:0",
        "--resp-addr",
        "127.0.0.1:0",
        "--root-access-key",
        ROOT_ACCESS_KEY,
        "--root-secret-key",
        ROOT_SECRET_KEY,
        "--pool-size",
        "8",
        "--maintenance-interval",
        "1h",
        "--resp-auth",
        "none",
        "--ojs-auth",
        "none",
    ];
    argv.extend_from_slice(extra);
    let args = <Cli as clap::Parser>::parse_from(argv).serve;
    let gateway = Box::pin(RunningGateway::start(&args)).await.expect("gateway starts");
    let client = s3_client(&gateway, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
    TestGateway {
        gateway,
        database_url: String::new(),
        client,
    }
}

/// The status and body of an admin endpoint (/healthz, /readyz).
pub async fn admin_get(gateway: &TestGateway, path: &str) -> (u16, String) {
    let addr = gateway.gateway.admin_addr;
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        raw::send(addr, "GET", path, &[("host".into(), addr.to_string())], b""),
    )
    .await
    .unwrap_or_else(|_| panic!("{path} answered within 10s"));
    (response.status, response.body)
}

/// Removed on drop, after whatever ran in it stopped.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("pgvs3-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
