//! How a backend's connections are made — the pool's, the listener's, the
//! reaper's and a migration's: in plain text, or over TLS (feature `tls`,
//! [`PostgresOptions::tls`](super::PostgresOptions::tls)).

use super::options::PostgresOptions;
use crate::error::Result;
use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod};
use tokio_postgres::NoTls;

/// Plain text, or TLS with its rustls configuration.
#[derive(Clone)]
pub(super) enum Connector {
    Plain,
    #[cfg(feature = "tls")]
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Connector::Plain => "plain",
            #[cfg(feature = "tls")]
            Connector::Rustls(_) => "tls",
        })
    }
}

impl Connector {
    /// What `options` ask for.
    #[allow(clippy::unnecessary_wraps, reason = "TLS configurations can be refused")]
    pub(super) fn of(options: &PostgresOptions) -> Result<Connector> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &options.tls {
            return Ok(Connector::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(tls.client_config()?)));
        }
        let _ = options;
        Ok(Connector::Plain)
    }

    /// The pool's connection manager.
    pub(super) fn manager(&self, connect: &tokio_postgres::Config) -> Manager {
        let recycling = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        match self {
            Connector::Plain => Manager::from_config(connect.clone(), NoTls, recycling),
            #[cfg(feature = "tls")]
            Connector::Rustls(tls) => Manager::from_config(connect.clone(), tls.clone(), recycling),
        }
    }

    /// One connection of its own, its driver spawned on the runtime (it
    /// ends when the client drops).
    pub(super) async fn connect(
        &self,
        connect: &tokio_postgres::Config,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        match self {
            Connector::Plain => {
                let (client, connection) = connect.connect(NoTls).await?;
                tokio::spawn(connection);
                Ok(client)
            }
            #[cfg(feature = "tls")]
            Connector::Rustls(tls) => {
                let (client, connection) = connect.connect(tls.clone()).await?;
                tokio::spawn(connection);
                Ok(client)
            }
        }
    }
}
