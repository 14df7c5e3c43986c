//! Events and spans through [`tracing`](https://docs.rs/tracing) (feature
//! `tracing`, target `idemkv`): nothing is emitted, and no argument
//! evaluated, without the feature or without a subscriber.

/// An event through `tracing` (target `idemkv`) when the feature is on;
/// nothing otherwise (its arguments are not evaluated).
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        tracing::$level!(target: "idemkv", $($arg)+);
    }};
}
pub(crate) use event;

/// Enters an info-level span (target `idemkv`) for the rest of the scope
/// when the `tracing` feature is on; `()` otherwise.
macro_rules! info_span {
    ($($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        let entered = tracing::info_span!(target: "idemkv", $($arg)+).entered();
        #[cfg(not(feature = "tracing"))]
        let entered = $crate::events::NoSpan;
        entered
    }};
}
pub(crate) use info_span;

/// What [`info_span!`] enters without the `tracing` feature: nothing.
#[cfg(not(feature = "tracing"))]
pub(crate) struct NoSpan;
