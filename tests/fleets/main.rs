//! The networked backends on real Redis and PostgreSQL servers, and the conformance suite.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod backend_config_checked;
mod backend_counters;
mod checkpoints;
mod conformance;
mod keyspace_migrations;
mod messaging_orders;
mod near_cache;
mod postgres_fast_paths;
mod postgres_kill_restart;
mod postgres_least_privilege;
mod postgres_outbox;
mod postgres_reaper;
mod postgres_reaper_elected;
mod postgres_scan_reads;
mod postgres_transaction;
mod record_ttl;
mod redis_failover;
mod redis_fast_claims;
mod redis_kill_restart;
mod redis_replica_down;
mod redis_scope_index;
mod redis_server_settings;
mod redis_tokens;
mod redis_wakeups;
mod run_once_writes_refused;
mod runtimes;
mod server_ports;
mod tls;
