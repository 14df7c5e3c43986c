//! Reading the request headers the layer acts on: the idempotency key and
//! `Prefer: wait=N`.

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use std::time::Duration;

/// Why a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyError {
    /// More than one key field, or a list of keys in one field.
    Repeated,
    /// Not a key; the reason is shown to the client.
    Invalid(&'static str),
}

/// The key from the request: exactly one `name` field holding an RFC 9651
/// sf-string (`"..."`, with `\"` and `\\` escapes) or the bare token most
/// clients send. `Ok(None)` when there is none.
pub(super) fn read_key(headers: &HeaderMap, name: &HeaderName, max: usize) -> Result<Option<Vec<u8>>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    parse_key(value, max).map(Some)
}

/// One key field's value.
fn parse_key(value: &HeaderValue, max: usize) -> Result<Vec<u8>, KeyError> {
    let text = value.to_str().map_err(|_| KeyError::Invalid("The key must be visible ASCII."))?;
    let text = text.trim_matches(' ');
    let key = match text.strip_prefix('"') {
        Some(rest) => sf_string(rest)?,
        None => bare(text)?,
    };
    if key.is_empty() {
        return Err(KeyError::Invalid("The key is empty."));
    }
    if key.len() > max {
        return Err(KeyError::Invalid("The key is too long."));
    }
    Ok(key)
}

/// The rest of an sf-string after its opening quote; nothing but spaces may
/// follow the closing quote (parameters are refused, a list is two keys).
fn sf_string(rest: &str) -> Result<Vec<u8>, KeyError> {
    let mut key = Vec::with_capacity(rest.len());
    let mut bytes = rest.as_bytes().iter().copied();
    loop {
        match bytes.next() {
            None => return Err(KeyError::Invalid("The quoted key is not closed.")),
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(escaped @ (b'"' | b'\\')) => key.push(escaped),
                _ => return Err(KeyError::Invalid("Only \\\\ and \\\" may be escaped in a quoted key.")),
            },
            Some(byte @ 0x20..=0x7e) => key.push(byte),
            Some(_) => return Err(KeyError::Invalid("The key must be visible ASCII.")),
        }
    }
    match bytes.find(|byte| *byte != b' ') {
        None => Ok(key),
        Some(b',') => Err(KeyError::Repeated),
        Some(b';') => Err(KeyError::Invalid("Parameters on the Idempotency-Key are not supported.")),
        Some(_) => Err(KeyError::Invalid("Nothing may follow the quoted key.")),
    }
}

/// A key sent without quotes: visible ASCII without separators.
fn bare(text: &str) -> Result<Vec<u8>, KeyError> {
    if text.contains(',') {
        return Err(KeyError::Repeated);
    }
    if text.contains(';') {
        return Err(KeyError::Invalid("Parameters on the Idempotency-Key are not supported."));
    }
    if !text.bytes().all(|byte| (0x21..0x7f).contains(&byte) && byte != b'"' && byte != b'\\') {
        return Err(KeyError::Invalid("A key without quotes must be visible ASCII without spaces or quotes."));
    }
    Ok(text.as_bytes().to_vec())
}

/// `Prefer: wait=N` (RFC 7240; names are case-insensitive, spaces around
/// `=` allowed), in seconds.
pub(super) fn prefer_wait(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|preference| {
            let (name, value) = preference.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let value = value.split(';').next()?.trim().trim_matches('"');
            value.parse::<u64>().ok().map(Duration::from_secs)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(values: &[&str]) -> Result<Option<Vec<u8>>, KeyError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("idempotency-key", HeaderValue::from_str(value).expect("header"));
        }
        read_key(&headers, &HeaderName::from_static("idempotency-key"), 255)
    }

    fn key(value: &str) -> Result<Vec<u8>, KeyError> {
        key_of(&[value]).map(|key| key.expect("present"))
    }

    #[test]
    fn keys_in_both_forms() {
        assert_eq!(key("8e03978e-40d5"), Ok(b"8e03978e-40d5".to_vec()));
        assert_eq!(key("\"8e03978e-40d5\""), Ok(b"8e03978e-40d5".to_vec()));
        assert_eq!(key("\"with space\""), Ok(b"with space".to_vec()));
        assert_eq!(key_of(&[]), Ok(None));
    }

    #[test]
    fn sf_string_escapes_are_accepted() {
        assert_eq!(key(r#""a\"b""#), Ok(br#"a"b"#.to_vec()));
        assert_eq!(key(r#""a\\b""#), Ok(br"a\b".to_vec()));
        assert!(matches!(key(r#""a\nb""#), Err(KeyError::Invalid(_))));
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in ["\"open", "\"\"", "\"a\" b", "a b", "a\"b", ""] {
            assert!(matches!(key(bad), Err(KeyError::Invalid(_))), "{bad:?} accepted");
        }
        let long = "k".repeat(256);
        assert_eq!(key(&long), Err(KeyError::Invalid("The key is too long.")));
    }

    #[test]
    fn parameters_are_refused_with_a_clear_message() {
        let message = Err(KeyError::Invalid("Parameters on the Idempotency-Key are not supported."));
        assert_eq!(key("\"abc\";v=1"), message);
        assert_eq!(key("abc;v=1"), message);
    }

    #[test]
    fn two_keys_are_refused() {
        assert_eq!(key_of(&["a", "b"]), Err(KeyError::Repeated));
        assert_eq!(key_of(&["a", "a"]), Err(KeyError::Repeated));
        assert_eq!(key("\"a\", \"b\""), Err(KeyError::Repeated));
        assert_eq!(key("a,b"), Err(KeyError::Repeated));
    }

    #[test]
    fn prefer_wait_is_read() {
        let prefer = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("prefer", HeaderValue::from_static(value));
            prefer_wait(&headers)
        };
        assert_eq!(prefer("respond-async, wait=5"), Some(Duration::from_secs(5)));
        assert_eq!(prefer("Wait = 7"), Some(Duration::from_secs(7)));
        assert_eq!(prefer("handling=lenient"), None);
        assert_eq!(prefer_wait(&HeaderMap::new()), None);
    }
}
