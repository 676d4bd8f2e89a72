//! The real-apiserver tier's harness: etcd + kube-apiserver (+ kube-controller-manager) from the
//! scripts and binaries in `PGVS3_KUBE_ASSETS`, the generated CRDs and the chart's RBAC, the
//! `pgvs3-operator` binary run as the chart's ServiceAccount, and `pgvs3` gateway processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use pgvs3_operator::crd::GatewayPool;
use serde_json::json;

pub const SYSTEM_NAMESPACE: &str = "pgvs3-system";
/// The chart's ServiceAccount (release `pgvs3-operator`, so its full name).
pub const SERVICE_ACCOUNT: &str = "pgvs3-operator";

/// The directory of the unpacked assets, or a panic that says the tier was not run: a test of
/// this tier must never pass without an API server.
pub fn assets() -> PathBuf {
    match std::env::var_os("PGVS3_KUBE_ASSETS") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "apiserver tier not run: PGVS3_KUBE_ASSETS is not set (run .ci/apiserver-tier.sh, or set it to the \
             directory /work/shared/kube/unpack.sh prints)"
        ),
    }
}

/// A running control plane; stopped (etcd included) when dropped.
pub struct ControlPlane {
    pub run_dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub admin: Client,
    assets: PathBuf,
}

pub fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|err| panic!("{command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

impl ControlPlane {
    /// Starts etcd, the API server (`extra_flags` added) and kube-controller-manager, installs
    /// the CRDs and the chart's RBAC in `pgvs3-system`.
    pub async fn start(name: &str, extra_flags: &str) -> ControlPlane {
        ControlPlane::start_with(name, extra_flags, None).await
    }

    /// As [`ControlPlane::start`], with the chart's RBAC rendered for `watch_namespace` (a Role
    /// in that namespace, created first, instead of a ClusterRole).
    pub async fn start_with(name: &str, extra_flags: &str, watch_namespace: Option<&str>) -> ControlPlane {
        let assets = assets();
        let run_dir = std::env::temp_dir().join(format!("pgvs3-kube-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).unwrap();
        let stdout = run(Command::new(assets.join("start-apiserver.sh"))
            .arg(&run_dir)
            .env("WITH_KCM", "1")
            .env("APISERVER_EXTRA", extra_flags));
        let kubeconfig = PathBuf::from(stdout.lines().last().expect("kubeconfig path").trim());
        let config = kube_config(&kubeconfig).await;
        let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
        let admin = Client::try_from(config).unwrap();
        PLANES.lock().unwrap().push(kubeconfig.clone());
        let plane = ControlPlane {
            run_dir,
            kubeconfig,
            server,
            admin,
            assets,
        };
        plane.install(watch_namespace).await;
        plane
    }

    async fn install(&self, watch_namespace: Option<&str>) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin.clone());
        for crd in pgvs3_operator::crd::all() {
            let name = crd.metadata.name.clone().unwrap();
            crds.patch(&name, &PatchParams::apply("pgvs3-tests").force(), &Patch::Apply(&crd))
                .await
                .unwrap();
        }
        self.kubectl(&["create", "namespace", SYSTEM_NAMESPACE]);
        let mut values = Vec::new();
        if let Some(namespace) = watch_namespace {
            self.kubectl(&["create", "namespace", namespace]);
            values = vec!["--set".to_string(), format!("watchNamespace={namespace}")];
        }
        let rbac = run(Command::new(helm()).args(&values).args([
            "template",
            "pgvs3-operator",
            chart_dir().to_str().unwrap(),
            "--namespace",
            SYSTEM_NAMESPACE,
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ]));
        self.kubectl_stdin(&["apply", "-f", "-"], &rbac);
        for crd in pgvs3_operator::crd::all() {
            let name = crd.metadata.name.clone().unwrap();
            self.kubectl(&[
                "wait",
                "--for=condition=Established",
                &format!("--timeout={}s", wait().as_secs()),
                &format!("crd/{name}"),
            ]);
        }
    }

    /// Installs a ServiceMonitor CRD (the Prometheus operator's kind, its schema left open), so
    /// pools get ServiceMonitors.
    pub fn install_service_monitor_crd(&self) {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor", "listKind": "ServiceMonitorList"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        });
        self.kubectl_stdin(&["apply", "-f", "-"], &crd.to_string());
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("--timeout={}s", wait().as_secs()),
            "crd/servicemonitors.monitoring.coreos.com",
        ]);
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        run(Command::new("kubectl").env("KUBECONFIG", &self.kubeconfig).args(args))
    }

    /// kubectl that may fail: its exit status and combined output.
    pub fn kubectl_status(&self, args: &[&str], stdin: &str) -> (bool, String) {
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> String {
        let (ok, text) = self.kubectl_status(args, stdin);
        assert!(ok, "kubectl {args:?}: {text}");
        text
    }

    /// A kubeconfig authenticating as the chart's ServiceAccount (a TokenRequest token).
    pub fn service_account_kubeconfig(&self) -> PathBuf {
        let token = self.kubectl(&[
            "create",
            "token",
            SERVICE_ACCOUNT,
            "-n",
            SYSTEM_NAMESPACE,
            "--duration=2h",
        ]);
        let path = self.run_dir.join("operator.kubeconfig");
        let ca = self.run_dir.join("pki/ca.crt");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
                 certificate-authority: {}\nusers:\n- name: operator\n  user:\n    token: {}\ncontexts:\n- name: \
                 operator\n  context: {{cluster: test, user: operator, namespace: {SYSTEM_NAMESPACE}}}\n\
                 current-context: operator\n",
                self.server,
                ca.display(),
                token.trim()
            ),
        )
        .unwrap();
        path
    }

    fn pid(&self, component: &str) -> i32 {
        std::fs::read_to_string(self.run_dir.join(format!("{component}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Kills the API server (an abrupt outage: connections refused, watches broken) and
    /// returns how to start it again: its command line.
    pub fn kill_apiserver(&self) -> Vec<String> {
        let pid = self.pid("apiserver");
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        // SAFETY: a plain kill(2) of the API server this harness started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        for _ in 0..100 {
            if !Path::new(&format!("/proc/{pid}")).exists() || zombie(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        argv
    }

    /// Starts the API server again with the command line [`kill_apiserver`] returned; returns
    /// once it is ready.
    pub async fn restart_apiserver(&self, argv: &[String]) {
        // The killed server's port may stay taken a moment after its process is gone (the
        // restart then fails at once with "address already in use").
        let port: Option<u16> = argv
            .iter()
            .find_map(|arg| arg.strip_prefix("--secure-port="))
            .and_then(|port| port.parse().ok());
        if let Some(port) = port {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "port {port} still taken after 30s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.run_dir.join("apiserver.log"))
            .unwrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        std::fs::write(self.run_dir.join("apiserver.pid"), child.id().to_string()).unwrap();
        // Reaped by stop-apiserver.sh's kill; the handle itself is not needed.
        std::mem::forget(child);
        let deadline = tokio::time::Instant::now() + wait();
        loop {
            let ready = self
                .admin
                .request_text(http::Request::get("/readyz").body(vec![]).unwrap())
                .await;
            if ready.is_ok_and(|body| body.trim() == "ok") {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the API server is ready again within {:?}",
                wait()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat.contains(") Z "))
}

impl Drop for ControlPlane {
    /// Stops it; its directory (etcd's data, the logs, the audit log: ~65 MB) is kept only
    /// when the test failed, to be read.
    fn drop(&mut self) {
        PLANES
            .lock()
            .unwrap()
            .retain(|kubeconfig| *kubeconfig != self.kubeconfig);
        let _ = Command::new(self.assets.join("stop-apiserver.sh"))
            .arg(&self.run_dir)
            .stdout(Stdio::null())
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}

async fn kube_config(path: &Path) -> Config {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/pgvs3-operator")
}

/// helm: `PGVS3_HELM`, else where CI caches it.
fn helm() -> PathBuf {
    std::env::var_os("PGVS3_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pgvs3-tools/helm"))
}

/// A child process killed (and reaped) when dropped; its output goes to `log`.
pub struct Process {
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(command: &mut Command, log: PathBuf) -> Process {
    let file = std::fs::File::create(&log).unwrap();
    let child = command
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|err| panic!("{command:?}: {err}"));
    Process { child, log }
}

/// One `pgvs3-operator` process, as the chart's ServiceAccount.
pub struct Operator {
    pub process: Process,
}

impl Operator {
    /// `watch_namespace`: the one namespace it reconciles; `lease`: its Lease's name (in
    /// `pgvs3-system`) and duration in seconds.
    pub fn start(plane: &ControlPlane, identity: &str, watch_namespace: Option<&str>, lease: (&str, u64)) -> Operator {
        Operator::start_with(plane, identity, watch_namespace, lease, &[])
    }

    /// As [`Operator::start`], with settings of its own (`PGVS3_OPERATOR_*` variables).
    pub fn start_with(
        plane: &ControlPlane,
        identity: &str,
        watch_namespace: Option<&str>,
        lease: (&str, u64),
        settings: &[(&str, &str)],
    ) -> Operator {
        let kubeconfig = plane.service_account_kubeconfig();
        let mut command = Command::new(env!("CARGO_BIN_EXE_pgvs3-operator"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", identity)
            .env("PGVS3_OPERATOR_LOG", "info,pgvs3_operator=debug")
            // The port its bind chooses, read back from its log (`health_port`): one the test
            // chose by binding and closing a socket could be taken before the operator binds it.
            .env("PGVS3_OPERATOR_METRICS_ADDR", "127.0.0.1:0")
            .env("PGVS3_OPERATOR_LEASE_NAMESPACE", SYSTEM_NAMESPACE)
            .env("PGVS3_OPERATOR_LEASE_NAME", lease.0)
            .env("PGVS3_OPERATOR_LEASE_DURATION", lease.1.to_string());
        if let Some(namespace) = watch_namespace {
            command.env("PGVS3_OPERATOR_WATCH_NAMESPACE", namespace);
        }
        command.envs(settings.iter().copied());
        let log = plane.run_dir.join(format!("operator-{identity}.log"));
        Operator {
            process: spawn(command.arg("run"), log),
        }
    }

    /// The port of its health and metrics endpoints, once its log says it is bound.
    fn health_port(&self) -> Option<u16> {
        let log = self.process.log_text();
        let (_, rest) = log.split_once("health and metrics endpoints on http://")?;
        let (addr, _) = rest.split_once('/')?;
        Some(addr.parse::<std::net::SocketAddr>().ok()?.port())
    }

    /// The body of /readyz, or `None` while the process does not answer.
    pub async fn readiness(&self) -> Option<String> {
        http_get(self.health_port()?, "/readyz").await
    }
}

/// A plain HTTP/1.1 GET on 127.0.0.1; the body, or `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response.split_once("\r\n\r\n")?.1.to_string())
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
}

/// A `pgvs3` gateway process on `database_url` with `master_key`; its S3 endpoint.
pub struct Gateway {
    /// Held only to be killed with the `Gateway`.
    _process: Process,
    pub s3_port: u16,
}

impl Gateway {
    pub async fn start(run_dir: &Path, name: &str, database_url: &str, master_key: &str) -> Gateway {
        // The gateway crate's binary, built beside this test's (`cargo build -p pgvs3-gateway`).
        let binary = std::env::var_os("PGVS3_GATEWAY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let test = std::env::current_exe().unwrap();
                test.parent().unwrap().parent().unwrap().join("pgvs3")
            });
        assert!(
            binary.exists(),
            "{} (cargo build -p pgvs3-gateway --bin pgvs3)",
            binary.display()
        );
        let mut command = Command::new(binary);
        command.args([
            "serve",
            "--database-url",
            database_url,
            // `=`: a generated key may begin with `-` (URL-safe base64), which clap
            // would otherwise read as a flag.
            &format!("--master-key={master_key}"),
            // Ports the gateway's own binds choose, read back from the line it prints once every
            // listener is bound. A port the test chose by binding and closing a socket could be
            // taken by anything else before the gateway bound it, after its migrations: a CI run
            // (ci-40f) lost its admin port so ("Address already in use"), and the gateway exited.
            "--s3-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--ojs-addr",
            "off",
            "--resp-addr",
            "off",
            "--root-access-key",
            ROOT_ACCESS_KEY,
            "--root-secret-key",
            ROOT_SECRET_KEY,
            "--pool-size",
            "4",
            "--maintenance-interval",
            "1h",
        ]);
        let mut process = spawn(&mut command, run_dir.join(format!("gateway-{name}.log")));
        let deadline = tokio::time::Instant::now() + wait();
        let s3_port = loop {
            if let Some(port) = s3_endpoint_port(&process.log_text()) {
                break port;
            }
            // A gateway that exited will never listen: said at once, with why, rather than
            // after the whole wait (ci-40f waited 180 s for one that had exited in its first
            // second, which read as a slow start).
            if let Some(status) = process.child.try_wait().unwrap() {
                panic!(
                    "gateway {name} exited ({status}) before listening: {}",
                    process.log_text()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "gateway listens within {:?}: {}",
                wait(),
                process.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        Gateway {
            _process: process,
            s3_port,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    pub fn client(&self, access_key: &str, secret_key: &str) -> aws_sdk_s3::Client {
        use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(self.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(access_key, secret_key, None, None, "test"))
            .force_path_style(true)
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }
}

/// The port of the S3 endpoint a gateway's output announces (`pgvs3 S3 endpoint:
/// http://127.0.0.1:PORT  (metrics: …)`, printed once every listener is bound), if it has yet.
/// Only an address followed by more of the line counts: one still being written would read as
/// a prefix of its port.
fn s3_endpoint_port(log: &str) -> Option<u16> {
    let (_, rest) = log.split_once("pgvs3 S3 endpoint: http://")?;
    let (addr, _) = rest.split_once(char::is_whitespace)?;
    Some(addr.parse::<std::net::SocketAddr>().ok()?.port())
}

#[test]
fn the_s3_port_is_read_from_the_gateways_ready_line() {
    let log = "2026-12-06T16:09:47.967769Z  INFO pgvs3_gateway::serve: pgvs3 gateway ready s3_addr=127.0.0.1:41325\n\
               pgvs3 S3 endpoint: http://127.0.0.1:41325  (metrics: http://127.0.0.1:39025/metrics)\n";
    assert_eq!(s3_endpoint_port(log), Some(41325));
    assert_eq!(s3_endpoint_port("applied migration version=1\n"), None);
    assert_eq!(
        s3_endpoint_port("pgvs3 S3 endpoint: http://127.0.0.1:4"),
        None,
        "still being written"
    );
}

pub const ROOT_ACCESS_KEY: &str = "PGVS3TESTROOTKEY0001";
pub const ROOT_SECRET_KEY: &str = "test-root-secret-key-0123456789";

/// How long the tier waits for what the operator or the cluster does: `PGVS3_TIER_WAIT` seconds,
/// 180 by default. A reconcile takes well under a second on a quiet machine, but the tier runs
/// on two cores shared with builds: at load average 25-28 the minute it used to allow was not
/// always enough (session 31: 2 runs of 4 failed; at load 10 they passed).
pub fn wait() -> Duration {
    static WAIT: OnceLock<Duration> = OnceLock::new();
    *WAIT.get_or_init(|| {
        let seconds = std::env::var("PGVS3_TIER_WAIT").map_or(180, |value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("PGVS3_TIER_WAIT={value:?} is not a number of seconds"))
        });
        Duration::from_secs(seconds)
    })
}

/// How long one scenario may take in all: a few of its waits.
pub fn scenario_bound() -> Duration {
    wait() * 4
}

/// Polls `check` every 100 ms until it yields a value, for at most `limit`; a wait that fails
/// says what the control planes held then ([`observed`]).
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what} within {limit:?}; last seen:\n{}", observed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The kubeconfigs of this process's running control planes, for [`observed`].
static PLANES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// What every running control plane holds now: each pgvs3 resource's conditions and the latest
/// Events (the operator's say why it waits or fails).
fn observed() -> String {
    let planes = PLANES.lock().unwrap().clone();
    let mut text = String::new();
    for kubeconfig in planes {
        let kubectl = |args: &[&str]| match Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .arg("--request-timeout=10s")
            .args(args)
            .output()
        {
            Ok(output) => format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(err) => format!("kubectl: {err}\n"),
        };
        let conditions = "jsonpath={range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name} generation \
                          {.metadata.generation} deletionTimestamp={.metadata.deletionTimestamp}\
                          {range .status.conditions[*]}\n    {.type}={.status} {.reason}: {.message}{end}\n{end}";
        let events = kubectl(&["get", "events", "-A", "--sort-by=.metadata.creationTimestamp"]);
        let latest: Vec<&str> = events.lines().collect();
        text.push_str(&format!(
            "--- control plane {}\n{}--- its latest Events\n{}\n",
            kubeconfig.display(),
            kubectl(&["get", "pgvs3", "-A", "-o", conditions]),
            latest[latest.len().saturating_sub(40)..].join("\n")
        ));
    }
    text
}

pub fn secret_text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

/// Where the test database is: socket directory, port, database, user.
/// A listener that accepts every connection and holds it open without a byte in reply: what a
/// frozen database host (its kernel still completes the handshake) or `nc -lk 5432` looks like.
pub async fn black_hole() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            sockets.push(socket);
        }
    });
    (port, held)
}

pub fn database_parts(url: &str) -> (String, u16, String, String) {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
    };
    (
        host,
        config.get_ports()[0],
        config.get_dbname().unwrap().to_string(),
        config.get_user().unwrap().to_string(),
    )
}

pub async fn apply<K>(api: &Api<K>, name: &str, object: serde_json::Value) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply("pgvs3-tests").force(), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|err| panic!("apply {name}: {err}"))
}

/// A Secret `login` and a Primary pool `pool` on the database `url` in `ns`.
pub async fn primary_pool(client: &Client, ns: &str, pool: &str, url: &str) -> GatewayPool {
    let (host, port, database, user) = database_parts(url);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        "login",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login"},
               "stringData": {"username": user, "password": "unused-with-trust-auth"}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    apply(
        &pools,
        pool,
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": pool},
               "spec": {"role": "Primary", "replicas": 2,
                        "postgres": {"host": host, "port": port, "database": database, "secretRef": "login",
                                     // The test's PostgreSQL speaks no TLS (and trusts).
                                     "sendPasswordToUnverifiedServer": true}}}),
    )
    .await
}

/// A Primary pool `objects` in `ns` on a fresh database, Ready, and a gateway process on that
/// database with the pool's master key (its migrations give the catalog its layout): the
/// database's URL and the gateway.
pub async fn served_pool(plane: &ControlPlane, client: &Client, ns: &str) -> (String, Gateway) {
    let url = pgvs3_testkit::fresh_database().await;
    primary_pool(client, ns, "objects", &url).await;
    gateways_ready(client, ns, "objects").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let master = eventually(wait(), "the pool's master key Secret", || async {
        secrets.get_opt("objects-pgvs3-master-key").await.unwrap()
    })
    .await;
    let gateway = Gateway::start(&plane.run_dir, ns, &url, &secret_text(&master, "masterKey")).await;
    (url, gateway)
}

/// Reports `pool`'s pods Ready as a kubelet would (no kubelet runs in this tier: the gateways
/// are processes of the test), until the pool itself is Ready: its Buckets are Ready only then.
/// Pods the ReplicaSet creates later are reported too, on the next look.
pub async fn gateways_ready(client: &Client, ns: &str, pool: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    let selector = ListParams::default().labels(&format!("app.kubernetes.io/instance={pool}"));
    eventually(wait(), "the pool Ready, its pods reported Ready", || async {
        let ready = json!({"status": {"phase": "Running", "conditions": [{
            "type": "Ready", "status": "True",
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap().to_string(),
        }]}});
        for pod in pods.list(&selector).await.ok()? {
            let reported = pod.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Ready" && c.status == "True");
            if !reported {
                let name = pod.metadata.name.unwrap_or_default();
                pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready)).await.ok()?;
            }
        }
        let conditions = pools.get(pool).await.ok()?.status?.conditions;
        conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
}

/// Puts an object with the credentials of `secret`, retrying while the gateway has not yet
/// learnt the new key (by notification); the last refusal when it never succeeds.
pub async fn put(gateway: &Gateway, secret: &Secret, key: &str) -> Result<(), String> {
    let client = gateway.client(
        &secret_text(secret, "AWS_ACCESS_KEY_ID"),
        &secret_text(secret, "AWS_SECRET_ACCESS_KEY"),
    );
    let bucket = secret_text(secret, "BUCKET_NAME");
    let mut last = String::new();
    for _ in 0..50 {
        match client
            .put_object()
            .bucket(&bucket)
            .key(key)
            .body(ByteStream::from_static(b"hello"))
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) => last = format!("{:?}", err.into_service_error()),
        }
        if last.contains("AccessDenied") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last)
}
