//! Logging setup shared by the binaries: `tracing` events to stderr, as text or
//! JSON, filtered by `--log-level` (or the klog-style `--v`) and `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{Directive, LevelFilter};

/// Environment variable whose directives refine the level flag.
pub const RUST_LOG_ENV: &str = "RUST_LOG";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// Maps klog verbosity (as in upstream manifests, e.g. `--v=4`) onto a level.
    pub fn from_klog_verbosity(verbosity: u8) -> Self {
        match verbosity {
            0..=2 => LogLevel::Info,
            3..=5 => LogLevel::Debug,
            _ => LogLevel::Trace,
        }
    }

    fn filter(self) -> LevelFilter {
        match self {
            LogLevel::Error => LevelFilter::ERROR,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Trace => LevelFilter::TRACE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logging flags every binary flattens into its own flag struct.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub struct LogArgs {
    /// Minimum level of log events [default: info]; RUST_LOG directives, when set, refine it.
    #[arg(long = "log-level", value_enum, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,

    /// Log line format.
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,

    /// klog verbosity kept for upstream manifests (0-2 info, 3-5 debug, 6+ trace); --log-level wins.
    #[arg(long = "v", short = 'v', value_name = "N")]
    pub klog_verbosity: Option<u8>,

    /// Accepted for upstream manifests; logs always go to stderr.
    #[arg(
        long = "logtostderr",
        hide = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = crate::cli::parse_go_bool_flag,
        value_name = "BOOL"
    )]
    pub logtostderr: Option<bool>,
}

impl LogArgs {
    /// The level in effect: `--log-level`, else `--v`, else info.
    pub fn effective_level(&self) -> LogLevel {
        self.log_level
            .or(self.klog_verbosity.map(LogLevel::from_klog_verbosity))
            .unwrap_or(LogLevel::Info)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("invalid {RUST_LOG_ENV} value {value:?}: {reason}")]
    InvalidFilter { value: String, reason: String },
}

/// Whether [`init_logging`] installed the subscriber or found one already in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogInit {
    Installed,
    AlreadyInitialized,
}

/// The workspace's own crates (their `tracing` targets). At debug level only these log debug
/// events: the charts run every component at upstream's `--v=4`, and with the client libraries
/// (kube, hyper, tower) at debug too, every API request wrote several lines (about 5 MiB per
/// 20 minutes from one manager in the scale benchmark).
const OWN_CRATES: &[&str] = &[
    "apis",
    "koord_common",
    "koord_manager",
    "koord_scheduler",
    "koord_descheduler",
    "koord_runtime_proxy",
    "koordlet",
    "e2e",
];

/// Builds the event filter. Error to info apply to every crate; debug applies to the
/// workspace's own crates and info to the libraries; trace applies to everything. `RUST_LOG`
/// directives come last, so they override the level for the targets they name.
pub fn build_filter(level: LogLevel, rust_log: Option<&str>) -> Result<EnvFilter, LoggingError> {
    let everyone = match level {
        LogLevel::Debug => LevelFilter::INFO,
        _ => level.filter(),
    };
    let builder = EnvFilter::builder().with_default_directive(Directive::from(everyone));
    let mut directives = String::new();
    if level == LogLevel::Debug {
        for name in OWN_CRATES {
            directives.push_str(&format!("{name}=debug,"));
        }
    }
    if let Some(value) = rust_log.map(str::trim).filter(|value| !value.is_empty()) {
        // Checked alone first: an error should name the user's text, not ours.
        EnvFilter::builder()
            .parse(value)
            .map_err(|err| LoggingError::InvalidFilter {
                value: value.to_string(),
                reason: err.to_string(),
            })?;
        directives.push_str(value);
    }
    builder
        .parse(directives.trim_end_matches(','))
        .map_err(|err| LoggingError::InvalidFilter {
            value: directives.clone(),
            reason: err.to_string(),
        })
}

/// Installs the global subscriber. Safe to call more than once: later calls change nothing.
pub fn init_logging(args: &LogArgs) -> Result<LogInit, LoggingError> {
    let rust_log = std::env::var(RUST_LOG_ENV).ok();
    let filter = build_filter(args.effective_level(), rust_log.as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match args.log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init()
            .is_ok(),
        LogFormat::Json => builder.json().with_ansi(false).try_init().is_ok(),
    };
    Ok(if installed {
        LogInit::Installed
    } else {
        LogInit::AlreadyInitialized
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    fn parse(args: &[&str]) -> LogArgs {
        Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .unwrap()
            .log
    }

    #[test]
    fn level_defaults_to_info_and_flag_wins_over_klog_verbosity() {
        assert_eq!(parse(&[]).effective_level(), LogLevel::Info);
        assert_eq!(parse(&["--v=4"]).effective_level(), LogLevel::Debug);
        assert_eq!(parse(&["-v", "0"]).effective_level(), LogLevel::Info);
        assert_eq!(parse(&["--v", "9"]).effective_level(), LogLevel::Trace);
        assert_eq!(
            parse(&["--v=4", "--log-level", "warn"]).effective_level(),
            LogLevel::Warn
        );
    }

    #[test]
    fn upstream_logtostderr_flag_is_accepted() {
        assert_eq!(parse(&["--logtostderr=true"]).logtostderr, Some(true));
        assert_eq!(parse(&["--logtostderr"]).logtostderr, Some(true));
        // Go's spellings; a bare flag never takes the next word as its value.
        assert_eq!(parse(&["--logtostderr=1"]).logtostderr, Some(true));
        assert_eq!(parse(&["--logtostderr=F"]).logtostderr, Some(false));
        assert!(Cli::try_parse_from(["x", "--logtostderr", "true"]).is_err());
    }

    #[test]
    fn format_flag_parses() {
        assert_eq!(parse(&[]).log_format, LogFormat::Text);
        assert_eq!(parse(&["--log-format", "json"]).log_format, LogFormat::Json);
        assert!(Cli::try_parse_from(["test", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn rust_log_refines_and_bad_rust_log_is_an_error() {
        let filter = build_filter(LogLevel::Info, Some("kube=debug")).unwrap();
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::DEBUG));
        let filter = build_filter(LogLevel::Warn, None).unwrap();
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::WARN));
        let err = build_filter(LogLevel::Info, Some("kube=loud")).unwrap_err();
        assert!(err.to_string().contains("RUST_LOG"), "{err}");
    }

    /// The lines a subscriber with `filter` writes for one debug event of each target.
    fn debug_lines_written(filter: EnvFilter, targets: &[&str]) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for target in targets {
                // A target must be a literal; these cover a dependency and two own crates.
                match *target {
                    "hyper_util::client::legacy::pool" => {
                        tracing::debug!(target: "hyper_util::client::legacy::pool", "from hyper_util")
                    }
                    "koord_manager::controllers" => {
                        tracing::debug!(target: "koord_manager::controllers", "from koord_manager")
                    }
                    "koordlet::qos" => tracing::debug!(target: "koordlet::qos", "from koordlet"),
                    other => panic!("no event for {other}"),
                }
            }
        });
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    const TARGETS: &[&str] = &[
        "hyper_util::client::legacy::pool",
        "koord_manager::controllers",
        "koordlet::qos",
    ];

    #[test]
    fn debug_level_is_for_own_crates_and_trace_or_rust_log_opens_the_libraries() {
        let written = debug_lines_written(build_filter(LogLevel::Debug, None).unwrap(), TARGETS);
        assert!(written.contains("from koord_manager"), "{written}");
        assert!(written.contains("from koordlet"), "{written}");
        assert!(!written.contains("from hyper_util"), "{written}");

        let written = debug_lines_written(build_filter(LogLevel::Trace, None).unwrap(), TARGETS);
        assert!(written.contains("from hyper_util"), "{written}");

        let written = debug_lines_written(build_filter(LogLevel::Info, None).unwrap(), TARGETS);
        assert_eq!(written, "");

        // RUST_LOG names its targets last, so it wins both ways.
        let filter = build_filter(LogLevel::Debug, Some("hyper_util=debug,koordlet=info")).unwrap();
        let written = debug_lines_written(filter, TARGETS);
        assert!(written.contains("from hyper_util"), "{written}");
        assert!(written.contains("from koord_manager"), "{written}");
        assert!(!written.contains("from koordlet"), "{written}");
    }

    #[test]
    fn init_is_idempotent() {
        let args = LogArgs::default();
        let first = init_logging(&args).unwrap();
        let second = init_logging(&args).unwrap();
        assert_eq!(second, LogInit::AlreadyInitialized);
        // The first call may also find a subscriber if another test installed one.
        assert!(matches!(
            first,
            LogInit::Installed | LogInit::AlreadyInitialized
        ));
    }
}
