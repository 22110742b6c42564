//! Leader election on a `coordination.k8s.io/v1` Lease, compatible with
//! client-go's lease lock, shared by the binaries whose replicas must not
//! write the same objects at once (koord-manager's controllers,
//! koord-scheduler's status writers and Reservation controller). Timing
//! follows client-go's defaults (15 s lease, 10 s renew deadline, 2 s retry).
//!
//! [`LeaderElector`] runs single election rounds; [`spawn_campaign`] keeps
//! running them and publishes the outcome as a [`Leadership`] that gated
//! work consults before every write.

use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::metrics::MetricsRegistry;
use crate::shutdown::Shutdown;

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

/// Timing that would let two replicas lead at once, or that a Lease cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid leader-election timing: {0}")]
pub struct LeaseTimingError(String);

impl LeaseTiming {
    /// client-go's rules: the lease outlives the renew deadline (so a holder
    /// that cannot renew stops before anyone else may take over), and the
    /// deadline leaves room for more than one retry (1.2 × the period, its
    /// jitter factor). The lease is written in whole seconds, so at least 1 s.
    pub fn validate(&self) -> Result<(), LeaseTimingError> {
        let fail = |why: String| Err(LeaseTimingError(why));
        if self.lease_duration < Duration::from_secs(1) {
            return fail(format!(
                "lease duration {:?} is under one second",
                self.lease_duration
            ));
        }
        if self.retry_period.is_zero() {
            return fail("retry period must be positive".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return fail(format!(
                "renew deadline {:?} must be shorter than the lease duration {:?}",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return fail(format!(
                "renew deadline {:?} must be longer than 1.2 x the retry period {:?}",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
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

/// The outcome of one election round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease now.
    Holding,
    /// Another candidate holds a valid lease.
    HeldBy(String),
    /// Someone else wrote the lease between our read and our write.
    Conflict,
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

    /// `namespace/name` of the lease, for logs.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
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
        Ok(self.attempt().await? == Attempt::Holding)
    }

    /// One election round, telling a live holder apart from a lost race.
    pub async fn attempt(&self) -> Result<Attempt, LeaseError> {
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
        let result = match (decision, current) {
            (LeaseDecision::Follow { holder }, _) => return Ok(Attempt::HeldBy(holder)),
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
            Ok(_) => Ok(Attempt::Holding),
            // 409 on update, 409 AlreadyExists on a racing create.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(err) => Err(self.error(err)),
        }
    }
}

/// A process identity like client-go's: host name plus a per-process suffix.
/// Falls back to the executable's name when no host name is known.
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
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "koordinator".to_owned());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{}-{nanos:09}", std::process::id())
}

/// Checks a lease (or namespace) name: a DNS-1123 subdomain, which the API
/// server requires of both; `max` is 253 for names and 63 for namespaces.
pub fn check_object_name(what: &str, text: &str, max: usize) -> Result<String, String> {
    let valid_chars = text
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let alphanumeric_ends = text
        .chars()
        .next()
        .zip(text.chars().last())
        .is_some_and(|(first, last)| first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric());
    if text.is_empty() || text.len() > max || !valid_chars || !alphanumeric_ends {
        return Err(format!(
            "{what} {text:?} is not a valid name: use 1-{max} lowercase letters, digits, '-' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(text.to_owned())
}

/// Whether this replica currently leads, as published by a campaign. Cheap
/// to clone; every clone sees the same state.
#[derive(Clone, Debug)]
pub struct Leadership {
    state: watch::Receiver<bool>,
}

impl Leadership {
    /// Always leading: leader election is off (a single replica).
    pub fn unconditional() -> Self {
        let (_, state) = watch::channel(true);
        Leadership { state }
    }

    /// Follows a state someone else publishes (`true`: leading).
    pub fn from_receiver(state: watch::Receiver<bool>) -> Self {
        Leadership { state }
    }

    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Resolves once this replica leads; `false` if it never will (the
    /// campaign ended first).
    pub async fn until_leading(&self) -> bool {
        let mut state = self.state.clone();
        state.wait_for(|leading| *leading).await.is_ok()
    }

    /// Resolves once this replica no longer leads (at once if it does not);
    /// never while leadership is unconditional.
    pub async fn until_lost(&self) {
        let mut state = self.state.clone();
        if state.wait_for(|leading| !*leading).await.is_err() && *state.borrow() {
            // Nobody can revoke it any more.
            std::future::pending::<()>().await;
        }
    }

    /// Runs `work` unless or until leadership is lost: `None` when it was
    /// lost first, and `work` was dropped (an in-flight request is cancelled).
    pub async fn while_leading<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        if !self.is_leader() {
            return None;
        }
        tokio::select! {
            biased;
            () = self.until_lost() => None,
            output = work => Some(output),
        }
    }

    /// The next change of state: `None` once nothing will change any more.
    pub async fn changed(&mut self) -> Option<bool> {
        self.state.changed().await.ok()?;
        Some(*self.state.borrow_and_update())
    }
}

/// Campaigns for the lease until shutdown, once `ready` resolves (e.g. the
/// caches are synced, so a new leader never acts on a half-listed cluster).
///
/// Leadership starts when a round leaves us holding the lease. It ends the
/// moment a round finds another live holder, or when no renewal succeeded
/// within the renew deadline (each attempt is cut off at that deadline, so a
/// hanging API call cannot stretch it); since the deadline is shorter than
/// the lease, we stop before anyone else may take over. After losing it, the
/// replica campaigns again. Shutdown ends leadership too.
pub fn spawn_campaign(
    elector: LeaderElector,
    ready: impl Future<Output = ()> + Send + 'static,
    shutdown: Shutdown,
) -> Leadership {
    let (publish, state) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            () = ready => {}
            _ = shutdown.wait() => return,
        }
        campaign(&elector, &publish, &shutdown).await;
        publish.send_replace(false);
    });
    Leadership { state }
}

async fn campaign(elector: &LeaderElector, publish: &watch::Sender<bool>, shutdown: &Shutdown) {
    let timing = elector.timing();
    let lease = elector.lease();
    tracing::info!(%lease, identity = elector.identity(), "campaigning for leadership");
    loop {
        // Follow until a round leaves us holding the lease.
        let mut last_holder: Option<String> = None;
        let mut renewed_at = loop {
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                outcome = elector.attempt() => outcome,
                _ = shutdown.wait() => return,
            };
            match outcome {
                Ok(Attempt::Holding) => break started,
                Ok(Attempt::HeldBy(holder)) => {
                    if last_holder.as_ref() != Some(&holder) {
                        tracing::info!(%lease, %holder, "another replica leads; standing by");
                        last_holder = Some(holder);
                    }
                }
                Ok(Attempt::Conflict) => {}
                Err(err) => tracing::warn!(error = %err, "leader election attempt failed"),
            }
            tokio::select! {
                () = tokio::time::sleep(timing.retry_period) => {}
                _ = shutdown.wait() => return,
            }
        };
        tracing::info!(%lease, identity = elector.identity(), "became the leader");
        publish.send_replace(true);

        let reason = loop {
            tokio::select! {
                () = tokio::time::sleep(timing.retry_period) => {}
                _ = shutdown.wait() => return,
            }
            // Measured from the start of the last good round: the lease was
            // renewed no earlier than that.
            let deadline = renewed_at + timing.renew_deadline;
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                outcome = tokio::time::timeout_at(deadline, elector.attempt()) => outcome,
                _ = shutdown.wait() => return,
            };
            match outcome {
                Ok(Ok(Attempt::Holding)) => renewed_at = started,
                Ok(Ok(Attempt::HeldBy(holder))) => break format!("the lease is held by {holder}"),
                Ok(Ok(Attempt::Conflict)) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "lease renewal failed"),
                Err(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                break format!("not renewed within {:?}", timing.renew_deadline);
            }
        };
        publish.send_replace(false);
        tracing::warn!(%lease, %reason, "leadership lost; stopped leader-only work");
    }
}

/// Exports client-go's `leader_election_master_status{name}` gauge (1 while
/// this replica leads the named lease) and keeps it following `leadership`.
pub fn export_leader_status(metrics: &MetricsRegistry, lease_name: &str, leadership: &Leadership) {
    let family = Family::<Vec<(String, String)>, Gauge>::default();
    metrics.register_root(|registry| {
        registry.register(
            "leader_election_master_status",
            "Whether this replica leads the named lease (1) or not (0)",
            family.clone(),
        );
    });
    let gauge = family
        .get_or_create(&vec![("name".to_owned(), lease_name.to_owned())])
        .clone();
    let mut leadership = leadership.clone();
    gauge.set(i64::from(leadership.is_leader()));
    tokio::spawn(async move {
        while let Some(leading) = leadership.changed().await {
            gauge.set(i64::from(leading));
        }
    });
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

    #[test]
    fn timing_that_could_overlap_two_leaders_is_rejected() {
        assert_eq!(LeaseTiming::default().validate(), Ok(()));
        let secs = Duration::from_secs;
        let with = |lease, renew, retry| LeaseTiming {
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        };
        for (bad, needle) in [
            (with(secs(10), secs(10), secs(2)), "shorter than the lease"),
            (with(secs(15), secs(2), secs(2)), "1.2 x the retry period"),
            (with(secs(15), secs(10), Duration::ZERO), "retry period"),
            (
                with(
                    Duration::from_millis(900),
                    Duration::from_millis(500),
                    secs(0),
                ),
                "under one second",
            ),
        ] {
            let err = bad.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn lease_names_must_be_dns_subdomains() {
        assert_eq!(
            check_object_name("lease", "koord-scheduler-extender", 253).as_deref(),
            Ok("koord-scheduler-extender")
        );
        for bad in ["", "Upper", "-lead", "lead-", "a_b", "a/b"] {
            assert!(check_object_name("lease", bad, 253).is_err(), "{bad:?}");
        }
        assert!(check_object_name("namespace", &"a".repeat(64), 63).is_err());
    }

    #[tokio::test]
    async fn unconditional_leadership_never_ends() {
        let leadership = Leadership::unconditional();
        assert!(leadership.is_leader());
        assert!(leadership.until_leading().await);
        assert_eq!(leadership.while_leading(async { 7 }).await, Some(7));
        let lost = tokio::time::timeout(Duration::from_millis(50), leadership.until_lost()).await;
        assert!(lost.is_err(), "unconditional leadership was lost");
    }

    #[tokio::test]
    async fn losing_leadership_cancels_gated_work() {
        let (publish, state) = watch::channel(true);
        let leadership = Leadership::from_receiver(state);
        let gated = leadership.clone();
        let work = tokio::spawn(async move {
            gated
                .while_leading(tokio::time::sleep(Duration::from_secs(60)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        publish.send_replace(false);
        let outcome = tokio::time::timeout(Duration::from_secs(5), work)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(outcome, None);
        assert_eq!(leadership.while_leading(async { 1 }).await, None);
    }

    mod campaign {
        use std::sync::{Arc, Mutex};

        use serde_json::{Value, json};

        use super::*;
        use crate::testing::FakeApiServer;

        const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
        const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lead";

        /// Short timing so tests take seconds: 1 s lease, 600 ms deadline.
        fn fast() -> LeaseTiming {
            LeaseTiming {
                lease_duration: Duration::from_secs(1),
                renew_deadline: Duration::from_millis(600),
                retry_period: Duration::from_millis(100),
            }
        }

        fn lease_held_by(holder: &str, renewed: SystemTime, version: u64) -> Value {
            let renewed = Timestamp::try_from(renewed).unwrap().to_string();
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lead", "namespace": "ns", "resourceVersion": version.to_string()},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1, "renewTime": renewed}
            })
        }

        /// A lease store behind GET/POST/PUT, optionally failing every call.
        fn lease_store(api: &FakeApiServer) -> (Arc<Mutex<Option<Value>>>, Arc<Mutex<bool>>) {
            let stored: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
            let failing = Arc::new(Mutex::new(false));
            let (store, fail) = (Arc::clone(&stored), Arc::clone(&failing));
            api.respond_with(move |request| {
                if *fail.lock().unwrap() {
                    return Some((500, json!({"kind": "Status", "code": 500}).to_string()));
                }
                let mut lease = store.lock().unwrap();
                match (request.method.as_str(), request.path()) {
                    ("GET", LEASE) => Some(match lease.as_ref() {
                        Some(value) => (200, value.to_string()),
                        None => (
                            404,
                            json!({"kind": "Status", "code": 404, "reason": "NotFound"})
                                .to_string(),
                        ),
                    }),
                    ("POST", LEASES) | ("PUT", LEASE) => {
                        let mut value: Value = serde_json::from_str(&request.body).unwrap();
                        let version = lease
                            .as_ref()
                            .and_then(|l| {
                                l["metadata"]["resourceVersion"]
                                    .as_str()?
                                    .parse::<u64>()
                                    .ok()
                            })
                            .unwrap_or(0);
                        value["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                        *lease = Some(value.clone());
                        Some((
                            if request.method == "POST" { 201 } else { 200 },
                            value.to_string(),
                        ))
                    }
                    _ => None,
                }
            });
            (stored, failing)
        }

        fn client(api: &FakeApiServer) -> kube::Client {
            kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap()
        }

        async fn wait_until(leadership: &Leadership, leading: bool) -> bool {
            let mut state = leadership.state.clone();
            tokio::time::timeout(Duration::from_secs(20), state.wait_for(|l| *l == leading))
                .await
                .is_ok_and(|r| r.is_ok())
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_standby_takes_over_only_once_the_holder_stops_renewing() {
            let api = FakeApiServer::start().unwrap();
            let (stored, _) = lease_store(&api);
            *stored.lock().unwrap() = Some(lease_held_by("other", SystemTime::now(), 1));
            let shutdown = Shutdown::new();
            let elector = LeaderElector::new(client(&api), "ns", "lead", "me".into(), fast());
            let leadership = spawn_campaign(elector, std::future::ready(()), shutdown.clone());

            // The holder keeps renewing for two lease durations.
            for _ in 0..8 {
                *stored.lock().unwrap() = Some(lease_held_by("other", SystemTime::now(), 2));
                tokio::time::sleep(Duration::from_millis(250)).await;
                assert!(
                    !leadership.is_leader(),
                    "took a lease another replica renews"
                );
            }
            // Then it stops: the lease expires and we take it over.
            assert!(wait_until(&leadership, true).await, "never took over");
            let lease = stored.lock().unwrap().clone().unwrap();
            assert_eq!(lease["spec"]["holderIdentity"], "me");
            assert_eq!(lease["spec"]["leaseTransitions"], 1);
            shutdown.trigger(crate::ShutdownReason::Requested("test over".into()));
            assert!(
                wait_until(&leadership, false).await,
                "still leading after shutdown"
            );
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_leader_steps_down_when_another_holds_the_lease_or_renewal_fails() {
            let api = FakeApiServer::start().unwrap();
            let (stored, failing) = lease_store(&api);
            let shutdown = Shutdown::new();
            let elector = LeaderElector::new(client(&api), "ns", "lead", "me".into(), fast());
            let leadership = spawn_campaign(elector, std::future::ready(()), shutdown.clone());
            assert!(
                wait_until(&leadership, true).await,
                "never acquired a free lease"
            );

            // Someone else wrote the lease (we were partitioned, say).
            let taken_at = tokio::time::Instant::now();
            *stored.lock().unwrap() = Some(lease_held_by(
                "other",
                SystemTime::now() + Duration::from_secs(30),
                9,
            ));
            assert!(
                wait_until(&leadership, false).await,
                "kept leading a lease held by another"
            );
            // Found on the next round, not at the renew deadline.
            assert!(
                taken_at.elapsed() < fast().renew_deadline,
                "{:?}",
                taken_at.elapsed()
            );

            // Free it again; we lead again, then the API server fails every call.
            *stored.lock().unwrap() = None;
            assert!(wait_until(&leadership, true).await, "never re-acquired");
            let failing_since = tokio::time::Instant::now();
            *failing.lock().unwrap() = true;
            assert!(
                wait_until(&leadership, false).await,
                "kept leading without renewals"
            );
            // Before the lease (1 s) could have expired for the others.
            assert!(
                failing_since.elapsed() < fast().lease_duration,
                "{:?}",
                failing_since.elapsed()
            );
            shutdown.trigger(crate::ShutdownReason::Requested("test over".into()));
        }

        #[tokio::test]
        async fn no_round_runs_before_the_campaign_is_ready() {
            let api = FakeApiServer::start().unwrap();
            lease_store(&api);
            let shutdown = Shutdown::new();
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
            let elector = LeaderElector::new(client(&api), "ns", "lead", "me".into(), fast());
            let leadership = spawn_campaign(
                elector,
                async move {
                    let _ = ready_rx.await;
                },
                shutdown.clone(),
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(api.recorded().iter().all(|r| !r.path().contains("leases")));
            assert!(!leadership.is_leader());
            ready_tx.send(()).unwrap();
            assert!(wait_until(&leadership, true).await);
            shutdown.trigger(crate::ShutdownReason::Requested("test over".into()));
        }
    }
}
