//! Unary gRPC calls per second through the idempotency face
//! (`idemkv-tonic`) against the same tonic service without it, on
//! loopback, in one run: a tonic server and a tonic client (one HTTP/2
//! channel) in one process, `CLIENTS` calls in flight. Rows: the bare
//! service; the face over the embedded store (Buffered) with every call a
//! new AIP-155 `request_id` (each runs the handler and keeps its answer);
//! the same with one `request_id` per client sent again and again
//! (replays: the handler does not run, the kept message and metadata are
//! sent back); and new keys on a Sync store (each answer on disk before
//! it is sent).
//!
//! Beside each rate, the CPU time the whole process spent per call (all
//! its threads, server and client, from `/proc/self/stat`) and what the
//! face adds to the bare service's: on a shared machine the CPU a call
//! moves much less than its rate. These rows take turns in short slices
//! so that the machine's noise falls on all of them alike.
//!
//! Then the same without network or codec, the service's `charge` called
//! in process (the bare handler; the face, Buffered, new keys; its
//! replays): what the face itself costs a call. These rows run one after
//! another, each for the whole time, not in slices.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench grpc            # 5 s per row
//! IDEMKV_BENCH_SECONDS=0.5 cargo bench -p idemkv-bench --bench grpc
//! ```

mod support;

#[path = "../crates/idemkv-tonic/examples/grpc_payments/api.rs"]
mod api;

use api::{charge_method, charge_request, ChargeReply, ChargeRequest, Payments, PaymentsClient};
use idemkv::{Config, Durability, Store};
use idemkv_tonic::{Idempotency, Method};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ratio;
use tonic::{Request, Response, Status};

const CLIENTS: usize = 32;

/// The slices each loopback row's time is cut into.
const SLICES: u16 = 10;

/// The loopback rows, in the order they take turns: name, the server
/// called (0 the bare service, 1 the face over a Buffered store, 2 over a
/// Sync one), and whether one `request_id` per client is sent again and
/// again (replays) rather than a new one each call.
const ROWS: [(&str, usize, bool); 4] = [
    ("bare tonic service", 0, false),
    ("face, Buffered, new keys", 1, false),
    ("face, Buffered, replays", 1, true),
    ("face, Sync, new keys", 2, false),
];

/// A call's answer.
type Answer = Result<Response<ChargeReply>, Status>;

/// The handler: a reply and one metadata entry, as a charge would.
fn reply(request: &ChargeRequest) -> Response<ChargeReply> {
    let mut reply = Response::new(ChargeReply { charge_id: "ch_1".into(), amount_cents: request.amount_cents });
    reply.metadata_mut().insert("x-ledger-entry", tonic::metadata::MetadataValue::from_static("1"));
    reply
}

/// The service without the face.
struct Bare;

impl Payments for Bare {
    async fn charge(&self, request: Request<ChargeRequest>) -> Result<Response<ChargeReply>, Status> {
        Ok(reply(request.get_ref()))
    }
}

/// The service behind the face.
struct Guarded {
    idempotency: Idempotency<Store>,
    charge: Method<ChargeRequest>,
}

impl Payments for Guarded {
    async fn charge(&self, request: Request<ChargeRequest>) -> Result<Response<ChargeReply>, Status> {
        self.idempotency.unary(&self.charge, request, |request| async move { Ok(reply(request.get_ref())) }).await
    }
}

/// Serves `service` on a loopback port; its URL.
async fn serve<T: Payments>(service: T) -> String {
    api::serve(service).await.expect("bind").0
}

/// The service behind the face over a store of `durability` in `dir`.
fn guarded(dir: &std::path::Path, durability: Durability) -> Guarded {
    let store = Store::open(dir, Config::new().durability(durability)).expect("open");
    Guarded { idempotency: Idempotency::new(store, |_, _| Some(b"bench".to_vec())), charge: charge_method() }
}

/// Calls, wall time and CPU time of one row, summed over its slices.
#[derive(Default)]
struct Tally {
    calls: u64,
    seconds: f64,
    cpu_seconds: f64,
}

impl Tally {
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    fn rate(&self) -> f64 {
        self.calls as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    #[expect(clippy::cast_precision_loss, reason = "a mean")]
    fn cpu_micros(&self) -> f64 {
        self.cpu_seconds * 1e6 / (self.calls.max(1) as f64)
    }
}

/// Calls from `CLIENTS` tasks for `seconds` and adds to `tally`: each
/// task has a clone of `caller`, and `call` makes one call with it and
/// gives it back. `replay` sends one `request_id` per task again and
/// again, otherwise each call's is new (`slice` keeps the slices' ids
/// apart).
async fn drive<C, Call, F>(caller: &C, call: Call, seconds: f64, replay: bool, slice: usize, tally: &mut Tally)
where
    C: Clone + Send + 'static,
    Call: Fn(C, Request<ChargeRequest>) -> F + Copy + Send + 'static,
    F: Future<Output = (C, Answer)> + Send + 'static,
{
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), support::cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (mut caller, count) = (caller.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let mut n = 0u64;
                // Each task watches the time itself: a call that is always
                // ready never lets a timer fire.
                while Instant::now() < until {
                    let serial = if replay { 0 } else { n + 1 };
                    let request_id = format!("{task:08x}-{slice:04x}-4000-8000-{serial:012x}");
                    let (returned, answer) = call(caller, Request::new(charge_request(&request_id, 1000))).await;
                    caller = returned;
                    assert_eq!(answer.expect("charged").get_ref().amount_cents, 1000);
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    tally.seconds += started.elapsed().as_secs_f64();
    tally.cpu_seconds += support::cpu_seconds() - cpu_started;
    tally.calls += count.load(Ordering::Relaxed);
}

/// One call over the network.
async fn over_network(mut client: PaymentsClient, request: Request<ChargeRequest>) -> (PaymentsClient, Answer) {
    let answer = client.charge(request).await;
    (client, answer)
}

/// One call of `service`'s `charge` in process, no network or codec
/// between: what the face itself costs a call.
async fn in_process<T: Payments>(service: Arc<T>, request: Request<ChargeRequest>) -> (Arc<T>, Answer) {
    let answer = service.charge(request).await;
    (service, answer)
}

/// `service` called in process for `seconds` (the slice `0xffff`).
async fn in_process_row<T: Payments>(service: &Arc<T>, seconds: f64, replay: bool) -> Tally {
    let mut tally = Tally::default();
    drive(service, in_process, seconds, replay, 0xffff, &mut tally).await;
    tally
}

fn print(name: &str, row: &Tally, bare: &Tally) {
    println!(
        "{name:<30} {:>8.0} calls/s  ×bare {:.2}  CPU {:>6.1} µs a call  ×bare {:.2}  +{:.1} µs",
        row.rate(),
        ratio(row.rate(), bare.rate()),
        row.cpu_micros(),
        ratio(row.cpu_micros(), bare.cpu_micros()),
        row.cpu_micros() - bare.cpu_micros()
    );
}

fn main() {
    let seconds = support::seconds(5.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (buffered_dir, sync_dir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
        let urls = [
            serve(Bare).await,
            serve(guarded(buffered_dir.path(), Durability::Buffered)).await,
            serve(guarded(sync_dir.path(), Durability::Sync)).await,
        ];
        let mut clients = Vec::new();
        for url in &urls {
            clients.push(PaymentsClient::connect(url.clone()).await.expect("connect"));
        }
        let slice_seconds = seconds / f64::from(SLICES);
        let mut rows: Vec<Tally> = ROWS.iter().map(|_| Tally::default()).collect();
        for slice in 0..SLICES {
            for ((_, server, replay), tally) in ROWS.iter().zip(&mut rows) {
                drive(&clients[*server], over_network, slice_seconds, *replay, usize::from(slice), tally).await;
            }
        }
        println!(
            "{CLIENTS} unary calls in flight on one HTTP/2 channel, {seconds} s per row in {SLICES} interleaved slices, loopback, server and client in one process"
        );
        for ((name, _, _), row) in ROWS.iter().zip(&rows) {
            print(name, row, &rows[0]);
        }

        println!("in process (the service's charge called directly, no network, no codec):");
        let in_process_dir = tempfile::tempdir().expect("tempdir");
        let (bare, face) = (Arc::new(Bare), Arc::new(guarded(in_process_dir.path(), Durability::Buffered)));
        let bare_row = in_process_row(&bare, seconds, false).await;
        let fresh = in_process_row(&face, seconds, false).await;
        let replays = in_process_row(&face, seconds, true).await;
        print("bare handler", &bare_row, &bare_row);
        print("face, Buffered, new keys", &fresh, &bare_row);
        print("face, Buffered, replays", &replays, &bare_row);
    });
}
