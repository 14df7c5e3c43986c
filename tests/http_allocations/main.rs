//! What the HTTP layer allocates per answer, counted by a global allocator
//! of this test binary's own: a new key (the handler runs, its answer is
//! kept) and a replay, over the embedded store, with no metrics recorder
//! installed. Each bound is what the layer needs today plus nothing; a
//! change that allocates more per answer fails here. Nothing is timed.
//!
//! The count is of this thread's allocations only (the store's and the
//! lease keeper's threads allocate on their own schedule), on a runtime
//! of one thread, around the service's call and the reading of its answer;
//! the request is built before the count starts.

#![cfg(all(feature = "tower", feature = "metrics"))]

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::{routing::post, Router};
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Durability, Store};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tower::ServiceExt;

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// The one unsafe block of the tests: an allocator has no safe interface.
// It forwards every call to the system allocator unchanged.
#[expect(unsafe_code, reason = "a global allocator is an unsafe trait; this one only counts and forwards")]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above; `ptr` came from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: as above; `ptr` came from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The bench's handler: echoes the body as JSON with 201.
async fn handler(body: Bytes) -> (StatusCode, [(&'static str, &'static str); 1], Bytes) {
    (StatusCode::CREATED, [("content-type", "application/json")], body)
}

fn request(key: &str) -> Request<Body> {
    Request::post("/payments")
        .header("idempotency-key", key)
        .body(Body::from(r#"{"amount":10,"currency":"EUR"}"#))
        .expect("request")
}

/// Calls `app` with each of `requests` and returns the fewest allocations
/// one call made, and their mean (the store's tables grow now and then:
/// the mean carries that, the fewest does not), with the answers' statuses.
async fn count(app: &Router, requests: Vec<Request<Body>>) -> (u64, f64, Vec<(StatusCode, bool)>) {
    let (mut fewest, mut total, mut answers) = (u64::MAX, 0, Vec::with_capacity(requests.len()));
    let calls = requests.len();
    for request in requests {
        let before = allocations();
        let response = app.clone().oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.expect("body");
        let made = allocations() - before;
        drop(body);
        answers.push((parts.status, parts.headers.contains_key("idempotency-replay")));
        (fewest, total) = (fewest.min(made), total + made);
    }
    #[expect(clippy::cast_precision_loss, reason = "a mean of small counts")]
    let mean = total as f64 / calls as f64;
    (fewest, mean, answers)
}

/// The bounds: what the layer, the store and axum allocate for one call
/// of the bench's request, as measured when they were set. A new key's
/// 36: the bare route's 17 (axum's routing, the handler, the test's
/// reading of the body); 5 more of axum's for a route behind a layer and
/// a body of the layer's type; the store's claim 1 (the lease's key); the
/// layer's 13 — the boxed request future and the handler's run (which
/// outlives a client that leaves), the key, the lease token the run
/// shares, its keeper's entry (2), the checkpoints, the `Attempt` and
/// `Checkpoints` extensions (3, the map's table grown for them), the
/// request body handed on, the response body read, the stored answer. A
/// replay's 20: axum's 13 and the test's 1, the answer copied out of the
/// store, and the layer's 5 — the boxed future, the key, the headers'
/// table (2) and the one count the replayed headers and body share.
const NEW_KEY_MAX: u64 = 36;
const REPLAY_MAX: u64 = 20;

#[test]
fn an_answer_allocates_no_more_than_its_bound() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
        let app =
            Router::new().route("/payments", post(handler)).layer(IdempotencyLayer::new(store, LayerConfig::global()));
        // Once-only work first: the keeper's thread, the tables' first sizes.
        count(&app, (0..64).map(|n| request(&format!("warm-{n}"))).collect()).await;

        // The bare route's count, for the comparison printed.
        let bare = Router::new().route("/payments", post(handler));
        count(&bare, (0..64).map(|n| request(&format!("warm-{n}"))).collect()).await;
        let (route, _, _) = count(&bare, (0..64).map(|n| request(&format!("bare-{n}"))).collect()).await;
        let (fresh, fresh_mean, answers) = count(&app, (0..256).map(|n| request(&format!("new-{n}"))).collect()).await;
        assert!(answers.iter().all(|answer| *answer == (StatusCode::CREATED, false)), "{answers:?}");
        let (replay, replay_mean, answers) = count(&app, (0..256).map(|_| request("new-7")).collect()).await;
        assert!(answers.iter().all(|answer| *answer == (StatusCode::CREATED, true)), "{answers:?}");
        println!(
            "allocations per call: the bare route {route}; through the layer a new key {fresh} (mean {fresh_mean:.1}), \
             a replay {replay} (mean {replay_mean:.1})"
        );
        assert!(fresh <= NEW_KEY_MAX, "a new key allocates {fresh} times (bound {NEW_KEY_MAX})");
        assert!(replay <= REPLAY_MAX, "a replay allocates {replay} times (bound {REPLAY_MAX})");
    });
}
