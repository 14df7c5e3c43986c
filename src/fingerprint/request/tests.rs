use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn head(uri: &str) -> Parts {
    http::Request::post(uri).body(()).expect("request").into_parts().0
}

fn json() -> RequestFingerprint {
    RequestFingerprint::json().build().expect("rules")
}

/// Guards the default: exactly the digest the layer has always taken, so
/// that keys stored before a fingerprint could be chosen still replay.
#[test]
fn the_default_is_method_path_query_and_bytes() {
    let parts = head("/payments?dry_run=1&x=2");
    let expected = Fingerprint::builder()
        .part(b"POST")
        .part(b"/payments")
        .part(b"dry_run=1&x=2")
        .part(br#"{"amount":10}"#)
        .finish();
    let default = RequestFingerprint::default();
    assert_eq!(default.of(&parts, br#"{"amount":10}"#), Ok(expected));
    assert_eq!(RequestFingerprint::bytes().build().expect("rules").of(&parts, br#"{"amount":10}"#), Ok(expected));
    assert_ne!(default.of(&parts, br#"{"amount": 10}"#), Ok(expected), "bytes as sent");
    let none = Fingerprint::builder().part(b"POST").part(b"/payments").part(b"").part(b"").finish();
    assert_eq!(default.of(&head("/payments"), b""), Ok(none));
    assert!(format!("{default:?}").contains("Bytes"), "{default:?}");
}

#[test]
fn json_is_read_for_its_meaning_and_refused_when_it_is_none() {
    let parts = head("/payments");
    let fingerprint = json();
    let first = fingerprint.of(&parts, br#"{"amount":10,"to":"A"}"#).expect("JSON");
    assert_eq!(fingerprint.of(&parts, b" {\"to\" : \"\\u0041\",\n\"amount\": 1.0e1 } "), Ok(first));
    assert_ne!(fingerprint.of(&parts, br#"{"amount":10,"to":"B"}"#), Ok(first));
    assert_ne!(fingerprint.of(&head("/refunds"), br#"{"amount":10,"to":"A"}"#), Ok(first), "the path counts");
    assert_ne!(RequestFingerprint::default().of(&parts, br#"{"amount":10,"to":"A"}"#), Ok(first));
    for bad in [&b""[..], b"amount=10", b"{\"amount\":10", b"{\"a\":1,\"a\":2}", b"\xff"] {
        assert!(matches!(fingerprint.of(&parts, bad), Err(FingerprintError::BodyNotJson(_))), "{bad:?}");
    }
}

#[test]
fn included_fields_alone_count_and_absent_is_not_null() {
    let fingerprint = RequestFingerprint::json().include("/amount").include("/payee/iban").build().expect("rules");
    let parts = head("/payments");
    let of = |body: &str| fingerprint.of(&parts, body.as_bytes()).expect("JSON");
    let first = of(r#"{"amount":10,"payee":{"iban":"DE1","name":"Ann"},"note":"rent"}"#);
    assert_eq!(of(r#"{"note":"May","payee":{"name":"Anne","iban":"DE1"},"amount":10.0}"#), first);
    assert_ne!(of(r#"{"amount":11,"payee":{"iban":"DE1"}}"#), first);
    assert_ne!(of(r#"{"amount":10,"payee":{"iban":"DE2"}}"#), first);
    assert_ne!(of(r#"{"amount":10}"#), of(r#"{"amount":10,"payee":{"iban":null}}"#));
    assert_eq!(of("[]"), of("{}"), "nothing included is there in either");
}

#[test]
fn the_order_rules_are_given_in_does_not_count() {
    let (api, tenant) = (HeaderName::from_static("x-api-version"), HeaderName::from_static("x-tenant"));
    let one = RequestFingerprint::json().include("/a").include("/b").header(api.clone()).header(tenant.clone());
    let other = RequestFingerprint::json().include("/b").include("/a").include("/b").header(tenant).header(api);
    let (parts, ()) = http::Request::post("/p")
        .header("x-api-version", "1")
        .header("x-tenant", "t")
        .body(())
        .expect("request")
        .into_parts();
    let body = br#"{"a":1,"b":2}"#;
    assert_eq!(one.build().expect("rules").of(&parts, body), other.build().expect("rules").of(&parts, body));
}

#[test]
fn excluded_fields_do_not_count_inside_included_ones_either() {
    let fingerprint =
        RequestFingerprint::json().include("/payment").exclude("/payment/sent_at").build().expect("rules");
    let parts = head("/payments");
    let of = |body: &str| fingerprint.of(&parts, body.as_bytes()).expect("JSON");
    let first = of(r#"{"payment":{"amount":10,"sent_at":"12:00"}}"#);
    assert_eq!(of(r#"{"payment":{"amount":10}}"#), first);
    assert_ne!(of(r#"{"payment":{"amount":12,"sent_at":"12:00"}}"#), first);
}

#[test]
fn headers_included_count_and_ignored_query_parameters_do_not() {
    let name = HeaderName::from_static("x-api-version");
    let fingerprint = RequestFingerprint::bytes().header(name).ignore_query("utm_source").build().expect("rules");
    let with = |uri: &str, versions: &[&str]| {
        let mut request = http::Request::post(uri);
        for version in versions {
            request = request.header("x-api-version", *version);
        }
        let (parts, ()) = request.body(()).expect("request").into_parts();
        fingerprint.of(&parts, b"amount=10").expect("bytes")
    };
    let first = with("/payments?a=1", &["1"]);
    assert_eq!(with("/payments?utm_source=mail&a=1", &["1"]), first);
    assert_eq!(with("/payments?utm%5Fsource=x&a=1&utm_source", &["1"]), first, "decoded names; all of them");
    assert_ne!(with("/payments?a=2&utm_source=mail", &["1"]), first);
    assert_ne!(with("/payments?a=1", &["2"]), first);
    assert_ne!(with("/payments?a=1", &[]), first);
    assert_ne!(with("/payments?a=1", &["1", "1"]), first);
    assert_ne!(with("/payments?a=1", &[]), with("/payments?a=1", &[""]), "no value is not an empty one");
}

#[test]
fn percent_decoding_leaves_what_it_cannot_read() {
    assert_eq!(percent_decoded("a%20b+c%2"), b"a b c%2".to_vec());
    assert_eq!(percent_decoded("%zz%4A"), b"%zzJ".to_vec());
    assert_eq!(kept_query("x=1&&y=2&x", &[b"x".to_vec()]), "&y=2");
}

#[test]
fn malformed_pointers_are_refused_when_built() {
    let error = RequestFingerprint::json().include("/amount").exclude("trace").build().expect_err("not a pointer");
    assert_eq!(error.pointer(), "trace");
    assert!(RequestFingerprint::bytes().include("/a~2").build().is_err());
}

#[test]
fn a_custom_fingerprint_is_called_as_it_is() {
    let fingerprint = RequestFingerprint::new(|parts, body| {
        if body.is_empty() {
            return Err(FingerprintError::Refused("Send a body."));
        }
        Ok(Fingerprint::builder().part(parts.uri.path().as_bytes()).finish())
    });
    let parts = head("/payments?q=1");
    assert_eq!(fingerprint.of(&parts, b"x"), Ok(Fingerprint::builder().part(b"/payments").finish()));
    assert_eq!(fingerprint.of(&parts, b""), Err(FingerprintError::Refused("Send a body.")));
    assert_eq!(format!("{fingerprint:?}"), "RequestFingerprint(custom)");
}

// --- properties -------------------------------------------------------------

/// A JSON value as a test knows it: numbers as ±mantissa × 10^scale,
/// objects with unique names.
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Number { negative: bool, mantissa: u64, scale: i32 },
    Text(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::char::range('a', 'e'),
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('\n'),
            Just('\u{1}'),
            Just('é'),
            Just('\u{1f600}'),
        ],
        0..6,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn number() -> impl Strategy<Value = Json> {
    (any::<bool>(), prop_oneof![Just(0u64), 0u64..1000, any::<u64>()], -30i32..30)
        .prop_map(|(negative, mantissa, scale)| Json::Number { negative, mantissa, scale })
}

fn leaf() -> impl Strategy<Value = Json> {
    prop_oneof![Just(Json::Null), any::<bool>().prop_map(Json::Bool), number(), text().prop_map(Json::Text)]
}

fn document() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::btree_map(text(), inner, 0..6).prop_map(Json::Object),
        ]
    })
}

/// A small generator of the choices a serialiser makes, from a seed.
struct Choices(u64);

impl Choices {
    /// A choice among `below`.
    fn pick(&mut self, below: usize) -> usize {
        // xorshift64*: the seed is never 0 (it is or-ed with 1).
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
        usize::try_from(value).unwrap_or(0) % below
    }

    fn space(&mut self, out: &mut String) {
        for _ in 0..self.pick(3) {
            out.push([' ', '\n', '\t', '\r'][self.pick(4)]);
        }
    }
}

/// One of the spellings of a number: trailing zeros added to the
/// mantissa, then plain digits with the point placed, or an exponent
/// (`e` or `E`, signed or not, with leading zeros).
fn spell_number(negative: bool, mantissa: u64, scale: i32, choices: &mut Choices) -> String {
    let zeros = u32::try_from(choices.pick(3)).unwrap_or(0);
    let digits = (u128::from(mantissa) * 10u128.pow(zeros)).to_string();
    let scale = i64::from(scale) - i64::from(zeros);
    let sign = if negative { "-" } else { "" };
    if choices.pick(2) == 0 {
        let e = ["e", "E"][choices.pick(2)];
        let plus = if scale >= 0 && choices.pick(2) == 0 { "+" } else { "" };
        let pad = "0".repeat(choices.pick(3));
        let magnitude = scale.unsigned_abs();
        let minus = if scale < 0 { "-" } else { "" };
        return format!("{sign}{digits}{e}{plus}{minus}{pad}{magnitude}");
    }
    if mantissa == 0 {
        // Zero: no digits may follow a leading 0 before the point.
        return format!("{sign}0{}", if choices.pick(2) == 0 { ".000" } else { "" });
    }
    if scale >= 0 {
        let point = if choices.pick(2) == 0 { ".0" } else { "" };
        return format!("{sign}{digits}{}{point}", "0".repeat(usize::try_from(scale).unwrap_or(0)));
    }
    let fraction = usize::try_from(scale.unsigned_abs()).unwrap_or(0);
    let padded = format!("{}{digits}", "0".repeat((fraction + 1).saturating_sub(digits.len())));
    let (whole, part) = padded.split_at(padded.len() - fraction);
    format!("{sign}{whole}.{part}")
}

fn spell_text(text: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for char in text.chars() {
        let plain = !matches!(char, '"' | '\\') && u32::from(char) >= 0x20;
        match (plain, choices.pick(3)) {
            (true, 0 | 1) => out.push(char),
            (false, 0) if char == '"' => out.push_str("\\\""),
            (false, 0) if char == '\\' => out.push_str("\\\\"),
            (true, 2) if char == '/' => out.push_str("\\/"),
            _ => {
                let mut units = [0u16; 2];
                for unit in char.encode_utf16(&mut units) {
                    let _ =
                        if choices.pick(2) == 0 { write!(out, "\\u{unit:04x}") } else { write!(out, "\\u{unit:04X}") };
                }
            }
        }
    }
    out.push('"');
}

/// `json` spelt as a serialiser whose choices are `choices` would: members
/// in a shuffled order, whitespace anywhere it may be, numbers and strings
/// in any of their spellings.
fn spell(json: &Json, choices: &mut Choices, out: &mut String) {
    choices.space(out);
    match json {
        Json::Null => out.push_str("null"),
        Json::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
        Json::Number { negative, mantissa, scale } => {
            out.push_str(&spell_number(*negative, *mantissa, *scale, choices));
        }
        Json::Text(text) => spell_text(text, choices, out),
        Json::Array(items) => {
            out.push('[');
            choices.space(out);
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                spell(item, choices, out);
            }
            out.push(']');
        }
        Json::Object(members) => {
            let mut order: Vec<_> = members.iter().collect();
            for at in (1..order.len()).rev() {
                order.swap(at, choices.pick(at + 1));
            }
            out.push('{');
            choices.space(out);
            for (index, (name, value)) in order.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                choices.space(out);
                spell_text(name, choices, out);
                choices.space(out);
                out.push(':');
                spell(value, choices, out);
            }
            out.push('}');
        }
    }
    choices.space(out);
}

fn spelt(json: &Json, seed: u64) -> String {
    let mut out = String::new();
    spell(json, &mut Choices(seed | 1), &mut out);
    out
}

/// `json` with one value changed — a leaf, or an empty array or object —
/// down the path `path` picks; never to an equal value.
fn changed(json: &mut Json, path: &mut impl Iterator<Item = usize>) {
    match json {
        Json::Null => *json = Json::Bool(false),
        Json::Bool(value) => *value = !*value,
        Json::Number { negative, mantissa, .. } if *mantissa == u64::MAX => {
            *mantissa -= 1;
            *negative = !*negative;
        }
        Json::Number { mantissa, .. } => *mantissa += 1,
        Json::Text(text) => text.push('x'),
        Json::Array(items) if items.is_empty() => items.push(Json::Null),
        Json::Object(members) if members.is_empty() => {
            members.insert(String::new(), Json::Null);
        }
        Json::Array(items) => {
            let at = path.next().unwrap_or(0) % items.len();
            changed(&mut items[at], path);
        }
        Json::Object(members) => {
            let at = path.next().unwrap_or(0) % members.len();
            let value = members.values_mut().nth(at).expect("in range");
            changed(value, path);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any re-serialisation of a value — members shuffled, whitespace,
    /// equivalent numbers and escapes — fingerprints the same.
    #[test]
    fn every_spelling_of_a_value_is_one_fingerprint(value in document(), first in any::<u64>(), second in any::<u64>()) {
        let parts = head("/payments");
        let (a, b) = (spelt(&value, first), spelt(&value, second));
        let fingerprint = json();
        prop_assert_eq!(fingerprint.of(&parts, a.as_bytes()), fingerprint.of(&parts, b.as_bytes()), "{} / {}", a, b);
        prop_assert!(fingerprint.of(&parts, a.as_bytes()).is_ok(), "{}", a);
    }

    /// Any change to the document changes its fingerprint, however each
    /// is spelt.
    #[test]
    fn any_change_is_another_fingerprint(
        value in document(),
        path in prop::collection::vec(any::<usize>(), 8),
        seeds in any::<(u64, u64)>(),
    ) {
        let mut other = value.clone();
        changed(&mut other, &mut path.into_iter());
        let parts = head("/payments");
        let (a, b) = (spelt(&value, seeds.0), spelt(&other, seeds.1));
        prop_assert_ne!(json().of(&parts, a.as_bytes()), json().of(&parts, b.as_bytes()), "{} / {}", a, b);
    }

    /// A change to an included field changes the fingerprint; a change
    /// anywhere else, or to an excluded field inside an included one,
    /// does not.
    #[test]
    fn included_fields_count_and_nothing_else_does(
        amount in number(),
        rest in prop::collection::btree_map(text(), document(), 0..4),
        trace in document(),
        other_trace in document(),
        other_rest in prop::collection::btree_map(text(), document(), 0..4),
        path in prop::collection::vec(any::<usize>(), 8),
        seeds in any::<(u64, u64)>(),
    ) {
        let fingerprint = RequestFingerprint::json()
            .include("/payment")
            .exclude("/payment/trace")
            .build()
            .expect("rules");
        let payment = |amount: &Json, trace: &Json| {
            Json::Object(BTreeMap::from([("amount".to_owned(), amount.clone()), ("trace".to_owned(), trace.clone())]))
        };
        let body = |payment: Json, rest: &BTreeMap<String, Json>| {
            let mut members = rest.clone();
            members.insert("payment".to_owned(), payment);
            Json::Object(members)
        };
        let parts = head("/payments");
        let of = |json: &Json, seed| fingerprint.of(&parts, spelt(json, seed).as_bytes()).expect("JSON");
        let first = of(&body(payment(&amount, &trace), &rest), seeds.0);
        prop_assert_eq!(of(&body(payment(&amount, &other_trace), &other_rest), seeds.1), first);
        let mut changed_amount = amount.clone();
        changed(&mut changed_amount, &mut path.into_iter());
        prop_assert_ne!(of(&body(payment(&changed_amount, &trace), &rest), seeds.1), first);
    }

    /// No body makes a JSON fingerprint panic: bytes, and near-JSON.
    #[test]
    fn no_body_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), value in document(), cut in any::<usize>()) {
        let parts = head("/payments");
        let _ = json().of(&parts, &bytes);
        let text = spelt(&value, 7);
        let cut = cut % (text.len() + 1);
        let _ = json().of(&parts, &text.as_bytes()[..cut]);
    }
}
