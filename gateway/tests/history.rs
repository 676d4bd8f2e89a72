//! The history checker: seeded random workloads of concurrent real clients (aws-sdk-s3,
//! redis-rs, OJS over HTTP) against a gateway, every invocation and answer recorded, and each
//! object's history checked against its sequential model (docs/history-checker.md). A failure
//! prints the seed and a minimal failing history; `PGVS3_HISTORY_SEED` replays it.

use pgvs3_testkit as common;

mod history {
    mod cases;
    pub mod checker;
    pub mod gateway_kill;
    pub mod ojs;
    pub mod recorder;
    pub mod resp;
    pub mod s3;
    pub mod s3_bodies;
    pub mod s3_lifecycle;
    pub mod s3_reads;
    pub mod schedule;
}

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::types::BucketVersioningStatus;
use common::TestGateway;
use common::faults::{ScratchDir, embedded_gateway, kill9, postmaster_pid};
use history::checker::{Model, Verdict, check, minimise, render};
use history::recorder::{Answer, Op};
use history::s3::Mix;
use history::schedule::Bounds;
use rand::Rng;

/// Concurrent clients per workload: more only queue up on a two-core machine.
const CLIENTS: usize = 4;
/// Search steps per key history before the checker gives up on it (undecided, not failed).
const BUDGET: u64 = 200_000;

/// The gateway a workload runs against: in-process on the shared test cluster, or — with
/// faults — on an embedded PostgreSQL of its own that [`Faults`] kills.
struct Target {
    gateway: TestGateway,
    faults: Option<Faults>,
}

impl Target {
    async fn start(bounds: &Bounds, name: &str, extra: &[&str]) -> Target {
        if !bounds.faults {
            let mut args = vec!["--resp-addr", "127.0.0.1:0"];
            args.extend_from_slice(extra);
            let gateway = TestGateway::with_args(common::fresh_database().await, &args).await;
            return Target { gateway, faults: None };
        }
        let dir = ScratchDir::new(&format!("history-{name}"));
        let mut args = vec!["--pg-probe-interval", "200ms"];
        args.extend_from_slice(extra);
        let gateway = embedded_gateway(&dir.0, &args).await;
        let faults = Faults::start(&gateway, dir, bounds, name);
        Target {
            gateway,
            faults: Some(faults),
        }
    }

    /// Stops injecting faults; how many PostgreSQL kills there were.
    async fn calm(&mut self) -> usize {
        match self.faults.take() {
            None => 0,
            Some(faults) => faults.stop(&self.gateway).await,
        }
    }
}

/// PostgreSQL under the gateway killed -9 every few seconds (the gateway restarts it).
struct Faults {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<ScratchDir>,
}

impl Faults {
    fn start(gateway: &TestGateway, dir: ScratchDir, bounds: &Bounds, name: &str) -> Faults {
        let (stop, kills) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let mut rng = bounds.rng(&format!("faults-{name}"), 0);
        let admin = gateway.gateway.admin_addr;
        let (stopped, killed) = (stop.clone(), kills.clone());
        let task = tokio::spawn(async move {
            while !stopped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(2000..6000))).await;
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                kill9(postmaster_pid(&dir.0));
                killed.fetch_add(1, Ordering::Relaxed);
                wait_ready(admin).await;
            }
            dir
        });
        Faults { stop, kills, task }
    }

    async fn stop(self, gateway: &TestGateway) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        // The scratch dir lives until the gateway on it is gone.
        std::mem::forget(self.task.await.unwrap());
        wait_ready(gateway.gateway.admin_addr).await;
        self.kills.load(Ordering::Relaxed)
    }
}

async fn wait_ready(admin: std::net::SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let host = admin.to_string();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            common::raw::send(admin, "GET", "/readyz", &[("host".into(), host)], b""),
        )
        .await;
        if matches!(answer, Ok(ref r) if r.status == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "the gateway is ready again within a minute");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a run did, printed whether it passed or not.
fn summary<I: Debug, O: Debug>(
    name: &str,
    bounds: &Bounds,
    ops: &[Op<I, O>],
    objects: usize,
    kills: usize,
    started: Instant,
) -> String {
    let lost = ops.iter().filter(|op| matches!(op.answer, Answer::Lost(_))).count();
    let clients = ops
        .iter()
        .map(|op| op.client)
        .collect::<std::collections::HashSet<_>>()
        .len();
    // What the operations were and how they were answered, by kind: that the workload did
    // what its case is about (a refused delete, a lifecycle pass) shows here.
    let word = |text: String| text.split([' ', '(', '{']).next().unwrap_or_default().to_owned();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for op in ops {
        let answer = op
            .output()
            .map_or_else(|| "?".to_owned(), |out| word(format!("{out:?}")));
        *kinds
            .entry(format!("{} => {answer}", word(format!("{:?}", op.input))))
            .or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    format!(
        "history {name}: seed {} ({} s, {clients} clients, faults {}): {} operations ({lost} without an answer) on {objects} objects, {kills} PostgreSQL kills, {:.1} s\n\
         by kind: {}\n\
         replay: PGVS3_HISTORY_SEED={} cargo test -p pgvs3-gateway --test history -- {name}",
        bounds.seed,
        bounds.seconds,
        bounds.faults,
        ops.len(),
        started.elapsed().as_secs_f64(),
        kinds.join(", "),
        bounds.seed,
    )
}

/// How many operations a failure shows around its cut, reads included.
const CONTEXT_OPS: usize = 80;

/// Checks each key's history against `initial`; a report of each failing key with a minimal
/// failing history.
fn check_keys<M: Model + Debug>(
    initial: M,
    ops: &[Op<M::Input, M::Output>],
    key: impl Fn(&M::Input) -> String,
) -> (usize, usize, Vec<String>) {
    let mut by_key: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for op in ops {
        by_key.entry(key(&op.input)).or_default().push(op.clone());
    }
    let (mut undecided, mut failures) = (0, Vec::new());
    for (name, history) in &by_key {
        match check(&initial, history, BUDGET) {
            Verdict::Linearizable => {}
            Verdict::Undecided => undecided += 1,
            Verdict::Violation => {
                let minimal = minimise(&initial, history, BUDGET / 10, Instant::now() + Duration::from_secs(30));
                let start: Vec<String> = minimal.start.iter().map(|state| format!("  {state:?}")).collect();
                // Everything from shortly before the cut to the failure, reads included: what
                // the short history left out may show how the server came to answer as it did.
                let failed_by = minimal.ops.iter().map(|op| op.end()).max().unwrap_or(0);
                let around: Vec<_> = history[minimal.skipped.saturating_sub(CONTEXT_OPS / 4)..]
                    .iter()
                    .filter(|op| op.call <= failed_by)
                    .take(CONTEXT_OPS)
                    .cloned()
                    .collect();
                failures.push(format!(
                    "key {name}: its {} operations are not linearizable. After the first {} (which may have left it in any of these states)\n{}\nthese fail (times in ms since the run began; reads that do not matter left out):\n{}earlier operations on the values and versions they name:\n{}every operation from {} before the cut to the failure (at most {CONTEXT_OPS}):\n{}",
                    history.len(),
                    minimal.skipped,
                    start.join("\n"),
                    render(&minimal.ops),
                    render(&origins(&history[..minimal.skipped], &minimal.ops)),
                    minimal.skipped.min(CONTEXT_OPS / 4),
                    render(&around),
                ));
            }
        }
    }
    (by_key.len(), undecided, failures)
}

/// The earlier operations that name a value (`c<client>.<n>`, as every workload names what it
/// writes) or a version id that `shown` names: where a resurrected value came from, and how
/// it was deleted.
fn origins<I: Debug + Clone, O: Debug + Clone>(earlier: &[Op<I, O>], shown: &[Op<I, O>]) -> Vec<Op<I, O>> {
    let words = |text: String| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .filter(|word| {
                let value =
                    word.starts_with('c') && word.contains('.') && word[1..2].chars().all(|c| c.is_ascii_digit());
                let version = word.len() == 16 && word.chars().all(|c| c.is_ascii_hexdigit());
                value || version
            })
            .map(str::to_owned)
            .collect()
    };
    let named: Vec<String> = shown
        .iter()
        .flat_map(|op| words(format!("{:?} {:?}", op.input, op.output())))
        .collect();
    earlier
        .iter()
        .filter(|op| words(format!("{:?}", op.input)).iter().any(|word| named.contains(word)))
        .cloned()
        .collect()
}

fn verdict(summary: String, undecided: usize, failures: Vec<String>) {
    println!(
        "{summary}; {undecided} key histories undecided within the search budget; {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{summary}\n{}", failures.join("\n"));
}

/// Versioned keys under concurrent writes, reads, copies and deletes (by version or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_version_histories_are_linearizable() {
    VersionsRun::start("s3_version_histories", 15, false)
        .await
        .run(Mix::Plain)
        .await;
}

/// The same with writes and deletes conditional on the current version (If-None-Match,
/// If-Match) among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_conditional_writes_are_linearizable() {
    VersionsRun::start("s3_conditional_writes", 15, false)
        .await
        .run(Mix::Conditional)
        .await;
}

/// A bucket with object lock: versions under GOVERNANCE or COMPLIANCE retention or a legal
/// hold, holds released, deletes of versions (bypassing GOVERNANCE, by a key allowed to and by
/// one denied it) among the writes: a refused delete removes nothing, an allowed one removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_object_lock_histories_are_linearizable() {
    let run = VersionsRun::start("s3_object_lock", 8, true).await;
    let denied = run.owner.clone();
    let policy = r#"{"Version":"2012-10-17","Statement":[
      {"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::hist","arn:aws:s3:::hist/*"]},
      {"Effect":"Deny","Action":"s3:BypassGovernanceRetention","Resource":"arn:aws:s3:::hist/*"}]}"#;
    let catalog = run.target.gateway.gateway.store.catalog();
    assert!(catalog.set_key_policy(OWNER_KEY, Some(policy)).await.unwrap());
    run.run(Mix::Locked { denied }).await;
}

/// A bucket whose keys have versions from while it was Enabled, then Suspended: writes replace
/// the null version, deletes make null delete markers, older versions stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_suspended_version_histories_are_linearizable() {
    VersionsRun::start("s3_suspended_versions", 8, false)
        .await
        .run(Mix::Suspended)
        .await;
}

/// Lifecycle passes (expire after a day) among the writes, with keys aged meanwhile: a pass
/// expires a current version only if it is old enough when it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_lifecycle_expiry_histories_are_linearizable() {
    let run = VersionsRun::start("s3_lifecycle_expiry", 8, false).await;
    let gateway = &run.target.gateway;
    let lifecycle = history::s3_lifecycle::Lifecycle::on(gateway, &gateway.client, "hist").await;
    run.run(Mix::Lifecycle(lifecycle)).await;
}

/// The key that owns the versioned bucket of a run (the run's root key may do anything).
const OWNER_KEY: &str = "HISTORYOWNERKEY";

/// A run of the versioned-bucket workload on the bucket `hist`, made (by a key of its own)
/// versioned, with object lock or not, before the mix of operations is set up.
struct VersionsRun {
    name: &'static str,
    bounds: Bounds,
    started: Instant,
    target: Target,
    /// A client of the bucket's owner.
    owner: aws_sdk_s3::Client,
}

impl VersionsRun {
    async fn start(name: &'static str, seconds: u64, object_lock: bool) -> VersionsRun {
        let bounds = Bounds::from_env(seconds);
        let started = Instant::now();
        let target = Target::start(&bounds, name, &[]).await;
        let owner = common::s3::add_key(&target.gateway, OWNER_KEY).await;
        let client = &target.gateway.client;
        owner
            .create_bucket()
            .bucket("hist")
            .object_lock_enabled_for_bucket(object_lock)
            .send()
            .await
            .unwrap();
        common::s3::set_versioning(client, "hist", BucketVersioningStatus::Enabled).await;
        VersionsRun {
            name,
            bounds,
            started,
            target,
            owner,
        }
    }

    async fn run(mut self, mix: Mix) {
        // A lifecycle pass expires what it found due one key after another: the more keys, the
        // longer the last waits after it was picked.
        let keys: &[&str] = match mix {
            Mix::Lifecycle(_) => &["k0", "k1", "k2", "k3", "k4", "k5"],
            _ => &["k0", "k1"],
        };
        let client = &self.target.gateway.client;
        let ops = history::s3::run_versions(client, "hist", keys, mix, CLIENTS, &self.bounds).await;
        let kills = self.target.calm().await;
        let initial = history::s3::Versions::default();
        let (keys, undecided, failures) = check_keys(initial, &ops, |call| call.key.clone());
        verdict(
            summary(self.name, &self.bounds, &ops, keys, kills, self.started),
            undecided,
            failures,
        );
    }
}

/// Many clients reading small objects (the body in the object's row: one statement per read)
/// while others overwrite and delete them: each read must see, whole, a body that was current
/// at some instant of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_small_reads_under_many_clients_are_linearizable() {
    let bounds = Bounds::from_env(10);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "s3_small_reads", &[]).await;
    let client = &target.gateway.client;
    client.create_bucket().bucket("reads").send().await.unwrap();
    let keys = ["k0", "k1", "k2"];
    let ops = history::s3_reads::run(client, "reads", &keys, 4 * CLIENTS, &bounds).await;
    let kills = target.calm().await;
    let (keys, undecided, failures) = check_keys(history::s3_reads::Object::default(), &ops, |call| call.key.clone());
    verdict(
        summary("s3_small_reads", &bounds, &ops, keys, kills, started),
        undecided,
        failures,
    );
}

/// Bodies larger than a batch (written a MiB at a time) PUT, deleted, copied in the database
/// (CopyObject, UploadPartCopy) while they change, and read: whole bodies a write made, or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_large_bodies_and_copies_are_linearizable() {
    let bounds = Bounds::from_env(8);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "s3_large_bodies", &[]).await;
    let client = &target.gateway.client;
    client.create_bucket().bucket("bodies").send().await.unwrap();
    let recorder = Arc::new(history::recorder::Recorder::new(Instant::now()));
    let shared = client.clone();
    history::s3_bodies::run(&recorder, move || shared.clone(), "bodies", CLIENTS, &bounds).await;
    history::s3_bodies::read_all(&recorder, CLIENTS, client, "bodies").await;
    let kills = target.calm().await;
    let ops = recorder.history();
    let (keys, undecided, failures) = check_keys(history::s3_bodies::Object::default(), &ops, |call| call.key.clone());
    verdict(
        summary("s3_large_bodies", &bounds, &ops, keys, kills, started),
        undecided,
        failures,
    );
}

/// The gateway binary killed -9 every second or two while clients write large bodies, delete
/// and copy them, and started again: after the last restart every key must hold what the
/// acknowledged writes left (an unacknowledged one may or may not have happened), and no read,
/// then or before, may see part of a body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_gateway_killed_mid_history_keeps_what_it_acknowledged() {
    let bounds = Bounds::from_env(8);
    let started = Instant::now();
    let gateway = history::gateway_kill::ChildGateway::start(common::fresh_database().await).await;
    let connect = gateway.connect();
    connect().create_bucket().bucket("bodies").send().await.unwrap();
    let killer = history::gateway_kill::Killer::start(gateway, &bounds);
    let recorder = Arc::new(history::recorder::Recorder::new(Instant::now()));
    history::s3_bodies::run(&recorder, connect.clone(), "bodies", CLIENTS, &bounds).await;
    let (_gateway, kills) = killer.stop().await;
    history::s3_bodies::read_all(&recorder, CLIENTS, &connect(), "bodies").await;
    let mut ops = recorder.history();
    let kills: Vec<u64> = kills.into_iter().map(|kill| recorder.at(kill)).collect();
    history::s3_bodies::excuse_cut_bodies(&mut ops, &kills);
    let kills = kills.len();
    let (keys, undecided, failures) = check_keys(history::s3_bodies::Object::default(), &ops, |call| call.key.clone());
    let summary = summary("s3_gateway_killed", &bounds, &ops, keys, 0, started);
    verdict(format!("{summary}; {kills} gateway kills"), undecided, failures);
}

/// Paginated listings (the ways clients resend start-after) while keys come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listings_hold_every_key_that_existed_throughout() {
    let bounds = Bounds::from_env(10);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "s3-listings", &[]).await;
    let client = &target.gateway.client;
    client.create_bucket().bucket("listing").send().await.unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("2026/{i:05}.csv")).collect();
    let ops = history::s3::run_listings(client, "listing", &keys, CLIENTS, &bounds).await;
    let kills = target.calm().await;
    let failures: Vec<String> = history::s3::check_listings(&ops)
        .iter()
        .take(3)
        .map(|minimal| {
            format!(
                "a listing that misses a key which existed throughout it, or holds one that never did:\n{}",
                render(minimal)
            )
        })
        .collect();
    verdict(
        summary("s3_listings_hold", &bounds, &ops, keys.len(), kills, started),
        0,
        failures,
    );
}

/// RESP keys of every type with TTLs that run out mid-run: the reaper is kept away
/// (`--maintenance-interval 1h`), so expiry must hold by itself, as clients see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_key_histories_are_linearizable() {
    let bounds = Bounds::from_env(20);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "resp", &["--maintenance-interval", "1h"]).await;
    let ops = history::resp::run(target.gateway.resp_addr(), CLIENTS, &bounds).await;
    let kills = target.calm().await;
    let (keys, undecided, failures) = check_keys(history::resp::Key::default(), &ops, |call| call.key.clone());
    verdict(
        summary("resp_key_histories", &bounds, &ops, keys, kills, started),
        undecided,
        failures,
    );
}

/// Two hot keys under many clients sharing a few connections: their pushes, pops and hash
/// writes arrive pipelined, share commits and run coalesced into one call per run of one kind
/// (issue 39), and each client's replies must still fit one order of the commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_hot_key_histories_are_linearizable() {
    let bounds = Bounds::from_env(20);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "resp_hot", &[]).await;
    let ops = history::resp::run_hot(target.gateway.resp_addr(), 4 * CLIENTS, &bounds).await;
    let kills = target.calm().await;
    let (keys, undecided, failures) = check_keys(history::resp::Key::default(), &ops, |call| call.key.clone());
    // How often the scripts that use their key on the way borrowed it, and runs started over.
    let mut counted = String::new();
    for metric in ["pgvs3_resp_borrowed_keys_total", "pgvs3_resp_speculation_misses_total"] {
        let value = target.gateway.metric(metric).await.unwrap_or(0.0);
        counted.push_str(&format!("; {metric} {value}"));
    }
    verdict(
        summary("resp_hot_key_histories", &bounds, &ops, keys, kills, started) + &counted,
        undecided,
        failures,
    );
}

/// Jobs claimed, acked, nacked and abandoned by workers with a short visibility timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ojs_claims_are_exactly_once() {
    let bounds = Bounds::from_env(10);
    let started = Instant::now();
    let mut target = Target::start(&bounds, "ojs", &[]).await;
    let ojs = common::ojs::Ojs::of(&target.gateway);
    let (ops, states) = history::ojs::run(&ojs, CLIENTS, &bounds).await;
    let kills = target.calm().await;
    let failures: Vec<String> = history::ojs::check(&ops, &states)
        .into_iter()
        .take(3)
        .map(|(problem, ops)| format!("{problem}:\n{}", render(&ops)))
        .collect();
    let summary = format!(
        "{}; final states {}",
        summary("ojs_claims_are", &bounds, &ops, states.len(), kills, started),
        history::ojs::describe(&states)
    );
    verdict(summary, 0, failures);
}
