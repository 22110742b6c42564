//! Devices held by placed Reservations.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::tests::{device, minors};
use super::*;
use crate::cache::{Change, ClusterCache, Object};
use crate::framework::Scheduler;
use crate::testutil::{self, PodSpec, ReservationSpec, t0};

/// An Available reservation on n1 for `default/owner` holding GPU `minor`
/// whole; its allocatable lists only cpu, so only DeviceShare holds the GPU.
fn reservation(minor: i32, spec_extra: Value) -> Object {
    reservation_of(minor, 100, spec_extra)
}

/// As [`reservation`], holding `percent` of the GPU.
fn reservation_of(minor: i32, percent: i64, spec_extra: Value) -> Object {
    let share = percent.to_string();
    let allocated = json!({"gpu": [{"minor": minor, "resources": {
        "koordinator.sh/gpu-core": share, "koordinator.sh/gpu-memory-ratio": share}}]})
    .to_string();
    Object::Reservation(testutil::reservation(ReservationSpec {
        annotations: &[(ANNOTATION_DEVICE_ALLOCATED, &allocated)],
        spec_extra,
        status: testutil::available_on("n1", &[("cpu", "2")]),
        ..Default::default()
    }))
}

fn gpu_pod(name: &str, gpus: &str) -> Object {
    let requests = [("cpu", "1"), ("nvidia.com/gpu", gpus)];
    testutil::pod(PodSpec {
        name,
        requests: &requests,
        limits: &requests,
        ..Default::default()
    })
}

fn cluster(objects: Vec<Object>) -> Scheduler {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            testutil::node("n1", &[("cpu", "8"), ("nvidia.com/gpu", "2")]),
            device("n1", 2),
        ],
    );
    testutil::load(&mut s, objects);
    s
}

/// GPU minors the pod gets on n1.
fn gpus_of(s: &mut Scheduler, pod: &str) -> Result<Vec<i32>, String> {
    let reserved = s
        .reserve(&format!("default/{pod}"), "n1", t0())
        .map_err(|e| e.to_string())?;
    let allocations: BTreeMap<String, Vec<DeviceAllocation>> =
        serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
    Ok(allocations["gpu"].iter().map(|a| a.minor).collect())
}

#[test]
fn non_owners_cannot_take_a_reserved_gpu() {
    let mut s = cluster(vec![
        reservation(0, json!({})),
        gpu_pod("one", "1"),
        gpu_pod("two", "2"),
    ]);
    // Minor 0 would come first; the reservation holds it.
    assert_eq!(gpus_of(&mut s, "one").unwrap(), vec![1]);
    let mut s = cluster(vec![reservation(0, json!({})), gpu_pod("two", "2")]);
    let outcome = testutil::filter(&s, "default/two", t0());
    assert_eq!(outcome.failed["n1"], ERR_INSUFFICIENT_GPU_DEVICES);
    assert!(gpus_of(&mut s, "two").is_err());
}

#[test]
fn an_owner_gets_exactly_the_reserved_gpu() {
    let mut s = cluster(vec![reservation(1, json!({})), gpu_pod("owner", "1")]);
    // Left alone it would take minor 0.
    assert_eq!(gpus_of(&mut s, "owner").unwrap(), vec![1]);
    let bound = s.cache.pod("default/owner").unwrap();
    assert!(
        bound
            .annotations()
            .contains_key(apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED)
    );
    // Allocate-once: used up, it holds nothing more; the other GPU is free.
    testutil::load(&mut s, vec![gpu_pod("later", "1")]);
    assert_eq!(gpus_of(&mut s, "later").unwrap(), vec![0]);
}

#[test]
fn a_restricted_owner_cannot_go_beyond_the_reserved_gpu() {
    // Aligned (default): the reserved GPU plus the free one.
    let mut s = cluster(vec![reservation(1, json!({})), gpu_pod("owner", "2")]);
    assert_eq!(gpus_of(&mut s, "owner").unwrap(), vec![0, 1]);

    let restricted = json!({"allocatePolicy": "Restricted"});
    let mut s = cluster(vec![
        reservation(1, restricted.clone()),
        gpu_pod("owner", "2"),
    ]);
    let outcome = testutil::filter(&s, "default/owner", t0());
    assert_eq!(outcome.failed["n1"], ERR_INSUFFICIENT_GPU_DEVICES);
    assert!(gpus_of(&mut s, "owner").is_err());
    // Within it, the restricted owner still gets the reserved GPU.
    let mut s = cluster(vec![reservation(1, restricted), gpu_pod("owner", "1")]);
    assert_eq!(gpus_of(&mut s, "owner").unwrap(), vec![1]);
}

#[test]
fn an_expired_reservation_holds_no_gpu() {
    let mut s = cluster(vec![
        reservation(0, json!({"ttl": "1m"})),
        gpu_pod("one", "1"),
    ]);
    let later = t0() + std::time::Duration::from_secs(120);
    let reserved = s.reserve("default/one", "n1", later).unwrap();
    let allocations: BTreeMap<String, Vec<DeviceAllocation>> =
        serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
    assert_eq!(allocations["gpu"][0].minor, 0);
}

#[test]
fn a_placed_reservation_keeps_its_reserve_pods_gpu() {
    let mut s = cluster(vec![gpu_pod("one", "1")]);
    let pending = testutil::reservation(ReservationSpec {
        template: json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}),
        ..Default::default()
    });
    let placement = crate::placement::place_reservation(&mut s, &pending, t0());
    assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
    let placed = &s.cache.reservations["r1"];
    let kept = &placed.metadata.annotations.as_ref().unwrap()[ANNOTATION_DEVICE_ALLOCATED];
    let held: BTreeMap<String, Vec<DeviceAllocation>> = serde_json::from_str(kept).unwrap();
    assert_eq!(held["gpu"][0].minor, 0);
    // The placeholder is gone, yet a stranger does not get minor 0.
    assert_eq!(gpus_of(&mut s, "one").unwrap(), vec![1]);
}

fn share_pod(name: &str, labels: &[(&str, &str)]) -> Object {
    let requests = [
        ("cpu", "1"),
        ("koordinator.sh/gpu-core", "50"),
        ("koordinator.sh/gpu-memory-ratio", "50"),
    ];
    testutil::pod(PodSpec {
        name,
        requests: &requests,
        limits: &requests,
        labels,
        ..Default::default()
    })
}

/// GPU minor → core share the pod gets on n1.
fn shares_of_pod(s: &mut Scheduler, pod: &str) -> Result<Vec<(i32, String)>, String> {
    Ok(minors(s, pod)?
        .into_iter()
        .map(|(minor, core, _memory)| (minor, core))
        .collect())
}

#[test]
fn what_owners_use_of_an_allocate_many_reservation_is_counted_once() {
    // r1 holds half of GPU 1 for any pod labelled team=a, many times over.
    let owners = json!({"allocateOnce": false,
                        "owners": [{"labelSelector": {"matchLabels": {"team": "a"}}}]});
    let mut s = cluster(vec![
        reservation_of(1, 50, owners),
        share_pod("owner", &[("team", "a")]),
        share_pod("stranger", &[]),
        share_pod("late", &[("team", "a")]),
    ]);
    assert_eq!(
        shares_of_pod(&mut s, "owner").unwrap(),
        vec![(1, "50".to_string())]
    );
    // The owner's half is the reservation's half, counted once: GPU 1 still
    // has a free half, which the fullest-first rule gives the stranger.
    assert_eq!(
        shares_of_pod(&mut s, "stranger").unwrap(),
        vec![(1, "50".to_string())]
    );
    // Nothing is left in the reservation: a later owner goes to GPU 0.
    assert_eq!(
        shares_of_pod(&mut s, "late").unwrap(),
        vec![(0, "50".to_string())]
    );
}

#[test]
fn a_held_half_gpu_leaves_the_other_half_to_anyone() {
    let mut s = cluster(vec![
        reservation_of(1, 50, json!({})),
        share_pod("stranger", &[]),
        share_pod("second", &[]),
        gpu_pod("whole", "1"),
    ]);
    // GPU 1 is the fuller one (half held): shares go there first.
    assert_eq!(
        shares_of_pod(&mut s, "stranger").unwrap(),
        vec![(1, "50".to_string())]
    );
    assert_eq!(
        shares_of_pod(&mut s, "second").unwrap(),
        vec![(0, "50".to_string())]
    );
    assert!(gpus_of(&mut s, "whole").is_err());
}

#[test]
fn a_restricted_reservation_the_pod_must_use_bounds_its_gpus() {
    let three_gpus = || {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8"), ("nvidia.com/gpu", "3")]),
                device("n1", 3),
                reservation(1, json!({"allocatePolicy": "Restricted"})),
            ],
        );
        s
    };
    // Free to run outside it: two GPUs the reservation does not hold.
    let mut s = three_gpus();
    testutil::load(&mut s, vec![gpu_pod("owner", "2")]);
    assert_eq!(gpus_of(&mut s, "owner").unwrap(), vec![0, 2]);
    // Required to use it (reservation affinity): one reserved GPU is not two.
    let mut s = three_gpus();
    let requests = [("cpu", "1"), ("nvidia.com/gpu", "2")];
    testutil::load(
        &mut s,
        vec![testutil::pod(PodSpec {
            name: "owner",
            requests: &requests,
            limits: &requests,
            annotations: &[(
                apis::extension::reservation::ANNOTATION_RESERVATION_AFFINITY,
                r#"{"name": "r1"}"#,
            )],
            ..Default::default()
        })],
    );
    let outcome = testutil::filter(&s, "default/owner", t0());
    assert_eq!(
        outcome.failed["n1"], ERR_INSUFFICIENT_GPU_DEVICES,
        "{outcome:?}"
    );
}

/// Reservation `name` on `node` holding half of GPU 0, Available or not.
fn reservation_named(name: &str, node: &str, available: bool) -> Object {
    let allocated = json!({"gpu": [{"minor": 0, "resources": {
        "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}}]})
    .to_string();
    let status = if available {
        testutil::available_on(node, &[("cpu", "1")])
    } else {
        Value::Null
    };
    Object::Reservation(testutil::reservation(ReservationSpec {
        name,
        annotations: &[(ANNOTATION_DEVICE_ALLOCATED, &allocated)],
        status,
        ..Default::default()
    }))
}

/// The per-node index of placed reservations follows every Reservation
/// event (placed, moved to another node, pending again, deleted): after
/// each one it lists exactly the reservations a scan of all of them finds
/// on each node, in name order.
#[test]
fn reservations_by_node_follow_every_reservation_event() {
    let mut cache = ClusterCache::new();
    let mut plugin = DeviceShare::default();
    let nodes = ["n1", "n2", "n3"];
    let names = ["r1", "r2", "r3", "r4", "r5"];
    let mut rng = crate::testutil::Lcg(0x5eed);
    let mut next = |bound: usize| rng.below(bound as u64) as usize;
    for step in 0..2_000 {
        let name = names[next(names.len())];
        let change = match next(4) {
            0 => Change::Delete(reservation_named(name, "n1", false)),
            1 => Change::Upsert(reservation_named(name, nodes[next(3)], false)),
            _ => Change::Upsert(reservation_named(name, nodes[next(3)], true)),
        };
        let event = cache.apply(change);
        plugin.on_event(&event, &cache);
        for node in nodes {
            let mut scanned: Vec<&String> = plugin
                .reserved
                .iter()
                .filter(|(_, r)| r.holder.node == node)
                .map(|(name, _)| name)
                .collect();
            scanned.sort();
            let indexed: Vec<&String> = plugin.reserved_on(node).map(|(name, _)| name).collect();
            assert_eq!(indexed, scanned, "step {step}, {node}");
            assert_eq!(
                plugin.reserved_on.any_on(node),
                !scanned.is_empty(),
                "step {step}, {node}: an emptied node keeps no entry"
            );
        }
    }
}

/// n1 with 4 GPUs (`unhealthy`'s minor marked so), running `web-1` (app=web)
/// on GPU 2.
fn running_on_gpu_2(unhealthy: Option<i32>) -> Scheduler {
    let mut s = testutil::scheduler("");
    let Object::Device(mut devices) = device("n1", 4) else {
        unreachable!("device builds a Device");
    };
    for gpu in devices.spec.devices.iter_mut().flatten() {
        gpu.health = gpu.minor != unhealthy;
    }
    let allocated = json!({"gpu": [{"minor": 2, "resources": {
        "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}}]})
    .to_string();
    let requests = [("cpu", "1"), ("nvidia.com/gpu", "1")];
    testutil::load(
        &mut s,
        vec![
            testutil::node("n1", &[("cpu", "8"), ("nvidia.com/gpu", "4")]),
            Object::Device(devices),
            testutil::pod(PodSpec {
                name: "web-1",
                node: Some("n1"),
                requests: &requests,
                limits: &requests,
                labels: &[("app", "web")],
                annotations: &[(ANNOTATION_DEVICE_ALLOCATED, &allocated)],
                ..Default::default()
            }),
        ],
    );
    s
}

/// A pending pre-allocating (Restricted, allocate-many) reservation of one
/// GPU owned by app=web pods.
fn pre_allocating_one_gpu() -> apis::scheduling::v1alpha1::Reservation {
    testutil::reservation(ReservationSpec {
        template: json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}),
        spec_extra: json!({
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "preAllocation": true,
            "allocatePolicy": "Restricted",
            "allocateOnce": false,
        }),
        ..Default::default()
    })
}

#[test]
fn a_pre_allocating_reservation_takes_over_the_pods_gpu() {
    let mut s = running_on_gpu_2(None);
    let (placement, pre_allocated) =
        crate::placement::place_reservation_pre_allocating(&mut s, &pre_allocating_one_gpu(), t0());
    assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
    assert_eq!(pre_allocated.unwrap().pods.len(), 1);
    // Left alone it would take GPU 0; taking web-1 in, it holds web-1's.
    let placed = &s.cache.reservations["r1"];
    let kept = &placed.metadata.annotations.as_ref().unwrap()[ANNOTATION_DEVICE_ALLOCATED];
    let held: BTreeMap<String, Vec<DeviceAllocation>> = serde_json::from_str(kept).unwrap();
    assert_eq!(held["gpu"].iter().map(|a| a.minor).collect::<Vec<_>>(), [2]);
    // web-1 counts inside the reservation: a stranger gets a free GPU, and
    // three strangers' GPUs are all the node has left.
    testutil::load(&mut s, vec![gpu_pod("stranger", "3")]);
    assert_eq!(gpus_of(&mut s, "stranger").unwrap(), vec![0, 1, 3]);
    // With web-1 gone its GPU is the reservation's again, for an owner.
    let web = s.cache.pod("default/web-1").unwrap().pod.clone();
    s.apply(Change::Delete(Object::Pod((*web).clone())));
    let requests = [("cpu", "1"), ("nvidia.com/gpu", "1")];
    testutil::load(
        &mut s,
        vec![testutil::pod(PodSpec {
            name: "web-2",
            requests: &requests,
            limits: &requests,
            labels: &[("app", "web")],
            ..Default::default()
        })],
    );
    assert_eq!(gpus_of(&mut s, "web-2").unwrap(), vec![2]);
}

#[test]
fn a_reservation_that_cannot_get_the_pods_gpu_is_refused() {
    // GPU 2 turned unhealthy under web-1: the reservation cannot take it.
    let mut s = running_on_gpu_2(Some(2));
    let (placement, pre_allocated) =
        crate::placement::place_reservation_pre_allocating(&mut s, &pre_allocating_one_gpu(), t0());
    assert_eq!(placement.node, None, "{placement:?}");
    assert!(pre_allocated.is_none());
    assert_eq!(placement.reasons["n1"], ERR_DEVICES_NOT_TAKEN_OVER);
    let web = s.cache.pod("default/web-1").unwrap();
    assert_eq!(allocated_from(web), None);
}
