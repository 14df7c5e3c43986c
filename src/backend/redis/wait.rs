//! Waking `claim_wait`: the finishing script publishes on the key's
//! channel; the connection's push messages (RESP3) arrive here and wake the
//! callers waiting on that channel. A lost connection wakes every waiter
//! (each then claims again), and every wait is also bounded by a poll
//! interval, so a message lost with a connection costs at most one
//! interval.

use crate::backend::remote::wake::Waits;
use ::redis::aio::{AsyncPushSender, SendError};
use ::redis::{PushInfo, PushKind, Value};
use std::sync::Arc;

/// Hands the connection's push messages to [`Waits`]; never blocks.
#[derive(Debug, Clone)]
pub(super) struct Pushes(pub(super) Arc<Waits>);

impl AsyncPushSender for Pushes {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        match info.kind {
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(channel)) = info.data.first() {
                    self.0.wake(channel);
                }
            }
            PushKind::Disconnection => self.0.wake_all(),
            _ => {}
        }
        Ok(())
    }
}
