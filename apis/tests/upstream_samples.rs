//! Upstream's own example manifests (config/samples, examples, e2e testing
//! manifests and the YAML blocks of its docs) must deserialize into our types.
//!
//! Upstream files are not vendored into this repository; run
//! `hack/check-upstream-samples.sh <upstream git dir>` which extracts them to a
//! temporary directory and points `KOORD_UPSTREAM_DIR` at it. Without that
//! variable the test says so and does nothing.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml::Value;

/// Documents upstream publishes that are not valid against upstream's own
/// types (draft proposals); (file suffix, kind, why).
const KNOWN_INVALID: &[(&str, &str, &str)] = &[];

fn decode<T: DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_yaml::from_value(doc.clone()).map_err(|error| error.to_string())?;
    // What we read must survive a write/read cycle unchanged.
    let again: T = serde_yaml::from_value(serde_yaml::to_value(&typed).map_err(|e| e.to_string())?)
        .map_err(|error| format!("re-reading our own output: {error}"))?;
    if serde_yaml::to_value(&again).ok() != serde_yaml::to_value(&typed).ok() {
        return Err("round trip changed the value".into());
    }
    Ok(())
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
            for document in serde_yaml::Deserializer::from_str(&source) {
                // Docs hold fragments and templates that are not YAML; those are not manifests.
                let Ok(doc) = Value::deserialize(document) else {
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
                        let known = KNOWN_INVALID.iter().any(|(suffix, known_kind, _)| {
                            shown.ends_with(suffix) && kind.ends_with(known_kind)
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
