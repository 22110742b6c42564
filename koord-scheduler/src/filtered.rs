//! What `/bind` may bind. kube-scheduler calls `/filter`, then
//! `/prioritize`, then `/bind` for the same pod (by UID), binding it to one
//! of the nodes `/filter` returned. The extender keeps, per pod, the nodes
//! its last `/filter` found feasible, and `/bind` refuses any other node, a
//! pod that was never filtered, one whose UID differs from the filtered
//! pod's, and one whose record is older than [`FILTER_RECORD_TTL`]. The
//! bind itself then re-checks fit against the cache as it is at bind time.
//!
//! Records are small (a bit per node, by the cache's never-reused node
//! index) and bounded: at most [`MAX_FILTER_RECORDS`], the oldest dropped
//! first.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use crate::cache::FastMap;

/// How long a `/filter` result lets `/bind` act on it. kube-scheduler may
/// wait up to 10 minutes in PreBind (volume binding) before it binds.
pub const FILTER_RECORD_TTL: Duration = Duration::from_secs(15 * 60);

/// The most pods remembered; the oldest record goes first.
pub const MAX_FILTER_RECORDS: usize = 10_000;

/// Why `/bind` refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindRefusal {
    #[error(
        "pod {pod} was not filtered by this extender (or its /filter result is older than {} minutes): \
         /bind only binds a pod to a node its last /filter found feasible",
        ttl.as_secs() / 60
    )]
    NotFiltered { pod: String, ttl: Duration },
    #[error("pod {pod}: /bind names UID {requested:?}, but the filtered pod has UID {filtered:?}")]
    UidMismatch {
        pod: String,
        requested: String,
        filtered: String,
    },
    #[error(
        "node {node} was not feasible for pod {pod} in its last /filter (or is no longer the same node): bind refused"
    )]
    NodeNotFeasible { pod: String, node: String },
}

#[derive(Debug, Clone)]
struct Record {
    uid: String,
    /// Bit `i` set: the node with cache index `i` was feasible.
    feasible: Vec<u64>,
    at: SystemTime,
    seq: u64,
}

impl Record {
    fn is_feasible(&self, index: usize) -> bool {
        self.feasible
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }
}

/// The per-pod `/filter` results (see the module docs).
#[derive(Debug, Default)]
pub struct FilterRecords {
    records: FastMap<String, Record>,
    /// (seq, pod key) in recording order; entries whose seq no longer
    /// matches the record are stale and skipped.
    order: VecDeque<(u64, String)>,
    next_seq: u64,
}

impl FilterRecords {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Remembers that `/filter` found the nodes with these cache indexes
    /// feasible for the pod (replacing its earlier result).
    pub fn record(
        &mut self,
        pod_key: &str,
        uid: &str,
        feasible: impl IntoIterator<Item = usize>,
        now: SystemTime,
    ) {
        let mut bits: Vec<u64> = Vec::new();
        for index in feasible {
            if bits.len() <= index / 64 {
                bits.resize(index / 64 + 1, 0);
            }
            bits[index / 64] |= 1 << (index % 64);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.records.insert(
            pod_key.to_string(),
            Record {
                uid: uid.to_string(),
                feasible: bits,
                at: now,
                seq,
            },
        );
        self.order.push_back((seq, pod_key.to_string()));
        self.prune(now);
    }

    /// Drops expired records and the oldest beyond the bound.
    fn prune(&mut self, now: SystemTime) {
        while let Some((seq, key)) = self.order.front() {
            let live = self.records.get(key).filter(|r| r.seq == *seq);
            let drop_record = match live {
                // Stale entry: the pod was filtered again or forgotten.
                None => false,
                Some(record) => self.records.len() > MAX_FILTER_RECORDS || expired(record.at, now),
            };
            if live.is_some() && !drop_record {
                break;
            }
            if drop_record {
                self.records.remove(key);
            }
            self.order.pop_front();
        }
        // Stale entries behind a live front accumulate when one pod is
        // filtered over and over; rebuild the order from the records then.
        if self.order.len() > 2 * MAX_FILTER_RECORDS.max(self.records.len()) {
            let mut live: Vec<(u64, String)> = self
                .records
                .iter()
                .map(|(key, record)| (record.seq, key.clone()))
                .collect();
            live.sort_unstable();
            self.order = live.into();
        }
    }

    /// Whether `/bind` may bind the pod to the node with cache index
    /// `node_index` (`None`: the node is not in the cache). `uid` is the
    /// bind request's pod UID (may be empty).
    pub fn check(
        &self,
        pod_key: &str,
        uid: &str,
        node: &str,
        node_index: Option<usize>,
        now: SystemTime,
    ) -> Result<(), BindRefusal> {
        let record = self
            .records
            .get(pod_key)
            .filter(|r| !expired(r.at, now))
            .ok_or_else(|| BindRefusal::NotFiltered {
                pod: pod_key.to_string(),
                ttl: FILTER_RECORD_TTL,
            })?;
        if !uid.is_empty() && uid != record.uid {
            return Err(BindRefusal::UidMismatch {
                pod: pod_key.to_string(),
                requested: uid.to_string(),
                filtered: record.uid.clone(),
            });
        }
        if !node_index.is_some_and(|index| record.is_feasible(index)) {
            return Err(BindRefusal::NodeNotFeasible {
                pod: pod_key.to_string(),
                node: node.to_string(),
            });
        }
        Ok(())
    }

    /// The UID the pod had when it was filtered.
    pub fn filtered_uid(&self, pod_key: &str) -> Option<&str> {
        self.records.get(pod_key).map(|r| r.uid.as_str())
    }

    /// Forgets the pod (it was bound).
    pub fn forget(&mut self, pod_key: &str) {
        self.records.remove(pod_key);
    }
}

fn expired(at: SystemTime, now: SystemTime) -> bool {
    now.duration_since(at)
        .is_ok_and(|age| age > FILTER_RECORD_TTL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn only_a_filtered_pod_binds_and_only_to_a_feasible_node() {
        let mut records = FilterRecords::new();
        assert!(matches!(
            records.check("ns/p", "u1", "n1", Some(1), t(0)),
            Err(BindRefusal::NotFiltered { .. })
        ));
        records.record("ns/p", "u1", [1, 70], t(0));
        assert_eq!(records.check("ns/p", "u1", "n1", Some(1), t(1)), Ok(()));
        assert_eq!(records.check("ns/p", "", "n70", Some(70), t(1)), Ok(()));
        for (node, index) in [("n2", Some(2)), ("n0", Some(0)), ("gone", None)] {
            let err = records
                .check("ns/p", "u1", node, index, t(1))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!("node {node} was not feasible")),
                "{err}"
            );
        }
        assert!(matches!(
            records.check("ns/p", "u2", "n1", Some(1), t(1)),
            Err(BindRefusal::UidMismatch { .. })
        ));
        // A later /filter replaces the earlier result.
        records.record("ns/p", "u1", [2], t(2));
        assert!(records.check("ns/p", "u1", "n1", Some(1), t(3)).is_err());
        assert_eq!(records.check("ns/p", "u1", "n2", Some(2), t(3)), Ok(()));
        // Too old to act on.
        let late = t(2) + FILTER_RECORD_TTL + Duration::from_secs(1);
        assert!(matches!(
            records.check("ns/p", "u1", "n2", Some(2), late),
            Err(BindRefusal::NotFiltered { .. })
        ));
    }

    #[test]
    fn records_are_bounded_in_count_and_age() {
        let mut records = FilterRecords::new();
        for i in 0..MAX_FILTER_RECORDS + 5 {
            records.record(&format!("ns/p{i}"), "u", [0], t(0));
        }
        assert_eq!(records.len(), MAX_FILTER_RECORDS);
        assert!(records.check("ns/p0", "u", "n", Some(0), t(0)).is_err());
        let last = format!("ns/p{}", MAX_FILTER_RECORDS + 4);
        assert!(records.check(&last, "u", "n", Some(0), t(0)).is_ok());
        // One pod filtered again and again keeps one record and a short order.
        for i in 0..5 * MAX_FILTER_RECORDS {
            records.record("ns/busy", "u", [i % 3], t(1));
        }
        assert!(records.order.len() <= 2 * MAX_FILTER_RECORDS + 1);
        // Everything recorded before the TTL is gone with the next record.
        records.record(
            "ns/new",
            "u",
            [0],
            t(1) + FILTER_RECORD_TTL + Duration::from_secs(1),
        );
        assert_eq!(records.len(), 1);
    }
}
