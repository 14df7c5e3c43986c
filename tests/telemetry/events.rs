//! What the store tells a real `tracing` subscriber (a registry with a
//! layer that keeps every event of target `idemkv`): the open and its span,
//! a torn tail cut, a compaction pass, a lost lease, an abandoned lease and
//! a poisoned shard, each with the fields an operator needs.

#![cfg(all(feature = "tracing", feature = "testing"))]

use idemkv::io::{Fault, FaultyStorage, StdStorage};
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, ManualClock, Store};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// One event as seen: level, message and `name=value` fields, and the
/// names of the spans it sits in.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    message: String,
    fields: String,
    spans: Vec<String>,
}

struct Keep(Arc<Mutex<Vec<Seen>>>);

struct Fields(String, String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        } else {
            let _ = write!(self.1, "{}={value:?} ", field.name());
        }
    }
}

impl<S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for Keep {
    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        if event.metadata().target() != "idemkv" {
            return;
        }
        let mut fields = Fields(String::new(), String::new());
        event.record(&mut fields);
        let spans = context
            .event_scope(event)
            .map(|scope| scope.map(|span| span.name().to_string()).collect())
            .unwrap_or_default();
        let seen = Seen { level: *event.metadata().level(), message: fields.0, fields: fields.1, spans };
        self.0.lock().expect("events").push(seen);
    }
}

/// The events kept since the subscriber was installed (once per process).
fn events() -> &'static Arc<Mutex<Vec<Seen>>> {
    static EVENTS: OnceLock<Arc<Mutex<Vec<Seen>>>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let events = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Keep(Arc::clone(&events)));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this process");
        events
    })
}

/// Events whose message contains `needle`.
fn find(needle: &str) -> Vec<Seen> {
    events().lock().expect("events").iter().filter(|seen| seen.message.contains(needle)).cloned().collect()
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest::new(key, Fingerprint::of(b"body")).lease(Duration::from_secs(5)).ttl(Duration::from_secs(60))
}

#[test]
fn open_torn_tail_compaction_and_leases_are_told() {
    events();
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = || {
        Config::new()
            .shards(1)
            .clock(clock.clone())
            .compaction_interval(None)
            .compaction_bytes_per_second(0)
            .segment_bytes(4096)
            .response_bytes_max(512)
    };
    let store = Store::open(dir.path(), config()).expect("open");
    let opened = find("store opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0].level, Level::INFO);
    assert!(opened[0].fields.contains("created=true"), "{opened:?}");
    assert_eq!(opened[0].spans, ["open"], "inside the open span");

    leases_lost_and_dropped_are_told(&store, &clock);
    compaction_pass_is_told(&store, &clock);
    store.close().expect("close");

    tear_the_active_segment(dir.path());
    let store = Store::open(dir.path(), config()).expect("reopen");
    let torn = find("torn tail cut");
    assert_eq!(torn.len(), 1, "{torn:?}");
    assert_eq!(torn[0].level, Level::WARN);
    assert!(torn[0].fields.contains("bytes=37"), "{torn:?}");
    assert_eq!(store.stats().torn_tail_bytes_cut, 37);
    store.close().expect("close");

    // In the same test: the events of this process are all kept together.
    a_poisoned_shard_is_an_error_event();
}

/// A stale holder is refused, and says so; a lease dropped unfinished is
/// told too.
fn leases_lost_and_dropped_are_told(store: &Store, clock: &ManualClock) {
    let Claim::Acquired(first) = store.claim(&request("k")).expect("claim") else { panic!() };
    clock.advance(Duration::from_secs(6));
    let Claim::Acquired(second) = store.claim(&request("k")).expect("claim") else { panic!() };
    let lost = first.complete(b"late").expect_err("stale");
    assert!(matches!(lost.error, Error::LeaseLost { .. }));
    let told = find("lease lost");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].level, Level::WARN);
    assert!(told[0].fields.contains("shard=0") && told[0].fields.contains("token="), "{told:?}");
    drop(second);
    let abandoned = find("lease dropped unfinished");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    assert_eq!(abandoned[0].level, Level::DEBUG);
}

/// A compaction pass reports what it reclaimed.
fn compaction_pass_is_told(store: &Store, clock: &ManualClock) {
    for n in 0..40 {
        let key = format!("bulk-{n}");
        let Claim::Acquired(lease) = store.claim(&request(&key)).expect("claim") else { panic!() };
        lease.complete(&[1; 100]).expect("complete");
    }
    clock.advance(Duration::from_secs(3600));
    let report = store.compact().expect("compact");
    let passes = find("compaction pass");
    assert_eq!(passes.len(), 1);
    assert!(passes[0].fields.contains(&format!("bytes_reclaimed={}", report.bytes_reclaimed)), "{passes:?}");
}

/// Bytes of a write that never finished, at the end of the active
/// segment: the next open cuts them and warns with their count.
fn tear_the_active_segment(dir: &std::path::Path) {
    let shard = dir.join("shard-0000");
    let active = std::fs::read_dir(&shard)
        .expect("shard folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .max()
        .expect("a segment");
    let mut bytes = std::fs::read(&active).expect("read");
    bytes.extend_from_slice(&[0xAB; 37]);
    std::fs::write(&active, bytes).expect("write");
}

fn a_poisoned_shard_is_an_error_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = FaultyStorage::new(Arc::new(StdStorage));
    let config = Config::new().shards(1).durability(Durability::Sync).storage(Arc::new(storage.clone()));
    let store = Store::open(dir.path(), config).expect("open");
    // The claim's write goes through; its fsync fails: the shard is
    // poisoned (the failed fsync may have dropped dirty pages).
    let mut poisoned = false;
    for after in 0..8 {
        storage.fail_after(after, Fault::Io);
        let key = format!("key-{after}");
        let _failed = store.claim(&request(&key));
        storage.clear();
        if matches!(store.claim(&request("probe")), Err(Error::Poisoned { .. })) {
            poisoned = true;
            break;
        }
    }
    assert!(poisoned, "an fsync failure poisons the shard");
    let told = find("shard poisoned");
    assert_eq!(told.len(), 1, "told once, however many calls fail after: {told:?}");
    assert_eq!(told[0].level, Level::ERROR);
    assert!(told[0].fields.contains("shard=0"), "{told:?}");
}
