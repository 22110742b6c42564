//! QoS strategy `cpusuppress`: keeps BE pods' CPU within what LS pods and
//! the system leave free (upstream `plugins/cpusuppress`).
//!
//! BE budget = capacity × `cpuSuppressThresholdPercent` − non-BE pod usage −
//! system usage (node usage not accounted to pods, at least the node's
//! reserved CPU), floored at capacity × `cpuSuppressMinPercent` when set.
//! - `cfsQuota` policy: `kubepods/besteffort` gets `cpu.cfs_quota_us` =
//!   budget × period (at least 2000 µs), changes smaller than 1% of the node
//!   are skipped and increases are limited to 10% of the node per round
//!   (not under the latency-protection loop, which paces its own).
//! - `cpuset` policy: the BE cpuset gets ⌈budget⌉ CPUs (at least 2, growing
//!   by at most 10% of the CPUs per round), split between the LSR and shared
//!   pools in proportion, picking whole physical cores first and never CPUs
//!   of LSE pods, reserved CPUs or exclusive SYSTEM CPUs. Written on the BE
//!   tier, pod and container cgroups.
//! - Under the kubelet's `static` CPU manager policy (its `cpu_manager_state`,
//!   see `statesinformer::cpumanager`) BE also never gets the CPUs the
//!   kubelet pinned to Guaranteed pods koordinator does not manage (upstream
//!   does not exclude them), gets every eligible CPU when fewer are eligible
//!   than the budget wants, and only containers are narrowed: the tier and
//!   pods keep the full BE cpuset (upstream's static-policy write).
//!
//! Disabled (or the other policy chosen): the quota returns to unlimited and
//! the cpuset to every CPU but the exclusive ones.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use apis::configuration::defaults::default_resource_threshold_strategy;
use apis::configuration::merge::merged;
use apis::extension::QoSClass;
use apis::slo::v1alpha1::{CPUSuppressPolicy, ResourceThresholdStrategy};

use super::framework::{Decision, QosSnapshot, Strategy};
use super::latencyguard;
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};
use koord_common::units::{CfsQuota, CpuSet, DEFAULT_CFS_PERIOD_US, MilliCpu};
use koord_common::units::{CpuInfo, CpuTopology};

pub const NAME: &str = "cpusuppress";

/// The BE cpuset never shrinks below this many CPUs.
pub const BE_MIN_CPUSET_CPUS: i64 = 2;
/// The BE quota never drops below this (µs per period).
pub const BE_MIN_QUOTA_US: i64 = 2000;
/// Per round, BE may grow by at most this share of the node.
pub const BE_MAX_INCREASE_RATIO: f64 = 0.1;
/// Quota changes below this share of the node are not written.
pub const QUOTA_BYPASS_DELTA_RATIO: f64 = 0.01;

/// Upstream's gauge names.
pub const GAUGE_SUPPRESS_CORES: &str = "be_suppress_cpu_cores";
pub const GAUGE_LS_USED: &str = "be_suppress_ls_used_cpu_cores";
pub const GAUGE_BE_USED: &str = "be_suppress_be_used_cpu_cores";

const REASON: &str = "adjustBEByNodeCPUUsage";

/// The strategy (no configuration of its own: everything is in the NodeSLO).
#[derive(Debug, Default)]
pub struct CpuSuppress;

/// What cpusuppress carries between rounds; it mirrors upstream's policy
/// status: the BE quota is restored to unlimited once after the cfsQuota
/// policy stops being used (or once at start), not every round, so a quota
/// set by someone else while suppression is off is left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSuppressState {
    /// The restore was decided and (as the runner commits this state only
    /// after the writes succeeded) carried out.
    pub quota_restored: bool,
    /// The latency-protection loop's memory (default while it is off).
    pub latency: latencyguard::GuardState,
}

/// The threshold strategy of `snapshot` over upstream's defaults.
pub fn threshold_strategy(snapshot: &QosSnapshot) -> ResourceThresholdStrategy {
    let defaults = default_resource_threshold_strategy();
    match snapshot
        .node_slo
        .as_deref()
        .and_then(|spec| spec.resource_used_threshold_with_be.as_ref())
    {
        Some(strategy) => merged(&defaults, strategy),
        None => defaults,
    }
}

/// The inputs and result of the BE budget formula.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SuppressBudget {
    pub capacity: MilliCpu,
    pub threshold_percent: i64,
    pub non_be_used: MilliCpu,
    pub system_used: MilliCpu,
    pub be_used: MilliCpu,
    /// The floor from `cpuSuppressMinPercent`, if set.
    pub min: Option<MilliCpu>,
    /// What BE may use; negative when non-BE and system use more than the
    /// threshold allows (and no `cpuSuppressMinPercent` floors it).
    pub budget: MilliCpu,
}

/// Upstream's formula. `node_used` and the pod usages are cores.
pub fn be_budget(
    capacity: MilliCpu,
    reserved: MilliCpu,
    threshold_percent: i64,
    min_percent: Option<i64>,
    node_used: f64,
    pod_usages: impl IntoIterator<Item = (bool, f64)>,
) -> SuppressBudget {
    let (mut all, mut non_be, mut be) = (0.0, 0.0, 0.0);
    for (is_be, used) in pod_usages {
        all += used;
        if is_be {
            be += used;
        } else {
            non_be += used;
        }
    }
    let system = (node_used - all).max(0.0).max(reserved.as_cores());
    // Truncating, as upstream's int64 conversion does (not from_cores' rounding).
    let to_milli = |cores: f64| (cores * 1000.0) as i64;
    let mut budget = capacity.0 * threshold_percent / 100 - to_milli(non_be) - to_milli(system);
    let min_milli = min_percent.map(|p| capacity.0 * p / 100);
    if let Some(min) = min_milli {
        budget = budget.max(min);
    }
    SuppressBudget {
        capacity,
        threshold_percent,
        non_be_used: MilliCpu(to_milli(non_be)),
        system_used: MilliCpu(to_milli(system)),
        be_used: MilliCpu(to_milli(be)),
        min: min_milli.map(MilliCpu),
        budget: MilliCpu(budget),
    }
}

/// `budget` with LS counted as using at least `floor` (the reaction path's
/// LS floor, see [`super::reaction`]): a fresh step seen between two metric
/// collections lowers BE at once, and keeps it lowered until the floor is
/// released. A floor at or below the measured LS usage changes nothing.
pub fn with_ls_floor(budget: SuppressBudget, floor: MilliCpu) -> SuppressBudget {
    if floor <= budget.non_be_used {
        return budget;
    }
    let mut budget_milli =
        budget.capacity.0 * budget.threshold_percent / 100 - floor.0 - budget.system_used.0;
    if let Some(min) = budget.min {
        budget_milli = budget_milli.max(min.0);
    }
    SuppressBudget {
        non_be_used: floor,
        budget: MilliCpu(budget_milli),
        ..budget
    }
}

/// How far BE's quota or cpuset may grow in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeGrowth {
    /// Upstream's cap: at most 10 % of the node per round (the threshold
    /// formula's budget).
    Capped,
    /// Straight to the budget: the latency loop paces its own increases.
    Uncapped,
}

/// Upstream's CFS quota step: target, unless too close to `current` (then
/// `None`), its growth limited by `growth`.
pub fn next_be_quota(
    budget: MilliCpu,
    current: CfsQuota,
    capacity_cores: i64,
    growth: BeGrowth,
) -> Option<CfsQuota> {
    let period = DEFAULT_CFS_PERIOD_US as i64;
    let target = (budget.0 * period / 1000).max(BE_MIN_QUOTA_US);
    // Upstream's int64 arithmetic, with -1 for unlimited.
    let current = current.as_v1();
    let node_quota = (capacity_cores * period) as f64;
    let min_delta = node_quota * QUOTA_BYPASS_DELTA_RATIO;
    if ((target - current) as f64).abs() < min_delta && target != BE_MIN_QUOTA_US {
        return None;
    }
    let max_increase = node_quota * BE_MAX_INCREASE_RATIO;
    let capped = growth == BeGrowth::Capped;
    let quota = if capped && current != -1 && (target - current) as f64 > max_increase {
        current + max_increase as i64
    } else {
        target
    };
    // Both are positive: target is at least BE_MIN_QUOTA_US, and a finite
    // current is non-negative.
    CfsQuota::from_v1(quota).ok()
}

/// Picks `count` CPUs of `processors`: whole cores (two sibling threads)
/// round-robin over (NUMA node, socket) buckets, then single CPUs.
pub fn pick_cpus(count: usize, processors: &[CpuInfo]) -> Vec<u32> {
    if processors.len() < count || count == 0 {
        return Vec::new();
    }
    let mut by_bucket: BTreeMap<(u32, u32), Vec<CpuInfo>> = BTreeMap::new();
    for cpu in processors {
        by_bucket
            .entry((cpu.node, cpu.socket))
            .or_default()
            .push(*cpu);
    }
    let mut buckets: Vec<Vec<CpuInfo>> = by_bucket.into_values().collect();
    for bucket in &mut buckets {
        bucket.sort_by_key(|c| (c.core, c.cpu));
    }
    buckets.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cpu.cmp(&b[0].cpu)));

    let mut picked: Vec<u32> = Vec::with_capacity(count);
    let mut used = std::collections::BTreeSet::new();
    let mut need = count;
    // Whole cores while at least two are needed.
    'cores: loop {
        let mut progressed = false;
        for bucket in &buckets {
            if need <= 1 {
                break 'cores;
            }
            let pair = bucket.windows(2).find(|w| {
                !used.contains(&w[0].cpu) && !used.contains(&w[1].cpu) && w[0].core == w[1].core
            });
            if let Some(pair) = pair {
                picked.extend([pair[0].cpu, pair[1].cpu]);
                used.extend([pair[0].cpu, pair[1].cpu]);
                need -= 2;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    // Then single CPUs.
    loop {
        let mut progressed = false;
        for bucket in &buckets {
            if need == 0 {
                return picked;
            }
            if let Some(cpu) = bucket.iter().find(|c| !used.contains(&c.cpu)) {
                picked.push(cpu.cpu);
                used.insert(cpu.cpu);
                need -= 1;
                progressed = true;
            }
        }
        if !progressed || need == 0 {
            return picked;
        }
    }
}

/// CPUs the kubelet's static CPU manager policy pinned to pods koordinator
/// does not manage (Guaranteed pods with integer CPUs); empty under any
/// other policy, whose checkpoint pins nothing.
pub fn kubelet_pinned_cpus(snapshot: &QosSnapshot) -> CpuSet {
    let kubelet = &snapshot.node.kubelet_cpu_manager;
    if kubelet.is_static() {
        kubelet.pinned_cpus.clone()
    } else {
        CpuSet::new()
    }
}

/// CPUs no BE pool holds: reserved, exclusive SYSTEM and kubelet-pinned.
fn blocked_cpus(snapshot: &QosSnapshot) -> CpuSet {
    snapshot
        .node
        .reserved_cpus
        .union(&snapshot.node.system_qos_exclusive_cpus)
        .union(&kubelet_pinned_cpus(snapshot))
}

/// CPUs BE may never use: the blocked ones and LSE pods' CPUs.
fn exclusive_cpus(snapshot: &QosSnapshot) -> CpuSet {
    let mut exclusive = blocked_cpus(snapshot);
    for pod in &snapshot.pods {
        if pod.qos_label == QoSClass::LSE
            && let Some(cpus) = &pod.allocated_cpus
        {
            exclusive = exclusive.union(cpus);
        }
    }
    exclusive
}

/// The unsuppressed BE cpuset: every online CPU but the exclusive ones.
pub fn full_be_cpuset(snapshot: &QosSnapshot, topology: &CpuTopology) -> CpuSet {
    let exclusive = exclusive_cpus(snapshot);
    let mut set = CpuSet::new();
    for cpu in &topology.cpus {
        if !exclusive.contains(cpu.cpu) {
            // Ids come from the kernel's topology and are bounded there.
            let _ = set.insert(cpu.cpu);
        }
    }
    set
}

/// The suppressed BE cpuset for `budget`, given the current BE cpuset size,
/// its growth limited by `growth` as for [`next_be_quota`].
pub fn suppressed_cpuset(
    snapshot: &QosSnapshot,
    topology: &CpuTopology,
    budget: MilliCpu,
    current_len: usize,
    growth: BeGrowth,
) -> CpuSet {
    let mut pool_of: HashMap<u32, QoSClass> = HashMap::new();
    for pod in &snapshot.pods {
        if let Some(cpus) = &pod.allocated_cpus {
            for cpu in cpus.iter() {
                pool_of.insert(cpu, pod.qos_label);
            }
        }
    }
    let blocked = blocked_cpus(snapshot);
    let (mut lsr, mut shared) = (Vec::new(), Vec::new());
    for cpu in &topology.cpus {
        if blocked.contains(cpu.cpu) {
            continue;
        }
        match pool_of.get(&cpu.cpu) {
            Some(QoSClass::LSR) => lsr.push(*cpu),
            Some(QoSClass::LSE) => {}
            _ => shared.push(*cpu),
        }
    }
    let wanted = ((budget.0.max(0) + 999) / 1000).max(BE_MIN_CPUSET_CPUS) as usize;
    let max_increase = (topology.cpus.len() as f64 * BE_MAX_INCREASE_RATIO).ceil() as usize;
    let wanted = if growth == BeGrowth::Capped {
        wanted.min(current_len + max_increase)
    } else {
        wanted
    };
    let pools = lsr.len() + shared.len();
    // Upstream writes nothing when fewer CPUs are eligible than wanted, so
    // BE keeps its old cpuset. Under the static policy that old cpuset may
    // hold CPUs the kubelet has just pinned, so BE gets every eligible CPU
    // instead; under `none` upstream's behaviour is kept.
    let wanted = if snapshot.node.kubelet_cpu_manager.is_static() {
        wanted.min(pools)
    } else {
        wanted
    };
    let from_lsr = (wanted * lsr.len()).checked_div(pools).unwrap_or(0);
    let mut cpus = pick_cpus(from_lsr, &lsr);
    cpus.extend(pick_cpus(wanted - from_lsr, &shared));
    CpuSet::from_ids(cpus).unwrap_or_default()
}

/// Level of a BE cgroup in the kubelet's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeLevel {
    /// `kubepods/besteffort`.
    Tier,
    Pod,
    Container,
}

/// The cpuset a BE cgroup at `level` gets while suppression narrows BE to
/// `suppressed`. Under the kubelet's static policy only containers are
/// narrowed and the tier and pods keep the `full` BE cpuset, as upstream
/// does: that kubelet writes its shared pool into BE containers itself, and
/// a child's cpuset must stay inside its parent's, so a narrowed parent
/// would make those kubelet writes fail. Under `none` every level narrows.
pub fn cpuset_for_level<'a>(
    level: BeLevel,
    kubelet_static: bool,
    full: &'a CpuSet,
    suppressed: &'a CpuSet,
) -> &'a CpuSet {
    match level {
        BeLevel::Tier | BeLevel::Pod if kubelet_static => full,
        _ => suppressed,
    }
}

/// BE cgroups a cpuset is written to: the tier, its pods and their containers.
fn be_cpuset_dirs(snapshot: &QosSnapshot) -> Vec<(PathBuf, BeLevel)> {
    let mut dirs = vec![(snapshot.layout.qos_dir(QosTier::BestEffort), BeLevel::Tier)];
    for pod in &snapshot.pods {
        if pod.kube_qos != QosTier::BestEffort {
            continue;
        }
        dirs.push((pod.cgroup_dir.clone(), BeLevel::Pod));
        dirs.extend(
            pod.containers
                .iter()
                .filter_map(|c| Some((c.cgroup_dir.clone()?, BeLevel::Container))),
        );
    }
    dirs
}

/// The cpuset of every existing BE cgroup: `full` everywhere to restore
/// (`suppressed` = `None`), else per [`cpuset_for_level`]. Cgroups that are
/// gone (or not created yet) are left out.
pub fn be_cpuset_plan(
    snapshot: &QosSnapshot,
    full: &CpuSet,
    suppressed: Option<&CpuSet>,
) -> Vec<(PathBuf, CpuSet)> {
    let kubelet_static = snapshot.node.kubelet_cpu_manager.is_static();
    be_cpuset_dirs(snapshot)
        .into_iter()
        .filter(|(dir, _)| snapshot.current(dir, CgroupResource::CpusetCpus).is_some())
        .map(|(dir, level)| {
            let set = match suppressed {
                Some(suppressed) => cpuset_for_level(level, kubelet_static, full, suppressed),
                None => full,
            };
            (dir, set.clone())
        })
        .collect()
}

fn write_plan(decision: &mut Decision, plan: Vec<(PathBuf, CpuSet)>, reason: &str) {
    for (dir, set) in plan {
        decision.write(
            dir,
            CgroupResource::CpusetCpus,
            CgroupValue::CpuSet(set),
            reason,
        );
    }
}

impl CpuSuppress {
    fn restore_quota(
        state: &mut CpuSuppressState,
        decision: &mut Decision,
        snapshot: &QosSnapshot,
        why: &str,
    ) {
        if state.quota_restored {
            return;
        }
        let be_dir = snapshot.layout.qos_dir(QosTier::BestEffort);
        if snapshot
            .current(&be_dir, CgroupResource::CpuCfsQuota)
            .is_none()
        {
            decision.info(format!(
                "{} has no readable cpu.cfs_quota_us; nothing to restore",
                be_dir.display()
            ));
            return;
        }
        decision.write(
            be_dir,
            CgroupResource::CpuCfsQuota,
            CgroupValue::Unlimited,
            format!("{REASON}: restore BE cfs quota ({why})"),
        );
        state.quota_restored = true;
    }
}

fn restore_cpuset(decision: &mut Decision, snapshot: &QosSnapshot, why: &str) {
    match snapshot.topology.as_deref() {
        Some(topology) => {
            let set = full_be_cpuset(snapshot, topology);
            if set.is_empty() {
                decision.info("no CPU is left for BE after exclusive CPUs; cpuset not restored");
            } else {
                let kubelet = snapshot.node.kubelet_cpu_manager.summary();
                write_plan(
                    decision,
                    be_cpuset_plan(snapshot, &set, None),
                    &format!("{REASON}: restore BE cpuset ({why}); {kubelet}"),
                );
            }
        }
        None => decision.info("no CPU topology yet; BE cpuset not restored"),
    }
}

impl Strategy for CpuSuppress {
    type State = CpuSuppressState;

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.cpu_suppress_interval
    }

    fn gauges(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (GAUGE_SUPPRESS_CORES, "Number of cores suppress by koordlet"),
            (
                GAUGE_LS_USED,
                "Number of cpu cores used by LS. We consider non-BE pods and podMeta-missing pods as LS.",
            ),
            (GAUGE_BE_USED, "Number of cpu cores used by BE."),
            (
                latencyguard::GAUGE_WAIT_RATIO,
                "(ours) LS run-queue wait over LS CPU run time in the last cpusuppress interval, seen by the latency-protection loop",
            ),
            (
                latencyguard::GAUGE_LIMIT_CORES,
                "(ours) BE CPU limit in cores chosen by the latency-protection loop",
            ),
        ]
    }

    fn counters(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            latencyguard::COUNTER_ADJUSTMENTS,
            "(ours) latency-protection loop rounds by direction (increase, decrease, hold)",
        )]
    }

    fn decide(
        &self,
        snapshot: &QosSnapshot,
        state: &CpuSuppressState,
    ) -> (Decision, CpuSuppressState) {
        let mut next = state.clone();
        let decision = Self::suppress(snapshot, &mut next);
        (decision, next)
    }
}

impl CpuSuppress {
    /// The round's BE quota or cpuset; `next` is this round's state.
    fn suppress(snapshot: &QosSnapshot, next: &mut CpuSuppressState) -> Decision {
        let strategy = threshold_strategy(snapshot);
        let policy = strategy
            .cpu_suppress_policy
            .clone()
            .unwrap_or(CPUSuppressPolicy::CPUSet);
        let mut decision = Decision::default();
        for problem in &snapshot.node.kubelet_cpu_manager.problems {
            decision.info(format!("kubelet CPU manager input left out: {problem}"));
        }
        if strategy.enable != Some(true) {
            next.latency = latencyguard::GuardState::default();
            Self::restore_quota(next, &mut decision, snapshot, "suppress disabled");
            restore_cpuset(&mut decision, snapshot, "suppress disabled");
            decision.skip(
                "disabled by NodeSLO (resourceUsedThresholdWithBE.enable is not true); BE restored",
            );
            return decision;
        }
        let threshold = strategy
            .cpu_suppress_threshold_percent
            .unwrap_or(65)
            .clamp(0, 100);
        let capacity = snapshot.node.cpu_capacity;
        if capacity.0 <= 0 {
            decision.skip("node CPU capacity unknown");
            return decision;
        }
        let node_used = match snapshot.fresh("node CPU usage", snapshot.node_usage.cpu) {
            Ok(sample) => sample.value,
            Err(why) => {
                decision.skip(format!("{why}; BE left as it is"));
                return decision;
            }
        };
        let max_age = snapshot.max_metric_age();
        let fresh_pods: Vec<(bool, f64)> = snapshot
            .pods
            .iter()
            .filter_map(|pod| {
                let sample = pod.cpu_usage?;
                sample
                    .is_fresh(snapshot.now, max_age)
                    .then_some((pod.is_be(), sample.value))
            })
            .collect();
        if !snapshot.pods.is_empty() && fresh_pods.is_empty() {
            decision.skip("no fresh pod CPU usage sample; BE left as it is");
            return decision;
        }
        let mut budget = be_budget(
            capacity,
            snapshot.node.cpu_reserved,
            threshold,
            strategy.cpu_suppress_min_percent,
            node_used,
            fresh_pods,
        );
        let mut floor_note = String::new();
        match snapshot.ls_floor {
            Some(floor) if floor.is_fresh(snapshot.now) => {
                if floor.cpu > budget.non_be_used {
                    floor_note = format!(
                        " (non-BE raised from the collected {} to the reaction floor {})",
                        budget.non_be_used, floor.cpu
                    );
                }
                budget = with_ls_floor(budget, floor.cpu);
            }
            Some(floor) => decision.info(format!(
                "reaction LS floor {} ignored: its latest sample is older than {}s",
                floor.cpu,
                super::reaction::LS_FLOOR_MAX_AGE.as_secs()
            )),
            None => {}
        }
        decision.gauge(GAUGE_LS_USED, vec![], budget.non_be_used.as_cores());
        decision.gauge(GAUGE_BE_USED, vec![], budget.be_used.as_cores());
        let (formula, growth) = match latency_loop(snapshot, &budget, next, &mut decision) {
            Some((limit, explanation)) => {
                // The loop replaces the threshold formula; cpuSuppressMinPercent
                // still floors it.
                let limit = budget.min.map_or(limit, |min| limit.max(min));
                budget.budget = limit;
                // Uncapped: the loop paces its own increases (two measured
                // quiet rounds first), and what it cuts must be what was
                // written — a capped write lagging a fast rise would make its
                // next decrease no cut at all.
                (
                    format!("BE budget {limit} from the {explanation}{floor_note}"),
                    BeGrowth::Uncapped,
                )
            }
            None => (
                // MilliCpu displays with its unit: "1700m".
                format!(
                    "BE budget {} = capacity {} x {}% - non-BE used {} - system used {}{}",
                    budget.budget,
                    capacity,
                    threshold,
                    budget.non_be_used,
                    budget.system_used,
                    budget
                        .min
                        .map(|m| format!(" (floor {m})"))
                        .unwrap_or_default()
                ) + &floor_note,
                BeGrowth::Capped,
            ),
        };
        decision.info(formula.clone());
        Self::apply_budget(snapshot, next, decision, policy, budget, formula, growth)
    }

    /// The BE quota or cpuset for `budget` (the formula's or the latency
    /// loop's), explained by `formula`, growing as `growth` allows.
    fn apply_budget(
        snapshot: &QosSnapshot,
        next: &mut CpuSuppressState,
        mut decision: Decision,
        policy: CPUSuppressPolicy,
        budget: SuppressBudget,
        formula: String,
        growth: BeGrowth,
    ) -> Decision {
        let capacity = budget.capacity;
        let be_dir = snapshot.layout.qos_dir(QosTier::BestEffort);
        if policy == CPUSuppressPolicy::CfsQuota {
            let current = match snapshot.current(&be_dir, CgroupResource::CpuCfsQuota) {
                // The reader validated the value (-1 reads as Unlimited).
                Some(CgroupValue::Int(v)) if v >= 0 => CfsQuota::Micros(v as u64),
                Some(CgroupValue::Unlimited) => CfsQuota::Unlimited,
                _ => {
                    decision.skip(format!(
                        "cannot read cpu.cfs_quota_us of {}",
                        be_dir.display()
                    ));
                    return decision;
                }
            };
            let capacity_cores = (capacity.0 + 999) / 1000;
            next.quota_restored = false;
            match next_be_quota(budget.budget, current, capacity_cores, growth) {
                Some(quota) => {
                    decision.write(
                        &be_dir,
                        CgroupResource::CpuCfsQuota,
                        CgroupValue::Int(quota.as_v1()),
                        format!("{REASON}: {formula}"),
                    );
                    decision.gauge(
                        GAUGE_SUPPRESS_CORES,
                        vec![("type", "cfsQuota".to_string())],
                        quota.as_v1() as f64 / DEFAULT_CFS_PERIOD_US as f64,
                    );
                }
                None => decision.info("BE quota change below 1% of the node; not written"),
            }
            restore_cpuset(&mut decision, snapshot, "policy is cfsQuota");
        } else {
            let Some(topology) = snapshot.topology.as_deref() else {
                decision.skip("no CPU topology yet; BE cpuset left as it is");
                return decision;
            };
            let current_len = match snapshot.current(&be_dir, CgroupResource::CpusetCpus) {
                Some(CgroupValue::CpuSet(set)) => set.len(),
                _ => {
                    decision.skip(format!("cannot read cpuset.cpus of {}", be_dir.display()));
                    return decision;
                }
            };
            let set = suppressed_cpuset(snapshot, topology, budget.budget, current_len, growth);
            let full = full_be_cpuset(snapshot, topology);
            if set.is_empty() || full.is_empty() {
                decision.skip(format!(
                    "no CPU available for BE (excluded: {}); cpuset left as it is",
                    exclusive_cpus(snapshot)
                ));
                return decision;
            }
            decision.gauge(
                GAUGE_SUPPRESS_CORES,
                vec![("type", "cpuset".to_string())],
                set.len() as f64,
            );
            let kubelet = &snapshot.node.kubelet_cpu_manager;
            let levels = if kubelet.is_static() {
                format!("; containers get {set}, tier and pods keep {full}")
            } else {
                String::new()
            };
            write_plan(
                &mut decision,
                be_cpuset_plan(snapshot, &full, Some(&set)),
                &format!("{REASON}: {formula}; {}{levels}", kubelet.summary()),
            );
            Self::restore_quota(next, &mut decision, snapshot, "policy is cpuset");
        }
        decision
    }
}

/// The latency-protection loop's BE limit and explanation when its NodeSLO
/// extension enables it (see [`latencyguard`]); `None` (and its state
/// reset) when off or invalid, so the threshold formula applies.
fn latency_loop(
    snapshot: &QosSnapshot,
    budget: &SuppressBudget,
    next: &mut CpuSuppressState,
    decision: &mut Decision,
) -> Option<(MilliCpu, String)> {
    let extensions = snapshot
        .node_slo
        .as_deref()
        .and_then(|spec| spec.extensions.as_ref());
    let settings = match apis::slo::v1alpha1::cpu_latency_protection(extensions) {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            next.latency = latencyguard::GuardState::default();
            return None;
        }
        Err(err) => {
            decision.info(format!(
                "{err}; latency-protection loop off, threshold formula used"
            ));
            next.latency = latencyguard::GuardState::default();
            return None;
        }
    };
    let node = latencyguard::NodeFigures {
        capacity: budget.capacity,
        ls_used: budget.non_be_used,
        system_used: budget.system_used,
        formula_budget: budget.budget,
    };
    let step = latencyguard::step(&settings, &next.latency, snapshot.ls_sched.as_ref(), &node);
    if let latencyguard::LsSignal::WaitPercent(percent) = step.signal {
        decision.gauge(latencyguard::GAUGE_WAIT_RATIO, vec![], percent / 100.0);
    }
    decision.gauge(
        latencyguard::GAUGE_LIMIT_CORES,
        vec![],
        step.limit.as_cores(),
    );
    decision.count(
        latencyguard::COUNTER_ADJUSTMENTS,
        vec![("direction", step.direction.as_str().to_string())],
        1,
    );
    if let Some(counters) = &snapshot.ls_sched
        && counters.threads_skipped > 0
    {
        decision.info(format!(
            "latency loop read {} LS threads and left {} out (cap)",
            counters.threads, counters.threads_skipped
        ));
    }
    next.latency = step.state;
    Some((step.limit, step.explanation))
}

#[cfg(test)]
mod tests {
    use koord_common::units::MilliCpu;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use apis::slo::v1alpha1::NodeSLOSpec;

    use super::*;
    use crate::qosmanager::framework::testing::{DecideFresh, Rounds, assert_deterministic};
    use crate::qosmanager::framework::{MapReader, MetricSample, QosContainer, QosPod};
    use crate::statesinformer::cpumanager::{
        KubeletCpuManagerView, PolicySource, kubelet_cpu_manager_view, parse_cpu_manager_checkpoint,
    };

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// 8 CPUs: 2 sockets × 2 cores × 2 threads (siblings are cpu n and n+4).
    fn topology() -> CpuTopology {
        CpuTopology {
            cpus: (0..8)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu % 4,
                    socket: (cpu % 4) / 2,
                    node: (cpu % 4) / 2,
                })
                .collect(),
        }
    }

    fn pod(name: &str, qos: QoSClass, tier: QosTier, usage: Option<f64>) -> QosPod {
        let uid = format!("uid-{name}");
        let layout = QosSnapshot::for_test(now()).layout;
        let dir = layout.pod_dir(tier, &uid).unwrap();
        QosPod {
            uid,
            namespace: "default".into(),
            name: name.into(),
            qos,
            qos_label: qos,
            kube_qos: tier,
            priority: apis::extension::PriorityClass::None,
            priority_value: 0,
            phase: "Running".into(),
            cgroup_dir: dir.clone(),
            containers: vec![QosContainer {
                name: "main".into(),
                id: Some("containerd://abc".into()),
                cgroup_dir: Some(dir.join("abc")),
                cpu_request: None,
                cpu_limit: None,
                memory_request: None,
                memory_limit: None,
                cpu_usage: None,
                memory_usage: None,
            }],
            allocated_cpus: None,
            cpu_usage: usage.map(|u| MetricSample::new(u, now())),
            memory_usage: None,
            kube_index: None,
        }
    }

    fn be_dir() -> PathBuf {
        PathBuf::from("kubepods/besteffort")
    }

    /// 8-CPU node, suppress enabled with `policy`, node at `node_used` cores,
    /// one LS pod using `ls_used` and one BE pod using `be_used`.
    fn snapshot(
        policy: CPUSuppressPolicy,
        node_used: f64,
        ls_used: f64,
        be_used: f64,
    ) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(now());
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                enable: Some(true),
                cpu_suppress_threshold_percent: Some(65),
                cpu_suppress_policy: Some(policy),
                ..Default::default()
            }),
            ..Default::default()
        }));
        snapshot.node.cpu_capacity = MilliCpu(8000);
        snapshot.node_usage.cpu = Some(MetricSample::new(node_used, now()));
        snapshot.topology = Some(Arc::new(topology()));
        snapshot.pods = vec![
            pod("ls", QoSClass::LS, QosTier::Burstable, Some(ls_used)),
            pod("be", QoSClass::BE, QosTier::BestEffort, Some(be_used)),
        ];
        snapshot.reader = Arc::new(
            MapReader::default()
                .with(
                    be_dir(),
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Unlimited,
                )
                .with(
                    be_dir(),
                    CgroupResource::CpusetCpus,
                    CgroupValue::CpuSet(CpuSet::from_range(0, 7).unwrap()),
                )
                .with(
                    be_dir().join("poduid-be"),
                    CgroupResource::CpusetCpus,
                    CgroupValue::CpuSet(CpuSet::from_range(0, 7).unwrap()),
                )
                .with(
                    be_dir().join("poduid-be/abc"),
                    CgroupResource::CpusetCpus,
                    CgroupValue::CpuSet(CpuSet::from_range(0, 7).unwrap()),
                ),
        );
        snapshot
    }

    #[test]
    fn budget_follows_upstream_formula() {
        // (capacity m, reserved m, threshold %, min %, node used cores,
        //  (is BE, used cores) per pod) -> (non-BE m, system m, budget m)
        type Case = (
            (i64, i64, i64, Option<i64>, f64, Vec<(bool, f64)>),
            (i64, i64, i64),
        );
        let cases: Vec<Case> = vec![
            // 8 cores x 65% = 5200m; LS 3 cores; system = 4.5 - (3 + 1) = 0.5 core.
            (
                (8000, 0, 65, None, 4.5, vec![(false, 3.0), (true, 1.0)]),
                (3000, 500, 5200 - 3000 - 500),
            ),
            // Reserved CPU raises the system share (0.5 -> 1 core); the min
            // percent floors the budget (5200 - 6000 - 1000 < 10% of 8000).
            (
                (
                    8000,
                    1000,
                    65,
                    Some(10),
                    7.0,
                    vec![(false, 6.0), (true, 0.5)],
                ),
                (6000, 1000, 800),
            ),
            // No pods: the whole node usage is the system's.
            ((8000, 0, 65, None, 2.0, vec![]), (0, 2000, 5200 - 2000)),
        ];
        for ((capacity, reserved, threshold, min, node_used, pods), expected) in cases {
            let budget = be_budget(
                MilliCpu(capacity),
                MilliCpu(reserved),
                threshold,
                min,
                node_used,
                pods.clone(),
            );
            assert_eq!(
                (budget.non_be_used.0, budget.system_used.0, budget.budget.0),
                expected,
                "capacity {capacity}, reserved {reserved}, node used {node_used}, pods {pods:?}"
            );
        }
    }

    #[test]
    fn cfs_quota_policy_writes_the_formula_value() {
        let decision =
            CpuSuppress.decide_fresh(&snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0));
        // Current quota is unlimited, so the target is written without step limits.
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(170_000)),
            "{decision:?}"
        );
        // The cpuset is restored to every CPU.
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpusetCpus),
            Some(&CgroupValue::CpuSet(CpuSet::from_range(0, 7).unwrap()))
        );
        assert!(
            decision
                .gauges
                .iter()
                .any(|g| g.name == GAUGE_SUPPRESS_CORES && (g.value - 1.7).abs() < 1e-9)
        );
    }

    #[test]
    fn quota_never_goes_below_minimum_and_grows_in_steps() {
        // (budget m, current quota (None: unlimited), node cores) -> quota to write
        type Case = ((i64, Option<i64>, i64), Option<i64>);
        let cases: [Case; 6] = [
            // A negative budget: the minimum.
            ((-3000, Some(500_000), 8), Some(BE_MIN_QUOTA_US)),
            // At the minimum already: written anyway (upstream).
            ((20, Some(BE_MIN_QUOTA_US), 8), Some(BE_MIN_QUOTA_US)),
            // From 100000 to 600000 on 8 cores: at most +80000 per round.
            ((6000, Some(100_000), 8), Some(180_000)),
            // Shrinking has no step limit.
            ((1000, Some(600_000), 8), Some(100_000)),
            // From unlimited: the target at once.
            ((1700, None, 8), Some(170_000)),
            // Below 1% of the node (8000 µs): not written.
            ((1050, Some(100_000), 8), None),
        ];
        // The latency loop's budget is not capped.
        assert_eq!(
            next_be_quota(
                MilliCpu(6000),
                CfsQuota::Micros(100_000),
                8,
                BeGrowth::Uncapped
            )
            .map(CfsQuota::as_v1),
            Some(600_000)
        );
        for ((budget, current, cores), expected) in cases {
            let current = current.map_or(CfsQuota::Unlimited, |v| CfsQuota::Micros(v as u64));
            assert_eq!(
                next_be_quota(MilliCpu(budget), current, cores, BeGrowth::Capped)
                    .map(CfsQuota::as_v1),
                expected,
                "budget {budget}m, current {current:?}, {cores} cores"
            );
        }
    }

    #[test]
    fn cpuset_policy_picks_whole_cores_and_restores_quota() {
        // Budget 5200 - 3000 - 500 = 1700m -> 2 CPUs: one whole core.
        let decision =
            CpuSuppress.decide_fresh(&snapshot(CPUSuppressPolicy::CPUSet, 4.5, 3.0, 1.0));
        let Some(CgroupValue::CpuSet(set)) =
            decision.write_for(&be_dir(), CgroupResource::CpusetCpus)
        else {
            panic!("no cpuset write: {decision:?}");
        };
        assert_eq!(set.len(), 2);
        let ids: Vec<u32> = set.iter().collect();
        assert_eq!(ids[0] % 4, ids[1] % 4, "siblings of one core: {ids:?}");
        // Pod and container cgroups get the same set.
        let pod_dir = be_dir().join("poduid-be");
        assert_eq!(
            decision.write_for(&pod_dir, CgroupResource::CpusetCpus),
            Some(&CgroupValue::CpuSet(set.clone()))
        );
        assert_eq!(
            decision.write_for(&pod_dir.join("abc"), CgroupResource::CpusetCpus),
            Some(&CgroupValue::CpuSet(set.clone()))
        );
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Unlimited)
        );
    }

    #[test]
    fn cpuset_avoids_lse_and_reserved_cpus_and_grows_slowly() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CPUSet, 0.5, 0.0, 0.0);
        let mut lse = pod("lse", QoSClass::LSE, QosTier::Guaranteed, Some(0.0));
        lse.allocated_cpus = Some(CpuSet::from_ids([0, 4]).unwrap());
        snapshot.pods.push(lse);
        snapshot.node.reserved_cpus = CpuSet::from_ids([1]).unwrap();
        // Current BE cpuset has 2 CPUs: at most ceil(8 x 10%) = 1 more.
        snapshot.reader = Arc::new(MapReader::default().with(
            be_dir(),
            CgroupResource::CpusetCpus,
            CgroupValue::CpuSet(CpuSet::from_ids([2, 6]).unwrap()),
        ));
        let decision = CpuSuppress.decide_fresh(&snapshot);
        let Some(CgroupValue::CpuSet(set)) =
            decision.write_for(&be_dir(), CgroupResource::CpusetCpus)
        else {
            panic!("no cpuset write: {decision:?}");
        };
        assert_eq!(set.len(), 3, "{set}");
        for forbidden in [0, 4, 1] {
            assert!(!set.contains(forbidden), "{set} contains {forbidden}");
        }
    }

    #[test]
    fn lsr_pool_gets_its_share() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CPUSet, 0.5, 0.0, 0.0);
        let mut lsr = pod("lsr", QoSClass::LSR, QosTier::Guaranteed, Some(0.0));
        lsr.allocated_cpus = Some(CpuSet::from_ids([0, 4, 1, 5]).unwrap());
        snapshot.pods.push(lsr);
        let topology = topology();
        // 4 CPUs wanted, pools LSR 4 / shared 4: 2 from each.
        let set = suppressed_cpuset(&snapshot, &topology, MilliCpu(4000), 8, BeGrowth::Capped);
        let from_lsr = set.iter().filter(|c| [0, 4, 1, 5].contains(c)).count();
        assert_eq!((set.len(), from_lsr), (4, 2), "{set}");
    }

    #[test]
    fn disabled_restores_everything_and_says_so() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        snapshot.node_slo = None;
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Unlimited)
        );
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpusetCpus),
            Some(&CgroupValue::CpuSet(CpuSet::from_range(0, 7).unwrap()))
        );
        assert!(decision.skip_reason().unwrap().contains("disabled"));
    }

    /// The three kinds of round: cfsQuota, cpuset, suppression disabled.
    fn rounds_of_each_policy() -> [(&'static str, QosSnapshot); 3] {
        let mut disabled = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        disabled.node_slo = None;
        [
            (
                "cfsQuota",
                snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0),
            ),
            ("cpuset", snapshot(CPUSuppressPolicy::CPUSet, 4.5, 3.0, 1.0)),
            ("disabled", disabled),
        ]
    }

    #[test]
    fn decide_is_deterministic_for_every_policy_and_state() {
        for (kind, snapshot) in rounds_of_each_policy() {
            for quota_restored in [false, true] {
                let state = CpuSuppressState {
                    quota_restored,
                    ..Default::default()
                };
                let (decision, _) = assert_deterministic(&CpuSuppress, &snapshot, &state);
                assert!(!decision.writes.is_empty(), "{kind}: {decision:?}");
            }
        }
    }

    #[test]
    fn state_records_whether_the_quota_restore_is_still_owed() {
        use CgroupValue::{Int, Unlimited};
        // (round, restored before, BE quota written, restored after)
        let cases: [(&str, bool, Option<CgroupValue>, bool); 6] = [
            ("cfsQuota", false, Some(Int(170_000)), false),
            ("cfsQuota", true, Some(Int(170_000)), false),
            ("cpuset", false, Some(Unlimited), true),
            ("cpuset", true, None, true),
            ("disabled", false, Some(Unlimited), true),
            ("disabled", true, None, true),
        ];
        let rounds = rounds_of_each_policy();
        for (kind, before, quota, after) in cases {
            let (_, snapshot) = rounds.iter().find(|(k, _)| *k == kind).unwrap();
            let state = CpuSuppressState {
                quota_restored: before,
                ..Default::default()
            };
            let (decision, next) = CpuSuppress.decide(snapshot, &state);
            assert_eq!(
                decision
                    .write_for(&be_dir(), CgroupResource::CpuCfsQuota)
                    .cloned(),
                quota,
                "{kind}, restored before: {before}"
            );
            assert_eq!(
                next.quota_restored, after,
                "{kind}, restored before: {before}"
            );
        }
    }

    /// The bug explicit state fixes: the restore used to be marked done
    /// when decided, so a failed write was never retried.
    #[test]
    fn failed_quota_restore_is_retried_next_round() {
        use crate::resourceexecutor::{ExecutorConfig, ResourceExecutor};
        use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

        let dir = koord_common::testing::TempDir::new("qos-cpusuppress-retry").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, dir.path());
        let quota_file = dir.path().join("cpu/kubepods/besteffort/cpu.cfs_quota_us");
        // A directory where the file should be: the write fails.
        std::fs::create_dir_all(&quota_file).unwrap();

        // Suppression off: the quota is owed a restore to unlimited. No
        // topology, so the cpuset restore is left out and the quota is the
        // round's only write.
        let mut round = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        round.node_slo = None;
        round.topology = None;
        round.layout = layout.clone();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let mut runner = crate::qosmanager::QosRunner::new(vec![Box::new(CpuSuppress)], executor);

        let failed = runner.run_one(0, &round);
        assert_eq!((failed.errors, failed.actions), (1, 0), "{failed:?}");
        assert_eq!(
            runner.committed_state::<CpuSuppressState>(0),
            Some(&CpuSuppressState::default()),
            "a round with a failed write commits nothing"
        );

        // The file is back with someone's quota: the restore is decided again.
        std::fs::remove_dir(&quota_file).unwrap();
        std::fs::write(&quota_file, "50000\n").unwrap();
        let retried = runner.run_one(0, &round);
        assert_eq!((retried.errors, retried.actions), (0, 1), "{retried:?}");
        assert_eq!(std::fs::read_to_string(&quota_file).unwrap().trim(), "-1");
        assert_eq!(
            runner.committed_state::<CpuSuppressState>(0),
            Some(&CpuSuppressState {
                quota_restored: true,
                ..Default::default()
            })
        );

        // Restored once: a quota set later while suppression is off stays.
        std::fs::write(&quota_file, "50000\n").unwrap();
        let later = runner.run_one(0, &round);
        assert_eq!((later.errors, later.actions), (0, 0), "{later:?}");
        assert_eq!(
            std::fs::read_to_string(&quota_file).unwrap().trim(),
            "50000"
        );
    }

    #[test]
    fn quota_is_restored_once_until_the_policy_is_used_again() {
        let mut strategy = Rounds::new(CpuSuppress);
        let mut disabled = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        disabled.node_slo = None;
        let quota = |d: &Decision| d.write_for(&be_dir(), CgroupResource::CpuCfsQuota).cloned();
        assert_eq!(
            quota(&strategy.decide(&disabled)),
            Some(CgroupValue::Unlimited)
        );
        assert_eq!(quota(&strategy.decide(&disabled)), None);
        let enabled = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        assert_eq!(
            quota(&strategy.decide(&enabled)),
            Some(CgroupValue::Int(170_000))
        );
        assert_eq!(
            quota(&strategy.decide(&disabled)),
            Some(CgroupValue::Unlimited)
        );
    }

    #[test]
    fn stale_or_missing_metrics_do_nothing() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        snapshot.node_usage.cpu = Some(MetricSample::new(4.5, now() - Duration::from_secs(120)));
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert!(decision.writes.is_empty());
        assert!(
            decision.skip_reason().unwrap().contains("stale"),
            "{decision:?}"
        );

        snapshot.node_usage.cpu = None;
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert!(decision.is_skipped());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no node CPU usage")
        );

        let mut snapshot = self::snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        for pod in &mut snapshot.pods {
            pod.cpu_usage = None;
        }
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert!(decision.is_skipped(), "{decision:?}");
    }

    #[test]
    fn no_be_pods_still_caps_the_tier() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CfsQuota, 3.5, 3.0, 0.0);
        snapshot.pods.retain(|p| !p.is_be());
        let decision = CpuSuppress.decide_fresh(&snapshot);
        // 5200 - 3000 - 500 = 1700m.
        assert_eq!(
            decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(170_000))
        );
    }

    #[test]
    fn threshold_zero_and_hundred() {
        let mut snapshot = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
        let set_threshold = |snapshot: &mut QosSnapshot, percent| {
            let mut spec = (*snapshot.node_slo.clone().unwrap()).clone();
            spec.resource_used_threshold_with_be
                .as_mut()
                .unwrap()
                .cpu_suppress_threshold_percent = Some(percent);
            snapshot.node_slo = Some(Arc::new(spec));
        };
        // (threshold %, BE quota): LS uses 3000m, the system 500m of 8000m.
        let cases = [
            (0, BE_MIN_QUOTA_US),
            (65, 170_000),
            // 8000 - 3000 - 500 = 4500m.
            (100, 450_000),
        ];
        for (percent, quota) in cases {
            set_threshold(&mut snapshot, percent);
            let decision = CpuSuppress.decide_fresh(&snapshot);
            assert_eq!(
                decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota),
                Some(&CgroupValue::Int(quota)),
                "threshold {percent}%"
            );
        }
    }

    /// The kubelet view a `cpu_manager_state` with `policy` and one
    /// Guaranteed pod (unknown to koordinator) pinned to `pinned` gives.
    fn kubelet_view(policy: &str, pinned: &str) -> KubeletCpuManagerView {
        let text = format!(
            r#"{{"policyName":"{policy}","defaultCpuSet":"","entries":{{"uid-g":{{"main":"{pinned}"}}}}}}"#
        );
        let checkpoint = parse_cpu_manager_checkpoint(&text).unwrap();
        kubelet_cpu_manager_view(
            Ok(Some(&checkpoint)),
            Some(std::path::Path::new("/var/lib/kubelet/cpu_manager_state")),
            &Default::default(),
            &[],
        )
    }

    /// Upstream's 16-CPU test node (cpu_suppress_test.go's mockNodeInfo).
    fn topology16() -> CpuTopology {
        let core = |cpu: u32| match cpu {
            0..=1 => 0,
            2..=3 => 1,
            4..=5 => 2,
            _ => 3,
        };
        CpuTopology {
            cpus: (0..16)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: core(cpu),
                    socket: u32::from(cpu >= 4),
                    node: u32::from(cpu >= 4),
                })
                .collect(),
        }
    }

    /// Upstream's LSE pod (mockLSEPod): CPU 7.
    fn lse_on_7() -> QosPod {
        let mut lse = pod("lse", QoSClass::LSE, QosTier::Guaranteed, Some(0.0));
        lse.allocated_cpus = Some(CpuSet::from_ids([7]).unwrap());
        lse
    }

    #[test]
    fn full_be_cpuset_excludes_kubelet_pinned_cpus_only_under_static() {
        let two = CpuSet::from_range(0, 1).unwrap();
        // (case, reserved, system exclusive, kubelet view, want). The first
        // three are upstream's Test_cpuSuppress_recoverCPUSetIfNeed cases.
        let cases: [(&str, CpuSet, CpuSet, KubeletCpuManagerView, &str); 7] = [
            (
                "upstream: LSE only",
                CpuSet::new(),
                CpuSet::new(),
                Default::default(),
                "0-6,8-15",
            ),
            (
                "upstream: node reserved",
                two.clone(),
                CpuSet::new(),
                Default::default(),
                "2-6,8-15",
            ),
            (
                "upstream: system qos exclusive",
                CpuSet::new(),
                two.clone(),
                Default::default(),
                "2-6,8-15",
            ),
            (
                "static: pinned 0-1",
                CpuSet::new(),
                CpuSet::new(),
                kubelet_view("static", "0-1"),
                "2-6,8-15",
            ),
            (
                "static: pinned overlaps reserved and LSE",
                CpuSet::from_ids([0]).unwrap(),
                CpuSet::new(),
                kubelet_view("static", "0-1,7,15"),
                "2-6,8-14",
            ),
            (
                "none: entries pin nothing",
                CpuSet::new(),
                CpuSet::new(),
                kubelet_view("none", "0-1"),
                "0-6,8-15",
            ),
            (
                "static from the Node annotation: pinned CPUs unknown",
                CpuSet::new(),
                CpuSet::new(),
                KubeletCpuManagerView {
                    policy: "static".into(),
                    source: PolicySource::NodeAnnotation,
                    ..Default::default()
                },
                "0-6,8-15",
            ),
        ];
        for (case, reserved, system, kubelet, want) in cases {
            let mut snapshot = QosSnapshot::for_test(now());
            snapshot.pods = vec![lse_on_7()];
            snapshot.node.reserved_cpus = reserved;
            snapshot.node.system_qos_exclusive_cpus = system;
            snapshot.node.kubelet_cpu_manager = kubelet;
            assert_eq!(
                full_be_cpuset(&snapshot, &topology16()).to_string(),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn cpuset_levels_follow_the_kubelet_policy() {
        let full = CpuSet::from_range(0, 15).unwrap();
        let suppressed = CpuSet::from_range(0, 3).unwrap();
        for (level, kubelet_static, want) in [
            (BeLevel::Tier, true, &full),
            (BeLevel::Pod, true, &full),
            (BeLevel::Container, true, &suppressed),
            (BeLevel::Tier, false, &suppressed),
            (BeLevel::Pod, false, &suppressed),
            (BeLevel::Container, false, &suppressed),
        ] {
            assert_eq!(
                cpuset_for_level(level, kubelet_static, &full, &suppressed),
                want,
                "{level:?} static={kubelet_static}"
            );
        }
    }

    /// Upstream's TestCPUSuppress_applyBESuppressCPUSet ("apply with static
    /// policy": BE cpuset 0-3 on the 16-CPU node, old cpuset 0-2, three BE
    /// pods with five containers) and the same under `none`.
    #[test]
    fn static_policy_narrows_containers_and_keeps_tier_and_pods_whole() {
        let containers = [
            ("pod1", "container11"),
            ("pod1", "container12"),
            ("pod2", "container21"),
            ("pod2", "container22"),
            ("pod3", "container31"),
        ];
        let old = CgroupValue::CpuSet(CpuSet::from_range(0, 2).unwrap());
        let mut reader =
            MapReader::default().with(be_dir(), CgroupResource::CpusetCpus, old.clone());
        let mut pods: Vec<QosPod> = Vec::new();
        for (pod_name, container) in containers {
            let pod_dir = be_dir().join(pod_name);
            reader = reader
                .with(pod_dir.clone(), CgroupResource::CpusetCpus, old.clone())
                .with(
                    pod_dir.join(container),
                    CgroupResource::CpusetCpus,
                    old.clone(),
                );
            let template = pod(pod_name, QoSClass::BE, QosTier::BestEffort, None);
            let entry = match pods.iter_mut().find(|p| p.name == pod_name) {
                Some(entry) => entry,
                None => {
                    pods.push(QosPod {
                        cgroup_dir: pod_dir.clone(),
                        containers: Vec::new(),
                        ..template.clone()
                    });
                    pods.last_mut().unwrap()
                }
            };
            entry.containers.push(QosContainer {
                name: container.into(),
                cgroup_dir: Some(pod_dir.join(container)),
                ..template.containers[0].clone()
            });
        }
        let full = CpuSet::from_range(0, 15).unwrap();
        let suppressed = CpuSet::from_range(0, 3).unwrap();
        for (policy, want_upper) in [("static", "0-15"), ("none", "0-3")] {
            let mut snapshot = QosSnapshot::for_test(now());
            snapshot.pods = pods.clone();
            snapshot.reader = Arc::new(reader.clone());
            snapshot.node.kubelet_cpu_manager = kubelet_view(policy, "");
            let plan: BTreeMap<PathBuf, String> =
                be_cpuset_plan(&snapshot, &full, Some(&suppressed))
                    .into_iter()
                    .map(|(dir, set)| (dir, set.to_string()))
                    .collect();
            assert_eq!(plan.len(), 1 + 3 + 5, "{policy}: {plan:?}");
            assert_eq!(plan[&be_dir()], want_upper, "{policy}: tier");
            for (pod_name, container) in containers {
                assert_eq!(
                    plan[&be_dir().join(pod_name)],
                    want_upper,
                    "{policy}: {pod_name}"
                );
                assert_eq!(
                    plan[&be_dir().join(pod_name).join(container)],
                    "0-3",
                    "{policy}: {container}"
                );
            }
            // Restoring writes the full set everywhere, whatever the policy.
            assert!(
                be_cpuset_plan(&snapshot, &full, None)
                    .iter()
                    .all(|(_, set)| *set == full)
            );
        }
    }

    #[test]
    fn static_policy_never_gives_be_the_pinned_cpus() {
        // Idle node, BE at every CPU: the budget wants all 8 CPUs.
        let mut snapshot = snapshot(CPUSuppressPolicy::CPUSet, 0.0, 0.0, 0.0);
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                enable: Some(true),
                cpu_suppress_threshold_percent: Some(100),
                cpu_suppress_policy: Some(CPUSuppressPolicy::CPUSet),
                ..Default::default()
            }),
            ..Default::default()
        }));
        let container = be_dir().join("poduid-be/abc");
        let pod_dir = be_dir().join("poduid-be");
        let set_of = |decision: &Decision, dir: &PathBuf| match decision
            .write_for(dir, CgroupResource::CpusetCpus)
        {
            Some(CgroupValue::CpuSet(set)) => set.to_string(),
            other => panic!("{}: {other:?} in {decision:?}", dir.display()),
        };

        // Static, a Guaranteed pod pinned to the core of CPUs 1 and 5.
        snapshot.node.kubelet_cpu_manager = kubelet_view("static", "1,5");
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert_eq!(set_of(&decision, &container), "0,2-4,6-7");
        assert_eq!(set_of(&decision, &pod_dir), "0,2-4,6-7");
        assert_eq!(set_of(&decision, &be_dir()), "0,2-4,6-7");
        let reason = &decision
            .writes
            .iter()
            .find(|w| w.dir == container)
            .unwrap()
            .reason;
        assert!(
            reason.contains("policy static from /var/lib/kubelet/cpu_manager_state")
                && reason.contains("CPUs 1,5 pinned"),
            "{reason}"
        );

        // A tighter budget: containers narrow, tier and pod keep the whole BE set.
        let mut busy = snapshot.clone();
        busy.node_usage.cpu = Some(MetricSample::new(4.5, now()));
        busy.pods[0].cpu_usage = Some(MetricSample::new(4.0, now()));
        let decision = CpuSuppress.decide_fresh(&busy);
        let narrowed: CpuSet = set_of(&decision, &container).parse().unwrap();
        assert_eq!(narrowed.len(), 4, "8000 - 4000 - 500 = 3500m: {narrowed}");
        assert!(!narrowed.contains(1) && !narrowed.contains(5), "{narrowed}");
        assert_eq!(set_of(&decision, &be_dir()), "0,2-4,6-7");
        assert_eq!(set_of(&decision, &pod_dir), "0,2-4,6-7");

        // Disabled: restored to every CPU but the pinned ones.
        let mut disabled = snapshot.clone();
        disabled.node_slo = None;
        let decision = CpuSuppress.decide_fresh(&disabled);
        assert_eq!(set_of(&decision, &container), "0,2-4,6-7");

        // The none policy: behaviour unchanged, BE may use CPUs 1 and 5.
        snapshot.node.kubelet_cpu_manager = kubelet_view("none", "1,5");
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert_eq!(set_of(&decision, &container), "0-7");
        assert_eq!(set_of(&decision, &be_dir()), "0-7");

        // Under none, fewer eligible CPUs than wanted still writes nothing
        // (upstream); under static BE got every eligible CPU above.
        snapshot.node.reserved_cpus = CpuSet::from_ids([1, 5]).unwrap();
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert!(
            decision
                .write_for(&container, CgroupResource::CpusetCpus)
                .is_none()
        );
        snapshot.node.reserved_cpus = CpuSet::new();

        // Every CPU pinned: nothing is left for BE, nothing is written.
        snapshot.node.kubelet_cpu_manager = kubelet_view("static", "0-7");
        let decision = CpuSuppress.decide_fresh(&snapshot);
        assert!(
            decision
                .write_for(&container, CgroupResource::CpusetCpus)
                .is_none()
        );
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no CPU available for BE (excluded: 0-7)"),
            "{decision:?}"
        );
    }

    #[test]
    fn pick_cpus_prefers_whole_cores_then_singles() {
        let topology = topology();
        let three = pick_cpus(3, &topology.cpus);
        assert_eq!(three.len(), 3);
        assert_eq!(three[0] % 4, three[1] % 4);
        assert!(pick_cpus(9, &topology.cpus).is_empty());
        let all = pick_cpus(8, &topology.cpus);
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn ls_floor_only_ever_lowers_the_budget() {
        // 8 cores x 65% = 5200m; LS 3000m; system 500m → 1700m.
        let usages = [(false, 3.0), (true, 1.0)];
        let base = be_budget(MilliCpu(8000), MilliCpu(0), 65, None, 4.5, usages);
        let floored = be_budget(MilliCpu(8000), MilliCpu(0), 65, Some(10), 4.5, usages);
        // (budget, floor, expected non-BE, expected budget)
        let cases = [
            (base, 0, 3000, 1700),
            (base, 3000, 3000, 1700),
            (base, 3500, 3500, 1200),
            (base, 6000, 6000, -1300),
            // cpuSuppressMinPercent still floors the budget.
            (floored, 6000, 6000, 800),
        ];
        for (budget, floor, non_be, expected) in cases {
            let got = with_ls_floor(budget, MilliCpu(floor));
            assert_eq!(
                (got.non_be_used.0, got.budget.0),
                (non_be, expected),
                "floor {floor}"
            );
            assert_eq!(got.system_used, budget.system_used);
        }
    }

    #[test]
    fn a_fresh_reaction_floor_suppresses_and_a_stale_one_is_ignored() {
        use crate::qosmanager::reaction::{LS_FLOOR_MAX_AGE, LsFloor};
        let quota = |floor: Option<LsFloor>| {
            let mut snapshot = snapshot(CPUSuppressPolicy::CfsQuota, 4.5, 3.0, 1.0);
            snapshot.ls_floor = floor;
            let decision = CpuSuppress.decide_fresh(&snapshot);
            (
                decision
                    .write_for(&be_dir(), CgroupResource::CpuCfsQuota)
                    .cloned(),
                decision,
            )
        };
        // Without a floor: the collected metrics decide (1700m).
        assert_eq!(quota(None).0, Some(CgroupValue::Int(170_000)));
        // A fresh floor of 4.5 cores: 5200 - 4500 - 500 = 200m.
        let (written, decision) = quota(Some(LsFloor {
            cpu: MilliCpu(4500),
            sampled_at: now(),
        }));
        assert_eq!(written, Some(CgroupValue::Int(20_000)), "{decision:?}");
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("reaction floor 4500m")),
            "{decision:?}"
        );
        // A floor below the collected usage changes nothing.
        assert_eq!(
            quota(Some(LsFloor {
                cpu: MilliCpu(1000),
                sampled_at: now(),
            }))
            .0,
            Some(CgroupValue::Int(170_000))
        );
        // A stale floor is ignored, with a note.
        let (written, decision) = quota(Some(LsFloor {
            cpu: MilliCpu(4500),
            sampled_at: now() - LS_FLOOR_MAX_AGE - Duration::from_millis(1),
        }));
        assert_eq!(written, Some(CgroupValue::Int(170_000)));
        assert!(
            decision.notes.iter().any(|n| n.text.contains("ignored")),
            "{decision:?}"
        );
    }
}

#[cfg(test)]
mod latency_loop_tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use apis::extension::QoSClass;
    use apis::slo::v1alpha1::{ExtensionsMap, NodeSLOSpec};
    use serde_json::json;

    use super::*;
    use crate::qosmanager::framework::testing::{Rounds, assert_deterministic};
    use crate::qosmanager::framework::{MapReader, MetricSample, QosPod};
    use crate::qosmanager::latencyguard::LsSchedCounters;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn be_dir() -> PathBuf {
        PathBuf::from("kubepods/besteffort")
    }

    fn pod(name: &str, qos: QoSClass, tier: QosTier, usage: f64, now: SystemTime) -> QosPod {
        let layout = QosSnapshot::for_test(now).layout;
        QosPod {
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            name: name.into(),
            qos,
            qos_label: qos,
            kube_qos: tier,
            priority: apis::extension::PriorityClass::None,
            priority_value: 0,
            phase: "Running".into(),
            cgroup_dir: layout.pod_dir(tier, &format!("uid-{name}")).unwrap(),
            containers: Vec::new(),
            allocated_cpus: None,
            cpu_usage: Some(MetricSample::new(usage, now)),
            memory_usage: None,
            kube_index: None,
        }
    }

    /// 8 CPUs, cfsQuota, threshold 65 %, LS 3 cores, BE 1 core, node 4.5:
    /// the formula gives 1700m. `extension` goes under cpuLatencyProtection.
    fn snapshot(
        seconds: u64,
        extension: serde_json::Value,
        wait_ms: u64,
        run_ms: u64,
    ) -> QosSnapshot {
        let now = at(seconds);
        let mut snapshot = QosSnapshot::for_test(now);
        let extensions: ExtensionsMap =
            serde_json::from_value(json!({"Object": {"cpuLatencyProtection": extension}})).unwrap();
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                enable: Some(true),
                cpu_suppress_threshold_percent: Some(65),
                cpu_suppress_policy: Some(CPUSuppressPolicy::CfsQuota),
                ..Default::default()
            }),
            extensions: Some(extensions),
            ..Default::default()
        }));
        snapshot.node.cpu_capacity = MilliCpu(8000);
        snapshot.node_usage.cpu = Some(MetricSample::new(4.5, now));
        snapshot.pods = vec![
            pod("ls", QoSClass::LS, QosTier::Burstable, 3.0, now),
            pod("be", QoSClass::BE, QosTier::BestEffort, 1.0, now),
        ];
        snapshot.reader = Arc::new(MapReader::default().with(
            be_dir(),
            CgroupResource::CpuCfsQuota,
            CgroupValue::Unlimited,
        ));
        snapshot.ls_sched = Some(LsSchedCounters {
            taken_at: now,
            wait_ns: wait_ms * 1_000_000,
            run_ns: run_ms * 1_000_000,
            threads: 4,
            threads_skipped: 0,
        });
        snapshot
    }

    fn quota(decision: &Decision) -> Option<i64> {
        match decision.write_for(&be_dir(), CgroupResource::CpuCfsQuota) {
            Some(CgroupValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn on() -> serde_json::Value {
        json!({"enable": true, "targetWaitPercent": 10, "minBECPUPercent": 5})
    }

    #[test]
    fn the_loop_replaces_the_formula_and_follows_the_wait() {
        let mut rounds = Rounds::new(CpuSuppress);
        // First round: no interval yet, the loop starts from the formula (1700m).
        let first = rounds.decide(&snapshot(0, on(), 0, 0));
        assert_eq!(quota(&first), Some(170_000), "{first:?}");
        assert!(
            first
                .notes
                .iter()
                .any(|n| n.text.contains("from the latency loop")),
            "{first:?}"
        );
        // 30 % wait: halved to 850m.
        let cut = rounds.decide(&snapshot(1, on(), 300, 1000));
        assert_eq!(quota(&cut), Some(85_000), "{cut:?}");
        assert!(cut.counters.iter().any(|c| c.labels[0].1 == "decrease"));
        assert!(
            cut.gauges
                .iter()
                .any(|g| g.name == latencyguard::GAUGE_WAIT_RATIO && (g.value - 0.3).abs() < 1e-9)
        );
        // Quiet LS (1 %, far below the 10 % target): holds one round, then
        // closes half the gap to the 1700m the wait cut from, then grows by
        // 400m a round past it up to 8000 - 3000 - 500 = 4500m. (The test's
        // reader always shows an unlimited quota, so every round writes.)
        let mut quotas = Vec::new();
        for second in 2..=12 {
            let wait = 300 + (second - 1) * 10;
            let run = 1000 * second;
            let decision = rounds.decide(&snapshot(second, on(), wait, run));
            if let Some(q) = quota(&decision) {
                quotas.push(q);
            }
        }
        assert_eq!(
            quotas,
            [
                85_000, 127_500, 167_500, 207_500, 247_500, 287_500, 327_500, 367_500, 407_500,
                447_500, 450_000
            ],
        );
        // The same rounds are deterministic.
        let state = rounds.state.clone();
        let (decision, _) =
            assert_deterministic(&CpuSuppress, &snapshot(13, on(), 420, 13_000), &state);
        assert!(decision.skip_reason().is_none(), "{decision:?}");
    }

    #[test]
    fn an_invalid_extension_keeps_the_formula_with_a_note() {
        let bad = json!({"enable": true, "targetWaitPercent": 0});
        let decision = CpuSuppress
            .decide(&snapshot(0, bad, 0, 0), &Default::default())
            .0;
        assert_eq!(quota(&decision), Some(170_000));
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("targetWaitPercent = 0")
                    && n.text.contains("threshold formula used")),
            "{decision:?}"
        );
        assert!(decision.counters.is_empty());
        let off = json!({"enable": false});
        let (decision, state) = CpuSuppress.decide(&snapshot(0, off, 0, 0), &Default::default());
        assert_eq!(quota(&decision), Some(170_000));
        assert_eq!(state.latency, Default::default());
    }

    #[test]
    fn idle_ls_gets_be_back_to_its_headroom_fast_uncapped_and_deterministically() {
        // The BE quota reads 40,000 µs: upstream's cap would allow at most
        // +80,000 µs (10 % of 8 cores) a round.
        let with_quota = |seconds, wait, run| {
            let mut s = snapshot(seconds, on(), wait, run);
            s.reader = Arc::new(MapReader::default().with(
                be_dir(),
                CgroupResource::CpuCfsQuota,
                CgroupValue::Int(40_000),
            ));
            s
        };
        let mut state = CpuSuppressState::default();
        let mut quotas = Vec::new();
        // Formula start (1700m), three rounds at 30 % wait down to the
        // 400m minimum, then LS idle (1 ms of run a round) for five rounds.
        let rounds = [(0, 0), (300, 1000), (600, 2000), (900, 3000)]
            .into_iter()
            .chain((1..=5).map(|idle| (900, 3000 + idle)));
        for (second, (wait, run)) in rounds.enumerate() {
            let (decision, next) =
                assert_deterministic(&CpuSuppress, &with_quota(second as u64, wait, run), &state);
            quotas.push(quota(&decision));
            state = next;
        }
        // Upper bound 8000 - 3000 - 500 = 4500m; ≥ 90 % of it (405,000 µs)
        // five rounds after LS went idle, in jumps the cap would not allow.
        assert_eq!(
            quotas,
            [
                Some(170_000),
                Some(85_000),
                // 425m and 400m: within 1 % of the node of the 40,000 µs
                // read, not written.
                None,
                None,
                None,
                Some(245_000),
                Some(347_500),
                Some(398_800),
                // The additive step is larger than half the last gap.
                Some(438_800),
            ]
        );
    }

    #[test]
    fn cpu_suppress_min_percent_still_floors_the_loop() {
        let mut rounds = Rounds::new(CpuSuppress);
        let with_min = |seconds, wait, run| {
            let mut s = snapshot(seconds, on(), wait, run);
            let mut spec = (*s.node_slo.take().unwrap()).clone();
            spec.resource_used_threshold_with_be
                .as_mut()
                .unwrap()
                .cpu_suppress_min_percent = Some(20);
            s.node_slo = Some(Arc::new(spec));
            s
        };
        rounds.decide(&with_min(0, 0, 0));
        // Heavy wait: the loop goes to 850m, the 20 % floor keeps 1600m.
        let decision = rounds.decide(&with_min(1, 500, 1000));
        assert_eq!(quota(&decision), Some(160_000), "{decision:?}");
    }
}
