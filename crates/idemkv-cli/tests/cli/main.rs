//! The `idemkv` tool run as a user runs it: the built binary, real store
//! directories (loaded, killed, damaged), real Redis servers for `load
//! --redis`. One scenario per module; each module's docs say what it guards.

// The library's test helpers; their other features' parts stay out.
#[path = "../../../../tests/common/mod.rs"]
#[allow(unexpected_cfgs, reason = "the helpers name the library's features")]
mod common;
mod support;

mod after_kill;
mod closed_pipe;
mod commands;
mod dead_letters;
mod errors;
mod export_import;
mod load_arguments;
mod load_redis;
mod load_stopped;
mod migrate_postgres;
mod outbox;
mod stats_formats;
