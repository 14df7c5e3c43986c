//! The bodies of the layers' answers: the handler's own, streamed
//! untouched, or one the layer read — all of it (a kept answer, a replay,
//! a refusal), or the part it read before the answer proved too large to
//! keep, followed by the rest of the handler's body.

use super::BoxError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The body of the layers' answers: the handler's own, streamed, when the
/// layer passes it through; a [`Buffered`] one when the layer read it.
pub type LayerBody<R> = Either<R, Buffered<R>>;

/// A body the layer read, whole or in part (see [`LayerBody`]).
pub struct Buffered<R> {
    inner: Inner<R>,
}

enum Inner<R> {
    /// Bytes the layer holds: a kept answer, a replay, a refusal.
    Whole(Full<Bytes>),
    /// The frames of the handler's body read so far, then the rest of it.
    Resumed { read: VecDeque<Bytes>, rest: Pin<Box<R>> },
}

impl<R> std::fmt::Debug for Buffered<R> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.inner {
            Inner::Whole(_) => "whole",
            Inner::Resumed { .. } => "resumed",
        };
        formatter.debug_struct("Buffered").field("kind", &kind).finish()
    }
}

impl<R> From<Full<Bytes>> for Buffered<R> {
    fn from(body: Full<Bytes>) -> Self {
        Buffered { inner: Inner::Whole(body) }
    }
}

/// `body` as the layer's answer body.
pub(super) fn buffered<R>(body: Full<Bytes>) -> LayerBody<R> {
    Either::Right(body.into())
}

/// The data frames `read` of a handler's body, then what is left of it,
/// `rest`, as the layer's answer body.
pub(super) fn resumed<R>(read: Vec<Bytes>, rest: Pin<Box<R>>) -> LayerBody<R> {
    Either::Right(Buffered { inner: Inner::Resumed { read: read.into(), rest } })
}

impl<R> Body for Buffered<R>
where
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().inner {
            Inner::Whole(body) => Pin::new(body).poll_frame(context).map_err(|never| match never {}),
            Inner::Resumed { read, rest } => match read.pop_front() {
                Some(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                None => rest.as_mut().poll_frame(context).map_err(Into::into),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Whole(body) => body.is_end_stream(),
            Inner::Resumed { read, rest } => read.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Whole(body) => body.size_hint(),
            Inner::Resumed { read, rest } => {
                let held = read.iter().map(|bytes| bytes.len() as u64).sum::<u64>();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(held));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(held));
                }
                hint
            }
        }
    }
}

/// What reading a handler's body within a budget found.
pub(super) enum Within<R> {
    /// All of it, within the budget.
    Whole(Bytes),
    /// More than the budget: the data frames read until it was passed,
    /// and the rest, unread.
    Over(Vec<Bytes>, Pin<Box<R>>),
}

/// Reads `body` until it ends or has given more than `budget` bytes.
///
/// # Errors
/// The body's own error.
pub(super) async fn read_within<R: Body<Data = Bytes>>(body: R, budget: usize) -> Result<Within<R>, R::Error> {
    let mut body = Box::pin(body);
    Ok(match read_pinned(body.as_mut(), budget).await? {
        Read::Whole(whole) => Within::Whole(whole),
        Read::Over(read) => Within::Over(read, body),
    })
}

/// Reads a request's `body`, of at most `max` bytes: `None` when it is
/// longer, or fails.
pub(super) async fn read_request<B: Body<Data = Bytes>>(body: B, max: usize) -> Option<Bytes> {
    match read_pinned(std::pin::pin!(body), max).await {
        Ok(Read::Whole(whole)) => Some(whole),
        Ok(Read::Over(_)) | Err(_) => None,
    }
}

/// What [`read_pinned`] read.
enum Read {
    /// All of it, within the budget.
    Whole(Bytes),
    /// The data frames read until the budget was passed.
    Over(Vec<Bytes>),
}

/// Reads `body` until it ends or has given more than `budget` bytes. A
/// body of one data frame is that frame, neither copied nor gathered.
async fn read_pinned<R: Body<Data = Bytes>>(mut body: Pin<&mut R>, budget: usize) -> Result<Read, R::Error> {
    use http_body_util::BodyExt;
    let (mut first, mut more, mut len) = (None::<Bytes>, Vec::new(), 0usize);
    while let Some(frame) = body.frame().await {
        let Ok(bytes) = frame?.into_data() else { continue };
        len = len.saturating_add(bytes.len());
        match first {
            None => first = Some(bytes),
            Some(_) => more.push(bytes),
        }
        if len > budget {
            return Ok(Read::Over(first.into_iter().chain(more).collect()));
        }
    }
    let Some(first) = first else { return Ok(Read::Whole(Bytes::new())) };
    if more.is_empty() {
        return Ok(Read::Whole(first));
    }
    let mut whole = bytes::BytesMut::with_capacity(len);
    for bytes in std::iter::once(first).chain(more) {
        whole.extend_from_slice(&bytes);
    }
    Ok(Read::Whole(whole.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body of `chunks`, one frame each, that says nothing of its size.
    struct Chunks(VecDeque<&'static str>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _context: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(|chunk| Ok(Frame::data(Bytes::from_static(chunk.as_bytes())))))
        }
    }

    fn chunks(chunks: &[&'static str]) -> Chunks {
        Chunks(chunks.iter().copied().collect())
    }

    #[tokio::test]
    async fn a_body_over_the_budget_goes_out_whole_after_what_was_read() {
        let Ok(Within::Over(read, rest)) = read_within(chunks(&["ab", "cd", "ef"]), 3).await else {
            panic!("over the budget of 3");
        };
        assert_eq!(read, [Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]);
        let body: LayerBody<Chunks> = resumed(read, rest);
        assert_eq!(body.collect().await.expect("a body").to_bytes(), "abcdef");
        let Ok(Within::Whole(whole)) = read_within(chunks(&["ab", "cd"]), 4).await else {
            panic!("within the budget of 4");
        };
        assert_eq!(whole, "abcd");
    }
}
