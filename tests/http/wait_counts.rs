//! Guards the embedded store's counts of requests that wait (`Prefer:
//! wait`): the public `waiters` scenario (500 waiters on one key and a
//! request with another key, then one request that waits alone) run on a
//! store of its own, whose counters then say that each request was one
//! claim, each waiting one answered by a replay and never a conflict, and
//! that no waiter polled: it looked again as it started to listen and once
//! more when the finish woke it.

use idemkv::conformance::{self, Setting};
use idemkv::{Config, Store};

/// The crowd's waiters, as the scenario sends them.
const WAITERS: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_waiting_request_counts_one_claim_answered_by_a_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new()).expect("open");
    conformance::http::waiters(&store, &Setting::new("wait-counts")).await;
    let stats = store.stats();
    // The crowd: the first, its waiters and the other key; then the first
    // and the one that waited alone.
    assert_eq!(
        (stats.claims, stats.acquired, stats.replays, stats.in_progress),
        (WAITERS + 2 + 2, 3, WAITERS + 1, 0),
        "{stats:?}"
    );
    assert!(stats.wait_looks <= 2 * (WAITERS + 1), "{stats:?}");
}
