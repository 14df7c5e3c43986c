//! What the messaging feature costs, in one run:
//!
//! 1. **The inbox against the bare consumer loop.** One handler — an
//!    FNV-1a hash of the 128-byte payload added to a counter, CPU only —
//!    run once per message: bare (called straight from the loop), then
//!    through [`Inbox::handle`] on the embedded store (`Sync`, then
//!    `Buffered`, each on a fresh directory), then on a real Redis server
//!    (AOF `appendfsync always`; skipped with a note when `redis-server`
//!    is not on the PATH). One consumer takes one message at a time; the
//!    rows marked "16 in flight" have 16 consumer tasks at once. Each row
//!    delivers fresh ids first, then the same ids again: the duplicates,
//!    which must not run the handler (checked). Messages/s, µs a message,
//!    the ratio of its rate to the bare loop's, p50/p99 per message, and
//!    the store's log appends and fsyncs a message. A reference row runs
//!    the handler between the store's own `claim_async` and
//!    `complete_async` (Buffered), without the inbox.
//! 2. **The relay to Redis Streams.** Producers stage 4 messages a key
//!    through [`Outbox::run`] on a store with `Durability::Sync`; a
//!    [`Relay`] delivers them with [`RedisStreamSink`] (`XADD`) to the
//!    same `redis-server`; a reader task (`XREAD BLOCK`, a connection of
//!    its own) takes them off the stream. The lag of a message is from the
//!    moment its producer's `Outbox::run` returned to the moment the
//!    reader got it. Rows: the relay running (`Relay::run`, notified by
//!    [`Outbox::relay_to`]) with one producer that stages a key and waits
//!    until its messages are read (the lag of an idle pipeline); the relay
//!    running under a burst of 100 keys a second of `IDEMKV_BENCH_SECONDS`
//!    from 8 producers (its throughput; the lag then includes the
//!    backlog); and the same backlog staged first and drained by
//!    `Relay::sweep` alone.
//!
//! Every loop is bounded in count and in time: `IDEMKV_BENCH_SECONDS` a
//! case (default 3), and a deadline for the relay to drain what was staged
//! (20 times that, 5 s to 120 s).
//!
//! ```text
//! cargo bench -p idemkv-bench --bench messaging                      # up to 3 s a case
//! IDEMKV_BENCH_SECONDS=0.1 cargo bench -p idemkv-bench --bench messaging   # smoke run
//! IDEMKV_BENCH_APPENDFSYNC=everysec cargo bench -p idemkv-bench --bench messaging
//! ```

#[path = "../tests/common/redis.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod fixture;
#[path = "../tests/common/server_start.rs"]
mod server_start;

mod support;

use hdrhistogram::Histogram;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{ClaimOptions, IdempotencyBackend},
    messaging::{Delivery, Handled, Inbox, Outbox, OutboxMessage, Produced, RedisStreamSink, Relay, RelayConfig},
    Claim, ClaimRequest, Config, Durability, Fingerprint, Once, Store,
};
use redis::Value;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{as_f64, ratio};

/// Messages an inbox case delivers at most (its time bound usually ends it
/// first).
const INBOX_MESSAGES: usize = 100_000;
const PAYLOAD_BYTES: usize = 128;
/// Consumer tasks of the "in flight" rows.
const IN_FLIGHT: usize = 16;
/// Keys a relay case stages at most, and the messages of each.
const RELAY_KEYS: usize = 1000;
const PER_KEY: usize = 4;
const RELAY_PAYLOAD_BYTES: usize = 64;
/// Producer tasks of the burst and backlog rows.
const PRODUCERS: usize = 8;
/// Keys the burst and backlog rows stage a second of
/// `IDEMKV_BENCH_SECONDS`: about what one relay delivers a second here
/// (4 messages a key), so that each drains in about that time.
const BURST_KEYS_PER_SECOND: f64 = 100.0;
const SCOPE: &[u8] = b"orders";

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds")
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn count(n: usize) -> f64 {
    as_f64(u64::try_from(n).unwrap_or(u64::MAX))
}

fn micros(nanoseconds: u64) -> String {
    format!("{:.1?}", Duration::from_nanos(nanoseconds))
}

/// The inbox cases' messages: unique ids, 128-byte payloads.
struct Messages {
    ids: Vec<Vec<u8>>,
    payloads: Vec<Vec<u8>>,
}

impl Messages {
    fn new(count: usize) -> Self {
        let ids = (0..count).map(|n| format!("msg-{n:012}").into_bytes()).collect();
        let payloads = (0..count)
            .map(|n| {
                let mut payload = format!("{{\"order\":{n},\"amount\":10,\"note\":\"").into_bytes();
                payload.resize(PAYLOAD_BYTES - 2, b'x');
                payload.extend_from_slice(b"\"}");
                payload
            })
            .collect();
        Messages { ids, payloads }
    }
}

/// The handler's effect: runs counted, payloads hashed.
#[derive(Default)]
struct Effect {
    runs: AtomicU64,
    digest: AtomicU64,
}

/// The one handler every row runs: FNV-1a over the payload, into a counter.
fn handler(effect: &Effect, payload: &[u8]) -> Handled {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for byte in std::hint::black_box(payload) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    effect.digest.fetch_xor(hash, Ordering::Relaxed);
    effect.runs.fetch_add(1, Ordering::Relaxed);
    Handled::Processed
}

/// One delivery of message `n`.
trait Consume: Send + Sync + 'static {
    fn consume(&self, n: usize) -> impl Future<Output = ()> + Send;
}

/// The bare consumer loop: the handler called straight.
struct Bare {
    messages: Arc<Messages>,
    effect: Arc<Effect>,
}

impl Consume for Bare {
    async fn consume(&self, n: usize) {
        let handled = handler(&self.effect, &self.messages.payloads[n]);
        assert!(handled == Handled::Processed);
    }
}

/// The store's own claim and completion around the handler, without the
/// inbox (no lease keeper, no fingerprint of the payload, no copies): what
/// the inbox adds beyond the engine.
struct Claims {
    store: Store,
    messages: Arc<Messages>,
    effect: Arc<Effect>,
}

impl Consume for Claims {
    async fn consume(&self, n: usize) {
        let (id, payload) = (&self.messages.ids[n], &self.messages.payloads[n]);
        let request = ClaimRequest::new(id, Fingerprint::of(id)).scope(b"idemkv.inbox/bench");
        let Claim::Acquired(lease) = self.store.claim_async(&request).await.expect("claim") else {
            panic!("a fresh id is acquired")
        };
        let handled = handler(&self.effect, payload);
        assert!(handled == Handled::Processed);
        lease.complete_async(b"P").await.expect("complete");
    }
}

/// The handler through an inbox: a fresh pass must process, a second pass
/// over the same ids must find duplicates.
struct Consumer<B> {
    inbox: Inbox<B>,
    name: String,
    messages: Arc<Messages>,
    effect: Arc<Effect>,
    duplicates: bool,
}

impl<B: IdempotencyBackend> Consume for Consumer<B> {
    async fn consume(&self, n: usize) {
        let (id, payload, effect) = (&self.messages.ids[n], &self.messages.payloads[n], &*self.effect);
        let delivery = self
            .inbox
            .handle(&self.name, id, payload, |message| async move { handler(effect, &message.payload) })
            .await
            .expect("handle");
        let expected = if self.duplicates { Delivery::Duplicate } else { Delivery::Processed };
        assert_eq!(delivery, expected);
    }
}

/// Messages, wall time and per-message latencies of one row.
struct Tally {
    messages: u64,
    seconds: f64,
    latencies: Histogram<u64>,
    /// Records appended and fsyncs by the store during the row (the
    /// embedded store's rows only).
    writes: Option<Writes>,
}

/// A store's records written and fsyncs, as counted by `Store::stats`.
#[derive(Clone, Copy)]
struct Writes {
    records: u64,
    fsyncs: u64,
}

impl Writes {
    fn of(store: &Store) -> Writes {
        let stats = store.stats();
        Writes { records: stats.records_written, fsyncs: stats.fsyncs }
    }

    fn since(self, before: Writes) -> Writes {
        Writes { records: self.records - before.records, fsyncs: self.fsyncs - before.fsyncs }
    }

    /// Records and fsyncs a message, as printed.
    fn per(self, messages: usize) -> String {
        let messages = count(messages).max(1.0);
        format!("{:.2} / {:.2}", as_f64(self.records) / messages, as_f64(self.fsyncs) / messages)
    }
}

impl Tally {
    fn rate(&self) -> f64 {
        as_f64(self.messages) / self.seconds.max(f64::MIN_POSITIVE)
    }

    /// Wall time per message (with tasks in flight, not a latency).
    fn micros_per_message(&self) -> f64 {
        self.seconds * 1e6 / as_f64(self.messages.max(1))
    }

    fn percentile(&self, quantile: f64) -> u64 {
        self.latencies.value_at_quantile(quantile)
    }
}

/// Delivers messages `0..count` in order from `in_flight` tasks, until all
/// are delivered or `seconds` have passed; times each delivery.
async fn pass<C: Consume>(consumer: Arc<C>, count: usize, in_flight: usize, seconds: f64) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (consumer, next) = (Arc::clone(&consumer), Arc::clone(&next));
            tokio::spawn(async move {
                let mut latencies = histogram();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= count {
                        break;
                    }
                    let call = Instant::now();
                    consumer.consume(n).await;
                    let done = Instant::now();
                    latencies.saturating_record(nanos(done - call));
                    // Every index taken is delivered: the delivered ids
                    // are exactly 0..messages, for the duplicate pass.
                    if done >= deadline {
                        next.store(count, Ordering::Relaxed);
                        break;
                    }
                }
                latencies
            })
        })
        .collect();
    let mut all = histogram();
    for task in tasks {
        all.add(task.await.expect("consumer task")).expect("same bounds");
    }
    Tally { messages: all.len(), seconds: started.elapsed().as_secs_f64(), latencies: all, writes: None }
}

/// A fresh pass, then a duplicate pass over the ids it delivered; checks
/// that the handler ran once per fresh message and never for a duplicate.
async fn fresh_then_duplicates<B: IdempotencyBackend>(
    inbox: Inbox<B>,
    name: &str,
    messages: &Arc<Messages>,
    in_flight: usize,
    seconds: f64,
    store: Option<&Store>,
) -> (Tally, Tally) {
    let writes = || store.map(Writes::of);
    let effect = Arc::new(Effect::default());
    let consumer = |duplicates| Consumer {
        inbox: inbox.clone(),
        name: name.to_owned(),
        messages: Arc::clone(messages),
        effect: Arc::clone(&effect),
        duplicates,
    };
    let before = writes();
    let mut fresh = pass(Arc::new(consumer(false)), INBOX_MESSAGES, in_flight, seconds).await;
    let after = writes();
    fresh.writes = after.zip(before).map(|(after, before)| after.since(before));
    assert_eq!(effect.runs.load(Ordering::Relaxed), fresh.messages, "one run per fresh message");
    let count = usize::try_from(fresh.messages).expect("small");
    let mut duplicates = pass(Arc::new(consumer(true)), count, in_flight, seconds).await;
    duplicates.writes = writes().zip(after).map(|(now, before)| now.since(before));
    assert_eq!(effect.runs.load(Ordering::Relaxed), fresh.messages, "no run for a duplicate");
    (fresh, duplicates)
}

fn print_inbox_row(name: &str, durability: &str, row: &Tally, bare: &Tally) {
    let messages = usize::try_from(row.messages).expect("small");
    let writes = row.writes.map_or("-".into(), |writes| writes.per(messages));
    println!(
        "{name:<40} {durability:<12} {:>8} {:>10.0} {:>9.2} {:>9} {:>9} {:>9.2e} {:>9.2} {writes:>13}",
        row.messages,
        row.rate(),
        row.micros_per_message(),
        micros(row.percentile(0.5)),
        micros(row.percentile(0.99)),
        ratio(row.rate(), bare.rate()),
        row.micros_per_message() - bare.micros_per_message(),
    );
}

fn redis_available() -> bool {
    ["redis-server", "redis-cli"].iter().all(|program| {
        std::process::Command::new(program).arg("--version").output().is_ok_and(|output| output.status.success())
    })
}

fn redis_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|output| {
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.split_whitespace().find_map(|word| word.strip_prefix("v=").map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = support::seconds(3.0);
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let appendfsync = std::env::var("IDEMKV_BENCH_APPENDFSYNC").unwrap_or_else(|_| "always".into());
    let redis = redis_available();
    let started = Instant::now();
    println!("idemkv messaging bench: {cores} cores, a tokio runtime of 2 workers, up to {seconds} s a case");
    println!("reproduce: IDEMKV_BENCH_SECONDS={seconds} cargo bench -p idemkv-bench --bench messaging");
    if redis {
        println!("Redis {} on loopback, AOF appendfsync {appendfsync}", redis_version());
    }
    println!();

    let dir = tempfile::tempdir().expect("tempdir");
    let server = redis.then(|| {
        fixture::RedisServer::start_with(
            &dir.path().join("redis"),
            fixture::free_port(),
            &["--appendfsync", &appendfsync],
        )
    });

    inbox_rows(seconds, dir.path(), server.as_ref(), &appendfsync).await;
    println!();
    match &server {
        Some(server) => relay_rows(seconds, dir.path(), server, &appendfsync).await,
        None => println!("relay to Redis Streams: skipped, redis-server (or redis-cli) is not on the PATH"),
    }
    println!();
    println!("total wall time {:.1} s", started.elapsed().as_secs_f64());
}

async fn inbox_rows(seconds: f64, dir: &std::path::Path, server: Option<&fixture::RedisServer>, appendfsync: &str) {
    let messages = Arc::new(Messages::new(INBOX_MESSAGES));
    let effect = Arc::new(Effect::default());
    let bare = Bare { messages: Arc::clone(&messages), effect: Arc::clone(&effect) };
    let bare = pass(Arc::new(bare), INBOX_MESSAGES, 1, seconds).await;
    assert_eq!(effect.runs.load(Ordering::Relaxed), bare.messages);

    let mut rows: Vec<(String, String, Tally)> = Vec::new();
    let store_cases = [
        ("store", Durability::Sync, "Sync", 1),
        ("store", Durability::Buffered, "Buffered", 1),
        ("store", Durability::Sync, "Sync", IN_FLIGHT),
    ];
    for (n, (backend, durability, shown, in_flight)) in store_cases.into_iter().enumerate() {
        let path = dir.join(format!("inbox-{n}"));
        let store = Store::open(&path, Config::new().durability(durability)).expect("open");
        let inbox = Inbox::new(store.clone());
        let (fresh, duplicates) =
            fresh_then_duplicates(inbox, "bench", &messages, in_flight, seconds, Some(&store)).await;
        let flight = if in_flight > 1 { format!(", {in_flight} in flight") } else { String::new() };
        rows.push((format!("inbox, {backend}{flight}, fresh ids"), shown.into(), fresh));
        rows.push((format!("inbox, {backend}{flight}, duplicates"), shown.into(), duplicates));
    }
    let reference_store =
        Store::open(dir.join("claims"), Config::new().durability(Durability::Buffered)).expect("open");
    let before = Writes::of(&reference_store);
    let claims =
        Claims { store: reference_store.clone(), messages: Arc::clone(&messages), effect: Arc::new(Effect::default()) };
    let mut reference = pass(Arc::new(claims), INBOX_MESSAGES, 1, seconds).await;
    reference.writes = Some(Writes::of(&reference_store).since(before));
    // Beside the Buffered inbox rows.
    rows.insert(4, ("reference: store claim+complete, no inbox".into(), "Buffered".into(), reference));
    if let Some(server) = server {
        let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        let shown = format!("AOF {appendfsync}");
        for in_flight in [1, IN_FLIGHT] {
            let name = format!("bench-{in_flight}");
            let inbox = Inbox::new(backend.clone());
            let (fresh, duplicates) = fresh_then_duplicates(inbox, &name, &messages, in_flight, seconds, None).await;
            let flight = if in_flight > 1 { format!(", {in_flight} in flight") } else { String::new() };
            rows.push((format!("inbox, Redis{flight}, fresh ids"), shown.clone(), fresh));
            rows.push((format!("inbox, Redis{flight}, duplicates"), shown.clone(), duplicates));
        }
    }

    println!(
        "inbox: one handler (FNV-1a of a {PAYLOAD_BYTES}-byte payload + a counter), one consumer task unless said"
    );
    println!(
        "{:<40} {:<12} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13}",
        "row", "durability", "messages", "msg/s", "µs/msg", "p50", "p99", "×bare", "+µs/msg", "records/fsyncs"
    );
    print_inbox_row("bare loop (the handler alone)", "-", &bare, &bare);
    for (name, durability, row) in &rows {
        print_inbox_row(name, durability, row, &bare);
    }
    if server.is_none() {
        println!("inbox, Redis: skipped, redis-server (or redis-cli) is not on the PATH");
    }
    println!(
        "p50/p99: one delivery, call to answer; ×bare: msg/s over the bare loop's; +µs/msg: wall time a message \
         beyond the bare loop's; records/fsyncs: the store's log appends and fsyncs a message (Store::stats)"
    );
}

/// What a relay case's reader and producers share.
struct Progress {
    /// Where every time is measured from.
    base: Instant,
    /// Per key: when its producer's `Outbox::run` returned, in nanoseconds
    /// after `base`, plus one (0: not staged).
    returned: Vec<AtomicU64>,
    /// Messages read off the stream.
    read: AtomicUsize,
    /// Messages the reader waits for (`usize::MAX` while staging goes on,
    /// 0 to stop it).
    expected: AtomicUsize,
    /// Told at each read.
    notify: tokio::sync::Notify,
}

impl Progress {
    fn new() -> Arc<Progress> {
        Arc::new(Progress {
            base: Instant::now(),
            returned: (0..RELAY_KEYS).map(|_| AtomicU64::new(0)).collect(),
            read: AtomicUsize::new(0),
            expected: AtomicUsize::new(usize::MAX),
            notify: tokio::sync::Notify::new(),
        })
    }

    fn staged_keys(&self) -> usize {
        self.returned.iter().filter(|at| at.load(Ordering::Relaxed) > 0).count()
    }

    /// Waits until `target` messages are read or `deadline` passes.
    async fn wait_read(&self, target: usize, deadline: Instant) -> bool {
        loop {
            if self.read.load(Ordering::Acquire) >= target {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left, self.notify.notified()).await;
        }
    }
}

/// A relay message's payload: its key, its index, when it was staged
/// (nanoseconds after the case's base), padded.
fn relay_payload(key: usize, index: usize, staged_ns: u64) -> Vec<u8> {
    let mut payload = format!("{key} {index} {staged_ns} ").into_bytes();
    payload.resize(RELAY_PAYLOAD_BYTES, b'.');
    payload
}

fn parse_payload(payload: &[u8]) -> Option<(usize, usize)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// Stages key `key`'s messages through `outbox`, records when its run
/// returned.
async fn stage(outbox: &Outbox<Store>, progress: &Progress, stream: &str, key: usize) {
    let name = format!("order-{key:08}");
    let base = progress.base;
    let produce = |_attempt| async move {
        let staged = nanos(base.elapsed());
        let messages =
            (0..PER_KEY).map(|index| OutboxMessage::new(stream, relay_payload(key, index, staged))).collect();
        Produced::Complete { response: b"201".to_vec(), messages }
    };
    let once = outbox
        .run(SCOPE, name.as_bytes(), Fingerprint::of(name.as_bytes()), ClaimOptions::new(), produce)
        .await
        .expect("outbox run");
    progress.returned[key].store(nanos(base.elapsed()) + 1, Ordering::Release);
    assert!(matches!(once, Once::Ran(_)), "{once:?}");
}

/// The keys of a burst or backlog: `BURST_KEYS_PER_SECOND` a second, 8 to
/// `RELAY_KEYS`.
#[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a small positive count")]
fn burst_keys(seconds: f64) -> usize {
    ((seconds * BURST_KEYS_PER_SECOND).ceil().max(0.0) as usize).clamp(8, RELAY_KEYS)
}

/// Runs `PRODUCERS` tasks staging keys `0..keys` until all are staged or
/// `seconds` passed; the staging time.
async fn stage_burst(outbox: &Outbox<Store>, progress: &Arc<Progress>, stream: &str, keys: usize, seconds: f64) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (outbox, progress, next, stream) =
                (outbox.clone(), Arc::clone(progress), Arc::clone(&next), stream.to_owned());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let key = next.fetch_add(1, Ordering::Relaxed);
                    if key >= keys {
                        break;
                    }
                    stage(&outbox, &progress, &stream, key).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("producer");
    }
    started.elapsed().as_secs_f64()
}

/// What a reader took off its stream.
struct Reading {
    /// Per message (`key * PER_KEY + index`): when it was read, in
    /// nanoseconds after the base, plus one (0: never).
    read_at: Vec<u64>,
    duplicates: usize,
}

/// Reads `stream` from its start (`XREAD BLOCK`, a connection of its own)
/// until `progress.expected` messages are read.
async fn read_stream(client: redis::Client, stream: String, progress: Arc<Progress>) -> Reading {
    let mut connection = client.get_multiplexed_async_connection().await.expect("reader connection");
    let mut reading = Reading { read_at: vec![0; RELAY_KEYS * PER_KEY], duplicates: 0 };
    let mut last_id = String::from("0-0");
    // A cap of its own, should the bench's deadlines not stop it.
    let cap = Instant::now() + Duration::from_secs(600);
    while progress.read.load(Ordering::Acquire) < progress.expected.load(Ordering::Acquire) && Instant::now() < cap {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1024)
            .arg("BLOCK")
            .arg(20)
            .arg("STREAMS")
            .arg(&stream)
            .arg(&last_id)
            .query_async(&mut connection)
            .await
            .expect("XREAD");
        let at = nanos(progress.base.elapsed()) + 1;
        let entries = stream_entries(reply);
        for (id, payload) in &entries {
            let (key, index) = parse_payload(payload).expect("a bench payload");
            let slot = &mut reading.read_at[key * PER_KEY + index];
            if *slot == 0 {
                *slot = at;
                progress.read.fetch_add(1, Ordering::AcqRel);
            } else {
                reading.duplicates += 1;
            }
            last_id.clone_from(id);
        }
        if !entries.is_empty() {
            progress.notify.notify_one();
        }
    }
    reading
}

/// The entries of an `XREAD` reply (RESP2 arrays or RESP3 maps): each
/// entry's id and its `payload` field.
fn stream_entries(reply: Value) -> Vec<(String, Vec<u8>)> {
    fn text(value: &Value) -> Option<String> {
        match value {
            Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Value::SimpleString(text) => Some(text.clone()),
            _ => None,
        }
    }
    fn entry(value: Value) -> Option<(String, Vec<u8>)> {
        let Value::Array(parts) = value else { return None };
        let mut parts = parts.into_iter();
        let id = text(&parts.next()?)?;
        let fields: Vec<(Value, Value)> = match parts.next()? {
            Value::Array(flat) => {
                let mut flat = flat.into_iter();
                std::iter::from_fn(|| Some((flat.next()?, flat.next()?))).collect()
            }
            Value::Map(pairs) => pairs,
            _ => return None,
        };
        fields.into_iter().find_map(|(name, value)| match (text(&name).as_deref(), value) {
            (Some("payload"), Value::BulkString(payload)) => Some((id.clone(), payload)),
            _ => None,
        })
    }
    let lists: Vec<Value> = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|stream| match stream {
                Value::Array(parts) => parts.into_iter().nth(1),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, list)| list).collect(),
        _ => Vec::new(),
    };
    lists
        .into_iter()
        .flat_map(|list| match list {
            Value::Array(entries) => entries,
            _ => Vec::new(),
        })
        .filter_map(entry)
        .collect()
}

/// A relay case's figures.
struct RelayRow {
    name: String,
    keys: usize,
    staged: usize,
    delivered: usize,
    duplicates: usize,
    /// Messages a second from the first staging to the last read (or over
    /// the sweeps, for the backlog).
    rate: f64,
    /// The producers' staging rate (messages a second), where it is not
    /// the row's.
    staging_rate: Option<f64>,
    lags: Option<Histogram<u64>>,
    /// The store's records and fsyncs a message delivered.
    writes: String,
    /// Messages read before their producer's `run` had returned (their lag
    /// counted as 0).
    early: usize,
    note: String,
}

/// The lags of the messages read: read time less the time its key's run
/// returned, and the last read.
fn lags(progress: &Progress, reading: &Reading) -> (Histogram<u64>, usize, u64) {
    let mut lags = histogram();
    let (mut early, mut last) = (0, 0);
    for (key, returned) in progress.returned.iter().enumerate() {
        let returned = returned.load(Ordering::Acquire);
        if returned == 0 {
            continue;
        }
        for index in 0..PER_KEY {
            let read = reading.read_at[key * PER_KEY + index];
            if read == 0 {
                continue;
            }
            last = last.max(read - 1);
            if read < returned {
                early += 1;
            }
            lags.saturating_record(read.saturating_sub(returned).max(1));
        }
    }
    (lags, early, last)
}

/// How long the relay may take to deliver what was staged, after staging.
fn drain_deadline(seconds: f64) -> Duration {
    Duration::from_secs_f64((seconds * 20.0).clamp(5.0, 120.0))
}

struct Case {
    store: Arc<Store>,
    progress: Arc<Progress>,
    reader: tokio::task::JoinHandle<Reading>,
    sink: RedisStreamSink,
    stream: String,
    _dir: tempfile::TempDir,
}

async fn case(dir: &std::path::Path, server: &fixture::RedisServer, stream: &str) -> Case {
    let dir = tempfile::tempdir_in(dir).expect("tempdir");
    let store = Arc::new(Store::open(dir.path(), Config::new().durability(Durability::Sync)).expect("open"));
    let progress = Progress::new();
    let client = redis::Client::open(server.url()).expect("client");
    let reader = tokio::spawn(read_stream(client, stream.to_owned(), Arc::clone(&progress)));
    let sink = RedisStreamSink::connect(&server.url()).await.expect("sink");
    Case { store, progress, reader, sink, stream: stream.to_owned(), _dir: dir }
}

impl Case {
    /// Waits for every staged message to be read (up to the drain
    /// deadline) and stops the reader: the messages staged, and a note if
    /// the deadline came first.
    async fn finish(&self, seconds: f64) -> (usize, String) {
        let staged = self.progress.staged_keys() * PER_KEY;
        self.progress.expected.store(staged, Ordering::Release);
        let deadline = Instant::now() + drain_deadline(seconds);
        let drained = self.progress.wait_read(staged, deadline).await;
        let note = if drained { String::new() } else { format!("drain deadline of {:?} hit", drain_deadline(seconds)) };
        self.progress.expected.store(0, Ordering::Release);
        (staged, note)
    }
}

/// One producer: a key staged, then its messages awaited off the stream.
async fn relay_one_at_a_time(seconds: f64, dir: &std::path::Path, server: &fixture::RedisServer) -> RelayRow {
    let case = case(dir, server, "bench-one").await;
    let relay = Relay::new(Arc::clone(&case.store), case.sink.clone(), RelayConfig::new([SCOPE]));
    let outbox = Outbox::shared(Arc::clone(&case.store)).relay_to(relay.handle());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async move {
        let _ = stopped.await;
    }));
    let before = Writes::of(&case.store);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut note = String::new();
    for key in 0..RELAY_KEYS {
        if Instant::now() >= deadline {
            break;
        }
        stage(&outbox, &case.progress, &case.stream, key).await;
        let wait = Instant::now() + drain_deadline(seconds);
        if !case.progress.wait_read((key + 1) * PER_KEY, wait).await {
            note = format!("key {key} not read within {:?}", drain_deadline(seconds));
            break;
        }
    }
    let (staged, drained) = case.finish(seconds).await;
    let writes = Writes::of(&case.store).since(before);
    let _ = stop.send(());
    running.await.expect("relay");
    let reading = case.reader.await.expect("reader");
    let (lags, early, last) = lags(&case.progress, &reading);
    let delivered = usize::try_from(lags.len()).expect("small");
    let span = Duration::from_nanos(last).saturating_sub(started - case.progress.base);
    RelayRow {
        name: "Relay::run notified, 1 producer, 1 key at a time".into(),
        keys: staged / PER_KEY,
        staged,
        delivered,
        duplicates: reading.duplicates,
        rate: as_f64(lags.len()) / span.as_secs_f64().max(f64::MIN_POSITIVE),
        staging_rate: None,
        lags: Some(lags),
        writes: writes.per(delivered),
        early,
        note: [note, drained].into_iter().filter(|note| !note.is_empty()).collect::<Vec<_>>().join("; "),
    }
}

/// A burst of keys from `PRODUCERS` producers, the relay running.
async fn relay_burst(seconds: f64, dir: &std::path::Path, server: &fixture::RedisServer, keys: usize) -> RelayRow {
    let case = case(dir, server, &format!("bench-burst-{keys}")).await;
    let config = RelayConfig::new([SCOPE]).concurrency(keys);
    let relay = Relay::new(Arc::clone(&case.store), case.sink.clone(), config);
    let outbox = Outbox::shared(Arc::clone(&case.store)).relay_to(relay.handle());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async move {
        let _ = stopped.await;
    }));
    let before = Writes::of(&case.store);
    let started = Instant::now();
    let staging = stage_burst(&outbox, &case.progress, &case.stream, burst_keys(seconds), seconds).await;
    let (staged, note) = case.finish(seconds).await;
    let writes = Writes::of(&case.store).since(before);
    let _ = stop.send(());
    running.await.expect("relay");
    let reading = case.reader.await.expect("reader");
    let (lags, early, last) = lags(&case.progress, &reading);
    let span = Duration::from_nanos(last).saturating_sub(started - case.progress.base);
    let delivered = usize::try_from(lags.len()).expect("small");
    RelayRow {
        name: format!("Relay::run notified, a burst from {PRODUCERS} producers, {keys} key(s) at once"),
        keys: staged / PER_KEY,
        staged,
        delivered,
        duplicates: reading.duplicates,
        rate: as_f64(lags.len()) / span.as_secs_f64().max(f64::MIN_POSITIVE),
        staging_rate: Some(count(staged) / staging.max(f64::MIN_POSITIVE)),
        lags: Some(lags),
        writes: writes.per(delivered),
        early,
        note,
    }
}

/// A backlog staged first (no relay told), then drained by sweeps alone.
async fn relay_sweep(seconds: f64, dir: &std::path::Path, server: &fixture::RedisServer, keys: usize) -> RelayRow {
    let case = case(dir, server, &format!("bench-sweep-{keys}")).await;
    let config = RelayConfig::new([SCOPE]).concurrency(keys);
    let relay = Relay::new(Arc::clone(&case.store), case.sink.clone(), config);
    let outbox = Outbox::shared(Arc::clone(&case.store));
    let staging = stage_burst(&outbox, &case.progress, &case.stream, burst_keys(seconds), seconds).await;
    let staged = case.progress.staged_keys() * PER_KEY;
    let before = Writes::of(&case.store);
    let started = Instant::now();
    let deadline = started + drain_deadline(seconds);
    let (mut delivered, mut sweeps, mut note) = (0, 0, String::new());
    while delivered < staged {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(sweep) = tokio::time::timeout(left, relay.sweep()).await else {
            note = format!("drain deadline of {:?} hit", drain_deadline(seconds));
            break;
        };
        let sweep = sweep.expect("sweep");
        sweeps += 1;
        delivered += sweep.delivered;
        if sweep.keys == 0 {
            note = format!("a sweep found nothing with {} left", staged - delivered);
            break;
        }
    }
    let swept = started.elapsed().as_secs_f64();
    let writes = Writes::of(&case.store).since(before);
    let (_, read_note) = case.finish(seconds).await;
    let reading = case.reader.await.expect("reader");
    let read = reading.read_at.iter().filter(|at| **at > 0).count();
    assert!(read_note.is_empty() || !note.is_empty(), "swept but not read: {read_note}");
    RelayRow {
        name: format!("Relay::sweep of a backlog staged first, {keys} key(s) at once"),
        keys: staged / PER_KEY,
        staged,
        delivered: read,
        duplicates: reading.duplicates,
        rate: count(delivered) / swept.max(f64::MIN_POSITIVE),
        staging_rate: Some(count(staged) / staging.max(f64::MIN_POSITIVE)),
        lags: None,
        writes: writes.per(delivered),
        early: 0,
        note: [note, format!("{sweeps} sweep(s)")]
            .into_iter()
            .filter(|note| !note.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
    }
}

async fn relay_rows(seconds: f64, dir: &std::path::Path, server: &fixture::RedisServer, appendfsync: &str) {
    let rows = [
        relay_one_at_a_time(seconds, dir, server).await,
        relay_burst(seconds, dir, server, 1).await,
        relay_burst(seconds, dir, server, 16).await,
        relay_sweep(seconds, dir, server, 1).await,
        relay_sweep(seconds, dir, server, 16).await,
    ];
    println!(
        "relay: store Durability::Sync (staging, progress records), RedisStreamSink XADD (AOF appendfsync {appendfsync}), \
         {PER_KEY} messages a key, {RELAY_PAYLOAD_BYTES}-byte payloads; lag = Outbox::run returned -> XREAD got it"
    );
    println!(
        "{:<70} {:>6} {:>8} {:>9} {:>10} {:>10} {:>10} {:>12} {:>14}  notes",
        "row", "keys", "staged", "delivered", "msg/s", "lag p50", "lag p99", "staged msg/s", "records/fsyncs"
    );
    for row in &rows {
        let (p50, p99) = row.lags.as_ref().map_or(("-".into(), "-".into()), |lags| {
            (micros(lags.value_at_quantile(0.5)), micros(lags.value_at_quantile(0.99)))
        });
        let staging = row.staging_rate.map_or("-".into(), |rate| format!("{rate:.0}"));
        let mut notes = Vec::new();
        if row.early > 0 {
            notes.push(format!("{} read before their run returned", row.early));
        }
        if row.duplicates > 0 {
            notes.push(format!("{} duplicates in the stream", row.duplicates));
        }
        if !row.note.is_empty() {
            notes.push(row.note.clone());
        }
        println!(
            "{:<70} {:>6} {:>8} {:>9} {:>10.0} {:>10} {:>10} {:>12} {:>14}  {}",
            row.name,
            row.keys,
            row.staged,
            row.delivered,
            row.rate,
            p50,
            p99,
            staging,
            row.writes,
            notes.join("; ")
        );
    }
    println!(
        "records/fsyncs: the store's a message delivered; the Relay::run rows count the producers' (claim, \
         completion) and the relay's (progress claim, checkpoints, completion), the sweep row the relay's alone"
    );
}
