//! PodGroup status as upstream's PodGroup controller keeps it: phase,
//! scheduled / running / succeeded / failed counts, `scheduleStartTime` and
//! `occupiedBy`.

use std::time::{Duration, SystemTime};

use apis::scheduling_sigs::v1alpha1::{PodGroup, PodGroupPhase, PodGroupStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cache::PodInfo;

/// What the status is computed from: the group's members in the cache.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Members {
    pub total: usize,
    /// Bound or assumed.
    pub scheduled: usize,
    /// In phase `Running`.
    pub running: usize,
    /// Ended members not deleted yet.
    pub succeeded: usize,
    pub failed: usize,
    /// `occupiedBy` as upstream fills it from the first member's owners.
    pub occupied_by: Option<String>,
}

impl Members {
    /// Counts `pods` (the group's members, in key order).
    pub fn count<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> Self {
        let mut members = Members::default();
        for pod in pods {
            if members.total == 0 {
                members.occupied_by = occupied_by(pod);
            }
            members.total += 1;
            // A member held at Permit is not bound yet (upstream's
            // controller does not see it either).
            if pod.node.is_some() && !pod.held {
                members.scheduled += 1;
            }
            let phase = pod.pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Running") {
                members.running += 1;
            }
        }
        members
    }

    /// Counts a member that ended (it has left the cache); a bound one
    /// still counts as scheduled, as upstream keeps it among the gang's
    /// bound pods until it is deleted.
    pub fn add_ended(&mut self, succeeded: bool, bound: bool) {
        self.total += 1;
        if bound {
            self.scheduled += 1;
        }
        if succeeded {
            self.succeeded += 1;
        } else {
            self.failed += 1;
        }
    }
}

/// `namespace/owner` for each owner of the pod, sorted, comma-joined.
fn occupied_by(pod: &PodInfo) -> Option<String> {
    let mut owners: Vec<String> = pod
        .pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|owner| format!("{}/{}", pod.namespace, owner.name))
        .collect();
    if owners.is_empty() {
        return None;
    }
    owners.sort();
    Some(owners.join(","))
}

fn whole_seconds(time: SystemTime) -> Option<Time> {
    let secs = time.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    let rounded = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    k8s_openapi::jiff::Timestamp::try_from(rounded)
        .ok()
        .map(Time)
}

fn as_count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// One step of upstream's state machine; `None` once nothing changes.
fn step(
    status: &PodGroupStatus,
    min_member: i32,
    members: &Members,
    now: SystemTime,
) -> PodGroupStatus {
    let mut next = status.clone();
    match &status.phase {
        None => next.phase = Some(PodGroupPhase::Pending),
        Some(PodGroupPhase::Pending) => {
            if min_member > 0 && as_count(members.total) >= min_member {
                next.phase = Some(PodGroupPhase::PreScheduling);
                if members.occupied_by.is_some() {
                    next.occupied_by.clone_from(&members.occupied_by);
                }
            }
        }
        // Final phases are left alone, as upstream stops syncing them.
        Some(PodGroupPhase::Finished | PodGroupPhase::Failed) => {}
        Some(_) => {
            if members.total == 0 {
                next.phase = Some(PodGroupPhase::Pending);
                return next;
            }
            let scheduled = as_count(members.scheduled);
            let running = as_count(members.running);
            let succeeded = as_count(members.succeeded);
            let failed = as_count(members.failed);
            next.scheduled = Some(scheduled);
            next.running = Some(running);
            next.succeeded = Some(succeeded);
            next.failed = Some(failed);
            if scheduled < min_member {
                next.phase = Some(PodGroupPhase::Scheduling);
                if next.schedule_start_time.is_none() {
                    next.schedule_start_time = whole_seconds(now);
                }
            } else {
                next.phase = Some(PodGroupPhase::Scheduled);
                if succeeded + running >= min_member {
                    next.phase = Some(PodGroupPhase::Running);
                }
            }
            // Final phases, which later syncs leave alone.
            if failed != 0 && failed + running + succeeded >= min_member {
                next.phase = Some(PodGroupPhase::Failed);
            }
            if succeeded >= min_member {
                next.phase = Some(PodGroupPhase::Finished);
            }
        }
    }
    next
}

/// The status the group should have now (upstream reaches it over several
/// controller syncs; this applies them until nothing changes).
pub fn desired_status(pod_group: &PodGroup, members: &Members, now: SystemTime) -> PodGroupStatus {
    let min_member = pod_group.spec.min_member.unwrap_or(0);
    let mut status = pod_group.status.clone().unwrap_or_default();
    // Four steps reach any phase from none.
    for _ in 0..4 {
        let next = step(&status, min_member, members, now);
        if next == status {
            break;
        }
        status = next;
    }
    status
}
