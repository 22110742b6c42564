//! Tests of the whole nodetopo stack: pools, readers, desired topology, reporter.

use std::collections::BTreeMap;
use std::path::PathBuf;

use apis::extension::{
    ANNOTATION_CPU_BASIC_INFO, CPUBasicInfo, CPUInfo, CPUSharedPool, NodeReservation, PodCPUAlloc,
    StringMap, set_cpu_basic_info,
};
use apis::topology::v1alpha1::{NodeResourceTopology, ResourceInfo, TopologyManagerPolicy};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::desired::json_equal;
use super::*;
use crate::statesinformer::cpumanager::{
    CPU_MANAGER_STATE_FILE, CpuManagerCheckpoint, read_cpu_manager_checkpoint,
};
use crate::system::SystemArgs;
use koord_common::units::CpuSet;
use koord_common::units::{CpuInfo, CpuTopology};

/// 2 sockets = 2 NUMA nodes, 2 cores each, 2 threads per core:
/// CPU n and n+4 are siblings (like Linux numbers them).
fn two_socket_smt() -> NodeHardware {
    let cpus = (0..8u32)
        .map(|cpu| {
            let thread_base = cpu % 4;
            CpuInfo {
                cpu,
                core: thread_base,
                socket: thread_base / 2,
                node: thread_base / 2,
            }
        })
        .collect();
    NodeHardware {
        cpus: CpuTopology { cpus },
        numa_memory_bytes: BTreeMap::from([(0, 8 << 30), (1, 8 << 30)]),
        ..NodeHardware::default()
    }
}

fn pod(name: &str, qos: &str, cpuset: Option<&str>, phase: &str) -> Pod {
    let mut annotations = BTreeMap::new();
    if let Some(cpuset) = cpuset {
        annotations.insert(
            "scheduling.koordinator.sh/resource-status".to_string(),
            format!(r#"{{"cpuset":"{cpuset}"}}"#),
        );
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name, "namespace": "default",
            "labels": {"koordinator.sh/qosClass": qos},
            "annotations": annotations,
        },
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn node(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
    let map = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    };
    Node {
        metadata: ObjectMeta {
            name: Some("node-a".to_string()),
            uid: Some("uid-1".to_string()),
            annotations: map(annotations),
            labels: map(labels),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn set(text: &str) -> CpuSet {
    text.parse().unwrap()
}

#[test]
fn share_pools_drop_lse_lsr_cpus_and_withheld_cpus() {
    let all = set("0-7");
    let pods = [
        pod("lse", "LSE", Some("0,4"), "Running"),
        pod("lsr", "LSR", Some("1,5"), "Running"),
        pod("ls", "LS", Some("2"), "Running"),
        pod("done", "LSR", Some("3"), "Succeeded"),
        pod("be", "BE", None, "Running"),
    ];
    let (pools, problems) = cpu_share_pools(&all, &pods, &set("7"));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(pools.ls, set("2-3,6"));
    // BE may use what LSR pods hold but not what LSE pods hold.
    assert_eq!(pools.be, set("1-3,5-6"));
}

#[test]
fn malformed_pod_status_is_reported_and_skipped() {
    let pods = [
        pod("bad", "LSR", Some("x-y"), "Running"),
        pod("good", "LSE", Some("0"), "Running"),
    ];
    let (pools, problems) = cpu_share_pools(&set("0-3"), &pods, &CpuSet::new());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("default/bad"), "{problems:?}");
    assert_eq!(pools.ls, set("1-3"));
}

#[test]
fn pools_split_per_numa_node_in_socket_order() {
    let hardware = two_socket_smt();
    let pools = pools_per_numa_node(&set("1-3,5-7"), &hardware.cpus);
    assert_eq!(
        pools,
        vec![
            CPUSharedPool {
                socket: 0,
                node: 0,
                cpuset: "1,5".to_string()
            },
            CPUSharedPool {
                socket: 1,
                node: 1,
                cpuset: "2-3,6-7".to_string()
            },
        ]
    );
}

#[test]
fn reserved_cpus_by_count_take_whole_cores_then_threads() {
    let hardware = two_socket_smt();
    // One whole core: CPU 0 and its sibling 4.
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 2), set("0,4"));
    // A whole socket (cores 0 and 1 of socket 0).
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 4), set("0-1,4-5"));
    // A whole socket, then a whole core of the other one.
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 6), set("0-2,4-6"));
    // Odd count: a core, then one thread.
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 3).len(), 3);
    assert!(take_cpus_by_topology(&hardware.cpus, 3).is_superset(&set("0,4")));
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 0), CpuSet::new());
    assert_eq!(take_cpus_by_topology(&hardware.cpus, 99), set("0-7"));
}

#[test]
fn node_reservation_explicit_cpus_win_and_amounts_round_up() {
    let hardware = two_socket_smt();
    let annotations: StringMap = [(
        "node.koordinator.sh/reservation".to_string(),
        r#"{"resources":{"cpu":"1500m"}}"#.to_string(),
    )]
    .into();
    let (reservation, cpus, problem) = node_reservation(&annotations, &hardware.cpus);
    assert_eq!(problem, None);
    assert_eq!(cpus, set("0,4"));
    assert_eq!(reservation.reserved_cpus, "0,4");
    let annotations: StringMap = [(
        "node.koordinator.sh/reservation".to_string(),
        r#"{"resources":{"cpu":"1"},"reservedCPUs":"3"}"#.to_string(),
    )]
    .into();
    let (_, cpus, _) = node_reservation(&annotations, &hardware.cpus);
    assert_eq!(cpus, set("3"));
    let broken: StringMap = [(
        "node.koordinator.sh/reservation".to_string(),
        "{".to_string(),
    )]
    .into();
    let (reservation, cpus, problem) = node_reservation(&broken, &hardware.cpus);
    assert!(problem.is_some());
    assert!(cpus.is_empty());
    assert_eq!(reservation, NodeReservation::default());
}

#[test]
fn desired_topology_reads_like_upstream_for_the_scheduler() {
    let hardware = two_socket_smt();
    let node = node(
        &[
            ("node.koordinator.sh/reservation", r#"{"reservedCPUs":"7"}"#),
            (
                "node.koordinator.sh/system-qos-resource",
                r#"{"cpuset":"3"}"#,
            ),
        ],
        &[("node.koordinator.sh/enable-numa-reservation", "false")],
    );
    let pods = [pod("lse", "LSE", Some("0,4"), "Running")];
    let (desired, problems) = build_desired_topology(&hardware, Some(&node), &pods).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let annotations = &desired.annotations;
    let topology = apis::extension::get_cpu_topology(annotations)
        .unwrap()
        .unwrap();
    assert_eq!(topology.detail.len(), 8);
    assert_eq!(
        topology.detail[5],
        CPUInfo {
            id: 5,
            core: 1,
            socket: 0,
            node: 0
        }
    );
    let ls = apis::extension::get_node_cpu_shared_pools(annotations)
        .unwrap()
        .unwrap();
    let ls_text: Vec<&str> = ls.iter().map(|p| p.cpuset.as_str()).collect();
    // 0,4 bound to LSE; 3 exclusive SYSTEM; 7 reserved.
    assert_eq!(ls_text, ["1,5", "2,6"]);
    let be = apis::extension::get_node_be_cpu_shared_pools(annotations)
        .unwrap()
        .unwrap();
    assert_eq!(be.len(), 2);
    assert_eq!(
        annotations["node.koordinator.sh/reservation"],
        r#"{"reservedCPUs":"7"}"#
    );
    assert!(json_equal(
        &annotations["node.koordinator.sh/system-qos-resource"],
        r#"{"cpuset":"3"}"#
    ));
    assert_eq!(
        annotations["kubelet.koordinator.sh/cpu-manager-policy"],
        "{}"
    );
    assert_eq!(annotations["node.koordinator.sh/pod-cpu-allocs"], "[]");
    assert_eq!(
        desired
            .labels
            .get("node.koordinator.sh/enable-numa-reservation"),
        Some(&"false".to_string())
    );
    assert_eq!(desired.topology_policies, [TopologyManagerPolicy::None]);
    let names: Vec<&str> = desired.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["node-0", "node-1"]);
    let resources = desired.zones[1].resources.as_ref().unwrap();
    let cpu = resources.iter().find(|r| r.name == "cpu").unwrap();
    assert_eq!(cpu.capacity, Quantity("4".to_string()));
    let memory = resources.iter().find(|r| r.name == "memory").unwrap();
    assert_eq!(memory.allocatable, Quantity((8u64 << 30).to_string()));
}

#[test]
fn numa_reservation_label_takes_node_reserved_evenly_from_zones() {
    let hardware = two_socket_smt();
    let mut node = node(
        &[],
        &[("node.koordinator.sh/enable-numa-reservation", "true")],
    );
    node.status = serde_json::from_value(serde_json::json!({
        "capacity": {"cpu": "8", "memory": "16Gi"},
        "allocatable": {"cpu": "7", "memory": "15Gi"},
    }))
    .unwrap();
    let zones = build_zones(&hardware, Some(&node));
    for zone in &zones {
        let resources = zone.resources.as_ref().unwrap();
        let cpu = resources.iter().find(|r| r.name == "cpu").unwrap();
        assert_eq!(cpu.capacity, Quantity("4".to_string()));
        assert_eq!(cpu.allocatable, Quantity("3500m".to_string()));
        let memory = resources.iter().find(|r| r.name == "memory").unwrap();
        assert_eq!(
            memory.allocatable,
            Quantity(((8u64 << 30) - (512u64 << 20)).to_string())
        );
    }
}

#[test]
fn unchanged_content_needs_no_write_and_changes_are_named() {
    let hardware = two_socket_smt();
    let node = node(&[], &[]);
    let (desired, _) = build_desired_topology(&hardware, Some(&node), &[]).unwrap();
    let mut existing = desired.new_object("node-a", Some(&node));
    assert_eq!(desired.change_reason(&existing), None);
    assert_eq!(
        existing.metadata.owner_references.as_ref().unwrap()[0].uid,
        "uid-1"
    );
    // Same JSON with other spacing, quantities in another spelling, and
    // foreign annotations and zone resources: still unchanged.
    let annotations = existing.metadata.annotations.as_mut().unwrap();
    let pools = annotations["node.koordinator.sh/cpu-shared-pools"].clone();
    let spaced =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&pools).unwrap())
            .unwrap();
    annotations.insert("node.koordinator.sh/cpu-shared-pools".to_string(), spaced);
    annotations.insert("other/key".to_string(), "x".to_string());
    let zone = &mut existing.zones[0];
    let resources = zone.resources.as_mut().unwrap();
    resources
        .iter_mut()
        .find(|r| r.name == "memory")
        .unwrap()
        .capacity = Quantity("8Gi".to_string());
    resources.push(ResourceInfo {
        name: "example.com/nic".to_string(),
        capacity: Quantity("2".to_string()),
        allocatable: Quantity("2".to_string()),
        available: Quantity("1".to_string()),
    });
    assert_eq!(desired.change_reason(&existing), None);

    // An LSR pod bound to CPUs 1,5 changes the pools.
    let pods = [pod("lsr", "LSR", Some("1,5"), "Running")];
    let (changed, _) = build_desired_topology(&hardware, Some(&node), &pods).unwrap();
    let reason = changed.change_reason(&existing).unwrap();
    assert!(reason.contains("cpu-shared-pools"), "{reason}");
    changed.apply_to(&mut existing);
    assert_eq!(changed.change_reason(&existing), None);
    // Merge kept what others wrote.
    assert_eq!(
        existing.metadata.annotations.as_ref().unwrap()["other/key"],
        "x"
    );
    assert!(
        existing.zones[0]
            .resources
            .as_ref()
            .unwrap()
            .iter()
            .any(|r| r.name == "example.com/nic")
    );
    let lost_zone = NodeResourceTopology {
        zones: existing.zones[..1].to_vec(),
        ..existing.clone()
    };
    assert!(changed.change_reason(&lost_zone).is_some());
}

#[test]
fn kubelet_static_pins_are_reported_and_leave_the_pools() {
    let checkpoint: CpuManagerCheckpoint = serde_json::from_str(
        r#"{"policyName":"static","defaultCpuSet":"0,3-5","entries":{
            "u-guaranteed":{"a":"2","b":"6"},
            "u-lsr":{"main":"1"},
            "u-ls":{"main":"3"},
            "u-gone":{"main":"7"},
            "u-empty":{"main":""}
        },"checksum":12345}"#,
    )
    .unwrap();
    let mut guaranteed: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "g", "namespace": "ns", "uid": "u-guaranteed"}
    }))
    .unwrap();
    guaranteed.status = None;
    let mut lsr = pod("lsr", "LSR", Some("1"), "Running");
    lsr.metadata.uid = Some("u-lsr".to_string());
    let mut ls = pod("ls", "LS", None, "Running");
    ls.metadata.uid = Some("u-ls".to_string());
    let pods = [guaranteed, lsr, ls];
    let hardware = NodeHardware {
        kubelet_cpu_manager: Some(checkpoint.clone()),
        ..two_socket_smt()
    };
    let (desired, problems) = build_desired_topology(&hardware, None, &pods).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let allocs = apis::extension::get_pod_cpu_allocs(&desired.annotations)
        .unwrap()
        .unwrap();
    assert_eq!(
        allocs,
        vec![
            PodCPUAlloc {
                uid: "u-gone".to_string(),
                cpuset: "7".to_string(),
                managed_by_kubelet: true,
                ..PodCPUAlloc::default()
            },
            PodCPUAlloc {
                namespace: "ns".to_string(),
                name: "g".to_string(),
                uid: "u-guaranteed".to_string(),
                cpuset: "2,6".to_string(),
                managed_by_kubelet: true,
            },
        ]
    );
    // LSR CPU 1 and the kubelet's 2, 6, 7 are out of the LS pool.
    assert_eq!(desired.pools.ls, set("0,3-5"));
    assert_eq!(desired.pools.be, set("0-1,3-5"));
    assert_eq!(
        desired.annotations["kubelet.koordinator.sh/cpu-manager-policy"],
        r#"{"policy":"static"}"#
    );

    // The none policy pins nothing, whatever its checkpoint says.
    let none = NodeHardware {
        kubelet_cpu_manager: Some(CpuManagerCheckpoint {
            policy_name: "none".to_string(),
            ..checkpoint
        }),
        ..two_socket_smt()
    };
    let (desired, _) = build_desired_topology(&none, None, &pods).unwrap();
    assert_eq!(
        desired.annotations["node.koordinator.sh/pod-cpu-allocs"],
        "[]"
    );
    assert_eq!(
        desired.annotations["kubelet.koordinator.sh/cpu-manager-policy"],
        r#"{"policy":"none"}"#
    );
    assert_eq!(desired.pools.ls, set("0,2-7"));
}

#[test]
fn kubelet_checkpoint_absent_empty_or_malformed() {
    let dir = koord_common::testing::TempDir::new("nodetopo-kubelet").unwrap();
    assert_eq!(read_cpu_manager_checkpoint(dir.path()).unwrap(), None);
    let path = dir.path().join(CPU_MANAGER_STATE_FILE);
    std::fs::write(&path, "\n").unwrap();
    assert_eq!(read_cpu_manager_checkpoint(dir.path()).unwrap(), None);
    std::fs::write(&path, r#"{"policyName":"none","entries":null}"#).unwrap();
    assert_eq!(
        read_cpu_manager_checkpoint(dir.path()).unwrap(),
        Some(CpuManagerCheckpoint {
            policy_name: "none".to_string(),
            ..CpuManagerCheckpoint::default()
        })
    );
    std::fs::write(&path, "{").unwrap();
    let err = read_cpu_manager_checkpoint(dir.path()).unwrap_err();
    assert!(err.to_string().contains("cpu_manager_state"), "{err}");
}

#[test]
fn report_gate_defaults_on() {
    assert!(report_gate(""));
    assert!(report_gate("CPUSetAllocator=false"));
    assert!(!report_gate("NodeTopologyReport=false,CPUBurst=true"));
}

#[test]
fn malformed_node_annotations_do_not_stop_the_report() {
    let hardware = two_socket_smt();
    let node = node(
        &[
            ("node.koordinator.sh/reservation", "{"),
            ("node.koordinator.sh/system-qos-resource", "["),
        ],
        &[],
    );
    let (desired, problems) = build_desired_topology(&hardware, Some(&node), &[]).unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(desired.pools.ls, set("0-7"));
}

/// A generated host: `proc/cpuinfo`, `sys/...` and `sys/fs/resctrl`
/// below one temporary directory, each written only when given.
struct FakeHost {
    dir: koord_common::testing::TempDir,
}

impl FakeHost {
    fn new(cpuinfo: Option<&str>, no_turbo: Option<&str>, cbm_mask: Option<&str>) -> Self {
        let dir = koord_common::testing::TempDir::new("nodetopo-basic-info").unwrap();
        let system = SystemArgs::under(dir.path());
        let write = |path: PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        if let Some(text) = cpuinfo {
            write(system.proc_root_dir.join("cpuinfo"), text);
        }
        if let Some(text) = no_turbo {
            write(system.sys_root_dir.join(INTEL_PSTATE_NO_TURBO), text);
        }
        if let Some(text) = cbm_mask {
            write(system.resctrl_root().join(RESCTRL_L3_CBM_MASK), text);
        }
        Self { dir }
    }

    fn basic_info(&self, topology: &CpuTopology) -> CPUBasicInfo {
        let system = SystemArgs::under(self.dir.path());
        read_cpu_basic_info(
            &system.proc_root_dir,
            &system.sys_root_dir,
            &system.resctrl_root(),
            topology,
        )
    }
}

fn cpuinfo_block(processor: u32, vendor: &str, model: &str) -> String {
    format!(
        "processor\t: {processor}\nvendor_id\t: {vendor}\ncpu family\t: 6\n\
         model\t\t: 106\nmodel name\t: {model}\nflags\t\t: fpu cat_l3\n\n"
    )
}

/// One CPU per core: no SMT.
fn no_smt(count: u32) -> CpuTopology {
    CpuTopology {
        cpus: (0..count)
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu,
                socket: 0,
                node: 0,
            })
            .collect(),
    }
}

#[test]
fn basic_info_of_an_intel_node_with_turbo_and_cat() {
    let model = "Intel(R) Xeon(R) Platinum 8369B CPU @ 2.90GHz";
    let cpuinfo =
        cpuinfo_block(0, "GenuineIntel", model) + &cpuinfo_block(1, "GenuineIntel", model);
    let host = FakeHost::new(Some(&cpuinfo), Some("0\n"), Some("7ff\n"));
    let info = host.basic_info(&two_socket_smt().cpus);
    assert_eq!(
        info,
        CPUBasicInfo {
            cpu_model: model.to_string(),
            hyper_thread_enabled: true,
            turbo_enabled: true,
            cat_l3_cbm_mask: "7ff".to_string(),
            vendor_id: "GenuineIntel".to_string(),
        }
    );
    assert_eq!(
        info.key(),
        format!("{model}_true_true"),
        "the ratio model's lookup key"
    );
    // Turbo switched off by intel_pstate.
    let host = FakeHost::new(Some(&cpuinfo), Some("1\n"), None);
    assert!(!host.basic_info(&two_socket_smt().cpus).turbo_enabled);
}

#[test]
fn basic_info_of_an_amd_node_without_intel_pstate_or_resctrl() {
    let model = "AMD EPYC 7763 64-Core Processor";
    let host = FakeHost::new(Some(&cpuinfo_block(0, "AuthenticAMD", model)), None, None);
    let info = host.basic_info(&no_smt(4));
    assert_eq!(
        info,
        CPUBasicInfo {
            cpu_model: model.to_string(),
            vendor_id: "AuthenticAMD".to_string(),
            ..CPUBasicInfo::default()
        }
    );
    // Empty parts are left out of the annotation, as upstream's omitempty.
    let mut annotations = StringMap::new();
    set_cpu_basic_info(&mut annotations, &info).unwrap();
    let value: serde_json::Value =
        serde_json::from_str(&annotations[ANNOTATION_CPU_BASIC_INFO]).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"cpuModel": model, "vendorID": "AuthenticAMD"})
    );
}

#[test]
fn basic_info_leaves_out_what_is_missing_or_malformed() {
    // No cpuinfo file at all.
    let host = FakeHost::new(None, Some("0"), None);
    let info = host.basic_info(&no_smt(2));
    assert_eq!(info.cpu_model, "");
    assert_eq!(info.vendor_id, "");
    assert!(info.turbo_enabled);

    // An arm64 cpuinfo has neither field; control characters and
    // whitespace-only values are rejected; a malformed no_turbo and
    // mask count as absent.
    let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\n";
    let host = FakeHost::new(Some(arm), Some("yes"), Some("fff-\n"));
    assert_eq!(host.basic_info(&no_smt(2)), CPUBasicInfo::default());

    let broken = "vendor_id\t:   \nmodel name\t: bad\u{7}name\n";
    let host = FakeHost::new(Some(broken), None, Some(""));
    assert_eq!(host.basic_info(&no_smt(2)), CPUBasicInfo::default());
}

#[test]
fn cpu_identity_comes_from_the_first_processor_block() {
    let text = "\n".to_string()
        + &cpuinfo_block(0, "GenuineIntel", "First")
        + &cpuinfo_block(1, "AuthenticAMD", "Second");
    let identity = parse_cpu_identity(text.lines());
    assert_eq!(identity.model.as_deref(), Some("First"));
    assert_eq!(identity.vendor.as_deref(), Some("GenuineIntel"));
    // A field only in a later block is not searched for.
    let text = "processor\t: 0\nvendor_id\t: GenuineIntel\n\nmodel name\t: Late\n";
    let identity = parse_cpu_identity(text.lines());
    assert_eq!(identity.model, None);
    assert_eq!(identity.vendor.as_deref(), Some("GenuineIntel"));
    // Older arm kernels spell it "Model Name"; a colon in the value stays.
    let identity = parse_cpu_identity(["Model Name : ARMv8 rev 1 (v8l): x"]);
    assert_eq!(identity.model.as_deref(), Some("ARMv8 rev 1 (v8l): x"));
}

#[test]
fn smt_is_more_than_one_cpu_on_a_core_of_a_socket() {
    assert!(hyper_threading_enabled(&two_socket_smt().cpus));
    assert!(!hyper_threading_enabled(&no_smt(4)));
    assert!(!hyper_threading_enabled(&CpuTopology::default()));
    // Core ids repeat across sockets without being siblings.
    let per_socket = CpuTopology {
        cpus: (0..4u32)
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu % 2,
                socket: cpu / 2,
                node: cpu / 2,
            })
            .collect(),
    };
    assert!(!hyper_threading_enabled(&per_socket));
}

#[test]
fn basic_info_is_a_managed_annotation() {
    let info = CPUBasicInfo {
        cpu_model: "Model A".to_string(),
        hyper_thread_enabled: true,
        vendor_id: "GenuineIntel".to_string(),
        ..CPUBasicInfo::default()
    };
    let hardware = NodeHardware {
        cpu_basic_info: info.clone(),
        ..two_socket_smt()
    };
    let (desired, _) = build_desired_topology(&hardware, None, &[]).unwrap();
    assert_eq!(
        apis::extension::get_cpu_basic_info(&desired.annotations)
            .unwrap()
            .unwrap(),
        info
    );
    let mut existing = desired.new_object("node-a", None);
    assert_eq!(desired.change_reason(&existing), None);

    // Turbo switched on: the report changes.
    let turbo = NodeHardware {
        cpu_basic_info: CPUBasicInfo {
            turbo_enabled: true,
            ..info
        },
        ..two_socket_smt()
    };
    let (changed, _) = build_desired_topology(&turbo, None, &[]).unwrap();
    let reason = changed.change_reason(&existing).unwrap();
    assert!(reason.contains(ANNOTATION_CPU_BASIC_INFO), "{reason}");
    changed.apply_to(&mut existing);
    assert_eq!(changed.change_reason(&existing), None);

    // Nothing known: `{}`, still written (upstream always writes it).
    let (empty, _) = build_desired_topology(&two_socket_smt(), None, &[]).unwrap();
    assert_eq!(empty.annotations[ANNOTATION_CPU_BASIC_INFO], "{}");
}

#[test]
fn read_node_facts_takes_basic_info_from_the_configured_roots() {
    let host = FakeHost::new(
        Some(&cpuinfo_block(0, "GenuineIntel", "Model B")),
        Some("0"),
        Some("fffff"),
    );
    let system = SystemArgs::under(host.dir.path());
    let kubelet = koord_common::testing::TempDir::new("nodetopo-facts-kubelet").unwrap();
    let facts = read_node_facts(&system, kubelet.path(), Some(no_smt(2))).unwrap();
    assert_eq!(
        facts.cpu_basic_info,
        CPUBasicInfo {
            cpu_model: "Model B".to_string(),
            turbo_enabled: true,
            cat_l3_cbm_mask: "fffff".to_string(),
            vendor_id: "GenuineIntel".to_string(),
            ..CPUBasicInfo::default()
        }
    );
    assert!(facts.problems.is_empty(), "{:?}", facts.problems);
}
