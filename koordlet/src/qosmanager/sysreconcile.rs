//! QoS strategy `sysreconcile` (upstream `SystemConfig`): keeps the kernel
//! knobs of NodeSLO `systemStrategy` at their configured values.
//!
//! | NodeSLO field | file | valid |
//! |---|---|---|
//! | `minFreeKbytesFactor` | `<proc>/sys/vm/min_free_kbytes` = MemTotal(KiB) × factor ÷ 10000 | 10 MiB..10 GiB |
//! | `watermarkScaleFactor` | `<proc>/sys/vm/watermark_scale_factor` | 10..400 |
//! | `memcgReapBackGround` | `<sys>/kernel/mm/memcg_reaper/reap_background` | 0..1 |
//! | `schedGroupIdentityEnabled` | `<proc>/sys/kernel/sched_group_identity_enabled` | 0..1 |
//! | `schedIdleSaverWmark` | `<proc>/sys/kernel/sched_idle_saver_wmark` | any |
//! | `pageCacheLimitEnabled` | `<sys>/kernel/mm/pagecache_limit/enabled` | 0..1 |
//! | `schedFeatures` | `<sys>/kernel/debug/sched_features` (`NAME` / `NO_NAME`) | known features |
//!
//! A knob is written only when its file exists under the configured roots;
//! a missing file or an out-of-range value is reported in a note, never an error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::slo::v1alpha1::SystemStrategy;

use super::framework::{Decision, FeatureGate, FileWrite, QosSnapshot, ReadBack, Strategy};
use super::hostfiles::{FsHostFiles, HostFiles};
use crate::system::SystemArgs;
use koord_common::units::Bytes;

pub const NAME: &str = "sysreconcile";
/// Upstream's feature gate.
pub const FEATURE: &str = "SystemConfig";

/// Upstream's valid ranges.
pub const MIN_FREE_KBYTES_RANGE: (i64, i64) = (10 * 1024, 10 * 1024 * 1024);
pub const WATERMARK_SCALE_FACTOR_RANGE: (i64, i64) = (10, 400);
pub const SWITCH_RANGE: (i64, i64) = (0, 1);

/// One knob to write: where, what, and the range it must be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub field: &'static str,
    pub path: PathBuf,
    pub value: i64,
    pub range: Option<(i64, i64)>,
}

/// The knobs `strategy` sets, with their files under `roots`.
/// `memory` is the node's total memory (for `minFreeKbytesFactor`).
pub fn knobs(strategy: &SystemStrategy, roots: &SystemArgs, memory: Bytes) -> Vec<Knob> {
    let proc_file = |rel: &str| roots.proc_root_dir.join(rel);
    let sys_file = |rel: &str| roots.sys_root_dir.join(rel);
    let mut knobs = Vec::new();
    if let Some(factor) = strategy.min_free_kbytes_factor {
        knobs.push(Knob {
            field: "minFreeKbytesFactor",
            path: proc_file("sys/vm/min_free_kbytes"),
            value: (memory.as_i64() / 1024).saturating_mul(factor) / 10_000,
            range: Some(MIN_FREE_KBYTES_RANGE),
        });
    }
    let simple = [
        (
            "watermarkScaleFactor",
            strategy.watermark_scale_factor,
            proc_file("sys/vm/watermark_scale_factor"),
            Some(WATERMARK_SCALE_FACTOR_RANGE),
        ),
        (
            "memcgReapBackGround",
            strategy.memcg_reap_back_ground,
            sys_file("kernel/mm/memcg_reaper/reap_background"),
            Some(SWITCH_RANGE),
        ),
        (
            "schedGroupIdentityEnabled",
            strategy.sched_group_identity_enabled,
            proc_file("sys/kernel/sched_group_identity_enabled"),
            Some(SWITCH_RANGE),
        ),
        (
            "schedIdleSaverWmark",
            strategy.sched_idle_saver_wmark,
            proc_file("sys/kernel/sched_idle_saver_wmark"),
            None,
        ),
        (
            "pageCacheLimitEnabled",
            strategy.page_cache_limit_enabled,
            sys_file("kernel/mm/pagecache_limit/enabled"),
            Some(SWITCH_RANGE),
        ),
    ];
    for (field, value, path, range) in simple {
        if let Some(value) = value {
            knobs.push(Knob {
                field,
                path,
                value,
                range,
            });
        }
    }
    knobs
}

/// Parses `sched_features` (`A NO_B ...`) into name → enabled.
pub fn parse_sched_features(content: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut features = BTreeMap::new();
    for word in content.split_whitespace() {
        let (name, enabled) = match word.strip_prefix("NO_") {
            Some(name) => (name, false),
            None => (word, true),
        };
        if features
            .insert(name.to_string(), enabled)
            .is_some_and(|old| old != enabled)
        {
            return Err(format!("sched_features lists {name} both on and off"));
        }
    }
    Ok(features)
}

/// The `sysreconcile` strategy.
pub struct SysReconcile {
    gate: FeatureGate,
    roots: SystemArgs,
    files: Arc<dyn HostFiles>,
}

impl std::fmt::Debug for SysReconcile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SysReconcile")
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

impl SysReconcile {
    /// On; see [`SysReconcile::with_feature_gates`].
    pub fn new(roots: SystemArgs, files: Arc<dyn HostFiles>) -> Self {
        Self {
            gate: FeatureGate::on(FEATURE, false),
            roots,
            files,
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: off).
    pub fn with_feature_gates(mut self, gates: &std::collections::BTreeMap<String, bool>) -> Self {
        self.gate = self.gate.from_gates(gates);
        self
    }

    /// Over the real filesystem.
    pub fn on_host(roots: SystemArgs) -> Self {
        Self::new(roots, Arc::new(FsHostFiles))
    }
}

impl Strategy for SysReconcile {
    type State = ();

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.reconcile_interval
    }

    fn decide(&self, snapshot: &QosSnapshot, _: &()) -> (Decision, ()) {
        (self.reconcile(snapshot), ())
    }
}

impl SysReconcile {
    /// The round's sysctl writes (the strategy keeps no state between rounds).
    fn reconcile(&self, snapshot: &QosSnapshot) -> Decision {
        if let Err(off) = self.gate.check() {
            return Decision::skipped(off);
        }
        let Some(strategy) = snapshot
            .node_slo
            .as_ref()
            .and_then(|spec| spec.system_strategy.as_ref())
        else {
            return Decision::skipped("no NodeSLO systemStrategy");
        };
        let memory = snapshot.node.memory_capacity;
        if memory == Bytes(0) {
            return Decision::skipped(format!("node memory capacity {memory} is not valid"));
        }
        let mut decision = Decision::default();
        for knob in knobs(strategy, &self.roots, memory) {
            if let Some((min, max)) = knob.range
                && !(min..=max).contains(&knob.value)
            {
                decision.info(format!(
                    "{}: value {} for {} is outside {min}..={max}; not written",
                    knob.field,
                    knob.value,
                    knob.path.display()
                ));
                continue;
            }
            if !self.files.exists(&knob.path) {
                decision.info(format!(
                    "{}: unsupported, {} does not exist on this kernel",
                    knob.field,
                    knob.path.display()
                ));
                continue;
            }
            decision.file_writes.push(FileWrite {
                path: knob.path,
                value: knob.value.to_string(),
                reason: format!("systemStrategy.{}", knob.field),
                read_back: ReadBack::Exact,
            });
        }
        if !strategy.sched_features.is_empty() {
            self.sched_features(&strategy.sched_features, &mut decision);
        }
        if decision.file_writes.is_empty() && decision.notes.is_empty() {
            decision.skip("systemStrategy sets no kernel knob");
        }
        decision
    }
}

impl SysReconcile {
    fn sched_features(&self, wanted: &BTreeMap<String, bool>, decision: &mut Decision) {
        let path = self.roots.sys_root_dir.join("kernel/debug/sched_features");
        let Some(content) = self.files.read(&path) else {
            decision.info(format!(
                "schedFeatures: unsupported, {} is not readable",
                path.display()
            ));
            return;
        };
        let current = match parse_sched_features(&content) {
            Ok(current) => current,
            Err(err) => {
                decision.info(format!(
                    "schedFeatures: {} is malformed: {err}",
                    path.display()
                ));
                return;
            }
        };
        for (name, enabled) in wanted {
            if current.get(name) == Some(enabled) {
                continue;
            }
            let value = if *enabled {
                name.clone()
            } else {
                format!("NO_{name}")
            };
            // The file lists every feature, so it never reads back as the write.
            decision.file_writes.push(FileWrite {
                path: path.clone(),
                value,
                reason: format!("systemStrategy.schedFeatures.{name}"),
                read_back: ReadBack::None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager::framework::testing::{DecideFresh, assert_deterministic};
    use crate::qosmanager::hostfiles::MapHostFiles;
    use apis::slo::v1alpha1::NodeSLOSpec;
    use std::path::Path;
    use std::time::SystemTime;

    const GIB: i64 = 1 << 30;

    fn roots() -> SystemArgs {
        SystemArgs::under(Path::new("/host"))
    }

    fn snapshot(strategy: SystemStrategy, memory: i64) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(SystemTime::UNIX_EPOCH);
        snapshot.node.memory_capacity = Bytes::from_i64_or_zero(memory);
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            system_strategy: Some(strategy),
            ..NodeSLOSpec::default()
        }));
        snapshot
    }

    fn vm_files() -> MapHostFiles {
        MapHostFiles::default()
            .with("/host/proc/sys/vm/min_free_kbytes", "67584\n")
            .with("/host/proc/sys/vm/watermark_scale_factor", "10\n")
    }

    fn writes(decision: &Decision) -> Vec<(String, String)> {
        decision
            .file_writes
            .iter()
            .map(|w| (w.path.display().to_string(), w.value.clone()))
            .collect()
    }

    #[test]
    fn min_free_kbytes_from_factor_and_watermark_where_files_exist() {
        let strategy = SystemStrategy {
            min_free_kbytes_factor: Some(100),
            watermark_scale_factor: Some(150),
            memcg_reap_back_ground: Some(1),
            ..SystemStrategy::default()
        };
        let sys = SysReconcile::new(roots(), Arc::new(vm_files()));
        // Decided twice on the same inputs: the same writes (the strategy is pure).
        let decision = assert_deterministic(&sys, &snapshot(strategy, 64 * GIB), &()).0;
        // 64 GiB = 67108864 KiB; × 100 / 10000 = 671088.
        assert_eq!(
            writes(&decision),
            [
                (
                    "/host/proc/sys/vm/min_free_kbytes".to_string(),
                    "671088".to_string()
                ),
                (
                    "/host/proc/sys/vm/watermark_scale_factor".to_string(),
                    "150".to_string()
                ),
            ]
        );
        // The memcg reaper file is absent on this kernel: reported, not written.
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("memcgReapBackGround: unsupported"))
        );
    }

    #[test]
    fn out_of_range_values_are_reported_not_written() {
        let strategy = SystemStrategy {
            min_free_kbytes_factor: Some(1),
            watermark_scale_factor: Some(401),
            ..SystemStrategy::default()
        };
        let sys = SysReconcile::new(roots(), Arc::new(vm_files()));
        // 1 GiB × 1 / 10000 = 104 KiB < 10 MiB.
        let decision = sys.decide_fresh(&snapshot(strategy, GIB));
        assert!(decision.file_writes.is_empty());
        assert_eq!(
            decision
                .notes
                .iter()
                .filter(|n| n.text.contains("outside"))
                .count(),
            2
        );
    }

    #[test]
    fn nothing_configured_or_no_memory_is_a_skip() {
        let sys = SysReconcile::new(roots(), Arc::new(vm_files()));
        let empty = sys.decide_fresh(&snapshot(SystemStrategy::default(), GIB));
        assert!(empty.skip_reason().unwrap().contains("no kernel knob"));
        let no_memory = sys.decide_fresh(&snapshot(
            SystemStrategy {
                watermark_scale_factor: Some(100),
                ..SystemStrategy::default()
            },
            0,
        ));
        assert!(no_memory.skip_reason().unwrap().contains("memory capacity"));
        let no_slo = sys.decide_fresh(&QosSnapshot::for_test(SystemTime::UNIX_EPOCH));
        assert!(no_slo.skip_reason().unwrap().contains("systemStrategy"));
    }

    #[test]
    fn sched_features_write_only_the_differences() {
        let files = vm_files().with(
            "/host/sys/kernel/debug/sched_features",
            "GENTLE_FAIR_SLEEPERS NO_ID_ABSOLUTE_EXPEL ID_LOAD_BALANCE\n",
        );
        let strategy = SystemStrategy {
            sched_features: BTreeMap::from([
                ("ID_ABSOLUTE_EXPEL".to_string(), true),
                ("ID_LOAD_BALANCE".to_string(), true),
                ("GENTLE_FAIR_SLEEPERS".to_string(), false),
            ]),
            ..SystemStrategy::default()
        };
        let decision =
            SysReconcile::new(roots(), Arc::new(files)).decide_fresh(&snapshot(strategy, GIB));
        let values: Vec<&str> = decision
            .file_writes
            .iter()
            .map(|w| w.value.as_str())
            .collect();
        assert_eq!(values, ["NO_GENTLE_FAIR_SLEEPERS", "ID_ABSOLUTE_EXPEL"]);
        assert!(
            decision
                .file_writes
                .iter()
                .all(|w| w.read_back == ReadBack::None)
        );
        assert!(parse_sched_features("A NO_A").is_err());
    }
}
