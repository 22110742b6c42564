use std::path::Path;
use std::time::{Duration, SystemTime};

use clap::error::ErrorKind;
use koord_common::logging::LogFormat;

use super::*;
use crate::cache::ClusterCache;
use crate::framework::{AnnotationWrite, Plugin, PluginEntry, Scheduler, StatusWrite};

/// How an upstream flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Go/pflag bool: bare means true, or `=value`; never the next argument.
    Bool,
    /// Takes a value, `=value` or the next argument; here with a plausible one.
    Value(&'static str),
}
use Kind::{Bool, Value};

/// Every flag of upstream's koord-scheduler (v1.8 era, Kubernetes 1.35): the
/// kube-scheduler flag set it embeds (printed from
/// k8s.io/kubernetes/cmd/kube-scheduler/app's command at v1.35.4) and
/// Koordinator's additions (cmd/koord-scheduler/app, pkg/scheduler/frameworkext,
/// pkg/util/asynclog). `help` is tested on its own.
const UPSTREAM_FLAGS: &[(&str, Kind)] = &[
    // kube-scheduler
    (
        "allow-metric-labels",
        Value("scheduler_pod_scheduling_attempts,result='scheduled'"),
    ),
    (
        "allow-metric-labels-manifest",
        Value("/etc/kubernetes/metric-labels.yaml"),
    ),
    (
        "authentication-kubeconfig",
        Value("/etc/kubernetes/scheduler.conf"),
    ),
    ("authentication-skip-lookup", Bool),
    ("authentication-token-webhook-cache-ttl", Value("10s")),
    ("authentication-tolerate-lookup-failure", Bool),
    (
        "authorization-always-allow-paths",
        Value("/healthz,/readyz,/livez"),
    ),
    (
        "authorization-kubeconfig",
        Value("/etc/kubernetes/scheduler.conf"),
    ),
    ("authorization-webhook-cache-authorized-ttl", Value("10s")),
    ("authorization-webhook-cache-unauthorized-ttl", Value("10s")),
    ("bind-address", Value("0.0.0.0")),
    ("cert-dir", Value("/var/run/kubernetes")),
    ("client-ca-file", Value("/etc/kubernetes/pki/ca.crt")),
    ("config", Value("/config/koord-scheduler.config")),
    ("contention-profiling", Bool),
    ("disable-http2-serving", Bool),
    ("disabled-metrics", Value("scheduler_pending_pods")),
    ("emulated-version", Value("kube=1.35")),
    (
        "feature-gates",
        Value("ElasticQuotaGuaranteeUsage=true,CompatibleCSIStorageCapacity=true"),
    ),
    ("http2-max-streams-per-connection", Value("1000")),
    ("kube-api-burst", Value("100")),
    (
        "kube-api-content-type",
        Value("application/vnd.kubernetes.protobuf"),
    ),
    ("kube-api-qps", Value("50")),
    ("kubeconfig", Value("/etc/kubernetes/scheduler.conf")),
    ("leader-elect", Bool),
    ("leader-elect-lease-duration", Value("15s")),
    ("leader-elect-renew-deadline", Value("10s")),
    ("leader-elect-resource-lock", Value("leases")),
    ("leader-elect-resource-name", Value("koord-scheduler")),
    (
        "leader-elect-resource-namespace",
        Value("koordinator-system"),
    ),
    ("leader-elect-retry-period", Value("2s")),
    ("log-flush-frequency", Value("5s")),
    ("log-text-info-buffer-size", Value("0")),
    ("log-text-split-stream", Bool),
    ("logging-format", Value("text")),
    ("master", Value("https://10.0.0.1:6443")),
    ("min-compatibility-version", Value("kube=1.34")),
    ("permit-address-sharing", Bool),
    ("permit-port-sharing", Bool),
    ("pod-max-in-unschedulable-pods-duration", Value("5m0s")),
    ("profiling", Bool),
    ("requestheader-allowed-names", Value("front-proxy-client")),
    (
        "requestheader-client-ca-file",
        Value("/etc/kubernetes/pki/front-proxy-ca.crt"),
    ),
    (
        "requestheader-extra-headers-prefix",
        Value("X-Remote-Extra-"),
    ),
    ("requestheader-group-headers", Value("X-Remote-Group")),
    ("requestheader-uid-headers", Value("X-Remote-Uid")),
    ("requestheader-username-headers", Value("X-Remote-User")),
    ("secure-port", Value("10259")),
    ("show-hidden-metrics-for-version", Value("1.34")),
    ("tls-cert-file", Value("/etc/kubernetes/pki/scheduler.crt")),
    (
        "tls-cipher-suites",
        Value("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ),
    ("tls-min-version", Value("VersionTLS12")),
    (
        "tls-private-key-file",
        Value("/etc/kubernetes/pki/scheduler.key"),
    ),
    (
        "tls-sni-cert-key",
        Value("/certs/sni.crt,/certs/sni.key:*.example.com"),
    ),
    ("v", Value("4")),
    ("version", Bool),
    ("vmodule", Value("scheduler*=4")),
    ("write-config-to", Value("/tmp/koord-scheduler.yaml")),
    // Stock kube-scheduler's JSON log options (not registered by upstream's koord-scheduler).
    ("log-json-info-buffer-size", Value("0")),
    ("log-json-split-stream", Bool),
    // Koordinator's additions
    ("address", Value("127.0.0.1")),
    ("port", Value("10251")),
    ("sync-barrier-pod-namespace", Value("kube-system")),
    (
        "sync-barrier-pod-name",
        Value("koord-scheduler-sync-barrier"),
    ),
    ("sync-hard-timeout", Value("1m")),
    ("enable-workload-auditor", Bool),
    (
        "workload-auditor-metric-labels",
        Value("quota_name=quota.scheduling.koordinator.sh/name"),
    ),
    ("workload-auditor-victim-reschedule-duration", Value("10s")),
    ("workload-auditor-victim-deletion-duration", Value("30s")),
    ("workload-auditor-victim-deleting-retries", Value("3")),
    ("workload-auditor-scheduling-event-interval", Value("5m")),
    ("debug-scores", Value("5")),
    ("debug-filters", Bool),
    ("debug-diagnosis", Bool),
    ("debug-diagnosis-blocking", Bool),
    ("debug-diagnosis-queue-size", Value("1000")),
    ("debug-diagnosis-worker-count", Value("10")),
    ("controller-plugins", Value("*,-Reservation")),
    ("enable-network-topology-manager", Bool),
    ("scheduler-monitor-period", Value("10s")),
    ("scheduling-timeout", Value("30s")),
    ("scheduling-drop-unhandled-timeout", Value("5s")),
    ("async-log", Bool),
    ("async-log-queue-length", Value("10000")),
];

/// Upstream's chart koordinator-sh/charts versions/v1.8.0,
/// templates/koord-scheduler.yaml, rendered with values.yaml's defaults on
/// Kubernetes newer than 1.22 (`scheduler.featureGates` is empty).
const CHART_V1_8_0_ARGS: &[&str] = &[
    "/koord-scheduler",
    "--port=10251",
    "--authentication-skip-lookup=true",
    "--v=4",
    "--feature-gates=",
    "--config=/config/koord-scheduler.config",
    "--enable-network-topology-manager=true",
];

fn parse(args: &[&str]) -> Result<ParsedArgs, clap::Error> {
    parse_args(std::iter::once("koord-scheduler").chain(args.iter().copied()))
}

fn inert_flag(name: &str) -> Option<&'static InertFlag> {
    INERT_FLAGS.iter().find(|flag| flag.name == name)
}

#[test]
fn upstream_chart_v1_8_0_default_args_parse() {
    let parsed = parse_args(CHART_V1_8_0_ARGS.iter().copied()).unwrap();
    assert_eq!(parsed.args.port, 10251);
    assert_eq!(
        parsed.args.config.as_deref(),
        Some(Path::new("/config/koord-scheduler.config"))
    );
    assert_eq!(parsed.args.log.klog_verbosity, Some(4));
    let warned: Vec<&str> = INERT_FLAGS
        .iter()
        .filter(|flag| {
            parsed
                .warnings
                .iter()
                .any(|w| w.contains(&format!("flag -{} ", flag.name)))
        })
        .map(|flag| flag.name)
        .collect();
    assert_eq!(
        warned,
        [
            "authentication-skip-lookup",
            "feature-gates",
            "enable-network-topology-manager"
        ]
    );
    assert_eq!(parsed.warnings.len(), 3, "{:?}", parsed.warnings);
}

/// The spellings upstream accepts for one flag, each followed by `--port=1234`
/// to show that a bool never swallows the next argument.
fn spellings(name: &str, kind: Kind) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for dashes in ["-", "--"] {
        let flag = format!("{dashes}{name}");
        match kind {
            Bool => {
                out.push(vec![flag.clone()]);
                out.push(vec![format!("{flag}=false")]);
                out.push(vec![format!("{flag}=true")]);
            }
            Value(value) => {
                out.push(vec![format!("{flag}={value}")]);
                out.push(vec![flag.clone(), value.to_string()]);
            }
        }
    }
    for spelling in &mut out {
        spelling.insert(0, "koord-scheduler".to_string());
        spelling.push("--port=1234".to_string());
    }
    out
}

#[test]
fn every_upstream_flag_parses_in_single_and_double_dash_spelling() {
    for &(name, kind) in UPSTREAM_FLAGS {
        for argv in spellings(name, kind) {
            let parsed = parse_args(&argv).unwrap_or_else(|err| panic!("{argv:?}: {err}"));
            assert_eq!(parsed.args.port, 1234, "{argv:?}");
            match inert_flag(name) {
                Some(_) => {
                    assert_eq!(parsed.warnings.len(), 1, "{argv:?}: {:?}", parsed.warnings);
                    assert!(
                        parsed.warnings[0].contains(&format!("flag -{name} ")),
                        "{argv:?}: {:?}",
                        parsed.warnings
                    );
                }
                None => assert!(
                    parsed.warnings.is_empty(),
                    "{argv:?}: {:?}",
                    parsed.warnings
                ),
            }
        }
    }
}

#[test]
fn every_upstream_flag_is_ours_or_inert_and_every_inert_flag_is_upstream() {
    let mut command = command();
    command.build();
    let ours: Vec<String> = command
        .get_arguments()
        .flat_map(|arg| {
            arg.get_long()
                .into_iter()
                .chain(arg.get_all_aliases().unwrap_or_default())
                .map(str::to_string)
        })
        .collect();
    for &(name, kind) in UPSTREAM_FLAGS {
        let is_ours = ours.iter().any(|long| long == name);
        match inert_flag(name) {
            Some(flag) => {
                assert!(!is_ours, "{name} is both ours and inert");
                assert_eq!(flag.takes_value, kind != Bool, "{name}: bool-ness differs");
                assert!(!flag.reason.is_empty(), "{name}");
            }
            None => assert!(is_ours, "{name} is neither ours nor inert"),
        }
    }
    for flag in INERT_FLAGS {
        assert!(
            UPSTREAM_FLAGS.iter().any(|(name, _)| *name == flag.name),
            "inert flag {} is not an upstream flag",
            flag.name
        );
    }
    assert!(ours.iter().any(|long| long == "help"));
}

#[test]
fn inert_flags_warn_once_by_name_with_the_reason() {
    for flag in INERT_FLAGS {
        let given = if flag.takes_value {
            format!("--{}=x", flag.name)
        } else {
            format!("-{}", flag.name)
        };
        let parsed = parse(&[&given, "--v=2", &given]).unwrap();
        assert_eq!(parsed.warnings.len(), 1, "{given}: {:?}", parsed.warnings);
        let warning = &parsed.warnings[0];
        assert!(
            warning.contains(&format!("flag -{} ", flag.name)),
            "{warning}"
        );
        assert!(warning.contains(flag.reason), "{warning}");
    }
}

#[test]
fn upstream_shorthands_expand_like_pflag() {
    for (argv, warned) in [
        (&["-s", "5"][..], &["debug-scores"][..]),
        (&["-s5"], &["debug-scores"]),
        (&["-s=5"], &["debug-scores"]),
        (&["-f"], &["debug-filters"]),
        (&["-d=false"], &["debug-diagnosis"]),
        (&["-fd"], &["debug-filters", "debug-diagnosis"]),
        (&["-fs", "3"], &["debug-filters", "debug-scores"]),
        // Long Go-style flags starting with those letters stay long flags.
        (&["-sync-hard-timeout=1m"], &["sync-hard-timeout"]),
        (&["-secure-port", "10259"], &["secure-port"]),
        (&["-debug-filters"], &["debug-filters"]),
        (&["-feature-gates="], &["feature-gates"]),
    ] {
        let parsed = parse(argv).unwrap_or_else(|err| panic!("{argv:?}: {err}"));
        assert_eq!(
            parsed.warnings.len(),
            warned.len(),
            "{argv:?}: {:?}",
            parsed.warnings
        );
        for (warning, name) in parsed.warnings.iter().zip(warned) {
            assert!(
                warning.contains(&format!("flag -{name} ")),
                "{argv:?}: {warning}"
            );
        }
    }
    // After `--` nothing is rewritten.
    assert_eq!(
        expand_shorthands(["b", "--", "-f"].map(OsString::from).to_vec()),
        ["b", "--", "-f"].map(OsString::from)
    );
}

#[test]
fn misspelled_flags_are_still_errors() {
    for argv in [
        &["--leader-elect-resource-nmae=x"][..],
        &["-feature-gate=A=true"],
        &["--enable-network-topology-manger"],
        &["--secure-prot", "10259"],
        &["-fv"],
        &["-s"],
        &["--feature-gates"],
        &["--profilling=false"],
    ] {
        let err = parse(argv).expect_err(&format!("{argv:?} parsed"));
        assert!(
            matches!(
                err.kind(),
                ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
            ),
            "{argv:?}: {:?} {err}",
            err.kind()
        );
    }
}

#[test]
fn bools_take_go_spellings_and_never_the_next_word() {
    for (given, want) in [
        ("--leader-elect", true),
        ("-leader-elect=false", false),
        ("--leader-elect=F", false),
        ("--leader-elect=0", false),
        ("--leader-elect=True", true),
    ] {
        let parsed = parse(&["--leader-elect=false", given]).unwrap();
        assert_eq!(parsed.args.leader_election.leader_elect, want, "{given}");
    }
    assert!(parse(&["--leader-elect=maybe"]).is_err());
    // As with pflag, the word after a bool is not its value.
    assert!(parse(&["--leader-elect", "false"]).is_err());
    let parsed = parse(&["--logtostderr", "--v=5"]).unwrap();
    assert_eq!(parsed.args.log.logtostderr, Some(true));
    assert_eq!(parsed.args.log.klog_verbosity, Some(5));
    let parsed = parse(&["-logtostderr=false", "-v", "3"]).unwrap();
    assert_eq!(parsed.args.log.logtostderr, Some(false));
    assert_eq!(parsed.args.log.klog_verbosity, Some(3));
    assert_eq!(parse(&["-v=6"]).unwrap().args.log.klog_verbosity, Some(6));
}

#[test]
fn a_repeated_flag_takes_its_last_value_as_in_go() {
    let parsed = parse(&["--port=1", "-port", "2", "--v=1", "--v=3"]).unwrap();
    assert_eq!(parsed.args.port, 2);
    assert_eq!(parsed.args.log.klog_verbosity, Some(3));
}

#[test]
fn logging_format_is_our_log_format() {
    let parsed = parse(&["--logging-format=json"]).unwrap();
    assert_eq!(parsed.args.log.log_format, LogFormat::Json);
    let parsed = parse(&["-logging-format", "text"]).unwrap();
    assert_eq!(parsed.args.log.log_format, LogFormat::Text);
    assert!(parse(&["--logging-format=yaml"]).is_err());
}

#[test]
fn version_follows_kube_scheduler() {
    let version = |argv: &[&str]| parse(argv).unwrap().args.version;
    assert_eq!(version(&[]), None);
    assert_eq!(version(&["--version"]), Some(VersionRequest::Print));
    assert_eq!(version(&["-version"]), Some(VersionRequest::Print));
    assert_eq!(version(&["-V"]), Some(VersionRequest::Print));
    assert_eq!(version(&["--version=raw"]), Some(VersionRequest::Raw));
    assert_eq!(version(&["--version=false"]), Some(VersionRequest::No));
    let printed = VersionRequest::Print.output("koord-scheduler").unwrap();
    assert!(printed.starts_with("koord-scheduler "), "{printed}");
    assert!(printed.contains(env!("CARGO_PKG_VERSION")), "{printed}");
    assert!(
        VersionRequest::Raw
            .output("koord-scheduler")
            .unwrap()
            .contains("gitCommit=")
    );
    assert_eq!(VersionRequest::No.output("koord-scheduler"), None);
    let parsed = parse(&["--version=v1.35.0"]).unwrap();
    assert_eq!(
        parsed
            .args
            .version
            .as_ref()
            .and_then(|v| v.output("koord-scheduler")),
        None
    );
    assert_eq!(parsed.warnings.len(), 1);
    assert!(parsed.warnings[0].contains("--version=v1.35.0"));
    assert!(parse(&["--version=maybe"]).is_err());
}

#[test]
fn help_is_clap_help() {
    for given in ["-h", "--help", "-help"] {
        let err = parse(&[given]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DisplayHelp, "{given}");
    }
}

#[test]
fn controller_plugins_follow_upstream_rule() {
    let all = ControllerPlugins::default();
    assert!(all.is_enabled("Reservation") && all.is_enabled("Anything"));
    assert!(all.disabled().is_empty());

    let parsed = parse(&["--controller-plugins=*,-Reservation"]).unwrap();
    let selection = parsed.args.controller_plugins();
    assert!(!selection.is_enabled("Reservation"));
    assert!(selection.is_enabled("Coscheduling"));
    assert_eq!(selection.disabled(), ["Reservation"]);

    // Repeated flags add up, as a pflag string slice; without `*` only the named run.
    let parsed = parse(&[
        "-controller-plugins",
        "Reservation",
        "--controller-plugins=Coscheduling",
    ])
    .unwrap();
    let selection = parsed.args.controller_plugins();
    assert_eq!(selection.disabled(), ["ElasticQuota"]);
    assert!(selection.allows_write_to(crate::plugins::coscheduling::POD_GROUP_RESOURCE));
    assert!(!selection.allows_write_to(crate::plugins::elasticquota::RESOURCE));
    assert!(selection.allows_write_to("pods"));

    // A value may start with '-', as pflag takes the next argument whatever it is.
    let parsed = parse(&["--controller-plugins", "-Reservation,*"]).unwrap();
    assert_eq!(parsed.args.controller_plugins().disabled(), ["Reservation"]);

    // The first entry naming a plugin decides.
    assert!(ControllerPlugins::new(["Reservation", "-Reservation"]).is_enabled("Reservation"));
    assert!(!ControllerPlugins::new(["-Reservation", "*"]).is_enabled("Reservation"));
    assert!(!ControllerPlugins::new(Vec::<String>::new()).is_enabled("Reservation"));
}

/// A plugin that always has one write due for each resource it is given.
#[derive(Clone)]
struct Writer(&'static [&'static str]);

impl Plugin for Writer {
    fn name(&self) -> &'static str {
        "Writer"
    }

    fn pending_writes(&mut self, _cache: &ClusterCache, _now: SystemTime) -> Vec<AnnotationWrite> {
        self.0
            .iter()
            .map(|&resource| AnnotationWrite {
                resource,
                namespace: None,
                name: "x".into(),
                annotations: Default::default(),
            })
            .collect()
    }

    fn pending_status_writes(
        &mut self,
        _cache: &ClusterCache,
        _now: SystemTime,
    ) -> Vec<StatusWrite> {
        self.0
            .iter()
            .map(|&resource| StatusWrite {
                resource,
                namespace: None,
                name: "x".into(),
                patch: serde_json::Value::Null,
            })
            .collect()
    }
}

#[test]
fn disabled_controller_plugins_write_nothing() {
    const RESOURCES: &[&str] = &[
        crate::plugins::coscheduling::POD_GROUP_RESOURCE,
        crate::plugins::elasticquota::RESOURCE,
        "pods",
    ];
    let entry = PluginEntry {
        plugin: Box::new(Writer(RESOURCES)),
        filter: false,
        score_weight: 0,
    };
    let mut scheduler = Scheduler::new(vec![entry], Duration::from_secs(60));
    let now = SystemTime::UNIX_EPOCH;
    assert_eq!(scheduler.pending_writes(now).len(), 3);
    assert_eq!(scheduler.pending_status_writes(now).len(), 3);

    scheduler.controllers = ControllerPlugins::new(["*", "-ElasticQuota", "-Coscheduling"]);
    let resources: Vec<&str> = scheduler
        .pending_writes(now)
        .iter()
        .map(|w| w.resource)
        .collect();
    assert_eq!(resources, ["pods"]);
    let resources: Vec<&str> = scheduler
        .pending_status_writes(now)
        .iter()
        .map(|w| w.resource)
        .collect();
    assert_eq!(resources, ["pods"]);
}
