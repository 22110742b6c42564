//! Our generated CRDs against upstream Koordinator's.
//!
//! `tests/upstream-crds/*.txt` is a facts inventory of upstream's CRD YAML
//! (names, scope, versions, printer columns, every schema field path and its
//! JSON type), extracted by `hack/upstream-crd-inventory.py`. Every upstream
//! field path must exist in our schema with the same type; names, scope,
//! short names, versions, status subresource and printer columns must be
//! equal. Deliberate differences are listed in `DELIBERATE_DIFFERENCES` (and
//! in apis/README.md); an entry that no longer differs fails the test too.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

/// (CRD name, field path, why we differ).
const DELIBERATE_DIFFERENCES: &[(&str, &str, &str)] = &[];

/// Upstream facts for one CRD.
#[derive(Default, Debug)]
struct Inventory {
    name: String,
    scalars: BTreeMap<String, String>,
    versions: BTreeMap<String, String>,
    columns: BTreeMap<String, BTreeSet<String>>,
    paths: BTreeMap<String, BTreeMap<String, String>>,
}

fn inventory_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstream-crds")
}

fn load_inventory(file: &str) -> Inventory {
    let text = std::fs::read_to_string(inventory_dir().join(file)).unwrap();
    let mut inventory = Inventory::default();
    for line in text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "name" => inventory.name = rest.to_string(),
            "version" => {
                let (version, flags) = rest.split_once(' ').unwrap();
                inventory.versions.insert(version.into(), flags.into());
            }
            "column" => {
                let (version, column) = rest.split_once(' ').unwrap();
                inventory
                    .columns
                    .entry(version.into())
                    .or_default()
                    .insert(column.into());
            }
            "path" => {
                let mut parts = rest.splitn(3, ' ');
                let (version, path, kind) = (
                    parts.next().unwrap(),
                    parts.next().unwrap(),
                    parts.next().unwrap(),
                );
                inventory
                    .paths
                    .entry(version.into())
                    .or_default()
                    .insert(path.into(), kind.into());
            }
            other => {
                inventory.scalars.insert(other.into(), rest.into());
            }
        }
    }
    inventory
}

/// The JSON type of a schema node, spelled as the inventory script spells it.
fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int-or-string".into();
    }
    let mut kind = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("any")
        .to_string();
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        kind.push_str("(preserve-unknown)");
    }
    kind
}

fn walk(schema: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    out.insert(
        if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
        type_of(schema),
    );
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            walk(child, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = schema.get("items").filter(|items| items.is_object()) {
        walk(items, &format!("{path}[]"), out);
    }
    if let Some(values) = schema
        .get("additionalProperties")
        .filter(|values| values.is_object())
    {
        walk(values, &format!("{path}{{}}"), out);
    }
}

/// Facts about our generated CRD, in the inventory's vocabulary.
fn ours(name: &str) -> Option<Inventory> {
    let crd = apis::crds::all()
        .into_iter()
        .find(|crd| crd.metadata.name.as_deref() == Some(name))?;
    let spec = &crd.spec;
    let mut short_names = spec.names.short_names.clone().unwrap_or_default();
    short_names.sort();
    let mut inventory = Inventory {
        name: name.into(),
        ..Default::default()
    };
    for (key, value) in [
        ("name", name.to_string()),
        ("group", spec.group.clone()),
        ("kind", spec.names.kind.clone()),
        ("plural", spec.names.plural.clone()),
        ("scope", spec.scope.clone()),
        ("shortNames", short_names.join(",")),
    ] {
        if key != "name" {
            inventory.scalars.insert(key.into(), value);
        }
    }
    for version in &spec.versions {
        let status = version
            .subresources
            .as_ref()
            .is_some_and(|sub| sub.status.is_some());
        inventory.versions.insert(
            version.name.clone(),
            format!(
                "served={} storage={} status={}",
                version.served, version.storage, status
            ),
        );
        for column in version.additional_printer_columns.iter().flatten() {
            inventory
                .columns
                .entry(version.name.clone())
                .or_default()
                .insert(format!(
                    "{} {} {}",
                    column.name, column.type_, column.json_path
                ));
        }
        let schema = version
            .schema
            .as_ref()
            .and_then(|schema| schema.open_api_v3_schema.as_ref())
            .map(|schema| serde_json::to_value(schema).unwrap())
            .unwrap_or(Value::Null);
        let mut paths = BTreeMap::new();
        walk(&schema, "", &mut paths);
        inventory.paths.insert(version.name.clone(), paths);
    }
    Some(inventory)
}

fn differences(upstream: &Inventory, ours: &Inventory) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (key, value) in &upstream.scalars {
        let mine = ours.scalars.get(key).cloned().unwrap_or_default();
        if &mine != value {
            found.push((key.clone(), format!("upstream {value:?}, ours {mine:?}")));
        }
    }
    for (version, flags) in &upstream.versions {
        match ours.versions.get(version) {
            Some(mine) if mine == flags => {}
            mine => found.push((
                format!("version {version}"),
                format!("upstream {flags:?}, ours {mine:?}"),
            )),
        }
        let empty = BTreeSet::new();
        let upstream_columns = upstream.columns.get(version).unwrap_or(&empty);
        let our_columns = ours.columns.get(version).unwrap_or(&empty);
        if upstream_columns != our_columns {
            found.push((
                format!("columns {version}"),
                format!("upstream {upstream_columns:?}, ours {our_columns:?}"),
            ));
        }
        let no_paths = BTreeMap::new();
        let our_paths = ours.paths.get(version).unwrap_or(&no_paths);
        for (path, kind) in upstream.paths.get(version).unwrap_or(&no_paths) {
            match our_paths.get(path) {
                Some(mine) if mine == kind => {}
                Some(mine) => found.push((
                    path.clone(),
                    format!("{version}: upstream {kind}, ours {mine}"),
                )),
                None => found.push((
                    path.clone(),
                    format!("{version}: missing (upstream {kind})"),
                )),
            }
        }
    }
    found
}

fn check(file: &str) {
    let upstream = load_inventory(file);
    let Some(ours) = ours(&upstream.name) else {
        panic!("no generated CRD named {}", upstream.name);
    };
    let allowed: Vec<_> = DELIBERATE_DIFFERENCES
        .iter()
        .filter(|(crd, _, _)| *crd == upstream.name)
        .collect();
    let found = differences(&upstream, &ours);
    let unexpected: Vec<_> = found
        .iter()
        .filter(|(path, _)| {
            !allowed
                .iter()
                .any(|(_, allowed_path, _)| allowed_path == path)
        })
        .map(|(path, what)| format!("  {path}: {what}"))
        .collect();
    let stale: Vec<_> = allowed
        .iter()
        .filter(|(_, allowed_path, _)| !found.iter().any(|(path, _)| path == allowed_path))
        .map(|(_, path, _)| format!("  {path}"))
        .collect();
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "{}: {} difference(s) from upstream:\n{}\nallowed differences that no longer differ:\n{}",
        upstream.name,
        unexpected.len(),
        unexpected.join("\n"),
        stale.join("\n"),
    );
}

macro_rules! compat_tests {
    ($($test:ident => $file:literal),* $(,)?) => {
        $(#[test] fn $test() { check($file); })*

        #[test]
        fn every_inventory_file_is_checked() {
            let checked: BTreeSet<&str> = [$($file),*].into_iter().collect();
            let present: BTreeSet<String> = std::fs::read_dir(inventory_dir())
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
            assert_eq!(checked, present);
        }
    };
}

compat_tests! {
    nodeslo => "slo.koordinator.sh_nodeslos.txt",
    nodemetric => "slo.koordinator.sh_nodemetrics.txt",
    reservation => "scheduling.koordinator.sh_reservations.txt",
    device => "scheduling.koordinator.sh_devices.txt",
    podmigrationjob => "scheduling.koordinator.sh_podmigrationjobs.txt",
    elasticquota => "scheduling.sigs.k8s.io_elasticquotas.txt",
    podgroup => "scheduling.sigs.k8s.io_podgroups.txt",
    elasticquotaprofile => "quota.koordinator.sh_elasticquotaprofiles.txt",
    clustercolocationprofile => "config.koordinator.sh_clustercolocationprofiles.txt",
    noderesourcetopology => "topology.node.k8s.io_noderesourcetopologies.txt",
}

#[test]
fn walker_matches_inventory_spelling() {
    // The Rust walker and the Python extractor must spell types alike.
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "b": {"type": "array", "items": {"type": "string"}},
            "c": {"type": "object", "additionalProperties": {"type": "integer"}},
            "d": {"x-kubernetes-preserve-unknown-fields": true},
            "e": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }
    });
    let mut paths = BTreeMap::new();
    walk(&schema, "", &mut paths);
    let expected: BTreeMap<String, String> = [
        (".", "object"),
        (".a", "int-or-string"),
        (".b", "array"),
        (".b[]", "string"),
        (".c", "object"),
        (".c{}", "integer"),
        (".d", "any(preserve-unknown)"),
        (".e", "object(preserve-unknown)"),
    ]
    .into_iter()
    .map(|(path, kind)| (path.to_string(), kind.to_string()))
    .collect();
    assert_eq!(paths, expected);
}
