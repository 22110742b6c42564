//! The command line: every flag upstream's koord-scheduler accepts (its
//! kube-scheduler flags plus Koordinator's) parses here too. Each is honoured
//! by the extender, aliased to our equivalent, or accepted without effect
//! with a warning ([`INERT_FLAGS`]); `docs/extender.md` ("Upstream flags")
//! says which and why.
//!
//! The pipeline, [`parse_args`]: pflag shorthands (`-s 5`, `-f`, `-d`) are
//! spelled out, Go's single-dash spelling gets its second dash, the inert
//! flags are taken out, and clap parses the rest.

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};
use koord_common::cli::{
    InertFlag, join_separate_values, normalize_go_flag_args, remove_inert_flags,
    separate_value_flags,
};

use crate::args::SchedulerArgs;

/// Upstream's pflag shorthands: (letter, long name, takes a value).
const SHORTHANDS: &[(char, &str, bool)] = &[
    ('s', "debug-scores", true),
    ('f', "debug-filters", false),
    ('d', "debug-diagnosis", false),
];

const SECURE_SERVING: &str = "kube-scheduler's secure port, which the kube-scheduler in the same pod \
     serves; the extender serves --address/--port only";
const DELEGATED_AUTH: &str = "delegated authentication/authorization of kube-scheduler's secure port; \
     the extender admits clients by loopback address or mutual TLS (--client-ca-file)";
const METRIC_STABILITY: &str =
    "Kubernetes metric-stability controls; the extender's metric set is fixed";
const NO_GATES: &str = "the extender has no feature gates or version emulation; upstream's gates are \
     taken at their defaults";
const LOG_BUFFERING: &str = "logs are written unbuffered to stderr";
const SYNC_BARRIER: &str = "the extender campaigns only after its own cache has listed Nodes and Pods; \
     no barrier pod is used";
const WORKLOAD_AUDITOR: &str = "the workload auditor is not implemented";
const DEBUG_DUMPS: &str = "per-plugin score and filter dumps are not implemented; the extender logs \
     each /filter outcome at debug level (--v=3 or more)";
const DIAGNOSIS: &str = "scheduling diagnosis belongs to kube-scheduler's scheduling loop, which runs \
     in the kube-scheduler container";
const MONITOR: &str = "the scheduling-cycle monitor watches kube-scheduler's scheduling loop, which \
     runs in the kube-scheduler container";
const ASYNC_LOG: &str = "logs go to stderr through tracing; there is no klog queue to tune";

const fn inert(name: &'static str, takes_value: bool, reason: &'static str) -> InertFlag {
    InertFlag {
        name,
        takes_value,
        reason,
    }
}

/// Upstream flags that the extender accepts and ignores, with the reason.
pub const INERT_FLAGS: &[InertFlag] = &[
    // kube-scheduler: secure serving.
    inert("bind-address", true, SECURE_SERVING),
    inert("secure-port", true, SECURE_SERVING),
    inert("cert-dir", true, SECURE_SERVING),
    inert("tls-cipher-suites", true, SECURE_SERVING),
    inert("tls-min-version", true, SECURE_SERVING),
    inert("tls-sni-cert-key", true, SECURE_SERVING),
    inert("http2-max-streams-per-connection", true, SECURE_SERVING),
    inert("permit-port-sharing", false, SECURE_SERVING),
    inert("permit-address-sharing", false, SECURE_SERVING),
    inert("disable-http2-serving", false, SECURE_SERVING),
    // kube-scheduler: authentication and authorization.
    inert("authentication-kubeconfig", true, DELEGATED_AUTH),
    inert("authentication-skip-lookup", false, DELEGATED_AUTH),
    inert(
        "authentication-token-webhook-cache-ttl",
        true,
        DELEGATED_AUTH,
    ),
    inert(
        "authentication-tolerate-lookup-failure",
        false,
        DELEGATED_AUTH,
    ),
    inert("authorization-always-allow-paths", true, DELEGATED_AUTH),
    inert("authorization-kubeconfig", true, DELEGATED_AUTH),
    inert(
        "authorization-webhook-cache-authorized-ttl",
        true,
        DELEGATED_AUTH,
    ),
    inert(
        "authorization-webhook-cache-unauthorized-ttl",
        true,
        DELEGATED_AUTH,
    ),
    inert("requestheader-allowed-names", true, DELEGATED_AUTH),
    inert("requestheader-client-ca-file", true, DELEGATED_AUTH),
    inert("requestheader-extra-headers-prefix", true, DELEGATED_AUTH),
    inert("requestheader-group-headers", true, DELEGATED_AUTH),
    inert("requestheader-uid-headers", true, DELEGATED_AUTH),
    inert("requestheader-username-headers", true, DELEGATED_AUTH),
    // kube-scheduler: everything else.
    inert(
        "profiling",
        false,
        "the extender serves no /debug/pprof endpoints",
    ),
    inert(
        "contention-profiling",
        false,
        "the extender serves no /debug/pprof endpoints",
    ),
    inert("allow-metric-labels", true, METRIC_STABILITY),
    inert("allow-metric-labels-manifest", true, METRIC_STABILITY),
    inert("disabled-metrics", true, METRIC_STABILITY),
    inert("show-hidden-metrics-for-version", true, METRIC_STABILITY),
    inert("feature-gates", true, NO_GATES),
    inert("emulated-version", true, NO_GATES),
    inert("min-compatibility-version", true, NO_GATES),
    inert(
        "kube-api-qps",
        true,
        "the extender's Kubernetes client does no client-side rate limiting",
    ),
    inert(
        "kube-api-burst",
        true,
        "the extender's Kubernetes client does no client-side rate limiting",
    ),
    inert(
        "kube-api-content-type",
        true,
        "the extender's Kubernetes client speaks JSON",
    ),
    inert(
        "master",
        true,
        "the API server comes from --kubeconfig or the in-cluster configuration",
    ),
    inert(
        "write-config-to",
        true,
        "the extender does not write its configuration out; it starts as usual",
    ),
    inert(
        "pod-max-in-unschedulable-pods-duration",
        true,
        "the scheduling queue is kube-scheduler's, in the same pod",
    ),
    inert(
        "vmodule",
        true,
        "per-file verbosity is klog's; RUST_LOG directives select modules instead",
    ),
    inert("log-flush-frequency", true, LOG_BUFFERING),
    inert("log-text-split-stream", false, LOG_BUFFERING),
    inert("log-text-info-buffer-size", true, LOG_BUFFERING),
    // Stock kube-scheduler registers the JSON format; upstream's koord-scheduler does not.
    inert("log-json-split-stream", false, LOG_BUFFERING),
    inert("log-json-info-buffer-size", true, LOG_BUFFERING),
    // Koordinator's additions.
    inert("sync-barrier-pod-namespace", true, SYNC_BARRIER),
    inert("sync-barrier-pod-name", true, SYNC_BARRIER),
    inert("sync-hard-timeout", true, SYNC_BARRIER),
    inert("enable-workload-auditor", false, WORKLOAD_AUDITOR),
    inert("workload-auditor-metric-labels", true, WORKLOAD_AUDITOR),
    inert(
        "workload-auditor-victim-reschedule-duration",
        true,
        WORKLOAD_AUDITOR,
    ),
    inert(
        "workload-auditor-victim-deletion-duration",
        true,
        WORKLOAD_AUDITOR,
    ),
    inert(
        "workload-auditor-victim-deleting-retries",
        true,
        WORKLOAD_AUDITOR,
    ),
    inert(
        "workload-auditor-scheduling-event-interval",
        true,
        WORKLOAD_AUDITOR,
    ),
    inert("debug-scores", true, DEBUG_DUMPS),
    inert("debug-filters", false, DEBUG_DUMPS),
    inert("debug-diagnosis", false, DIAGNOSIS),
    inert("debug-diagnosis-blocking", false, DIAGNOSIS),
    inert("debug-diagnosis-queue-size", true, DIAGNOSIS),
    inert("debug-diagnosis-worker-count", true, DIAGNOSIS),
    inert(
        "enable-network-topology-manager",
        false,
        "network-topology-aware scheduling is not implemented",
    ),
    inert("scheduler-monitor-period", true, MONITOR),
    inert("scheduling-timeout", true, MONITOR),
    inert("scheduling-drop-unhandled-timeout", true, MONITOR),
    inert("async-log", false, ASYNC_LOG),
    inert("async-log-queue-length", true, ASYNC_LOG),
];

/// Parsed flags and the warnings to log once logging is up.
#[derive(Debug)]
pub struct ParsedArgs {
    pub args: SchedulerArgs,
    pub warnings: Vec<String>,
}

/// The clap command with upstream's names for our flags.
pub fn command() -> clap::Command {
    SchedulerArgs::command()
        // As Go's flag packages: a repeated flag's last value wins.
        .args_override_self(true)
        // kube-scheduler's --logging-format takes the same values (text, json).
        .mut_arg("log_format", |arg| arg.alias("logging-format"))
        // A bool: a following word is never its value.
        .mut_arg("logtostderr", |arg| arg.require_equals(true))
}

/// Parses the process arguments (program name first) the way upstream's
/// binary accepts them; see the module docs.
pub fn parse_args<I, T>(args: I) -> Result<ParsedArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut command = command();
    let joined = join_separate_values(
        args.into_iter().map(Into::into).collect(),
        &separate_value_flags(&command, INERT_FLAGS),
    );
    let expanded = expand_shorthands(joined);
    let removed = remove_inert_flags(normalize_go_flag_args(expanded), INERT_FLAGS);
    let mut matches = command.try_get_matches_from_mut(removed.args)?;
    let args = SchedulerArgs::from_arg_matches_mut(&mut matches)
        .map_err(|err| err.format(&mut command))?;
    let mut warnings = removed.warnings;
    if let Some(VersionRequest::Override(version)) = &args.version {
        warnings.push(format!(
            "flag --version={version} sets the reported Kubernetes version upstream; ignored here"
        ));
    }
    Ok(ParsedArgs { args, warnings })
}

/// Spells out upstream's pflag shorthands (`-s 5`, `-s5`, `-s=5`, `-f`,
/// `-d=false`, clusters such as `-fd`) as long flags; any other argument is
/// left as it is, so `-sync-hard-timeout` stays a Go-style long flag.
fn expand_shorthands(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut options_ended = false;
    for (index, arg) in args.into_iter().enumerate() {
        if index == 0 || options_ended {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            options_ended = true;
        }
        match arg.to_str().and_then(expand_shorthand) {
            Some(long) => out.extend(long.into_iter().map(OsString::from)),
            None => out.push(arg),
        }
    }
    out
}

fn expand_shorthand(arg: &str) -> Option<Vec<String>> {
    let rest = arg.strip_prefix('-')?;
    if rest.starts_with('-') {
        return None;
    }
    let (letters, value) = match rest.split_once('=') {
        Some((letters, value)) => (letters, Some(value)),
        None => match rest.find(|c: char| c.is_ascii_digit()) {
            // `-s5`: the value straight after the letter.
            Some(at)
                if rest[..at].ends_with('s') && rest[at..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                (&rest[..at], Some(&rest[at..]))
            }
            _ => (rest, None),
        },
    };
    if letters.is_empty() {
        return None;
    }
    let flags = letters
        .chars()
        .map(|letter| SHORTHANDS.iter().find(|(short, _, _)| *short == letter))
        .collect::<Option<Vec<_>>>()?;
    // As pflag: only the last letter of a cluster may take a value.
    if flags[..flags.len() - 1]
        .iter()
        .any(|(_, _, takes_value)| *takes_value)
    {
        return None;
    }
    let mut long: Vec<String> = flags
        .iter()
        .map(|(_, name, _)| format!("--{name}"))
        .collect();
    if let (Some(value), Some(last)) = (value, long.last_mut()) {
        last.push('=');
        last.push_str(value);
    }
    Some(long)
}

pub use koord_common::cli::parse_go_bool_flag as parse_go_bool;

pub use koord_common::cli::{VersionRequest, parse_version_request};

pub use crate::controller_plugins::ControllerPlugins;

#[cfg(test)]
mod tests;
