use std::sync::Arc;

use apis::extension::PriorityClass;
use koord_common::testing::TempDir;

use super::*;
use crate::metriccache::MetricCacheConfig;
use crate::prediction::{NODE_MODEL_ID, PeakPredictor, PodTrainingSample, PredictionConfig};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const T0: u64 = 1_700_000_000;

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + seconds)
}

fn half_lives() -> (Duration, Duration) {
    let config = PredictionConfig::default();
    (config.cpu_half_life, config.memory_half_life)
}

/// Ten minutes of one-second samples and a predictor trained every minute.
fn history() -> (Arc<MetricCache>, PeakPredictor) {
    let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
    let mut samples = Vec::new();
    for second in 0..600u64 {
        let wave = (second % 60) as f64 / 60.0;
        let mut push =
            |key: SeriesKey, value: f64| samples.push(Sample::new(key, at(second), value));
        push(SeriesKey::node(MetricKind::NodeCpuUsage), 2.0 + wave);
        push(SeriesKey::node(MetricKind::NodeMemoryUsage), 6.0 * GIB);
        push(SeriesKey::node(MetricKind::SysCpuUsage), 0.2);
        push(SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"), 1.0 + wave);
        push(
            SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"),
            2.0 * GIB,
        );
        // Not summarized: a container series.
        push(
            SeriesKey::container(MetricKind::ContainerCpuUsage, "c"),
            1.0,
        );
    }
    assert!(cache.append(&samples).rejected.is_empty());
    let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
    for minute in 1..=10u64 {
        let cpu = 1.0 + (minute % 3) as f64 * 0.4;
        predictor.train(
            at(minute * 60),
            &[PodTrainingSample {
                uid: "uid-a".into(),
                priority: PriorityClass::Prod,
                cpu: Some(cpu),
                memory: Some(2.0 * GIB),
            }],
            Some((cpu + 1.0, 6.0 * GIB)),
        );
    }
    (cache, predictor)
}

fn checkpointer(dir: &Path, cache: &Arc<MetricCache>) -> Checkpointer {
    Checkpointer::new(
        dir.to_path_buf(),
        "node-a",
        Duration::from_secs(600),
        Arc::clone(cache),
    )
}

#[test]
fn a_checkpoint_round_trips_through_the_file() {
    let tmp = TempDir::new("prediction-checkpoint").unwrap();
    let (cache, predictor) = history();
    let now = at(600);
    let saver = checkpointer(tmp.path(), &cache);
    let checkpoint = saver.build(&predictor, now);
    assert_eq!(checkpoint.models.len(), predictor.model_count());
    // Node CPU/memory, system CPU, pod CPU/memory; the container series is left out.
    assert_eq!(checkpoint.usage.len(), 5, "{:?}", checkpoint.usage);
    let node_cpu = checkpoint
        .usage
        .iter()
        .find(|series| series.kind == "node_cpu_usage")
        .unwrap();
    // 600 s of history in 30 s steps (the first and last step partial:
    // steps are aligned to the epoch, the history is not).
    assert_eq!(node_cpu.points.len(), 21, "{:?}", node_cpu.points);
    let bytes = saver.save_blocking(&checkpoint).unwrap();
    assert!(bytes < 256 << 10, "{bytes} bytes");
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![CHECKPOINT_FILE_NAME.to_string()]);

    let read_back = read(tmp.path(), "node-a").unwrap().unwrap();
    assert_eq!(read_back.node, "node-a");
    assert_eq!(read_back.models.len(), checkpoint.models.len());

    // A fresh cache and predictor get the history back.
    let restored_cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
    let loader = checkpointer(tmp.path(), &restored_cache);
    let models = loader.load_blocking(half_lives());
    let mut restored = PeakPredictor::new(PredictionConfig::default()).unwrap();
    let report = restored.restore_models(&models, now);
    assert_eq!(report.restored, predictor.model_count());
    for id in [NODE_MODEL_ID, "uid-a"] {
        assert_eq!(restored.prediction(id), predictor.prediction(id), "{id}");
    }
    let window = |cache: &MetricCache| {
        cache
            .query(&SeriesKey::node(MetricKind::NodeCpuUsage), at(0), now)
            .avg()
            .unwrap()
    };
    let (before, after) = (window(&cache), window(&restored_cache));
    assert!(
        (before - after).abs() / before < 0.01,
        "{before} vs {after}"
    );
    assert!(restored_cache.contains(&SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a")));
    assert!(!restored_cache.contains(&SeriesKey::container(MetricKind::ContainerCpuUsage, "c")));
    // New samples still append after the restored ones.
    assert!(
        restored_cache
            .append_one(&Sample::new(
                SeriesKey::node(MetricKind::NodeCpuUsage),
                at(601),
                1.0
            ))
            .is_ok()
    );
}

#[test]
fn a_missing_checkpoint_is_no_checkpoint() {
    let tmp = TempDir::new("prediction-checkpoint-none").unwrap();
    assert!(read(tmp.path(), "node-a").unwrap().is_none());
    let (cache, _) = history();
    assert!(
        checkpointer(tmp.path(), &cache)
            .load_blocking(half_lives())
            .is_empty()
    );
}

#[test]
fn corrupt_checkpoints_are_reported_and_ignored() {
    let tmp = TempDir::new("prediction-checkpoint-corrupt").unwrap();
    let (cache, predictor) = history();
    let saver = checkpointer(tmp.path(), &cache);
    let bytes = encode(&saver.build(&predictor, at(600))).unwrap();
    let path = checkpoint_path(tmp.path());
    let empty_cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
    for broken in [
        bytes[..bytes.len() / 2].to_vec(),
        b"\x00\xff garbage".to_vec(),
        Vec::new(),
        b"[1, 2, 3]".to_vec(),
    ] {
        std::fs::write(&path, &broken).unwrap();
        let error = read(tmp.path(), "node-a").unwrap_err();
        assert!(matches!(error, CheckpointError::Corrupt(_)), "{error}");
        // Loading at start goes on without it and touches nothing.
        assert!(
            checkpointer(tmp.path(), &empty_cache)
                .load_blocking(half_lives())
                .is_empty()
        );
        assert_eq!(empty_cache.stats().series, 0);
    }
    // A bad value inside a model or series skips that one only.
    let mut checkpoint = saver.build(&predictor, at(600));
    checkpoint.models[0].cpu.weights.push((1_000_000, 1.0));
    checkpoint.usage[0].points.push((0, f64::NAN));
    let mut predictor_after = PeakPredictor::new(PredictionConfig::default()).unwrap();
    let report = predictor_after.restore_models(&checkpoint.models, at(600));
    assert_eq!(report.invalid.len(), 1, "{report:?}");
    assert_eq!(report.restored, checkpoint.models.len() - 1);
    let usage = restore_usage(&empty_cache, &checkpoint.usage);
    assert_eq!(usage.invalid.len(), 1, "{usage:?}");
    assert_eq!(usage.series, checkpoint.usage.len() - 1);
}

#[test]
fn foreign_checkpoints_are_refused() {
    let (cache, predictor) = history();
    let tmp = TempDir::new("prediction-checkpoint-foreign").unwrap();
    let checkpoint = checkpointer(tmp.path(), &cache).build(&predictor, at(600));

    let mut newer = checkpoint.clone();
    newer.version = CHECKPOINT_VERSION + 1;
    let error = decode(&encode(&newer).unwrap(), "node-a").unwrap_err();
    assert!(
        matches!(error, CheckpointError::Version { found, expected } if found == 2 && expected == 1),
        "{error}"
    );

    let error = decode(&encode(&checkpoint).unwrap(), "node-b").unwrap_err();
    assert!(
        matches!(error, CheckpointError::OtherNode { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("node-a"), "{error}");

    // Upstream's per-model files (or any other JSON) are not ours.
    let upstream =
        br#"{"UID":"__node__","CPU":{},"Memory":{},"LastUpdated":"2024-01-01T00:00:00Z"}"#;
    let error = decode(upstream, "node-a").unwrap_err();
    assert!(matches!(error, CheckpointError::Foreign(_)), "{error}");

    // Other half-lives: the usage summary is restored, the models are not.
    std::fs::write(checkpoint_path(tmp.path()), encode(&checkpoint).unwrap()).unwrap();
    let fresh = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
    let models = checkpointer(tmp.path(), &fresh)
        .load_blocking((Duration::from_secs(3600), Duration::from_secs(3600)));
    assert!(models.is_empty());
    assert!(fresh.contains(&SeriesKey::node(MetricKind::NodeCpuUsage)));
}

#[test]
fn oversized_checkpoints_are_neither_read_nor_written() {
    let tmp = TempDir::new("prediction-checkpoint-size").unwrap();
    let path = checkpoint_path(tmp.path());
    // A valid JSON prefix followed by padding past the bound.
    let mut huge = br#"{"format":"koordlet.koordinator.sh/prediction-checkpoint","pad":""#.to_vec();
    huge.resize(MAX_CHECKPOINT_BYTES as usize + 10, b' ');
    std::fs::write(&path, &huge).unwrap();
    let error = read(tmp.path(), "node-a").unwrap_err();
    assert!(
        matches!(error, CheckpointError::TooLarge { size, .. } if size == MAX_CHECKPOINT_BYTES + 1),
        "{error}"
    );

    let mut checkpoint = Checkpoint::new("node-a", at(0), half_lives(), Vec::new(), Vec::new());
    let series = UsageSeries {
        kind: "pod_cpu_usage".into(),
        pod: Some("u".repeat(36)),
        points: (0..MAX_POINTS_PER_SERIES as i64)
            .map(|i| (i, 1.0))
            .collect(),
    };
    checkpoint.usage = vec![series; MAX_SUMMARY_SERIES];
    assert!(matches!(
        encode(&checkpoint),
        Err(CheckpointError::TooLarge { .. })
    ));

    // Count bounds hold below the byte bound too.
    let mut many = Checkpoint::new("node-a", at(0), half_lives(), Vec::new(), Vec::new());
    many.usage = vec![UsageSeries {
        kind: "node_cpu_usage".into(),
        pod: None,
        points: (0..=MAX_POINTS_PER_SERIES as i64)
            .map(|i| (i, 1.0))
            .collect(),
    }];
    let error = decode(&encode(&many).unwrap(), "node-a").unwrap_err();
    assert!(matches!(error, CheckpointError::TooMany { .. }), "{error}");
}

#[test]
fn usage_series_with_bad_keys_are_skipped() {
    let cache = MetricCache::new(MetricCacheConfig::default()).unwrap();
    let series = |kind: &str, pod: Option<&str>| UsageSeries {
        kind: kind.into(),
        pod: pod.map(str::to_string),
        points: vec![(1_000, 1.0), (2_000, 2.0)],
    };
    let report = restore_usage(
        &cache,
        &[
            series("node_cpu_usage", None),
            series("node_cpu_usage", None),
            series("node_cpu_usage", Some("uid")),
            series("pod_cpu_usage", None),
            series("pod_cpu_usage", Some(&"x".repeat(1000))),
            series("container_cpu_usage", None),
            UsageSeries {
                kind: "sys_cpu_usage".into(),
                pod: None,
                points: vec![(2_000, 1.0), (1_000, 1.0)],
            },
        ],
    );
    assert_eq!(report.series, 1);
    assert_eq!(report.samples, 2);
    assert_eq!(report.invalid.len(), 6, "{report:?}");
}

#[test]
fn a_write_into_a_missing_directory_creates_it_and_a_blocked_one_is_reported() {
    let tmp = TempDir::new("prediction-checkpoint-dir").unwrap();
    let nested = tmp.path().join("a/b");
    write(&nested, b"{}").unwrap();
    assert!(checkpoint_path(&nested).is_file());
    // A regular file where the directory should be.
    let blocked = tmp.path().join("file");
    std::fs::write(&blocked, b"x").unwrap();
    let error = write(&blocked, b"{}").unwrap_err();
    assert!(matches!(error, CheckpointError::Write { .. }), "{error}");
}
