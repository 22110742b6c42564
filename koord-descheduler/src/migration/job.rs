//! The PodMigrationJob that asks for one victim's migration (upstream
//! `CreatePodMigrationJob`): named by a random UUID, the evict reason and
//! trigger annotations, this instance's `job-created-by`, the pod's
//! reference with its uid, the mode and TTL of the arguments (or of the
//! caller's [`JobContext`]), `Pending`.

use std::collections::BTreeMap;
use std::time::Duration;

use apis::extension::duration::GoDuration;
use apis::scheduling::v1alpha1::{
    PodMigrationJob, PodMigrationJobMode, PodMigrationJobPhase, PodMigrationJobSpec,
    PodMigrationJobStatus,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;

use super::{ANNOTATION_EVICT_REASON, ANNOTATION_EVICT_TRIGGER, ANNOTATION_JOB_CREATED_BY};
use crate::config::types::MigrationControllerArgs;

/// The longest evict reason or trigger accepted (they are annotation values
/// and end up in status messages).
pub const MAX_REASON_LEN: usize = 1024;

/// Identifies one controller instance; the PMJs it creates carry it, and
/// it leaves the jobs of other instances alone (upstream's reconciler UID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerId(String);

impl ReconcilerId {
    /// A fresh random id.
    pub fn generate() -> Self {
        ReconcilerId(uuid_from(random_u128()))
    }

    /// A given id (tests, or an id kept across restarts).
    pub fn new(id: impl Into<String>) -> Self {
        ReconcilerId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// 128 random bits from the standard library's per-process random keys
/// mixed with the clock (enough for object names; not for secrets).
pub fn random_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut parts = [0u64; 2];
    for (i, part) in parts.iter_mut().enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_usize(i);
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        *part = hasher.finish();
    }
    (u128::from(parts[0]) << 64) | u128::from(parts[1])
}

/// A version-4 UUID text from 128 bits.
pub fn uuid_from(bits: u128) -> String {
    let bits = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What a caller adds to the job (upstream `JobContext`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobContext {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    pub mode: Option<PodMigrationJobMode>,
}

/// Why no job was built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("the pod has no {0}")]
    IncompletePod(&'static str),
    #[error("the {what} is {len} bytes, more than {MAX_REASON_LEN}")]
    TooLong { what: &'static str, len: usize },
    #[error("defaultJobMode {0:?} is neither ReservationFirst nor EvictDirectly")]
    UnknownMode(String),
    #[error("defaultDeleteOptions: {0}")]
    DeleteOptions(String),
    #[error("the job context's {what} key {key:?} is not a valid label/annotation key")]
    InvalidKey { what: &'static str, key: String },
    #[error("the job context's label {key}={value:?} has an invalid value")]
    InvalidLabelValue { key: String, value: String },
}

/// A label or annotation key: an optional DNS-subdomain prefix and a name
/// of 1-63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn valid_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = valid_label_value(name) && !name.is_empty();
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

fn valid_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && value.as_bytes()[0].is_ascii_alphanumeric()
            && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric())
}

/// The mode of `defaultJobMode`.
pub fn parse_mode(text: &str) -> Result<PodMigrationJobMode, JobError> {
    match text {
        "ReservationFirst" => Ok(PodMigrationJobMode::ReservationFirst),
        "EvictDirectly" => Ok(PodMigrationJobMode::EvictDirectly),
        other => Err(JobError::UnknownMode(other.to_string())),
    }
}

/// `defaultDeleteOptions`, which the configuration keeps as written.
pub fn parse_delete_options(
    args: &MigrationControllerArgs,
) -> Result<Option<DeleteOptions>, JobError> {
    args.default_delete_options
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|err| JobError::DeleteOptions(err.to_string()))
}

/// Builds the job for `pod` (nothing is sent).
pub fn build_migration_job(
    pod: &Pod,
    reason: &str,
    trigger: &str,
    args: &MigrationControllerArgs,
    reconciler: &ReconcilerId,
    context: Option<&JobContext>,
    name_bits: u128,
) -> Result<PodMigrationJob, JobError> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(JobError::IncompletePod("namespace"))?;
    let name = pod
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(JobError::IncompletePod("name"))?;
    let uid = pod
        .metadata
        .uid
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(JobError::IncompletePod("uid"))?;
    for (what, text) in [("evict reason", reason), ("evict trigger", trigger)] {
        if text.len() > MAX_REASON_LEN {
            return Err(JobError::TooLong {
                what,
                len: text.len(),
            });
        }
    }
    let mode = parse_mode(&args.default_job_mode)?;
    let mut annotations = BTreeMap::from([
        (ANNOTATION_EVICT_REASON.to_string(), reason.to_string()),
        (ANNOTATION_EVICT_TRIGGER.to_string(), trigger.to_string()),
        (
            ANNOTATION_JOB_CREATED_BY.to_string(),
            reconciler.as_str().to_string(),
        ),
    ]);
    let mut spec = PodMigrationJobSpec {
        paused: None,
        ttl: args.default_job_ttl,
        mode: Some(mode),
        pod_ref: ObjectReference {
            namespace: Some(namespace),
            name: Some(name),
            uid: Some(uid),
            ..ObjectReference::default()
        },
        reservation_options: None,
        delete_options: parse_delete_options(args)?,
    };
    let mut labels = BTreeMap::new();
    if let Some(context) = context {
        for (key, value) in &context.labels {
            if !valid_key(key) {
                return Err(JobError::InvalidKey {
                    what: "label",
                    key: key.clone(),
                });
            }
            if !valid_label_value(value) {
                return Err(JobError::InvalidLabelValue {
                    key: key.clone(),
                    value: value.clone(),
                });
            }
            labels.insert(key.clone(), value.clone());
        }
        for (key, value) in &context.annotations {
            if !valid_key(key) {
                return Err(JobError::InvalidKey {
                    what: "annotation",
                    key: key.clone(),
                });
            }
            annotations.insert(key.clone(), value.clone());
        }
        if let Some(timeout) = context.timeout {
            spec.ttl = Some(GoDuration::from_std(timeout));
        }
        if let Some(mode) = &context.mode {
            spec.mode = Some(mode.clone());
        }
    }
    let mut job = PodMigrationJob::new(&uuid_from(name_bits), spec);
    job.metadata.annotations = Some(annotations);
    job.metadata.labels = (!labels.is_empty()).then_some(labels);
    job.status = Some(PodMigrationJobStatus {
        phase: Some(PodMigrationJobPhase::Pending),
        ..PodMigrationJobStatus::default()
    });
    Ok(job)
}
