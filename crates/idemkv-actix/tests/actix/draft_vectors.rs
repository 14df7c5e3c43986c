//! The public conformance vectors of the `Idempotency-Key` draft (the
//! anyonce suite's `core` and `profile` tiers), as idemkv runs them on
//! the tower layer, run on the middleware: the suite's fixture routes on
//! an actix-web server behind it, each vector with the layer's defaults
//! and under the setting docs/http.md documents for it.

use crate::server::store;
use actix_web::dev::ServerHandle;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use idemkv::conformance::http::harness::Counter;
use idemkv::conformance::http::{draft_vectors_on, VectorTarget};
use idemkv::conformance::Setting;
use idemkv::http::LayerConfig;
use idemkv::Store;
use idemkv_actix::Idempotency;
use std::collections::HashMap;
use std::time::Duration;

type Query = web::Query<HashMap<String, String>>;

fn number(query: &Query, name: &str) -> u64 {
    query.get(name).and_then(|value| value.parse().ok()).unwrap_or(0)
}

async fn echo(runs: web::Data<Counter>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    runs.bump();
    let content_type = request.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok());
    HttpResponse::Created().content_type(content_type.unwrap_or("application/octet-stream").to_owned()).body(body)
}

async fn status(runs: web::Data<Counter>, code: web::Path<u16>) -> HttpResponse {
    runs.bump();
    let code = code.into_inner();
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).content_type("text/plain").body(format!("status:{code}"))
}

async fn slow(runs: web::Data<Counter>, query: Query) -> HttpResponse {
    runs.bump();
    let ms = number(&query, "ms");
    actix_web::rt::time::sleep(Duration::from_millis(ms)).await;
    HttpResponse::Ok().content_type("text/plain; charset=utf-8").body(format!("slept:{ms}"))
}

async fn large(runs: web::Data<Counter>, query: Query) -> HttpResponse {
    runs.bump();
    let bytes = vec![b'x'; usize::try_from(number(&query, "bytes")).unwrap_or(0)];
    HttpResponse::Ok().content_type("application/octet-stream").body(bytes)
}

async fn counter(runs: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(format!(r#"{{"count": {}}}"#, runs.get()))
}

/// The middleware over one store, on an actix-web server per vector.
struct Actix(Store);

impl VectorTarget for Actix {
    type Running = ServerHandle;

    async fn serve(&self, config: LayerConfig, runs: Counter) -> (String, ServerHandle) {
        let idempotency = Idempotency::new(self.0.clone(), config);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(runs.clone()))
                .wrap(idempotency.clone())
                .route("/echo", web::post().to(echo))
                .route("/status/{code}", web::post().to(status))
                .route("/slow", web::post().to(slow))
                .route("/large", web::post().to(large))
                .route("/counter", web::get().to(counter))
        })
        .workers(2)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .expect("bind");
        let base = format!("http://{}", server.addrs()[0]);
        let server = server.run();
        let handle = server.handle();
        drop(actix_web::rt::spawn(server));
        (base, handle)
    }

    async fn stop(&self, running: ServerHandle) {
        running.stop(true).await;
    }
}

#[actix_web::test]
async fn the_drafts_vectors_pass_on_the_middleware() {
    let (store, _dir) = store();
    draft_vectors_on(&Actix(store), &Setting::new("actix-draft-vectors")).await;
}
