//! PersistentVolumeClaim → PersistentVolume lookups for the blkio strategy's
//! `podvolume` blocks (upstream's `statesInformer.GetVolumeName`).
//!
//! In cluster mode two reflectors keep every PVC and PV (trimmed to what a
//! lookup reads) and are started only when `BlkIOReconcile` is on; without
//! them (standalone mode, gate off) every lookup answers with the reason.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use koord_common::Shutdown;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;

/// What a claim is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundVolume {
    /// The PV's name (the claim's `spec.volumeName`).
    pub pv_name: String,
    /// The PV's `spec.local.path` (a local PV: a directory or a `/dev/...` path).
    pub local_path: Option<String>,
}

/// Resolves a pod's claim to its PersistentVolume.
pub trait VolumeLookup: Send + Sync {
    /// The volume bound to `namespace/claim`, or why there is none.
    fn claim(&self, namespace: &str, claim: &str) -> Result<BoundVolume, String>;
}

/// No claims are known; every lookup answers with `reason`.
#[derive(Debug, Clone)]
pub struct NoVolumeLookup(pub &'static str);

impl VolumeLookup for NoVolumeLookup {
    fn claim(&self, namespace: &str, claim: &str) -> Result<BoundVolume, String> {
        Err(format!(
            "PVC {namespace}/{claim} cannot be looked up: {}",
            self.0
        ))
    }
}

/// Claims held in a map (tests, simulations).
#[derive(Debug, Clone, Default)]
pub struct MapVolumeLookup {
    pub claims: HashMap<(String, String), BoundVolume>,
}

impl MapVolumeLookup {
    pub fn with(mut self, namespace: &str, claim: &str, bound: BoundVolume) -> Self {
        self.claims
            .insert((namespace.to_string(), claim.to_string()), bound);
        self
    }
}

impl VolumeLookup for MapVolumeLookup {
    fn claim(&self, namespace: &str, claim: &str) -> Result<BoundVolume, String> {
        self.claims
            .get(&(namespace.to_string(), claim.to_string()))
            .cloned()
            .ok_or_else(|| format!("PVC {namespace}/{claim} is not bound to a volume"))
    }
}

/// Claims and volumes from the API server's reflectors.
#[derive(Clone)]
pub struct KubeVolumeLookup {
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
}

impl KubeVolumeLookup {
    /// The answer for one claim object (pure, for tests).
    pub fn bound(
        claim: Option<&PersistentVolumeClaim>,
        volume: impl FnOnce(&str) -> Option<Arc<PersistentVolume>>,
        namespace: &str,
        name: &str,
    ) -> Result<BoundVolume, String> {
        let claim = claim.ok_or_else(|| format!("PVC {namespace}/{name} not found"))?;
        let pv_name = claim
            .spec
            .as_ref()
            .and_then(|spec| spec.volume_name.clone())
            .filter(|pv| !pv.is_empty())
            .ok_or_else(|| format!("PVC {namespace}/{name} is not bound to a volume yet"))?;
        let local_path = volume(&pv_name)
            .and_then(|pv| pv.spec.as_ref()?.local.as_ref().map(|l| l.path.clone()));
        Ok(BoundVolume {
            pv_name,
            local_path,
        })
    }
}

impl VolumeLookup for KubeVolumeLookup {
    fn claim(&self, namespace: &str, claim: &str) -> Result<BoundVolume, String> {
        let object = self.claims.get(&ObjectRef::new(claim).within(namespace));
        Self::bound(
            object.as_deref(),
            |pv| self.volumes.get(&ObjectRef::new(pv)),
            namespace,
            claim,
        )
    }
}

/// Starts the PVC and PV reflectors; the lookup reads their stores.
pub fn spawn_volume_watchers(
    client: &Client,
    shutdown: &Shutdown,
) -> (Arc<KubeVolumeLookup>, Vec<JoinHandle<()>>) {
    let (claims, claim_writer) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volume_writer) = reflector::store::<PersistentVolume>();
    let claim_stream = watcher(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|claim: &mut PersistentVolumeClaim| {
        // Only the name and spec.volumeName are read.
        claim.metadata.managed_fields = None;
        claim.metadata.annotations = None;
        claim.metadata.labels = None;
        claim.status = None;
    })
    .reflect(claim_writer)
    .applied_objects();
    let volume_stream = watcher(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|volume: &mut PersistentVolume| {
        volume.metadata.managed_fields = None;
        volume.metadata.annotations = None;
        volume.metadata.labels = None;
        volume.status = None;
    })
    .reflect(volume_writer)
    .applied_objects();
    let tasks = vec![
        tokio::spawn(drain(
            "PersistentVolumeClaim",
            claim_stream,
            shutdown.clone(),
        )),
        tokio::spawn(drain("PersistentVolume", volume_stream, shutdown.clone())),
    ];
    (Arc::new(KubeVolumeLookup { claims, volumes }), tasks)
}

async fn drain<S, T, E>(kind: &'static str, stream: S, shutdown: Shutdown)
where
    S: futures::Stream<Item = Result<T, E>> + Send,
    E: std::fmt::Display,
{
    let mut stream = std::pin::pin!(stream);
    loop {
        let item = tokio::select! {
            _ = shutdown.wait() => return,
            item = stream.next() => item,
        };
        match item {
            None => return,
            Some(Err(err)) => {
                tracing::warn!(%kind, error = %err, "watch of {kind}s failed; retrying");
            }
            Some(Ok(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LocalVolumeSource, PersistentVolumeClaimSpec, PersistentVolumeSpec,
    };

    fn claim(volume_name: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: volume_name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn claims_resolve_to_their_bound_volume() {
        let local = Arc::new(PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                local: Some(LocalVolumeSource {
                    path: "/mnt/disks/ssd1".to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let bound = KubeVolumeLookup::bound(
            Some(&claim(Some("pv-1"))),
            |name| (name == "pv-1").then(|| Arc::clone(&local)),
            "ns",
            "data",
        );
        assert_eq!(
            bound,
            Ok(BoundVolume {
                pv_name: "pv-1".to_string(),
                local_path: Some("/mnt/disks/ssd1".to_string()),
            })
        );
        // A CSI volume not (yet) in the PV cache still names its PV.
        let csi = KubeVolumeLookup::bound(Some(&claim(Some("pv-2"))), |_| None, "ns", "data");
        assert_eq!(csi.unwrap().local_path, None);
        let pending = KubeVolumeLookup::bound(Some(&claim(Some(""))), |_| None, "ns", "data");
        assert!(pending.unwrap_err().contains("not bound"));
        let missing = KubeVolumeLookup::bound(None, |_| None, "ns", "data");
        assert_eq!(missing.unwrap_err(), "PVC ns/data not found");
        assert!(
            NoVolumeLookup("standalone mode")
                .claim("ns", "data")
                .unwrap_err()
                .contains("standalone mode")
        );
    }
}
