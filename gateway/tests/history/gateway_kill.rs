//! The gateway binary as a child process, killed -9 mid-history and started again on the same
//! address: what it acknowledged must be there after, what it did not may or may not be, and
//! nothing half done may be seen (`s3_bodies` checks the bodies byte for byte).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use rand::Rng;
use tokio::process::{Child, Command};

use super::schedule::Bounds;
use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_pgvs3");

/// `pgvs3 serve` on a database of the shared cluster.
pub struct ChildGateway {
    child: Child,
    database_url: String,
    pub s3_addr: SocketAddr,
}

impl ChildGateway {
    pub async fn start(database_url: String) -> ChildGateway {
        // A port of its own, kept across restarts: clients keep their endpoint.
        let s3_addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = spawn(&database_url, s3_addr).await;
        ChildGateway {
            child,
            database_url,
            s3_addr,
        }
    }

    /// What makes a client for each operation: one that does not retry (an attempt cut short
    /// by a kill is the operation's outcome, unknown, not hidden behind a second attempt on
    /// the restarted gateway), on a connection of its own (none left over from a killed
    /// gateway, so that a refused connection tells that nothing was sent).
    pub fn connect(&self) -> impl Fn() -> Client + Clone + Send + 'static {
        let addr = self.s3_addr;
        move || {
            let client = common::s3_client_at(addr, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
            Client::from_conf(
                client
                    .config()
                    .to_builder()
                    .retry_config(RetryConfig::disabled())
                    .build(),
            )
        }
    }

    /// Kill -9, then the same gateway started again, ready.
    pub async fn kill_and_restart(&mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        self.child = spawn(&self.database_url, self.s3_addr).await;
    }
}

async fn spawn(database_url: &str, s3_addr: SocketAddr) -> Child {
    let s3 = s3_addr.to_string();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--database-url",
            database_url,
            "--master-key",
            common::MASTER_KEY,
            "--root-access-key",
            common::ROOT_ACCESS_KEY,
            "--root-secret-key",
            common::ROOT_SECRET_KEY,
            "--s3-addr",
            &s3,
            "--admin-addr",
            "127.0.0.1:0",
            "--ojs-addr",
            "127.0.0.1:0",
            "--resp-addr",
            "off",
            "--maintenance-interval",
            "1h",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Ready once it answers S3 (ListBuckets) on its address.
    let client = common::s3_client_at(s3_addr, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.list_buckets().send().await.is_err() {
        assert!(Instant::now() < deadline, "the gateway answers within a minute");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// Kills the gateway every second or two until stopped.
pub struct Killer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(ChildGateway, Vec<Instant>)>,
}

impl Killer {
    pub fn start(mut gateway: ChildGateway, bounds: &Bounds) -> Killer {
        let stop = Arc::new(AtomicBool::new(false));
        let mut rng = bounds.rng("gateway-kills", 0);
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut kills = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(800..2000))).await;
                if !stopped.load(Ordering::Relaxed) {
                    kills.push(Instant::now());
                    gateway.kill_and_restart().await;
                }
            }
            (gateway, kills)
        });
        Killer { stop, task }
    }

    /// Stops killing; the gateway (running) and when it was killed.
    pub async fn stop(self) -> (ChildGateway, Vec<Instant>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}
