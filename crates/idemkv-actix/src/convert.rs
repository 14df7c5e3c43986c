//! The boundary between actix-web 4 (`http` 0.2 types inside) and the
//! layer (`http` 1 types): method, URI, version, headers and the
//! [`NotSpent`] mark cross it; the bytes of names and values are the same
//! on both sides, so nothing is reinterpreted.

use crate::body::{pumped_response, RequestBody, ResponseBody};
use crate::HandlerFailed;
use actix_web::body::{BodyStream, BoxBody, MessageBody, SizedStream};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{StatusCode, Version};
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body::Body;
use http_body_util::BodyExt;
use idemkv::http::NotSpent;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The version of an actix request in `http` 1 terms.
fn version_of(version: Version) -> http::Version {
    match version {
        Version::HTTP_09 => http::Version::HTTP_09,
        Version::HTTP_10 => http::Version::HTTP_10,
        Version::HTTP_2 => http::Version::HTTP_2,
        Version::HTTP_3 => http::Version::HTTP_3,
        _ => http::Version::HTTP_11,
    }
}

/// The head of `request` in `http` 1 types, over `body`.
///
/// # Errors
/// When the head does not parse as `http` 1 (it did as `http` 0.2, whose
/// grammar is the same: not expected).
pub fn request_of(request: &HttpRequest, body: RequestBody) -> Result<http::Request<RequestBody>, http::Error> {
    let mut builder = http::Request::builder()
        .method(request.method().as_str())
        .uri(request.uri().to_string())
        .version(version_of(request.version()));
    for (name, value) in request.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    builder.body(body)
}

/// The actix handler's answer in `http` 1 types, its body pumped from the
/// worker (actix bodies may not leave their thread), marked [`NotSpent`]
/// when the handler marked it so.
///
/// # Errors
/// When the head does not convert (not expected: the same grammar).
pub fn response_of<B: MessageBody + 'static>(
    response: HttpResponse<B>,
) -> Result<http::Response<ResponseBody>, HandlerFailed> {
    let (head, body) = response.into_parts();
    let mut builder = http::Response::builder().status(head.status().as_u16());
    for (name, value) in head.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let mut response = builder.body(pumped_response(body)).map_err(|error| HandlerFailed::new(error.to_string()))?;
    if head.extensions().get::<NotSpent>().is_some() {
        response.extensions_mut().insert(NotSpent);
    }
    Ok(response)
}

/// The layer's answer as an actix response: its status, its headers, in
/// their order, and its body, streamed, with a `Content-Length` when its
/// length is known (a kept answer, a replay, a refusal, a handler's body
/// of a stated length), as the tower layer's answers go out under hyper.
pub fn answer_of<R>(answer: http::Response<R>) -> HttpResponse<BoxBody>
where
    R: Body<Data = Bytes> + 'static,
    R::Error: Into<BoxError>,
{
    let (parts, body) = answer.into_parts();
    let length = body.size_hint().exact();
    let chunks = body.into_data_stream().map_err(|error| std::io::Error::other(error.into()));
    let status = StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = match length {
        Some(length) => HttpResponse::build(status).body(SizedStream::new(length, chunks)),
        None => HttpResponse::build(status).body(BodyStream::new(chunks)),
    };
    let headers = response.headers_mut();
    for (name, value) in &parts.headers {
        let name = HeaderName::from_bytes(name.as_str().as_bytes());
        let value = HeaderValue::from_bytes(value.as_bytes());
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.append(name, value);
        }
    }
    response
}
