//! Permit through the extender's `/bind`: pods a plugin holds (gang members
//! waiting for their gang) stay assumed in the cache, so their resources
//! count against every other pod, until the plugin lets their group bind
//! or their hold times out.
//!
//! This table is bookkeeping only: which pods are held, for which group,
//! until when, and how each hold ended (for the `/bind` calls waiting on
//! it). Time comes in as arguments; the decisions are the plugins'
//! ([`crate::framework::Plugin::permit`]).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use crate::framework::Reserved;

/// How long the outcome of a hold is kept for `/bind` calls that come back
/// for it (kube-scheduler's retry after a "still waiting" answer).
pub const OUTCOME_RETENTION: Duration = Duration::from_secs(120);

/// A pod held at Permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPod {
    /// What binding it will take (its pre-bind annotations included).
    pub reserved: Reserved,
    /// The group whose completion releases it (a gang group's id).
    pub group: String,
    pub since: SystemTime,
    pub deadline: SystemTime,
}

/// How a hold ended, as `/bind` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// Bound through the API to this node.
    Bound { node: String },
    /// Released unbound (timeout, rejection, failed binding): the reason.
    Released(String),
}

#[derive(Debug, Clone)]
struct Recorded {
    uid: String,
    outcome: HoldOutcome,
    at: SystemTime,
}

/// Held pods and the outcomes of recent holds.
#[derive(Debug, Clone)]
pub struct PermitTable {
    held: BTreeMap<String, HeldPod>,
    /// Node → how many held pods it has.
    nodes: HashMap<String, usize>,
    outcomes: HashMap<String, Recorded>,
    /// Bumped on every outcome, so waiting `/bind` calls look again.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for PermitTable {
    fn default() -> Self {
        Self {
            held: BTreeMap::new(),
            nodes: HashMap::new(),
            outcomes: HashMap::new(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl PermitTable {
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn get(&self, pod_key: &str) -> Option<&HeldPod> {
        self.held.get(pod_key)
    }

    /// Whether `node` has a held pod.
    pub fn holds_on(&self, node: &str) -> bool {
        !self.nodes.is_empty() && self.nodes.contains_key(node)
    }

    /// Held pods in pod-key order.
    pub fn iter(&self) -> impl Iterator<Item = &HeldPod> {
        self.held.values()
    }

    /// Holds a pod; a previous outcome of the same key is forgotten.
    pub fn hold(&mut self, pod: HeldPod) {
        self.outcomes.remove(&pod.reserved.pod_key);
        *self.nodes.entry(pod.reserved.node.clone()).or_default() += 1;
        if let Some(previous) = self.held.insert(pod.reserved.pod_key.clone(), pod) {
            self.unmark_node(&previous.reserved.node);
        }
    }

    fn unmark_node(&mut self, node: &str) {
        if let Some(count) = self.nodes.get_mut(node) {
            *count -= 1;
            if *count == 0 {
                self.nodes.remove(node);
            }
        }
    }

    /// Takes every held pod of `group` out of the table (key order).
    pub fn take_group(&mut self, group: &str) -> Vec<HeldPod> {
        let keys: Vec<String> = self
            .held
            .iter()
            .filter(|(_, held)| held.group == group)
            .map(|(key, _)| key.clone())
            .collect();
        keys.iter().filter_map(|k| self.take(k)).collect()
    }

    pub fn take(&mut self, pod_key: &str) -> Option<HeldPod> {
        let held = self.held.remove(pod_key)?;
        self.unmark_node(&held.reserved.node);
        Some(held)
    }

    /// Held pods whose deadline has passed, in deadline order.
    pub fn expired(&self, now: SystemTime) -> Vec<String> {
        let mut due: Vec<(&SystemTime, &String)> = self
            .held
            .iter()
            .filter(|(_, held)| held.deadline <= now)
            .map(|(key, held)| (&held.deadline, key))
            .collect();
        due.sort();
        due.into_iter().map(|(_, key)| key.clone()).collect()
    }

    /// Records how a hold (or a binding the hold led to) ended and wakes
    /// the waiting `/bind` calls.
    pub fn record(&mut self, pod_key: &str, uid: &str, outcome: HoldOutcome, now: SystemTime) {
        self.outcomes.insert(
            pod_key.to_string(),
            Recorded {
                uid: uid.to_string(),
                outcome,
                at: now,
            },
        );
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// The recorded outcome for this pod key and UID, if any.
    pub fn outcome(&self, pod_key: &str, uid: &str) -> Option<&HoldOutcome> {
        self.outcomes
            .get(pod_key)
            .filter(|r| r.uid == uid || uid.is_empty())
            .map(|r| &r.outcome)
    }

    /// Forgets outcomes older than [`OUTCOME_RETENTION`].
    pub fn forget_old_outcomes(&mut self, now: SystemTime) {
        self.outcomes.retain(|_, r| {
            now.duration_since(r.at)
                .map_or(true, |age| age < OUTCOME_RETENTION)
        });
    }

    /// A receiver that sees every later [`PermitTable::record`].
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str, group: &str, deadline_secs: u64) -> HeldPod {
        let (namespace, name) = key.split_once('/').unwrap();
        HeldPod {
            reserved: Reserved {
                pod_key: key.into(),
                namespace: namespace.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                node: "n0".into(),
                annotations: BTreeMap::new(),
            },
            group: group.into(),
            since: SystemTime::UNIX_EPOCH,
            deadline: SystemTime::UNIX_EPOCH + Duration::from_secs(deadline_secs),
        }
    }

    #[test]
    fn groups_are_taken_whole_and_expiry_goes_by_deadline() {
        let mut table = PermitTable::default();
        table.hold(held("ns/b", "g1", 20));
        table.hold(held("ns/a", "g1", 30));
        table.hold(held("ns/c", "g2", 10));
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert!(table.expired(at(9)).is_empty());
        assert_eq!(table.expired(at(25)), ["ns/c", "ns/b"]);
        let taken: Vec<String> = table
            .take_group("g1")
            .into_iter()
            .map(|h| h.reserved.pod_key)
            .collect();
        assert_eq!(taken, ["ns/a", "ns/b"]);
        assert_eq!(table.len(), 1);
        assert!(table.get("ns/c").is_some());
        assert!(table.holds_on("n0"));
        table.take("ns/c");
        assert!(!table.holds_on("n0"));
    }

    #[test]
    fn outcomes_wake_subscribers_match_the_uid_and_are_forgotten_in_time() {
        let mut table = PermitTable::default();
        let mut receiver = table.subscribe();
        assert!(!receiver.has_changed().unwrap());
        let t0 = SystemTime::UNIX_EPOCH;
        table.record(
            "ns/a",
            "uid-a",
            HoldOutcome::Released("timed out".into()),
            t0,
        );
        assert!(receiver.has_changed().unwrap());
        receiver.mark_unchanged();
        assert_eq!(
            table.outcome("ns/a", "uid-a"),
            Some(&HoldOutcome::Released("timed out".into()))
        );
        assert_eq!(table.outcome("ns/a", "uid-other"), None);
        table.forget_old_outcomes(t0 + OUTCOME_RETENTION - Duration::from_secs(1));
        assert!(table.outcome("ns/a", "uid-a").is_some());
        table.forget_old_outcomes(t0 + OUTCOME_RETENTION);
        assert!(table.outcome("ns/a", "uid-a").is_none());
        // A new hold of the same pod starts without the old outcome.
        table.record("ns/a", "uid-a", HoldOutcome::Released("x".into()), t0);
        table.hold(held("ns/a", "g", 5));
        assert!(table.outcome("ns/a", "uid-a").is_none());
    }
}
