//! `Durability::Interval`: calls return before their fsync, and a
//! background thread makes them durable within the interval.

use crate::common::{acquire, fingerprint};
use idemkv::{ClaimRequest, Config, Durability, Store};
use std::time::{Duration, Instant};

#[test]
fn the_flusher_syncs_what_calls_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new().durability(Durability::Interval(Duration::from_millis(20)));
    let store = Store::open(dir.path(), config.clone()).expect("open");
    for index in 0..50 {
        let key = format!("k-{index}");
        acquire(&store, &ClaimRequest::new(&key, fingerprint(&key))).complete(b"done").expect("complete");
    }
    let written = store.stats().records_written;
    assert_eq!(written, 100);
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats().records_synced < written {
        assert!(Instant::now() < deadline, "the flusher never synced: {:?}", store.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(store.stats().fsyncs >= 1);
    // Closing stops the flusher and releases the directory.
    store.close().expect("close");
    let store = Store::open(dir.path(), config).expect("reopen");
    assert_eq!(store.iter().count(), 50);
}
