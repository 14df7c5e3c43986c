//! Reading the request headers the layer acts on: the idempotency key and
//! `Prefer: wait=N`.

use http::header::HeaderValue;
use std::time::Duration;

/// The key from the header: a structured-field string (`"..."`, RFC 8941)
/// or the bare token most clients send. `Ok(None)` when absent.
pub(super) fn parse_key(value: Option<&HeaderValue>, max: usize) -> Result<Option<Vec<u8>>, &'static str> {
    let Some(value) = value else { return Ok(None) };
    let text = value.to_str().map_err(|_| "The key must be visible ASCII.")?.trim();
    let key = match text.strip_prefix('"') {
        Some(rest) => {
            let inner = rest.strip_suffix('"').ok_or("The quoted key is not closed.")?;
            if inner.contains(['"', '\\']) {
                return Err("Escapes are not allowed in the key.");
            }
            inner
        }
        None => text,
    };
    if key.is_empty() {
        return Err("The key is empty.");
    }
    if key.len() > max {
        return Err("The key is too long.");
    }
    if !key.bytes().all(|byte| (0x20..0x7f).contains(&byte)) {
        return Err("The key must be visible ASCII.");
    }
    Ok(Some(key.as_bytes().to_vec()))
}

/// `Prefer: wait=N` (RFC 7240), in seconds.
pub(super) fn prefer_wait(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|preference| {
            let seconds = preference.trim().strip_prefix("wait=")?;
            seconds.trim().parse::<u64>().ok().map(Duration::from_secs)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_both_forms() {
        let parse = |text: &str| parse_key(Some(&HeaderValue::from_str(text).expect("header")), 255);
        assert_eq!(parse("8e03978e-40d5"), Ok(Some(b"8e03978e-40d5".to_vec())));
        assert_eq!(parse("\"8e03978e-40d5\""), Ok(Some(b"8e03978e-40d5".to_vec())));
        assert!(parse("\"open").is_err());
        assert!(parse("\"\"").is_err());
        assert!(parse("\"a\\\"b\"").is_err());
        assert!(parse_key(Some(&HeaderValue::from_static("abcd")), 3).is_err());
        assert_eq!(parse_key(None, 255), Ok(None));
    }

    #[test]
    fn prefer_wait_is_read() {
        let mut headers = http::HeaderMap::new();
        headers.insert("prefer", HeaderValue::from_static("respond-async, wait=5"));
        assert_eq!(prefer_wait(&headers), Some(Duration::from_secs(5)));
        assert_eq!(prefer_wait(&http::HeaderMap::new()), None);
    }
}
