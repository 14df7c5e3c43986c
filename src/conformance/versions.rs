//! The versions' scenario: [`Versions`] over the backend.

use super::Setting;
use crate::backend::{IdempotencyBackend, Step, Versions};
use std::sync::Arc;

/// A resource's first version is 1, each step one more; a step from a
/// version that is no longer current is a conflict that names the
/// current one; of four writers racing from one version, one steps; two
/// scopes' resources are apart.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn versions<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let (scope, other) = (setting.key("versioned"), setting.key("versioned-elsewhere"));
    let versions = Versions::shared(Arc::new(backend.clone()));
    assert_eq!(versions.current(&scope, b"p").await.expect("current"), None);
    assert_eq!(versions.step(&scope, b"p", Some(1)).await.expect("step"), Step::Conflict(None), "none yet");
    assert_eq!(versions.step(&scope, b"p", None).await.expect("step"), Step::Stepped(1));
    assert_eq!(versions.step(&scope, b"p", None).await.expect("step"), Step::Conflict(Some(1)), "created once");
    assert_eq!(versions.step(&scope, b"p", Some(1)).await.expect("step"), Step::Stepped(2));
    assert_eq!(versions.step(&scope, b"p", Some(1)).await.expect("step"), Step::Conflict(Some(2)), "stale");
    let (one, two, three, four) = tokio::join!(
        versions.step(&scope, b"p", Some(2)),
        versions.step(&scope, b"p", Some(2)),
        versions.step(&scope, b"p", Some(2)),
        versions.step(&scope, b"p", Some(2)),
    );
    let steps = [one, two, three, four].map(|step| step.expect("step"));
    assert_eq!(steps.iter().filter(|step| **step == Step::Stepped(3)).count(), 1, "{steps:?}");
    assert_eq!(steps.iter().filter(|step| **step == Step::Conflict(Some(3))).count(), 3, "{steps:?}");
    assert_eq!(versions.current(&scope, b"p").await.expect("current"), Some(3));
    assert_eq!(versions.current(&other, b"p").await.expect("current"), None, "another scope's");
}
