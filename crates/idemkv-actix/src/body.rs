//! The bodies the layer reads: the actix request's payload and the actix
//! handler's answer, each pumped by a task on the worker (both are bound
//! to its thread) into a channel the layer can read from any thread; the
//! bytes of a request the layer buffered; and the bytes of an answer the
//! handler had all at hand.

use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Chunks in flight between the payload's task and the layer: the pump
/// waits for the layer, so a body is never read faster than it is used.
const CHUNKS_IN_FLIGHT: usize = 2;

/// A request body as the layer sees it.
#[derive(Debug)]
pub enum RequestBody {
    /// Bytes already read (what the layer buffered and hands on).
    Whole(Option<Bytes>),
    /// The actix payload, as it arrives.
    Streamed(mpsc::Receiver<Result<Bytes, std::io::Error>>),
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> Self {
        RequestBody::Whole((!bytes.is_empty()).then_some(bytes))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            RequestBody::Whole(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            RequestBody::Streamed(chunks) => {
                chunks.poll_recv(context).map(|chunk| chunk.map(|chunk| chunk.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, RequestBody::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Whole(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |bytes| bytes.len() as u64)),
            RequestBody::Streamed(_) => SizeHint::default(),
        }
    }
}

/// `payload` as a body the layer can read from any thread: a task of the
/// worker's own reads it into a channel, and stops when the layer drops
/// the body (a replay, a refusal: the rest is never read).
pub fn pumped(mut payload: Payload) -> RequestBody {
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    drop(actix_web::rt::spawn(async move {
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|error| std::io::Error::other(error.to_string()));
            if sender.send(chunk).await.is_err() {
                break;
            }
        }
    }));
    RequestBody::Streamed(receiver)
}

/// `body` as the payload of the actix handler's request.
pub fn payload_of(body: RequestBody) -> Payload {
    if let RequestBody::Whole(bytes) = body {
        return bytes.map_or(Payload::None, Payload::from);
    }
    let chunks = http_body_util::BodyExt::into_data_stream(body).map(|chunk| chunk.map_err(PayloadError::Io));
    Payload::Stream { payload: Box::pin(chunks) }
}

/// A response body the layer can read from any thread: the actix
/// handler's body, either its bytes when it had them all at hand or
/// pumped by a task on the worker (the body is bound to its thread), with
/// its length when the handler stated it.
#[derive(Debug)]
pub struct ResponseBody {
    /// What is left of the handler's stated length (its `Content-Length`).
    length: Option<u64>,
    chunks: Chunks,
    /// Nothing more is coming: the channel said so.
    ended: bool,
}

/// Where a response body's chunks come from.
#[derive(Debug)]
enum Chunks {
    /// The whole body, taken when read (none when empty or read).
    Whole(Option<Bytes>),
    /// The channel the worker's task pumps the body into.
    Pumped(mpsc::Receiver<Result<Bytes, std::io::Error>>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = match &mut this.chunks {
            Chunks::Whole(bytes) => bytes.take().map(Ok),
            Chunks::Pumped(chunks) => std::task::ready!(chunks.poll_recv(context)),
        };
        this.ended = frame.is_none();
        // The hint is of what is left: a reader that read a part of the
        // body (the layer, before it knew it too large to keep) hands on
        // the rest with the rest's length.
        if let (Some(length), Some(Ok(chunk))) = (this.length.as_mut(), frame.as_ref()) {
            *length = length.saturating_sub(chunk.len() as u64);
        }
        Poll::Ready(frame.map(|chunk| chunk.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.length == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        self.length.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// The handler's `body`: its bytes when it has them all at hand (no task,
/// no channel); else pumped into a channel by a task on the worker, a few
/// chunks at a time, the task stopping when the layer drops the body.
pub fn pumped_response<B: actix_web::body::MessageBody + 'static>(body: B) -> ResponseBody {
    let body = match body.try_into_bytes() {
        Ok(bytes) => {
            let length = Some(bytes.len() as u64);
            let chunks = Chunks::Whole((!bytes.is_empty()).then_some(bytes));
            return ResponseBody { length, chunks, ended: false };
        }
        Err(body) => body,
    };
    let length = match body.size() {
        actix_web::body::BodySize::None => Some(0),
        actix_web::body::BodySize::Sized(length) => Some(length),
        actix_web::body::BodySize::Stream => None,
    };
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    drop(actix_web::rt::spawn(async move {
        let mut body = Box::pin(body);
        while let Some(chunk) = std::future::poll_fn(|context| body.as_mut().poll_next(context)).await {
            let chunk = chunk.map_err(|error| std::io::Error::other(error.into().to_string()));
            if sender.send(chunk).await.is_err() {
                break;
            }
        }
    }));
    ResponseBody { length, chunks: Chunks::Pumped(receiver), ended: false }
}
