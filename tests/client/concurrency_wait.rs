//! Waiting for a place under the concurrency limit, on tokio's paused
//! clock, with a limit of one: a call over it sends nothing until the
//! call ahead has finished; a hung attempt holds its place until its
//! deadline cuts it, and then the next call goes; a retry still waiting
//! at its deadline hands back the answer it retries, unsent; a first
//! attempt still waiting at its deadline is `ConcurrencyLimited`, unsent.
#![cfg(feature = "client")]

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use idemkv::client::{BoxError, ClientError, ConcurrencyConfig, RetryLayer, RetryPolicy};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// A limit of one, which never moves.
const ONE: ConcurrencyConfig = ConcurrencyConfig { initial_limit: 1, min_limit: 1, max_limit: 1, backoff_ratio: 0.5 };

/// A request's whole body.
async fn body_of(request: Request<Full<Bytes>>) -> Bytes {
    match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    }
}

fn post(body: &'static str) -> Request<Full<Bytes>> {
    Request::post("http://api.test/charges").body(Full::new(Bytes::from_static(body.as_bytes()))).expect("request")
}

#[tokio::test(start_paused = true)]
async fn a_call_over_the_limit_waits_for_the_one_ahead() {
    let started = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    // "first" takes 3 s, "hang" never ends, the others answer at once.
    // Logs when each one starts.
    let inner = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let log = Arc::clone(&log);
        async move {
            let body = body_of(request).await;
            log.lock().push((String::from_utf8_lossy(&body).into_owned(), Instant::now() - started));
            if body == "hang" {
                std::future::pending::<()>().await;
            }
            if body == "first" {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Ok::<_, BoxError>(Response::new(Full::<Bytes>::default()))
        }
    });
    let policy =
        RetryPolicy::new().deadline(Duration::from_secs(10)).attempt_timeout(None).breaker(None).concurrency(Some(ONE));
    let client = RetryLayer::new(policy).layer(inner);

    let first = tokio::spawn(client.clone().oneshot(post("first")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = client.clone().oneshot(post("second")).await.expect("an answer after the wait");
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(first.await.expect("task").expect("an answer").status(), StatusCode::OK);

    let hung = tokio::spawn(client.clone().oneshot(post("hang")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = client.clone().oneshot(post("after")).await.expect("an answer once the hung one is cut");
    assert_eq!(after.status(), StatusCode::OK);
    let hung = hung.await.expect("task").expect_err("cut at its deadline");
    assert!(matches!(hung, ClientError::DeadlineExceeded { attempts: 1, .. }), "{hung:?}");

    let seen = seen.lock().clone();
    let secs = Duration::from_secs;
    let expected = [("first", secs(0)), ("second", secs(3)), ("hang", secs(3)), ("after", secs(13))];
    let expected: Vec<_> = expected.iter().map(|(body, at)| ((*body).to_owned(), *at)).collect();
    assert_eq!(seen, expected, "each call sent only when the place was free");
    assert_eq!(client.concurrency_limit("api.test"), Some(1));
}

/// A retry waits for a place like a first attempt; one still waiting at
/// its deadline hands back the answer it retries (a request started
/// later holds the place, and its deadline is the later one).
#[tokio::test(start_paused = true)]
async fn a_retry_still_waiting_at_its_deadline_hands_back_the_last_answer() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    // "retried" is 503 the first time, "hang" never ends.
    let inner = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let log = Arc::clone(&log);
        async move {
            let body = body_of(request).await;
            let first = {
                let mut log = log.lock();
                log.push(String::from_utf8_lossy(&body).into_owned());
                log.len() == 1
            };
            if body == "hang" {
                std::future::pending::<()>().await;
            }
            let status = if first { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
            Ok::<_, BoxError>(Response::builder().status(status).body(Full::<Bytes>::default()).expect("response"))
        }
    });
    let backoff = idemkv::client::Backoff::new(Duration::from_secs(2), Duration::from_secs(2));
    let policy = RetryPolicy::new()
        .deadline(Duration::from_secs(10))
        .attempt_timeout(None)
        .backoff(backoff.jitter(idemkv::client::Jitter::None))
        .budget(None)
        .breaker(None)
        .concurrency(Some(ONE));
    let client = RetryLayer::new(policy).layer(inner);

    let started = Instant::now();
    let retried = tokio::spawn(client.clone().oneshot(post("retried")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hung = tokio::spawn(client.clone().oneshot(post("hang")));
    let answer = retried.await.expect("task").expect("the last answer");
    let info = answer.extensions().get::<idemkv::client::RetryInfo>().cloned().expect("retry info");
    assert_eq!((answer.status(), info.attempts), (StatusCode::SERVICE_UNAVAILABLE, 1));
    assert_eq!(Instant::now() - started, Duration::from_secs(10), "waited for a place until its deadline");
    hung.abort();
    assert_eq!(*seen.lock(), ["retried", "hang"], "the retry was never sent");
}

/// A first attempt that gets no place by its deadline is
/// `ConcurrencyLimited` then, and nothing of it is sent. The place is
/// held by a call that its caller polled once and then left alone: a
/// deadline cannot cut an attempt no one polls, so the holder outlasts
/// the deadline of the call behind it. Dropped, it frees its place.
#[tokio::test(start_paused = true)]
async fn a_first_attempt_without_a_place_by_its_deadline_is_concurrency_limited() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    // "held" never ends, the others answer at once.
    let inner = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let log = Arc::clone(&log);
        async move {
            let body = body_of(request).await;
            log.lock().push(String::from_utf8_lossy(&body).into_owned());
            if body == "held" {
                std::future::pending::<()>().await;
            }
            Ok::<_, BoxError>(Response::new(Full::<Bytes>::default()))
        }
    });
    let policy =
        RetryPolicy::new().deadline(Duration::from_secs(10)).attempt_timeout(None).breaker(None).concurrency(Some(ONE));
    let client = RetryLayer::new(policy).layer(inner);

    let mut held = Box::pin(client.clone().oneshot(post("held")));
    assert!((&mut held).now_or_never().is_none(), "sent, and waiting for its answer");
    let started = Instant::now();
    let refused = client.clone().oneshot(post("refused")).await.expect_err("no place before its deadline");
    assert_eq!(Instant::now() - started, Duration::from_secs(10), "waited until its deadline");
    assert!(
        matches!(&refused, ClientError::ConcurrencyLimited { destination, limit: 1 } if destination == "api.test"),
        "{refused:?}"
    );
    assert!(refused.nothing_sent());

    drop(held);
    let after = client.clone().oneshot(post("after")).await.expect("an answer once the holder is dropped");
    assert_eq!(after.status(), StatusCode::OK);
    assert_eq!(*seen.lock(), ["held", "after"], "the refused call was never sent");
}
