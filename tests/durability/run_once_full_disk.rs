//! Guards what `Store::run_once` and `RunOnce` do when the store fails to
//! keep the answer of a closure that ran: a completion refused by a full
//! disk is tried again while the lease is held, the key stays in progress
//! meanwhile (a redelivery is told to wait, never run), and once the disk
//! has room the answer is stored and replayed. Both once gave up at the
//! first failure: the lease lapsed, and the next redelivery ran the
//! closure a second time. The gRPC face runs every call through `RunOnce`.

use idemkv::io::{Fault, FaultyStorage, StdStorage};
use idemkv::{ClaimRequest, Config, Fingerprint, Once, Outcome, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store on `storage` (Sync, the default: records go to the file with
/// pwrite, which a full disk refuses).
fn store(dir: &tempfile::TempDir, storage: &FaultyStorage) -> Store {
    Store::open(dir.path(), Config::new().storage(Arc::new(storage.clone()))).expect("open")
}

/// The closure's side effect, counted in `runs`: the disk fills before its
/// answer is kept, and gets its room back a second later.
fn ship(runs: &AtomicU32, storage: &FaultyStorage) -> Outcome {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    storage.fail_after(0, Fault::NoSpace);
    let room = storage.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        room.clear();
    });
    Outcome::Complete(format!("label {run}").into_bytes())
}

#[test]
fn store_run_once_stores_an_answer_a_full_disk_refused_and_runs_once() {
    let storage = FaultyStorage::new(Arc::new(StdStorage));
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir, &storage);
    let request =
        ClaimRequest::new("order-7", Fingerprint::of(b"ship order 7")).scope("shipping").lease(Duration::from_secs(3));
    let runs = AtomicU32::new(0);
    let run = || store.run_once(&request, |_lease| ship(&runs, &storage));

    let first = run();
    assert!(first.is_err(), "the disk was full when the closure ended: {first:?}");
    assert!(storage.faults_fired() > 0, "the full disk refused a write");
    let redelivery = run().expect("a redelivery while the answer waits");
    assert!(matches!(redelivery, Once::InProgress { .. }), "the key must stay in progress: {redelivery:?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let again = run();
        if !matches!(again, Ok(Once::InProgress { .. })) || Instant::now() > deadline {
            break again;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the closure ran twice: {last:?}");
    assert_eq!(last.expect("the replay"), Once::Replayed(b"label 1".to_vec()));
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_refused_by_a_full_disk_is_stored_later_and_the_closure_runs_once() {
    use idemkv::backend::{ClaimOptions, RunOnce};
    let storage = FaultyStorage::new(Arc::new(StdStorage));
    let dir = tempfile::tempdir().expect("tempdir");
    let once = RunOnce::new(store(&dir, &storage)).lease(Duration::from_secs(3));
    let fingerprint = Fingerprint::of(b"ship order 7");
    let runs = Arc::new(AtomicU32::new(0));
    let run =
        || {
            let (runs, storage) = (Arc::clone(&runs), storage.clone());
            once.run(b"shipping", b"order-7", fingerprint, ClaimOptions::new(), move |_| async move {
                ship(&runs, &storage)
            })
        };

    let first = run().await;
    assert!(first.is_err(), "the disk was full when the closure ended: {first:?}");
    assert!(storage.faults_fired() > 0, "the full disk refused a write");
    let redelivery = run().await.expect("a redelivery while the answer waits");
    assert!(matches!(redelivery, Once::InProgress { .. }), "the key must stay in progress: {redelivery:?}");

    // Redeliveries, as a queue would make them, until the key is no longer
    // in progress: the stored answer, well within ten seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let again = run().await;
        if !matches!(again, Ok(Once::InProgress { .. })) || Instant::now() > deadline {
            break again;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the closure ran twice: {last:?}");
    assert_eq!(last.expect("the replay"), Once::Replayed(b"label 1".to_vec()));
}
