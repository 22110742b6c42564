//! Metric cache benchmark: 200 containers × 30 min at 1 s, CPU and memory
//! series per container (360k samples per kind), inserted as the collector
//! does (one batch per second). Prints insert throughput, query latency
//! percentiles for 1, 5 and 30 minute windows, and memory: the cache's own
//! estimate and the process RSS growth.
//!
//! Run: `cargo bench -p koordlet --bench metriccache`

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use koordlet::metriccache::{
    Aggregation, BYTES_PER_SAMPLE, MetricCache, MetricCacheConfig, MetricKind, Sample, SeriesKey,
};

const CONTAINERS: usize = 200;
const SECONDS: u64 = 30 * 60;
const QUERIES_PER_WINDOW: usize = 2000;

fn vm_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A cheap deterministic pseudo-random sequence (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    let index = (sorted.len() * permille / 1000).saturating_sub(1);
    sorted[index]
}

fn main() {
    let config = MetricCacheConfig {
        retention: Duration::from_secs(SECONDS),
        sample_interval: Duration::from_secs(1),
        expire: Duration::from_secs(1800),
    };
    let ids: Vec<Arc<str>> = (0..CONTAINERS)
        .map(|i| Arc::from(format!("containerd://{i:064x}")))
        .collect();
    let keys: Vec<(SeriesKey, SeriesKey)> = ids
        .iter()
        .map(|id| {
            (
                SeriesKey::container(MetricKind::ContainerCpuUsage, id.clone()),
                SeriesKey::container(MetricKind::ContainerMemoryUsage, id.clone()),
            )
        })
        .collect();

    // Pre-build the batches so the timing covers the cache only.
    let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let batches: Vec<Vec<Sample>> = (0..SECONDS)
        .map(|second| {
            let now = start + Duration::from_secs(second) + Duration::from_millis(rng.next() % 50);
            keys.iter()
                .flat_map(|(cpu, memory)| {
                    [
                        Sample::new(cpu.clone(), now, rng.unit() * 4.0),
                        Sample::new(memory.clone(), now, 1e8 + rng.unit() * 4e9),
                    ]
                })
                .collect()
        })
        .collect();
    let total_samples: usize = batches.iter().map(Vec::len).sum();

    let rss_before = vm_rss_kib();
    let cache = MetricCache::new(config).expect("valid benchmark config");
    let began = Instant::now();
    let mut appended = 0;
    for batch in &batches {
        appended += cache.append(batch).appended;
    }
    let insert_time = began.elapsed();
    let rss_after = vm_rss_kib();
    assert_eq!(appended, total_samples, "every sample must be stored");

    println!("metric cache benchmark: {CONTAINERS} containers x {SECONDS} s at 1 s, cpu + memory");
    println!(
        "  retention {} samples/series, at most {} B/sample (compressed blocks; repeated values cost less)",
        config.max_samples_per_series(),
        BYTES_PER_SAMPLE
    );
    println!(
        "  insert: {total_samples} samples in {:.1} ms = {:.2} M samples/s ({:.1} us per 1 s round of {} samples)",
        insert_time.as_secs_f64() * 1e3,
        total_samples as f64 / insert_time.as_secs_f64() / 1e6,
        insert_time.as_secs_f64() * 1e6 / SECONDS as f64,
        CONTAINERS * 2
    );

    let end = start + Duration::from_secs(SECONDS);
    for (label, window) in [("1m", 60), ("5m", 300), ("30m", SECONDS)] {
        let mut latencies = Vec::with_capacity(QUERIES_PER_WINDOW);
        let mut checksum = 0.0;
        for i in 0..QUERIES_PER_WINDOW {
            let (cpu, memory) = &keys[(rng.next() as usize) % keys.len()];
            let key = if i % 2 == 0 { cpu } else { memory };
            let from: SystemTime = end - Duration::from_secs(window);
            let began = Instant::now();
            let values = cache.query(key, from, end);
            let p95 = values.value(Aggregation::P95);
            let avg = values.value(Aggregation::Avg);
            latencies.push(began.elapsed());
            checksum += p95.unwrap_or(0.0) + avg.unwrap_or(0.0) + values.count() as f64;
        }
        latencies.sort();
        println!(
            "  query {label:>3} window (all aggregates): p50 {:>7.1} us  p90 {:>7.1} us  p99 {:>7.1} us  max {:>7.1} us  (checksum {checksum:.0})",
            percentile(&latencies, 500).as_secs_f64() * 1e6,
            percentile(&latencies, 900).as_secs_f64() * 1e6,
            percentile(&latencies, 990).as_secs_f64() * 1e6,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
        );
    }

    let stats = cache.stats();
    println!(
        "  memory: {} series, {} samples, sample buffers {:.2} MiB, estimate incl. bookkeeping {:.2} MiB",
        stats.series,
        stats.samples,
        stats.sample_bytes as f64 / (1024.0 * 1024.0),
        stats.estimated_bytes as f64 / (1024.0 * 1024.0)
    );
    match (rss_before, rss_after) {
        (Some(before), Some(after)) => println!(
            "  VmRSS: {:.2} MiB before filling, {:.2} MiB after, delta {:.2} MiB",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            after.saturating_sub(before) as f64 / 1024.0
        ),
        _ => println!("  VmRSS: not available (/proc/self/status unreadable)"),
    }
    // Keep the batches alive until after the RSS reading so their memory is not in the delta.
    drop(batches);
}
