//! The arbitrator (upstream `arbitrator`): jobs waiting to start are sorted,
//! then each job's pod goes through the evictor's filters in that order —
//! a non-retryable failure fails the job (`ForbiddenMigratePod`), a limit
//! keeps it waiting, and a pass marks it `passed-arbitration` and counts it
//! as migrating for the jobs after it. The filters and limits are the ones
//! LowNodeLoad's evictor uses ([`crate::evictor::SnapshotEvictor`]).

use std::cmp::Ordering;
use std::collections::HashMap;

use apis::scheduling::v1alpha1::{PodMigrationJob, PodMigrationJobPhase};

use super::ANNOTATION_PASSED_ARBITRATION;
use crate::evictor::{ArbitrationRefusal, SnapshotEvictor};
use crate::loadaware::sort::{Candidate, compare_victims};
use crate::model::{MigrationJobView, PodView};

/// The kind whose pods the arbitrator keeps together (upstream `JobKind`).
const BATCH_JOB_KIND: &str = "Job";

/// Whether the job passed arbitration already.
pub fn passed(job: &PodMigrationJob) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PASSED_ARBITRATION))
        .is_some_and(|v| v == "true")
}

fn phase(job: &PodMigrationJob) -> Option<PodMigrationJobPhase> {
    job.status.as_ref().and_then(|s| s.phase.clone())
}

/// A job waiting for arbitration: Pending (or without a phase), not paused,
/// not yet passed.
pub fn is_waiting(job: &PodMigrationJob) -> bool {
    matches!(phase(job), None | Some(PodMigrationJobPhase::Pending))
        && job.spec.paused != Some(true)
        && !passed(job)
}

/// Whether the job counts as migrating while others are arbitrated:
/// Running, or Pending and passed (upstream's phase contexts for an
/// arbitrating pod).
pub fn counts_as_migrating(job: &PodMigrationJob) -> bool {
    match phase(job) {
        Some(PodMigrationJobPhase::Running) => true,
        None | Some(PodMigrationJobPhase::Pending) => passed(job),
        _ => false,
    }
}

/// The job as the evictor's ledger reads it.
pub fn job_view(job: &PodMigrationJob) -> MigrationJobView {
    let pod_ref = &job.spec.pod_ref;
    MigrationJobView {
        name: job.metadata.name.clone().unwrap_or_default(),
        phase: phase(job).map_or_else(|| "Pending".to_string(), |p| p.as_str().to_string()),
        pod_namespace: pod_ref.namespace.clone().unwrap_or_default(),
        pod_name: pod_ref.name.clone().unwrap_or_default(),
        pod_uid: pod_ref.uid.clone().unwrap_or_default(),
    }
}

/// A waiting job and its pod (`None`: the pod was not found).
#[derive(Clone, Copy, Debug)]
pub struct Waiting<'a> {
    pub job: &'a PodMigrationJob,
    pub pod: Option<&'a PodView>,
}

fn created_seconds(job: &PodMigrationJob) -> i64 {
    job.metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second())
}

fn batch_owner(pod: Option<&PodView>) -> Option<&str> {
    pod.and_then(|p| p.controller())
        .filter(|owner| owner.kind == BATCH_JOB_KIND)
        .map(|owner| owner.uid.as_str())
}

/// Upstream's order, each sort stable over the previous: newest job first
/// (by second); then by the pod order of LowNodeLoad's victims (jobs
/// without a pod first); then jobs of one batch Job kept together at the
/// first one's place; then batch Jobs with more migrating jobs first.
/// `migrating_by_batch_owner` counts Running or passed jobs per Job uid.
pub fn sort(waiting: &mut [Waiting<'_>], migrating_by_batch_owner: &HashMap<String, usize>) {
    waiting.sort_by_key(|w| std::cmp::Reverse(created_seconds(w.job)));
    waiting.sort_by(|a, b| match (a.pod, b.pod) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(p), Some(q)) => compare_victims(
            &Candidate {
                pod: p,
                usage_score: None,
            },
            &Candidate {
                pod: q,
                usage_score: None,
            },
        ),
    });
    let mut first_rank: HashMap<&str, usize> = HashMap::new();
    let ranks: Vec<usize> = waiting
        .iter()
        .enumerate()
        .map(|(i, w)| match batch_owner(w.pod) {
            Some(owner) => *first_rank.entry(owner).or_insert(i),
            None => i,
        })
        .collect();
    let mut ranked: Vec<(usize, Waiting<'_>)> =
        ranks.into_iter().zip(waiting.iter().copied()).collect();
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.sort_by_key(|(_, w)| {
        std::cmp::Reverse(
            batch_owner(w.pod)
                .and_then(|owner| migrating_by_batch_owner.get(owner))
                .copied()
                .unwrap_or(0),
        )
    });
    for (slot, (_, w)) in waiting.iter_mut().zip(ranked) {
        *slot = w;
    }
}

/// The arbitrator's verdict on one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Mark it passed; it starts.
    Passed,
    /// Fail it: `ForbiddenMigratePod` with this message.
    Forbidden(String),
    /// Keep it waiting for this reason.
    Limited(String),
}

/// Upstream `doOnceArbitrate` over sorted jobs. `evictor` holds the
/// cluster and the jobs already counted as migrating; every pass is counted
/// for the jobs after it. A job whose pod was not found passes (its
/// reconcile then fails it for the missing pod), as upstream.
pub fn arbitrate<'a>(
    waiting: &[Waiting<'a>],
    evictor: &mut SnapshotEvictor<'_>,
) -> Vec<(&'a PodMigrationJob, Verdict)> {
    let mut verdicts = Vec::with_capacity(waiting.len());
    for w in waiting {
        let verdict = match w.pod {
            None => Verdict::Passed,
            Some(pod) => {
                let verdict = verdict_from(evictor.arbitrate(pod), pod.key());
                if verdict == Verdict::Passed {
                    evictor.admit(pod);
                }
                verdict
            }
        };
        verdicts.push((w.job, verdict));
    }
    verdicts
}

/// The verdict of the evictor's answer for the pod `key`.
pub fn verdict_from(answer: Result<(), ArbitrationRefusal>, key: &str) -> Verdict {
    match answer {
        Ok(()) => Verdict::Passed,
        Err(ArbitrationRefusal::Forbidden(why)) => Verdict::Forbidden(format!(
            "Pod \"{key}\" is forbidden to migrate because it does not meet the requirements: {why}"
        )),
        Err(ArbitrationRefusal::Limited(why)) => Verdict::Limited(why),
    }
}

/// Running or passed jobs per batch-Job owner uid, for [`sort`].
pub fn migrating_by_batch_owner<'a>(
    jobs: impl Iterator<Item = &'a PodMigrationJob>,
    pod_of: impl Fn(&PodMigrationJob) -> Option<&'a PodView>,
) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for job in jobs.filter(|job| counts_as_migrating(job)) {
        if let Some(owner) = batch_owner(pod_of(job)) {
            *counts.entry(owner.to_string()).or_insert(0) += 1;
        }
    }
    counts
}
