//! The middleware as a target of the HTTP conformance scenarios
//! (`idemkv::conformance::http::ServeTarget`): a scenario's fixture
//! served by one actix-web handler behind [`Idempotency`] on a real
//! actix-web server, arrivals counted by a middleware in front of it.

use crate::server::serve;
use actix_web::dev::{ServerHandle, Service};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse};
use idemkv::conformance::http::{
    Fixture, FixtureAnswer, FixtureBody, FixtureRequest, ServeTarget, FIXTURE_BODY_BYTES_MAX,
};
use idemkv::http::{Attempt, IdempotencyBackend, LayerConfig, NotSpent, ResourceHold};
use idemkv_actix::Idempotency;

/// The middleware over a backend, on an actix-web server of two workers.
pub struct Actix<B>(pub B);

/// A served fixture: stopped by [`ServeTarget::stop`], or when dropped.
pub struct Running(Option<ServerHandle>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            // The stop command goes out at once; its completion is not
            // awaited here.
            drop(handle.stop(false));
        }
    }
}

impl<B: IdempotencyBackend + Clone> ServeTarget for Actix<B> {
    type Backend = B;
    type Running = Running;

    fn backend(&self) -> &B {
        &self.0
    }

    async fn serve(&self, config: LayerConfig, fixture: Fixture) -> (String, Running) {
        let idempotency = Idempotency::new(self.0.clone(), config);
        let fixture = web::Data::new(fixture);
        let (base, handle) = serve(move || {
            let counted = fixture.clone();
            App::new()
                .app_data(fixture.clone())
                .app_data(web::PayloadConfig::new(FIXTURE_BODY_BYTES_MAX))
                .default_service(web::to(answer))
                .wrap(idempotency.clone())
                // The last wrapped runs first: arrivals are counted before
                // the contract sees them.
                .wrap_fn(move |request, service| {
                    counted.arrive();
                    service.call(request)
                })
        });
        (base, Running(Some(handle)))
    }

    async fn stop(&self, mut running: Running) {
        if let Some(handle) = running.0.take() {
            handle.stop(true).await;
        }
    }
}

/// The request as the fixture sees it, in `http` 1 types (actix-web 4
/// speaks `http` 0.2: the bytes are the same).
fn fixture_request(request: &HttpRequest, body: web::Bytes) -> Result<FixtureRequest, String> {
    let method = http::Method::from_bytes(request.method().as_str().as_bytes()).map_err(|error| error.to_string())?;
    let uri: http::Uri = request.uri().to_string().parse().map_err(|error: http::uri::InvalidUri| error.to_string())?;
    let mut converted = FixtureRequest::new(method, uri, body);
    for (name, value) in request.headers() {
        let name = http::HeaderName::from_bytes(name.as_str().as_bytes()).map_err(|error| error.to_string())?;
        let value = http::HeaderValue::from_bytes(value.as_bytes()).map_err(|error| error.to_string())?;
        converted.headers.append(name, value);
    }
    converted.attempt = request.extensions().get::<Attempt>().cloned();
    converted.hold = request.extensions().get::<ResourceHold>().cloned();
    Ok(converted)
}

/// The fixture's answer as an actix response.
fn response_of(answer: FixtureAnswer) -> HttpResponse {
    let status = StatusCode::from_u16(answer.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = HttpResponse::build(status);
    let mut response = match answer.body {
        FixtureBody::Full(bytes) => builder.body(bytes),
        FixtureBody::Streamed(chunks) => builder.streaming(chunks),
    };
    let headers = response.headers_mut();
    for (name, value) in &answer.headers {
        let name = HeaderName::from_bytes(name.as_str().as_bytes());
        let value = HeaderValue::from_bytes(value.as_bytes());
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.append(name, value);
        }
    }
    if answer.not_spent {
        response.extensions_mut().insert(NotSpent);
    }
    response
}

/// Every request: the fixture's answer.
async fn answer(fixture: web::Data<Fixture>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    match fixture_request(&request, body) {
        Ok(converted) => response_of(fixture.answer(converted).await),
        Err(error) => HttpResponse::BadRequest().body(error),
    }
}
