//! Client-side rate limiting of the manager's Kubernetes client, as
//! upstream's `--rest-config-qps` / `--rest-config-burst` set it.
//!
//! Upstream builds one rate-limited REST client per API kind (controller-runtime
//! gives every group/version/kind its own token bucket), so the limit here is
//! per API resource too: each `group/version/resource` path prefix has its
//! own bucket of `burst` tokens refilled at `qps` per second. A QPS of zero
//! or less leaves the client unlimited, as upstream (controller-runtime turns
//! client-side limiting off unless a positive QPS is set).
//!
//! [`TokenBucket`] is the pure core (time comes in as an argument);
//! [`rate_limited`] wraps a [`kube::Client`] so every request first waits for
//! its bucket.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Request;
use koord_common::sync::MutexExt;
use kube::client::Body;

/// Upstream's `--rest-config-qps` default.
pub const DEFAULT_QPS: i64 = 30;
/// Upstream's `--rest-config-burst` default.
pub const DEFAULT_BURST: i64 = 50;
/// client-go's burst when a positive QPS comes with a burst of zero or less.
pub const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// The flags (upstream names, types and defaults).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RestConfigArgs {
    /// Requests per second the Kubernetes client may make to each API resource; 0 or less: no client-side limit.
    #[arg(
        long = "rest-config-qps",
        default_value_t = DEFAULT_QPS,
        allow_negative_numbers = true,
        value_name = "QPS"
    )]
    pub qps: i64,

    /// Requests the Kubernetes client may make to each API resource in a burst above the QPS.
    #[arg(
        long = "rest-config-burst",
        default_value_t = DEFAULT_BURST,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub burst: i64,
}

impl Default for RestConfigArgs {
    fn default() -> Self {
        RestConfigArgs {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

/// A positive rate and the bucket size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    pub qps: f64,
    pub burst: u32,
}

impl RestConfigArgs {
    /// The limits in effect, `None` for no client-side limit.
    pub fn limits(&self) -> Option<RateLimits> {
        if self.qps <= 0 {
            return None;
        }
        let burst = if self.burst > 0 {
            u32::try_from(self.burst).unwrap_or(u32::MAX)
        } else {
            CLIENT_GO_DEFAULT_BURST
        };
        Some(RateLimits {
            // Exact for every QPS anyone would set (below 2^53).
            qps: self.qps as f64,
            burst,
        })
    }
}

/// A token bucket that hands out reservations, like golang.org/x/time/rate
/// (which client-go's limiter uses): a request takes a token now and waits
/// until the bucket would have had it.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    limits: RateLimits,
    /// May go negative: tokens already promised to waiting requests.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limits: RateLimits, now: Instant) -> Self {
        TokenBucket {
            limits,
            tokens: f64::from(limits.burst),
            updated: now,
        }
    }

    /// Takes one token at `now`; returns how long the request must wait.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        if now > self.updated {
            let refill = now.duration_since(self.updated).as_secs_f64() * self.limits.qps;
            self.tokens = (self.tokens + refill).min(f64::from(self.limits.burst));
            self.updated = now;
        }
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limits.qps)
        }
    }
}

/// The bucket a request path counts against: `group/version/resource`
/// (core group empty), namespace and object name left out, subresources
/// counted with their resource; other paths (`/version`, discovery) by their
/// first segments.
pub fn resource_key(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        other => return other.first().copied().unwrap_or("").to_owned(),
    };
    let resource = match rest {
        ["namespaces", _, resource, ..] => *resource,
        [resource, ..] => *resource,
        [] => "",
    };
    format!("{group}/{version}/{resource}")
}

/// One bucket per [`resource_key`], created full on first use.
#[derive(Debug)]
pub struct Limiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<String, TokenBucket>>,
}

impl Limiter {
    pub fn new(limits: RateLimits) -> Self {
        Limiter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// How long a request to `key` at `now` must wait (its token is taken).
    pub fn reserve(&self, key: &str, now: Instant) -> Duration {
        let mut buckets = self.buckets.lock_or_recover();
        buckets
            .entry(key.to_owned())
            .or_insert_with(|| TokenBucket::new(self.limits, now))
            .reserve(now)
    }
}

/// `client` with every request waiting for its resource's bucket first.
pub fn rate_limited(client: kube::Client, limits: RateLimits) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    let limiter = Arc::new(Limiter::new(limits));
    let service = tower::service_fn(move |request: Request<Body>| {
        let client = client.clone();
        let limiter = Arc::clone(&limiter);
        async move {
            let wait = limiter.reserve(&resource_key(request.uri().path()), Instant::now());
            if !wait.is_zero() {
                tracing::trace!(path = request.uri().path(), ?wait, "client-side rate limit");
                tokio::time::sleep(wait).await;
            }
            client.send(request).await
        }
    });
    kube::Client::new(service, namespace)
}

/// `client` limited as the flags say, or as it is when they turn limiting off.
pub fn apply(client: kube::Client, args: &RestConfigArgs) -> kube::Client {
    match args.limits() {
        Some(limits) => rate_limited(client, limits),
        None => client,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RateLimits = RateLimits {
        qps: 10.0,
        burst: 3,
    };

    #[test]
    fn flags_follow_upstream_defaults_and_non_positive_qps_means_unlimited() {
        assert_eq!(
            RestConfigArgs::default().limits(),
            Some(RateLimits {
                qps: 30.0,
                burst: 50
            })
        );
        let zero_qps = RestConfigArgs { qps: 0, burst: 50 };
        assert_eq!(zero_qps.limits(), None);
        assert_eq!(RestConfigArgs { qps: -1, burst: 5 }.limits(), None);
        let zero_burst = RestConfigArgs { qps: 5, burst: 0 };
        assert_eq!(zero_burst.limits().map(|l| l.burst), Some(10));
    }

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_spaces_requests_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(LIMITS, start);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(start), Duration::ZERO);
        }
        // Fourth and fifth at the same instant wait one and two refill periods.
        assert_eq!(bucket.reserve(start), Duration::from_millis(100));
        assert_eq!(bucket.reserve(start), Duration::from_millis(200));
        // After a second of quiet the bucket is full again, never fuller.
        let later = start + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(bucket.reserve(later) > Duration::ZERO);
    }

    #[test]
    fn requests_count_against_their_api_resource() {
        for (path, key) in [
            ("/api/v1/nodes", "/v1/nodes"),
            ("/api/v1/nodes/node-1/status", "/v1/nodes"),
            ("/api/v1/namespaces/kube-system/pods", "/v1/pods"),
            ("/api/v1/namespaces/kube-system/pods/p/binding", "/v1/pods"),
            ("/api/v1/namespaces/kube-system", "/v1/namespaces"),
            ("/api/v1/namespaces", "/v1/namespaces"),
            ("/api/v1/pods", "/v1/pods"),
            (
                "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n1",
                "slo.koordinator.sh/v1alpha1/nodeslos",
            ),
            (
                "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases/koordinator-manager",
                "coordination.k8s.io/v1/leases",
            ),
            ("/apis/apps/v1", "apps/v1/"),
            ("/version", "version"),
            ("/", ""),
        ] {
            assert_eq!(resource_key(path), key, "{path}");
        }
        let limiter = Limiter::new(RateLimits { qps: 1.0, burst: 1 });
        let now = Instant::now();
        assert_eq!(limiter.reserve("/v1/nodes", now), Duration::ZERO);
        assert_eq!(limiter.reserve("/v1/pods", now), Duration::ZERO);
        assert_eq!(limiter.reserve("/v1/nodes", now), Duration::from_secs(1));
    }

    const VERSION_JSON: &[u8] = br#"{"major":"1","minor":"35","gitVersion":"v1.35.0","gitCommit":"0","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.25","compiler":"gc","platform":"linux/amd64"}"#;

    #[tokio::test]
    async fn the_wrapped_client_waits_for_the_bucket_and_keeps_responses() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let inner = kube::Client::new(
            tower::service_fn(move |_request: Request<Body>| {
                seen.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, std::convert::Infallible>(
                        axum::http::Response::builder()
                            .status(200)
                            .body(Body::from(VERSION_JSON.to_vec()))
                            .unwrap(),
                    )
                }
            }),
            "default",
        );
        let client = rate_limited(
            inner,
            RateLimits {
                qps: 20.0,
                burst: 1,
            },
        );
        assert_eq!(client.default_namespace(), "default");
        let started = Instant::now();
        for _ in 0..3 {
            let version = client.apiserver_version().await;
            assert_eq!(
                version.map(|v| v.git_version).ok().as_deref(),
                Some("v1.35.0")
            );
        }
        // One from the burst, then two refills of 50 ms each.
        assert!(
            started.elapsed() >= Duration::from_millis(95),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
