//! The published test vectors, and every way a webhook is refused.

use super::*;

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
const AT: u64 = 1_649_367_553;
const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

fn headers(id: &str, timestamp: &str, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", HeaderValue::from_str(id).expect("id"));
    headers.insert("webhook-timestamp", HeaderValue::from_str(timestamp).expect("timestamp"));
    headers.insert("webhook-signature", HeaderValue::from_str(signature).expect("signature"));
    headers
}

/// The vectors of the Standard Webhooks reference libraries.
#[test]
fn the_published_vectors_sign_and_verify() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    assert_eq!(webhooks.sign(ID, AT, BODY), "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    let verified = webhooks.verify(&headers(ID, "1649367553", &webhooks.sign(ID, AT, BODY)), BODY, at(AT));
    assert_eq!(verified, Ok(Verified { id: ID.into(), timestamp: AT }));

    let svix = StandardWebhooks::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).expect("secret");
    let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    let body = br#"{"test": 2432232314}"#;
    assert_eq!(svix.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body), signature);
    let sent = headers("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", signature);
    assert!(svix.verify(&sent, body, at(1_614_265_330)).is_ok());
}

#[test]
fn one_good_signature_among_several_verifies_and_none_does_not() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let good = webhooks.sign(ID, AT, BODY);
    let others = "v1,tFtCZ5RDCPxzWQRWXWPgrCgE2frDBe9gjpbWQxnVfsQ= v1,Mm7xgUVICxZfQ3bgf0h0Dof65L/IFx+PnZvnDWPCX6Q=";
    assert!(webhooks.verify(&headers(ID, "1649367553", &format!("{others} {good}")), BODY, at(AT)).is_ok());
    let refused = webhooks.verify(&headers(ID, "1649367553", others), BODY, at(AT));
    assert_eq!(refused, Err(WebhookError::InvalidSignature));
    // A v2 signature is not a v1 one: with no v1 beside it, nothing the
    // verifier can read.
    let v2 = good.replacen("v1,", "v2,", 1);
    let refused = webhooks.verify(&headers(ID, "1649367553", &v2), BODY, at(AT));
    assert_eq!(refused, Err(WebhookError::InvalidHeader("webhook-signature")));
}

/// Guards that an entry the verifier cannot read (an unknown version, bad
/// base64, no version) beside a good `v1` no longer refuses the whole
/// header: Standard Webhooks verifies when any entry does.
#[test]
fn an_unreadable_signature_entry_does_not_hide_a_good_one() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let good = webhooks.sign(ID, AT, BODY);
    let wrong = "v1,tFtCZ5RDCPxzWQRWXWPgrCgE2frDBe9gjpbWQxnVfsQ=";
    let unreadable =
        ["v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1,not+base64!", "v1,", "nonsense", "v2,AAAA"];
    for bad in unreadable {
        for signature in [format!("{bad} {good}"), format!("{good} {bad}"), format!("{bad} {wrong}  {good}")] {
            let verified = webhooks.verify(&headers(ID, "1649367553", &signature), BODY, at(AT));
            assert_eq!(verified, Ok(Verified { id: ID.into(), timestamp: AT }), "{signature}");
        }
        // Beside a readable signature that matches nothing: none matched.
        let refused = webhooks.verify(&headers(ID, "1649367553", &format!("{bad} {wrong}")), BODY, at(AT));
        assert_eq!(refused, Err(WebhookError::InvalidSignature), "{bad}");
    }
    // Nothing readable at all: the header is not a signature of this scheme.
    let refused = webhooks.verify(&headers(ID, "1649367553", &unreadable.join(" ")), BODY, at(AT));
    assert_eq!(refused, Err(WebhookError::InvalidHeader("webhook-signature")));
    assert_eq!(WebhookError::InvalidHeader("webhook-signature").status(), 400);
    assert_eq!(WebhookError::InvalidSignature.status(), 401);
    // A good signature beside a bad entry still meets the tolerance.
    let stale = webhooks.verify(&headers(ID, "1649367553", &format!("v1a,x {good}")), BODY, at(AT + 301));
    assert_eq!(stale, Err(WebhookError::Stale { skew_seconds: 301 }));
}

/// The same for Stripe: a `v1=` that is not hex, `v0=`, an unknown scheme
/// or an item without `=` beside a good `v1=` verifies.
#[test]
fn stripe_passes_over_unreadable_items_beside_a_good_signature() {
    let stripe = StripeSignature::new(["whsec_test_secret"]).expect("secret");
    let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let good = "v1=4ee5e8d695c9619e003fd480d3d51700d924e29697337d379a6ef6e06e703ab4";
    let wrong = "v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd";
    let at_t = at(1_492_774_577);
    let verify = |value: &str| {
        let mut sent = HeaderMap::new();
        sent.insert("stripe-signature", HeaderValue::from_str(value).expect("value"));
        stripe.verify(&sent, body, at_t)
    };
    for bad in [
        "v1=zz",
        "v1=abc",
        "v1=",
        "v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
        "v2=00",
        "garbage",
    ] {
        for value in [
            format!("t=1492774577,{bad},{good}"),
            format!("t=1492774577,{good},{bad}"),
            format!("{bad},t=1492774577,{wrong},{good}"),
        ] {
            assert_eq!(verify(&value), Ok(Verified { id: "evt_1".into(), timestamp: 1_492_774_577 }), "{value}");
        }
        assert_eq!(verify(&format!("t=1492774577,{bad},{wrong}")), Err(WebhookError::InvalidSignature), "{bad}");
        assert_eq!(
            verify(&format!("t=1492774577,{bad}")),
            Err(WebhookError::InvalidHeader("stripe-signature")),
            "{bad}"
        );
    }
    // The timestamp is signed: a malformed or a second one refuses the header.
    for value in [format!("t=x,{good}"), format!("t=1492774577,t=1492774577,{good}"), good.to_owned()] {
        assert_eq!(verify(&value), Err(WebhookError::InvalidHeader("stripe-signature")), "{value}");
    }
}

#[test]
fn a_tampered_body_id_or_timestamp_is_refused() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let signature = webhooks.sign(ID, AT, BODY);
    let tampered = br#"{"email":"evil@example.com","username":"test_user"}"#;
    assert_eq!(
        webhooks.verify(&headers(ID, "1649367553", &signature), tampered, at(AT)),
        Err(WebhookError::InvalidSignature)
    );
    assert_eq!(
        webhooks.verify(&headers("msg_other", "1649367553", &signature), BODY, at(AT)),
        Err(WebhookError::InvalidSignature)
    );
    assert_eq!(
        webhooks.verify(&headers(ID, "1649367554", &signature), BODY, at(AT)),
        Err(WebhookError::InvalidSignature)
    );
}

#[test]
fn a_timestamp_outside_the_window_is_stale_either_way() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let sent = headers(ID, "1649367553", &webhooks.sign(ID, AT, BODY));
    assert!(webhooks.verify(&sent, BODY, at(AT + 300)).is_ok(), "at the edge");
    assert_eq!(webhooks.verify(&sent, BODY, at(AT + 301)), Err(WebhookError::Stale { skew_seconds: 301 }));
    assert_eq!(webhooks.verify(&sent, BODY, at(AT - 301)), Err(WebhookError::Stale { skew_seconds: -301 }));
    let narrow = webhooks.clone().tolerance(Duration::from_secs(10));
    assert!(matches!(narrow.verify(&sent, BODY, at(AT + 11)), Err(WebhookError::Stale { .. })));
    assert_eq!(WebhookError::Stale { skew_seconds: 1 }.status(), 401);
}

#[test]
fn a_rotation_verifies_with_either_secret_and_signs_with_both() {
    let old = StandardWebhooks::new([SECRET]).expect("old");
    let new = StandardWebhooks::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).expect("new");
    let both = StandardWebhooks::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", SECRET]).expect("both");
    for sender in [&old, &new] {
        let sent = headers(ID, "1649367553", &sender.sign(ID, AT, BODY));
        assert!(both.verify(&sent, BODY, at(AT)).is_ok());
    }
    let signed = both.sign(ID, AT, BODY);
    assert_eq!(signed.split(' ').count(), 2);
    for receiver in [&old, &new] {
        assert!(receiver.verify(&headers(ID, "1649367553", &signed), BODY, at(AT)).is_ok());
    }
}

#[test]
fn missing_or_malformed_headers_are_400s() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let good = headers(ID, "1649367553", &webhooks.sign(ID, AT, BODY));
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let mut missing = good.clone();
        missing.remove(name);
        let refused = webhooks.verify(&missing, BODY, at(AT)).expect_err("missing");
        assert_eq!((refused.clone(), refused.status()), (WebhookError::MissingHeader(name), 400));
    }
    for timestamp in ["", "-1", "+1649367553", "1649367553.0", " 1", "99999999999999999999999"] {
        let mut bad = good.clone();
        bad.insert("webhook-timestamp", HeaderValue::from_str(timestamp).expect("value"));
        assert_eq!(
            webhooks.verify(&bad, BODY, at(AT)),
            Err(WebhookError::InvalidHeader("webhook-timestamp")),
            "{timestamp:?}"
        );
    }
    for signature in ["v1", "v1,not base64!", "nonsense"] {
        let bad = headers(ID, "1649367553", signature);
        assert_eq!(
            webhooks.verify(&bad, BODY, at(AT)),
            Err(WebhookError::InvalidHeader("webhook-signature")),
            "{signature}"
        );
    }
    let mut twice = good.clone();
    twice.append("webhook-id", HeaderValue::from_static("msg_2"));
    assert_eq!(webhooks.verify(&twice, BODY, at(AT)), Err(WebhookError::InvalidHeader("webhook-id")));
}

#[test]
fn bad_secrets_are_typed_errors() {
    for secrets in [vec![], vec!["whsec_"], vec!["whsec_!!!"]] {
        assert!(matches!(StandardWebhooks::new(secrets), Err(Error::InvalidConfig(_))));
    }
    assert!(matches!(StripeSignature::new(Vec::<String>::new()), Err(Error::InvalidConfig(_))));
    assert!(matches!(StripeSignature::new([""]), Err(Error::InvalidConfig(_))));
}

/// A signature computed apart from this crate (Python's `hmac`, SHA-256,
/// over `t.body` under the secret as written).
#[test]
fn stripe_verifies_an_independent_signature_and_takes_the_event_id() {
    let stripe = StripeSignature::new(["whsec_test_secret"]).expect("secret");
    let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let mut sent = HeaderMap::new();
    let value = "t=1492774577,v1=4ee5e8d695c9619e003fd480d3d51700d924e29697337d379a6ef6e06e703ab4,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39";
    sent.insert("stripe-signature", HeaderValue::from_static(value));
    assert_eq!(
        stripe.verify(&sent, body, at(1_492_774_577)),
        Ok(Verified { id: "evt_1".into(), timestamp: 1_492_774_577 })
    );
    assert_eq!(stripe.headers(1_492_774_577, body)["stripe-signature"], value.split(",v0").next().expect("v1"));
    assert!(matches!(stripe.verify(&sent, body, at(1_492_774_577 + 301)), Err(WebhookError::Stale { .. })));
    assert_eq!(
        stripe.verify(&sent, br#"{"id":"evt_2","type":"charge.succeeded"}"#, at(1_492_774_577)),
        Err(WebhookError::InvalidSignature)
    );
    let rotated = StripeSignature::new(["whsec_new", "whsec_test_secret"]).expect("secrets");
    assert!(rotated.verify(&sent, body, at(1_492_774_577)).is_ok());
    for value in ["v1=00", "t=1492774577", "t=x,v1=00", "t=1,t=2,v1=00", "t=1492774577,v1=zz"] {
        let mut bad = HeaderMap::new();
        bad.insert("stripe-signature", HeaderValue::from_static(value));
        assert!(stripe.verify(&bad, body, at(1_492_774_577)).is_err(), "{value}");
    }
    let no_id = br#"{"type":"charge.succeeded"}"#;
    let signed = stripe.headers(1_492_774_577, no_id);
    assert_eq!(stripe.verify(&signed, no_id, at(1_492_774_577)), Err(WebhookError::MissingId));
}

/// What the signer signs, the verifier verifies: an id with a letter
/// outside ASCII too.
#[test]
fn a_non_ascii_id_signs_and_verifies() {
    let webhooks = StandardWebhooks::new([SECRET]).expect("secret");
    let sent = webhooks.headers("msg ü 1", AT, BODY);
    assert_eq!(webhooks.verify(&sent, BODY, at(AT)).map(|verified| verified.id), Ok("msg ü 1".to_owned()));
}
