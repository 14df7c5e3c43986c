//! The networked backends: the claim contract on Redis / Valkey
//! (`redis`, feature `redis`) and on PostgreSQL (`postgres`, feature
//! `postgres`), published at `idemkv::redis` and `idemkv::postgres`. Each
//! keeps only its transport (Lua scripts, SQL functions) and how its
//! wake-ups arrive; the contract's edges they share are written once in
//! `remote` (settings, the claim prologue, the finish dispatch, the
//! `IdempotencyBackend` impl) and `wake` (the claim-and-park loop).

pub(crate) mod counters;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
pub(crate) mod remote;
#[cfg(feature = "tls")]
pub(crate) mod tls;
pub(crate) mod wake;
