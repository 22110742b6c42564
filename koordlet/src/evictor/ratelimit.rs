//! A token bucket with the clock passed in, so its behaviour is testable.

use std::time::{Duration, Instant};

/// Allows `burst` actions at once and refills at `qps` per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// `qps <= 0` never refills after the initial burst; `burst` is at least 1.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: if qps.is_finite() { qps.max(0.0) } else { 0.0 },
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Takes one token if available at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until a token is available at `now` (zero when one is).
    pub fn wait_time(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            return Some(Duration::ZERO);
        }
        if self.qps <= 0.0 {
            return None;
        }
        Some(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        self.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill_at_qps() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2.0, 3);
        assert!(bucket.try_take(start));
        assert!(bucket.try_take(start));
        assert!(bucket.try_take(start));
        assert!(!bucket.try_take(start));
        assert_eq!(bucket.wait_time(start), Some(Duration::from_millis(500)));
        assert!(!bucket.try_take(start + Duration::from_millis(400)));
        assert!(bucket.try_take(start + Duration::from_millis(500)));
        // Long idle refills only up to the burst.
        let later = start + Duration::from_secs(60);
        assert!((0..3).all(|_| bucket.try_take(later)));
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn zero_qps_never_refills_and_zero_burst_means_one() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(0.0, 0);
        assert!(bucket.try_take(start));
        assert!(!bucket.try_take(start + Duration::from_secs(3600)));
        assert_eq!(bucket.wait_time(start), None);
        let mut nan = TokenBucket::new(f64::NAN, 1);
        assert!(nan.try_take(start));
        assert!(!nan.try_take(start + Duration::from_secs(10)));
    }
}
