//! Arbitrary headers and bodies through both webhook verifiers: never a
//! panic or a hang, only an answer; and what the Standard Webhooks signer
//! signs (any id it takes, any timestamp, any body) verifies at its own
//! timestamp, as does what Stripe's scheme signs, and a good signature
//! verifies whatever entries come before it.
#![no_main]

use arbitrary::Arbitrary;
use http::{HeaderMap, HeaderValue};
use idemkv::webhook::{StandardWebhooks, StripeSignature, WebhookError, WebhookVerifier};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

#[derive(Arbitrary, Debug)]
struct Input {
    id: Vec<u8>,
    timestamp: Vec<u8>,
    signature: Vec<u8>,
    stripe: Vec<u8>,
    body: Vec<u8>,
    now: u32,
    signed_id: String,
    signed_at: u32,
}

fuzz_target!(|input: Input| {
    let webhooks = StandardWebhooks::new(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]).expect("secret");
    let stripe = StripeSignature::new(["whsec_test_secret"]).expect("secret");
    let mut headers = HeaderMap::new();
    let fields = [
        ("webhook-id", &input.id),
        ("webhook-timestamp", &input.timestamp),
        ("webhook-signature", &input.signature),
        ("stripe-signature", &input.stripe),
    ];
    for (name, value) in fields {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.insert(name, value);
        }
    }
    let now = UNIX_EPOCH + Duration::from_secs(u64::from(input.now));
    let _answer = webhooks.verify(&headers, &input.body, now);
    let _answer = stripe.verify(&headers, &input.body, now);

    let at = UNIX_EPOCH + Duration::from_secs(u64::from(input.signed_at));
    // The signer takes any id that is a header value (no control character).
    if !input.signed_id.is_empty() && HeaderValue::from_str(&input.signed_id).is_ok() {
        let signed = webhooks.headers(&input.signed_id, u64::from(input.signed_at), &input.body);
        let verified = webhooks.verify(&signed, &input.body, at).map(|verified| verified.id);
        assert_eq!(verified, Ok(input.signed_id.clone()));
    }
    // Whatever entries come before a good signature, it verifies: an
    // entry the verifier cannot read never hides a good one.
    if let Ok(extra) = std::str::from_utf8(&input.signature) {
        let mut signed = webhooks.headers("msg_1", u64::from(input.signed_at), &input.body);
        let good = signed["webhook-signature"].to_str().expect("base64").to_owned();
        if let Ok(value) = HeaderValue::from_str(&format!("{extra} {good}")) {
            signed.insert("webhook-signature", value);
            assert!(webhooks.verify(&signed, &input.body, at).is_ok(), "{extra:?} hid a good signature");
        }
    }
    let signed = stripe.headers(u64::from(input.signed_at), &input.body);
    match stripe.verify(&signed, &input.body, at) {
        Ok(_) | Err(WebhookError::MissingId) => {}
        Err(error) => panic!("Stripe's own signature refused: {error}"),
    }
});
