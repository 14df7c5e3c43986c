//! The stored form of a response (status, chosen headers, body) and its
//! replay.

use super::config::LayerConfig;
use super::problem::problem;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

/// Stored response layout: status (u16 LE), header count (u16 LE), then per
/// header name length (u16 LE), name, value length (u32 LE), value; then
/// the body.
pub(super) fn encode_response(
    status: StatusCode,
    headers: &http::HeaderMap,
    kept: &[HeaderName],
    body: &[u8],
) -> Vec<u8> {
    let chosen: Vec<(&HeaderName, &HeaderValue)> =
        headers.iter().filter(|(name, _)| kept.contains(name)).take(usize::from(u16::MAX)).collect();
    let mut out = Vec::with_capacity(4 + body.len());
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

fn decode_response(stored: &[u8]) -> Option<Response<Full<Bytes>>> {
    let take = |at: &mut usize, len: usize| -> Option<&[u8]> {
        let part = stored.get(*at..*at + len)?;
        *at += len;
        Some(part)
    };
    let mut at = 0;
    let status = StatusCode::from_u16(u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?)).ok()?;
    let count = u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?);
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    for _ in 0..count {
        let name_len = usize::from(u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?));
        let name = HeaderName::from_bytes(take(&mut at, name_len)?).ok()?;
        let value_len = usize::try_from(u32::from_le_bytes(take(&mut at, 4)?.try_into().ok()?)).ok()?;
        let value = HeaderValue::from_bytes(take(&mut at, value_len)?).ok()?;
        response.headers_mut().append(name, value);
    }
    *response.body_mut() = Full::new(Bytes::copy_from_slice(&stored[at..]));
    Some(response)
}

pub(super) fn replay(stored: &[u8], config: &LayerConfig) -> Response<Full<Bytes>> {
    let Some(mut response) = decode_response(stored) else {
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stored response unreadable",
            "The stored response could not be decoded.",
        );
    };
    response.headers_mut().insert(config.replay_header.clone(), HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;

    #[test]
    fn responses_round_trip() {
        let mut headers = http::HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert("x-internal", HeaderValue::from_static("not kept"));
        let encoded = encode_response(StatusCode::CREATED, &headers, &[CONTENT_TYPE], b"{\"id\":1}");
        let response = decode_response(&encoded).expect("decodes");
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers().get(CONTENT_TYPE), Some(&HeaderValue::from_static("application/json")));
        assert!(response.headers().get("x-internal").is_none());
        assert!(decode_response(&encoded[..3]).is_none());
    }
}
