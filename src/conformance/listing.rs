//! The listing's scenarios: [`IdempotencyBackend::scan`] and
//! [`IdempotencyBackend::scan_staged`] pages.

use super::contract::{acquire, options};
use super::Setting;
use crate::{backend::IdempotencyBackend, State};

/// A scope's live records come back in key order, a page at a time, each
/// page after the last key of the one before: released keys and other
/// scopes' keys are not in it, and a page ends at its limit.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn scan<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let scope = setting.key("listed-scope");
    let other = setting.key("other-scope");
    for key in [&b"k3"[..], b"k1", b"k5", b"k2", b"k4"] {
        let (token, _, _) = acquire(backend, &scope, key, options()).await;
        match key {
            b"k2" => backend.release(&token).await.expect("release"),
            b"k4" => {} // still processing
            b"k5" => backend.fail(&token, b"failed k5").await.expect("fail"),
            _ => backend.complete(&token, &[b"done ", key].concat()).await.expect("complete"),
        }
    }
    let (token, _, _) = acquire(backend, &other, b"k1", options()).await;
    backend.complete(&token, b"elsewhere").await.expect("complete");

    let first = backend.scan(&scope, None, 2).await.expect("scan");
    let keys = |page: &[crate::Record]| page.iter().map(|record| record.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&first), [b"k1".to_vec(), b"k3".to_vec()], "the first page, in key order, without k2");
    assert_eq!(first[0].response, b"done k1");
    assert!(first.iter().all(|record| record.scope == scope), "{first:?}");
    let second = backend.scan(&scope, Some(b"k3"), 10).await.expect("scan");
    assert_eq!(keys(&second), [b"k4".to_vec(), b"k5".to_vec()], "after k3");
    assert_eq!((second[0].state, second[1].state), (State::Processing, State::Failed));
    assert_eq!(second[1].response, b"failed k5");
    assert!(backend.scan(&scope, Some(b"k5"), 10).await.expect("scan").is_empty(), "past the last");
    assert!(backend.scan(&scope, None, 0).await.expect("scan").is_empty(), "a page of none");
    assert_eq!(keys(&backend.scan(&other, None, 10).await.expect("scan")), [b"k1".to_vec()]);
}

/// The keys with staged messages come back alone, in key order, a page at
/// a time: a caller's Completed records whose answer starts with the
/// outbox's envelope mark. A plain completion, a Failed record or one in
/// progress is not among them, nor another scope's; a completion whose
/// messages are dropped (its answer replaced by a plain one) or that is
/// removed leaves them.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn scan_staged<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let scope = setting.key("staged-scope");
    let other = setting.key("other-staged-scope");
    let staged = |text: &str| [&crate::record::STAGED_MARK[..], text.as_bytes()].concat();
    for key in [&b"s4"[..], b"s1", b"plain", b"failed", b"running", b"s3", b"s2"] {
        let (token, _, _) = acquire(backend, &scope, key, options()).await;
        match key {
            b"plain" => backend.complete(&token, b"201").await.expect("complete"),
            b"failed" => backend.fail(&token, &staged("failed")).await.expect("fail"),
            b"running" => {}
            _ => backend.complete(&token, &staged("messages")).await.expect("complete"),
        }
    }
    let (token, _, _) = acquire(backend, &other, b"s1", options()).await;
    backend.complete(&token, &staged("elsewhere")).await.expect("complete");

    let keys = |page: &[crate::Record]| page.iter().map(|record| record.key.clone()).collect::<Vec<_>>();
    let first = backend.scan_staged(&scope, None, 2).await.expect("scan_staged");
    assert_eq!(keys(&first), [b"s1".to_vec(), b"s2".to_vec()], "the first page, in key order");
    assert!(first.iter().all(|record| record.state == State::Completed && record.scope == scope), "{first:?}");
    assert_eq!(first[0].response, staged("messages"));
    let rest = backend.scan_staged(&scope, Some(b"s2"), 10).await.expect("scan_staged");
    assert_eq!(keys(&rest), [b"s3".to_vec(), b"s4".to_vec()], "after s2");
    assert!(backend.scan_staged(&scope, None, 0).await.expect("scan_staged").is_empty(), "a page of none");

    let dropped = backend.replace(&scope, b"s3", &staged("messages"), b"201").await.expect("replace");
    assert!(dropped, "the messages dropped");
    assert!(backend.remove(&scope, b"s1").await.expect("remove"));
    let left = backend.scan_staged(&scope, None, 10).await.expect("scan_staged");
    assert_eq!(keys(&left), [b"s2".to_vec(), b"s4".to_vec()], "dropped and removed keys leave");
    assert_eq!(keys(&backend.scan_staged(&other, None, 10).await.expect("scan_staged")), [b"s1".to_vec()]);
}
