//! Reservation, Device, PodMigrationJob (scheduling.koordinator.sh) and
//! ElasticQuota, PodGroup (scheduling.sigs.k8s.io): manifests in upstream's
//! format decode, survive a write/read cycle, tolerate unknown fields, and
//! the generated CRDs carry upstream's names, scope, subresources and
//! printer columns (expected values copied from upstream's CRD YAML).
#![allow(clippy::unwrap_used)]

#[path = "fixtures/scheduling/support.rs"]
mod support;

use apis::scheduling::v1alpha1::{
    ConditionStatus, Device, DeviceConditionType, DeviceType, PodMigrationJob,
    PodMigrationJobConditionType, PodMigrationJobMode, PodMigrationJobPhase, PodMigrationJobReason,
    PreAllocationMode, Reservation, ReservationAllocatePolicy, ReservationConditionType,
    ReservationPhase, ReservationReason,
};
use apis::scheduling_sigs::v1alpha1::{ElasticQuota, PodGroup, PodGroupPhase};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::{CustomResourceExt, Resource};
use serde_json::json;
use support::*;

fn quantity(text: &str) -> Quantity {
    Quantity(text.to_owned())
}

fn crd_named(
    name: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    apis::crds::all()
        .into_iter()
        .find(|crd| crd.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

// ---------------------------------------------------------------- Reservation

#[test]
fn reservation_full_manifest_decodes_every_field() {
    let reservation: Reservation = round_trip(&fixture("reservation-full.yaml"));
    assert_eq!(
        reservation.metadata.name.as_deref(),
        Some("reserve-training-0")
    );
    let spec = &reservation.spec;

    let template_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(
        template_spec.scheduler_name.as_deref(),
        Some("koord-scheduler")
    );
    let requests = template_spec.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    // `cpu: 4` and `koordinator.sh/gpu-core: 100` are YAML numbers.
    assert_eq!(requests["cpu"], quantity("4"));
    assert_eq!(requests["koordinator.sh/gpu-core"], quantity("100"));

    assert_eq!(spec.owners.len(), 3);
    let object = spec.owners[0].object.as_ref().unwrap();
    assert_eq!(object.name.as_deref(), Some("trainer-0"));
    assert_eq!(object.field_path.as_deref(), Some("spec.containers{main}"));
    let controller = spec.owners[1].controller.as_ref().unwrap();
    assert_eq!(controller.owner_reference.kind, "StatefulSet");
    assert_eq!(controller.owner_reference.controller, Some(true));
    assert_eq!(controller.owner_reference.block_owner_deletion, Some(false));
    assert_eq!(controller.namespace.as_deref(), Some("training"));
    let selector = spec.owners[2].label_selector.as_ref().unwrap();
    let expression = &selector.match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        expression.values.as_deref(),
        Some(&["gpu".to_owned(), "gpu-large".to_owned()][..])
    );

    let ttl = spec.ttl.unwrap();
    assert_eq!(ttl.to_std(), Some(std::time::Duration::from_secs(5400)));
    assert_eq!(spec.expires, None);
    assert_eq!(spec.pre_allocation, Some(true));
    assert_eq!(spec.allocate_once, Some(false));
    assert!(!spec.allocate_once_or_default());
    assert_eq!(
        spec.allocate_policy,
        Some(ReservationAllocatePolicy::Restricted)
    );
    assert_eq!(spec.unschedulable, Some(false));
    let taint = &spec.taints.as_ref().unwrap()[0];
    assert_eq!(taint.effect, "NoSchedule");
    assert!(taint.time_added.is_some());
    let policy = spec.pre_allocation_policy.as_ref().unwrap();
    assert_eq!(policy.mode, Some(PreAllocationMode::Cluster));
    assert_eq!(policy.enable_multiple, Some(true));

    let status = reservation.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(ReservationPhase::Available));
    assert!(reservation.is_available());
    assert!(!reservation.is_terminated());
    assert_eq!(reservation.node_name(), Some("gpu-node-7"));
    let conditions = status.conditions.as_ref().unwrap();
    assert_eq!(
        conditions[0].type_,
        Some(ReservationConditionType::Scheduled)
    );
    assert_eq!(conditions[0].status, Some(ConditionStatus::True));
    assert_eq!(conditions[0].reason, Some(ReservationReason::Scheduled));
    assert_eq!(conditions[1].type_, Some(ReservationConditionType::Ready));
    assert_eq!(conditions[1].reason, Some(ReservationReason::Available));
    assert_eq!(
        status.current_owners.as_ref().unwrap()[0]
            .resource_version
            .as_deref(),
        Some("4712")
    );
    let allocatable = status.allocatable.as_ref().unwrap();
    assert_eq!(allocatable["cpu"], quantity("4"));
    assert_eq!(allocatable["koordinator.sh/gpu-core"], quantity("100"));
    assert_eq!(status.allocated.as_ref().unwrap()["cpu"], quantity("1500m"));
}

#[test]
fn reservation_fixtures_cover_every_schema_field() {
    let full: Reservation = round_trip(&fixture("reservation-full.yaml"));
    let expires: Reservation = round_trip(&fixture("reservation-expires.yaml"));
    let schema = root_schema(
        &crd_named("reservations.scheduling.koordinator.sh"),
        "v1alpha1",
    );
    let unset = unset_schema_paths(&schema, &[to_json(&full), to_json(&expires)]);
    assert!(unset.is_empty(), "fixtures never set: {unset:?}");
}

#[test]
fn reservation_with_expiry_and_defaults() {
    let reservation: Reservation = round_trip(&fixture("reservation-expires.yaml"));
    let spec = &reservation.spec;
    assert_eq!(spec.ttl, None);
    assert_eq!(
        spec.expires.as_ref().unwrap().0.to_string(),
        "2030-01-01T00:00:00Z"
    );
    assert_eq!(spec.allocate_once, None);
    // Upstream's schema default.
    assert!(spec.allocate_once_or_default());
    assert_eq!(
        spec.template.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-3")
    );
    assert_eq!(reservation.phase(), ReservationPhase::Waiting);
}

#[test]
fn reservation_in_upstream_sample_shape_decodes() {
    let reservation: Reservation = round_trip(&fixture("reservation-sample-shape.yaml"));
    assert_eq!(reservation.spec.owners.len(), 1);
    let owner = reservation.spec.owners[0].object.as_ref().unwrap();
    assert_eq!(owner.name.as_deref(), Some("demo-pod-0"));
    assert_eq!(owner.namespace.as_deref(), Some("demo"));
    let container = &reservation.spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        container.command.as_deref(),
        Some(&["stress".to_owned()][..])
    );
    let limits = container
        .resources
        .as_ref()
        .unwrap()
        .limits
        .as_ref()
        .unwrap();
    assert_eq!(limits["cpu"], quantity("2"));
    // No status yet: the phase reads as Pending, as upstream's default.
    assert!(reservation.status.is_none());
    assert_eq!(reservation.phase(), ReservationPhase::Pending);
    assert_eq!(reservation.node_name(), None);
}

#[test]
fn reservation_tolerates_unknown_fields() {
    let reservation: Reservation = round_trip(&fixture("reservation-full.yaml"));
    let crd = crd_named("reservations.scheduling.koordinator.sh");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &reservation);
}

#[test]
fn reservation_serializes_type_meta_and_omits_unset_fields() {
    let reservation: Reservation = round_trip(&fixture("reservation-sample-shape.yaml"));
    let value = to_json(&reservation);
    assert_eq!(value["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
    assert_eq!(value["kind"], "Reservation");
    let spec = value["spec"].as_object().unwrap();
    let mut keys: Vec<&str> = spec.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["owners", "template"]);
    assert!(value.get("status").is_none());
}

#[test]
fn reservation_rejects_values_upstream_schema_rejects() {
    let mut value = to_json(&round_trip::<Reservation>(&fixture(
        "reservation-expires.yaml",
    )));
    value["spec"]["allocatePolicy"] = json!("Sometimes");
    let error = serde_json::from_value::<Reservation>(value.clone()).unwrap_err();
    assert!(error.to_string().contains("Sometimes"), "{error}");

    value["spec"]["allocatePolicy"] = json!("Aligned");
    value["spec"]["ttl"] = json!("a while");
    assert!(serde_json::from_value::<Reservation>(value).is_err());
}

#[test]
fn reservation_keeps_unknown_phase_and_reason() {
    let mut value = to_json(&round_trip::<Reservation>(&fixture(
        "reservation-full.yaml",
    )));
    value["status"]["phase"] = json!("Draining");
    value["status"]["conditions"][0]["reason"] = json!("NodeGone");
    let reservation: Reservation = serde_json::from_value(value).unwrap();
    let status = reservation.status.as_ref().unwrap();
    assert_eq!(
        status.phase,
        Some(ReservationPhase::Other("Draining".into()))
    );
    assert_eq!(
        status.conditions.as_ref().unwrap()[0].reason,
        Some(ReservationReason::Other("NodeGone".into()))
    );
    let written = to_json(&reservation);
    assert_eq!(written["status"]["phase"], "Draining");
    assert_eq!(written["status"]["conditions"][0]["reason"], "NodeGone");
}

#[test]
fn reservation_crd_matches_upstream() {
    let crd = crd_named("reservations.scheduling.koordinator.sh");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "reservations.scheduling.koordinator.sh".into(),
            group: "scheduling.koordinator.sh".into(),
            kind: "Reservation".into(),
            plural: "reservations".into(),
            singular: Some("reservation".into()),
            scope: "Cluster".into(),
            short_names: vec![],
            versions: vec![("v1alpha1".into(), true, true, true)],
            columns: vec![
                column(
                    "v1alpha1",
                    "Phase",
                    "string",
                    ".status.phase",
                    Some("The phase of reservation")
                ),
                column(
                    "v1alpha1",
                    "Age",
                    "date",
                    ".metadata.creationTimestamp",
                    None
                ),
                column("v1alpha1", "Node", "string", ".status.nodeName", None),
                column("v1alpha1", "TTL", "string", ".spec.ttl", None),
                column("v1alpha1", "Expires", "string", ".spec.expires", None),
            ],
            annotations: vec![],
        }
    );
    assert_eq!(
        crd_facts(&Reservation::crd()).versions,
        crd_facts(&crd).versions
    );
    assert_eq!(
        Reservation::api_version(&()),
        "scheduling.koordinator.sh/v1alpha1"
    );
    assert_eq!(Reservation::plural(&()), "reservations");

    let schema = root_schema(&crd, "v1alpha1");
    let spec = schema_at(&schema, ".spec");
    assert_eq!(spec["required"], json!(["owners", "template"]));
    assert_eq!(spec["properties"]["owners"]["minItems"], 1);
    assert_eq!(schema_at(&schema, ".spec.owners[]")["minProperties"], 1);
    assert_eq!(schema_at(&schema, ".spec.ttl")["default"], "24h");
    assert_eq!(schema_at(&schema, ".spec.allocateOnce")["default"], true);
    assert_eq!(
        schema_at(&schema, ".spec.allocatePolicy")["enum"],
        json!(["Aligned", "Restricted"])
    );
    assert_eq!(
        schema_at(&schema, ".spec.preAllocationPolicy.mode")["enum"],
        json!(["Default", "Cluster"])
    );
    assert_eq!(
        schema_at(&schema, ".spec.preAllocationPolicy.mode")["default"],
        "Default"
    );
    assert_eq!(
        schema_at(&schema, ".spec.preAllocationPolicy.enableMultiple")["default"],
        false
    );
    assert_eq!(schema_at(&schema, ".status.phase")["default"], "Pending");
    assert_eq!(
        schema_at(&schema, ".spec.template"),
        &json!({
            "description": schema_at(&schema, ".spec.template")["description"],
            "x-kubernetes-preserve-unknown-fields": true,
        })
    );
    let quantity_schema = &schema_at(&schema, ".status.allocatable")["additionalProperties"];
    assert_eq!(quantity_schema["x-kubernetes-int-or-string"], true);
    assert_eq!(quantity_schema["pattern"], apis::schema::QUANTITY_PATTERN);
    // controller-gen emits no nullable markers; neither do we here.
    assert!(!serde_json::to_string(&schema).unwrap().contains("nullable"));
}

// --------------------------------------------------------------------- Device

#[test]
fn device_full_manifest_decodes_every_field() {
    let device: Device = round_trip(&fixture("device-full.yaml"));
    assert_eq!(device.metadata.name.as_deref(), Some("gpu-node-7"));
    let devices = device.spec.devices.as_ref().unwrap();
    assert_eq!(devices.len(), 3);

    let gpu = &devices[0];
    assert_eq!(gpu.type_, Some(DeviceType::Gpu));
    assert_eq!(
        gpu.uuid.as_deref(),
        Some("GPU-1a2b3c4d-0000-1111-2222-333344445555")
    );
    assert_eq!(gpu.minor, Some(0));
    assert_eq!(gpu.module_id, Some(2));
    assert!(gpu.health);
    assert_eq!(gpu.labels.as_ref().unwrap()["vendor"], "nvidia");
    let resources = gpu.resources.as_ref().unwrap();
    assert_eq!(resources["koordinator.sh/gpu-core"], quantity("100"));
    assert_eq!(resources["koordinator.sh/gpu-memory"], quantity("80Gi"));
    let topology = gpu.topology.as_ref().unwrap();
    assert_eq!((topology.socket_id, topology.node_id), (0, 0));
    assert_eq!(topology.pcie_id, "pci0000:3a");
    assert_eq!(topology.bus_id.as_deref(), Some("0000:3b:00.0"));
    let condition = &gpu.conditions.as_ref().unwrap()[0];
    assert_eq!(condition.type_, DeviceConditionType::Healthy.as_str());
    assert_eq!(condition.observed_generation, Some(3));

    assert!(!devices[1].health);
    let rdma = &devices[2];
    assert_eq!(rdma.type_, Some(DeviceType::Rdma));
    let vf_group = &rdma.vf_groups.as_ref().unwrap()[0];
    let vfs = vf_group.vfs.as_ref().unwrap();
    assert_eq!(vfs[1].minor, 1);
    assert_eq!(vfs[1].bus_id.as_deref(), Some("0000:5e:00.3"));

    let allocation = &device
        .status
        .as_ref()
        .unwrap()
        .allocations
        .as_ref()
        .unwrap()[0];
    assert_eq!(allocation.type_, Some(DeviceType::Gpu));
    let entry = &allocation.entries.as_ref().unwrap()[0];
    assert_eq!(entry.name.as_deref(), Some("trainer-0"));
    assert_eq!(entry.minors.as_deref(), Some(&[0][..]));

    let crd = crd_named("devices.scheduling.koordinator.sh");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&device)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &device);
}

#[test]
fn device_wire_shape_is_upstreams() {
    let device: Device = round_trip(&fixture("device-full.yaml"));
    let value = to_json(&device);
    assert_eq!(value["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
    assert_eq!(value["kind"], "Device");
    let gpu = &value["spec"]["devices"][0];
    assert_eq!(gpu["id"], "GPU-1a2b3c4d-0000-1111-2222-333344445555");
    assert_eq!(gpu["moduleID"], 2);
    assert_eq!(gpu["topology"]["socketID"], 0);
    assert_eq!(gpu["topology"]["pcieID"], "pci0000:3a");
    // `health` is always written, even when false (Go has no omitempty).
    assert_eq!(value["spec"]["devices"][1]["health"], false);
    assert_eq!(
        value["spec"]["devices"][2]["vfGroups"][0]["vfs"][0]["busID"],
        "0000:5e:00.2"
    );

    // A device without `health` decodes as unhealthy, as Go's zero value.
    let bare: Device = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "n"},
        "spec": {"devices": [{"type": "fpga", "minor": 3}]},
    }))
    .unwrap();
    let info = &bare.spec.devices.as_ref().unwrap()[0];
    assert!(!info.health);
    assert_eq!(info.type_, Some(DeviceType::Fpga));
    assert_eq!(bare.status, None);
    assert!(to_json(&bare).get("status").is_none());

    // A device type this version does not know is kept.
    let mut odd = value.clone();
    odd["spec"]["devices"][0]["type"] = json!("xpu");
    let odd: Device = serde_json::from_value(odd).unwrap();
    let kept = &odd.spec.devices.as_ref().unwrap()[0];
    assert_eq!(kept.type_, Some(DeviceType::Other("xpu".into())));
    assert_eq!(to_json(&odd)["spec"]["devices"][0]["type"], "xpu");
}

#[test]
fn device_without_spec_decodes() {
    // Upstream does not require `spec`; an object without one still reads.
    let device: Device = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "empty"},
    }))
    .unwrap();
    assert_eq!(device.spec.devices, None);
}

#[test]
fn device_crd_matches_upstream() {
    let crd = crd_named("devices.scheduling.koordinator.sh");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "devices.scheduling.koordinator.sh".into(),
            group: "scheduling.koordinator.sh".into(),
            kind: "Device".into(),
            plural: "devices".into(),
            singular: Some("device".into()),
            scope: "Cluster".into(),
            short_names: vec![],
            // A status field, but no status subresource.
            versions: vec![("v1alpha1".into(), true, true, false)],
            columns: vec![],
            annotations: vec![],
        }
    );
    assert_eq!(crd_facts(&Device::crd()), crd_facts(&crd));
    assert_eq!(Device::crd_name(), "devices.scheduling.koordinator.sh");
    assert_eq!(
        Device::api_version(&()),
        "scheduling.koordinator.sh/v1alpha1"
    );

    let schema = root_schema(&crd, "v1alpha1");
    assert!(
        schema.get("required").is_none(),
        "spec is optional upstream"
    );
    assert_eq!(
        schema_at(&schema, ".status.allocations[].entries[].minors")["type"],
        "array"
    );
    assert_eq!(
        schema_at(&schema, ".spec.devices[]")["required"],
        json!(["health"])
    );
    assert_eq!(
        schema_at(&schema, ".spec.devices[].health")["default"],
        false
    );
    assert_eq!(
        schema_at(&schema, ".spec.devices[].topology")["required"],
        json!(["nodeID", "pcieID", "socketID"])
    );
    assert_eq!(
        schema_at(&schema, ".spec.devices[].conditions[].status")["enum"],
        json!(["True", "False", "Unknown"])
    );
    assert!(schema_at(&schema, ".spec").get("default").is_none());
}

// ------------------------------------------------------------ PodMigrationJob

#[test]
fn pod_migration_job_full_manifest_decodes_every_field() {
    let job: PodMigrationJob = round_trip(&fixture("pod-migration-job-full.yaml"));
    let spec = &job.spec;
    assert_eq!(spec.paused, Some(false));
    assert_eq!(
        spec.ttl.unwrap().to_std(),
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(spec.mode, Some(PodMigrationJobMode::ReservationFirst));
    assert_eq!(spec.pod_ref.name.as_deref(), Some("web-7d9f-x2k4"));
    let options = spec.reservation_options.as_ref().unwrap();
    assert_eq!(
        options.reservation_ref.as_ref().unwrap().kind.as_deref(),
        Some("Reservation")
    );
    let template = options.template.as_ref().unwrap();
    assert_eq!(
        template.metadata.as_ref().unwrap().name.as_deref(),
        Some("migrate-web-7d9f-x2k4")
    );
    let reservation_spec = template.spec.as_ref().unwrap();
    assert_eq!(reservation_spec.owners.len(), 1);
    assert_eq!(
        reservation_spec.ttl.unwrap().to_std(),
        Some(std::time::Duration::from_secs(600))
    );
    assert!(options.preemption_options.is_some());
    let delete = spec.delete_options.as_ref().unwrap();
    assert_eq!(delete.grace_period_seconds, Some(30));
    assert_eq!(delete.dry_run.as_deref(), Some(&["All".to_owned()][..]));

    let status = job.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(PodMigrationJobPhase::Running));
    assert!(!job.is_finished());
    assert_eq!(status.status.as_deref(), Some("ReservationScheduled"));
    assert_eq!(
        status.reason,
        Some(PodMigrationJobReason::WaitForPodBindReservation)
    );
    let conditions = status.conditions.as_ref().unwrap();
    assert_eq!(
        conditions[0].type_,
        PodMigrationJobConditionType::ReservationCreated
    );
    // `lastProbeTime: null` (Go's zero time) reads as unset.
    assert_eq!(conditions[1].last_probe_time, None);
    assert!(conditions[1].last_transition_time.is_some());
    assert_eq!(
        conditions[1].reason,
        Some(PodMigrationJobReason::Other("Scheduled".into()))
    );
    assert_eq!(
        status.pod_ref.as_ref().unwrap().name.as_deref(),
        Some("web-7d9f-q8m1")
    );
    let preempted = &status.preempted_pods_reservations.as_ref().unwrap()[0];
    assert_eq!(preempted.phase.as_deref(), Some("Available"));
    assert_eq!(
        preempted.pods_ref.as_ref().unwrap()[0].name.as_deref(),
        Some("batch-2")
    );

    let crd = crd_named("podmigrationjobs.scheduling.koordinator.sh");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&job)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &job);
}

#[test]
fn pod_migration_job_phases_and_modes() {
    let mut value = to_json(&round_trip::<PodMigrationJob>(&fixture(
        "pod-migration-job-full.yaml",
    )));
    value["spec"]["mode"] = json!("EvictDirectly");
    value["status"]["phase"] = json!("Aborted");
    let job: PodMigrationJob = serde_json::from_value(value).unwrap();
    assert_eq!(job.spec.mode, Some(PodMigrationJobMode::EvictDirectly));
    assert_eq!(job.phase(), PodMigrationJobPhase::Aborted);
    assert!(job.is_finished());
    assert_eq!(
        PodMigrationJobConditionType::PodBoundReservation.as_str(),
        "PodBoundReservation"
    );
}

#[test]
fn pod_migration_job_crd_matches_upstream() {
    let crd = crd_named("podmigrationjobs.scheduling.koordinator.sh");
    let v = "v1alpha1";
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "podmigrationjobs.scheduling.koordinator.sh".into(),
            group: "scheduling.koordinator.sh".into(),
            kind: "PodMigrationJob".into(),
            plural: "podmigrationjobs".into(),
            singular: Some("podmigrationjob".into()),
            scope: "Cluster".into(),
            short_names: strings(&["pmj"]),
            versions: vec![(v.into(), true, true, true)],
            columns: vec![
                column(
                    v,
                    "Phase",
                    "string",
                    ".status.phase",
                    Some("The phase of PodMigrationJob")
                ),
                column(
                    v,
                    "Status",
                    "string",
                    ".status.status",
                    Some("The status of PodMigrationJob")
                ),
                column(v, "Age", "date", ".metadata.creationTimestamp", None),
                column(v, "Node", "string", ".status.nodeName", None),
                column(
                    v,
                    "Reservation",
                    "string",
                    ".spec.reservationOptions.reservationRef.name",
                    None
                ),
                column(v, "PodNamespace", "string", ".spec.podRef.namespace", None),
                column(v, "Pod", "string", ".spec.podRef.name", None),
                column(v, "NewPod", "string", ".status.podRef.name", None),
                column(v, "TTL", "string", ".spec.ttl", None),
            ],
            annotations: vec![],
        }
    );
    assert_eq!(PodMigrationJob::shortnames(), ["pmj"]);
    let schema = root_schema(&crd, v);
    assert_eq!(schema_at(&schema, ".spec")["required"], json!(["podRef"]));
    assert_eq!(
        schema_at(&schema, ".spec.reservationOptions.template")["x-kubernetes-preserve-unknown-fields"],
        true
    );
    // The condition timestamps are the only nullable fields upstream.
    assert_eq!(
        schema_at(&schema, ".status.conditions[].lastProbeTime")["nullable"],
        true
    );
    assert_eq!(
        schema_at(&schema, ".status.conditions[].lastTransitionTime")["nullable"],
        true
    );
    assert!(
        schema_at(&schema, ".status.conditions[].message")
            .get("nullable")
            .is_none()
    );
    assert_eq!(
        schema_at(&schema, ".status.conditions[]")["required"],
        json!(["status", "type"])
    );
}

// --------------------------------------------------------------- ElasticQuota

#[test]
fn elastic_quota_full_manifest_decodes_every_field() {
    let quota: ElasticQuota = round_trip(&fixture("elastic-quota-full.yaml"));
    assert_eq!(quota.metadata.namespace.as_deref(), Some("ml"));
    let min = quota.spec.min.as_ref().unwrap();
    assert_eq!(min["cpu"], quantity("10"));
    assert_eq!(min["memory"], quantity("20Gi"));
    let max = quota.spec.max.as_ref().unwrap();
    assert_eq!(max["nvidia.com/gpu"], quantity("4"));
    assert_eq!(
        quota.status.as_ref().unwrap().used.as_ref().unwrap()["cpu"],
        quantity("7500m")
    );
    assert_eq!(
        quota.metadata.labels.as_ref().unwrap()["quota.scheduling.koordinator.sh/parent"],
        "org-research"
    );

    let crd = crd_named("elasticquotas.scheduling.sigs.k8s.io");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&quota)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &quota);

    let value = to_json(&quota);
    assert_eq!(value["apiVersion"], "scheduling.sigs.k8s.io/v1alpha1");
    assert_eq!(value["kind"], "ElasticQuota");
}

#[test]
fn elastic_quota_crd_matches_upstream() {
    let crd = crd_named("elasticquotas.scheduling.sigs.k8s.io");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "elasticquotas.scheduling.sigs.k8s.io".into(),
            group: "scheduling.sigs.k8s.io".into(),
            kind: "ElasticQuota".into(),
            plural: "elasticquotas".into(),
            singular: Some("elasticquota".into()),
            scope: "Namespaced".into(),
            short_names: vec![],
            versions: vec![("v1alpha1".into(), true, true, false)],
            columns: vec![],
            annotations: vec![(
                "api-approved.kubernetes.io".into(),
                "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52".into()
            )],
        }
    );
    assert_eq!(crd_facts(&ElasticQuota::crd()), crd_facts(&crd));
}

// ------------------------------------------------------------------- PodGroup

#[test]
fn pod_group_full_manifest_decodes_every_field() {
    let group: PodGroup = round_trip(&fixture("pod-group-full.yaml"));
    let spec = &group.spec;
    assert_eq!(spec.min_member, Some(4));
    assert_eq!(spec.min_resources.as_ref().unwrap()["cpu"], quantity("16"));
    assert_eq!(spec.schedule_timeout_seconds, Some(600));
    let status = group.status.as_ref().unwrap();
    assert_eq!(group.phase(), Some(&PodGroupPhase::Scheduling));
    assert_eq!(
        status.occupied_by.as_deref(),
        Some("5c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6")
    );
    assert_eq!(
        (
            status.scheduled,
            status.running,
            status.succeeded,
            status.failed
        ),
        (Some(2), Some(1), Some(0), Some(0))
    );
    assert_eq!(
        status.schedule_start_time.as_ref().unwrap().0.to_string(),
        "2024-05-01T10:00:00Z"
    );

    let crd = crd_named("podgroups.scheduling.sigs.k8s.io");
    let unset = unset_schema_paths(&root_schema(&crd, "v1alpha1"), &[to_json(&group)]);
    assert!(unset.is_empty(), "fixture never sets: {unset:?}");
    assert_tolerates_unknown_fields(&crd, "v1alpha1", &group);
}

#[test]
fn pod_group_phases_round_trip() {
    for phase in PodGroupPhase::KNOWN_VALUES {
        let decoded: PodGroupPhase = serde_json::from_value(json!(phase)).unwrap();
        assert!(!matches!(decoded, PodGroupPhase::Other(_)), "{phase}");
        assert_eq!(to_json(&decoded), json!(phase));
    }
    assert_eq!(
        PodGroupPhase::KNOWN_VALUES,
        [
            "Pending",
            "Running",
            "PreScheduling",
            "Scheduling",
            "Scheduled",
            "Unknown",
            "Finished",
            "Failed"
        ]
    );
}

#[test]
fn pod_group_crd_matches_upstream() {
    let crd = crd_named("podgroups.scheduling.sigs.k8s.io");
    assert_eq!(
        crd_facts(&crd),
        CrdFacts {
            name: "podgroups.scheduling.sigs.k8s.io".into(),
            group: "scheduling.sigs.k8s.io".into(),
            kind: "PodGroup".into(),
            plural: "podgroups".into(),
            singular: Some("podgroup".into()),
            scope: "Namespaced".into(),
            short_names: vec![],
            versions: vec![("v1alpha1".into(), true, true, false)],
            columns: vec![],
            annotations: vec![(
                "api-approved.kubernetes.io".into(),
                "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52".into()
            )],
        }
    );
    assert_eq!(crd_facts(&PodGroup::crd()), crd_facts(&crd));
    let schema = root_schema(&crd, "v1alpha1");
    assert_eq!(
        schema_at(&schema, ".status.scheduleStartTime")["format"],
        "date-time"
    );
    assert_eq!(schema_at(&schema, ".spec.minMember")["format"], "int32");
}

// ---------------------------------------------------------------- wire enums

#[test]
fn closed_enums_list_exactly_upstreams_values() {
    assert_eq!(
        ReservationAllocatePolicy::KNOWN_VALUES,
        ["Aligned", "Restricted"]
    );
    assert_eq!(PreAllocationMode::KNOWN_VALUES, ["Default", "Cluster"]);
    assert_eq!(
        ReservationPhase::KNOWN_VALUES,
        ["Pending", "Available", "Succeeded", "Waiting", "Failed"]
    );
    assert_eq!(DeviceType::KNOWN_VALUES, ["gpu", "fpga", "rdma"]);
    assert_eq!(
        PodMigrationJobPhase::KNOWN_VALUES,
        ["Pending", "Running", "Succeeded", "Failed", "Aborted"]
    );
    assert_eq!(
        PodMigrationJobMode::KNOWN_VALUES,
        ["ReservationFirst", "EvictDirectly"]
    );
    assert_eq!(
        "Restricted".parse::<ReservationAllocatePolicy>().unwrap(),
        ReservationAllocatePolicy::Restricted
    );
    let error = "restricted"
        .parse::<ReservationAllocatePolicy>()
        .unwrap_err();
    assert_eq!(error.value, "restricted");
    assert_eq!(ReservationPhase::from("Failed"), ReservationPhase::Failed);
    assert_eq!(ReservationPhase::from("failed").as_str(), "failed");
    assert_eq!(ReservationPhase::Succeeded.to_string(), "Succeeded");
}
