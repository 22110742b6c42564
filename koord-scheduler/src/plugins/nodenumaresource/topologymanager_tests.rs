//! Upstream's topology manager tables (frameworkext/topologymanager
//! policy*_test.go), as facts: providers' hints per resource, the node's
//! NUMA nodes, and the merged hint with the reasons a rejection gives.

use super::*;
use NUMATopologyPolicy::{BestEffort, Restricted, SingleNUMANode};

fn mask(nodes: &[i32]) -> NumaMask {
    NumaMask::of(nodes).unwrap_or_else(|| panic!("bad mask {nodes:?}"))
}

/// A hint on `nodes`, preferred or not.
fn on(nodes: &[i32], preferred: bool) -> NumaHint {
    NumaHint::on(mask(nodes), preferred)
}

/// A hint without NUMA affinity.
fn anywhere(preferred: bool) -> NumaHint {
    NumaHint {
        preferred,
        ..NumaHint::default()
    }
}

fn unsatisfied(nodes: &[i32]) -> NumaHint {
    NumaHint {
        affinity: Some(mask(nodes)),
        unsatisfied: true,
        ..NumaHint::default()
    }
}

/// One provider: resource → hints (None: no preference).
fn provider(entries: &[(&str, Option<&[NumaHint]>)]) -> ProviderHints {
    entries
        .iter()
        .map(|(r, hints)| (r.to_string(), hints.map(<[NumaHint]>::to_vec)))
        .collect()
}

struct MergeCase {
    name: &'static str,
    providers: Vec<ProviderHints>,
    want: NumaHint,
    reasons: &'static [&'static str],
}

fn case(
    name: &'static str,
    providers: Vec<ProviderHints>,
    want: NumaHint,
    reasons: &'static [&'static str],
) -> MergeCase {
    MergeCase {
        name,
        providers,
        want,
        reasons,
    }
}

/// Upstream's common cases: every policy merges these to the same hint and
/// admits without reasons.
fn common_cases() -> Vec<MergeCase> {
    vec![
        case(
            "Two providers, 1 hint each, same mask, both preferred 1/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[0], true)]))]),
            ],
            on(&[0], true),
            &[],
        ),
        case(
            "Two providers, 1 hint each, same mask, both preferred 2/2",
            vec![
                provider(&[("resource1", Some(&[on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], true)]))]),
            ],
            on(&[1], true),
            &[],
        ),
        case(
            "Two providers, 1 no hints, 1 single hint preferred 1/2",
            vec![
                provider(&[]),
                provider(&[("resource", Some(&[on(&[0], true)]))]),
            ],
            on(&[0], true),
            &[],
        ),
        case(
            "Two providers, 1 no hints, 1 single hint preferred 2/2",
            vec![
                provider(&[]),
                provider(&[("resource", Some(&[on(&[1], true)]))]),
            ],
            on(&[1], true),
            &[],
        ),
        case(
            "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true), on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[0], true)]))]),
            ],
            on(&[0], true),
            &[],
        ),
        case(
            "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true), on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], true)]))]),
            ],
            on(&[1], true),
            &[],
        ),
        case(
            "Two providers, both with 2 hints, matching narrower preferred hint from both",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true), on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[0], true), on(&[0, 1], false)]))]),
            ],
            on(&[0], true),
            &[],
        ),
        case(
            "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
            vec![
                provider(&[("resource1", Some(&[on(&[1], true), on(&[0, 1], false)]))]),
                provider(&[(
                    "resource2",
                    Some(&[on(&[0], true), on(&[1], true), on(&[0, 1], false)]),
                )]),
            ],
            on(&[1], true),
            &[],
        ),
        case(
            "Multiple resources, same provider",
            vec![provider(&[
                ("resource1", Some(&[on(&[1], true), on(&[0, 1], false)])),
                (
                    "resource2",
                    Some(&[on(&[0], true), on(&[1], true), on(&[0, 1], false)]),
                ),
            ])],
            on(&[1], true),
            &[],
        ),
    ]
}

/// The cases upstream gives best-effort and restricted alike (4 NUMA nodes);
/// `restricted` picks the restricted expectation where they differ.
fn best_effort_or_restricted_cases(restricted: bool) -> Vec<MergeCase> {
    let all = [0, 1, 2, 3];
    let pick = |be: NumaHint, r: NumaHint| if restricted { r } else { be };
    vec![
        case(
            "Two providers, 2 hints each, same mask (some with different bits), same preferred",
            vec![
                provider(&[("resource1", Some(&[on(&[0, 1], true), on(&[0, 2], true)]))]),
                provider(&[("resource2", Some(&[on(&[0, 1], true), on(&[0, 2], true)]))]),
            ],
            on(&[0, 1], true),
            &[],
        ),
        case("NUMATopologyHint not set", vec![], on(&all, true), &[]),
        case(
            "NUMATopologyHintProvider returns empty non-nil map",
            vec![provider(&[])],
            on(&all, true),
            &[],
        ),
        case(
            "NUMATopologyHintProvider returns nil hints for a resource",
            vec![provider(&[("resource", None)])],
            on(&all, true),
            &[],
        ),
        case(
            "NUMATopologyHintProvider returns empty non-nil hints for a resource",
            vec![provider(&[("resource", Some(&[]))])],
            on(&all, false),
            &["Unsatisfied NUMA resource"],
        ),
        case(
            "Single NUMATopologyHint with Preferred as true and NUMANodeAffinity as nil",
            vec![provider(&[("resource", Some(&[anywhere(true)]))])],
            on(&all, true),
            &[],
        ),
        case(
            "Single NUMATopologyHint with Preferred as false and NUMANodeAffinity as nil",
            vec![provider(&[("resource", Some(&[anywhere(false)]))])],
            on(&all, false),
            &["Unaligned NUMA Hint cause resource prefer [] among [<nil>]"],
        ),
        case(
            "Two providers, 1 hint each, no common mask",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], true)]))]),
            ],
            on(&all, false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01] among [01] & resource2 prefer [10] among [10]",
            ],
        ),
        case(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[0], false)]))]),
            ],
            on(&[0], false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01] among [01] & resource2 prefer [] among [01]",
            ],
        ),
        case(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            vec![
                provider(&[("resource1", Some(&[on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], false)]))]),
            ],
            on(&[1], false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [10] among [10] & resource2 prefer [] among [10]",
            ],
        ),
        case(
            "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[0, 1], true)]))]),
            ],
            pick(on(&all, false), unsatisfied(&[0])),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01] among [01] & resource2 prefer [11] among [11]",
            ],
        ),
        case(
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true), on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[0, 1], false)]))]),
            ],
            pick(on(&all, false), unsatisfied(&[0])),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01 10] among [01 10] & resource2 prefer [] among [11]",
            ],
        ),
        case(
            "Two providers, 1 hint each, 1 wider mask, both preferred 2/2",
            vec![
                provider(&[("resource1", Some(&[on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[0, 1], true)]))]),
            ],
            pick(on(&all, false), unsatisfied(&[1])),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [10] among [10] & resource2 prefer [11] among [11]",
            ],
        ),
    ]
}

fn single_numa_node_cases() -> Vec<MergeCase> {
    vec![
        case("NUMATopologyHint not set", vec![], anywhere(true), &[]),
        case(
            "NUMATopologyHintProvider returns empty non-nil map",
            vec![provider(&[])],
            anywhere(true),
            &[],
        ),
        case(
            "NUMATopologyHintProvider returns nil hints for a resource",
            vec![provider(&[("resource", None)])],
            anywhere(true),
            &[],
        ),
        case(
            "NUMATopologyHintProvider returns empty non-nil hints for a resource",
            vec![provider(&[("resource", Some(&[]))])],
            anywhere(false),
            &["Unsatisfied NUMA resource"],
        ),
        case(
            "Single NUMATopologyHint with Preferred as true and NUMANodeAffinity as nil",
            vec![provider(&[("resource", Some(&[anywhere(true)]))])],
            anywhere(true),
            &[],
        ),
        case(
            "Single NUMATopologyHint with Preferred as false and NUMANodeAffinity as nil",
            vec![provider(&[("resource", Some(&[anywhere(false)]))])],
            anywhere(false),
            &["Unaligned NUMA Hint cause resource prefer [] among [<nil>]"],
        ),
        case(
            "Two providers, 1 hint each, no common mask",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], true)]))]),
            ],
            anywhere(false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01] among [01],resource2 prefer [10] among [10]",
            ],
        ),
        case(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true)]))]),
                provider(&[("resource2", Some(&[on(&[0], false)]))]),
            ],
            anywhere(false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01] among [01],resource2 prefer [] among [01]",
            ],
        ),
        case(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            vec![
                provider(&[("resource1", Some(&[on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[1], false)]))]),
            ],
            anywhere(false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [10] among [10],resource2 prefer [] among [10]",
            ],
        ),
        case(
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            vec![
                provider(&[("resource1", Some(&[on(&[0], true), on(&[1], true)]))]),
                provider(&[("resource2", Some(&[on(&[0, 1], false)]))]),
            ],
            anywhere(false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [01 10] among [01 10],resource2 prefer [] among [11]",
            ],
        ),
        case(
            "Single NUMA hint generation",
            vec![
                provider(&[("resource1", Some(&[on(&[0, 1], true)]))]),
                provider(&[(
                    "resource2",
                    Some(&[on(&[0], true), on(&[1], true), on(&[0, 1], false)]),
                )]),
            ],
            anywhere(false),
            &[
                "Unaligned NUMA Hint cause resource1 prefer [11] among [11],resource2 prefer [01 10] among [01 10 11]",
            ],
        ),
        case(
            "One no-preference provider",
            vec![
                provider(&[(
                    "resource1",
                    Some(&[on(&[0], true), on(&[1], true), on(&[0, 1], false)]),
                )]),
                provider(&[]),
            ],
            on(&[0], true),
            &[],
        ),
    ]
}

/// Runs merge cases; reasons are checked for Restricted and SingleNUMANode
/// (upstream does not compare best-effort's, which never rejects).
fn run(policy: NUMATopologyPolicy, numa_nodes: &[i32], cases: Vec<MergeCase>) -> usize {
    let count = cases.len();
    for c in cases {
        let merged = merge(
            policy,
            numa_nodes,
            &c.providers,
            NumaTopologyExclusive::Preferred,
            &[],
        );
        assert_eq!(merged.hint, c.want, "{policy:?}: {}", c.name);
        if policy == BestEffort {
            assert!(merged.admit && merged.reasons.is_empty(), "{}", c.name);
        } else {
            let want: Vec<String> = c.reasons.iter().map(|r| r.to_string()).collect();
            assert_eq!(merged.reasons, want, "{policy:?}: {}", c.name);
            assert_eq!(merged.admit, want.is_empty(), "{policy:?}: {}", c.name);
        }
    }
    count
}

#[test]
fn best_effort_merge() {
    let nodes = [0, 1, 2, 3];
    let mut cases = common_cases();
    cases.extend(best_effort_or_restricted_cases(false));
    assert_eq!(run(BestEffort, &nodes, cases), 22);
}

#[test]
fn restricted_merge() {
    let nodes = [0, 1, 2, 3];
    let mut cases = common_cases();
    cases.extend(best_effort_or_restricted_cases(true));
    assert_eq!(run(Restricted, &nodes, cases), 22);
}

#[test]
fn single_numa_node_merge() {
    let nodes = [0, 1];
    let mut cases = common_cases();
    cases.extend(single_numa_node_cases());
    assert_eq!(run(SingleNUMANode, &nodes, cases), 21);
}

#[test]
fn none_policy_admits_everything_without_a_hint() {
    let providers = [
        vec![],
        vec![provider(&[("resource", Some(&[on(&[0, 1], true)]))])],
        vec![provider(&[("resource", Some(&[on(&[0, 1], false)]))])],
    ];
    for hints in providers {
        let merged = merge(
            NUMATopologyPolicy::None,
            &[0, 1],
            &hints,
            NumaTopologyExclusive::Preferred,
            &[],
        );
        assert_eq!(merged.hint, NumaHint::default());
        assert!(merged.admit);
    }
}

#[test]
fn can_admit_follows_preferred() {
    // Upstream's canAdmitPodResult tables: best-effort always, restricted
    // and single-NUMA-node only a preferred hint.
    for (hint, restricted_admits) in [(anywhere(false), false), (anywhere(true), true)] {
        let summary = "x";
        assert_eq!(
            rejected_unless_preferred(hint, summary).admit,
            restricted_admits
        );
    }
}

#[test]
fn single_numa_filter_keeps_preferred_one_node_hints() {
    use NumaHint as H;
    type Lists = Vec<Vec<H>>;
    let cases: Vec<(&str, Lists, Lists)> = vec![
        ("filter empty resources", vec![], vec![]),
        (
            "filter hints with nil socket mask 1/2",
            vec![vec![anywhere(false)], vec![anywhere(true)]],
            vec![vec![], vec![anywhere(true)]],
        ),
        (
            "filter hints with nil socket mask 2/2",
            vec![
                vec![on(&[0], true), anywhere(false)],
                vec![on(&[1], true), anywhere(true)],
            ],
            vec![vec![on(&[0], true)], vec![on(&[1], true), anywhere(true)]],
        ),
        (
            "filter hints with empty resource socket mask",
            vec![
                vec![on(&[1], true), on(&[0], true), anywhere(false)],
                vec![],
            ],
            vec![vec![on(&[1], true), on(&[0], true)], vec![]],
        ),
        (
            "filter hints with wide sockemask",
            vec![
                vec![
                    on(&[0], true),
                    on(&[1], true),
                    on(&[1, 2], false),
                    on(&[0, 1, 2], false),
                    anywhere(false),
                ],
                vec![
                    on(&[1, 2], false),
                    on(&[0, 1, 2], false),
                    on(&[0, 2], false),
                    on(&[3], false),
                ],
                vec![
                    on(&[1, 2], false),
                    on(&[0, 1, 2], false),
                    on(&[0, 2], false),
                ],
            ],
            vec![vec![on(&[0], true), on(&[1], true)], vec![], vec![]],
        ),
    ];
    for (name, input, want) in cases {
        assert_eq!(filter_single_numa_hints(&input), want, "{name}");
    }
}

#[test]
fn exclusive_policy_checks() {
    use NumaNodeStatus::{Idle, Shared, Single};
    use NumaTopologyExclusive::{Preferred, Required};
    let cases = [
        (
            "preferred policy 1",
            &[0][..],
            Preferred,
            [Shared, Shared],
            true,
        ),
        (
            "preferred policy 2",
            &[0, 1],
            Preferred,
            [Shared, Shared],
            true,
        ),
        ("preferred policy 3", &[0], Preferred, [Idle, Single], true),
        (
            "preferred policy 4",
            &[0, 1],
            Preferred,
            [Idle, Single],
            true,
        ),
        ("required policy 1", &[0], Required, [Idle, Single], true),
        ("required policy 2", &[0], Required, [Shared, Single], false),
        ("required policy 3", &[0], Required, [Shared, Shared], false),
        ("required policy 4", &[0], Required, [Single, Shared], true),
        (
            "required policy 5",
            &[0, 1],
            Required,
            [Shared, Single],
            false,
        ),
        ("required policy 6", &[0, 1], Required, [Shared, Idle], true),
        (
            "required policy 7",
            &[0, 1],
            Required,
            [Shared, Shared],
            true,
        ),
    ];
    for (name, nodes, exclusive, statuses, want) in cases {
        assert_eq!(
            check_exclusive_policy(&on(nodes, true), exclusive, &statuses),
            want,
            "{name}"
        );
    }
    // A hint without nodes never satisfies, and unknown nodes count as idle.
    assert!(!check_exclusive_policy(&anywhere(true), Preferred, &[]));
    assert!(check_exclusive_policy(&on(&[5], true), Required, &[Shared]));
}

#[test]
fn providers_hints_are_flattened_with_reasons_and_summary() {
    let (all, reasons, summary) = filter_providers_hints(&[
        provider(&[("resource1", Some(&[on(&[0], true)]))]),
        provider(&[("resource2", Some(&[on(&[0], true)]))]),
    ]);
    assert_eq!(all, vec![vec![on(&[0], true)], vec![on(&[0], true)]]);
    assert!(reasons.is_empty());
    assert_eq!(
        summary,
        [
            "resource1 prefer [01] among [01]",
            "resource2 prefer [01] among [01]"
        ]
    );

    let (all, reasons, summary) = filter_providers_hints(&[
        provider(&[("resource1", Some(&[on(&[0], true)]))]),
        provider(&[("resource2", Some(&[on(&[1], true)]))]),
    ]);
    assert_eq!(all, vec![vec![on(&[0], true)], vec![on(&[1], true)]]);
    assert!(reasons.is_empty());
    assert_eq!(
        summary,
        [
            "resource1 prefer [01] among [01]",
            "resource2 prefer [10] among [10]"
        ]
    );

    let (all, reasons, summary) = filter_providers_hints(&[provider(&[("resource", Some(&[]))])]);
    assert_eq!(
        all,
        vec![vec![NumaHint {
            unsatisfied: true,
            ..NumaHint::default()
        }]]
    );
    assert_eq!(reasons, ["Unsatisfied NUMA resource"]);
    assert!(summary.is_empty());
}

#[test]
fn masks_print_like_upstream_and_order_by_width_then_nodes() {
    assert_eq!(mask(&[0]).to_string(), "01");
    assert_eq!(mask(&[1]).to_string(), "10");
    assert_eq!(mask(&[0, 1]).to_string(), "11");
    assert_eq!(mask(&[2]).to_string(), "100");
    assert_eq!(mask(&[0, 2]).to_string(), "0101");
    assert_eq!(NumaMask::of(&[64]), None);
    assert_eq!(NumaMask::of(&[-1]), None);
    assert!(mask(&[0]).is_narrower_than(mask(&[1])));
    assert!(mask(&[3]).is_narrower_than(mask(&[0, 1])));
    assert!(!mask(&[0, 1]).is_narrower_than(mask(&[0, 1])));
    let order: Vec<NumaMask> = NumaMask::subsets(&[0, 1, 2]);
    let want: Vec<NumaMask> = [&[0][..], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]]
        .iter()
        .map(|n| mask(n))
        .collect();
    assert_eq!(order, want);
}

#[test]
fn generated_hints_prefer_the_narrowest_fitting_sets() {
    let resources: BTreeSet<String> = ["cpu", "memory"].iter().map(|s| s.to_string()).collect();
    let none = BTreeMap::new();
    // Fits on node 1 alone and on both nodes.
    let fits = |m: NumaMask| (m == mask(&[1]) || m == mask(&[0, 1])).then_some(7);
    let hints = generate_hints(&[0, 1], &resources, &none, SingleNUMANode, fits);
    let want = vec![
        NumaHint {
            score: 7,
            ..on(&[1], true)
        },
        NumaHint {
            score: 7,
            ..on(&[0, 1], false)
        },
    ];
    assert_eq!(hints["cpu"], Some(want.clone()));
    assert_eq!(hints["memory"], Some(want));
    // Restricted: every fitting set is preferred.
    let hints = generate_hints(&[0, 1], &resources, &none, Restricted, fits);
    assert!(hints["cpu"].iter().flatten().all(|h| h.preferred));
    // A node lacking memory removes every set touching it, for all resources.
    let lacking = BTreeMap::from([("memory".to_string(), vec![1])]);
    let hints = generate_hints(&[0, 1], &resources, &lacking, BestEffort, fits);
    assert_eq!(hints["cpu"], Some(vec![]));
    // Nothing fits: each resource fits nowhere, which the merge rejects.
    let hints = generate_hints(&[0, 1], &resources, &none, SingleNUMANode, |_| None);
    let merged = merge(
        SingleNUMANode,
        &[0, 1],
        &[hints],
        NumaTopologyExclusive::Preferred,
        &[],
    );
    assert!(!merged.admit);
    assert_eq!(
        merged.reasons,
        ["Unsatisfied NUMA cpu", "Unsatisfied NUMA memory"]
    );
}
