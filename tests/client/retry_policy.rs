//! The retry layer against a scripted inner service on tokio's paused
//! clock: which answers are retried, how long it waits (Retry-After, the
//! deadline), that every attempt carries the same key and body, the
//! budget's and the breaker's refusals, and the metrics they leave.
#![cfg(all(feature = "client", feature = "metrics"))]

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use idemkv::client::Backoff;
use idemkv::client::{
    BoxError, BreakerConfig, BudgetConfig, ClientError, Jitter, RetryInfo, RetryLayer, RetryPolicy, IDEMPOTENCY_KEY,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// One scripted answer: a status with an optional `Retry-After`, or a
/// transport error of an I/O kind.
#[derive(Clone, Copy)]
enum Step {
    Status(u16, Option<&'static str>),
    Fail(io::ErrorKind),
}

/// What the inner service received: method, headers, body, when.
type Seen = Arc<Mutex<Vec<(Method, HeaderMap, Bytes, Instant)>>>;

type Inner = tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, BoxError>;

/// A service answering `steps` in order, then 200 forever.
fn scripted(steps: &[Step]) -> (Inner, Seen) {
    let script = Arc::new(Mutex::new(steps.iter().copied().collect::<VecDeque<_>>()));
    let seen = Seen::default();
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let (script, log) = (Arc::clone(&script), Arc::clone(&log));
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map_err(|never| -> BoxError { match never {} })?.to_bytes();
            log.lock().push((parts.method, parts.headers, body, Instant::now()));
            let step = script.lock().pop_front().unwrap_or(Step::Status(200, None));
            match step {
                Step::Fail(kind) => Err(Box::new(io::Error::from(kind)) as BoxError),
                Step::Status(code, retry_after) => {
                    let mut response = Response::builder().status(code);
                    if let Some(value) = retry_after {
                        response = response.header("retry-after", value);
                    }
                    Ok(response.body(Full::new(Bytes::from(format!("answer {code}")))).expect("response"))
                }
            }
        }
    });
    (tower::util::BoxCloneService::new(service), seen)
}

/// A policy without jitter, budget or breaker unless a test adds them.
fn policy() -> RetryPolicy {
    RetryPolicy::new()
        .max_attempts(5)
        .deadline(Duration::from_secs(60))
        .backoff(Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).jitter(Jitter::None))
        .budget(None)
        .breaker(None)
}

fn post(body: &'static str) -> Request<Full<Bytes>> {
    Request::post("http://payments.test/charges").body(Full::new(Bytes::from_static(body.as_bytes()))).expect("request")
}

fn attempts<B>(response: &Response<B>) -> u32 {
    response.extensions().get::<RetryInfo>().expect("retry info").attempts
}

#[tokio::test(start_paused = true)]
async fn retries_keep_one_key_and_the_body_and_honour_retry_after() {
    let (inner, seen) = scripted(&[Step::Status(503, Some("2")), Step::Fail(io::ErrorKind::ConnectionReset)]);
    let started = Instant::now();
    let response = RetryLayer::new(policy()).layer(inner).oneshot(post("amount=10")).await.expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts(&response), 3);
    let seen = seen.lock();
    let keys: Vec<_> = seen.iter().map(|(_, headers, _, _)| headers.get(IDEMPOTENCY_KEY).cloned()).collect();
    assert!(keys[0].is_some() && keys.iter().all(|key| *key == keys[0]), "one key on every attempt: {keys:?}");
    assert!(seen.iter().all(|(_, _, body, _)| body == "amount=10"), "the same body on every attempt");
    // Retry-After (2 s) beats the first backoff (100 ms); then 200 ms.
    assert_eq!(seen[1].3 - started, Duration::from_secs(2));
    assert_eq!(seen[2].3 - seen[1].3, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn final_statuses_are_not_retried() {
    for code in [400, 401, 403, 404, 409, 422] {
        let (inner, seen) = scripted(&[Step::Status(code, None)]);
        let response = RetryLayer::new(policy()).layer(inner).oneshot(post("x")).await.expect("answer");
        assert_eq!(response.status().as_u16(), code);
        assert_eq!((attempts(&response), seen.lock().len()), (1, 1), "{code}");
    }
}

#[tokio::test(start_paused = true)]
async fn retryable_statuses_are_retried() {
    for code in [408, 425, 429, 500, 502, 503, 504] {
        let (inner, _) = scripted(&[Step::Status(code, None)]);
        let response = RetryLayer::new(policy()).layer(inner).oneshot(post("x")).await.expect("answer");
        assert_eq!((response.status(), attempts(&response)), (StatusCode::OK, 2), "{code}");
    }
}

#[tokio::test(start_paused = true)]
async fn methods_without_a_key_are_retried_only_if_idempotent() {
    let (inner, seen) = scripted(&[Step::Status(500, None)]);
    let get = Request::get("http://payments.test/charges/1").body(Full::<Bytes>::default()).expect("request");
    let response = RetryLayer::new(policy()).layer(inner).oneshot(get).await.expect("answer");
    assert_eq!(attempts(&response), 2);
    assert!(seen.lock().iter().all(|(_, headers, _, _)| !headers.contains_key(IDEMPOTENCY_KEY)));

    let (inner, _) = scripted(&[Step::Status(500, None)]);
    let charge = Request::builder().method("CHARGE").uri("http://payments.test/").body(Full::<Bytes>::default());
    let response = RetryLayer::new(policy()).layer(inner).oneshot(charge.expect("request")).await.expect("answer");
    assert_eq!((response.status(), attempts(&response)), (StatusCode::INTERNAL_SERVER_ERROR, 1));
}

#[tokio::test(start_paused = true)]
async fn the_callers_key_is_kept_and_in_progress_is_waited_for() {
    let (inner, seen) = scripted(&[Step::Status(409, Some("3"))]);
    let request = Request::post("http://payments.test/charges").header("idempotency-key", "order-1");
    let request = request.body(Full::<Bytes>::default()).expect("request");
    let policy = policy().prefer_wait(Some(Duration::from_secs(10)));
    let response = RetryLayer::new(policy).layer(inner).oneshot(request).await.expect("answer");
    assert_eq!((response.status(), attempts(&response)), (StatusCode::OK, 2));
    let seen = seen.lock();
    assert!(seen.iter().all(|(_, headers, _, _)| headers[IDEMPOTENCY_KEY] == "order-1"));
    assert_eq!(seen[1].1.get("prefer").map(|value| value.to_str().expect("ascii")), Some("wait=10"));
    assert_eq!(seen[1].3 - seen[0].3, Duration::from_millis(100), "sent at once, the server waits");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_deadline_ends_the_retries_at_once() {
    let (inner, seen) = scripted(&[Step::Status(503, Some("120"))]);
    let started = Instant::now();
    let response = RetryLayer::new(policy()).layer(inner).oneshot(post("x")).await.expect("answer");
    assert_eq!((response.status(), attempts(&response)), (StatusCode::SERVICE_UNAVAILABLE, 1));
    assert_eq!(seen.lock().len(), 1);
    assert_eq!(Instant::now(), started, "no sleep");
}

#[tokio::test(start_paused = true)]
async fn transport_errors_past_the_last_attempt_are_typed() {
    let (inner, _) = scripted(&[Step::Fail(io::ErrorKind::ConnectionRefused); 5]);
    let error = RetryLayer::new(policy()).layer(inner).oneshot(post("x")).await.expect_err("no answer");
    assert!(matches!(error, ClientError::Transport { attempts: 5, .. }), "{error:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hung_attempt_times_out_and_the_deadline_ends_it_all() {
    let hung =
        tower::service_fn(|_: Request<Full<Bytes>>| std::future::pending::<Result<Response<Full<Bytes>>, BoxError>>());
    let policy = policy().attempt_timeout(Some(Duration::from_secs(4))).deadline(Duration::from_secs(10));
    let error = RetryLayer::new(policy).layer(hung).oneshot(post("x")).await.expect_err("no answer");
    // 4 s, 100 ms, 4 s, 200 ms, then 1.7 s of a third attempt.
    assert!(matches!(error, ClientError::DeadlineExceeded { attempts: 3, .. }), "{error:?}");
}

#[test]
fn budget_and_breaker_refuse_and_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("rt");
    metrics::with_local_recorder(&recorder, || runtime.block_on(budget_and_breaker()));
    let mut counters = std::collections::HashMap::new();
    let mut backoffs = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key.labels().map(|label| format!("{}={}", label.key(), label.value())).collect();
        match value {
            DebugValue::Counter(count) => {
                counters.insert(format!("{}{{{}}}", key.name(), labels.join(",")), count);
            }
            DebugValue::Histogram(samples) if key.name() == "backoff_seconds" => backoffs += samples.len(),
            _ => {}
        }
    }
    assert_eq!(counters.get("retries_total{reason=unavailable}"), Some(&2), "{counters:?}");
    assert_eq!(counters.get("retry_budget_exhausted_total{route=payments.test}"), Some(&1), "{counters:?}");
    assert_eq!(counters.get("circuit_breaker_transitions_total{to=open}"), Some(&2), "{counters:?}");
    assert_eq!(counters.get("circuit_breaker_transitions_total{to=half_open}"), Some(&2), "{counters:?}");
    assert_eq!(counters.get("circuit_breaker_transitions_total{to=closed}"), Some(&1), "{counters:?}");
    assert_eq!(backoffs, 2);
}

async fn budget_and_breaker() {
    // The budget: two retries in its window, whatever the requests.
    let budget = BudgetConfig { window: Duration::from_secs(10), ratio: 0.0, min_retries: 2 };
    let (inner, seen) = scripted(&[Step::Status(503, None); 5]);
    let response = RetryLayer::new(policy().budget(Some(budget))).layer(inner).oneshot(post("x")).await;
    let response = response.expect("answer");
    assert_eq!((response.status(), attempts(&response)), (StatusCode::SERVICE_UNAVAILABLE, 3));
    assert_eq!(seen.lock().len(), 3);

    // The breaker: opens after 3 failed calls of 4, refuses at once, lets
    // one probe through after 5 s; the probe's failure reopens it, the
    // next probe's success closes it.
    let breaker = BreakerConfig { window_calls: 4, min_calls: 4, failure_rate: 0.75, ..BreakerConfig::default() };
    let steps = [Step::Status(201, None), Step::Status(500, None), Step::Status(500, None), Step::Status(500, None)];
    let (inner, seen) = scripted(&[&steps[..], &[Step::Fail(io::ErrorKind::ConnectionReset)]].concat());
    let client = RetryLayer::new(policy().max_attempts(1).breaker(Some(breaker))).layer(inner);
    for _ in 0..4 {
        client.clone().oneshot(post("x")).await.expect("answer");
    }
    let error = client.clone().oneshot(post("x")).await.expect_err("refused");
    let ClientError::CircuitOpen { destination, retry_in } = error else { panic!("{error:?}") };
    assert_eq!((destination.as_str(), retry_in), ("payments.test", Duration::from_secs(5)));
    assert!(error_nothing_sent(&client).await);
    tokio::time::advance(Duration::from_secs(5)).await;
    client.clone().oneshot(post("x")).await.expect_err("the probe's reset");
    assert!(error_nothing_sent(&client).await, "reopened");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(client.clone().oneshot(post("x")).await.expect("probe").status(), StatusCode::OK);
    assert_eq!(client.clone().oneshot(post("x")).await.expect("closed").status(), StatusCode::OK);
    assert_eq!(seen.lock().len(), 7, "refused calls never reached the service");
}

async fn error_nothing_sent<S>(client: &S) -> bool
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = ClientError> + Clone,
{
    client.clone().oneshot(post("x")).await.is_err_and(|error| error.nothing_sent())
}
