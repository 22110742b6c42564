//! YAML read from outside the process (config files, ConfigMap payloads,
//! snapshots, CLI-given files) and YAML written for people (CRDs, reports),
//! through serde-saphyr.
//!
//! Every read runs under a budget in proportion to the text: parser events,
//! nodes, scalar bytes and replayed alias events may each not exceed the
//! text's length (plus a small allowance), so an alias bomb ("billion
//! laughs") costs at most about twice what the text itself costs and is
//! refused as soon as it goes beyond that; nesting is capped by
//! [`Limits::max_depth`] and the text's size by [`Limits::max_bytes`].
//!
//! Scalars resolve as serde_yaml 0.9 resolved them where the two differ by
//! option: only `true`/`false` (any case form YAML 1.2 allows) are booleans,
//! a plain null read into a string is its text, and repeated keys are left
//! to the receiving type (derived structs refuse them, maps keep the last).
//! An empty value (`items:` with nothing after it) read into a list, map or
//! struct gives an empty one, as serde_yaml and Kubernetes' YAML-through-JSON
//! gave (see [`null_as_empty`]).

pub mod null_as_empty;

use serde::Serialize;
use serde::de::DeserializeOwned;

use null_as_empty::EmptyOnNull;

/// Bounds for one kind of input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest text accepted, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of mappings and sequences.
    pub max_depth: usize,
    /// Most documents in one text.
    pub max_documents: usize,
}

impl Limits {
    /// A configuration file or ConfigMap payload: one document (or a few),
    /// well under the 1 MiB an object in etcd may hold.
    pub const CONFIG: Limits = Limits {
        max_bytes: 4 << 20,
        max_depth: 64,
        max_documents: 16,
    };

    /// A multi-document file of Kubernetes objects (a pod list, a snapshot);
    /// documents are bounded by the text's length.
    pub const fn objects(max_bytes: usize, max_depth: usize) -> Limits {
        Limits {
            max_bytes,
            max_depth,
            max_documents: usize::MAX,
        }
    }
}

/// Why YAML was refused.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error("{bytes} bytes of YAML, more than the {limit} allowed")]
    TooLarge { bytes: usize, limit: usize },
    /// A budget was exceeded: aliases expanding beyond the text's size,
    /// nesting deeper than allowed, too many documents or events.
    #[error("YAML beyond its budget: {0}")]
    Budget(String),
    /// Malformed YAML, or YAML that does not fit the target type.
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write YAML: {0}")]
    Write(String),
}

impl YamlError {
    /// True when the text was refused for its size or a budget, not for
    /// what it says.
    pub fn is_budget(&self) -> bool {
        matches!(self, YamlError::TooLarge { .. } | YamlError::Budget(_))
    }
}

impl From<serde_saphyr::Error> for YamlError {
    fn from(error: serde_saphyr::Error) -> Self {
        if is_budget_error(&error) {
            YamlError::Budget(error.to_string())
        } else {
            YamlError::Invalid(error.to_string())
        }
    }
}

/// Whether serde-saphyr refused the text for a budget or limit (alias
/// replay, nesting, counts) rather than for its content.
pub fn is_budget_error(error: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error;
    match error.without_snippet() {
        Error::Budget { .. }
        | Error::AliasReplayLimitExceeded { .. }
        | Error::AliasExpansionLimitExceeded { .. }
        | Error::AliasReplayStackDepthExceeded { .. }
        | Error::AliasReplayCounterOverflow { .. } => true,
        Error::AliasError { error, .. } => is_budget_error(error),
        // The scanner's flow-nesting limit, before the depth budget sees
        // the events.
        other => other.to_string().contains("recursion limit exceeded"),
    }
}

/// serde-saphyr's options for `text` under `limits`.
pub fn options(text: &str, limits: &Limits) -> serde_saphyr::Options {
    // Every event, node and scalar byte takes at least one byte of text; the
    // allowance covers the implicit events of a tiny document.
    let linear = text.len().saturating_add(1024);
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: limits.max_depth,
            flow_nesting_limit: limits.max_depth,
            max_events: linear,
            max_nodes: linear,
            max_documents: limits.max_documents.min(linear),
            max_total_scalar_bytes: linear,
            max_reader_input_bytes: Some(limits.max_bytes),
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: linear,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        null_as_string: true,
        with_snippet: false,
    }
}

fn check_size(text: &str, limits: &Limits) -> Result<(), YamlError> {
    if text.len() > limits.max_bytes {
        return Err(YamlError::TooLarge {
            bytes: text.len(),
            limit: limits.max_bytes,
        });
    }
    Ok(())
}

/// Reads one document of `text` as a `T`.
pub fn from_str<T: DeserializeOwned>(text: &str, limits: &Limits) -> Result<T, YamlError> {
    check_size(text, limits)?;
    let EmptyOnNull(value) = serde_saphyr::from_str_with_options(text, options(text, limits))?;
    Ok(value)
}

/// Reads every document of `text` as a `T`; empty and null documents are
/// skipped.
pub fn from_str_multiple<T: DeserializeOwned>(
    text: &str,
    limits: &Limits,
) -> Result<Vec<T>, YamlError> {
    check_size(text, limits)?;
    let values: Vec<EmptyOnNull<T>> =
        serde_saphyr::from_multiple_with_options(text, options(text, limits))?;
    Ok(values.into_iter().map(|EmptyOnNull(value)| value).collect())
}

/// Reads each document of `text` as an `Option<T>` (`None` for an empty or
/// null document), numbered from 0 as they appear in the stream, so that an
/// error names the document it is in. The size limit applies to the whole
/// text, the budgets to each document.
pub fn from_str_each<'t, T: DeserializeOwned>(
    text: &'t str,
    limits: &'t Limits,
) -> Result<impl Iterator<Item = (usize, Result<Option<T>, YamlError>)> + 't, YamlError> {
    check_size(text, limits)?;
    Ok(split_documents(text)
        .into_iter()
        .enumerate()
        .map(move |(index, document)| {
            let value: Result<Option<EmptyOnNull<T>>, _> =
                serde_saphyr::from_str_with_options(document, options(document, limits));
            let value = value.map(|read| read.map(|EmptyOnNull(value)| value));
            (index, value.map_err(YamlError::from))
        }))
}

/// Cuts a YAML stream into its documents at `---` lines. YAML forbids a line
/// starting with `---` (then a space or the line's end) inside any scalar,
/// so such a line always starts a document. Directives and comments before
/// a marker stay with the document the marker starts.
pub fn split_documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    // Whether the current piece has anything besides blank lines,
    // comments and directives.
    let mut has_content = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let is_marker = body
            .strip_prefix("---")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        if is_marker && has_content {
            documents.push(&text[start..offset]);
            start = offset;
            has_content = false;
        }
        let trimmed = body.trim_start();
        if is_marker || !(trimmed.is_empty() || trimmed.starts_with('#') || body.starts_with('%')) {
            has_content = true;
        }
        offset += line.len();
    }
    if has_content || documents.is_empty() {
        documents.push(&text[start..]);
    }
    documents
}

/// Writes `value` as one YAML document. Strings with line breaks become
/// literal blocks and long single-line strings stay on one line (as
/// serde_yaml wrote them), so generated files diff line by line.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    let options = serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(value, options)
        .map_err(|error| YamlError::Write(error.to_string()))
}

/// Hostile YAML for the tests of every reader: what each must refuse
/// within its budget.
pub mod hostile {
    /// Nine levels of ten aliases each: 10^9 strings once expanded, from
    /// about 400 bytes of text.
    pub fn alias_bomb() -> String {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        text
    }

    /// `depth` nested flow sequences under the key `x`.
    pub fn deep_flow(depth: usize) -> String {
        format!("x: {}{}\n", "[".repeat(depth), "]".repeat(depth))
    }

    /// `depth` nested block mappings, each under the key `k`.
    pub fn deep_block(depth: usize) -> String {
        (0..depth)
            .map(|level| format!("{}k:\n", " ".repeat(level)))
            .collect::<String>()
            + &format!("{}v: 1\n", " ".repeat(depth))
    }
}

#[cfg(test)]
mod tests {
    use super::hostile::*;
    use super::*;
    use serde_json::Value;

    #[test]
    fn an_alias_bomb_is_refused_for_its_budget() {
        let error = from_str::<Value>(&alias_bomb(), &Limits::CONFIG).unwrap_err();
        assert!(error.is_budget(), "{error}");
    }

    #[test]
    fn deep_nesting_is_refused_for_its_budget() {
        for text in [deep_flow(10_000), deep_block(10_000)] {
            let error = from_str::<Value>(&text, &Limits::CONFIG).unwrap_err();
            assert!(error.is_budget(), "{error}");
        }
        // At the limit it still reads.
        let depth = Limits::CONFIG.max_depth - 1;
        from_str::<Value>(&deep_flow(depth), &Limits::CONFIG).unwrap();
        from_str::<Value>(&deep_block(depth), &Limits::CONFIG).unwrap();
    }

    #[test]
    fn a_few_aliases_still_read() {
        let text = "base: &base {cpu: 1}\nfirst: *base\nsecond: *base\n";
        let value: Value = from_str(text, &Limits::CONFIG).unwrap();
        assert_eq!(value["second"]["cpu"], 1);
    }

    #[test]
    fn large_text_is_refused_before_parsing() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::CONFIG
        };
        let error = from_str::<Value>("key: a long value\n", &limits).unwrap_err();
        assert!(matches!(
            error,
            YamlError::TooLarge {
                bytes: 18,
                limit: 10
            }
        ));
    }

    #[test]
    fn scalars_resolve_as_before() {
        #[derive(serde::Deserialize)]
        struct Fields {
            name: String,
            on: Value,
            flag: bool,
        }
        let fields: Fields = from_str("name:\non: yes\nflag: True\n", &Limits::CONFIG).unwrap();
        assert_eq!(fields.name, "");
        assert_eq!(fields.on, Value::String("yes".into()));
        assert!(fields.flag);
        assert!(from_str::<Fields>("name: a\non: 1\nflag: yes\n", &Limits::CONFIG).is_err());
    }

    #[test]
    fn repeated_keys_in_a_map_keep_the_last() {
        let map: std::collections::BTreeMap<String, i32> =
            from_str("a: 1\na: 2\n", &Limits::CONFIG).unwrap();
        assert_eq!(map["a"], 2);
    }

    #[test]
    fn documents_are_read_in_order() {
        let values: Vec<Value> =
            from_str_multiple("a: 1\n---\n---\nb: 2\n", &Limits::CONFIG).unwrap();
        assert_eq!(values.len(), 2);
        assert_eq!(values[1]["b"], 2);
    }

    #[test]
    fn documents_are_numbered_as_in_the_stream() {
        assert_eq!(split_documents(""), [""]);
        assert_eq!(split_documents("a: 1\n"), ["a: 1\n"]);
        assert_eq!(
            split_documents("# c\n%YAML 1.2\n---\na: 1\n--- b\n---\n"),
            ["# c\n%YAML 1.2\n---\na: 1\n", "--- b\n", "---\n"]
        );
        assert_eq!(
            split_documents("a: |\n  ---x\n----\n"),
            ["a: |\n  ---x\n----\n"]
        );
        let read: Vec<(usize, Option<Value>)> =
            from_str_each("a: 1\n---\n---\n[2]\n", &Limits::CONFIG)
                .unwrap()
                .map(|(index, value)| (index, value.unwrap()))
                .collect();
        assert_eq!(
            read,
            [
                (0, Some(serde_json::json!({"a": 1}))),
                (1, None),
                (2, Some(serde_json::json!([2])))
            ]
        );
        let errors: Vec<usize> =
            from_str_each::<Value>("a: 1\n---\n{not closed\n", &Limits::CONFIG)
                .unwrap()
                .filter_map(|(index, value)| value.is_err().then_some(index))
                .collect();
        assert_eq!(errors, [1]);
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    struct Inner {
        #[serde(default)]
        name: String,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Shapes {
        list: Vec<i32>,
        map: std::collections::BTreeMap<String, i32>,
        record: Inner,
        optional: Option<Vec<i32>>,
        nested: Vec<Inner>,
    }

    #[test]
    fn empty_values_read_as_empty_lists_maps_and_structs() {
        let text = "list:
map:
record:
optional:
nested:
- name:
-
";
        let shapes: Shapes = from_str(text, &Limits::CONFIG).unwrap();
        assert_eq!(
            shapes,
            Shapes {
                list: vec![],
                map: Default::default(),
                record: Inner::default(),
                optional: None,
                nested: vec![Inner::default(), Inner::default()],
            }
        );
        // `~` and `null` are the same null.
        let shapes: Shapes = from_str(
            "list: ~
map: null
record: ~
optional: ~
nested: []
",
            &Limits::CONFIG,
        )
        .unwrap();
        assert!(shapes.list.is_empty() && shapes.map.is_empty() && shapes.optional.is_none());
        // Present values read as before.
        let shapes: Shapes = from_str(
            "list: [1, 2]
map: {a: 1}
record: {name: x}
optional: [3]
nested: [{name: y}]
",
            &Limits::CONFIG,
        )
        .unwrap();
        assert_eq!(shapes.list, [1, 2]);
        assert_eq!(shapes.map["a"], 1);
        assert_eq!(shapes.record.name, "x");
        assert_eq!(shapes.optional, Some(vec![3]));
        assert_eq!(shapes.nested[0].name, "y");
    }

    #[test]
    fn empty_values_read_as_empty_in_every_reader() {
        let text = "list:
map:
record:
optional:
nested:
";
        let all: Vec<Shapes> = from_str_multiple(
            &format!(
                "{text}---
{text}"
            ),
            &Limits::CONFIG,
        )
        .unwrap();
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|shapes| shapes.list.is_empty()));
        let each: Vec<Option<Shapes>> = from_str_each(
            &format!(
                "{text}---
---
"
            ),
            &Limits::CONFIG,
        )
        .unwrap()
        .map(|(_, read)| read.unwrap())
        .collect();
        assert!(
            each[0]
                .as_ref()
                .is_some_and(|shapes| shapes.nested.is_empty())
        );
        assert!(each[1].is_none());
        // Through a JSON value too (the preview's path).
        let value = serde_json::json!({"list": null, "map": null, "record": null, "optional": null, "nested": null});
        let shapes: Shapes = null_as_empty::deserialize(value).unwrap();
        assert!(shapes.nested.is_empty() && shapes.record == Inner::default());
    }

    #[test]
    fn empty_values_leave_wrong_types_and_budgets_refused() {
        // A scalar where a list belongs is still an error.
        let error = from_str::<Shapes>(
            "list: 3
map:
record:
optional:
nested:
",
            &Limits::CONFIG,
        )
        .unwrap_err();
        assert!(!error.is_budget(), "{error}");
        // Hostile input read into the lenient shapes is refused for its budget.
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Bombed {
            a9: Vec<Vec<Value>>,
        }
        let error = from_str::<Bombed>(&alias_bomb(), &Limits::CONFIG).unwrap_err();
        assert!(error.is_budget(), "{error}");
        let error = from_str::<Shapes>(&deep_block(10_000), &Limits::CONFIG).unwrap_err();
        assert!(error.is_budget(), "{error}");
        let error = from_str_multiple::<Shapes>(&deep_flow(10_000), &Limits::CONFIG).unwrap_err();
        assert!(error.is_budget(), "{error}");
    }

    #[test]
    fn written_yaml_reads_back() {
        let value = serde_json::json!({"a": [1, "two", {"b": null}], "c": "yes"});
        let text = to_string(&value).unwrap();
        assert_eq!(from_str::<Value>(&text, &Limits::CONFIG).unwrap(), value);
    }
}
