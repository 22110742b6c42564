//! Who may be a victim, and whether a migration would start: upstream's
//! MigrationController filter (the evictor LowNodeLoad asks) and
//! LowNodeLoad's own namespace and pod selectors, plus the Eviction API's
//! PodDisruptionBudget check, over a snapshot.
//!
//! Filters and their reasons, in upstream's order:
//! - LowNodeLoad: `evictableNamespaces`, then the evictor, then `podSelectors`;
//! - the evictor: an existing PodMigrationJob for the pod; in ReservationFirst
//!   mode a scheduler that can make reservations; then, unless the pod has
//!   the `descheduler.alpha.kubernetes.io/evict` annotation, the protective
//!   checks (namespaces, eviction cost MaxInt32, DaemonSet, mirror, static,
//!   terminating, bare pod, system-critical, priority threshold, local
//!   storage, PVC, node fit, label selector; all failing ones are named) and
//!   the workload's expected replicas; then the limits (globally, per node,
//!   per namespace, per workload migrating and unavailable), which count the
//!   snapshot's Pending and Running PodMigrationJobs and the migrations this
//!   plan started.
//! - starting a migration: the Eviction API refuses to evict a pod whose
//!   PodDisruptionBudget allows no more disruptions; each migration planned
//!   uses up one allowed disruption of every budget covering the pod.

use std::collections::{BTreeSet, HashMap, HashSet};

use apis::configuration::selector::label_selector_matches;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::config::types::{MigrationControllerArgs, Namespaces};
use crate::config::validate::SYSTEM_CRITICAL_PRIORITY;
use crate::loadaware::{ClusterIndex, Evictor};
use crate::model::{Amounts, NodeView, PodView};
use crate::nodefit::node_fit;

/// The Pending and Running migrations (the snapshot's jobs and the ones
/// this plan started), counted the ways the limits read them.
#[derive(Clone, Debug, Default)]
struct Ledger {
    uids: HashSet<String>,
    keys: HashSet<String>,
    total: usize,
    per_node: HashMap<String, usize>,
    per_namespace: HashMap<String, usize>,
    /// Controller uid → keys of its migrating pods.
    per_controller: HashMap<String, BTreeSet<String>>,
}

impl Ledger {
    fn add(&mut self, uid: &str, key: &str, namespace: &str, pod: Option<&PodView>) {
        if !uid.is_empty() {
            self.uids.insert(uid.to_string());
        }
        self.keys.insert(key.to_string());
        self.total += 1;
        *self.per_namespace.entry(namespace.to_string()).or_insert(0) += 1;
        if let Some(pod) = pod {
            if !pod.node_name.is_empty() {
                *self.per_node.entry(pod.node_name.clone()).or_insert(0) += 1;
            }
            if let Some(owner) = pod.controller() {
                self.per_controller
                    .entry(owner.uid.clone())
                    .or_default()
                    .insert(key.to_string());
            }
        }
    }

    fn contains(&self, pod: &PodView) -> bool {
        (!pod.uid.is_empty() && self.uids.contains(&pod.uid)) || self.keys.contains(pod.key())
    }
}

/// An evictor over a snapshot that records what it starts.
pub struct SnapshotEvictor<'a> {
    index: &'a ClusterIndex<'a>,
    args: &'a MigrationControllerArgs,
    gates: BTreeSet<&'a str>,
    evictable_namespaces: Option<&'a Namespaces>,
    pod_selectors: &'a [LabelSelector],
    priority_threshold: Option<i32>,
    ready_nodes: Vec<&'a NodeView>,
    pods_by_controller: HashMap<&'a str, Vec<&'a PodView>>,
    replicas_by_uid: HashMap<&'a str, i32>,
    ledger: Ledger,
    planned: usize,
    pdb_used: Vec<i32>,
}

/// Why the arbitrator holds a job back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArbitrationRefusal {
    /// A non-retryable filter failed: the job fails.
    Forbidden(String),
    /// A limit is reached: the job waits.
    Limited(String),
}

/// A setting the snapshot cannot honour.
#[derive(Debug, thiserror::Error)]
pub enum EvictorError {
    #[error(
        "priorityThreshold.name {0:?}: no PriorityClass of that name in the snapshot (add it, or give priorityThreshold.value)"
    )]
    UnknownPriorityClass(String),
    #[error("nodeSelector {0:?}: {1}")]
    NodeSelector(String, String),
}

impl<'a> SnapshotEvictor<'a> {
    pub fn new(
        index: &'a ClusterIndex<'a>,
        args: &'a MigrationControllerArgs,
        evictable_namespaces: Option<&'a Namespaces>,
        pod_selectors: &'a [LabelSelector],
        priority_classes: &HashMap<String, i32>,
    ) -> Result<Self, EvictorError> {
        let gates: BTreeSet<&str> = args
            .skip_eviction_gates
            .iter()
            .map(String::as_str)
            .collect();
        let priority_threshold =
            match &args.priority_threshold {
                Some(threshold) if !gates.contains("PriorityThreshold") => match threshold.value {
                    Some(value) => Some(value),
                    None if threshold.name.is_empty() => None,
                    None => Some(*priority_classes.get(&threshold.name).ok_or_else(|| {
                        EvictorError::UnknownPriorityClass(threshold.name.clone())
                    })?),
                },
                _ => None,
            };
        let node_selector = parse_node_selector(&args.node_selector)
            .map_err(|reason| EvictorError::NodeSelector(args.node_selector.clone(), reason))?;
        let view = index.view;
        let ready_nodes = view
            .nodes
            .iter()
            .filter(|node| node.ready && node_selector.iter().all(|term| term.matches(node)))
            .collect();
        let mut pods_by_controller: HashMap<&str, Vec<&PodView>> = HashMap::new();
        for pod in &view.pods {
            if let Some(owner) = pod.controller() {
                pods_by_controller.entry(&owner.uid).or_default().push(pod);
            }
        }
        let replicas_by_uid = view
            .workloads
            .iter()
            .map(|workload| (workload.uid.as_str(), workload.replicas))
            .collect();
        // The snapshot's Pending (or phase-less) and Running jobs.
        let pods_by_uid: HashMap<&str, &PodView> = view
            .pods
            .iter()
            .filter(|pod| !pod.uid.is_empty())
            .map(|pod| (pod.uid.as_str(), pod))
            .collect();
        let pods_by_key: HashMap<&str, &PodView> =
            view.pods.iter().map(|pod| (pod.key(), pod)).collect();
        let mut ledger = Ledger::default();
        for job in &view.migration_jobs {
            if !matches!(job.phase.as_str(), "" | "Pending" | "Running") {
                continue;
            }
            let key = format!("{}/{}", job.pod_namespace, job.pod_name);
            let pod = pods_by_uid
                .get(job.pod_uid.as_str())
                .or_else(|| pods_by_key.get(key.as_str()))
                .copied();
            ledger.add(&job.pod_uid, &key, &job.pod_namespace, pod);
        }
        Ok(SnapshotEvictor {
            index,
            args,
            gates,
            evictable_namespaces,
            pod_selectors,
            priority_threshold,
            ready_nodes,
            pods_by_controller,
            replicas_by_uid,
            ledger,
            planned: 0,
            pdb_used: vec![0; view.pdbs.len()],
        })
    }

    fn skipped(&self, gate: &str) -> bool {
        self.gates.contains(gate)
    }

    fn expected_replicas(&self, controller_uid: &str) -> i32 {
        match self.replicas_by_uid.get(controller_uid) {
            Some(replicas) => *replicas,
            // Without the workload, the pods seen with this owner stand in.
            None => self
                .pods_by_controller
                .get(controller_uid)
                .map_or(0, |pods| i32::try_from(pods.len()).unwrap_or(i32::MAX)),
        }
    }

    /// Upstream's protective checks (`EvictorFilter.Filter` and its constraints).
    fn protective_checks(&self, pod: &PodView) -> Vec<String> {
        let mut failed = Vec::new();
        if pod.owners.iter().any(|owner| owner.kind == "DaemonSet") {
            failed.push("pod is a DaemonSet pod".to_string());
        }
        if pod.mirror {
            failed.push("pod is a mirror pod".to_string());
        }
        if pod.static_pod {
            failed.push("pod is a static pod".to_string());
        }
        if pod.terminating {
            failed.push("pod is terminating".to_string());
        }
        let evict_all_bare = self.args.evict_all_bare_pods || self.skipped("BarePods");
        let evict_failed_bare = self.args.evict_failed_bare_pods || self.skipped("BarePods");
        if !evict_all_bare && pod.owners.is_empty() {
            if !evict_failed_bare {
                failed.push("pod does not have any ownerRefs".to_string());
            } else if pod.phase != "Failed" {
                failed
                    .push("pod does not have any ownerRefs and is not in failed phase".to_string());
            }
        }
        let evict_system_critical =
            self.args.evict_system_critical_pods || self.skipped("SystemCritical");
        if !evict_system_critical {
            if pod.priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY) {
                failed.push("pod has system critical priority".to_string());
            }
            if let Some(threshold) = self.priority_threshold
                && pod.priority.is_some_and(|p| p >= threshold)
            {
                failed.push(
                    "pod has higher priority than specified priority class threshold".to_string(),
                );
            }
        }
        let evict_local_storage =
            self.args.evict_local_storage_pods || self.skipped("LocalStorage");
        if !evict_local_storage && pod.local_storage {
            failed.push(
                "pod has local storage and descheduler is not configured with evictLocalStoragePods"
                    .to_string(),
            );
        }
        if self.args.ignore_pvc_pods && !self.skipped("PVC") && pod.pvc {
            failed
                .push("pod has a PVC and descheduler is configured to ignore PVC pods".to_string());
        }
        if self.args.node_fit && !self.skipped("NodeFit") && !self.fits_another_node(pod) {
            failed.push(
                "pod does not fit on any other node because of nodeSelector(s), Taint(s), or nodes marked as unschedulable"
                    .to_string(),
            );
        }
        if let Some(selector) = &self.args.label_selector
            && !self.skipped("LabelSelector")
            && !apis::configuration::selector::is_empty_selector(selector)
            && !label_selector_matches(selector, &pod.labels).unwrap_or(false)
        {
            failed.push(
                "pod labels do not match the labelSelector filter in the policy parameter"
                    .to_string(),
            );
        }
        failed
    }

    fn fits_another_node(&self, pod: &PodView) -> bool {
        let empty = Amounts::new();
        self.ready_nodes.iter().any(|node| {
            node.name != pod.node_name
                && node_fit(
                    pod,
                    node,
                    self.index
                        .requested_by_node
                        .get(node.name.as_str())
                        .unwrap_or(&empty),
                )
                .is_empty()
        })
    }

    /// The non-retryable part of the evictor's filter.
    fn non_retryable(&self, pod: &PodView) -> Result<(), String> {
        if pod.has_evict_annotation {
            return Ok(());
        }
        if let Some(namespaces) = &self.args.namespaces
            && !self.skipped("Namespaces")
        {
            namespace_check(namespaces, &pod.namespace, "MigrationController")?;
        }
        if pod.eviction_cost == i32::MAX {
            return Err("pod's eviction cost is MaxInt32 (never evicted)".to_string());
        }
        let failed = self.protective_checks(pod);
        if !failed.is_empty() {
            return Err(failed.join("; "));
        }
        if !self.skipped("ExpectedReplicas")
            && let Some(owner) = pod.controller()
        {
            let expected = self.expected_replicas(&owner.uid);
            let max_migrating =
                max_unavailable(expected, self.args.max_migrating_per_workload.as_ref());
            let max_unavailable =
                max_unavailable(expected, self.args.max_unavailable_per_workload.as_ref());
            if self.args.skip_check_expected_replicas != Some(true)
                && (expected == 1 || expected == max_migrating || expected == max_unavailable)
            {
                return Err(format!(
                    "workload {} {} expects {expected} replicas, which its migration limits (maxMigrating {max_migrating}, maxUnavailable {max_unavailable}) would all take",
                    owner.kind, owner.name
                ));
            }
        }
        Ok(())
    }

    /// The retryable limits. The pod itself never counts: a pod with a
    /// migration under way was refused before these checks.
    fn retryable(&self, pod: &PodView) -> Result<(), String> {
        if pod.has_evict_annotation {
            return Ok(());
        }
        let ledger = &self.ledger;
        let reached = |limit: i32, count: usize| count >= usize::try_from(limit).unwrap_or(0);
        if let Some(limit) = self.args.max_migrating_globally
            && limit > 0
            && !self.skipped("MaxMigratingGlobally")
            && reached(limit, ledger.total)
        {
            return Err(format!(
                "maxMigratingGlobally {limit} reached ({} migrating)",
                ledger.total
            ));
        }
        if let Some(limit) = self.args.max_migrating_per_node
            && limit > 0
            && !pod.node_name.is_empty()
            && !self.skipped("MaxMigratingPerNode")
        {
            let count = ledger.per_node.get(&pod.node_name).copied().unwrap_or(0);
            if reached(limit, count) {
                return Err(format!(
                    "maxMigratingPerNode {limit} reached on node {} ({count} migrating)",
                    pod.node_name
                ));
            }
        }
        if let Some(limit) = self.args.max_migrating_per_namespace
            && limit > 0
            && !self.skipped("MaxMigratingPerNamespace")
        {
            let count = ledger
                .per_namespace
                .get(&pod.namespace)
                .copied()
                .unwrap_or(0);
            if reached(limit, count) {
                return Err(format!(
                    "maxMigratingPerNamespace {limit} reached in namespace {} ({count} migrating)",
                    pod.namespace
                ));
            }
        }
        let skip_migrating = self.skipped("MaxMigratingPerWorkload");
        let skip_unavailable = self.skipped("MaxUnavailablePerWorkload");
        if let Some(owner) = pod.controller()
            && !(skip_migrating && skip_unavailable)
        {
            let expected = self.expected_replicas(&owner.uid);
            let empty = BTreeSet::new();
            let migrating = ledger.per_controller.get(&owner.uid).unwrap_or(&empty);
            if !skip_migrating && !migrating.is_empty() {
                let limit =
                    max_unavailable(expected, self.args.max_migrating_per_workload.as_ref());
                if reached(limit, migrating.len()) {
                    return Err(format!(
                        "maxMigratingPerWorkload {limit} reached for {} {} ({} migrating)",
                        owner.kind,
                        owner.name,
                        migrating.len()
                    ));
                }
            }
            if !skip_unavailable {
                let mut unavailable: BTreeSet<&str> = self
                    .pods_by_controller
                    .get(owner.uid.as_str())
                    .into_iter()
                    .flatten()
                    .filter(|p| !(p.occupies_node() && !p.terminating && p.ready))
                    .map(|p| p.key())
                    .collect();
                unavailable.extend(migrating.iter().map(String::as_str));
                let limit =
                    max_unavailable(expected, self.args.max_unavailable_per_workload.as_ref());
                if reached(limit, unavailable.len()) {
                    return Err(format!(
                        "maxUnavailablePerWorkload {limit} reached for {} {} ({} unavailable or migrating)",
                        owner.kind,
                        owner.name,
                        unavailable.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The arbitrator's check of a waiting PodMigrationJob's pod (upstream
    /// `filtering`): the non-retryable filters, then the limits. The pod's
    /// own job must not be among the snapshot's counted jobs.
    pub fn arbitrate(&self, pod: &PodView) -> Result<(), ArbitrationRefusal> {
        self.non_retryable(pod)
            .map_err(ArbitrationRefusal::Forbidden)?;
        self.retryable(pod).map_err(ArbitrationRefusal::Limited)
    }

    /// Counts `pod` as migrating from now on (a job that passed arbitration).
    pub fn admit(&mut self, pod: &PodView) {
        self.ledger
            .add(&pod.uid, pod.key(), &pod.namespace, Some(pod));
    }

    /// How many migrations this evictor started.
    pub fn planned(&self) -> usize {
        self.planned
    }
}

impl Evictor for SnapshotEvictor<'_> {
    fn filter(&self, pod: &PodView) -> Result<(), String> {
        if let Some(namespaces) = self.evictable_namespaces {
            namespace_check(
                namespaces,
                &pod.namespace,
                "LowNodeLoad evictableNamespaces",
            )?;
        }
        if self.ledger.contains(pod) {
            return Err("pod already has a Pending or Running PodMigrationJob".to_string());
        }
        if self.args.default_job_mode == "ReservationFirst"
            && !self.args.scheduler_names.contains(&pod.scheduler_name)
        {
            return Err(format!(
                "ReservationFirst needs a scheduler that makes reservations ({}), the pod's is {}",
                self.args.scheduler_names.join(", "),
                pod.scheduler_name
            ));
        }
        self.non_retryable(pod)?;
        self.retryable(pod)?;
        if !self.pod_selectors.is_empty()
            && !self
                .pod_selectors
                .iter()
                .any(|selector| label_selector_matches(selector, &pod.labels).unwrap_or(false))
        {
            return Err("pod matches none of LowNodeLoad's podSelectors".to_string());
        }
        Ok(())
    }

    fn evict(&mut self, pod: &PodView, _reason: &str) -> Result<(), String> {
        let covering: Vec<usize> = self
            .index
            .view
            .pdbs
            .iter()
            .enumerate()
            .filter(|(_, pdb)| pdb.covers(pod))
            .map(|(i, _)| i)
            .collect();
        for &i in &covering {
            let pdb = &self.index.view.pdbs[i];
            if pdb.disruptions_allowed - self.pdb_used[i] <= 0 {
                return Err(format!(
                    "the Eviction API would refuse: PodDisruptionBudget {}/{} allows no more disruptions (disruptionsAllowed {}, {} used by this plan)",
                    pdb.namespace, pdb.name, pdb.disruptions_allowed, self.pdb_used[i]
                ));
            }
        }
        for i in covering {
            self.pdb_used[i] += 1;
        }
        self.ledger
            .add(&pod.uid, pod.key(), &pod.namespace, Some(pod));
        self.planned += 1;
        Ok(())
    }
}

fn namespace_check(namespaces: &Namespaces, namespace: &str, who: &str) -> Result<(), String> {
    if !namespaces.include.is_empty() && !namespaces.include.iter().any(|n| n == namespace) {
        return Err(format!("namespace {namespace} is not included by {who}"));
    }
    if namespaces.exclude.iter().any(|n| n == namespace) {
        return Err(format!("namespace {namespace} is excluded by {who}"));
    }
    Ok(())
}

/// Upstream `GetMaxUnavailable` (and `GetMaxMigrating`): the configured
/// count or percentage of the replicas (rounded down, at least 1), else 1
/// under 4 replicas, 2 up to 10, 10% above; never more than the replicas.
pub fn max_unavailable(replicas: i32, configured: Option<&IntOrString>) -> i32 {
    let scaled = |value: &IntOrString| -> i32 {
        match value {
            IntOrString::Int(count) => *count,
            IntOrString::String(text) => text
                .strip_suffix('%')
                .and_then(|number| number.parse::<i64>().ok())
                .map_or(0, |percent| {
                    i32::try_from(i64::from(replicas) * percent / 100).unwrap_or(i32::MAX)
                }),
        }
    };
    let mut limit = configured.map_or(0, |value| scaled(value).max(1));
    if limit == 0 {
        limit = if replicas > 10 {
            scaled(&IntOrString::String("10%".to_string()))
        } else if replicas >= 4 {
            2
        } else {
            1
        };
    }
    limit.min(replicas)
}

/// One term of a Kubernetes label selector string (`k=v`, `k==v`, `k!=v`, `k`, `!k`).
enum SelectorTerm {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl SelectorTerm {
    fn matches(&self, node: &NodeView) -> bool {
        match self {
            SelectorTerm::Equals(key, value) => node.labels.get(key) == Some(value),
            SelectorTerm::NotEquals(key, value) => node.labels.get(key) != Some(value),
            SelectorTerm::Exists(key) => node.labels.contains_key(key),
            SelectorTerm::NotExists(key) => !node.labels.contains_key(key),
        }
    }
}

/// The equality-based label selector strings MigrationController's
/// `nodeSelector` takes; set-based terms (`in (...)`) are refused with a
/// clear error rather than misread.
fn parse_node_selector(text: &str) -> Result<Vec<SelectorTerm>, String> {
    let mut terms = Vec::new();
    for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if raw.contains('(') || raw.contains(' ') {
            return Err(format!(
                "set-based term {raw:?} is not supported; use key=value, key!=value, key or !key"
            ));
        }
        let term = if let Some((key, value)) = raw.split_once("!=") {
            SelectorTerm::NotEquals(key.to_string(), value.to_string())
        } else if let Some((key, value)) = raw.split_once("==") {
            SelectorTerm::Equals(key.to_string(), value.to_string())
        } else if let Some((key, value)) = raw.split_once('=') {
            SelectorTerm::Equals(key.to_string(), value.to_string())
        } else if let Some(key) = raw.strip_prefix('!') {
            SelectorTerm::NotExists(key.to_string())
        } else {
            SelectorTerm::Exists(raw.to_string())
        };
        terms.push(term);
    }
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_unavailable_follows_upstream_table() {
        // Defaults by replica count.
        assert_eq!(max_unavailable(1, None), 1);
        assert_eq!(max_unavailable(3, None), 1);
        assert_eq!(max_unavailable(4, None), 2);
        assert_eq!(max_unavailable(10, None), 2);
        assert_eq!(max_unavailable(20, None), 2);
        assert_eq!(max_unavailable(35, None), 3);
        assert_eq!(max_unavailable(0, None), 0);
        // Configured: counts, percentages (rounded down, at least 1), capped.
        assert_eq!(max_unavailable(10, Some(&IntOrString::Int(5))), 5);
        assert_eq!(max_unavailable(3, Some(&IntOrString::Int(5))), 3);
        assert_eq!(
            max_unavailable(10, Some(&IntOrString::String("25%".into()))),
            2
        );
        assert_eq!(
            max_unavailable(2, Some(&IntOrString::String("10%".into()))),
            1
        );
    }

    fn pod(name: &str, node: &str, controller: &str) -> PodView {
        PodView {
            key: format!("default/{name}"),
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            node_name: node.into(),
            owners: vec![crate::model::OwnerView {
                kind: "ReplicaSet".into(),
                name: controller.into(),
                uid: controller.into(),
                controller: true,
            }],
            phase: "Running".into(),
            ready: true,
            scheduler_name: "koord-scheduler".into(),
            ..Default::default()
        }
    }

    #[test]
    fn limits_count_the_snapshots_jobs_and_the_planned_migrations() {
        let mut view = crate::model::ClusterView::default();
        for (name, node) in [
            ("a1", "n1"),
            ("a2", "n1"),
            ("a3", "n2"),
            ("a4", "n2"),
            ("a5", "n3"),
        ] {
            view.pods.push(pod(name, node, "rs-a"));
        }
        view.workloads.push(crate::model::WorkloadView {
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: "rs-a".into(),
            uid: "rs-a".into(),
            replicas: 5,
        });
        view.migration_jobs.push(crate::model::MigrationJobView {
            name: "job".into(),
            phase: "Running".into(),
            pod_namespace: "default".into(),
            pod_name: "a1".into(),
            pod_uid: "uid-a1".into(),
        });
        // A finished job counts for nothing.
        view.migration_jobs.push(crate::model::MigrationJobView {
            name: "old".into(),
            phase: "Succeeded".into(),
            pod_namespace: "default".into(),
            pod_name: "a3".into(),
            pod_uid: "uid-a3".into(),
        });
        let index = ClusterIndex::new(&view);
        let mut args = MigrationControllerArgs::default();
        crate::config::defaults::set_migration_controller_defaults(&mut args);
        args.max_migrating_per_node = Some(1);
        let mut evictor = SnapshotEvictor::new(&index, &args, None, &[], &HashMap::new()).unwrap();
        let [a1, a2, a3, a4, a5] = [0, 1, 2, 3, 4].map(|i| &view.pods[i]);
        assert_eq!(
            evictor.filter(a1).unwrap_err(),
            "pod already has a Pending or Running PodMigrationJob"
        );
        assert!(
            evictor
                .filter(a2)
                .unwrap_err()
                .starts_with("maxMigratingPerNode 1 reached on node n1")
        );
        // 5 replicas: at most 2 migrating or unavailable; a1 is migrating.
        evictor.filter(a3).unwrap();
        evictor.evict(a3, "hot").unwrap();
        assert!(
            evictor
                .filter(a4)
                .unwrap_err()
                .starts_with("maxMigratingPerNode 1 reached on node n2")
        );
        assert!(
            evictor
                .filter(a5)
                .unwrap_err()
                .starts_with("maxMigratingPerWorkload 2 reached for ReplicaSet rs-a"),
            "{:?}",
            evictor.filter(a5)
        );
        let mut args = args.clone();
        args.skip_eviction_gates = vec!["MaxMigratingPerWorkload".into()];
        args.max_migrating_globally = Some(1);
        let evictor = SnapshotEvictor::new(&index, &args, None, &[], &HashMap::new()).unwrap();
        assert!(
            evictor
                .filter(a5)
                .unwrap_err()
                .starts_with("maxMigratingGlobally 1 reached")
        );
        // A workload whose migration limits would take every replica is protected.
        let mut single = view.clone();
        single.workloads[0].replicas = 1;
        let index = ClusterIndex::new(&single);
        let evictor = SnapshotEvictor::new(&index, &args, None, &[], &HashMap::new()).unwrap();
        assert!(
            evictor
                .filter(&single.pods[4])
                .unwrap_err()
                .contains("expects 1 replicas")
        );
    }

    #[test]
    fn node_selector_strings() {
        let node = NodeView {
            labels: [("pool".to_string(), "a".to_string())].into(),
            ..Default::default()
        };
        for (text, expected) in [
            ("pool=a", true),
            ("pool==a", true),
            ("pool!=a", false),
            ("pool", true),
            ("!pool", false),
            ("pool=a,zone", false),
            ("", true),
        ] {
            let terms = parse_node_selector(text).unwrap();
            assert_eq!(terms.iter().all(|t| t.matches(&node)), expected, "{text}");
        }
        assert!(parse_node_selector("pool in (a,b)").is_err());
    }
}
