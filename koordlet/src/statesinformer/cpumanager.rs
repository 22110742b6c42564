//! The kubelet's CPU manager checkpoint, `<--var-lib-kubelet-dir>/cpu_manager_state`
//! (upstream koordlet reads the same file, below the same flag).
//!
//! The kubelet writes it as JSON: `policyName` (`none` or `static`),
//! `defaultCpuSet` (the shared pool), `entries` (pod UID → container name →
//! the cpuset the static policy pinned) and `checksum`. Reading is bounded
//! ([`MAX_CPU_MANAGER_STATE_BYTES`], [`MAX_CHECKPOINT_PODS`], …) and every
//! structural problem is a [`CheckpointError`] naming the file. The checksum
//! is read but not verified: the kubelet hashes Go's debug printing of its
//! own struct, which koordlet cannot reproduce faithfully; the kubelet
//! itself refuses a corrupt file at start.
//!
//! [`kubelet_cpu_manager_view`] is the pure part: what the checkpoint (or,
//! without one, the Node's `kubelet.koordinator.sh/cpu-manager-policy`
//! annotation) means for the BE cpuset — the policy and the CPUs pinned to
//! pods koordinator does not manage.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use apis::extension::{
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY, KUBELET_CPU_MANAGER_POLICY_NONE,
    KUBELET_CPU_MANAGER_POLICY_STATIC, KubeletCPUManagerPolicy, PodCPUAlloc, QoSClass, StringMap,
    get_kubelet_cpu_manager_policy, get_resource_status, pod_qos_class_raw,
};
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use koord_common::units::CpuSet;

/// Name of the kubelet's CPU manager checkpoint file in its root directory.
pub const CPU_MANAGER_STATE_FILE: &str = "cpu_manager_state";
/// Largest checkpoint read. A node at the kubelet's pod limit with many
/// containers each writes a few hundred KiB at most.
pub const MAX_CPU_MANAGER_STATE_BYTES: u64 = 4 << 20;
/// Most pods (`entries` keys) accepted in one checkpoint.
pub const MAX_CHECKPOINT_PODS: usize = 10_000;
/// Most containers accepted for one pod.
pub const MAX_CHECKPOINT_CONTAINERS_PER_POD: usize = 1_000;
/// Longest pod UID, container name or policy name accepted.
const MAX_NAME_BYTES: usize = 253;

/// A checkpoint that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is larger than {limit} bytes; not read")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("malformed {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
}

/// The kubelet's CPU manager checkpoint (v2 format, kubelet ≥ 1.18);
/// deserializing validates it (see [`parse_cpu_manager_checkpoint`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "RawCheckpoint")]
pub struct CpuManagerCheckpoint {
    pub policy_name: String,
    pub default_cpu_set: String,
    /// Pod UID → container name → cpuset (kept as written; parsed per entry
    /// by the users so one bad entry does not hide the others).
    pub entries: BTreeMap<String, BTreeMap<String, String>>,
    /// As written; not verified (see the module documentation).
    pub checksum: Option<u64>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCheckpoint {
    #[serde(default)]
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: Option<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    checksum: Option<u64>,
}

/// The pre-1.18 layout: container ID → cpuset.
#[derive(serde::Deserialize)]
struct RawCheckpointV1 {
    #[serde(rename = "entries")]
    _entries: BTreeMap<String, String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && !name.chars().any(char::is_control)
}

/// Parses and validates a checkpoint's text (`Err` is the reason).
pub fn parse_cpu_manager_checkpoint(text: &str) -> Result<CpuManagerCheckpoint, String> {
    serde_json::from_str(text).map_err(|error| {
        if serde_json::from_str::<RawCheckpointV1>(text).is_ok() {
            format!(
                "entries keyed by container ID (the kubelet's pre-1.18 v1 format) are not supported: {error}"
            )
        } else {
            error.to_string()
        }
    })
}

impl TryFrom<RawCheckpoint> for CpuManagerCheckpoint {
    type Error = String;

    fn try_from(raw: RawCheckpoint) -> Result<Self, String> {
        validate(raw)
    }
}

fn validate(raw: RawCheckpoint) -> Result<CpuManagerCheckpoint, String> {
    if raw.policy_name.is_empty() {
        return Err("policyName is missing or empty".to_string());
    }
    if !valid_name(&raw.policy_name) {
        return Err(format!(
            "policyName {:?} is not a policy name",
            crate::bounds::for_log(&raw.policy_name)
        ));
    }
    raw.default_cpu_set
        .trim()
        .parse::<CpuSet>()
        .map_err(|error| format!("defaultCpuSet: {error}"))?;
    let entries = raw.entries.unwrap_or_default();
    if entries.len() > MAX_CHECKPOINT_PODS {
        return Err(format!(
            "{} pods in entries, more than {MAX_CHECKPOINT_PODS}",
            entries.len()
        ));
    }
    for (uid, containers) in &entries {
        if !valid_name(uid) {
            return Err(format!(
                "entries: {:?} is not a pod UID",
                crate::bounds::for_log(uid)
            ));
        }
        if containers.len() > MAX_CHECKPOINT_CONTAINERS_PER_POD {
            return Err(format!(
                "entries: pod {uid} has {} containers, more than {MAX_CHECKPOINT_CONTAINERS_PER_POD}",
                containers.len()
            ));
        }
        if let Some(name) = containers.keys().find(|name| !valid_name(name)) {
            return Err(format!(
                "entries: pod {uid}: {:?} is not a container name",
                crate::bounds::for_log(name)
            ));
        }
    }
    Ok(CpuManagerCheckpoint {
        policy_name: raw.policy_name,
        default_cpu_set: raw.default_cpu_set,
        entries,
        checksum: raw.checksum,
    })
}

/// The checkpoint path below the kubelet's root directory.
pub fn cpu_manager_state_path(kubelet_root: &Path) -> PathBuf {
    kubelet_root.join(CPU_MANAGER_STATE_FILE)
}

/// Reads `<kubelet_root>/cpu_manager_state`: `Ok(None)` when absent or
/// empty (no CPU manager has written it), an error when unreadable, larger
/// than [`MAX_CPU_MANAGER_STATE_BYTES`] or malformed.
pub fn read_cpu_manager_checkpoint(
    kubelet_root: &Path,
) -> Result<Option<CpuManagerCheckpoint>, CheckpointError> {
    let path = cpu_manager_state_path(kubelet_root);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(CheckpointError::Read { path, source }),
    };
    // One byte past the limit tells "too large" from "exactly the limit".
    let mut bytes = Vec::new();
    if let Err(source) = file
        .take(MAX_CPU_MANAGER_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
    {
        return Err(CheckpointError::Read { path, source });
    }
    if bytes.len() as u64 > MAX_CPU_MANAGER_STATE_BYTES {
        return Err(CheckpointError::TooLarge {
            path,
            limit: MAX_CPU_MANAGER_STATE_BYTES,
        });
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(CheckpointError::Malformed {
            path,
            reason: "not UTF-8".to_string(),
        });
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse_cpu_manager_checkpoint(&text)
        .map(Some)
        .map_err(|reason| CheckpointError::Malformed { path, reason })
}

/// Where the kubelet CPU manager policy was learnt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicySource {
    /// No checkpoint and no Node annotation (or no kubelet directory given).
    #[default]
    Unknown,
    /// The kubelet's checkpoint file.
    Checkpoint,
    /// The Node's `kubelet.koordinator.sh/cpu-manager-policy` annotation
    /// (pinned CPUs are then unknown).
    NodeAnnotation,
}

/// What the kubelet's CPU manager means for the BE cpuset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletCpuManagerView {
    /// The policy name (`none`, `static`, or what the source said); empty
    /// when unknown.
    pub policy: String,
    pub source: PolicySource,
    /// The checkpoint path looked at, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_path: Option<String>,
    /// The checkpoint's shared pool, when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_cpu_set: Option<String>,
    /// CPUs the static policy pinned to pods koordinator does not manage
    /// (Guaranteed pods without a koordinator QoS or scheduler cpuset).
    pub pinned_cpus: CpuSet,
    /// Those pods, `namespace/name` (or the UID of pods not on the node
    /// any more), with their CPUs.
    pub pinned_pods: Vec<String>,
    /// Inputs left out and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl KubeletCpuManagerView {
    /// The kubelet runs the static policy.
    pub fn is_static(&self) -> bool {
        self.policy == KUBELET_CPU_MANAGER_POLICY_STATIC
    }

    /// One line for logs and `/qos/explain` reasons.
    pub fn summary(&self) -> String {
        let policy = if self.policy.is_empty() {
            "unknown (treated as none)"
        } else {
            &self.policy
        };
        let source = match (&self.source, &self.checkpoint_path) {
            (PolicySource::Checkpoint, Some(path)) => format!(" from {path}"),
            (PolicySource::NodeAnnotation, _) => {
                format!(" from the Node annotation {ANNOTATION_KUBELET_CPU_MANAGER_POLICY}")
            }
            _ => String::new(),
        };
        let pinned = if !self.is_static() {
            String::new()
        } else if self.source == PolicySource::NodeAnnotation {
            "; pinned CPUs unknown (no readable checkpoint)".to_string()
        } else if self.pinned_cpus.is_empty() {
            "; no CPU pinned to Guaranteed pods".to_string()
        } else {
            format!(
                "; CPUs {} pinned to Guaranteed pods ({}) excluded from BE",
                self.pinned_cpus,
                self.pinned_pods.join(", ")
            )
        };
        format!("kubelet CPU manager policy {policy}{source}{pinned}")
    }
}

/// The view from a checkpoint read (`checkpoint_path` is where it was
/// read, `None` when no kubelet directory is configured), the Node's
/// annotations and the node's pods. The checkpoint wins; the annotation
/// only speaks for nodes whose checkpoint koordlet cannot see.
pub fn kubelet_cpu_manager_view(
    checkpoint: Result<Option<&CpuManagerCheckpoint>, String>,
    checkpoint_path: Option<&Path>,
    node_annotations: &StringMap,
    pods: &[Pod],
) -> KubeletCpuManagerView {
    let mut view = KubeletCpuManagerView {
        checkpoint_path: checkpoint_path.map(|p| p.display().to_string()),
        ..KubeletCpuManagerView::default()
    };
    match checkpoint {
        Ok(Some(checkpoint)) => {
            view.source = PolicySource::Checkpoint;
            view.policy = checkpoint.policy_name.clone();
            view.default_cpu_set = Some(checkpoint.default_cpu_set.clone());
            if !matches!(
                view.policy.as_str(),
                KUBELET_CPU_MANAGER_POLICY_STATIC | KUBELET_CPU_MANAGER_POLICY_NONE
            ) {
                view.problems.push(format!(
                    "unknown kubelet CPU manager policy {:?}: treated as none",
                    view.policy
                ));
            }
            let (state, problems) = kubelet_cpu_state(Some(checkpoint), pods);
            view.problems.extend(problems);
            view.pinned_cpus = state.pinned;
            view.pinned_pods = state
                .allocs
                .iter()
                .map(|alloc| {
                    let who = if alloc.name.is_empty() {
                        format!("uid {}", alloc.uid)
                    } else {
                        format!("{}/{}", alloc.namespace, alloc.name)
                    };
                    format!("{who}: {}", alloc.cpuset)
                })
                .collect();
            return view;
        }
        Ok(None) => {}
        Err(problem) => view.problems.push(problem),
    }
    match get_kubelet_cpu_manager_policy(node_annotations) {
        Ok(Some(policy)) if !policy.policy.is_empty() => {
            view.source = PolicySource::NodeAnnotation;
            view.policy = policy.policy;
        }
        Ok(_) => {}
        Err(error) => view.problems.push(error.to_string()),
    }
    view
}

/// Reads the checkpoint below `kubelet_root` (when given) and builds the
/// view (blocking: reads that file).
pub fn read_kubelet_cpu_manager_view(
    kubelet_root: Option<&Path>,
    node_annotations: &StringMap,
    pods: &[Pod],
) -> KubeletCpuManagerView {
    let read = kubelet_root.map(read_cpu_manager_checkpoint);
    let checkpoint = match &read {
        Some(Ok(checkpoint)) => Ok(checkpoint.as_ref()),
        Some(Err(error)) => Err(error.to_string()),
        None => Ok(None),
    };
    let path = kubelet_root.map(cpu_manager_state_path);
    kubelet_cpu_manager_view(checkpoint, path.as_deref(), node_annotations, pods)
}

/// Pods whose CPUs the kubelet's static policy pinned, from its checkpoint,
/// leaving out the pods koordinator manages (labelled LS/BE, or bound by the
/// scheduler through resource-status). Returns the allocations (ordered by
/// UID) and the union of their CPUs.
pub fn kubelet_pod_allocs(
    checkpoint: &CpuManagerCheckpoint,
    pods: &[Pod],
) -> (Vec<PodCPUAlloc>, CpuSet, Vec<String>) {
    let mut problems = Vec::new();
    let empty = BTreeMap::new();
    let mut by_uid = BTreeMap::new();
    let mut managed = BTreeSet::new();
    for pod in pods {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            continue;
        };
        by_uid.insert(uid, pod);
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let bound = get_resource_status(annotations)
            .ok()
            .flatten()
            .and_then(|status| status.cpuset.trim().parse::<CpuSet>().ok())
            .is_some_and(|cpus| !cpus.is_empty());
        if matches!(pod_qos_class_raw(pod), QoSClass::LS | QoSClass::BE) || bound {
            managed.insert(uid);
        }
    }
    let mut allocs = Vec::new();
    let mut pinned = CpuSet::new();
    for (uid, containers) in &checkpoint.entries {
        if managed.contains(uid.as_str()) {
            continue;
        }
        let mut cpus = CpuSet::new();
        for (container, text) in containers {
            match text.trim().parse::<CpuSet>() {
                Ok(set) => cpus = cpus.union(&set),
                Err(error) => problems.push(format!(
                    "kubelet cpu_manager_state: pod {uid} container {container}: {error}"
                )),
            }
        }
        if cpus.is_empty() {
            continue;
        }
        let pod = by_uid.get(uid.as_str());
        allocs.push(PodCPUAlloc {
            namespace: pod
                .and_then(|p| p.metadata.namespace.clone())
                .unwrap_or_default(),
            name: pod
                .and_then(|p| p.metadata.name.clone())
                .unwrap_or_default(),
            uid: uid.clone(),
            cpuset: cpus.to_string(),
            managed_by_kubelet: true,
        });
        pinned = pinned.union(&cpus);
    }
    (allocs, pinned, problems)
}

/// What the kubelet's CPU manager checkpoint means for the CPU pools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletCpuState {
    /// The checkpoint's policy name; empty without a checkpoint.
    pub policy: KubeletCPUManagerPolicy,
    /// Pods the static policy pinned (see [`kubelet_pod_allocs`]).
    pub allocs: Vec<PodCPUAlloc>,
    /// Their CPUs, which leave the share pools.
    pub pinned: CpuSet,
}

impl KubeletCpuState {
    /// The kubelet runs the static policy (it owns the cpusets of the pods it pins).
    pub fn is_static(&self) -> bool {
        self.policy.policy == KUBELET_CPU_MANAGER_POLICY_STATIC
    }
}

/// The kubelet's policy and pinned pods from its checkpoint (`None`: no
/// kubelet information). Only the static policy pins; the NodeResourceTopology
/// report and the runtime hooks' share pool both use this.
pub fn kubelet_cpu_state(
    checkpoint: Option<&CpuManagerCheckpoint>,
    pods: &[Pod],
) -> (KubeletCpuState, Vec<String>) {
    let Some(checkpoint) = checkpoint else {
        return (KubeletCpuState::default(), Vec::new());
    };
    let mut state = KubeletCpuState {
        policy: KubeletCPUManagerPolicy {
            policy: checkpoint.policy_name.clone(),
            ..KubeletCPUManagerPolicy::default()
        },
        ..KubeletCpuState::default()
    };
    if !state.is_static() {
        return (state, Vec::new());
    }
    let (allocs, pinned, problems) = kubelet_pod_allocs(checkpoint, pods);
    state.allocs = allocs;
    state.pinned = pinned;
    (state, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_common::testing::TempDir;

    const STATIC: &str = r#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"uid-g":{"app":"1","side":"2"}},"checksum":1234567890}"#;

    fn pod(uid: &str, name: &str, qos_label: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        if let Some(qos) = qos_label {
            pod.metadata.labels = Some([("koordinator.sh/qosClass".into(), qos.into())].into());
        }
        pod
    }

    #[test]
    fn a_static_checkpoint_parses_with_its_checksum() {
        let checkpoint = parse_cpu_manager_checkpoint(STATIC).unwrap();
        assert_eq!(checkpoint.policy_name, "static");
        assert_eq!(checkpoint.default_cpu_set, "0,3");
        assert_eq!(checkpoint.entries["uid-g"]["side"], "2");
        assert_eq!(checkpoint.checksum, Some(1_234_567_890));
        // The none policy writes no entries (or null).
        let none = parse_cpu_manager_checkpoint(
            r#"{"policyName":"none","defaultCpuSet":"","entries":null,"checksum":1}"#,
        )
        .unwrap();
        assert!(none.entries.is_empty());
    }

    #[test]
    fn structural_problems_are_refused_with_their_reason() {
        let cases = [
            ("{", "EOF"),
            (r#"{"defaultCpuSet":"0-1"}"#, "policyName is missing"),
            (r#"{"policyName":"st\u0000atic"}"#, "not a policy name"),
            (
                r#"{"policyName":"static","defaultCpuSet":"0-a"}"#,
                "defaultCpuSet",
            ),
            (
                r#"{"policyName":"static","entries":{"c1":"0-1"}}"#,
                "pre-1.18 v1 format",
            ),
            (
                r#"{"policyName":"static","entries":{"":{"a":"1"}}}"#,
                "not a pod UID",
            ),
            (
                r#"{"policyName":"static","entries":{"u":{"":"1"}}}"#,
                "not a container name",
            ),
            (r#"{"policyName":"static","checksum":-1}"#, "invalid value"),
            (r#"[]"#, "policyName is missing"),
            (r#""static""#, "invalid type"),
        ];
        for (text, want) in cases {
            let err = parse_cpu_manager_checkpoint(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn pod_and_container_counts_are_bounded() {
        let pods: Vec<String> = (0..=MAX_CHECKPOINT_PODS)
            .map(|i| format!(r#""u{i}":{{}}"#))
            .collect();
        let text = format!(
            r#"{{"policyName":"static","entries":{{{}}}}}"#,
            pods.join(",")
        );
        let err = parse_cpu_manager_checkpoint(&text).unwrap_err();
        assert!(err.contains("more than 10000"), "{err}");
        let containers: Vec<String> = (0..=MAX_CHECKPOINT_CONTAINERS_PER_POD)
            .map(|i| format!(r#""c{i}":"1""#))
            .collect();
        let text = format!(
            r#"{{"policyName":"static","entries":{{"u":{{{}}}}}}}"#,
            containers.join(",")
        );
        let err = parse_cpu_manager_checkpoint(&text).unwrap_err();
        assert!(err.contains("more than 1000"), "{err}");
    }

    #[test]
    fn the_file_is_bounded_and_errors_name_it() {
        let dir = TempDir::new("cpumanager-read").unwrap();
        assert!(read_cpu_manager_checkpoint(dir.path()).unwrap().is_none());
        let path = cpu_manager_state_path(dir.path());
        std::fs::write(&path, " \n").unwrap();
        assert!(read_cpu_manager_checkpoint(dir.path()).unwrap().is_none());
        std::fs::write(&path, STATIC).unwrap();
        let checkpoint = read_cpu_manager_checkpoint(dir.path()).unwrap().unwrap();
        assert_eq!(checkpoint.policy_name, "static");

        let mut huge = String::from(r#"{"policyName":"static","defaultCpuSet":""#);
        huge.push_str(&" ".repeat(MAX_CPU_MANAGER_STATE_BYTES as usize));
        huge.push_str(r#""}"#);
        std::fs::write(&path, &huge).unwrap();
        let err = read_cpu_manager_checkpoint(dir.path()).unwrap_err();
        assert!(matches!(err, CheckpointError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("cpu_manager_state"), "{err}");

        std::fs::write(&path, [0xff, 0xfe, b'{']).unwrap();
        let err = read_cpu_manager_checkpoint(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");

        std::fs::write(&path, r#"{"policyName":""}"#).unwrap();
        let err = read_cpu_manager_checkpoint(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("cpu_manager_state") && err.to_string().contains("policyName"),
            "{err}"
        );
    }

    #[test]
    fn the_view_excludes_only_pods_koordinator_does_not_manage() {
        let checkpoint = parse_cpu_manager_checkpoint(
            r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{
                "uid-g":{"app":"1"},
                "uid-ls":{"app":"2"},
                "uid-gone":{"app":"3-4"},
                "uid-bad":{"app":"x"}}}"#,
        )
        .unwrap();
        let pods = [
            pod("uid-g", "guaranteed", None),
            pod("uid-ls", "ls", Some("LS")),
        ];
        let view = kubelet_cpu_manager_view(
            Ok(Some(&checkpoint)),
            Some(Path::new("/var/lib/kubelet/cpu_manager_state")),
            &StringMap::new(),
            &pods,
        );
        assert!(view.is_static());
        assert_eq!(view.source, PolicySource::Checkpoint);
        assert_eq!(view.pinned_cpus.to_string(), "1,3-4");
        assert_eq!(view.pinned_pods, ["ns/guaranteed: 1", "uid uid-gone: 3-4"]);
        assert_eq!(view.problems.len(), 1, "{:?}", view.problems);
        assert!(view.problems[0].contains("uid-bad"));
        let summary = view.summary();
        assert!(
            summary.contains("policy static from /var/lib/kubelet/cpu_manager_state")
                && summary.contains("CPUs 1,3-4 pinned"),
            "{summary}"
        );
    }

    #[test]
    fn without_a_checkpoint_the_node_annotation_names_the_policy() {
        let annotations: StringMap = [(
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY.to_string(),
            r#"{"policy":"static","reservedCPUs":"0"}"#.to_string(),
        )]
        .into();
        let view = kubelet_cpu_manager_view(Ok(None), None, &annotations, &[]);
        assert!(view.is_static());
        assert_eq!(view.source, PolicySource::NodeAnnotation);
        assert!(view.pinned_cpus.is_empty());
        assert!(view.summary().contains("pinned CPUs unknown"));

        // An unreadable checkpoint is reported and the annotation used.
        let view = kubelet_cpu_manager_view(Err("boom".into()), None, &annotations, &[]);
        assert_eq!((view.is_static(), view.problems.len()), (true, 1));

        // A malformed annotation is a problem; the policy stays unknown.
        let bad: StringMap = [(
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY.to_string(),
            "{".to_string(),
        )]
        .into();
        let view = kubelet_cpu_manager_view(Ok(None), None, &bad, &[]);
        assert_eq!(view.policy, "");
        assert_eq!(view.problems.len(), 1);
        assert!(view.summary().contains("unknown (treated as none)"));

        // The checkpoint wins over the annotation.
        let none = parse_cpu_manager_checkpoint(r#"{"policyName":"none"}"#).unwrap();
        let view = kubelet_cpu_manager_view(Ok(Some(&none)), None, &annotations, &[]);
        assert_eq!(
            (view.policy.as_str(), view.source),
            ("none", PolicySource::Checkpoint)
        );
        assert!(view.pinned_cpus.is_empty());
    }

    #[test]
    fn an_unknown_policy_name_is_reported_and_pins_nothing() {
        let odd =
            parse_cpu_manager_checkpoint(r#"{"policyName":"dynamic","entries":{"u":{"c":"1"}}}"#)
                .unwrap();
        let view = kubelet_cpu_manager_view(Ok(Some(&odd)), None, &StringMap::new(), &[]);
        assert!(!view.is_static());
        assert!(view.pinned_cpus.is_empty());
        assert!(view.problems[0].contains("dynamic"), "{:?}", view.problems);
    }
}
