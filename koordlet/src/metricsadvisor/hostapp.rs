//! CPU and memory of the host applications the NodeSLO lists (processes run
//! outside Kubernetes in their own cgroups), read like pod cgroups.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use apis::extension::QoSClass;
use apis::slo::v1alpha1::{CgroupBaseType, HostApplicationSpec};

use super::parse::cpu_cores_between;
use super::pods::read_cgroup_usage;
use super::rate::Previous;
use super::{CollectError, Collector, PodsSnapshot};
use crate::metriccache::{Entity, MetricKind, Sample, SeriesKey};
use crate::system::cgroup::{CgroupLayout, QosTier};

/// Upstream's default parents of host applications without a cgroup path.
pub const HOST_LATENCY_SENSITIVE_DIR: &str = "host-latency-sensitive";
pub const HOST_BEST_EFFORT_DIR: &str = "host-best-effort";

/// The application's cgroup directory relative to the hierarchy root:
/// `<base>/<parentDir>/<relativePath>` when it has a cgroup path (base:
/// the root, kubepods, or its burstable / besteffort tier), else
/// `host-latency-sensitive/<name>` for LSE/LSR/LS, `host-best-effort/<name>`
/// for BE and `<name>` otherwise. `..` is rejected when the path is used.
pub fn host_app_cgroup_dir(layout: &CgroupLayout, app: &HostApplicationSpec) -> PathBuf {
    match &app.cgroup_path {
        None => {
            let parent = match app.qos_class() {
                QoSClass::LSE | QoSClass::LSR | QoSClass::LS => HOST_LATENCY_SENSITIVE_DIR,
                QoSClass::BE => HOST_BEST_EFFORT_DIR,
                QoSClass::System | QoSClass::None => "",
            };
            PathBuf::from(parent).join(&app.name)
        }
        Some(path) => {
            let base = match &path.base {
                Some(CgroupBaseType::Kubepods) => layout.qos_dir(QosTier::Guaranteed),
                Some(CgroupBaseType::KubepodsBurstable) => layout.qos_dir(QosTier::Burstable),
                Some(CgroupBaseType::KubepodsBesteffort) => layout.qos_dir(QosTier::BestEffort),
                _ => PathBuf::new(),
            };
            // Joining an absolute part would replace the base: strip the root.
            base.join(path.parent_dir.trim_start_matches('/'))
                .join(path.relative_path.trim_start_matches('/'))
        }
    }
}

/// Collects, per host application: CPU (cores, from the cumulative
/// counter; from the second round on), memory as pods count it, and memory
/// including page cache.
pub struct HostAppCollector {
    layout: CgroupLayout,
    cpu: Previous<u64>,
    warned: HashSet<Arc<str>>,
}

impl HostAppCollector {
    pub fn new(layout: CgroupLayout) -> Self {
        Self {
            layout,
            cpu: Previous::default(),
            warned: HashSet::new(),
        }
    }

    fn collect_app(
        &mut self,
        now: SystemTime,
        app: &HostApplicationSpec,
        out: &mut Vec<Sample>,
    ) -> Result<(), CollectError> {
        let dir = host_app_cgroup_dir(&self.layout, app);
        let usage = read_cgroup_usage(&self.layout, &dir)?;
        let name: Arc<str> = app.name.as_str().into();
        let key = |kind| SeriesKey::new(kind, Entity::HostApp(name.clone()));
        if let Some((elapsed, previous)) = self.cpu.replace(&name, now, usage.cpu_ns)
            && let Some(cores) = cpu_cores_between(previous, usage.cpu_ns, elapsed.as_nanos())
        {
            out.push(Sample::new(key(MetricKind::HostAppCpuUsage), now, cores));
        }
        out.push(Sample::new(
            key(MetricKind::HostAppMemoryUsage),
            now,
            usage.memory.usage() as f64,
        ));
        out.push(Sample::new(
            key(MetricKind::HostAppMemoryUsageWithPageCache),
            now,
            usage.memory_charged as f64,
        ));
        Ok(())
    }
}

impl Collector for HostAppCollector {
    fn name(&self) -> &'static str {
        "host-application"
    }

    fn collect(&mut self, now: SystemTime, pods: &PodsSnapshot) -> Vec<Sample> {
        let mut out = Vec::with_capacity(pods.host_applications.len() * 3);
        for app in &pods.host_applications {
            if app.name.is_empty() {
                continue;
            }
            match self.collect_app(now, app, &mut out) {
                Ok(()) => {
                    self.warned.remove(app.name.as_str());
                }
                Err(err) if err.is_not_found() => {
                    tracing::debug!(app = %app.name, error = %err, "host application {} has no cgroup; skipped", app.name)
                }
                Err(err) => {
                    if self.warned.insert(app.name.as_str().into()) {
                        tracing::warn!(app = %app.name, error = %err, "cannot collect host application {}: {err}", app.name);
                    }
                }
            }
        }
        let names: HashSet<&str> = pods
            .host_applications
            .iter()
            .map(|app| app.name.as_str())
            .collect();
        self.cpu.retain(|name| names.contains(name));
        self.warned.retain(|name| names.contains(&**name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::{CgroupDriver, CgroupResource, CgroupVersion};
    use apis::slo::v1alpha1::CgroupPath;
    use koord_common::testing::TempDir;
    use std::path::Path;
    use std::time::{Duration, UNIX_EPOCH};

    fn app(name: &str, qos: &str, path: Option<CgroupPath>) -> HostApplicationSpec {
        HostApplicationSpec {
            name: name.into(),
            qos: qos.into(),
            priority: "koord-prod".into(),
            cgroup_path: path,
            strategy: None,
        }
    }

    #[test]
    fn cgroup_dirs_follow_upstream_defaults_and_bases() {
        let cgroupfs = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/cg");
        let systemd = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Systemd, "/cg");
        let dir =
            |layout: &CgroupLayout, app: &HostApplicationSpec| host_app_cgroup_dir(layout, app);
        assert_eq!(
            dir(&cgroupfs, &app("nginx", "LS", None)),
            Path::new("host-latency-sensitive/nginx")
        );
        assert_eq!(
            dir(&cgroupfs, &app("spark", "BE", None)),
            Path::new("host-best-effort/spark")
        );
        assert_eq!(dir(&cgroupfs, &app("plain", "", None)), Path::new("plain"));
        let with_path = |base| {
            Some(CgroupPath {
                base,
                parent_dir: "/apps".into(),
                relative_path: "db".into(),
            })
        };
        assert_eq!(
            dir(&cgroupfs, &app("db", "LS", with_path(None))),
            Path::new("apps/db")
        );
        assert_eq!(
            dir(
                &cgroupfs,
                &app(
                    "db",
                    "LS",
                    with_path(Some(CgroupBaseType::KubepodsBesteffort))
                )
            ),
            Path::new("kubepods/besteffort/apps/db")
        );
        assert_eq!(
            dir(
                &systemd,
                &app(
                    "db",
                    "LS",
                    with_path(Some(CgroupBaseType::KubepodsBurstable))
                )
            ),
            Path::new("kubepods.slice/kubepods-burstable.slice/apps/db")
        );
        assert_eq!(
            dir(
                &cgroupfs,
                &app("db", "LS", with_path(Some(CgroupBaseType::Kubepods)))
            ),
            Path::new("kubepods/apps/db")
        );
    }

    fn write(layout: &CgroupLayout, dir: &Path, resource: CgroupResource, content: &str) {
        let path = layout.file_path(dir, resource).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn set(layout: &CgroupLayout, dir: &Path, cpu_ns: u64, anon: u64, charged: u64) {
        write(
            layout,
            dir,
            CgroupResource::CpuacctUsage,
            &format!("{cpu_ns}\n"),
        );
        write(
            layout,
            dir,
            CgroupResource::MemoryStat,
            &format!(
                "total_active_anon {anon}\ntotal_inactive_anon 0\ntotal_unevictable 0\ntotal_inactive_file 0\ntotal_active_file 0\n"
            ),
        );
        write(
            layout,
            dir,
            CgroupResource::MemoryUsage,
            &format!("{charged}\n"),
        );
    }

    #[test]
    fn usage_is_read_from_the_application_cgroup_over_two_rounds() {
        let tmp = TempDir::new("host-app-collector").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
        let nginx = app("nginx", "LS", None);
        let escaping = app(
            "escape",
            "LS",
            Some(CgroupPath {
                base: None,
                parent_dir: "../..".into(),
                relative_path: "etc".into(),
            }),
        );
        let missing = app("missing", "BE", None);
        let dir = host_app_cgroup_dir(&layout, &nginx);
        set(&layout, &dir, 1_000_000_000, 300 << 20, 500 << 20);
        let snapshot =
            PodsSnapshot::default().with_host_applications(vec![nginx, escaping, missing]);
        let mut collector = HostAppCollector::new(layout.clone());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let first = collector.collect(t0, &snapshot);
        // First round: memory only.
        assert_eq!(first.len(), 2, "{first:?}");
        let entity = Entity::host_app("nginx");
        assert!(first.iter().all(|s| s.key.entity == entity));
        // 0.5 s of CPU over 2 s: a quarter of a core.
        set(&layout, &dir, 1_500_000_000, 310 << 20, 520 << 20);
        let second = collector.collect(t0 + Duration::from_secs(2), &snapshot);
        let value = |kind| second.iter().find(|s| s.key.kind == kind).map(|s| s.value);
        let cpu = value(MetricKind::HostAppCpuUsage).unwrap();
        assert!((cpu - 0.25).abs() < 1e-9, "{cpu}");
        assert_eq!(
            value(MetricKind::HostAppMemoryUsage),
            Some((310u64 << 20) as f64)
        );
        assert_eq!(
            value(MetricKind::HostAppMemoryUsageWithPageCache),
            Some((520u64 << 20) as f64)
        );
        // Removing the application forgets its counter.
        collector.collect(t0 + Duration::from_secs(3), &PodsSnapshot::default());
        assert!(collector.cpu.is_empty());
    }
}
