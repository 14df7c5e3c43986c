//! The middleware on a real actix-web server on loopback, driven by a
//! real HTTP client (reqwest): one module per scenario.

mod client_leaves;
mod draft_vectors;
mod handler_panic;
mod long_operations;
mod refusals;
mod replay;
mod same_as_tower;
mod server;
mod streamed_get;
