//! The stored form of a response (status, headers, body) and its replay.
//!
//! Every header is kept except the hop-by-hop ones (they describe one
//! connection), `Date` (a replay is a new message), `Content-Length` (the
//! replayed body sets its own) and the configured deny-list.

use super::problem::Problem;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

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
    4 + headers
        .iter()
        .filter(|(name, _)| is_stored(name, denied))
        .map(|(name, value)| 6 + name.as_str().len() + value.len())
        .sum::<usize>()
}

/// Stored response layout: status (u16 LE), header count (u16 LE), then per
/// header name length (u16 LE), name, value length (u32 LE), value; then
/// the body. At most 65 535 headers are kept.
pub(super) fn encode_response(status: StatusCode, headers: &HeaderMap, denied: &[HeaderName], body: &[u8]) -> Vec<u8> {
    let chosen: Vec<(&HeaderName, &HeaderValue)> =
        headers.iter().filter(|(name, _)| is_stored(name, denied)).take(usize::from(u16::MAX)).collect();
    let mut out = Vec::with_capacity(encoded_head_bytes(headers, denied) + body.len());
    out.extend_from_slice(&status.as_u16().to_le_bytes());
    out.extend_from_slice(&u16::try_from(chosen.len()).unwrap_or(u16::MAX).to_le_bytes());
    for (name, value) in chosen {
        out.extend_from_slice(&u16::try_from(name.as_str().len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out.extend_from_slice(body);
    out
}

/// The response stored by [`encode_response`], or `None` if the bytes are
/// not one.
pub(super) fn decode_response(stored: &[u8]) -> Option<Response<Full<Bytes>>> {
    let mut at = 0usize;
    let mut take = |len: usize| -> Option<&[u8]> {
        let part = stored.get(at..at.checked_add(len)?)?;
        at += len;
        Some(part)
    };
    let status = StatusCode::from_u16(u16::from_le_bytes(take(2)?.try_into().ok()?)).ok()?;
    let count = u16::from_le_bytes(take(2)?.try_into().ok()?);
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    for _ in 0..count {
        let name_len = usize::from(u16::from_le_bytes(take(2)?.try_into().ok()?));
        let name = HeaderName::from_bytes(take(name_len)?).ok()?;
        let value_len = usize::try_from(u32::from_le_bytes(take(4)?.try_into().ok()?)).ok()?;
        let value = HeaderValue::from_bytes(take(value_len)?).ok()?;
        response.headers_mut().append(name, value);
    }
    *response.body_mut() = Full::new(Bytes::copy_from_slice(&stored[at..]));
    Some(response)
}

/// The stored response with `replay_header: true` added.
pub(super) fn replay(stored: &[u8], replay_header: &HeaderName) -> Response<Full<Bytes>> {
    let Some(mut response) = decode_response(stored) else {
        return Problem::StoredUnreadable.response();
    };
    response.headers_mut().insert(replay_header.clone(), HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;

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
        let encoded = encode_response(StatusCode::CREATED, &headers, &denied, b"{\"id\":1}");
        assert_eq!(encoded.len(), encoded_head_bytes(&headers, &denied) + 8);
        let response = decode_response(&encoded).expect("decodes");
        assert_eq!(response.status(), StatusCode::CREATED);
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
    fn truncated_or_damaged_bytes_do_not_decode() {
        let encoded = encode_response(StatusCode::OK, &HeaderMap::new(), &[], b"body");
        assert!(decode_response(&encoded[..3]).is_none());
        assert!(decode_response(&[0xff, 0xff, 0, 0]).is_none(), "status 65535");
        let mut lying = encode_response(StatusCode::OK, &HeaderMap::new(), &[], b"");
        lying[2] = 9; // nine headers that are not there
        assert!(decode_response(&lying).is_none());
    }
}
