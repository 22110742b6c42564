//! The command line against upstream koord-manager's: every flag upstream
//! registers (inventory taken from upstream v1.8's `cmd/koord-manager`, the
//! packages it wires in, klog v2.130.1 and controller-runtime v0.23.1), in
//! Go's spellings, goes through the same pipeline as `main`.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::CommandFactory;
use clap::error::ErrorKind;
use koord_common::ServeAt;
use koord_common::logging::LogLevel;

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Go bool flag: bare means true, `=value` sets it, never a separate value.
    Bool,
    /// Any other flag: `=value` or the next argument.
    Value,
}

/// One upstream flag with a value a manifest could give it.
struct UpstreamFlag {
    name: &'static str,
    kind: Kind,
    sample: &'static str,
}

const fn value(name: &'static str, sample: &'static str) -> UpstreamFlag {
    UpstreamFlag {
        name,
        kind: Kind::Value,
        sample,
    }
}

const fn boolean(name: &'static str) -> UpstreamFlag {
    UpstreamFlag {
        name,
        kind: Kind::Bool,
        sample: "true",
    }
}

/// Every flag upstream's koord-manager binary registers (`--help` aside).
const UPSTREAM_FLAGS: &[UpstreamFlag] = &[
    // cmd/koord-manager/main.go
    value("rest-config-qps", "40"),
    value("rest-config-burst", "80"),
    value("metrics-addr", ":8080"),
    value("health-probe-addr", ":8000"),
    boolean("enable-leader-election"),
    value("leader-election-namespace", "koordinator-system"),
    value("leader-elect-resource-lock", "leases"),
    value("namespace", "koordinator-system"),
    boolean("enable-pprof"),
    value("pprof-addr", ":8090"),
    value("sync-period", "5m"),
    // cmd/koord-manager/options
    value("controllers", "*,-colocationprofile"),
    // pkg/slo-controller/noderesource
    value("noderesource-plugins", "*,-GPUDeviceResource"),
    // pkg/controller/colocationprofile
    boolean("colocation-profile-reconcile-by-default"),
    value("colocation-profile-reconcile-interval", "30s"),
    value("colocation-profile-force-update-pod-duration", "5m"),
    value("colocation-profile-expire-pod-cache-duration", "10m"),
    value("colocation-profile-update-pod-qps", "10"),
    value("colocation-profile-update-pod-qps-burst", "100"),
    // pkg/util/sloconfig
    value("slo-config-name", "slo-controller-config"),
    value("config-namespace", "koordinator-system"),
    value("node-strategy-name-need-check", "true"),
    // pkg/webhook/pod/validating
    value(
        "pod-enhanced-validator-config-namespace",
        "koordinator-system",
    ),
    value(
        "pod-enhanced-validator-config-name",
        "pod-enhanced-validator-config",
    ),
    value("pod-enhanced-validator-reconcile-interval", "5m"),
    value(
        "binding-admission-user-name",
        "koord-scheduler,custom-scheduler",
    ),
    boolean("binding-admission-dry-run"),
    value("binding-admission-namespaces", "*"),
    value("binding-admission-exclude-namespaces", "kube-system"),
    value(
        "binding-admission-bypass-labels",
        "koordinator.sh/binding-admission-bypass",
    ),
    value(
        "binding-admission-bypass-annotations",
        "example.com/delegated",
    ),
    // pkg/webhook/quotaevaluate
    value("quota-update-max-retries", "10"),
    value("quota-update-retry-jitter", "50ms"),
    value("quota-update-max-total-jitter", "1s"),
    boolean("quota-update-conflict-fresh-get"),
    // pkg/util/feature (component-base feature gate)
    value(
        "feature-gates",
        "PodMutatingWebhook=true,ColocationProfileSkipMutatingResources=false",
    ),
    // pkg/util/client
    boolean("disable-no-deepcopy"),
    // sigs.k8s.io/controller-runtime/pkg/client/config
    value("kubeconfig", "/etc/kubernetes/admin.conf"),
    // k8s.io/klog/v2
    value("log_dir", "/var/log/koordinator"),
    value("log_file", "/var/log/koordinator/manager.log"),
    value("log_file_max_size", "1800"),
    boolean("logtostderr"),
    boolean("alsologtostderr"),
    value("v", "4"),
    boolean("add_dir_header"),
    boolean("skip_headers"),
    boolean("one_output"),
    boolean("skip_log_headers"),
    value("stderrthreshold", "INFO"),
    value("vmodule", "noderesource*=5"),
    value("log_backtrace_at", "main.go:100"),
];

/// Accepted although upstream's build (klog pinned to v2.130.1) lacks it.
const EXTRA_INERT: &[&str] = &["legacy_stderr_threshold_behavior"];

fn parse(args: &[&str]) -> Result<ParsedArgs, clap::Error> {
    parse_args(std::iter::once("koord-manager").chain(args.iter().copied()))
}

fn inert(name: &str) -> Option<&'static InertFlag> {
    UPSTREAM_INERT_FLAGS.iter().find(|flag| flag.name == name)
}

/// Long names (and the short `v`) of the flags clap knows.
fn clap_flags() -> BTreeSet<String> {
    let command = ManagerArgs::command();
    command
        .get_arguments()
        .flat_map(|arg| {
            arg.get_long_and_visible_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
        })
        .collect()
}

/// The spellings a Go manifest may use for `flag`, each as an argv tail.
fn go_spellings(flag: &UpstreamFlag) -> Vec<Vec<String>> {
    let name = flag.name;
    let mut spellings = Vec::new();
    for dashes in ["-", "--"] {
        match flag.kind {
            Kind::Value => {
                spellings.push(vec![format!("{dashes}{name}={}", flag.sample)]);
                spellings.push(vec![format!("{dashes}{name}"), flag.sample.to_owned()]);
            }
            Kind::Bool => {
                spellings.push(vec![format!("{dashes}{name}")]);
                spellings.push(vec![format!("{dashes}{name}=true")]);
                spellings.push(vec![format!("{dashes}{name}=false")]);
            }
        }
    }
    spellings
}

#[test]
fn upstream_chart_default_arguments_parse_with_upstream_meaning() {
    // koordinator-sh/charts versions/v1.8.0/templates/koord-manager.yaml,
    // rendered with that chart's values.yaml defaults.
    let chart_args = [
        "--enable-leader-election",
        "--metrics-addr=:8080",
        "--health-probe-addr=:8000",
        "--logtostderr=true",
        "--leader-election-namespace=koordinator-system",
        "--v=4",
        "--feature-gates=",
        "--sync-period=0",
        "--config-namespace=koordinator-system",
    ];
    let parsed = parse(&chart_args).unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let args = parsed.args;
    assert!(args.controller.enable_leader_election);
    assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(args.health_probe_addr.to_string(), "0.0.0.0:8000");
    assert_eq!(args.log.logtostderr, Some(true));
    assert_eq!(
        args.controller.leader_election_namespace,
        "koordinator-system"
    );
    assert_eq!(args.log.klog_verbosity, Some(4));
    assert_eq!(args.log.effective_level(), LogLevel::Debug);
    assert_eq!(
        args.webhook.feature_gates,
        crate::webhook::features::FeatureGates::default()
    );
    assert!(args.webhook.should_serve());
    assert_eq!(args.controller.sync_period, Duration::ZERO);
    assert_eq!(args.controller.full_pass_period(), Duration::from_secs(60));
    assert_eq!(args.controller.config_namespace, "koordinator-system");
    assert_eq!(args.controller.slo_config_name, "slo-controller-config");
    assert!(args.command.is_none());
}

#[test]
fn every_upstream_flag_is_either_a_real_flag_or_inert_never_both() {
    let known = clap_flags();
    let mut names = BTreeSet::new();
    for flag in UPSTREAM_FLAGS {
        assert!(names.insert(flag.name), "{} listed twice", flag.name);
        match (inert(flag.name), known.contains(flag.name)) {
            (Some(_), true) => panic!(
                "{} is a real flag and inert: clap would never see it",
                flag.name
            ),
            (None, false) => panic!("{} is neither a flag nor inert", flag.name),
            (Some(spec), false) => assert_eq!(
                spec.takes_value,
                flag.kind == Kind::Value,
                "{}: takes_value differs from upstream's type",
                flag.name
            ),
            (None, true) => {}
        }
    }
    for spec in UPSTREAM_INERT_FLAGS {
        assert!(
            names.contains(spec.name) || EXTRA_INERT.contains(&spec.name),
            "inert flag {} is not an upstream flag",
            spec.name
        );
        assert!(
            !known.contains(spec.name),
            "{} is also a real flag",
            spec.name
        );
        assert!(!spec.reason.is_empty());
    }
}

#[test]
fn every_upstream_flag_parses_in_every_go_spelling() {
    for flag in UPSTREAM_FLAGS {
        for tail in go_spellings(flag) {
            let argv: Vec<&str> = tail.iter().map(String::as_str).collect();
            let parsed = match parse(&argv) {
                Ok(parsed) => parsed,
                Err(err) => panic!("{argv:?} was refused: {err}"),
            };
            match inert(flag.name) {
                Some(_) => {
                    assert_eq!(parsed.warnings.len(), 1, "{argv:?}: {:?}", parsed.warnings);
                    assert!(
                        parsed.warnings[0].contains(&format!("-{} ", flag.name)),
                        "{argv:?}: {}",
                        parsed.warnings[0]
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
    // All of them at once, as one long Deployment would give them.
    let mut all = Vec::new();
    for flag in UPSTREAM_FLAGS {
        all.push(format!("--{}={}", flag.name, flag.sample));
    }
    let argv: Vec<&str> = all.iter().map(String::as_str).collect();
    let parsed = parse(&argv).unwrap();
    let inert_given = UPSTREAM_FLAGS
        .iter()
        .filter(|f| inert(f.name).is_some())
        .count();
    assert_eq!(parsed.warnings.len(), inert_given);
}

#[test]
fn upstream_values_reach_the_flags_this_manager_honours() {
    let parsed = parse(&[
        "-rest-config-qps=40",
        "-rest-config-burst",
        "80",
        "-metrics-addr=:9090",
        "--health-probe-addr",
        "0",
        "-enable-leader-election=false",
        "-leader-election-namespace",
        "kube-system",
        "-leader-elect-resource-lock=leases",
        "-sync-period=90s",
        "-controllers=*,-noderesource",
        "-slo-config-name=my-slo",
        "-config-namespace",
        "koord",
        "-node-strategy-name-need-check=true",
        "-feature-gates=PodMutatingWebhook=false",
        "-kubeconfig=/etc/kubernetes/admin.conf",
        "-logtostderr=false",
        "-v",
        "6",
    ])
    .unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let args = parsed.args;
    assert_eq!(args.rest_config.qps, 40);
    assert_eq!(args.rest_config.burst, 80);
    assert_eq!(args.rest_config.limits().map(|l| l.burst), Some(80));
    assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:9090");
    assert_eq!(args.health_probe_addr, ServeAt::Disabled);
    assert!(!args.controller.enable_leader_election);
    assert_eq!(args.controller.leader_election_namespace, "kube-system");
    assert_eq!(args.controller.sync_period, Duration::from_secs(90));
    assert!(!args.controller.is_enabled("noderesource"));
    assert!(args.controller.is_enabled("nodeslo"));
    assert_eq!(args.controller.slo_config_name, "my-slo");
    assert_eq!(args.controller.config_namespace, "koord");
    assert!(args.controller.require_node_strategy_names());
    assert!(!args.webhook.feature_gates.enabled("PodMutatingWebhook"));
    assert_eq!(
        args.cluster.kubeconfig.as_deref(),
        Some(std::path::Path::new("/etc/kubernetes/admin.conf"))
    );
    assert_eq!(args.log.logtostderr, Some(false));
    assert_eq!(args.log.effective_level(), LogLevel::Trace);

    // Upstream's defaults where nothing is given.
    let defaults = parse(&[]).unwrap().args;
    assert_eq!(defaults.rest_config.qps, 30);
    assert_eq!(defaults.rest_config.burst, 50);
    assert!(!defaults.controller.require_node_strategy_names());
    // An empty --sync-period is upstream's "not set".
    let empty = parse(&["--sync-period="]).unwrap().args;
    assert_eq!(empty.controller.full_pass_period(), Duration::from_secs(60));
    // Upstream compares the string with "true" exactly.
    let other = parse(&["--node-strategy-name-need-check=yes"])
        .unwrap()
        .args;
    assert!(!other.controller.require_node_strategy_names());
    // Negative QPS (no client-side limit) as `-flag value`.
    let negative = parse(&["-rest-config-qps", "-1"]).unwrap().args;
    assert_eq!(negative.rest_config.limits(), None);
}

#[test]
fn bool_flags_take_go_spellings_and_never_swallow_the_next_argument() {
    for (flag, field) in [("enable-leader-election", 0), ("enable-webhook-server", 1)] {
        let get = |args: &ManagerArgs| match field {
            0 => args.controller.enable_leader_election,
            _ => args.webhook.enabled,
        };
        for (spelling, expected) in [
            (format!("--{flag}"), true),
            (format!("-{flag}"), true),
            (format!("--{flag}=false"), false),
            (format!("-{flag}=false"), false),
            (format!("--{flag}=0"), false),
            (format!("--{flag}=F"), false),
            (format!("--{flag}=False"), false),
            (format!("--{flag}=FALSE"), false),
            (format!("--{flag}=1"), true),
            (format!("--{flag}=t"), true),
            (format!("--{flag}=TRUE"), true),
        ] {
            let parsed = parse(&[spelling.as_str(), "--metrics-addr=:9090"]).unwrap();
            assert_eq!(get(&parsed.args), expected, "{spelling}");
            // The bare form did not take the next flag as its value.
            assert_eq!(parsed.args.metrics_addr.to_string(), "0.0.0.0:9090");
        }
        let err = parse(&[format!("--{flag}=maybe").as_str()]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{err}");
    }
    // A bare bool flag right before the subcommand leaves the subcommand alone.
    let parsed = parse(&[
        "--enable-leader-election",
        "preview",
        "--snapshot",
        "s.yaml",
    ])
    .unwrap();
    assert!(parsed.args.controller.enable_leader_election);
    assert!(matches!(
        parsed.args.command,
        Some(crate::ManagerCommand::Preview(_))
    ));
}

#[test]
fn a_flag_given_twice_keeps_the_last_value_as_go_does() {
    let args = parse(&[
        "--v=2",
        "--v=6",
        "--enable-leader-election=false",
        "--enable-leader-election",
        "--sync-period=1m",
        "-sync-period=2m",
        "--rest-config-qps=5",
        "--rest-config-qps=7",
    ])
    .unwrap()
    .args;
    assert_eq!(args.log.klog_verbosity, Some(6));
    assert!(args.controller.enable_leader_election);
    assert_eq!(args.controller.sync_period, Duration::from_secs(120));
    assert_eq!(args.rest_config.qps, 7);
    // pflag string slices append after the first use, as clap does here.
    let args = parse(&["--controllers=nodeslo", "--controllers=nodemetric"])
        .unwrap()
        .args;
    assert_eq!(args.controller.controllers, ["nodeslo", "nodemetric"]);
}

#[test]
fn inert_flags_are_warned_about_once_each_by_name_with_their_reason() {
    let parsed = parse(&[
        "-pprof-addr",
        ":6060",
        "--disable-no-deepcopy",
        "-one_output",
        "--rest-config-burst=60",
        "-log_dir",
        "/var/log",
        "-pprof-addr=:7070",
        "-enable-pprof=false",
    ])
    .unwrap();
    // The values of inert flags were taken out with them, the real flag stayed.
    assert_eq!(parsed.args.rest_config.burst, 60);
    let names = [
        "pprof-addr",
        "disable-no-deepcopy",
        "one_output",
        "log_dir",
        "enable-pprof",
    ];
    assert_eq!(parsed.warnings.len(), names.len(), "{:?}", parsed.warnings);
    for (warning, name) in parsed.warnings.iter().zip(names) {
        assert!(warning.contains(&format!("flag -{name} ")), "{warning}");
        assert!(warning.contains("has no effect here"), "{warning}");
        let reason = inert(name).unwrap().reason;
        assert!(warning.ends_with(reason), "{warning}");
    }
}

#[test]
fn noderesource_plugins_select_plugins_as_upstream() {
    let plugins = |argv: &[&str]| parse(argv).unwrap().args.controller.node_resource_plugins();
    let all = plugins(&[]);
    assert!(all.batch_resource && all.mid_resource && all.cpu_normalization);
    assert!(all.resource_amplification);
    let chosen = plugins(&["-noderesource-plugins=*,-GPUDeviceResource,-BatchResource"]);
    assert!(!chosen.batch_resource && chosen.mid_resource && chosen.resource_amplification);
    // pflag string slices: the first use replaces the default, later ones append.
    let appended = plugins(&[
        "--noderesource-plugins",
        "MidResource",
        "--noderesource-plugins=CPUNormalization",
    ]);
    assert!(appended.mid_resource && appended.cpu_normalization);
    assert!(!appended.batch_resource && !appended.resource_amplification);
    assert!(
        parse(&["-noderesource-plugins=*"])
            .unwrap()
            .warnings
            .is_empty()
    );
}

#[test]
fn misspelled_and_unknown_flags_are_still_errors() {
    for (tail, culprit) in [
        (&["--enable-leader-electon"][..], "--enable-leader-electon"),
        (&["-noderesource-plugin=*"][..], "--noderesource-plugin"),
        (&["--log-dir=/var/log"][..], "--log-dir"),
        (&["--rest-config-qpss", "30"][..], "--rest-config-qpss"),
        (
            &["--metrics-addr=:8080", "-namespaces=default"][..],
            "--namespaces",
        ),
    ] {
        let err = parse(tail).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownArgument, "{tail:?}: {err}");
        assert!(err.to_string().contains(culprit), "{tail:?}: {err}");
    }
    // A value-taking inert flag without its value is reported, not dropped.
    assert!(parse(&["--log_dir"]).is_err());
    // Bad values of real flags are errors too.
    assert!(parse(&["--rest-config-qps=fast"]).is_err());
    assert!(parse(&["--leader-elect-resource-lock=configmaps"]).is_err());
}

#[test]
fn a_separate_value_that_starts_with_a_dash_is_the_value_as_in_go() {
    let parsed = parse(&["-controllers", "-noderesource", "-sync-period", "30s"]).unwrap();
    assert_eq!(parsed.args.controller.controllers, vec!["-noderesource"]);
    assert!(!parsed.args.controller.is_enabled("noderesource"));
    assert_eq!(
        parsed.args.controller.sync_period,
        std::time::Duration::from_secs(30)
    );
}

#[test]
fn quota_update_flags_reach_the_quota_evaluator() {
    let parsed = parse(&[
        "-quota-update-max-retries=10",
        "--quota-update-retry-jitter",
        "50ms",
        "-quota-update-max-total-jitter=2s",
        "-quota-update-conflict-fresh-get",
    ])
    .unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let settings = parsed.args.webhook.quota_update_settings();
    assert_eq!(settings.max_retries, 10);
    assert_eq!(settings.retry_jitter, Duration::from_millis(50));
    assert_eq!(settings.max_total_jitter, Duration::from_secs(2));
    assert!(settings.conflict_fresh_get);
    // Upstream's defaults.
    let defaults = parse(&[]).unwrap().args.webhook.quota_update_settings();
    assert_eq!(
        defaults,
        crate::webhook::quota_evaluate::UpdateSettings::default()
    );
    assert_eq!(defaults.max_retries, 3);
    assert_eq!(defaults.max_total_jitter, Duration::from_secs(1));
    // Negative values, which upstream takes as "off".
    let negative = parse(&[
        "-quota-update-max-retries",
        "-1",
        "-quota-update-retry-jitter",
        "-5ms",
    ])
    .unwrap()
    .args
    .webhook
    .quota_update_settings();
    assert_eq!(negative.max_retries, 0);
    assert_eq!(negative.start_retries(), 3);
    assert_eq!(negative.retry_jitter, Duration::ZERO);
    assert!(parse(&["--quota-update-retry-jitter=soon"]).is_err());
}
