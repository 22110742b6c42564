//! The offline simulator: loads a YAML cluster snapshot, schedules pending
//! pods one by one through the same filter → score → bind-time reservation
//! code as the extender, and reports each placement.

use std::collections::{BTreeMap, HashSet};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::cache::{Change, Object};
use crate::framework::Scheduler;

/// The per-pod loop and its outcome live in [`crate::placement`], shared
/// with the extender and the Reservation controller.
pub use crate::placement::{Placement, schedule_one};

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

/// The whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimulationReport {
    pub placements: Vec<Placement>,
    /// PodGroup `namespace/name` → the status the run leaves it in (only
    /// groups whose status would change; omitted when none).
    #[serde(rename = "podGroups", skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_groups: BTreeMap<String, serde_json::Value>,
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
    let mut placements = crate::placement::schedule_pending_reservations(scheduler, now);
    // Details stay by node index while pods are placed (no node changes
    // during the run) and are named once every pod is placed.
    let scheduled: Vec<crate::placement::ScheduledPod> = order
        .iter()
        .map(|key| crate::placement::schedule_one_indexed(scheduler, key, now, true))
        .collect();
    placements.extend(scheduled.into_iter().map(|s| s.resolve(&scheduler.cache)));
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
            .and_then(|n| placement.scores.get(n.as_str()))
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

    use super::*;

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
}
