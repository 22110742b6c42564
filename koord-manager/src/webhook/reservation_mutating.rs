//! Reservation mutation by ClusterColocationProfiles (upstream
//! `reservation/mutating`, gate `ReservationMutatingWebhook`, path
//! `/mutate-reservation`, CREATE only): the same profiles that shape pods
//! shape the Reservation that holds room for them.
//!
//! Differences from the pod mutation, as upstream:
//! - only the profile's `selector` matches (on the Reservation's labels);
//!   `namespaceSelector` is not consulted;
//! - labels, annotations, key mappings, label suffixes, the QoS class and
//!   the Koordinator priority go on the Reservation's own metadata; the
//!   scheduler name and the PriorityClass (name, value, preemption policy)
//!   go on `spec.template.spec`; `patch` is merged into the Reservation;
//! - resources are not renamed to batch/mid names.

use std::collections::BTreeMap;

use apis::config::v1alpha1::ClusterColocationProfile;
use apis::scheduling::v1alpha1::Reservation;

use super::pod_mutating::{
    PriorityClassInfo, ProfileError, apply_profile_patch, apply_profile_to_metadata, profile_name,
    profile_percent, selector_admits,
};

/// Applies every matching profile in name order, returning whether any
/// applied. `roll` returns a number in `0..100` each time a profile with a
/// probability strictly between 0 and 100 % is considered; the profile
/// applies unless the roll is above its percent.
pub fn apply_colocation_profiles_to_reservation(
    reservation: &mut Reservation,
    profiles: &[&ClusterColocationProfile],
    priority_classes: &BTreeMap<String, PriorityClassInfo>,
    roll: &mut dyn FnMut() -> i64,
) -> Result<bool, ProfileError> {
    let mut matched: Vec<&ClusterColocationProfile> = profiles
        .iter()
        .copied()
        .filter(|profile| {
            selector_admits(
                profile.spec.selector.as_ref(),
                reservation.metadata.labels.as_ref(),
            )
        })
        .collect();
    matched.sort_by(|a, b| profile_name(a).cmp(profile_name(b)));
    let mut mutated = false;
    for profile in matched {
        let percent = profile_percent(profile)?;
        if percent == 0 || (percent != 100 && roll() > percent) {
            tracing::debug!(
                profile = profile_name(profile),
                "profile skipped for the reservation by probability"
            );
            continue;
        }
        apply_one_profile(reservation, profile, priority_classes)?;
        mutated = true;
    }
    Ok(mutated)
}

fn apply_one_profile(
    reservation: &mut Reservation,
    profile: &ClusterColocationProfile,
    priority_classes: &BTreeMap<String, PriorityClassInfo>,
) -> Result<(), ProfileError> {
    let spec = &profile.spec;
    // Looked up first so that a missing class leaves the reservation as it was.
    let class = match spec
        .priority_class_name
        .as_deref()
        .filter(|name| !name.is_empty())
    {
        Some(name) => Some((
            name,
            priority_classes
                .get(name)
                .ok_or_else(|| ProfileError::PriorityClassNotFound {
                    profile: profile_name(profile).to_owned(),
                    name: name.to_owned(),
                })?,
        )),
        None => None,
    };
    apply_profile_to_metadata(&mut reservation.metadata, profile);
    let template = reservation
        .spec
        .template
        .spec
        .get_or_insert_with(Default::default);
    if let Some(scheduler) = spec.scheduler_name.as_deref().filter(|s| !s.is_empty()) {
        template.scheduler_name = Some(scheduler.to_owned());
    }
    if let Some((name, class)) = class {
        template.priority_class_name = Some(name.to_owned());
        template.priority = Some(class.value);
        template.preemption_policy = class.preemption_policy.clone();
    }
    apply_profile_patch(reservation, profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::extension::{LABEL_POD_PRIORITY, LABEL_POD_QOS};
    use serde_json::{Value, json};

    /// Upstream's test reservation: one container, an overhead and a scheduler name.
    fn reservation(labels: Value, annotations: Value) -> Reservation {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "test-reservation-1", "labels": labels, "annotations": annotations},
            "spec": {
                "template": {"spec": {
                    "containers": [{"name": "test-container-a", "resources": {
                        "limits": {"cpu": "1", "memory": "4Gi"},
                        "requests": {"cpu": "1", "memory": "4Gi"}}}],
                    "overhead": {"cpu": "1", "memory": "2Gi"},
                    "schedulerName": "nonExistSchedulerName"
                }},
                "owners": [{"object": {"name": "p"}}]
            }
        }))
        .unwrap()
    }

    fn profile(spec: Value) -> ClusterColocationProfile {
        serde_json::from_value(json!({
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "test-profile"},
            "spec": spec
        }))
        .unwrap()
    }

    const PROD_VALUE: i32 = 9000;

    fn classes() -> BTreeMap<String, PriorityClassInfo> {
        [(
            "koordinator-prod".to_owned(),
            PriorityClassInfo {
                value: PROD_VALUE,
                preemption_policy: Some("fakePreemptionPolicy".into()),
            },
        )]
        .into()
    }

    /// Upstream's "mutating reservation" profile, with `selector` and probability as given.
    fn full_profile(selector: Value, probability: Option<i32>) -> ClusterColocationProfile {
        let mut spec = json!({
            "selector": selector,
            "labels": {"testLabelA": "valueA"},
            "annotations": {"testAnnotationA": "valueA"},
            "schedulerName": "koordinator-scheduler",
            "koordinatorPriority": 1111,
            "priorityClassName": "koordinator-prod",
            "qosClass": "LS",
            "patch": {"metadata": {"labels": {"test-patch-label": "patch-a"},
                                   "annotations": {"test-patch-annotation": "patch-b"}}}
        });
        if let Some(percent) = probability {
            spec["probability"] = json!(percent);
        }
        profile(spec)
    }

    fn mutated_expectation(mut base: Reservation, extra_labels: &[(&str, &str)]) -> Reservation {
        let labels = base.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (key, value) in [
            ("testLabelA", "valueA"),
            ("test-patch-label", "patch-a"),
            (LABEL_POD_QOS, "LS"),
            (LABEL_POD_PRIORITY, "1111"),
        ]
        .iter()
        .chain(extra_labels)
        {
            labels.insert((*key).to_owned(), (*value).to_owned());
        }
        base.metadata.annotations = Some(
            [
                ("testAnnotationA".to_owned(), "valueA".to_owned()),
                ("test-patch-annotation".to_owned(), "patch-b".to_owned()),
            ]
            .into(),
        );
        let template = base.spec.template.spec.as_mut().unwrap();
        template.scheduler_name = Some("koordinator-scheduler".into());
        template.priority_class_name = Some("koordinator-prod".into());
        template.priority = Some(PROD_VALUE);
        template.preemption_policy = Some("fakePreemptionPolicy".into());
        base
    }

    fn run(
        reservation: &mut Reservation,
        profile: &ClusterColocationProfile,
        roll: i64,
    ) -> Result<bool, ProfileError> {
        apply_colocation_profiles_to_reservation(reservation, &[profile], &classes(), &mut || roll)
    }

    // Upstream TestClusterColocationProfileMutatingReservation.
    #[test]
    fn upstream_table() {
        let selected = json!({"koordinator-colocation-reservation": "true"});
        let matching = json!({"matchLabels": {"koordinator-colocation-reservation": "true"}});
        // (name, reservation labels, profile selector, probability, roll, applies)
        type Case = (&'static str, Value, Value, Option<i32>, i64, bool);
        let cases: Vec<Case> = vec![
            (
                "mutating reservation",
                selected.clone(),
                matching.clone(),
                None,
                99,
                true,
            ),
            (
                "mutating reservation 1 (empty selector)",
                Value::Null,
                json!({}),
                None,
                99,
                true,
            ),
            (
                "percent 100",
                selected.clone(),
                matching.clone(),
                Some(100),
                99,
                true,
            ),
            (
                "percent 0",
                selected.clone(),
                matching.clone(),
                Some(0),
                0,
                false,
            ),
            (
                "percent 50, rand=30",
                selected.clone(),
                matching.clone(),
                Some(50),
                30,
                true,
            ),
            (
                "percent 50, rand=70",
                selected.clone(),
                matching.clone(),
                Some(50),
                70,
                false,
            ),
            (
                "selector does not match",
                json!({"other": "x"}),
                matching.clone(),
                None,
                0,
                false,
            ),
        ];
        for (name, labels, selector, probability, roll, applies) in cases {
            let original = reservation(labels.clone(), Value::Null);
            let mut got = original.clone();
            let profile = full_profile(selector, probability);
            assert_eq!(run(&mut got, &profile, roll).unwrap(), applies, "{name}");
            let expected = if applies {
                mutated_expectation(original, &[])
            } else {
                original
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    // Upstream "mutate advanced attributes": key mappings copy values; the
    // scheduler-name label is just a label on a Reservation.
    #[test]
    fn key_mappings_and_suffixes_apply_to_the_reservation_metadata() {
        let mut got = reservation(
            json!({"koordinator-colocation-reservation": "true", "label-key-to-load": "test-label-value", "tier": "gold"}),
            json!({"testAnnotationA": "valueA", "annotation-key-to-load": "test-annotation-value"}),
        );
        let profile = profile(json!({
            "selector": {"matchLabels": {"koordinator-colocation-reservation": "true"}},
            "labels": {"testLabelA": "valueA"},
            "labelKeysMapping": {"label-key-to-load": "label-key-to-store"},
            "annotationKeysMapping": {"annotation-key-to-load": "annotation-key-to-store"},
            "labelSuffixes": {"tier": "-colocated", "absent": "-x"}
        }));
        assert!(run(&mut got, &profile, 0).unwrap());
        let labels = got.metadata.labels.unwrap();
        assert_eq!(labels["label-key-to-store"], "test-label-value");
        assert_eq!(labels["label-key-to-load"], "test-label-value");
        assert_eq!(labels["tier"], "gold-colocated");
        assert!(!labels.contains_key("absent"));
        let annotations = got.metadata.annotations.unwrap();
        assert_eq!(
            annotations["annotation-key-to-store"],
            "test-annotation-value"
        );
        // Nothing about the template changed: no scheduler name or class in the profile.
        assert_eq!(
            got.spec.template.spec.unwrap().scheduler_name.as_deref(),
            Some("nonExistSchedulerName")
        );
    }

    // Upstream "mutating failed": an unknown PriorityClass is an error and
    // the reservation stays as it was.
    #[test]
    fn an_unknown_priority_class_fails_and_changes_nothing() {
        let original = reservation(
            json!({"koordinator-colocation-reservation": "true"}),
            Value::Null,
        );
        let mut got = original.clone();
        let profile = profile(json!({
            "selector": {"matchLabels": {"koordinator-colocation-reservation": "true"}},
            "labels": {"testLabelA": "valueA"},
            "priorityClassName": "unknown-priority-class"
        }));
        let err = run(&mut got, &profile, 0).unwrap_err();
        assert!(
            matches!(&err, ProfileError::PriorityClassNotFound { name, .. } if name == "unknown-priority-class"),
            "{err}"
        );
        assert_eq!(got, original);
    }

    #[test]
    fn profiles_apply_in_name_order_and_a_bad_probability_is_an_error() {
        let mut first = profile(json!({"labels": {"order": "a"}}));
        first.metadata.name = Some("a".into());
        let mut second = profile(json!({"labels": {"order": "b"}}));
        second.metadata.name = Some("b".into());
        let mut got = reservation(Value::Null, Value::Null);
        apply_colocation_profiles_to_reservation(
            &mut got,
            &[&second, &first],
            &classes(),
            &mut || 0,
        )
        .unwrap();
        assert_eq!(got.metadata.labels.unwrap()["order"], "b");

        let bad = profile(json!({"probability": "half"}));
        let mut got = reservation(Value::Null, Value::Null);
        assert!(matches!(
            run(&mut got, &bad, 0),
            Err(ProfileError::Probability { .. })
        ));
    }
}
