//! One reconcile pass over one PodMigrationJob, without I/O: upstream's
//! `doMigrate` as a function of what the shell read. The pass goes through
//! upstream's steps in order, collects condition changes in a copy of the
//! status, and stops at the first step that must wait or that needs the
//! API's answer (creating a Reservation, evicting). The shell then performs
//! the one [`Action`], and writes the status (with the resourceVersion it
//! read) if the action succeeded; [`after_failure`] gives the status when it
//! did not.

use std::time::Duration;

use apis::scheduling::v1alpha1::{
    PodMigrateReservationOptions, PodMigrationJob, PodMigrationJobConditionStatus as CondStatus,
    PodMigrationJobConditionType as CondType, PodMigrationJobMode, PodMigrationJobPhase,
    PodMigrationJobReason as Reason, PodMigrationJobSpec, PodMigrationJobStatus, Reservation,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use k8s_openapi::jiff::Timestamp;

use super::conditions::{condition, is_true, new_condition, record};
use super::reservation as rsv;
use super::{ANNOTATION_JOB_CREATED_BY, DEFAULT_REQUEUE_AFTER, trigger_and_reason};

/// The settings a pass reads (from `MigrationControllerArgs`).
#[derive(Clone, Debug)]
pub struct Settings {
    pub default_mode: PodMigrationJobMode,
    pub default_delete_options: Option<DeleteOptions>,
    pub requeue_after: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_mode: PodMigrationJobMode::ReservationFirst,
            default_delete_options: None,
            requeue_after: DEFAULT_REQUEUE_AFTER,
        }
    }
}

/// What the shell found for the job's reservation reference.
#[derive(Clone, Copy, Debug)]
pub enum ReservationLookup<'a> {
    /// The job names no reservation (yet).
    NotReferenced,
    /// The job names one the API does not have.
    Missing,
    Found(&'a Reservation),
}

/// Everything a pass reads.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    pub job: &'a PodMigrationJob,
    /// The pod of `spec.podRef` (by namespace and name); `None`: not found.
    pub pod: Option<&'a Pod>,
    pub reservation: ReservationLookup<'a>,
    /// The pod named by the reservation's first current owner, when it
    /// names one and it exists.
    pub bound_pod: Option<&'a Pod>,
    /// `Some(message)` when an object limiter holds the pod back.
    pub object_limited: Option<&'a str>,
    /// This controller instance's id (see `ANNOTATION_JOB_CREATED_BY`).
    pub reconciler_id: &'a str,
    pub now: Timestamp,
}

/// The one API call a pass asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    None,
    /// Replace the job's spec (the resourceVersion read guards it).
    UpdateSpec(Box<PodMigrationJobSpec>),
    /// Create the Reservation (an existing one of that name is read
    /// instead), then record the options and the reference in the job's
    /// spec with [`after_reservation_created`].
    CreateReservation {
        reservation: Box<Reservation>,
        options: Box<PodMigrateReservationOptions>,
    },
    /// Delete the Reservation (already gone counts as done).
    DeleteReservation(String),
    /// Evict the pod through the Eviction API (policy `Eviction`) or delete
    /// it (policy `Delete`).
    Evict(Box<EvictRequest>),
}

/// What an eviction needs.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictRequest {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub node: String,
    pub policy: EvictionPolicy,
    pub delete_options: Option<DeleteOptions>,
    /// The plugin that asked (for `descheduler_pods_evicted`).
    pub trigger: String,
    /// Why (the soft-eviction annotation carries it).
    pub reason: String,
}

/// Upstream's evictors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// The Eviction API (PodDisruptionBudgets honoured).
    Eviction,
    /// Deleting the pod.
    Delete,
    /// Annotating the pod with `scheduling.koordinator.sh/soft-eviction`
    /// for a custom evictor to act on.
    SoftEviction,
}

impl EvictionPolicy {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "Eviction" => Some(EvictionPolicy::Eviction),
            "Delete" => Some(EvictionPolicy::Delete),
            "SoftEviction" => Some(EvictionPolicy::SoftEviction),
            _ => None,
        }
    }
}

/// Why the pass ended where it did (for logs and metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The job is not this pass's business (paused, finished, another
    /// instance's).
    Skipped(&'static str),
    /// Waiting for something; look again after `requeue`.
    Waiting(String),
    /// An action was asked for.
    Acting(String),
    /// The job reached a final phase.
    Finished(PodMigrationJobPhase),
}

/// The result of a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub action: Action,
    /// The status to write after the action succeeded (`None`: unchanged).
    pub status: Option<PodMigrationJobStatus>,
    pub requeue: Option<Duration>,
    pub outcome: Outcome,
}

impl Decision {
    fn skip(why: &'static str) -> Self {
        Decision {
            action: Action::None,
            status: None,
            requeue: None,
            outcome: Outcome::Skipped(why),
        }
    }
}

/// A pass in progress: the job's status as it is being changed.
struct Pass<'a> {
    obs: Observation<'a>,
    settings: &'a Settings,
    status: PodMigrationJobStatus,
    changed: bool,
}

fn quoted(namespace: &str, name: &str) -> String {
    format!("\"{namespace}/{name}\"")
}

impl<'a> Pass<'a> {
    fn pod_key(&self) -> (String, String) {
        let pod_ref = &self.obs.job.spec.pod_ref;
        (
            pod_ref.namespace.clone().unwrap_or_default(),
            pod_ref.name.clone().unwrap_or_default(),
        )
    }

    fn record(&mut self, condition: apis::scheduling::v1alpha1::PodMigrationJobCondition) {
        if record(&mut self.status, condition, self.obs.now) {
            self.changed = true;
        }
    }

    fn status_if_changed(&self) -> Option<PodMigrationJobStatus> {
        self.changed.then(|| self.status.clone())
    }

    fn wait(self, why: String) -> Decision {
        Decision {
            action: Action::None,
            status: self.status_if_changed(),
            requeue: Some(self.settings.requeue_after),
            outcome: Outcome::Waiting(why),
        }
    }

    /// Ends the job as Failed with `reason` and `message`, deleting the
    /// reservation it holds when `release` (see docs/migration.md).
    fn fail(mut self, reason: Reason, message: String, release: bool) -> Decision {
        self.status.phase = Some(PodMigrationJobPhase::Failed);
        self.status.reason = Some(reason);
        self.status.message = Some(message);
        let action = match reservation_name(self.obs.job) {
            Some(name) if release => Action::DeleteReservation(name),
            _ => Action::None,
        };
        Decision {
            action,
            status: Some(self.status),
            requeue: None,
            outcome: Outcome::Finished(PodMigrationJobPhase::Failed),
        }
    }

    fn succeed(mut self, message: String) -> Decision {
        self.status.phase = Some(PodMigrationJobPhase::Succeeded);
        self.status.status = Some("Complete".to_string());
        self.status.reason = None;
        self.status.message = Some(message);
        Decision {
            action: Action::None,
            status: Some(self.status),
            requeue: None,
            outcome: Outcome::Finished(PodMigrationJobPhase::Succeeded),
        }
    }
}

/// The name of the reservation the job references, if any.
pub fn reservation_name(job: &PodMigrationJob) -> Option<String> {
    job.spec
        .reservation_options
        .as_ref()
        .and_then(|options| options.reservation_ref.as_ref())
        .and_then(|reference| reference.name.clone())
        .filter(|name| !name.is_empty())
}

/// The mode the job runs in: its own, else the default. Like upstream, any
/// mode other than `EvictDirectly` reserves first.
pub fn effective_mode(job: &PodMigrationJob, settings: &Settings) -> PodMigrationJobMode {
    match &job.spec.mode {
        Some(PodMigrationJobMode::EvictDirectly) => PodMigrationJobMode::EvictDirectly,
        None if settings.default_mode == PodMigrationJobMode::EvictDirectly => {
            PodMigrationJobMode::EvictDirectly
        }
        _ => PodMigrationJobMode::ReservationFirst,
    }
}

/// Whether another controller instance owns the job (upstream ignores jobs
/// whose `job-created-by` names another reconciler).
pub fn is_foreign(job: &PodMigrationJob, reconciler_id: &str) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_JOB_CREATED_BY))
        .is_some_and(|creator| creator != reconciler_id)
}

/// Whether the job is past its `spec.ttl` (upstream `abortJobIfTimeout`).
pub fn timed_out(job: &PodMigrationJob, now: Timestamp) -> bool {
    let Some(ttl) = job
        .spec
        .ttl
        .and_then(|ttl| ttl.to_std())
        .filter(|t| !t.is_zero())
    else {
        return false;
    };
    let Some(created) = job.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let elapsed = now.as_nanosecond() - created.0.as_nanosecond();
    elapsed >= i128::try_from(ttl.as_nanos()).unwrap_or(i128::MAX)
}

/// Whether the scavenger deletes the job now: 30 minutes after creation, or
/// its TTL plus 5 minutes (upstream `doScavenge`, whatever the phase).
pub fn scavenge_due(job: &PodMigrationJob, now: Timestamp) -> bool {
    let Some(created) = job.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let keep = match job
        .spec
        .ttl
        .and_then(|ttl| ttl.to_std())
        .filter(|t| !t.is_zero())
    {
        Some(ttl) => ttl + Duration::from_secs(5 * 60),
        None => Duration::from_secs(30 * 60),
    };
    now.as_nanosecond() - created.0.as_nanosecond()
        >= i128::try_from(keep.as_nanos()).unwrap_or(i128::MAX)
}

fn pod_uid(pod: &Pod) -> Option<&str> {
    pod.metadata.uid.as_deref().filter(|uid| !uid.is_empty())
}

fn pod_node(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .unwrap_or_default()
}

fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The eviction policy of a pod or job label, else the default.
pub fn eviction_policy(
    job: &PodMigrationJob,
    pod: &Pod,
    default: EvictionPolicy,
) -> EvictionPolicy {
    let from = |labels: Option<&std::collections::BTreeMap<String, String>>| {
        labels
            .and_then(|l| l.get(super::LABEL_EVICT_POLICY))
            .and_then(|value| EvictionPolicy::parse(value))
    };
    from(pod.metadata.labels.as_ref())
        .or_else(|| from(job.metadata.labels.as_ref()))
        .unwrap_or(default)
}

/// One reconcile pass (upstream `doMigrate`).
pub fn decide(
    obs: Observation<'_>,
    settings: &Settings,
    default_policy: EvictionPolicy,
) -> Decision {
    let job = obs.job;
    if job.spec.paused == Some(true) {
        return Decision::skip("paused");
    }
    let phase = job.status.as_ref().and_then(|s| s.phase.clone());
    if !matches!(
        phase,
        None | Some(PodMigrationJobPhase::Pending) | Some(PodMigrationJobPhase::Running)
    ) {
        return Decision::skip("finished");
    }
    if is_foreign(job, obs.reconciler_id) {
        return Decision::skip("created by another controller instance");
    }
    let mut pass = Pass {
        obs,
        settings,
        status: job.status.clone().unwrap_or_default(),
        changed: false,
    };
    if timed_out(job, obs.now) {
        return pass.fail(
            Reason::Timeout,
            "Abort job caused by timeout".to_string(),
            true,
        );
    }
    let (namespace, name) = pass.pod_key();
    if matches!(phase, None | Some(PodMigrationJobPhase::Pending)) {
        // preparePendingJob: a valid podRef to an existing pod, whose uid is
        // recorded; then Running.
        if namespace.is_empty() || name.is_empty() {
            return pass.fail(
                Reason::Other("InvalidPodRef".to_string()),
                "Abort job caused by invalid PodRef".to_string(),
                false,
            );
        }
        let Some(pod) = obs.pod else {
            return pass.fail(
                Reason::MissingPod,
                format!(
                    "Abort job caused by missing Pod {}",
                    quoted(&namespace, &name)
                ),
                false,
            );
        };
        let mut spec = job.spec.clone();
        spec.pod_ref.uid = pod_uid(pod).map(str::to_string);
        pass.status.phase = Some(PodMigrationJobPhase::Running);
        let action = if spec == job.spec {
            Action::None
        } else {
            Action::UpdateSpec(Box::new(spec))
        };
        return Decision {
            action,
            status: Some(pass.status),
            requeue: Some(Duration::ZERO),
            outcome: Outcome::Acting("started: phase Running".to_string()),
        };
    }
    if let Some(message) = obs.object_limited
        && !has_evict_annotation(job)
    {
        return Decision {
            action: Action::None,
            status: None,
            requeue: Some(settings.requeue_after),
            outcome: Outcome::Waiting(format!("object limiter: {message}")),
        };
    }
    if effective_mode(job, settings) == PodMigrationJobMode::EvictDirectly {
        return match evict_step(&mut pass, default_policy) {
            Step::Continue => {
                let message = format!("Pod {} has been evicted", quoted(&namespace, &name));
                pass.succeed(message)
            }
            Step::Stop(decision) => *decision,
        };
    }
    reservation_first(pass, default_policy)
}

/// Whether the job carries the descheduler's evict annotation (then no
/// object limiter holds it back).
fn has_evict_annotation(job: &PodMigrationJob) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::model::EVICT_ANNOTATION))
}

enum Step {
    Continue,
    Stop(Box<Decision>),
}

fn reservation_first(mut pass: Pass<'_>, default_policy: EvictionPolicy) -> Decision {
    let obs = pass.obs;
    let job = obs.job;
    let (namespace, name) = pass.pod_key();
    let reservation = match obs.reservation {
        ReservationLookup::NotReferenced => {
            let Some(pod) = obs.pod else {
                return pass.fail(
                    Reason::MissingPod,
                    format!(
                        "Abort job caused by missing Pod {}",
                        quoted(&namespace, &name)
                    ),
                    false,
                );
            };
            let built = rsv::reservation_options(job, pod, obs.now)
                .map_err(|err| err.to_string())
                .and_then(|options| {
                    rsv::reservation_from_options(&options)
                        .map(|reservation| (reservation, options))
                        .ok_or_else(|| "the reservation template is incomplete".to_string())
                });
            return match built {
                Ok((reservation, options)) => Decision {
                    action: Action::CreateReservation {
                        reservation: Box::new(reservation),
                        options: Box::new(options),
                    },
                    status: pass.status_if_changed(),
                    requeue: Some(Duration::ZERO),
                    outcome: Outcome::Acting("creating the Reservation".to_string()),
                },
                Err(err) => {
                    pass.record(new_condition(
                        CondType::ReservationCreated,
                        CondStatus::False,
                        Some(Reason::FailedCreateReservation),
                        Some(format!("Failed to create Reservation caused by {err}")),
                    ));
                    pass.wait(format!("cannot build the Reservation: {err}"))
                }
            };
        }
        ReservationLookup::Missing => {
            let reservation = reservation_name(job).unwrap_or_default();
            return pass.fail(
                Reason::MissingReservation,
                format!("Abort job caused by missing Reservation \"{reservation}\""),
                false,
            );
        }
        ReservationLookup::Found(reservation) => reservation,
    };
    let reservation_name = reservation.metadata.name.clone().unwrap_or_default();
    pass.record(new_condition(
        CondType::ReservationCreated,
        CondStatus::True,
        None,
        None,
    ));
    // syncReservationScheduleFailed
    let scheduled_condition = condition(&pass.status, &CondType::ReservationScheduled);
    if scheduled_condition.is_none_or(|c| c.status == CondStatus::False)
        && let Some(unschedulable) = rsv::unschedulable_condition(reservation)
    {
        pass.record(new_condition(
            CondType::ReservationScheduled,
            CondStatus::False,
            Some(Reason::Unschedulable),
            unschedulable.message.clone(),
        ));
    }
    if rsv::is_pending(reservation) {
        return pass.wait(format!("Reservation {reservation_name} is pending"));
    }
    if rsv::is_expired(reservation) {
        return pass.fail(
            Reason::ReservationExpired,
            "Reservation expired".to_string(),
            true,
        );
    }
    if !rsv::is_scheduled(reservation) {
        let message = rsv::unschedulable_condition(reservation)
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        return pass.fail(Reason::Unschedulable, message, true);
    }
    // prepareJobWithReservationScheduleSuccess
    let scheduled_node = reservation.node_name().unwrap_or_default().to_string();
    let job_node_empty = pass
        .status
        .node_name
        .as_deref()
        .unwrap_or_default()
        .is_empty();
    if job_node_empty && !is_true(&pass.status, &CondType::ReservationScheduled) {
        if let Some(pod) = obs.pod
            && pod_node(pod) == scheduled_node
        {
            return pass.fail(
                Reason::ForbiddenMigratePod,
                format!(
                    "Scheduler assignes the Reservation \"{reservation_name}\" on the same node as the Pod"
                ),
                true,
            );
        }
        pass.status.node_name = Some(scheduled_node.clone());
        pass.changed = true;
        pass.record(new_condition(
            CondType::ReservationScheduled,
            CondStatus::True,
            None,
            None,
        ));
    }
    if rsv::migrates_pending_pod(reservation) {
        return wait_for_pending_pod_scheduled(pass, reservation);
    }
    if let Step::Stop(decision) = evict_step(&mut pass, default_policy) {
        return *decision;
    }
    // waitForPodBindReservation
    let Some(bound) = rsv::bound_pod(reservation).cloned() else {
        if !is_true(&pass.status, &CondType::PodBoundReservation) {
            pass.record(new_condition(
                CondType::PodBoundReservation,
                CondStatus::False,
                Some(Reason::WaitForPodBindReservation),
                None,
            ));
            return pass.wait(format!(
                "waiting for a pod to take Reservation {reservation_name}"
            ));
        }
        // Bound earlier and released since: nothing is left to wait for.
        return pass.succeed(format!("Reservation \"{reservation_name}\" was bound"));
    };
    // handleReservationBoundSuccess
    if crate::migration::conditions::update_condition(
        &mut pass.status,
        new_condition(CondType::ReservationBound, CondStatus::True, None, None),
        obs.now,
    ) || pass.status.pod_ref.is_none()
    {
        pass.status.pod_ref = Some(bound.clone());
        pass.changed = true;
    }
    let bound_key = quoted(
        bound.namespace.as_deref().unwrap_or_default(),
        bound.name.as_deref().unwrap_or_default(),
    );
    // waitForPodReady: a bound pod gone counts as ready, as upstream.
    if !is_true(&pass.status, &CondType::BoundPodReady) {
        if let Some(bound_pod) = obs.bound_pod
            && !pod_is_ready(bound_pod)
        {
            pass.record(new_condition(
                CondType::BoundPodReady,
                CondStatus::False,
                Some(Reason::WaitForBoundPodReady),
                None,
            ));
            return pass.wait(format!("waiting for bound pod {bound_key} to be ready"));
        }
        pass.record(new_condition(
            CondType::BoundPodReady,
            CondStatus::True,
            None,
            None,
        ));
    }
    let message = format!("Bind Pod {bound_key} in Reservation \"{reservation_name}\"");
    pass.status.pod_ref = Some(bound);
    crate::migration::conditions::update_condition(
        &mut pass.status,
        new_condition(
            CondType::PodBoundReservation,
            CondStatus::True,
            None,
            Some(message.clone()),
        ),
        obs.now,
    );
    pass.succeed(message)
}

/// upstream `waitForPendingPodScheduled`: the job migrates a pod that was
/// never placed; it succeeds once the scheduler places it.
fn wait_for_pending_pod_scheduled(mut pass: Pass<'_>, reservation: &Reservation) -> Decision {
    let (namespace, name) = pass.pod_key();
    let Some(pod) = pass.obs.pod else {
        return pass.fail(
            Reason::MissingPod,
            format!(
                "Abort job caused by missing Pod {}",
                quoted(&namespace, &name)
            ),
            true,
        );
    };
    let scheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    if scheduled.is_none_or(|c| c.status == "False") {
        if rsv::is_succeeded(reservation) && !bound_to(reservation, pod) {
            return pass.fail(
                Reason::ForbiddenMigratePod,
                "Reservation is already bound by another Pod".to_string(),
                false,
            );
        }
        pass.record(new_condition(
            CondType::PodScheduled,
            CondStatus::False,
            Some(Reason::Unschedulable),
            scheduled.and_then(|c| c.message.clone()),
        ));
        return pass.wait(format!(
            "waiting for pending pod {namespace}/{name} to be scheduled"
        ));
    }
    let message = format!(
        "Assign Pod {} to node \"{}\"",
        quoted(&namespace, &name),
        pod_node(pod)
    );
    crate::migration::conditions::update_condition(
        &mut pass.status,
        new_condition(CondType::PodScheduled, CondStatus::True, None, None),
        pass.obs.now,
    );
    pass.succeed(message)
}

fn bound_to(reservation: &Reservation, pod: &Pod) -> bool {
    rsv::bound_pod(reservation)
        .and_then(|r| r.uid.as_deref())
        .is_some_and(|uid| Some(uid) == pod_uid(pod))
}

/// upstream `evictPod`: `Continue` once the pod is gone.
fn evict_step(pass: &mut Pass<'_>, default_policy: EvictionPolicy) -> Step {
    let obs = pass.obs;
    let job = obs.job;
    let eviction = condition(&pass.status, &CondType::Eviction).cloned();
    if eviction
        .as_ref()
        .is_some_and(|c| c.status == CondStatus::True)
    {
        return Step::Continue;
    }
    let (namespace, name) = pass.pod_key();
    let expected_uid = job
        .spec
        .pod_ref
        .uid
        .as_deref()
        .filter(|uid| !uid.is_empty());
    let replaced =
        |pod: &Pod| eviction.is_some() && expected_uid.is_some_and(|uid| Some(uid) != pod_uid(pod));
    let pod = match obs.pod {
        Some(pod) if !replaced(pod) => pod,
        _ => {
            if pass.status.status.as_deref() != Some(CondType::Eviction.as_str()) {
                let decision = take(pass).fail(
                    Reason::MissingPod,
                    format!(
                        "Abort job caused by missing Pod {}",
                        quoted(&namespace, &name)
                    ),
                    true,
                );
                return Step::Stop(Box::new(decision));
            }
            pass.record(new_condition(
                CondType::Eviction,
                CondStatus::True,
                Some(Reason::EvictComplete),
                None,
            ));
            return Step::Continue;
        }
    };
    if eviction
        .as_ref()
        .is_some_and(|c| c.reason == Some(Reason::Evicting))
    {
        let decision = take(pass).wait(format!("waiting for pod {namespace}/{name} to go"));
        return Step::Stop(Box::new(decision));
    }
    // abortJobIfReservationBoundByAnotherPod (without a pod: any binding is another's)
    if let ReservationLookup::Found(reservation) = obs.reservation
        && rsv::is_succeeded(reservation)
    {
        let decision = take(pass).fail(
            Reason::ForbiddenMigratePod,
            "Reservation is already bound by another Pod".to_string(),
            false,
        );
        return Step::Stop(Box::new(decision));
    }
    let (trigger, reason) = trigger_and_reason(job.metadata.annotations.as_ref());
    let node = pod_node(pod).to_string();
    pass.record(new_condition(
        CondType::Eviction,
        CondStatus::False,
        Some(Reason::Evicting),
        Some(format!(
            "Pod {} evicted from node \"{node}\" by the reason \"{reason}\"",
            quoted(&namespace, &name)
        )),
    ));
    let policy = eviction_policy(job, pod, default_policy);
    let delete_options = job
        .spec
        .delete_options
        .clone()
        .or_else(|| pass.settings.default_delete_options.clone());
    let decision = Decision {
        action: Action::Evict(Box::new(EvictRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: pod_uid(pod).map(str::to_string),
            node,
            policy,
            delete_options,
            trigger,
            reason,
        })),
        status: Some(pass.status.clone()),
        requeue: Some(pass.settings.requeue_after),
        outcome: Outcome::Acting(format!("evicting pod {namespace}/{name}")),
    };
    Step::Stop(Box::new(decision))
}

/// Moves the pass out of a `&mut` (the pass ends here).
fn take<'a>(pass: &mut Pass<'a>) -> Pass<'a> {
    Pass {
        obs: pass.obs,
        settings: pass.settings,
        status: std::mem::take(&mut pass.status),
        changed: pass.changed,
    }
}

/// The job's spec once its Reservation exists: the completed options with
/// the reference to it (upstream writes both in one update).
pub fn after_reservation_created(
    job: &PodMigrationJob,
    options: &PodMigrateReservationOptions,
    created: &Reservation,
) -> PodMigrationJobSpec {
    let mut spec = job.spec.clone();
    let mut options = options.clone();
    options.reservation_ref = Some(rsv::reservation_ref(created));
    spec.reservation_options = Some(options);
    spec
}

/// How an action failed, as the status reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionFailure {
    /// HTTP status, when the API answered.
    pub code: Option<u16>,
    pub message: String,
}

/// The status to write when the decision's action failed (`None`: leave
/// it; the job is retried after a backoff until its TTL ends it). The
/// conditions the pass gathered before the action are kept.
pub fn after_failure(
    job: &PodMigrationJob,
    decision: &Decision,
    failure: &ActionFailure,
    now: Timestamp,
) -> Option<PodMigrationJobStatus> {
    let mut status = decision
        .status
        .clone()
        .or_else(|| job.status.clone())
        .unwrap_or_default();
    let condition = match &decision.action {
        Action::CreateReservation { .. } => new_condition(
            CondType::ReservationCreated,
            CondStatus::False,
            Some(Reason::FailedCreateReservation),
            Some(format!(
                "Failed to create Reservation caused by {}",
                failure.message
            )),
        ),
        Action::Evict(request) => {
            let (namespace, name) = (&request.namespace, &request.name);
            let cause = if failure.code == Some(429) {
                format!(
                    "the Eviction API refused (429 Too Many Requests; a PodDisruptionBudget allows no disruption now): {}",
                    failure.message
                )
            } else {
                failure.message.clone()
            };
            new_condition(
                CondType::Eviction,
                CondStatus::False,
                Some(Reason::FailedEvict),
                Some(format!(
                    "Failed evict Pod {} caused by {cause}",
                    quoted(namespace, name)
                )),
            )
        }
        Action::None | Action::UpdateSpec(_) | Action::DeleteReservation(_) => return None,
    };
    record(&mut status, condition, now);
    Some(status)
}

/// The reference the job's `status.podRef` takes for a bound pod.
pub fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        kind: Some("Pod".to_string()),
        ..ObjectReference::default()
    }
}
