//! The ClusterColocationProfile controller (upstream
//! `pkg/controller/colocationprofile`; controller name `colocationprofile`,
//! feature gate `ColocationProfileController`, off by default).
//!
//! The pod mutating webhook applies profiles when a pod is created. This
//! controller applies them again, later, to pods that are still pending and
//! unscheduled: a profile created or changed while pods wait in the queue
//! then reaches them (labels, annotations, key mappings, label suffixes, QoS
//! class, Koordinator priority and the profile's `patch`). Scheduler name,
//! priority class and resources are left alone, as upstream leaves them: the
//! API server does not let them change after creation.
//!
//! Only profiles labelled `config.koordinator.sh/controller-managed=true` are
//! reconciled, unless `--colocation-profile-reconcile-by-default`. Each
//! (profile version, pod) pair is patched at most once per
//! `--colocation-profile-force-update-pod-duration`, and pod patches are rate
//! limited (`--colocation-profile-update-pod-qps`, `-burst`).
//!
//! [`plan_profile`] is the decision core (no I/O, clock and dice passed in);
//! [`run`] keeps the caches, patches pods and repeats every
//! `--colocation-profile-reconcile-interval` and on profile changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use apis::config::v1alpha1::ClusterColocationProfile;
use apis::configuration::{SelectorError, is_empty_selector, label_selector_matches};
use apis::extension::should_reconcile_profile;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::ControllerMetrics;
use crate::webhook::pod_mutating::{
    ProfileError, apply_profile_metadata, apply_profile_patch, profile_percent,
};

/// Controller name in `--controllers`.
pub const CONTROLLER_NAME: &str = "colocationprofile";
/// Feature gate that turns the controller on (upstream's name and default).
pub const FEATURE_GATE: &str = "ColocationProfileController";
pub const FEATURE_GATE_DEFAULT: bool = false;

/// Shortest pause between two passes triggered by profile changes.
const MIN_PASS_INTERVAL: Duration = Duration::from_secs(2);
/// Concurrent pod patches.
const PATCH_CONCURRENCY: usize = 8;

/// Upstream's `colocationprofile.InitFlags`, same names and defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct ColocationProfileArgs {
    /// Reconcile every ClusterColocationProfile, not only those labelled
    /// `config.koordinator.sh/controller-managed=true`.
    #[arg(
        long = "colocation-profile-reconcile-by-default",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = koord_common::cli::parse_go_bool_flag,
        value_name = "BOOL"
    )]
    pub reconcile_by_default: bool,

    /// Period between two reconciliations of every profile.
    #[arg(
        long = "colocation-profile-reconcile-interval",
        default_value = "30s",
        value_parser = parse_positive_duration
    )]
    pub reconcile_interval: Duration,

    /// A pod patched for one version of a profile is not patched again for
    /// that version within this duration.
    #[arg(
        long = "colocation-profile-force-update-pod-duration",
        default_value = "5m",
        value_parser = koord_common::cluster::parse_duration
    )]
    pub force_update_pod_duration: Duration,

    /// How often expired entries of that memory are dropped.
    #[arg(
        long = "colocation-profile-expire-pod-cache-duration",
        default_value = "10m",
        value_parser = koord_common::cluster::parse_duration
    )]
    pub expire_pod_cache_duration: Duration,

    /// Pod patches per second (token bucket rate).
    #[arg(
        long = "colocation-profile-update-pod-qps",
        default_value_t = 10.0,
        value_parser = parse_qps
    )]
    pub update_pod_qps: f64,

    /// Pod patches allowed in a burst (token bucket size).
    #[arg(
        long = "colocation-profile-update-pod-qps-burst",
        default_value_t = 100
    )]
    pub update_pod_qps_burst: u32,
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = koord_common::cluster::parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be greater than 0".to_owned());
    }
    Ok(duration)
}

fn parse_qps(text: &str) -> Result<f64, String> {
    let qps: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("invalid value {text:?}: not a number"))?;
    if !qps.is_finite() || qps < 0.0 {
        return Err(format!(
            "invalid value {text:?}: must be a finite number >= 0"
        ));
    }
    Ok(qps)
}

/// A token bucket as Go's `rate.Limiter.Allow` behaves: starts full, refills
/// at `rate` per second up to `burst`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        TokenBucket {
            rate,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Which (profile version, pod) pairs were handled recently.
#[derive(Clone, Debug)]
pub struct UpdateMemory {
    expires: HashMap<String, Instant>,
    ttl: Duration,
    prune_every: Duration,
    last_prune: Instant,
}

impl UpdateMemory {
    pub fn new(ttl: Duration, prune_every: Duration, now: Instant) -> Self {
        UpdateMemory {
            expires: HashMap::new(),
            ttl,
            prune_every,
            last_prune: now,
        }
    }

    pub fn contains(&self, key: &str, now: Instant) -> bool {
        self.expires.get(key).is_some_and(|expiry| *expiry > now)
    }

    pub fn remember(&mut self, key: String, now: Instant) {
        self.expires.insert(key, now + self.ttl);
    }

    pub fn forget(&mut self, key: &str) {
        self.expires.remove(key);
    }

    /// Drops expired entries, at most every `prune_every`.
    pub fn prune(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_prune) < self.prune_every {
            return;
        }
        self.expires.retain(|_, expiry| *expiry > now);
        self.last_prune = now;
    }

    pub fn len(&self) -> usize {
        self.expires.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expires.is_empty()
    }
}

/// The key upstream remembers a handled pod by: the profile's
/// resourceVersion and the pod's UID, so a changed profile applies again.
pub fn update_key(profile: &ClusterColocationProfile, pod: &Pod) -> String {
    format!(
        "{}/{}",
        profile.metadata.resource_version.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// One pod patch to send.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedPatch {
    pub namespace: String,
    pub name: String,
    /// Remembered once the patch succeeded.
    pub update_key: String,
    pub patch: json_patch::Patch,
}

/// Counts of one profile's reconciliation (upstream's `ReconcileSummary`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileSummary {
    /// Pods the profile should be applied to now.
    pub desired: usize,
    /// Of those, pods the profile already describes (nothing to patch).
    pub unchanged: usize,
    /// Of those, pods to patch.
    pub to_patch: usize,
    /// Of those, pods left for a later pass by the rate limit.
    pub rate_limited: usize,
    /// Pods the profile's probability skipped.
    pub skipped: usize,
    /// Pods handled for this profile version recently.
    pub cached: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfilePlan {
    pub patches: Vec<PlannedPatch>,
    pub summary: ReconcileSummary,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("clusterColocationProfile {profile}: invalid {which}: {source}")]
    Selector {
        profile: String,
        which: &'static str,
        source: SelectorError,
    },
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

/// What one reconciliation of `profile` reads and keeps.
pub struct PlanInput<'a> {
    pub reconcile_by_default: bool,
    /// Every pod in the cache.
    pub pods: &'a [Arc<Pod>],
    /// Labels of every namespace, by name.
    pub namespace_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
}

/// Plans one reconciliation of `profile`: which pending, unscheduled pods
/// its selectors match, which of them to patch now and with what. Pods
/// without a change are remembered at once; the caller remembers patched
/// pods once their patch succeeded. `roll` returns a number in `0..100`.
pub fn plan_profile(
    profile: &ClusterColocationProfile,
    input: &PlanInput<'_>,
    memory: &mut UpdateMemory,
    bucket: &mut TokenBucket,
    now: Instant,
    roll: &mut dyn FnMut() -> i64,
) -> Result<ProfilePlan, PlanError> {
    let mut plan = ProfilePlan::default();
    if profile.metadata.deletion_timestamp.is_some() {
        return Ok(plan);
    }
    let profile_name = profile.name_any();
    let reconciled = input.reconcile_by_default
        || profile
            .metadata
            .labels
            .as_ref()
            .is_some_and(should_reconcile_profile);
    if !reconciled {
        return Ok(plan);
    }
    // Upstream: no selector matches nothing.
    let Some(selector) = &profile.spec.selector else {
        return Ok(plan);
    };
    let selector_error = |which: &'static str| {
        let profile = profile_name.clone();
        move |source| PlanError::Selector {
            profile,
            which,
            source,
        }
    };
    let no_labels = BTreeMap::new();
    for pod in input.pods {
        if !is_pending_unscheduled(pod) {
            continue;
        }
        let labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
        if !label_selector_matches(selector, labels).map_err(selector_error("selector"))? {
            continue;
        }
        if let Some(namespace_selector) = &profile.spec.namespace_selector
            && !is_empty_selector(namespace_selector)
        {
            // A namespace the cache does not know does not match.
            let Some(namespace_labels) = pod
                .metadata
                .namespace
                .as_deref()
                .and_then(|namespace| input.namespace_labels.get(namespace))
            else {
                continue;
            };
            if !label_selector_matches(namespace_selector, namespace_labels)
                .map_err(selector_error("namespaceSelector"))?
            {
                continue;
            }
        }
        let percent = profile_percent(profile)?;
        if percent <= 0 || (percent < 100 && roll() > percent) {
            plan.summary.skipped += 1;
            continue;
        }
        let key = update_key(profile, pod);
        if memory.contains(&key, now) {
            plan.summary.cached += 1;
            continue;
        }
        plan.summary.desired += 1;
        if !bucket.allow(now) {
            plan.summary.rate_limited += 1;
            continue;
        }
        let mut mutated = Pod::clone(pod);
        apply_profile_metadata(&mut mutated, profile);
        apply_profile_patch(&mut mutated, profile)?;
        let (Ok(before), Ok(after)) =
            (serde_json::to_value(&**pod), serde_json::to_value(&mutated))
        else {
            continue;
        };
        let patch = json_patch::diff(&before, &after);
        if patch.0.is_empty() {
            plan.summary.unchanged += 1;
            memory.remember(key, now);
            continue;
        }
        plan.summary.to_patch += 1;
        plan.patches.push(PlannedPatch {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.name_any(),
            update_key: key,
            patch,
        });
    }
    Ok(plan)
}

/// Numbers in `0..100` for profile probabilities (xorshift; only fairness
/// matters, not unpredictability).
struct Dice(u64);

impl Dice {
    fn seeded() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        Dice(nanos | 1)
    }

    fn roll(&mut self) -> i64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % 100) as i64
    }
}

fn is_pending_unscheduled(pod: &Pod) -> bool {
    let unscheduled = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .is_none_or(str::is_empty);
    let pending = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        == Some("Pending");
    unscheduled && pending
}

/// Runs the controller until `shutdown`: caches profiles and namespaces
/// (pods come from the controllers' cache), reconciles every profile each
/// interval and after profile changes.
pub async fn run(
    client: kube::Client,
    args: ColocationProfileArgs,
    pods: Store<Pod>,
    metrics: ControllerMetrics,
    shutdown: koord_common::Shutdown,
) {
    let notify = Arc::new(Notify::new());
    let profiles: Store<ClusterColocationProfile> = crate::reflector::spawn_reflector(
        Api::all(client.clone()),
        kube::runtime::watcher::Config::default(),
        notify.clone(),
        "clustercolocationprofiles",
    );
    // Namespace changes do not need a pass of their own.
    let namespaces: Store<Namespace> = crate::reflector::spawn_reflector(
        Api::all(client.clone()),
        kube::runtime::watcher::Config::default(),
        Arc::new(Notify::new()),
        "namespaces",
    );
    tokio::select! {
        ready = async {
            profiles.wait_until_ready().await?;
            namespaces.wait_until_ready().await
        } => {
            if ready.is_err() {
                tracing::error!("colocationprofile: a cache stopped before syncing");
                return;
            }
        }
        _ = shutdown.wait() => return,
    }
    tracing::info!(
        reconcile_by_default = args.reconcile_by_default,
        interval = ?args.reconcile_interval,
        "colocationprofile controller running"
    );
    let start = Instant::now();
    let mut memory = UpdateMemory::new(
        args.force_update_pod_duration,
        args.expire_pod_cache_duration,
        start,
    );
    let mut bucket = TokenBucket::new(args.update_pod_qps, args.update_pod_qps_burst, start);
    let mut dice = Dice::seeded();
    loop {
        let started = Instant::now();
        let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
            .state()
            .iter()
            .map(|ns| (ns.name_any(), ns.labels().clone()))
            .collect();
        let all_pods = pods.state();
        let input = PlanInput {
            reconcile_by_default: args.reconcile_by_default,
            pods: &all_pods,
            namespace_labels: &namespace_labels,
        };
        let mut profile_list = profiles.state();
        profile_list.sort_by_key(|profile| profile.name_any());
        for profile in profile_list {
            let mut roll = || dice.roll();
            let plan = match plan_profile(
                &profile,
                &input,
                &mut memory,
                &mut bucket,
                Instant::now(),
                &mut roll,
            ) {
                Ok(plan) => plan,
                Err(err) => {
                    tracing::warn!(profile = %profile.name_any(), error = %err, "colocationprofile: cannot reconcile the profile");
                    metrics.count_colocation_profile_pods("invalidProfile", 1);
                    continue;
                }
            };
            let summary = plan.summary;
            let patched = apply_patches(&client, plan.patches, &mut memory).await;
            record_summary(&metrics, &summary, patched);
            if summary != ReconcileSummary::default() {
                tracing::info!(profile = %profile.name_any(), ?summary, patched, "colocationprofile: reconciled");
            }
        }
        memory.prune(Instant::now());
        tokio::select! {
            _ = notify.notified() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + MIN_PASS_INTERVAL) => {}
                    _ = shutdown.wait() => return,
                }
            }
            _ = tokio::time::sleep(args.reconcile_interval) => {}
            _ = shutdown.wait() => return,
        }
    }
}

/// Sends the patches; returns how many succeeded (those are remembered).
async fn apply_patches(
    client: &kube::Client,
    patches: Vec<PlannedPatch>,
    memory: &mut UpdateMemory,
) -> usize {
    let results: Vec<(String, Result<(), kube::Error>, String)> =
        futures::stream::iter(patches.into_iter().map(|planned| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &planned.namespace);
            async move {
                let result = api
                    .patch(
                        &planned.name,
                        &PatchParams::default(),
                        &Patch::<()>::Json(planned.patch),
                    )
                    .await
                    .map(|_| ());
                (
                    planned.update_key,
                    result,
                    format!("{}/{}", planned.namespace, planned.name),
                )
            }
        }))
        .buffer_unordered(PATCH_CONCURRENCY)
        .collect()
        .await;
    let now = Instant::now();
    let mut patched = 0;
    for (key, result, pod) in results {
        match result {
            Ok(()) => {
                memory.remember(key, now);
                patched += 1;
            }
            Err(err) => {
                tracing::warn!(%pod, error = %err, "colocationprofile: pod patch failed; retried next pass");
            }
        }
    }
    patched
}

fn record_summary(metrics: &ControllerMetrics, summary: &ReconcileSummary, patched: usize) {
    metrics.count_colocation_profile_pods("patched", patched);
    metrics.count_colocation_profile_pods("patchFailed", summary.to_patch - patched);
    metrics.count_colocation_profile_pods("unchanged", summary.unchanged);
    metrics.count_colocation_profile_pods("rateLimited", summary.rate_limited);
    metrics.count_colocation_profile_pods("skipped", summary.skipped);
}

#[cfg(test)]
mod tests;
