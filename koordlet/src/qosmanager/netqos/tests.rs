//! Table tests of the decision and reconcile cores. Cases marked "upstream"
//! restate the facts of upstream's `helper_test.go` tables
//! (`Test_getBandwidthVal`, `Test_loadConfigFromNodeSlo`,
//! `Test_convertIpToHex`) in this crate's terms.

use std::net::{IpAddr, Ipv4Addr};

use apis::slo::v1alpha1::{
    NETQOSPolicy, NetworkQOS, NetworkQOSCfg, NodeSLOSpec, ResourceQOS, ResourceQOSPolicies,
    ResourceQOSStrategy, SystemStrategy,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use koord_common::units::{Bytes, BytesPerSecond};

use super::diff::*;
use super::netlink::{filter_info, selector_source, source_selector};
use super::plan::*;

fn pct(value: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(value))
}

fn qty(text: &str) -> Option<IntOrString> {
    Some(IntOrString::String(text.to_string()))
}

#[test]
fn bandwidth_values_follow_upstream_table() {
    // upstream Test_getBandwidthVal: (total, value) -> bits per second.
    let cases: [(u64, Option<IntOrString>, u64); 8] = [
        (1000, None, 0),
        (1000, pct(-1), 0),
        (1000, pct(0), 0),
        (1000, pct(200), 0),
        (1000, pct(10), 100),
        (1000, qty("aaa"), 0),
        (1000, qty(""), 0),
        (10000, qty("2k"), 2000),
    ];
    for (total, value, want) in cases {
        let mut notes = Vec::new();
        let got = bandwidth_value(total, value.as_ref(), "f", &mut notes).unwrap_or(0);
        assert_eq!(got, want, "{value:?}");
    }
    let mut notes = Vec::new();
    bandwidth_value(1000, pct(200).as_ref(), "lsClass.x", &mut notes);
    assert!(
        notes[0].contains("lsClass.x") && notes[0].contains("200"),
        "{notes:?}"
    );
}

fn slo(total: Option<&str>, ls: Option<NetworkQOSCfg>, be: Option<NetworkQOSCfg>) -> NodeSLOSpec {
    NodeSLOSpec {
        resource_qos_strategy: Some(ResourceQOSStrategy {
            ls_class: ls.map(|cfg| ResourceQOS {
                network_qos: Some(cfg),
                ..ResourceQOS::default()
            }),
            be_class: be.map(|cfg| ResourceQOS {
                network_qos: Some(cfg),
                ..ResourceQOS::default()
            }),
            ..ResourceQOSStrategy::default()
        }),
        system_strategy: total.map(|t| SystemStrategy {
            total_network_bandwidth: Some(Quantity(t.to_string())),
            ..SystemStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }
}

fn cfg(
    enable: bool,
    egress_request: Option<IntOrString>,
    egress_limit: Option<IntOrString>,
) -> NetworkQOSCfg {
    NetworkQOSCfg {
        enable: Some(enable),
        network_qos: NetworkQOS {
            egress_request,
            egress_limit,
            ..NetworkQOS::default()
        },
    }
}

fn plan_of(decision: NetQosDecision) -> NetQosPlan {
    match decision {
        NetQosDecision::Apply(plan) => plan,
        other => panic!("expected a plan, got {other:?}"),
    }
}

#[test]
fn total_bandwidth_from_slo_or_interface_speed() {
    // upstream Test_loadConfigFromNodeSlo: "100M" is 100000000 bit/s, an
    // integer 10 a tenth of it, the string "10M" the same 10000000.
    let spec = slo(Some("100M"), Some(cfg(true, pct(10), None)), None);
    let plan = plan_of(decide(Some(&spec), &[], None));
    assert_eq!(plan.total_bps, 100_000_000);
    assert_eq!(plan.class(LS_CLASS_MINOR).unwrap().rate_bps, 10_000_000);
    let spec = slo(Some("100M"), Some(cfg(true, qty("10M"), None)), None);
    let plan = plan_of(decide(Some(&spec), &[], None));
    assert_eq!(plan.class(LS_CLASS_MINOR).unwrap().rate_bps, 10_000_000);
    // "total network bandwidth not been set": upstream stays all-zero; here
    // the interface speed stands in, and without one nothing changes.
    let spec = slo(None, Some(cfg(true, pct(10), None)), None);
    let plan = plan_of(decide(Some(&spec), &[], Some(1000)));
    assert_eq!(plan.total_bps, 1_000_000_000);
    assert!(plan.total_source.contains("interface speed"));
    assert!(matches!(
        decide(Some(&spec), &[], None),
        NetQosDecision::Leave { .. }
    ));
    let zero = slo(Some("0"), Some(cfg(true, pct(10), None)), None);
    assert!(matches!(
        decide(Some(&zero), &[], None),
        NetQosDecision::Leave { .. }
    ));
}

#[test]
fn disabled_or_other_policy_removes_the_tree() {
    // upstream "network config not enable to be set": class values ignored.
    let spec = slo(Some("100M"), Some(cfg(false, pct(10), None)), None);
    match decide(Some(&spec), &[], None) {
        NetQosDecision::Remove { reason } => assert!(reason.contains("neither"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let mut terway = slo(Some("100M"), Some(cfg(true, pct(10), None)), None);
    terway.resource_qos_strategy.as_mut().unwrap().policies = Some(ResourceQOSPolicies {
        net_qos_policy: Some(NETQOSPolicy::TerwayQos),
        ..ResourceQOSPolicies::default()
    });
    assert!(matches!(
        decide(Some(&terway), &[], None),
        NetQosDecision::Remove { .. }
    ));
    assert!(matches!(
        decide(None, &[], None),
        NetQosDecision::Leave { .. }
    ));
}

#[test]
fn htb_layout_follows_upstream() {
    let spec = slo(
        Some("1G"),
        Some(cfg(true, pct(50), pct(100))),
        Some(cfg(true, pct(10), pct(30))),
    );
    let plan = plan_of(decide(Some(&spec), &[], None));
    let rows: Vec<(u16, u32, u64, u64, u32)> = plan
        .classes
        .iter()
        .map(|c| (c.minor, c.parent, c.rate_bps, c.ceil_bps, c.prio))
        .collect();
    let root = handle(1, 1);
    assert_eq!(
        rows,
        vec![
            (1, TC_H_ROOT, 1_000_000_000, 1_000_000_000, 0),
            // system: what the LS and BE requests leave, ceil the total.
            (2, root, 400_000_000, 1_000_000_000, 1),
            (3, root, 500_000_000, 1_000_000_000, 2),
            (4, root, 100_000_000, 300_000_000, 3),
        ]
    );
    let be = plan.class(BE_CLASS_MINOR).unwrap();
    // 100 Mbit/s = 12.5 MB/s: quantum rate/10 capped at 200000, burst rate/1000 + 1600.
    assert_eq!(be.quantum_bytes, 200_000);
    assert_eq!(be.burst, Bytes(12_500 + 1_600));
    assert_eq!(be.cburst, Bytes(37_500 + 1_600));
}

#[test]
fn clamps_and_unenabled_classes() {
    // BE limit above the total, LS request above its limit, requests
    // beyond the total: clamped with notes, never underflowing.
    let spec = slo(
        Some("100M"),
        Some(cfg(true, pct(90), qty("50M"))),
        Some(cfg(true, pct(50), qty("1G"))),
    );
    let plan = plan_of(decide(Some(&spec), &[], None));
    let ls = plan.class(LS_CLASS_MINOR).unwrap();
    assert_eq!((ls.rate_bps, ls.ceil_bps), (50_000_000, 50_000_000));
    let be = plan.class(BE_CLASS_MINOR).unwrap();
    assert_eq!((be.rate_bps, be.ceil_bps), (50_000_000, 100_000_000));
    assert_eq!(
        plan.class(SYSTEM_CLASS_MINOR).unwrap().rate_bps,
        MIN_CLASS_RATE_BPS
    );
    assert_eq!(plan.notes.len(), 3, "{:?}", plan.notes);
    // Only BE enabled: LS has no guarantee and no limit.
    let spec = slo(Some("100M"), None, Some(cfg(true, pct(5), pct(20))));
    let plan = plan_of(decide(Some(&spec), &[], None));
    let ls = plan.class(LS_CLASS_MINOR).unwrap();
    assert_eq!(
        (ls.rate_bps, ls.ceil_bps),
        (MIN_CLASS_RATE_BPS, 100_000_000)
    );
    // A limit of 0 is the request (upstream: ceil 0 becomes the rate).
    let spec = slo(Some("100M"), None, Some(cfg(true, pct(5), pct(0))));
    let be = plan_of(decide(Some(&spec), &[], None)).classes[3].clone();
    assert_eq!((be.rate_bps, be.ceil_bps), (5_000_000, 5_000_000));
}

fn pod(key: &str, label: Option<&str>, ips: &[&str]) -> NetQosPod {
    NetQosPod {
        key: key.to_string(),
        qos_label: label.map(str::to_string),
        ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        host_network: false,
        terminated: false,
        network_qos: PodNetworkQos::Unset,
    }
}

#[test]
fn pods_are_classified_by_label_and_address() {
    let spec = slo(
        Some("100M"),
        Some(cfg(true, pct(50), None)),
        Some(cfg(true, pct(5), pct(20))),
    );
    let mut host = pod("ns/host", Some("BE"), &["192.168.0.1"]);
    host.host_network = true;
    let mut done = pod("ns/done", Some("BE"), &["10.0.0.9"]);
    done.terminated = true;
    let pods = vec![
        pod("ns/lsr", Some("LSR"), &["10.0.0.1"]),
        pod("ns/lse", Some("LSE"), &["10.0.0.2"]),
        pod("ns/be", Some("BE"), &["10.0.0.3", "fd00::3"]),
        pod("ns/sys", Some("SYSTEM"), &["10.0.0.4"]),
        pod("ns/none", None, &["10.0.0.5"]),
        pod("ns/odd", Some("XX"), &["10.0.0.6"]),
        pod("ns/zz-dup", Some("BE"), &["10.0.0.1"]),
        host,
        done,
    ];
    let plan = plan_of(decide(Some(&spec), &pods, None));
    let got: Vec<(String, NetQosClass)> = plan
        .filters
        .iter()
        .map(|f| (f.ip.to_string(), f.class))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.0.0.1".to_string(), NetQosClass::Ls),
            ("10.0.0.2".to_string(), NetQosClass::Ls),
            ("10.0.0.3".to_string(), NetQosClass::Be),
            ("10.0.0.4".to_string(), NetQosClass::System),
            ("fd00::3".to_string(), NetQosClass::Be),
        ]
    );
    assert!(
        plan.notes.iter().any(|n| n.contains("host network")),
        "{:?}",
        plan.notes
    );
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("claimed by pods ns/lsr and ns/zz-dup"))
    );
}

#[test]
fn filter_count_is_bounded() {
    let spec = slo(Some("100M"), None, Some(cfg(true, pct(5), pct(20))));
    let pods: Vec<NetQosPod> = (0..(MAX_POD_FILTERS as u32 + 10))
        .map(|i| NetQosPod {
            key: format!("ns/p{i:05}"),
            qos_label: Some("BE".into()),
            ips: vec![IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))],
            host_network: false,
            terminated: false,
            network_qos: PodNetworkQos::Unset,
        })
        .collect();
    let plan = plan_of(decide(Some(&spec), &pods, None));
    assert_eq!(plan.filters.len(), MAX_POD_FILTERS);
    assert!(plan.notes.iter().any(|n| n.starts_with("10 pod addresses")));
}

#[test]
fn u32_selectors_match_source_addresses() {
    // upstream Test_convertIpToHex: 10.211.248.149 is 0ad3f895.
    let v4: IpAddr = "10.211.248.149".parse().unwrap();
    let selector = source_selector(&v4);
    assert_eq!(selector.keys.len(), 1);
    assert_eq!(
        (selector.keys[0].val, selector.keys[0].off),
        (0x0ad3_f895, 12)
    );
    assert_eq!(selector_source(&selector, ETH_P_IP), Some(v4));
    assert_eq!(selector_source(&selector, ETH_P_IPV6), None);
    let v6: IpAddr = "fd00::1:2".parse().unwrap();
    let selector = source_selector(&v6);
    let offs: Vec<i32> = selector.keys.iter().map(|k| k.off).collect();
    assert_eq!(offs, [8, 12, 16, 20]);
    assert_eq!(selector.keys[0].val, 0xfd00_0000);
    assert_eq!(selector.keys[3].val, 0x0001_0002);
    assert_eq!(selector_source(&selector, ETH_P_IPV6), Some(v6));
    let mut partial = source_selector(&v4);
    partial.keys[0].mask = 0xffff_ff00;
    assert_eq!(selector_source(&partial, ETH_P_IP), None);
    // prio 4, protocol 0x0800 in network order.
    assert_eq!(
        filter_info(4, ETH_P_IP),
        (4 << 16) | u32::from(0x0800u16.to_be())
    );
}

fn sample_plan(pods: &[NetQosPod]) -> NetQosPlan {
    let spec = slo(
        Some("100M"),
        Some(cfg(true, pct(50), None)),
        Some(cfg(true, pct(5), pct(20))),
    );
    plan_of(decide(Some(&spec), pods, None))
}

fn in_sync(plan: &NetQosPlan) -> ObservedTc {
    ObservedTc {
        root_qdisc: Some(ObservedQdisc {
            kind: "htb".into(),
            handle: handle(1, 0),
            default_minor: Some(2),
        }),
        classes: plan.classes.iter().map(wire_class).collect(),
        filters: plan
            .filters
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let (prio, protocol) = filter_slot(&f.ip);
                ObservedFilter {
                    prio,
                    protocol,
                    handle: 0x8000_0800 + i as u32,
                    class: Some(handle(MAJOR, f.target_minor)),
                    source: Some(f.ip),
                }
            })
            .collect(),
    }
}

#[test]
fn reconcile_is_idempotent_and_changes_only_differences() {
    let pods = vec![
        pod("ns/ls", Some("LS"), &["10.0.0.1"]),
        pod("ns/be", Some("BE"), &["10.0.0.2"]),
    ];
    let plan = sample_plan(&pods);
    // Foreign root qdisc: everything is installed fresh.
    let foreign = ObservedTc {
        root_qdisc: Some(ObservedQdisc {
            kind: "fq_codel".into(),
            handle: 0,
            default_minor: None,
        }),
        ..ObservedTc::default()
    };
    let changes = reconcile(&foreign, &plan);
    assert_eq!(changes.actions.len(), 1 + 4 + 2);
    assert_eq!(
        changes.actions[0],
        TcAction::ReplaceRootQdisc { default_minor: 2 }
    );
    // In sync: nothing.
    let mut observed = in_sync(&plan);
    assert_eq!(reconcile(&observed, &plan), TcChanges::default());
    // A drifted class is changed; a gone pod's filter deleted; a foreign
    // filter at another priority is left alone; a filter pointing to the
    // wrong class is replaced.
    observed.classes[3].ceil.0 += 1;
    observed.filters.push(ObservedFilter {
        prio: 4,
        protocol: ETH_P_IP,
        handle: 0x8000_0900,
        class: Some(handle(1, 4)),
        source: Some("10.0.0.99".parse().unwrap()),
    });
    observed.filters.push(ObservedFilter {
        prio: 9,
        protocol: ETH_P_IP,
        handle: 0x8010_0800,
        class: Some(handle(1, 4)),
        source: None,
    });
    observed.filters[0].class = Some(handle(1, 4));
    let changes = reconcile(&observed, &plan);
    assert_eq!(
        changes.actions,
        vec![
            TcAction::ChangeClass(plan.classes[3].clone()),
            TcAction::DeleteFilter {
                prio: 4,
                protocol: ETH_P_IP,
                handle: 0x8000_0800
            },
            TcAction::DeleteFilter {
                prio: 4,
                protocol: ETH_P_IP,
                handle: 0x8000_0900
            },
            TcAction::AddFilter(plan.filters[0].clone()),
        ]
    );
    // HTB 1: with another default class is rebuilt.
    let mut other_default = in_sync(&plan);
    other_default.root_qdisc.as_mut().unwrap().default_minor = Some(3);
    assert_eq!(reconcile(&other_default, &plan).actions.len(), 1 + 4 + 2);
    // Removal touches only our qdisc.
    assert_eq!(
        removal(&in_sync(&plan)).actions,
        vec![TcAction::DeleteRootQdisc]
    );
    assert!(removal(&foreign).actions.is_empty());
}

#[test]
fn reconcile_work_is_bounded() {
    let pods: Vec<NetQosPod> = (0..2000u32)
        .map(|i| NetQosPod {
            key: format!("ns/p{i:05}"),
            qos_label: Some("BE".into()),
            ips: vec![IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))],
            host_network: false,
            terminated: false,
            network_qos: PodNetworkQos::Unset,
        })
        .collect();
    let plan = sample_plan(&pods);
    let changes = reconcile(&ObservedTc::default(), &plan);
    assert_eq!(changes.actions.len(), MAX_ACTIONS_PER_ROUND);
    assert_eq!(changes.deferred, 1 + 4 + 2000 - MAX_ACTIONS_PER_ROUND);
}

#[test]
fn wire_values_use_kernel_units() {
    let plan = sample_plan(&[]);
    let be = wire_class(plan.class(BE_CLASS_MINOR).unwrap());
    // 5 % of 100 Mbit/s = 625000 B/s; 20 % = 2.5 MB/s.
    assert_eq!(
        (be.rate, be.ceil),
        (BytesPerSecond(625_000), BytesPerSecond(2_500_000))
    );
    // burst 625 + 1600 bytes at 625000 B/s = 3.56 ms = 55616 ticks of 64 ns.
    assert_eq!(
        be.buffer_ticks,
        ((2_225u128 * 1_000_000_000 / 625_000) >> 6) as u32
    );
    assert_eq!(burst_ticks(Bytes(1), BytesPerSecond(0)), u32::MAX);
}

#[test]
fn pod_adapter_reads_status_and_labels() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ns", "name": "p", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [], "hostNetwork": false},
        "status": {"phase": "Running", "podIP": "10.1.0.5",
                   "podIPs": [{"ip": "10.1.0.5"}, {"ip": "fd00::5"}, {"ip": "not-an-ip"}]}
    }))
    .unwrap();
    let view = super::net_qos_pod(&pod);
    assert_eq!(view.key, "ns/p");
    assert_eq!(view.qos_label.as_deref(), Some("BE"));
    assert_eq!(view.ips.len(), 2);
    assert!(!view.terminated && !view.host_network);
}

#[test]
fn capability_probe_reports_what_is_missing() {
    let root = std::env::temp_dir().join(format!("netqos-cap-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sys/kernel")).unwrap();
    std::fs::write(root.join("sys/kernel/osrelease"), "6.1.0\n").unwrap();
    std::fs::write(
        root.join("kallsyms"),
        "ffffffff81f47eb0 t htb_enqueue\n0000000000000000 T other\n",
    )
    .unwrap();
    let modules = root.join("modules");
    let probe = super::capability::probe(&root, &modules, Ok(()));
    assert!(!probe.supported);
    assert_eq!(
        (probe.htb, probe.u32_classifier, probe.cgroup_classifier),
        (Some(true), Some(false), Some(false))
    );
    assert!(probe.detail.contains("u32 classifier"), "{}", probe.detail);
    // cls_u32 installed as a module: loadable on first use.
    std::fs::create_dir_all(modules.join("6.1.0/kernel/net/sched")).unwrap();
    std::fs::write(modules.join("6.1.0/kernel/net/sched/cls_u32.ko.xz"), b"").unwrap();
    let probe = super::capability::probe(&root, &modules, Ok(()));
    assert!(probe.supported, "{}", probe.detail);
    let probe = super::capability::probe(&root, &modules, Err("EPERM".into()));
    assert!(!probe.supported && probe.detail.contains("EPERM"));
    // Nothing readable: unknown, not supported.
    let probe = super::capability::probe(&root.join("missing"), &modules, Ok(()));
    assert_eq!(probe.htb, None);
    assert!(!probe.supported);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn pod_annotation_is_parsed_as_upstream_and_validated() {
    let limits = |ingress_bps, egress_bps| {
        Ok(PodBandwidthLimits {
            ingress_bps,
            egress_bps,
        })
    };
    let cases: Vec<(&str, Result<PodBandwidthLimits, PodAnnotationError>)> = vec![
        (
            r#"{"ingressLimit": "10M", "egressLimit": "20M"}"#,
            limits(10_000_000, 20_000_000),
        ),
        // upstream terwayqos_test: Go's decoder ignores key case.
        (
            r#"{"IngressLimit": "1000", "EgressLimit": "2000"}"#,
            limits(1000, 2000),
        ),
        (
            r#"{"IngressLimit": "invalid", "EgressLimit": "2000"}"#,
            Err(PodAnnotationError::BadQuantity {
                field: "ingressLimit",
                value: "invalid".into(),
                reason: String::new(),
            }),
        ),
        // Absent and null keep upstream's default "0"; unknown keys are ignored.
        (r#"{}"#, limits(0, 0)),
        (r#"{"egressLimit": null, "other": 1}"#, limits(0, 0)),
        (r#"{"egressLimit": "1.5k"}"#, limits(0, 1500)),
        // An exact key wins over another spelling.
        (
            r#"{"EGRESSLIMIT": "1k", "egressLimit": "2k"}"#,
            limits(0, 2000),
        ),
        (
            r#"{"egressLimit": 5}"#,
            Err(PodAnnotationError::NotAString {
                field: "egressLimit",
            }),
        ),
        (
            r#"{"egressLimit": "-1M"}"#,
            Err(PodAnnotationError::Negative {
                field: "egressLimit",
                value: "-1M".into(),
            }),
        ),
        (
            r#"{"egressLimit": "1e30"}"#,
            Err(PodAnnotationError::BadQuantity {
                field: "egressLimit",
                value: "1e30".into(),
                reason: String::new(),
            }),
        ),
        ("[]", Err(PodAnnotationError::NotAnObject(String::new()))),
        ("10M", Err(PodAnnotationError::NotAnObject(String::new()))),
    ];
    // Reasons come from other parsers: compare everything else.
    let shape = |r: Result<PodBandwidthLimits, PodAnnotationError>| match r {
        Err(PodAnnotationError::BadQuantity { field, value, .. }) => {
            Err(PodAnnotationError::BadQuantity {
                field,
                value,
                reason: String::new(),
            })
        }
        Err(PodAnnotationError::NotAnObject(_)) => {
            Err(PodAnnotationError::NotAnObject(String::new()))
        }
        other => other,
    };
    for (text, want) in cases {
        assert_eq!(shape(parse_pod_network_qos(text)), want, "{text}");
    }
    let long = format!(r#"{{"egressLimit": "{}"}}"#, "1".repeat(2000));
    assert!(matches!(
        parse_pod_network_qos(&long),
        Err(PodAnnotationError::TooLong(_))
    ));
    assert_eq!(
        PodNetworkQos::from_annotation(Some("")),
        PodNetworkQos::Unset
    );
    assert_eq!(PodNetworkQos::from_annotation(None), PodNetworkQos::Unset);
    assert!(matches!(
        PodNetworkQos::from_annotation(Some("{")),
        PodNetworkQos::Invalid(_)
    ));
}

fn with_qos(mut pod: NetQosPod, annotation: &str) -> NetQosPod {
    pod.network_qos = PodNetworkQos::from_annotation(Some(annotation));
    pod
}

#[test]
fn pods_with_their_own_limit_get_a_class_under_the_root() {
    let spec = slo(
        Some("100M"),
        Some(cfg(true, pct(50), None)),
        Some(cfg(true, pct(5), pct(20))),
    );
    let mut host = with_qos(
        pod("ns/host", Some("LS"), &["192.168.0.1"]),
        r#"{"egressLimit": "5M"}"#,
    );
    host.host_network = true;
    let pods = vec![
        with_qos(
            pod("ns/ls-limited", Some("LS"), &["10.0.0.1", "fd00::1"]),
            r#"{"egressLimit": "10M"}"#,
        ),
        with_qos(
            pod("ns/be-limited", Some("BE"), &["10.0.0.2"]),
            r#"{"egressLimit": "1G", "ingressLimit": "3M"}"#,
        ),
        with_qos(
            pod("ns/be-bad", Some("BE"), &["10.0.0.3"]),
            r#"{"egressLimit": "lots"}"#,
        ),
        with_qos(
            pod("ns/ls-ingress", Some("LS"), &["10.0.0.4"]),
            r#"{"ingressLimit": "3M"}"#,
        ),
        // No QoS label: not classified at all, annotation or not.
        with_qos(
            pod("ns/unlabelled", None, &["10.0.0.5"]),
            r#"{"egressLimit": "1M"}"#,
        ),
        host,
    ];
    let plan = plan_of(decide(Some(&spec), &pods, None));
    let own: Vec<(&str, NetQosClass, u64, u64)> = plan
        .pod_classes
        .iter()
        .map(|c| (c.pod.as_str(), c.class, c.egress_bps, c.ingress_bps))
        .collect();
    // In key order; the 1G limit is clamped to the 100M total.
    assert_eq!(
        own,
        vec![
            ("ns/be-limited", NetQosClass::Be, 100_000_000, 3_000_000),
            ("ns/ls-limited", NetQosClass::Ls, 10_000_000, 0),
        ]
    );
    let minor_of = |pod: &str| {
        plan.pod_classes
            .iter()
            .find(|c| c.pod == pod)
            .map(|c| c.minor)
            .unwrap()
    };
    for pod_class in &plan.pod_classes {
        assert!(
            (POD_CLASS_MINOR_FIRST..POD_CLASS_MINOR_FIRST + MAX_POD_CLASSES)
                .contains(&pod_class.minor)
        );
        // Upstream: parent 1:1, rate = ceil = egress, the QoS class's prio.
        let spec = plan.class(pod_class.minor).unwrap();
        assert_eq!(spec.parent, handle(MAJOR, ROOT_CLASS_MINOR));
        assert_eq!(
            (spec.rate_bps, spec.ceil_bps),
            (pod_class.egress_bps, pod_class.egress_bps)
        );
        assert_eq!(spec.prio, pod_class.class.prio());
    }
    assert_eq!(plan.classes.len(), 4 + 2);
    let targets: Vec<(String, u16)> = plan
        .filters
        .iter()
        .map(|f| (f.ip.to_string(), f.target_minor))
        .collect();
    assert_eq!(
        targets,
        vec![
            ("10.0.0.1".to_string(), minor_of("ns/ls-limited")),
            ("10.0.0.2".to_string(), minor_of("ns/be-limited")),
            ("10.0.0.3".to_string(), BE_CLASS_MINOR),
            ("10.0.0.4".to_string(), LS_CLASS_MINOR),
            ("fd00::1".to_string(), minor_of("ns/ls-limited")),
        ]
    );
    let refusals: Vec<(PodRefusal, usize)> = plan.refusals.iter().map(|(r, n)| (*r, *n)).collect();
    assert_eq!(
        refusals,
        vec![
            (PodRefusal::HostNetwork, 1),
            (PodRefusal::InvalidAnnotation, 1),
            (PodRefusal::IngressNotEnforced, 2),
        ]
    );
    for expected in [
        "pod ns/be-bad: koordinator.sh/networkQOS ignored",
        "ingressLimit 3000000 bit/s is not enforced",
        "egressLimit 1000000000 bit/s is above the total",
        "pod ns/host uses the host network",
    ] {
        assert!(
            plan.notes.iter().any(|n| n.contains(expected)),
            "{expected} not in {:?}",
            plan.notes
        );
    }
}

#[test]
fn pod_class_minors_are_stable_and_bounded() {
    let spec = slo(Some("100M"), Some(cfg(true, pct(50), None)), None);
    let limited = |i: u32| {
        with_qos(
            NetQosPod {
                key: format!("ns/p{i:05}"),
                qos_label: Some("LS".into()),
                ips: vec![IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))],
                host_network: false,
                terminated: false,
                network_qos: PodNetworkQos::Unset,
            },
            r#"{"egressLimit": "1M"}"#,
        )
    };
    let minors = |pods: &[NetQosPod]| -> std::collections::BTreeMap<String, u16> {
        plan_of(decide(Some(&spec), pods, None))
            .pod_classes
            .into_iter()
            .map(|c| (c.pod, c.minor))
            .collect()
    };
    let pods: Vec<NetQosPod> = (0..20).map(limited).collect();
    let first = minors(&pods);
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(minors(&reversed), first, "input order changes nothing");
    // A pod leaving keeps everyone else's minor unless they collided with it.
    let fewer = minors(&pods[1..]);
    let moved = fewer
        .iter()
        .filter(|(pod, minor)| first[pod.as_str()] != **minor)
        .count();
    assert!(moved <= 1, "{moved} minors moved");

    // More pods than pod classes: the rest stay in their class.
    let many: Vec<NetQosPod> = (0..u32::from(MAX_POD_CLASSES) + 10).map(limited).collect();
    let plan = plan_of(decide(Some(&spec), &many, None));
    assert_eq!(plan.pod_classes.len(), usize::from(MAX_POD_CLASSES));
    let distinct: std::collections::BTreeSet<u16> =
        plan.pod_classes.iter().map(|c| c.minor).collect();
    assert_eq!(distinct.len(), usize::from(MAX_POD_CLASSES));
    assert_eq!(plan.refusals.get(&PodRefusal::PodClassLimit), Some(&10));
    assert_eq!(
        plan.filters
            .iter()
            .filter(|f| f.target_minor == LS_CLASS_MINOR)
            .count(),
        10
    );
}

#[test]
fn a_pod_class_no_longer_planned_is_deleted_after_its_filters() {
    let limited = with_qos(
        pod("ns/ls", Some("LS"), &["10.0.0.1"]),
        r#"{"egressLimit": "10M"}"#,
    );
    let with_limit = sample_plan(std::slice::from_ref(&limited));
    let minor = with_limit.pod_classes[0].minor;
    let observed = in_sync(&with_limit);
    assert_eq!(reconcile(&observed, &with_limit), TcChanges::default());
    // The annotation goes: the filter moves to the LS class, the pod class goes.
    let plain = sample_plan(&[pod("ns/ls", Some("LS"), &["10.0.0.1"])]);
    let changes = reconcile(&observed, &plain);
    assert_eq!(
        changes.actions,
        vec![
            TcAction::DeleteFilter {
                prio: 4,
                protocol: ETH_P_IP,
                handle: 0x8000_0800
            },
            TcAction::DeleteClass {
                handle: handle(MAJOR, minor),
                parent: handle(MAJOR, ROOT_CLASS_MINOR)
            },
            TcAction::AddFilter(plain.filters[0].clone()),
        ]
    );
    assert_eq!(plain.filters[0].target_minor, LS_CLASS_MINOR);
    // The limit changes: the class is changed in place, the filter kept.
    let tighter = sample_plan(&[with_qos(
        pod("ns/ls", Some("LS"), &["10.0.0.1"]),
        r#"{"egressLimit": "5M"}"#,
    )]);
    let changes = reconcile(&observed, &tighter);
    assert_eq!(
        changes.actions,
        vec![TcAction::ChangeClass(tighter.classes[4].clone())]
    );
    // Kinds for the metrics.
    assert_eq!(changes.actions[0].kind(), ("class", "change"));
    assert_eq!(
        TcAction::DeleteClass {
            handle: 0,
            parent: 0
        }
        .kind(),
        ("class", "delete")
    );
}

#[test]
fn pod_adapter_reads_the_network_qos_annotation() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ns", "name": "p",
                     "labels": {"koordinator.sh/qosClass": "LS"},
                     "annotations": {"koordinator.sh/networkQOS": "{\"egressLimit\": \"10M\"}"}},
        "status": {"phase": "Running", "podIP": "10.1.0.5"}
    }))
    .unwrap();
    assert_eq!(
        super::net_qos_pod(&pod).network_qos,
        PodNetworkQos::Limits(PodBandwidthLimits {
            ingress_bps: 0,
            egress_bps: 10_000_000
        })
    );
}

#[test]
fn metrics_report_decisions_rounds_and_refusals() {
    use super::metrics::NetQosMetrics;
    use koord_common::MetricsRegistry;
    let registry = MetricsRegistry::new("koordlet");
    let metrics = NetQosMetrics::register(&registry, "node-a");
    metrics.record_capability(&super::capability::NetQosCapability {
        supported: false,
        netlink: true,
        htb: Some(true),
        u32_classifier: Some(false),
        cgroup_classifier: None,
        detail: String::new(),
    });
    let pods = vec![
        with_qos(
            pod("ns/ls", Some("LS"), &["10.0.0.1"]),
            r#"{"egressLimit": "10M"}"#,
        ),
        pod("ns/be", Some("BE"), &["10.0.0.2", "10.0.0.3"]),
        with_qos(pod("ns/bad", Some("BE"), &["10.0.0.4"]), "{"),
    ];
    let spec = slo(
        Some("100M"),
        Some(cfg(true, pct(50), None)),
        Some(cfg(true, pct(5), pct(20))),
    );
    metrics.record_decision(&decide(Some(&spec), &pods, None));
    let mut report = super::RoundReport {
        applied: 3,
        deferred: 2,
        ..Default::default()
    };
    report.applied_by_kind.insert(("class", "add"), 2);
    report.applied_by_kind.insert(("filter", "add"), 1);
    report.failed.insert(("filter", "add"), 1);
    metrics.record_round(&report);
    metrics.record_round(&super::RoundReport::default());
    metrics.record_failed_round();
    let body = registry.encode().unwrap();
    for expected in [
        "koordlet_netqos_supported{node=\"node-a\"} 0",
        "koordlet_netqos_missing{node=\"node-a\",part=\"u32\"} 1",
        "koordlet_netqos_missing{node=\"node-a\",part=\"htb\"} 0",
        "koordlet_netqos_decision{node=\"node-a\",decision=\"apply\"} 1",
        "koordlet_netqos_decision{node=\"node-a\",decision=\"leave\"} 0",
        "koordlet_netqos_total_bandwidth_bits_per_second{node=\"node-a\"} 100000000",
        "koordlet_netqos_class_bandwidth_bits_per_second{node=\"node-a\",class=\"be\",direction=\"egress\",bound=\"ceil\"} 20000000",
        "koordlet_netqos_class_bandwidth_bits_per_second{node=\"node-a\",class=\"ls\",direction=\"egress\",bound=\"rate\"} 50000000",
        "koordlet_netqos_class_bandwidth_bits_per_second{node=\"node-a\",class=\"root\",direction=\"egress\",bound=\"ceil\"} 100000000",
        "koordlet_netqos_class_bandwidth_bits_per_second{node=\"node-a\",class=\"ls\",direction=\"ingress\",bound=\"ceil\"} 100000000",
        "koordlet_netqos_classified_pods{node=\"node-a\",class=\"be\"} 2",
        "koordlet_netqos_classified_pods{node=\"node-a\",class=\"ls\"} 1",
        "koordlet_netqos_classified_pods{node=\"node-a\",class=\"system\"} 0",
        "koordlet_netqos_pod_classes{node=\"node-a\"} 1",
        "koordlet_netqos_filters{node=\"node-a\"} 4",
        "koordlet_netqos_refused_pods{node=\"node-a\",reason=\"invalid_annotation\"} 1",
        "koordlet_netqos_refused_pods{node=\"node-a\",reason=\"host_network\"} 0",
        "koordlet_netqos_rounds_total{node=\"node-a\",result=\"incomplete\"} 1",
        "koordlet_netqos_rounds_total{node=\"node-a\",result=\"unchanged\"} 1",
        "koordlet_netqos_rounds_total{node=\"node-a\",result=\"failed\"} 1",
        "koordlet_netqos_changes_total{node=\"node-a\",object=\"class\",op=\"add\"} 2",
        "koordlet_netqos_change_errors_total{node=\"node-a\",object=\"filter\",op=\"add\"} 1",
        "koordlet_netqos_deferred_changes{node=\"node-a\"} 0",
    ] {
        assert!(body.contains(expected), "{expected} missing in\n{body}");
    }
    // Nothing planned any more: the class figures go, the counts drop to 0.
    metrics.record_decision(&decide(Some(&slo(Some("100M"), None, None)), &pods, None));
    let body = registry.encode().unwrap();
    assert!(
        !body.contains("koordlet_netqos_class_bandwidth_bits_per_second{"),
        "{body}"
    );
    assert!(!body.contains("koordlet_netqos_total_bandwidth_bits_per_second{"));
    assert!(body.contains("koordlet_netqos_decision{node=\"node-a\",decision=\"remove\"} 1"));
    assert!(body.contains("koordlet_netqos_filters{node=\"node-a\"} 0"));
    assert!(!body.contains("koordlet_netqos_refused_pods{"));
}
