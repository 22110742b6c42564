//! The pure half of the executor: merging requests for the same file and
//! ordering writes so the kernel accepts every step.
//!
//! Hierarchical resources constrain a parent and its children: a v1 child
//! cpuset must stay inside its parent's, and a v1 child CFS quota may not
//! exceed its parent's. So:
//! - widening steps (a larger cpuset, a higher quota, unlimited counting as
//!   infinite) run top-down: parents before children;
//! - narrowing steps run bottom-up: children before parents;
//! - a cpuset change that is neither (`0-1` → `2-3`) is split into a widening
//!   step to the union, then a narrowing step to the target.
//!
//! Files without such a constraint keep their submission order and come after
//! the ordered steps (so a `cgroup.procs` write lands after the cpuset that
//! makes it valid).

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use crate::system::cgroup::{CgroupResource, CgroupValue, CgroupValueError, HierarchyOrder};

/// How a request combines with an earlier request for the same file in the
/// same batch. The later request decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MergePolicy {
    /// The later value replaces the earlier one (last writer wins).
    #[default]
    Replace,
    /// For cpuset lists: write the union of both requests, so neither loses
    /// CPUs (e.g. two strategies each needing some CPUs in a shared parent).
    /// Falls back to replace for other values.
    CpusetUnion,
}

/// One requested write: `value` (in v1 terms) for `resource` of the cgroup
/// at `dir` (relative to the hierarchy root), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdate {
    pub dir: PathBuf,
    pub resource: CgroupResource,
    pub value: CgroupValue,
    pub reason: String,
    pub merge: MergePolicy,
}

impl ResourceUpdate {
    /// Validates and normalises the value for the resource.
    pub fn new(
        dir: impl Into<PathBuf>,
        resource: CgroupResource,
        value: CgroupValue,
        reason: impl Into<String>,
    ) -> Result<Self, CgroupValueError> {
        Ok(Self {
            dir: dir.into(),
            resource,
            value: resource.validate(value)?,
            reason: reason.into(),
            merge: MergePolicy::Replace,
        })
    }

    /// Parses `value` as written in v1 terms (`"-1"`, `"0-3"`, ...).
    pub fn parse(
        dir: impl Into<PathBuf>,
        resource: CgroupResource,
        value: &str,
        reason: impl Into<String>,
    ) -> Result<Self, CgroupValueError> {
        let value = resource.parse_value(value)?;
        Self::new(dir, resource, value, reason)
    }

    pub fn with_merge(mut self, merge: MergePolicy) -> Self {
        self.merge = merge;
        self
    }

    fn same_file(&self, other: &Self) -> bool {
        self.resource == other.resource && normalized(&self.dir) == normalized(&other.dir)
    }
}

/// The role of a planned write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StepKind {
    /// No hierarchy constraint.
    Plain,
    /// Looser than the current value (or the current value is unknown): top-down.
    Widen,
    /// Intermediate union of current and target, before narrowing: top-down.
    Loosen,
    /// Tighter than the current value: bottom-up.
    Narrow,
    /// Same as the current value.
    Unchanged,
}

/// One write of the plan, in execution order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWrite {
    pub dir: PathBuf,
    pub resource: CgroupResource,
    pub value: CgroupValue,
    pub reason: String,
    pub step: StepKind,
}

impl PlannedWrite {
    /// Whether this step leaves the file at the requested value (not an
    /// intermediate step).
    pub fn is_final(&self) -> bool {
        self.step != StepKind::Loosen
    }
}

/// Folds requests for the same file into one, keeping the position of the
/// first request and applying each later request's [`MergePolicy`].
pub fn merge_updates(updates: impl IntoIterator<Item = ResourceUpdate>) -> Vec<ResourceUpdate> {
    let mut merged: Vec<ResourceUpdate> = Vec::new();
    for update in updates {
        let Some(existing) = merged.iter_mut().find(|u| u.same_file(&update)) else {
            merged.push(update);
            continue;
        };
        let union = match (update.merge, &existing.value, &update.value) {
            (MergePolicy::CpusetUnion, CgroupValue::CpuSet(old), CgroupValue::CpuSet(new)) => {
                Some(CgroupValue::CpuSet(old.union(new)))
            }
            _ => None,
        };
        match union {
            Some(value) => {
                existing.value = value;
                if existing.reason != update.reason {
                    existing.reason = format!("{}; {}", existing.reason, update.reason);
                }
            }
            None => {
                existing.value = update.value;
                existing.reason = update.reason;
            }
        }
        existing.merge = update.merge;
    }
    merged
}

/// Merges `updates` and orders them into kernel-acceptable steps. `current`
/// gives each file's present value (v1 terms), `None` when unknown or the
/// cgroup does not exist yet; unknown counts as widening, which is the right
/// order for freshly created cgroups.
pub fn plan(
    updates: impl IntoIterator<Item = ResourceUpdate>,
    current: impl Fn(&Path, CgroupResource) -> Option<CgroupValue>,
) -> Vec<PlannedWrite> {
    let mut top_down = Vec::new();
    let mut bottom_up = Vec::new();
    let mut plain = Vec::new();
    for update in merge_updates(updates) {
        let step = |value: CgroupValue, step| PlannedWrite {
            dir: update.dir.clone(),
            resource: update.resource,
            value,
            reason: update.reason.clone(),
            step,
        };
        let Some(order) = update.resource.hierarchy_order() else {
            plain.push(step(update.value.clone(), StepKind::Plain));
            continue;
        };
        let present = current(&update.dir, update.resource);
        match compare(order, present.as_ref(), &update.value) {
            Direction::Same => top_down.push(step(update.value.clone(), StepKind::Unchanged)),
            Direction::Looser => top_down.push(step(update.value.clone(), StepKind::Widen)),
            Direction::Tighter => bottom_up.push(step(update.value.clone(), StepKind::Narrow)),
            Direction::Neither(union) => {
                top_down.push(step(union, StepKind::Loosen));
                bottom_up.push(step(update.value.clone(), StepKind::Narrow));
            }
        }
    }
    // Stable sorts: equal depths keep submission order.
    top_down.sort_by_key(|w| depth(&w.dir));
    bottom_up.sort_by_key(|w| std::cmp::Reverse(depth(&w.dir)));
    top_down.into_iter().chain(bottom_up).chain(plain).collect()
}

enum Direction {
    Same,
    Looser,
    Tighter,
    /// Neither contains the other; carries the union to widen to first.
    Neither(CgroupValue),
}

fn compare(
    order: HierarchyOrder,
    present: Option<&CgroupValue>,
    target: &CgroupValue,
) -> Direction {
    match order {
        HierarchyOrder::SetInclusion => {
            let (Some(CgroupValue::CpuSet(present)), CgroupValue::CpuSet(target)) =
                (present, target)
            else {
                return Direction::Looser;
            };
            if present == target {
                Direction::Same
            } else if target.is_superset(present) {
                Direction::Looser
            } else if target.is_subset(present) {
                Direction::Tighter
            } else {
                Direction::Neither(CgroupValue::CpuSet(present.union(target)))
            }
        }
        HierarchyOrder::Numeric => {
            let (Some(present), Some(target)) = (present.and_then(numeric), numeric(target)) else {
                return Direction::Looser;
            };
            match target.cmp(&present) {
                Ordering::Equal => Direction::Same,
                Ordering::Greater => Direction::Looser,
                Ordering::Less => Direction::Tighter,
            }
        }
    }
}

/// Numeric value with unlimited as the largest; `None` when not numeric.
fn numeric(value: &CgroupValue) -> Option<i128> {
    match value {
        CgroupValue::Int(v) => Some(i128::from(*v)),
        CgroupValue::Unlimited => Some(i128::MAX),
        _ => None,
    }
}

fn normalized(dir: &Path) -> PathBuf {
    dir.components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect()
}

fn depth(dir: &Path) -> usize {
    dir.components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use CgroupResource::*;
    use koord_common::units::CpuSet;
    use std::collections::HashMap;

    fn cpus(text: &str) -> CgroupValue {
        CgroupValue::CpuSet(text.parse::<CpuSet>().unwrap())
    }

    fn update(dir: &str, resource: CgroupResource, value: CgroupValue) -> ResourceUpdate {
        ResourceUpdate::new(dir, resource, value, format!("test {dir}")).unwrap()
    }

    /// Runs the planner against a table of present values.
    fn plan_with(
        present: &[(&str, CgroupResource, CgroupValue)],
        updates: Vec<ResourceUpdate>,
    ) -> Vec<(String, String, StepKind)> {
        let present: HashMap<(PathBuf, CgroupResource), CgroupValue> = present
            .iter()
            .map(|(dir, r, v)| ((PathBuf::from(dir), *r), v.clone()))
            .collect();
        plan(updates, |dir, resource| {
            present.get(&(dir.to_path_buf(), resource)).cloned()
        })
        .into_iter()
        .map(|w| (w.dir.display().to_string(), w.value.to_string(), w.step))
        .collect()
    }

    fn steps(list: &[(&str, &str, StepKind)]) -> Vec<(String, String, StepKind)> {
        list.iter()
            .map(|(d, v, s)| (d.to_string(), v.to_string(), *s))
            .collect()
    }

    const P: &str = "kubepods/besteffort";
    const C: &str = "kubepods/besteffort/pod1";
    const G: &str = "kubepods/besteffort/pod1/ctr";

    #[test]
    fn cpuset_narrowing_goes_bottom_up() {
        let present = [
            (P, CpusetCpus, cpus("0-7")),
            (C, CpusetCpus, cpus("0-7")),
            (G, CpusetCpus, cpus("0-7")),
        ];
        // Submitted parent first: the plan must still narrow the leaf first.
        let planned = plan_with(
            &present,
            vec![
                update(P, CpusetCpus, cpus("0-1")),
                update(C, CpusetCpus, cpus("0-1")),
                update(G, CpusetCpus, cpus("0-1")),
            ],
        );
        assert_eq!(
            planned,
            steps(&[
                (G, "0-1", StepKind::Narrow),
                (C, "0-1", StepKind::Narrow),
                (P, "0-1", StepKind::Narrow),
            ])
        );
    }

    #[test]
    fn cpuset_widening_goes_top_down() {
        let present = [(P, CpusetCpus, cpus("0")), (C, CpusetCpus, cpus("0"))];
        let planned = plan_with(
            &present,
            vec![
                update(C, CpusetCpus, cpus("0-3")),
                update(P, CpusetCpus, cpus("0-3")),
            ],
        );
        assert_eq!(
            planned,
            steps(&[(P, "0-3", StepKind::Widen), (C, "0-3", StepKind::Widen)])
        );
    }

    #[test]
    fn cpuset_shift_widens_to_union_then_narrows() {
        // Moving a parent/child pair from CPUs 0-1 to 2-3.
        let present = [(P, CpusetCpus, cpus("0-1")), (C, CpusetCpus, cpus("0-1"))];
        let planned = plan_with(
            &present,
            vec![
                update(C, CpusetCpus, cpus("2-3")),
                update(P, CpusetCpus, cpus("2-3")),
            ],
        );
        assert_eq!(
            planned,
            steps(&[
                (P, "0-3", StepKind::Loosen),
                (C, "0-3", StepKind::Loosen),
                (C, "2-3", StepKind::Narrow),
                (P, "2-3", StepKind::Narrow),
            ])
        );
    }

    #[test]
    fn unknown_present_value_counts_as_widening() {
        let planned = plan_with(
            &[],
            vec![
                update(G, CpusetMems, cpus("0")),
                update(P, CpusetMems, cpus("0")),
            ],
        );
        assert_eq!(
            planned,
            steps(&[(P, "0", StepKind::Widen), (G, "0", StepKind::Widen)])
        );
    }

    #[test]
    fn quota_raise_is_top_down_and_lower_is_bottom_up() {
        let present = [
            (P, CpuCfsQuota, CgroupValue::Int(200_000)),
            (C, CpuCfsQuota, CgroupValue::Int(100_000)),
        ];
        let raise = plan_with(
            &present,
            vec![
                update(C, CpuCfsQuota, CgroupValue::Int(300_000)),
                update(P, CpuCfsQuota, CgroupValue::Int(400_000)),
            ],
        );
        assert_eq!(
            raise,
            steps(&[
                (P, "400000", StepKind::Widen),
                (C, "300000", StepKind::Widen)
            ])
        );
        let lower = plan_with(
            &present,
            vec![
                update(P, CpuCfsQuota, CgroupValue::Int(50_000)),
                update(C, CpuCfsQuota, CgroupValue::Int(20_000)),
            ],
        );
        assert_eq!(
            lower,
            steps(&[
                (C, "20000", StepKind::Narrow),
                (P, "50000", StepKind::Narrow)
            ])
        );
    }

    #[test]
    fn unlimited_quota_is_infinite() {
        let present = [
            (P, CpuCfsQuota, CgroupValue::Unlimited),
            (C, CpuCfsQuota, CgroupValue::Int(100_000)),
        ];
        // Limiting the unlimited parent is narrowing; lifting the child's limit is widening.
        let planned = plan_with(
            &present,
            vec![
                update(P, CpuCfsQuota, CgroupValue::Int(400_000)),
                update(C, CpuCfsQuota, CgroupValue::Int(-1)),
            ],
        );
        assert_eq!(
            planned,
            steps(&[(C, "-1", StepKind::Widen), (P, "400000", StepKind::Narrow)])
        );
        let same = plan_with(
            &present,
            vec![update(P, CpuCfsQuota, CgroupValue::Unlimited)],
        );
        assert_eq!(same, steps(&[(P, "-1", StepKind::Unchanged)]));
    }

    #[test]
    fn mixed_batch_orders_each_resource_and_keeps_plain_writes_last() {
        let present = [
            (P, CpuCfsQuota, CgroupValue::Int(200_000)),
            (C, CpuCfsQuota, CgroupValue::Int(200_000)),
            (P, CpusetCpus, cpus("0-1")),
            (C, CpusetCpus, cpus("0-1")),
        ];
        let planned = plan_with(
            &present,
            vec![
                update(C, CgroupProcs, CgroupValue::Int(42)),
                update(P, CpuCfsQuota, CgroupValue::Int(100_000)),
                update(C, CpuShares, CgroupValue::Int(2)),
                update(C, CpuCfsQuota, CgroupValue::Int(50_000)),
                update(P, CpusetCpus, cpus("0-3")),
                update(C, CpusetCpus, cpus("0-3")),
            ],
        );
        assert_eq!(
            planned,
            steps(&[
                (P, "0-3", StepKind::Widen),
                (C, "0-3", StepKind::Widen),
                (C, "50000", StepKind::Narrow),
                (P, "100000", StepKind::Narrow),
                (C, "42", StepKind::Plain),
                (C, "2", StepKind::Plain),
            ])
        );
    }

    #[test]
    fn last_writer_wins_by_default() {
        let merged = merge_updates(vec![
            update(P, CpuShares, CgroupValue::Int(100)).with_merge(MergePolicy::Replace),
            update(C, CpuShares, CgroupValue::Int(7)),
            ResourceUpdate::new(format!("/{P}/"), CpuShares, CgroupValue::Int(200), "second")
                .unwrap(),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].dir, PathBuf::from(P));
        assert_eq!(merged[0].value, CgroupValue::Int(200));
        assert_eq!(merged[0].reason, "second");
        assert_eq!(merged[1].value, CgroupValue::Int(7));
        // Same dir, different files: both kept.
        let merged = merge_updates(vec![
            update(P, CpuShares, CgroupValue::Int(100)),
            update(P, CpuCfsQuota, CgroupValue::Int(100_000)),
        ]);
        assert_eq!(merged.len(), 2);
    }

    #[test]
    fn cpuset_union_merge_when_asked() {
        let first = ResourceUpdate::new(P, CpusetCpus, cpus("0-1"), "suppress").unwrap();
        let second = ResourceUpdate::new(P, CpusetCpus, cpus("4"), "allocator")
            .unwrap()
            .with_merge(MergePolicy::CpusetUnion);
        let merged = merge_updates(vec![first.clone(), second.clone()]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].value, cpus("0-1,4"));
        assert_eq!(merged[0].reason, "suppress; allocator");
        // Without the policy the later request replaces.
        let replaced = merge_updates(vec![
            first.clone(),
            second.clone().with_merge(MergePolicy::Replace),
        ]);
        assert_eq!(replaced[0].value, cpus("4"));
        // Union on a non-cpuset falls back to replace.
        let merged = merge_updates(vec![
            update(P, CpuCfsQuota, CgroupValue::Int(100_000)),
            update(P, CpuCfsQuota, CgroupValue::Int(50_000)).with_merge(MergePolicy::CpusetUnion),
        ]);
        assert_eq!(merged[0].value, CgroupValue::Int(50_000));
    }

    #[test]
    fn invalid_requests_are_rejected_at_construction() {
        assert!(ResourceUpdate::new(P, CpuShares, CgroupValue::Int(0), "x").is_err());
        assert!(ResourceUpdate::parse(P, CpusetCpus, "1-", "x").is_err());
        assert!(ResourceUpdate::parse(P, CpuStat, "1", "x").is_err());
        let parsed = ResourceUpdate::parse(P, CpuCfsQuota, "-1", "x").unwrap();
        assert_eq!(parsed.value, CgroupValue::Unlimited);
    }
}
