//! The payments API: its messages, and its service's server and client
//! glue, written with prost's derives and tonic's codegen-free API — what
//! `tonic-prost-build` would generate from this `.proto`, without
//! `protoc` at build time:
//!
//! ```proto
//! syntax = "proto3";
//! package payments.v1;
//! service Payments { rpc Charge(ChargeRequest) returns (ChargeReply); }
//! message ChargeRequest {
//!   string request_id = 1;   // AIP-155: a UUID4, the call's idempotency key
//!   string account = 2;
//!   int64 amount_cents = 3;
//!   string currency = 4;
//! }
//! message ChargeReply { string charge_id = 1; int64 amount_cents = 2; }
//! ```
//!
//! Shared by the example, the crate's tests and the bench (`#[path]`),
//! with what all three build alike: a charge, the guarded method, a
//! server on a loopback port.
#![allow(dead_code, reason = "each user takes a part")]

use idemkv_tonic::Method;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codegen::{http, Body, BoxFuture, StdError};
use tonic::{Request, Response, Status};

/// A charge of an account.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChargeRequest {
    /// AIP-155: a UUID4 that names this request; the same on a retry.
    #[prost(string, tag = "1")]
    pub request_id: String,
    /// The account charged.
    #[prost(string, tag = "2")]
    pub account: String,
    /// How much, in cents.
    #[prost(int64, tag = "3")]
    pub amount_cents: i64,
    /// ISO 4217.
    #[prost(string, tag = "4")]
    pub currency: String,
}

/// The charge made.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChargeReply {
    /// The charge's id.
    #[prost(string, tag = "1")]
    pub charge_id: String,
    /// How much, in cents.
    #[prost(int64, tag = "2")]
    pub amount_cents: i64,
}

/// The service's name.
pub const SERVICE: &str = "payments.v1.Payments";

/// The path of `Charge`.
pub const CHARGE: &str = "/payments.v1.Payments/Charge";

/// A charge of `amount_cents` (EUR) to account `acme`, named
/// `request_id`.
pub fn charge_request(request_id: &str, amount_cents: i64) -> ChargeRequest {
    ChargeRequest {
        request_id: request_id.to_owned(),
        account: "acme".to_owned(),
        amount_cents,
        currency: "EUR".to_owned(),
    }
}

/// The call of [`charge_request`], its tenant in the `x-account` metadata
/// (in a real service, from authentication).
pub fn charge(request_id: &str, amount_cents: i64) -> Request<ChargeRequest> {
    let mut request = Request::new(charge_request(request_id, amount_cents));
    request.metadata_mut().insert("x-account", tonic::metadata::MetadataValue::from_static("acme"));
    request
}

/// `Charge` as the face guards it: keyed by its AIP-155 `request_id`.
pub fn charge_method() -> Method<ChargeRequest> {
    Method::new(CHARGE).request_id("request_id", |request: &ChargeRequest| &request.request_id)
}

/// Serves `service` on a loopback port chosen by the OS, on the current
/// runtime: its URL, and the server's task.
///
/// # Errors
/// The port's, if none can be bound.
pub async fn serve<T: Payments>(
    service: T,
) -> std::io::Result<(String, tokio::task::JoinHandle<Result<(), tonic::transport::Error>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let server = tonic::transport::Server::builder().add_service(PaymentsServer::new(service));
    Ok((url, tokio::spawn(server.serve_with_incoming(incoming))))
}

/// The service, as the generated trait would have it.
pub trait Payments: Send + Sync + 'static {
    /// Charges an account.
    fn charge(
        &self,
        request: Request<ChargeRequest>,
    ) -> impl Future<Output = Result<Response<ChargeReply>, Status>> + Send;
}

/// The server of a [`Payments`] service: a tower service for
/// `tonic::transport::Server::add_service`.
pub struct PaymentsServer<T> {
    inner: Arc<T>,
}

impl<T> PaymentsServer<T> {
    /// Serves `inner`.
    pub fn new(inner: T) -> Self {
        PaymentsServer { inner: Arc::new(inner) }
    }
}

impl<T> Clone for PaymentsServer<T> {
    fn clone(&self) -> Self {
        PaymentsServer { inner: Arc::clone(&self.inner) }
    }
}

impl<T> tonic::server::NamedService for PaymentsServer<T> {
    const NAME: &'static str = SERVICE;
}

/// `Charge` as tonic's unary service.
struct ChargeService<T>(Arc<T>);

impl<T: Payments> tonic::server::UnaryService<ChargeRequest> for ChargeService<T> {
    type Response = ChargeReply;
    type Future = BoxFuture<Response<ChargeReply>, Status>;

    fn call(&mut self, request: Request<ChargeRequest>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.charge(request).await })
    }
}

impl<T, B> tonic::codegen::Service<http::Request<B>> for PaymentsServer<T>
where
    T: Payments,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != CHARGE {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(ChargeService(inner), request).await)
        })
    }
}

/// A client of the service.
#[derive(Clone)]
pub struct PaymentsClient {
    inner: tonic::client::Grpc<tonic::transport::Channel>,
}

impl PaymentsClient {
    /// Connects to `url` (`http://127.0.0.1:50051`).
    pub async fn connect(url: String) -> Result<Self, tonic::transport::Error> {
        let channel = tonic::transport::Endpoint::from_shared(url)?.connect().await?;
        Ok(PaymentsClient { inner: tonic::client::Grpc::new(channel) })
    }

    /// Calls `Charge`.
    pub async fn charge(&mut self, request: Request<ChargeRequest>) -> Result<Response<ChargeReply>, Status> {
        self.inner.ready().await.map_err(|error| Status::unknown(format!("channel not ready: {error}")))?;
        let path = http::uri::PathAndQuery::from_static(CHARGE);
        self.inner.unary(request, path, tonic_prost::ProstCodec::default()).await
    }
}
