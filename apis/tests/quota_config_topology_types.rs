//! ElasticQuotaProfile (quota.koordinator.sh), ClusterColocationProfile
//! (config.koordinator.sh) and NodeResourceTopology (topology.node.k8s.io):
//! manifests in upstream's format decode, survive a write/read cycle,
//! tolerate unknown fields, and the generated CRDs carry upstream's names,
//! scope, versions and subresources (expected values copied from upstream's
//! CRD YAML).
#![allow(clippy::unwrap_used)]

#[path = "fixtures/scheduling/support.rs"]
mod support;

use apis::config::v1alpha1::{ClusterColocationProfile, PROFILE_QOS_CLASSES};
use apis::extension::QoSClass;
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::topology::{v1alpha1, v1alpha2};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{CustomResourceExt, Resource};
use serde_json::json;
use support::*;

fn crd_named(name: &str) -> CustomResourceDefinition {
    apis::crds::all()
        .into_iter()
        .find(|crd| crd.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

// -------------------------------------------------------- ElasticQuotaProfile

#[test]
fn elastic_quota_profile_full_manifest_decodes_every_field() {
    let profile: ElasticQuotaProfile = round_trip(&fixture("elastic-quota-profile-full.yaml"));
    assert_eq!(profile.metadata.namespace.as_deref(), Some("kube-system"));
    let spec = &profile.spec;
    assert_eq!(spec.quota_name, "pool-a");
    assert_eq!(
        spec.quota_labels.as_ref().unwrap()["topology.kubernetes.io/zone"],
        "zone-a"
    );
    assert_eq!(spec.resource_ratio.as_deref(), Some("0.9"));
    assert_eq!(spec.resource_ratio(), Ok(Some(0.9)));
    assert_eq!(
        spec.node_selector.match_labels.as_ref().unwrap()["pool"],
        "a"
    );
    let expressions = spec.node_selector.match_expressions.as_ref().unwrap();
    assert_eq!(expressions[0].operator, "DoesNotExist");
    assert_eq!(expressions[1].values.as_ref().unwrap().len(), 2);
    assert!(profile.status.is_some());

    let crd = crd_named("elasticquotaprofiles.quota.koordinator.sh");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&profile)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &profile);

    let value = to_json(&profile);
    assert_eq!(value["apiVersion"], "quota.koordinator.sh/v1alpha1");
    assert_eq!(value["kind"], "ElasticQuotaProfile");
    assert_eq!(value["status"], json!({}));
}

#[test]
fn elastic_quota_profile_requires_quota_name_and_node_selector() {
    let value = json!({
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"quotaName": "q"},
    });
    assert!(serde_json::from_value::<ElasticQuotaProfile>(value).is_err());

    let mut profile: ElasticQuotaProfile = round_trip(&fixture("elastic-quota-profile-full.yaml"));
    profile.spec.resource_ratio = Some("ninety percent".into());
    assert!(profile.spec.resource_ratio().is_err());
    profile.spec.resource_ratio = Some("-1".into());
    assert!(profile.spec.resource_ratio().is_err());
    profile.spec.resource_ratio = None;
    assert_eq!(profile.spec.resource_ratio(), Ok(None));
}

#[test]
fn elastic_quota_profile_crd_matches_upstream() {
    let crd = crd_named("elasticquotaprofiles.quota.koordinator.sh");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "elasticquotaprofiles.quota.koordinator.sh".into(),
            group: "quota.koordinator.sh".into(),
            kind: "ElasticQuotaProfile".into(),
            plural: "elasticquotaprofiles".into(),
            singular: Some("elasticquotaprofile".into()),
            scope: "Namespaced".into(),
            short_names: strings(&["eqp"]),
            versions: vec![("v1alpha1".into(), true, true, false)],
            columns: vec![],
            annotations: vec![],
        }
    );
    assert_eq!(crd_facts(&ElasticQuotaProfile::crd()), crd_facts(&crd));
    assert_eq!(ElasticQuotaProfile::shortnames(), ["eqp"]);
    let schema = root_schema(&crd, "v1alpha1");
    assert_eq!(
        schema_at(&schema, ".spec")["required"],
        json!(["nodeSelector", "quotaName"])
    );
    assert_eq!(schema_at(&schema, ".status")["type"], "object");
    assert_eq!(
        schema_at(&schema, ".spec.nodeSelector")["x-kubernetes-map-type"],
        "atomic"
    );
    assert!(schema_at(&schema, ".spec").get("default").is_none());
}

// --------------------------------------------------- ClusterColocationProfile

#[test]
fn cluster_colocation_profile_full_manifest_decodes_every_field() {
    let profile: ClusterColocationProfile =
        round_trip(&fixture("cluster-colocation-profile-full.yaml"));
    let spec = &profile.spec;
    assert_eq!(
        spec.namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["koordinator.sh/enable-colocation"],
        "true"
    );
    let selector = spec.selector.as_ref().unwrap();
    assert_eq!(
        selector.match_expressions.as_ref().unwrap()[0].operator,
        "NotIn"
    );
    assert_eq!(spec.probability, Some(IntOrString::String("50%".into())));
    assert_eq!(spec.qos_class, Some(QoSClass::BE));
    assert_eq!(spec.priority_class_name.as_deref(), Some("koord-batch"));
    assert_eq!(spec.koordinator_priority, Some(1000));
    assert_eq!(
        spec.labels.as_ref().unwrap()["koordinator.sh/mutated"],
        "true"
    );
    assert_eq!(
        spec.annotations.as_ref().unwrap()["koordinator.sh/colocation-profile"],
        "spark-batch"
    );
    assert_eq!(
        spec.label_keys_mapping.as_ref().unwrap()["spark-app"],
        "koordinator.sh/workload"
    );
    assert_eq!(
        spec.annotation_keys_mapping.as_ref().unwrap()["spark.example.com/owner"],
        "koordinator.sh/owner"
    );
    assert_eq!(
        spec.label_suffixes.as_ref().unwrap()["spark-role"],
        "-batch"
    );
    assert_eq!(spec.scheduler_name.as_deref(), Some("koord-scheduler"));
    // The patch is kept verbatim, directives included.
    let patch = spec.patch.as_ref().unwrap();
    assert_eq!(patch["metadata"]["labels"]["patched-by"], "koordinator");
    assert_eq!(
        patch["spec"]["$setElementOrder/containers"][0]["name"],
        "executor"
    );
    assert!(profile.status.is_some());

    let crd = crd_named("clustercolocationprofiles.config.koordinator.sh");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&profile)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &profile);
}

#[test]
fn cluster_colocation_profile_values() {
    let mut value = to_json(&round_trip::<ClusterColocationProfile>(&fixture(
        "cluster-colocation-profile-full.yaml",
    )));
    // Probability as a number, and every class the schema allows.
    value["spec"]["probability"] = json!(100);
    for class in ["LSE", "LSR", "LS", "BE", "SYSTEM"] {
        value["spec"]["qosClass"] = json!(class);
        let profile: ClusterColocationProfile = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(profile.spec.probability, Some(IntOrString::Int(100)));
        assert_eq!(profile.spec.qos_class.unwrap().as_str(), class);
        assert_eq!(to_json(&profile)["spec"]["qosClass"], class);
    }
    value["spec"]["qosClass"] = json!("GOLD");
    assert!(serde_json::from_value::<ClusterColocationProfile>(value).is_err());

    // Upstream's examples/spark-jobs profile: selectors, class, priority, scheduler only.
    let minimal: ClusterColocationProfile = round_trip(
        r#"
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata:
  name: spark-demo
spec:
  namespaceSelector:
    matchLabels:
      koordinator.sh/enable-colocation: "true"
  selector:
    matchLabels:
      sparkoperator.k8s.io/launched-by-spark-operator: "true"
  qosClass: BE
  priorityClassName: koord-batch
  koordinatorPriority: 1000
  schedulerName: koord-scheduler
"#,
    );
    assert_eq!(minimal.spec.patch, None);
    assert_eq!(minimal.spec.probability, None);
    let written = to_json(&minimal);
    assert!(written["spec"].get("patch").is_none());
    assert!(written.get("status").is_none());
}

#[test]
fn cluster_colocation_profile_crd_matches_upstream() {
    let crd = crd_named("clustercolocationprofiles.config.koordinator.sh");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "clustercolocationprofiles.config.koordinator.sh".into(),
            group: "config.koordinator.sh".into(),
            kind: "ClusterColocationProfile".into(),
            plural: "clustercolocationprofiles".into(),
            singular: Some("clustercolocationprofile".into()),
            scope: "Cluster".into(),
            short_names: vec![],
            versions: vec![("v1alpha1".into(), true, true, true)],
            columns: vec![],
            annotations: vec![],
        }
    );
    assert_eq!(
        ClusterColocationProfile::kind(&()),
        "ClusterColocationProfile"
    );
    let schema = root_schema(&crd, "v1alpha1");
    assert_eq!(
        schema_at(&schema, ".spec.qosClass")["enum"],
        json!(["LSE", "LSR", "LS", "BE", "SYSTEM"])
    );
    assert_eq!(
        PROFILE_QOS_CLASSES.map(QoSClass::as_str),
        ["LSE", "LSR", "LS", "BE", "SYSTEM"]
    );
    assert_eq!(
        schema_at(&schema, ".spec.probability")["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(
        schema_at(&schema, ".spec.patch"),
        &json!({
            "description": schema_at(&schema, ".spec.patch")["description"],
            "x-kubernetes-preserve-unknown-fields": true,
        })
    );
}

// ------------------------------------------------------- NodeResourceTopology

#[test]
fn node_resource_topology_v1alpha1_decodes_every_field() {
    let topology: v1alpha1::NodeResourceTopology =
        round_trip(&fixture("node-resource-topology-v1alpha1.yaml"));
    assert_eq!(topology.metadata.name.as_deref(), Some("node-12"));
    assert_eq!(
        topology.topology_policies,
        [v1alpha1::TopologyManagerPolicy::None]
    );
    assert_eq!(topology.zones.len(), 2);
    let zone = &topology.zones[0];
    assert_eq!(
        (zone.name.as_str(), zone.type_.as_str()),
        ("node-0", "Node")
    );
    assert_eq!(zone.parent.as_deref(), Some("socket-0"));
    let costs = zone.costs.as_ref().unwrap();
    assert_eq!((costs[1].name.as_str(), costs[1].value), ("node-1", 21));
    assert_eq!(zone.attributes.as_ref().unwrap()[0].value, "0-1");
    let cpu = &zone.resources.as_ref().unwrap()[0];
    // `capacity: 32` is a YAML number.
    assert_eq!(cpu.capacity, Quantity("32".into()));
    assert_eq!(cpu.allocatable, Quantity("30".into()));
    assert_eq!(cpu.available, Quantity("25500m".into()));
    assert_eq!(topology.zones[1].parent, None);

    let crd = crd_named("noderesourcetopologies.topology.node.k8s.io");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&topology)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &topology);

    // No spec: the fields sit at the top level, as upstream's.
    let value = to_json(&topology);
    assert_eq!(value["apiVersion"], "topology.node.k8s.io/v1alpha1");
    assert_eq!(value["kind"], "NodeResourceTopology");
    assert!(value.get("spec").is_none());
    assert_eq!(value["topologyPolicies"], json!(["None"]));
    assert_eq!(value["zones"][0]["type"], "Node");
}

#[test]
fn node_resource_topology_v1alpha1_writes_required_lists() {
    // A fresh object (as koordlet creates it) writes both required lists.
    let mut topology = v1alpha1::NodeResourceTopology::new("node-1");
    topology.topology_policies = vec![v1alpha1::TopologyManagerPolicy::None];
    let value = to_json(&topology);
    assert_eq!(value["zones"], json!([]));
    assert_eq!(value["topologyPolicies"], json!(["None"]));
    assert_eq!(value["metadata"]["name"], "node-1");

    // Go writes nil lists as null; they read as empty.
    let decoded: v1alpha1::NodeResourceTopology = serde_json::from_value(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "node-1"},
        "topologyPolicies": null,
        "zones": null,
    }))
    .unwrap();
    assert!(decoded.topology_policies.is_empty());
    assert!(decoded.zones.is_empty());

    // Policies this version does not know are kept.
    let odd: v1alpha1::NodeResourceTopology = serde_json::from_value(json!({
        "metadata": {"name": "node-2"},
        "topologyPolicies": ["RestrictedPodLevel", "SomethingNew"],
        "zones": [],
    }))
    .unwrap();
    assert_eq!(
        odd.topology_policies,
        [
            v1alpha1::TopologyManagerPolicy::RestrictedPodLevel,
            v1alpha1::TopologyManagerPolicy::Other("SomethingNew".into())
        ]
    );
}

#[test]
fn node_resource_topology_v1alpha2_decodes_every_field() {
    let topology: v1alpha2::NodeResourceTopology =
        round_trip(&fixture("node-resource-topology-v1alpha2.yaml"));
    assert_eq!(
        topology.topology_policies.as_deref(),
        Some(&[v1alpha2::TopologyManagerPolicy::SingleNumaNodePodLevel][..])
    );
    let attributes = topology.attributes.as_ref().unwrap();
    assert_eq!(attributes[1].name, "topologyManagerScope");
    assert_eq!(
        topology.zones[0].resources.as_ref().unwrap()[0].available,
        Quantity("8".into())
    );

    let crd = crd_named("noderesourcetopologies.topology.node.k8s.io");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha2"), &[to_json(&topology)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha2", &topology);
    assert_eq!(
        to_json(&topology)["apiVersion"],
        "topology.node.k8s.io/v1alpha2"
    );

    // Optional in v1alpha2: left out when unset.
    let bare = to_json(&v1alpha2::NodeResourceTopology::new("n"));
    assert!(bare.get("topologyPolicies").is_none());
    assert!(bare.get("attributes").is_none());
    assert_eq!(bare["zones"], json!([]));
}

#[test]
fn node_resource_topology_crd_matches_upstream() {
    let crd = crd_named("noderesourcetopologies.topology.node.k8s.io");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "noderesourcetopologies.topology.node.k8s.io".into(),
            group: "topology.node.k8s.io".into(),
            kind: "NodeResourceTopology".into(),
            plural: "noderesourcetopologies".into(),
            singular: Some("noderesourcetopology".into()),
            scope: "Cluster".into(),
            short_names: strings(&["node-res-topo"]),
            // v1alpha1 is served; v1alpha2 is served and stored.
            versions: vec![
                ("v1alpha1".into(), true, false, false),
                ("v1alpha2".into(), true, true, false),
            ],
            columns: vec![],
            annotations: vec![(
                "api-approved.kubernetes.io".into(),
                "https://github.com/kubernetes/enhancements/pull/1870".into()
            )],
        }
    );
    let v1 = root_schema(&crd, "v1alpha1");
    assert_eq!(v1["required"], json!(["topologyPolicies", "zones"]));
    assert!(v1["properties"].get("attributes").is_none());
    assert!(v1["properties"].get("spec").is_none());
    assert!(schema_at(&v1, ".zones").get("default").is_none());
    assert_eq!(
        schema_at(&v1, ".zones[]")["required"],
        json!(["name", "type"])
    );
    assert_eq!(
        schema_at(&v1, ".zones[].resources[]")["required"],
        json!(["allocatable", "available", "capacity", "name"])
    );
    assert_eq!(
        schema_at(&v1, ".zones[].resources[].capacity")["pattern"],
        apis::schema::QUANTITY_PATTERN
    );
    let v2 = root_schema(&crd, "v1alpha2");
    assert_eq!(v2["required"], json!(["zones"]));
    assert_eq!(
        schema_at(&v2, ".attributes[]")["required"],
        json!(["name", "value"])
    );

    // Each version's own CRD is a single, stored version.
    assert_eq!(
        crd_facts(&v1alpha1::NodeResourceTopology::crd()).versions,
        [("v1alpha1".to_owned(), true, true, false)]
    );
    assert_eq!(
        v1alpha2::NodeResourceTopology::api_version(&()),
        "topology.node.k8s.io/v1alpha2"
    );
    assert_eq!(
        v1alpha1::NodeResourceTopology::crd_name(),
        "noderesourcetopologies.topology.node.k8s.io"
    );
}
