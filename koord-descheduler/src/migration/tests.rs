//! Cases transcribed from upstream's `controller_test.go`,
//! `arbitrator_test.go` and `reservation/util_test.go` (names and
//! expectations), run against the pure decision core.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use apis::extension::duration::GoDuration;
use apis::scheduling::v1alpha1::{
    ConditionStatus, PodMigrationJob, PodMigrationJobConditionStatus as CS,
    PodMigrationJobConditionType as CT, PodMigrationJobMode, PodMigrationJobPhase as Phase,
    PodMigrationJobReason as R, PodMigrationJobSpec, PodMigrationJobStatus, Reservation,
    ReservationCondition, ReservationConditionType, ReservationPhase, ReservationReason,
    ReservationStatus,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::conditions::condition;
use super::core::{
    Action, Decision, EvictionPolicy, Observation, Outcome, ReservationLookup, Settings, decide,
};
use super::limiter::{LimiterSubject, ObjectLimiters, TokenBucket};
use super::*;
use crate::config::types::{MigrationControllerArgs, MigrationObjectLimiter};

const ID: &str = "reconciler-1";

fn t0() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn later(seconds: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(seconds)
}

fn pod(name: &str, node: &str) -> Pod {
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "test".into(),
                uid: "2f96233d-a6b9-4981-b594-7c90c987aed9".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: (!node.is_empty()).then(|| node.to_string()),
            scheduler_name: Some("koord-scheduler".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn job(phase: Option<Phase>) -> PodMigrationJob {
    let mut job = PodMigrationJob::new(
        "test",
        PodMigrationJobSpec {
            paused: None,
            ttl: None,
            mode: None,
            pod_ref: ObjectReference {
                namespace: Some("default".into()),
                name: Some("test-pod".into()),
                ..ObjectReference::default()
            },
            reservation_options: None,
            delete_options: None,
        },
    );
    job.metadata.uid = Some("job-uid".into());
    job.metadata.creation_timestamp = Some(Time(t0()));
    job.status = Some(PodMigrationJobStatus {
        phase,
        ..PodMigrationJobStatus::default()
    });
    job
}

fn with_reservation_ref(mut job: PodMigrationJob, name: &str) -> PodMigrationJob {
    job.spec.reservation_options = Some(apis::scheduling::v1alpha1::PodMigrateReservationOptions {
        reservation_ref: Some(ObjectReference {
            name: Some(name.into()),
            ..ObjectReference::default()
        }),
        ..Default::default()
    });
    job
}

fn reservation(phase: Option<ReservationPhase>, node: &str) -> Reservation {
    let mut reservation = Reservation::new(
        "test-reservation",
        apis::scheduling::v1alpha1::ReservationSpec {
            template: Default::default(),
            owners: vec![apis::scheduling::v1alpha1::ReservationOwner {
                controller: Some(apis::scheduling::v1alpha1::ReservationControllerReference {
                    owner_reference: OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "StatefulSet".into(),
                        name: "test".into(),
                        uid: "2f96233d-a6b9-4981-b594-7c90c987aed9".into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    },
                    namespace: Some("default".into()),
                }),
                ..Default::default()
            }],
            ttl: None,
            expires: None,
            pre_allocation: None,
            allocate_once: None,
            allocate_policy: None,
            unschedulable: None,
            taints: None,
            pre_allocation_policy: None,
        },
    );
    let scheduled = !node.is_empty();
    reservation.status = Some(ReservationStatus {
        phase,
        node_name: scheduled.then(|| node.to_string()),
        conditions: scheduled.then(|| {
            vec![ReservationCondition {
                type_: Some(ReservationConditionType::Scheduled),
                status: Some(ConditionStatus::True),
                reason: Some(ReservationReason::Scheduled),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
    reservation
}

struct World<'a> {
    pod: Option<&'a Pod>,
    reservation: ReservationLookup<'a>,
    bound_pod: Option<&'a Pod>,
    limited: Option<&'a str>,
    now: Timestamp,
}

impl Default for World<'_> {
    fn default() -> Self {
        World {
            pod: None,
            reservation: ReservationLookup::NotReferenced,
            bound_pod: None,
            limited: None,
            now: later(1),
        }
    }
}

fn run(job: &PodMigrationJob, world: World<'_>, settings: &Settings) -> Decision {
    decide(
        Observation {
            job,
            pod: world.pod,
            reservation: world.reservation,
            bound_pod: world.bound_pod,
            object_limited: world.limited,
            reconciler_id: ID,
            now: world.now,
        },
        settings,
        EvictionPolicy::Eviction,
    )
}

fn status(decision: &Decision) -> &PodMigrationJobStatus {
    decision.status.as_ref().expect("a status to write")
}

fn failed_with(decision: &Decision, reason: R) {
    let status = status(decision);
    assert_eq!(status.phase, Some(Phase::Failed), "{decision:?}");
    assert_eq!(status.reason, Some(reason), "{decision:?}");
}

/// Applies a decision as the shell would (action succeeded, status written).
fn applied(mut job: PodMigrationJob, decision: &Decision) -> PodMigrationJob {
    if let Action::UpdateSpec(spec) = &decision.action {
        job.spec = (**spec).clone();
    }
    if let Some(status) = &decision.status {
        job.status = Some(status.clone());
    }
    job
}

#[test]
fn abort_job_if_timeout() {
    let settings = Settings::default();
    let pod = pod("test-pod", "node-1");
    // No TTL: never times out.
    let running = job(Some(Phase::Running));
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            now: later(3600),
            ..World::default()
        },
        &settings,
    );
    assert_ne!(d.outcome, Outcome::Finished(Phase::Failed));
    // TTL 30 minutes, just created: not yet.
    let mut with_ttl = running.clone();
    with_ttl.spec.ttl = Some(GoDuration::from_std(Duration::from_secs(30 * 60)));
    let d = run(
        &with_ttl,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &settings,
    );
    assert_ne!(d.outcome, Outcome::Finished(Phase::Failed));
    // 60 minutes later: Failed, Timeout; a reservation it holds is deleted.
    let with_ttl = with_reservation_ref(with_ttl, "test-reservation");
    let d = run(
        &with_ttl,
        World {
            pod: Some(&pod),
            now: later(3600),
            ..World::default()
        },
        &settings,
    );
    failed_with(&d, R::Timeout);
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Abort job caused by timeout")
    );
    assert_eq!(
        d.action,
        Action::DeleteReservation("test-reservation".into())
    );
}

#[test]
fn abort_job_by_missing_pod() {
    let d = run(&job(None), World::default(), &Settings::default());
    failed_with(&d, R::MissingPod);
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Abort job caused by missing Pod \"default/test-pod\"")
    );
}

#[test]
fn abort_job_by_invalid_pod_ref() {
    let mut pending = job(None);
    pending.spec.pod_ref.name = None;
    let d = run(&pending, World::default(), &Settings::default());
    failed_with(&d, R::Other("InvalidPodRef".into()));
}

#[test]
fn pending_job_records_the_pod_uid_and_runs() {
    let pod = pod("test-pod", "node-1");
    let d = run(
        &job(None),
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &Settings::default(),
    );
    let Action::UpdateSpec(spec) = &d.action else {
        panic!("{d:?}")
    };
    assert_eq!(spec.pod_ref.uid.as_deref(), Some("uid-test-pod"));
    assert_eq!(status(&d).phase, Some(Phase::Running));
}

#[test]
fn abort_job_by_missing_reservation() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Missing,
            ..World::default()
        },
        &Settings::default(),
    );
    failed_with(&d, R::MissingReservation);
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Abort job caused by missing Reservation \"test-reservation\"")
    );
}

#[test]
fn abort_job_by_reservation_bound_by_another_pod() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let bound = reservation(Some(ReservationPhase::Succeeded), "node-2");
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&bound),
            ..World::default()
        },
        &Settings::default(),
    );
    failed_with(&d, R::ForbiddenMigratePod);
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Reservation is already bound by another Pod")
    );
}

#[test]
fn handle_schedule_failed_and_abort_unschedulable() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let mut failed = reservation(Some(ReservationPhase::Failed), "");
    failed.status.as_mut().unwrap().conditions = Some(vec![ReservationCondition {
        type_: Some(ReservationConditionType::Scheduled),
        reason: Some(ReservationReason::Unschedulable),
        message: Some("Reservation is unschedulable".into()),
        ..Default::default()
    }]);
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&failed),
            ..World::default()
        },
        &Settings::default(),
    );
    let cond = condition(status(&d), &CT::ReservationScheduled).unwrap();
    assert_eq!(cond.status, CS::False);
    assert_eq!(cond.reason, Some(R::Unschedulable));
    assert_eq!(
        cond.message.as_deref(),
        Some("Reservation is unschedulable")
    );
    failed_with(&d, R::Unschedulable);
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Reservation is unschedulable")
    );
    // Ours: the reservation is released with the job.
    assert_eq!(
        d.action,
        Action::DeleteReservation("test-reservation".into())
    );
}

#[test]
fn pending_reservation_is_waited_for_with_its_unschedulable_message() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let mut pending = reservation(Some(ReservationPhase::Pending), "");
    pending.status.as_mut().unwrap().conditions = Some(vec![ReservationCondition {
        type_: Some(ReservationConditionType::Scheduled),
        reason: Some(ReservationReason::Unschedulable),
        message: Some("0/3 nodes are available".into()),
        ..Default::default()
    }]);
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&pending),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(matches!(d.outcome, Outcome::Waiting(_)), "{d:?}");
    assert_eq!(d.requeue, Some(DEFAULT_REQUEUE_AFTER));
    assert!(super::conditions::is_true(
        status(&d),
        &CT::ReservationCreated
    ));
    assert_eq!(status(&d).reason, Some(R::Unschedulable));
    assert_eq!(status(&d).status.as_deref(), Some("ReservationScheduled"));
}

#[test]
fn handle_schedule_success_then_evict() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let available = reservation(Some(ReservationPhase::Available), "test-node");
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&available),
            ..World::default()
        },
        &Settings::default(),
    );
    let s = status(&d);
    assert!(super::conditions::is_true(s, &CT::ReservationScheduled));
    assert_eq!(s.node_name.as_deref(), Some("test-node"));
    let cond = condition(s, &CT::Eviction).unwrap();
    assert_eq!(
        (cond.status.clone(), cond.reason.clone()),
        (CS::False, Some(R::Evicting))
    );
    assert_eq!(
        cond.message.as_deref(),
        Some("Pod \"default/test-pod\" evicted from node \"node-1\" by the reason \"NotSet\"")
    );
    assert!(
        matches!(&d.action, Action::Evict(e) if e.name == "test-pod" && e.policy == EvictionPolicy::Eviction)
    );
}

#[test]
fn abort_job_if_reserve_on_same_node() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "test-node-1");
    let same = reservation(Some(ReservationPhase::Available), "test-node-1");
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&same),
            ..World::default()
        },
        &Settings::default(),
    );
    failed_with(&d, R::ForbiddenMigratePod);
}

#[test]
fn migrate_with_reservation_expired() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let pod = pod("test-pod", "node-1");
    let mut expired = reservation(Some(ReservationPhase::Failed), "test-node-1");
    expired.status.as_mut().unwrap().conditions = Some(vec![ReservationCondition {
        type_: Some(ReservationConditionType::Ready),
        reason: Some(ReservationReason::Expired),
        ..Default::default()
    }]);
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            reservation: ReservationLookup::Found(&expired),
            ..World::default()
        },
        &Settings::default(),
    );
    failed_with(&d, R::ReservationExpired);
}

#[test]
fn evict_pod_steps() {
    let settings = Settings::default();
    let pod = pod("test-pod", "node-1");
    let mut evict_directly = job(Some(Phase::Running));
    evict_directly.spec.mode = Some(PodMigrationJobMode::EvictDirectly);
    // An Eviction condition that is True: done.
    let mut done = evict_directly.clone();
    super::conditions::update_condition(
        done.status.as_mut().unwrap(),
        super::conditions::new_condition(CT::Eviction, CS::True, None, None),
        t0(),
    );
    let d = run(
        &done,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &settings,
    );
    assert_eq!(status(&d).phase, Some(Phase::Succeeded));
    // No condition, the pod missing, status at another step: MissingPod.
    let mut other_step = evict_directly.clone();
    other_step.status.as_mut().unwrap().status = Some("ReservationScheduled".into());
    let d = run(&other_step, World::default(), &settings);
    failed_with(&d, R::MissingPod);
    // The pod there: evict, condition Eviction False Evicting, requeue.
    let d = run(
        &evict_directly,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &settings,
    );
    assert!(matches!(d.action, Action::Evict(_)));
    assert_eq!(d.requeue, Some(DEFAULT_REQUEUE_AFTER));
    let evicting = applied(evict_directly.clone(), &d);
    // Still there: wait without a new eviction.
    let d = run(
        &evicting,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &settings,
    );
    assert_eq!(d.action, Action::None);
    assert!(matches!(d.outcome, Outcome::Waiting(_)));
    // Gone: Eviction True EvictComplete, and EvictDirectly succeeds.
    let d = run(&evicting, World::default(), &settings);
    let s = status(&d);
    let cond = condition(s, &CT::Eviction).unwrap();
    assert_eq!(
        (cond.status.clone(), cond.reason.clone()),
        (CS::True, Some(R::EvictComplete))
    );
    assert_eq!(s.phase, Some(Phase::Succeeded));
    assert_eq!(s.status.as_deref(), Some("Complete"));
    assert_eq!(s.reason, None);
    assert_eq!(
        s.message.as_deref(),
        Some("Pod \"default/test-pod\" has been evicted")
    );
}

#[test]
fn evict_pod_directly_by_default_mode() {
    let settings = Settings {
        default_mode: PodMigrationJobMode::EvictDirectly,
        ..Settings::default()
    };
    let pod = pod("test-pod", "node-1");
    let d = run(
        &job(Some(Phase::Running)),
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &settings,
    );
    assert!(matches!(d.action, Action::Evict(_)), "{d:?}");
}

#[test]
fn a_replaced_pod_of_the_same_name_counts_as_evicted() {
    // TestMigrateWithSamePodName: the pod was evicted and a new one with the
    // same name but another uid appeared.
    let mut evicting = job(Some(Phase::Running));
    evicting.spec.mode = Some(PodMigrationJobMode::EvictDirectly);
    evicting.spec.pod_ref.uid = Some("uid-old".into());
    let status = evicting.status.as_mut().unwrap();
    super::conditions::record(
        status,
        super::conditions::new_condition(CT::Eviction, CS::False, Some(R::Evicting), None),
        t0(),
    );
    let new_pod = pod("test-pod", "node-2");
    let d = run(
        &evicting,
        World {
            pod: Some(&new_pod),
            ..World::default()
        },
        &Settings::default(),
    );
    assert_eq!(d.action, Action::None);
    assert_eq!(self::status(&d).phase, Some(Phase::Succeeded));
}

#[test]
fn wait_for_pod_bind_reservation_then_ready_then_succeed() {
    // TestMigrate: the whole ReservationFirst path through the core.
    let settings = Settings::default();
    let victim = pod("test-pod", "node-1");
    let mut available = reservation(Some(ReservationPhase::Available), "test-node-1");
    let mut current = job(None);
    // Pending → Running.
    let d = run(
        &current,
        World {
            pod: Some(&victim),
            ..World::default()
        },
        &settings,
    );
    current = applied(current, &d);
    assert_eq!(current.status.as_ref().unwrap().phase, Some(Phase::Running));
    // Running without a reservation: create it.
    let d = run(
        &current,
        World {
            pod: Some(&victim),
            ..World::default()
        },
        &settings,
    );
    let Action::CreateReservation {
        reservation: built,
        options,
    } = &d.action
    else {
        panic!("{d:?}")
    };
    assert_eq!(built.metadata.name.as_deref(), Some("job-uid"));
    available.metadata.name = Some("job-uid".into());
    current.spec = super::core::after_reservation_created(&current, options, &available);
    assert_eq!(
        super::core::reservation_name(&current).as_deref(),
        Some("job-uid")
    );
    // Available: evict.
    let d = run(
        &current,
        World {
            pod: Some(&victim),
            reservation: ReservationLookup::Found(&available),
            ..World::default()
        },
        &settings,
    );
    assert!(matches!(d.action, Action::Evict(_)), "{d:?}");
    current = applied(current, &d);
    // The pod is gone; nobody took the reservation yet.
    let d = run(
        &current,
        World {
            reservation: ReservationLookup::Found(&available),
            ..World::default()
        },
        &settings,
    );
    let cond = condition(status(&d), &CT::PodBoundReservation).unwrap();
    assert_eq!(
        (cond.status.clone(), cond.reason.clone()),
        (CS::False, Some(R::WaitForPodBindReservation))
    );
    assert_eq!(d.requeue, Some(DEFAULT_REQUEUE_AFTER));
    current = applied(current, &d);
    // The replacement took it but is not ready.
    let mut replacement = pod("test-pod-1", "test-node-1");
    replacement.status.as_mut().unwrap().conditions = None;
    available.status.as_mut().unwrap().current_owners = Some(vec![ObjectReference {
        namespace: Some("default".into()),
        name: Some("test-pod-1".into()),
        ..Default::default()
    }]);
    let d = run(
        &current,
        World {
            reservation: ReservationLookup::Found(&available),
            bound_pod: Some(&replacement),
            ..World::default()
        },
        &settings,
    );
    assert_eq!(status(&d).reason, Some(R::WaitForBoundPodReady));
    assert!(super::conditions::is_true(
        status(&d),
        &CT::ReservationBound
    ));
    current = applied(current, &d);
    // Ready: Succeeded.
    let ready = pod("test-pod-1", "test-node-1");
    let d = run(
        &current,
        World {
            reservation: ReservationLookup::Found(&available),
            bound_pod: Some(&ready),
            ..World::default()
        },
        &settings,
    );
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Succeeded));
    assert_eq!(s.status.as_deref(), Some("Complete"));
    assert_eq!(
        s.message.as_deref(),
        Some("Bind Pod \"default/test-pod-1\" in Reservation \"job-uid\"")
    );
    assert_eq!(
        s.pod_ref.as_ref().and_then(|r| r.name.as_deref()),
        Some("test-pod-1")
    );
    assert!(super::conditions::is_true(s, &CT::PodBoundReservation));
}

#[test]
fn wait_for_pending_pod_scheduled() {
    let running = with_reservation_ref(job(Some(Phase::Running)), "test-reservation");
    let mut pending_pod = pod("test-pod", "");
    pending_pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            message: Some("0/1 nodes".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let mut r = reservation(Some(ReservationPhase::Available), "test-node-1");
    r.spec.owners = super::reservation::reservation_owners(&pending_pod);
    assert!(super::reservation::migrates_pending_pod(&r));
    let d = run(
        &running,
        World {
            pod: Some(&pending_pod),
            reservation: ReservationLookup::Found(&r),
            ..World::default()
        },
        &Settings::default(),
    );
    let cond = condition(status(&d), &CT::PodScheduled).unwrap();
    assert_eq!(
        (cond.status.clone(), cond.reason.clone()),
        (CS::False, Some(R::Unschedulable))
    );
    let running = applied(running, &d);
    let mut placed = pending_pod.clone();
    placed.spec.as_mut().unwrap().node_name = Some("test-node-1".into());
    placed.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    let d = run(
        &running,
        World {
            pod: Some(&placed),
            reservation: ReservationLookup::Found(&r),
            ..World::default()
        },
        &Settings::default(),
    );
    assert_eq!(status(&d).phase, Some(Phase::Succeeded));
    assert_eq!(
        status(&d).message.as_deref(),
        Some("Assign Pod \"default/test-pod\" to node \"test-node-1\"")
    );
}

#[test]
fn paused_finished_and_foreign_jobs_are_skipped() {
    let pod = pod("test-pod", "node-1");
    let mut paused = job(None);
    paused.spec.paused = Some(true);
    assert_eq!(
        run(
            &paused,
            World {
                pod: Some(&pod),
                ..World::default()
            },
            &Settings::default()
        )
        .outcome,
        Outcome::Skipped("paused")
    );
    for phase in [Phase::Succeeded, Phase::Failed, Phase::Aborted] {
        let d = run(
            &job(Some(phase)),
            World {
                pod: Some(&pod),
                ..World::default()
            },
            &Settings::default(),
        );
        assert_eq!(d.outcome, Outcome::Skipped("finished"));
    }
    let mut foreign = job(None);
    foreign.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_JOB_CREATED_BY.to_string(),
        "other".to_string(),
    )]));
    let d = run(
        &foreign,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &Settings::default(),
    );
    assert_eq!(
        d.outcome,
        Outcome::Skipped("created by another controller instance")
    );
    // A manually created job (no annotation) is handled.
    foreign.metadata.annotations = None;
    assert!(matches!(
        run(
            &foreign,
            World {
                pod: Some(&pod),
                ..World::default()
            },
            &Settings::default()
        )
        .outcome,
        Outcome::Acting(_)
    ));
}

#[test]
fn object_limiter_requeues_unless_the_job_has_the_evict_annotation() {
    let pod = pod("test-pod", "node-1");
    let running = job(Some(Phase::Running));
    let d = run(
        &running,
        World {
            pod: Some(&pod),
            limited: Some("busy"),
            ..World::default()
        },
        &Settings::default(),
    );
    assert_eq!(d.action, Action::None);
    assert_eq!(d.requeue, Some(DEFAULT_REQUEUE_AFTER));
    let mut annotated = running.clone();
    annotated.metadata.annotations = Some(BTreeMap::from([(
        crate::model::EVICT_ANNOTATION.to_string(),
        "true".to_string(),
    )]));
    let d = run(
        &annotated,
        World {
            pod: Some(&pod),
            limited: Some("busy"),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(
        matches!(d.action, Action::CreateReservation { .. }),
        "{d:?}"
    );
}

#[test]
fn eviction_failure_is_reported_in_the_status() {
    let pod = pod("test-pod", "node-1");
    let mut direct = job(Some(Phase::Running));
    direct.spec.mode = Some(PodMigrationJobMode::EvictDirectly);
    let d = run(
        &direct,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &Settings::default(),
    );
    let failure = super::core::ActionFailure {
        code: Some(429),
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
    };
    let s = super::core::after_failure(&direct, &d, &failure, later(2)).unwrap();
    let cond = condition(&s, &CT::Eviction).unwrap();
    assert_eq!(
        (cond.status.clone(), cond.reason.clone()),
        (CS::False, Some(R::FailedEvict))
    );
    assert!(cond.message.as_deref().unwrap().contains("429"), "{cond:?}");
    assert_eq!(s.phase, Some(Phase::Running));
    // The next pass evicts again (a failed eviction is not waited for).
    let failed = PodMigrationJob {
        status: Some(s),
        ..direct
    };
    let d = run(
        &failed,
        World {
            pod: Some(&pod),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(matches!(d.action, Action::Evict(_)), "{d:?}");
}

#[test]
fn do_scavenge() {
    let mut no_ttl = job(Some(Phase::Succeeded));
    assert!(!super::core::scavenge_due(&no_ttl, later(29 * 60)));
    assert!(super::core::scavenge_due(&no_ttl, later(30 * 60)));
    no_ttl.spec.ttl = Some(GoDuration::from_std(Duration::from_secs(15 * 60)));
    assert!(!super::core::scavenge_due(&no_ttl, later(19 * 60)));
    assert!(super::core::scavenge_due(&no_ttl, later(20 * 60)));
}

// --- object limiters (TestRequeueJobIfObjectLimiterFailed and ...WithNamespace)

fn limiter(duration_ms: u64, max: Option<i32>, burst: i64) -> MigrationObjectLimiter {
    MigrationObjectLimiter {
        duration: GoDuration::from_std(Duration::from_millis(duration_ms)),
        max_migrating: max.map(IntOrString::Int),
        burst,
    }
}

fn subject(namespace: &str, owner: &str) -> LimiterSubject {
    LimiterSubject {
        namespace: namespace.into(),
        controller: Some((owner.into(), format!("{owner}/StatefulSet/apps/v1"))),
        expected_replicas: Some(100),
    }
}

fn limited_after(
    limiters: BTreeMap<String, MigrationObjectLimiter>,
    evicted: &LimiterSubject,
    wait_ms: i64,
    asked: &LimiterSubject,
) -> bool {
    let mut object_limiters = ObjectLimiters::from_map(&limiters, None).unwrap();
    object_limiters.track(evicted, t0());
    object_limiters
        .exceeded(asked, t0() + SignedDuration::from_millis(wait_ms))
        .is_some()
}

#[test]
fn requeue_job_if_object_limiter_failed() {
    let workload = |l| BTreeMap::from([("workload".to_string(), l)]);
    let ten_per_second = limiter(1000, Some(10), 0);
    let me = subject("test-namespace", "test-1");
    let other = subject("test-namespace", "test-2");
    // "less than workload limiter"
    assert!(!limited_after(
        workload(ten_per_second.clone()),
        &me,
        100,
        &me
    ));
    // "exceeded workload limiter"
    assert!(limited_after(
        workload(ten_per_second.clone()),
        &me,
        10,
        &me
    ));
    // "other workload"
    assert!(!limited_after(workload(ten_per_second), &other, 10, &me));
    // "disable workloadObjectLimiters"
    assert!(!limited_after(workload(limiter(0, None, 0)), &me, 10, &me));
    // "default workload limiter": 5m, maxMigrating from the replicas (10 of 100)
    let mut args = MigrationControllerArgs::default();
    crate::config::defaults::set_migration_controller_defaults(&mut args);
    assert!(limited_after(args.object_limiters.clone(), &me, 10, &me));
    // "workload limiter with burst"
    assert!(!limited_after(
        workload(limiter(1000, Some(10), 2)),
        &me,
        10,
        &me
    ));
}

#[test]
fn requeue_job_if_object_limiter_failed_with_namespace() {
    let both = |workload: MigrationObjectLimiter, namespace: MigrationObjectLimiter| {
        BTreeMap::from([
            ("workload".to_string(), workload),
            ("namespace".to_string(), namespace),
        ])
    };
    let me = subject("test-namespace", "test-1");
    // "less than workload but more than namespace"
    assert!(limited_after(
        both(limiter(1000, Some(10), 0), limiter(1000, Some(5), 0)),
        &me,
        100,
        &me
    ));
    // "less than both"
    assert!(!limited_after(
        both(limiter(1000, Some(10), 0), limiter(1000, Some(5), 0)),
        &me,
        200,
        &me
    ));
    // "disable namespaceObjectLimiters"
    assert!(!limited_after(
        both(limiter(1000, Some(10), 0), limiter(0, None, 0)),
        &me,
        100,
        &me
    ));
    // "disable namespaceObjectLimiters and exceed workload"
    assert!(limited_after(
        both(limiter(1000, Some(10), 0), limiter(0, None, 0)),
        &me,
        10,
        &me
    ));
    // "other namespace"
    let elsewhere = subject("test-namespace-other", "test-3");
    assert!(!limited_after(
        both(limiter(1000, Some(10), 0), limiter(1000, Some(5), 0)),
        &elsewhere,
        100,
        &me
    ));
}

#[test]
fn limiter_buckets_are_forgotten_after_one_and_a_half_windows() {
    let limiters = BTreeMap::from([("workload".to_string(), limiter(1000, Some(1), 0))]);
    let mut object_limiters = ObjectLimiters::from_map(&limiters, None).unwrap();
    let me = subject("ns", "w");
    object_limiters.track(&me, t0());
    assert_eq!(object_limiters.tracked_len(), 1);
    object_limiters.exceeded(&me, t0() + SignedDuration::from_millis(1600));
    assert_eq!(object_limiters.tracked_len(), 0);
    assert!(
        ObjectLimiters::from_map(
            &BTreeMap::from([("node".to_string(), limiter(1, None, 0))]),
            None
        )
        .is_err()
    );
}

#[test]
fn token_bucket_follows_go_rate_limiter() {
    let mut bucket = TokenBucket::new(10.0, 1);
    assert!(bucket.allow(t0()));
    assert!(!bucket.allow(t0() + SignedDuration::from_millis(50)));
    assert!(bucket.allow(t0() + SignedDuration::from_millis(150)));
    let mut burst = TokenBucket::new(1.0, 3);
    assert!(burst.allow(t0()) && burst.allow(t0()) && burst.allow(t0()));
    assert!(!burst.allow(t0()));
}

// --- arbitration (arbitrator_test.go TestDoOnceArbitrate)

#[test]
fn do_once_arbitrate_cases() {
    use crate::evictor::ArbitrationRefusal;
    use arbitration::Verdict;
    struct Case {
        name: &'static str,
        jobs: usize,
        non_retryable: &'static [usize],
        retryable: &'static [usize],
        waiting: &'static [usize],
        passed: &'static [usize],
        failed: &'static [usize],
    }
    let cases = [
        Case {
            name: "test-1",
            jobs: 10,
            non_retryable: &[2],
            retryable: &[3, 7],
            waiting: &[3, 7],
            passed: &[0, 1, 4, 5, 6, 8, 9],
            failed: &[2],
        },
        Case {
            name: "test-2",
            jobs: 10,
            non_retryable: &[3],
            retryable: &[3, 7],
            waiting: &[7],
            passed: &[0, 1, 2, 4, 5, 6, 8, 9],
            failed: &[3],
        },
        Case {
            name: "test-3",
            jobs: 5,
            non_retryable: &[0, 1, 2, 3, 4],
            retryable: &[],
            waiting: &[],
            passed: &[],
            failed: &[0, 1, 2, 3, 4],
        },
        Case {
            name: "test-4",
            jobs: 5,
            non_retryable: &[],
            retryable: &[0, 1, 2, 3, 4],
            waiting: &[0, 1, 2, 3, 4],
            passed: &[],
            failed: &[],
        },
        Case {
            name: "test-5",
            jobs: 5,
            non_retryable: &[],
            retryable: &[2],
            waiting: &[2],
            passed: &[0, 1, 3, 4],
            failed: &[],
        },
    ];
    for case in cases {
        // The filters stand in for the evictor as upstream's test stubs them.
        let verdict_of = |i: usize| {
            if case.non_retryable.contains(&i) {
                Err(ArbitrationRefusal::Forbidden("stub".into()))
            } else if case.retryable.contains(&i) {
                Err(ArbitrationRefusal::Limited("stub".into()))
            } else {
                Ok(())
            }
        };
        let (mut waiting, mut passed, mut failed) = (vec![], vec![], vec![]);
        for i in 0..case.jobs {
            match arbitration::verdict_from(verdict_of(i), "default/p") {
                Verdict::Passed => passed.push(i),
                Verdict::Forbidden(_) => failed.push(i),
                Verdict::Limited(_) => waiting.push(i),
            }
        }
        assert_eq!(waiting, case.waiting, "{}", case.name);
        assert_eq!(passed, case.passed, "{}", case.name);
        assert_eq!(failed, case.failed, "{}", case.name);
    }
}

fn pod_view(name: &str, node: &str, created: i128) -> crate::model::PodView {
    let mut view = crate::model::PodView::of(&pod(name, node));
    view.created_at = Some(created);
    view
}

#[test]
fn arbitration_counts_each_passed_job_for_the_next() {
    // maxMigratingPerNode 1: of two jobs on one node only the first passes;
    // the second waits; a job on another node passes.
    let mut view = crate::model::ClusterView {
        pods: vec![
            pod_view("a", "n1", 1),
            pod_view("b", "n1", 2),
            pod_view("c", "n2", 3),
        ],
        ..Default::default()
    };
    for pod in &mut view.pods {
        pod.owners.clear();
    }
    let index = crate::loadaware::ClusterIndex::new(&view);
    let mut args = MigrationControllerArgs::default();
    crate::config::defaults::set_migration_controller_defaults(&mut args);
    args.max_migrating_per_node = Some(1);
    args.evict_all_bare_pods = true;
    let mut evictor =
        crate::evictor::SnapshotEvictor::new(&index, &args, None, &[], &HashMap::new()).unwrap();
    let jobs: Vec<PodMigrationJob> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let mut j = job(None);
            j.metadata.name = Some(format!("job-{name}"));
            j.spec.pod_ref.name = Some((*name).into());
            j
        })
        .collect();
    let waiting: Vec<arbitration::Waiting<'_>> = jobs
        .iter()
        .zip(&view.pods)
        .map(|(job, pod)| arbitration::Waiting {
            job,
            pod: Some(pod),
        })
        .collect();
    let verdicts = arbitration::arbitrate(&waiting, &mut evictor);
    let names: Vec<(String, bool)> = verdicts
        .iter()
        .map(|(job, v)| {
            (
                job.metadata.name.clone().unwrap(),
                *v == arbitration::Verdict::Passed,
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("job-a".into(), true),
            ("job-b".into(), false),
            ("job-c".into(), true)
        ]
    );
}

#[test]
fn arbitration_sort_order() {
    // Newest job first; then the victim order; batch Jobs kept together,
    // the one with more migrating jobs first.
    let mk = |name: &str, created: i64| {
        let mut j = job(None);
        j.metadata.name = Some(name.into());
        j.metadata.creation_timestamp = Some(Time(later(created)));
        j
    };
    let (j1, j2, j3) = (mk("old", 0), mk("new", 10), mk("mid", 5));
    let mut waiting = vec![
        arbitration::Waiting {
            job: &j1,
            pod: None,
        },
        arbitration::Waiting {
            job: &j2,
            pod: None,
        },
        arbitration::Waiting {
            job: &j3,
            pod: None,
        },
    ];
    arbitration::sort(&mut waiting, &HashMap::new());
    let order: Vec<&str> = waiting
        .iter()
        .map(|w| w.job.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(order, ["new", "mid", "old"]);
    // Batch Jobs: pods of "x" and "y"; "y" has 2 migrating jobs.
    let mut pods = vec![
        pod_view("p1", "n", 1),
        pod_view("p2", "n", 2),
        pod_view("p3", "n", 3),
    ];
    let owners = ["x", "y", "x"];
    for (pod, owner) in pods.iter_mut().zip(owners) {
        pod.owners = vec![crate::model::OwnerView {
            kind: "Job".into(),
            name: owner.into(),
            uid: owner.into(),
            controller: true,
        }];
    }
    let jobs: Vec<PodMigrationJob> = (0..3).map(|i| mk(&format!("j{i}"), 0)).collect();
    let mut waiting: Vec<arbitration::Waiting<'_>> = jobs
        .iter()
        .zip(&pods)
        .map(|(job, pod)| arbitration::Waiting {
            job,
            pod: Some(pod),
        })
        .collect();
    arbitration::sort(&mut waiting, &HashMap::from([("y".to_string(), 2)]));
    let order: Vec<&str> = waiting
        .iter()
        .map(|w| w.job.metadata.name.as_deref().unwrap())
        .collect();
    // Younger pods first by the victim order (p3, p2, p1), x's jobs grouped at
    // p3's place, then y (2 migrating) moved to the front.
    assert_eq!(order, ["j1", "j2", "j0"]);
}

// --- the reservation template (reservation/util_test.go)

#[test]
fn reservation_options_from_the_pod() {
    let mut j = job(Some(Phase::Running));
    j.spec.ttl = Some(GoDuration::from_std(Duration::from_secs(300)));
    let victim = pod("test-pod", "node-1");
    let options = super::reservation::reservation_options(&j, &victim, t0()).unwrap();
    let template = options.template.as_ref().unwrap();
    let metadata = template.metadata.as_ref().unwrap();
    assert_eq!(metadata.name.as_deref(), Some("job-uid"));
    let labels = metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels.get(LABEL_CREATED_BY).map(String::as_str),
        Some(CREATOR)
    );
    assert_eq!(
        labels.get(apis::extension::reservation::LABEL_RESERVATION_ORDER),
        Some(&t0().as_millisecond().to_string())
    );
    let spec = template.spec.as_ref().unwrap();
    assert_eq!(spec.allocate_once, Some(true));
    assert_eq!(spec.ttl, j.spec.ttl);
    let pod_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.node_name, None);
    let terms = &pod_spec
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms;
    let fields = terms[0].match_fields.as_ref().unwrap();
    assert_eq!(fields[0].key, "metadata.name");
    assert_eq!(fields[0].operator, "NotIn");
    assert_eq!(
        fields[0].values.as_deref(),
        Some(&["node-1".to_string()][..])
    );
    // Owners: the controller of a placed pod.
    let owner = spec.owners[0].controller.as_ref().unwrap();
    assert_eq!(owner.owner_reference.kind, "StatefulSet");
    assert_eq!(owner.namespace.as_deref(), Some("default"));
    // Server-managed metadata is not copied.
    assert_eq!(spec.template.metadata.as_ref().unwrap().uid, None);
    // Without a job uid nothing is built.
    let mut anonymous = j.clone();
    anonymous.metadata.uid = None;
    assert!(super::reservation::reservation_options(&anonymous, &victim, t0()).is_err());
}

// --- the job a victim gets (TestEvict)

#[test]
fn build_migration_job_for_a_victim() {
    let mut args = MigrationControllerArgs::default();
    crate::config::defaults::set_migration_controller_defaults(&mut args);
    let victim = pod("test-pod", "node-1");
    let id = ReconcilerId::new(ID);
    let built =
        job::build_migration_job(&victim, "node hot", "LowNodeLoad", &args, &id, None, 7).unwrap();
    let annotations = built.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANNOTATION_EVICT_REASON], "node hot");
    assert_eq!(annotations[ANNOTATION_EVICT_TRIGGER], "LowNodeLoad");
    assert_eq!(annotations[ANNOTATION_JOB_CREATED_BY], ID);
    assert_eq!(built.spec.pod_ref.uid.as_deref(), Some("uid-test-pod"));
    assert_eq!(built.spec.mode, Some(PodMigrationJobMode::ReservationFirst));
    assert_eq!(built.spec.ttl, args.default_job_ttl);
    assert_eq!(built.status.as_ref().unwrap().phase, Some(Phase::Pending));
    assert_eq!(
        built.metadata.name.as_deref(),
        Some("00000000-0000-4000-8000-000000000007")
    );
    // A job context overrides mode and TTL and adds labels.
    let context = JobContext {
        labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
        mode: Some(PodMigrationJobMode::EvictDirectly),
        timeout: Some(Duration::from_secs(60)),
        ..JobContext::default()
    };
    let built = job::build_migration_job(&victim, "r", "t", &args, &id, Some(&context), 1).unwrap();
    assert_eq!(built.spec.mode, Some(PodMigrationJobMode::EvictDirectly));
    assert_eq!(
        built.spec.ttl,
        Some(GoDuration::from_std(Duration::from_secs(60)))
    );
    // Validation.
    let bad_key = JobContext {
        labels: BTreeMap::from([("not a key".to_string(), "a".to_string())]),
        ..JobContext::default()
    };
    assert!(job::build_migration_job(&victim, "r", "t", &args, &id, Some(&bad_key), 1).is_err());
    assert!(
        job::build_migration_job(&victim, &"x".repeat(2000), "t", &args, &id, None, 1).is_err()
    );
    let mut no_uid = victim.clone();
    no_uid.metadata.uid = None;
    assert!(job::build_migration_job(&no_uid, "r", "t", &args, &id, None, 1).is_err());
    let mut bad_mode = args.clone();
    bad_mode.default_job_mode = "Teleport".into();
    assert!(job::build_migration_job(&victim, "r", "t", &bad_mode, &id, None, 1).is_err());
}

#[test]
fn trigger_and_reason_fallbacks() {
    assert_eq!(
        trigger_and_reason(None),
        (String::new(), "NotSet".to_string())
    );
    let only_trigger = BTreeMap::from([(
        ANNOTATION_EVICT_TRIGGER.to_string(),
        "LowNodeLoad".to_string(),
    )]);
    assert_eq!(trigger_and_reason(Some(&only_trigger)).1, "LowNodeLoad");
}

#[test]
fn eviction_policy_from_pod_or_job_label() {
    let mut direct = job(Some(Phase::Running));
    direct.spec.mode = Some(PodMigrationJobMode::EvictDirectly);
    let mut labelled = pod("test-pod", "node-1");
    labelled.metadata.labels = Some(BTreeMap::from([(
        LABEL_EVICT_POLICY.to_string(),
        "SoftEviction".to_string(),
    )]));
    let d = run(
        &direct,
        World {
            pod: Some(&labelled),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(
        matches!(&d.action, Action::Evict(e) if e.policy == EvictionPolicy::SoftEviction),
        "{d:?}"
    );
    // The job's label counts when the pod has none; unknown values fall back.
    let mut by_job = direct.clone();
    by_job.metadata.labels = Some(BTreeMap::from([(
        LABEL_EVICT_POLICY.to_string(),
        "Delete".to_string(),
    )]));
    let plain = pod("test-pod", "node-1");
    let d = run(
        &by_job,
        World {
            pod: Some(&plain),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(
        matches!(&d.action, Action::Evict(e) if e.policy == EvictionPolicy::Delete),
        "{d:?}"
    );
    labelled.metadata.labels = Some(BTreeMap::from([(
        LABEL_EVICT_POLICY.to_string(),
        "Nope".to_string(),
    )]));
    let d = run(
        &direct,
        World {
            pod: Some(&labelled),
            ..World::default()
        },
        &Settings::default(),
    );
    assert!(
        matches!(&d.action, Action::Evict(e) if e.policy == EvictionPolicy::Eviction),
        "{d:?}"
    );
}
