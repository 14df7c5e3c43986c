//! The bridge between the layer and the actix service: the layer's inner
//! service ([`Bridge`], `Send`, as the layer wants it) hands the request
//! it lets through to a task on the actix worker ([`handle`]), where the
//! actix service (bound to its thread) runs, and awaits its answer.

use crate::body::{payload_of, RequestBody, ResponseBody};
use crate::convert::response_of;
use crate::HandlerFailed;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::{HttpMessage, HttpRequest};
use idemkv::http::{Attempt, Checkpoints, FirstWait, ResourceHold};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// Why a handler gave no answer.
const DIED: &str = "the handler panicked or its worker stopped";

/// The handler's answer, sent back to the layer.
type Reply = oneshot::Sender<Result<http::Response<ResponseBody>, HandlerFailed>>;

/// The request the layer lets through, with where to send its answer.
pub type Handoff = (http::Request<RequestBody>, Reply);

/// The slot of the one handoff a request allows: taken by the layer's
/// call, or emptied by the middleware once the layer has answered
/// without calling (which ends the worker's task).
pub type Slot = Arc<Mutex<Option<oneshot::Sender<Handoff>>>>;

/// Takes what is in `slot`.
pub fn take(slot: &Slot) -> Option<oneshot::Sender<Handoff>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The layer's inner service for one request.
#[derive(Clone)]
pub struct Bridge {
    pub slot: Slot,
}

impl tower::Service<http::Request<RequestBody>> for Bridge {
    type Response = http::Response<ResponseBody>;
    type Error = HandlerFailed;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, HandlerFailed>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerFailed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let handoff = take(&self.slot);
        // The layer gives a guarded run its attempt.
        let guarded = request.extensions().get::<Attempt>().is_some();
        // This future waits from the start, whatever the handler does: the
        // handler's own first wait is told from the worker's task.
        if let Some(first_wait) = request.extensions().get::<FirstWait>() {
            first_wait.claim();
        }
        Box::pin(async move {
            let handoff = handoff.ok_or_else(|| HandlerFailed::new("the request was handed over already"))?;
            let (reply, answer) = oneshot::channel();
            handoff.send((request, reply)).map_err(|_| HandlerFailed::new("the worker's task is gone"))?;
            match answer.await {
                Ok(answer) => answer,
                // The handler's task ended without an answer: it panicked
                // (or its worker stopped) after it started, so its side
                // effect may have happened. A guarded run's layer learns it
                // as it learns a tower handler's panic, by the unwind of the
                // handler's future: the key stays in progress and a held
                // resource lapses. No panic hook runs again.
                Err(_) if guarded => std::panic::resume_unwind(Box::new(HandlerFailed::new(DIED))),
                Err(_) => Err(HandlerFailed::new(DIED)),
            }
        })
    }
}

/// Moves the extensions the layer gives a run (its [`Attempt`],
/// [`Checkpoints`] and [`ResourceHold`]) to the actix request.
fn hand_over(mut extensions: http::Extensions, request: &HttpRequest) {
    let mut actix = request.extensions_mut();
    if let Some(attempt) = extensions.remove::<Attempt>() {
        actix.insert(attempt);
    }
    if let Some(points) = extensions.remove::<Checkpoints>() {
        actix.insert(points);
    }
    if let Some(hold) = extensions.remove::<ResourceHold>() {
        actix.insert(hold);
    }
}

/// The worker's task of one request: waits for the layer's handoff, runs
/// the actix service on it and sends its answer back. The actix request
/// goes back to the middleware (`back`) as soon as it is free: at once
/// when the layer answers without the handler, or when the handler has
/// answered. An error of the actix service is answered as actix answers
/// it (its error response), and so kept like any answer.
pub async fn handle<S, B>(
    service: Rc<S>,
    request: HttpRequest,
    handoff: oneshot::Receiver<Handoff>,
    back: oneshot::Sender<HttpRequest>,
) where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    let Ok((let_through, reply)) = handoff.await else {
        drop(back.send(request));
        return;
    };
    let (mut parts, body) = let_through.into_parts();
    let first_wait = parts.extensions.remove::<FirstWait>();
    hand_over(parts.extensions, &request);
    let called = service.call(ServiceRequest::from_parts(request, payload_of(body)));
    let answer = match FirstWait::watch(first_wait, called).await {
        Ok(response) => {
            let (request, response) = response.into_parts();
            drop(back.send(request));
            response_of(response)
        }
        Err(error) => response_of(error.error_response()),
    };
    drop(reply.send(answer));
}
