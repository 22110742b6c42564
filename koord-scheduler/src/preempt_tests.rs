//! `/preempt` decisions: the pure core by table, then through a scheduler
//! built from hand-made snapshots.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;

use super::*;
use crate::cache::Object;
use crate::testutil::*;

fn facts(uid: &str, protected: Option<&str>, unit: Option<&str>) -> VictimFacts {
    VictimFacts {
        uid: uid.to_string(),
        key: Some(format!("default/{uid}")),
        protected: protected.map(str::to_string),
        unit: unit.map(str::to_string),
        budgets: Vec::new(),
    }
}

fn units(entries: &[(&str, &[&str])]) -> HashMap<String, BTreeSet<String>> {
    entries
        .iter()
        .map(|(unit, members)| {
            (
                unit.to_string(),
                members.iter().map(|m| format!("default/{m}")).collect(),
            )
        })
        .collect()
}

/// Runs [`decide_node`] with a fit oracle that records the keys it was
/// asked about and answers `fit`.
fn decide(
    victims: &[VictimFacts],
    unit_members: &HashMap<String, BTreeSet<String>>,
    fit: Result<(), &str>,
) -> (NodeDecision, Option<Vec<String>>) {
    let asked = RefCell::new(None);
    let decision = decide_node(
        victims,
        &[],
        unit_members,
        &[],
        |keys| {
            *asked.borrow_mut() = Some(keys.to_vec());
            fit.map_err(str::to_string)
        },
        &mut FitBudget::new(MAX_EXTRA_FIT_CHECKS),
    );
    (decision, asked.into_inner())
}

fn preempted(decision: &NodeDecision) -> Vec<&str> {
    match decision {
        NodeDecision::Preempt { victims, .. } => victims.iter().map(String::as_str).collect(),
        NodeDecision::Drop { .. } => Vec::new(),
    }
}

#[test]
fn core_table() {
    struct Case {
        name: &'static str,
        victims: Vec<VictimFacts>,
        units: HashMap<String, BTreeSet<String>>,
        fit: Result<(), &'static str>,
        /// `None`: the node is dropped.
        want: Option<Vec<&'static str>>,
        /// The keys the fit check must see (`None`: not called).
        want_asked: Option<Vec<&'static str>>,
    }
    let cases = vec![
        Case {
            name: "nothing protected: kube-scheduler's victims stand",
            victims: vec![facts("a", None, None), facts("b", None, None)],
            units: units(&[]),
            fit: Ok(()),
            want: Some(vec!["a", "b"]),
            want_asked: Some(vec!["default/a", "default/b"]),
        },
        Case {
            name: "a protected victim is taken out, the fit is checked without it",
            victims: vec![facts("a", Some("quota"), None), facts("b", None, None)],
            units: units(&[]),
            fit: Ok(()),
            want: Some(vec!["b"]),
            want_asked: Some(vec!["default/b"]),
        },
        Case {
            name: "every victim protected: the node goes without a fit check",
            victims: vec![facts("a", Some("quota"), None)],
            units: units(&[]),
            fit: Ok(()),
            want: None,
            want_asked: None,
        },
        Case {
            name: "the remaining victims do not make room: the node goes",
            victims: vec![
                facts("a", Some("reservation"), None),
                facts("b", None, None),
            ],
            units: units(&[]),
            fit: Err("Insufficient cpu"),
            want: None,
            want_asked: Some(vec!["default/b"]),
        },
        Case {
            name: "a whole gang on the node goes together",
            victims: vec![
                facts("g1", None, Some("default/job")),
                facts("g2", None, Some("default/job")),
            ],
            units: units(&[("default/job", &["g1", "g2"])]),
            fit: Ok(()),
            want: Some(vec!["g1", "g2"]),
            want_asked: Some(vec!["default/g1", "default/g2"]),
        },
        Case {
            name: "a gang with a member on another node is never split",
            victims: vec![
                facts("g1", None, Some("default/job")),
                facts("x", None, None),
            ],
            units: units(&[("default/job", &["g1", "g3"])]),
            fit: Ok(()),
            want: Some(vec!["x"]),
            want_asked: Some(vec!["default/x"]),
        },
        Case {
            name: "a protected gang member keeps its whole gang",
            victims: vec![
                facts("g1", None, Some("default/job")),
                facts("g2", Some("non-preemptible"), Some("default/job")),
            ],
            units: units(&[("default/job", &["g1", "g2"])]),
            fit: Ok(()),
            want: None,
            want_asked: None,
        },
        Case {
            name: "a victim the cache does not know passes through",
            victims: vec![VictimFacts {
                uid: "ghost".into(),
                key: None,
                protected: None,
                unit: None,
                budgets: Vec::new(),
            }],
            units: units(&[]),
            fit: Ok(()),
            want: Some(vec!["ghost"]),
            want_asked: Some(vec![]),
        },
    ];
    for case in cases {
        let (decision, asked) = decide(&case.victims, &case.units, case.fit);
        match &case.want {
            Some(want) => assert_eq!(&preempted(&decision), want, "{}", case.name),
            None => assert!(
                matches!(decision, NodeDecision::Drop { .. }),
                "{}: {decision:?}",
                case.name
            ),
        }
        let asked: Option<Vec<String>> = asked;
        assert_eq!(
            asked,
            case.want_asked
                .map(|keys| keys.into_iter().map(str::to_string).collect::<Vec<_>>()),
            "{}",
            case.name
        );
    }
}

#[test]
fn dropped_victims_carry_their_reason() {
    let victims = vec![
        facts(
            "a",
            Some("ElasticQuota: pod is labelled quota.scheduling.koordinator.sh/preemptible=false"),
            None,
        ),
        facts("g1", None, Some("default/job")),
        facts("b", None, None),
    ];
    let (decision, _) = decide(&victims, &units(&[("default/job", &["g1", "g9"])]), Ok(()));
    let NodeDecision::Preempt {
        victims, dropped, ..
    } = decision
    else {
        panic!("dropped the node");
    };
    assert_eq!(victims, vec!["b"]);
    assert_eq!(dropped.len(), 2);
    assert!(dropped[0].1.contains("preemptible=false"), "{dropped:?}");
    assert!(
        dropped[1].1.contains("gang default/job would be split")
            && dropped[1].1.contains("default/g9"),
        "{dropped:?}"
    );
}

// ---------- added victims, by table ----------

fn extra(uid: &str, priority: i32, started: i64, unit: Option<&str>) -> ExtraCandidate {
    ExtraCandidate {
        uid: uid.to_string(),
        key: format!("default/{uid}"),
        priority,
        started,
        unit: unit.map(str::to_string),
        budgets: Vec::new(),
    }
}

/// Runs [`decide_node`] where each key frees the amount `freed` names
/// (1 when unnamed) and the preemptor fits once `need` is freed.
fn decide_with_extras(
    victims: &[VictimFacts],
    extras: &[ExtraCandidate],
    unit_members: &HashMap<String, BTreeSet<String>>,
    freed: &[(&str, i64)],
    need: i64,
    budget: usize,
) -> (NodeDecision, usize) {
    let calls = RefCell::new(0usize);
    let decision = decide_node(
        victims,
        extras,
        unit_members,
        &[],
        |keys| {
            *calls.borrow_mut() += 1;
            let total: i64 = keys
                .iter()
                .map(|key| {
                    freed
                        .iter()
                        .find(|(name, _)| format!("default/{name}") == *key)
                        .map_or(1, |(_, amount)| *amount)
                })
                .sum();
            if total >= need {
                Ok(())
            } else {
                Err(format!(
                    "Insufficient koordinator.sh/gpu: {total} of {need} freed"
                ))
            }
        },
        &mut FitBudget::new(budget),
    );
    (decision, calls.into_inner())
}

fn added(decision: &NodeDecision) -> Vec<&str> {
    match decision {
        NodeDecision::Preempt { added, .. } => added.iter().map(String::as_str).collect(),
        NodeDecision::Drop { .. } => Vec::new(),
    }
}

fn drop_reason(decision: &NodeDecision) -> &str {
    match decision {
        NodeDecision::Drop { reason } => reason,
        NodeDecision::Preempt { .. } => "",
    }
}

#[test]
fn extras_are_left_alone_while_kube_schedulers_victims_make_room() {
    let (decision, calls) = decide_with_extras(
        &[facts("a", None, None)],
        &[extra("e", 0, 0, None)],
        &units(&[]),
        &[],
        1,
        10,
    );
    assert_eq!(preempted(&decision), vec!["a"]);
    assert!(added(&decision).is_empty());
    assert_eq!(calls, 1);
}

#[test]
fn the_least_important_extras_that_make_room_are_added() {
    // kube-scheduler's `a` frees 1 of the 2 needed: one extra more. `low`
    // (priority 1) goes before `high` (priority 5); between equal
    // priorities the later started (less important) goes.
    let extras = [
        extra("high", 5, 0, None),
        extra("low", 1, 0, None),
        extra("early", 3, 100, None),
        extra("late", 3, 200, None),
    ];
    let (decision, _) =
        decide_with_extras(&[facts("a", None, None)], &extras, &units(&[]), &[], 2, 10);
    assert_eq!(preempted(&decision), vec!["a", "low"]);
    assert_eq!(added(&decision), vec!["low"]);
    // Needing two more, the two least important: low, then late.
    let (decision, _) =
        decide_with_extras(&[facts("a", None, None)], &extras, &units(&[]), &[], 3, 10);
    assert_eq!(added(&decision), vec!["low", "late"]);
    // Priority first, as kube-scheduler: a big low-priority pod spares
    // three small ones above it, but three small low-priority pods go
    // before one big pod above them.
    let extras = [
        extra("s1", 1, 0, None),
        extra("s2", 1, 0, None),
        extra("s3", 1, 0, None),
        extra("big", 0, 0, None),
    ];
    let (decision, _) = decide_with_extras(&[], &extras, &units(&[]), &[("big", 3)], 3, 10);
    assert_eq!(added(&decision), vec!["big"]);
    let extras = [
        extra("s1", 0, 0, None),
        extra("s2", 0, 0, None),
        extra("s3", 0, 0, None),
        extra("big", 1, 0, None),
    ];
    let (decision, _) = decide_with_extras(&[], &extras, &units(&[]), &[("big", 3)], 3, 10);
    assert_eq!(added(&decision), vec!["s1", "s2", "s3"]);
}

#[test]
fn with_every_proposed_victim_protected_extras_alone_may_make_room() {
    let (decision, _) = decide_with_extras(
        &[facts("a", Some("quota min"), None)],
        &[extra("e", 0, 0, None)],
        &units(&[]),
        &[],
        1,
        10,
    );
    let NodeDecision::Preempt {
        victims,
        added,
        added_pdb_violations,
        dropped,
    } = decision
    else {
        panic!("dropped: {decision:?}");
    };
    assert_eq!(
        (victims, added),
        (vec!["e".to_string()], vec!["e".to_string()])
    );
    assert_eq!(added_pdb_violations, 0);
    assert_eq!(dropped, vec![("a".to_string(), "quota min".to_string())]);
}

// ---------- added victims and PodDisruptionBudgets, by table ----------

fn covered(mut candidate: ExtraCandidate, budgets: &[usize]) -> ExtraCandidate {
    candidate.budgets = budgets.to_vec();
    candidate
}

/// [`decide_node`] as [`decide_with_extras`] (each key frees 1), with the
/// budgets' `disruptionsAllowed`.
fn decide_with_budgets(
    victims: &[VictimFacts],
    extras: &[ExtraCandidate],
    allowed: &[i32],
    need: i64,
) -> NodeDecision {
    decide_node(
        victims,
        extras,
        &units(&[]),
        allowed,
        |keys| {
            if keys.len() as i64 >= need {
                Ok(())
            } else {
                Err("Insufficient cpu".to_string())
            }
        },
        &mut FitBudget::new(MAX_EXTRA_FIT_CHECKS),
    )
}

fn added_violations(decision: &NodeDecision) -> usize {
    match decision {
        NodeDecision::Preempt {
            added_pdb_violations,
            ..
        } => *added_pdb_violations,
        NodeDecision::Drop { reason } => panic!("dropped: {reason}"),
    }
}

#[test]
fn an_extra_whose_budget_is_exhausted_is_spared_for_one_that_violates_none() {
    // Without budgets the least important (`low`) goes.
    let extras = [extra("low", 1, 0, None), extra("high", 5, 0, None)];
    let decision = decide_with_budgets(&[], &extras, &[], 1);
    assert_eq!(added(&decision), vec!["low"]);
    // `low` is covered by a budget that allows no disruption: `high`,
    // which violates none, goes instead, and nothing is violated.
    let extras = [
        covered(extra("low", 1, 0, None), &[0]),
        extra("high", 5, 0, None),
    ];
    let decision = decide_with_budgets(&[], &extras, &[0], 1);
    assert_eq!(added(&decision), vec!["high"]);
    assert_eq!(added_violations(&decision), 0);
    // The same budget with a disruption left: `low` goes again.
    let decision = decide_with_budgets(&[], &extras, &[1], 1);
    assert_eq!(added(&decision), vec!["low"]);
    assert_eq!(added_violations(&decision), 0);
    // When only the covered one makes room, it goes and counts.
    let decision = decide_with_budgets(&[], &extras[..1], &[0], 1);
    assert_eq!(added(&decision), vec!["low"]);
    assert_eq!(added_violations(&decision), 1);
}

#[test]
fn two_extras_against_a_budget_allowing_one_count_one_violation() {
    let extras = [
        covered(extra("a", 1, 0, None), &[0]),
        covered(extra("b", 2, 0, None), &[0]),
    ];
    let decision = decide_with_budgets(&[], &extras, &[1], 2);
    assert_eq!(added(&decision), vec!["a", "b"]);
    assert_eq!(added_violations(&decision), 1);
    // Needing one: the less important `a` is the one classed violating
    // (the more important `b` took the disruption), so it is reprieved
    // and `b` goes within the budget.
    let decision = decide_with_budgets(&[], &extras, &[1], 1);
    assert_eq!(added(&decision), vec!["b"]);
    assert_eq!(added_violations(&decision), 0);
}

#[test]
fn kube_schedulers_victims_take_from_the_budgets_first() {
    // kube-scheduler's `k` takes the budget's one disruption, so the extra
    // under the same budget violates it; one under another budget does not.
    let mut kube_victim = facts("k", None, None);
    kube_victim.budgets = vec![0];
    let extras = [covered(extra("e", 1, 0, None), &[0])];
    let decision = decide_with_budgets(std::slice::from_ref(&kube_victim), &extras, &[1], 2);
    assert_eq!(preempted(&decision), vec!["k", "e"]);
    assert_eq!(added_violations(&decision), 1);
    let extras = [covered(extra("e", 1, 0, None), &[1])];
    let decision = decide_with_budgets(&[kube_victim.clone()], &extras, &[1, 1], 2);
    assert_eq!(added_violations(&decision), 0);
    // A protected victim of kube-scheduler's stays, and takes nothing.
    let mut protected = facts("k", Some("quota min"), None);
    protected.budgets = vec![0];
    let extras = [covered(extra("e", 1, 0, None), &[0])];
    let decision = decide_with_budgets(&[protected], &extras, &[1], 1);
    assert_eq!(added(&decision), vec!["e"]);
    assert_eq!(added_violations(&decision), 0);
}

#[test]
fn a_gang_violates_when_any_member_does() {
    // The gang (two members, one covered by an exhausted budget) is tried
    // for a reprieve before the lone pod, though it is less important.
    let extras = [
        covered(extra("g1", 1, 0, Some("default/job")), &[0]),
        extra("g2", 1, 0, Some("default/job")),
        extra("solo", 5, 0, None),
    ];
    let decision = decide_node(
        &[],
        &extras,
        &units(&[("default/job", &["g1", "g2"])]),
        &[0],
        |keys| {
            if keys.is_empty() {
                Err("Insufficient cpu".to_string())
            } else {
                Ok(())
            }
        },
        &mut FitBudget::new(MAX_EXTRA_FIT_CHECKS),
    );
    assert_eq!(added(&decision), vec!["solo"]);
    assert_eq!(added_violations(&decision), 0);
}

#[test]
fn a_node_where_even_every_extra_does_not_make_room_is_dropped() {
    let (decision, calls) = decide_with_extras(
        &[facts("a", None, None)],
        &[extra("e", 0, 0, None)],
        &units(&[]),
        &[],
        3,
        10,
    );
    let reason = drop_reason(&decision);
    assert!(
        reason.contains("does not fit even with every other pod the rules let go gone")
            && reason.contains("2 of 3 freed"),
        "{reason}"
    );
    assert_eq!(calls, 2);
}

#[test]
fn extra_gangs_go_whole_or_not_at_all() {
    // g1, g2 are the whole gang `job` and both on this node: they go
    // together. h1's gang has a member on another node: never added.
    let unit_members = units(&[
        ("default/job", &["g1", "g2"]),
        ("default/other", &["h1", "h9"]),
    ]);
    let extras = [
        extra("g1", 0, 0, Some("default/job")),
        extra("g2", 0, 0, Some("default/job")),
        extra("h1", 0, 0, Some("default/other")),
    ];
    let (decision, _) = decide_with_extras(&[], &extras, &unit_members, &[], 1, 10);
    assert_eq!(added(&decision), vec!["g1", "g2"]);
    // Only the split gang: nothing may go.
    let (decision, calls) = decide_with_extras(&[], &extras[2..], &unit_members, &[], 1, 10);
    assert!(
        drop_reason(&decision).contains("of a gang that cannot go whole"),
        "{decision:?}"
    );
    assert_eq!(calls, 0);
}

#[test]
fn a_spent_budget_drops_the_node_rather_than_over_evicting() {
    let extras = [extra("e1", 0, 0, None), extra("e2", 1, 0, None)];
    // 1 base check is not from the budget; the search needs 1 + 2.
    let (decision, _) =
        decide_with_extras(&[facts("a", None, None)], &extras, &units(&[]), &[], 2, 2);
    assert!(
        drop_reason(&decision).contains("budget of fit checks"),
        "{decision:?}"
    );
    let (decision, _) =
        decide_with_extras(&[facts("a", None, None)], &extras, &units(&[]), &[], 2, 3);
    assert_eq!(added(&decision), vec!["e1"]);
    let (decision, calls) =
        decide_with_extras(&[facts("a", None, None)], &extras, &units(&[]), &[], 2, 0);
    assert!(drop_reason(&decision).contains("budget"), "{decision:?}");
    assert_eq!(calls, 1);
}

#[test]
fn nothing_to_evict_is_never_answered() {
    // Every proposed victim protected, and the preemptor fits already
    // (the cache moved on): kube-scheduler refuses an empty list.
    let (decision, _) = decide_with_extras(
        &[facts("a", Some("reservation"), None)],
        &[extra("e", 0, 0, None)],
        &units(&[]),
        &[],
        0,
        10,
    );
    assert!(
        drop_reason(&decision).contains("without evicting anything"),
        "{decision:?}"
    );
}

// ---------- through the scheduler ----------

const QUOTA: &str = "quota.scheduling.koordinator.sh/name";
const GANG: &str = "gang.scheduling.koordinator.sh/name";
const GANG_MIN: &str = "gang.scheduling.koordinator.sh/min-available";

/// The preemptor, pending in the cache as kube-scheduler's watch would
/// have it (its quota's request counts it).
fn preemptor(
    s: &mut Scheduler,
    name: &'static str,
    requests: &'static [(&'static str, &'static str)],
    labels: &'static [(&'static str, &'static str)],
    priority: i32,
) -> PodInfo {
    load(
        s,
        vec![pod(PodSpec {
            name,
            requests,
            labels,
            priority: Some(priority),
            ..PodSpec::default()
        })],
    );
    (**s.cache.pod(&format!("default/{name}")).unwrap()).clone()
}

fn running(
    name: &'static str,
    node: &'static str,
    cpu: &'static str,
    labels: &'static [(&'static str, &'static str)],
    annotations: &'static [(&'static str, &'static str)],
) -> Object {
    pod(PodSpec {
        name,
        node: Some(node),
        requests: &[("cpu", cpu)],
        labels,
        annotations,
        priority: Some(0),
        scheduled_at: Some(t0()),
        ..PodSpec::default()
    })
}

fn propose(node: &str, victims: &[&str]) -> NodeProposal {
    NodeProposal {
        node: node.to_string(),
        victim_uids: victims.iter().map(|v| format!("uid-default-{v}")).collect(),
        num_pdb_violations: 0,
    }
}

fn outcome(
    s: &mut Scheduler,
    pod: &PodInfo,
    proposals: Vec<NodeProposal>,
) -> BTreeMap<String, Vec<String>> {
    let (result, _) = run_preemption(s, pod, proposals, t0());
    result
        .node_name_to_meta_victims
        .into_iter()
        .map(|(node, victims)| {
            let uids = victims
                .pods
                .unwrap()
                .into_iter()
                .map(|p| {
                    p.unwrap()
                        .uid
                        .trim_start_matches("uid-default-")
                        .to_string()
                })
                .collect();
            (node, uids)
        })
        .collect()
}

fn want(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    entries
        .iter()
        .map(|(node, victims)| {
            (
                node.to_string(),
                victims.iter().map(|v| v.to_string()).collect(),
            )
        })
        .collect()
}

/// Two 4-cpu nodes; quotas team-a and team-b (min 2 cpu each, max 8).
fn quota_cluster(extra: Vec<Object>) -> Scheduler {
    let mut s = scheduler("");
    let mut objects = vec![
        node("n1", &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]),
        node("n2", &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]),
        quota("team-a", &[("cpu", "2")], &[("cpu", "8")], &[], &[]),
        quota("team-b", &[("cpu", "2")], &[("cpu", "8")], &[], &[]),
    ];
    objects.extend(extra);
    load(&mut s, objects);
    s
}

#[test]
fn same_quota_victims_go_and_a_quota_at_min_is_never_taken_from() {
    let mut s = quota_cluster(vec![
        // team-b uses exactly its min (2 cpu): nothing of it can be taken.
        running("b1", "n1", "2", &[(QUOTA, "team-b")], &[]),
        running("a1", "n1", "2", &[(QUOTA, "team-a")], &[]),
        running("b2", "n2", "2", &[(QUOTA, "team-b")], &[]),
        running("b3", "n2", "2", &[(QUOTA, "team-b")], &[]),
    ]);
    // team-b uses 6 cpu (min 2): on n2 taking b2 leaves 4, then b3 leaves
    // 2 — both allowed; on n1 taking b1 leaves 4. Each node is judged on
    // its own (only one of them is preempted on).
    let p = preemptor(&mut s, "p1", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    let got = outcome(
        &mut s,
        &p,
        vec![propose("n1", &["b1", "a1"]), propose("n2", &["b2", "b3"])],
    );
    assert_eq!(got, want(&[("n1", &["b1", "a1"]), ("n2", &["b2", "b3"])]));

    // team-b at its min: only the same-quota victim on n1 goes. On n2 the
    // proposed b2 stays, and the preemptor's own quota's x is added
    // instead (y alone frees too little).
    let mut s = quota_cluster(vec![
        running("b1", "n1", "1", &[(QUOTA, "team-b")], &[]),
        running("a1", "n1", "2", &[(QUOTA, "team-a")], &[]),
        running("b2", "n2", "1", &[(QUOTA, "team-b")], &[]),
        running("x", "n2", "2", &[(QUOTA, "team-a")], &[]),
        running("y", "n2", "1", &[(QUOTA, "team-a")], &[]),
    ]);
    let p = preemptor(&mut s, "p1b", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    let got = outcome(
        &mut s,
        &p,
        vec![propose("n1", &["b1", "a1"]), propose("n2", &["b2"])],
    );
    assert_eq!(got, want(&[("n1", &["a1"]), ("n2", &["x"])]));
}

#[test]
fn victims_above_min_are_taken_lowest_priority_first_until_min() {
    // team-b uses 3 cpu (min 2): one 1-cpu victim may go, the second not.
    let mut s = quota_cluster(vec![
        running("b1", "n1", "1", &[(QUOTA, "team-b")], &[]),
        running("b2", "n1", "1", &[(QUOTA, "team-b")], &[]),
        running("b3", "n1", "1", &[(QUOTA, "team-b")], &[]),
    ]);
    let p = preemptor(&mut s, "p2", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    let got = outcome(&mut s, &p, vec![propose("n1", &["b1", "b2"])]);
    // b2 is kept (it would bring team-b under its min); with b1 gone
    // 4 - 2 = 2 cpu are free: the preemptor fits.
    assert_eq!(got, want(&[("n1", &["b1"])]));
}

#[test]
fn non_preemptible_and_default_quota_pods_are_kept() {
    let mut s = quota_cluster(vec![
        running(
            "a1",
            "n1",
            "2",
            &[
                (QUOTA, "team-a"),
                ("quota.scheduling.koordinator.sh/preemptible", "false"),
            ],
            &[],
        ),
        running(
            "a2",
            "n1",
            "2",
            &[
                (QUOTA, "team-a"),
                ("scheduling.koordinator.sh/disable-preemptible", "true"),
            ],
            &[],
        ),
        running("plain", "n2", "2", &[], &[]),
        running("a3", "n2", "2", &[(QUOTA, "team-a")], &[]),
    ]);
    let p = preemptor(&mut s, "p3", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    let got = outcome(
        &mut s,
        &p,
        vec![
            propose("n1", &["a1", "a2"]),
            propose("n2", &["plain", "a3"]),
        ],
    );
    assert_eq!(got, want(&[("n2", &["a3"])]));
    // Between two default-quota pods the quota has no say.
    let p = preemptor(&mut s, "p4", &[("cpu", "2")], &[], 100);
    let got = outcome(&mut s, &p, vec![propose("n2", &["plain"])]);
    assert_eq!(got, want(&[("n2", &["plain"])]));
}

#[test]
fn equal_or_higher_priority_victims_are_kept() {
    let mut s = quota_cluster(vec![running("a1", "n1", "4", &[(QUOTA, "team-a")], &[])]);
    let p = preemptor(&mut s, "p5", &[("cpu", "2")], &[(QUOTA, "team-a")], 0);
    assert!(outcome(&mut s, &p, vec![propose("n1", &["a1"])]).is_empty());
}

#[test]
fn gang_members_are_preempted_whole_or_not_at_all() {
    let gang: &'static [(&str, &str)] = &[(GANG, "job"), (GANG_MIN, "2")];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            node("n2", &[("cpu", "4"), ("pods", "110")]),
            running("g1", "n1", "2", &[], gang),
            running("g2", "n2", "2", &[], gang),
            running("g3", "n2", "2", &[], gang),
            running("solo", "n1", "2", &[], &[]),
        ],
    );
    let p = preemptor(&mut s, "p6", &[("cpu", "2")], &[], 100);
    // n1: g1 would go without g2, g3 — kept; solo makes room alone.
    // n2: g2, g3 are not the whole gang either (g1 on n1) — node dropped.
    let got = outcome(
        &mut s,
        &p,
        vec![propose("n1", &["g1", "solo"]), propose("n2", &["g2", "g3"])],
    );
    assert_eq!(got, want(&[("n1", &["solo"])]));

    // The whole gang on one node goes together.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            running("g1", "n1", "2", &[], gang),
            running("g2", "n1", "2", &[], gang),
        ],
    );
    let p = preemptor(&mut s, "p6b", &[("cpu", "2")], &[], 100);
    let got = outcome(&mut s, &p, vec![propose("n1", &["g1", "g2"])]);
    assert_eq!(got, want(&[("n1", &["g1", "g2"])]));
}

#[test]
fn pods_on_a_reservation_are_kept_from_non_owners() {
    let allocated: &'static [(&str, &str)] = &[(
        "scheduling.koordinator.sh/reservation-allocated",
        r#"{"name":"r1","uid":"r1-uid"}"#,
    )];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            Object::Reservation(reservation(ReservationSpec {
                template: reservation_template(&[("cpu", "2")]),
                status: available_on("n1", &[("cpu", "2")]),
                ..ReservationSpec::default()
            })),
            running("in-r", "n1", "2", &[], allocated),
            running("other", "n1", "2", &[], &[]),
        ],
    );
    // A non-owner may not take the reservation's pod; evicting `other`
    // alone frees 2 cpu, enough.
    let p = preemptor(&mut s, "p7", &[("cpu", "2")], &[], 100);
    let got = outcome(&mut s, &p, vec![propose("n1", &["in-r", "other"])]);
    assert_eq!(got, want(&[("n1", &["other"])]));
    // Needing 4 cpu, it cannot have them without the reservation's.
    let p = preemptor(&mut s, "p8", &[("cpu", "4")], &[], 100);
    assert!(outcome(&mut s, &p, vec![propose("n1", &["in-r", "other"])]).is_empty());
}

#[test]
fn reservation_capacity_stays_held_when_its_pods_are_not_victims() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            // 2 cpu held for the owner, nobody on it yet.
            Object::Reservation(reservation(ReservationSpec {
                template: reservation_template(&[("cpu", "2")]),
                status: available_on("n1", &[("cpu", "2")]),
                ..ReservationSpec::default()
            })),
            running("low", "n1", "2", &[], &[]),
        ],
    );
    // kube-scheduler (blind to the reservation) thinks evicting `low`
    // frees 4 cpu; 2 stay reserved, so a 3-cpu pod does not fit.
    let p = preemptor(&mut s, "p9", &[("cpu", "3")], &[], 100);
    assert!(outcome(&mut s, &p, vec![propose("n1", &["low"])]).is_empty());
    let p = preemptor(&mut s, "p10", &[("cpu", "2")], &[], 100);
    assert_eq!(
        outcome(&mut s, &p, vec![propose("n1", &["low"])]),
        want(&[("n1", &["low"])])
    );
}

#[test]
fn victims_chosen_fit_the_preemptor_by_the_koordinator_filters() {
    // Batch resources: kube-scheduler's victims free cpu, but the
    // preemptor needs batch-cpu that a non-victim holds.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node(
                "n1",
                &[
                    ("cpu", "4"),
                    ("kubernetes.io/batch-cpu", "2000"),
                    ("pods", "110"),
                ],
            ),
            running("low", "n1", "2", &[], &[]),
            pod(PodSpec {
                name: "batch",
                node: Some("n1"),
                requests: &[("kubernetes.io/batch-cpu", "2000")],
                priority: Some(200),
                scheduled_at: Some(t0()),
                ..PodSpec::default()
            }),
        ],
    );
    let p = preemptor(
        &mut s,
        "p11",
        &[("kubernetes.io/batch-cpu", "1000")],
        &[],
        100,
    );
    assert!(outcome(&mut s, &p, vec![propose("n1", &["low"])]).is_empty());
    // The cache is as before the what-if: the two pods still count.
    let node = s.cache.node("n1").unwrap();
    assert_eq!(node.pods.len(), 2);
    assert_eq!(node.requested.get("cpu"), 2000);
}

#[test]
fn the_cache_and_plugin_state_are_restored_after_the_check() {
    let mut s = quota_cluster(vec![
        running("a1", "n1", "2", &[(QUOTA, "team-a")], &[]),
        running("a2", "n1", "2", &[(QUOTA, "team-a")], &[]),
    ]);
    let p = preemptor(&mut s, "p12", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    let before = filter_for(&s, &p);
    let got = outcome(&mut s, &p, vec![propose("n1", &["a1"])]);
    assert_eq!(got, want(&[("n1", &["a1"])]));
    let after = filter_for(&s, &p);
    assert_eq!(before, after);
    assert_eq!(s.cache.node("n1").unwrap().requested.get("cpu"), 4000);
}

// ---------- added victims, through the scheduler ----------

/// A bound pod of `priority` with any requests.
fn bound(
    name: &'static str,
    node: &'static str,
    requests: &'static [(&'static str, &'static str)],
    labels: &'static [(&'static str, &'static str)],
    annotations: &'static [(&'static str, &'static str)],
    priority: i32,
) -> Object {
    pod(PodSpec {
        name,
        node: Some(node),
        requests,
        limits: requests,
        labels,
        annotations,
        priority: Some(priority),
        scheduled_at: Some(t0()),
        ..PodSpec::default()
    })
}

/// A Device CR with one healthy whole GPU.
fn one_gpu(node: &str) -> Object {
    Object::Device(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": node},
            "spec": {"devices": [{"type": "gpu", "id": "GPU-0", "minor": 0, "health": true,
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
                              "koordinator.sh/gpu-memory-ratio": "100"}}]}
        }))
        .unwrap(),
    )
}

const DEVICE_ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";
const ONE_GPU_ALLOCATED: &str = r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"}}]}"#;
const WHOLE_GPU: &[(&str, &str)] = &[("cpu", "500m"), ("koordinator.sh/gpu", "100")];

#[test]
fn a_device_holder_kube_scheduler_cannot_see_is_added() {
    // kube-scheduler ignores koordinator.sh/gpu (ignoredByScheduler): it
    // evicts `cpu-low` for cpu and would leave the GPU taken.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "8"), ("memory", "8Gi"), ("pods", "110")]),
            one_gpu("n1"),
            bound(
                "gpu-low",
                "n1",
                WHOLE_GPU,
                &[],
                &[(DEVICE_ALLOCATED, ONE_GPU_ALLOCATED)],
                0,
            ),
            bound("cpu-low", "n1", &[("cpu", "6")], &[], &[], 0),
        ],
    );
    let p = preemptor(
        &mut s,
        "wants-gpu",
        &[("cpu", "2"), ("koordinator.sh/gpu", "100")],
        &[],
        100,
    );
    let got = outcome(&mut s, &p, vec![propose("n1", &["cpu-low"])]);
    assert_eq!(got, want(&[("n1", &["cpu-low", "gpu-low"])]));
    // A pod that needs no GPU keeps kube-scheduler's choice.
    let p = preemptor(&mut s, "wants-cpu", &[("cpu", "2")], &[], 100);
    let got = outcome(&mut s, &p, vec![propose("n1", &["cpu-low"])]);
    assert_eq!(got, want(&[("n1", &["cpu-low"])]));
    // The GPU holder above the preemptor's priority is never added.
    let p = preemptor(
        &mut s,
        "low-priority-gpu",
        &[("cpu", "2"), ("koordinator.sh/gpu", "100")],
        &[],
        0,
    );
    assert!(outcome(&mut s, &p, vec![propose("n1", &["cpu-low"])]).is_empty());
}

#[test]
fn batch_resources_come_from_the_least_important_batch_pods() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node(
                "n1",
                &[
                    ("cpu", "4"),
                    ("kubernetes.io/batch-cpu", "2000"),
                    ("pods", "110"),
                ],
            ),
            bound("low", "n1", &[("cpu", "2")], &[], &[], 0),
            bound(
                "batch-10",
                "n1",
                &[("kubernetes.io/batch-cpu", "1000")],
                &[],
                &[],
                10,
            ),
            bound(
                "batch-50",
                "n1",
                &[("kubernetes.io/batch-cpu", "1000")],
                &[],
                &[],
                50,
            ),
        ],
    );
    let p = preemptor(
        &mut s,
        "wants-batch",
        &[("cpu", "1"), ("kubernetes.io/batch-cpu", "1000")],
        &[],
        100,
    );
    // Most important first in the answer (kube-scheduler reads the first
    // victim's priority when it picks a node).
    let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, want(&[("n1", &["batch-10", "low"])]));
    // Needing all of it: both batch pods.
    let p = preemptor(
        &mut s,
        "wants-all-batch",
        &[("cpu", "1"), ("kubernetes.io/batch-cpu", "2000")],
        &[],
        100,
    );
    let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, want(&[("n1", &["batch-50", "batch-10", "low"])]));
}

/// A `policy/v1` PodDisruptionBudget selecting `app=<app>`.
fn disruption_budget(namespace: &str, name: &str, app: &str, allowed: i32) -> Object {
    Object::PodDisruptionBudget(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2,
                       "desiredHealthy": 1, "expectedPods": 2}
        }))
        .unwrap(),
    )
}

/// Two batch pods on a node with room for one more: `batch-10` (labelled
/// `app=web`) and the more important `batch-50` (`app=api`).
fn batch_cluster(budgets: Vec<Object>) -> Scheduler {
    let mut s = scheduler("");
    let mut objects = vec![
        node(
            "n1",
            &[
                ("cpu", "4"),
                ("kubernetes.io/batch-cpu", "2000"),
                ("pods", "110"),
            ],
        ),
        bound("low", "n1", &[("cpu", "2")], &[("app", "web")], &[], 0),
        bound(
            "batch-10",
            "n1",
            &[("kubernetes.io/batch-cpu", "1000")],
            &[("app", "web")],
            &[],
            10,
        ),
        bound(
            "batch-50",
            "n1",
            &[("kubernetes.io/batch-cpu", "1000")],
            &[("app", "api")],
            &[],
            50,
        ),
    ];
    objects.extend(budgets);
    load(&mut s, objects);
    s
}

/// `NumPDBViolations` per node of the answer.
fn pdb_violations(
    s: &mut Scheduler,
    pod: &PodInfo,
    proposals: Vec<NodeProposal>,
) -> BTreeMap<String, i64> {
    let (result, _) = run_preemption(s, pod, proposals, t0());
    result
        .node_name_to_meta_victims
        .into_iter()
        .map(|(node, victims)| (node, victims.num_pdb_violations))
        .collect()
}

#[test]
fn added_victims_respect_pod_disruption_budgets() {
    let wants = |s: &mut Scheduler, name, batch| {
        preemptor(
            s,
            name,
            if batch == 1 {
                &[("cpu", "1"), ("kubernetes.io/batch-cpu", "1000")]
            } else {
                &[("cpu", "1"), ("kubernetes.io/batch-cpu", "2000")]
            },
            &[],
            100,
        )
    };
    // No budget, or one that does not count (another namespace, another
    // app): the least important batch pod goes, nothing is violated.
    for budgets in [
        vec![],
        vec![disruption_budget("other", "web", "web", 0)],
        vec![disruption_budget("default", "db", "db", 0)],
    ] {
        let mut s = batch_cluster(budgets.clone());
        let p = wants(&mut s, "wants-batch", 1);
        let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
        assert_eq!(got, want(&[("n1", &["batch-10", "low"])]), "{budgets:?}");
        let got = pdb_violations(&mut s, &p, vec![propose("n1", &["low"])]);
        assert_eq!(got, BTreeMap::from([("n1".to_string(), 0)]));
    }
    // `batch-10`'s budget allows no disruption: `batch-50` goes instead.
    let mut s = batch_cluster(vec![disruption_budget("default", "web", "web", 0)]);
    let p = wants(&mut s, "wants-batch", 1);
    let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, want(&[("n1", &["batch-50", "low"])]));
    // Needing both, `batch-10` violates its budget; kube-scheduler's own
    // count (1, for `low`, under the same budget) is kept and added to.
    let p = wants(&mut s, "wants-all-batch", 2);
    let mut proposal = propose("n1", &["low"]);
    proposal.num_pdb_violations = 1;
    let got = pdb_violations(&mut s, &p, vec![proposal]);
    assert_eq!(got, BTreeMap::from([("n1".to_string(), 2)]));
    // Two disruptions allowed: `low` takes one, `batch-10` the other.
    let mut s = batch_cluster(vec![disruption_budget("default", "web", "web", 2)]);
    let p = wants(&mut s, "wants-all-batch", 2);
    let got = pdb_violations(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, BTreeMap::from([("n1".to_string(), 0)]));
    // kube-scheduler's count is capped by the victims it still has.
    let mut proposal = propose("n1", &["low"]);
    proposal.num_pdb_violations = 7;
    let got = pdb_violations(&mut s, &p, vec![proposal]);
    assert_eq!(got, BTreeMap::from([("n1".to_string(), 1)]));
}

#[test]
fn budgets_leave_the_cache_when_deleted_and_relisted() {
    let budget = disruption_budget("default", "web", "web", 0);
    let mut s = batch_cluster(vec![budget.clone()]);
    assert_eq!(s.cache.disruption_budgets_in("default").count(), 1);
    assert_eq!(s.cache.disruption_budgets_in("defaul").count(), 0);
    assert_eq!(s.cache.disruption_budgets_in("other").count(), 0);
    let changes = s
        .cache
        .relist_changes(crate::cache::ObjectKind::PodDisruptionBudget, Vec::new());
    for change in changes {
        s.apply(change);
    }
    assert_eq!(s.cache.disruption_budgets_in("default").count(), 0);
    let p = preemptor(
        &mut s,
        "wants-batch",
        &[("cpu", "1"), ("kubernetes.io/batch-cpu", "1000")],
        &[],
        100,
    );
    let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, want(&[("n1", &["batch-10", "low"])]));
}

#[test]
fn an_exclusive_cpuset_holder_is_added_for_a_whole_core() {
    // 2 NUMA nodes x 2 cores x 2 threads (cores: 0/4, 1/5, 2/6, 3/7).
    let detail: Vec<serde_json::Value> = (0..8)
        .map(|id| {
            let core = id % 4;
            serde_json::json!({"id": id, "core": core, "socket": core / 2, "node": core / 2})
        })
        .collect();
    let topology = serde_json::json!({"detail": detail}).to_string();
    let nrt = Object::NodeResourceTopology(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n1", "annotations": {"node.koordinator.sh/cpu-topology": topology}},
            "topologyPolicies": [],
            "zones": []
        }))
        .unwrap(),
    );
    let lsr: &'static [(&str, &str)] = &[("koordinator.sh/qosClass", "LSR")];
    let one_cpu: &'static [(&str, &str)] = &[("cpu", "1"), ("memory", "1Gi")];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "8"), ("memory", "32Gi"), ("pods", "110")]),
            nrt,
            // One thread of every core is taken: no whole core is free.
            bound(
                "t0",
                "n1",
                one_cpu,
                lsr,
                &[(
                    "scheduling.koordinator.sh/resource-status",
                    r#"{"cpuset":"0"}"#,
                )],
                0,
            ),
            bound(
                "t1",
                "n1",
                one_cpu,
                lsr,
                &[(
                    "scheduling.koordinator.sh/resource-status",
                    r#"{"cpuset":"1"}"#,
                )],
                0,
            ),
            bound(
                "t2",
                "n1",
                one_cpu,
                lsr,
                &[(
                    "scheduling.koordinator.sh/resource-status",
                    r#"{"cpuset":"2"}"#,
                )],
                0,
            ),
            bound(
                "t3",
                "n1",
                one_cpu,
                lsr,
                &[(
                    "scheduling.koordinator.sh/resource-status",
                    r#"{"cpuset":"3"}"#,
                )],
                0,
            ),
            bound(
                "shared",
                "n1",
                &[("cpu", "3"), ("memory", "1Gi")],
                &[],
                &[],
                0,
            ),
        ],
    );
    load(
        &mut s,
        vec![pod(PodSpec {
            name: "whole-core",
            requests: &[("cpu", "2"), ("memory", "1Gi")],
            limits: &[("cpu", "2"), ("memory", "1Gi")],
            labels: lsr,
            annotations: &[(
                "scheduling.koordinator.sh/resource-spec",
                r#"{"requiredCPUBindPolicy":"FullPCPUs"}"#,
            )],
            priority: Some(100),
            ..PodSpec::default()
        })],
    );
    let p = (**s.cache.pod("default/whole-core").unwrap()).clone();
    // kube-scheduler counts cpus only: evicting `shared` frees 3 of them.
    // A whole core needs one of the single-thread pods gone too; t3 is the
    // one put back last (equal priorities go by start, then by name).
    let got = outcome(&mut s, &p, vec![propose("n1", &["shared"])]);
    assert_eq!(got, want(&[("n1", &["shared", "t3"])]));
}

#[test]
fn a_quota_over_its_limit_gets_room_from_its_own_pods_on_the_node() {
    // team-a may use at most 4 cpu and uses 4; team-b sits at its min.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "6"), ("memory", "8Gi"), ("pods", "110")]),
            node("n2", &[("cpu", "8"), ("memory", "8Gi"), ("pods", "110")]),
            quota("team-a", &[("cpu", "4")], &[("cpu", "4")], &[], &[]),
            quota("team-b", &[("cpu", "4")], &[("cpu", "8")], &[], &[]),
            running("a1", "n1", "2", &[(QUOTA, "team-a")], &[]),
            running("b1", "n1", "4", &[(QUOTA, "team-b")], &[]),
            running("a2", "n2", "2", &[(QUOTA, "team-a")], &[]),
        ],
    );
    let p = preemptor(&mut s, "p-a", &[("cpu", "2")], &[(QUOTA, "team-a")], 100);
    // n1 is full. kube-scheduler proposes b1 (cpu): team-b is at its min,
    // so b1 stays; a1 is team-a's own and frees both the cpu and team-a's
    // quota, which kube-scheduler does not model.
    let (result, reports) = run_preemption(&mut s, &p, vec![propose("n1", &["b1"])], t0());
    assert!(
        result.node_name_to_meta_victims.contains_key("n1"),
        "{reports:?}"
    );
    assert_eq!(
        result.node_name_to_meta_victims["n1"].pods,
        Some(vec![Some(MetaPod {
            uid: "uid-default-a1".into()
        })])
    );
    let NodeDecision::Preempt { added, dropped, .. } = &reports[0].decision else {
        panic!("{reports:?}");
    };
    assert_eq!(added, &vec!["uid-default-a1".to_string()]);
    assert!(dropped[0].1.contains("below its min"), "{dropped:?}");
}

#[test]
fn pods_on_a_reservation_are_never_added_for_non_owners() {
    let allocated: &'static [(&str, &str)] = &[(
        "scheduling.koordinator.sh/reservation-allocated",
        r#"{"name":"r1","uid":"r1-uid"}"#,
    )];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            one_gpu("n1"),
            Object::Reservation(reservation(ReservationSpec {
                template: reservation_template(&[("cpu", "1")]),
                status: available_on("n1", &[("cpu", "1")]),
                ..ReservationSpec::default()
            })),
            bound("in-r", "n1", &[("cpu", "1")], &[], allocated, 0),
            bound("low", "n1", &[("cpu", "2")], &[], &[], 0),
        ],
    );
    // 4 cpu needed: with `low` gone 3 are free; the fourth is the
    // reservation's, and its pod may not go for a non-owner.
    let p = preemptor(&mut s, "p-r", &[("cpu", "4")], &[], 100);
    let (result, reports) = run_preemption(&mut s, &p, vec![propose("n1", &["low"])], t0());
    assert!(result.node_name_to_meta_victims.is_empty(), "{reports:?}");
    let NodeDecision::Drop { reason } = &reports[0].decision else {
        panic!("{reports:?}");
    };
    // The reservation's pod was no candidate at all.
    assert!(
        reason.contains("does not fit once the remaining victims are gone: Insufficient cpu"),
        "{reason}"
    );
}

#[test]
fn an_assumed_pod_is_never_added() {
    // kube-scheduler's snapshot may not have a pod the extender only
    // assumed (held at Permit); naming it would fail the whole preemption.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node(
                "n1",
                &[
                    ("cpu", "4"),
                    ("kubernetes.io/batch-cpu", "1000"),
                    ("pods", "110"),
                ],
            ),
            bound("low", "n1", &[("cpu", "2")], &[], &[], 0),
            pod(PodSpec {
                name: "assumed-batch",
                requests: &[("kubernetes.io/batch-cpu", "1000")],
                priority: Some(0),
                ..PodSpec::default()
            }),
        ],
    );
    s.reserve("default/assumed-batch", "n1", t0()).unwrap();
    let p = preemptor(
        &mut s,
        "wants-batch",
        &[("cpu", "1"), ("kubernetes.io/batch-cpu", "1000")],
        &[],
        100,
    );
    assert!(outcome(&mut s, &p, vec![propose("n1", &["low"])]).is_empty());
}

#[test]
fn a_whole_gang_on_the_node_is_added_whole() {
    const OLD_GANG_WITH_GPU: &[(&str, &str)] = &[
        (GANG, "old-job"),
        (GANG_MIN, "2"),
        (DEVICE_ALLOCATED, ONE_GPU_ALLOCATED),
    ];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "8"), ("pods", "110")]),
            one_gpu("n1"),
            bound("low", "n1", &[("cpu", "4")], &[], &[], 0),
            bound("g-gpu", "n1", WHOLE_GPU, &[], OLD_GANG_WITH_GPU, 0),
            bound(
                "g-cpu",
                "n1",
                &[("cpu", "1")],
                &[],
                &[(GANG, "old-job"), (GANG_MIN, "2")],
                0,
            ),
        ],
    );
    let p = preemptor(
        &mut s,
        "wants-gpu",
        &[("cpu", "2"), ("koordinator.sh/gpu", "100")],
        &[],
        100,
    );
    // The GPU holder's gang goes with it.
    let got = outcome(&mut s, &p, vec![propose("n1", &["low"])]);
    assert_eq!(got, want(&[("n1", &["low", "g-cpu", "g-gpu"])]));
}

// ---------- gang preemptors ----------

#[test]
fn a_gang_preempts_when_every_pending_member_can_be_placed() {
    let gang: &'static [(&str, &str)] = &[(GANG, "new-job"), (GANG_MIN, "2")];
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            node("n2", &[("cpu", "4"), ("pods", "110")]),
            running("low1", "n1", "4", &[], &[]),
            running("low2", "n2", "4", &[], &[]),
            pod(PodSpec {
                name: "member-b",
                requests: &[("cpu", "4")],
                annotations: gang,
                priority: Some(100),
                ..PodSpec::default()
            }),
        ],
    );
    load(
        &mut s,
        vec![pod(PodSpec {
            name: "member-a",
            requests: &[("cpu", "4")],
            annotations: gang,
            priority: Some(100),
            ..PodSpec::default()
        })],
    );
    let p = (**s.cache.pod("default/member-a").unwrap()).clone();
    // Each node alone frees room for one member only; with the other
    // node's victims counted as gone (member-b's own preemption) the gang
    // is placed whole, so both nodes stay candidates.
    let got = outcome(
        &mut s,
        &p,
        vec![propose("n1", &["low1"]), propose("n2", &["low2"])],
    );
    assert_eq!(got, want(&[("n1", &["low1"]), ("n2", &["low2"])]));
    // Only one node proposed: member-b could not follow, nothing goes.
    let (result, reports) = run_preemption(&mut s, &p, vec![propose("n1", &["low1"])], t0());
    assert!(result.node_name_to_meta_victims.is_empty(), "{reports:?}");
    let NodeDecision::Drop { reason } = &reports[0].decision else {
        panic!("{reports:?}");
    };
    assert!(
        reason.contains("members can be placed together"),
        "{reason}"
    );
    // The cache is as before: both victims still count.
    assert_eq!(s.cache.node("n1").unwrap().requested.get("cpu"), 4000);
    assert_eq!(s.cache.node("n2").unwrap().requested.get("cpu"), 4000);
}

#[test]
fn a_gang_that_cannot_be_placed_whole_evicts_nothing() {
    let gang: &'static [(&str, &str)] = &[(GANG, "big-job"), (GANG_MIN, "3")];
    let mut s = scheduler("");
    let member = |name: &'static str| {
        pod(PodSpec {
            name,
            requests: &[("cpu", "4")],
            annotations: gang,
            priority: Some(100),
            ..PodSpec::default()
        })
    };
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("pods", "110")]),
            node("n2", &[("cpu", "4"), ("pods", "110")]),
            running("low1", "n1", "4", &[], &[]),
            running("low2", "n2", "4", &[], &[]),
            member("m2"),
            member("m3"),
            member("m1"),
        ],
    );
    let p = (**s.cache.pod("default/m1").unwrap()).clone();
    // Three members, room for two even with every victim gone.
    let got = outcome(
        &mut s,
        &p,
        vec![propose("n1", &["low1"]), propose("n2", &["low2"])],
    );
    assert!(got.is_empty(), "{got:?}");
}

fn filter_for(s: &Scheduler, pod: &PodInfo) -> crate::framework::FilterOutcome {
    match s.pre_filter(pod, t0()) {
        Ok(state) => s.filter(pod, None, &state),
        Err(rejection) => Scheduler::reject_all(&s.cache.node_names_sorted(), &rejection),
    }
}

// ---------- parsing ----------

#[test]
fn parses_both_shapes_and_bounds_them() {
    let pod = serde_json::json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {"containers": []}});
    let meta = serde_json::json!({
        "Pod": pod,
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}, {"UID": "v2"}], "NumPDBViolations": 1}}
    });
    let (_, proposals) = parse_preemption_args(meta.to_string().as_bytes()).unwrap();
    assert_eq!(
        proposals,
        vec![NodeProposal {
            node: "n1".into(),
            victim_uids: vec!["v1".into(), "v2".into()],
            num_pdb_violations: 1
        }]
    );
    let full = serde_json::json!({
        "Pod": pod,
        "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {"name": "v", "uid": "v1"}}], "NumPDBViolations": 0}}
    });
    let (_, proposals) = parse_preemption_args(full.to_string().as_bytes()).unwrap();
    assert_eq!(proposals[0].victim_uids, vec!["v1"]);

    let refused = [
        (serde_json::json!([]), "expected a JSON object"),
        (serde_json::json!({"Pod": pod}), "neither"),
        (
            serde_json::json!({"NodeNameToMetaVictims": {}}),
            "Pod is missing",
        ),
        (
            serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}}),
            "has no UID",
        ),
        (
            serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [null]}}}),
            "has no UID",
        ),
        (
            serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, {"UID": "a"}]}}}),
            "twice",
        ),
        (
            serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "x".repeat(200)}]}}}),
            "more than the 128 allowed",
        ),
        (
            serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"": {"Pods": [{"UID": "a"}]}}}),
            "node name of 0 bytes",
        ),
    ];
    for (body, message) in refused {
        let err = parse_preemption_args(body.to_string().as_bytes()).unwrap_err();
        assert!(err.contains(message), "{body}: {err}");
    }
    let many: Vec<serde_json::Value> = (0..=MAX_VICTIMS_PER_NODE)
        .map(|i| serde_json::json!({"UID": format!("u{i}")}))
        .collect();
    let body = serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": many}}});
    let err = parse_preemption_args(body.to_string().as_bytes()).unwrap_err();
    assert!(err.contains("5001 victims"), "{err}");
    // A null victim list is an empty one.
    let body = serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"n1": null}});
    let (_, proposals) = parse_preemption_args(body.to_string().as_bytes()).unwrap();
    assert!(proposals[0].victim_uids.is_empty());
}

#[test]
fn the_answer_is_kube_schedulers_json() {
    let mut result = ExtenderPreemptionResult::default();
    result.node_name_to_meta_victims.insert(
        "n1".into(),
        MetaVictims {
            pods: Some(vec![Some(MetaPod { uid: "v1".into() })]),
            num_pdb_violations: 0,
        },
    );
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        serde_json::json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 0}}})
    );
}
