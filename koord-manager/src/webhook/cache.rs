//! In-memory copies of the objects the webhooks read, fed by kube watchers
//! in the process and filled directly by tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use apis::config::v1alpha1::ClusterColocationProfile;
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_common::sync::RwLockExt;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// Objects of one kind by `namespace/name` (cluster-scoped: `name`).
pub struct ObjectCache<K> {
    objects: RwLock<BTreeMap<String, Arc<K>>>,
    /// Objects gathered by a relist, swapped in when it completes.
    relisting: RwLock<Option<BTreeMap<String, Arc<K>>>>,
    synced: AtomicBool,
}

impl<K> Default for ObjectCache<K> {
    fn default() -> Self {
        ObjectCache {
            objects: RwLock::new(BTreeMap::new()),
            relisting: RwLock::new(None),
            synced: AtomicBool::new(false),
        }
    }
}

fn key_of<K: kube::Resource>(object: &K) -> String {
    match object.namespace() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

impl<K: kube::Resource + Clone> ObjectCache<K> {
    /// Adds or replaces `object` and marks the cache synced (tests start here).
    pub fn insert(&self, object: K) {
        let mut objects = self.objects.write_or_recover();
        objects.insert(key_of(&object), Arc::new(object));
        self.synced.store(true, Ordering::Relaxed);
    }

    pub fn remove(&self, object: &K) {
        let mut objects = self.objects.write_or_recover();
        objects.remove(&key_of(object));
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<K>) {
        match event {
            Event::Apply(object) => {
                let mut objects = self.objects.write_or_recover();
                objects.insert(key_of(&object), Arc::new(object));
            }
            Event::Delete(object) => self.remove(&object),
            Event::Init => {
                *self.relisting.write_or_recover() = Some(BTreeMap::new());
            }
            Event::InitApply(object) => {
                let mut relisting = self.relisting.write_or_recover();
                relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key_of(&object), Arc::new(object));
            }
            Event::InitDone => {
                let fresh = self.relisting.write_or_recover().take().unwrap_or_default();
                *self.objects.write_or_recover() = fresh;
                self.synced.store(true, Ordering::Relaxed);
            }
        }
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    pub fn all(&self) -> Vec<Arc<K>> {
        self.objects.read_or_recover().values().cloned().collect()
    }

    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.objects.read_or_recover().get(key).cloned()
    }
}

/// Everything the webhook handlers read from the cluster.
#[derive(Clone, Default)]
pub struct WebhookCaches {
    pub profiles: Arc<ObjectCache<ClusterColocationProfile>>,
    pub namespaces: Arc<ObjectCache<Namespace>>,
    pub priority_classes: Arc<ObjectCache<PriorityClass>>,
    pub quotas: Arc<ObjectCache<ElasticQuota>>,
    /// Watched only with the `MultiQuotaTree` gate; not part of [`Self::unsynced`].
    pub quota_profiles: Arc<ObjectCache<ElasticQuotaProfile>>,
}

impl WebhookCaches {
    /// Caches that count as synced while empty (for tests and cluster-less runs).
    pub fn synced_empty() -> Self {
        let caches = WebhookCaches::default();
        caches.profiles.mark_synced();
        caches.namespaces.mark_synced();
        caches.priority_classes.mark_synced();
        caches.quotas.mark_synced();
        caches.quota_profiles.mark_synced();
        caches
    }

    /// Names of the caches that have not completed their first list.
    pub fn unsynced(&self) -> Vec<&'static str> {
        let mut waiting = Vec::new();
        if !self.profiles.is_synced() {
            waiting.push("clustercolocationprofiles");
        }
        if !self.namespaces.is_synced() {
            waiting.push("namespaces");
        }
        if !self.priority_classes.is_synced() {
            waiting.push("priorityclasses");
        }
        if !self.quotas.is_synced() {
            waiting.push("elasticquotas");
        }
        waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str) -> Namespace {
        Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn relist_replaces_contents_and_marks_synced() {
        let cache = ObjectCache::<Namespace>::default();
        cache.apply(Event::Apply(namespace("stale")));
        assert!(!cache.is_synced());
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(namespace("a")));
        assert!(
            cache.get("stale").is_some(),
            "old contents serve until the relist ends"
        );
        cache.apply(Event::InitDone);
        assert!(cache.is_synced());
        assert!(cache.get("stale").is_none());
        assert!(cache.get("a").is_some());
        cache.apply(Event::Delete(namespace("a")));
        assert!(cache.all().is_empty());
    }
}
