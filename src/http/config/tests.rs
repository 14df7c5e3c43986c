use super::*;

#[test]
fn the_default_policy_keeps_whatever_a_started_handler_answered() {
    let policy = FailurePolicy::Default;
    assert!(policy.keeps(StatusCode::CREATED, false));
    assert!(policy.keeps(StatusCode::PAYMENT_REQUIRED, false));
    assert!(policy.keeps(StatusCode::SERVICE_UNAVAILABLE, false), "a 5xx is the handler's answer too");
    assert!(policy.keeps(StatusCode::NOT_FOUND, false), "a handler's 404 is its answer");
    assert!(policy.keeps(StatusCode::METHOD_NOT_ALLOWED, false), "as is its 405");
    assert!(!policy.keeps(StatusCode::BAD_REQUEST, false), "validation");
    assert!(policy.keeps(StatusCode::UNPROCESSABLE_ENTITY, true), "validation, kept on request");
    assert!(!policy.releases_on_error());
}

#[test]
fn a_ttl_goes_with_every_claim_and_none_leaves_the_backends_own() {
    assert_eq!(LayerConfig::global().claim_options(None).ttl, None);
    let config = LayerConfig::global().lease(Duration::from_secs(7)).ttl(Duration::from_secs(2));
    let options = config.claim_options(Some(Duration::from_secs(1)));
    assert_eq!(
        (options.ttl, options.lease, options.wait),
        (Some(Duration::from_secs(2)), Some(Duration::from_secs(7)), Some(Duration::from_secs(1)))
    );
}

#[test]
fn the_other_policies() {
    assert!(FailurePolicy::KeepAll.keeps(StatusCode::NOT_FOUND, false));
    let old = FailurePolicy::ReleaseOnServerError;
    assert!(!old.keeps(StatusCode::SERVICE_UNAVAILABLE, false));
    assert!(!old.keeps(StatusCode::TOO_MANY_REQUESTS, false));
    assert!(old.keeps(StatusCode::PAYMENT_REQUIRED, false));
    assert!(old.keeps(StatusCode::NOT_FOUND, false));
    assert!(old.releases_on_error());
}
