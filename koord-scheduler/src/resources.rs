//! Resource amounts as plain integers in the units upstream compares them in:
//! milli-cores for `cpu`, whole units (bytes, counts, batch milli-cores) for
//! everything else. The well-known names live in fixed slots so the per-node
//! hot path never hashes or compares strings.

use std::collections::BTreeMap;

use apis::extension::quantity::QuantityValue;
use apis::extension::resource::{
    BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_MEMORY,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Names with a fixed slot, in slot order.
pub const KNOWN_RESOURCES: [&str; 8] = [
    RESOURCE_CPU,
    RESOURCE_MEMORY,
    RESOURCE_EPHEMERAL_STORAGE,
    BATCH_CPU,
    BATCH_MEMORY,
    MID_CPU,
    MID_MEMORY,
    RESOURCE_PODS,
];

/// Node allocatable pod count.
pub const RESOURCE_PODS: &str = "pods";

pub const SLOT_CPU: usize = 0;
pub const SLOT_MEMORY: usize = 1;

/// kube-scheduler's request assumed for a container without a cpu request (milli-cores).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// kube-scheduler's request assumed for a container without a memory request (bytes).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The fixed slot of a well-known resource name.
pub fn slot_of(name: &str) -> Option<usize> {
    KNOWN_RESOURCES.iter().position(|known| *known == name)
}

/// How much of a refused quantity a message shows.
pub const MAX_SHOWN_VALUE_BYTES: usize = 64;

/// `text` cut to [`MAX_SHOWN_VALUE_BYTES`] (at a character boundary) and
/// followed by `…(N bytes)` when longer: a message names a refused value
/// without copying all of it.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_SHOWN_VALUE_BYTES {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = MAX_SHOWN_VALUE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

/// One amount read exactly: a Kubernetes quantity that is not negative
/// and, in its comparison unit (milli-units for `cpu`, whole units
/// otherwise, rounded up as upstream), fits in an `i64`. Anything else is
/// refused with the reason (naming the value, cut to
/// [`MAX_SHOWN_VALUE_BYTES`]), never counted as zero or clamped.
pub fn exact_amount(name: &str, quantity: &Quantity) -> Result<i64, String> {
    let value = QuantityValue::of(quantity)
        .map_err(|e| format!("invalid quantity {:?}: {}", shown(&quantity.0), e.reason))?;
    let nanos = value.nanos();
    if nanos < 0 {
        return Err(format!("quantity {:?} is negative", shown(&quantity.0)));
    }
    let unit: i128 = if name == RESOURCE_CPU {
        1_000_000
    } else {
        1_000_000_000
    };
    let amount = nanos / unit + i128::from(nanos % unit != 0);
    i64::try_from(amount).map_err(|_| {
        format!(
            "quantity {:?} is larger than the scheduler can count ({} {})",
            shown(&quantity.0),
            i64::MAX,
            if name == RESOURCE_CPU {
                "milli-units"
            } else {
                "units"
            }
        )
    })
}

/// An amount of a cluster object that is not an exact count (see
/// [`exact_amount`]): where it is and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidAmount {
    /// The field path without the resource name (`status.allocatable`):
    /// a fixed string, fit for a metric label.
    pub section: &'static str,
    /// The field path and the resource (`status.allocatable cpu`).
    pub field: String,
    /// Why, naming the value (cut to [`MAX_SHOWN_VALUE_BYTES`]).
    pub reason: String,
}

impl InvalidAmount {
    pub fn new(section: &'static str, field: String, reason: String) -> Self {
        Self {
            section,
            field,
            reason,
        }
    }
}

/// A resource list read exactly ([`exact_amount`] per entry); the first
/// entry that is not an exact count is the error, found under `section`.
pub fn exact_resources(
    list: &BTreeMap<String, Quantity>,
    section: &'static str,
) -> Result<Resources, InvalidAmount> {
    read_resources(list, section, exact_amount)
}

/// An upper bound read from a cluster object or the args (a quota's max,
/// its shared weight): an exact amount (see [`exact_amount`]), or, for a
/// valid positive quantity beyond what 64 bits count, the most an `i64`
/// holds, a bound nothing reaches. Upstream writes its built-in quotas'
/// max and shared weight as MaxInt64/5 cores, beyond milli-cores in 64
/// bits. Negative or unreadable amounts are refused as by [`exact_amount`].
pub fn bound_amount(name: &str, quantity: &Quantity) -> Result<i64, String> {
    match exact_amount(name, quantity) {
        Ok(amount) => Ok(amount),
        Err(_) if QuantityValue::of(quantity).is_ok_and(|v| v.is_positive()) => Ok(i64::MAX),
        Err(reason) => Err(reason),
    }
}

/// A list of upper bounds (see [`bound_amount`]), or the first that is
/// refused.
pub fn bound_resources(
    list: &BTreeMap<String, Quantity>,
    section: &'static str,
) -> Result<Resources, InvalidAmount> {
    read_resources(list, section, bound_amount)
}

fn read_resources(
    list: &BTreeMap<String, Quantity>,
    section: &'static str,
    read: fn(&str, &Quantity) -> Result<i64, String>,
) -> Result<Resources, InvalidAmount> {
    let mut resources = Resources::new();
    for (name, quantity) in list {
        match read(name, quantity) {
            Ok(amount) => resources.set(name, amount),
            Err(reason) => {
                return Err(InvalidAmount::new(
                    section,
                    format!("{section} {}", shown(name)),
                    reason,
                ));
            }
        }
    }
    Ok(resources)
}

/// What a refused amount of a pod already bound counts as: too large as
/// the most an `i64` holds, anything else (not a number, negative) as
/// nothing.
fn refused_amount(quantity: &Quantity) -> i64 {
    let too_large = match QuantityValue::of(quantity) {
        Ok(value) => value.is_positive(),
        Err(err) => err.reason == OUT_OF_RANGE && !quantity.0.starts_with('-'),
    };
    if too_large { i64::MAX } else { 0 }
}

/// A sparse resource vector; absent and zero are the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    known: [i64; KNOWN_RESOURCES.len()],
    extra: Vec<(String, i64)>,
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> i64 {
        match slot_of(name) {
            Some(slot) => self.known[slot],
            None => self.get_extra(name),
        }
    }

    /// [`Self::get`] for a name known to be none of [`KNOWN_RESOURCES`] (a
    /// name [`Self::extras`] gave): skips matching it against them.
    pub fn get_extra(&self, name: &str) -> i64 {
        self.extra
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    pub fn slot(&self, slot: usize) -> i64 {
        self.known[slot]
    }

    pub fn set(&mut self, name: &str, amount: i64) {
        match slot_of(name) {
            Some(slot) => self.known[slot] = amount,
            None => match self.extra.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1 = amount,
                None => self.extra.push((name.to_string(), amount)),
            },
        }
    }

    pub fn add_amount(&mut self, name: &str, amount: i64) {
        let current = self.get(name);
        self.set(name, current.saturating_add(amount));
    }

    pub fn add(&mut self, other: &Resources) {
        for (mine, theirs) in self.known.iter_mut().zip(other.known.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
        for (name, amount) in &other.extra {
            self.add_amount(name, *amount);
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        for (mine, theirs) in self.known.iter_mut().zip(other.known.iter()) {
            *mine = mine.saturating_sub(*theirs);
        }
        for (name, amount) in &other.extra {
            self.add_amount(name, amount.saturating_neg());
        }
    }

    /// Each entry becomes the larger of the two.
    pub fn max_with(&mut self, other: &Resources) {
        for (mine, theirs) in self.known.iter_mut().zip(other.known.iter()) {
            *mine = (*mine).max(*theirs);
        }
        for (name, amount) in &other.extra {
            let current = self.get(name);
            if *amount > current {
                self.set(name, *amount);
            }
        }
    }

    /// Non-zero entries, known names first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        KNOWN_RESOURCES
            .iter()
            .zip(self.known.iter())
            .map(|(name, amount)| (*name, *amount))
            .chain(
                self.extra
                    .iter()
                    .map(|(name, amount)| (name.as_str(), *amount)),
            )
            .filter(|(_, amount)| *amount != 0)
    }

    /// Non-zero fixed-slot entries as (slot, amount).
    pub fn known_slots(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.known
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, amount)| *amount != 0)
    }

    /// Non-zero entries without a fixed slot.
    pub fn extras(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.extra
            .iter()
            .map(|(name, amount)| (name.as_str(), *amount))
            .filter(|(_, amount)| *amount != 0)
    }

    pub fn is_zero(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Back to a Kubernetes resource list (cpu as milli-cores, others as integers).
    pub fn to_list(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(name, amount)| (name.to_string(), format_amount(name, amount)))
            .collect()
    }
}

/// Formats an amount the way Kubernetes prints it (`500m`, `2`, `1048576`).
pub fn format_amount(name: &str, amount: i64) -> Quantity {
    if name == RESOURCE_CPU {
        if amount % 1000 == 0 {
            Quantity((amount / 1000).to_string())
        } else {
            Quantity(format!("{amount}m"))
        }
    } else {
        Quantity(amount.to_string())
    }
}

/// `QuantityError::reason` of a well-formed quantity too large to hold.
const OUT_OF_RANGE: &str = "value out of range";

/// Records the first amount of a pod that cannot be counted.
#[derive(Default)]
struct Refused(Option<String>);

impl Refused {
    /// A resource list, every entry exact; a refused entry counts as the
    /// most it could mean (overflow: `i64::MAX`) or, when not a number at
    /// all, as nothing, and the first refusal is kept as the reason.
    fn list(&mut self, list: &BTreeMap<String, Quantity>, what: &dyn Fn() -> String) -> Resources {
        let mut resources = Resources::new();
        for (name, quantity) in list {
            match exact_amount(name, quantity) {
                Ok(amount) => resources.set(name, amount),
                Err(reason) => {
                    resources.set(name, refused_amount(quantity));
                    if self.0.is_none() {
                        self.0 = Some(format!("{} {name}: {reason}", what()));
                    }
                }
            }
        }
        resources
    }
}

fn container_list(container: &Container, limits: bool, refused: &mut Refused) -> Resources {
    let resources = container.resources.as_ref();
    let list = if limits {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    let what = || {
        format!(
            "container {:?} {}",
            container.name,
            if limits { "limits" } else { "requests" }
        )
    };
    list.map(|list| refused.list(list, &what))
        .unwrap_or_default()
}

fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// Pod requests (or limits) the way kube-scheduler sums them: regular and
/// sidecar containers add up, a plain init container only raises the peak,
/// and the overhead is added on top. The second value is why an amount
/// could not be counted exactly (see [`exact_amount`]).
fn pod_resources(pod: &Pod, limits: bool) -> (Resources, Option<String>) {
    let Some(spec) = pod.spec.as_ref() else {
        return (Resources::new(), None);
    };
    let mut refused = Refused::default();
    let mut total = Resources::new();
    for container in &spec.containers {
        total.add(&container_list(container, limits, &mut refused));
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for init in spec.init_containers.iter().flatten() {
        let amounts = container_list(init, limits, &mut refused);
        if is_sidecar(init) {
            sidecars.add(&amounts);
            total.add(&amounts);
        } else {
            let mut with_sidecars = sidecars.clone();
            with_sidecars.add(&amounts);
            init_peak.max_with(&with_sidecars);
        }
    }
    total.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&refused.list(overhead, &|| "overhead".to_string()));
    }
    (total, refused.0)
}

/// Pod requests and, when an amount is not an exact count (malformed,
/// negative or beyond `i64`), the reason: such a pod must not be placed.
pub fn pod_requests_checked(pod: &Pod) -> (Resources, Option<String>) {
    pod_resources(pod, false)
}

/// Pod limits, as [`pod_requests_checked`].
pub fn pod_limits_checked(pod: &Pod) -> (Resources, Option<String>) {
    pod_resources(pod, true)
}

/// cpu and memory requests with kube-scheduler's non-zero defaults applied
/// per container (used by least/most-allocated scoring).
pub fn pod_non_zero_requests(pod: &Pod) -> (i64, i64) {
    let Some(spec) = pod.spec.as_ref() else {
        return (0, 0);
    };
    let mut cpu = 0i64;
    let mut memory = 0i64;
    let non_zero = |container: &Container| {
        let requests = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        // A refused amount counts as for a bound pod (the pod itself is
        // refused at pre-filter).
        let read = |name: &str, default: i64| {
            requests.and_then(|r| r.get(name)).map_or(default, |q| {
                exact_amount(name, q).unwrap_or_else(|_| refused_amount(q))
            })
        };
        (
            read(RESOURCE_CPU, DEFAULT_MILLI_CPU_REQUEST),
            read(RESOURCE_MEMORY, DEFAULT_MEMORY_REQUEST),
        )
    };
    for container in &spec.containers {
        let (c, m) = non_zero(container);
        cpu = cpu.saturating_add(c);
        memory = memory.saturating_add(m);
    }
    for init in spec.init_containers.iter().flatten() {
        let (c, m) = non_zero(init);
        if is_sidecar(init) {
            cpu = cpu.saturating_add(c);
            memory = memory.saturating_add(m);
        } else {
            cpu = cpu.max(c);
            memory = memory.max(m);
        }
    }
    (cpu, memory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn requests_sum_containers_and_respect_init_peak_and_overhead() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1", "kubernetes.io/batch-cpu": "2000"}}}
                ],
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "4"}}}
                ],
                "overhead": {"cpu": "100m"}
            }
        }));
        let (requests, refused) = pod_requests_checked(&p);
        assert_eq!(refused, None);
        assert_eq!(requests.get("cpu"), 4100);
        assert_eq!(requests.get("memory"), 1 << 30);
        assert_eq!(requests.get(BATCH_CPU), 2000);
        assert_eq!(
            pod_non_zero_requests(&p),
            (4000, (1 << 30) + DEFAULT_MEMORY_REQUEST)
        );
    }

    #[test]
    fn requests_that_are_not_exact_counts_are_refused_with_the_reason() {
        let with = |cpu: &str, batch: &str| {
            pod(json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "main", "resources": {"requests": {
                    "cpu": cpu, "kubernetes.io/batch-cpu": batch}}}]}
            }))
        };
        let (requests, refused) = pod_requests_checked(&with("1500m", "2000"));
        assert_eq!((requests.get("cpu"), refused), (1500, None));
        for (cpu, batch, reason) in [
            (
                "1e40",
                "1",
                "container \"main\" requests cpu: invalid quantity \"1e40\"",
            ),
            (
                "1",
                "lots",
                "requests kubernetes.io/batch-cpu: invalid quantity \"lots\"",
            ),
            (
                "1",
                "-1",
                "kubernetes.io/batch-cpu: quantity \"-1\" is negative",
            ),
            // Parses, but is 1e20 units: beyond i64.
            ("1", "100E", "larger than the scheduler can count"),
            // 9.2e15 cores are 9.2e18 milli-cores: beyond i64 only as cpu.
            (
                "9300000000000000",
                "1",
                "cpu: quantity \"9300000000000000\" is larger",
            ),
        ] {
            let (requests, refused) = pod_requests_checked(&with(cpu, batch));
            let refused = refused.unwrap_or_default();
            assert!(refused.contains(reason), "{cpu} {batch}: {refused}");
            // Too large counts as the most it could mean, never as zero.
            if cpu != "1" {
                assert_eq!(requests.get("cpu"), i64::MAX, "{cpu}");
            }
        }
        assert_eq!(
            exact_amount("memory", &Quantity("9223372036854775807".into())),
            Ok(i64::MAX)
        );
        assert!(exact_amount("memory", &Quantity("9223372036854775808".into())).is_err());
    }

    #[test]
    fn extra_names_add_and_format_back() {
        let mut a = Resources::new();
        a.set("nvidia.com/gpu", 2);
        a.set("cpu", 1500);
        let mut b = a.clone();
        b.add(&a);
        assert_eq!(b.get("nvidia.com/gpu"), 4);
        let list = b.to_list();
        assert_eq!(list["cpu"].0, "3");
        assert_eq!(list["nvidia.com/gpu"].0, "4");
        b.sub(&a);
        assert_eq!(b, a);
    }
}
