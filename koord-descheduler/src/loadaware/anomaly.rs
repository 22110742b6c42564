//! Upstream's anomaly detector (`utils/anomaly.BasicDetector`): a node turns
//! anomalous after more than N consecutive abnormal marks, and back to ok
//! after more than M consecutive normal marks or when the anomaly times out.
//! Time is an argument (nanoseconds since the epoch), never read here.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::AnomalyCondition;

/// Upstream's default anomaly timeout when none (or zero) is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    Ok,
    Anomaly,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub consecutive_normalities: u32,
    pub consecutive_abnormalities: u32,
}

#[derive(Clone, Debug)]
pub struct Detector {
    condition: AnomalyCondition,
    state: State,
    counter: Counter,
    /// When an anomaly ends by itself (nanoseconds); `None` in the ok state.
    expiration: Option<i128>,
}

fn nanos(duration: Duration) -> i128 {
    i128::try_from(duration.as_nanos()).unwrap_or(i128::MAX)
}

impl Detector {
    pub fn new(condition: AnomalyCondition) -> Self {
        Detector {
            condition,
            state: State::Ok,
            counter: Counter::default(),
            expiration: None,
        }
    }

    fn timeout(&self) -> Duration {
        if self.condition.timeout.is_zero() {
            DEFAULT_TIMEOUT
        } else {
            self.condition.timeout
        }
    }

    fn is_anomalous(&self) -> bool {
        self.counter.consecutive_abnormalities > self.condition.consecutive_abnormalities
    }

    fn is_normal(&self) -> bool {
        self.counter.consecutive_normalities > self.condition.consecutive_normalities
    }

    fn set_state(&mut self, state: State, now: i128) {
        if self.state == state {
            return;
        }
        self.state = state;
        self.counter = Counter::default();
        self.expiration = match state {
            State::Ok => None,
            State::Anomaly => Some(now.saturating_add(nanos(self.timeout()))),
        };
    }

    /// The state at `now`, applying an expired anomaly or a met normal condition.
    pub fn current_state(&mut self, now: i128) -> State {
        if self.state == State::Anomaly
            && (self.expiration.is_some_and(|expiration| expiration < now) || self.is_normal())
        {
            self.set_state(State::Ok, now);
        }
        self.state
    }

    pub fn counter(&self) -> Counter {
        self.counter
    }

    /// Records one observation and returns the state after it.
    pub fn mark(&mut self, normal: bool, now: i128) -> State {
        let state = self.current_state(now);
        if normal {
            self.counter.consecutive_normalities += 1;
            self.counter.consecutive_abnormalities = 0;
            if state == State::Anomaly && self.is_normal() {
                self.set_state(State::Ok, now);
            }
        } else {
            self.counter.consecutive_abnormalities += 1;
            self.counter.consecutive_normalities = 0;
            if state == State::Ok && self.is_anomalous() {
                self.set_state(State::Anomaly, now);
            }
        }
        self.current_state(now)
    }

    pub fn reset(&mut self, now: i128) {
        self.set_state(State::Ok, now);
    }
}

/// The detectors of one LowNodeLoad instance, by node name, with upstream's
/// cache expiry: an entry not refreshed within the cache timeout is gone.
#[derive(Clone, Debug, Default)]
pub struct DetectorCache {
    entries: HashMap<String, (Detector, i128)>,
}

impl DetectorCache {
    /// A live entry.
    pub fn get_mut(&mut self, node: &str, now: i128) -> Option<&mut Detector> {
        match self.entries.get_mut(node) {
            Some((detector, expires_at)) if *expires_at >= now => Some(detector),
            _ => None,
        }
    }

    /// Marks `node` abnormal, creating its detector if needed, and refreshes
    /// its expiry (upstream `filterRealAbnormalNodes`).
    pub fn mark_abnormal(
        &mut self,
        node: &str,
        condition: AnomalyCondition,
        cache_timeout: Duration,
        now: i128,
    ) -> (State, Counter) {
        let expires_at = now.saturating_add(nanos(cache_timeout));
        let live = self
            .entries
            .get(node)
            .is_some_and(|(_, expires)| *expires >= now);
        if !live {
            self.entries
                .insert(node.to_string(), (Detector::new(condition), expires_at));
        }
        let entry = self.entries.get_mut(node).map(|(detector, expires)| {
            *expires = expires_at;
            detector
        });
        match entry {
            Some(detector) => {
                let state = detector.mark(false, now);
                (state, detector.counter())
            }
            None => (State::Ok, Counter::default()),
        }
    }

    pub fn reset(&mut self, node: &str, now: i128) {
        if let Some(detector) = self.get_mut(node, now) {
            detector.reset(now);
        }
    }

    pub fn mark_normal(&mut self, node: &str, now: i128) {
        if let Some(detector) = self.get_mut(node, now) {
            detector.mark(true, now);
        }
    }

    /// Drops expired entries so the cache does not grow without bound.
    pub fn sweep(&mut self, now: i128) {
        self.entries.retain(|_, (_, expires)| *expires >= now);
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

    const SECOND: i128 = 1_000_000_000;

    fn condition(abnormal: u32, normal: u32) -> AnomalyCondition {
        AnomalyCondition {
            timeout: Duration::from_secs(60),
            consecutive_abnormalities: abnormal,
            consecutive_normalities: normal,
        }
    }

    #[test]
    fn anomaly_needs_more_than_n_consecutive_abnormal_marks() {
        let mut detector = Detector::new(condition(5, 3));
        for round in 1..=5 {
            assert_eq!(
                detector.mark(false, round * SECOND),
                State::Ok,
                "round {round}"
            );
        }
        assert_eq!(detector.mark(false, 6 * SECOND), State::Anomaly);
        // A normal mark in between starts the count again.
        let mut detector = Detector::new(condition(2, 3));
        detector.mark(false, 0);
        detector.mark(false, 0);
        detector.mark(true, 0);
        assert_eq!(detector.mark(false, 0), State::Ok);
        assert_eq!(detector.mark(false, 0), State::Ok);
        assert_eq!(detector.mark(false, 0), State::Anomaly);
    }

    #[test]
    fn anomaly_ends_after_normal_marks_or_the_timeout() {
        let mut detector = Detector::new(condition(1, 1));
        detector.mark(false, 0);
        assert_eq!(detector.mark(false, 0), State::Anomaly);
        assert_eq!(detector.mark(true, SECOND), State::Anomaly);
        assert_eq!(detector.mark(true, SECOND), State::Ok);

        let mut detector = Detector::new(condition(1, 3));
        detector.mark(false, 0);
        assert_eq!(detector.mark(false, 0), State::Anomaly);
        assert_eq!(detector.current_state(60 * SECOND), State::Anomaly);
        assert_eq!(detector.current_state(60 * SECOND + 1), State::Ok);
        // Back to ok with a fresh count.
        assert_eq!(detector.counter(), Counter::default());
    }

    #[test]
    fn cache_entries_expire_unless_refreshed() {
        let mut cache = DetectorCache::default();
        let timeout = Duration::from_secs(300);
        cache.mark_abnormal("n1", condition(1, 1), timeout, 0);
        assert!(cache.get_mut("n1", 300 * SECOND).is_some());
        assert!(cache.get_mut("n1", 300 * SECOND + 1).is_none());
        // Expired: a new detector starts from zero.
        let (state, counter) = cache.mark_abnormal("n1", condition(1, 1), timeout, 301 * SECOND);
        assert_eq!(state, State::Ok);
        assert_eq!(counter.consecutive_abnormalities, 1);
        cache.sweep(10_000 * SECOND);
        assert!(cache.is_empty());
    }
}
