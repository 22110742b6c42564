//! API server watchers (kube-runtime) for the node's own objects — Node,
//! NodeSLO, NodeMetric and Device, each named after the node — and the
//! fallback watch of pods bound to the node.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use apis::scheduling::v1alpha1::Device;
use apis::slo::v1alpha1::{NodeMetric, NodeSLO};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_common::Shutdown;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::StatesInformer;

/// Watches the one object of kind `K` named `name`, reporting its current
/// value (or absence) after the initial list and on every change, until
/// shutdown. Errors are retried with kube-runtime's default backoff.
pub async fn watch_named<K>(
    api: Api<K>,
    name: String,
    publish: impl Fn(Option<K>) + Send + 'static,
    shutdown: Shutdown,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let kind = K::kind(&());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut listed: Option<K> = None;
    loop {
        let event = tokio::select! {
            _ = shutdown.wait() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Err(err)) => {
                tracing::warn!(%kind, %name, error = %err, "watch of {kind} {name} failed; retrying");
            }
            Some(Ok(Event::Init)) => listed = None,
            Some(Ok(Event::InitApply(object))) => listed = Some(object),
            Some(Ok(Event::InitDone)) => {
                tracing::debug!(%kind, %name, found = listed.is_some(), "{kind} listed");
                publish(listed.take());
            }
            Some(Ok(Event::Apply(object))) => publish(Some(object)),
            Some(Ok(Event::Delete(_))) => publish(None),
        }
    }
}

/// Starts the Node, NodeSLO, NodeMetric and Device watchers of `states`' node.
pub fn spawn_node_watchers(
    client: &Client,
    states: &StatesInformer,
    shutdown: &Shutdown,
) -> Vec<JoinHandle<()>> {
    let name = states.node_name().to_string();
    let mut tasks = Vec::new();
    let target = states.clone();
    tasks.push(tokio::spawn(watch_named(
        Api::<Node>::all(client.clone()),
        name.clone(),
        move |node| target.set_node(node),
        shutdown.clone(),
    )));
    let target = states.clone();
    tasks.push(tokio::spawn(watch_named(
        Api::<NodeSLO>::all(client.clone()),
        name.clone(),
        move |node_slo| target.set_node_slo(node_slo),
        shutdown.clone(),
    )));
    let target = states.clone();
    tasks.push(tokio::spawn(watch_named(
        Api::<NodeMetric>::all(client.clone()),
        name.clone(),
        move |node_metric| target.set_node_metric(node_metric),
        shutdown.clone(),
    )));
    let target = states.clone();
    tasks.push(tokio::spawn(watch_named(
        Api::<Device>::all(client.clone()),
        name,
        move |device| target.set_device(device),
        shutdown.clone(),
    )));
    tasks
}

struct Reflecting {
    store: Store<Pod>,
    listed: Arc<AtomicBool>,
}

/// The pods bound to this node, from a reflector over an API server watch
/// filtered by `spec.nodeName`. The watch starts on first use, so a healthy
/// kubelet costs the API server nothing.
pub struct ApiServerPods {
    client: Client,
    node_name: String,
    shutdown: Shutdown,
    reflecting: OnceLock<Reflecting>,
}

impl Debug for ApiServerPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerPods")
            .field("node_name", &self.node_name)
            .field("started", &self.reflecting.get().is_some())
            .finish()
    }
}

impl ApiServerPods {
    pub fn new(client: Client, node_name: impl Into<String>, shutdown: Shutdown) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            shutdown,
            reflecting: OnceLock::new(),
        }
    }

    fn start(&self) -> &Reflecting {
        self.reflecting.get_or_init(|| {
            tracing::info!(node = %self.node_name, "watching this node's pods on the API server");
            let (store, writer) = reflector::store();
            let listed = Arc::new(AtomicBool::new(false));
            let api = Api::<Pod>::all(self.client.clone());
            let config =
                watcher::Config::default().fields(&format!("spec.nodeName={}", self.node_name));
            let mut events = reflector::reflector(writer, watcher(api, config))
                .default_backoff()
                .boxed();
            let shutdown = self.shutdown.clone();
            let flag = Arc::clone(&listed);
            tokio::spawn(async move {
                loop {
                    let event = tokio::select! {
                        _ = shutdown.wait() => return,
                        event = events.next() => event,
                    };
                    match event {
                        None => return,
                        Some(Ok(Event::InitDone)) => flag.store(true, Ordering::Release),
                        Some(Ok(_)) => {}
                        Some(Err(err)) => {
                            tracing::warn!(error = %err, "API server pod watch failed; retrying");
                        }
                    }
                }
            });
            Reflecting { store, listed }
        })
    }

    /// The pods, once the first list completed; starts the watch when needed.
    pub fn pods(&self) -> Option<Vec<Pod>> {
        let reflecting = self.start();
        if !reflecting.listed.load(Ordering::Acquire) {
            return None;
        }
        Some(
            reflecting
                .store
                .state()
                .iter()
                .map(|pod| pod.as_ref().clone())
                .collect(),
        )
    }
}
