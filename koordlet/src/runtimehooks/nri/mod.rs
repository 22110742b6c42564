//! NRI plugin transport for the runtime hooks (NRI v0.2+, containerd ≥ 1.7,
//! CRI-O ≥ 1.26).
//!
//! - [`ttrpc`]: the wire codec (multiplexer frames + ttrpc messages).
//! - [`connection`]: one connection (register, serve the Plugin service).
//! - [`supervisor`]: the one task that owns the connection, reconnecting
//!   with exponential backoff; a new connection is opened only after the
//!   previous one is fully closed, so there is never more than one
//!   (upstream koordinator#2334 could leave two after a reconnect).
//! - [`plugin`]: NRI events → hook contexts → NRI adjustments/updates.
//! - [`status`]: connection state, metrics and readiness.

pub mod connection;
pub mod plugin;
pub mod proto;
pub mod status;
pub mod supervisor;
pub mod ttrpc;

#[cfg(test)]
mod transport_tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use koord_common::cluster::parse_duration;
use koord_common::health::FnCheck;
use koord_common::{HealthRegistry, MetricsRegistry, Shutdown};

use crate::runtimehooks::apply::SideEffectApplier;
use crate::runtimehooks::dispatcher::HookDispatcher;

pub use plugin::NriPlugin;
pub use status::{NriState, NriStatus, NriStatusSnapshot};
pub use supervisor::{Backoff, NriSupervisor};

/// Upstream's default `--runtime-hooks-nri-backoff-steps` (Go's MaxInt32).
pub const DEFAULT_BACKOFF_STEPS: u64 = 2_147_483_647;

/// NRI flags, named as upstream koordlet's.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct NriArgs {
    /// Run the runtime hooks as an NRI plugin of the container runtime.
    #[arg(long = "enable-nri-runtime-hook", default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub enable: bool,

    /// The runtime's NRI socket; a relative path is taken below
    /// --var-run-root-dir, an absolute one is used as given.
    #[arg(
        long = "runtime-hooks-nri-socket-path",
        default_value = "nri/nri.sock",
        value_name = "PATH"
    )]
    pub socket_path: PathBuf,

    /// The host's /var/run (as mounted in koordlet's container); relative
    /// runtime socket paths are taken below it.
    #[arg(
        long = "var-run-root-dir",
        default_value = crate::system::VAR_RUN_ROOT,
        value_name = "DIR"
    )]
    pub var_run_root_dir: PathBuf,

    /// Name the plugin registers under.
    #[arg(
        long = "runtime-hooks-nri-plugin-name",
        default_value = "koordlet_nri",
        value_name = "NAME"
    )]
    pub plugin_name: String,

    /// Plugin index (two digits); the runtime calls plugins in ascending order.
    #[arg(
        long = "runtime-hooks-nri-plugin-index",
        default_value = "00",
        value_name = "INDEX",
        value_parser = parse_plugin_index
    )]
    pub plugin_index: String,

    /// How long the runtime may take to acknowledge the registration.
    #[arg(long = "runtime-hooks-nri-connect-timeout", default_value = "6s", value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,

    /// First reconnect delay.
    #[arg(long = "runtime-hooks-nri-backoff-duration", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub backoff_duration: Duration,

    /// Growth factor of the reconnect delay.
    #[arg(
        long = "runtime-hooks-nri-backoff-factor",
        default_value_t = 2.0,
        value_name = "FACTOR",
        value_parser = parse_backoff_factor
    )]
    pub backoff_factor: f64,

    /// Longest reconnect delay (upstream's default is effectively unbounded:
    /// 1<<62-1 ns).
    #[arg(long = "runtime-hooks-nri-backoff-cap", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub backoff_cap: Duration,

    /// Reconnect attempts after which the delay starts over at
    /// --runtime-hooks-nri-backoff-duration (upstream's meaning; at least 1).
    #[arg(
        long = "runtime-hooks-nri-backoff-steps",
        default_value_t = DEFAULT_BACKOFF_STEPS,
        value_parser = parse_backoff_steps,
        value_name = "STEPS"
    )]
    pub backoff_steps: u64,
}

impl NriArgs {
    /// The socket path, relative paths resolved below `--var-run-root-dir`.
    pub fn socket(&self) -> PathBuf {
        self.var_run_root_dir.join(&self.socket_path)
    }

    pub fn backoff(&self) -> Backoff {
        Backoff {
            initial: self.backoff_duration,
            factor: self.backoff_factor,
            cap: self.backoff_cap,
        }
    }

    pub fn registration(&self) -> connection::Registration {
        connection::Registration {
            plugin_name: self.plugin_name.clone(),
            plugin_index: self.plugin_index.clone(),
            timeout: self.connect_timeout,
        }
    }
}

fn parse_plugin_index(text: &str) -> Result<String, String> {
    let valid = text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit());
    if valid {
        Ok(text.to_string())
    } else {
        Err(format!(
            "invalid NRI plugin index {text:?}: expected two digits such as 00"
        ))
    }
}

fn parse_backoff_steps(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(steps) if steps >= 1 => Ok(steps),
        _ => Err(format!(
            "invalid backoff steps {text:?}: expected a whole number >= 1"
        )),
    }
}

fn parse_backoff_factor(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(factor) if factor.is_finite() && factor >= 1.0 => Ok(factor),
        _ => Err(format!(
            "invalid backoff factor {text:?}: expected a number >= 1"
        )),
    }
}

/// Readiness check name of the NRI plugin.
pub const READINESS_CHECK: &str = "nri-plugin";

/// Registers the NRI plugin's status without connecting: the
/// `koordlet_nri_*` metrics and the `nri-plugin` readiness check (failing
/// only while the runtime's NRI socket exists and the plugin is not
/// registered). The state is `WaitingForStates` until [`spawn`] runs (or
/// `Disabled`).
pub fn register(args: &NriArgs, metrics: &MetricsRegistry, health: &HealthRegistry) -> NriStatus {
    let status = NriStatus::new(if args.enable {
        NriState::WaitingForStates {
            socket: args.socket(),
        }
    } else {
        NriState::Disabled
    });
    status.register_metrics(metrics);
    let check = status.clone();
    health.add_readiness_check(READINESS_CHECK, FnCheck(move || check.readiness()));
    if !args.enable {
        tracing::info!("NRI runtime hooks are disabled (--enable-nri-runtime-hook=false)");
    }
    status
}

/// Starts connecting in the background (when enabled): the supervisor
/// serves `plugin` (built on the status from [`register`]) until `shutdown`.
pub fn spawn(args: &NriArgs, plugin: NriPlugin, shutdown: Shutdown) {
    if !args.enable {
        return;
    }
    let socket = args.socket();
    tracing::info!(socket = %socket.display(), plugin = %args.plugin_name, index = %args.plugin_index, "starting the NRI plugin");
    let status = plugin.status().clone();
    status.set_state(NriState::WaitingForSocket {
        socket: socket.clone(),
    });
    let supervisor = NriSupervisor {
        socket,
        registration: args.registration(),
        backoff: args.backoff(),
        service: Arc::new(plugin),
        status,
    };
    tokio::spawn(supervisor.run_with_steps(args.backoff_steps, shutdown));
}

/// [`register`] and [`spawn`] at once, without waiting for the states
/// informer (the daemon waits: see `RuntimeHooks::start`). Returns the status.
pub fn start(
    args: &NriArgs,
    dispatcher: Arc<HookDispatcher>,
    applier: Option<SideEffectApplier>,
    metrics: &MetricsRegistry,
    health: &HealthRegistry,
    shutdown: Shutdown,
) -> NriStatus {
    let status = register(args, metrics, health);
    spawn(
        args,
        NriPlugin::new(dispatcher, applier, status.clone()),
        shutdown,
    );
    status
}

/// What `koordlet capabilities` can show about NRI without the daemon: the
/// socket's presence and whether it accepts a connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NriProbe {
    pub socket: PathBuf,
    pub socket_present: bool,
    pub accepts_connections: bool,
    pub detail: String,
}

/// Checks the NRI socket of `args` (connects and closes immediately; the
/// runtime logs a short-lived connection, nothing else).
pub fn probe_socket(args: &NriArgs) -> NriProbe {
    let socket = args.socket();
    if !args.enable {
        return NriProbe {
            socket,
            socket_present: false,
            accepts_connections: false,
            detail: "disabled (--enable-nri-runtime-hook=false)".to_string(),
        };
    }
    let socket_present = socket.exists();
    let connect = std::os::unix::net::UnixStream::connect(&socket);
    let accepts_connections = connect.is_ok();
    let detail = match (&connect, socket_present) {
        (Ok(_), _) => "the runtime offers NRI on this socket".to_string(),
        (Err(_), false) => {
            "no NRI socket: the runtime is not running, has NRI disabled, or predates NRI v0.2 (containerd < 1.7, CRI-O < 1.26)".to_string()
        }
        (Err(err), true) => format!("socket present but refuses connections: {err}"),
    };
    NriProbe {
        socket,
        socket_present,
        accepts_connections,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        nri: NriArgs,
    }

    #[test]
    fn defaults_and_flag_names_follow_upstream() {
        let flags = Flags::try_parse_from(["koordlet"]).unwrap();
        assert!(flags.nri.enable);
        assert_eq!(flags.nri.socket(), PathBuf::from("/var/run/nri/nri.sock"));
        assert_eq!(flags.nri.plugin_name, "koordlet_nri");
        assert_eq!(flags.nri.plugin_index, "00");
        assert_eq!(flags.nri.connect_timeout, Duration::from_secs(6));
        assert_eq!(flags.nri.backoff().initial, Duration::from_secs(1));
        assert_eq!(flags.nri.backoff_steps, 2_147_483_647);
        assert_eq!(flags.nri.var_run_root_dir, PathBuf::from("/var/run/"));

        let flags = Flags::try_parse_from([
            "koordlet",
            "--enable-nri-runtime-hook=false",
            "--runtime-hooks-nri-socket-path=/tmp/x/nri.sock",
            "--runtime-hooks-nri-plugin-index=42",
        ])
        .unwrap();
        assert!(!flags.nri.enable);
        assert_eq!(flags.nri.socket(), PathBuf::from("/tmp/x/nri.sock"));
        assert_eq!(flags.nri.plugin_index, "42");
        assert!(Flags::try_parse_from(["koordlet", "--runtime-hooks-nri-plugin-index=7"]).is_err());
        assert!(
            Flags::try_parse_from(["koordlet", "--runtime-hooks-nri-backoff-factor=0.5"]).is_err()
        );
    }

    #[test]
    fn upstream_backoff_steps_and_var_run_root_flags_parse() {
        // Upstream's spellings, Go style, as a DaemonSet would pass them.
        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koordlet",
                "-runtime-hooks-nri-backoff-steps=5",
                "-var-run-root-dir=/host-var-run/",
                "-runtime-hooks-nri-backoff-cap=2562047h47m16.854775807s",
            ]
            .map(std::ffi::OsString::from),
        );
        let flags = Flags::try_parse_from(argv).unwrap();
        assert_eq!(flags.nri.backoff_steps, 5);
        assert_eq!(
            flags.nri.socket(),
            PathBuf::from("/host-var-run/nri/nri.sock")
        );
        // Go's largest duration: effectively no cap, as upstream's default.
        assert!(flags.nri.backoff().cap > Duration::from_secs(9_000_000_000));
        // An absolute socket path is used as given.
        let flags = Flags::try_parse_from([
            "koordlet",
            "--var-run-root-dir=/host-var-run",
            "--runtime-hooks-nri-socket-path=/run/containerd/nri.sock",
        ])
        .unwrap();
        assert_eq!(
            flags.nri.socket(),
            PathBuf::from("/run/containerd/nri.sock")
        );
        for bad in ["0", "-1", "x", "1.5"] {
            let arg = format!("--runtime-hooks-nri-backoff-steps={bad}");
            let err = Flags::try_parse_from(["koordlet", arg.as_str()])
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(err.to_string().contains("backoff steps"), "{err}");
        }
    }

    #[test]
    fn a_disabled_plugin_registers_its_status_but_never_connects() {
        let flags = Flags::try_parse_from([
            "koordlet",
            "--enable-nri-runtime-hook=false",
            "--runtime-hooks-nri-socket-path=/nonexistent/koord/nri.sock",
        ])
        .unwrap();
        let tree = std::env::temp_dir().join(format!("koord-nri-disabled-{}", std::process::id()));
        std::fs::create_dir_all(&tree).unwrap();
        let caps = crate::capabilities::detect(&crate::system::SystemArgs::under(&tree));
        let layout = crate::system::cgroup::CgroupLayout::new(
            crate::system::cgroup::CgroupVersion::V1,
            crate::system::cgroup::CgroupDriver::Cgroupfs,
            "/sys/fs/cgroup",
        );
        let dispatcher = Arc::new(HookDispatcher::new(
            Vec::new(),
            &caps,
            layout,
            crate::runtimehooks::protocol::FailurePolicyConfig::default(),
        ));
        let metrics = MetricsRegistry::new("koordlet");
        let health = HealthRegistry::new();
        // No runtime is needed: a disabled plugin spawns nothing.
        let status = start(
            &flags.nri,
            dispatcher,
            None,
            &metrics,
            &health,
            Shutdown::new(),
        );
        assert_eq!(status.snapshot().state, NriState::Disabled);
        assert!(status.readiness().is_ok());
        assert!(
            health
                .check_names(koord_common::Probe::Readiness)
                .contains(&READINESS_CHECK.to_string())
        );
        assert!(
            metrics
                .encode()
                .unwrap()
                .contains("koordlet_nri_connected 0")
        );
        assert!(probe_socket(&flags.nri).detail.contains("disabled"));
        let _ = std::fs::remove_dir_all(&tree);
    }

    #[test]
    fn probe_reports_a_missing_socket() {
        let flags = Flags::try_parse_from([
            "koordlet",
            "--runtime-hooks-nri-socket-path=/nonexistent/koord/nri.sock",
        ])
        .unwrap();
        let probe = probe_socket(&flags.nri);
        assert!(!probe.socket_present);
        assert!(!probe.accepts_connections);
        assert!(probe.detail.contains("no NRI socket"), "{}", probe.detail);
    }
}
