//! The middleware on a real actix-web server on loopback, driven by a
//! real HTTP client (reqwest): one module per scenario, and the HTTP
//! conformance scenarios of `idemkv::conformance::http` on the middleware
//! (`conformance`, served by `target`), over the embedded store and over
//! Redis and PostgreSQL (`fleets`).

mod conformance;
mod draft_vectors;
mod fleets;
mod refusals;
mod same_as_tower;
mod server;
mod streamed_get;
mod target;
