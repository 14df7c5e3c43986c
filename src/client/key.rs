//! Which requests may be sent more than once, and the `Idempotency-Key`
//! that makes a non-idempotent one safe to repeat.

use super::policy::KeyKind;
use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::Method;

/// The field name (the IETF httpapi draft's).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Whether and why a request may be sent again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Replay {
    /// An idempotent method (RFC 9110 §9.2.2): repeat as is.
    Idempotent,
    /// Carries this key, the caller's or attached: repeat with it.
    Keyed(HeaderValue),
    /// Neither: sent once.
    Once,
}

impl Replay {
    pub(super) fn retryable(&self) -> bool {
        !matches!(self, Replay::Once)
    }

    pub(super) fn keyed(&self) -> bool {
        matches!(self, Replay::Keyed(_))
    }

    pub(super) fn key(&self) -> Option<&HeaderValue> {
        match self {
            Replay::Keyed(key) => Some(key),
            _ => None,
        }
    }
}

/// Attaches a fresh key to a POST or PATCH without one (a caller's key,
/// on any method, is kept as it is) and says how the request may be
/// repeated.
pub(super) fn prepare(parts: &mut Parts, kind: KeyKind) -> Replay {
    if let Some(key) = parts.headers.get(IDEMPOTENCY_KEY) {
        return Replay::Keyed(key.clone());
    }
    if parts.method == Method::POST || parts.method == Method::PATCH {
        // A key that could not be written as a field value (a quoted UUID
        // always can) leaves the request without one, sent once: never a
        // stand-in key that other requests would share.
        let Some(key) = new_key(kind) else { return Replay::Once };
        parts.headers.insert(IDEMPOTENCY_KEY, key.clone());
        return Replay::Keyed(key);
    }
    if parts.method.is_idempotent() {
        Replay::Idempotent
    } else {
        Replay::Once
    }
}

/// A new key, as a quoted RFC 9651 string (the draft's form; the server
/// layer accepts bare tokens too).
fn new_key(kind: KeyKind) -> Option<HeaderValue> {
    let uuid = match kind {
        KeyKind::V7 => uuid::Uuid::now_v7(),
        KeyKind::V4 => uuid::Uuid::new_v4(),
    };
    let text = format!("\"{}\"", uuid.hyphenated());
    HeaderValue::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(method: Method, key: Option<&'static str>) -> Parts {
        let mut builder = Request::builder().method(method).uri("http://example.test/payments");
        if let Some(key) = key {
            builder = builder.header(IDEMPOTENCY_KEY, key);
        }
        builder.body(()).expect("request").into_parts().0
    }

    #[test]
    fn post_and_patch_get_a_fresh_key_each() {
        for method in [Method::POST, Method::PATCH] {
            let mut first = parts(method.clone(), None);
            let mut second = parts(method, None);
            let Replay::Keyed(one) = prepare(&mut first, KeyKind::V7) else { panic!("keyed") };
            let Replay::Keyed(two) = prepare(&mut second, KeyKind::V4) else { panic!("keyed") };
            assert_ne!(one, two);
            assert_eq!(first.headers.get(IDEMPOTENCY_KEY), Some(&one));
            let text = one.to_str().expect("ascii");
            assert!(text.starts_with('"') && text.ends_with('"') && text.len() == 38, "{text}");
            let version = uuid::Uuid::parse_str(&text[1..37]).expect("uuid").get_version_num();
            assert_eq!(version, 7);
        }
    }

    #[test]
    fn the_callers_key_is_kept() {
        let mut request = parts(Method::POST, Some("order-1"));
        assert_eq!(prepare(&mut request, KeyKind::V7), Replay::Keyed(HeaderValue::from_static("order-1")));
        assert_eq!(request.headers.get_all(IDEMPOTENCY_KEY).iter().count(), 1);
    }

    #[test]
    fn idempotent_methods_are_left_alone() {
        for method in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE, Method::OPTIONS, Method::TRACE] {
            let mut request = parts(method, None);
            assert_eq!(prepare(&mut request, KeyKind::V7), Replay::Idempotent);
            assert!(request.headers.is_empty());
        }
    }

    #[test]
    fn other_methods_are_sent_once() {
        for method in [Method::CONNECT, Method::from_bytes(b"CHARGE").expect("method")] {
            let mut request = parts(method, None);
            assert_eq!(prepare(&mut request, KeyKind::V7), Replay::Once);
            assert!(!prepare(&mut request, KeyKind::V7).retryable());
        }
    }
}
