//! Effectively-once messaging over any backend (feature `messaging`):
//! [`Inbox`], the consumer side of an at-least-once queue, with its dead
//! letters; [`Outbox`], messages staged atomically with the completion
//! that produced them; [`Relay`], which delivers them to a [`Sink`]
//! (`RedisStreamSink`, `HttpSink`, or a service's own).
//!
//! ```
//! use idemkv::messaging::{Handled, Inbox};
//! use idemkv::{Config, Store};
//! # fn main() -> Result<(), idemkv::Error> {
//! # let runtime = tokio::runtime::Runtime::new().unwrap();
//! # runtime.block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! let inbox = Inbox::new(Store::open(dir.path(), Config::new())?);
//! // The broker delivers message m-1 twice: one effect.
//! let mut credited = 0;
//! for _ in 0..2 {
//!     let delivery = inbox.handle("ledger", b"m-1", b"credit 10", |_message| async {
//!         credited += 10;
//!         Handled::Processed
//!     });
//!     assert!(delivery.await?.ack());
//! }
//! assert_eq!(credited, 10);
//! # Ok(()) })
//! # }
//! ```
//!
//! The modules depend one way: `envelope` (the stored form) ← `relay` ←
//! `outbox`; `dead` ← `inbox`; `status` reads the envelope and the relay's
//! progress.

mod dead;
mod envelope;
#[cfg(feature = "client")]
mod http_sink;
mod inbox;
mod outbox;
mod relay;
#[cfg(feature = "redis")]
mod sinks;
mod status;

pub use dead::{DeadLetter, DEAD_LETTER_ERROR_BYTES_MAX};
pub use envelope::{envelope, is_envelope, messages_of, response_of, OutboxMessage, Staged};
#[cfg(feature = "client")]
pub use http_sink::HttpSink;
#[cfg(feature = "webhooks")]
pub(crate) use inbox::check_consumer;
pub use inbox::{
    Delivery, Handled, Inbox, Message, Redriven, DEAD_LETTER_RETENTION_DEFAULT, INBOX_MAX_ATTEMPTS_DEFAULT,
    INBOX_RETENTION_DEFAULT,
};
pub use outbox::{Outbox, Produced, RETENTION as OUTBOX_RETENTION};
pub use relay::{KeyDelivery, Relay, RelayConfig, RelayHandle, Sink, SinkError, Sweep};
#[cfg(feature = "redis")]
pub use sinks::RedisStreamSink;
pub use status::{drop_dead_key, outbox_status, retry_dead_key, KeyState, KeyStatus};
