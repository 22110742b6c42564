//! The scheduler state with one writer at a time and published snapshots.
//!
//! Writers (the watch, `/bind`, `/preempt`, housekeeping, the Reservation
//! controller) take [`SchedulerCore::write`]: they run one at a time on the
//! working copy, and when a writer is done its guard publishes a copy of
//! the state. Readers (`/filter`, `/prioritize`, status checks) take
//! [`SchedulerCore::read`], the last published copy: an `Arc` loaded
//! without a lock, so a reader never waits for a writer and a writer never
//! waits for a reader. Publishing is cheap because the state's large parts
//! are copy-on-write ([`crate::cow`]): a copy shares everything a later
//! write does not touch.
//!
//! A reader keeps the snapshot it loaded for its whole call, so one call
//! sees one version. State that must outlive versions (the `/filter`
//! records `/bind` checks, Coscheduling's decisions in flight) is shared
//! between the copies behind its own lock.
//!
//! Snapshots are freed by the writer, never by a reader: the last holder
//! of a snapshot frees every shard written since (a few thousand reference
//! counts and the copied shards), which cost `/filter` up to 2 ms under a
//! storm of watch events when the last holder was a reader. The writer
//! keeps each replaced snapshot until no reader holds it and frees it at a
//! later publish; with no writes, at most the snapshots readers held at
//! the last publish wait for the next one.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::scheduler::Scheduler;

/// Shared handle used by the shells.
pub type SharedScheduler = Arc<SchedulerCore>;

/// A writer panicked while it held the state: the working copy may be half
/// written, so nothing more is read from it or published (as a poisoned
/// lock would).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("scheduler state poisoned: a writer panicked")]
pub struct Poisoned;

/// How long publishing took, for `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct PublishStats {
    pub published: u64,
    pub total: Duration,
    pub slowest: Duration,
}

/// See the module docs.
pub struct SchedulerCore {
    working: Mutex<Scheduler>,
    published: ArcSwap<Scheduler>,
    stats: Mutex<PublishStats>,
    /// Replaced snapshots some reader may still hold, freed by the writer
    /// once none does (see the module docs). Only writers touch it.
    retired: Mutex<Vec<Arc<Scheduler>>>,
    /// `scheduler_state_publish_duration_seconds`.
    publish_duration: Histogram,
}

impl SchedulerCore {
    pub fn new(mut scheduler: Scheduler) -> Self {
        scheduler.prepare_for_readers();
        let published = ArcSwap::from_pointee(scheduler.clone());
        Self {
            working: Mutex::new(scheduler),
            published,
            stats: Mutex::new(PublishStats::default()),
            retired: Mutex::new(Vec::new()),
            // 1 µs .. ~16 ms: a publish is a count per map, but the writer
            // may be descheduled in the middle.
            publish_duration: Histogram::new(exponential_buckets(1e-6, 4.0, 8)),
        }
    }

    /// The last published state.
    pub fn read(&self) -> Result<Arc<Scheduler>, Poisoned> {
        if self.working.is_poisoned() {
            return Err(Poisoned);
        }
        Ok(self.published.load_full())
    }

    /// The working state, alone among writers; published when the guard
    /// goes (also after a writer that changed nothing: publishing is cheap
    /// and a caller may rely on what it read through the guard).
    pub fn write(&self) -> Result<WriteGuard<'_>, Poisoned> {
        let guard = self.working.lock().map_err(|_| Poisoned)?;
        Ok(WriteGuard {
            core: self,
            guard: Some(guard),
        })
    }

    /// Reads the working state, after the writer at work (if any) is done,
    /// without publishing. For the few readers woken by a signal a writer
    /// sends before its guard publishes (a held pod's outcome).
    pub fn read_latest<R>(&self, read: impl FnOnce(&Scheduler) -> R) -> Result<R, Poisoned> {
        let guard = self.working.lock().map_err(|_| Poisoned)?;
        Ok(read(&guard))
    }

    /// Registers `scheduler_state_publish_duration_seconds` (the registry
    /// adds the prefix): how long making a written state readable took.
    pub fn register(&self, registry: &koord_common::metrics::MetricsRegistry) {
        registry.register_component(|r| {
            r.register(
                "state_publish_duration_seconds",
                "Time to publish the scheduler state to readers after a write",
                self.publish_duration.clone(),
            );
        });
    }

    pub fn publish_stats(&self) -> PublishStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, working: &mut Scheduler) {
        let started = Instant::now();
        working.prepare_for_readers();
        let replaced = self.published.swap(Arc::new(working.clone()));
        let took = started.elapsed();
        {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            retired.push(replaced);
            // `swap` has counted every reader that loaded the replaced
            // snapshot, and no reader can load it any more: a count of one
            // is this list alone, so the drop frees it here.
            retired.retain(|snapshot| Arc::strong_count(snapshot) > 1);
        }
        self.publish_duration.observe(took.as_secs_f64());
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.published += 1;
        stats.total += took;
        stats.slowest = stats.slowest.max(took);
    }
}

/// The working state; see [`SchedulerCore::write`].
pub struct WriteGuard<'a> {
    core: &'a SchedulerCore,
    guard: Option<MutexGuard<'a, Scheduler>>,
}

impl Deref for WriteGuard<'_> {
    type Target = Scheduler;

    fn deref(&self) -> &Scheduler {
        self.guard.as_ref().expect("held until drop")
    }
}

impl DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut Scheduler {
        self.guard.as_mut().expect("held until drop")
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        // A writer that panicked leaves the mutex poisoned when the guard
        // goes; what it left half done is not published.
        if !std::thread::panicking() {
            self.core.publish(&mut guard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Change, Object};
    use serde_json::json;

    fn node(name: &str) -> Object {
        Object::Node(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap(),
        )
    }

    fn core_with_plugins() -> SchedulerCore {
        SchedulerCore::new(crate::testutil::scheduler(""))
    }

    #[test]
    fn a_reader_keeps_its_version_and_sees_the_next_one_after_the_write() {
        let core = core_with_plugins();
        let before = core.read().unwrap();
        {
            let mut state = core.write().unwrap();
            state.apply(Change::Upsert(node("n1")));
            // Not published while the writer works.
            assert!(core.read().unwrap().cache.node("n1").is_none());
        }
        assert!(before.cache.node("n1").is_none());
        let after = core.read().unwrap();
        assert!(after.cache.node("n1").is_some());
        assert_eq!(core.publish_stats().published, 1);
    }

    #[test]
    fn every_publish_is_observed_in_the_metric() {
        let core = core_with_plugins();
        let registry = koord_common::metrics::MetricsRegistry::new("scheduler");
        core.register(&registry);
        for name in ["n1", "n2"] {
            core.write().unwrap().apply(Change::Upsert(node(name)));
        }
        let text = registry.encode().unwrap();
        assert!(
            text.contains("scheduler_state_publish_duration_seconds_count 2"),
            "{text}"
        );
    }

    #[test]
    fn a_writer_does_not_wait_for_a_reader_holding_a_snapshot() {
        let core = Arc::new(core_with_plugins());
        let held = core.read().unwrap();
        let writer = {
            let core = Arc::clone(&core);
            std::thread::spawn(move || {
                core.write().unwrap().apply(Change::Upsert(node("n2")));
            })
        };
        writer.join().unwrap();
        assert!(held.cache.node("n2").is_none());
        assert!(core.read().unwrap().cache.node("n2").is_some());
    }

    #[test]
    fn a_replaced_snapshot_is_freed_by_the_writer_not_by_its_last_reader() {
        let core = core_with_plugins();
        let held = core.read().unwrap();
        let snapshot = Arc::downgrade(&held);
        core.write().unwrap().apply(Change::Upsert(node("n1")));
        // The reader lets go after the write replaced its snapshot: the
        // writer still has it, so the reader frees nothing.
        drop(held);
        assert!(snapshot.upgrade().is_some());
        // The next publish frees it, on the writer.
        core.write().unwrap().apply(Change::Upsert(node("n2")));
        assert!(snapshot.upgrade().is_none());
        // Snapshots no reader took are freed at the next publish too.
        let unread = Arc::downgrade(&core.read().unwrap());
        core.write().unwrap().apply(Change::Upsert(node("n3")));
        assert!(unread.upgrade().is_none());
    }

    #[test]
    fn a_writer_that_panics_poisons_the_state_and_publishes_nothing() {
        let core = Arc::new(core_with_plugins());
        let panicking = {
            let core = Arc::clone(&core);
            std::thread::spawn(move || {
                let mut state = core.write().unwrap();
                state.apply(Change::Upsert(node("half")));
                panic!("writer fails half way");
            })
        };
        assert!(panicking.join().is_err());
        assert_eq!(core.read().err(), Some(Poisoned));
        assert!(core.write().is_err());
        assert_eq!(core.publish_stats().published, 0);
    }
}
