//! The boundary between actix-web 4 (`http` 0.2 types inside) and the
//! layer (`http` 1 types): method, URI, version, headers and the
//! [`NotSpent`] mark cross it; the bytes of names and values are the same
//! on both sides, so nothing is reinterpreted.

use crate::body::RequestBody;
use crate::HandlerFailed;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{StatusCode, Version};
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full};
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

/// The actix handler's answer in `http` 1 types, its body read whole (the
/// layer keeps it; actix bodies may not leave their thread), marked
/// [`NotSpent`] when the handler marked it so.
///
/// # Errors
/// When the handler's body fails while it is read.
pub async fn response_of<B: MessageBody>(
    response: HttpResponse<B>,
) -> Result<http::Response<Full<Bytes>>, HandlerFailed> {
    let (head, body) = response.into_parts();
    let bytes = actix_web::body::to_bytes(body).await.map_err(|error| HandlerFailed::new(error.into().to_string()))?;
    let mut builder = http::Response::builder().status(head.status().as_u16());
    for (name, value) in head.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let mut response = builder.body(Full::new(bytes)).map_err(|error| HandlerFailed::new(error.to_string()))?;
    if head.extensions().get::<NotSpent>().is_some() {
        response.extensions_mut().insert(NotSpent);
    }
    Ok(response)
}

/// The layer's answer as an actix response: its status, its headers, in
/// their order, and its body, read whole (it is in memory already: the
/// handler's was read whole), so that it goes out with a `Content-Length`
/// as the tower layer's answers do.
///
/// # Errors
/// When the body fails while it is read (a handler's body that failed).
pub async fn answer_of<R>(answer: http::Response<R>) -> Result<HttpResponse<BoxBody>, actix_web::Error>
where
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let (parts, body) = answer.into_parts();
    let bytes = body.collect().await.map_err(|error| HandlerFailed::new(error.into().to_string()))?.to_bytes();
    let status = StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status).body(bytes);
    let headers = response.headers_mut();
    for (name, value) in &parts.headers {
        let name = HeaderName::from_bytes(name.as_str().as_bytes());
        let value = HeaderValue::from_bytes(value.as_bytes());
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.append(name, value);
        }
    }
    Ok(response)
}
