//! The stored form of a response (status, headers, body) and its replay.
//!
//! Every header is kept except the hop-by-hop ones (they describe one
//! connection), `Date` (a replay is a new message), `Content-Length` (the
//! replayed body sets its own) and the configured deny-list. An answer too
//! large to keep whole is kept without its body (and, when its headers
//! alone are too large, without them too), marked so: its replay says
//! `omitted` where a whole one says `true`.
//!
//! Stored layout, version 1 (all integers little-endian):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 2 | magic `FF 48` (read as a status, 18 687: never one) |
//! | 2 | 1 | format version, 1 |
//! | 3 | 1 | flags: bit 0 the body was omitted, bit 1 the headers were |
//! | 4 | 2 | status |
//! | 6 | 2 | header count (at most 65 535 headers are kept) |
//! | 8 | … | per header: name length (u16), name, value length (u32), value |
//! | … | … | the body |
//!
//! Answers stored before version 1 have the same layout from the status
//! on, without magic, version and flags; they are read too, with a status
//! between 100 and 599. Anything else — bytes some other writer stored
//! under the key — is [`Undecodable`], never read as an answer.

use super::problem::Problem;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

/// The header that marks a replay of an answer kept without its body.
const OMITTED_HEADER: HeaderName = HeaderName::from_static("idempotency-replay");

/// The first bytes of every stored answer of version 1.
const MAGIC: [u8; 2] = [0xFF, b'H'];
/// The format version this layer writes.
const FORMAT_VERSION: u8 = 1;
/// Magic, version and flags.
const PREFIX_BYTES: usize = MAGIC.len() + 2;
/// Status and header count.
const STATUS_BYTES: usize = 4;
/// Bytes of one header besides its name and value.
const HEADER_BYTES: usize = 6;
/// Flag: the body was not kept.
const BODY_OMITTED: u8 = 1;
/// Flag: the headers were not kept.
const HEADERS_OMITTED: u8 = 2;
const _: () = assert!(u16::from_le_bytes(MAGIC) > 999, "the magic is never a status");
const _: () = assert!(PREFIX_BYTES + STATUS_BYTES == 8);

/// A response header set when the handler's answer could not be kept (its
/// lease was lost, or the store failed): the answer is true, but a retry
/// will not replay it.
pub(super) const NOT_STORED_HEADER: &str = "idempotency-stored";

/// Headers that never go into a stored response.
const NEVER_STORED: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::DATE,
    header::CONTENT_LENGTH,
];

/// Whether header `name` is stored, given the deny-list `denied`.
pub(super) fn is_stored(name: &HeaderName, denied: &[HeaderName]) -> bool {
    !NEVER_STORED.contains(name) && !denied.contains(name)
}

/// Bytes the stored form of a response takes besides its body.
pub(super) fn encoded_head_bytes(headers: &HeaderMap, denied: &[HeaderName]) -> usize {
    PREFIX_BYTES
        + STATUS_BYTES
        + headers
            .iter()
            .filter(|(name, _)| is_stored(name, denied))
            .map(|(name, value)| HEADER_BYTES + name.as_str().len() + value.len())
            .sum::<usize>()
}

/// What of an answer is stored.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kept<'a> {
    /// All of it.
    Whole(&'a [u8]),
    /// Status and headers; the body was too large.
    WithoutBody,
    /// The status alone; the headers were too large already.
    StatusOnly,
}

/// The stored form of an answer of `status` with `headers` (less the
/// `denied` ones), as much of it as `kept` says (see the module docs).
pub(super) fn encode_response(
    status: StatusCode,
    headers: &HeaderMap,
    denied: &[HeaderName],
    kept: Kept<'_>,
) -> Vec<u8> {
    let (flags, body): (u8, &[u8]) = match kept {
        Kept::StatusOnly => (BODY_OMITTED | HEADERS_OMITTED, &[]),
        Kept::WithoutBody => (BODY_OMITTED, &[]),
        Kept::Whole(body) => (0, body),
    };
    let chosen = || {
        let kept_headers = if matches!(kept, Kept::StatusOnly) { 0 } else { usize::from(u16::MAX) };
        headers.iter().filter(|(name, _)| is_stored(name, denied)).take(kept_headers)
    };
    let mut out = Vec::with_capacity(encoded_head_bytes(headers, denied) + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[FORMAT_VERSION, flags]);
    out.extend_from_slice(&status.as_u16().to_le_bytes());
    out.extend_from_slice(&u16::try_from(chosen().count()).unwrap_or(u16::MAX).to_le_bytes());
    for (name, value) in chosen() {
        out.extend_from_slice(&u16::try_from(name.as_str().len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out.extend_from_slice(body);
    out
}

/// Why stored bytes are not an answer of this layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Undecodable {
    /// They end before the answer does.
    Truncated,
    /// A format version this layer does not know.
    Version(u8),
    /// Flags this layer does not know.
    Flags(u8),
    /// Not an HTTP status (of a stored answer's version).
    Status(u16),
    /// A header name or value that is not one.
    Header,
}

impl std::fmt::Display for Undecodable {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undecodable::Truncated => formatter.write_str("the stored answer is cut short"),
            Undecodable::Version(version) => write!(formatter, "stored answer of unknown format version {version}"),
            Undecodable::Flags(flags) => write!(formatter, "stored answer with unknown flags {flags:#04x}"),
            Undecodable::Status(status) => write!(formatter, "stored status {status} is not an HTTP status"),
            Undecodable::Header => formatter.write_str("a stored header is not a header"),
        }
    }
}

/// A stored answer, decoded.
#[derive(Debug)]
pub(super) struct Stored {
    /// Status, headers and body, as kept.
    pub(super) response: Response<Full<Bytes>>,
    /// Whether its body (and perhaps its headers) was not kept.
    pub(super) omitted: bool,
}

/// The answer [`encode_response`] stored (or an earlier release did). Its
/// header values and body are parts of `stored`, not copies.
pub(super) fn decode_response(stored: &Bytes) -> Result<Stored, Undecodable> {
    let all = &stored[..];
    let mut at = 0usize;
    let mut take = |len: usize| -> Result<(usize, &[u8]), Undecodable> {
        let part = all.get(at..at.checked_add(len).ok_or(Undecodable::Truncated)?).ok_or(Undecodable::Truncated)?;
        at += len;
        Ok((at - len, part))
    };
    let u16_of = |bytes: &[u8]| u16::from_le_bytes([bytes[0], bytes[1]]);
    let (flags, statuses) = if all.starts_with(&MAGIC) {
        let (_, prefix) = take(PREFIX_BYTES)?;
        match (prefix[2], prefix[3]) {
            (FORMAT_VERSION, flags) if flags & !(BODY_OMITTED | HEADERS_OMITTED) == 0 => (flags, 100..=999),
            (FORMAT_VERSION, flags) => return Err(Undecodable::Flags(flags)),
            (version, _) => return Err(Undecodable::Version(version)),
        }
    } else {
        (0, 100..=599)
    };
    let status = u16_of(take(2)?.1);
    let status =
        StatusCode::from_u16(status).ok().filter(|_| statuses.contains(&status)).ok_or(Undecodable::Status(status))?;
    let count = u16_of(take(2)?.1);
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    for _ in 0..count {
        let name_len = usize::from(u16_of(take(2)?.1));
        let name = HeaderName::from_bytes(take(name_len)?.1).map_err(|_| Undecodable::Header)?;
        let (_, value_len) = take(4)?;
        let value_len = u32::from_le_bytes([value_len[0], value_len[1], value_len[2], value_len[3]]);
        let value_len = usize::try_from(value_len).map_err(|_| Undecodable::Truncated)?;
        let (start, _) = take(value_len)?;
        let value =
            HeaderValue::from_maybe_shared(stored.slice(start..start + value_len)).map_err(|_| Undecodable::Header)?;
        response.headers_mut().append(name, value);
    }
    *response.body_mut() = Full::new(stored.slice(at..));
    Ok(Stored { response, omitted: flags & BODY_OMITTED != 0 })
}

/// The stored response with `replay_header: true` added (`omitted` for
/// one kept without its body); a 500 `stored-unreadable` problem for
/// bytes that are not a stored answer.
pub(super) fn replay(stored: &Bytes, replay_header: &HeaderName) -> Response<Full<Bytes>> {
    match decode_response(stored) {
        Ok(Stored { mut response, omitted }) => {
            let headers = response.headers_mut();
            // An answer kept without its body says so in
            // `Idempotency-Replay: omitted`, whatever the replay header is
            // called; a replay header of another name says `true` beside it.
            if !omitted || replay_header != OMITTED_HEADER {
                headers.insert(replay_header.clone(), HeaderValue::from_static("true"));
            }
            if omitted {
                headers.insert(OMITTED_HEADER, HeaderValue::from_static("omitted"));
            }
            response
        }
        Err(error) => {
            tracing::error!(%error, "a stored answer is not readable");
            Problem::StoredUnreadable.response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;

    fn decoded(stored: &[u8]) -> Stored {
        decode_response(&Bytes::copy_from_slice(stored)).expect("decodes")
    }

    #[test]
    fn responses_round_trip_with_their_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert("x-request-id", HeaderValue::from_static("abc"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        headers.insert(header::DATE, HeaderValue::from_static("Mon, 30 Nov 2026 06:00:00 GMT"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert("x-secret", HeaderValue::from_static("internal"));
        let denied = [HeaderName::from_static("x-secret")];
        let encoded = encode_response(StatusCode::CREATED, &headers, &denied, Kept::Whole(b"{\"id\":1}"));
        assert_eq!(encoded.len(), encoded_head_bytes(&headers, &denied) + 8);
        let Stored { response, omitted } = decoded(&encoded);
        assert_eq!((response.status(), omitted), (StatusCode::CREATED, false));
        let kept = response.headers();
        assert_eq!(kept.get(CONTENT_TYPE), Some(&HeaderValue::from_static("application/json")));
        assert_eq!(kept.get("x-request-id"), Some(&HeaderValue::from_static("abc")));
        assert_eq!(kept.get_all("set-cookie").iter().count(), 2);
        assert_eq!(kept.get(header::ETAG), Some(&HeaderValue::from_static("\"v1\"")));
        for gone in [header::DATE, header::CONNECTION, HeaderName::from_static("x-secret")] {
            assert!(kept.get(&gone).is_none(), "{gone} was stored");
        }
    }

    #[test]
    fn an_answer_too_large_is_kept_without_its_body_and_says_so() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let without_body = encode_response(StatusCode::CREATED, &headers, &[], Kept::WithoutBody);
        assert_eq!(without_body.len(), encoded_head_bytes(&headers, &[]));
        let Stored { response, omitted } = decoded(&without_body);
        assert_eq!((response.status(), omitted, response.headers().len()), (StatusCode::CREATED, true, 1));
        let bare = encode_response(StatusCode::CREATED, &headers, &[], Kept::StatusOnly);
        assert_eq!(bare.len(), 8, "the least truthful record: the status and a mark");
        let Stored { response, omitted } = decoded(&bare);
        assert_eq!((response.status(), omitted, response.headers().len()), (StatusCode::CREATED, true, 0));
        let replayed = replay(&Bytes::copy_from_slice(&bare), &HeaderName::from_static("idempotency-replay"));
        assert_eq!(
            (replayed.status(), replayed.headers()["idempotency-replay"].to_str().ok()),
            (StatusCode::CREATED, Some("omitted"))
        );
        let whole = encode_response(StatusCode::OK, &headers, &[], Kept::Whole(b"x"));
        assert_eq!(
            replay(&Bytes::copy_from_slice(&whole), &HeaderName::from_static("idempotency-replay")).headers()
                ["idempotency-replay"],
            "true"
        );
    }

    #[test]
    fn answers_stored_before_the_format_version_are_read() {
        // Status 201, one header `a: b`, body `hi`: the layout of earlier releases.
        let legacy = [&201u16.to_le_bytes()[..], &[1, 0, 1, 0, b'a', 1, 0, 0, 0, b'b'], b"hi"].concat();
        let Stored { response, omitted } = decoded(&legacy);
        assert_eq!(
            (response.status(), response.headers()["a"].to_str().ok(), omitted),
            (StatusCode::CREATED, Some("b"), false)
        );
    }

    #[test]
    fn bytes_that_are_no_stored_answer_are_refused_with_a_reason() {
        let encoded = encode_response(StatusCode::OK, &HeaderMap::new(), &[], Kept::Whole(b"body"));
        assert_eq!(decode_response(&Bytes::copy_from_slice(&encoded[..3])).err(), Some(Undecodable::Truncated));
        assert_eq!(
            decode_response(&Bytes::copy_from_slice(&encoded[..9])).ok().map(|stored| stored.response.status()),
            Some(StatusCode::OK)
        );
        // Another writer's bytes under the key: a status of 769, of 65 535.
        assert_eq!(decode_response(&Bytes::copy_from_slice(&[0x01, 0x03, 0, 0])).err(), Some(Undecodable::Status(769)));
        assert_eq!(
            decode_response(&Bytes::copy_from_slice(&[0xff, 0xff, 0, 0])).err(),
            Some(Undecodable::Status(65_535))
        );
        assert_eq!(
            decode_response(&Bytes::copy_from_slice(&[0xff, b'H', 2, 0, 200, 0, 0, 0])).err(),
            Some(Undecodable::Version(2))
        );
        assert_eq!(
            decode_response(&Bytes::copy_from_slice(&[0xff, b'H', 1, 4, 200, 0, 0, 0])).err(),
            Some(Undecodable::Flags(4))
        );
        let mut lying = encode_response(StatusCode::OK, &HeaderMap::new(), &[], Kept::Whole(b""));
        lying[6] = 9; // nine headers that are not there
        assert_eq!(decode_response(&Bytes::copy_from_slice(&lying)).err(), Some(Undecodable::Truncated));
        let unreadable = replay(&Bytes::copy_from_slice(&[0x01, 0x03]), &HeaderName::from_static("idempotency-replay"));
        assert_eq!(unreadable.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
