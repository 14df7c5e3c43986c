//! A real tonic server on a loopback port chosen by the OS, its `Charge`
//! handler behind the idempotency face, the handler's behaviour given by
//! each test; and a real tonic client.

pub use crate::api::charge;
use crate::api::{charge_method, ChargeReply, ChargeRequest, Payments, PaymentsClient};
use idemkv::backend::AnyBackend;
use idemkv_tonic::{Idempotency, Method};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// What a handler answers.
pub type Answer = Result<Response<ChargeReply>, Status>;

/// A handler's answer to come.
pub type Answering = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A test's handler.
pub type Handler = Arc<dyn Fn(Request<ChargeRequest>) -> Answering + Send + Sync>;

/// The handler `f`, boxed.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<ChargeRequest>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    Arc::new(move |request| -> Answering { Box::pin(f(request)) })
}

/// The service under test: the face over a backend, `Charge` keyed by its
/// AIP-155 `request_id`, scoped by the `x-account` metadata.
struct Service {
    idempotency: Idempotency<AnyBackend>,
    charge: Method<ChargeRequest>,
    handler: Handler,
    cancelled: Arc<tokio::sync::Notify>,
}

impl Payments for Service {
    async fn charge(&self, request: Request<ChargeRequest>) -> Answer {
        let handler = Arc::clone(&self.handler);
        let mut unanswered = Unanswered(Some(Arc::clone(&self.cancelled)));
        let answer = self.idempotency.unary(&self.charge, request, move |request| handler(request)).await;
        unanswered.0 = None;
        answer
    }
}

/// Tells its `Notify` when it is dropped still holding it: a call's
/// future dropped before it answered (tonic's server drops a cancelled
/// call's future).
struct Unanswered(Option<Arc<tokio::sync::Notify>>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(cancelled) = self.0.take() {
            cancelled.notify_one();
        }
    }
}

/// The face as the tests use it: scoped by `x-account`.
pub fn face(backend: AnyBackend) -> Idempotency<AnyBackend> {
    Idempotency::new(backend, |metadata, _| Some(metadata.get("x-account")?.as_bytes().to_vec()))
}

/// A running server.
pub struct Served {
    pub url: String,
    /// Notified when the server drops a call before it answered.
    pub cancelled: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Served {
    /// Its URL; the server then lives as long as its runtime.
    fn detach(mut self) -> String {
        self.task.take();
        self.url.clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Serves `handler` behind `idempotency` on the current runtime.
pub async fn serve(idempotency: Idempotency<AnyBackend>, handler: Handler) -> Served {
    serve_method(idempotency, charge_method(), handler).await
}

/// Serves `handler` behind `idempotency` as `charge` says.
pub async fn serve_method(
    idempotency: Idempotency<AnyBackend>,
    charge: Method<ChargeRequest>,
    handler: Handler,
) -> Served {
    let cancelled = Arc::new(tokio::sync::Notify::new());
    let service = Service { idempotency, charge, handler, cancelled: Arc::clone(&cancelled) };
    let (url, task) = crate::api::serve(service).await.expect("bind");
    Served { url, cancelled, task: Some(task) }
}

/// A server on a runtime of its own, which [`Process::crash`] stops with
/// every task on it — the handlers' too — as a process that dies.
pub struct Process {
    pub url: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Process {
    /// Serves `handler` behind `idempotency` on a runtime of its own.
    pub async fn start(idempotency: Idempotency<AnyBackend>, handler: Handler) -> Process {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let served = runtime.spawn(serve(idempotency, handler)).await.expect("serve");
        Process { url: served.detach(), runtime: Some(runtime) }
    }

    /// Stops the runtime at once: every task on it is dropped where it
    /// stands, nothing finishes.
    pub fn crash(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.crash();
    }
}

/// A client of `url`.
pub async fn client(url: &str) -> PaymentsClient {
    PaymentsClient::connect(url.to_owned()).await.expect("connect")
}

/// A new UUID4, different at each call in this process.
pub fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |now| now.as_nanos());
    let low = u64::try_from(nanos % (1 << 48)).unwrap_or(0);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{low:012x}",
        n & 0xffff_ffff,
        (n >> 32) & 0xffff,
        n & 0xfff,
        std::process::id() & 0xfff
    )
}

/// A handler that counts its runs, answers a charge with the
/// `x-ledger-entry` metadata, and first waits for `gate` when given one
/// (telling `entered` it has started).
pub fn counting(runs: &Arc<AtomicU64>, gate: Option<Arc<Gate>>) -> Handler {
    let runs = Arc::clone(runs);
    handler(move |request| {
        let (runs, gate) = (Arc::clone(&runs), gate.clone());
        async move {
            let number = runs.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(gate) = gate {
                gate.entered.notify_one();
                gate.open.notified().await;
            }
            let charge = request.into_inner();
            let mut reply =
                Response::new(ChargeReply { charge_id: format!("ch_{number}"), amount_cents: charge.amount_cents });
            reply.metadata_mut().insert("x-ledger-entry", number.to_string().parse().expect("ascii"));
            Ok(reply)
        }
    })
}

/// Holds a handler mid-call until the test opens it.
#[derive(Default)]
pub struct Gate {
    pub entered: tokio::sync::Notify,
    pub open: tokio::sync::Notify,
}

/// Waits until `gate`'s handler has started (at most 10 s).
pub async fn entered(gate: &Gate) {
    tokio::time::timeout(Duration::from_secs(10), gate.entered.notified()).await.expect("the handler started");
}

/// Calls `charge(id, 1000)` at `url` from a task of its own, and waits
/// until its handler has entered `gate`; the call's task.
pub async fn first_call(url: &str, id: &str, gate: &Gate) -> tokio::task::JoinHandle<Answer> {
    let mut client = client(url).await;
    let request = charge(id, 1000);
    let call = tokio::spawn(async move { client.charge(request).await });
    entered(gate).await;
    call
}

/// Calls `charge(id, 1000)` again every `pause` while it is `ABORTED`
/// (for at most 10 s); its answer. Any other refusal panics with `what`.
pub async fn until_not_aborted(
    client: &mut PaymentsClient,
    id: &str,
    pause: Duration,
    what: &str,
) -> Response<ChargeReply> {
    let started = Instant::now();
    loop {
        match client.charge(charge(id, 1000)).await {
            Ok(reply) => return reply,
            Err(status) if status.code() == Code::Aborted && started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(pause).await;
            }
            Err(status) => panic!("{what}{status:?}"),
        }
    }
}

/// A handler whose `n`th run (from 1) answers `answer(n)`: a charge
/// `ch_n` when it is `Ok`.
pub fn by_run(runs: &Arc<AtomicU64>, answer: fn(u64) -> Result<(), Status>) -> Handler {
    let runs = Arc::clone(runs);
    handler(move |_request| {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            answer(run)?;
            Ok(Response::new(ChargeReply { charge_id: format!("ch_{run}"), amount_cents: 1000 }))
        }
    })
}

/// The `idempotent-replayed` metadata of `metadata`, if any.
pub fn replayed(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    Some(metadata.get(idemkv_tonic::REPLAYED_METADATA)?.to_str().ok()?.to_owned())
}
