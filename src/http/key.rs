//! Reading the request headers the layer acts on: the idempotency key,
//! `Prefer: wait=N` and `Idempotency-Key-Expiry`.

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
    check_length(&key, max).map_err(KeyError::Invalid)?;
    Ok(key)
}

/// Not empty, at most `max` bytes; why not otherwise.
fn check_length(key: &[u8], max: usize) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("The key is empty.");
    }
    if key.len() > max {
        return Err("The key is too long.");
    }
    Ok(())
}

/// A key taken from the request itself (a natural key), held to the
/// rules of a key sent in a header: not empty, at most `max` bytes, of
/// what an sf-string may hold (visible ASCII and spaces); why not
/// otherwise.
pub(super) fn check_natural_key(key: &[u8], max: usize) -> Result<(), &'static str> {
    if !key.iter().all(|byte| (0x20..0x7f).contains(byte)) {
        return Err("The key must be visible ASCII.");
    }
    check_length(key, max)
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

/// The request header in which a client asks how long its answer is
/// replayed, and the response header that states the expiry in force.
pub(super) const EXPIRY_HEADER: HeaderName = HeaderName::from_static("idempotency-key-expiry");

/// An `Idempotency-Key-Expiry` that is not one: not a whole number of a
/// unit, zero, or more than one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ExpiryInvalid;

/// The expiry a client asks for: a whole number of seconds, minutes,
/// hours or days (`90s`, `30m`, `24h`, `7d`; bare digits are seconds),
/// at least one second. `Ok(None)` when there is none.
pub(super) fn read_expiry(headers: &HeaderMap) -> Result<Option<Duration>, ExpiryInvalid> {
    let mut values = headers.get_all(EXPIRY_HEADER).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(ExpiryInvalid);
    }
    let text = value.to_str().map_err(|_| ExpiryInvalid)?.trim();
    let (digits, unit) = match text.char_indices().find(|(_, char)| !char.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, "s"),
    };
    let seconds_per_unit: u64 = match unit.to_ascii_lowercase().as_str() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(ExpiryInvalid),
    };
    if digits.is_empty() {
        return Err(ExpiryInvalid);
    }
    // Digits alone, so only a number past u64 fails to parse: a whole
    // number still, longer than any maximum (refused as too long).
    let count: u64 = digits.parse().unwrap_or(u64::MAX);
    match count.saturating_mul(seconds_per_unit) {
        0 => Err(ExpiryInvalid),
        seconds => Ok(Some(Duration::from_secs(seconds))),
    }
}

/// `expiry` as the response states it: in the largest of days, hours,
/// minutes and seconds that it is a whole number of (`24h` is `1d`), a
/// part of a second rounded up.
pub(super) fn expiry_text(expiry: Duration) -> String {
    let seconds = expiry.as_secs().saturating_add(u64::from(expiry.subsec_nanos() > 0));
    let (count, unit) = [(86_400, "d"), (3600, "h"), (60, "m")]
        .into_iter()
        .find(|(size, _)| seconds > 0 && seconds % size == 0)
        .map_or((seconds, "s"), |(size, unit)| (seconds / size, unit));
    format!("{count}{unit}")
}

/// States `expiry` in `headers` (`Idempotency-Key-Expiry`, as
/// [`expiry_text`] writes it), when there is one.
pub(super) fn state_expiry(headers: &mut HeaderMap, expiry: Option<Duration>) {
    if let Some(value) = expiry.and_then(|expiry| HeaderValue::from_str(&expiry_text(expiry)).ok()) {
        headers.insert(EXPIRY_HEADER, value);
    }
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
    fn natural_keys_are_held_to_the_rules_of_a_header_key() {
        assert_eq!(check_natural_key(b"ord 7", 255), Ok(()));
        assert_eq!(check_natural_key(b"", 255), Err("The key is empty."));
        assert_eq!(check_natural_key(&[b'k'; 256], 255), Err("The key is too long."));
        for bad in [&b"caf\xc3\xa9"[..], b"a\nb", b"\x7f"] {
            assert_eq!(check_natural_key(bad, 255), Err("The key must be visible ASCII."), "{bad:?}");
        }
    }

    #[test]
    fn two_keys_are_refused() {
        assert_eq!(key_of(&["a", "b"]), Err(KeyError::Repeated));
        assert_eq!(key_of(&["a", "a"]), Err(KeyError::Repeated));
        assert_eq!(key("\"a\", \"b\""), Err(KeyError::Repeated));
        assert_eq!(key("a,b"), Err(KeyError::Repeated));
    }

    fn expiry(values: &[&'static str]) -> Result<Option<Duration>, ExpiryInvalid> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(EXPIRY_HEADER, HeaderValue::from_static(value));
        }
        read_expiry(&headers)
    }

    #[test]
    fn expiries_are_read_in_seconds_minutes_hours_and_days() {
        let hours = |count: u64| Ok(Some(Duration::from_secs(count * 3600)));
        assert_eq!(expiry(&["24h"]), hours(24));
        assert_eq!(expiry(&[" 24H "]), hours(24));
        assert_eq!(expiry(&["1d"]), hours(24));
        assert_eq!(expiry(&["90"]), Ok(Some(Duration::from_secs(90))));
        assert_eq!(expiry(&["90s"]), Ok(Some(Duration::from_secs(90))));
        assert_eq!(expiry(&["30m"]), Ok(Some(Duration::from_secs(1800))));
        assert_eq!(expiry(&[]), Ok(None));
        for bad in ["", "h", "0s", "0", "-1h", "1.5h", "24 h", "1w", "24hours", "1h30m", "000d"] {
            assert_eq!(expiry(&[bad]), Err(ExpiryInvalid), "{bad:?}");
        }
        // A whole number however long is an expiry, longer than any
        // maximum: refused as too long, not as malformed.
        assert_eq!(expiry(&["9999999999999d"]), Ok(Some(Duration::from_secs(9_999_999_999_999 * 86_400))));
        let longest = Ok(Some(Duration::from_secs(u64::MAX)));
        for long in ["99999999999999999999999999s", "213503982334602d"] {
            assert_eq!(expiry(&[long]), longest, "{long:?}");
        }
        assert_eq!(expiry(&["1h", "2h"]), Err(ExpiryInvalid), "two fields");
    }

    #[test]
    fn an_expiry_is_stated_in_its_largest_whole_unit() {
        let text = |seconds| expiry_text(Duration::from_secs(seconds));
        assert_eq!(
            (text(86_400), text(3 * 86_400), text(7200), text(90), text(120)),
            ("1d".into(), "3d".into(), "2h".into(), "90s".into(), "2m".into())
        );
        assert_eq!(expiry_text(Duration::from_millis(2500)), "3s");
        assert_eq!(expiry_text(Duration::ZERO), "0s");
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
