//! One handle over a standalone server (a reconnecting, multiplexed
//! connection) or a Cluster (the client's slot-routing connection), both
//! speaking RESP3 so that published messages arrive as pushes.

use super::reply::backend_error;
use super::wait::Pushes;
use crate::error::{Error, Result};
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Client, IntoConnectionInfo, ProtocolVersion, ScriptInvocation, Value};
use std::time::Duration;

/// What a TLS connection trusts; without the feature `tls` there is none.
#[cfg(feature = "tls")]
use crate::Tls;
#[cfg(not(feature = "tls"))]
pub(super) enum Tls {}

/// How long a call waits for its answer before it is
/// [`BackendFailure::Unavailable`](crate::BackendFailure::Unavailable).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The client of `info`, trusting `tls` when given.
#[cfg(feature = "tls")]
fn client(info: ::redis::ConnectionInfo, tls: Option<&Tls>) -> ::redis::RedisResult<Client> {
    crate::backends::tls::install_default_provider();
    if let Some(tls) = tls {
        let root_cert = tls.ca_pem_bytes().map(<[u8]>::to_vec);
        Client::build_with_tls(info, ::redis::TlsCertificates { client_tls: None, root_cert })
    } else {
        Client::open(info)
    }
}

#[cfg(not(feature = "tls"))]
fn client(info: ::redis::ConnectionInfo, _tls: Option<&Tls>) -> ::redis::RedisResult<Client> {
    Client::open(info)
}

fn invalid(error: &::redis::RedisError) -> Error {
    Error::InvalidConfig(format!("redis: {error}"))
}

impl Connection {
    /// A connection to `url`; over TLS with `tls` (then `url` must be
    /// `rediss://`).
    pub(super) async fn single(url: &str, pushes: Pushes, tls: Option<&Tls>) -> Result<Connection> {
        let info = url.into_connection_info().map_err(|error| invalid(&error))?;
        let is_tls = matches!(info.addr(), ::redis::ConnectionAddr::TcpTls { .. });
        if is_tls && !cfg!(feature = "tls") {
            return Err(Error::InvalidConfig("redis: a rediss:// URL needs the feature `tls`".into()));
        }
        if tls.is_some() && !is_tls {
            return Err(Error::InvalidConfig("redis: a TLS connection needs a rediss:// URL".into()));
        }
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = client(info, tls).map_err(|error| invalid(&error))?;
        let config = ConnectionManagerConfig::new()
            .set_push_sender(pushes)
            .set_automatic_resubscription()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(2);
        let manager = ConnectionManager::new_with_config(client, config).await.map_err(backend_error)?;
        Ok(Connection::Single(manager))
    }

    pub(super) async fn cluster(nodes: &[&str], pushes: Pushes) -> Result<Connection> {
        let client = ClusterClientBuilder::new(nodes.iter().copied())
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(pushes)
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|error| invalid(&error))?;
        let connection = client.get_async_connection().await.map_err(backend_error)?;
        Ok(Connection::Cluster(connection))
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// `SPUBLISH` on a Cluster (the message stays in the key's shard),
    /// `PUBLISH` on a standalone server.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    pub(super) async fn invoke(&self, invocation: &ScriptInvocation<'_>) -> Result<Value> {
        match self.clone() {
            Connection::Single(mut connection) => invocation.invoke_async(&mut connection).await,
            Connection::Cluster(mut connection) => invocation.invoke_async(&mut connection).await,
        }
        .map_err(backend_error)
    }

    pub(super) async fn subscribe(&self, channel: &[u8]) -> Result<()> {
        match self.clone() {
            Connection::Single(mut connection) => connection.subscribe(channel).await,
            Connection::Cluster(mut connection) => connection.ssubscribe(channel).await,
        }
        .map_err(backend_error)
    }

    pub(super) async fn unsubscribe(&self, channel: &[u8]) {
        let _best_effort = match self.clone() {
            Connection::Single(mut connection) => connection.unsubscribe(channel).await,
            Connection::Cluster(mut connection) => connection.sunsubscribe(channel).await,
        };
    }
}
