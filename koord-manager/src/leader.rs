//! Leader election on a `coordination.k8s.io/v1` Lease, compatible with
//! client-go's lease lock: only the holder runs the controllers, the other
//! replicas keep serving webhooks. Timing follows controller-runtime's
//! defaults (15 s lease, 10 s renew deadline, 2 s retry).

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Upstream's lease name (`koordinator-manager`).
pub const DEFAULT_LEASE_NAME: &str = "koordinator-manager";

/// Lease timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate should do with the lease it sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No lease yet: create it holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over.
    TakeOver,
    /// Someone else holds a valid lease.
    Follow { holder: String },
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

/// Decides from the current lease (`None`: it does not exist) at `now`.
pub fn decide(
    lease: Option<&LeaseSpec>,
    identity: &str,
    now: SystemTime,
    timing: &LeaseTiming,
) -> LeaseDecision {
    let Some(spec) = lease else {
        return LeaseDecision::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == identity {
        return LeaseDecision::Renew;
    }
    if holder.is_empty() {
        return LeaseDecision::TakeOver;
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(timing.lease_duration, Duration::from_secs);
    let last = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| SystemTime::from(t.0));
    match last {
        Some(last) if last + duration > now => LeaseDecision::Follow { holder },
        _ => LeaseDecision::TakeOver,
    }
}

/// The lease spec after a successful create, renew or takeover.
pub fn held_spec(
    previous: Option<&LeaseSpec>,
    decision: &LeaseDecision,
    identity: &str,
    now: SystemTime,
    timing: &LeaseTiming,
) -> LeaseSpec {
    let now = Timestamp::try_from(now).map(MicroTime).ok();
    let mut spec = previous.cloned().unwrap_or_default();
    spec.holder_identity = Some(identity.to_owned());
    spec.lease_duration_seconds = Some(seconds(timing.lease_duration));
    spec.renew_time = now.clone();
    match decision {
        LeaseDecision::Create => {
            spec.acquire_time = now;
            spec.lease_transitions = Some(0);
        }
        LeaseDecision::TakeOver => {
            spec.acquire_time = now;
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        LeaseDecision::Renew | LeaseDecision::Follow { .. } => {}
    }
    spec
}

/// A failed API call during election.
#[derive(Debug, thiserror::Error)]
#[error("lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// One candidate for one lease.
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: LeaseTiming,
}

impl LeaderElector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: String,
        timing: LeaseTiming,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity,
            timing,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// One election round: `Ok(true)` when we hold the lease afterwards.
    /// A conflict (someone else wrote first) is `Ok(false)`.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error(e))?;
        let now = SystemTime::now();
        let decision = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            now,
            &self.timing,
        );
        let spec = held_spec(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &decision,
            &self.identity,
            now,
            &self.timing,
        );
        let result = match (&decision, current) {
            (LeaseDecision::Follow { .. }, _) => return Ok(false),
            (LeaseDecision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (_, Some(mut lease)) => {
                // The resourceVersion of what we read makes this a compare-and-swap.
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(self.error(err)),
        }
    }
}

/// A process identity like client-go's: host name plus a per-process suffix.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "koord-manager".to_owned());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{}-{nanos:09}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn spec(holder: &str, renewed: u64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(Timestamp::try_from(at(renewed)).unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn decisions_follow_the_lease_lock_rules() {
        let timing = LeaseTiming::default();
        assert_eq!(decide(None, "me", at(0), &timing), LeaseDecision::Create);
        assert_eq!(
            decide(Some(&spec("me", 0, 15)), "me", at(100), &timing),
            LeaseDecision::Renew
        );
        assert_eq!(
            decide(Some(&spec("other", 0, 15)), "me", at(14), &timing),
            LeaseDecision::Follow {
                holder: "other".into()
            }
        );
        assert_eq!(
            decide(Some(&spec("other", 0, 15)), "me", at(15), &timing),
            LeaseDecision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec("", 0, 15)), "me", at(1), &timing),
            LeaseDecision::TakeOver
        );
    }

    #[test]
    fn takeover_counts_a_transition_and_renewal_keeps_the_acquire_time() {
        let timing = LeaseTiming::default();
        let previous = LeaseSpec {
            lease_transitions: Some(3),
            acquire_time: Some(MicroTime(Timestamp::try_from(at(0)).unwrap())),
            ..spec("other", 0, 15)
        };
        let taken = held_spec(
            Some(&previous),
            &LeaseDecision::TakeOver,
            "me",
            at(20),
            &timing,
        );
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, taken.renew_time);
        let renewed = held_spec(Some(&taken), &LeaseDecision::Renew, "me", at(22), &timing);
        assert_eq!(renewed.acquire_time, taken.acquire_time);
        assert_ne!(renewed.renew_time, taken.renew_time);
    }
}
