//! Crashes, power cuts, I/O faults, recovery, verify and repair, and the checked-in format fixtures.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod absent_answers;
mod crash_kill;
mod fault_sweep;
mod format_fixtures;
mod format_migration;
mod group_commit_fsync_failure;
mod interval;
mod log_writes;
mod power_cut;
mod recovery_corruption;
mod recovery_durable_mark;
mod recovery_hints;
mod recovery_missing_files;
mod recovery_torn_tail;
mod repair_cuts;
mod repair_damage;
mod run_once_full_disk;
mod store_creation_power_cut;
mod verify_hints;
