//! Coscheduling (gang scheduling) for the extender, which has no Permit
//! phase to park members in. A member of a gang that is not yet satisfied
//! passes pre-filter only when every gang of its gang group can be
//! completed at once: the members still needed, packed first-fit onto the
//! free resources of the nodes each may use by kube-scheduler's basic node
//! checks (after the admitted but unbound members of other groups), all
//! fit. That admission is recorded at reserve time as the
//! group's *admitted batch*, whose members then pass until they bind; every
//! other member is held with a "waiting for gang" reason and nothing binds.
//!
//! Match policies decide which bound members count toward min-member and
//! whether a once-satisfied group stays satisfied; the mode decides what
//! happens to an admitted batch that no longer fits together (Strict: the
//! batch is revoked and its unbound members wait again; NonStrict: they
//! keep trying one by one). A group that waits longer than its wait time is
//! rejected. See `docs/plugins-part2.md` for the differences from upstream.

mod gang;
pub mod permit;
mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use apis::extension::GoDuration;
use apis::extension::coscheduling::{ANNOTATION_GANG_TIMEOUT, GangMatchPolicy, GangMode};
use apis::scheduling_sigs::v1alpha1::PodGroupStatus;
use serde::Deserialize;

pub use gang::{DEFAULT_TIMEOUT, Gang, GangDefaults, GangError, GangSource, gang_key_of};
pub use status::{Members, desired_status};

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};
use koord_common::sync::MutexExt;

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::ConfigError;
use crate::cow::CowMap;
use crate::framework::{CycleState, Permit, PermitRelease, Plugin, Rejection, StatusWrite};
use crate::node_checks::{check_pod_on_node, selects_nodes};
use crate::resources::Resources;

/// Node allocatable pod count.
const RESOURCE_PODS: &str = "pods";

pub const NAME: &str = "Coscheduling";

/// API resource of PodGroup status writes.
pub const POD_GROUP_RESOURCE: &str = "podgroups.scheduling.sigs.k8s.io";

/// API resource of the timeout annotation writes.
pub const POD_RESOURCE: &str = "pods";

/// Prefix of every hold reason.
pub const REASON_WAITING_FOR_GANG: &str = "waiting for gang";

/// A write the watch has not confirmed after this long is sent again.
pub const WRITE_RETRY_AFTER: Duration = Duration::from_secs(10);

/// How often PodGroup status is written at most (all groups together).
pub const STATUS_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// `CoschedulingArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingArgs {
    /// Wait time of gangs that set none (default 600s).
    #[serde(default)]
    pub default_timeout: Option<GoDuration>,
    /// Match policy of gangs that set none (default once-satisfied).
    #[serde(default)]
    pub default_match_policy: Option<String>,
    /// Accepted for compatibility (must be ≥ 1, as upstream validates).
    #[serde(default)]
    pub controller_workers: Option<i64>,
    /// Accepted for compatibility; not used by the extender.
    #[serde(default)]
    pub skip_check_schedule_cycle: Option<bool>,
    /// Accepted for compatibility; not used by the extender.
    #[serde(default)]
    pub enable_preemption: Option<bool>,
    /// Accepted for compatibility; not used by the extender.
    #[serde(default)]
    pub aware_network_topology: Option<bool>,
}

impl CoschedulingArgs {
    /// Validated defaults (upstream rejects a negative timeout and fewer
    /// than one controller worker).
    pub fn defaults(&self) -> Result<GangDefaults, ConfigError> {
        let invalid = |message: String| ConfigError::InvalidArgs {
            plugin: NAME.to_string(),
            message,
        };
        let timeout = match self.default_timeout {
            None => DEFAULT_TIMEOUT,
            Some(d) => d
                .to_std()
                .ok_or_else(|| invalid(format!("defaultTimeout {d} is negative")))?,
        };
        if self.controller_workers.is_some_and(|w| w < 1) {
            return Err(invalid("controllerWorkers must be at least 1".into()));
        }
        let match_policy = match self.default_match_policy.as_deref() {
            None | Some("") => GangMatchPolicy::OnceSatisfied,
            Some(text) => text
                .parse()
                .map_err(|e| invalid(format!("defaultMatchPolicy: {e}")))?,
        };
        Ok(GangDefaults {
            timeout,
            match_policy,
        })
    }
}

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args: CoschedulingArgs = crate::config::parse_args(NAME, args)?;
    Ok(Box::new(Coscheduling::new(args.defaults()?)))
}

/// State changed while deciding (behind a lock: pre-filter runs under the
/// scheduler's read lock).
#[derive(Debug, Default)]
struct Runtime {
    /// Group id → members admitted together and not bound yet.
    admitted: HashMap<String, BTreeSet<String>>,
    /// Gang key → when a member first had to wait while others could be
    /// placed (upstream: first member waiting in Permit).
    waiting_since: HashMap<String, SystemTime>,
}

/// See the module docs.
///
/// The maps are copy-on-write ([`CowMap`]): a clone (a published snapshot
/// of the state) shares them, and a write after it copies one shard. The
/// runtime is shared outright.
#[derive(Default, Clone)]
pub struct Coscheduling {
    defaults: GangDefaults,
    /// Gang key → keys of its pods in the cache (in key order).
    members: CowMap<String, BTreeSet<String>>,
    /// Gangs with a member whose binding the watch confirmed (upstream's
    /// once-resource-satisfied, shared by the whole group); a set.
    ever_bound: CowMap<String, ()>,
    /// Shared by every copy of the plugin: decisions in flight, which
    /// `/filter` calls on any published snapshot make and `/bind` reads.
    runtime: Arc<Mutex<Runtime>>,
    /// PodGroup key → status last written, and when.
    written: CowMap<String, (PodGroupStatus, SystemTime)>,
    last_write_at: Option<SystemTime>,
    /// Pods given the timeout annotation, and when.
    marked_timed_out: CowMap<String, SystemTime>,
    /// Members that ended (Succeeded/Failed) and are not deleted yet, by pod
    /// key; they left the cache but still count in PodGroup status.
    ended: CowMap<String, EndedMember>,
}

/// A gang member that ended.
#[derive(Debug, Clone)]
struct EndedMember {
    gang: String,
    succeeded: bool,
    bound: bool,
}

/// A gang with its members split by state.
struct GangState<'a> {
    gang: Gang,
    /// Bound, or assumed and being bound through the API.
    bound: usize,
    /// Assumed and held at Permit (see [`crate::permit`]).
    held: usize,
    pending: Vec<&'a Arc<PodInfo>>,
}

impl Coscheduling {
    pub fn new(defaults: GangDefaults) -> Self {
        Self {
            defaults,
            ..Self::default()
        }
    }

    fn runtime(&self) -> MutexGuard<'_, Runtime> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.runtime.lock_or_recover()
    }

    fn member_pods<'a>(
        &'a self,
        key: &str,
        cache: &'a ClusterCache,
    ) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        self.members
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| cache.pod(k))
    }

    /// Resolves gang `key`, with `pod`'s settings when it is a member.
    pub fn gang(
        &self,
        key: &str,
        pod: Option<&PodInfo>,
        cache: &ClusterCache,
    ) -> Result<Gang, GangError> {
        let first = self.member_pods(key, cache).next();
        gang::resolve(key, pod, first.map(|p| &**p), cache, self.defaults)
    }

    fn state<'a>(&'a self, gang: Gang, cache: &'a ClusterCache) -> GangState<'a> {
        let mut bound = 0;
        let mut held = 0;
        let mut pending = Vec::new();
        for pod in self.member_pods(&gang.key, cache) {
            if pod.held {
                held += 1;
            } else if pod.node.is_some() {
                bound += 1;
            } else {
                pending.push(pod);
            }
        }
        GangState {
            gang,
            bound,
            held,
            pending,
        }
    }

    fn group_satisfied_once(&self, group: &[String]) -> bool {
        group.iter().any(|g| self.ever_bound.contains_key(g))
    }

    /// When gang `gang` started waiting, if it did.
    fn wait_started(&self, gang: &Gang, runtime: &Runtime) -> Option<SystemTime> {
        let recorded = runtime.waiting_since.get(&gang.key).copied();
        match (recorded, gang.schedule_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Unbound members of other groups' admitted batches: they are about to
    /// bind, so they are packed before anyone else.
    fn admitted_elsewhere<'a>(
        &self,
        group_id: &str,
        runtime: &Runtime,
        cache: &'a ClusterCache,
    ) -> Vec<&'a Arc<PodInfo>> {
        runtime
            .admitted
            .iter()
            .filter(|(id, _)| id.as_str() != group_id)
            .flat_map(|(_, keys)| keys.iter())
            .filter_map(|k| cache.pod(k))
            .filter(|p| p.node.is_none())
            .collect()
    }

    /// Decides for a member of an unsatisfied group; `Ok(batch)` lists the
    /// members placed together (the pod first when it fits).
    fn admit(
        &self,
        pod: &PodInfo,
        gang: &Gang,
        cache: &ClusterCache,
        now: SystemTime,
    ) -> Result<Vec<String>, Rejection> {
        let group_id = gang.group_id();
        let mut runtime = self.runtime();

        // An admitted batch passes while it still fits together.
        if let Some(batch) = runtime.admitted.get(&group_id)
            && batch.contains(&pod.key)
        {
            let mut unbound: Vec<&Arc<PodInfo>> = batch
                .iter()
                .filter_map(|k| cache.pod(k))
                .filter(|p| p.node.is_none())
                .collect();
            unbound.sort_by_key(|p| p.key != pod.key);
            let others = self.admitted_elsewhere(&group_id, &runtime, cache);
            let fits = first_fit(&others, &unbound, cache).iter().all(|f| *f);
            if fits || gang.mode == GangMode::NonStrict {
                return Ok(Vec::new());
            }
            // Strict: one member cannot be placed any more, so the batch's
            // unbound members wait for the group again.
            runtime.admitted.remove(&group_id);
        }

        // Every gang of the group, in group order.
        let mut states = Vec::with_capacity(gang.group.len());
        let mut missing = Vec::new();
        for key in &gang.group {
            let resolved = if *key == gang.key {
                Ok(gang.clone())
            } else {
                self.gang(key, None, cache)
            };
            match resolved {
                Ok(g) => states.push(self.state(g, cache)),
                Err(err) => missing.push(err.to_string()),
            }
        }
        let label = if gang.group.len() > 1 {
            format!("group [{}]", group_id)
        } else {
            gang.key.clone()
        };
        // Missing gangs or members: preemption cannot help (upstream:
        // UnschedulableAndUnresolvable from its basic check).
        if !missing.is_empty() {
            return Err(Rejection::unresolvable(format!(
                "{REASON_WAITING_FOR_GANG} {label}: {}",
                missing.join("; ")
            )));
        }

        // Timed out: the group cannot complete any more.
        for state in &states {
            let Some(started) = self.wait_started(&state.gang, &runtime) else {
                continue;
            };
            let deadline = started + state.gang.wait_time;
            if now >= deadline {
                let message = format!(
                    "gang {} timed out: its members did not become schedulable together within {}",
                    state.gang.key,
                    GoDuration::from_std(state.gang.wait_time)
                );
                // Strict rejects the whole group for good; NonStrict only
                // the timed-out gang, other gangs of the group just wait.
                return Err(
                    if gang.mode == GangMode::Strict || state.gang.key == gang.key {
                        Rejection::unresolvable(message)
                    } else {
                        Rejection::unschedulable(format!(
                            "{REASON_WAITING_FOR_GANG} {label}: {message}"
                        ))
                    },
                );
            }
        }

        // Enough members must exist before anything is tried.
        for state in &states {
            let exist = state.bound + state.held + state.pending.len();
            if exist < state.gang.min_member {
                return Err(Rejection::unresolvable(format!(
                    "{REASON_WAITING_FOR_GANG} {}: {exist} of {} members exist",
                    state.gang.key, state.gang.min_member
                )));
            }
        }
        if !states
            .iter()
            .any(|s| s.gang.key == gang.key && s.pending.iter().any(|p| p.key == pod.key))
        {
            // An extender request for a pod the watch has not delivered yet.
            return Err(Rejection::unschedulable(format!(
                "{REASON_WAITING_FOR_GANG} {}: pod {} is not in the scheduler cache yet",
                gang.key, pod.key
            )));
        }

        // Pack the members still needed per gang, this pod first.
        let mut candidates: Vec<(usize, &Arc<PodInfo>)> = Vec::new();
        let mut needed = Vec::with_capacity(states.len());
        for (index, state) in states.iter().enumerate() {
            // Held members already have their place (they are assumed).
            let counted = match state.gang.match_policy {
                GangMatchPolicy::OnlyWaiting => state.held,
                GangMatchPolicy::WaitingAndRunning | GangMatchPolicy::OnceSatisfied => {
                    state.bound + state.held
                }
            };
            let need = state.gang.min_member.saturating_sub(counted);
            needed.push(need);
            for member in &state.pending {
                if member.key == pod.key {
                    candidates.insert(0, (index, member));
                } else if need > 0 {
                    candidates.push((index, member));
                }
            }
        }
        let others = self.admitted_elsewhere(&group_id, &runtime, cache);
        let mut placed = vec![0usize; states.len()];
        let mut batch = Vec::new();
        let fitted = first_fit_needed(&others, &candidates, &needed, cache);
        for ((index, member), fits) in candidates.iter().zip(&fitted) {
            if *fits {
                placed[*index] += 1;
                batch.push(member.key.clone());
            }
        }
        let short = states
            .iter()
            .zip(needed.iter().zip(&placed))
            .find(|(_, (need, got))| got < need);
        // The group completes; should this pod itself fit nowhere (it was
        // packed first), its own filters say so.
        let Some((state, (need, got))) = short else {
            return Ok(batch);
        };
        if placed.iter().any(|n| *n > 0) {
            // Some member could go ahead and has to wait for the rest: the
            // group's wait starts now (upstream: waiting in Permit).
            for state in &states {
                runtime
                    .waiting_since
                    .entry(state.gang.key.clone())
                    .or_insert(now);
            }
        }
        let counted = state.gang.min_member.saturating_sub(*need);
        Err(Rejection::unschedulable(format!(
            "{REASON_WAITING_FOR_GANG} {}: only {} of {} members can be placed together",
            state.gang.key,
            counted + got,
            state.gang.min_member
        )))
    }

    /// What Permit counts for each gang of `gang`'s group; `pod` (assumed,
    /// about to be held) counts as held.
    fn permit_counts(
        &self,
        gang: &Gang,
        pod: &PodInfo,
        cache: &ClusterCache,
    ) -> Vec<permit::GangCount> {
        gang.group
            .iter()
            .map(|key| {
                let resolved = if *key == gang.key {
                    Ok(gang.clone())
                } else {
                    self.gang(key, None, cache)
                };
                let Ok(resolved) = resolved else {
                    return permit::GangCount {
                        known: false,
                        min_member: 1,
                        match_policy: gang.match_policy,
                        waiting: 0,
                        bound: 0,
                    };
                };
                let mut waiting = 0;
                let mut bound = 0;
                for member in self.member_pods(key, cache) {
                    if member.key == pod.key || member.held {
                        waiting += 1;
                    } else if member.node.is_some() {
                        bound += 1;
                    }
                }
                permit::GangCount {
                    known: true,
                    min_member: resolved.min_member,
                    match_policy: resolved.match_policy,
                    waiting,
                    bound,
                }
            })
            .collect()
    }

    /// The group's satisfaction ignoring capacity (for admission shortcuts).
    fn passes_freely(&self, gang: &Gang, cache: &ClusterCache) -> bool {
        match gang.match_policy {
            GangMatchPolicy::OnceSatisfied => self.group_satisfied_once(&gang.group),
            // Bound members already satisfy min-member for every gang.
            GangMatchPolicy::WaitingAndRunning => gang.group.iter().all(|key| {
                let resolved = if *key == gang.key {
                    Ok(gang.clone())
                } else {
                    self.gang(key, None, cache)
                };
                resolved.is_ok_and(|g| {
                    let min = g.min_member;
                    self.state(g, cache).bound >= min
                })
            }),
            GangMatchPolicy::OnlyWaiting => false,
        }
    }

    /// Gangs that timed out and their pending members.
    pub fn timed_out(
        &self,
        cache: &ClusterCache,
        now: SystemTime,
    ) -> BTreeMap<String, Vec<String>> {
        let runtime = self.runtime();
        let mut out = BTreeMap::new();
        for key in self.members.keys() {
            let Ok(gang) = self.gang(key, None, cache) else {
                continue;
            };
            if self.passes_freely(&gang, cache) {
                continue;
            }
            if let Some(started) = self.wait_started(&gang, &runtime)
                && now >= started + gang.wait_time
            {
                let pending: Vec<String> = self
                    .member_pods(key, cache)
                    .filter(|p| p.node.is_none())
                    .map(|p| p.key.clone())
                    .collect();
                out.insert(key.clone(), pending);
            }
        }
        out
    }

    /// The PodGroup status the group should show now.
    pub fn pod_group_status(
        &self,
        key: &str,
        cache: &ClusterCache,
        now: SystemTime,
    ) -> Option<PodGroupStatus> {
        let pod_group = cache.pod_groups.get(key)?;
        let mut members = Members::count(self.member_pods(key, cache).map(|p| &**p));
        for ended in self.ended.values().filter(|ended| ended.gang == key) {
            members.add_ended(ended.succeeded, ended.bound);
        }
        Some(desired_status(pod_group, &members, now))
    }
}

/// Whether a write made at `at` may still be on its way.
fn recently(at: Option<&SystemTime>, now: SystemTime) -> bool {
    at.and_then(|at| now.duration_since(*at).ok())
        .is_some_and(|elapsed| elapsed < WRITE_RETRY_AFTER)
}

fn fits(request: &Resources, free: &Resources) -> bool {
    request
        .iter()
        .all(|(name, amount)| amount <= free.get(name))
}

/// First-fit packing onto the nodes' free resources, in name order, using
/// only the nodes kube-scheduler would let the member onto (see
/// [`NodeRule`]). Free resources only shrink and a member's usable nodes are
/// fixed, so a request that did not fit a node never fits it later in the
/// same pack: the search for an equal request of an equally constrained
/// member resumes where the previous one stopped (gang members are usually
/// alike).
struct Packer<'a> {
    nodes: Vec<&'a NodeInfo>,
    /// Free resources per node; the flag says whether pods are counted.
    free: Vec<(Resources, bool)>,
    rules: Vec<NodeRule>,
    /// (rule, request) → node position the next search starts at.
    resume: Vec<(usize, Resources, usize)>,
}

/// The nodes members with one set of node constraints (node name,
/// tolerations, node selector, required node affinity) may use, decided by
/// kube-scheduler's basic node checks once per node and constraint set, not
/// once per member.
struct NodeRule {
    /// A member with these constraints; others are compared against it.
    member: Arc<PodInfo>,
    /// The member picks nodes itself; otherwise only cordoned or tainted
    /// nodes can turn it away and the others need no check.
    selects_nodes: bool,
    /// Per node position: checked yet, and the verdict.
    usable: Vec<Option<bool>>,
}

impl NodeRule {
    fn new(member: &Arc<PodInfo>, node_count: usize) -> Self {
        Self {
            member: Arc::clone(member),
            selects_nodes: selects_nodes(member),
            usable: vec![None; node_count],
        }
    }

    fn allows(&mut self, position: usize, node: &NodeInfo) -> bool {
        if !self.selects_nodes && !node.cordoned_or_tainted {
            return true;
        }
        *self.usable[position].get_or_insert_with(|| check_pod_on_node(&self.member, node).is_ok())
    }
}

/// The spec fields kube-scheduler's basic node checks read.
#[derive(PartialEq)]
struct NodeConstraints<'p> {
    node_name: Option<&'p str>,
    tolerations: Option<&'p Vec<Toleration>>,
    node_selector: Option<&'p BTreeMap<String, String>>,
    required_affinity: Option<&'p NodeSelector>,
}

impl<'p> NodeConstraints<'p> {
    fn of(pod: &'p PodInfo) -> Self {
        let spec = pod.pod.spec.as_ref();
        Self {
            node_name: spec.and_then(|s| s.node_name.as_deref()),
            tolerations: spec.and_then(|s| s.tolerations.as_ref()),
            node_selector: spec.and_then(|s| s.node_selector.as_ref()),
            required_affinity: spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
        }
    }
}

impl<'a> Packer<'a> {
    fn new(cache: &'a ClusterCache) -> Self {
        // Only nodes with a Node object: a name known only from its pods
        // is a node that is gone (or not seen yet); and one whose
        // allocatable cannot be read fits no pod.
        let nodes: Vec<&NodeInfo> = cache
            .nodes_sorted()
            .filter(|node| node.node.is_some() && node.invalid_allocatable.is_none())
            .collect();
        let free = nodes
            .iter()
            .map(|node| {
                let mut free = node.allocatable.clone();
                free.sub(&node.requested);
                let limits_pods = node.allocatable.get(RESOURCE_PODS) > 0;
                if limits_pods {
                    free.add_amount(RESOURCE_PODS, -(node.pods.len() as i64));
                }
                (free, limits_pods)
            })
            .collect();
        Self {
            nodes,
            free,
            rules: Vec::new(),
            resume: Vec::new(),
        }
    }

    /// The rule of `pod`'s node constraints, added on first sight.
    fn rule_of(&mut self, pod: &Arc<PodInfo>) -> usize {
        let constraints = NodeConstraints::of(pod);
        if let Some(index) = self
            .rules
            .iter()
            .position(|rule| NodeConstraints::of(&rule.member) == constraints)
        {
            return index;
        }
        self.rules.push(NodeRule::new(pod, self.nodes.len()));
        self.rules.len() - 1
    }

    fn place(&mut self, pod: &Arc<PodInfo>) -> bool {
        let rule_index = self.rule_of(pod);
        let hint = self
            .resume
            .iter()
            .position(|(rule, request, _)| *rule == rule_index && *request == pod.requests);
        let start = hint.map_or(0, |i| self.resume[i].2);
        let mut with_pod = pod.requests.clone();
        with_pod.add_amount(RESOURCE_PODS, 1);
        let rule = &mut self.rules[rule_index];
        let mut found = None;
        for (position, (free, limits_pods)) in self.free.iter_mut().enumerate().skip(start) {
            let request = if *limits_pods {
                &with_pod
            } else {
                &pod.requests
            };
            if fits(request, free) && rule.allows(position, self.nodes[position]) {
                free.sub(request);
                found = Some(position);
                break;
            }
        }
        let stopped = found.unwrap_or(self.free.len());
        match hint {
            Some(i) => self.resume[i].2 = stopped,
            None => self
                .resume
                .push((rule_index, pod.requests.clone(), stopped)),
        }
        found.is_some()
    }
}

/// Whether each of `pods` fits, first fit, after `ahead` took their place.
fn first_fit(ahead: &[&Arc<PodInfo>], pods: &[&Arc<PodInfo>], cache: &ClusterCache) -> Vec<bool> {
    let mut packer = Packer::new(cache);
    for pod in ahead {
        packer.place(pod);
    }
    pods.iter().map(|pod| packer.place(pod)).collect()
}

/// [`first_fit`] that stops placing a gang's members once it has what it
/// needs (the first candidate, the pod itself, is always tried).
fn first_fit_needed(
    ahead: &[&Arc<PodInfo>],
    candidates: &[(usize, &Arc<PodInfo>)],
    needed: &[usize],
    cache: &ClusterCache,
) -> Vec<bool> {
    let mut packer = Packer::new(cache);
    for pod in ahead {
        packer.place(pod);
    }
    let mut placed = vec![0usize; needed.len()];
    candidates
        .iter()
        .enumerate()
        .map(|(position, (gang, pod))| {
            if position > 0 && placed[*gang] >= needed[*gang] {
                return false;
            }
            let ok = packer.place(pod);
            if ok {
                placed[*gang] += 1;
            }
            ok
        })
        .collect()
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A gang is evicted whole or not at all.
    fn preemption_unit(&self, pod: &PodInfo, _cache: &ClusterCache) -> Option<String> {
        gang::gang_key_of(pod)
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        match event {
            ClusterEvent::Pod { old, new, ended } => {
                if let Some(ended) = ended {
                    if ended.deleted {
                        self.ended.remove(&ended.pod.key);
                    } else if let Some(gang) = gang_key_of(&ended.pod) {
                        self.ended.insert(
                            ended.pod.key.clone(),
                            EndedMember {
                                gang,
                                succeeded: ended.succeeded,
                                bound: ended.pod.node.is_some(),
                            },
                        );
                    }
                }
                if let Some(new) = new {
                    // A live pod under this key replaced any ended one.
                    self.ended.remove(&new.key);
                }
                if let Some(old) = old
                    && let Some(gang) = gang_key_of(old)
                {
                    let emptied = self.members.get_mut(&gang).is_some_and(|members| {
                        members.remove(&old.key);
                        members.is_empty()
                    });
                    if emptied {
                        self.members.remove(&gang);
                        if !cache.pod_groups.contains_key(&gang) {
                            self.forget_gang(&gang);
                        }
                    }
                }
                if let Some(new) = new
                    && let Some(gang) = gang_key_of(new)
                {
                    self.members
                        .get_or_insert_with(gang.clone(), BTreeSet::new)
                        .insert(new.key.clone());
                    if new.node.is_some() {
                        // Bound members leave the admitted batch; a binding
                        // the watch confirmed satisfies the group for good.
                        let runtime = &mut *self.runtime.lock_or_recover();
                        for batch in runtime.admitted.values_mut() {
                            batch.remove(&new.key);
                        }
                        runtime.admitted.retain(|_, batch| !batch.is_empty());
                        // A member that just bound ends the gang's wait.
                        if old.as_ref().is_none_or(|old| old.node.is_none()) {
                            runtime.waiting_since.remove(&gang);
                        }
                        if !new.is_assumed() {
                            self.ever_bound.insert(gang, ());
                        }
                    }
                }
                if let (Some(old), None) = (old, new) {
                    self.marked_timed_out.remove(&old.key);
                }
                if old.is_some() && new.is_none() {
                    let runtime = &mut *self.runtime.lock_or_recover();
                    if let Some(old) = old {
                        for batch in runtime.admitted.values_mut() {
                            batch.remove(&old.key);
                        }
                    }
                    runtime.admitted.retain(|_, batch| !batch.is_empty());
                }
            }
            ClusterEvent::Object {
                kind: ObjectKind::PodGroup,
                key,
            } if !cache.pod_groups.contains_key(key) => {
                self.written.remove(key);
                if !self.members.contains_key(key) {
                    self.forget_gang(key);
                }
            }
            ClusterEvent::Object { .. } => {}
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        cache: &ClusterCache,
        state: &mut CycleState,
    ) -> Result<(), Rejection> {
        let Some(key) = gang_key_of(pod) else {
            return Ok(());
        };
        let gang = self.gang(&key, Some(pod), cache).map_err(|err| match err {
            GangError::Invalid { .. } => Rejection::unresolvable(err.to_string()),
            _ => Rejection::unresolvable(format!(
                "{REASON_WAITING_FOR_GANG}: {err}, podName: {}",
                pod.key
            )),
        })?;
        if pod
            .annotations()
            .get(ANNOTATION_GANG_TIMEOUT)
            .is_some_and(|v| v == "true")
        {
            return Err(Rejection::unresolvable(format!(
                "gang {} timed out ({ANNOTATION_GANG_TIMEOUT}=true)",
                gang.key
            )));
        }
        if self.passes_freely(&gang, cache) {
            return Ok(());
        }
        self.admit(pod, &gang, cache, state.now).map(|_| ())
    }

    fn reserve(
        &mut self,
        pod: &PodInfo,
        _node: &str,
        cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(key) = gang_key_of(pod) else {
            return Ok(());
        };
        let Ok(gang) = self.gang(&key, Some(pod), cache) else {
            return Ok(());
        };
        if self.passes_freely(&gang, cache) {
            return Ok(());
        }
        let batch = self.admit(pod, &gang, cache, state.now)?;
        if !batch.is_empty() {
            let runtime = &mut *self.runtime.lock_or_recover();
            runtime
                .admitted
                .insert(gang.group_id(), batch.into_iter().collect());
            for key in &gang.group {
                runtime.waiting_since.remove(key);
            }
        }
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, _node: &str, cache: &ClusterCache) {
        // A batch member that failed before binding: Strict releases the
        // batch (its unbound members wait for the group again).
        let Some(key) = gang_key_of(pod) else {
            return;
        };
        let Ok(gang) = self.gang(&key, Some(pod), cache) else {
            return;
        };
        if gang.mode != GangMode::Strict {
            return;
        }
        let runtime = &mut *self.runtime.lock_or_recover();
        let group_id = gang.group_id();
        if runtime
            .admitted
            .get(&group_id)
            .is_some_and(|batch| batch.contains(&pod.key))
        {
            runtime.admitted.remove(&group_id);
        }
    }

    fn permit(
        &mut self,
        pod: &PodInfo,
        _node: &str,
        cache: &ClusterCache,
    ) -> Result<Permit, Rejection> {
        let Some(key) = gang_key_of(pod) else {
            return Ok(Permit::Allow);
        };
        // Upstream answers Unschedulable "Gang not found" here.
        let gang = self
            .gang(&key, Some(pod), cache)
            .map_err(|err| Rejection::unschedulable(format!("Gang not found: {err}")))?;
        let counts = self.permit_counts(&gang, pod, cache);
        let group = gang.group_id();
        Ok(
            match permit::decide(&counts, self.group_satisfied_once(&gang.group)) {
                permit::Verdict::AllowGroup => Permit::AllowGroup { group },
                permit::Verdict::Wait => Permit::Wait {
                    group,
                    timeout: gang.wait_time,
                },
            },
        )
    }

    fn permit_release_scope(&self, pod: &PodInfo, cache: &ClusterCache) -> PermitRelease {
        let Some(key) = gang_key_of(pod) else {
            return PermitRelease::Member;
        };
        let Ok(gang) = self.gang(&key, Some(pod), cache) else {
            return PermitRelease::Member;
        };
        match permit::release_scope(
            gang.mode,
            gang.match_policy,
            self.group_satisfied_once(&gang.group),
        ) {
            permit::ReleaseScope::Group => PermitRelease::Group,
            permit::ReleaseScope::Member => PermitRelease::Member,
        }
    }

    fn post_bind(&mut self, pod: &PodInfo, _cache: &ClusterCache) {
        // Upstream's PostBind marks the group once resource-satisfied.
        if let Some(key) = gang_key_of(pod) {
            self.ever_bound.insert(key, ());
        }
    }

    fn pending_status_writes(&mut self, cache: &ClusterCache, now: SystemTime) -> Vec<StatusWrite> {
        if self
            .last_write_at
            .and_then(|at| now.duration_since(at).ok())
            .is_some_and(|elapsed| elapsed < STATUS_WRITE_INTERVAL)
        {
            return Vec::new();
        }
        self.last_write_at = Some(now);
        let mut writes = Vec::new();
        // Members of a timed-out gang get upstream's timeout annotation, so
        // the rejection survives a restart.
        for pod_key in self.timed_out(cache, now).into_values().flatten() {
            let Some(pod) = cache.pod(&pod_key) else {
                continue;
            };
            let marked = pod
                .annotations()
                .get(ANNOTATION_GANG_TIMEOUT)
                .is_some_and(|v| v == "true");
            if marked || recently(self.marked_timed_out.get(&pod_key), now) {
                continue;
            }
            self.marked_timed_out.insert(pod_key, now);
            writes.push(StatusWrite {
                resource: POD_RESOURCE,
                namespace: Some(pod.namespace.clone()),
                name: pod.name.clone(),
                patch: serde_json::json!({
                    "metadata": {"annotations": {ANNOTATION_GANG_TIMEOUT: "true"}}
                }),
            });
        }
        for (key, pod_group) in &cache.pod_groups {
            let Some(wanted) = self.pod_group_status(key, cache, now) else {
                continue;
            };
            let current = pod_group.status.clone().unwrap_or_default();
            let in_flight = self
                .written
                .get(key)
                .is_some_and(|(status, at)| *status == wanted && recently(Some(at), now));
            if wanted == current || in_flight {
                continue;
            }
            let Ok(status) = serde_json::to_value(&wanted) else {
                continue;
            };
            self.written.insert(key.clone(), (wanted, now));
            writes.push(StatusWrite {
                resource: POD_GROUP_RESOURCE,
                namespace: pod_group.metadata.namespace.clone(),
                name: pod_group.metadata.name.clone().unwrap_or_default(),
                patch: serde_json::json!({ "status": status }),
            });
        }
        writes
    }
}

impl Coscheduling {
    fn forget_gang(&mut self, key: &str) {
        self.ever_bound.remove(key);
        let runtime = &mut *self.runtime.lock_or_recover();
        runtime.waiting_since.remove(key);
    }
}

#[cfg(test)]
mod tests;
