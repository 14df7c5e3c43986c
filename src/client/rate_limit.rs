//! The rate-limit fields as a wait before the next attempt: the IETF
//! httpapi draft's `RateLimit` (and `RateLimit-Policy`), and the older
//! `RateLimit-Remaining` / `RateLimit-Reset` and `X-RateLimit-Remaining`
//! / `X-RateLimit-Reset` that many servers still send. Pure: told the
//! time and the longest wait the caller allows.
//!
//! The rules:
//!
//! - `RateLimit` (draft-ietf-httpapi-ratelimit-headers-08 and later): a
//!   structured-field List (RFC 9651) of service limits such as
//!   `"default";r=0;t=30`; each needs `r` (the quota left, a non-negative
//!   Integer) and may have `t` (seconds until the window ends, a
//!   non-negative Integer). A limit with `r=0` asks for a wait of `t`;
//!   without `t`, of the `w` (window) of the `RateLimit-Policy` item of
//!   the same name, if there is one. The field may be split over several
//!   lines; the lines are one list.
//! - `RateLimit-Reset` and `X-RateLimit-Reset`: one number of seconds,
//!   perhaps with a fraction. Some servers send the seconds until the
//!   reset (the older drafts' delta-seconds), others the moment of the
//!   reset as a Unix timestamp (GitHub, among others). The rule: a value
//!   of at least 1 000 000 000 (2001-09-09 as a timestamp, 31 years as
//!   a delay) is a timestamp, and the wait runs to it from the answer's
//!   `Date` (the server's clock, so the clocks' skew does not count) or,
//!   without a valid `Date`, from now; a timestamp in the past is no
//!   wait. A smaller value is a delay. The reset asks for a wait only
//!   when the quota is spent: the matching `…-Remaining` is `0`, or
//!   absent.
//! - Of all the waits asked for, the longest. A field that does not parse
//!   is ignored (counted as `malformed`), a single-valued one sent twice
//!   too (`repeated`); a wait longer than the cap is ignored
//!   (`too_long`): a reset so far is more likely a misread timestamp or a
//!   hostile server than a wait worth sleeping, and the retry goes on
//!   with its backoff, still bounded by the attempts, the budget and the
//!   deadline. No input panics, and no wait returned exceeds the cap.

use super::retry_after::{digits, one_value, whole_seconds, Repeated, OWS};
use http::header::{HeaderMap, HeaderName, DATE};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest field the layer parses: a hostile server cannot make it
/// parse more.
const FIELD_BYTES_MAX: usize = 4_096;

/// Reset values at least this large are Unix timestamps; smaller ones are
/// delays.
const TIMESTAMP_MIN_SECONDS: u64 = 1_000_000_000;

/// A rate-limit field: the `field` label of `rate_limit_ignored_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RateLimitField {
    /// `RateLimit` (the draft's service limits).
    RateLimit,
    /// `RateLimit-Policy` (the draft's quota policies).
    RateLimitPolicy,
    /// `RateLimit-Reset` (the older drafts').
    RateLimitReset,
    /// `RateLimit-Remaining` (the older drafts').
    RateLimitRemaining,
    /// `X-RateLimit-Reset`.
    XRateLimitReset,
    /// `X-RateLimit-Remaining`.
    XRateLimitRemaining,
}

impl RateLimitField {
    /// The label value: the field's name in lower case.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitField::RateLimit => "ratelimit",
            RateLimitField::RateLimitPolicy => "ratelimit-policy",
            RateLimitField::RateLimitReset => "ratelimit-reset",
            RateLimitField::RateLimitRemaining => "ratelimit-remaining",
            RateLimitField::XRateLimitReset => "x-ratelimit-reset",
            RateLimitField::XRateLimitRemaining => "x-ratelimit-remaining",
        }
    }
}

/// Why a rate-limit field was ignored: the `reason` label of
/// `rate_limit_ignored_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IgnoredReason {
    /// It does not parse (or one of its list members does not).
    Malformed,
    /// A field that holds one value came more than once.
    Repeated,
    /// It asks for a wait longer than the cap.
    TooLong,
}

impl IgnoredReason {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            IgnoredReason::Malformed => "malformed",
            IgnoredReason::Repeated => "repeated",
            IgnoredReason::TooLong => "too_long",
        }
    }
}

/// What the rate-limit fields of an answer ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitWait {
    /// The longest wait a spent quota asks for, never above the cap;
    /// `None` when no field asks for one.
    pub wait: Option<Duration>,
    /// The fields (or list members) ignored, and why.
    pub ignored: Vec<(RateLimitField, IgnoredReason)>,
}

impl RateLimitWait {
    fn ask(&mut self, field: RateLimitField, wait: Duration, cap: Duration) {
        if wait > cap {
            self.ignored.push((field, IgnoredReason::TooLong));
        } else {
            self.wait = Some(self.wait.map_or(wait, |longest| longest.max(wait)));
        }
    }
}

/// How long the rate-limit fields of `headers` ask the client to wait,
/// seen at `now`, with every wait longer than `cap` ignored (see the
/// rules in the module's source and in the `client` docs). The caller
/// reads them only on an answer that refused for lack of quota (429,
/// 503), and after `Retry-After`, which takes precedence.
///
/// # Examples
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use idemkv::client::{rate_limit_wait, IgnoredReason, RateLimitField};
/// use std::time::{Duration, SystemTime};
///
/// let now = SystemTime::now();
/// let cap = Duration::from_secs(60);
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=0;t=30"#));
/// assert_eq!(rate_limit_wait(&headers, now, cap).wait, Some(Duration::from_secs(30)));
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
/// headers.insert("x-ratelimit-reset", HeaderValue::from_static("12"));
/// assert_eq!(rate_limit_wait(&headers, now, cap).wait, Some(Duration::from_secs(12)));
///
/// headers.insert("x-ratelimit-reset", HeaderValue::from_static("3600"));
/// let hour = rate_limit_wait(&headers, now, cap);
/// assert_eq!(hour.wait, None);
/// assert_eq!(hour.ignored, [(RateLimitField::XRateLimitReset, IgnoredReason::TooLong)]);
/// ```
#[must_use]
pub fn rate_limit_wait(headers: &HeaderMap, now: SystemTime, cap: Duration) -> RateLimitWait {
    let mut found = RateLimitWait::default();
    service_limits(headers, cap, &mut found);
    let pairs = [
        (RateLimitField::RateLimitReset, RateLimitField::RateLimitRemaining),
        (RateLimitField::XRateLimitReset, RateLimitField::XRateLimitRemaining),
    ];
    for (reset, remaining) in pairs {
        if let Some(wait) = legacy_reset(headers, reset, remaining, now, &mut found.ignored) {
            found.ask(reset, wait, cap);
        }
    }
    found
}

/// The field's name: its label value, which is the name in lower case.
fn name(field: RateLimitField) -> HeaderName {
    HeaderName::from_static(field.as_str())
}

/// The answer's `Date`, if it has exactly one that parses.
fn server_now(headers: &HeaderMap) -> Option<SystemTime> {
    let value = one_value(headers, DATE).ok()??;
    httpdate::parse_http_date(value.to_str().ok()?).ok()
}

/// A field's one value as text: `Ok(None)` when absent.
fn single(headers: &HeaderMap, field: RateLimitField) -> Result<Option<&str>, IgnoredReason> {
    let value = one_value(headers, name(field)).map_err(|Repeated| IgnoredReason::Repeated)?;
    let Some(value) = value else { return Ok(None) };
    let text = value.to_str().map_err(|_| IgnoredReason::Malformed)?;
    if text.len() > FIELD_BYTES_MAX {
        return Err(IgnoredReason::Malformed);
    }
    Ok(Some(text))
}

/// A list field's lines joined into one list (RFC 9651 §4.2): `Ok(None)`
/// when absent.
fn list(headers: &HeaderMap, field: RateLimitField) -> Result<Option<String>, IgnoredReason> {
    let mut joined: Option<String> = None;
    for value in headers.get_all(name(field)) {
        let text = value.to_str().map_err(|_| IgnoredReason::Malformed)?;
        let line = joined.get_or_insert_with(String::new);
        if line.len() + text.len() + 2 > FIELD_BYTES_MAX {
            return Err(IgnoredReason::Malformed);
        }
        if !line.is_empty() {
            line.push_str(", ");
        }
        line.push_str(text);
    }
    // A field present but empty is no list the draft allows.
    match joined {
        Some(text) if text.trim_matches([' ', '\t', ',']).is_empty() => Err(IgnoredReason::Malformed),
        joined => Ok(joined),
    }
}

/// One of the older drafts' pairs: the wait its reset asks for when its
/// quota is spent. A timestamp runs from the answer's `Date`, parsed only
/// then, or from `now` without one.
fn legacy_reset(
    headers: &HeaderMap,
    reset: RateLimitField,
    remaining: RateLimitField,
    now: SystemTime,
    ignored: &mut Vec<(RateLimitField, IgnoredReason)>,
) -> Option<Duration> {
    let reset_text = match single(headers, reset) {
        Ok(text) => text?,
        Err(reason) => {
            ignored.push((reset, reason));
            return None;
        }
    };
    let left = match single(headers, remaining) {
        Ok(None) => None,
        Ok(Some(text)) => match seconds(text) {
            Some(left) if left.subsec_nanos() == 0 => Some(left.as_secs()),
            _ => {
                ignored.push((remaining, IgnoredReason::Malformed));
                None
            }
        },
        Err(reason) => {
            ignored.push((remaining, reason));
            None
        }
    };
    if left.is_some_and(|left| left > 0) {
        return None;
    }
    let Some(value) = seconds(reset_text) else {
        ignored.push((reset, IgnoredReason::Malformed));
        return None;
    };
    if value.as_secs() < TIMESTAMP_MIN_SECONDS {
        return Some(value);
    }
    // A moment past what `SystemTime` holds is as good as never.
    let Some(at) = UNIX_EPOCH.checked_add(value) else { return Some(Duration::MAX) };
    let reference = server_now(headers).unwrap_or(now);
    Some(at.duration_since(reference).unwrap_or(Duration::ZERO))
}

/// A non-negative number of seconds, `digits` or `digits.digits`, with
/// optional spaces around; more digits than a `u64` holds is `u64::MAX`
/// seconds, fraction digits past nanoseconds are dropped.
fn seconds(text: &str) -> Option<Duration> {
    let text = text.trim_matches(OWS);
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let secs = whole_seconds(whole)?;
    if fraction.is_some_and(|fraction| !digits(fraction)) {
        return None;
    }
    let nanos = fraction.map_or(0, |fraction| {
        let kept = &fraction[..fraction.len().min(9)];
        let scale = 10_u32.pow(9 - u32::try_from(kept.len()).unwrap_or(9));
        kept.parse::<u32>().unwrap_or(0).saturating_mul(scale)
    });
    Some(Duration::new(secs, nanos))
}

/// One service limit of the draft's `RateLimit` field.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServiceLimit<'a> {
    policy: &'a str,
    remaining: u64,
    reset: Option<u64>,
}

/// The draft's `RateLimit` (and, when a spent limit has no `t`,
/// `RateLimit-Policy`): the waits its spent limits ask for.
fn service_limits(headers: &HeaderMap, cap: Duration, found: &mut RateLimitWait) {
    let parsed = match list(headers, RateLimitField::RateLimit) {
        Ok(None) => return,
        Ok(Some(text)) => sf::list(&text).ok_or(IgnoredReason::Malformed),
        Err(reason) => Err(reason),
    };
    let members = match parsed {
        Ok(members) => members,
        Err(reason) => {
            found.ignored.push((RateLimitField::RateLimit, reason));
            return;
        }
    };
    let mut policies = None;
    for member in &members {
        let Some(limit) = service_limit(member) else {
            found.ignored.push((RateLimitField::RateLimit, IgnoredReason::Malformed));
            continue;
        };
        if limit.remaining > 0 {
            continue;
        }
        let seconds = if let Some(reset) = limit.reset {
            Some((RateLimitField::RateLimit, reset))
        } else {
            let windows = policies.get_or_insert_with(|| policy_windows(headers, &mut found.ignored));
            let window = windows.iter().find(|(name, _)| limit.policy == name);
            window.map(|(_, window)| (RateLimitField::RateLimitPolicy, *window))
        };
        if let Some((field, seconds)) = seconds {
            found.ask(field, Duration::from_secs(seconds), cap);
        }
    }
}

/// A list member as a service limit: `None` when malformed (not a named
/// Item, no `r`, or `r` or `t` not a non-negative Integer).
fn service_limit(member: &sfv::ListEntry) -> Option<ServiceLimit<'_>> {
    let policy = sf::name(member)?;
    let remaining = sf::integer(member, sf::REMAINING).ok()??;
    let reset = sf::integer(member, sf::RESET).ok()?;
    Some(ServiceLimit { policy, remaining, reset })
}

/// The windows (`w`) of the `RateLimit-Policy` items, by policy name.
fn policy_windows(headers: &HeaderMap, ignored: &mut Vec<(RateLimitField, IgnoredReason)>) -> Vec<(String, u64)> {
    let text = match list(headers, RateLimitField::RateLimitPolicy) {
        Ok(Some(text)) => text,
        Ok(None) => return Vec::new(),
        Err(reason) => {
            ignored.push((RateLimitField::RateLimitPolicy, reason));
            return Vec::new();
        }
    };
    let Some(members) = sf::list(&text) else {
        ignored.push((RateLimitField::RateLimitPolicy, IgnoredReason::Malformed));
        return Vec::new();
    };
    let mut windows = Vec::new();
    for member in &members {
        match (sf::name(member), sf::integer(member, sf::WINDOW)) {
            (Some(name), Ok(Some(window))) if window > 0 => windows.push((name.to_owned(), window)),
            (_, Ok(None)) => {}
            _ => ignored.push((RateLimitField::RateLimitPolicy, IgnoredReason::Malformed)),
        }
    }
    windows
}

/// The structured-field List (RFC 9651), parsed by the `sfv` crate, read
/// as the rate-limit fields use its members: a name and parameters.
mod sf {
    use sfv::{BareItem, KeyRef, ListEntry};

    /// The quota left in a service limit.
    pub(super) const REMAINING: &KeyRef = KeyRef::constant("r");
    /// The seconds until a service limit's window ends.
    pub(super) const RESET: &KeyRef = KeyRef::constant("t");
    /// A quota policy's window, in seconds.
    pub(super) const WINDOW: &KeyRef = KeyRef::constant("w");

    /// A parameter that is not a non-negative Integer.
    pub(super) struct NotAnInteger;

    /// The name of a list member: a String or Token Item's; `None` for an
    /// Inner List or an Item of another type.
    pub(super) fn name(member: &ListEntry) -> Option<&str> {
        let ListEntry::Item(item) = member else { return None };
        match &item.bare_item {
            BareItem::String(name) => Some(name.as_str()),
            BareItem::Token(name) => Some(name.as_str()),
            _ => None,
        }
    }

    /// Parameter `key` of a list member as a non-negative Integer:
    /// `Ok(None)` if absent, `Err` if it is something else.
    pub(super) fn integer(member: &ListEntry, key: &KeyRef) -> Result<Option<u64>, NotAnInteger> {
        let params = match member {
            ListEntry::Item(item) => &item.params,
            ListEntry::InnerList(inner) => &inner.params,
        };
        let Some(value) = params.get(key) else { return Ok(None) };
        match value {
            BareItem::Integer(integer) => u64::try_from(i64::from(*integer)).map(Some).map_err(|_| NotAnInteger),
            _ => Err(NotAnInteger),
        }
    }

    /// The members of `text`, or `None` if it is not a List.
    pub(super) fn list(text: &str) -> Option<sfv::List> {
        sfv::Parser::new(text).parse_list::<sfv::List>().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    const CAP: Duration = Duration::from_secs(60);

    fn now() -> SystemTime {
        httpdate::parse_http_date("Fri, 04 Dec 2026 20:00:00 GMT").expect("date")
    }

    fn headers(fields: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, HeaderValue::from_str(value).expect("field value"));
        }
        headers
    }

    fn wait(fields: &[(&'static str, &str)]) -> RateLimitWait {
        rate_limit_wait(&headers(fields), now(), CAP)
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn every_field_is_read_under_its_label() {
        for field in [
            RateLimitField::RateLimit,
            RateLimitField::RateLimitPolicy,
            RateLimitField::RateLimitReset,
            RateLimitField::RateLimitRemaining,
            RateLimitField::XRateLimitReset,
            RateLimitField::XRateLimitRemaining,
        ] {
            assert_eq!(name(field).as_str(), field.as_str());
        }
    }

    #[test]
    fn the_drafts_spent_limit_asks_for_its_window() {
        assert_eq!(
            wait(&[("ratelimit", r#""default";r=0;t=30"#)]),
            RateLimitWait { wait: Some(secs(30)), ignored: vec![] }
        );
        assert_eq!(wait(&[("ratelimit", "default;r=0;t=5")]).wait, Some(secs(5)), "a token name");
        assert_eq!(wait(&[("ratelimit", r#""default";r=50;t=30"#)]).wait, None, "quota left");
        assert_eq!(wait(&[("ratelimit", r#""default";r=0"#)]).wait, None, "no window known");
        let two = r#""burst";r=0;t=10, "daily";r=5;t=3000, "hourly";r=0;t=20;pk=:cHsdsRa894==:"#;
        assert_eq!(wait(&[("ratelimit", two)]).wait, Some(secs(20)), "the longest spent one");
        let split = [("ratelimit", r#""a";r=0;t=4"#), ("ratelimit", r#""b";r=0;t=9"#)];
        assert_eq!(wait(&split).wait, Some(secs(9)), "lines of one list");
    }

    #[test]
    fn without_t_the_policys_window_counts() {
        let fields =
            [("ratelimit", r#""perhr";r=0"#), ("ratelimit-policy", r#""permin";q=50;w=60,"perhr";q=1000;w=45"#)];
        assert_eq!(wait(&fields), RateLimitWait { wait: Some(secs(45)), ignored: vec![] });
        let other = [("ratelimit", r#""daily";r=0"#), ("ratelimit-policy", r#""perhr";q=1000;w=45"#)];
        assert_eq!(wait(&other).wait, None, "no policy of that name");
        let bad = [("ratelimit", r#""perhr";r=0"#), ("ratelimit-policy", "perhr;q=1000;w=")];
        assert_eq!(wait(&bad).ignored, [(RateLimitField::RateLimitPolicy, IgnoredReason::Malformed)]);
    }

    #[test]
    fn the_policy_is_read_only_for_a_spent_limit_without_t() {
        // A policy that does not parse is counted only when it is read.
        let bad_policy = ("ratelimit-policy", "perhr;q=1000;w=");
        let not_read = [
            vec![bad_policy],
            vec![("ratelimit", r#""perhr";r=5"#), bad_policy],
            vec![("ratelimit", r#""perhr";r=0;t=7"#), bad_policy],
            vec![("ratelimit", r#""a";r=0;t=7, "b";r=3"#), bad_policy],
        ];
        for fields in not_read {
            let found = wait(&fields);
            assert!(found.ignored.is_empty(), "{fields:?}: {found:?}");
        }
        // Read once, however many spent limits lack `t`.
        let twice = [("ratelimit", r#""a";r=0, "b";r=0"#), bad_policy];
        assert_eq!(
            wait(&twice),
            RateLimitWait { wait: None, ignored: vec![(RateLimitField::RateLimitPolicy, IgnoredReason::Malformed)] }
        );
    }

    #[test]
    fn malformed_members_and_fields_are_ignored_and_named() {
        let malformed = [(RateLimitField::RateLimit, IgnoredReason::Malformed)];
        for value in [
            r#""default";t=30"#,
            r#""default";r=-1;t=30"#,
            r#""default";r=0;t=-30"#,
            r#""default";r=0;t=1.5"#,
            r#""default";r="0";t=30"#,
            r#"("a" "b");r=0;t=30"#,
            "7;r=0;t=30",
        ] {
            assert_eq!(
                wait(&[("ratelimit", value)]),
                RateLimitWait { wait: None, ignored: malformed.to_vec() },
                "{value}"
            );
        }
        for value in ["", ";;;", r#""default";r=0;t=30,"#, r#""default;r=0"#, "r=0, t=30 garbage"] {
            assert_eq!(wait(&[("ratelimit", value)]).ignored, malformed, "{value:?}");
        }
        // A good member beside a bad one still counts.
        let mixed = wait(&[("ratelimit", r#""a";r=0;t=8, "b";t=99"#)]);
        assert_eq!(mixed, RateLimitWait { wait: Some(secs(8)), ignored: malformed.to_vec() });
    }

    #[test]
    fn the_older_fields_as_delays() {
        assert_eq!(wait(&[("ratelimit-reset", "7")]).wait, Some(secs(7)), "no remaining: spent");
        assert_eq!(wait(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "7")]).wait, Some(secs(7)));
        assert_eq!(wait(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "7")]).wait, None);
        assert_eq!(
            wait(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", " 1.25 ")]).wait,
            Some(Duration::from_millis(1_250))
        );
        let both = [("ratelimit", r#""a";r=0;t=10"#), ("x-ratelimit-reset", "20"), ("ratelimit-reset", "15")];
        assert_eq!(wait(&both).wait, Some(secs(20)), "the longest of every field");
    }

    #[test]
    fn the_older_fields_as_timestamps_from_the_servers_date() {
        let epoch = now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
        let in_42 = (epoch + 42).to_string();
        assert_eq!(wait(&[("x-ratelimit-reset", in_42.as_str())]).wait, Some(secs(42)), "from now without a Date");
        // The server's clock is 10 s behind ours: its Date counts.
        let date = httpdate::fmt_http_date(now() - Duration::from_secs(10));
        assert_eq!(wait(&[("date", date.as_str()), ("x-ratelimit-reset", in_42.as_str())]).wait, Some(secs(52)));
        let past = (epoch - 5).to_string();
        assert_eq!(wait(&[("ratelimit-reset", past.as_str())]).wait, Some(Duration::ZERO), "already reset");
        let far = wait(&[("x-ratelimit-reset", "99999999999999999999999")]);
        assert_eq!(
            far,
            RateLimitWait { wait: None, ignored: vec![(RateLimitField::XRateLimitReset, IgnoredReason::TooLong)] }
        );
    }

    #[test]
    fn the_older_fields_ignored_with_a_reason() {
        let repeated = wait(&[("ratelimit-reset", "1"), ("ratelimit-reset", "2")]);
        assert_eq!(repeated.ignored, [(RateLimitField::RateLimitReset, IgnoredReason::Repeated)]);
        for value in ["soon", "-1", "+3", "1.", ".5", "0x10", "1e3", "3 s"] {
            let bad = wait(&[("x-ratelimit-reset", value)]);
            assert_eq!(bad.ignored, [(RateLimitField::XRateLimitReset, IgnoredReason::Malformed)], "{value}");
            assert_eq!(bad.wait, None);
        }
        // A remaining that does not parse counts as absent.
        let remaining = wait(&[("x-ratelimit-remaining", "none"), ("x-ratelimit-reset", "4")]);
        assert_eq!(
            remaining,
            RateLimitWait {
                wait: Some(secs(4)),
                ignored: vec![(RateLimitField::XRateLimitRemaining, IgnoredReason::Malformed)]
            }
        );
        let long = wait(&[("ratelimit", r#""a";r=0;t=61"#), ("ratelimit-reset", "60")]);
        assert_eq!(
            long,
            RateLimitWait { wait: Some(secs(60)), ignored: vec![(RateLimitField::RateLimit, IgnoredReason::TooLong)] }
        );
    }

    #[test]
    fn a_huge_field_is_not_parsed() {
        let huge = format!(r#""a";r=0;t=1{}"#, ", \"b\";r=1".repeat(1_000));
        assert_eq!(
            wait(&[("ratelimit", huge.as_str())]).ignored,
            [(RateLimitField::RateLimit, IgnoredReason::Malformed)]
        );
    }

    /// Field values: anything a `HeaderValue` may hold, and text shaped
    /// like the fields (names, parameters, numbers of any size and sign).
    fn field_value() -> impl Strategy<Value = Vec<u8>> {
        let shaped = r#"(("[a-z]{0,3}"|[a-z]{1,3}|\([a-z ]*\)|-?[0-9]{1,20})(;[rtwqkp]{1,2}=(-?[0-9]{0,22}(\.[0-9]{0,4})?|"[0-9]*"|\?1|:[A-Za-z0-9=]*:)){0,4}(, ?)?){0,3}"#;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            shaped.prop_map(String::into_bytes),
            r"[ \t]*-?[0-9]{0,25}(\.[0-9]{0,12})?[ \t]*".prop_map(String::into_bytes),
        ]
    }

    const NAMES: [&str; 7] = [
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-reset",
        "ratelimit-remaining",
        "x-ratelimit-reset",
        "x-ratelimit-remaining",
        "date",
    ];

    proptest! {
        #[test]
        fn no_input_panics_and_no_wait_exceeds_the_cap(
            fields in proptest::collection::vec((0..NAMES.len(), field_value()), 0..8),
            now_seconds in 0_u64..8_000_000_000,
            cap_millis in prop_oneof![0_u64..120_000, Just(u64::MAX)],
        ) {
            let mut headers = HeaderMap::new();
            for (index, value) in fields {
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    headers.append(NAMES[index], value);
                }
            }
            let now = UNIX_EPOCH + Duration::from_secs(now_seconds);
            let cap = Duration::from_millis(cap_millis);
            let found = rate_limit_wait(&headers, now, cap);
            prop_assert!(found.wait.is_none_or(|wait| wait <= cap), "{found:?} over {cap:?}");
            prop_assert!(found.ignored.len() <= 64);
        }
    }
}
