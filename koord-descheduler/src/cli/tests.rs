use super::*;
use crate::DeschedulerCommand;

fn parse(args: &[&str]) -> ParsedArgs {
    parse_args(std::iter::once("koord-descheduler").chain(args.iter().copied()))
        .unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

/// The container args of upstream chart v1.8.0's `koord-descheduler.yaml`
/// with the chart's default `descheduler.log.level` of "4".
#[test]
fn upstream_chart_default_args_parse() {
    let parsed = parse(&["--v=4", "--config=/config/koord-descheduler.config"]);
    assert_eq!(
        parsed.args.config.as_deref(),
        Some(std::path::Path::new("/config/koord-descheduler.config"))
    );
    assert_eq!(
        parsed.args.log.effective_level(),
        koord_common::logging::LogLevel::Debug
    );
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
}

#[test]
fn go_spellings_are_accepted() {
    for args in [
        &["-config=/c", "-v=2"][..],
        &["--config", "/c", "-v", "2"],
        &["-config", "/c", "--v", "2"],
        &["--config=/c", "-v2"],
    ] {
        let parsed = parse(args);
        assert_eq!(
            parsed.args.config.as_deref(),
            Some(std::path::Path::new("/c")),
            "{args:?}"
        );
        assert_eq!(parsed.args.log.klog_verbosity, Some(2), "{args:?}");
    }
    // pflag's word-separator normalization and the deprecated serving flags.
    let parsed = parse(&[
        "--write_config_to=/tmp/out",
        "--address=127.0.0.1",
        "-port=0",
    ]);
    assert_eq!(
        parsed.args.write_config_to.as_deref(),
        Some(std::path::Path::new("/tmp/out"))
    );
    assert_eq!(parsed.args.address, "127.0.0.1");
    assert_eq!(parsed.args.port, 0);
    // kube-scheduler-style --logging-format.
    let parsed = parse(&["--logging-format=json"]);
    assert_eq!(
        parsed.args.log.log_format,
        koord_common::logging::LogFormat::Json
    );
    // A repeated flag keeps its last value, as pflag.
    assert_eq!(parse(&["--port=1", "--port=2"]).args.port, 2);
}

#[test]
fn inert_upstream_flags_warn_once_each_and_do_not_swallow_arguments() {
    let parsed = parse(&[
        "--leader-elect",
        "--leader-elect=false",
        "--leader-elect-lease-duration",
        "15s",
        "--leader_elect_resource_namespace=ns",
        "--feature-gates=A=true",
        "--secure-port=10258",
        "--permit-port-sharing",
        "--vmodule=x=2",
        "--config=/c",
    ]);
    assert_eq!(
        parsed.args.config.as_deref(),
        Some(std::path::Path::new("/c"))
    );
    let named: Vec<&str> = parsed
        .warnings
        .iter()
        .map(|w| w.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        named,
        [
            "-leader-elect",
            "-leader-elect-lease-duration",
            "-leader-elect-resource-namespace",
            "-feature-gates",
            "-secure-port",
            "-permit-port-sharing",
            "-vmodule"
        ]
    );
}

#[test]
fn every_upstream_flag_is_known() {
    // cmd/koord-descheduler's flag sets: misc, secure and insecure serving,
    // leader election, feature gate, metrics, logs, global.
    let with_value = [
        "config",
        "write-config-to",
        "bind-address",
        "secure-port",
        "cert-dir",
        "tls-cert-file",
        "tls-private-key-file",
        "tls-cipher-suites",
        "tls-min-version",
        "tls-sni-cert-key",
        "http2-max-streams-per-connection",
        "address",
        "port",
        "leader-elect-lease-duration",
        "leader-elect-renew-deadline",
        "leader-elect-retry-period",
        "leader-elect-resource-lock",
        "leader-elect-resource-name",
        "leader-elect-resource-namespace",
        "feature-gates",
        "show-hidden-metrics-for-version",
        "disabled-metrics",
        "allow-metric-labels",
        "allow-metric-labels-manifest",
        "logging-format",
        "log-flush-frequency",
        "v",
        "vmodule",
        "log-text-info-buffer-size",
        "log-json-info-buffer-size",
    ];
    let values = |flag: &str| match flag {
        "port" | "v" => "1",
        "logging-format" => "text",
        "address" => "0.0.0.0",
        _ => "x",
    };
    for flag in with_value {
        let arg = format!("--{flag}={}", values(flag));
        parse_args(["koord-descheduler", arg.as_str()])
            .unwrap_or_else(|err| panic!("--{flag}: {err}"));
    }
    for flag in [
        "permit-port-sharing",
        "permit-address-sharing",
        "leader-elect",
        "log-text-split-stream",
        "log-json-split-stream",
    ] {
        let arg = format!("--{flag}");
        parse_args(["koord-descheduler", arg.as_str()])
            .unwrap_or_else(|err| panic!("--{flag}: {err}"));
    }
    let version = parse(&["--version"]);
    assert_eq!(version.args.version, Some(VersionRequest::Print));
    assert_eq!(
        parse(&["--version=raw"]).args.version,
        Some(VersionRequest::Raw)
    );
    assert!(parse_args(["koord-descheduler", "--no-such-flag"]).is_err());
    assert!(parse_args(["koord-descheduler", "--port=-1"]).is_err());
}

#[test]
fn plan_subcommand_takes_the_global_config() {
    let parsed = parse(&[
        "plan",
        "--snapshot",
        "/s.yaml",
        "-output=json",
        "--config=/c",
        "--now=2024-01-01T00:00:00Z",
    ]);
    let Some(DeschedulerCommand::Plan(plan)) = &parsed.args.command else {
        panic!("no plan subcommand");
    };
    assert_eq!(plan.snapshot, std::path::PathBuf::from("/s.yaml"));
    assert_eq!(plan.output, "json");
    assert!(plan.now.is_some());
    assert_eq!(
        parsed.args.config.as_deref(),
        Some(std::path::Path::new("/c"))
    );
    assert!(
        parse_args([
            "koord-descheduler",
            "plan",
            "--snapshot=/s",
            "--output=yaml"
        ])
        .is_err()
    );
}
