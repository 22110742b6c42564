//! The previous reading of a counter per entity, so that two readings make a rate.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Last value and time per key. Entries of entities that left the node are
/// dropped with [`Previous::retain`].
#[derive(Debug, Clone)]
pub struct Previous<T> {
    entries: HashMap<Arc<str>, (SystemTime, T)>,
}

impl<T> Default for Previous<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<T: Copy> Previous<T> {
    /// Stores `value` as the reading at `now` and returns the elapsed time
    /// and value of the reading before it. `None` on the first reading or
    /// when the clock went backwards.
    pub fn replace(&mut self, key: &Arc<str>, now: SystemTime, value: T) -> Option<(Duration, T)> {
        let previous = match self.entries.get_mut(key) {
            Some(entry) => Some(std::mem::replace(entry, (now, value))),
            None => {
                self.entries.insert(key.clone(), (now, value));
                None
            }
        }?;
        let elapsed = now.duration_since(previous.0).ok()?;
        Some((elapsed, previous.1))
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|key, _| keep(key));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metricsadvisor::parse::cpu_cores_between;
    use std::time::UNIX_EPOCH;

    #[test]
    fn first_reading_has_no_rate_then_rates_and_resets() {
        let key: Arc<str> = "pod-a".into();
        let mut previous = Previous::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(previous.replace(&key, t0, 1_000_000_000u64), None);

        let t1 = t0 + Duration::from_secs(2);
        let (elapsed, before) = previous.replace(&key, t1, 2_000_000_000).unwrap();
        assert_eq!(elapsed, Duration::from_secs(2));
        assert_eq!(
            cpu_cores_between(before, 2_000_000_000, elapsed.as_nanos()),
            Some(0.5)
        );

        // The cgroup was recreated: the counter restarts near zero.
        let t2 = t1 + Duration::from_secs(1);
        let (elapsed, before) = previous.replace(&key, t2, 10_000).unwrap();
        assert_eq!(cpu_cores_between(before, 10_000, elapsed.as_nanos()), None);
        // The reset reading is the new baseline.
        let t3 = t2 + Duration::from_secs(1);
        let (elapsed, before) = previous.replace(&key, t3, 250_010_000).unwrap();
        assert_eq!(
            cpu_cores_between(before, 250_010_000, elapsed.as_nanos()),
            Some(0.25)
        );
    }

    #[test]
    fn clock_going_backwards_gives_no_rate() {
        let key: Arc<str> = "c".into();
        let mut previous = Previous::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        previous.replace(&key, t0, 1u64);
        assert_eq!(previous.replace(&key, t0 - Duration::from_secs(1), 2), None);
        // The backwards reading still becomes the baseline.
        assert_eq!(
            previous.replace(&key, t0, 3),
            Some((Duration::from_secs(1), 2))
        );
    }

    #[test]
    fn retain_drops_departed_entities() {
        let mut previous = Previous::default();
        let now = UNIX_EPOCH;
        for key in ["a", "b", "c"] {
            previous.replace(&Arc::from(key), now, 0u64);
        }
        previous.retain(|key| key != "b");
        assert_eq!(previous.len(), 2);
        assert_eq!(previous.replace(&Arc::from("b"), now, 1), None);
    }
}
