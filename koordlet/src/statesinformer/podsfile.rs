//! The standalone pods file: JSON or YAML holding a `PodList` (or `List`), a
//! sequence of Pods, a single Pod, or several YAML documents of those.
//!
//! A file that holds nothing (empty, whitespace, `null`, only empty YAML
//! documents) is an error, not "no pods": a file being rewritten, truncated
//! or emptied by mistake must not make koordlet drop every pod (issue 16).
//! A node without pods is an explicit empty list (`[]`, `items: []`).
//! The file is read with [`super::inputfile`]'s rules (regular files only,
//! at most 16 MiB).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::inputfile::{InputFileError, MAX_INPUT_FILE_BYTES, read_input_file};
use super::kubelet::{PodListError, validate_pods};

#[derive(Debug, thiserror::Error)]
pub enum PodsDocumentError {
    #[error("document {document} is not valid YAML or JSON: {source}")]
    Syntax {
        document: usize,
        #[source]
        source: apis::yaml::YamlError,
    },
    #[error("document {document}: {what} is not a Pod: {source}")]
    NotAPod {
        document: usize,
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("document {document} has kind {kind:?}; expected PodList, List or Pod")]
    WrongKind { document: usize, kind: String },
    #[error(
        "the file holds no pod list (it is empty or null); a node without pods is written as an empty list ([] or items: [])"
    )]
    Empty,
    #[error(transparent)]
    Invalid(#[from] PodListError),
}

#[derive(Debug, thiserror::Error)]
pub enum PodsFileError {
    #[error("cannot read the pods file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: InputFileError,
    },
    #[error("pods file {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: PodsDocumentError,
    },
}

/// Deepest nesting of mappings and sequences in a pods file (a pod nests
/// about 12 levels).
const MAX_POD_FILE_NESTING: usize = 64;

/// Parses the text of a pods file (documents are numbered from 0).
pub fn parse_pods_document(text: &str) -> Result<Vec<Pod>, PodsDocumentError> {
    let mut pods = Vec::new();
    let mut lists = 0;
    let limits = apis::yaml::Limits::objects(MAX_INPUT_FILE_BYTES as usize, MAX_POD_FILE_NESTING);
    let documents =
        apis::yaml::from_str_each(text, &limits).map_err(|source| PodsDocumentError::Syntax {
            document: 0,
            source,
        })?;
    for (document, value) in documents {
        let value = value.map_err(|source| PodsDocumentError::Syntax { document, source })?;
        if let Some(value) = value {
            lists += 1;
            collect_pods(document, value, &mut pods)?;
        }
    }
    if lists == 0 {
        return Err(PodsDocumentError::Empty);
    }
    validate_pods(&pods)?;
    Ok(pods)
}

fn collect_pods(
    document: usize,
    value: serde_json::Value,
    pods: &mut Vec<Pod>,
) -> Result<(), PodsDocumentError> {
    use serde_json::Value;
    let to_pod = |what: String, value: Value| {
        serde_json::from_value::<Pod>(value).map_err(|source| PodsDocumentError::NotAPod {
            document,
            what,
            source,
        })
    };
    match value {
        Value::Null => Ok(()),
        Value::Array(items) => {
            for (index, item) in items.into_iter().enumerate() {
                pods.push(to_pod(format!("item {index}"), item)?);
            }
            Ok(())
        }
        Value::Object(mut map) => {
            let kind = map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let is_list = matches!(kind.as_str(), "PodList" | "List")
                || (kind.is_empty() && map.contains_key("items"));
            if is_list {
                match map.remove("items") {
                    None | Some(Value::Null) => Ok(()),
                    Some(Value::Array(items)) => {
                        for (index, item) in items.into_iter().enumerate() {
                            pods.push(to_pod(format!("items[{index}]"), item)?);
                        }
                        Ok(())
                    }
                    Some(other) => Err(PodsDocumentError::NotAPod {
                        document,
                        what: "items".to_string(),
                        source: serde::de::Error::custom(format!(
                            "expected a sequence, found {}",
                            yaml_type_name(&other)
                        )),
                    }),
                }
            } else if kind.is_empty() || kind == "Pod" {
                pods.push(to_pod("the document".to_string(), Value::Object(map))?);
                Ok(())
            } else {
                Err(PodsDocumentError::WrongKind { document, kind })
            }
        }
        other => Err(PodsDocumentError::NotAPod {
            document,
            what: "the document".to_string(),
            source: serde::de::Error::custom(format!(
                "expected a mapping or a sequence, found {}",
                yaml_type_name(&other)
            )),
        }),
    }
}

fn yaml_type_name(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// Reads and parses a pods file (blocking; refuses special files at once).
pub fn read_pods_file(path: &Path) -> Result<Vec<Pod>, PodsFileError> {
    let text =
        read_input_file(path, MAX_INPUT_FILE_BYTES).map_err(|source| PodsFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    parse_pods_text(path, text)
}

/// Parses the text of the pods file at `path`.
pub fn parse_pods_text(path: &Path, text: String) -> Result<Vec<Pod>, PodsFileError> {
    parse_pods_document(&text).map_err(|source| PodsFileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|pod| pod.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn every_supported_shape_parses() {
        let json_list = r#"{"apiVersion":"v1","kind":"PodList","items":[
            {"metadata":{"name":"a","namespace":"n","uid":"u1"}}]}"#;
        assert_eq!(names(&parse_pods_document(json_list).unwrap()), ["a"]);

        let json_array = r#"[{"metadata":{"name":"a","namespace":"n","uid":"u1"}},
                             {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"n","uid":"u2"}}]"#;
        assert_eq!(names(&parse_pods_document(json_array).unwrap()), ["a", "b"]);

        let yaml_docs = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: n, uid: u1}\n---\n\
                         kind: List\nitems:\n- metadata: {name: b, namespace: n, uid: u2}\n---\n";
        assert_eq!(names(&parse_pods_document(yaml_docs).unwrap()), ["a", "b"]);

        let yaml_seq = "- metadata:\n    name: a\n    namespace: n\n    uid: u1\n  status:\n    qosClass: Burstable\n";
        let pods = parse_pods_document(yaml_seq).unwrap();
        assert_eq!(
            pods[0].status.as_ref().unwrap().qos_class.as_deref(),
            Some("Burstable")
        );

        // An explicit list with no items is an empty node; nothing at all is not.
        assert!(
            parse_pods_document("kind: PodList\nitems: null\n")
                .unwrap()
                .is_empty()
        );
        assert!(parse_pods_document("[]").unwrap().is_empty());
        for nothing in ["", " \n", "null", "~\n", "---\n---\n"] {
            assert!(
                matches!(parse_pods_document(nothing), Err(PodsDocumentError::Empty)),
                "{nothing:?}"
            );
        }
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        for text in [
            hostile::alias_bomb(),
            format!(
                "- metadata: {{name: a}}\n---\n{}",
                hostile::deep_flow(10_000)
            ),
            hostile::deep_block(10_000),
        ] {
            match parse_pods_document(&text) {
                Err(PodsDocumentError::Syntax { source, .. }) => {
                    assert!(source.is_budget(), "{source}")
                }
                other => panic!("not refused for its budget: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_files_are_typed_errors() {
        let cases: &[(&str, &str)] = &[
            ("{not closed", "document 0 is not valid YAML or JSON"),
            ("kind: Node\nmetadata: {name: x}\n", "kind \"Node\""),
            ("42", "expected a mapping or a sequence, found a number"),
            ("kind: PodList\nitems: {a: 1}\n", "expected a sequence"),
            ("- metadata: {name: [1]}\n", "item 0 is not a Pod"),
            (
                "apiVersion: v2\nkind: Pod\nmetadata: {name: a}\n",
                "is not a Pod",
            ),
            (
                "- metadata: {name: a, namespace: n}\n",
                "metadata.uid is missing",
            ),
            (
                "- metadata: {name: a, namespace: n, uid: u}\n---\n[1]\n",
                "document 1: item 0 is not a Pod",
            ),
        ];
        for (text, expected) in cases {
            let err = parse_pods_document(text).unwrap_err();
            assert!(err.to_string().contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = read_pods_file(Path::new("/nonexistent/koordlet-pods.yaml")).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot read the pods file /nonexistent/koordlet-pods.yaml"),
            "{err}"
        );
    }
}
