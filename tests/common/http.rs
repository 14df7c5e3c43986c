//! The HTTP tests' harness: the public one
//! (`idemkv::conformance::http::harness`) over a store in a fresh
//! directory.

use axum::Router;
use idemkv::conformance::http::harness::Served;
use idemkv::http::LayerConfig;
use idemkv::{Config, Store};
use std::ops::Deref;

/// A served app and the store behind its layer; derefs to the [`Served`]
/// app (its `base` and `url`).
pub struct Server {
    served: Served,
    /// A handle on the layer's store.
    pub store: Store,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Opens a store with `config` in a fresh directory, puts the whole of
    /// `routes` behind the layer (router-wide, as services do) and serves it.
    pub async fn start(config: Config, layer: LayerConfig, routes: Router) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), config).expect("open store");
        let served = Served::start(&store, layer, routes).await;
        Server { served, store, _dir: dir }
    }

    /// Serves `app`, already layered over `store` in `dir`.
    pub async fn serve(app: Router, store: Store, dir: tempfile::TempDir) -> Server {
        Server { served: Served::serve(app).await, store, _dir: dir }
    }
}

impl Deref for Server {
    type Target = Served;

    fn deref(&self) -> &Served {
        &self.served
    }
}
