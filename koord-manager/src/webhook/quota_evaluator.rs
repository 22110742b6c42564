//! The shell of quota evaluation (upstream `quotaEvaluator` and
//! `quotaAccessor`): pod admissions of one quota are queued and evaluated in
//! batches by one worker at a time, so concurrent admissions neither
//! overcount nor lose each other's use; the batch's new use is written to the
//! quota's child-request annotation with optimistic concurrency
//! (resourceVersion), re-read and retried a bounded number of times on
//! conflict. A caller waits at most [`EVALUATION_TIMEOUT`] for its answer.
//!
//! The decisions are in [`super::quota_evaluate`]; reads and writes of the
//! quota go through [`QuotaAccess`] ([`KubeQuotaAccess`] in the manager, a
//! fake in tests).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::extension::ANNOTATION_CHILD_REQUEST;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use futures::future::BoxFuture;
use koord_common::sync::MutexExt;
use kube::ResourceExt;
use tokio::sync::{Semaphore, oneshot};

use super::cache::ObjectCache;
use super::quota_evaluate::{Attributes, BatchContext, EvaluationError, UpdateSettings};
use super::review::Operation;

/// How long an admission waits for its evaluation (upstream: 10 s).
pub const EVALUATION_TIMEOUT: Duration = Duration::from_secs(10);

pub use super::quota_evaluate::TIMEOUT_MESSAGE;

/// How many quotas are evaluated at once (upstream: 16 workers).
pub const DEFAULT_WORKERS: usize = 16;

/// What writing the quota answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// Someone else wrote the quota since it was read (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Other(String),
}

/// Why the quota could not be read (the API server's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(pub String);

/// Reads and writes ElasticQuotas for the evaluator.
pub trait QuotaAccess: Send + Sync + 'static {
    /// The freshest copy known of quota `namespace/name`.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ElasticQuota, ReadError>>;

    /// Writes `child_request` to `quota`'s child-request annotation if the
    /// quota is still at `quota`'s resourceVersion. On a conflict the
    /// accessor sleeps up to `jitter` before answering, so that peers
    /// writing the same quota spread out.
    fn update_child_request<'a>(
        &'a self,
        quota: &'a ElasticQuota,
        child_request: &'a str,
        jitter: Duration,
    ) -> BoxFuture<'a, Result<(), UpdateError>>;
}

struct Waiter {
    attributes: Attributes,
    reply: oneshot::Sender<Result<(), EvaluationError>>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    /// A worker task owns this quota's queue.
    busy: bool,
}

struct Inner {
    access: Arc<dyn QuotaAccess>,
    settings: UpdateSettings,
    timeout: Duration,
    queues: Mutex<HashMap<String, Queue>>,
    workers: Semaphore,
}

/// Evaluates pod admissions against quotas, batching per quota.
#[derive(Clone)]
pub struct QuotaEvaluator {
    inner: Arc<Inner>,
}

impl QuotaEvaluator {
    pub fn new(access: Arc<dyn QuotaAccess>, settings: UpdateSettings) -> Self {
        Self::with_limits(access, settings, DEFAULT_WORKERS, EVALUATION_TIMEOUT)
    }

    /// With a given number of concurrent quota workers and caller timeout.
    pub fn with_limits(
        access: Arc<dyn QuotaAccess>,
        settings: UpdateSettings,
        workers: usize,
        timeout: Duration,
    ) -> Self {
        QuotaEvaluator {
            inner: Arc::new(Inner {
                access,
                settings,
                timeout,
                queues: Mutex::new(HashMap::new()),
                workers: Semaphore::new(workers.max(1)),
            }),
        }
    }

    /// Admits or denies one pod against one quota; the error is the denial
    /// message. Only creates and updates are evaluated.
    pub async fn evaluate(&self, attributes: Attributes) -> Result<(), EvaluationError> {
        if !matches!(attributes.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let key = attributes.key();
        let (reply, answer) = oneshot::channel();
        let start_worker = {
            let mut queues = self.inner.queues.lock_or_recover();
            let queue = queues.entry(key.clone()).or_default();
            queue.waiting.push(Waiter { attributes, reply });
            !std::mem::replace(&mut queue.busy, true)
        };
        if start_worker {
            tokio::spawn(self.inner.clone().drain(key));
        }
        match tokio::time::timeout(self.inner.timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(EvaluationError::Abandoned),
            Err(_) => Err(EvaluationError::TimedOut),
        }
    }
}

/// Clears a quota's busy mark if its worker ends early (a panic), dropping
/// the waiters so they get an answer instead of a timeout.
struct DrainGuard {
    inner: Arc<Inner>,
    key: String,
    done: bool,
}

impl Drop for DrainGuard {
    fn drop(&mut self) {
        if !self.done {
            let mut queues = self.inner.queues.lock_or_recover();
            queues.remove(&self.key);
        }
    }
}

impl Inner {
    /// Evaluates the quota's waiting admissions batch after batch until none
    /// is left. Admissions that arrive meanwhile form the next batch.
    async fn drain(self: Arc<Self>, key: String) {
        let mut guard = DrainGuard {
            inner: self.clone(),
            key: key.clone(),
            done: false,
        };
        loop {
            let Ok(_permit) = self.workers.acquire().await else {
                return;
            };
            let batch: Vec<Waiter> = {
                let mut queues = self.queues.lock_or_recover();
                let Some(queue) = queues.get_mut(&key) else {
                    guard.done = true;
                    return;
                };
                // Callers that gave up (timed out) are not counted.
                let batch: Vec<Waiter> = std::mem::take(&mut queue.waiting)
                    .into_iter()
                    .filter(|w| !w.reply.is_closed())
                    .collect();
                if batch.is_empty() {
                    queues.remove(&key);
                    guard.done = true;
                    return;
                }
                batch
            };
            let attributes: Vec<&Attributes> = batch.iter().map(|w| &w.attributes).collect();
            let results = self.check_batch(&attributes, SystemTime::now()).await;
            for (waiter, result) in batch.into_iter().zip(results) {
                let _ = waiter.reply.send(result);
            }
        }
    }

    /// One batch of one quota (upstream `checkAttributes` + `checkQuota`).
    async fn check_batch(
        &self,
        batch: &[&Attributes],
        now: SystemTime,
    ) -> Vec<Result<(), EvaluationError>> {
        let Some(first) = batch.first() else {
            return Vec::new();
        };
        let quota = match self
            .access
            .get(&first.quota_namespace, &first.quota_name)
            .await
        {
            Ok(quota) => quota,
            Err(err) => return vec![Err(EvaluationError::ReadFailed(err.0)); batch.len()],
        };
        self.check_quota(quota, batch, now).await
    }

    /// Evaluates the batch against `quota` as read, writes the new use and,
    /// on a failed write, reads the quota again and retries (bounded).
    async fn check_quota(
        &self,
        mut quota: ElasticQuota,
        batch: &[&Attributes],
        now: SystemTime,
    ) -> Vec<Result<(), EvaluationError>> {
        let Some(first) = batch.first() else {
            return Vec::new();
        };
        let (namespace, name) = (first.quota_namespace.as_str(), first.quota_name.as_str());
        // None: admitted in this batch, waiting for the write.
        let mut results: Vec<Option<Result<(), EvaluationError>>> = vec![None; batch.len()];
        let mut remaining = self.settings.start_retries();
        let mut context = BatchContext::default();
        loop {
            context.load(&quota);
            if !context.reapply_delta() {
                let mut changed = 0usize;
                for (attributes, result) in batch.iter().zip(results.iter_mut()) {
                    if result.is_some() {
                        continue;
                    }
                    match context.check_request(attributes, now) {
                        Err(denied) => *result = Some(Err(denied)),
                        Ok(true) => changed += 1,
                        Ok(false) => *result = Some(Ok(())),
                    }
                }
                if changed == 0 {
                    break;
                }
                remaining = remaining.min(self.settings.retries_for_batch(changed));
            }
            let jitter = self
                .settings
                .jitter_for_next_update(context.jitter_spent, remaining);
            context.jitter_spent += jitter;
            let written = self
                .access
                .update_child_request(&quota, &context.used_json(), jitter)
                .await;
            let failure = match written {
                Ok(()) => {
                    settle(&mut results, Ok(()));
                    break;
                }
                Err(err) => EvaluationError::UpdateFailed(err.to_string()),
            };
            if remaining == 0 {
                settle(&mut results, Err(failure));
                break;
            }
            match self.access.get(namespace, name).await {
                Ok(fresh) => quota = fresh,
                Err(_) => {
                    settle(&mut results, Err(failure));
                    break;
                }
            }
            remaining -= 1;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(EvaluationError::Undecided)))
            .collect()
    }
}

/// Gives every admission still waiting for the write `outcome`.
fn settle(
    results: &mut [Option<Result<(), EvaluationError>>],
    outcome: Result<(), EvaluationError>,
) {
    for result in results.iter_mut().filter(|r| r.is_none()) {
        *result = Some(outcome.clone());
    }
}

/// How many written quotas [`KubeQuotaAccess`] remembers (upstream: 100).
const WRITTEN_CACHE_SIZE: usize = 100;

/// Reads quotas from the webhook's watch cache (the API server when the
/// cache does not have one yet) and writes the child-request annotation with
/// a merge patch that carries the read resourceVersion, so a write over a
/// newer quota fails with a conflict. The quotas it wrote are remembered:
/// until the watch delivers a newer version, a read returns the written one
/// (so back-to-back batches do not conflict with themselves).
pub struct KubeQuotaAccess {
    client: kube::Client,
    cache: Arc<ObjectCache<ElasticQuota>>,
    written: Mutex<Written>,
    conflict_fresh_get: bool,
    random: Mutex<u64>,
}

#[derive(Default)]
struct Written {
    quotas: HashMap<String, ElasticQuota>,
    order: VecDeque<String>,
}

impl Written {
    fn remember(&mut self, key: String, quota: ElasticQuota) {
        if self.quotas.insert(key.clone(), quota).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > WRITTEN_CACHE_SIZE {
            if let Some(oldest) = self.order.pop_front() {
                self.quotas.remove(&oldest);
            }
        }
    }

    fn forget(&mut self, key: &str) {
        if self.quotas.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

/// `a` is at least as new as `b` by resourceVersion (compared as integers,
/// as upstream does for etcd versions; unreadable versions count as equal).
fn at_least_as_new(a: &ElasticQuota, b: &ElasticQuota) -> bool {
    let version = |q: &ElasticQuota| {
        q.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (version(a), version(b)) {
        (Some(a), Some(b)) => a >= b,
        _ => true,
    }
}

impl KubeQuotaAccess {
    pub fn new(
        client: kube::Client,
        cache: Arc<ObjectCache<ElasticQuota>>,
        conflict_fresh_get: bool,
    ) -> Self {
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0x2545_F491_4F6C_DD1D, |d| d.as_nanos() as u64)
            | 1;
        KubeQuotaAccess {
            client,
            cache,
            written: Mutex::new(Written::default()),
            conflict_fresh_get,
            random: Mutex::new(seed),
        }
    }

    fn api(&self, namespace: &str) -> kube::Api<ElasticQuota> {
        kube::Api::namespaced(self.client.clone(), namespace)
    }

    fn remember(&self, key: String, quota: ElasticQuota) {
        self.written.lock_or_recover().remember(key, quota);
    }
}

/// A duration in `[jitter/2, jitter)` (xorshift on `state`; spread is all that matters).
fn jittered(state: &mut u64, jitter: Duration) -> Duration {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    let fraction = (x >> 11) as f64 / (1u64 << 53) as f64;
    jitter / 2 + jitter.mul_f64(fraction / 2.0)
}

fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

impl QuotaAccess for KubeQuotaAccess {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ElasticQuota, ReadError>> {
        Box::pin(async move {
            let key = format!("{namespace}/{name}");
            let read = match self.cache.get(&key) {
                Some(cached) => cached.as_ref().clone(),
                None => self
                    .api(namespace)
                    .get(name)
                    .await
                    .map_err(|err| ReadError(api_message(&err)))?,
            };
            let mut written = self.written.lock_or_recover();
            match written.quotas.get(&key) {
                Some(mine) if !at_least_as_new(&read, mine) => Ok(mine.clone()),
                Some(_) => {
                    written.forget(&key);
                    Ok(read)
                }
                None => Ok(read),
            }
        })
    }

    fn update_child_request<'a>(
        &'a self,
        quota: &'a ElasticQuota,
        child_request: &'a str,
        jitter: Duration,
    ) -> BoxFuture<'a, Result<(), UpdateError>> {
        Box::pin(async move {
            let namespace = quota.namespace().unwrap_or_default();
            let name = quota.name_any();
            let key = format!("{namespace}/{name}");
            let patch = serde_json::json!({
                "metadata": {
                    "resourceVersion": quota.metadata.resource_version,
                    "annotations": {ANNOTATION_CHILD_REQUEST: child_request},
                }
            });
            let api = self.api(&namespace);
            match api
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
            {
                Ok(updated) => {
                    tracing::debug!(quota = %key, resource_version = ?updated.metadata.resource_version, usage = child_request, "quota usage written");
                    self.remember(key, updated);
                    Ok(())
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    if !jitter.is_zero() {
                        let pause = {
                            let mut state = self.random.lock_or_recover();
                            jittered(&mut state, jitter)
                        };
                        tokio::time::sleep(pause).await;
                    }
                    if self.conflict_fresh_get {
                        match api.get(&name).await {
                            Ok(fresh) => self.remember(key, fresh),
                            Err(err) => {
                                tracing::warn!(quota = %key, error = %err, "fresh read after a conflict failed")
                            }
                        }
                    }
                    Err(UpdateError::Conflict(status.message.clone()))
                }
                Err(err) => Err(UpdateError::Other(api_message(&err))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An in-memory API server for one or more quotas: versions count up,
    /// writes at an old version conflict, and failures can be injected.
    #[derive(Default)]
    struct FakeApi {
        quotas: Mutex<HashMap<String, ElasticQuota>>,
        /// Conflicts to answer before the next writes go through.
        conflicts: AtomicUsize,
        /// Other (non-conflict) failures to answer.
        failures: AtomicUsize,
        /// Another writer bumps the quota's version on each conflict.
        bump_on_conflict: bool,
        writes: AtomicUsize,
        gets: AtomicUsize,
        /// Delay of each write (to let admissions pile up).
        write_delay: Duration,
    }

    fn quota(name: &str, max: serde_json::Value, annotations: serde_json::Value) -> ElasticQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "annotations": annotations},
            "spec": {"max": max}
        }))
        .unwrap()
    }

    impl FakeApi {
        fn with(quotas: &[ElasticQuota]) -> Self {
            let api = FakeApi::default();
            for quota in quotas {
                api.quotas
                    .lock()
                    .unwrap()
                    .insert(quota.name_any(), quota.clone());
            }
            api
        }

        fn child_request(&self, name: &str) -> Option<String> {
            self.quotas.lock().unwrap()[name]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_CHILD_REQUEST).cloned())
        }

        fn bump(quota: &mut ElasticQuota) {
            let version: u64 = quota
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("0")
                .parse()
                .unwrap();
            quota.metadata.resource_version = Some((version + 1).to_string());
        }
    }

    impl QuotaAccess for FakeApi {
        fn get<'a>(
            &'a self,
            _namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<ElasticQuota, ReadError>> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            let found = self.quotas.lock().unwrap().get(name).cloned();
            Box::pin(async move {
                found.ok_or_else(|| {
                    ReadError(format!(
                        "elasticquotas.scheduling.sigs.k8s.io \"{name}\" not found"
                    ))
                })
            })
        }

        fn update_child_request<'a>(
            &'a self,
            quota: &'a ElasticQuota,
            child_request: &'a str,
            _jitter: Duration,
        ) -> BoxFuture<'a, Result<(), UpdateError>> {
            Box::pin(async move {
                if !self.write_delay.is_zero() {
                    tokio::time::sleep(self.write_delay).await;
                }
                self.writes.fetch_add(1, Ordering::SeqCst);
                let take = |counter: &AtomicUsize| {
                    counter
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                };
                let mut quotas = self.quotas.lock().unwrap();
                let stored = quotas.get_mut(&quota.name_any()).unwrap();
                if take(&self.failures) {
                    return Err(UpdateError::Other("etcdserver: request timed out".into()));
                }
                if take(&self.conflicts) {
                    if self.bump_on_conflict {
                        FakeApi::bump(stored);
                    }
                    return Err(UpdateError::Conflict("the object has been modified".into()));
                }
                if stored.metadata.resource_version != quota.metadata.resource_version {
                    return Err(UpdateError::Conflict("the object has been modified".into()));
                }
                stored
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(ANNOTATION_CHILD_REQUEST.into(), child_request.into());
                FakeApi::bump(stored);
                Ok(())
            })
        }
    }

    fn pod_requesting(cpu: &str) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    fn attributes(quota: &str, cpu: &str) -> Attributes {
        Attributes {
            quota_namespace: "ns".into(),
            quota_name: quota.into(),
            operation: Operation::Create,
            pod: pod_requesting(cpu),
        }
    }

    fn evaluator(api: &Arc<FakeApi>) -> QuotaEvaluator {
        QuotaEvaluator::new(api.clone(), UpdateSettings::default())
    }

    #[tokio::test]
    async fn sequential_admissions_accumulate_and_the_last_is_refused() {
        // Upstream TestEvaluateSequential "second pod exceeds accumulated quota".
        let api = Arc::new(FakeApi::with(&[quota(
            "q",
            json!({"cpu": "10"}),
            json!({ANNOTATION_CHILD_REQUEST: r#"{"cpu":"8"}"#}),
        )]));
        let evaluator = evaluator(&api);
        evaluator.evaluate(attributes("q", "1")).await.unwrap();
        assert_eq!(api.child_request("q").unwrap(), r#"{"cpu":"9"}"#);
        let err = evaluator.evaluate(attributes("q", "3")).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "exceeded quota: ns/q, requested: cpu=3, used: cpu=9, limited: cpu=10"
        );
        assert_eq!(api.child_request("q").unwrap(), r#"{"cpu":"9"}"#);
    }

    #[tokio::test]
    async fn concurrent_admissions_of_one_quota_neither_overcount_nor_lose_updates() {
        // 40 pods of 1 cpu race for a quota of 25: exactly 25 get in and the
        // recorded use is exactly 25, although each write takes a while.
        let api = Arc::new(FakeApi {
            write_delay: Duration::from_millis(5),
            ..FakeApi::with(&[quota("q", json!({"cpu": "25"}), json!({}))])
        });
        let evaluator = evaluator(&api);
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let evaluator = evaluator.clone();
                tokio::spawn(async move { evaluator.evaluate(attributes("q", "1")).await })
            })
            .collect();
        let mut admitted = 0;
        let mut denied = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => admitted += 1,
                Err(message) => {
                    assert!(
                        message
                            .to_string()
                            .starts_with("exceeded quota: ns/q, requested: cpu=1, used: cpu="),
                        "{message}"
                    );
                    denied += 1;
                }
            }
        }
        assert_eq!((admitted, denied), (25, 15));
        assert_eq!(api.child_request("q").unwrap(), r#"{"cpu":"25"}"#);
        // Batched: far fewer writes than admissions.
        assert!(
            api.writes.load(Ordering::SeqCst) < 25,
            "{}",
            api.writes.load(Ordering::SeqCst)
        );
    }

    #[tokio::test]
    async fn a_conflict_is_retried_on_the_fresh_quota() {
        // Upstream TestCheckQuotaFastRetry: the first write conflicts, the
        // quota read again shows another writer's use.
        let api = Arc::new(FakeApi {
            conflicts: AtomicUsize::new(1),
            ..FakeApi::with(&[quota(
                "q",
                json!({"cpu": "20"}),
                json!({ANNOTATION_CHILD_REQUEST: r#"{"cpu":"10"}"#}),
            )])
        });
        let inner = |api: &Arc<FakeApi>| Inner {
            access: api.clone(),
            settings: UpdateSettings::default(),
            timeout: EVALUATION_TIMEOUT,
            queues: Mutex::new(HashMap::new()),
            workers: Semaphore::new(1),
        };
        let as_read = api.get("ns", "q").await.unwrap();
        // Another writer moves the use to 12 before the retry reads it.
        set_child_request(&api, r#"{"cpu":"12"}"#);
        let (a, b) = (attributes("q", "2"), attributes("q", "3"));
        let results = inner(&api)
            .check_quota(as_read, &[&a, &b], SystemTime::now())
            .await;
        assert_eq!(results, vec![Ok(()), Ok(())]);
        assert_eq!(api.child_request("q").unwrap(), r#"{"cpu":"17"}"#);
        assert_eq!(api.writes.load(Ordering::SeqCst), 2);

        // The same with 18 in use by then: the admitted pods no longer fit,
        // so the pod is checked again, and refused.
        let api = Arc::new(FakeApi {
            conflicts: AtomicUsize::new(1),
            ..FakeApi::with(&[quota(
                "q",
                json!({"cpu": "20"}),
                json!({ANNOTATION_CHILD_REQUEST: r#"{"cpu":"10"}"#}),
            )])
        });
        let as_read = api.get("ns", "q").await.unwrap();
        set_child_request(&api, r#"{"cpu":"18"}"#);
        let c = attributes("q", "5");
        let results = inner(&api)
            .check_quota(as_read, &[&c], SystemTime::now())
            .await;
        assert_eq!(
            results
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect::<Vec<_>>(),
            vec![Err(
                "exceeded quota: ns/q, requested: cpu=5, used: cpu=18, limited: cpu=20".into()
            )]
        );
    }

    fn set_child_request(api: &FakeApi, value: &str) {
        api.quotas
            .lock()
            .unwrap()
            .get_mut("q")
            .unwrap()
            .metadata
            .annotations = Some([(ANNOTATION_CHILD_REQUEST.to_owned(), value.to_owned())].into());
    }

    #[tokio::test]
    async fn retries_are_bounded_and_then_the_write_error_is_the_answer() {
        // Every write conflicts (another writer keeps bumping the version):
        // one write plus three retries, then the conflict is the answer.
        let api = Arc::new(FakeApi {
            conflicts: AtomicUsize::new(usize::MAX),
            bump_on_conflict: true,
            ..FakeApi::with(&[quota("q", json!({"cpu": "20"}), json!({}))])
        });
        let err = evaluator(&api)
            .evaluate(attributes("q", "1"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "the object has been modified");
        assert_eq!(api.writes.load(Ordering::SeqCst), 4);

        // A larger maximum gives a single pod no more than three retries.
        let api = Arc::new(FakeApi {
            conflicts: AtomicUsize::new(usize::MAX),
            ..FakeApi::with(&[quota("q", json!({"cpu": "20"}), json!({}))])
        });
        let settings = UpdateSettings {
            max_retries: 10,
            ..UpdateSettings::default()
        };
        let err = QuotaEvaluator::new(api.clone(), settings)
            .evaluate(attributes("q", "1"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "the object has been modified");
        assert_eq!(api.writes.load(Ordering::SeqCst), 4);

        // Other write errors are retried the same way and then reported.
        let api = Arc::new(FakeApi {
            failures: AtomicUsize::new(2),
            ..FakeApi::with(&[quota("q", json!({"cpu": "20"}), json!({}))])
        });
        evaluator(&api)
            .evaluate(attributes("q", "1"))
            .await
            .unwrap();
        assert_eq!(api.child_request("q").unwrap(), r#"{"cpu":"1"}"#);
    }

    #[tokio::test]
    async fn a_missing_quota_is_the_answer_for_the_whole_batch() {
        let api = Arc::new(FakeApi::default());
        let err = evaluator(&api)
            .evaluate(attributes("gone", "1"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "elasticquotas.scheduling.sigs.k8s.io \"gone\" not found"
        );
    }

    /// Never answers a read.
    struct Stuck;

    impl QuotaAccess for Stuck {
        fn get<'a>(
            &'a self,
            _namespace: &'a str,
            _name: &'a str,
        ) -> BoxFuture<'a, Result<ElasticQuota, ReadError>> {
            Box::pin(futures::future::pending())
        }

        fn update_child_request<'a>(
            &'a self,
            _quota: &'a ElasticQuota,
            _child_request: &'a str,
            _jitter: Duration,
        ) -> BoxFuture<'a, Result<(), UpdateError>> {
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test]
    async fn a_stuck_evaluation_times_out_with_upstreams_internal_error() {
        let evaluator = QuotaEvaluator::with_limits(
            Arc::new(Stuck),
            UpdateSettings::default(),
            1,
            Duration::from_millis(50),
        );
        let err = evaluator.evaluate(attributes("q", "1")).await.unwrap_err();
        assert_eq!(err.to_string(), TIMEOUT_MESSAGE);
        assert_eq!(
            err.to_string(),
            "Internal error occurred: elastic quota evaluation timed out"
        );
    }

    #[tokio::test]
    async fn deletes_are_not_evaluated() {
        let api = Arc::new(FakeApi::default());
        let mut delete = attributes("q", "1");
        delete.operation = Operation::Delete;
        assert_eq!(evaluator(&api).evaluate(delete).await, Ok(()));
        assert_eq!(api.gets.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn written_quotas_win_until_the_watch_catches_up() {
        let mut older = quota("q", json!({}), json!({}));
        older.metadata.resource_version = Some("9".into());
        let mut newer = older.clone();
        newer.metadata.resource_version = Some("10".into());
        assert!(!at_least_as_new(&older, &newer));
        assert!(at_least_as_new(&newer, &older));
        assert!(at_least_as_new(&newer, &newer));
        let mut odd = older.clone();
        odd.metadata.resource_version = Some("x".into());
        assert!(at_least_as_new(&odd, &newer));

        let mut written = Written::default();
        for index in 0..(WRITTEN_CACHE_SIZE + 5) {
            written.remember(format!("ns/q{index}"), older.clone());
        }
        assert_eq!(written.quotas.len(), WRITTEN_CACHE_SIZE);
        assert!(!written.quotas.contains_key("ns/q0"));
        written.forget("ns/q7");
        assert!(!written.order.contains(&"ns/q7".to_owned()));
    }

    const QUOTA_PATH: &str = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/ns/elasticquotas/q";

    fn versioned(version: &str, used: &str) -> ElasticQuota {
        let mut quota = quota(
            "q",
            json!({"cpu": "4"}),
            json!({ANNOTATION_CHILD_REQUEST: used}),
        );
        quota.metadata.resource_version = Some(version.into());
        quota
    }

    #[tokio::test]
    async fn kube_access_writes_with_the_read_version_and_remembers_what_it_wrote() {
        let server = koord_common::testing::FakeApiServer::start().unwrap();
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let cache = Arc::new(ObjectCache::<ElasticQuota>::default());
        cache.insert(versioned("5", r#"{"cpu":"1"}"#));
        let access = KubeQuotaAccess::new(client, cache.clone(), true);
        let body = |q: &ElasticQuota| serde_json::to_string(q).unwrap();

        server.respond(
            "PATCH",
            QUOTA_PATH,
            200,
            &body(&versioned("6", r#"{"cpu":"2"}"#)),
        );
        let read = access.get("ns", "q").await.unwrap();
        access
            .update_child_request(&read, r#"{"cpu":"2"}"#, Duration::ZERO)
            .await
            .unwrap();
        let patch = server
            .recorded()
            .into_iter()
            .find(|r| r.method == "PATCH")
            .unwrap();
        assert_eq!(
            patch.header("content-type"),
            Some("application/merge-patch+json")
        );
        let sent: serde_json::Value = serde_json::from_str(&patch.body).unwrap();
        assert_eq!(
            sent,
            json!({"metadata": {"resourceVersion": "5", "annotations": {ANNOTATION_CHILD_REQUEST: r#"{"cpu":"2"}"#}}})
        );
        // The watch has not caught up: the written version is read.
        let next = access.get("ns", "q").await.unwrap();
        assert_eq!(next.metadata.resource_version.as_deref(), Some("6"));
        // Once it has, the cache's.
        cache.insert(versioned("7", r#"{"cpu":"3"}"#));
        let caught_up = access.get("ns", "q").await.unwrap();
        assert_eq!(caught_up.metadata.resource_version.as_deref(), Some("7"));
        assert!(access.written.lock().unwrap().quotas.is_empty());

        // A conflict reads the quota fresh (--quota-update-conflict-fresh-get) and says so.
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on elasticquotas.scheduling.sigs.k8s.io \"q\": the object has been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict", "code": 409});
        server.respond("PATCH", QUOTA_PATH, 409, &conflict.to_string());
        server.respond(
            "GET",
            QUOTA_PATH,
            200,
            &body(&versioned("9", r#"{"cpu":"4"}"#)),
        );
        let err = access
            .update_child_request(&caught_up, r#"{"cpu":"4"}"#, Duration::from_millis(2))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, UpdateError::Conflict(m) if m.contains("the object has been modified")),
            "{err:?}"
        );
        let fresh = access.get("ns", "q").await.unwrap();
        assert_eq!(fresh.metadata.resource_version.as_deref(), Some("9"));

        // Other failures are reported as they are, nothing remembered.
        let failure = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
        server.respond("PATCH", QUOTA_PATH, 500, &failure.to_string());
        let err = access
            .update_child_request(&fresh, r#"{"cpu":"4"}"#, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            UpdateError::Other("etcdserver: request timed out".into())
        );

        // A quota the cache does not have yet is read from the API server.
        let empty = Arc::new(ObjectCache::<ElasticQuota>::default());
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let direct = KubeQuotaAccess::new(client, empty, false);
        let read = direct.get("ns", "q").await.unwrap();
        assert_eq!(read.metadata.resource_version.as_deref(), Some("9"));
        assert!(direct.get("ns", "missing").await.is_err());
    }

    #[test]
    fn jitter_sleeps_fall_in_the_upper_half() {
        let jitter = Duration::from_millis(50);
        let mut state = 7u64;
        let draws: Vec<Duration> = (0..500).map(|_| jittered(&mut state, jitter)).collect();
        assert!(
            draws.iter().all(|d| *d >= jitter / 2 && *d < jitter),
            "{draws:?}"
        );
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 100);
        assert_eq!(jittered(&mut state, Duration::ZERO), Duration::ZERO);
    }
}
