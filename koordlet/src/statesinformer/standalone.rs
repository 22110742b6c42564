//! Standalone inputs besides pods: the NodeSLO from a YAML or JSON file,
//! re-read when the file changes.
//!
//! The file is read with [`super::inputfile`]'s rules (regular files only,
//! at most 16 MiB, a deadline) and validated as the cluster validates a
//! NodeSLO (issue 16): the API server holds NodeSLOs to the CRD schema's
//! ranges and koord-manager renders them from a `slo-controller-config`
//! that passed `SloControllerConfig::validate`, which checks those ranges
//! and upstream's webhook rules; the file's strategies go through that same
//! validation. A file that does not parse or validate keeps the previous
//! NodeSLO, and the `node-slo-file` readiness check says why.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use apis::configuration::{
    CPUBurstCfg, HostApplicationCfg, ResourceQOSCfg, ResourceThresholdCfg, SloControllerConfig,
    SystemCfg,
};
use apis::slo::v1alpha1::NodeSLO;
use koord_common::Shutdown;
use koord_common::health::StatusCheck;

use super::StatesInformer;
use super::inputfile::{InputFile, InputFileError, MAX_INPUT_FILE_BYTES, read_input_file};

/// How often the NodeSLO file is checked for changes.
pub const NODE_SLO_POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum NodeSloFileError {
    #[error("cannot read the NodeSLO file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: InputFileError,
    },
    #[error("NodeSLO file {path} is not valid YAML or JSON: {source}")]
    Syntax {
        path: PathBuf,
        #[source]
        source: apis::yaml::YamlError,
    },
    #[error("NodeSLO file {path} holds kind {kind:?}, expected NodeSLO")]
    WrongKind { path: PathBuf, kind: String },
    #[error("NodeSLO file {path} does not hold a valid NodeSLO: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("NodeSLO file {path} is out of range: {}", .problems.join("; "))]
    OutOfRange {
        path: PathBuf,
        problems: Vec<String>,
    },
}

/// The NodeSLO's strategies checked as a `slo-controller-config` with
/// those strategies as its cluster strategies would be; problems are named
/// by their NodeSLO path (`spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: ...`).
pub fn validate_node_slo(node_slo: &NodeSLO) -> Result<(), Vec<String>> {
    let spec = &node_slo.spec;
    let config = SloControllerConfig {
        resource_threshold: spec
            .resource_used_threshold_with_be
            .clone()
            .map(|strategy| ResourceThresholdCfg {
                cluster_strategy: Some(strategy),
                ..ResourceThresholdCfg::default()
            }),
        resource_qos: spec
            .resource_qos_strategy
            .clone()
            .map(|strategy| ResourceQOSCfg {
                cluster_strategy: Some(strategy),
                ..ResourceQOSCfg::default()
            }),
        cpu_burst: spec.cpu_burst_strategy.clone().map(|strategy| CPUBurstCfg {
            cluster_strategy: Some(strategy),
            ..CPUBurstCfg::default()
        }),
        system: spec.system_strategy.clone().map(|strategy| SystemCfg {
            cluster_strategy: Some(strategy),
            ..SystemCfg::default()
        }),
        host_application: (!spec.host_applications.is_empty()).then(|| HostApplicationCfg {
            applications: spec.host_applications.clone(),
            ..HostApplicationCfg::default()
        }),
        ..SloControllerConfig::default()
    };
    let Err(errors) = config.validate() else {
        return Ok(());
    };
    const PATHS: [(&str, &str); 5] = [
        (
            "resource-threshold-config.clusterStrategy",
            "spec.resourceUsedThresholdWithBE",
        ),
        (
            "resource-qos-config.clusterStrategy",
            "spec.resourceQOSStrategy",
        ),
        ("cpu-burst-config.clusterStrategy", "spec.cpuBurstStrategy"),
        ("system-config.clusterStrategy", "spec.systemStrategy"),
        (
            "host-application-config.applications",
            "spec.hostApplications",
        ),
    ];
    Err(errors
        .errors
        .iter()
        .map(|error| {
            let path = PATHS
                .iter()
                .find_map(|(from, to)| {
                    error
                        .path
                        .strip_prefix(from)
                        .map(|rest| format!("{to}{rest}"))
                })
                .unwrap_or_else(|| error.path.clone());
            format!("{path}: {}", error.message)
        })
        .collect())
}

/// Parses a NodeSLO object; `apiVersion`, `kind` and `metadata` may be left
/// out, but a `kind` other than NodeSLO is refused.
pub fn parse_node_slo(path: &Path, text: &str) -> Result<NodeSLO, NodeSloFileError> {
    use serde_json::Value;
    let mut value: Value =
        apis::yaml::from_str(text, &apis::yaml::Limits::CONFIG).map_err(|source| {
            NodeSloFileError::Syntax {
                path: path.to_path_buf(),
                source,
            }
        })?;
    if let Value::Object(map) = &mut value {
        match map.get("kind").and_then(Value::as_str) {
            None | Some("NodeSLO") => {}
            Some(kind) => {
                return Err(NodeSloFileError::WrongKind {
                    path: path.to_path_buf(),
                    kind: kind.to_string(),
                });
            }
        }
        if !map.contains_key("metadata") {
            map.insert("metadata".into(), Value::Object(Default::default()));
        }
        if !map.contains_key("spec") {
            map.insert("spec".into(), Value::Object(Default::default()));
        }
    }
    serde_json::from_value(value).map_err(|source| NodeSloFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses and validates ([`validate_node_slo`]) the NodeSLO at `path`.
pub fn parse_valid_node_slo(path: &Path, text: &str) -> Result<NodeSLO, NodeSloFileError> {
    let node_slo = parse_node_slo(path, text)?;
    validate_node_slo(&node_slo).map_err(|problems| NodeSloFileError::OutOfRange {
        path: path.to_path_buf(),
        problems,
    })?;
    Ok(node_slo)
}

/// Reads, parses and validates a NodeSLO file (blocking; refuses special
/// files at once).
pub fn read_node_slo_file(path: &Path) -> Result<NodeSLO, NodeSloFileError> {
    let text =
        read_input_file(path, MAX_INPUT_FILE_BYTES).map_err(|source| NodeSloFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    parse_valid_node_slo(path, &text)
}

fn fingerprint(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// Publishes the file's NodeSLO now and whenever the file changes. A file
/// that cannot be read, does not parse or does not validate leaves the
/// previous NodeSLO in place (and before the first good read, keeps the
/// states informer not ready); `readiness` fails with the reason until the
/// file is good again.
pub async fn run_node_slo_file(
    path: PathBuf,
    states: StatesInformer,
    readiness: Option<StatusCheck>,
    shutdown: Shutdown,
) {
    let input = InputFile::new(&path);
    let mut last_seen: Option<Option<(SystemTime, u64)>> = None;
    loop {
        let current = fingerprint(&path);
        if last_seen != Some(current) {
            last_seen = Some(current);
            let file = path.clone();
            let read = input
                .read(
                    |path, text| parse_valid_node_slo(path, &text),
                    move |source| NodeSloFileError::Read {
                        path: file.clone(),
                        source,
                    },
                )
                .await;
            match read {
                Ok(node_slo) => {
                    tracing::info!(path = %path.display(), "NodeSLO loaded from file");
                    states.set_node_slo(Some(node_slo));
                    if let Some(check) = &readiness {
                        check.set_passing();
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "keeping the previous NodeSLO");
                    if let Some(check) = &readiness {
                        check.set_failing(format!("{err}; keeping the previous NodeSLO"));
                    }
                    // A read that timed out is retried on the next poll.
                    if matches!(
                        &err,
                        NodeSloFileError::Read {
                            source: InputFileError::TimedOut(_) | InputFileError::StillBlocked,
                            ..
                        }
                    ) {
                        last_seen = None;
                    }
                }
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(NODE_SLO_POLL_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        let path = Path::new("/etc/koordlet/nodeslo.yaml");
        for text in [
            hostile::alias_bomb(),
            hostile::deep_flow(10_000),
            hostile::deep_block(10_000),
        ] {
            match parse_node_slo(path, &text) {
                Err(NodeSloFileError::Syntax { source, .. }) => {
                    assert!(source.is_budget(), "{source}")
                }
                other => panic!("not refused for its budget: {other:?}"),
            }
        }
    }

    #[test]
    fn node_slo_files_parse_with_or_without_the_envelope() {
        let path = Path::new("/etc/koordlet/nodeslo.yaml");
        let full = "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata:\n  name: node-a\n\
                    spec:\n  hostApplications:\n  - name: nginx\n    qos: LS\n";
        let slo = parse_node_slo(path, full).unwrap();
        assert_eq!(slo.metadata.name.as_deref(), Some("node-a"));
        assert_eq!(slo.spec.host_applications[0].name, "nginx");

        let bare = "spec:\n  hostApplications:\n  - name: redis\n";
        assert_eq!(
            parse_node_slo(path, bare).unwrap().spec.host_applications[0].name,
            "redis"
        );
        assert!(
            parse_node_slo(path, "{}")
                .unwrap()
                .spec
                .host_applications
                .is_empty()
        );
    }

    #[test]
    fn bad_node_slo_files_are_typed_errors() {
        let path = Path::new("/x/slo.yaml");
        let err = parse_node_slo(path, "kind: NodeMetric\n").unwrap_err();
        assert!(matches!(err, NodeSloFileError::WrongKind { .. }), "{err}");
        let err = parse_node_slo(path, "spec: [\n").unwrap_err();
        assert!(
            err.to_string().contains("/x/slo.yaml is not valid YAML"),
            "{err}"
        );
        let err = parse_node_slo(path, "spec:\n  hostApplications: 3\n").unwrap_err();
        assert!(matches!(err, NodeSloFileError::Invalid { .. }), "{err}");
        let err = read_node_slo_file(Path::new("/nonexistent/slo.yaml")).unwrap_err();
        assert!(matches!(err, NodeSloFileError::Read { .. }), "{err}");
    }
}
