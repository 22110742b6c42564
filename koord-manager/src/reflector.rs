//! The reflector both controller shells (the SLO/quota controllers and the
//! ClusterColocationProfile controller) start their caches with.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// Starts a reflector for `api`; every change wakes `notify`. The objects are
/// cached without their managed fields: no controller reads them, and on
/// Nodes and Pods they are a large share of each object (every writer of a
/// status adds an entry), which at thousands of nodes is most of the cache.
pub(crate) fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    notify: Arc<Notify>,
    what: &'static str,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config).modify(koord_common::cluster::drop_managed_fields),
    )
    .default_backoff();
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(err) => tracing::warn!(resource = what, error = %err, "watch failed; retrying"),
            }
        }
    });
    reader
}
