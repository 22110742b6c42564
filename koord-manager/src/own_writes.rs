//! Node writes this process made that its watch cache has not shown yet.
//!
//! A pass plans from the reflector's cache. Under load the watch can lag the
//! API server by seconds, so the pass after a write may still see the Node as
//! it was before the write and plan the same write again (a Node missing its
//! batch resources looks like it needs them). The 1,000-node scale run made
//! 2.3 node-status writes per node that way.
//!
//! Each successful write records the resourceVersion the cache held when the
//! write was planned. While the cache still holds exactly that version, the
//! node's writes are held back; any other version (ours or anyone's) means the
//! cache has caught up, and the node is planned as usual. Versions are only
//! compared for equality, as the API's contract allows. A write that changed
//! nothing (the API server returned the same version) is not recorded, or the
//! node would wait for an event that never comes; a lost event is covered by
//! [`MAX_WAIT`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Longest a node's writes are held back waiting for the watch (a relist
/// brings the object well within this).
pub const MAX_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Awaited {
    /// The cached resourceVersion the write was planned from.
    planned_from: String,
    written_at: Instant,
}

/// The nodes whose last write the cache has not shown yet.
#[derive(Debug, Default)]
pub struct OwnWrites {
    awaited: HashMap<String, Awaited>,
}

impl OwnWrites {
    /// Records a successful write of `node` planned from cached version
    /// `planned_from`; the API server answered with `written`.
    pub fn record(
        &mut self,
        node: &str,
        planned_from: Option<&str>,
        written: Option<&str>,
        now: Instant,
    ) {
        let (Some(planned_from), Some(written)) = (planned_from, written) else {
            return;
        };
        if planned_from == written {
            return;
        }
        self.awaited.insert(
            node.to_owned(),
            Awaited {
                planned_from: planned_from.to_owned(),
                written_at: now,
            },
        );
    }

    /// Forgets the nodes the cache has caught up on (`cached_version` gives
    /// a node's cached resourceVersion, `None` when the node is gone) and
    /// those waited on longer than [`MAX_WAIT`]; returns the nodes still
    /// awaited, whose node writes the next pass holds back.
    pub fn still_awaited<'a>(
        &mut self,
        cached_version: impl Fn(&str) -> Option<&'a str>,
        now: Instant,
    ) -> HashSet<String> {
        self.awaited.retain(|node, awaited| {
            cached_version(node) == Some(awaited.planned_from.as_str())
                && now.saturating_duration_since(awaited.written_at) < MAX_WAIT
        });
        self.awaited.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.awaited.len()
    }

    pub fn is_empty(&self) -> bool {
        self.awaited.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |node| {
            pairs
                .iter()
                .find(|(name, _)| *name == node)
                .map(|(_, v)| *v)
        }
    }

    #[test]
    fn a_node_is_held_back_until_the_cache_shows_another_version() {
        let start = Instant::now();
        let mut writes = OwnWrites::default();
        writes.record("n1", Some("10"), Some("11"), start);
        // Cache still at the version the write was planned from.
        let held = writes.still_awaited(versions(&[("n1", "10")]), start);
        assert_eq!(held, HashSet::from(["n1".to_owned()]));
        // Our write arrived.
        let held = writes.still_awaited(versions(&[("n1", "11")]), start);
        assert!(held.is_empty());
        assert!(writes.is_empty());
    }

    #[test]
    fn any_newer_version_releases_the_node_not_only_ours() {
        let start = Instant::now();
        let mut writes = OwnWrites::default();
        writes.record("n1", Some("10"), Some("11"), start);
        assert!(
            writes
                .still_awaited(versions(&[("n1", "12")]), start)
                .is_empty()
        );
    }

    #[test]
    fn a_write_that_changed_nothing_or_has_no_version_is_not_awaited() {
        let start = Instant::now();
        let mut writes = OwnWrites::default();
        writes.record("same", Some("10"), Some("10"), start);
        writes.record("unknown", None, Some("11"), start);
        writes.record("unanswered", Some("10"), None, start);
        assert!(writes.is_empty());
    }

    #[test]
    fn a_gone_node_and_a_lost_event_stop_holding_back() {
        let start = Instant::now();
        let mut writes = OwnWrites::default();
        writes.record("gone", Some("10"), Some("11"), start);
        writes.record("stuck", Some("20"), Some("21"), start);
        let cached = [("stuck", "20")];
        let held = writes.still_awaited(versions(&cached), start + Duration::from_secs(1));
        assert_eq!(held, HashSet::from(["stuck".to_owned()]));
        let held = writes.still_awaited(versions(&cached), start + MAX_WAIT);
        assert!(held.is_empty());
    }
}
