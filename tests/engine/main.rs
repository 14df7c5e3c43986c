//! The embedded store's contract: claims, leases, waits, TTLs, quotas, checkpoints, compaction, limits.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod abandoned_expiry;
mod checkpoints;
mod claim_concurrent;
mod claim_states;
mod claim_wait;
mod clock_jumps;
mod close_during_compaction;
mod compaction_concurrent;
mod compaction_ttl;
mod input_limits;
mod keyspaces;
mod lease_fencing;
mod lease_refused_input;
mod model_proptest;
mod quota_concurrent;
mod quota_expiry;
mod quota_refusals;
mod quota_restart;
mod read_only_lock;
mod read_only_open;
mod scope_isolation;
mod store_reopen;
mod threads_refused;
mod ttl_expiry;
