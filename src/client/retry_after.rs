//! The `Retry-After` field (RFC 9110 §10.2.3): delay-seconds or an
//! HTTP-date.

use http::header::{AsHeaderName, HeaderMap, HeaderValue, RETRY_AFTER};
use std::time::{Duration, SystemTime};

/// A field sent more than once where one value is allowed.
pub(super) struct Repeated;

/// The one value of `name` in `headers`: `Ok(None)` when absent,
/// `Err(Repeated)` when sent more than once.
pub(super) fn one_value(headers: &HeaderMap, name: impl AsHeaderName) -> Result<Option<&HeaderValue>, Repeated> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(Repeated);
    }
    Ok(Some(value))
}

/// The optional whitespace around a field value (RFC 9110 §5.6.3).
pub(super) const OWS: [char; 2] = [' ', '\t'];

/// Whether `text` is one or more ASCII digits.
pub(super) fn digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// A whole number of seconds, ASCII digits only (the caller trims): more
/// digits than a `u64` holds is still "a very long time", `u64::MAX`.
pub(super) fn whole_seconds(text: &str) -> Option<u64> {
    digits(text).then(|| text.parse().unwrap_or(u64::MAX))
}

/// How long `Retry-After` in `headers` asks the client to wait, seen at
/// `now`: `None` when the field is absent, repeated or not one of the two
/// forms; zero for a date in the past.
///
/// # Examples
///
/// ```
/// use http::{header::RETRY_AFTER, HeaderMap, HeaderValue};
/// use idemkv::client::retry_after;
/// use std::time::{Duration, SystemTime};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("120"));
/// assert_eq!(retry_after(&headers, SystemTime::now()), Some(Duration::from_secs(120)));
///
/// let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("Sun, 06 Nov 1994 08:50:07 GMT"));
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
/// ```
#[must_use]
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = one_value(headers, RETRY_AFTER).ok()??;
    parse(value.to_str().ok()?, now)
}

/// One field value.
fn parse(text: &str, now: SystemTime) -> Option<Duration> {
    let text = text.trim_matches(OWS);
    if let Some(seconds) = whole_seconds(text) {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn now() -> SystemTime {
        httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date")
    }

    fn of(values: &[&[u8]]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(RETRY_AFTER, HeaderValue::from_bytes(value).expect("field value"));
        }
        retry_after(&headers, now())
    }

    #[test]
    fn seconds() {
        assert_eq!(of(&[b"0"]), Some(Duration::ZERO));
        assert_eq!(of(&[b"1"]), Some(Duration::from_secs(1)));
        assert_eq!(of(&[b" 30 "]), Some(Duration::from_secs(30)));
        assert_eq!(of(&[b"99999999999999999999999"]), Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn dates_in_each_format() {
        for date in
            [&b"Sun, 06 Nov 1994 08:50:07 GMT"[..], b"Sunday, 06-Nov-94 08:50:07 GMT", b"Sun Nov  6 08:50:07 1994"]
        {
            assert_eq!(of(&[date]), Some(Duration::from_secs(30)), "{}", String::from_utf8_lossy(date));
        }
    }

    #[test]
    fn a_past_date_is_now() {
        assert_eq!(of(&[b"Sun, 06 Nov 1994 08:00:00 GMT"]), Some(Duration::ZERO));
    }

    #[test]
    fn garbage_is_none() {
        for value in [&b""[..], b"soon", b"-1", b"1.5", b"+3", b"0x10", b"Sun, 06 Nov 1994", b"\xff\xfe", b"3 s"] {
            assert_eq!(of(&[value]), None, "{}", String::from_utf8_lossy(value));
        }
        assert_eq!(of(&[]), None);
        assert_eq!(of(&[b"1", b"2"]), None, "repeated");
    }
}
