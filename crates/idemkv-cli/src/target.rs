//! Where a command's records are: a store directory, a Redis server or
//! Cluster, or a PostgreSQL schema, as the arguments of `import`, `dead-letters` and
//! `outbox` name them, and one connect for them all.

use crate::inspect::{open_existing, open_read_only};
use crate::output::Failure;
use clap::Args;
use idemkv::backend::AnyBackend;
use std::path::PathBuf;

/// A networked backend's arguments.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("redis_target").args(["redis", "redis_cluster"])))]
pub struct Remote {
    /// A Redis / Valkey server's URL (`redis://host:port/db`).
    #[arg(long, value_name = "URL", conflicts_with = "redis_cluster")]
    redis: Option<String>,
    /// A Redis Cluster, through these nodes (comma-separated URLs).
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    redis_cluster: Vec<String>,
    /// The key prefix of the Redis backend (default `idemkv`).
    #[arg(long, requires = "redis_target")]
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
        if let Some((backend, said)) = self.redis().await? {
            let backend = match &self.prefix {
                Some(prefix) => backend.prefix(prefix),
                None => backend,
            };
            return Ok(Some((AnyBackend::new(backend), said)));
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
        if self.redis.is_some() || !self.redis_cluster.is_empty() || self.postgres.is_some() {
            return Err(Failure::other("this idemkv was built without the feature of that target (redis, postgres)"));
        }
        Ok(None)
    }
}

impl Remote {
    /// The Redis server or Cluster the arguments name, and how to say it.
    #[cfg(feature = "redis")]
    async fn redis(&self) -> Result<Option<(idemkv::backend::redis::RedisBackend, String)>, Failure> {
        use idemkv::backend::redis::RedisBackend;
        if let Some(url) = &self.redis {
            return Ok(Some((RedisBackend::connect(url, idemkv::Config::new()).await?, format!("Redis at {url}"))));
        }
        if self.redis_cluster.is_empty() {
            return Ok(None);
        }
        let nodes: Vec<&str> = self.redis_cluster.iter().map(String::as_str).collect();
        let backend = RedisBackend::connect_cluster(&nodes, idemkv::Config::new()).await?;
        Ok(Some((backend, format!("the Redis Cluster at {}", self.redis_cluster.join(",")))))
    }
}

/// A store directory or a networked backend.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["dir", "redis", "redis_cluster", "postgres"])))]
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
            .ok_or_else(|| Failure::other("no store directory, Redis server or Cluster, or PostgreSQL named"))
    }
}

/// A current-thread runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(error.to_string()))
}
