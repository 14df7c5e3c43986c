//! The README's and the docs pages' code blocks, compiled and run as
//! doctests (`cargo test --doc`); nothing here is built otherwise.

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The code blocks of `docs/guide.md` (the embedded store alone).
#[doc = include_str!("../docs/guide.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

/// The code blocks of `docs/http.md`, which need the `tower` feature.
#[doc = include_str!("../docs/http.md")]
#[cfg(all(doctest, feature = "tower"))]
pub struct HttpDoctests;

/// The code blocks of `docs/client.md`, which need the `client` feature.
#[doc = include_str!("../docs/client.md")]
#[cfg(all(doctest, feature = "client"))]
pub struct ClientDoctests;

/// The code blocks of `docs/fleets.md`, which need both networked backends
/// and the `tower` layer.
#[doc = include_str!("../docs/fleets.md")]
#[cfg(all(doctest, feature = "redis", feature = "postgres", feature = "tower"))]
pub struct FleetsDoctests;

/// The code blocks of `docs/messaging.md`, which need the `messaging`
/// feature.
#[doc = include_str!("../docs/messaging.md")]
#[cfg(all(doctest, feature = "messaging"))]
pub struct MessagingDoctests;

/// The code blocks of `docs/webhooks.md`, which need the `webhooks`
/// feature.
#[doc = include_str!("../docs/webhooks.md")]
#[cfg(all(doctest, feature = "webhooks"))]
pub struct WebhooksDoctests;

/// The code blocks of `docs/operations.md`, which need the `metrics`
/// feature.
#[doc = include_str!("../docs/operations.md")]
#[cfg(all(doctest, feature = "metrics"))]
pub struct OperationsDoctests;

/// The code blocks of `docs/architecture.md`.
#[doc = include_str!("../docs/architecture.md")]
#[cfg(doctest)]
pub struct ArchitectureDoctests;

/// The code blocks of `docs/benchmarks.md`.
#[doc = include_str!("../docs/benchmarks.md")]
#[cfg(doctest)]
pub struct BenchmarksDoctests;

/// The code blocks of `docs/testing.md`.
#[doc = include_str!("../docs/testing.md")]
#[cfg(doctest)]
pub struct TestingDoctests;
