//! The manager's command line as upstream's koord-manager takes it: Go
//! `flag`/`pflag` spellings (`-flag`, `--flag`, `-flag=value`, `-flag value`,
//! bare `-flag` for a true bool), the flags this manager acts on, and the
//! upstream flags it accepts without effect ([`UPSTREAM_INERT_FLAGS`]), each
//! reported once at start.
//!
//! The flag inventory, what each one does here and why the inert ones are
//! inert is in `docs/flags.md`.

use std::ffi::OsString;

use clap::{CommandFactory, Parser};
use koord_common::cli::{InertFlag, prepare_go_args};

use crate::args::ManagerArgs;

/// Why the klog file-output flags do nothing.
const LOGS_TO_STDERR: &str =
    "logs are tracing events written to stderr only; use --log-level, --log-format or RUST_LOG";

/// Upstream koord-manager flags (upstream v1.8 `cmd/koord-manager`, the
/// packages it wires in, klog and controller-runtime) that are taken out of
/// the arguments before parsing and warned about, because this manager has
/// nothing they could change.
pub const UPSTREAM_INERT_FLAGS: &[InertFlag] = &[
    // cmd/koord-manager/main.go
    InertFlag {
        name: "namespace",
        takes_value: true,
        reason: "the caches always watch every namespace; objects outside the given namespace are not filtered out",
    },
    InertFlag {
        name: "enable-pprof",
        takes_value: false,
        reason: "there is no pprof endpoint (Go runtime profiling has no counterpart here)",
    },
    InertFlag {
        name: "pprof-addr",
        takes_value: true,
        reason: "there is no pprof endpoint (Go runtime profiling has no counterpart here)",
    },
    // pkg/webhook/pod/validating (pod enhanced validator)
    InertFlag {
        name: "pod-enhanced-validator-config-namespace",
        takes_value: true,
        reason: "the pod enhanced validator (feature gate EnablePodEnhancedValidator) is not implemented",
    },
    InertFlag {
        name: "pod-enhanced-validator-config-name",
        takes_value: true,
        reason: "the pod enhanced validator (feature gate EnablePodEnhancedValidator) is not implemented",
    },
    InertFlag {
        name: "pod-enhanced-validator-reconcile-interval",
        takes_value: true,
        reason: "the pod enhanced validator (feature gate EnablePodEnhancedValidator) is not implemented",
    },
    // pkg/util/client
    InertFlag {
        name: "disable-no-deepcopy",
        takes_value: false,
        reason: "cached objects are shared read-only and never deep-copied, so there is nothing to switch",
    },
    // k8s.io/klog/v2 (klog.InitFlags); --v and --logtostderr are real flags
    InertFlag {
        name: "log_dir",
        takes_value: true,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "log_file",
        takes_value: true,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "log_file_max_size",
        takes_value: true,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "alsologtostderr",
        takes_value: false,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "stderrthreshold",
        takes_value: true,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "one_output",
        takes_value: false,
        reason: LOGS_TO_STDERR,
    },
    InertFlag {
        name: "add_dir_header",
        takes_value: false,
        reason: "log lines have their own format (--log-format); klog headers do not apply",
    },
    InertFlag {
        name: "skip_headers",
        takes_value: false,
        reason: "log lines have their own format (--log-format); klog headers do not apply",
    },
    InertFlag {
        name: "skip_log_headers",
        takes_value: false,
        reason: "log lines have their own format (--log-format); klog headers do not apply",
    },
    InertFlag {
        name: "vmodule",
        takes_value: true,
        reason: "per-file verbosity is not supported; RUST_LOG directives set levels per module",
    },
    InertFlag {
        name: "log_backtrace_at",
        takes_value: true,
        reason: "stack traces at a log line are not supported",
    },
    // Registered by newer klog releases (upstream's go.mod requires one, its
    // replace pins an older one); accepted so either build's manifests work.
    InertFlag {
        name: "legacy_stderr_threshold_behavior",
        takes_value: false,
        reason: LOGS_TO_STDERR,
    },
];

/// Parsed flags and the warnings to log once logging is up.
#[derive(Debug, Clone)]
pub struct ParsedArgs {
    pub args: ManagerArgs,
    /// One line per inert upstream flag given, naming it and why it does nothing.
    pub warnings: Vec<String>,
}

/// The whole pipeline: Go spellings normalized, inert upstream flags taken
/// out (with their warnings), then clap.
pub fn parse_args<I, T>(argv: I) -> Result<ParsedArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let removed = prepare_go_args(
        &ManagerArgs::command(),
        argv.into_iter().map(Into::into).collect(),
        UPSTREAM_INERT_FLAGS,
    );
    let args = ManagerArgs::try_parse_from(removed.args)?;
    Ok(ParsedArgs {
        args,
        warnings: removed.warnings,
    })
}

pub use koord_common::cli::parse_go_bool_flag as parse_go_bool;

#[cfg(test)]
mod tests;
