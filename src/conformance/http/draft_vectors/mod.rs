//! The public conformance vectors of the `Idempotency-Key` draft
//! (draft-ietf-httpapi-idempotency-key-header; the anyonce suite's
//! `core` and `profile` tiers), each written here as a case of our own:
//! the suite's fixture routes behind the layer on a real server, every
//! step's request sent by a real client, its status, headers and body and
//! the handler's runs (read from `GET /counter`, behind the layer) checked
//! as the vector expects.
//!
//! Each vector runs with `LayerConfig`'s defaults, and a profile vector
//! that idemkv meets under a documented setting runs again under it (see
//! docs/http.md, "The draft's conformance vectors"). The scenario prints
//! the score, then asserts every core vector and every profile vector
//! claimed; a vector that waits on a behaviour not built yet is run and
//! reported, not asserted.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::{read, Counter, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, StatusCode};
use std::collections::HashMap;
use std::time::Duration;

mod vectors;

use vectors::vectors;

/// The TTL a target declares for the suite's `short-ttl` capability (at
/// most 2 s), which the expiry vector needs.
const SHORT_TTL: Duration = Duration::from_secs(2);

/// The replay header's name the profile grades.
const REPLAYED: &str = "idempotency-replayed";

// The fixture: every POST route counts a run.

fn echo(request: &FixtureRequest) -> FixtureAnswer {
    let content_type =
        request.headers.get(CONTENT_TYPE).cloned().unwrap_or(HeaderValue::from_static("application/octet-stream"));
    FixtureAnswer::bytes(StatusCode::CREATED, request.body.clone()).header(CONTENT_TYPE, content_type)
}

fn status(request: &FixtureRequest) -> FixtureAnswer {
    let code = request.path().strip_prefix("/status/").unwrap_or_default();
    let Some(status) = code.parse().ok().and_then(|code| StatusCode::from_u16(code).ok()) else {
        return FixtureAnswer::text(StatusCode::BAD_REQUEST, format!("no status {code}"));
    };
    FixtureAnswer::bytes(status, format!("status:{code}")).header(CONTENT_TYPE, HeaderValue::from_static("text/plain"))
}

fn number(request: &FixtureRequest, name: &str) -> u64 {
    request.query(name).and_then(|value| value.parse().ok()).unwrap_or(0)
}

async fn slow(request: FixtureRequest) -> FixtureAnswer {
    let ms = number(&request, "ms");
    tokio::time::sleep(Duration::from_millis(ms)).await;
    FixtureAnswer::text(StatusCode::OK, format!("slept:{ms}"))
}

fn large(request: &FixtureRequest) -> FixtureAnswer {
    let bytes = vec![b'x'; usize::try_from(number(request, "bytes")).unwrap_or(0)];
    FixtureAnswer::bytes(StatusCode::OK, Bytes::from(bytes))
        .header(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"))
}

/// The suite's fixture routes, their runs counted in `runs`.
fn fixture(runs: &Counter) -> Fixture {
    let counted = |runs: &Counter, answer: fn(&FixtureRequest) -> FixtureAnswer| {
        let runs = runs.clone();
        move |request: FixtureRequest| {
            runs.bump();
            std::future::ready(answer(&request))
        }
    };
    let (slow_runs, read_runs) = (runs.clone(), runs.clone());
    Fixture::new()
        .route(Method::POST, "/echo", counted(runs, echo))
        .route(Method::POST, "/status/{code}", counted(runs, status))
        .route(Method::POST, "/slow", move |request| {
            slow_runs.bump();
            slow(request)
        })
        .route(Method::POST, "/large", counted(runs, large))
        .route(Method::GET, "/counter", move |_| {
            let count = format!(r#"{{"count": {}}}"#, read_runs.get());
            std::future::ready(
                FixtureAnswer::bytes(StatusCode::OK, count)
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json")),
            )
        })
}

// The vectors, as data.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Core,
    Profile,
}

/// What a header of an answer must be.
enum Field {
    Is(&'static str),
    Absent,
    /// `^[1-9][0-9]*$`: whole seconds, at least one.
    Seconds,
    /// `^application/problem\+json`.
    Problem,
}

/// What a body must be.
enum Body {
    Is(&'static str),
    SameAs(&'static str),
    Bytes(usize),
}

struct Step {
    id: &'static str,
    method: Method,
    path: &'static str,
    /// Names as the vector spells them; a step whose names are all
    /// lowercase goes out lowercase, any other in title case.
    headers: Vec<(&'static str, String)>,
    body: &'static str,
    /// Sent while the step before it is still pending, once that step's
    /// handler runs (the vectors' 300 ms after it, made a wait for what
    /// they stand for).
    concurrent: bool,
    /// Time that passes for the backend before it is sent.
    after: Duration,
    status: u16,
    fields: Vec<(&'static str, Field)>,
    expected_body: Option<Body>,
    json: Vec<(&'static str, serde_json::Value)>,
    runs: Option<u64>,
}

/// A request with `Content-Type: text/plain`, and the key if given.
fn step(id: &'static str, method: Method, path: &'static str, key: Option<&str>, body: &'static str) -> Step {
    let mut headers = vec![("Content-Type", "text/plain".to_owned())];
    if let Some(key) = key {
        headers.insert(0, ("Idempotency-Key", key.to_owned()));
    }
    Step {
        id,
        method,
        path,
        headers,
        body,
        concurrent: false,
        after: Duration::ZERO,
        status: 200,
        fields: Vec::new(),
        expected_body: None,
        json: Vec::new(),
        runs: None,
    }
}

fn post_to(id: &'static str, path: &'static str, key: Option<&str>, body: &'static str) -> Step {
    step(id, Method::POST, path, key, body)
}

impl Step {
    fn answers(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    fn field(mut self, name: &'static str, field: Field) -> Self {
        self.fields.push((name, field));
        self
    }

    fn body(mut self, body: Body) -> Self {
        self.expected_body = Some(body);
        self
    }

    fn json(mut self, name: &'static str, value: impl Into<serde_json::Value>) -> Self {
        self.json.push((name, value.into()));
        self
    }

    fn runs(mut self, runs: u64) -> Self {
        self.runs = Some(runs);
        self
    }

    fn concurrent(mut self) -> Self {
        self.concurrent = true;
        self
    }

    fn after(mut self, after: Duration) -> Self {
        self.after = after;
        self
    }

    fn lowercase(mut self) -> Self {
        for (name, _) in &mut self.headers {
            *name = if *name == "Idempotency-Key" { "idempotency-key" } else { "content-type" };
        }
        self
    }
}

/// A documented setting of the layer that a profile vector needs.
type Set = fn(LayerConfig) -> LayerConfig;

struct Vector {
    id: &'static str,
    tier: Tier,
    /// The suite's `short-ttl` capability: a TTL of at most 2 s.
    short_ttl: bool,
    /// The setting idemkv meets it under, named as docs/http.md names it.
    setting: Option<(&'static str, Set)>,
    steps: Vec<Step>,
}

fn vector(id: &'static str, tier: Tier, steps: Vec<Step>) -> Vector {
    Vector { id, tier, short_ttl: false, setting: None, steps }
}

impl Vector {
    fn under(mut self, name: &'static str, set: Set) -> Self {
        self.setting = Some((name, set));
        self
    }
}

// The runner.

/// The clients of a run: one that spells header names in title case (as
/// the vectors write them), one that sends them lowercase.
struct Clients {
    title: reqwest::Client,
    lower: reqwest::Client,
}

impl Clients {
    fn new() -> Self {
        let builder = || reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60));
        let title = builder().http1_title_case_headers().build().expect("client");
        Clients { title, lower: builder().build().expect("client") }
    }

    async fn send(&self, base: &str, step: &Step) -> Reply {
        let lowercase = step.headers.iter().all(|(name, _)| name.bytes().all(|byte| !byte.is_ascii_uppercase()));
        let client = if lowercase { &self.lower } else { &self.title };
        let mut request = client.request(step.method.clone(), format!("{base}{}", step.path));
        for (name, value) in &step.headers {
            request = request.header(*name, value);
        }
        if !step.body.is_empty() {
            request = request.body(step.body);
        }
        read(request.send().await.expect("send")).await
    }

    /// The fixture's count of runs, read as the suite reads it: `GET
    /// /counter`, through the layer.
    async fn runs(&self, base: &str) -> u64 {
        let reply = read(self.title.get(format!("{base}/counter")).send().await.expect("send")).await;
        let count: serde_json::Value = serde_json::from_str(&reply.body).expect("a JSON count");
        count["count"].as_u64().expect("a count")
    }
}

/// What `reply` to `step`, after which the handler had run `runs` times,
/// does not meet of the vector, each as `step: what`.
fn check(step: &Step, reply: &Reply, runs: u64, bodies: &HashMap<&str, String>) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{}: {what}", step.id));
    if reply.status != step.status {
        fail(format!("status {} (expected {})", reply.status, step.status));
    }
    for (name, field) in &step.fields {
        let value = reply.header(name);
        let holds = match field {
            Field::Is(expected) => value == Some(*expected),
            Field::Absent => value.is_none(),
            Field::Seconds => value.is_some_and(|value| value.parse::<u64>().is_ok_and(|seconds| seconds >= 1)),
            Field::Problem => value.is_some_and(|value| value.starts_with("application/problem+json")),
        };
        if !holds {
            fail(format!("{name}: {value:?}"));
        }
    }
    let holds = match &step.expected_body {
        None => true,
        Some(Body::Is(expected)) => reply.body == *expected,
        Some(Body::SameAs(earlier)) => bodies.get(earlier) == Some(&reply.body),
        Some(Body::Bytes(length)) => reply.body.len() == *length,
    };
    if !holds {
        let start: String = reply.body.chars().take(60).collect();
        fail(format!("a body of {} bytes, {start:?}", reply.body.len()));
    }
    if !step.json.is_empty() {
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap_or_default();
        for (name, expected) in &step.json {
            if body.get(name) != Some(expected) {
                fail(format!("body.{name}: {:?} (expected {expected})", body.get(name)));
            }
        }
    }
    if step.runs.is_some_and(|expected| expected != runs) {
        fail(format!("handler ran {runs} times (expected {})", step.runs.unwrap_or_default()));
    }
    failures
}

/// Runs `vector` on a fresh fixture (its count at zero) served by
/// `target` with `config`; what failed, if anything.
async fn run<T: ServeTarget>(
    target: &T,
    setting: &Setting,
    clients: &Clients,
    vector: &Vector,
    config: LayerConfig,
) -> Vec<String> {
    let runs = Counter::default();
    let served = Server::start(target, config, fixture(&runs)).await;
    let base = served.base.as_str();
    let (mut failures, mut bodies) = (Vec::new(), HashMap::new());
    let mut steps = vector.steps.iter().peekable();
    while let Some(step) = steps.next() {
        if !step.after.is_zero() {
            setting.pass(step.after).await;
        }
        let mut answered = Vec::new();
        match steps.next_if(|next| next.concurrent) {
            Some(next) => {
                let before = runs.get();
                let (pending, ()) = tokio::join!(clients.send(base, step), async {
                    runs.reach(before + 1, Duration::from_secs(10), "the pending step's handler runs").await;
                    answered.push((next, clients.send(base, next).await));
                });
                answered.insert(0, (step, pending));
            }
            None => answered.push((step, clients.send(base, step).await)),
        }
        let count = clients.runs(base).await;
        for (step, reply) in answered {
            failures.extend(check(step, &reply, count, &bodies));
            bodies.insert(step.id, reply.body);
        }
    }
    served.stop().await;
    failures
}

/// The layer's settings for a run of `vector` named `name`: `LayerConfig`'s
/// defaults in a scope of the run's own (the keys are the vectors', and a
/// vector runs more than once on one backend), with the short TTL the
/// vector asks of its target.
fn defaults(setting: &Setting, vector: &Vector, name: &str) -> LayerConfig {
    let scope = setting.key(&format!("{}-{name}", vector.id));
    let config = LayerConfig::scoped(move |_| Some(scope.clone()));
    if vector.short_ttl {
        config.ttl(SHORT_TTL)
    } else {
        config
    }
}

/// The public conformance vectors of the `Idempotency-Key` draft, `core`
/// and `profile`: every vector, with the layer's defaults and, for a
/// profile vector met under a setting, under it; prints each result and the
/// score, then checks that every core vector passes and every profile
/// vector claimed passes as claimed.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn draft_vectors<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    draft_vectors_on(&Tower(backend), setting).await;
}

/// The vectors of [`draft_vectors`] on `target`: the same contract behind
/// another server (an actix-web middleware, say). `setting` names the
/// keys (each vector's in a scope of its own) and lets time pass for the
/// target's backend.
///
/// The fixture it serves counts each run of a `POST` route: `POST /echo`
/// answers 201 with the request's body and `Content-Type`
/// (`application/octet-stream` if none); `POST /status/{code}` answers
/// `code` with `Content-Type: text/plain` and `status:{code}`; `POST
/// /slow?ms=N` sleeps N ms, then answers 200 `slept:N`; `POST
/// /large?bytes=N` answers 200 with N bytes `x`,
/// `application/octet-stream`; `GET /counter` answers `{"count": <runs>}`,
/// `application/json`, without a run.
///
/// # Panics
/// When the target answers otherwise.
pub async fn draft_vectors_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let clients = Clients::new();
    let (mut core, mut profile, mut profile_by_default, mut unmet) = (0, 0, 0, Vec::new());
    let vectors = vectors();
    for vector in &vectors {
        let by_default = run(target, setting, &clients, vector, defaults(setting, vector, "default")).await;
        let (claimed, under) = match vector.setting {
            Some((name, set)) => {
                (run(target, setting, &clients, vector, set(defaults(setting, vector, "set"))).await, name)
            }
            None if vector.short_ttl => (by_default.clone(), "ttl(2 s), the suite's short-ttl capability"),
            None => (by_default.clone(), "the defaults"),
        };
        let verdict = if claimed.is_empty() { "pass".to_owned() } else { format!("FAIL: {claimed:?}") };
        let otherwise = if vector.setting.is_some() { format!("; by default {by_default:?}") } else { String::new() };
        eprintln!("draft vector {} under {under}: {verdict}{otherwise}", vector.id);
        match vector.tier {
            Tier::Core => core += usize::from(claimed.is_empty()),
            Tier::Profile => {
                profile += usize::from(claimed.is_empty());
                profile_by_default += usize::from(by_default.is_empty());
            }
        }
        if !claimed.is_empty() {
            unmet.push((vector.id, claimed));
        }
    }
    let total = |tier| vectors.iter().filter(|vector| vector.tier == tier).count();
    eprintln!(
        "draft vectors: core {core}/{}, profile {profile}/{} (by default {profile_by_default}/{})",
        total(Tier::Core),
        total(Tier::Profile),
        total(Tier::Profile)
    );
    assert_eq!((total(Tier::Core), total(Tier::Profile)), (11, 9), "the suite's vectors, every one");
    assert!(unmet.is_empty(), "vectors claimed and not met: {unmet:#?}");
    assert_eq!((core, profile), (11, 9));
}
