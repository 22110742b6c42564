//! Check mode (filter, score) against allocate mode (reserve) on generated
//! nodes: every case must get the same answer from both, so filter never
//! admits a node where reserve then fails, nor refuses one where it would
//! succeed. Deterministic seed, bounded case count.

#![allow(clippy::unwrap_used)]

use apis::extension::numa_aware::{
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY, ANNOTATION_NUMA_TOPOLOGY_SPEC,
    LABEL_NODE_CPU_BIND_POLICY, LABEL_NODE_NUMA_ALLOCATE_STRATEGY, LABEL_NUMA_TOPOLOGY_POLICY,
};
use serde_json::{Value, json};

use super::*;
use crate::cache::{Change, Object};
use crate::testutil::{self, Lcg, PodSpec, t0};

/// A random subset of `cpus`, each kept with probability 1/`one_in`.
fn subset(rng: &mut Lcg, cpus: &[i32], one_in: u64) -> BTreeSet<i32> {
    cpus.iter()
        .copied()
        .filter(|_| rng.chance(one_in))
        .collect()
}

fn cpu_list(cpus: &BTreeSet<i32>) -> String {
    format_cpuset(cpus)
}

/// A generated node: its CPU topology entries and NUMA node ids.
struct Shape {
    detail: Vec<Value>,
    cpus: Vec<i32>,
    numa_nodes: Vec<i32>,
}

/// Sockets × NUMA nodes × cores × threads, ids core-major or thread-major,
/// sometimes irregular (a core short of a thread, or a core whose threads
/// sit on two NUMA nodes).
fn shape(rng: &mut Lcg) -> Shape {
    let sockets = 1 + rng.below(2) as i32;
    let numa_per_socket = 1 + rng.below(2) as i32;
    let cores_per_numa = 1 + rng.below(3) as i32;
    let threads = 1 + rng.below(2) as i32;
    let total_cores = sockets * numa_per_socket * cores_per_numa;
    let thread_major = rng.chance(2);
    let mut entries: Vec<(i32, i32, i32, i32)> = Vec::new();
    for core in 0..total_cores {
        let numa = core / cores_per_numa;
        let socket = numa / numa_per_socket;
        for thread in 0..threads {
            let id = if thread_major {
                thread * total_cores + core
            } else {
                core * threads + thread
            };
            entries.push((id, core, socket, numa));
        }
    }
    match rng.below(8) {
        0 if entries.len() > 1 => {
            entries.pop();
        }
        1 if threads > 1 && numa_per_socket > 1 => {
            // The last thread of core 0 moves to NUMA node 1 (same socket).
            if let Some(entry) = entries.iter_mut().filter(|e| e.1 == 0).max_by_key(|e| e.0) {
                entry.3 = 1;
            }
        }
        _ => {}
    }
    let detail = entries
        .iter()
        .map(|(id, core, socket, numa)| {
            json!({"id": id, "core": core, "socket": socket, "node": numa})
        })
        .collect();
    let mut cpus: Vec<i32> = entries.iter().map(|e| e.0).collect();
    cpus.sort_unstable();
    let numa_nodes: BTreeSet<i32> = entries.iter().map(|e| e.3).collect();
    Shape {
        detail,
        cpus,
        numa_nodes: numa_nodes.into_iter().collect(),
    }
}

fn node_object(rng: &mut Lcg, shape: &Shape) -> Object {
    let mut labels = serde_json::Map::new();
    let mut annotations = serde_json::Map::new();
    if rng.chance(3) {
        let policy = rng.pick(&["FullPCPUsOnly", "SpreadByPCPUs", "None"]);
        labels.insert(LABEL_NODE_CPU_BIND_POLICY.into(), json!(policy));
    }
    if rng.chance(3) {
        let policy = rng.pick(&["SingleNUMANode", "Restricted", "BestEffort", "None"]);
        labels.insert(LABEL_NUMA_TOPOLOGY_POLICY.into(), json!(policy));
    }
    if rng.chance(3) {
        let strategy = rng.pick(&["LeastAllocated", "MostAllocated"]);
        labels.insert(LABEL_NODE_NUMA_ALLOCATE_STRATEGY.into(), json!(strategy));
    }
    if rng.chance(5) {
        let reserved = cpu_list(&subset(rng, &shape.cpus, 4));
        annotations.insert(
            apis::extension::node_reservation::ANNOTATION_NODE_RESERVATION.into(),
            json!(json!({"reservedCPUs": reserved}).to_string()),
        );
    }
    Object::Node(
        serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": labels, "annotations": annotations},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}
        }))
        .unwrap(),
    )
}

fn nrt_object(rng: &mut Lcg, shape: &Shape) -> Object {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        ANNOTATION_NODE_CPU_TOPOLOGY.into(),
        json!(json!({"detail": shape.detail}).to_string()),
    );
    if rng.chance(4) {
        let full = if rng.chance(2) { "true" } else { "false" };
        let reserved = cpu_list(&subset(rng, &shape.cpus, 5));
        annotations.insert(
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY.into(),
            json!(
                json!({"policy": "static", "options": {"full-pcpus-only": full}, "reservedCPUs": reserved})
                    .to_string()
            ),
        );
    }
    let policy = rng.pick(&["None", "SingleNUMANode", "Restricted", "BestEffort"]);
    let zones: Vec<Value> = if rng.chance(2) {
        shape
            .numa_nodes
            .iter()
            .map(|id| {
                let memory = format!("{}Gi", 2 + rng.below(8));
                let cpus = shape.cpus.len() / shape.numa_nodes.len();
                json!({
                    "name": format!("node-{id}"),
                    "type": "Node",
                    "resources": [
                        {"name": "cpu", "capacity": cpus.to_string(), "allocatable": cpus.to_string(), "available": cpus.to_string()},
                        {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory}
                    ]
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    Object::NodeResourceTopology(
        serde_json::from_value(json!({
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n", "annotations": annotations},
            "topologyPolicies": [policy],
            "zones": zones
        }))
        .unwrap(),
    )
}

/// A pod bound to the node holding a random cpuset (sometimes exclusive,
/// sometimes with NUMA amounts).
fn bound_pod(rng: &mut Lcg, shape: &Shape, index: usize) -> Object {
    let cpus = subset(rng, &shape.cpus, 3);
    let mut numa = Vec::new();
    if rng.chance(2) {
        let node = shape.numa_nodes[rng.below(shape.numa_nodes.len() as u64) as usize];
        numa.push(json!({"node": node, "resources": {"cpu": format!("{}", 1 + rng.below(3)), "memory": format!("{}Gi", 1 + rng.below(4))}}));
    }
    let status = json!({"cpuset": cpu_list(&cpus), "numaNodeResources": numa}).to_string();
    let exclusive = rng.pick(&["None", "PCPULevel", "NUMANodeLevel"]);
    let spec = json!({"preferredCPUExclusivePolicy": exclusive}).to_string();
    let name = format!("bound-{index}");
    testutil::pod(PodSpec {
        name: &name,
        node: Some("n"),
        requests: &[("cpu", "1")],
        annotations: &[
            (ANNOTATION_RESOURCE_STATUS, &status),
            (apis::extension::numa_aware::ANNOTATION_RESOURCE_SPEC, &spec),
        ],
        ..Default::default()
    })
}

fn pending_pod(rng: &mut Lcg, shape: &Shape) -> Object {
    // Mostly small requests (most fit), sometimes anything up to one more
    // than the node has.
    let most = if rng.chance(3) {
        shape.cpus.len() as u64 + 1
    } else {
        (shape.cpus.len() as u64 / 2).max(1)
    };
    let cpus = (1 + rng.below(most)).to_string();
    let memory = format!("{}Gi", rng.below(10));
    let mut spec = serde_json::Map::new();
    if rng.chance(2) {
        let policy = rng.pick(&["FullPCPUs", "SpreadByPCPUs", "Default"]);
        spec.insert("requiredCPUBindPolicy".into(), json!(policy));
    } else if rng.chance(2) {
        let policy = rng.pick(&["FullPCPUs", "SpreadByPCPUs"]);
        spec.insert("preferredCPUBindPolicy".into(), json!(policy));
    }
    if rng.chance(3) {
        let exclusive = rng.pick(&["PCPULevel", "NUMANodeLevel"]);
        spec.insert("preferredCPUExclusivePolicy".into(), json!(exclusive));
    }
    let spec = Value::Object(spec).to_string();
    let mut numa_spec = serde_json::Map::new();
    if rng.chance(3) {
        let policy = rng.pick(&["SingleNUMANode", "Restricted", "BestEffort"]);
        numa_spec.insert("numaTopologyPolicy".into(), json!(policy));
    }
    if rng.chance(4) {
        let exclusive = rng.pick(&["Required", "Preferred"]);
        numa_spec.insert("singleNUMANodeExclusive".into(), json!(exclusive));
    }
    let numa_spec = Value::Object(numa_spec).to_string();
    testutil::pod(PodSpec {
        name: "pending",
        requests: &[("cpu", &cpus), ("memory", &memory)],
        limits: &[("cpu", &cpus), ("memory", &memory)],
        labels: &[("koordinator.sh/qosClass", "LSR")],
        annotations: &[
            (apis::extension::numa_aware::ANNOTATION_RESOURCE_SPEC, &spec),
            (ANNOTATION_NUMA_TOPOLOGY_SPEC, &numa_spec),
        ],
        priority: Some(9000),
        ..Default::default()
    })
}

fn apply(cache: &mut ClusterCache, plugin: &mut NodeNUMAResource, object: Object) {
    let event = cache.apply(Change::Upsert(object));
    plugin.on_event(&event, cache);
}

/// How the cases came out, to show the generator reaches every path.
#[derive(Default, Debug)]
struct Tally {
    admitted: usize,
    refused: usize,
    with_numa_policy: usize,
    with_reservations: usize,
    holding_cpus: usize,
    exact_numa_nodes: usize,
}

#[test]
fn check_mode_agrees_with_allocation_on_generated_nodes() {
    let mut rng = Lcg(0x5eed_2026);
    let mut tally = Tally::default();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for case in 0..3000 {
        let shape = shape(&mut rng);
        let mut cache = ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        apply(&mut cache, &mut plugin, node_object(&mut rng, &shape));
        apply(&mut cache, &mut plugin, nrt_object(&mut rng, &shape));
        for index in 0..rng.below(4) as usize {
            apply(&mut cache, &mut plugin, bound_pod(&mut rng, &shape, index));
        }
        apply(&mut cache, &mut plugin, pending_pod(&mut rng, &shape));
        let pod = cache.pod("default/pending").unwrap().clone();
        if rng.chance(8) {
            // The pod already holds CPUs here (its own cpuset is not in
            // the way of its placement).
            tally.holding_cpus += 1;
            plugin.add_pod(
                &pod.key,
                "n",
                Allocation {
                    cpus: subset(&mut rng, &shape.cpus, 3).into_iter().collect(),
                    exclusive: None,
                    numa: NumaAmounts::new(),
                },
            );
        }
        let mut owned = Vec::new();
        let mut required = false;
        if rng.chance(3) {
            tally.with_reservations += 1;
            for r in 0..1 + rng.below(2) {
                let name = format!("r-{r}");
                let holder = Holder {
                    name: name.clone(),
                    node: "n".to_string(),
                    allocate_once: rng.chance(2),
                    restricted: rng.chance(2),
                    expires_at: None,
                };
                let cpus: CpuSet = subset(&mut rng, &shape.cpus, 2).into_iter().collect();
                if !cpus.is_empty() {
                    plugin.reserved.insert(name.clone(), (holder, cpus));
                }
                if rng.chance(2) {
                    owned.push(name);
                }
            }
            required = rng.chance(3);
        }
        let Ok(Some(request)) = plugin.request_of(&pod) else {
            *outcomes.entry("no request".into()).or_default() += 1;
            continue;
        };
        let node = cache.node("n").unwrap();
        let run = |mode| {
            plugin.choose_with_reservations(&pod, &request, node, (&owned, required), t0(), mode)
        };
        let (checked, allocated) = (run(Mode::Check), run(Mode::Allocate));
        let context = || {
            format!(
                "case {case}: topology {:?}, node {:?}, pod {:?}, owned {owned:?} required {required}",
                shape.detail,
                node.labels(),
                pod.annotations()
            )
        };
        match (&checked, &allocated) {
            (Ok(checked), Ok(allocated)) => {
                tally.admitted += 1;
                let (Some(checked), Some(allocated)) = (checked, allocated) else {
                    assert_eq!(checked.is_none(), allocated.is_none(), "{}", context());
                    continue;
                };
                if checked.affinity.is_some() {
                    tally.with_numa_policy += 1;
                }
                assert_eq!(checked.affinity, allocated.affinity, "{}", context());
                if !checked.cpu_numa_unknown {
                    tally.exact_numa_nodes += 1;
                    let nodes = |c: &Choice| c.numa.keys().copied().collect::<Vec<_>>();
                    assert_eq!(nodes(checked), nodes(allocated), "{}", context());
                }
                *outcomes.entry("admitted".into()).or_default() += 1;
            }
            (Err(checked), Err(allocated)) => {
                tally.refused += 1;
                assert_eq!(checked, allocated, "{}", context());
                *outcomes.entry(allocated.reason.to_string()).or_default() += 1;
            }
            _ => panic!(
                "check mode {checked:?} but allocation {allocated:?}; {}",
                context()
            ),
        }
    }
    // The generator must reach admissions, refusals and every special path.
    println!("{tally:?}\n{outcomes:#?}");
    assert!(tally.admitted > 300, "{tally:?}");
    assert!(tally.refused > 300, "{tally:?}");
    assert!(tally.with_numa_policy > 100, "{tally:?}");
    assert!(tally.with_reservations > 100, "{tally:?}");
    assert!(tally.holding_cpus > 50, "{tally:?}");
    assert!(outcomes.contains_key(ERR_NOT_ENOUGH_CPUS), "{outcomes:?}");
    assert!(outcomes.contains_key(ERR_SMT_ALIGNMENT), "{outcomes:?}");
}

/// The node's precomputed counts follow its allocations: after every
/// change they equal counts made from scratch.
#[test]
fn precomputed_free_counts_follow_allocations() {
    let mut rng = Lcg(7);
    for _ in 0..200 {
        let shape = shape(&mut rng);
        let mut cache = ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        apply(&mut cache, &mut plugin, node_object(&mut rng, &shape));
        apply(&mut cache, &mut plugin, nrt_object(&mut rng, &shape));
        let fresh = |plugin: &NodeNUMAResource| {
            let topology = plugin.topologies.get("n").unwrap();
            let free = plugin.free_cpus("n", topology, None);
            FreeCounts::of(topology, |cpu| free.contains(cpu))
        };
        for index in 0..4 {
            apply(&mut cache, &mut plugin, bound_pod(&mut rng, &shape, index));
            assert_eq!(plugin.free.get("n").unwrap().counts, fresh(&plugin));
        }
        let event = cache.apply(Change::Delete(Object::Pod(
            serde_json::from_value(
                json!({"metadata": {"namespace": "default", "name": "bound-1"}}),
            )
            .unwrap(),
        )));
        plugin.on_event(&event, &cache);
        assert_eq!(plugin.free.get("n").unwrap().counts, fresh(&plugin));
        // Nothing left once every CPU is taken.
        let all: CpuSet = shape.cpus.iter().copied().collect();
        plugin.add_pod(
            "default/all",
            "n",
            Allocation {
                cpus: all,
                exclusive: None,
                numa: NumaAmounts::new(),
            },
        );
        assert_eq!(plugin.free.get("n").unwrap().counts.total, [0, 0, 0]);
        plugin.remove_pod("default/all");
        assert_eq!(plugin.free.get("n").unwrap().counts, fresh(&plugin));
    }
}
