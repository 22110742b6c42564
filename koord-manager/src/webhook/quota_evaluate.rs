//! Quota evaluation at pod admission (upstream `quotaevaluate` and the pod
//! validating webhook's `evaluateQuota`): the decision core, without I/O.
//!
//! A pod charged to an ElasticQuota is admitted when the quota's recorded use
//! (the `quota.scheduling.koordinator.sh/child-request` annotation) plus the
//! pod's requests stays within the quota's admission limit (the
//! `quota.scheduling.koordinator.sh/admission` annotation, or `spec.max` when
//! that is absent or empty), counting only the resources named in `spec.max`.
//! An admitted pod's requests are added to the recorded use, which the
//! batching shell ([`super::quota_evaluator`]) writes back to the quota.
//!
//! Amounts keep the text format of the quantities they came from (decimal,
//! binary or exponent), as Kubernetes quantities do, so the denial message and
//! the written annotation read `memory=6Gi`, not `memory=6442450944`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use apis::extension::{
    ANNOTATION_ADMISSION, ANNOTATION_CHILD_REQUEST, BATCH_CPU, BATCH_MEMORY, DEFAULT_QUOTA_NAME,
    MID_CPU, MID_MEMORY, QuantityError, QuantityValue, RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_GPU, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED, RESOURCE_MEMORY,
    RESOURCE_NVIDIA_GPU, ROOT_QUOTA_NAME, SYSTEM_QUOTA_NAME, get_pod_replace_resources_config,
};
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::elasticquota::get_quota_name;
use super::review::{Operation, Refusal};

/// Resources whose presence in a quota's `spec.max` turns evaluation on
/// (upstream `podResources`). A quota naming none of them is not evaluated.
pub const POD_RESOURCES: [&str; 14] = [
    RESOURCE_CPU,
    RESOURCE_MEMORY,
    RESOURCE_EPHEMERAL_STORAGE,
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    BATCH_CPU,
    BATCH_MEMORY,
    MID_CPU,
    MID_MEMORY,
    RESOURCE_GPU,
    RESOURCE_NVIDIA_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_GPU_MEMORY_RATIO,
];

/// The fewest status-update attempts a batch gets after its first
/// (upstream `quotaUpdateMinRetries`).
pub const MIN_UPDATE_RETRIES: u32 = 3;

/// How a quantity prints (Kubernetes' quantity formats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityFormat {
    /// `500m`, `2`, `3k`.
    DecimalSi,
    /// `512Mi`, `4Gi`.
    BinarySi,
    /// `12e6`.
    DecimalExponent,
}

impl QuantityFormat {
    /// The format a quantity string is in, from its suffix: binary suffixes
    /// (`Ki`…`Ei`), an exponent (`e3`, `E3`; a lone `E` is exa) or decimal.
    fn of_text(text: &str) -> Self {
        let unsigned = text.trim_start_matches(['+', '-']);
        let suffix = unsigned.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        if suffix.ends_with('i') {
            QuantityFormat::BinarySi
        } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
            QuantityFormat::DecimalExponent
        } else {
            QuantityFormat::DecimalSi
        }
    }
}

/// An exact amount and the format it prints in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    pub value: QuantityValue,
    pub format: QuantityFormat,
}

impl Amount {
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        Ok(Amount {
            value: QuantityValue::parse(text)?,
            format: QuantityFormat::of_text(text),
        })
    }

    pub fn of(quantity: &Quantity) -> Result<Self, QuantityError> {
        Amount::parse(&quantity.0)
    }

    /// A value in decimal format.
    pub const fn decimal(value: QuantityValue) -> Self {
        Amount {
            value,
            format: QuantityFormat::DecimalSi,
        }
    }

    /// The canonical text, as Kubernetes prints a quantity of this format.
    pub fn canonical(&self) -> String {
        match self.format {
            QuantityFormat::DecimalSi => self.value.to_decimal_si(),
            QuantityFormat::BinarySi => self.value.to_binary_si(),
            QuantityFormat::DecimalExponent => exponent_text(self.value),
        }
    }

    /// The sum; the format stays this amount's unless it is zero (then the
    /// other's), as Kubernetes' `Quantity.Add` does.
    fn plus(self, other: Amount) -> Option<Amount> {
        Some(Amount {
            value: self.value.checked_add(other.value)?,
            format: if self.value.is_zero() {
                other.format
            } else {
                self.format
            },
        })
    }
}

/// `mantissa e exponent` with the exponent a multiple of three and the
/// mantissa an integer; no suffix for exponent 0.
fn exponent_text(value: QuantityValue) -> String {
    let nanos = value.nanos();
    if nanos == 0 {
        return "0".to_owned();
    }
    for exponent in (-3..=9).rev().map(|step| step * 3) {
        let divisor = 10i128.pow((exponent + 9) as u32);
        if nanos % divisor == 0 {
            let mantissa = nanos / divisor;
            return if exponent == 0 {
                mantissa.to_string()
            } else {
                format!("{mantissa}e{exponent}")
            };
        }
    }
    format!("{nanos}e-9")
}

/// Upstream's message when the wait for an evaluation runs out (an `InternalError` status).
pub const TIMEOUT_MESSAGE: &str = "Internal error occurred: elastic quota evaluation timed out";

/// A resource list with exact amounts.
pub type Amounts = BTreeMap<String, Amount>;

/// Why a pod is not admitted to its quota, or could not be judged. The
/// messages are upstream's (users and tests match them);
/// [`EvaluationError::metric_label`] is the webhook rejection counter's
/// `reason`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    /// A request, overhead or pod-level quantity of the pod cannot be read.
    #[error("{0}")]
    InvalidRequest(String),
    /// The quota's use or admission annotation, or its `spec.max`, cannot be read.
    #[error("{0}")]
    MalformedQuota(String),
    /// A sum of amounts is beyond what an amount holds.
    #[error("{0}")]
    OutOfRange(String),
    #[error("elastic quota {0} not found")]
    QuotaNotFound(String),
    #[error("more than one elastic quota {0} found")]
    DuplicateQuota(String),
    /// The pod's requests do not fit in the quota's admission limit.
    #[error("exceeded quota: {quota}, requested: {requested}, used: {used}, limited: {limited}")]
    Exceeded {
        /// `namespace/name`.
        quota: String,
        requested: String,
        used: String,
        limited: String,
    },
    /// The quota could not be read (the API server's message).
    #[error("{0}")]
    ReadFailed(String),
    /// The new use could not be written within the retries (the API server's message).
    #[error("{0}")]
    UpdateFailed(String),
    /// Upstream's answer for a pod its batch left undecided.
    #[error("DEFAULT DENY")]
    Undecided,
    /// The caller's wait for the evaluator ran out.
    #[error("{}", TIMEOUT_MESSAGE)]
    TimedOut,
    /// The evaluator dropped the admission without answering.
    #[error("Internal error occurred: elastic quota evaluation was abandoned")]
    Abandoned,
    #[error("the ElasticQuota cache is not synced yet")]
    CacheNotSynced,
    #[error("quota evaluation is on but the webhook has no evaluator")]
    NoEvaluator,
}

impl Refusal for EvaluationError {
    fn metric_label(&self) -> &'static str {
        match self {
            EvaluationError::InvalidRequest(_) => "invalid_request",
            EvaluationError::MalformedQuota(_) => "malformed_quota",
            EvaluationError::OutOfRange(_) => "out_of_range",
            EvaluationError::QuotaNotFound(_) => "quota_not_found",
            EvaluationError::DuplicateQuota(_) => "duplicate_quota",
            EvaluationError::Exceeded { .. } => "exceeded",
            EvaluationError::ReadFailed(_) => "read_failed",
            EvaluationError::UpdateFailed(_) => "update_failed",
            EvaluationError::Undecided => "undecided",
            EvaluationError::TimedOut => "timeout",
            EvaluationError::Abandoned => "abandoned",
            EvaluationError::CacheNotSynced => "not_synced",
            EvaluationError::NoEvaluator => "no_evaluator",
        }
    }
}

/// A quantity of a resource list that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {source}")]
pub struct InvalidAmount {
    pub name: String,
    #[source]
    pub source: QuantityError,
}

/// A sum of one resource's amounts that an amount cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}: the sum is out of range")]
pub struct SumOutOfRange(String);

/// Reads a resource list; the first bad quantity is the error.
pub fn amounts_of(list: &BTreeMap<String, Quantity>) -> Result<Amounts, InvalidAmount> {
    list.iter()
        .map(|(name, quantity)| {
            Amount::of(quantity)
                .map(|amount| (name.clone(), amount))
                .map_err(|source| InvalidAmount {
                    name: name.clone(),
                    source,
                })
        })
        .collect()
}

/// The resource-list JSON of an annotation (`{"cpu":"2","memory":"4Gi"}`);
/// absent or empty → empty.
fn annotation_amounts(
    annotations: Option<&BTreeMap<String, String>>,
    key: &str,
) -> Result<Amounts, EvaluationError> {
    let Some(text) = annotations
        .and_then(|a| a.get(key))
        .filter(|t| !t.is_empty())
    else {
        return Ok(Amounts::new());
    };
    let malformed = |err: &dyn std::fmt::Display| {
        EvaluationError::MalformedQuota(format!("annotation {key}: {err}"))
    };
    let list: BTreeMap<String, Quantity> =
        serde_json::from_str(text).map_err(|err| malformed(&err))?;
    amounts_of(&list).map_err(|err| malformed(&err))
}

/// The JSON written to the child-request annotation (keys sorted, canonical
/// quantities).
pub fn amounts_json(list: &Amounts) -> String {
    let texts: BTreeMap<&str, String> = list
        .iter()
        .map(|(name, amount)| (name.as_str(), amount.canonical()))
        .collect();
    serde_json::to_string(&texts).unwrap_or_else(|_| "{}".to_owned())
}

/// Adds `b` into `a` (keys of either).
fn add_into(a: &mut Amounts, b: &Amounts) -> Result<(), SumOutOfRange> {
    for (name, amount) in b {
        let sum = match a.get(name) {
            Some(current) => current
                .plus(*amount)
                .ok_or_else(|| SumOutOfRange(name.clone()))?,
            None => *amount,
        };
        a.insert(name.clone(), sum);
    }
    Ok(())
}

fn sum(a: &Amounts, b: &Amounts) -> Result<Amounts, SumOutOfRange> {
    let mut total = a.clone();
    add_into(&mut total, b)?;
    Ok(total)
}

/// The entries of `list` named in `names`.
fn only<'a>(list: &Amounts, names: impl IntoIterator<Item = &'a String>) -> Amounts {
    names
        .into_iter()
        .filter_map(|name| list.get(name).map(|amount| (name.clone(), *amount)))
        .collect()
}

/// The non-zero entries of `list` named in `names` (upstream `maskResourceList`).
fn nonzero_in(list: &Amounts, names: &BTreeSet<String>) -> Amounts {
    list.iter()
        .filter(|(name, amount)| names.contains(*name) && !amount.value.is_zero())
        .map(|(name, amount)| (name.clone(), *amount))
        .collect()
}

/// The resources of `limit` that `usage` goes beyond (a resource `limit`
/// does not name is not limited), sorted.
fn exceeded(usage: &Amounts, limit: &Amounts) -> Vec<String> {
    limit
        .iter()
        .filter(|(name, bound)| usage.get(*name).is_some_and(|u| u.value > bound.value))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `a=1,b=2Gi`, sorted by name (upstream `prettyPrint`).
pub fn pretty_print(list: &Amounts) -> String {
    list.iter()
        .map(|(name, amount)| format!("{name}={}", amount.canonical()))
        .collect::<Vec<_>>()
        .join(",")
}

fn requests_of(
    field: &str,
    resources: Option<&ResourceRequirements>,
) -> Result<Amounts, EvaluationError> {
    match resources.and_then(|r| r.requests.as_ref()) {
        Some(requests) => amounts_of(requests).map_err(|err| {
            EvaluationError::InvalidRequest(format!(
                "{field}.resources.requests: Invalid value: {err}"
            ))
        }),
        None => Ok(Amounts::new()),
    }
}

/// Raises each entry of `list` to `other`'s where that is larger.
fn raise_to(list: &mut Amounts, other: &Amounts) {
    for (name, amount) in other {
        match list.get(name) {
            Some(current) if current.value >= amount.value => {}
            _ => {
                list.insert(name.clone(), *amount);
            }
        }
    }
}

/// Resources a pod may request at pod level (`spec.resources`).
fn is_pod_level_resource(name: &str) -> bool {
    name == RESOURCE_CPU || name == RESOURCE_MEMORY || name.starts_with("hugepages-")
}

/// What a pod charges its quota (upstream `PodUsageFunc`): nothing once it
/// has finished (phase Succeeded or Failed) or its deletion grace period has
/// passed by `now`; else its effective requests (Kubernetes `PodRequests`):
/// the containers' sum, sidecars (init containers with `restartPolicy:
/// Always`) added to it, raised to any init container's need at its turn,
/// pod-level requests replacing cpu and memory, plus overhead.
pub fn pod_usage(pod: &Pod, now: SystemTime) -> Result<Amounts, EvaluationError> {
    let out_of_range =
        |field: &str, err: SumOutOfRange| EvaluationError::OutOfRange(format!("{field}: {err}"));
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(Amounts::new());
    }
    if let (Some(deleted), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) {
        let deleted = SystemTime::from(deleted.0);
        let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        if deleted
            .checked_add(grace)
            .is_some_and(|expired| now > expired)
        {
            return Ok(Amounts::new());
        }
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Amounts::new());
    };
    let mut total = Amounts::new();
    for (index, container) in spec.containers.iter().enumerate() {
        let field = format!("pod.spec.containers[{index}]");
        add_into(
            &mut total,
            &requests_of(&field, container.resources.as_ref())?,
        )
        .map_err(|err| out_of_range(&field, err))?;
    }
    let mut sidecars = Amounts::new();
    let mut init_need = Amounts::new();
    for (index, container) in spec.init_containers.iter().flatten().enumerate() {
        let field = format!("pod.spec.initContainers[{index}]");
        let requests = requests_of(&field, container.resources.as_ref())?;
        let need = if container.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &requests).map_err(|err| out_of_range(&field, err))?;
            add_into(&mut sidecars, &requests).map_err(|err| out_of_range(&field, err))?;
            sidecars.clone()
        } else {
            sum(&requests, &sidecars).map_err(|err| out_of_range(&field, err))?
        };
        raise_to(&mut init_need, &need);
    }
    raise_to(&mut total, &init_need);
    if let Some(requests) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .filter(|requests| requests.keys().any(|name| is_pod_level_resource(name)))
    {
        for (name, quantity) in requests.iter().filter(|(n, _)| is_pod_level_resource(n)) {
            let amount = Amount::of(quantity).map_err(|err| {
                EvaluationError::InvalidRequest(format!(
                    "pod.spec.resources.requests.{name}: Invalid value: {err}"
                ))
            })?;
            total.insert(name.clone(), amount);
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        let overhead = amounts_of(overhead).map_err(|err| {
            EvaluationError::InvalidRequest(format!("pod.spec.overhead: Invalid value: {err}"))
        })?;
        add_into(&mut total, &overhead).map_err(|err| out_of_range("pod.spec.overhead", err))?;
    }
    Ok(total)
}

/// Renames or erases resources as the pod's `pod.koordinator.sh/replace-resources`
/// annotation says, in containers, init containers and overhead (upstream
/// `TransformReplaceResources`; the caller checks the gates). A renamed cpu
/// becomes its milli-value (`2` → `2000`). A target already present is left
/// alone. Returns whether anything changed.
pub fn transform_replace_resources(pod: &mut Pod) -> bool {
    let config = get_pod_replace_resources_config(
        pod.metadata
            .annotations
            .as_ref()
            .unwrap_or(&BTreeMap::new()),
    );
    if config.erase_names.is_empty() && config.replace_mappings.is_empty() {
        return false;
    }
    let rewrite = |list: &mut BTreeMap<String, Quantity>| {
        let mut changed = false;
        for name in &config.erase_names {
            changed |= list.remove(name).is_some();
        }
        for (from, to) in &config.replace_mappings {
            if to.is_empty() || list.contains_key(to) {
                continue;
            }
            let Some(quantity) = list.remove(from) else {
                continue;
            };
            let quantity = if from == RESOURCE_CPU {
                match QuantityValue::of(&quantity) {
                    Ok(value) => Quantity(value.milli_value().to_string()),
                    Err(_) => quantity,
                }
            } else {
                quantity
            };
            list.insert(to.clone(), quantity);
            changed = true;
        }
        changed
    };
    let mut changed = false;
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    for container in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        if let Some(resources) = container.resources.as_mut() {
            for list in [resources.requests.as_mut(), resources.limits.as_mut()]
                .into_iter()
                .flatten()
            {
                changed |= rewrite(list);
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_mut() {
        changed |= rewrite(overhead);
    }
    changed
}

/// The quota name a pod's evaluation uses, or `None` to skip evaluation:
/// upstream evaluates creates, and updates (with `EnableQuotaAdmissionOnUpdate`)
/// that move the pod to another quota; never the default, system or root quota.
pub fn quota_to_evaluate(
    operation: Operation,
    new_quota: &str,
    old_quota: Option<&str>,
    on_update: bool,
) -> Option<String> {
    match operation {
        Operation::Create => {}
        Operation::Update if on_update && old_quota != Some(new_quota) => {}
        _ => return None,
    }
    if new_quota.is_empty()
        || [DEFAULT_QUOTA_NAME, SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME].contains(&new_quota)
    {
        return None;
    }
    Some(new_quota.to_owned())
}

/// The one ElasticQuota named `name` (any namespace), or upstream's error.
pub fn find_quota<'a>(
    quotas: &[&'a ElasticQuota],
    name: &str,
) -> Result<&'a ElasticQuota, EvaluationError> {
    let mut found = quotas
        .iter()
        .copied()
        .filter(|q| q.metadata.name.as_deref() == Some(name));
    match (found.next(), found.next()) {
        (Some(quota), None) => Ok(quota),
        (None, _) => Err(EvaluationError::QuotaNotFound(name.to_owned())),
        (Some(_), Some(_)) => Err(EvaluationError::DuplicateQuota(name.to_owned())),
    }
}

/// The upstream feature gates of quota evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvaluationGates {
    /// `EnableQuotaAdmission` (default false): evaluate at all.
    pub enabled: bool,
    /// `EnableQuotaAdmissionOnUpdate` (default false): evaluate updates that
    /// move a pod to another quota.
    pub on_update: bool,
    /// `ElasticQuotaEvaluationTransformPod` (default false) …
    pub transform_pod: bool,
    /// … and `ReplaceResourcesTransformer` (default false): both on, the pod
    /// is evaluated with its `replace-resources` annotation applied.
    pub replace_resources_transformer: bool,
    /// `DisableDefaultQuota` (default false): only the quota label names a
    /// pod's quota.
    pub disable_default_quota: bool,
}

/// What to evaluate for an admission (upstream `evaluateQuota` before it
/// calls the evaluator): `Ok(None)` to skip, `Err` to deny (the quota named
/// does not exist, or more than one has the name).
pub fn prepare_evaluation(
    operation: Operation,
    new_pod: &Pod,
    old_pod: Option<&Pod>,
    quotas: &[&ElasticQuota],
    gates: EvaluationGates,
) -> Result<Option<Attributes>, EvaluationError> {
    if !gates.enabled {
        return Ok(None);
    }
    let name_of = |pod: &Pod| get_quota_name(pod, quotas, gates.disable_default_quota);
    let new_name = name_of(new_pod);
    let old_name = match &operation {
        Operation::Update if gates.on_update => old_pod.map(name_of),
        _ => None,
    };
    let Some(name) = quota_to_evaluate(
        operation.clone(),
        &new_name,
        old_name.as_deref(),
        gates.on_update,
    ) else {
        return Ok(None);
    };
    let quota = find_quota(quotas, &name)?;
    let mut pod = new_pod.clone();
    if gates.transform_pod && gates.replace_resources_transformer {
        transform_replace_resources(&mut pod);
    }
    Ok(Some(Attributes {
        quota_namespace: quota.metadata.namespace.clone().unwrap_or_default(),
        quota_name: name,
        operation,
        pod,
    }))
}

/// One pod to evaluate against one quota.
#[derive(Clone, Debug)]
pub struct Attributes {
    pub quota_namespace: String,
    pub quota_name: String,
    pub operation: Operation,
    pub pod: Pod,
}

impl Attributes {
    /// `namespace/name` of the quota: requests for one quota are batched.
    pub fn key(&self) -> String {
        format!("{}/{}", self.quota_namespace, self.quota_name)
    }
}

/// The state of one batch of evaluations of one quota (upstream
/// `quotaCheckContext`), kept across update retries.
#[derive(Clone, Debug, Default)]
pub struct BatchContext {
    /// Resources named in the quota's `spec.max`.
    names: BTreeSet<String>,
    /// The use the quota records, plus the pods admitted so far.
    pub used: Amounts,
    /// The limit: the admission annotation, else `spec.max`.
    pub admission: Amounts,
    /// The quota's annotations or max could not be read: every pod gets this.
    fatal: Option<String>,
    /// The pods admitted in this batch, summed (re-applied on a retry).
    delta: Amounts,
    /// Jitter granted to this batch's updates so far.
    pub jitter_spent: Duration,
}

impl BatchContext {
    /// (Re)reads the quota (upstream `initCtx`): use, limit and names. The
    /// admitted delta is kept while the names stay the same.
    pub fn load(&mut self, quota: &ElasticQuota) {
        let annotations = quota.metadata.annotations.as_ref();
        let mut errors = Vec::new();
        self.used = annotation_amounts(annotations, ANNOTATION_CHILD_REQUEST).unwrap_or_else(|e| {
            errors.push(e.to_string());
            Amounts::new()
        });
        let max = quota.spec.max.clone().unwrap_or_default();
        let admission = annotation_amounts(annotations, ANNOTATION_ADMISSION).unwrap_or_else(|e| {
            errors.push(e.to_string());
            Amounts::new()
        });
        self.admission = if admission.is_empty() {
            amounts_of(&max).unwrap_or_else(|e| {
                errors.push(format!("spec.max: {e}"));
                Amounts::new()
            })
        } else {
            admission
        };
        self.fatal = match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(format!("[{}]", errors.join(", "))),
        };
        let names: BTreeSet<String> = max.keys().cloned().collect();
        if self.names.is_empty() || names != self.names {
            self.names = names;
            self.delta.clear();
        }
    }

    /// After a failed update and a re-read: when the pods admitted so far
    /// still fit on top of the fresh use, take them as admitted again without
    /// re-checking each (upstream's fast path). `false` means every pod still
    /// waiting must be checked again.
    pub fn reapply_delta(&mut self) -> bool {
        if self.fatal.is_some() || self.delta.is_empty() {
            self.delta.clear();
            return false;
        }
        let Ok(total) = sum(&self.used, &self.delta) else {
            self.delta.clear();
            return false;
        };
        let new_usage = nonzero_in(&total, &self.names);
        if exceeded(&new_usage, &self.admission).is_empty() {
            self.used = new_usage;
            true
        } else {
            self.delta.clear();
            false
        }
    }

    /// Checks one pod (upstream `checkRequest`): `Ok(true)` admitted and
    /// counted, `Ok(false)` admitted with nothing to count, `Err` denied.
    pub fn check_request(
        &mut self,
        attributes: &Attributes,
        now: SystemTime,
    ) -> Result<bool, EvaluationError> {
        if !matches!(attributes.operation, Operation::Create | Operation::Update) {
            return Ok(false);
        }
        if let Some(fatal) = &self.fatal {
            return Err(EvaluationError::MalformedQuota(fatal.clone()));
        }
        if !POD_RESOURCES.iter().any(|name| self.names.contains(*name)) {
            return Ok(false);
        }
        let requested = nonzero_in(&pod_usage(&attributes.pod, now)?, &self.names);
        if requested.is_empty() {
            return Ok(false);
        }
        let out_of_range = |err: SumOutOfRange| EvaluationError::OutOfRange(err.to_string());
        let new_usage = sum(&self.used, &requested).map_err(out_of_range)?;
        let over = exceeded(&only(&new_usage, requested.keys()), &self.admission);
        if !over.is_empty() {
            return Err(EvaluationError::Exceeded {
                quota: attributes.key(),
                requested: pretty_print(&only(&requested, &over)),
                used: pretty_print(&only(&self.used, &over)),
                limited: pretty_print(&only(&self.admission, &over)),
            });
        }
        self.used = new_usage;
        add_into(&mut self.delta, &requested).map_err(out_of_range)?;
        Ok(true)
    }

    /// The child-request annotation value to write.
    pub fn used_json(&self) -> String {
        amounts_json(&self.used)
    }
}

/// Settings of the status updates (upstream's `--quota-update-*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateSettings {
    /// `--quota-update-max-retries` (default 3; below 3 counts as 3).
    pub max_retries: u32,
    /// `--quota-update-retry-jitter` (default 0: no sleep after a conflict).
    pub retry_jitter: Duration,
    /// `--quota-update-max-total-jitter` (default 1s per batch).
    pub max_total_jitter: Duration,
    /// `--quota-update-conflict-fresh-get` (default false).
    pub conflict_fresh_get: bool,
}

impl Default for UpdateSettings {
    fn default() -> Self {
        UpdateSettings {
            max_retries: MIN_UPDATE_RETRIES,
            retry_jitter: Duration::ZERO,
            max_total_jitter: Duration::from_secs(1),
            conflict_fresh_get: false,
        }
    }
}

impl UpdateSettings {
    /// The retries a batch starts with.
    pub fn start_retries(&self) -> u32 {
        self.max_retries.max(MIN_UPDATE_RETRIES)
    }

    /// The retry budget of a batch in which `changed` pods were counted
    /// (upstream `retriesForBatch`): 3 for one pod, one more per doubling,
    /// at most the configured maximum.
    pub fn retries_for_batch(&self, changed: usize) -> u32 {
        let most = self.start_retries();
        if changed <= 1 {
            return MIN_UPDATE_RETRIES;
        }
        (MIN_UPDATE_RETRIES + changed.ilog2()).min(most)
    }

    /// The jitter to grant the next update (upstream `jitterForNextUpdate`):
    /// none when jitter is off, no retry would follow, or the batch's total
    /// would pass the cap.
    pub fn jitter_for_next_update(&self, spent: Duration, remaining_retries: u32) -> Duration {
        if self.retry_jitter.is_zero() || remaining_retries == 0 {
            return Duration::ZERO;
        }
        match spent.checked_add(self.retry_jitter) {
            Some(total) if total <= self.max_total_jitter => self.retry_jitter,
            _ => Duration::ZERO,
        }
    }
}

/// A Go duration flag for the jitter settings: a negative value (which
/// upstream takes as "off") is zero here.
pub fn parse_jitter_duration(text: &str) -> Result<Duration, InvalidDuration> {
    match text.trim().strip_prefix('-') {
        Some(magnitude) => koord_common::cluster::parse_duration(magnitude).map(|_| Duration::ZERO),
        None => koord_common::cluster::parse_duration(text),
    }
    .map_err(InvalidDuration)
}

/// A jitter flag that is not a Go duration (koord-common's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidDuration(String);

#[cfg(test)]
mod tests;
