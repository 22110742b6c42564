//! koordlet's command line as upstream's DaemonSets write it.
//!
//! Upstream's koordlet parses its flags with Go's `flag` package: `-name`,
//! `--name`, `-name=value`, `-name value` (non-bool flags), a bare `-name`
//! for a bool flag meaning true and `-name=false`. Its binary registers the
//! flags of its config packages, klog's, controller-runtime's `-kubeconfig`
//! and, because it links kubelet packages, cAdvisor's. Every one of them is
//! accepted here: most act as upstream's do, and the rest are
//! [`UPSTREAM_INERT_FLAGS`], taken out of the arguments before clap sees
//! them and named in one warning each at start (see `docs/flags.md`).

use std::ffi::OsString;

use clap::{CommandFactory, Parser};
use koord_common::cli::{InertFlag, prepare_go_args};

use crate::KoordletArgs;

/// The parsed flags and the warnings for the inert flags that were given.
#[derive(Debug, Clone)]
pub struct ParsedArgs {
    pub args: KoordletArgs,
    pub inert_warnings: Vec<String>,
}

/// The whole argument pipeline: Go spellings normalized, inert upstream flags
/// taken out, the rest parsed by clap. `argv` starts with the program name.
pub fn parse_args<I>(argv: I) -> Result<ParsedArgs, clap::Error>
where
    I: IntoIterator<Item = OsString>,
{
    let removed = prepare_go_args(
        &KoordletArgs::command(),
        argv.into_iter().collect(),
        UPSTREAM_INERT_FLAGS,
    );
    let args = KoordletArgs::try_parse_from(removed.args)?;
    Ok(ParsedArgs {
        args,
        inert_warnings: removed.warnings,
    })
}

const fn value(name: &'static str, reason: &'static str) -> InertFlag {
    InertFlag {
        name,
        takes_value: true,
        reason,
    }
}

const fn boolean(name: &'static str, reason: &'static str) -> InertFlag {
    InertFlag {
        name,
        takes_value: false,
        reason,
    }
}

const NO_PPROF: &str =
    "there is no Go pprof server in this build; profile the process with perf or a similar tool";
const NO_CLIENT_RATE_LIMIT: &str = "the Kubernetes client applies no client-side rate limit here";
const NO_KOORDLET_CONFIGMAP: &str = "the koordlet-config ConfigMap (settings of QoS extension plugins) is not read: there are no QoS extension plugins here";
const NO_RUNTIME_CLIENT: &str = "there is no container runtime client: container details come from the kubelet and from the runtime hook requests";
const NO_RESCTRL_COLLECTOR: &str =
    "there is no resctrl (RDT) metrics collector; resctrl settings are only enforced";
const NO_CPI: &str = "there is no CPI (perf counter) collector";
const NO_TSDB: &str =
    "there is no TSDB: samples are kept in memory only (see --metric-cache-retention)";
const NO_AUDIT: &str = "there is no audit event log; the resource executor's recent cgroup writes are served at /resource-executor/writes";
const ONE_CHECKPOINT_FILE: &str = "the prediction checkpoint is one file written whole every --prediction-model-checkpoint-interval, not a few model files per step";
const STDERR_ONLY: &str = "logs go to stderr only, never to files";
const TRACING_FORMAT: &str = "log lines have tracing's format (--log-format), not klog's headers";
const CADVISOR: &str = "a cAdvisor flag that upstream's binary registers only because it links kubelet packages; koordlet runs no cAdvisor";

/// Upstream koordlet flags that are accepted and have no effect here, with
/// the reason the start-up warning gives.
pub const UPSTREAM_INERT_FLAGS: &[InertFlag] = &[
    // cmd/koordlet/options
    boolean("enable-pprof", NO_PPROF),
    value("pprof-addr", NO_PPROF),
    value("kube-api-qps", NO_CLIENT_RATE_LIMIT),
    value("kube-api-burst", NO_CLIENT_RATE_LIMIT),
    // pkg/koordlet/config
    value("configmap-name", NO_KOORDLET_CONFIGMAP),
    value("configmap-namespace", NO_KOORDLET_CONFIGMAP),
    // pkg/koordlet/util/system
    value("run-root-dir", "nothing here reads below the host's /run"),
    value("docker-endpoint", NO_RUNTIME_CLIENT),
    value("pouch-endpoint", NO_RUNTIME_CLIENT),
    value("default-runtime-type", NO_RUNTIME_CLIENT),
    value(
        "hami-core-library-directory-path",
        "the GPU hook does not inject HAMi-core (see docs/runtimehooks.md)",
    ),
    value(
        "pod-resources-proxy-path",
        "there is no proxy of the kubelet's pod-resources API",
    ),
    // pkg/koordlet/statesinformer/impl
    boolean(
        "disable-query-kubelet-config",
        "the kubelet's /configz is never queried (the CPU manager policy comes from its checkpoint file), as if this were true",
    ),
    value(
        "report-interval",
        "deprecated since v1.1 and ignored upstream too; the interval comes from the NodeMetric collect policy (ours: --node-metric-report-interval)",
    ),
    boolean(
        "enable-pod-taskids",
        "the states informer keeps no per-pod thread ids; the resctrl strategy reads the cgroup tasks files itself",
    ),
    // pkg/koordlet/metricsadvisor/framework
    value(
        "collect-sys-metric-outdated-interval",
        "system usage is derived from the samples of one collection round, so no pod sample is outdated",
    ),
    value(
        "collect-node-storage-info-interval",
        "there is no node storage info collector",
    ),
    value("cpi-collector-interval", NO_CPI),
    value("collect-cpi-timewindow", NO_CPI),
    value(
        "coldpage-collector-interval",
        "there is no cold page (kidled) collector",
    ),
    boolean(
        "enable-pagecache-collector",
        "there is no separate page cache collector; node memory usage with page cache is always collected",
    ),
    boolean("enable-resctrl-collector", NO_RESCTRL_COLLECTOR),
    value("resctrl-collector-interval", NO_RESCTRL_COLLECTOR),
    // pkg/koordlet/metriccache
    value("tsdb-path", NO_TSDB),
    value(
        "tsdb-retention-duration",
        "there is no TSDB: samples are kept in memory for --metric-cache-retention (default 30m); an on-disk retention would size memory, so it is not carried over",
    ),
    boolean("tsdb-enable-prometheus-metric", NO_TSDB),
    value("tsdb-stripe-size", NO_TSDB),
    value("tsdb-max-bytes", NO_TSDB),
    value("tsdb-wal-segment-size", NO_TSDB),
    value("tsdb-max-block-chunk-segment-size", NO_TSDB),
    value("tsdb-min-block-duration", NO_TSDB),
    value("tsdb-max-block-duration", NO_TSDB),
    value("tsdb-head-chunks-write-buffer-size", NO_TSDB),
    // pkg/koordlet/qosmanager/framework
    value(
        "qos-extension-plugins",
        "there are no QoS extension plugins (upstream's build registers none either)",
    ),
    // pkg/koordlet/audit
    value("audit-log-dir", NO_AUDIT),
    value("audit-verbose", NO_AUDIT),
    value("audit-max-disk-space-mb", NO_AUDIT),
    value("audit-max-concurrent-readers", NO_AUDIT),
    value("audit-max-events-limit", NO_AUDIT),
    // pkg/koordlet/prediction (the others are wired: PredictionArgs)
    value(
        "prediction-model-checkpoint-max-per-step",
        ONE_CHECKPOINT_FILE,
    ),
    // klog (-v and -logtostderr are in LogArgs)
    value("log_dir", STDERR_ONLY),
    value("log_file", STDERR_ONLY),
    value("log_file_max_size", STDERR_ONLY),
    boolean("skip_log_headers", STDERR_ONLY),
    boolean("one_output", STDERR_ONLY),
    boolean("alsologtostderr", STDERR_ONLY),
    value("stderrthreshold", STDERR_ONLY),
    // Registered by klog from v2.140 on; upstream's main sets it.
    boolean("legacy_stderr_threshold_behavior", STDERR_ONLY),
    boolean("add_dir_header", TRACING_FORMAT),
    boolean("skip_headers", TRACING_FORMAT),
    value(
        "vmodule",
        "per-file verbosity is klog's; set per-module levels with RUST_LOG",
    ),
    value("log_backtrace_at", "there are no klog stack traces here"),
    // cAdvisor, through k8s.io/kubernetes/cmd/kubelet/app/options and pkg/kubelet/cadvisor
    value("application_metrics_count_limit", CADVISOR),
    boolean("allow_dynamic_housekeeping", CADVISOR),
    value("boot_id_file", CADVISOR),
    value("container_hints", CADVISOR),
    value("containerd", CADVISOR),
    value("containerd-namespace", CADVISOR),
    value("containerd_env_metadata_whitelist", CADVISOR),
    value("crio_client_timeout", CADVISOR),
    boolean("disable_root_cgroup_stats", CADVISOR),
    boolean("docker_only", CADVISOR),
    boolean("enable_load_reader", CADVISOR),
    value("event_storage_age_limit", CADVISOR),
    value("event_storage_event_limit", CADVISOR),
    value("global_housekeeping_interval", CADVISOR),
    value("housekeeping_interval", CADVISOR),
    boolean("log_cadvisor_usage", CADVISOR),
    value("machine_id_file", CADVISOR),
    value("max_housekeeping_interval", CADVISOR),
    value("referenced_reset_interval", CADVISOR),
    value("storage_driver_buffer_duration", CADVISOR),
    value("storage_driver_db", CADVISOR),
    value("storage_driver_host", CADVISOR),
    value("storage_driver_password", CADVISOR),
    boolean("storage_driver_secure", CADVISOR),
    value("storage_driver_table", CADVISOR),
    value("storage_driver_user", CADVISOR),
    value("update_machine_info_interval", CADVISOR),
];

#[cfg(test)]
mod tests;
