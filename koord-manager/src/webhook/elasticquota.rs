//! ElasticQuota admission (upstream `elasticquota`): defaults filled on
//! create (parent, tree ID, shared weight) and the quota tree kept sound —
//! min ≤ max, parents exist and are parents, no cycles, same resource keys as
//! the parent, children's min summing within the parent's min.

use std::collections::{BTreeMap, BTreeSet};

use apis::extension::{
    ANNOTATION_SHARED_WEIGHT, DEFAULT_QUOTA_NAME, LABEL_QUOTA_IS_PARENT, LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID, QuantityValue, ROOT_QUOTA_NAME, SYSTEM_QUOTA_NAME,
    get_max_strict_check_resource_keys, get_quota_namespaces, get_shared_weight,
    is_allow_force_update, is_forbidden_modify, is_parent_quota, is_tree_root_quota,
    parent_quota_name, quota_tree_id,
};
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::review::{Operation, Refusal};

type Amounts = BTreeMap<String, QuantityValue>;

/// Why a quota (or a pod's quota) is refused. Messages are upstream's, as
/// users and tests match them; its [`Refusal::metric_label`] groups them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// A quantity, label or annotation of the quota cannot be read.
    #[error("{0}")]
    Malformed(String),
    /// The request or the tree lacks what the operation needs (the object,
    /// the quota being updated or deleted, the parent).
    #[error("{0}")]
    Missing(String),
    #[error("AddQuota quota already exist:{0}")]
    AlreadyExists(String),
    /// A built-in quota changed or deleted, or a field that is fixed once
    /// set changed (isParent, tree ID, a pod's preemptible label).
    #[error("{0}")]
    Forbidden(String),
    /// The quota's own amounts disagree: negative, min above max, max below used.
    #[error("{0}")]
    InvalidAmounts(String),
    /// The quota does not fit the tree: namespace taken, parent not a parent,
    /// a cycle, resource keys or min sums that disagree with its relatives,
    /// a pod charged to a parent quota.
    #[error("{0}")]
    InvalidTree(String),
    /// A delete of a quota that still has children or pods.
    #[error("delete quota failed, quota {name} has {count} child {what}")]
    InUse {
        name: String,
        count: usize,
        what: &'static str,
    },
}

impl Refusal for QuotaError {
    fn metric_label(&self) -> &'static str {
        match self {
            QuotaError::Malformed(_) => "malformed",
            QuotaError::Missing(_) => "missing",
            QuotaError::AlreadyExists(_) => "already_exists",
            QuotaError::Forbidden(_) => "forbidden",
            QuotaError::InvalidAmounts(_) => "invalid_amounts",
            QuotaError::InvalidTree(_) => "invalid_tree",
            QuotaError::InUse { .. } => "in_use",
        }
    }
}

/// What the tree checks need from one quota.
#[derive(Clone, Debug)]
struct QuotaInfo {
    name: String,
    parent: String,
    is_parent: bool,
    tree_id: String,
    is_tree_root: bool,
    allow_force_update: bool,
    min: Amounts,
    max: Amounts,
}

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> Result<Amounts, QuotaError> {
    list.into_iter()
        .flatten()
        .map(|(name, q)| {
            QuantityValue::of(q)
                .map(|v| (name.clone(), v))
                .map_err(|e| QuotaError::Malformed(format!("resource {name}: {e}")))
        })
        .collect()
}

fn name_of(quota: &ElasticQuota) -> &str {
    quota.metadata.name.as_deref().unwrap_or("")
}

fn labels_of(quota: &ElasticQuota) -> BTreeMap<String, String> {
    quota.metadata.labels.clone().unwrap_or_default()
}

fn annotations_of(quota: &ElasticQuota) -> BTreeMap<String, String> {
    quota.metadata.annotations.clone().unwrap_or_default()
}

impl QuotaInfo {
    fn of(quota: &ElasticQuota) -> Result<Self, QuotaError> {
        let labels = labels_of(quota);
        let name = name_of(quota).to_owned();
        Ok(QuotaInfo {
            parent: parent_quota_name(&name, &labels).to_owned(),
            is_parent: is_parent_quota(&labels),
            tree_id: quota_tree_id(&labels).to_owned(),
            is_tree_root: is_tree_root_quota(&labels),
            allow_force_update: is_allow_force_update(&labels),
            min: amounts(quota.spec.min.as_ref())
                .map_err(|e| QuotaError::Malformed(format!("{name} spec.min: {e}")))?,
            max: amounts(quota.spec.max.as_ref())
                .map_err(|e| QuotaError::Malformed(format!("{name} spec.max: {e}")))?,
            name,
        })
    }
}

/// The existing quota tree, by name.
struct Topology {
    quotas: BTreeMap<String, QuotaInfo>,
    children: BTreeMap<String, BTreeSet<String>>,
    namespace_owner: BTreeMap<String, String>,
}

impl Topology {
    /// Quotas that fail to parse are left out: they cannot be reasoned about
    /// and must not block unrelated admissions.
    fn new(existing: &[&ElasticQuota]) -> Self {
        let mut topology = Topology {
            quotas: BTreeMap::new(),
            children: BTreeMap::new(),
            namespace_owner: BTreeMap::new(),
        };
        for quota in existing {
            let Ok(info) = QuotaInfo::of(quota) else {
                continue;
            };
            for namespace in get_quota_namespaces(&annotations_of(quota))
                .ok()
                .flatten()
                .unwrap_or_default()
            {
                topology
                    .namespace_owner
                    .insert(namespace, info.name.clone());
            }
            topology
                .children
                .entry(info.parent.clone())
                .or_default()
                .insert(info.name.clone());
            topology.quotas.insert(info.name.clone(), info);
        }
        topology
    }

    fn children_of(&self, name: &str) -> impl Iterator<Item = &QuotaInfo> {
        self.children
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|child| self.quotas.get(child))
    }
}

fn sum_min<'a>(infos: impl Iterator<Item = &'a QuotaInfo>) -> Amounts {
    let mut total = Amounts::new();
    for info in infos {
        for (name, value) in &info.min {
            let entry = total.entry(name.clone()).or_insert(QuantityValue::ZERO);
            *entry = entry.checked_add(*value).unwrap_or(*entry);
        }
    }
    total
}

/// Every amount in `a` is at most the same resource in `b` (missing = 0).
fn within(a: &Amounts, b: &Amounts) -> bool {
    a.iter()
        .all(|(name, value)| value.nanos() <= b.get(name).map_or(0, |v| v.nanos()))
}

fn same_keys(a: &Amounts, b: &Amounts) -> bool {
    a.keys().eq(b.keys())
}

fn keys_included(parent: &Amounts, child: &Amounts) -> bool {
    child.keys().all(|k| parent.contains_key(k))
}

fn negative(list: &Amounts) -> Vec<&str> {
    list.iter()
        .filter(|(_, v)| v.nanos() < 0)
        .map(|(k, _)| k.as_str())
        .collect()
}

/// Fills the defaults of a quota being created: parent (the root quota),
/// tree ID (the parent's) and shared weight (max, keys kept in step with max).
pub fn fill_quota_defaults(
    quota: &mut ElasticQuota,
    existing: &[&ElasticQuota],
) -> Result<(), QuotaError> {
    let name = name_of(quota).to_owned();
    if name == ROOT_QUOTA_NAME {
        return Ok(());
    }
    let labels = quota.metadata.labels.get_or_insert_with(BTreeMap::new);
    if labels.get(LABEL_QUOTA_PARENT).is_none_or(String::is_empty) {
        labels.insert(LABEL_QUOTA_PARENT.to_owned(), ROOT_QUOTA_NAME.to_owned());
    }
    let parent = labels.get(LABEL_QUOTA_PARENT).cloned().unwrap_or_default();
    if labels.get(LABEL_QUOTA_TREE_ID).is_none_or(String::is_empty) && parent != ROOT_QUOTA_NAME {
        let parent_quota = existing
            .iter()
            .find(|q| name_of(q) == parent)
            .ok_or_else(|| {
                QuotaError::Missing(format!("fill quota {name} failed, parent not exist"))
            })?;
        let tree_id = quota_tree_id(&labels_of(parent_quota)).to_owned();
        if !tree_id.is_empty() {
            labels.insert(LABEL_QUOTA_TREE_ID.to_owned(), tree_id);
        }
    }
    let max = quota.spec.max.clone();
    let annotations = quota.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let current = annotations
        .get(ANNOTATION_SHARED_WEIGHT)
        .cloned()
        .unwrap_or_default();
    let encode = |value: &Option<BTreeMap<String, Quantity>>| {
        serde_json::to_string(value)
            .map_err(|e| QuotaError::Malformed(format!("cannot encode shared weight: {e}")))
    };
    if current.is_empty() {
        annotations.insert(ANNOTATION_SHARED_WEIGHT.to_owned(), encode(&max)?);
    } else {
        let mut weight: BTreeMap<String, Quantity> =
            serde_json::from_str(&current).map_err(|e| {
                QuotaError::Malformed(format!(
                    "fillDefaultQuotaInfo unmarshal sharedWeight failed:{e}"
                ))
            })?;
        let max = max.unwrap_or_default();
        let before = weight.clone();
        weight.retain(|key, _| max.contains_key(key));
        for (key, value) in &max {
            weight.entry(key.clone()).or_insert_with(|| value.clone());
        }
        if weight != before {
            annotations.insert(ANNOTATION_SHARED_WEIGHT.to_owned(), encode(&Some(weight))?);
        }
    }
    Ok(())
}

/// Upstream feature gates that change the quota checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaOptions {
    /// `ElasticQuotaEnableUpdateResourceKey`: a child's max keys need only be
    /// a subset of its parent's instead of the same set.
    pub enable_update_resource_key: bool,
}

/// Validates a create, update or delete against the existing quotas.
/// `bound_pods` is how many pods are charged to the quota, when known.
pub fn validate_quota(
    operation: Operation,
    new: Option<&ElasticQuota>,
    old: Option<&ElasticQuota>,
    existing: &[&ElasticQuota],
    bound_pods: Option<usize>,
) -> Result<(), QuotaError> {
    validate_quota_with(
        operation,
        new,
        old,
        existing,
        bound_pods,
        QuotaOptions::default(),
    )
}

/// [`validate_quota`] with the gates set.
pub fn validate_quota_with(
    operation: Operation,
    new: Option<&ElasticQuota>,
    old: Option<&ElasticQuota>,
    existing: &[&ElasticQuota],
    bound_pods: Option<usize>,
    options: QuotaOptions,
) -> Result<(), QuotaError> {
    let topology = Topology::new(existing);
    match operation {
        Operation::Create => {
            let quota = new.ok_or_else(|| QuotaError::Missing("AddQuota param is nil".into()))?;
            let name = name_of(quota);
            if topology.quotas.contains_key(name) {
                return Err(QuotaError::AlreadyExists(name.to_owned()));
            }
            check_namespaces(quota, &topology)?;
            check_self(quota)?;
            check_topology(&topology, None, &QuotaInfo::of(quota)?, bound_pods, options)
        }
        Operation::Update => {
            let quota =
                new.ok_or_else(|| QuotaError::Missing("UpdateQuota param is nil".into()))?;
            if let Some(old) = old
                && tree_fields(old) == tree_fields(quota)
            {
                return Ok(());
            }
            let name = name_of(quota);
            if is_forbidden_modify(name) {
                return Err(QuotaError::Forbidden(format!(
                    "{name} is forbidden to modify"
                )));
            }
            check_namespaces(quota, &topology)?;
            let old_info = topology.quotas.get(name).ok_or_else(|| {
                QuotaError::Missing(format!(
                    "UpdateQuota quota not exist in quotaInfoMap:{name}"
                ))
            })?;
            check_self(quota)?;
            check_topology(
                &topology,
                Some(old_info),
                &QuotaInfo::of(quota)?,
                bound_pods,
                options,
            )
        }
        Operation::Delete => {
            // Without the old object (very old API servers) there is nothing to check.
            let Some(quota) = old.or(new) else {
                return Ok(());
            };
            let name = name_of(quota);
            if [SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME, DEFAULT_QUOTA_NAME].contains(&name) {
                return Err(QuotaError::Forbidden(format!(
                    "can not delete quotaGroup :{name}"
                )));
            }
            if !topology.quotas.contains_key(name) {
                return Err(QuotaError::Missing(format!("not found quota:{name}")));
            }
            let children = topology.children_of(name).count();
            if children > 0 {
                return Err(QuotaError::InUse {
                    name: name.to_owned(),
                    count: children,
                    what: "quotas",
                });
            }
            match bound_pods {
                Some(count) if count > 0 => Err(QuotaError::InUse {
                    name: name.to_owned(),
                    count,
                    what: "pods",
                }),
                _ => Ok(()),
            }
        }
        Operation::Connect => Ok(()),
    }
}

/// The name of the quota a pod is charged to (upstream `GetQuotaName`): its
/// quota label; else (unless `disable_default_quota`, upstream feature gate
/// `DisableDefaultQuota`) the quota named after its namespace in that
/// namespace, else the quota whose namespaces annotation lists it, else the
/// default quota. With `disable_default_quota` an unlabelled pod has none (empty).
pub fn get_quota_name(pod: &Pod, quotas: &[&ElasticQuota], disable_default_quota: bool) -> String {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let labelled = apis::extension::quota_name_of_pod(&labels);
    if disable_default_quota || !labelled.is_empty() {
        return labelled.to_owned();
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    quotas
        .iter()
        .find(|q| name_of(q) == namespace && q.metadata.namespace.as_deref() == Some(namespace))
        .or_else(|| {
            quotas.iter().find(|q| {
                get_quota_namespaces(&annotations_of(q))
                    .ok()
                    .flatten()
                    .is_some_and(|namespaces| namespaces.iter().any(|ns| ns == namespace))
            })
        })
        .map_or_else(|| DEFAULT_QUOTA_NAME.to_owned(), |q| name_of(q).to_owned())
}

/// The quota a pod is charged to ([`get_quota_name`]), when it exists.
pub fn quota_of_pod<'a>(pod: &Pod, quotas: &[&'a ElasticQuota]) -> Option<&'a ElasticQuota> {
    let name = get_quota_name(pod, quotas, false);
    quotas.iter().copied().find(|q| name_of(q) == name)
}

/// Pods may only be charged to leaf quotas, and their `preemptible` label is
/// fixed once set (upstream `ValidateAddPod` / `ValidateUpdatePod`).
pub fn validate_pod_quota(
    operation: Operation,
    new_pod: &Pod,
    old_pod: Option<&Pod>,
    quotas: &[&ElasticQuota],
) -> Result<(), QuotaError> {
    if let (Operation::Update, Some(old_pod)) = (&operation, old_pod) {
        let preemptible = |pod: &Pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(apis::extension::LABEL_PREEMPTIBLE).cloned())
        };
        if preemptible(old_pod) != preemptible(new_pod) {
            return Err(QuotaError::Forbidden(
                "Preemptible label is forbidden modify now.".to_owned(),
            ));
        }
    }
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(());
    }
    match quota_of_pod(new_pod, quotas) {
        Some(quota)
            if name_of(quota) != DEFAULT_QUOTA_NAME && is_parent_quota(&labels_of(quota)) =>
        {
            Err(QuotaError::InvalidTree(format!(
                "pod can not be linked to a parentQuotaGroup,quota:{}, pod:{}",
                name_of(quota),
                new_pod.metadata.name.as_deref().unwrap_or("")
            )))
        }
        _ => Ok(()),
    }
}

/// The parts of a quota the tree checks look at.
fn tree_fields(quota: &ElasticQuota) -> (Vec<Option<String>>, Option<String>, String) {
    let labels = labels_of(quota);
    let annotations = annotations_of(quota);
    (
        [
            LABEL_QUOTA_PARENT,
            LABEL_QUOTA_IS_PARENT,
            LABEL_QUOTA_TREE_ID,
        ]
        .iter()
        .map(|k| labels.get(*k).cloned())
        .collect(),
        annotations
            .get(apis::extension::ANNOTATION_QUOTA_NAMESPACES)
            .cloned(),
        serde_json::to_string(&quota.spec).unwrap_or_default(),
    )
}

fn check_namespaces(quota: &ElasticQuota, topology: &Topology) -> Result<(), QuotaError> {
    let name = name_of(quota);
    let namespaces = get_quota_namespaces(&annotations_of(quota))
        .map_err(|e| QuotaError::Malformed(e.to_string()))?
        .unwrap_or_default();
    for namespace in namespaces {
        if let Some(owner) = topology
            .namespace_owner
            .get(&namespace)
            .filter(|owner| *owner != name)
        {
            return Err(QuotaError::InvalidTree(format!(
                "quota {name}'s annotation namespace {namespace} is already bound to quota {owner}"
            )));
        }
    }
    Ok(())
}

fn check_self(quota: &ElasticQuota) -> Result<(), QuotaError> {
    let info = QuotaInfo::of(quota)?;
    let name = &info.name;
    let bad = negative(&info.max);
    if !bad.is_empty() {
        return Err(QuotaError::InvalidAmounts(format!(
            "{name} quota.Spec.Max's value < 0, in dimensions :{bad:?}"
        )));
    }
    let bad = negative(&info.min);
    if !bad.is_empty() {
        return Err(QuotaError::InvalidAmounts(format!(
            "{name} quota.Spec.Min's value < 0, in dimensions :{bad:?}"
        )));
    }
    let annotations = annotations_of(quota);
    if let Some(weight) =
        get_shared_weight(&annotations).map_err(|e| QuotaError::Malformed(e.to_string()))?
    {
        let weight = amounts(Some(&weight))?;
        let bad = negative(&weight);
        if !bad.is_empty() {
            return Err(QuotaError::InvalidAmounts(format!(
                "{name} quota.Annotation[{ANNOTATION_SHARED_WEIGHT}]'s value < 0, in dimension :{bad:?}"
            )));
        }
    }
    for (key, min) in &info.min {
        match info.max.get(key) {
            Some(max) if max.nanos() < min.nanos() => {
                return Err(QuotaError::InvalidAmounts(format!(
                    "resourceKey {key} of quota {name} min {} > max {}",
                    min.to_decimal_si(),
                    max.to_decimal_si()
                )));
            }
            Some(_) => {}
            None => {
                return Err(QuotaError::InvalidAmounts(format!(
                    "resourceKey {key} of quota {name} is included in min, which is not included in max"
                )));
            }
        }
    }
    let strict = get_max_strict_check_resource_keys(&annotations).map_err(|e| {
        QuotaError::Malformed(format!(
            "{name} quota.Annotation[{}]'s value is invalid: {e}",
            apis::extension::ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS
        ))
    })?;
    let used = amounts(quota.status.as_ref().and_then(|s| s.used.as_ref()))?;
    for key in strict.unwrap_or_default() {
        let Some(used) = used.get(&key) else { continue };
        match info.max.get(&key) {
            None => {
                return Err(QuotaError::InvalidAmounts(format!(
                    "resourceKey {key} of quota {name} is included in used, which is not included in max but should check max >= used"
                )));
            }
            Some(max) if max.nanos() < used.nanos() => {
                return Err(QuotaError::InvalidAmounts(format!(
                    "resourceKey {key} of quota {name} max {} < used {}",
                    max.to_decimal_si(),
                    used.to_decimal_si()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Resource keys of a quota and its parent or child that disagree (upstream
/// `checkSubAndParentGroupQuotaKey`'s messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum KeyMismatch {
    #[error(
        "checkSubAndParentGroupQuotaKey failed: {child}'s max keys are not all included in {parent}'s"
    )]
    MaxNotIncluded { child: String, parent: String },
    #[error(
        "checkSubAndParentGroupQuotaKey failed: {parent}'s max keys are not the same with {child}'s"
    )]
    MaxNotSame { child: String, parent: String },
    #[error(
        "checkSubAndParentGroupQuotaKey failed: {child}'s min keys are not all included in {parent}'s"
    )]
    MinNotIncluded { child: String, parent: String },
}

/// Max keys as the parent's (or a subset, with the gate), min keys a subset
/// of the parent's; the same between this quota and each child.
fn check_resource_keys(
    topology: &Topology,
    parent: Option<&QuotaInfo>,
    new: &QuotaInfo,
    options: QuotaOptions,
) -> Result<(), KeyMismatch> {
    let max_keys_fit = |upper: &Amounts, lower: &Amounts| {
        if options.enable_update_resource_key {
            keys_included(upper, lower)
        } else {
            same_keys(upper, lower)
        }
    };
    let max_error = |child: &str, parent: &str| {
        let (child, parent) = (child.to_owned(), parent.to_owned());
        if options.enable_update_resource_key {
            KeyMismatch::MaxNotIncluded { child, parent }
        } else {
            KeyMismatch::MaxNotSame { child, parent }
        }
    };
    let min_error = |child: &str, parent: &str| KeyMismatch::MinNotIncluded {
        child: child.to_owned(),
        parent: parent.to_owned(),
    };
    let name = &new.name;
    if let Some(parent) = parent {
        if !max_keys_fit(&parent.max, &new.max) {
            return Err(max_error(name, &parent.name));
        }
        if !keys_included(&parent.min, &new.min) {
            return Err(min_error(name, &parent.name));
        }
    }
    for child in topology.children_of(name) {
        if !max_keys_fit(&new.max, &child.max) {
            return Err(max_error(&child.name, name));
        }
        if !keys_included(&new.min, &child.min) {
            return Err(min_error(&child.name, name));
        }
    }
    Ok(())
}

fn check_topology(
    topology: &Topology,
    old: Option<&QuotaInfo>,
    new: &QuotaInfo,
    bound_pods: Option<usize>,
    options: QuotaOptions,
) -> Result<(), QuotaError> {
    let name = &new.name;
    if name == ROOT_QUOTA_NAME {
        return Ok(());
    }
    if let Some(old) = old
        && old.is_parent != new.is_parent
    {
        if !new.is_parent && topology.children_of(name).next().is_some() {
            return Err(QuotaError::Forbidden(format!(
                "quota has children, isParent is forbidden to modify as false, quotaName:{name}"
            )));
        }
        if new.is_parent && bound_pods.is_some_and(|count| count > 0) {
            return Err(QuotaError::Forbidden(format!(
                "quota has bound pods, isParent is forbidden to modify as true, quotaName: {name}"
            )));
        }
    }
    if let Some(old) = old
        && old.tree_id != new.tree_id
    {
        return Err(QuotaError::Forbidden(format!(
            "{name} tree id changed [{}] vs [{}]",
            old.tree_id, new.tree_id
        )));
    }
    if new.parent != ROOT_QUOTA_NAME
        && let Some(parent) = topology.quotas.get(&new.parent)
        && parent.tree_id != new.tree_id
    {
        return Err(QuotaError::InvalidTree(format!(
            "{name} tree id is different from parent {}, [{}] vs [{}]",
            parent.name, new.tree_id, parent.tree_id
        )));
    }
    for child in topology.children_of(name) {
        if child.tree_id != new.tree_id {
            return Err(QuotaError::InvalidTree(format!(
                "{name} tree id is different from child {}, [{}] vs [{}]",
                child.name, new.tree_id, child.tree_id
            )));
        }
    }
    if new.parent == ROOT_QUOTA_NAME && !new.is_parent {
        return Ok(());
    }

    let parent = if new.parent == ROOT_QUOTA_NAME {
        None
    } else {
        let parent = topology.quotas.get(&new.parent).ok_or_else(|| {
            QuotaError::Missing(format!(
                "{name} has parentName {} but not find parentInfo in quotaInfoMap",
                new.parent
            ))
        })?;
        if !parent.is_parent {
            return Err(QuotaError::InvalidTree(format!(
                "{name} has parentName {} but the parentQuotaInfo's IsParent is false",
                new.parent
            )));
        }
        Some(parent)
    };

    // Walking up from the new parent must never come back to this quota.
    let mut cursor = new.parent.clone();
    let mut seen = BTreeSet::new();
    while cursor != ROOT_QUOTA_NAME && !cursor.is_empty() {
        if cursor == *name || !seen.insert(cursor.clone()) {
            return Err(QuotaError::InvalidTree(format!(
                "quota {name} cannot have parent {}: the quota tree would contain a cycle",
                new.parent
            )));
        }
        cursor = topology
            .quotas
            .get(&cursor)
            .map(|q| q.parent.clone())
            .unwrap_or_default();
    }

    check_resource_keys(topology, parent, new, options).map_err(|err| {
        QuotaError::InvalidTree(format!(
            "failed to check sub and parent group quotaKey, err: {err}"
        ))
    })?;

    if new.allow_force_update || new.is_tree_root {
        return Ok(());
    }
    if let Some(parent) = parent {
        let siblings = topology
            .children_of(&parent.name)
            .filter(|q| q.name != *name);
        let mut total = sum_min(siblings);
        for (key, value) in &new.min {
            let entry = total.entry(key.clone()).or_insert(QuantityValue::ZERO);
            *entry = entry.checked_add(*value).unwrap_or(*entry);
        }
        if !within(&total, &parent.min) {
            return Err(QuotaError::InvalidTree(format!(
                "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: {}",
                parent.name
            )));
        }
    }
    let children_min = sum_min(topology.children_of(name));
    if !within(&children_min, &new.min) {
        return Err(QuotaError::InvalidTree(format!(
            "checkMinQuotaSum all children's MinQuota > current MinQuota, current: {name}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(
        name: &str,
        parent: Option<&str>,
        is_parent: bool,
        min: serde_json::Value,
        max: serde_json::Value,
    ) -> ElasticQuota {
        let mut labels = serde_json::Map::new();
        if let Some(parent) = parent {
            labels.insert(LABEL_QUOTA_PARENT.into(), json!(parent));
        }
        if is_parent {
            labels.insert(LABEL_QUOTA_IS_PARENT.into(), json!("true"));
        }
        serde_json::from_value(json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"min": min, "max": max}
        }))
        .unwrap()
    }

    fn create(new: &ElasticQuota, existing: &[&ElasticQuota]) -> Result<(), String> {
        validate_quota(Operation::Create, Some(new), None, existing, None)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn errors_keep_upstream_messages_and_carry_a_metric_label() {
        let parent = quota("p", None, true, json!({}), json!({"cpu": "20"}));
        let child = quota("c", Some("p"), false, json!({}), json!({"cpu": "20"}));
        let existing = [&parent, &child];
        let in_use =
            validate_quota(Operation::Delete, None, Some(&child), &existing, Some(2)).unwrap_err();
        assert_eq!(
            in_use.to_string(),
            "delete quota failed, quota c has 2 child pods"
        );
        assert_eq!(in_use.metric_label(), "in_use");
        let exists =
            validate_quota(Operation::Create, Some(&child), None, &existing, None).unwrap_err();
        assert_eq!(exists.to_string(), "AddQuota quota already exist:c");
        assert_eq!(exists.metric_label(), "already_exists");
        let root = quota(ROOT_QUOTA_NAME, None, true, json!({}), json!({}));
        let forbidden =
            validate_quota(Operation::Delete, None, Some(&root), &[&root], None).unwrap_err();
        assert_eq!(forbidden.metric_label(), "forbidden");
        let amounts = quota("a", None, false, json!({"cpu": "10"}), json!({"cpu": "5"}));
        let invalid =
            validate_quota(Operation::Create, Some(&amounts), None, &[], None).unwrap_err();
        assert_eq!(invalid.metric_label(), "invalid_amounts");
        let malformed = quota("m", None, false, json!({"cpu": "ten"}), json!({"cpu": "5"}));
        let error = validate_quota(Operation::Create, Some(&malformed), None, &[], None);
        assert_eq!(error.map_err(|e| e.metric_label()), Err("malformed"));
    }

    #[test]
    fn min_above_max_and_min_key_outside_max_are_denied() {
        let q = quota("a", None, false, json!({"cpu": "10"}), json!({"cpu": "5"}));
        assert_eq!(
            create(&q, &[]).unwrap_err(),
            "resourceKey cpu of quota a min 10 > max 5"
        );
        let q = quota(
            "a",
            None,
            false,
            json!({"memory": "1Gi"}),
            json!({"cpu": "5"}),
        );
        assert!(create(&q, &[]).unwrap_err().contains("not included in max"));
        let q = quota("a", None, false, json!({"cpu": "-1"}), json!({"cpu": "5"}));
        assert!(create(&q, &[]).unwrap_err().contains("Min's value < 0"));
        assert!(
            create(
                &quota("a", None, false, json!({"cpu": "5"}), json!({"cpu": "5"})),
                &[]
            )
            .is_ok()
        );
    }

    #[test]
    fn children_min_must_fit_in_the_parent_min() {
        let parent = quota("p", None, true, json!({"cpu": "10"}), json!({"cpu": "20"}));
        let first = quota(
            "c1",
            Some("p"),
            false,
            json!({"cpu": "6"}),
            json!({"cpu": "20"}),
        );
        let second = quota(
            "c2",
            Some("p"),
            false,
            json!({"cpu": "5"}),
            json!({"cpu": "20"}),
        );
        let err = create(&second, &[&parent, &first]).unwrap_err();
        assert!(
            err.contains("all brothers' MinQuota > parent MinQuota"),
            "{err}"
        );
        let fits = quota(
            "c2",
            Some("p"),
            false,
            json!({"cpu": "4"}),
            json!({"cpu": "20"}),
        );
        assert!(create(&fits, &[&parent, &first]).is_ok());

        // Shrinking the parent below its children's sum is denied too.
        let shrunk = quota("p", None, true, json!({"cpu": "5"}), json!({"cpu": "20"}));
        let err = validate_quota(
            Operation::Update,
            Some(&shrunk),
            Some(&parent),
            &[&parent, &first],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("all children's MinQuota > current MinQuota"),
            "{err}"
        );
    }

    #[test]
    fn parent_must_exist_be_a_parent_and_share_max_keys() {
        let leaf = quota("leaf", None, false, json!({}), json!({"cpu": "20"}));
        let child = quota("c", Some("leaf"), false, json!({}), json!({"cpu": "1"}));
        assert!(
            create(&child, &[&leaf])
                .unwrap_err()
                .contains("IsParent is false")
        );
        let orphan = quota("c", Some("missing"), false, json!({}), json!({"cpu": "1"}));
        assert!(
            create(&orphan, &[])
                .unwrap_err()
                .contains("not find parentInfo")
        );
        let parent = quota("p", None, true, json!({}), json!({"cpu": "20"}));
        let other_keys = quota("c", Some("p"), false, json!({}), json!({"memory": "1Gi"}));
        assert!(
            create(&other_keys, &[&parent])
                .unwrap_err()
                .contains("max keys are not the same")
        );
    }

    #[test]
    fn update_resource_key_gate_allows_a_subset_of_max_keys() {
        let parent = quota(
            "p",
            None,
            true,
            json!({}),
            json!({"cpu": "20", "memory": "8Gi"}),
        );
        let child = quota("c", Some("p"), false, json!({}), json!({"cpu": "1"}));
        let err = create(&child, &[&parent]).unwrap_err();
        assert!(
            err.starts_with("failed to check sub and parent group quotaKey, err: "),
            "{err}"
        );
        let gated = QuotaOptions {
            enable_update_resource_key: true,
        };
        assert!(
            validate_quota_with(
                Operation::Create,
                Some(&child),
                None,
                &[&parent],
                None,
                gated
            )
            .is_ok()
        );
        let wider = quota(
            "c",
            Some("p"),
            false,
            json!({}),
            json!({"cpu": "1", "gpu": "1"}),
        );
        let err = validate_quota_with(
            Operation::Create,
            Some(&wider),
            None,
            &[&parent],
            None,
            gated,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("max keys are not all included"), "{err}");
    }

    #[test]
    fn reparenting_under_a_descendant_is_a_cycle() {
        let a = quota("a", None, true, json!({}), json!({"cpu": "20"}));
        let b = quota("b", Some("a"), true, json!({}), json!({"cpu": "20"}));
        let moved = quota("a", Some("b"), true, json!({}), json!({"cpu": "20"}));
        let err = validate_quota(Operation::Update, Some(&moved), Some(&a), &[&a, &b], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cycle"), "{err}");
    }

    #[test]
    fn delete_needs_no_children_and_no_pods() {
        let parent = quota("p", None, true, json!({}), json!({"cpu": "20"}));
        let child = quota("c", Some("p"), false, json!({}), json!({"cpu": "20"}));
        let existing = [&parent, &child];
        let err = validate_quota(Operation::Delete, None, Some(&parent), &existing, Some(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("has 1 child quotas"), "{err}");
        let err = validate_quota(Operation::Delete, None, Some(&child), &existing, Some(3))
            .unwrap_err()
            .to_string();
        assert!(err.contains("has 3 child pods"), "{err}");
        assert!(validate_quota(Operation::Delete, None, Some(&child), &existing, Some(0)).is_ok());
        let root = quota(ROOT_QUOTA_NAME, None, true, json!({}), json!({}));
        assert!(validate_quota(Operation::Delete, None, Some(&root), &[&root], None).is_err());
    }

    fn pod(namespace: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": namespace, "labels": labels}}),
        )
        .unwrap()
    }

    #[test]
    fn pods_go_to_leaf_quotas_only() {
        let parent = quota("parent", None, true, json!({}), json!({"cpu": "20"}));
        let mut leaf = quota(
            "leaf",
            Some("parent"),
            false,
            json!({}),
            json!({"cpu": "20"}),
        );
        leaf.metadata.annotations = Some(
            [(
                apis::extension::ANNOTATION_QUOTA_NAMESPACES.to_owned(),
                r#"["team-b"]"#.to_owned(),
            )]
            .into(),
        );
        let quotas = [&parent, &leaf];
        let labelled = pod(
            "x",
            json!({"quota.scheduling.koordinator.sh/name": "parent"}),
        );
        let err = validate_pod_quota(Operation::Create, &labelled, None, &quotas)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "pod can not be linked to a parentQuotaGroup,quota:parent, pod:p"
        );
        let by_namespace = pod("team-b", json!({}));
        assert_eq!(
            quota_of_pod(&by_namespace, &quotas).map(name_of),
            Some("leaf")
        );
        assert!(validate_pod_quota(Operation::Create, &by_namespace, None, &quotas).is_ok());
        let unknown = pod("x", json!({"quota.scheduling.koordinator.sh/name": "nope"}));
        assert!(validate_pod_quota(Operation::Create, &unknown, None, &quotas).is_ok());

        let old = pod(
            "x",
            json!({"quota.scheduling.koordinator.sh/preemptible": "true"}),
        );
        let new = pod(
            "x",
            json!({"quota.scheduling.koordinator.sh/preemptible": "false"}),
        );
        assert!(validate_pod_quota(Operation::Update, &new, Some(&old), &quotas).is_err());
    }

    #[test]
    fn defaults_fill_parent_tree_id_and_shared_weight() {
        let mut parent = quota("p", None, true, json!({}), json!({"cpu": "20"}));
        parent
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_QUOTA_TREE_ID.into(), "tree-1".into());
        let mut child = quota(
            "c",
            Some("p"),
            false,
            json!({}),
            json!({"cpu": "4", "memory": "1Gi"}),
        );
        fill_quota_defaults(&mut child, &[&parent]).unwrap();
        let labels = child.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_QUOTA_TREE_ID], "tree-1");
        let weight = &child.metadata.annotations.as_ref().unwrap()[ANNOTATION_SHARED_WEIGHT];
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(weight).unwrap(),
            json!({"cpu": "4", "memory": "1Gi"})
        );

        let mut top = quota("t", None, false, json!({}), json!({"cpu": "4"}));
        top.metadata.annotations = Some(
            [(
                ANNOTATION_SHARED_WEIGHT.to_owned(),
                r#"{"gpu":"1"}"#.to_owned(),
            )]
            .into(),
        );
        fill_quota_defaults(&mut top, &[]).unwrap();
        assert_eq!(
            top.metadata.labels.as_ref().unwrap()[LABEL_QUOTA_PARENT],
            ROOT_QUOTA_NAME
        );
        assert_eq!(
            top.metadata.annotations.as_ref().unwrap()[ANNOTATION_SHARED_WEIGHT],
            r#"{"cpu":"4"}"#
        );
    }
}
