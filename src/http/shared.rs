//! What every guarded request of one layer shares: the backend, the
//! layer's configuration, the lease keeper.

use super::config::LayerConfig;
use crate::backend::keeper::Keeper;
use std::sync::Arc;

/// What every guarded request of one layer shares.
pub(super) struct Shared<K> {
    pub(super) backend: Arc<K>,
    pub(super) config: Arc<LayerConfig>,
    pub(super) keeper: Arc<Keeper>,
}
