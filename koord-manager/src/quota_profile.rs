//! ElasticQuotaProfile decisions (upstream `quota-controller/profile`): each
//! profile owns one root ElasticQuota (same namespace, `spec.quotaName`)
//! whose `min` is the allocatable of the nodes its selector picks, times
//! `resourceRatio`.

use std::collections::BTreeMap;

use apis::configuration::label_selector_matches;
use apis::extension::{
    ANNOTATION_RESOURCE_KEYS, ANNOTATION_TOTAL_RESOURCE, ANNOTATION_UNSCHEDULABLE_RESOURCE,
    LABEL_QUOTA_IS_ROOT, LABEL_QUOTA_PROFILE, LABEL_QUOTA_TREE_ID, QuantityValue,
};
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::scheduling_sigs::v1alpha1::{ElasticQuota, ElasticQuotaSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// `max` of every generated quota: upstream's `MaxInt64 / 2000`.
pub const QUOTA_MAX_VALUE: i64 = i64::MAX / 2000;

/// A profile that cannot be turned into a quota.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {profile}: invalid nodeSelector: {source}")]
    Selector {
        profile: String,
        #[source]
        source: apis::configuration::SelectorError,
    },
    #[error(
        "profile {profile}: node {node}: allocatable {resource} {value:?}: {problem}; the quota is left as it is"
    )]
    Amount {
        profile: String,
        node: String,
        resource: String,
        value: String,
        problem: String,
    },
    #[error(
        "profile {profile}: the {resource} allocatable of its nodes adds up beyond 64 bits; the quota is left as it is"
    )]
    Total { profile: String, resource: String },
    #[error("profile {profile}: cannot encode {what}: {source}")]
    Encode {
        profile: String,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// What to write for one profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileActions {
    /// Set this tree id label on the profile (it had none).
    pub label_profile_tree_id: Option<String>,
    /// Create this quota.
    pub create: Option<ElasticQuota>,
    /// Replace the existing quota with this one.
    pub update: Option<ElasticQuota>,
}

/// 64-bit FNV-1a, the hash upstream derives tree ids from.
pub fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Adds a node's allocatable to `total`. An amount that does not parse, is
/// negative or makes the sum overflow is refused (counting it as zero would
/// shrink the quota); the error names the resource, value and problem.
fn add_list(
    total: &mut BTreeMap<String, QuantityValue>,
    list: &BTreeMap<String, Quantity>,
) -> Result<(), (String, String, String)> {
    for (name, quantity) in list {
        let refuse = |problem: String| (name.clone(), quantity.0.clone(), problem);
        let value = QuantityValue::of(quantity)
            .map_err(|err| refuse(format!("invalid quantity: {}", err.reason)))?;
        if value.is_negative() {
            return Err(refuse("negative amount".to_owned()));
        }
        let entry = total.entry(name.clone()).or_default();
        *entry = entry
            .checked_add(value)
            .ok_or_else(|| refuse("the sum over the nodes overflows".to_owned()))?;
    }
    Ok(())
}

fn is_binary(resource: &str) -> bool {
    resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
}

/// Applies `resourceRatio` the way upstream does: CPU in milli-units, the
/// rest in whole units, truncated; a ratio outside (0, 1] counts as 1. A
/// total beyond 64 bits is an error carrying the resource name.
fn scaled(
    total: &BTreeMap<String, QuantityValue>,
    ratio: f64,
) -> Result<BTreeMap<String, Quantity>, String> {
    total
        .iter()
        .map(|(name, value)| {
            let text = if name == "cpu" {
                let milli = value.checked_milli_value().ok_or_else(|| name.clone())?;
                QuantityValue::from_milli((milli as f64 * ratio) as i64).to_decimal_si()
            } else {
                let units = value.checked_value().ok_or_else(|| name.clone())?;
                let units = QuantityValue::from_units((units as f64 * ratio) as i64);
                if is_binary(name) {
                    units.to_binary_si()
                } else {
                    units.to_decimal_si()
                }
            };
            Ok((name.clone(), Quantity(text)))
        })
        .collect()
}

/// Decides the quota of `profile` from all `nodes` and the quota that exists.
pub fn reconcile_profile(
    profile: &ElasticQuotaProfile,
    nodes: &[&Node],
    existing: Option<&ElasticQuota>,
) -> Result<ProfileActions, ProfileError> {
    let profile_name = profile.metadata.name.clone().unwrap_or_default();
    let namespace = profile.metadata.namespace.clone().unwrap_or_default();
    let mut actions = ProfileActions::default();
    let profile_labels = profile.metadata.labels.clone().unwrap_or_default();
    let tree_id = match profile_labels
        .get(LABEL_QUOTA_TREE_ID)
        .filter(|id| !id.is_empty())
    {
        Some(id) => id.clone(),
        None => {
            let id = fnv1a64(&format!("{namespace}/{profile_name}")).to_string();
            actions.label_profile_tree_id = Some(id.clone());
            id
        }
    };

    let mut total = BTreeMap::new();
    let mut unschedulable = BTreeMap::new();
    for node in nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let matches =
            label_selector_matches(&profile.spec.node_selector, &labels).map_err(|source| {
                ProfileError::Selector {
                    profile: profile_name.clone(),
                    source,
                }
            })?;
        if !matches {
            continue;
        }
        let Some(allocatable) = node.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
            continue;
        };
        let refused = |(resource, value, problem)| ProfileError::Amount {
            profile: profile_name.clone(),
            node: node.metadata.name.clone().unwrap_or_default(),
            resource,
            value,
            problem,
        };
        add_list(&mut total, allocatable).map_err(refused)?;
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if cordoned || !node_ready(node) {
            add_list(&mut unschedulable, allocatable).map_err(refused)?;
        }
    }
    let ratio = profile
        .spec
        .resource_ratio
        .as_deref()
        .and_then(|text| text.parse::<f64>().ok())
        .filter(|ratio| *ratio > 0.0 && *ratio <= 1.0)
        .unwrap_or(1.0);
    let too_large = |resource| ProfileError::Total {
        profile: profile_name.clone(),
        resource,
    };
    let total = scaled(&total, ratio).map_err(too_large)?;
    let unschedulable = scaled(&unschedulable, ratio).map_err(too_large)?;

    let annotations = profile.metadata.annotations.clone().unwrap_or_default();
    let resource_keys: Vec<String> = annotations
        .get(ANNOTATION_RESOURCE_KEYS)
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or_else(|| vec!["cpu".to_owned(), "memory".to_owned()]);
    let min: BTreeMap<String, Quantity> = resource_keys
        .iter()
        .map(|key| {
            let value = total
                .get(key)
                .cloned()
                .unwrap_or_else(|| Quantity("0".into()));
            (key.clone(), value)
        })
        .collect();
    let max: BTreeMap<String, Quantity> = resource_keys
        .iter()
        .map(|key| (key.clone(), Quantity(QUOTA_MAX_VALUE.to_string())))
        .collect();

    let quota_name = profile.spec.quota_name.clone();
    let mut quota = existing
        .cloned()
        .unwrap_or_else(|| ElasticQuota::new(&quota_name, ElasticQuotaSpec::default()));
    quota.metadata.namespace = Some(namespace);
    quota.spec.min = Some(min);
    quota.spec.max = Some(max);
    let labels = quota.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LABEL_QUOTA_PROFILE.to_owned(), profile_name.clone());
    if let Some(extra) = &profile.spec.quota_labels {
        labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    labels.insert(LABEL_QUOTA_TREE_ID.to_owned(), tree_id);
    labels.insert(LABEL_QUOTA_IS_ROOT.to_owned(), "true".to_owned());
    let encode = |what, list: &BTreeMap<String, Quantity>| {
        serde_json::to_string(list).map_err(|source| ProfileError::Encode {
            profile: profile_name.clone(),
            what,
            source,
        })
    };
    let total_json = encode("total resources", &total)?;
    let unschedulable_json = encode("unschedulable resources", &unschedulable)?;
    let quota_annotations = quota.metadata.annotations.get_or_insert_with(BTreeMap::new);
    quota_annotations.insert(ANNOTATION_TOTAL_RESOURCE.to_owned(), total_json);
    quota_annotations.insert(
        ANNOTATION_UNSCHEDULABLE_RESOURCE.to_owned(),
        unschedulable_json,
    );

    match existing {
        None => actions.create = Some(quota),
        Some(old)
            if old.metadata.labels != quota.metadata.labels
                || old.metadata.annotations != quota.metadata.annotations
                || old.spec != quota.spec =>
        {
            actions.update = Some(quota)
        }
        Some(_) => {}
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::quota::v1alpha1::ElasticQuotaProfileSpec;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn node(name: &str, pool: &str, cpu: &str, memory: &str, ready: bool) -> Node {
        Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("pool".to_owned(), pool.to_owned())])),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity(memory.into())),
                ])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn profile(ratio: Option<&str>) -> ElasticQuotaProfile {
        let mut profile = ElasticQuotaProfile::new(
            "pool-a",
            ElasticQuotaProfileSpec {
                quota_name: "pool-a-root".into(),
                quota_labels: Some(BTreeMap::from([("team".to_owned(), "infra".to_owned())])),
                resource_ratio: ratio.map(str::to_owned),
                node_selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("pool".to_owned(), "a".to_owned())])),
                    ..Default::default()
                },
            },
        );
        profile.metadata.namespace = Some("team-ns".into());
        profile
    }

    #[test]
    fn quota_min_is_the_matching_nodes_allocatable_times_the_ratio() {
        let nodes = [
            node("n1", "a", "8", "16Gi", true),
            node("n2", "a", "4", "8Gi", false),
            node("n3", "b", "64", "256Gi", true),
        ];
        let refs: Vec<&Node> = nodes.iter().collect();
        let actions = reconcile_profile(&profile(Some("0.5")), &refs, None).unwrap();
        let quota = actions.create.expect("a new quota");
        assert_eq!(quota.metadata.name.as_deref(), Some("pool-a-root"));
        assert_eq!(quota.metadata.namespace.as_deref(), Some("team-ns"));
        let min = quota.spec.min.as_ref().unwrap();
        assert_eq!(min["cpu"].0, "6"); // (8 + 4) × 0.5
        assert_eq!(min["memory"].0, "12Gi");
        assert_eq!(
            quota.spec.max.as_ref().unwrap()["cpu"].0,
            "4611686018427387"
        );
        let labels = quota.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_QUOTA_PROFILE], "pool-a");
        assert_eq!(labels[LABEL_QUOTA_IS_ROOT], "true");
        assert_eq!(labels["team"], "infra");
        let tree_id = actions
            .label_profile_tree_id
            .expect("profile gets a tree id");
        assert_eq!(labels[LABEL_QUOTA_TREE_ID], tree_id);
        let annotations = quota.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[ANNOTATION_UNSCHEDULABLE_RESOURCE],
            r#"{"cpu":"2","memory":"4Gi"}"#
        );
    }

    #[test]
    fn an_up_to_date_quota_is_left_alone_and_bad_ratios_count_as_one() {
        let nodes = [node("n1", "a", "8", "16Gi", true)];
        let refs: Vec<&Node> = nodes.iter().collect();
        let created = reconcile_profile(&profile(Some("7")), &refs, None)
            .unwrap()
            .create
            .unwrap();
        assert_eq!(created.spec.min.as_ref().unwrap()["cpu"].0, "8");
        let again = reconcile_profile(&profile(Some("7")), &refs, Some(&created)).unwrap();
        assert_eq!((again.create, again.update), (None, None));
    }

    #[test]
    fn unreadable_or_negative_allocatable_refuses_the_profile() {
        for (cpu, reason) in [("lots", "invalid quantity"), ("-8", "negative")] {
            let nodes = [
                node("n1", "a", "8", "16Gi", true),
                node("n2", "a", cpu, "8Gi", true),
            ];
            let refs: Vec<&Node> = nodes.iter().collect();
            // Counting n2 as zero would shrink the quota's min.
            let err = reconcile_profile(&profile(None), &refs, None)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("pool-a")
                    && err.contains("n2")
                    && err.contains("cpu")
                    && err.contains(reason),
                "{err}"
            );
        }
    }

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
