use std::any::TypeId;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use clap::error::ErrorKind;
use koord_common::logging::LogLevel;

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Go bool flag: bare, or `=value` only.
    Bool,
    /// Any other Go flag: `=value` or the next argument.
    Value,
}

use Kind::{Bool, Value};

/// Every flag upstream's koordlet binary (v1.8 era, linux) registers on Go's
/// command line, with a plausible value: the flags of its config packages
/// (cmd/koordlet/options, pkg/koordlet/config and the packages it wires in),
/// controller-runtime's `kubeconfig`, klog v2.130.1's (the version upstream's
/// go.mod pins) and cAdvisor's, which the kubelet packages it links register.
const UPSTREAM_FLAGS: &[(&str, Kind, &str)] = &[
    // cmd/koordlet/options
    ("addr", Value, ":9316"),
    ("enable-pprof", Bool, ""),
    ("pprof-addr", Value, ":9317"),
    ("kube-api-qps", Value, "20"),
    ("kube-api-burst", Value, "30"),
    // pkg/koordlet/config
    ("configmap-name", Value, "koordlet-config"),
    ("configmap-namespace", Value, "koordinator-system"),
    (
        "feature-gates",
        Value,
        "BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true",
    ),
    // pkg/koordlet/util/system
    ("cgroup-root-dir", Value, "/host-cgroup/"),
    ("sys-root-dir", Value, "/host-sys/"),
    ("sys-fs-root-dir", Value, "/host-sys-fs/"),
    ("proc-root-dir", Value, "/proc/"),
    ("var-run-root-dir", Value, "/host-var-run/"),
    ("var-lib-kubelet-dir", Value, "/var/lib/kubelet/"),
    ("run-root-dir", Value, "/host-run/"),
    (
        "containerd-endpoint",
        Value,
        "/var/run/containerd/containerd.sock",
    ),
    ("docker-endpoint", Value, "/var/run/docker.sock"),
    ("pouch-endpoint", Value, "/var/run/pouchd.sock"),
    ("default-runtime-type", Value, "containerd"),
    (
        "hami-core-library-directory-path",
        Value,
        "/usr/local/vgpu/libvgpu.so",
    ),
    (
        "pod-resources-proxy-path",
        Value,
        "/var/run/koordlet/pod-resources",
    ),
    (
        "xpu-device-infos-dir",
        Value,
        "/var/run/koordlet/xpu-device-infos/",
    ),
    // pkg/koordlet/statesinformer/impl
    ("kubelet-preferred-address-type", Value, "InternalIP"),
    ("kubelet-sync-interval", Value, "10s"),
    ("kubelet-sync-timeout", Value, "3s"),
    ("kubelet-insecure-tls", Bool, ""),
    ("kubelet-read-only-port", Value, "10255"),
    ("node-topology-sync-interval", Value, "3s"),
    ("disable-query-kubelet-config", Bool, ""),
    ("report-interval", Value, "1m0s"),
    ("enable-node-metric-report", Bool, ""),
    ("enable-pod-taskids", Bool, ""),
    ("xpu-enforce-collect-from-device-infos", Bool, ""),
    // pkg/koordlet/metricsadvisor/framework
    ("collect-res-used-interval", Value, "1s"),
    ("collect-sys-metric-outdated-interval", Value, "10s"),
    ("collect-node-cpu-info-interval", Value, "1m0s"),
    ("collect-node-storage-info-interval", Value, "1s"),
    ("cpi-collector-interval", Value, "1m0s"),
    ("psi-collector-interval", Value, "10s"),
    ("collect-cpi-timewindow", Value, "10s"),
    ("coldpage-collector-interval", Value, "5s"),
    ("enable-pagecache-collector", Bool, ""),
    ("enable-resctrl-collector", Bool, ""),
    ("resctrl-collector-interval", Value, "10s"),
    // pkg/koordlet/metriccache
    ("metric-gc-interval-seconds", Value, "300"),
    ("metric-expire-seconds", Value, "1800"),
    ("tsdb-path", Value, "/metric-data/"),
    ("tsdb-retention-duration", Value, "12h0m0s"),
    ("tsdb-enable-prometheus-metric", Bool, ""),
    ("tsdb-stripe-size", Value, "16384"),
    ("tsdb-max-bytes", Value, "104857600"),
    ("tsdb-wal-segment-size", Value, "1048576"),
    ("tsdb-max-block-chunk-segment-size", Value, "5242880"),
    ("tsdb-min-block-duration", Value, "10m0s"),
    ("tsdb-max-block-duration", Value, "10m0s"),
    ("tsdb-head-chunks-write-buffer-size", Value, "1048576"),
    // pkg/koordlet/qosmanager/framework
    ("reconcile-interval-seconds", Value, "1"),
    ("cpu-suppress-interval-seconds", Value, "1"),
    ("cpu-evict-interval-seconds", Value, "1"),
    ("memory-evict-interval-seconds", Value, "1"),
    ("memory-evict-cool-time-seconds", Value, "4"),
    ("cpu-evict-cool-time-seconds", Value, "20"),
    ("only-evict-by-api", Bool, ""),
    ("qos-extension-plugins", Value, "SomePlugin=true"),
    // pkg/koordlet/runtimehooks
    ("runtime-hooks-network", Value, "unix"),
    (
        "runtime-hooks-addr",
        Value,
        "/host-var-run-koordlet/koordlet.sock",
    ),
    ("runtime-hooks-failure-policy", Value, "Ignore"),
    ("runtime-hooks-plugin-failure-policy", Value, "Ignore"),
    ("runtime-hooks-config-path", Value, "/host-etc-hookserver/"),
    (
        "runtime-hooks-host-endpoint",
        Value,
        "/var/run/koordlet/koordlet.sock",
    ),
    ("runtime-hooks-nri-connect-timeout", Value, "6s"),
    ("runtime-hooks-nri-backoff-duration", Value, "1s"),
    ("runtime-hooks-nri-backoff-cap", Value, "30s"),
    ("runtime-hooks-nri-backoff-steps", Value, "2147483647"),
    ("runtime-hooks-nri-backoff-factor", Value, "2"),
    ("runtime-hooks-nri-socket-path", Value, "nri/nri.sock"),
    ("runtime-hooks-nri-plugin-name", Value, "koordlet_nri"),
    ("runtime-hooks-nri-plugin-index", Value, "00"),
    ("runtime-hooks-disable-stages", Value, "PreStartContainer"),
    ("enable-nri-runtime-hook", Bool, ""),
    ("runtime-hooks-reconcile-interval", Value, "10s"),
    ("disable-unset-cpu-quota", Bool, ""),
    // pkg/koordlet/audit
    ("audit-log-dir", Value, "/var/log/koordlet"),
    ("audit-verbose", Value, "3"),
    ("audit-max-disk-space-mb", Value, "16"),
    ("audit-max-concurrent-readers", Value, "4"),
    ("audit-max-events-limit", Value, "2048"),
    // pkg/koordlet/prediction
    (
        "prediction-checkpoint-filepath",
        Value,
        "/prediction-checkpoints",
    ),
    ("prediction-cold-start-duration", Value, "24h0m0s"),
    ("prediction-safety-margin-percent", Value, "10"),
    (
        "prediction-memory-histogram-decay-halflife",
        Value,
        "24h0m0s",
    ),
    ("prediction-cpu-histogram-decay-halflife", Value, "12h0m0s"),
    ("prediction-training-interval", Value, "1m0s"),
    ("prediction-model-expiration-duration", Value, "30m0s"),
    ("prediction-model-checkpoint-interval", Value, "10m0s"),
    ("prediction-model-checkpoint-max-per-step", Value, "12"),
    // pkg/koordlet/resourceexecutor
    ("resource-force-update-seconds", Value, "60"),
    // sigs.k8s.io/controller-runtime/pkg/client/config
    ("kubeconfig", Value, "/etc/kubernetes/kubelet.conf"),
    // k8s.io/klog/v2 (v2.130.1)
    ("log_dir", Value, "/var/log/koordlet"),
    ("log_file", Value, "/var/log/koordlet/koordlet.log"),
    ("log_file_max_size", Value, "1800"),
    ("logtostderr", Bool, ""),
    ("alsologtostderr", Bool, ""),
    ("v", Value, "4"),
    ("add_dir_header", Bool, ""),
    ("skip_headers", Bool, ""),
    ("one_output", Bool, ""),
    ("skip_log_headers", Bool, ""),
    ("stderrthreshold", Value, "INFO"),
    ("vmodule", Value, "states_pods=5,cpu_suppress=4"),
    ("log_backtrace_at", Value, "koordlet.go:42"),
    // github.com/google/cadvisor v0.53.0, through k8s.io/kubernetes' kubelet packages
    ("application_metrics_count_limit", Value, "100"),
    ("allow_dynamic_housekeeping", Bool, ""),
    ("boot_id_file", Value, "/proc/sys/kernel/random/boot_id"),
    (
        "container_hints",
        Value,
        "/etc/cadvisor/container_hints.json",
    ),
    ("containerd", Value, "/run/containerd/containerd.sock"),
    ("containerd-namespace", Value, "k8s.io"),
    ("containerd_env_metadata_whitelist", Value, "FOO_"),
    ("crio_client_timeout", Value, "0s"),
    ("disable_root_cgroup_stats", Bool, ""),
    ("docker_only", Bool, ""),
    ("enable_load_reader", Bool, ""),
    ("event_storage_age_limit", Value, "default=24h"),
    ("event_storage_event_limit", Value, "default=100000"),
    ("global_housekeeping_interval", Value, "1m0s"),
    ("housekeeping_interval", Value, "10s"),
    ("log_cadvisor_usage", Bool, ""),
    (
        "machine_id_file",
        Value,
        "/etc/machine-id,/var/lib/dbus/machine-id",
    ),
    ("max_housekeeping_interval", Value, "1m0s"),
    ("referenced_reset_interval", Value, "0"),
    ("storage_driver_buffer_duration", Value, "1m0s"),
    ("storage_driver_db", Value, "cadvisor"),
    ("storage_driver_host", Value, "localhost:8086"),
    ("storage_driver_password", Value, "root"),
    ("storage_driver_secure", Bool, ""),
    ("storage_driver_table", Value, "stats"),
    ("storage_driver_user", Value, "root"),
    ("update_machine_info_interval", Value, "5m0s"),
];

/// Inert flags that upstream's pinned binary does not register but a newer
/// klog does (upstream's main sets it).
const NEWER_KLOG_FLAGS: &[&str] = &["legacy_stderr_threshold_behavior"];

fn argv(args: &[&str]) -> Vec<OsString> {
    std::iter::once("koordlet")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect()
}

fn parse(args: &[&str]) -> Result<ParsedArgs, clap::Error> {
    parse_args(argv(args))
}

/// The long names (and aliases) of our own flags.
fn our_long_flags() -> BTreeSet<String> {
    let command = KoordletArgs::command();
    command
        .get_arguments()
        .flat_map(|arg| {
            arg.get_long()
                .into_iter()
                .chain(arg.get_all_aliases().unwrap_or_default())
        })
        .map(str::to_string)
        .collect()
}

/// How a user may write one flag with Go's flag package, the value included.
fn go_spellings(name: &str, kind: Kind, value: &str) -> Vec<Vec<String>> {
    let mut spellings = Vec::new();
    for dashes in ["-", "--"] {
        match kind {
            Bool => {
                spellings.push(vec![format!("{dashes}{name}")]);
                spellings.push(vec![format!("{dashes}{name}=true")]);
                spellings.push(vec![format!("{dashes}{name}=false")]);
            }
            Value => {
                spellings.push(vec![format!("{dashes}{name}={value}")]);
                spellings.push(vec![format!("{dashes}{name}"), value.to_string()]);
            }
        }
    }
    spellings
}

#[test]
fn upstream_chart_v1_8_default_arguments_parse_to_the_expected_values() {
    // koordinator-sh/charts versions/v1.8.0/templates/koordlet.yaml rendered
    // with its values.yaml defaults (metrics.port 9316, features "",
    // hostDirs.koordletSockDir /var/run/koordlet, log.level "4").
    let chart = [
        "-addr=:9316",
        "-cgroup-root-dir=/host-cgroup/",
        "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true",
        "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock",
        "--logtostderr=true",
        "--v=4",
    ];
    let parsed = parse(&chart).unwrap();
    assert!(
        parsed.inert_warnings.is_empty(),
        "{:?}",
        parsed.inert_warnings
    );
    let args = parsed.args;
    assert!(args.command.is_none());
    assert_eq!(args.addr.to_string(), "0.0.0.0:9316");
    assert_eq!(args.system.cgroup_root_dir, PathBuf::from("/host-cgroup/"));
    assert_eq!(
        args.runtime_hooks.feature_gates(),
        "BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true"
    );
    let gates =
        crate::runtimehooks::hooks::parse_feature_gates(&args.runtime_hooks.feature_gates())
            .unwrap();
    assert_eq!(gates.len(), 4);
    assert!(gates.values().all(|on| *on));
    assert_eq!(
        args.runtime_hooks.host_endpoint,
        "/var/run/koordlet/koordlet.sock"
    );
    assert_eq!(args.log.logtostderr, Some(true));
    assert_eq!(args.log.klog_verbosity, Some(4));
    assert_eq!(args.log.effective_level(), LogLevel::Debug);
    // What the chart leaves to the defaults keeps upstream's values.
    assert!(args.nri.enable);
    assert!(args.states.enable_node_metric_report);
    assert_eq!(
        args.collector.collect_res_used_interval,
        Duration::from_secs(1)
    );
    assert_eq!(args.qos.cpu_evict_cool_time_seconds, 20);
    assert_eq!(args.resource_force_update_seconds, 60);
}

#[test]
fn every_upstream_flag_parses_in_every_go_spelling() {
    let mut all = Vec::new();
    for &(name, kind, value) in UPSTREAM_FLAGS {
        for spelling in go_spellings(name, kind, value) {
            // A flag after it shows that a bool takes no value and a
            // value flag exactly one.
            let mut args: Vec<&str> = spelling.iter().map(String::as_str).collect();
            args.push("--addr=127.0.0.1:1");
            match parse(&args) {
                Ok(parsed) => assert_eq!(
                    parsed.args.addr.to_string(),
                    "127.0.0.1:1",
                    "{args:?} swallowed the next flag"
                ),
                Err(err) => panic!("upstream flag spelled {args:?} is refused: {err}"),
            }
        }
        let first = go_spellings(name, kind, value).swap_remove(0);
        all.extend(first);
    }
    // And all of them at once, as one long DaemonSet argument list.
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let parsed = parse(&all).unwrap_or_else(|err| panic!("{err}"));
    let inert_given = UPSTREAM_FLAGS
        .iter()
        .filter(|(name, _, _)| UPSTREAM_INERT_FLAGS.iter().any(|flag| flag.name == *name))
        .count();
    assert_eq!(parsed.inert_warnings.len(), inert_given);
}

#[test]
fn every_upstream_flag_is_a_flag_of_ours_or_inert_and_nothing_else_is_inert() {
    let ours = our_long_flags();
    let upstream: BTreeSet<&str> = UPSTREAM_FLAGS.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(
        upstream.len(),
        UPSTREAM_FLAGS.len(),
        "duplicate in the table"
    );
    let inert: BTreeSet<&str> = UPSTREAM_INERT_FLAGS.iter().map(|flag| flag.name).collect();
    assert_eq!(
        inert.len(),
        UPSTREAM_INERT_FLAGS.len(),
        "duplicate inert flag"
    );

    for &(name, kind, _) in UPSTREAM_FLAGS {
        let is_ours = ours.contains(name);
        let inert_flag = UPSTREAM_INERT_FLAGS.iter().find(|flag| flag.name == name);
        assert!(
            is_ours ^ inert_flag.is_some(),
            "upstream flag {name}: ours={is_ours}, inert={}",
            inert_flag.is_some()
        );
        if let Some(flag) = inert_flag {
            assert_eq!(flag.takes_value, kind == Value, "inert {name}: wrong kind");
            assert!(!flag.reason.trim().is_empty(), "inert {name}: no reason");
        }
    }
    for flag in UPSTREAM_INERT_FLAGS {
        assert!(
            upstream.contains(flag.name) || NEWER_KLOG_FLAGS.contains(&flag.name),
            "inert flag {} is not an upstream flag",
            flag.name
        );
        assert!(
            !ours.contains(flag.name),
            "inert flag {} hides ours",
            flag.name
        );
    }
}

#[test]
fn wired_upstream_flags_take_effect() {
    let args = parse(&[
        "-prediction-cold-start-duration=2h",
        "-prediction-safety-margin-percent",
        "20",
        "--prediction-memory-histogram-decay-halflife=6h",
        "--prediction-cpu-histogram-decay-halflife",
        "3h",
        "-prediction-training-interval=30s",
        "-prediction-model-expiration-duration=1h",
        "-prediction-checkpoint-filepath=/host-var-run-koordlet/prediction-checkpoints",
        "-prediction-model-checkpoint-interval",
        "2m",
    ])
    .unwrap()
    .args;
    assert_eq!(
        args.prediction.checkpoint_dir(&args.nri.var_run_root_dir),
        Some(PathBuf::from(
            "/host-var-run-koordlet/prediction-checkpoints"
        ))
    );
    assert_eq!(
        args.prediction.model_checkpoint_interval,
        Duration::from_secs(120)
    );
    let config = args.prediction.config();
    assert_eq!(config.cold_start, Duration::from_secs(2 * 3600));
    assert_eq!(config.safety_margin_percent, 20);
    assert_eq!(config.memory_half_life, Duration::from_secs(6 * 3600));
    assert_eq!(config.cpu_half_life, Duration::from_secs(3 * 3600));
    assert_eq!(config.training_interval, Duration::from_secs(30));
    assert_eq!(config.model_expiration, Duration::from_secs(3600));
}

#[test]
fn bool_flags_accept_the_bare_form_and_go_spellings_of_true_and_false() {
    let mut command = KoordletArgs::command();
    command.build();
    let bools: Vec<(String, clap::Id)> = command
        .get_arguments()
        .filter(|arg| arg.get_value_parser().type_id() == TypeId::of::<bool>())
        .filter_map(|arg| Some((arg.get_long()?.to_string(), arg.get_id().clone())))
        .collect();
    assert!(bools.len() >= 9, "{bools:?}");
    let value_of = |args: &[String], id: &clap::Id| -> Result<bool, String> {
        let matches = KoordletArgs::command()
            .try_get_matches_from(
                std::iter::once("koordlet".to_string()).chain(args.iter().cloned()),
            )
            .map_err(|err| err.to_string())?;
        matches
            .get_one::<bool>(id.as_str())
            .copied()
            .ok_or_else(|| "no value".to_string())
    };
    for (long, id) in &bools {
        assert_eq!(value_of(&[format!("--{long}")], id), Ok(true), "--{long}");
        assert_eq!(
            value_of(&[format!("--{long}=false")], id),
            Ok(false),
            "--{long}=false"
        );
        assert_eq!(
            value_of(&[format!("--{long}=true")], id),
            Ok(true),
            "--{long}=true"
        );
        // A bare bool flag must not take the next argument as its value.
        assert_eq!(
            value_of(&[format!("--{long}"), "--addr=127.0.0.1:1".to_string()], id),
            Ok(true),
            "--{long} before another flag"
        );
        // strconv.ParseBool's other spellings.
        for (text, expected) in [
            ("1", true),
            ("t", true),
            ("True", true),
            ("0", false),
            ("F", false),
            ("FALSE", false),
        ] {
            assert_eq!(
                value_of(&[format!("--{long}={text}")], id),
                Ok(expected),
                "--{long}={text}"
            );
        }
    }
}

#[test]
fn repeated_flags_take_the_last_value_and_feature_gates_merge_as_in_go() {
    let args = parse(&[
        "--v=2",
        "-v=5",
        "-kubelet-sync-interval=5s",
        "--kubelet-sync-interval",
        "7s",
        "-feature-gates=CPUBurst=true,BECPUEvict=true",
        "--feature-gates=BECPUEvict=false",
        "-enable-nri-runtime-hook=false",
        "-enable-nri-runtime-hook",
    ])
    .unwrap()
    .args;
    assert_eq!(args.log.klog_verbosity, Some(5));
    assert_eq!(args.states.kubelet_sync_interval, Duration::from_secs(7));
    let gates =
        crate::runtimehooks::hooks::parse_feature_gates(&args.runtime_hooks.feature_gates())
            .unwrap();
    assert_eq!(gates.get("CPUBurst"), Some(&true));
    assert_eq!(gates.get("BECPUEvict"), Some(&false));
    assert!(args.nri.enable);
}

#[test]
fn inert_flags_are_taken_out_with_one_warning_each_that_names_them() {
    let parsed = parse(&[
        "-tsdb-path=/metric-data/",
        "--addr=127.0.0.1:9316",
        "-enable-pprof",
        "-housekeeping_interval",
        "10s",
        "--log_dir=/var/log/koordlet",
        "--tsdb-path",
        "/other/",
        "-alsologtostderr=false",
        "--v=3",
    ])
    .unwrap();
    assert_eq!(parsed.args.addr.to_string(), "127.0.0.1:9316");
    assert_eq!(parsed.args.log.klog_verbosity, Some(3));
    let warnings = &parsed.inert_warnings;
    assert_eq!(warnings.len(), 5, "{warnings:?}");
    for (warning, name) in warnings.iter().zip([
        "-tsdb-path",
        "-enable-pprof",
        "-housekeeping_interval",
        "-log_dir",
        "-alsologtostderr",
    ]) {
        assert!(warning.contains(&format!("flag {name} ")), "{warning}");
        assert!(warning.contains("has no effect"), "{warning}");
    }
    assert!(warnings[0].contains("no TSDB"), "{}", warnings[0]);
    assert!(warnings[2].contains("cAdvisor"), "{}", warnings[2]);
    // Flags that act give no warning.
    assert!(
        parse(&["--addr=127.0.0.1:1", "-v=2"])
            .unwrap()
            .inert_warnings
            .is_empty()
    );
}

#[test]
fn misspelled_or_unknown_flags_are_still_errors() {
    for args in [
        &["-tsdb-pth=/metric-data/"][..],
        &["--kubelet-sync-intervall=1s"],
        &["-enable-pprofs"],
        &["--cgroup_root_dir=/host-cgroup/"],
        &["--log-dir=/var/log"],
        &["-housekeeping-interval=10s"],
        &["-tsdb-path=/metric-data/", "--tsdb-max-byte=1"],
    ] {
        let Err(err) = parse(args) else {
            panic!("{args:?} must be refused");
        };
        assert_eq!(err.kind(), ErrorKind::UnknownArgument, "{args:?}: {err}");
        assert!(err.to_string().contains("unexpected argument"), "{err}");
    }
    // A value-taking inert flag without its value is left for clap to refuse.
    assert!(parse(&["--tsdb-path"]).is_err());
    // As in Go, a bool flag takes no separate value.
    assert!(parse(&["--kubelet-insecure-tls", "true"]).is_err());
}
