//! Database faults on demand: a TCP proxy in front of PostgreSQL that can switch its target
//! (a failover behind one address) or stop forwarding without closing anything (a network cut),
//! a gateway on its own embedded PostgreSQL, and the probes the fault tests poll.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = routes.changed() => {
            if *routes.borrow_and_update() == Route::Blackhole {
                hold(routes, (client, Some(server))).await;
            }
        }
    }
}

/// Keeps the sockets open and unread until the proxy goes away.
async fn hold(mut routes: watch::Receiver<Route>, _sockets: (TcpStream, Option<TcpStream>)) {
    while routes.changed().await.is_ok() {}
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
