//! The command line as upstream's koord-descheduler takes it (pflag with
//! `WordSepNormalizeFunc`: `--flag value`, `--flag=value`, `-flag=value`,
//! `--flag_name` for `--flag-name`, a bare `--flag` for a true bool). The
//! flags this build acts on are clap flags; the upstream flags it cannot act
//! on yet are taken out before parsing and reported once each
//! ([`INERT_FLAGS`]).

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};
use koord_common::cli::{InertFlag, prepare_go_args};

use crate::args::DeschedulerArgs;
pub use crate::args::{VersionRequest, parse_version_request};

const SECURE_SERVING: &str = "there is no secure (HTTPS) serving port; healthz and metrics are served \
     on the insecure address (--address/--port or the config file's bind addresses)";
const LEADER_ELECTION: &str = "no descheduling loop runs in this build, so there is no leadership to \
     elect; the config file's leaderElection is validated only";
const NO_GATES: &str =
    "this build has no feature gates; upstream's gates are taken at their defaults";
const METRIC_STABILITY: &str = "Kubernetes metric-stability controls; the metric set here is fixed";
const LOG_BUFFERING: &str = "logs are written unbuffered to stderr";

const fn inert(name: &'static str, takes_value: bool, reason: &'static str) -> InertFlag {
    InertFlag {
        name,
        takes_value,
        reason,
    }
}

/// Upstream flags accepted without effect, with the reason.
pub const INERT_FLAGS: &[InertFlag] = &[
    // k8s.io/apiserver SecureServingOptions.
    inert("bind-address", true, SECURE_SERVING),
    inert("secure-port", true, SECURE_SERVING),
    inert("cert-dir", true, SECURE_SERVING),
    inert("tls-cert-file", true, SECURE_SERVING),
    inert("tls-private-key-file", true, SECURE_SERVING),
    inert("tls-cipher-suites", true, SECURE_SERVING),
    inert("tls-min-version", true, SECURE_SERVING),
    inert("tls-sni-cert-key", true, SECURE_SERVING),
    inert("http2-max-streams-per-connection", true, SECURE_SERVING),
    inert("permit-port-sharing", false, SECURE_SERVING),
    inert("permit-address-sharing", false, SECURE_SERVING),
    inert("disable-http2-serving", false, SECURE_SERVING),
    // component-base leader election.
    inert("leader-elect", false, LEADER_ELECTION),
    inert("leader-elect-lease-duration", true, LEADER_ELECTION),
    inert("leader-elect-renew-deadline", true, LEADER_ELECTION),
    inert("leader-elect-retry-period", true, LEADER_ELECTION),
    inert("leader-elect-resource-lock", true, LEADER_ELECTION),
    inert("leader-elect-resource-name", true, LEADER_ELECTION),
    inert("leader-elect-resource-namespace", true, LEADER_ELECTION),
    // Feature gates.
    inert("feature-gates", true, NO_GATES),
    // component-base metrics options.
    inert("show-hidden-metrics-for-version", true, METRIC_STABILITY),
    inert("disabled-metrics", true, METRIC_STABILITY),
    inert("allow-metric-labels", true, METRIC_STABILITY),
    inert("allow-metric-labels-manifest", true, METRIC_STABILITY),
    // component-base logs options (--v and --logging-format are real flags).
    inert(
        "vmodule",
        true,
        "per-file verbosity is klog's; RUST_LOG directives select modules instead",
    ),
    inert("log-flush-frequency", true, LOG_BUFFERING),
    inert("log-text-split-stream", false, LOG_BUFFERING),
    inert("log-text-info-buffer-size", true, LOG_BUFFERING),
    inert("log-json-split-stream", false, LOG_BUFFERING),
    inert("log-json-info-buffer-size", true, LOG_BUFFERING),
];

#[derive(Debug)]
pub struct ParsedArgs {
    pub args: DeschedulerArgs,
    /// One line per inert flag given, naming it and why.
    pub warnings: Vec<String>,
}

/// The clap command with upstream's aliases.
pub fn command() -> clap::Command {
    DeschedulerArgs::command()
        .args_override_self(true)
        .mut_arg("log_format", |arg| arg.alias("logging-format"))
        .mut_arg("logtostderr", |arg| arg.require_equals(true))
}

/// pflag's `WordSepNormalizeFunc` (`_` in a flag name reads as `-`) and
/// the `-v4` shorthand spelling.
fn normalize_word_separators(args: Vec<OsString>) -> Vec<OsString> {
    let mut options_ended = false;
    args.into_iter()
        .enumerate()
        .map(|(index, arg)| {
            if index == 0 || options_ended {
                return arg;
            }
            if arg == "--" {
                options_ended = true;
                return arg;
            }
            let Some(text) = arg.to_str() else { return arg };
            // pflag's shorthand with its value attached: `-v4`.
            if let Some(level) = text.strip_prefix("-v")
                && !level.is_empty()
                && level.bytes().all(|b| b.is_ascii_digit())
            {
                return OsString::from(format!("--v={level}"));
            }
            let Some(body) = text.strip_prefix('-') else {
                return arg;
            };
            let (dashes, body) = match body.strip_prefix('-') {
                Some(rest) => ("--", rest),
                None => ("-", body),
            };
            let (name, value) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (body, None),
            };
            if !name.contains('_') {
                return arg;
            }
            let name = name.replace('_', "-");
            OsString::from(match value {
                Some(value) => format!("{dashes}{name}={value}"),
                None => format!("{dashes}{name}"),
            })
        })
        .collect()
}

/// Parses the process arguments (program name first).
pub fn parse_args<I, T>(args: I) -> Result<ParsedArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut command = command();
    let normalized = normalize_word_separators(args.into_iter().map(Into::into).collect());
    let removed = prepare_go_args(&command, normalized, INERT_FLAGS);
    let mut matches = command.try_get_matches_from_mut(removed.args)?;
    let args = DeschedulerArgs::from_arg_matches_mut(&mut matches)
        .map_err(|err| err.format(&mut command))?;
    let mut warnings = removed.warnings;
    if let Some(VersionRequest::Override(version)) = &args.version {
        warnings.push(format!(
            "flag --version={version} sets the reported version upstream; ignored here"
        ));
    }
    Ok(ParsedArgs { args, warnings })
}

#[cfg(test)]
mod tests;
