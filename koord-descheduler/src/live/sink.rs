//! Where a round's victims go. [`EvictorSink`] is the seam: the live loop
//! hands every victim that is not a dry run to one, and counts the outcome.
//! [`PodMigrationJobSink`] creates the PodMigrationJob upstream's
//! MigrationController `Evict` creates (name a fresh UUID, the pod's
//! reference, the `defaultJobMode`, `defaultJobTTL` and
//! `defaultDeleteOptions`, the reason, trigger and creator annotations,
//! phase Pending); the MigrationController then carries the job out.

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use apis::scheduling::v1alpha1::{
    PodMigrationJob, PodMigrationJobMode, PodMigrationJobPhase, PodMigrationJobSpec,
    PodMigrationJobStatus,
};
use apis::wire_enum::WireEnum;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use super::round::Victim;

/// Upstream's annotations on a PodMigrationJob the descheduler creates.
pub const ANNOTATION_EVICT_REASON: &str = "koordinator.sh/evict-reason";
pub const ANNOTATION_EVICT_TRIGGER: &str = "koordinator.sh/evict-trigger";
pub const ANNOTATION_JOB_CREATED_BY: &str = "koordinator.sh/job-created-by";

/// Longest reason annotation written; a reason is built from node and
/// resource names, so this only guards against runaway input.
pub const MAX_REASON_BYTES: usize = 4096;

pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = Result<String, SinkError>> + Send + 'a>>;

/// Starts migrations of victims.
pub trait EvictorSink: Send + Sync {
    /// Starts `victim`'s migration; `Ok` names what was created.
    fn start<'a>(&'a self, victim: &'a Victim) -> SinkFuture<'a>;
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("pod {namespace}/{name}: invalid defaultJobMode {mode:?}")]
    Mode {
        namespace: String,
        name: String,
        mode: String,
    },
    #[error("creating the PodMigrationJob of pod {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Makes PodMigrationJob names: random UUIDs (version 4 layout), as
/// upstream names its jobs with UUIDs.
#[derive(Debug, Default)]
pub struct JobNames {
    counter: AtomicU64,
}

impl JobNames {
    pub fn next(&self) -> String {
        // Each RandomState carries fresh random keys; the counter and the
        // clock keep two names apart even if the keys repeated.
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let half = |salt: u64| {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u64(salt);
            hasher.write_u64(count);
            hasher.write_u128(nanos);
            hasher.finish()
        };
        let (high, low) = (half(1), half(2));
        let bytes: u128 = (u128::from(high) << 64) | u128::from(low);
        // Version 4, variant 1.
        let bytes = (bytes & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
        let hex = format!("{bytes:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }
}

/// The PodMigrationJob upstream's MigrationController creates for `victim`.
pub fn build_job(
    victim: &Victim,
    name: String,
    created_by: &str,
) -> Result<PodMigrationJob, SinkError> {
    let mode = victim
        .mode
        .parse::<PodMigrationJobMode>()
        .ok()
        .filter(WireEnum::is_known)
        .ok_or_else(|| SinkError::Mode {
            namespace: victim.namespace.clone(),
            name: victim.name.clone(),
            mode: victim.mode.clone(),
        })?;
    let mut reason = victim.reason.clone();
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    let annotations = BTreeMap::from([
        (ANNOTATION_EVICT_REASON.to_string(), reason),
        (ANNOTATION_EVICT_TRIGGER.to_string(), victim.trigger.clone()),
        (
            ANNOTATION_JOB_CREATED_BY.to_string(),
            created_by.to_string(),
        ),
    ]);
    Ok(PodMigrationJob {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: PodMigrationJobSpec {
            paused: None,
            ttl: victim.ttl,
            mode: Some(mode),
            pod_ref: ObjectReference {
                namespace: Some(victim.namespace.clone()),
                name: Some(victim.name.clone()),
                uid: (!victim.uid.is_empty()).then(|| victim.uid.clone()),
                ..Default::default()
            },
            reservation_options: None,
            delete_options: victim.delete_options.clone(),
        },
        status: Some(PodMigrationJobStatus {
            phase: Some(PodMigrationJobPhase::Pending),
            ..Default::default()
        }),
    })
}

/// Creates a PodMigrationJob per victim.
pub struct PodMigrationJobSink {
    api: Api<PodMigrationJob>,
    /// Upstream writes its reconciler's UID; ours is the process identity.
    created_by: String,
    names: JobNames,
}

impl PodMigrationJobSink {
    pub fn new(client: kube::Client, created_by: impl Into<String>) -> Self {
        PodMigrationJobSink {
            api: Api::all(client),
            created_by: created_by.into(),
            names: JobNames::default(),
        }
    }
}

impl EvictorSink for PodMigrationJobSink {
    fn start<'a>(&'a self, victim: &'a Victim) -> SinkFuture<'a> {
        Box::pin(async move {
            let job = build_job(victim, self.names.next(), &self.created_by)?;
            let created = self
                .api
                .create(&PostParams::default(), &job)
                .await
                .map_err(|source| SinkError::Create {
                    namespace: victim.namespace.clone(),
                    name: victim.name.clone(),
                    source,
                })?;
            Ok(created.metadata.name.unwrap_or_default())
        })
    }
}
