//! The gRPC face on a real tonic server and client over loopback.
//!
//! One scenario per module; each module's docs say what it guards. The
//! scenarios that hold for every backend take one, and run on the
//! embedded store in their own module and on Redis and PostgreSQL (real
//! servers, started here) in `backends`.

#[path = "../../examples/grpc_payments/api.rs"]
mod api;
#[allow(dead_code, reason = "the root package's fixture; these tests use a part")]
#[path = "../../../../tests/common/postgres.rs"]
mod postgres_server;
#[allow(dead_code, reason = "the root package's fixture; these tests use a part")]
#[path = "../../../../tests/common/redis.rs"]
mod redis_server;
mod server;
#[path = "../../../../tests/common/server_start.rs"]
mod server_start;

#[macro_use]
mod backends;
mod client_cancels;
mod crash_mid_call;
mod full_disk;
mod in_progress_then_replay;
mod kept_status;
mod mismatch;
mod not_spent;
mod refusals;
