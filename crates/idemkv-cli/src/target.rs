//! Where a command's records are: a store directory, a Redis server or a
//! PostgreSQL schema, as the arguments of `import`, `dead-letters` and
//! `outbox` name them, and one connect for them all.

use crate::inspect::{open_existing, open_read_only};
use crate::output::Failure;
use clap::Args;
use idemkv::backend::AnyBackend;
use std::path::PathBuf;

/// A networked backend's arguments.
#[derive(Args)]
pub struct Remote {
    /// A Redis / Valkey server's URL (`redis://host:port/db`).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The key prefix of the Redis backend (default `idemkv`).
    #[arg(long, requires = "redis")]
    prefix: Option<String>,
    /// A PostgreSQL connection URL (the schema migrated first: `idemkv
    /// migrate`).
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The PostgreSQL schema of the store (default `public`).
    #[arg(long, requires = "postgres")]
    schema: Option<String>,
}

impl Remote {
    /// The backend the arguments name, and how to say it (`Redis at
    /// URL`); `None` when they name none.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres")),
        expect(clippy::unused_async, reason = "awaits the backends of the features")
    )]
    pub async fn connect(&self) -> Result<Option<(AnyBackend, String)>, Failure> {
        #[cfg(feature = "redis")]
        if let Some(url) = &self.redis {
            let mut backend = idemkv::backend::redis::RedisBackend::connect(url, idemkv::Config::new()).await?;
            if let Some(prefix) = &self.prefix {
                backend = backend.prefix(prefix);
            }
            return Ok(Some((AnyBackend::new(backend), format!("Redis at {url}"))));
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.postgres {
            use idemkv::backend::postgres::{PostgresBackend, PostgresOptions, Reaping};
            let client = url.parse().map_err(|error| Failure::other(format!("postgres: {error}")))?;
            let schema = self.schema.as_deref().unwrap_or(idemkv::backend::postgres::SCHEMA_DEFAULT);
            let options = PostgresOptions::new().schema(schema).reaping(Reaping::Off);
            let backend = PostgresBackend::connect_with_options(client, idemkv::Config::new(), options).await?;
            return Ok(Some((AnyBackend::new(backend), format!("PostgreSQL schema {schema}"))));
        }
        if self.redis.is_some() || self.postgres.is_some() {
            return Err(Failure::other("this idemkv was built without the feature of that target (redis, postgres)"));
        }
        Ok(None)
    }
}

/// A store directory or a networked backend.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["dir", "redis", "postgres"])))]
pub struct Where {
    /// A store directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    remote: Remote,
}

impl Where {
    /// The backend it names: a store opened read-only unless `write`.
    pub async fn connect(&self, write: bool) -> Result<AnyBackend, Failure> {
        if let Some(dir) = &self.dir {
            return Ok(AnyBackend::new(if write { open_existing(dir)? } else { open_read_only(dir)? }));
        }
        let connected = self.remote.connect().await?;
        connected
            .map(|(backend, _)| backend)
            .ok_or_else(|| Failure::other("no store directory, Redis or PostgreSQL named"))
    }
}

/// A current-thread runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(error.to_string()))
}
