#![allow(clippy::unwrap_used)]
//! The Device reporter against a fake API server that stores the object:
//! nothing is written while the node has no devices, the Device is created
//! when a GPU appears, left alone while unchanged, replaced on a health
//! change and emptied when the GPU is unplugged. The GPU comes from a fake
//! NVML source, its topology from a generated sysfs tree. XPU device-info
//! files: the partition table and policy reach the Device, and a garbage
//! file leaves the Device as it was.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use koord_common::testing::{FakeApiServer, RecordedRequest, TempDir};
use koordlet::statesinformer::device::xpu::XpuDeviceInfoSource;
use koordlet::statesinformer::device::{
    DeviceHealth, DeviceReporter, DeviceSnapshot, DeviceSource, DiscoveryError, GpuInfo, PciSysfs,
    SyncOutcome,
};
use koordlet::statesinformer::{RequiredSyncs, StatesInformer};
use serde_json::{Value, json};

const DEVICES_PATH: &str = "/apis/scheduling.koordinator.sh/v1alpha1/devices";
const NODE_DEVICE_PATH: &str = "/apis/scheduling.koordinator.sh/v1alpha1/devices/node-a";

struct FakeNvml(Mutex<Vec<GpuInfo>>);

impl DeviceSource for FakeNvml {
    fn name(&self) -> &'static str {
        "fake-nvml"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        Ok(DeviceSnapshot {
            gpus: self.0.lock().unwrap().clone(),
            gpu_driver_version: Some("550.54.15".to_string()),
            ..DeviceSnapshot::default()
        })
    }
}

fn gpu(health: DeviceHealth) -> GpuInfo {
    GpuInfo {
        uuid: "GPU-1234".to_string(),
        minor: 0,
        memory_total: koord_common::units::Bytes(24 << 30),
        bus_id: "0000:3b:00.0".to_string(),
        model: "NVIDIA L4".to_string(),
        health,
        topology: None,
    }
}

/// One GPU function below root complex pci0000:3a on NUMA node 1.
fn sys_tree() -> TempDir {
    let sys = TempDir::new("device-report-sys").unwrap();
    let dir = sys
        .path()
        .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("numa_node"), "1\n").unwrap();
    let links = sys.path().join("bus/pci/devices");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&dir, links.join("0000:3b:00.0")).unwrap();
    sys
}

/// Serves the Device as an object store: GET, POST (create) and PUT
/// (replace), each write bumping the resourceVersion.
fn object_store(api: &FakeApiServer) -> Arc<Mutex<Option<Value>>> {
    let stored: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let store = Arc::clone(&stored);
    api.respond_with(move |request: &RecordedRequest| {
        let mut stored = store.lock().unwrap();
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "devices \"node-a\" not found"});
        match (request.method.as_str(), request.path()) {
            ("GET", NODE_DEVICE_PATH) => Some(match stored.as_ref() {
                Some(object) => (200, object.to_string()),
                None => (404, not_found.to_string()),
            }),
            ("POST", DEVICES_PATH) => {
                let mut object: Value = serde_json::from_str(&request.body).unwrap();
                object["metadata"]["resourceVersion"] = json!("1");
                *stored = Some(object.clone());
                Some((201, object.to_string()))
            }
            ("PUT", NODE_DEVICE_PATH) => {
                let mut object: Value = serde_json::from_str(&request.body).unwrap();
                let current = stored.as_ref().unwrap()["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
                assert_eq!(
                    object["metadata"]["resourceVersion"],
                    json!(current.to_string()),
                    "a replace carries the version it read"
                );
                object["metadata"]["resourceVersion"] = json!((current + 1).to_string());
                *stored = Some(object.clone());
                Some((200, object.to_string()))
            }
            _ => None,
        }
    });
    stored
}

fn count(api: &FakeApiServer, method: &str) -> usize {
    api.recorded()
        .iter()
        .filter(|request| request.method == method)
        .count()
}

#[tokio::test]
async fn creates_the_device_when_a_gpu_appears_then_updates_it_on_changes() {
    let sys = sys_tree();
    let api = FakeApiServer::start().unwrap();
    let stored = object_store(&api);
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let states = StatesInformer::new("node-a", RequiredSyncs::CLUSTER);
    let nvml = Arc::new(FakeNvml(Mutex::new(vec![])));
    let sources: Vec<Arc<dyn DeviceSource>> = vec![nvml.clone()];
    let mut reporter =
        DeviceReporter::new(states.clone(), sources, PciSysfs::new(sys.path()), client)
            .with_resync(std::time::Duration::ZERO);

    // The Node's UID goes into the owner reference: wait for it.
    assert_eq!(reporter.report_once().await.unwrap(), None);
    assert!(api.recorded().is_empty(), "{:?}", api.requests());
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "node-a", "uid": "uid-7"}})).unwrap();
    states.set_node(Some(node));

    // No devices and no Device: nothing is written.
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::NoDevices)
    );
    assert_eq!(count(&api, "POST") + count(&api, "PUT"), 0);

    // A GPU appears: created.
    *nvml.0.lock().unwrap() = vec![gpu(DeviceHealth::Healthy)];
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Created)
    );
    let object = stored.lock().unwrap().clone().unwrap();
    assert_eq!(object["kind"], "Device");
    assert_eq!(object["metadata"]["name"], "node-a");
    assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "uid-7");
    assert_eq!(
        object["metadata"]["labels"],
        json!({
            "node.koordinator.sh/gpu-driver-version": "550.54.15",
            "node.koordinator.sh/gpu-model": "L4",
            "node.koordinator.sh/gpu-vendor": "nvidia"
        })
    );
    assert_eq!(
        object["spec"]["devices"],
        json!([{
            "type": "gpu", "id": "GPU-1234", "minor": 0, "health": true,
            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "24Gi",
                          "koordinator.sh/gpu-memory-ratio": "100"},
            "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}
        }])
    );

    // Unchanged: read, not written.
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Unchanged)
    );
    assert_eq!(count(&api, "PUT"), 0);

    // The GPU turns unhealthy: replaced with the condition.
    *nvml.0.lock().unwrap() = vec![gpu(DeviceHealth::Unhealthy {
        code: "GpuLost".to_string(),
        message: "NVML cannot read the memory size: GPU is lost".to_string(),
    })];
    assert!(matches!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Updated(_))
    ));
    let object = stored.lock().unwrap().clone().unwrap();
    assert_eq!(object["metadata"]["resourceVersion"], "2");
    let device = &object["spec"]["devices"][0];
    assert_eq!(device["health"], false);
    assert_eq!(device["conditions"][0]["type"], "Healthy");
    assert_eq!(device["conditions"][0]["status"], "False");
    assert_eq!(device["conditions"][0]["reason"], "GpuLost");
    let stamped = device["conditions"][0]["lastTransitionTime"].clone();
    assert!(stamped.is_string(), "{device}");

    // Still unhealthy: the stored transition time is not rewritten.
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Unchanged)
    );
    assert_eq!(count(&api, "PUT"), 1);

    // Unplugged: the Device stays, emptied, and loses the GPU labels.
    nvml.0.lock().unwrap().clear();
    match reporter.report_once().await.unwrap() {
        Some(SyncOutcome::Updated(reason)) => {
            assert!(reason.contains("to []"), "{reason}")
        }
        other => panic!("expected an update, got {other:?}"),
    }
    let object = stored.lock().unwrap().clone().unwrap();
    assert_eq!(object["spec"]["devices"], json!([]));
    assert!(object["metadata"].get("labels").is_none(), "{object}");
    assert_eq!(count(&api, "POST"), 1);
}

/// Two NVLink-paired GPUs as a device daemon's file describes them.
fn nvlink_pair_file(linked: bool) -> String {
    let device = |minor: u32, peer: u32| {
        let mut topology = json!({"nodeID": "0", "pcieID": "pci0000:3a",
            "busID": format!("0000:3b:0{minor}.0")});
        if linked {
            topology["p2pLinks"] = json!([{"peerMinor": peer.to_string(), "type": "NVLink"}]);
        }
        json!({"vendor": "nvidia", "model": "H800", "uuid": format!("GPU-{minor}"),
               "minor": minor.to_string(),
               "resources": {"gpu-core": "100", "gpu-memory": "80Gi"},
               "topology": topology, "status": {"healthy": true}})
    };
    json!([device(0, 1), device(1, 0)]).to_string()
}

#[tokio::test]
async fn device_info_files_report_partitions_and_a_garbage_file_keeps_the_device() {
    let infos = TempDir::new("device-report-xpu").unwrap();
    let file = infos.path().join("nvidia.json");
    std::fs::write(&file, nvlink_pair_file(true)).unwrap();
    let api = FakeApiServer::start().unwrap();
    let stored = object_store(&api);
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let states = StatesInformer::new("node-a", RequiredSyncs::CLUSTER);
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "node-a", "uid": "uid-7"}})).unwrap();
    states.set_node(Some(node));
    let sources: Vec<Arc<dyn DeviceSource>> =
        vec![Arc::new(XpuDeviceInfoSource::new(infos.path()))];
    let mut reporter =
        DeviceReporter::new(states.clone(), sources, PciSysfs::new(infos.path()), client)
            .with_resync(std::time::Duration::ZERO);

    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Created)
    );
    let created = stored.lock().unwrap().clone().unwrap();
    assert_eq!(
        created["metadata"]["annotations"],
        json!({"scheduling.koordinator.sh/gpu-partitions":
            r#"{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":1}]}"#})
    );
    assert_eq!(
        created["metadata"]["labels"],
        json!({"node.koordinator.sh/gpu-model": "H800",
               "node.koordinator.sh/gpu-partition-policy": "Prefer",
               "node.koordinator.sh/gpu-vendor": "nvidia"})
    );
    assert_eq!(created["spec"]["devices"].as_array().unwrap().len(), 2);

    // The daemon leaves a half-written file: the round fails, naming the
    // file, and the Device is not touched.
    std::fs::write(&file, "[{\"vendor\": \"nvid").unwrap();
    let writes = count(&api, "POST") + count(&api, "PUT");
    let err = reporter.report_once().await.unwrap_err().to_string();
    assert!(
        err.contains("nvidia.json") && err.contains("left as last reported"),
        "{err}"
    );
    assert_eq!(count(&api, "POST") + count(&api, "PUT"), writes);
    assert_eq!(stored.lock().unwrap().clone().unwrap(), created);

    // Readable again, without links: the table and the policy go.
    std::fs::write(&file, nvlink_pair_file(false)).unwrap();
    let outcome = reporter.report_once().await.unwrap().unwrap();
    assert!(
        matches!(&outcome, SyncOutcome::Updated(reason) if reason.contains("gpu-partition-policy")),
        "{outcome:?}"
    );
    let updated = stored.lock().unwrap().clone().unwrap();
    assert_eq!(updated["metadata"].get("annotations"), None);
    assert_eq!(
        updated["metadata"]["labels"],
        json!({"node.koordinator.sh/gpu-model": "H800", "node.koordinator.sh/gpu-vendor": "nvidia"})
    );
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Unchanged)
    );
}
