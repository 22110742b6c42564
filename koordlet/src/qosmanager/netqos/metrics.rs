//! Prometheus metrics of the network QoS reconciler. Upstream koordlet has
//! none for this feature (`pkg/koordlet/metrics/` names no network QoS
//! metric), so the names are ours, `koordlet_netqos_*`, each labelled with
//! the node as koordlet's other metrics are. Every other label takes values
//! from a fixed set: no pod names, addresses or free text.
//!
//! - `netqos_supported{node}`: 1 when rtnetlink, HTB and u32 are there;
//!   `netqos_missing{node,part}` 1 for each missing part (netlink, htb, u32).
//! - `netqos_rounds_total{node,result}`: result `changed`, `unchanged`,
//!   `incomplete` (a change failed or was deferred), `failed` (the uplink
//!   could not be read), `left` (no NodeSLO or no bandwidth known).
//! - `netqos_changes_total{node,object,op}` and
//!   `netqos_change_errors_total{node,object,op}`: netlink changes made and
//!   refused; object `qdisc`/`class`/`filter`, op `add`/`change`/`delete`.
//! - `netqos_deferred_changes{node}`: changes left for the next round.
//! - `netqos_decision{node,decision}`: 1 for the last round's decision
//!   (`apply`, `remove`, `leave`), 0 for the others.
//! - `netqos_total_bandwidth_bits_per_second{node}`,
//!   `netqos_class_bandwidth_bits_per_second{node,class,direction,bound}`:
//!   the planned classes (class `root`/`system`/`ls`/`be`, bound
//!   `rate`/`ceil`); direction `egress` is installed, `ingress` (ls and be)
//!   is computed and not enforced. Removed when no tree is planned.
//! - `netqos_classified_pods{node,class}`: pods with an address filter to
//!   their QoS class or their own class, by QoS class;
//!   `netqos_pod_classes{node}`: pods with a class of their own
//!   (`koordinator.sh/networkQOS`); `netqos_filters{node}`: address filters.
//! - `netqos_refused_pods{node,reason}`: pods some part of whose settings was
//!   not enforced in the last planned round, by [`PodRefusal`] label.

use std::collections::BTreeMap;

use koord_common::MetricsRegistry;
use koord_common::metrics::FloatGauge;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::capability::NetQosCapability;
use super::plan::{
    BE_CLASS_MINOR, LS_CLASS_MINOR, NetQosClass, NetQosDecision, PodRefusal, ROOT_CLASS_MINOR,
    SYSTEM_CLASS_MINOR,
};
use super::report::RoundReport;

type Labels = Vec<(&'static str, String)>;

/// The `result` label of a round.
pub const RESULT_CHANGED: &str = "changed";
pub const RESULT_UNCHANGED: &str = "unchanged";
pub const RESULT_INCOMPLETE: &str = "incomplete";
pub const RESULT_FAILED: &str = "failed";
pub const RESULT_LEFT: &str = "left";

const DECISIONS: [&str; 3] = ["apply", "remove", "leave"];
const CLASSES: [NetQosClass; 3] = [NetQosClass::System, NetQosClass::Ls, NetQosClass::Be];

/// The network QoS metrics of one node.
#[derive(Debug, Clone)]
pub struct NetQosMetrics {
    node: String,
    supported: Family<Labels, Gauge>,
    missing: Family<Labels, Gauge>,
    rounds: Family<Labels, Counter>,
    changes: Family<Labels, Counter>,
    change_errors: Family<Labels, Counter>,
    deferred: Family<Labels, Gauge>,
    decision: Family<Labels, Gauge>,
    total_bandwidth: Family<Labels, FloatGauge>,
    class_bandwidth: Family<Labels, FloatGauge>,
    classified_pods: Family<Labels, Gauge>,
    pod_classes: Family<Labels, Gauge>,
    filters: Family<Labels, Gauge>,
    refused_pods: Family<Labels, Gauge>,
}

impl NetQosMetrics {
    /// Creates and registers the metrics under the component prefix.
    pub fn register(registry: &MetricsRegistry, node: &str) -> Self {
        let metrics = Self {
            node: node.to_string(),
            supported: Family::default(),
            missing: Family::default(),
            rounds: Family::default(),
            changes: Family::default(),
            change_errors: Family::default(),
            deferred: Family::default(),
            decision: Family::default(),
            total_bandwidth: Family::default(),
            class_bandwidth: Family::default(),
            classified_pods: Family::default(),
            pod_classes: Family::default(),
            filters: Family::default(),
            refused_pods: Family::default(),
        };
        registry.register_component(|r| {
            r.register(
                "netqos_supported",
                "1 when this node has rtnetlink, the HTB qdisc and the u32 classifier network QoS needs",
                metrics.supported.clone(),
            );
            r.register(
                "netqos_missing",
                "1 for each part network QoS needs that this node lacks (part: netlink, htb, u32)",
                metrics.missing.clone(),
            );
            r.register(
                "netqos_rounds",
                "network QoS reconcile rounds by result (changed, unchanged, incomplete, failed, left)",
                metrics.rounds.clone(),
            );
            r.register(
                "netqos_changes",
                "netlink changes network QoS made on the uplink (object: qdisc, class, filter; op: add, change, delete)",
                metrics.changes.clone(),
            );
            r.register(
                "netqos_change_errors",
                "netlink changes the kernel refused (retried next round)",
                metrics.change_errors.clone(),
            );
            r.register(
                "netqos_deferred_changes",
                "changes the last round left for the next one (bounded work per round)",
                metrics.deferred.clone(),
            );
            r.register(
                "netqos_decision",
                "1 for the last round's decision (apply: keep the tree, remove: take it off, leave: change nothing)",
                metrics.decision.clone(),
            );
            r.register(
                "netqos_total_bandwidth_bits_per_second",
                "the total bandwidth the classes share (totalNetworkBandwidth or the uplink speed)",
                metrics.total_bandwidth.clone(),
            );
            r.register(
                "netqos_class_bandwidth_bits_per_second",
                "planned rate (guarantee) and ceil (limit) of each class; direction=ingress is computed, not enforced",
                metrics.class_bandwidth.clone(),
            );
            r.register(
                "netqos_classified_pods",
                "pods whose addresses are classified, by QoS class (system, ls, be)",
                metrics.classified_pods.clone(),
            );
            r.register(
                "netqos_pod_classes",
                "pods with a class of their own from koordinator.sh/networkQOS",
                metrics.pod_classes.clone(),
            );
            r.register(
                "netqos_filters",
                "pod address filters planned on the uplink",
                metrics.filters.clone(),
            );
            r.register(
                "netqos_refused_pods",
                "pods some part of whose network QoS was not enforced in the last planned round, by reason",
                metrics.refused_pods.clone(),
            );
        });
        metrics
    }

    fn labels(&self, more: &[(&'static str, &str)]) -> Labels {
        let mut labels = vec![("node", self.node.clone())];
        labels.extend(more.iter().map(|(k, v)| (*k, (*v).to_string())));
        labels
    }

    /// Records what the capability probe found.
    pub fn record_capability(&self, capability: &NetQosCapability) {
        self.supported
            .get_or_create(&self.labels(&[]))
            .set(i64::from(capability.supported));
        for (part, present) in [
            ("netlink", capability.netlink),
            ("htb", capability.htb == Some(true)),
            ("u32", capability.u32_classifier == Some(true)),
        ] {
            self.missing
                .get_or_create(&self.labels(&[("part", part)]))
                .set(i64::from(!present));
        }
    }

    /// Records a round's decision: the planned classes and pods, or their
    /// absence.
    pub fn record_decision(&self, decision: &NetQosDecision) {
        let chosen = match decision {
            NetQosDecision::Apply(_) => "apply",
            NetQosDecision::Remove { .. } => "remove",
            NetQosDecision::Leave { .. } => "leave",
        };
        for name in DECISIONS {
            self.decision
                .get_or_create(&self.labels(&[("decision", name)]))
                .set(i64::from(name == chosen));
        }
        self.class_bandwidth.clear();
        let NetQosDecision::Apply(plan) = decision else {
            self.total_bandwidth.clear();
            for family in [&self.classified_pods, &self.refused_pods] {
                family.clear();
            }
            self.pod_classes.get_or_create(&self.labels(&[])).set(0);
            self.filters.get_or_create(&self.labels(&[])).set(0);
            return;
        };
        // Bit rates stay far below 2^53, where f64 is exact.
        let as_f64 = |bps: u64| bps as f64;
        self.total_bandwidth
            .get_or_create(&self.labels(&[]))
            .set(as_f64(plan.total_bps));
        let names = [
            (ROOT_CLASS_MINOR, "root"),
            (SYSTEM_CLASS_MINOR, "system"),
            (LS_CLASS_MINOR, "ls"),
            (BE_CLASS_MINOR, "be"),
        ];
        for (minor, name) in names {
            if let Some(class) = plan.class(minor) {
                for (bound, value) in [("rate", class.rate_bps), ("ceil", class.ceil_bps)] {
                    self.class_bandwidth
                        .get_or_create(&self.labels(&[
                            ("class", name),
                            ("direction", "egress"),
                            ("bound", bound),
                        ]))
                        .set(as_f64(value));
                }
            }
        }
        for (name, figures) in [("ls", plan.ingress.ls), ("be", plan.ingress.be)] {
            for (bound, value) in [("rate", figures.rate_bps), ("ceil", figures.ceil_bps)] {
                self.class_bandwidth
                    .get_or_create(&self.labels(&[
                        ("class", name),
                        ("direction", "ingress"),
                        ("bound", bound),
                    ]))
                    .set(as_f64(value));
            }
        }
        let mut pods_by_class: BTreeMap<NetQosClass, std::collections::BTreeSet<&str>> =
            BTreeMap::new();
        for filter in &plan.filters {
            pods_by_class
                .entry(filter.class)
                .or_default()
                .insert(filter.pod.as_str());
        }
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for class in CLASSES {
            let pods = pods_by_class.get(&class).map_or(0, |set| set.len());
            self.classified_pods
                .get_or_create(&self.labels(&[("class", class.name())]))
                .set(count(pods));
        }
        self.pod_classes
            .get_or_create(&self.labels(&[]))
            .set(count(plan.pod_classes.len()));
        self.filters
            .get_or_create(&self.labels(&[]))
            .set(count(plan.filters.len()));
        for reason in PodRefusal::ALL {
            let pods = plan.refusals.get(&reason).copied().unwrap_or(0);
            self.refused_pods
                .get_or_create(&self.labels(&[("reason", reason.label())]))
                .set(count(pods));
        }
    }

    /// Records how a round went: its result and the changes made or refused.
    pub fn record_round(&self, report: &RoundReport) {
        let result = if report.left.is_some() {
            RESULT_LEFT
        } else if !report.failed.is_empty() || report.deferred > 0 {
            RESULT_INCOMPLETE
        } else if report.applied > 0 {
            RESULT_CHANGED
        } else {
            RESULT_UNCHANGED
        };
        self.rounds
            .get_or_create(&self.labels(&[("result", result)]))
            .inc();
        for ((object, op), n) in &report.applied_by_kind {
            self.changes
                .get_or_create(&self.labels(&[("object", object), ("op", op)]))
                .inc_by(u64::try_from(*n).unwrap_or(u64::MAX));
        }
        for ((object, op), n) in &report.failed {
            self.change_errors
                .get_or_create(&self.labels(&[("object", object), ("op", op)]))
                .inc_by(u64::try_from(*n).unwrap_or(u64::MAX));
        }
        self.deferred
            .get_or_create(&self.labels(&[]))
            .set(i64::try_from(report.deferred).unwrap_or(i64::MAX));
    }

    /// Counts a round whose uplink could not be found or read.
    pub fn record_failed_round(&self) {
        self.rounds
            .get_or_create(&self.labels(&[("result", RESULT_FAILED)]))
            .inc();
    }
}
