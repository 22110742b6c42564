//! PodMigrationJob conditions, kept as upstream's `util.UpdateCondition`
//! keeps them: one condition per type; the transition time moves only when
//! the status changes; a write is needed only when something changed.

use apis::scheduling::v1alpha1::{
    PodMigrationJobCondition, PodMigrationJobConditionStatus, PodMigrationJobConditionType,
    PodMigrationJobReason, PodMigrationJobStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The condition of `type_`, if the status has one.
pub fn condition<'a>(
    status: &'a PodMigrationJobStatus,
    type_: &PodMigrationJobConditionType,
) -> Option<&'a PodMigrationJobCondition> {
    status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|condition| &condition.type_ == type_)
}

/// Whether the condition of `type_` is `True`.
pub fn is_true(status: &PodMigrationJobStatus, type_: &PodMigrationJobConditionType) -> bool {
    condition(status, type_)
        .is_some_and(|condition| condition.status == PodMigrationJobConditionStatus::True)
}

/// A condition to record.
pub fn new_condition(
    type_: PodMigrationJobConditionType,
    status: PodMigrationJobConditionStatus,
    reason: Option<PodMigrationJobReason>,
    message: Option<String>,
) -> PodMigrationJobCondition {
    PodMigrationJobCondition {
        type_,
        status,
        last_probe_time: None,
        last_transition_time: None,
        reason,
        message: message.filter(|message| !message.is_empty()),
    }
}

/// Adds or replaces the condition of its type; true when anything changed.
pub fn update_condition(
    status: &mut PodMigrationJobStatus,
    mut condition: PodMigrationJobCondition,
    now: Timestamp,
) -> bool {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            condition.last_transition_time = Some(Time(now));
            conditions.push(condition);
            true
        }
        Some(old) => {
            condition.last_transition_time = if condition.status == old.status {
                old.last_transition_time.clone()
            } else {
                Some(Time(now))
            };
            condition.last_probe_time = old.last_probe_time.clone();
            let changed = *old != condition;
            *old = condition;
            changed
        }
    }
}

/// Upstream's reconciler `updateCondition`: records the condition and, when
/// it changed, mirrors its type, reason and message into the job's
/// `status`, `reason` and `message`. True when a write is needed.
pub fn record(
    status: &mut PodMigrationJobStatus,
    condition: PodMigrationJobCondition,
    now: Timestamp,
) -> bool {
    let type_ = condition.type_.clone();
    let reason = condition.reason.clone();
    let message = condition.message.clone();
    if !update_condition(status, condition, now) {
        return false;
    }
    status.status = Some(type_.as_str().to_string());
    status.reason = reason;
    status.message = message;
    true
}
