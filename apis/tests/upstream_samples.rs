//! Upstream's own example manifests (config/samples, examples, e2e testing
//! manifests and the YAML blocks of its docs) must deserialize into our types.
//!
//! Upstream files are not vendored into this repository; run
//! `hack/check-upstream-samples.sh <upstream git dir>` which extracts them to a
//! temporary directory and points `KOORD_UPSTREAM_DIR` at it. Without that
//! variable the test says so and does nothing.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Documents upstream publishes that the API server itself would reject, or
/// that are fragments; (file suffix, kind, expected error fragment, why).
/// A document is only tolerated when it fails with the expected error.
const KNOWN_INVALID: &[(&str, &str, &str, &str)] = &[
    (
        "multi-hierarchy-elastic-quota-management.md",
        "ElasticQuota",
        "invalid type: map, expected a string",
        "annotation values written as YAML maps; annotations must be strings",
    ),
    (
        "20250611-networktopology-aware-scheduling.md",
        "PodGroup",
        "invalid type: sequence, expected a string",
        "annotation values written as YAML lists; annotations must be strings",
    ),
    (
        "capacity-scheduling.md",
        "ElasticQuota",
        "invalid type: boolean",
        "label values written as unquoted YAML booleans; labels must be strings",
    ),
    (
        "resource-reservation.md",
        "Reservation",
        "failed to parse four digit integer as year",
        "illustrative output with YYYY-MM-DD placeholder timestamps",
    ),
    (
        "user-manuals/slo-config.md",
        "ConfigMap",
        "system-config: expected `,` or `}`",
        "the system-config JSON misses a comma; upstream's parser rejects it too",
    ),
    (
        "20231208-support-netqos.md",
        "ConfigMap",
        "resource-qos-config: trailing comma",
        "the resource-qos-config JSON has a trailing comma; upstream's parser rejects it too",
    ),
    (
        "20240201-enbale-reservation-preempt.md",
        "Reservation",
        "missing field `spec`",
        "fragments showing only labels; our Reservation requires spec (see apis/README.md)",
    ),
];

/// Upstream's e2e manifests are Go templates (`{{.PauseImage}}`); substitute a
/// plain string for each placeholder, as upstream's suite does before use.
fn fill_go_template(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str("template-value");
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

fn decode<T: DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|error| error.to_string())?;
    // What we read must survive a write/read cycle unchanged.
    let written = apis::yaml::to_string(&typed).map_err(|e| e.to_string())?;
    let again: T = apis::yaml::from_str(&written, &apis::yaml::Limits::CONFIG)
        .map_err(|error| format!("re-reading our own output: {error}"))?;
    if serde_json::to_value(&again).ok() != serde_json::to_value(&typed).ok() {
        return Err("round trip changed the value".into());
    }
    Ok(())
}

fn is_slo_controller_config(doc: &Value) -> bool {
    doc.get("metadata")
        .and_then(|meta| meta.get("name"))
        .and_then(Value::as_str)
        == Some(apis::configuration::DEFAULT_SLO_CONTROLLER_CONFIG_NAME)
}

/// The ConfigMap's keys must parse and pass validation, as upstream's webhook requires.
fn decode_slo_controller_config(doc: &Value) -> Result<(), String> {
    let data: std::collections::BTreeMap<String, String> = match doc.get("data") {
        Some(data) => serde_json::from_value(data.clone()).map_err(|error| error.to_string())?,
        None => return Err("no data".into()),
    };
    let config = apis::configuration::SloControllerConfig::from_configmap_data(&data)
        .map_err(|error| error.to_string())?;
    config.validate().map_err(|errors| errors.to_string())
}

/// Deserializes a document if it is one of our kinds; `None` when it is not.
fn check_document(doc: &Value) -> Option<(String, Result<(), String>)> {
    let api_version = doc.get("apiVersion")?.as_str()?;
    let kind = doc.get("kind")?.as_str()?;
    let result = match (api_version, kind) {
        ("slo.koordinator.sh/v1alpha1", "NodeSLO") => decode::<apis::slo::v1alpha1::NodeSLO>(doc),
        ("slo.koordinator.sh/v1alpha1", "NodeMetric") => {
            decode::<apis::slo::v1alpha1::NodeMetric>(doc)
        }
        ("scheduling.koordinator.sh/v1alpha1", "Reservation") => {
            decode::<apis::scheduling::v1alpha1::Reservation>(doc)
        }
        ("scheduling.koordinator.sh/v1alpha1", "Device") => {
            decode::<apis::scheduling::v1alpha1::Device>(doc)
        }
        ("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob") => {
            decode::<apis::scheduling::v1alpha1::PodMigrationJob>(doc)
        }
        ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota") => {
            decode::<apis::scheduling_sigs::v1alpha1::ElasticQuota>(doc)
        }
        ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup") => {
            decode::<apis::scheduling_sigs::v1alpha1::PodGroup>(doc)
        }
        ("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile") => {
            decode::<apis::quota::v1alpha1::ElasticQuotaProfile>(doc)
        }
        ("config.koordinator.sh/v1alpha1", "ClusterColocationProfile") => {
            decode::<apis::config::v1alpha1::ClusterColocationProfile>(doc)
        }
        ("topology.node.k8s.io/v1alpha1", "NodeResourceTopology") => {
            decode::<apis::topology::v1alpha1::NodeResourceTopology>(doc)
        }
        ("v1", "ConfigMap") if is_slo_controller_config(doc) => decode_slo_controller_config(doc),
        _ => return None,
    };
    Some((format!("{api_version} {kind}"), result))
}

/// YAML text of a file: the whole file, or the ```yaml blocks of a Markdown file.
fn yaml_sources(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    if path.extension().is_some_and(|ext| ext == "md") {
        let mut blocks = Vec::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim_start();
            match current.as_mut() {
                None if trimmed.starts_with("```yaml") || trimmed.starts_with("```yml") => {
                    current = Some(String::new());
                }
                Some(_) if trimmed.starts_with("```") => blocks.extend(current.take()),
                Some(block) => {
                    block.push_str(line);
                    block.push('\n');
                }
                None => {}
            }
        }
        blocks
    } else {
        vec![text]
    }
}

/// The documents of a YAML stream, split at `---` lines (upstream's samples
/// put no `---` inside block scalars).
fn yaml_documents(source: &str) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in source.lines() {
        let content = if line == "---" || line.starts_with("--- ") {
            documents.push(std::mem::take(&mut current));
            // Content after the marker belongs to the new document.
            line[3..].trim_start()
        } else {
            line
        };
        current.push_str(content);
        current.push('\n');
    }
    documents.push(current);
    documents
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml" || ext == "md")
        {
            out.push(path);
        }
    }
}

#[test]
fn upstream_samples_deserialize() {
    let Ok(root) = std::env::var("KOORD_UPSTREAM_DIR") else {
        eprintln!(
            "SKIP upstream_samples_deserialize: KOORD_UPSTREAM_DIR is not set \
             (run hack/check-upstream-samples.sh <upstream git dir>)"
        );
        return;
    };
    let mut files = Vec::new();
    files_under(Path::new(&root), &mut files);
    files.sort();

    let (mut passed, mut failures, mut tolerated) = (0, Vec::new(), 0);
    for file in &files {
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for source in yaml_sources(file) {
            let source = fill_go_template(&source);
            for document in yaml_documents(&source) {
                // Docs hold fragments and templates that are not YAML; those are not
                // manifests. As before, a file's later documents are not read after one
                // that is not YAML.
                let Ok(doc) = apis::yaml::from_str::<Option<Value>>(
                    &document,
                    &apis::yaml::Limits::objects(usize::MAX, 128),
                ) else {
                    break;
                };
                let Some(doc) = doc else {
                    continue;
                };
                let Some((kind, result)) = check_document(&doc) else {
                    continue;
                };
                match result {
                    Ok(()) => {
                        passed += 1;
                        println!("ok   {shown}: {kind}");
                    }
                    Err(error) => {
                        let known =
                            KNOWN_INVALID
                                .iter()
                                .any(|(suffix, known_kind, fragment, _)| {
                                    shown.ends_with(suffix)
                                        && kind.ends_with(known_kind)
                                        && error.contains(fragment)
                                });
                        if known {
                            tolerated += 1;
                            println!("skip {shown}: {kind} (known invalid upstream): {error}");
                        } else {
                            failures.push(format!("{shown}: {kind}: {error}"));
                        }
                    }
                }
            }
        }
    }
    println!(
        "{passed} upstream manifests deserialized, {} failed, {tolerated} known-invalid skipped",
        failures.len()
    );
    assert!(passed > 0, "no manifests of our kinds found under {root}");
    assert!(
        failures.is_empty(),
        "upstream manifests we cannot read:\n{}",
        failures.join("\n")
    );
}
