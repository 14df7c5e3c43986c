//! The Redis backend against a plain `SET NX PX` + `SET` on the same
//! server, in one run: a real `redis-server` started here (AOF with
//! `appendfsync always`, as the backend's docs ask), `TASKS` tokio tasks
//! over one multiplexed connection each way, alternating slices so both
//! see the same machine.
//!
//! Rows: a fresh key claimed and completed (the backend: two scripts; the
//! baseline: `SET key placeholder NX PX lease` then `SET key answer PX
//! ttl`), and a replay (the backend: one claim script; the baseline: `SET
//! NX PX`, refused, then `GET`). 36-byte keys, 200-byte answers.
//!
//! Two more rows: the same replays through a near cache
//! (`idemkv::backend::near::NearCache`, room for every replayed key), each
//! answered from memory after the first slice's, against the replay row
//! without it; and fresh keys claimed and completed through a near cache
//! of their own (what keeping each completion costs), against the first
//! row.
//!
//! With `IDEMKV_BENCH_REPLICA=1` the server gets a replica (`--replicaof`,
//! same AOF settings) and one more row: claim+complete on a backend with
//! `wait_for_replicas(1, 1 s)` (a `WAIT 1` after each of the two
//! transitions), against the first row's backend without it.
//!
//! One more row splits the first row's cost: idemkv's commands sent bare
//! over a connection like the backend's (RESP3, a connection manager),
//! with none of idemkv's code — the fresh claim's transaction (`SET … NX
//! GET PX`, `PEXPIRETIME`, `TIME`, `ZADD` of the scope's index) and an
//! `EVALSHA` with the completion's keys and arguments of a script that
//! does nothing. Its client CPU beside the first row's is what idemkv's
//! own code adds; its server CPU beside the first row's is what the
//! completion script's body costs.
//!
//! Beside each row, the CPU time an operation took in the bench's own
//! process (the client: idemkv, the client library, tokio, the kernel's
//! side of its sockets) and in the server's, from `/proc/…/stat`: less
//! moved by other work on the machine than the rates are.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench redis                # 1 s slices, 5 rounds
//! IDEMKV_BENCH_SECONDS=0.1 cargo bench -p idemkv-bench --bench redis
//! IDEMKV_BENCH_REPLICA=1 cargo bench -p idemkv-bench --bench redis
//! ```

#[path = "../tests/common/redis.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod fixture;
#[path = "../tests/common/server_start.rs"]
mod server_start;

mod support;

use idemkv::backend::near::{NearCache, NearCacheConfig};
use idemkv::backend::redis::RedisBackend;
use idemkv::Config;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use support::tasks::{claim_complete, drive, key, Row, ANSWER, TASKS};

const ROUNDS: usize = 5;
const REPLAY_KEYS: u64 = 10_000;

async fn baseline_fresh(connection: &mut MultiplexedConnection, key: &str) {
    let claimed: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg("processing")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(connection)
        .await
        .expect("SET NX");
    if claimed.is_some() {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(&ANSWER[..])
            .arg("PX")
            .arg(3_600_000)
            .query_async(connection)
            .await
            .expect("SET");
    }
}

async fn baseline_replay(connection: &mut MultiplexedConnection, key: &str) {
    let claimed: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg("processing")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(connection)
        .await
        .expect("SET NX");
    assert!(claimed.is_none(), "replayed keys exist");
    let stored: Vec<u8> = redis::cmd("GET").arg(key).query_async(connection).await.expect("GET");
    assert_eq!(stored.len(), ANSWER.len());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `IDEMKV_BENCH_APPENDFSYNC=everysec` measures without an fsync per
    // write (what the backend's docs do not recommend).
    let appendfsync = std::env::var("IDEMKV_BENCH_APPENDFSYNC").unwrap_or_else(|_| "always".into());
    let server = fixture::RedisServer::start_with(dir.path(), fixture::free_port(), &["--appendfsync", &appendfsync]);
    let replica = std::env::var("IDEMKV_BENCH_REPLICA").is_ok_and(|value| value == "1").then(|| {
        fixture::RedisServer::start_replica_with(&dir.path().join("replica"), &server, &["--appendfsync", &appendfsync])
    });
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let waiting = backend.clone().wait_for_replicas(1, std::time::Duration::from_secs(1));
    let client = redis::Client::open(server.url()).expect("client");
    let connection = client.get_multiplexed_async_connection().await.expect("baseline connection");
    let (ours, theirs) = (backend.clone(), connection.clone());
    support::tasks::preload(REPLAY_KEYS, move |n| {
        let (ours, mut theirs) = (ours.clone(), theirs.clone());
        async move {
            claim_complete(&ours, &key("idemkv-replay", n)).await;
            baseline_fresh(&mut theirs, &key("plain-replay", n)).await;
        }
    })
    .await;
    let slice = support::seconds(1.0);
    let near = NearCache::new(backend.clone(), near_config());
    let server_pid = server_pid(&mut connection.clone()).await;
    let bare = Bare::connect(&server.url()).await;
    let peers = Peers { connection: &connection, bare: &bare };
    let rows = measure(&backend, replica.is_some().then_some(&waiting), &near, peers, (slice, &server_pid)).await;
    let commands = command_costs(&mut connection.clone()).await;
    let replicas = if replica.is_some() { ", one replica" } else { "" };
    println!(
        "Redis on loopback, AOF appendfsync {appendfsync}{replicas}, {TASKS} tasks, {ROUNDS} alternating slices of {slice} s"
    );
    let pairs = [(0, "claim+complete (baseline: SET NX PX + SET)"), (2, "replay (baseline: SET NX PX + GET)")];
    let (rows, cpu) = rows;
    support::tasks::print_pairs(&rows, &pairs, 44);
    if replica.is_some() {
        support::tasks::print_against(&rows[4], &rows[0], "claim+complete, WAIT 1 (against the first)", 44);
    }
    support::tasks::print_against(&rows[5], &rows[2], "replay, near cache (against the replay row)", 44);
    support::tasks::print_against(&rows[6], &rows[0], "claim+complete, near cache (against the first)", 44);
    support::tasks::print_against(&rows[7], &rows[0], "its commands sent bare (against the first)", 44);
    println!("near cache: {:?}", near.stats());
    println!("{commands}");
    println!("{}", cpu_costs(&rows, &cpu, &pairs));
    println!("CPU µs an operation of idemkv's commands sent bare, client / server: {}", per_operation(&rows, &cpu, 7));
}

/// CPU seconds of the client (this process) and of the server that a row
/// took, beside the row.
#[derive(Clone, Copy, Default)]
struct Cpu {
    client: f64,
    server: f64,
}

impl Cpu {
    fn now(server_pid: &str) -> Cpu {
        Cpu { client: support::process_cpu_seconds("self"), server: support::process_cpu_seconds(server_pid) }
    }
}

/// The server's process id (`INFO server`).
async fn server_pid(connection: &mut MultiplexedConnection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query_async(connection).await.expect("INFO");
    info.lines().find_map(|line| line.strip_prefix("process_id:")).unwrap_or("0").trim().to_string()
}

/// Runs one slice of a row (see [`drive`]) and adds the CPU time it took.
async fn drive_cpu<F, Fut>((row, cpu): (&mut Row, &mut Cpu), (slice, server_pid): (f64, &str), operation: F)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let before = Cpu::now(server_pid);
    drive(row, TASKS, slice, operation).await;
    let after = Cpu::now(server_pid);
    cpu.client += after.client - before.client;
    cpu.server += after.server - before.server;
}

/// The CPU µs an operation of each row of `pairs` (and its baseline) took,
/// client and server.
fn cpu_costs(rows: &[Row], cpu: &[Cpu], pairs: &[(usize, &str)]) -> String {
    let per_operation = |index: usize| per_operation(rows, cpu, index);
    let costs: Vec<String> = pairs
        .iter()
        .map(|&(pair, name)| {
            let name = name.split(" (").next().unwrap_or(name);
            format!("{name} {}, baseline {}", per_operation(pair), per_operation(pair + 1))
        })
        .collect();
    format!("CPU µs an operation, client / server: {}", costs.join("; "))
}

/// The CPU µs an operation of row `index` took, client / server.
fn per_operation(rows: &[Row], cpu: &[Cpu], index: usize) -> String {
    let (row, cpu) = (&rows[index], cpu[index]);
    let operations = support::as_f64(row.operations()).max(1.0);
    format!("{:.1} / {:.1}", cpu.client * 1e6 / operations, cpu.server * 1e6 / operations)
}

/// What the bare rows send on: the baseline's connection, and the
/// connection that sends idemkv's commands bare.
#[derive(Clone, Copy)]
struct Peers<'a> {
    connection: &'a MultiplexedConnection,
    bare: &'a Bare,
}

/// idemkv's commands sent bare (see the module docs): a connection like
/// the backend's and the script that does nothing.
#[derive(Clone)]
struct Bare {
    connection: ConnectionManager,
    script: String,
}

/// A digest-sized part of a name, as the backend's names have.
const BARE_TAG: &str = "0123456789abcdef0123456789abcdef";

impl Bare {
    async fn connect(url: &str) -> Bare {
        let client = redis::Client::open(format!("{url}?protocol=resp3")).expect("client");
        let mut connection = client.get_connection_manager().await.expect("connection manager");
        let script = redis::cmd("SCRIPT").arg("LOAD").arg("return 1").query_async(&mut connection).await.expect("load");
        Bare { connection, script }
    }

    /// A fresh key claimed and completed with idemkv's commands, bare.
    async fn claim_complete(mut self, key: String) {
        let key = key.as_str();
        let record = format!("bare:{{{key}}}:r");
        let index = |suffix: &str| format!("bare:scope:{BARE_TAG}:{suffix}");
        let mut claim = redis::pipe();
        claim.atomic();
        claim.cmd("SET").arg(&record).arg(&[b'p'; 120][..]).arg("NX").arg("GET").arg("PX").arg(7_230_000);
        claim.cmd("PEXPIRETIME").arg(&record).cmd("TIME").cmd("ZADD").arg(index("keys")).arg(0).arg(key);
        let answers: Vec<redis::Value> = claim.query_async(&mut self.connection).await.expect("claim");
        assert!(matches!(answers.first(), Some(redis::Value::Nil)), "a fresh key");
        let mut complete = redis::cmd("EVALSHA");
        complete.arg(&self.script).arg(4).arg(&record).arg(index("keys")).arg(index("ends")).arg(index("staged"));
        complete
            .arg("")
            .arg(key)
            .arg(1_733_000_000_000_000_u64)
            .arg("C")
            .arg(&ANSWER[..])
            .arg("PUBLISH")
            .arg(3_600_000);
        let done: i64 = complete.query_async(&mut self.connection).await.expect("complete");
        assert_eq!(done, 1);
    }
}

/// Room for every replayed key.
fn near_config() -> NearCacheConfig {
    let entries = usize::try_from(2 * REPLAY_KEYS).expect("a count");
    NearCacheConfig::new().entries_max(entries).bytes_max(64 << 20)
}

/// The rows, over `ROUNDS` alternating slices of `slice` s: the backend's
/// fresh keys, the baseline's, the backend's replays, the baseline's,
/// (with `waiting`, the backend waiting for a replica) its fresh keys, the
/// replays through `near`, fresh keys through a near cache of their own,
/// and idemkv's commands sent bare.
async fn measure(
    backend: &RedisBackend,
    waiting: Option<&RedisBackend>,
    near: &NearCache<RedisBackend>,
    Peers { connection, bare }: Peers<'_>,
    slice: (f64, &str),
) -> (Vec<Row>, Vec<Cpu>) {
    let mut rows: Vec<Row> = (0..8).map(|_| Row::new()).collect();
    let mut cpu = vec![Cpu::default(); 8];
    // Fresh keys through a cache of their own, so that their entries
    // take no room from the replayed keys'.
    let fresh = NearCache::new(near.backend().clone(), NearCacheConfig::new());
    let base = Arc::new(AtomicU64::new(0));
    for _ in 0..ROUNDS {
        let round = base.fetch_add(1 << 32, Ordering::Relaxed);
        let ours = backend.clone();
        drive_cpu((&mut rows[0], &mut cpu[0]), slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-fresh", round + n)).await }
        })
        .await;
        let theirs = connection.clone();
        drive_cpu((&mut rows[1], &mut cpu[1]), slice, move |n| {
            let mut theirs = theirs.clone();
            async move { baseline_fresh(&mut theirs, &key("plain-fresh", round + n)).await }
        })
        .await;
        let ours = backend.clone();
        drive_cpu((&mut rows[2], &mut cpu[2]), slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let theirs = connection.clone();
        drive_cpu((&mut rows[3], &mut cpu[3]), slice, move |n| {
            let mut theirs = theirs.clone();
            async move { baseline_replay(&mut theirs, &key("plain-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        if let Some(waiting) = waiting {
            let ours = waiting.clone();
            drive_cpu((&mut rows[4], &mut cpu[4]), slice, move |n| {
                let ours = ours.clone();
                async move { claim_complete(&ours, &key("idemkv-waited", round + n)).await }
            })
            .await;
        }
        let near = near.clone();
        drive_cpu((&mut rows[5], &mut cpu[5]), slice, move |n| {
            let near = near.clone();
            async move { claim_complete(&near, &key("idemkv-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let fresh = fresh.clone();
        drive_cpu((&mut rows[6], &mut cpu[6]), slice, move |n| {
            let fresh = fresh.clone();
            async move { claim_complete(&fresh, &key("idemkv-near-fresh", round + n)).await }
        })
        .await;
        let sent_bare = bare.clone();
        drive_cpu((&mut rows[7], &mut cpu[7]), slice, move |n| {
            sent_bare.clone().claim_complete(key("bare-fresh", round + n))
        })
        .await;
    }
    (rows, cpu)
}

/// The server's time per call of each command the rows sent (`INFO
/// commandstats`): the scripts' cost beside the bare commands' (a
/// script's own commands are counted too).
async fn command_costs(connection: &mut MultiplexedConnection) -> String {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(connection).await.expect("INFO");
    let costs: Vec<String> = info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |wanted: &str| {
                stats.split(',').find_map(|pair| pair.strip_prefix(wanted)?.strip_prefix('=')).unwrap_or("?")
            };
            // Every command but the bench's and the connections' own.
            let own = ["info", "config", "client", "hello", "ping", "script", "select"].contains(&name);
            (!own).then(|| format!("{name} {} calls, {} µs each", field("calls"), field("usec_per_call")))
        })
        .collect();
    format!("server time per command: {}", costs.join("; "))
}
