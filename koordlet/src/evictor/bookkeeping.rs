//! What an eviction strategy remembers between rounds: when it last
//! evicted (cool time) and which pods it already asked to evict (their
//! resources count as pending release until the pods are gone).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use super::request::EVICTED_MEMORY;

/// Round-to-round memory of an eviction strategy (part of its state);
/// times come from the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionMemory {
    last_eviction: Option<SystemTime>,
    /// UID → when its eviction was asked for.
    requested: BTreeMap<String, SystemTime>,
}

impl EvictionMemory {
    /// Starts cooling at `now` (upstream's CPU evictor cools from start-up).
    pub fn cooling_from(now: SystemTime) -> Self {
        Self {
            last_eviction: Some(now),
            requested: BTreeMap::new(),
        }
    }

    /// `Some(remaining)` while within `cool_time` of the last eviction.
    pub fn cooling(&self, now: SystemTime, cool_time: Duration) -> Option<Duration> {
        let last = self.last_eviction?;
        let since = now.duration_since(last).unwrap_or_default();
        (since < cool_time).then(|| cool_time - since)
    }

    /// Pods asked to be evicted less than `window` (at most
    /// [`EVICTED_MEMORY`]) ago and still present (`present` holds the UIDs
    /// of the current pods).
    pub fn pending(
        &mut self,
        now: SystemTime,
        present: &HashSet<&str>,
        window: Duration,
    ) -> HashSet<String> {
        let window = window.min(EVICTED_MEMORY);
        self.requested.retain(|uid, at| {
            present.contains(uid.as_str())
                && now.duration_since(*at).unwrap_or_default() < EVICTED_MEMORY
        });
        self.requested
            .iter()
            .filter(|(_, at)| now.duration_since(**at).unwrap_or_default() < window)
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// Records new eviction requests made at `now`.
    pub fn record(&mut self, now: SystemTime, uids: impl IntoIterator<Item = String>) {
        let mut any = false;
        for uid in uids {
            self.requested.insert(uid, now);
            any = true;
        }
        if any {
            self.last_eviction = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cool_time_and_pending_expire() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut memory = EvictionMemory::default();
        assert_eq!(memory.cooling(t0, Duration::from_secs(4)), None);
        memory.record(t0, ["a".to_string()]);
        assert_eq!(
            memory.cooling(t0 + Duration::from_secs(1), Duration::from_secs(4)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            memory.cooling(t0 + Duration::from_secs(4), Duration::from_secs(4)),
            None
        );
        let present: HashSet<&str> = ["a", "b"].into();
        assert!(
            memory
                .pending(t0 + Duration::from_secs(5), &present, EVICTED_MEMORY)
                .contains("a")
        );
        // Gone from the node: no longer pending.
        assert!(
            memory
                .pending(t0 + Duration::from_secs(5), &HashSet::new(), EVICTED_MEMORY)
                .is_empty()
        );
        memory.record(t0, ["b".to_string()]);
        assert!(
            memory
                .pending(t0 + EVICTED_MEMORY, &present, EVICTED_MEMORY)
                .is_empty()
        );
        // A zero window (stopped containers restart): nothing pending.
        memory.record(t0, ["a".to_string()]);
        assert!(memory.pending(t0, &present, Duration::ZERO).is_empty());
        assert!(memory.pending(t0, &present, EVICTED_MEMORY).contains("a"));
        let cooling = EvictionMemory::cooling_from(t0);
        assert!(cooling.cooling(t0, Duration::from_secs(20)).is_some());
    }
}
