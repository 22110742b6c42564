//! The offline simulator: loads a YAML cluster snapshot, schedules pending
//! pods one by one through the same filter → score → bind-time reservation
//! code as the extender, and reports each placement.

use std::collections::{BTreeMap, HashSet};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::cache::{Change, NodeInfo, Object, PodInfo};
use crate::framework::Scheduler;

/// Errors reading a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("malformed YAML: {0}")]
    Yaml(#[source] apis::yaml::YamlError),
    #[error("document {index}: malformed {kind}: {message}")]
    Object {
        index: usize,
        kind: String,
        message: String,
    },
    #[error("document {index}: {source}")]
    Refused {
        index: usize,
        #[source]
        source: crate::admission::InputError,
    },
}

/// Objects of a snapshot, in document order; unknown kinds are reported and
/// skipped. Every object passed [`crate::admission::admit`]: nameless,
/// oversized and duplicate objects are errors, refused annotations are
/// taken off and listed in `refused`.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub objects: Vec<Object>,
    pub skipped_kinds: Vec<String>,
    pub refused: Vec<String>,
    /// (kind, key) of every object, for the duplicate check.
    seen: HashSet<(crate::cache::ObjectKind, String)>,
}

/// Largest snapshot or pods file read.
pub const MAX_SNAPSHOT_BYTES: usize = 512 << 20;
/// Deepest nesting of mappings and sequences in a snapshot: Kubernetes
/// objects nest about 15 levels; reading 64 levels into JSON values fits in
/// a 2 MiB thread stack even in a debug build (100 does not).
pub const MAX_SNAPSHOT_NESTING: usize = 64;

fn decode(index: usize, value: Value, snapshot: &mut Snapshot) -> Result<(), SnapshotError> {
    if value.is_null() {
        return Ok(());
    }
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    if kind == "List" || kind.ends_with("List") {
        if let Some(items) = value.get("items").and_then(|i| i.as_array()) {
            for item in items.clone() {
                decode(index, item, snapshot)?;
            }
        }
        return Ok(());
    }
    let fail = |message: String| SnapshotError::Object {
        index,
        kind: kind.clone(),
        message,
    };
    macro_rules! typed {
        ($variant:ident) => {
            Object::$variant(serde_json::from_value(value).map_err(|e| fail(e.to_string()))?)
        };
    }
    let object = match kind.as_str() {
        "Node" => typed!(Node),
        "Pod" => typed!(Pod),
        "NodeMetric" => typed!(NodeMetric),
        "Reservation" => typed!(Reservation),
        "ElasticQuota" => typed!(ElasticQuota),
        "PodGroup" => typed!(PodGroup),
        "Device" => typed!(Device),
        "NodeResourceTopology" => typed!(NodeResourceTopology),
        other => {
            snapshot.skipped_kinds.push(other.to_string());
            return Ok(());
        }
    };
    let admitted = crate::admission::admit(object)
        .map_err(|source| SnapshotError::Refused { index, source })?;
    let key = admitted.object.key();
    if !snapshot.seen.insert((admitted.object.kind(), key.clone())) {
        return Err(SnapshotError::Refused {
            index,
            source: crate::admission::InputError::Duplicate {
                kind: admitted.object.kind(),
                key,
            },
        });
    }
    snapshot
        .refused
        .extend(admitted.refused.iter().map(ToString::to_string));
    if let Some(refused) = &admitted.invalid_amount {
        snapshot.refused.push(refused.to_string());
    }
    snapshot.objects.push(admitted.object);
    Ok(())
}

impl Snapshot {
    /// Parses multi-document YAML (a `List` document is expanded) within
    /// [`MAX_SNAPSHOT_BYTES`] and [`MAX_SNAPSHOT_NESTING`], aliases bounded
    /// by the text's size. Documents are numbered from 0, empty ones not
    /// counted.
    pub fn from_yaml(text: &str) -> Result<Self, SnapshotError> {
        let limits = apis::yaml::Limits::objects(MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_NESTING);
        let documents: Vec<Option<Value>> =
            apis::yaml::from_str_multiple(text, &limits).map_err(SnapshotError::Yaml)?;
        let mut snapshot = Snapshot::default();
        for (index, value) in documents.into_iter().flatten().enumerate() {
            decode(index, value, &mut snapshot)?;
        }
        Ok(snapshot)
    }

    /// The latest NodeMetric report: the moment the snapshot describes.
    pub fn latest_report(&self) -> Option<SystemTime> {
        self.objects
            .iter()
            .filter_map(|o| match o {
                Object::NodeMetric(m) => m
                    .status
                    .as_ref()?
                    .update_time
                    .as_ref()
                    .map(|t| SystemTime::from(t.0)),
                _ => None,
            })
            .max()
    }
}

/// One pod's outcome; the JSON contract documented in `docs/simulate.md`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    /// The chosen node, or null when none fits.
    pub node: Option<String>,
    /// Rejected node → reason.
    pub reasons: BTreeMap<String, String>,
    /// Feasible node → Σ weight × normalized plugin score.
    pub scores: BTreeMap<String, i64>,
    /// Annotations the bind wrote (or would write) on the pod.
    pub annotations: BTreeMap<String, String>,
}

/// The whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimulationReport {
    pub placements: Vec<Placement>,
    /// PodGroup `namespace/name` → the status the run leaves it in (only
    /// groups whose status would change; omitted when none).
    #[serde(rename = "podGroups", skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_groups: BTreeMap<String, serde_json::Value>,
}

/// Whether the pod restricts its nodes itself: a pinned `nodeName`, a
/// `nodeSelector` or required node affinity.
pub(crate) fn selects_nodes(pod: &PodInfo) -> bool {
    pod.pod.spec.as_ref().is_some_and(|spec| {
        spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
            || spec.node_selector.as_ref().is_some_and(|s| !s.is_empty())
            || spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_some_and(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .is_some()
                })
    })
}

/// Schedules one pending pod already in the cache; `record_details` = false
/// skips collecting per-node reasons and scores (throughput measurement).
pub fn schedule_one(
    scheduler: &mut Scheduler,
    pod_key: &str,
    now: SystemTime,
    record_details: bool,
) -> Placement {
    let mut placement = Placement {
        pod: pod_key.to_string(),
        node: None,
        reasons: BTreeMap::new(),
        scores: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    let Some(pod) = scheduler.cache.pod(pod_key).cloned() else {
        placement
            .reasons
            .insert(String::new(), "pod not found in the snapshot".into());
        return placement;
    };
    let state = match scheduler.pre_filter(&pod, now) {
        Ok(state) => state,
        Err(rejection) => {
            if record_details {
                for name in scheduler.cache.node_names_sorted() {
                    placement.reasons.insert(name, rejection.reason.clone());
                }
            }
            return placement;
        }
    };
    // Nodes are handled by reference; names are copied only for the report
    // and for the chosen node.
    // No kube-scheduler filters ahead of the simulator, so its node checks
    // (cordon, taints, selector, affinity) apply here; their reason wins.
    // A pod choosing no nodes itself passes every node that is neither
    // cordoned nor tainted without looking at the Node object.
    let selects_nodes = selects_nodes(&pod);
    let node_check = |pod: &PodInfo, node: &NodeInfo| {
        if selects_nodes || node.cordoned_or_tainted {
            crate::plugins::reservation::node_fit::check_pod_on_node(pod, node)
        } else {
            Ok(())
        }
    };
    let best = {
        let reasons = &mut placement.reasons;
        let mut feasible = scheduler.filter_all_nodes(&pod, &state, |node, rejection| {
            if record_details {
                let reason = node_check(&pod, node).err().unwrap_or(rejection.reason);
                reasons.insert(node.name.clone(), reason);
            }
        });
        feasible.retain(|node| match node.map(|n| (n, node_check(&pod, n))) {
            Some((n, Err(reason))) => {
                if record_details {
                    reasons.insert(n.name.clone(), reason);
                }
                false
            }
            _ => true,
        });
        let (totals, _) = scheduler.score_nodes(&pod, &feasible, &state);
        if record_details {
            placement.scores = feasible
                .iter()
                .zip(&totals)
                .filter_map(|(node, total)| node.map(|n| (n.name.clone(), *total)))
                .collect();
        }
        // The highest total; ties go to the earliest node in name order.
        let mut best: Option<(usize, i64)> = None;
        for (index, total) in totals.iter().enumerate() {
            if best.is_none_or(|(_, top)| *total > top) {
                best = Some((index, *total));
            }
        }
        best.and_then(|(index, _)| feasible[index])
            .map(|node| node.name.clone())
    };
    let Some(best) = best else {
        return placement;
    };
    // Nothing changed since pre-filter: the reservation can reuse its state.
    match scheduler.reserve_prepared(pod_key, &best, now, Some(state)) {
        Ok(reserved) => {
            placement.node = Some(best);
            placement.annotations = reserved.annotations;
            return placement;
        }
        Err(err) => {
            placement.scores.remove(&best);
            placement.reasons.insert(best.clone(), err.to_string());
        }
    }
    // The best node failed (and was rolled back): rank the rest, from a fresh
    // pre-filter over the unchanged cache.
    let Ok(state) = scheduler.pre_filter(&pod, now) else {
        return placement;
    };
    let mut filtered = scheduler.filter(&pod, None, &state);
    let feasible = std::mem::take(&mut filtered.feasible);
    let scores = scheduler.score_owned(&pod, feasible, &state);
    let mut ranked: Vec<(String, i64)> = scores
        .totals
        .into_iter()
        .filter(|(n, _)| {
            *n != best
                && scheduler
                    .cache
                    .node(n)
                    .is_none_or(|node| node_check(&pod, node).is_ok())
        })
        .collect();
    // Worst first, so `pop` yields the best (ties: name order).
    ranked.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)));
    while let Some((node, _)) = ranked.pop() {
        match scheduler.reserve(pod_key, &node, now) {
            Ok(reserved) => {
                placement.node = Some(node);
                placement.annotations = reserved.annotations;
                return placement;
            }
            Err(err) => {
                placement.scores.remove(&node);
                placement.reasons.insert(node.clone(), err.to_string());
            }
        }
    }
    placement
}

/// Loads the snapshot (and extra pods) into `scheduler` and schedules every
/// pending pod in document order.
pub fn simulate(
    scheduler: &mut Scheduler,
    snapshot: Snapshot,
    extra_pods: Snapshot,
    now: SystemTime,
) -> SimulationReport {
    let mut order = Vec::new();
    let mut queued = HashSet::new();
    for object in snapshot.objects.into_iter().chain(extra_pods.objects) {
        if let Object::Pod(pod) = &object {
            let unbound = pod
                .spec
                .as_ref()
                .and_then(|spec| spec.node_name.as_deref())
                .is_none_or(str::is_empty);
            let key = object.key();
            if unbound && queued.insert(key.clone()) {
                order.push(key);
            }
        }
        scheduler.apply(Change::Upsert(object));
    }
    // Pending Reservations are placed first, as reserve pods.
    let mut placements = crate::plugins::reservation::schedule_pending_reservations(scheduler, now);
    placements.extend(
        order
            .iter()
            .map(|key| schedule_one(scheduler, key, now, true)),
    );
    let pod_groups = scheduler
        .pending_status_writes(now)
        .into_iter()
        .filter(|w| w.resource == crate::plugins::coscheduling::POD_GROUP_RESOURCE)
        .map(|w| {
            let key = crate::cache::object_key(w.namespace.as_deref(), &w.name);
            (key, w.patch["status"].clone())
        })
        .collect();
    SimulationReport {
        placements,
        pod_groups,
    }
}

/// The human-readable table.
pub fn render_table(report: &SimulationReport) -> String {
    let mut rows = vec![[
        "POD".to_string(),
        "NODE".to_string(),
        "SCORE".to_string(),
        "REJECTED".to_string(),
        "FIRST REASON".to_string(),
    ]];
    for placement in &report.placements {
        let node = placement.node.clone().unwrap_or_else(|| "<none>".into());
        let score = placement
            .node
            .as_ref()
            .and_then(|n| placement.scores.get(n))
            .map_or("-".to_string(), |s| s.to_string());
        let first_reason = placement
            .reasons
            .iter()
            .next()
            .map_or("-".to_string(), |(n, r)| format!("{n}: {r}"));
        rows.push([
            placement.pod.clone(),
            node,
            score,
            placement.reasons.len().to_string(),
            first_reason,
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::cache::{ClusterCache, NodeInfo};
    use crate::framework::{CycleState, Plugin, PluginEntry, Rejection};
    use crate::testutil::*;
    use serde_json::json;

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        for text in [
            hostile::alias_bomb(),
            hostile::deep_flow(10_000),
            hostile::deep_block(10_000),
        ] {
            match Snapshot::from_yaml(&text) {
                Err(SnapshotError::Yaml(error)) => assert!(error.is_budget(), "{error}"),
                other => panic!("not refused for its budget: {other:?}"),
            }
        }
    }

    fn cluster() -> Vec<Object> {
        let mut objects = vec![quota(
            "team",
            &[("cpu", "4")],
            &[("cpu", "40"), ("kubernetes.io/batch-cpu", "20000")],
            &[],
            &[],
        )];
        for (index, cpu) in ["4", "2", "8", "2"].iter().enumerate() {
            objects.push(node(
                &format!("n{index}"),
                &[
                    ("cpu", cpu),
                    ("memory", "32Gi"),
                    ("pods", "110"),
                    ("kubernetes.io/batch-cpu", "3000"),
                ],
            ));
        }
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for (index, name) in names.iter().enumerate() {
            // Five batch pods for four nodes with room for one each.
            let requests: &[(&str, &str)] = if index % 2 == 1 {
                &[("cpu", "3"), ("memory", "1Gi")]
            } else {
                &[("kubernetes.io/batch-cpu", "2000")]
            };
            objects.push(pod(PodSpec {
                name,
                requests,
                labels: &[("quota.scheduling.koordinator.sh/name", "team")],
                priority: Some(if index % 2 == 1 { 9500 } else { 5500 }),
                ..PodSpec::default()
            }));
        }
        objects
    }

    /// Reference: the extender's path (filter, score by name, full reserve).
    fn schedule_by_name(scheduler: &mut Scheduler, key: &str, now: SystemTime) -> Placement {
        let pod = scheduler.cache.pod(key).unwrap().clone();
        let mut placement = Placement {
            pod: key.to_string(),
            node: None,
            reasons: BTreeMap::new(),
            scores: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        let Ok(state) = scheduler.pre_filter(&pod, now) else {
            for name in scheduler.cache.node_names_sorted() {
                placement.reasons.insert(name, "pre-filter".into());
            }
            return placement;
        };
        let mut filtered = scheduler.filter(&pod, None, &state);
        let feasible = std::mem::take(&mut filtered.feasible);
        let scores = scheduler.score_owned(&pod, feasible, &state);
        placement.reasons = filtered.failed;
        placement.reasons.extend(filtered.failed_unresolvable);
        placement.scores = scores.totals.iter().cloned().collect();
        if let Some(best) = scores.best().map(str::to_string) {
            let reserved = scheduler.reserve(key, &best, now).unwrap();
            placement.node = Some(best);
            placement.annotations = reserved.annotations;
        }
        placement
    }

    #[test]
    fn reusing_the_pre_filter_state_places_pods_like_the_by_name_path() {
        let mut fast = scheduler("");
        let mut reference = scheduler("");
        load(&mut fast, cluster());
        load(&mut reference, cluster());
        let mut placed = 0;
        for name in ["a", "b", "c", "d", "e", "f", "g", "h", "i"] {
            let key = format!("default/{name}");
            let got = schedule_one(&mut fast, &key, t0(), true);
            let want = schedule_by_name(&mut reference, &key, t0());
            assert_eq!(got.node, want.node, "{key}");
            assert_eq!(got.scores, want.scores, "{key}");
            assert_eq!(got.annotations, want.annotations, "{key}");
            if want.reasons.values().all(|r| r != "pre-filter") {
                assert_eq!(got.reasons, want.reasons, "{key}");
            }
            placed += usize::from(got.node.is_some());
        }
        // The cluster is sized so that some pods fit and some do not.
        assert!(placed > 0 && placed < 9, "placed {placed}");
    }

    #[test]
    fn node_checks_skip_only_what_cannot_fail() {
        use crate::plugins::reservation::node_fit::check_pod_on_node;
        let nodes = [
            json!({"metadata": {"name": "plain", "labels": {"pool": "a"}}}),
            json!({"metadata": {"name": "cordoned"}, "spec": {"unschedulable": true}}),
            json!({"metadata": {"name": "tainted"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            json!({"metadata": {"name": "soft"}, "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}),
        ];
        let pod_with = |spec: serde_json::Value| {
            let mut spec = spec;
            spec["containers"] = json!([{"name": "main"}]);
            PodInfo::new(Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}),
                )
                .unwrap(),
            ))
        };
        let pods = [
            (pod_with(json!({})), false),
            (pod_with(json!({"nodeSelector": {}})), false),
            (pod_with(json!({"nodeSelector": {"pool": "b"}})), true),
            (
                pod_with(
                    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}),
                ),
                true,
            ),
            (pod_with(json!({"affinity": {"nodeAffinity": {}}})), false),
        ];
        let mut cache = ClusterCache::new();
        for node in nodes {
            cache.apply(Change::Upsert(Object::Node(
                serde_json::from_value(node).unwrap(),
            )));
        }
        for (pod, selects) in &pods {
            assert_eq!(selects_nodes(pod), *selects, "{:?}", pod.pod.spec);
            for node in cache.nodes_sorted() {
                // Wherever the shortcut applies, the full check agrees.
                if !selects && !node.cordoned_or_tainted {
                    assert_eq!(check_pod_on_node(pod, node), Ok(()), "{}", node.name);
                }
            }
        }
        // The skipped check is real elsewhere: a cordoned node refuses a plain pod.
        let cordoned = cache.node("cordoned").unwrap();
        assert!(check_pod_on_node(&pods[0].0, cordoned).is_err());
    }

    /// Scores `refused` highest but refuses to reserve on it.
    struct RefuseBest {
        refused: &'static str,
    }

    impl Plugin for RefuseBest {
        fn name(&self) -> &'static str {
            "RefuseBest"
        }

        fn scores(&self) -> bool {
            true
        }

        fn score(&self, _: &PodInfo, node: &NodeInfo, _: &ClusterCache, _: &CycleState) -> i64 {
            if node.name == self.refused {
                100
            } else if node.name == "n2" {
                50
            } else {
                10
            }
        }

        fn reserve(
            &mut self,
            _: &PodInfo,
            node: &str,
            _: &ClusterCache,
            _: &CycleState,
        ) -> Result<(), Rejection> {
            if node == self.refused {
                Err(Rejection::unschedulable("refused for the test"))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_failed_reservation_on_the_best_node_falls_back_to_the_next_best() {
        let plugin = PluginEntry {
            plugin: Box::new(RefuseBest { refused: "n1" }),
            filter: true,
            score_weight: 1,
        };
        let mut scheduler = Scheduler::new(vec![plugin], std::time::Duration::from_secs(60));
        load(&mut scheduler, cluster());
        let placement = schedule_one(&mut scheduler, "default/a", t0(), true);
        assert_eq!(placement.node.as_deref(), Some("n2"));
        assert!(
            placement.reasons["n1"].contains("refused for the test"),
            "{:?}",
            placement.reasons
        );
        assert!(!placement.scores.contains_key("n1"));
        assert_eq!(placement.scores["n2"], 50);
        assert_eq!(
            scheduler.cache.pod("default/a").unwrap().node.as_deref(),
            Some("n2")
        );
    }
}
