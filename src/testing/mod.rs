//! Aids for testing code built on idemkv (feature `testing`): not part of
//! the engine, and not needed to run it.
//!
//! [`Model`] is the reference model of the store: the claim contract as a
//! plain in-memory state machine that predicts every answer. The property
//! test, the fuzz target and the crash tests of this crate check the real
//! store against it; a service's own tests can do the same against the
//! store it opens.

mod model;

pub use model::{Expected, Model, ModelRecord, Refusal};

/// Entry points of the fuzz targets (`fuzz/`): the frame decoder, the
/// index table and the lease table driven by arbitrary bytes. Not an API.
#[doc(hidden)]
pub mod fuzzing;
