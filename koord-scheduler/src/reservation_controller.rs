//! Cluster-mode Reservation lifecycle: places pending Reservations through
//! the scheduler (as reserve pods) and writes the resulting status, expires
//! them, records owners (allocate-once ones become Succeeded) and deletes
//! ended ones after the GC duration. Decisions come from
//! [`crate::plugins::reservation::lifecycle`]; this module only plans them
//! under the scheduler lock and then talks to the API server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED;
use apis::scheduling::v1alpha1::{Reservation, ReservationStatus};
use k8s_openapi::api::core::v1::Pod;
use koord_common::Shutdown;
use koord_common::leader::Leadership;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::cache::{Change, Object};
use crate::config::{ConfigError, SchedulerConfiguration, parse_args};
use crate::framework::{Scheduler, SharedScheduler};
use crate::placement::{PreAllocated, place_reservation_pre_allocating, unschedulable_message};
use crate::plugins::reservation::lifecycle::{self, Decision};
use crate::plugins::reservation::{
    KEPT_ANNOTATIONS, NAME as RESERVATION_PLUGIN, ReservationArgs, is_pending,
};

/// How often reservations are re-examined (upstream's shortest requeue).
pub const SYNC_INTERVAL: Duration = Duration::from_secs(3);

/// How long a reservation this controller placed is not placed again, should
/// a late watch event show it Pending once more.
pub const PLACED_MEMORY: Duration = Duration::from_secs(60);

/// Reservation uid (or name) → when this controller placed it.
pub type RecentlyPlaced = BTreeMap<String, SystemTime>;

fn placement_key(reservation: &Reservation) -> String {
    reservation
        .metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| reservation.metadata.name.clone())
        .unwrap_or_default()
}

/// The profile name when the configuration gives none (as the extender's metrics use).
const DEFAULT_PROFILE_SCHEDULER_NAME: &str = "koord-scheduler";

/// kube-scheduler's name for pods that name no scheduler.
const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Status keys written as `null` when unset, so a merge patch clears them
/// (owners leaving an allocate-many reservation).
const CLEARABLE_STATUS_KEYS: [&str; 2] = ["currentOwners", "allocated"];

/// One API write the controller decided on.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Merge-patch `status` onto the reservation's status subresource,
    /// after merge-patching `annotations` (the devices and cpuset a placement
    /// holds; empty: none) onto its metadata. `previous` is the cached object
    /// before the change, restored if a write fails.
    Status {
        name: String,
        status: ReservationStatus,
        annotations: BTreeMap<String, String>,
        previous: Box<Reservation>,
        /// The running pod the placement pre-allocated: its
        /// `reservation-allocated` annotation is written first, and it is
        /// put back in the cache as it was if a write fails.
        pre_allocated: Option<Box<PreAllocated>>,
    },
    Delete {
        name: String,
    },
}

/// What a failed write leaves behind.
#[derive(Debug, thiserror::Error)]
#[error("reservation {name}: {source}")]
pub struct WriteError {
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// Settings taken from the profile.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Pending reservations whose template names another scheduler are left alone.
    pub scheduler_name: String,
    pub gc_duration: Duration,
    pub gc_interval: Duration,
    pub gc_enabled: bool,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            scheduler_name: DEFAULT_PROFILE_SCHEDULER_NAME.to_string(),
            gc_duration: lifecycle::DEFAULT_GC_DURATION,
            gc_interval: lifecycle::DEFAULT_GC_INTERVAL,
            gc_enabled: true,
        }
    }
}

impl ControllerSettings {
    /// From the first profile's scheduler name and `Reservation` plugin args.
    pub fn from_config(config: &SchedulerConfiguration) -> Result<Self, ConfigError> {
        let profile = config.profile();
        let args: ReservationArgs =
            parse_args(RESERVATION_PLUGIN, profile.args_for(RESERVATION_PLUGIN))?;
        Ok(Self {
            scheduler_name: profile
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_PROFILE_SCHEDULER_NAME.to_string()),
            gc_duration: args.gc_duration(),
            gc_interval: args.gc_interval(),
            gc_enabled: !args.disable_garbage_collection,
        })
    }

    fn responsible_for(&self, reservation: &Reservation) -> bool {
        let wanted = reservation
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(DEFAULT_SCHEDULER_NAME);
        wanted == self.scheduler_name
    }
}

/// Decides every write due at `now` and applies it to the cache right away
/// (so filters see placed and ended reservations before the watch echoes
/// them). `gc_pass` allows deletions; reservations in `recently_placed` are
/// not placed again.
pub fn plan(
    scheduler: &mut Scheduler,
    settings: &ControllerSettings,
    now: SystemTime,
    gc_pass: bool,
    recently_placed: &RecentlyPlaced,
) -> Vec<Write> {
    let reservations: Vec<Reservation> = scheduler
        .cache
        .reservations
        .values()
        .map(|r| (**r).clone())
        .collect();
    let gc_duration = (gc_pass && settings.gc_enabled).then_some(settings.gc_duration);
    let mut writes = Vec::new();
    for reservation in reservations {
        let Some(name) = reservation.metadata.name.clone() else {
            continue;
        };
        // Unplaced reservations belong to the scheduler their template names.
        if reservation.node_name().is_none() && !settings.responsible_for(&reservation) {
            continue;
        }
        let mut annotations = BTreeMap::new();
        let mut pre_allocated = None;
        let status = if is_pending(&reservation, now) {
            if recently_placed.contains_key(&placement_key(&reservation)) {
                continue;
            }
            let (placement, pods_before) =
                place_reservation_pre_allocating(scheduler, &reservation, now);
            pre_allocated = pods_before.map(Box::new);
            if placement.node.is_some() {
                // place_reservation left the Available reservation in the cache.
                let placed = scheduler.cache.reservations.get(&name);
                for key in KEPT_ANNOTATIONS {
                    let kept = placed
                        .and_then(|r| r.metadata.annotations.as_ref())
                        .and_then(|a| a.get(key));
                    if let Some(value) = kept {
                        annotations.insert(key.to_string(), value.clone());
                    }
                }
                placed.and_then(|r| r.status.clone())
            } else {
                let message = unschedulable_message(&placement, scheduler.cache.node_count());
                lifecycle::unschedulable_status(&reservation, &message, now)
            }
        } else {
            let node = reservation.node_name();
            let node_exists = node.is_some_and(|n| scheduler.cache.node(n).is_some());
            // Only bindings the API server confirmed: an assumed owner may
            // still be rolled back.
            let pods = node
                .into_iter()
                .flat_map(|n| scheduler.cache.pods_on_node(n))
                .filter(|p| !p.is_assumed())
                .map(|p| &**p);
            match lifecycle::decide(&reservation, node_exists, pods, now, gc_duration) {
                Decision::Keep => None,
                Decision::UpdateStatus(status) => Some(status),
                Decision::Delete => {
                    writes.push(Write::Delete { name });
                    continue;
                }
            }
        };
        let Some(status) = status else { continue };
        let mut updated = reservation.clone();
        updated.status = Some(status.clone());
        if !annotations.is_empty() {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations.clone());
        }
        scheduler.apply(Change::Upsert(Object::Reservation(updated)));
        writes.push(Write::Status {
            name,
            status,
            annotations,
            previous: Box::new(reservation),
            pre_allocated,
        });
    }
    writes
}

/// Puts a pre-allocated pod back as it was before its placement, unless the
/// watch has brought a newer version meanwhile.
fn restore_pod(scheduler: &mut Scheduler, before: &Pod) {
    let key = crate::cache::object_key(
        before.metadata.namespace.as_deref(),
        before.metadata.name.as_deref().unwrap_or_default(),
    );
    let unchanged = scheduler.cache.pod(&key).is_some_and(|cached| {
        cached.pod.metadata.resource_version == before.metadata.resource_version
    });
    if unchanged {
        scheduler.apply(Change::Upsert(Object::Pod(before.clone())));
    }
}

/// The merge-patch body for a status write; unset owner fields as `null`.
pub fn status_patch(status: &ReservationStatus) -> serde_json::Value {
    let mut body = serde_json::to_value(status).unwrap_or_default();
    if let Some(fields) = body.as_object_mut() {
        for key in CLEARABLE_STATUS_KEYS {
            fields.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": body })
}

/// Places, expires, completes and collects Reservations in a cluster.
pub struct ReservationController {
    api: Api<Reservation>,
    /// For the pre-allocated pods' patches.
    client: kube::Client,
    scheduler: SharedScheduler,
    settings: ControllerSettings,
    recently_placed: Mutex<RecentlyPlaced>,
    leadership: Leadership,
}

impl ReservationController {
    pub fn new(
        client: kube::Client,
        scheduler: SharedScheduler,
        settings: ControllerSettings,
    ) -> Self {
        Self {
            api: Api::all(client.clone()),
            client,
            scheduler,
            settings,
            recently_placed: Mutex::new(RecentlyPlaced::new()),
            leadership: Leadership::unconditional(),
        }
    }

    /// Plans and writes only while `leadership` holds: two replicas placing
    /// the same Reservation would put it on two nodes.
    pub fn gated_by(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// One pass: plans under the lock, then writes. Failed status writes are
    /// undone in the cache (a failed placement is retried on a later pass).
    /// Returns the writes that failed. Without leadership it does nothing;
    /// losing it mid-pass cancels the write in flight and drops the rest,
    /// undoing them in the cache.
    pub async fn sync(&self, now: SystemTime, gc_pass: bool) -> Vec<WriteError> {
        if !self.leadership.is_leader() {
            return Vec::new();
        }
        let recently_placed = match self.recently_placed.lock() {
            Ok(mut placed) => {
                placed.retain(|_, at| *at + PLACED_MEMORY > now);
                placed.clone()
            }
            Err(_) => RecentlyPlaced::new(),
        };
        let writes = match self.scheduler.write() {
            Ok(mut scheduler) => plan(
                &mut scheduler,
                &self.settings,
                now,
                gc_pass,
                &recently_placed,
            ),
            Err(_) => return Vec::new(),
        };
        let mut failures = Vec::new();
        let mut writes = writes.into_iter();
        while let Some(write) = writes.next() {
            match write {
                Write::Status {
                    name,
                    status,
                    annotations,
                    previous,
                    pre_allocated,
                } => {
                    let written = self
                        .leadership
                        .while_leading(self.write_status(
                            &name,
                            &status,
                            &annotations,
                            pre_allocated.as_deref(),
                        ))
                        .await;
                    let Some(result) = written else {
                        let abandoned = Write::Status {
                            name,
                            status,
                            annotations,
                            previous,
                            pre_allocated,
                        };
                        self.abandon(std::iter::once(abandoned).chain(writes));
                        break;
                    };
                    match result {
                        Ok(_) => {
                            tracing::info!(reservation = %name, phase = ?status.phase, node = ?status.node_name, "reservation status written");
                            let placed = previous.node_name().is_none()
                                && status.node_name.as_deref().is_some_and(|n| !n.is_empty());
                            if placed && let Ok(mut memory) = self.recently_placed.lock() {
                                memory.insert(placement_key(&previous), now);
                            }
                        }
                        Err(source) => {
                            if let Ok(mut scheduler) = self.scheduler.write() {
                                scheduler.apply(Change::Upsert(Object::Reservation(*previous)));
                                for pod in pre_allocated.iter().flat_map(|pre| &pre.pods) {
                                    restore_pod(&mut scheduler, pod);
                                }
                            }
                            failures.push(WriteError { name, source });
                        }
                    }
                }
                Write::Delete { name } => {
                    let deleted = self
                        .leadership
                        .while_leading(self.api.delete(&name, &DeleteParams::default()))
                        .await;
                    match deleted {
                        Some(Ok(_)) => {
                            tracing::info!(reservation = %name, "ended reservation garbage collected");
                        }
                        Some(Err(source)) => failures.push(WriteError { name, source }),
                        None => {
                            self.abandon(writes);
                            break;
                        }
                    }
                }
            }
        }
        for failure in &failures {
            tracing::warn!(error = %failure, "reservation write failed; retried on a later pass");
        }
        failures
    }

    /// Merge-patches each pre-allocated pod's `reservation-allocated` (if
    /// any, in the order chosen; the pod's uid in the patch makes the API
    /// server refuse it for a pod recreated under the same name), the held
    /// devices and cpuset (if any), then the status. A pod already patched
    /// when a later write fails keeps its annotation and stays this
    /// reservation's candidate, so the retry finds it again.
    async fn write_status(
        &self,
        name: &str,
        status: &ReservationStatus,
        annotations: &BTreeMap<String, String>,
        pre_allocated: Option<&PreAllocated>,
    ) -> Result<(), kube::Error> {
        if let Some(PreAllocated { pods, allocation }) = pre_allocated {
            for pod in pods {
                let patch = serde_json::json!({"metadata": {
                    "uid": pod.metadata.uid,
                    "annotations": {ANNOTATION_RESERVATION_ALLOCATED: allocation},
                }});
                let api: Api<Pod> = Api::namespaced(
                    self.client.clone(),
                    pod.metadata.namespace.as_deref().unwrap_or("default"),
                );
                api.patch(
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                tracing::info!(reservation = %name, pod = ?pod.metadata.name, "pod pre-allocated to reservation");
            }
        }
        // The status subresource ignores metadata: the held devices and
        // cpuset go first, through the object itself.
        if !annotations.is_empty() {
            let patch = serde_json::json!({"metadata": {"annotations": annotations}});
            self.api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let patch = status_patch(status);
        self.api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Leadership was lost before these writes finished: their planned
    /// changes leave the cache, so a later leader (maybe this replica again)
    /// plans them afresh. A reservation the watch has updated meanwhile
    /// (a write that landed before it was cancelled) keeps the newer object.
    fn abandon(&self, writes: impl IntoIterator<Item = Write>) {
        let Ok(mut scheduler) = self.scheduler.write() else {
            return;
        };
        let mut dropped = 0usize;
        for write in writes {
            dropped += 1;
            let Write::Status {
                name,
                previous,
                pre_allocated,
                ..
            } = write
            else {
                continue;
            };
            for pod in pre_allocated.iter().flat_map(|pre| &pre.pods) {
                restore_pod(&mut scheduler, pod);
            }
            let unchanged = scheduler
                .cache
                .reservations
                .get(&name)
                .is_some_and(|cached| {
                    cached.metadata.resource_version == previous.metadata.resource_version
                });
            if unchanged {
                scheduler.apply(Change::Upsert(Object::Reservation(*previous)));
            }
        }
        tracing::warn!(dropped, "leadership lost; stopped writing reservations");
    }

    /// Runs [`ReservationController::sync`] every [`SYNC_INTERVAL`] while
    /// leading, with garbage collection every `gc_interval`, until shutdown.
    pub async fn run(self, shutdown: Shutdown) {
        let mut ticker = tokio::time::interval(SYNC_INTERVAL);
        let mut last_gc: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = ticker.tick() => {}
            }
            if !self.leadership.is_leader() {
                continue;
            }
            let gc_pass = last_gc.is_none_or(|at| at.elapsed() >= self.settings.gc_interval);
            if gc_pass {
                last_gc = Some(tokio::time::Instant::now());
            }
            self.sync(SystemTime::now(), gc_pass).await;
        }
    }
}

/// Starts the controller for the cluster-mode shell; it acts only while
/// `leadership` holds. Plugin args were already validated when the scheduler
/// was built; should they fail here anyway, upstream's defaults are used.
pub fn start(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    config: &SchedulerConfiguration,
    leadership: Leadership,
    shutdown: &Shutdown,
) {
    let settings = ControllerSettings::from_config(config).unwrap_or_else(|err| {
        tracing::warn!(error = %err, "Reservation args unreadable; using defaults");
        ControllerSettings::default()
    });
    let controller = ReservationController::new(client.clone(), Arc::clone(scheduler), settings)
        .gated_by(leadership);
    tokio::spawn(controller.run(shutdown.clone()));
}
