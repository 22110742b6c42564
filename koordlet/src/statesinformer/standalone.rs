//! Standalone inputs besides pods: the NodeSLO from a YAML or JSON file,
//! re-read when the file changes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::NodeSLO;
use koord_common::Shutdown;

use super::StatesInformer;

/// How often the NodeSLO file is checked for changes.
pub const NODE_SLO_POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum NodeSloFileError {
    #[error("cannot read the NodeSLO file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("NodeSLO file {path} is not valid YAML or JSON: {source}")]
    Syntax {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("NodeSLO file {path} holds kind {kind:?}, expected NodeSLO")]
    WrongKind { path: PathBuf, kind: String },
    #[error("NodeSLO file {path} does not hold a valid NodeSLO: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
}

/// Parses a NodeSLO object; `apiVersion`, `kind` and `metadata` may be left
/// out, but a `kind` other than NodeSLO is refused.
pub fn parse_node_slo(path: &Path, text: &str) -> Result<NodeSLO, NodeSloFileError> {
    use serde_yaml::Value;
    let mut value: Value =
        serde_yaml::from_str(text).map_err(|source| NodeSloFileError::Syntax {
            path: path.to_path_buf(),
            source,
        })?;
    if let Value::Mapping(map) = &mut value {
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
            map.insert("metadata".into(), Value::Mapping(Default::default()));
        }
        if !map.contains_key("spec") {
            map.insert("spec".into(), Value::Mapping(Default::default()));
        }
    }
    serde_yaml::from_value(value).map_err(|source| NodeSloFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

pub fn read_node_slo_file(path: &Path) -> Result<NodeSLO, NodeSloFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| NodeSloFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_node_slo(path, &text)
}

fn fingerprint(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// Publishes the file's NodeSLO now and whenever the file changes. A file
/// that does not parse leaves the previous NodeSLO in place (and before the
/// first good read, keeps the states informer not ready).
pub async fn run_node_slo_file(path: PathBuf, states: StatesInformer, shutdown: Shutdown) {
    let mut last_seen: Option<Option<(SystemTime, u64)>> = None;
    loop {
        let current = fingerprint(&path);
        if last_seen != Some(current) {
            last_seen = Some(current);
            let file = path.clone();
            match tokio::task::spawn_blocking(move || read_node_slo_file(&file)).await {
                Ok(Ok(node_slo)) => {
                    tracing::info!(path = %path.display(), "NodeSLO loaded from file");
                    states.set_node_slo(Some(node_slo));
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "keeping the previous NodeSLO"),
                Err(err) => tracing::warn!(error = %err, "NodeSLO file reader stopped"),
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
