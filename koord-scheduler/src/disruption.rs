//! PodDisruptionBudgets as preemption weighs them (pure: no I/O).
//!
//! kube-scheduler's DefaultPreemption, for each candidate node, sorts the
//! possible victims most important first and walks them once against the
//! budgets of their namespace: each victim a budget selects (unless the
//! budget already lists it in `status.disruptedPods`) takes one of that
//! budget's `status.disruptionsAllowed`, and a victim that takes one the
//! budget no longer has *violates* it. The same rules hold here for the
//! victims the extender adds (see [`crate::preempt`]):
//!
//! - a budget selects pods of its own namespace only;
//! - a pod without labels is selected by none;
//! - a budget whose selector is absent, empty or malformed selects nothing
//!   (kube-scheduler's preemption says so; so does one beyond the bounds
//!   below, which no real workload comes near).
//!
//! [`DisruptionBudget`] is one budget turned into a matcher once per
//! request; [`Ledger`] counts what a node's victims take from each.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use apis::configuration::selector::CompiledSelector;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The most terms (`matchLabels` entries plus `matchExpressions`) a
/// budget's selector may have; beyond it the budget selects nothing.
pub const MAX_SELECTOR_TERMS: usize = 256;

/// The most values all `matchExpressions` of one selector may list
/// together; beyond it the budget selects nothing.
pub const MAX_SELECTOR_VALUES: usize = 4_096;

/// A selector that selects at least something, parsed once.
fn compile(selector: Option<&LabelSelector>) -> Result<CompiledSelector, String> {
    let Some(selector) = selector else {
        return Err("it has no selector".into());
    };
    let labels = selector.match_labels.as_ref();
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    let terms = labels.map_or(0, BTreeMap::len) + expressions.len();
    if terms == 0 {
        return Err("its selector is empty".into());
    }
    if terms > MAX_SELECTOR_TERMS {
        return Err(format!(
            "its selector has {terms} terms, more than the {MAX_SELECTOR_TERMS} allowed"
        ));
    }
    let values: usize = expressions
        .iter()
        .map(|e| e.values.as_ref().map_or(0, Vec::len))
        .sum();
    if values > MAX_SELECTOR_VALUES {
        return Err(format!(
            "its selector lists {values} values, more than the {MAX_SELECTOR_VALUES} allowed"
        ));
    }
    CompiledSelector::new(selector).map_err(|e| format!("its selector is malformed: {e}"))
}

/// One PodDisruptionBudget, ready to be matched against pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionBudget {
    /// `namespace/name`, for logs.
    pub key: String,
    pub namespace: String,
    /// `Err`: why the budget selects nothing.
    terms: Result<CompiledSelector, String>,
    /// `status.disruptionsAllowed` (0 when the status is not written yet).
    pub disruptions_allowed: i32,
    /// `status.disruptedPods`: pods whose eviction the API server already
    /// granted; they take nothing more from the budget.
    disrupted: BTreeSet<String>,
}

impl DisruptionBudget {
    pub fn new(budget: &PodDisruptionBudget) -> Self {
        let namespace = budget.metadata.namespace.clone().unwrap_or_default();
        let name = budget.metadata.name.as_deref().unwrap_or_default();
        let status = budget.status.as_ref();
        Self {
            key: format!("{namespace}/{name}"),
            terms: compile(budget.spec.as_ref().and_then(|s| s.selector.as_ref())),
            namespace,
            disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|pods| pods.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Why the budget selects nothing, if it does not select anything.
    pub fn unusable(&self) -> Option<&str> {
        self.terms.as_ref().err().map(String::as_str)
    }

    /// Whether evicting the pod takes one of this budget's disruptions.
    pub fn charges(&self, namespace: &str, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if labels.is_empty() || namespace != self.namespace || self.disrupted.contains(name) {
            return false;
        }
        self.terms
            .as_ref()
            .is_ok_and(|selector| selector.matches(labels))
    }
}

/// The indexes (into `budgets`) of the budgets evicting the pod charges.
pub fn charged_budgets(
    budgets: &[DisruptionBudget],
    candidates: &[usize],
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<usize> {
    candidates
        .iter()
        .copied()
        .filter(|&index| {
            budgets
                .get(index)
                .is_some_and(|b| b.charges(namespace, name, labels))
        })
        .collect()
}

/// What a node's victims have taken from each budget so far. Indexes are
/// those of the request's budget list; `allowed` gives each budget's
/// `disruptionsAllowed` (an index beyond it allows nothing).
#[derive(Debug, Clone)]
pub struct Ledger<'a> {
    allowed: &'a [i32],
    left: HashMap<usize, i64>,
}

impl<'a> Ledger<'a> {
    pub fn new(allowed: &'a [i32]) -> Self {
        Self {
            allowed,
            left: HashMap::new(),
        }
    }

    /// Takes one disruption from each of `budgets` for one victim; `true`
    /// when any of them had none left (the eviction violates it).
    pub fn charge(&mut self, budgets: &[usize]) -> bool {
        let mut violates = false;
        for &index in budgets {
            let allowed = self.allowed.get(index).copied().unwrap_or(0);
            let left = self.left.entry(index).or_insert(i64::from(allowed));
            *left -= 1;
            violates |= *left < 0;
        }
        violates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(value: serde_json::Value) -> DisruptionBudget {
        DisruptionBudget::new(&serde_json::from_value(value).unwrap())
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web_budget(namespace: &str, allowed: i32) -> DisruptionBudget {
        budget(json!({
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2,
                       "desiredHealthy": 1, "expectedPods": 2}
        }))
    }

    #[test]
    fn a_budget_charges_only_matching_pods_of_its_namespace() {
        let web = web_budget("shop", 1);
        assert_eq!(web.unusable(), None);
        assert!(web.charges("shop", "a", &labels(&[("app", "web"), ("tier", "x")])));
        assert!(!web.charges("other", "a", &labels(&[("app", "web")])));
        assert!(!web.charges("shop", "a", &labels(&[("app", "db")])));
        assert!(!web.charges("shop", "a", &labels(&[])));
    }

    #[test]
    fn expressions_follow_the_label_selector_operators() {
        let b = budget(json!({
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["web", "api"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["z9"]},
                {"key": "team", "operator": "Exists"}
            ]}}
        }));
        assert!(b.charges("ns", "p", &labels(&[("app", "api"), ("team", "t")])));
        assert!(!b.charges("ns", "p", &labels(&[("app", "db"), ("team", "t")])));
        assert!(!b.charges(
            "ns",
            "p",
            &labels(&[("app", "web"), ("team", "t"), ("canary", "1")])
        ));
        assert!(!b.charges(
            "ns",
            "p",
            &labels(&[("app", "web"), ("team", "t"), ("zone", "z9")])
        ));
        assert!(!b.charges("ns", "p", &labels(&[("app", "web")])));
    }

    #[test]
    fn absent_empty_malformed_or_oversized_selectors_select_nothing() {
        let any = labels(&[("app", "web")]);
        let cases = [
            json!({"metadata": {"name": "b", "namespace": "ns"}, "spec": {}}),
            json!({"metadata": {"name": "b", "namespace": "ns"}, "spec": {"selector": {}}}),
            json!({"metadata": {"name": "b", "namespace": "ns"},
                   "spec": {"selector": {"matchExpressions": [
                       {"key": "app", "operator": "Near", "values": ["web"]}]}}}),
            json!({"metadata": {"name": "b", "namespace": "ns"},
                   "spec": {"selector": {"matchExpressions": [
                       {"key": "app", "operator": "In", "values": []}]}}}),
            json!({"metadata": {"name": "b", "namespace": "ns"},
                   "spec": {"selector": {"matchLabels": {"bad key!": "web"}}}}),
        ];
        for case in cases {
            let b = budget(case.clone());
            assert!(b.unusable().is_some(), "{case}");
            assert!(!b.charges("ns", "p", &any), "{case}");
        }
        let many: BTreeMap<String, String> = (0..=MAX_SELECTOR_TERMS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let b = budget(json!({"metadata": {"name": "b", "namespace": "ns"},
                              "spec": {"selector": {"matchLabels": many.clone()}}}));
        assert!(b.unusable().unwrap().contains("terms"));
        assert!(!b.charges("ns", "p", &many));
        let values: Vec<String> = (0..=MAX_SELECTOR_VALUES).map(|i| format!("v{i}")).collect();
        let b = budget(json!({"metadata": {"name": "b", "namespace": "ns"},
                              "spec": {"selector": {"matchExpressions": [
                                  {"key": "k", "operator": "In", "values": values}]}}}));
        assert!(b.unusable().unwrap().contains("values"));
        assert!(!b.charges("ns", "p", &labels(&[("k", "v1")])));
    }

    #[test]
    fn a_pod_already_disrupted_takes_nothing_more() {
        let b = budget(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 2, "disruptedPods": {"web-0": "2026-01-01T00:00:00Z"}}
        }));
        assert!(!b.charges("shop", "web-0", &labels(&[("app", "web")])));
        assert!(b.charges("shop", "web-1", &labels(&[("app", "web")])));
    }

    #[test]
    fn the_ledger_counts_victims_past_the_allowance_as_violations() {
        let allowed = [1, 0];
        let mut ledger = Ledger::new(&allowed);
        assert!(!ledger.charge(&[0]));
        assert!(ledger.charge(&[0]));
        assert!(ledger.charge(&[1]));
        assert!(!ledger.charge(&[]));
        // Beyond the list: allows nothing.
        assert!(ledger.charge(&[7]));
    }

    #[test]
    fn charged_budgets_lists_only_the_selecting_ones() {
        let budgets = vec![
            web_budget("shop", 1),
            web_budget("other", 1),
            budget(json!({"metadata": {"name": "db", "namespace": "shop"},
                          "spec": {"selector": {"matchLabels": {"app": "db"}}}})),
        ];
        let web = labels(&[("app", "web")]);
        assert_eq!(
            charged_budgets(&budgets, &[0, 1, 2, 9], "shop", "p", &web),
            vec![0]
        );
        assert_eq!(budgets[2].disruptions_allowed, 0);
    }
}
