//! NodeSLO and NodeMetric wire compatibility: manifests in upstream's format
//! decode, re-encode to the same JSON, tolerate unknown fields, and the CRDs
//! have upstream's identity.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use apis::scheduling::v1alpha1::DeviceType;
use apis::slo::v1alpha1::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/slo/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap()
}

/// Decodes `yaml` as `T`, checks that re-encoding yields exactly the input's
/// JSON (so every field name and value survived) and that decoding the
/// re-encoded form gives the same value.
fn assert_wire_round_trip<T>(yaml: &str) -> T
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let input: Value = apis::yaml::from_str(yaml, &apis::yaml::Limits::CONFIG).unwrap();
    let decoded: T = apis::yaml::from_str(yaml, &apis::yaml::Limits::CONFIG).unwrap();
    let encoded = serde_json::to_value(&decoded).unwrap();
    assert_eq!(encoded, input, "re-encoding changed the manifest");
    let again: T = serde_json::from_value(encoded).unwrap();
    assert_eq!(again, decoded);
    decoded
}

#[test]
fn full_nodeslo_round_trips_field_for_field() {
    let slo: NodeSLO = assert_wire_round_trip(&fixture("nodeslo-full.yaml"));
    assert_eq!(slo.metadata.name.as_deref(), Some("worker-07"));

    let threshold = slo.spec.resource_used_threshold_with_be.as_ref().unwrap();
    assert_eq!(threshold.cpu_suppress_threshold_percent, Some(65));
    assert_eq!(
        threshold.cpu_suppress_policy,
        Some(CPUSuppressPolicy::CfsQuota)
    );
    assert_eq!(threshold.cpu_evict_be_satisfaction_upper_percent, Some(80));
    assert_eq!(
        threshold.cpu_evict_policy,
        Some(CPUEvictPolicy::EvictByAllocatable)
    );
    assert_eq!(threshold.allocatable_evict_priority_threshold, Some(7999));

    let qos = slo.spec.resource_qos_strategy.as_ref().unwrap();
    let policies = qos.policies.as_ref().unwrap();
    assert_eq!(policies.cpu_policy, Some(CPUQOSPolicy::CoreSched));
    assert_eq!(policies.net_qos_policy, Some(NETQOSPolicy::TerwayQos));
    let be = qos.be_class.as_ref().unwrap();
    assert_eq!(
        be.cpu_qos.as_ref().unwrap().cpu_qos.group_identity,
        Some(-1)
    );
    assert_eq!(
        be.memory_qos.as_ref().unwrap().memory_qos.wmark_min_adj,
        Some(50)
    );
    let blocks = &be.blkio_qos.as_ref().unwrap().blkio_qos.blocks;
    assert_eq!(blocks[0].block_type, Some(BlockType::Device));
    assert_eq!(blocks[0].io_cfg.read_iops, Some(2048));
    assert_eq!(blocks[1].block_type, Some(BlockType::PodVolume));
    let network = &be.network_qos.as_ref().unwrap().network_qos;
    assert_eq!(
        network.ingress_limit,
        Some(IntOrString::String("50M".into()))
    );
    let lsr_network = &qos
        .lsr_class
        .as_ref()
        .unwrap()
        .network_qos
        .as_ref()
        .unwrap()
        .network_qos;
    assert_eq!(lsr_network.ingress_request, Some(IntOrString::Int(30)));
    let root_io = &qos
        .cgroup_root
        .as_ref()
        .unwrap()
        .blkio_qos
        .as_ref()
        .unwrap()
        .blkio_qos
        .blocks[0]
        .io_cfg;
    assert_eq!(root_io.model_write_rand_iops, Some(339390));
    assert_eq!(root_io.read_latency_percent, Some(95));

    let burst = slo.spec.cpu_burst_strategy.as_ref().unwrap();
    assert_eq!(burst.cpu_burst_config.policy, Some(CPUBurstPolicy::Auto));
    assert_eq!(
        burst.cpu_burst_config.cfs_quota_burst_period_seconds,
        Some(-1)
    );
    assert_eq!(burst.share_pool_threshold_percent, Some(50));

    let system = slo.spec.system_strategy.as_ref().unwrap();
    assert_eq!(system.memcg_reap_back_ground, Some(1));
    assert_eq!(system.sched_features.get("ID_LOAD_BALANCE"), Some(&false));
    assert_eq!(system.total_network_bandwidth, Some(Quantity("10G".into())));

    let extensions = slo.spec.extensions.as_ref().unwrap();
    assert_eq!(
        extensions.object["example-plugin"]["weights"],
        json!([1, 2, 3])
    );

    assert_eq!(slo.spec.host_applications.len(), 2);
    let nginx = &slo.spec.host_applications[0];
    assert_eq!(nginx.qos, "LS");
    assert_eq!(nginx.qos_class(), apis::extension::QoSClass::LS);
    assert_eq!(nginx.priority_class(), apis::extension::PriorityClass::Prod);
    let path = nginx.cgroup_path.as_ref().unwrap();
    assert_eq!(path.base, Some(CgroupBaseType::CgroupRoot));
    assert_eq!(path.parent_dir, "host-latency-sensitive/");
    assert_eq!(nginx.strategy, Some(HostApplicationStrategy {}));
    assert_eq!(
        slo.spec.host_applications[1]
            .cgroup_path
            .as_ref()
            .unwrap()
            .base,
        Some(CgroupBaseType::KubepodsBesteffort)
    );
    assert_eq!(slo.status, Some(NodeSLOStatus {}));
}

#[test]
fn full_nodemetric_round_trips_field_for_field() {
    let metric: NodeMetric = assert_wire_round_trip(&fixture("nodemetric-full.yaml"));

    let policy = metric.spec.collect_policy.as_ref().unwrap();
    assert_eq!(policy.aggregate_duration_seconds, Some(300));
    assert_eq!(
        policy.node_memory_collect_policy,
        Some(NodeMemoryCollectPolicy::UsageWithHotPageCache)
    );
    assert_eq!(
        policy
            .node_aggregate_policy
            .as_ref()
            .unwrap()
            .durations
            .len(),
        3
    );

    let status = metric.status.as_ref().unwrap();
    assert!(status.update_time.is_some());
    let node = status.node_metric.as_ref().unwrap();
    assert_eq!(node.node_usage.resources["cpu"], Quantity("7250m".into()));
    let gpu = &node.node_usage.devices[0];
    assert_eq!(gpu.type_, Some(DeviceType::Gpu));
    assert_eq!(
        gpu.uuid.as_deref(),
        Some("GPU-8c7f2b1e-5d4a-4c3b-9e2f-1a0b9c8d7e6f")
    );
    assert_eq!(gpu.module_id, Some(1));
    assert!(gpu.health);
    assert_eq!(gpu.topology.as_ref().unwrap().pcie_id, "pci0000:3a");
    let vfs = gpu.vf_groups.as_ref().unwrap()[0].vfs.as_ref().unwrap();
    assert_eq!(vfs[1].bus_id.as_deref(), Some("0000:3b:00.2"));
    assert_eq!(gpu.conditions.as_ref().unwrap()[0].type_, "Healthy");
    assert_eq!(
        node.aggregated_node_usages[0].usage["p90"].resources["cpu"],
        Quantity("8".into())
    );
    assert_eq!(
        node.aggregated_node_usages[0].duration.as_deref(),
        Some("5m0s")
    );
    assert_eq!(
        node.aggregated_system_usages[0].usage["p95"].resources["memory"],
        Quantity("3Gi".into())
    );
    assert_eq!(node.numa_usages[1].numa_node_id, 1);
    assert!(node.numa_usages[1].system_usage.is_empty());

    assert_eq!(status.pods_metric[1].namespace, "analytics");
    assert_eq!(status.pods_metric[1].qos, "BE");
    assert_eq!(
        status.pods_metric[1].qos_class(),
        apis::extension::QoSClass::BE
    );
    assert_eq!(
        status.pods_metric[1].priority_class(),
        apis::extension::PriorityClass::Batch
    );
    assert_eq!(
        status.pods_metric[1].extensions.as_ref().unwrap().object["cpu-throttled-ratio"],
        json!(0.12)
    );
    assert_eq!(status.host_application_metric[0].name, "nginx");
    assert_eq!(
        status
            .prod_reclaimable_metric
            .as_ref()
            .unwrap()
            .resource
            .resources["memory"],
        Quantity("6Gi".into())
    );
    assert_eq!(
        status.prod_peak_metric.as_ref().unwrap().resource.resources["cpu"],
        Quantity("5".into())
    );
}

#[test]
fn upstream_sample_nodemetric_with_empty_spec_decodes() {
    // The shape of upstream's config/samples NodeMetric: the spec holds only a
    // comment, i.e. it is null.
    let yaml = "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeMetric\nmetadata:\n  name: nodemetric-sample\nspec:\n  # to be filled by koordlet\n";
    let metric: NodeMetric = apis::yaml::from_str(yaml, &apis::yaml::Limits::CONFIG).unwrap();
    assert_eq!(metric.metadata.name.as_deref(), Some("nodemetric-sample"));
    assert_eq!(metric.spec, NodeMetricSpec::default());
    assert!(metric.status.is_none());

    // And without any spec at all, as Go would also accept.
    let bare: NodeMetric = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "bare"},
    }))
    .unwrap();
    assert_eq!(bare.spec, NodeMetricSpec::default());

    let slo: NodeSLO = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "worker-01"},
        "spec": null,
    }))
    .unwrap();
    assert_eq!(slo.spec, NodeSLOSpec::default());
}

#[test]
fn unknown_fields_are_ignored() {
    let slo: NodeSLO = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "worker-02"},
        "spec": {
            "futureStrategy": {"enable": true},
            "resourceUsedThresholdWithBE": {
                "enable": true,
                "cpuSuppressThresholdPercent": 55,
                "someNewKnob": 3
            },
            "resourceQOSStrategy": {
                "lseClass": {"cpuQOS": {"enable": true}},
                "beClass": {"cpuQOS": {"enable": true, "groupIdentity": -1, "newField": "x"}}
            },
            "cpuBurstStrategy": {"policy": "cpuBurstOnly", "experimental": true}
        },
        "status": {"observedGeneration": 4}
    }))
    .unwrap();
    let threshold = slo.spec.resource_used_threshold_with_be.unwrap();
    assert_eq!(threshold.enable, Some(true));
    assert_eq!(threshold.cpu_suppress_threshold_percent, Some(55));
    let be = slo.spec.resource_qos_strategy.unwrap().be_class.unwrap();
    let cpu = be.cpu_qos.unwrap();
    assert_eq!(
        (cpu.enable, cpu.cpu_qos.group_identity),
        (Some(true), Some(-1))
    );
    assert_eq!(
        slo.spec.cpu_burst_strategy.unwrap().cpu_burst_config.policy,
        Some(CPUBurstPolicy::CPUBurstOnly)
    );

    let metric: NodeMetric = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "worker-02"},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30, "jitter": 2}},
        "status": {
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1"}, "gpuTemperature": 40}},
            "newMetric": []
        }
    }))
    .unwrap();
    assert_eq!(
        metric.spec.collect_policy.unwrap().report_interval_seconds,
        Some(30)
    );
    let usage = metric.status.unwrap().node_metric.unwrap().node_usage;
    assert_eq!(usage.resources["cpu"], Quantity("1".into()));
}

#[test]
fn enum_values_unknown_to_us_are_kept_verbatim() {
    let strategy: ResourceThresholdStrategy = serde_json::from_value(
        json!({"cpuSuppressPolicy": "cpuQuotaV2", "cpuEvictPolicy": "evictByRealLimit"}),
    )
    .unwrap();
    assert_eq!(
        strategy.cpu_suppress_policy,
        Some(CPUSuppressPolicy::Other("cpuQuotaV2".into()))
    );
    assert!(!strategy.cpu_suppress_policy.as_ref().unwrap().is_known());
    assert_eq!(
        strategy.cpu_evict_policy,
        Some(CPUEvictPolicy::EvictByRealLimit)
    );
    assert_eq!(
        serde_json::to_value(&strategy).unwrap(),
        json!({"cpuSuppressPolicy": "cpuQuotaV2", "cpuEvictPolicy": "evictByRealLimit"})
    );
    assert_eq!(
        CPUBurstPolicy::from("cfsQuotaBurstOnly"),
        CPUBurstPolicy::CFSQuotaBurstOnly
    );
    assert_eq!(NETQOSPolicy::TerwayQos.as_str(), "terway-qos");
    assert_eq!(BlockType::VolumeGroup.to_string(), "volumegroup");
}

#[test]
fn extensions_use_the_go_field_name_on_the_wire() {
    let mut extensions = ExtensionsMap::default();
    extensions
        .object
        .insert("my-plugin".into(), json!({"level": 2}));
    let spec = NodeSLOSpec {
        extensions: Some(extensions),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        json!({"extensions": {"Object": {"my-plugin": {"level": 2}}}})
    );
}

#[test]
fn empty_spec_and_unset_fields_are_omitted() {
    let slo = NodeSLO::new("worker-03", NodeSLOSpec::default());
    assert_eq!(
        serde_json::to_value(&slo).unwrap(),
        json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeSLO",
            "metadata": {"name": "worker-03"},
            "spec": {}
        })
    );
    let qos = ResourceQOS {
        cpu_qos: Some(CPUQOSCfg {
            enable: Some(false),
            cpu_qos: CPUQOS::default(),
        }),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&qos).unwrap(),
        json!({"cpuQOS": {"enable": false}})
    );
}

#[test]
fn crds_have_upstream_identity() {
    let crds = crds();
    let names: Vec<_> = crds
        .iter()
        .map(|crd| crd.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "nodeslos.slo.koordinator.sh",
            "nodemetrics.slo.koordinator.sh"
        ]
    );
    for crd in &crds {
        assert_eq!(crd.spec.group, "slo.koordinator.sh");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, None);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        assert_eq!(version.additional_printer_columns, None);
        let root = version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        // Upstream does not require a spec.
        assert!(!root.required.iter().flatten().any(|field| field == "spec"));
    }
    assert_eq!(NodeSLO::plural(&()), "nodeslos");
    assert_eq!(NodeMetric::kind(&()), "NodeMetric");
    assert_eq!(
        NodeMetric::crd().spec.names.singular.as_deref(),
        Some("nodemetric")
    );

    let schema = serde_json::to_value(&crds[0]).unwrap();
    let spec = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(
        spec["extensions"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    let bandwidth = &spec["systemStrategy"]["properties"]["totalNetworkBandwidth"];
    assert_eq!(bandwidth["x-kubernetes-int-or-string"], json!(true));
    let network = &spec["resourceQOSStrategy"]["properties"]["beClass"]["properties"]["networkQOS"]
        ["properties"];
    assert_eq!(network["ingressLimit"]["default"], json!(100));
    assert_eq!(
        network["egressRequest"]["anyOf"],
        json!([{"type": "integer"}, {"type": "string"}])
    );
    let memory = &spec["resourceQOSStrategy"]["properties"]["lsClass"]["properties"]["memoryQOS"]["properties"];
    assert_eq!(memory["wmarkMinAdj"]["minimum"], json!(-25.0));
    assert_eq!(memory["wmarkMinAdj"]["maximum"], json!(50.0));

    let metric_schema = serde_json::to_value(&crds[1]).unwrap();
    let collect = &metric_schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"]["metricCollectPolicy"]["properties"]["nodeMemoryCollectPolicy"];
    // kube-derive appends `null` for optional enums (the field is nullable).
    let allowed: Vec<_> = collect["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| !v.is_null())
        .collect();
    assert_eq!(
        allowed,
        [
            &json!("usageWithoutPageCache"),
            &json!("usageWithHotPageCache"),
            &json!("usageWithPageCache")
        ]
    );
}

#[test]
fn pod_qos_annotations_parse_and_reject_bad_values() {
    let mut annotations = BTreeMap::new();
    assert_eq!(pod_cpu_qos_config(&annotations).unwrap(), None);

    annotations.insert(
        ANNOTATION_POD_CPU_QOS.to_owned(),
        r#"{"groupIdentity": 1}"#.to_owned(),
    );
    annotations.insert(
        ANNOTATION_POD_MEMORY_QOS.to_owned(),
        r#"{"policy": "auto", "minLimitPercent": 100}"#.to_owned(),
    );
    annotations.insert(
        ANNOTATION_POD_CPU_BURST.to_owned(),
        r#"{"policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 400}"#.to_owned(),
    );
    annotations.insert(
        ANNOTATION_POD_BLKIO_QOS.to_owned(),
        r#"{"blocks": [{"name": "pvc-data", "type": "podvolume", "ioCfg": {"readBPS": 1048576}}]}"#
            .to_owned(),
    );
    assert_eq!(
        pod_cpu_qos_config(&annotations)
            .unwrap()
            .unwrap()
            .cpu_qos
            .group_identity,
        Some(1)
    );
    let memory = pod_memory_qos_config(&annotations).unwrap().unwrap();
    assert_eq!(memory.policy, Some(PodMemoryQOSPolicy::Auto));
    assert_eq!(memory.memory_qos.min_limit_percent, Some(100));
    let burst = pod_cpu_burst_config(&annotations).unwrap().unwrap();
    assert_eq!(burst.cfs_quota_burst_percent, Some(400));
    let blkio = pod_blkio_qos(&annotations).unwrap().unwrap();
    assert_eq!(blkio.blocks[0].io_cfg.read_bps, Some(1048576));

    annotations.insert(
        ANNOTATION_POD_CPU_QOS.to_owned(),
        r#"{"groupIdentity": 3}"#.to_owned(),
    );
    assert!(matches!(
        pod_cpu_qos_config(&annotations),
        Err(SloAnnotationError::GroupIdentityOutOfRange { value: 3 })
    ));
    annotations.insert(ANNOTATION_POD_MEMORY_QOS.to_owned(), "{not json".to_owned());
    match pod_memory_qos_config(&annotations) {
        Err(SloAnnotationError::InvalidJson { key, .. }) => {
            assert_eq!(key, "koordinator.sh/memoryQOS")
        }
        other => panic!("expected a JSON error, got {other:?}"),
    }

    let mut labels = BTreeMap::new();
    assert_eq!(core_sched_policy(&labels), CoreSchedPolicy::Default);
    labels.insert(LABEL_CORE_SCHED_POLICY.to_owned(), "exclusive".to_owned());
    labels.insert(LABEL_CORE_SCHED_GROUP_ID.to_owned(), "team-a".to_owned());
    assert_eq!(core_sched_policy(&labels), CoreSchedPolicy::Exclusive);
    assert_eq!(core_sched_group_id(&labels), "team-a");
    labels.insert(LABEL_CORE_SCHED_POLICY.to_owned(), "weird".to_owned());
    assert_eq!(core_sched_policy(&labels), CoreSchedPolicy::Default);
}

#[test]
fn third_party_allocation_annotations_upsert_by_name() {
    let mut annotations = BTreeMap::new();
    let yarn = |cpu: &str| ThirdPartyAllocation {
        name: "hadoop-yarn".into(),
        priority: "koord-batch".into(),
        resources: BTreeMap::from([("kubernetes.io/batch-cpu".to_owned(), Quantity(cpu.into()))]),
    };
    set_third_party_allocation(&mut annotations, yarn("2000")).unwrap();
    set_third_party_allocation(
        &mut annotations,
        ThirdPartyAllocation {
            name: "flink".into(),
            priority: "koord-mid".into(),
            resources: BTreeMap::new(),
        },
    )
    .unwrap();
    set_third_party_allocation(&mut annotations, yarn("3000")).unwrap();

    let raw: Value =
        serde_json::from_str(&annotations[NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY]).unwrap();
    assert_eq!(
        raw,
        json!({"allocations": [
            {"name": "hadoop-yarn", "priority": "koord-batch", "resources": {"kubernetes.io/batch-cpu": "3000"}},
            {"name": "flink", "priority": "koord-mid"}
        ]})
    );
    let parsed = third_party_allocations(&annotations).unwrap().unwrap();
    let batch: Vec<_> = parsed
        .by_priority("koord-batch")
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(batch, ["hadoop-yarn"]);

    annotations.insert(
        NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY.to_owned(),
        r#"{"resources": {"kubernetes.io/batch-memory": "10Gi"}}"#.to_owned(),
    );
    let extended = BTreeMap::from([(
        "kubernetes.io/batch-cpu".to_owned(),
        Quantity("8000".into()),
    )]);
    set_origin_extended_allocatable(&mut annotations, &extended).unwrap();
    let origin = origin_extended_allocatable(&annotations).unwrap().unwrap();
    assert_eq!(origin.resources.len(), 2);
    assert_eq!(
        origin.resources["kubernetes.io/batch-memory"],
        Quantity("10Gi".into())
    );

    annotations.insert(
        NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY.to_owned(),
        "[".to_owned(),
    );
    assert!(third_party_allocations(&annotations).is_err());
}
