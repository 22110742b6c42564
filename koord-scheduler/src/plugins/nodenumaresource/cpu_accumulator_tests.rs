//! Upstream's accumulator test tables (cpu_accumulator_test.go), as facts:
//! topology shape, CPUs already held, CPUs wanted, policy, expected result.

use super::*;
use crate::cpuset::CpuSet;

/// `sockets` × `nodes_per_socket` NUMA nodes × `cores_per_node` cores ×
/// `cpus_per_core` threads, ids counted in that order (core ids unique).
fn layout(
    sockets: i32,
    nodes_per_socket: i32,
    cores_per_node: i32,
    cpus_per_core: i32,
) -> CpuLayout {
    let mut cpus = BTreeMap::new();
    let (mut node, mut core, mut cpu) = (0, 0, 0);
    for socket in 0..sockets {
        for _ in 0..nodes_per_socket {
            for _ in 0..cores_per_node {
                for _ in 0..cpus_per_core {
                    cpus.insert(
                        cpu,
                        CPUInfo {
                            id: cpu,
                            core,
                            socket,
                            node,
                        },
                    );
                    cpu += 1;
                }
                core += 1;
            }
            node += 1;
        }
    }
    CpuLayout::new(&cpus)
}

fn set(list: &str) -> BTreeSet<i32> {
    CpuSet::parse_each_cpu_once(list)
        .unwrap_or_else(|e| panic!("{list}: {e}"))
        .to_btree()
}

fn all(layout: &CpuLayout) -> BTreeSet<i32> {
    layout.cpus.keys().copied().collect()
}

struct Case {
    name: &'static str,
    shape: (i32, i32, i32, i32),
    held: &'static str,
    needed: usize,
    want: Option<&'static str>,
}

const fn case(
    name: &'static str,
    shape: (i32, i32, i32, i32),
    held: &'static str,
    needed: usize,
    want: &'static str,
) -> Case {
    Case {
        name,
        shape,
        held,
        needed,
        want: Some(want),
    }
}

fn run(cases: &[Case], bind_policy: CPUBindPolicy, strategy: NUMAAllocateStrategy) {
    for c in cases {
        let (s, n, co, t) = c.shape;
        let layout = layout(s, n, co, t);
        let held_cpus = set(c.held);
        let available: BTreeSet<i32> = all(&layout).difference(&held_cpus).copied().collect();
        let held: BTreeMap<i32, HeldCpu> = held_cpus
            .iter()
            .map(|cpu| (*cpu, HeldCpu::default()))
            .collect();
        let request = TakeRequest {
            count: c.needed,
            bind_policy,
            exclusive: Some(CPUExclusivePolicy::None),
            strategy,
            max_ref_count: 1,
        };
        let got = take_cpus(&layout, &available, &held, request);
        assert_eq!(got, c.want.map(set), "{}", c.name);
    }
}

#[test]
fn full_pcpus_most_allocated() {
    run(
        &[
            case("allocate on non-NUMA node", (1, 1, 4, 2), "", 2, "0-1"),
            case("with allocated cpus", (1, 1, 4, 2), "0-1", 2, "2-3"),
            case("allocate whole socket", (2, 1, 4, 2), "", 8, "0-7"),
            case("allocate across socket", (2, 1, 4, 2), "", 12, "0-11"),
            case(
                "whole socket with partially-allocated socket",
                (2, 1, 4, 2),
                "0-1",
                8,
                "8-15",
            ),
            case(
                "in the smallest idle socket",
                (2, 2, 4, 2),
                "0-5,16-23",
                6,
                "24-29",
            ),
            case(
                "the most of CPUs on the same socket",
                (2, 2, 4, 2),
                "0-5,16-23",
                12,
                "6-15,24-25",
            ),
            case("from first socket", (2, 2, 4, 2), "0-3,8-11", 4, "4-7"),
            case(
                "with less spread cpus",
                (2, 2, 2, 2),
                "0,2,4,8,12",
                4,
                "10-11,14-15",
            ),
            case(
                "with the most spread cpus",
                (2, 2, 2, 2),
                "0,2,4,8,10,12",
                6,
                "5-7,13-15",
            ),
            case(
                "the most spread cpus on the smallest idle socket",
                (2, 2, 2, 2),
                "0,2,4,8-10,12",
                6,
                "6-7,11,13-15",
            ),
        ],
        CPUBindPolicy::FullPCPUs,
        NUMAAllocateStrategy::MostAllocated,
    );
}

#[test]
fn full_pcpus_least_allocated() {
    run(
        &[
            case("allocate on non-NUMA node", (1, 1, 4, 2), "", 2, "0-1"),
            case("with allocated cpus", (1, 1, 4, 2), "0-1", 2, "2-3"),
            case("allocate whole socket", (2, 1, 4, 2), "", 8, "0-7"),
            case("allocate across socket", (2, 1, 4, 2), "", 12, "0-11"),
            case(
                "whole socket with partially-allocated socket",
                (2, 1, 4, 2),
                "0-1",
                8,
                "8-15",
            ),
            case(
                "in the most idle socket",
                (2, 2, 4, 2),
                "0-5,16-23",
                6,
                "8-13",
            ),
            case(
                "the most of CPUs on the same socket",
                (2, 2, 4, 2),
                "0-5,16-23",
                12,
                "6-15,24-25",
            ),
            case("from second socket", (2, 2, 4, 2), "0-3,8-11", 4, "16-19"),
            case(
                "with less spread cpus",
                (2, 2, 2, 2),
                "0,2,4,8,12",
                4,
                "10-11,14-15",
            ),
            case(
                "with the less spread cpus 2",
                (2, 2, 2, 2),
                "0,2,4,8,10,12",
                6,
                "1,3,6-7,14-15",
            ),
            case(
                "the most spread cpus on the most idle socket 3",
                (2, 2, 4, 2),
                "0,2,4,8-10,12",
                6,
                "16-21",
            ),
        ],
        CPUBindPolicy::FullPCPUs,
        NUMAAllocateStrategy::LeastAllocated,
    );
}

#[test]
fn spread_by_pcpus_most_allocated() {
    run(
        &[
            case("allocate on non-NUMA node", (1, 1, 4, 2), "", 4, "0,2,4,6"),
            case(
                "satisfied the partially-allocated socket",
                (2, 1, 4, 2),
                "0,2",
                4,
                "1,3,4,6",
            ),
            case(
                "cpus on full-free socket",
                (2, 1, 4, 2),
                "0-3",
                4,
                "8,10,12,14",
            ),
            case(
                "most of CPUs in the same socket and overlapped cores",
                (2, 1, 4, 2),
                "0,2",
                6,
                "1,3-7",
            ),
        ],
        CPUBindPolicy::SpreadByPCPUs,
        NUMAAllocateStrategy::MostAllocated,
    );
}

#[test]
fn spread_by_pcpus_least_allocated() {
    run(
        &[
            case("allocate on non-NUMA node", (1, 1, 4, 2), "", 4, "0,2,4,6"),
            case(
                "satisfied the partially-allocated socket",
                (2, 1, 4, 2),
                "0,2",
                4,
                "8,10,12,14",
            ),
            case(
                "cpus on full-free socket",
                (2, 1, 4, 2),
                "0-3",
                4,
                "8,10,12,14",
            ),
            case(
                "most of CPUs in the same socket and overlapped cores",
                (2, 1, 4, 2),
                "0,2",
                6,
                "8-12,14",
            ),
        ],
        CPUBindPolicy::SpreadByPCPUs,
        NUMAAllocateStrategy::LeastAllocated,
    );
}

#[test]
fn spread_order_of_all_free_cpus_is_one_thread_per_core_first() {
    let layout = layout(2, 2, 4, 2);
    let want: Vec<i32> = (0..32).step_by(2).chain((1..32).step_by(2)).collect();
    for strategy in [
        NUMAAllocateStrategy::MostAllocated,
        NUMAAllocateStrategy::LeastAllocated,
    ] {
        let request = TakeRequest {
            count: 8,
            bind_policy: CPUBindPolicy::SpreadByPCPUs,
            exclusive: None,
            strategy,
            max_ref_count: 1,
        };
        let acc = Accumulator::new(&layout, &all(&layout), &BTreeMap::new(), request);
        assert_eq!(acc.spread(acc.free_cpus(false)), want, "{strategy:?}");
    }
}

#[test]
fn exclusive_policies_are_preferences() {
    use CPUBindPolicy::{FullPCPUs, SpreadByPCPUs};
    use CPUExclusivePolicy::{NUMANodeLevel, None as NoExclusive, PCPULevel};
    // (name, shape, held, held policy, bind policy, own policy, needed, want)
    let cases = [
        (
            "full-free socket with PCPULevel",
            (2, 1, 4, 2),
            "0,2",
            PCPULevel,
            SpreadByPCPUs,
            PCPULevel,
            4,
            "8,10,12,14",
        ),
        (
            "overlapped cpus with PCPULevel",
            (2, 1, 4, 2),
            "",
            PCPULevel,
            SpreadByPCPUs,
            PCPULevel,
            10,
            "0-4,6,8,10,12,14",
        ),
        (
            "large partially-allocated socket with PCPULevel",
            (2, 1, 8, 2),
            "0,2",
            PCPULevel,
            SpreadByPCPUs,
            PCPULevel,
            4,
            "4,6,8,10",
        ),
        (
            "none exclusive policy",
            (2, 1, 8, 2),
            "0,2",
            PCPULevel,
            SpreadByPCPUs,
            NoExclusive,
            4,
            "1,3,4,6",
        ),
        (
            "full-free socket with NUMANodeLevel",
            (2, 1, 4, 2),
            "0,2",
            NUMANodeLevel,
            SpreadByPCPUs,
            NUMANodeLevel,
            4,
            "8,10,12,14",
        ),
        (
            "partially-allocated socket without NUMANodeLevel",
            (2, 1, 4, 2),
            "0,2",
            NUMANodeLevel,
            SpreadByPCPUs,
            NoExclusive,
            4,
            "1,3,4,6",
        ),
        (
            "full-free socket with NUMANodeLevel, FullPCPUs",
            (2, 1, 4, 2),
            "0,2",
            NUMANodeLevel,
            FullPCPUs,
            NUMANodeLevel,
            4,
            "8-11",
        ),
        (
            "partially-allocated socket without NUMANodeLevel, FullPCPUs",
            (2, 1, 4, 2),
            "0,2",
            NUMANodeLevel,
            FullPCPUs,
            NoExclusive,
            4,
            "4-7",
        ),
    ];
    for (name, (s, n, co, t), held, held_policy, bind_policy, exclusive, needed, want) in cases {
        let layout = layout(s, n, co, t);
        let held_cpus = set(held);
        let available: BTreeSet<i32> = all(&layout).difference(&held_cpus).copied().collect();
        let held: BTreeMap<i32, HeldCpu> = held_cpus
            .iter()
            .map(|cpu| {
                let state = HeldCpu {
                    exclusive: Some(held_policy),
                    ref_count: 1,
                };
                (*cpu, state)
            })
            .collect();
        let request = TakeRequest {
            count: needed,
            bind_policy,
            exclusive: Some(exclusive),
            strategy: NUMAAllocateStrategy::MostAllocated,
            max_ref_count: 1,
        };
        assert_eq!(
            take_cpus(&layout, &available, &held, request),
            Some(set(want)),
            "{name}"
        );
    }
}

/// Pods placed one after another on a node whose CPUs two pods may share:
/// each result is added to the reference counts before the next request.
fn shared_sequence(
    layout: &CpuLayout,
    steps: &[(CPUBindPolicy, usize, &str)],
) -> BTreeMap<i32, usize> {
    let mut refs: BTreeMap<i32, usize> = BTreeMap::new();
    for (step, (bind_policy, needed, want)) in steps.iter().enumerate() {
        let available: BTreeSet<i32> = all(layout)
            .into_iter()
            .filter(|cpu| refs.get(cpu).copied().unwrap_or(0) < 2)
            .collect();
        let held: BTreeMap<i32, HeldCpu> = refs
            .iter()
            .map(|(cpu, n)| {
                let state = HeldCpu {
                    exclusive: Some(CPUExclusivePolicy::PCPULevel),
                    ref_count: *n,
                };
                (*cpu, state)
            })
            .collect();
        let request = TakeRequest {
            count: *needed,
            bind_policy: *bind_policy,
            exclusive: Some(CPUExclusivePolicy::None),
            strategy: NUMAAllocateStrategy::MostAllocated,
            max_ref_count: 2,
        };
        let got = take_cpus(layout, &available, &held, request);
        assert_eq!(got, Some(set(want)), "step {step}");
        for cpu in got.unwrap_or_default() {
            *refs.entry(cpu).or_default() += 1;
        }
    }
    assert!(refs.values().all(|n| *n <= 2));
    refs
}

#[test]
fn shared_cpus_go_to_the_least_shared_cores_first() {
    let _refs = shared_sequence(
        &layout(1, 1, 4, 2),
        &[
            (CPUBindPolicy::FullPCPUs, 4, "0-3"),
            (CPUBindPolicy::FullPCPUs, 5, "0,4-7"),
            (CPUBindPolicy::FullPCPUs, 4, "2-5"),
        ],
    );
}

#[test]
fn shared_cpus_sorted_by_reference_count() {
    let layout = layout(1, 1, 16, 2);
    let refs = shared_sequence(
        &layout,
        &[
            (
                CPUBindPolicy::SpreadByPCPUs,
                16,
                "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30",
            ),
            (CPUBindPolicy::FullPCPUs, 16, "0-15"),
            (
                CPUBindPolicy::SpreadByPCPUs,
                16,
                "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31",
            ),
            (CPUBindPolicy::FullPCPUs, 16, "16-31"),
        ],
    );
    // Upstream's last check: every CPU is now shared by two pods, so none
    // is available any more.
    assert_eq!(refs.len(), 32);
    assert!(refs.values().all(|n| *n == 2));
}

#[test]
fn preferred_cpus_are_taken_first() {
    let layout = layout(2, 1, 16, 2);
    let cpus = all(&layout);
    let request = |count| TakeRequest {
        count,
        bind_policy: CPUBindPolicy::SpreadByPCPUs,
        exclusive: Some(CPUExclusivePolicy::None),
        strategy: NUMAAllocateStrategy::MostAllocated,
        max_ref_count: 1,
    };
    let none = BTreeMap::new();
    assert_eq!(
        take_cpus(&layout, &cpus, &none, request(2)),
        Some(set("0,2"))
    );
    let first = take_preferred_cpus(&layout, &cpus, &set("0,2"), &none, request(2));
    assert_eq!(first, Some(set("0,2")));
    let rest: BTreeSet<i32> = cpus.difference(&set("0,2")).copied().collect();
    let second = take_preferred_cpus(&layout, &rest, &BTreeSet::new(), &none, request(2));
    assert_eq!(second, Some(set("1,3")));
    let third = take_preferred_cpus(&layout, &cpus, &set("11,13,15,17"), &none, request(2));
    assert_eq!(third, Some(set("11,13")));
}

#[test]
fn too_few_cpus_and_nothing_wanted() {
    let layout = layout(1, 1, 2, 2);
    let request = |count| TakeRequest {
        count,
        bind_policy: CPUBindPolicy::FullPCPUs,
        exclusive: None,
        strategy: NUMAAllocateStrategy::MostAllocated,
        max_ref_count: 1,
    };
    let none = BTreeMap::new();
    assert_eq!(take_cpus(&layout, &all(&layout), &none, request(5)), None);
    assert_eq!(
        take_cpus(&layout, &all(&layout), &none, request(0)),
        Some(BTreeSet::new())
    );
    // An empty topology hands out nothing and does not panic.
    let empty = CpuLayout::new(&BTreeMap::new());
    assert_eq!(take_cpus(&empty, &set("0-3"), &none, request(2)), None);
}
