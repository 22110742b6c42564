//! What the fuzz targets share: the selector convention and koordlet's hook
//! dispatcher on a node that has every capability.
//!
//! Selector convention: a target with several inputs reads its first byte
//! as `(byte - b'0') % count`, so hand-written seeds start with `0`, `1`, ...

use std::path::Path;
use std::sync::{Arc, LazyLock};

use koord_common::units::CpuSet;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::protocol::{FailurePolicy, FailurePolicyConfig};
use koordlet::runtimehooks::resctrlnode::ResctrlNodeInfo;
use koordlet::runtimehooks::rules::{CpuQosRule, NodeRules, ResctrlRule};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

/// Splits `data` into a selector in `0..count` and the rest.
pub fn select(data: &[u8], count: u8) -> Option<(u8, &[u8])> {
    let (first, rest) = data.split_first()?;
    Some((first.wrapping_sub(b'0') % count, rest))
}

/// A cgroup root that does not exist: the dispatcher's filesystem check
/// (no symlinks below kubepods) then stats nothing, and nothing is written.
pub const CGROUP_ROOT: &str = "/nonexistent-koord-fuzz/sys/fs/cgroup";

pub fn layout(version: CgroupVersion, driver: CgroupDriver) -> CgroupLayout {
    CgroupLayout::new(version, driver, CGROUP_ROOT)
}

/// Every hook enabled, on a node with every capability a hook asks for, so
/// that no hook is skipped. Failures follow `policy`.
pub fn dispatcher(layout: CgroupLayout, policy: FailurePolicy) -> HookDispatcher {
    let mut caps = koordlet::capabilities::detect(&koordlet::system::SystemArgs::under(Path::new(
        "/nonexistent-koord-fuzz",
    )));
    caps.cgroup.controllers = ["cpu", "cpuacct", "cpuset", "memory", "blkio", "pids"]
        .map(String::from)
        .to_vec();
    caps.cpu_idle = true;
    caps.group_identity = true;
    caps.core_sched = true;
    caps.resctrl.supported = true;
    caps.resctrl.cat = true;
    caps.resctrl.mba = true;
    let hooks = all_hooks(&HookOptions::default())
        .into_iter()
        .map(|(hook, _)| (hook, true))
        .collect();
    HookDispatcher::new(hooks, &caps, layout, FailurePolicyConfig::uniform(policy))
}

/// Node rules with every hook input set: CPU QoS and resctrl for each
/// class, a share pool, SYSTEM CPUs, a normalization ratio, resctrl info.
pub fn rich_rules() -> NodeRules {
    use apis::extension::QoSClass;
    let cpus = |text: &str| text.parse::<CpuSet>().unwrap_or_default();
    let mut rules = NodeRules {
        ls_share_pool: Some(cpus("2-7")),
        system_qos_cpus: Some(cpus("0-1")),
        online_cpus: Some(cpus("0-7")),
        cpu_normalization_ratio: Some(1.5),
        kubelet_static_cpu_policy: true,
        be_cfs_quota_enabled: false,
        resctrl_info: ResctrlNodeInfo::parse("L3:0=7ff;1=7ff\nMB:0=100;1=100\n", "7ff").ok(),
        ..NodeRules::default()
    };
    for (class, identity) in [
        (QoSClass::LSE, 2),
        (QoSClass::LSR, 2),
        (QoSClass::LS, 2),
        (QoSClass::BE, -1),
        (QoSClass::System, 0),
    ] {
        rules.cpu_qos.insert(
            class,
            CpuQosRule {
                enable: true,
                group_identity: identity,
                ..CpuQosRule::default()
            },
        );
        rules.resctrl.insert(
            class,
            ResctrlRule {
                enable: true,
                cat_start_percent: 0,
                cat_end_percent: if class == QoSClass::BE { 30 } else { 100 },
                mba_percent: if class == QoSClass::BE { 50 } else { 100 },
            },
        );
    }
    rules
}

/// Dispatchers over both cgroup versions and drivers, both failure
/// policies, default and rich rules: index with a selector.
pub static DISPATCHERS: LazyLock<Vec<Arc<HookDispatcher>>> = LazyLock::new(|| {
    let mut all = Vec::new();
    for (version, driver) in [
        (CgroupVersion::V1, CgroupDriver::Cgroupfs),
        (CgroupVersion::V2, CgroupDriver::Systemd),
    ] {
        for (policy, rules) in [
            (FailurePolicy::Ignore, NodeRules::default()),
            (FailurePolicy::Fail, rich_rules()),
        ] {
            let dispatcher = dispatcher(layout(version, driver), policy);
            dispatcher.set_rules(rules);
            all.push(Arc::new(dispatcher));
        }
    }
    all
});
