//! The sinks a [`Relay`](super::Relay) delivers to: [`RedisStreamSink`]
//! (feature `redis`).

use super::envelope::Staged;
use super::relay::{Sink, SinkError};
use crate::error::{BackendFailure, Error, Result};
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// Appends each message to the Redis stream its destination names
/// (`XADD <destination> * id <message id> payload <payload>`), for
/// consumer groups to read (`XREADGROUP`) through an
/// [`Inbox`](super::Inbox), which drops the entries a redelivery repeats.
///
/// One standalone server (or a Cluster's node that holds the stream);
/// the connection reconnects by itself.
///
/// # Examples
///
/// ```no_run
/// use idemkv::{Config, messaging::{RedisStreamSink, Relay, RelayConfig}, Store};
/// use std::sync::Arc;
///
/// # async fn run() -> Result<(), idemkv::Error> {
/// let store = Arc::new(Store::open("orders.idemkv", Config::new())?);
/// let sink = RedisStreamSink::connect("redis://127.0.0.1:6379").await?;
/// let relay = Relay::new(store, sink, RelayConfig::new(["shop"]));
/// relay.run(std::future::pending()).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStreamSink {
    connection: ConnectionManager,
    max_len: Option<usize>,
}

impl std::fmt::Debug for RedisStreamSink {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RedisStreamSink").field("max_len", &self.max_len).finish_non_exhaustive()
    }
}

impl RedisStreamSink {
    /// Connects to the server at `url` (`redis://host:port/db`).
    ///
    /// # Errors
    /// [`Error::Backend`]: a bad URL is refused, an unreachable server
    /// unavailable.
    pub async fn connect(url: &str) -> Result<Self> {
        let failure =
            |failure, error: ::redis::RedisError| Error::Backend { backend: "redis", failure, source: Box::new(error) };
        let client = ::redis::Client::open(url).map_err(|error| failure(BackendFailure::Refused, error))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|error| failure(BackendFailure::Unavailable, error))?;
        Ok(RedisStreamSink { connection, max_len: None })
    }

    /// Trims each stream to about `max_len` entries as it appends
    /// (`MAXLEN ~`).
    #[must_use]
    pub fn max_len(mut self, max_len: usize) -> Self {
        self.max_len = Some(max_len);
        self
    }
}

impl Sink for RedisStreamSink {
    async fn deliver(&self, message: &Staged) -> std::result::Result<(), SinkError> {
        let mut command = ::redis::cmd("XADD");
        command.arg(&message.destination);
        if let Some(max_len) = self.max_len {
            command.arg("MAXLEN").arg("~").arg(max_len);
        }
        command.arg("*").arg("id").arg(&message.id).arg("payload").arg(&message.payload);
        let mut connection = self.connection.clone();
        match command.query_async::<::redis::Value>(&mut connection).await {
            Ok(_) => Ok(()),
            // A stream name that holds another type, a refused command:
            // no retry changes that.
            Err(error) if error.code().is_some_and(|code| code == "WRONGTYPE" || code == "ERR") => {
                Err(SinkError::permanent(format!("redis XADD to {}: {error}", message.destination)))
            }
            Err(error) => Err(SinkError::transient(format!("redis XADD to {}: {error}", message.destination))),
        }
    }
}
