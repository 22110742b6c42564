#![allow(clippy::unwrap_used)]

use std::time::Duration;

use apis::scheduling_sigs::v1alpha1::PodGroupPhase;
use serde_json::{Value, json};

use super::*;
use crate::cache::{Change, Object};
use crate::framework::Scheduler;
use crate::placement::schedule_one;
use crate::testutil::{self, PodSpec, rfc3339, t0};

const NAME_KEY: &str = "gang.scheduling.koordinator.sh/name";
const MIN_KEY: &str = "gang.scheduling.koordinator.sh/min-available";
const PG_LABEL: &str = "pod-group.scheduling.sigs.k8s.io";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A 2-cpu pod (one per node in [`cluster`]).
fn member(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Object {
    testutil::pod(PodSpec {
        name,
        requests: &[("cpu", "2")],
        labels,
        annotations,
        ..Default::default()
    })
}

fn bound_member(name: &str, node: &str, annotations: &[(&str, &str)]) -> Object {
    testutil::pod(PodSpec {
        name,
        node: Some(node),
        requests: &[("cpu", "2")],
        annotations,
        ..Default::default()
    })
}

fn gang_member(name: &str, min: &str) -> Object {
    member(name, &[(NAME_KEY, "job"), (MIN_KEY, min)], &[])
}

/// `nodes` nodes of 2 cpus each: room for one member per node.
fn cluster(nodes: usize) -> Scheduler {
    cluster_with("", nodes)
}

/// `cluster(nodes)` with `objects` loaded.
fn loaded_cluster(nodes: usize, objects: Vec<Object>) -> Scheduler {
    let mut s = cluster(nodes);
    testutil::load(&mut s, objects);
    s
}

fn cluster_with(config: &str, nodes: usize) -> Scheduler {
    let mut s = testutil::scheduler(config);
    for i in 0..nodes {
        testutil::load(
            &mut s,
            vec![testutil::node(
                &format!("n{i}"),
                &[("cpu", "2"), ("memory", "8Gi")],
            )],
        );
    }
    s
}

fn schedule_all(s: &mut Scheduler, keys: &[&str], now: SystemTime) -> Vec<Option<String>> {
    keys.iter()
        .map(|k| schedule_one(s, k, now, true).node)
        .collect()
}

fn pod_group(name: &str, spec: Value, annotations: Value, status: Value) -> Object {
    Object::PodGroup(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": spec,
            "status": status,
        }))
        .unwrap(),
    )
}

/// The rejection every node got, or `None` when the pod passed filter.
fn rejection(s: &Scheduler, key: &str, now: SystemTime) -> Option<(String, bool)> {
    let outcome = testutil::filter(s, key, now);
    if let Some(reason) = outcome.failed_unresolvable.values().next() {
        return Some((reason.to_string(), true));
    }
    outcome.failed.get("n0").map(|r| (r.to_string(), false))
}

#[test]
fn a_gang_of_three_on_room_for_two_binds_nobody() {
    let mut s = loaded_cluster(
        2,
        vec![
            gang_member("a", "3"),
            gang_member("b", "3"),
            gang_member("c", "3"),
        ],
    );
    for key in ["default/a", "default/b", "default/c"] {
        let placement = schedule_one(&mut s, key, t0(), true);
        assert_eq!(placement.node, None);
        let reason = &placement.reasons["n0"];
        assert_eq!(
            reason,
            "waiting for gang default/job: only 2 of 3 members can be placed together"
        );
    }
    assert!(s.cache.pods().all(|p| p.node.is_none()));
}

#[test]
fn a_gang_that_fits_binds_every_member() {
    let mut s = loaded_cluster(
        3,
        vec![
            gang_member("a", "3"),
            gang_member("b", "3"),
            gang_member("c", "3"),
        ],
    );
    // (The extender leaves cpu to kube-scheduler, so nodes are not checked.)
    let nodes = schedule_all(&mut s, &["default/a", "default/b", "default/c"], t0());
    assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
}

#[test]
fn members_wait_until_enough_exist_and_pod_groups_set_min_member() {
    let mut s = loaded_cluster(4, vec![gang_member("a", "2")]);
    let first = schedule_one(&mut s, "default/a", t0(), true);
    assert_eq!(first.node, None);
    assert_eq!(
        first.reasons["n0"],
        "waiting for gang default/job: 1 of 2 members exist"
    );
    testutil::load(&mut s, vec![gang_member("b", "2")]);
    assert!(
        schedule_all(&mut s, &["default/a", "default/b"], t0())
            .iter()
            .all(Option::is_some)
    );

    // A PodGroup gang: min-member from the CR; a missing CR holds the pod.
    let pg = [(PG_LABEL, "pg")];
    testutil::load(&mut s, vec![member("x", &[], &pg), member("y", &[], &pg)]);
    let held = schedule_one(&mut s, "default/x", t0(), true);
    assert!(
        held.reasons["n0"].contains("can't find gang, gangName: default/pg"),
        "{:?}",
        held.reasons
    );
    testutil::load(
        &mut s,
        vec![pod_group(
            "pg",
            json!({"minMember": 2}),
            json!({}),
            json!({}),
        )],
    );
    assert!(
        schedule_all(&mut s, &["default/x", "default/y"], t0())
            .iter()
            .all(Option::is_some)
    );
}

#[test]
fn malformed_gang_settings_are_unresolvable() {
    let s = loaded_cluster(
        1,
        vec![member("bad", &[(NAME_KEY, "job"), (MIN_KEY, "two")], &[])],
    );
    let (reason, unresolvable) = rejection(&s, "default/bad", t0()).unwrap();
    assert!(unresolvable);
    assert!(
        reason.starts_with("invalid gang settings of default/job"),
        "{reason}"
    );
}

fn grouped(name: &str, gang: &str, min: &str) -> Object {
    member(
        name,
        &[
            (NAME_KEY, gang),
            (MIN_KEY, min),
            (
                "gang.scheduling.koordinator.sh/groups",
                r#"["default/ps","default/worker"]"#,
            ),
        ],
        &[],
    )
}

fn group_members() -> Vec<Object> {
    vec![
        grouped("ps-0", "ps", "1"),
        grouped("worker-0", "worker", "2"),
        grouped("worker-1", "worker", "2"),
    ]
}

#[test]
fn a_gang_group_binds_only_when_every_gang_fits_together() {
    // Room for 2 of the 3 pods the group needs: nobody binds, not even the
    // ps gang that would be complete on its own.
    let mut s = cluster(2);
    testutil::load(&mut s, group_members());
    let keys = ["default/ps-0", "default/worker-0", "default/worker-1"];
    for key in keys {
        let placement = schedule_one(&mut s, key, t0(), true);
        assert_eq!(placement.node, None, "{key}");
        assert!(
            placement.reasons["n0"].starts_with("waiting for gang default/"),
            "{:?}",
            placement.reasons
        );
    }
    assert_eq!(
        schedule_one(&mut s, "default/ps-0", t0(), true).reasons["n0"],
        "waiting for gang default/worker: only 1 of 2 members can be placed together"
    );

    // With a third node the whole group binds.
    let mut s = cluster(3);
    testutil::load(&mut s, group_members());
    let nodes = schedule_all(&mut s, &keys, t0());
    assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
}

#[test]
fn a_gang_group_waits_for_a_gang_with_too_few_members() {
    let mut s = loaded_cluster(
        4,
        vec![
            grouped("ps-0", "ps", "1"),
            grouped("worker-0", "worker", "2"),
        ],
    );
    let (reason, unresolvable) = rejection(&s, "default/ps-0", t0()).unwrap();
    assert!(unresolvable);
    assert_eq!(
        reason,
        "waiting for gang default/worker: 1 of 2 members exist"
    );
    // A group naming a gang that has no member and no PodGroup.
    testutil::load(
        &mut s,
        vec![member(
            "lonely",
            &[
                (NAME_KEY, "a"),
                (MIN_KEY, "1"),
                (
                    "gang.scheduling.koordinator.sh/groups",
                    r#"["default/a","default/ghost"]"#,
                ),
            ],
            &[],
        )],
    );
    let (reason, _) = rejection(&s, "default/lonely", t0()).unwrap();
    assert_eq!(
        reason,
        "waiting for gang group [default/a,default/ghost]: gang default/ghost doesn't exist"
    );
}

fn policy_member(name: &str, policy: &str) -> Object {
    member(
        name,
        &[
            (NAME_KEY, "job"),
            (MIN_KEY, "2"),
            ("gang.scheduling.koordinator.sh/match-policy", policy),
        ],
        &[],
    )
}

fn policy_bound(name: &str, node: &str, policy: &str) -> Object {
    bound_member(
        name,
        node,
        &[
            (NAME_KEY, "job"),
            (MIN_KEY, "2"),
            ("gang.scheduling.koordinator.sh/match-policy", policy),
        ],
    )
}

#[test]
fn match_policies_decide_which_members_count() {
    // One member running, one new pending: min-member is 2.
    let held = |policy: &str| {
        let s = loaded_cluster(
            3,
            vec![
                policy_bound("run-0", "n0", policy),
                policy_member("new-0", policy),
            ],
        );
        rejection(&s, "default/new-0", t0())
    };
    // waiting-and-running: the running member counts, so one more is enough.
    assert_eq!(held("waiting-and-running"), None);
    // once-satisfied: a member was bound, so the gang is satisfied for good.
    assert_eq!(held("once-satisfied"), None);
    // only-waiting: only members waiting together count.
    assert_eq!(
        held("only-waiting"),
        Some((
            "waiting for gang default/job: only 1 of 2 members can be placed together".into(),
            false
        ))
    );

    // Two only-waiting members pending together do pass.
    let mut s = loaded_cluster(
        3,
        vec![
            policy_bound("run-0", "n0", "only-waiting"),
            policy_member("new-0", "only-waiting"),
            policy_member("new-1", "only-waiting"),
        ],
    );
    let nodes = schedule_all(&mut s, &["default/new-0", "default/new-1"], t0());
    assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
}

#[test]
fn once_satisfied_outlives_its_members_but_waiting_and_running_does_not() {
    let after_the_running_member_left = |policy: &str| {
        let mut s = cluster(3);
        let running = policy_bound("run-0", "n0", policy);
        testutil::load(
            &mut s,
            vec![running.clone(), policy_member("new-0", policy)],
        );
        s.apply(Change::Delete(running));
        rejection(&s, "default/new-0", t0())
    };
    assert_eq!(after_the_running_member_left("once-satisfied"), None);
    assert_eq!(
        after_the_running_member_left("waiting-and-running"),
        Some((
            "waiting for gang default/job: 1 of 2 members exist".into(),
            true
        ))
    );
}

#[test]
fn the_default_match_policy_comes_from_the_plugin_args() {
    let config = testutil::only(NAME, "{defaultMatchPolicy: only-waiting}");
    let mut s = cluster_with(&config, 3);
    testutil::load(
        &mut s,
        vec![
            bound_member("run-0", "n0", &[(NAME_KEY, "job"), (MIN_KEY, "2")]),
            gang_member("new-0", "2"),
        ],
    );
    assert!(rejection(&s, "default/new-0", t0()).is_some());
}

#[test]
fn plugin_args_are_validated() {
    let build_with = |args: Value| build(Some(&args)).map(|_| ());
    assert!(build_with(json!({"defaultTimeout": "-1s"})).is_err());
    assert!(build_with(json!({"controllerWorkers": 0})).is_err());
    assert!(build_with(json!({"defaultMatchPolicy": "sometimes"})).is_err());
    assert!(
        build_with(json!({"defaultTimeout": "30s", "controllerWorkers": 2, "defaultMatchPolicy": "waiting-and-running"}))
            .is_ok()
    );
    let defaults = CoschedulingArgs::default().defaults().unwrap();
    assert_eq!(defaults.timeout, secs(600));
    assert_eq!(defaults.match_policy, GangMatchPolicy::OnceSatisfied);
}

fn timed_member(name: &str, wait: &str, mode: &str) -> Object {
    member(
        name,
        &[
            (NAME_KEY, "job"),
            (MIN_KEY, "3"),
            ("gang.scheduling.koordinator.sh/waiting-time", wait),
            ("gang.scheduling.koordinator.sh/mode", mode),
        ],
        &[],
    )
}

#[test]
fn a_gang_that_cannot_complete_within_its_waiting_time_is_rejected() {
    let mut s = loaded_cluster(
        2,
        vec![
            timed_member("a", "30s", "Strict"),
            timed_member("b", "30s", "Strict"),
            timed_member("c", "30s", "Strict"),
        ],
    );
    // Two of three fit: the gang starts waiting at t0.
    let (reason, unresolvable) = rejection(&s, "default/a", t0()).unwrap();
    assert!(!unresolvable);
    assert!(reason.contains("only 2 of 3"), "{reason}");
    // Still within the waiting time.
    let (_, unresolvable) = rejection(&s, "default/b", t0() + secs(29)).unwrap();
    assert!(!unresolvable);
    // Past it: every member is rejected for good, even once room appears.
    testutil::load(&mut s, vec![testutil::node("n9", &[("cpu", "2")])]);
    for key in ["default/a", "default/b", "default/c"] {
        let (reason, unresolvable) = rejection(&s, key, t0() + secs(30)).unwrap();
        assert!(unresolvable, "{key}");
        assert_eq!(
            reason,
            "gang default/job timed out: its members did not become schedulable together within 30s"
        );
    }
}

#[test]
fn a_gang_whose_members_never_fit_does_not_start_its_clock() {
    // Upstream's clock starts when a member waits in Permit; here when a
    // member could be placed but the rest could not.
    let gang = [
        (NAME_KEY, "job"),
        (MIN_KEY, "2"),
        ("gang.scheduling.koordinator.sh/waiting-time", "10s"),
    ];
    let s = loaded_cluster(
        1,
        vec![
            member("big-a", &gang, &[]),
            member("big-b", &gang, &[]),
            // Fills the only node.
            bound_member("other", "n0", &[]),
        ],
    );
    assert!(!rejection(&s, "default/big-a", t0()).unwrap().1);
    assert!(!rejection(&s, "default/big-a", t0() + secs(60)).unwrap().1);
}

#[test]
fn a_pod_group_times_out_from_its_schedule_start_time() {
    let mut s = cluster(3);
    let pg = [(PG_LABEL, "train")];
    testutil::load(
        &mut s,
        vec![
            member("t-0", &[], &pg),
            member("t-1", &[], &pg),
            pod_group(
                "train",
                json!({"minMember": 4, "scheduleTimeoutSeconds": 60}),
                json!({}),
                json!({"phase": "Scheduling", "scheduleStartTime": rfc3339(t0() - secs(61))}),
            ),
        ],
    );
    let (reason, unresolvable) = rejection(&s, "default/t-0", t0()).unwrap();
    assert!(unresolvable);
    assert_eq!(
        reason,
        "gang default/train timed out: its members did not become schedulable together within 1m0s"
    );
    // A group already scheduled keeps its scheduleStartTime but is not timed out.
    testutil::load(
        &mut s,
        vec![pod_group(
            "train",
            json!({"minMember": 2, "scheduleTimeoutSeconds": 60}),
            json!({}),
            json!({"phase": "Running", "scheduleStartTime": rfc3339(t0() - secs(600))}),
        )],
    );
    assert_eq!(rejection(&s, "default/t-0", t0()), None);
}

#[test]
fn the_timeout_annotation_rejects_the_pod() {
    let s = loaded_cluster(
        2,
        vec![member(
            "late",
            &[
                (NAME_KEY, "job"),
                (MIN_KEY, "1"),
                ("gang.scheduling.koordinator.sh/timeout", "true"),
            ],
            &[],
        )],
    );
    let (reason, unresolvable) = rejection(&s, "default/late", t0()).unwrap();
    assert!(unresolvable);
    assert!(reason.starts_with("gang default/job timed out"), "{reason}");
}

fn group_timeout_members(mode: &str) -> Vec<Object> {
    // ps waits 10s, worker 1h; they form one group. Only 2 of the 3 fit.
    let grouped = |name: &str, gang: &str, min: &str, wait: &str| {
        member(
            name,
            &[
                (NAME_KEY, gang),
                (MIN_KEY, min),
                ("gang.scheduling.koordinator.sh/mode", mode),
                ("gang.scheduling.koordinator.sh/waiting-time", wait),
                (
                    "gang.scheduling.koordinator.sh/groups",
                    r#"["default/ps","default/worker"]"#,
                ),
            ],
            &[],
        )
    };
    vec![
        grouped("ps-0", "ps", "1", "10s"),
        grouped("worker-0", "worker", "2", "1h"),
        grouped("worker-1", "worker", "2", "1h"),
    ]
}

#[test]
fn strict_rejects_the_whole_group_when_one_gang_times_out_non_strict_keeps_the_rest_waiting() {
    for (mode, worker_unresolvable) in [("Strict", true), ("NonStrict", false)] {
        let mut s = cluster(2);
        testutil::load(&mut s, group_timeout_members(mode));
        assert!(rejection(&s, "default/worker-0", t0()).is_some());
        let later = t0() + secs(11);
        let (ps_reason, ps_unresolvable) = rejection(&s, "default/ps-0", later).unwrap();
        assert!(ps_unresolvable, "{mode}");
        assert!(
            ps_reason.starts_with("gang default/ps timed out"),
            "{ps_reason}"
        );
        let (worker_reason, unresolvable) = rejection(&s, "default/worker-0", later).unwrap();
        assert_eq!(unresolvable, worker_unresolvable, "{mode}: {worker_reason}");
        assert!(
            worker_reason.contains("gang default/ps timed out"),
            "{worker_reason}"
        );
    }
}

fn mode_member(name: &str, mode: &str) -> Object {
    member(
        name,
        &[
            (NAME_KEY, "job"),
            (MIN_KEY, "3"),
            ("gang.scheduling.koordinator.sh/mode", mode),
            (
                "gang.scheduling.koordinator.sh/match-policy",
                "waiting-and-running",
            ),
        ],
        &[],
    )
}

#[test]
fn strict_revokes_an_admitted_batch_that_no_longer_fits_non_strict_lets_members_go_on() {
    for mode in ["Strict", "NonStrict"] {
        let mut s = loaded_cluster(
            3,
            vec![
                mode_member("a", mode),
                mode_member("b", mode),
                mode_member("c", mode),
            ],
        );
        // The group is admitted and a binds.
        assert!(schedule_one(&mut s, "default/a", t0(), true).node.is_some());
        // Someone else takes a node meant for the gang.
        testutil::load(&mut s, vec![bound_member("intruder", "n2", &[])]);
        let b = rejection(&s, "default/b", t0());
        match mode {
            "Strict" => assert_eq!(
                b,
                Some((
                    "waiting for gang default/job: only 2 of 3 members can be placed together"
                        .into(),
                    false
                )),
                "{mode}"
            ),
            _ => {
                assert_eq!(b, None, "{mode}");
                assert!(schedule_one(&mut s, "default/b", t0(), true).node.is_some());
            }
        }
    }
}

#[test]
fn admitted_members_of_one_group_are_placed_before_another_group_is_admitted() {
    let mut s = loaded_cluster(
        3,
        vec![
            gang_member("a", "2"),
            gang_member("b", "2"),
            member("x", &[(NAME_KEY, "other"), (MIN_KEY, "2")], &[]),
            member("y", &[(NAME_KEY, "other"), (MIN_KEY, "2")], &[]),
        ],
    );
    // job is admitted (a on n0, b expected on n1): only one node is left.
    assert!(schedule_one(&mut s, "default/a", t0(), true).node.is_some());
    let (reason, _) = rejection(&s, "default/x", t0()).unwrap();
    assert_eq!(
        reason,
        "waiting for gang default/other: only 1 of 2 members can be placed together"
    );
    assert!(schedule_one(&mut s, "default/b", t0(), true).node.is_some());
}

fn owned_member(name: &str, phase: Option<&str>, node: Option<&str>) -> Object {
    let mut value = json!({
        "metadata": {
            "namespace": "default", "name": name, "uid": format!("uid-{name}"),
            "labels": {PG_LABEL: "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-job", "uid": "j1"}],
        },
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}]},
    });
    if let Some(node) = node {
        value["spec"]["nodeName"] = json!(node);
    }
    if let Some(phase) = phase {
        value["status"] = json!({"phase": phase});
    }
    Object::Pod(serde_json::from_value(value).unwrap())
}

/// Applies the write to the cached PodGroup, as the watch would.
fn land(s: &mut Scheduler, writes: &[StatusWrite]) {
    for write in writes {
        let mut group = serde_json::to_value(&*s.cache.pod_groups["default/train"]).unwrap();
        group["status"] = write.patch["status"].clone();
        s.apply(Change::Upsert(Object::PodGroup(
            serde_json::from_value(group).unwrap(),
        )));
    }
}

fn status_of(writes: &[StatusWrite]) -> &Value {
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].resource, POD_GROUP_RESOURCE);
    assert_eq!(writes[0].namespace.as_deref(), Some("default"));
    assert_eq!(writes[0].name, "train");
    &writes[0].patch["status"]
}

#[test]
fn pod_group_status_follows_its_members() {
    let mut s = cluster(3);
    let group = pod_group("train", json!({"minMember": 2}), json!({}), json!({}));
    testutil::load(&mut s, vec![group, owned_member("t-0", None, None)]);
    // One member of two: Pending.
    let writes = s.pending_status_writes(t0());
    assert_eq!(status_of(&writes), &json!({"phase": "Pending"}));
    // Nothing new within the write interval, nor the same write while it
    // may still be on its way.
    assert!(
        s.pending_status_writes(t0() + Duration::from_millis(500))
            .is_empty()
    );
    assert!(s.pending_status_writes(t0() + secs(2)).is_empty());
    // The watch never showed it: written again, then it lands.
    let writes = s.pending_status_writes(t0() + secs(12));
    assert_eq!(status_of(&writes), &json!({"phase": "Pending"}));
    land(&mut s, &writes);

    // Enough members: scheduling starts (upstream passes PreScheduling).
    testutil::load(&mut s, vec![owned_member("t-1", None, None)]);
    let writes = s.pending_status_writes(t0() + secs(14));
    assert_eq!(
        status_of(&writes),
        &json!({
            "phase": "Scheduling",
            "occupiedBy": "default/train-job",
            "scheduled": 0,
            "running": 0,
            "succeeded": 0,
            "failed": 0,
            "scheduleStartTime": rfc3339(t0() + secs(14)),
        })
    );
    land(&mut s, &writes);

    // Both bound: Scheduled; both running: Running.
    let nodes = schedule_all(&mut s, &["default/t-0", "default/t-1"], t0() + secs(15));
    assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
    let writes = s.pending_status_writes(t0() + secs(16));
    let status = status_of(&writes);
    assert_eq!(status["phase"], "Scheduled");
    assert_eq!(status["scheduled"], 2);
    land(&mut s, &writes);
    testutil::load(
        &mut s,
        vec![
            owned_member("t-0", Some("Running"), Some("n0")),
            owned_member("t-1", Some("Running"), Some("n1")),
        ],
    );
    let writes = s.pending_status_writes(t0() + secs(18));
    let status = status_of(&writes);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["running"], 2);
    assert_eq!(
        status["scheduleStartTime"],
        rfc3339(t0() + secs(14)).as_str()
    );
    land(&mut s, &writes);

    // One member done: still Running (one succeeded + one running).
    testutil::load(
        &mut s,
        vec![owned_member("t-0", Some("Succeeded"), Some("n0"))],
    );
    let writes = s.pending_status_writes(t0() + secs(20));
    let status = status_of(&writes);
    assert_eq!(status["phase"], "Running", "{status}");
    assert_eq!(
        (&status["running"], &status["succeeded"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(status["scheduled"], 2);
    land(&mut s, &writes);
    // Both done: Finished, a final phase.
    testutil::load(
        &mut s,
        vec![owned_member("t-1", Some("Succeeded"), Some("n1"))],
    );
    let writes = s.pending_status_writes(t0() + secs(22));
    let status = status_of(&writes);
    assert_eq!(status["phase"], "Finished", "{status}");
    assert_eq!(
        (&status["running"], &status["succeeded"]),
        (&json!(0), &json!(2))
    );
    land(&mut s, &writes);
    // Deleting the finished pods changes nothing any more.
    for name in ["t-0", "t-1"] {
        s.apply(Change::Delete(owned_member(
            name,
            Some("Succeeded"),
            Some("n0"),
        )));
    }
    assert!(s.pending_status_writes(t0() + secs(40)).is_empty());
}

#[test]
fn a_failed_member_fails_the_group_once_every_member_has_started() {
    let group = pod_group("train", json!({"minMember": 2}), json!({}), json!({}));
    let mut s = loaded_cluster(2, vec![group]);
    // The scheduler restarts after the pods ran: the list brings one running
    // and one failed member; the failed one no longer holds resources but
    // still counts for the group.
    testutil::load(
        &mut s,
        vec![
            owned_member("t-0", Some("Running"), Some("n0")),
            owned_member("t-1", Some("Failed"), Some("n1")),
        ],
    );
    let writes = s.pending_status_writes(t0());
    let status = status_of(&writes);
    assert_eq!(status["phase"], "Failed", "{status}");
    assert_eq!(
        (&status["scheduled"], &status["running"], &status["failed"]),
        (&json!(2), &json!(1), &json!(1))
    );
    assert!(s.cache.pod("default/t-1").is_none());
}

#[test]
fn deleted_ended_members_leave_the_counts() {
    let group = pod_group("train", json!({"minMember": 3}), json!({}), json!({}));
    let mut s = loaded_cluster(2, vec![group]);
    testutil::load(
        &mut s,
        vec![
            owned_member("t-0", Some("Running"), Some("n0")),
            owned_member("t-1", Some("Succeeded"), Some("n1")),
            owned_member("t-2", None, None),
        ],
    );
    let writes = s.pending_status_writes(t0());
    let status = status_of(&writes);
    assert_eq!(
        (&status["phase"], &status["succeeded"]),
        (&json!("Scheduling"), &json!(1))
    );
    assert_eq!(status["scheduled"], 2);
    land(&mut s, &writes);
    s.apply(Change::Delete(owned_member(
        "t-1",
        Some("Succeeded"),
        Some("n1"),
    )));
    let writes = s.pending_status_writes(t0() + secs(2));
    let status = status_of(&writes);
    assert_eq!(
        (&status["succeeded"], &status["scheduled"]),
        (&json!(0), &json!(1))
    );
}

#[test]
fn desired_status_is_stable_once_reached() {
    let group = pod_group(
        "train",
        json!({"minMember": 2}),
        json!({}),
        json!({"phase": "Running", "scheduled": 2, "running": 2, "succeeded": 0, "failed": 0, "occupiedBy": "default/train-job"}),
    );
    let Object::PodGroup(group) = group else {
        unreachable!()
    };
    let members = Members {
        total: 2,
        scheduled: 2,
        running: 2,
        occupied_by: Some("default/train-job".into()),
        ..Members::default()
    };
    let status = desired_status(&group, &members, t0());
    assert_eq!(Some(&status), group.status.as_ref());
    assert_eq!(status.phase, Some(PodGroupPhase::Running));
    // All members gone: back to Pending, counts kept as upstream leaves them.
    let gone = desired_status(&group, &Members::default(), t0());
    assert_eq!(gone.phase, Some(PodGroupPhase::Pending));
}

#[test]
fn members_of_a_timed_out_gang_get_the_timeout_annotation_once() {
    let mut s = loaded_cluster(
        2,
        vec![
            timed_member("a", "30s", "Strict"),
            timed_member("b", "30s", "Strict"),
            timed_member("c", "30s", "Strict"),
        ],
    );
    // Starts the clock; nothing is due yet.
    assert!(rejection(&s, "default/a", t0()).is_some());
    assert!(s.pending_status_writes(t0() + secs(10)).is_empty());

    let writes = s.pending_status_writes(t0() + secs(31));
    let mut pods: Vec<&str> = writes.iter().map(|w| w.name.as_str()).collect();
    pods.sort();
    assert_eq!(pods, ["a", "b", "c"]);
    for write in &writes {
        assert_eq!(write.resource, POD_RESOURCE);
        assert_eq!(write.namespace.as_deref(), Some("default"));
        assert_eq!(
            write.patch,
            json!({"metadata": {"annotations": {"gang.scheduling.koordinator.sh/timeout": "true"}}})
        );
    }
    assert!(s.pending_status_writes(t0() + secs(40)).is_empty());
    // The watch never showed the annotation: written again.
    assert_eq!(s.pending_status_writes(t0() + secs(42)).len(), 3);
}

#[test]
fn a_member_too_big_for_any_node_does_not_hold_back_a_gang_with_spare_members() {
    let gang = [(NAME_KEY, "job"), (MIN_KEY, "2")];
    // The gang's `members` and one more member too big for any node.
    let with_huge = |members: &[&str]| {
        let mut objects = vec![testutil::pod(PodSpec {
            name: "huge",
            requests: &[("cpu", "64")],
            annotations: &gang,
            ..Default::default()
        })];
        objects.extend(members.iter().map(|name| member(name, &gang, &[])));
        loaded_cluster(2, objects)
    };
    let s = with_huge(&["a", "b"]);
    // The gang completes with a and b; huge's own fit is left to the
    // resource filters (kube-scheduler's for cpu).
    assert_eq!(rejection(&s, "default/huge", t0()), None);
    // Without the spare members, the gang cannot complete.
    let s = with_huge(&["a"]);
    assert_eq!(
        rejection(&s, "default/a", t0()),
        Some((
            "waiting for gang default/job: only 1 of 2 members can be placed together".into(),
            false
        ))
    );
}

#[test]
fn packing_resumes_per_request_without_skipping_room() {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            testutil::node("n0", &[("cpu", "2")]),
            testutil::node("n1", &[("cpu", "4")]),
        ],
    );
    let pod = |cpu: &str| {
        let Object::Pod(pod) = testutil::pod(PodSpec {
            requests: &[("cpu", cpu)],
            ..Default::default()
        }) else {
            unreachable!()
        };
        Arc::new(PodInfo::new(Arc::new(pod)))
    };
    let pods = [pod("3"), pod("1"), pod("1"), pod("1"), pod("3"), pod("1")];
    let refs: Vec<&Arc<PodInfo>> = pods.iter().collect();
    // 3 → n1 (1 left); 1 → n0, 1 → n0 (full); 1 → n1 (full); 3 and 1 → none.
    assert_eq!(
        first_fit(&[], &refs, &s.cache),
        [true, true, true, true, false, false]
    );
    // Pods ahead take their room first.
    assert_eq!(first_fit(&refs[..1], &refs[1..2], &s.cache), [true]);
    assert_eq!(first_fit(&refs[..4], &refs[5..], &s.cache), [false]);
}

#[test]
fn a_member_binding_ends_the_wait() {
    let waiting = |name: &str, node: Option<&str>| {
        testutil::pod(PodSpec {
            name,
            node,
            requests: &[("cpu", "2")],
            annotations: &[
                (NAME_KEY, "job"),
                (MIN_KEY, "2"),
                ("gang.scheduling.koordinator.sh/waiting-time", "30s"),
                (
                    "gang.scheduling.koordinator.sh/match-policy",
                    "waiting-and-running",
                ),
            ],
            ..Default::default()
        })
    };
    let mut s = loaded_cluster(1, vec![waiting("a", None), waiting("b", None)]);
    // One of two fits: the clock starts at t0.
    assert!(!rejection(&s, "default/a", t0()).unwrap().1);
    // a binds (the gang made progress), later it is gone again while b
    // still waits.
    let bound = waiting("a", Some("n0"));
    testutil::load(&mut s, vec![bound.clone()]);
    s.apply(Change::Delete(bound));
    // With a new member an hour later the gang starts a fresh wait instead
    // of being timed out by the old clock.
    testutil::load(&mut s, vec![waiting("c", None)]);
    let (reason, unresolvable) = rejection(&s, "default/c", t0() + secs(3600)).unwrap();
    assert!(!unresolvable, "{reason}");
    assert!(reason.contains("only 1 of 2"), "{reason}");
}

/// `object` (a Node or Pod) with `extra` merged into its spec.
fn with_spec(object: Object, extra: Value) -> Object {
    let merge = |mut value: Value| {
        for (key, field) in extra.as_object().unwrap() {
            value["spec"][key] = field.clone();
        }
        value
    };
    match object {
        Object::Node(node) => Object::Node(
            serde_json::from_value(merge(serde_json::to_value(node).unwrap())).unwrap(),
        ),
        Object::Pod(pod) => {
            Object::Pod(serde_json::from_value(merge(serde_json::to_value(pod).unwrap())).unwrap())
        }
        other => other,
    }
}

/// A 2-cpu node with `labels` and `spec`.
fn labeled_node(name: &str, labels: Value, spec: Value) -> Object {
    Object::Node(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}}
        }))
        .unwrap(),
    )
}

fn gang_of_three(extra_spec: Value) -> Vec<Object> {
    ["a", "b", "c"]
        .iter()
        .map(|name| with_spec(gang_member(name, "3"), extra_spec.clone()))
        .collect()
}

const HELD_TWO_OF_THREE: &str =
    "waiting for gang default/job: only 2 of 3 members can be placed together";

/// Every member's verdict: `None` = passed, else the held reason.
fn verdicts(s: &Scheduler, keys: &[&str]) -> Vec<Option<String>> {
    keys.iter()
        .map(|key| rejection(s, key, t0()).map(|(reason, _)| reason))
        .collect()
}

const GANG_KEYS: [&str; 3] = ["default/a", "default/b", "default/c"];

#[test]
fn a_node_tainted_against_the_members_does_not_count_for_the_gang() {
    let control_plane = labeled_node(
        "n2",
        json!({}),
        json!({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}),
    );
    // Two plain nodes and the tainted one: room for 3 members, usable for 2.
    let mut s = loaded_cluster(2, vec![control_plane.clone()]);
    testutil::load(&mut s, gang_of_three(json!({})));
    assert_eq!(
        verdicts(&s, &GANG_KEYS),
        vec![Some(HELD_TWO_OF_THREE.to_string()); 3]
    );
    let nodes = schedule_all(&mut s, &GANG_KEYS, t0());
    assert_eq!(nodes, [None, None, None]);

    // Members tolerating the taint may use the node: the gang is admitted
    // and every member binds.
    let mut s = loaded_cluster(2, vec![control_plane]);
    testutil::load(
        &mut s,
        gang_of_three(json!({"tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
        ]})),
    );
    // (The simulator leaves cpu to kube-scheduler, so only binding is
    // checked, not which node.)
    let nodes = schedule_all(&mut s, &GANG_KEYS, t0());
    assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
}

#[test]
fn only_no_schedule_and_no_execute_taints_keep_members_away() {
    let tainted = |effect: &str| {
        let mut s = loaded_cluster(
            2,
            vec![labeled_node(
                "n2",
                json!({}),
                json!({"taints": [{"key": "dedicated", "value": "db", "effect": effect}]}),
            )],
        );
        testutil::load(&mut s, gang_of_three(json!({})));
        verdicts(&s, &["default/a"]).remove(0)
    };
    assert_eq!(tainted("NoSchedule"), Some(HELD_TWO_OF_THREE.into()));
    assert_eq!(tainted("NoExecute"), Some(HELD_TWO_OF_THREE.into()));
    // kube-scheduler only prefers to avoid such a node.
    assert_eq!(tainted("PreferNoSchedule"), None);
}

#[test]
fn a_node_selector_limits_the_nodes_a_gang_packs_onto() {
    let pool = |name: &str, pool: &str| labeled_node(name, json!({"pool": pool}), json!({}));
    let nodes = || {
        vec![
            pool("n0", "gpu"),
            pool("n1", "gpu"),
            pool("n2", "cpu"),
            pool("n3", "cpu"),
        ]
    };
    // Four nodes with room for one member each, two of them selected.
    let mut s = testutil::scheduler("");
    testutil::load(&mut s, nodes());
    testutil::load(
        &mut s,
        gang_of_three(json!({"nodeSelector": {"pool": "gpu"}})),
    );
    assert_eq!(
        verdicts(&s, &GANG_KEYS),
        vec![Some(HELD_TWO_OF_THREE.to_string()); 3]
    );

    // Required node affinity is honoured the same way.
    let mut s = testutil::scheduler("");
    testutil::load(&mut s, nodes());
    testutil::load(
        &mut s,
        gang_of_three(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]}}}}),
        ),
    );
    assert_eq!(
        verdicts(&s, &GANG_KEYS),
        vec![Some(HELD_TWO_OF_THREE.to_string()); 3]
    );

    // A selector matching three nodes admits the gang.
    let mut s = testutil::scheduler("");
    testutil::load(&mut s, nodes());
    testutil::load(
        &mut s,
        gang_of_three(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]},
                                   {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}}}}),
        ),
    );
    assert_eq!(verdicts(&s, &GANG_KEYS), [None, None, None]);
    let placed = schedule_all(&mut s, &GANG_KEYS, t0());
    assert!(placed.iter().all(Option::is_some), "{placed:?}");
}

#[test]
fn cordoned_and_deleted_nodes_do_not_count_for_the_gang() {
    let cordoned = labeled_node("n2", json!({}), json!({"unschedulable": true}));
    let mut s = loaded_cluster(2, vec![cordoned]);
    testutil::load(&mut s, gang_of_three(json!({})));
    assert_eq!(
        verdicts(&s, &GANG_KEYS),
        vec![Some(HELD_TWO_OF_THREE.to_string()); 3]
    );
    // Uncordoned, the node counts again.
    testutil::load(&mut s, vec![labeled_node("n2", json!({}), json!({}))]);
    assert_eq!(verdicts(&s, &GANG_KEYS), [None, None, None]);

    // A deleted node whose pod the cache still holds is gone for packing.
    let mut s = loaded_cluster(3, gang_of_three(json!({})));
    testutil::load(
        &mut s,
        vec![testutil::pod(PodSpec {
            name: "leftover",
            node: Some("n2"),
            ..Default::default()
        })],
    );
    assert_eq!(verdicts(&s, &GANG_KEYS), [None, None, None]);
    s.apply(Change::Delete(testutil::node(
        "n2",
        &[("cpu", "2"), ("memory", "8Gi")],
    )));
    assert_eq!(
        verdicts(&s, &GANG_KEYS),
        vec![Some(HELD_TWO_OF_THREE.to_string()); 3]
    );
}

#[test]
fn members_with_different_tolerations_are_packed_by_their_own_node_checks() {
    // n0 is tainted; only `a` tolerates it. Equal requests must not let
    // b's search (which skipped n0) stand in for a's.
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            labeled_node(
                "n0",
                json!({}),
                json!({"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}),
            ),
            labeled_node("n1", json!({}), json!({})),
        ],
    );
    let tolerant = with_spec(
        gang_member("a", "2"),
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
    );
    testutil::load(&mut s, vec![tolerant, gang_member("b", "2")]);
    // b is packed first (onto n1), then a onto n0.
    assert_eq!(verdicts(&s, &["default/b", "default/a"]), [None, None]);
    // The simulator's own node checks keep b off n0.
    let nodes = schedule_all(&mut s, &["default/b", "default/a"], t0());
    assert_eq!(nodes[0].as_deref(), Some("n1"));
    assert!(nodes[1].is_some(), "{nodes:?}");

    // Without the toleration the gang cannot complete.
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            labeled_node(
                "n0",
                json!({}),
                json!({"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}),
            ),
            labeled_node("n1", json!({}), json!({})),
        ],
    );
    testutil::load(&mut s, vec![gang_member("a", "2"), gang_member("b", "2")]);
    assert_eq!(
        verdicts(&s, &["default/b"]),
        [Some(
            "waiting for gang default/job: only 1 of 2 members can be placed together".into()
        )]
    );
}

/// Reserve then Permit, as `/bind` runs them.
fn permit_at(s: &mut Scheduler, key: &str, node: &str) -> crate::framework::PermitStep {
    let reserved = s.reserve(key, node, t0()).unwrap();
    s.permit(reserved, t0()).unwrap()
}

/// The pods a Permit step binds now, or `None` when the pod is held.
fn released(step: &crate::framework::PermitStep) -> Option<Vec<String>> {
    match step {
        crate::framework::PermitStep::Bind { pods, .. } => {
            Some(pods.iter().map(|r| r.name.clone()).collect())
        }
        crate::framework::PermitStep::Held { .. } => None,
    }
}

#[test]
fn permit_holds_a_gang_group_until_every_gang_has_its_members_assumed() {
    let mut s = cluster(3);
    testutil::load(&mut s, group_members());
    // ps is complete alone, but its group waits for worker (min 2).
    let step = permit_at(&mut s, "default/ps-0", "n0");
    assert!(
        matches!(&step, crate::framework::PermitStep::Held { group, deadline }
            if group == "default/ps,default/worker" && *deadline == t0() + DEFAULT_TIMEOUT),
        "{step:?}"
    );
    assert_eq!(released(&permit_at(&mut s, "default/worker-0", "n1")), None);
    assert!(s.cache.pod("default/worker-0").unwrap().held);
    assert_eq!(s.permits.len(), 2);
    assert_eq!(
        released(&permit_at(&mut s, "default/worker-1", "n2")),
        Some(vec!["worker-1".into(), "ps-0".into(), "worker-0".into()])
    );
    assert!(s.permits.is_empty());
    assert!(s.cache.pods().all(|p| p.node.is_some() && !p.held));
}

#[test]
fn held_members_count_for_admission_and_only_waiting_ignores_running_ones() {
    let mut s = loaded_cluster(
        3,
        vec![
            policy_bound("run-0", "n0", "only-waiting"),
            policy_member("new-0", "only-waiting"),
            policy_member("new-1", "only-waiting"),
        ],
    );
    // The running member does not count for only-waiting: new-0 is held.
    assert_eq!(released(&permit_at(&mut s, "default/new-0", "n1")), None);
    // new-1, admitted with new-0, is replaced by new-2 (outside that
    // batch): new-2 is admitted with the held new-0 counted, and lets both bind.
    s.apply(Change::Delete(policy_member("new-1", "only-waiting")));
    testutil::load(&mut s, vec![policy_member("new-2", "only-waiting")]);
    assert_eq!(rejection(&s, "default/new-2", t0()), None);
    assert_eq!(
        released(&permit_at(&mut s, "default/new-2", "n2")),
        Some(vec!["new-2".into(), "new-0".into()])
    );
}

#[test]
fn once_satisfied_lets_later_members_through_permit_alone() {
    let mut s = loaded_cluster(
        3,
        vec![
            gang_member("a", "2"),
            gang_member("b", "2"),
            gang_member("c", "2"),
        ],
    );
    assert_eq!(released(&permit_at(&mut s, "default/a", "n0")), None);
    let crate::framework::PermitStep::Bind {
        pods,
        through_permit,
    } = permit_at(&mut s, "default/b", "n1")
    else {
        panic!("b completes the gang");
    };
    assert!(through_permit);
    for reserved in &pods {
        s.bound_after_permit(reserved, t0());
    }
    // The gang was satisfied once: c is neither held at filter nor at Permit.
    assert_eq!(rejection(&s, "default/c", t0()), None);
    assert_eq!(
        released(&permit_at(&mut s, "default/c", "n2")),
        Some(vec!["c".into()])
    );
}

#[test]
fn a_held_member_does_not_count_as_scheduled_in_pod_group_status() {
    let held = permit_and_count(false);
    let bound = permit_and_count(true);
    assert_eq!((held, bound), (0, 2));
}

/// Scheduled count of a PodGroup of 3 after two members went through
/// Permit (held, or bound when `complete` lowers min-member to 2).
fn permit_and_count(complete: bool) -> usize {
    let min = if complete { 2 } else { 3 };
    let mut s = cluster(3);
    let labels = [(PG_LABEL, "pg")];
    testutil::load(
        &mut s,
        vec![
            pod_group("pg", json!({"minMember": min}), json!({}), json!({})),
            member("m0", &[], &labels),
            member("m1", &[], &labels),
            member("m2", &[], &labels),
        ],
    );
    permit_at(&mut s, "default/m0", "n0");
    permit_at(&mut s, "default/m1", "n1");
    let pods: Vec<_> = s
        .cache
        .pods()
        .filter(|p| p.key != "default/m2")
        .cloned()
        .collect();
    Members::count(pods.iter().map(|p| &**p)).scheduled
}

#[test]
fn a_held_member_that_is_deleted_leaves_the_hold() {
    let mut s = loaded_cluster(3, vec![gang_member("a", "2"), gang_member("b", "2")]);
    assert_eq!(released(&permit_at(&mut s, "default/a", "n0")), None);
    assert!(s.expire_permits(t0()).is_empty());
    s.apply(Change::Delete(gang_member("a", "2")));
    let gone = s.expire_permits(t0());
    assert_eq!(gone.len(), 1);
    assert!(
        gone[0].reason.contains("deleted or bound elsewhere"),
        "{gone:?}"
    );
    assert!(s.permits.is_empty());
    assert!(!s.permits.holds_on("n0"));
}

#[test]
fn a_clone_keeps_answering_as_before_while_the_original_changes() {
    let mut cache = ClusterCache::new();
    let mut plugin = Coscheduling::new(GangDefaults::default());
    let apply = |plugin: &mut Coscheduling, cache: &mut ClusterCache, change| {
        let event = cache.apply(change);
        plugin.on_event(&event, cache);
    };
    for object in [
        testutil::node("n0", &[("cpu", "2"), ("memory", "8Gi")]),
        testutil::node("n1", &[("cpu", "2"), ("memory", "8Gi")]),
        gang_member("a", "2"),
        gang_member("b", "2"),
        gang_member("c", "2"),
    ] {
        apply(&mut plugin, &mut cache, Change::Upsert(object));
    }
    let verdict = |plugin: &Coscheduling, cache: &ClusterCache| {
        let pod = cache.pod("default/a").unwrap().clone();
        let mut state = CycleState::new(t0());
        plugin
            .pre_filter(&pod, cache, &mut state)
            .map_err(|r| r.reason.to_string())
    };
    let members = |plugin: &Coscheduling| plugin.members.get("default/job").cloned();
    assert_eq!(verdict(&plugin, &cache), Ok(()));
    let (snapshot, snapshot_cache) = (plugin.clone(), cache.clone());

    // Two members leave the original: the gang falls below its minimum.
    for name in ["b", "c"] {
        apply(
            &mut plugin,
            &mut cache,
            Change::Delete(gang_member(name, "2")),
        );
    }
    assert!(verdict(&plugin, &cache).is_err());
    assert_eq!(verdict(&snapshot, &snapshot_cache), Ok(()));
    // A member bound through the watch satisfies the original's gang only.
    apply(
        &mut plugin,
        &mut cache,
        Change::Upsert(bound_member(
            "d",
            "n1",
            &[(NAME_KEY, "job"), (MIN_KEY, "2")],
        )),
    );
    assert!(plugin.ever_bound.contains_key("default/job"));
    assert!(!snapshot.ever_bound.contains_key("default/job"));
    let keys = |names: &[&str]| -> Option<BTreeSet<String>> {
        Some(names.iter().map(|n| format!("default/{n}")).collect())
    };
    assert_eq!(members(&plugin), keys(&["a", "d"]));
    assert_eq!(members(&snapshot), keys(&["a", "b", "c"]));
    assert_eq!(verdict(&snapshot, &snapshot_cache), Ok(()));
}
