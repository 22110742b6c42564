//! Rate limits with time as an argument: a token bucket that behaves as Go's
//! `rate.Limiter` (full at first, `Tokens`, `AllowN`, `SetLimit`), the
//! object limiters of `objectLimiters` (per workload, per namespace: how
//! many migrations a window allows), and the eviction limiter of
//! `evictQPS`/`evictBurst`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::config::types::{MigrationControllerArgs, MigrationObjectLimiter};
use crate::evictor::max_unavailable;

/// A token bucket: `rate` tokens a second up to `burst`, full when created.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Timestamp>,
}

fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    let nanos = to.as_nanosecond() - from.as_nanosecond();
    if nanos <= 0 { 0.0 } else { nanos as f64 / 1e9 }
}

impl TokenBucket {
    pub fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst);
        TokenBucket {
            rate: rate.max(0.0),
            burst,
            tokens: burst,
            last: None,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The tokens available at `now`.
    pub fn tokens_at(&self, now: Timestamp) -> f64 {
        match self.last {
            None => self.burst,
            Some(last) => (self.tokens + seconds_between(last, now) * self.rate).min(self.burst),
        }
    }

    fn advance(&mut self, now: Timestamp) {
        let tokens = self.tokens_at(now);
        self.tokens = tokens;
        // Time never runs backwards for the bucket.
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
    }

    /// Takes one token if there is one (Go `Allow`).
    pub fn allow(&mut self, now: Timestamp) -> bool {
        self.advance(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Changes the rate from `now` on (Go `SetLimit`).
    pub fn set_rate(&mut self, rate: f64, now: Timestamp) {
        self.advance(now);
        self.rate = rate.max(0.0);
    }
}

/// What an object limiter limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitedObject {
    /// The pod's controller (by uid).
    Workload,
    /// The pod's namespace.
    Namespace,
}

impl LimitedObject {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "workload" => Some(LimitedObject::Workload),
            "namespace" => Some(LimitedObject::Namespace),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LimitedObject::Workload => "workload",
            LimitedObject::Namespace => "namespace",
        }
    }
}

/// The facts of a migrated pod the object limiters read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimiterSubject {
    pub namespace: String,
    /// The controller owner's uid and `name/kind/apiVersion` for messages.
    pub controller: Option<(String, String)>,
    /// The workload's expected replicas, when known.
    pub expected_replicas: Option<i32>,
}

impl LimiterSubject {
    /// The limiter key and a readable scope.
    fn key(&self, object: LimitedObject) -> Option<(String, String)> {
        match object {
            LimitedObject::Workload => self.controller.clone(),
            LimitedObject::Namespace => Some((self.namespace.clone(), self.namespace.clone())),
        }
    }
}

struct Tracked {
    bucket: TokenBucket,
    last_tracked: Timestamp,
}

/// One configured object limiter.
#[derive(Clone, Debug)]
struct ObjectLimiterConfig {
    object: LimitedObject,
    window: Duration,
    max_migrating: Option<IntOrString>,
    burst: u32,
}

/// The object limiters: each eviction uses a token of the pod's workload
/// and namespace buckets; a pod whose bucket has no whole token left waits.
/// A bucket untouched for 1.5 windows is forgotten (upstream's cache expiry).
pub struct ObjectLimiters {
    configs: Vec<ObjectLimiterConfig>,
    max_migrating_per_workload: Option<IntOrString>,
    tracked: HashMap<(LimitedObject, String), Tracked>,
}

/// A limiter key that is not `workload` or `namespace`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("objectLimiters: unknown object type {0:?} (known: workload, namespace)")]
pub struct UnknownLimitedObject(pub String);

impl ObjectLimiters {
    pub fn new(args: &MigrationControllerArgs) -> Result<Self, UnknownLimitedObject> {
        Self::from_map(
            &args.object_limiters,
            args.max_migrating_per_workload.clone(),
        )
    }

    pub fn from_map(
        limiters: &BTreeMap<String, MigrationObjectLimiter>,
        max_migrating_per_workload: Option<IntOrString>,
    ) -> Result<Self, UnknownLimitedObject> {
        let mut configs = Vec::new();
        for (name, limiter) in limiters {
            let object =
                LimitedObject::parse(name).ok_or_else(|| UnknownLimitedObject(name.clone()))?;
            let window = limiter.duration.to_std().unwrap_or_default();
            if window.is_zero() {
                continue;
            }
            configs.push(ObjectLimiterConfig {
                object,
                window,
                max_migrating: limiter.max_migrating.clone(),
                burst: u32::try_from(limiter.burst)
                    .ok()
                    .filter(|b| *b > 0)
                    .unwrap_or(1),
            });
        }
        Ok(ObjectLimiters {
            configs,
            max_migrating_per_workload,
            tracked: HashMap::new(),
        })
    }

    fn forget_expired(&mut self, now: Timestamp) {
        let windows: HashMap<LimitedObject, Duration> =
            self.configs.iter().map(|c| (c.object, c.window)).collect();
        self.tracked.retain(|(object, _), tracked| {
            let expiry = windows.get(object).map_or(Duration::ZERO, |w| *w + *w / 2);
            seconds_between(tracked.last_tracked, now) < expiry.as_secs_f64()
        });
    }

    /// `Some(message)` when a limiter holds the pod back now (upstream
    /// `checkPodExceedObjectLimiter`).
    pub fn exceeded(&mut self, subject: &LimiterSubject, now: Timestamp) -> Option<String> {
        self.forget_expired(now);
        for config in &self.configs {
            let Some((key, scope)) = subject.key(config.object) else {
                continue;
            };
            if let Some(tracked) = self.tracked.get(&(config.object, key))
                && tracked.bucket.tokens_at(now) - 1.0 < 0.0
            {
                return Some(format!(
                    "the {} {scope} has been migrated from too often recently (objectLimiters.{}: window {:?})",
                    config.object.as_str(),
                    config.object.as_str(),
                    config.window
                ));
            }
        }
        None
    }

    /// Records an eviction (upstream `trackEvictedPod`): rate = the
    /// limiter's `maxMigrating` (a count, or for workloads a share of the
    /// expected replicas; else `maxMigratingPerWorkload`) per window.
    pub fn track(&mut self, subject: &LimiterSubject, now: Timestamp) {
        self.forget_expired(now);
        for config in &self.configs {
            let Some((key, _)) = subject.key(config.object) else {
                continue;
            };
            let max_migrating = match config.object {
                // A namespace limit is a count; a percentage means nothing here.
                LimitedObject::Namespace => match &config.max_migrating {
                    Some(IntOrString::Int(count)) => *count,
                    _ => 0,
                },
                LimitedObject::Workload => match subject.expected_replicas {
                    Some(replicas) => max_unavailable(
                        replicas,
                        config
                            .max_migrating
                            .as_ref()
                            .or(self.max_migrating_per_workload.as_ref()),
                    ),
                    None => 0,
                },
            };
            if max_migrating <= 0 {
                continue;
            }
            let rate = f64::from(max_migrating) / config.window.as_secs_f64();
            let tracked = self
                .tracked
                .entry((config.object, key))
                .or_insert_with(|| Tracked {
                    bucket: TokenBucket::new(rate, config.burst),
                    last_tracked: now,
                });
            if (tracked.bucket.rate() - rate).abs() > f64::EPSILON {
                tracked.bucket.set_rate(rate, now);
            }
            // Upstream logs when the bucket was already empty and records anyway.
            let _ = tracked.bucket.allow(now);
            tracked.last_tracked = now;
        }
    }

    /// How many buckets are remembered (bounded by the objects migrated
    /// within 1.5 windows).
    pub fn tracked_len(&self) -> usize {
        self.tracked.len()
    }
}

/// `evictQPS`/`evictBurst`: evictions a second across the controller.
pub fn eviction_limiter(args: &MigrationControllerArgs) -> Option<TokenBucket> {
    let qps = args.evict_qps.as_ref().map_or(0.0, |q| q.float_value());
    if qps.is_nan() || qps <= 0.0 || !qps.is_finite() {
        return None;
    }
    let burst = args
        .evict_burst
        .and_then(|b| u32::try_from(b).ok())
        .filter(|b| *b > 0)
        .unwrap_or(1);
    Some(TokenBucket::new(qps, burst))
}
