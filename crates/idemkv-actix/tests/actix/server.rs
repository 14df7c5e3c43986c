//! An actix-web server on a free loopback port behind the middleware,
//! with routes that count their runs.

use actix_web::body::MessageBody;
use actix_web::dev::{ServerHandle, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, Error, HttpResponse, HttpServer};
use idemkv::conformance::http::harness::Counter;
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Durability, Store};
use idemkv_actix::Idempotency;
use std::time::Duration;

/// How long `/stream` pauses between its two chunks.
pub const SLOW: Duration = Duration::from_millis(1500);

/// A served app, stopped by [`Actix::stop`].
pub struct Actix {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The store behind the middleware.
    pub store: Store,
    /// The runs of every route.
    pub runs: Counter,
    handle: ServerHandle,
    _dir: tempfile::TempDir,
}

impl Actix {
    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.handle.stop(true).await;
    }
}

async fn payment(runs: web::Data<Counter>, body: web::Bytes) -> HttpResponse {
    let run = runs.bump();
    HttpResponse::Created()
        .insert_header(("x-run", run.to_string()))
        .content_type("text/plain; charset=utf-8")
        .body(format!("payment {run} of {} bytes", body.len()))
}

/// Streams `first`, then, a [`SLOW`] later, `second`.
async fn stream() -> HttpResponse {
    let chunks = futures_util::stream::unfold(0_u8, |sent| async move {
        match sent {
            0 => Some((Ok::<_, std::io::Error>(web::Bytes::from_static(b"first ")), 1)),
            1 => {
                actix_web::rt::time::sleep(SLOW).await;
                Some((Ok(web::Bytes::from_static(b"second")), 2))
            }
            _ => None,
        }
    });
    HttpResponse::Ok().streaming(chunks)
}

/// The routes of the scenarios.
pub fn routes(config: &mut web::ServiceConfig) {
    config.route("/payments", web::post().to(payment)).route("/stream", web::get().to(stream));
}

/// A store in a temporary directory, buffered (the scenarios need no
/// durability).
pub fn store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    (store, dir)
}

/// Serves [`routes`] behind the middleware over a new store with `config`,
/// on two workers: one layer for both, as a service would.
pub async fn start(config: LayerConfig) -> Actix {
    let (store, dir) = store();
    let runs = Counter::default();
    let layer = IdempotencyLayer::new(store.clone(), config);
    let counted = runs.clone();
    let (base, handle) = serve(move || {
        App::new()
            .app_data(web::Data::new(counted.clone()))
            .wrap(Idempotency::from_layer(layer.clone()))
            .configure(routes)
    });
    Actix { base, store, runs, handle, _dir: dir }
}

/// Serves the app `app` builds on an actix-web server of two workers, on
/// a free loopback port, spawned on the current runtime: its base URL
/// (`http://127.0.0.1:<port>`) and the handle that stops it.
pub fn serve<F, T, B>(app: F) -> (String, ServerHandle)
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<ServiceRequest, Config = (), Response = ServiceResponse<B>, Error = Error, InitError = ()>
        + 'static,
    B: MessageBody + 'static,
{
    let server = HttpServer::new(app).workers(2).disable_signals().bind(("127.0.0.1", 0)).expect("bind");
    let base = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    drop(actix_web::rt::spawn(server));
    (base, handle)
}
