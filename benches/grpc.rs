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
//! moves much less than its rate. The rows take turns in short slices so
//! that the machine's noise falls on all of them alike.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench grpc            # 5 s per row
//! IDEMKV_BENCH_SECONDS=0.5 cargo bench -p idemkv-bench --bench grpc
//! ```

mod support;

#[path = "../crates/idemkv-tonic/examples/grpc_payments/api.rs"]
mod api;

use api::{ChargeReply, ChargeRequest, Payments, PaymentsClient, PaymentsServer, CHARGE};
use idemkv::{Config, Durability, Store};
use idemkv_tonic::{Idempotency, Method};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ratio;
use tonic::{Request, Response, Status};

const CLIENTS: usize = 32;

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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let server = tonic::transport::Server::builder().add_service(PaymentsServer::new(service));
    tokio::spawn(async move { server.serve_with_incoming(incoming).await.expect("serve") });
    url
}

/// The service behind the face over a store of `durability` in `dir`.
fn guarded(dir: &std::path::Path, durability: Durability) -> Guarded {
    let store = Store::open(dir, Config::new().durability(durability)).expect("open");
    Guarded {
        idempotency: Idempotency::new(store, |_, _| Some(b"bench".to_vec())),
        charge: Method::new(CHARGE).request_id("request_id", |request: &ChargeRequest| &request.request_id),
    }
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

/// Calls `client` from `CLIENTS` tasks for `seconds` and adds to `tally`;
/// `replay` sends one `request_id` per task again and again, otherwise
/// each call's is new (`slice` keeps the slices' ids apart).
async fn drive(client: &PaymentsClient, seconds: f64, replay: bool, slice: usize, tally: &mut Tally) {
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), support::cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (mut client, count) = (client.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    let serial = if replay { 0 } else { n + 1 };
                    let request_id = format!("{task:08x}-{slice:04x}-4000-8000-{serial:012x}");
                    let request = ChargeRequest {
                        request_id,
                        account: "acme".into(),
                        amount_cents: 1000,
                        currency: "EUR".into(),
                    };
                    let answer = client.charge(Request::new(request)).await.expect("charged");
                    assert_eq!(answer.get_ref().amount_cents, 1000);
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    tally.seconds += started.elapsed().as_secs_f64();
    tally.cpu_seconds += support::cpu_seconds() - cpu_started;
    tally.calls += count.load(Ordering::Relaxed);
}

/// Calls `service`'s `charge` in process, no network or codec between,
/// from `CLIENTS` tasks for `seconds`: what the face itself costs a call.
async fn in_process<T: Payments>(service: &Arc<T>, seconds: f64, replay: bool) -> Tally {
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), support::cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (service, count) = (Arc::clone(service), Arc::clone(&count));
            tokio::spawn(async move {
                let mut n = 0u64;
                // Each task watches the time itself: a call that is always
                // ready never lets a timer fire.
                while Instant::now() < until {
                    let serial = if replay { 0 } else { n + 1 };
                    let request_id = format!("{task:08x}-ffff-4000-8000-{serial:012x}");
                    let request = ChargeRequest {
                        request_id,
                        account: "acme".into(),
                        amount_cents: 1000,
                        currency: "EUR".into(),
                    };
                    let answer = service.charge(Request::new(request)).await.expect("charged");
                    assert_eq!(answer.get_ref().amount_cents, 1000);
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    Tally {
        calls: count.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: support::cpu_seconds() - cpu_started,
    }
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
        let slices = 10;
        let slice_seconds = seconds / f64::from(slices);
        let mut rows: Vec<Tally> = (0..4).map(|_| Tally::default()).collect();
        for slice in 0..10 {
            drive(&clients[0], slice_seconds, false, slice, &mut rows[0]).await;
            drive(&clients[1], slice_seconds, false, slice, &mut rows[1]).await;
            drive(&clients[1], slice_seconds, true, slice, &mut rows[2]).await;
            drive(&clients[2], slice_seconds, false, slice, &mut rows[3]).await;
        }
        println!(
            "{CLIENTS} unary calls in flight on one HTTP/2 channel, {seconds} s per row in {slices} interleaved slices, loopback, server and client in one process"
        );
        let names = ["bare tonic service", "face, Buffered, new keys", "face, Buffered, replays", "face, Sync, new keys"];
        for (name, row) in names.iter().zip(&rows) {
            print(name, row, &rows[0]);
        }

        println!("in process (the service's charge called directly, no network, no codec):");
        let in_process_dir = tempfile::tempdir().expect("tempdir");
        let (bare, face) = (Arc::new(Bare), Arc::new(guarded(in_process_dir.path(), Durability::Buffered)));
        let bare_row = in_process(&bare, seconds, false).await;
        let fresh = in_process(&face, seconds, false).await;
        let replays = in_process(&face, seconds, true).await;
        print("bare handler", &bare_row, &bare_row);
        print("face, Buffered, new keys", &fresh, &bare_row);
        print("face, Buffered, replays", &replays, &bare_row);
    });
}
