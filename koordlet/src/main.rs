use std::io::Write;
use std::process::ExitCode;

use koordlet::identity::{COMPONENT, NODE_NAME_ENV};
use koordlet::{Command, KoordletArgs, capabilities, cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    let parsed = match cli::parse_args(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => err.exit(),
    };
    let args = parsed.args;
    if let Some(Command::Capabilities(command)) = &args.command {
        return print_capabilities(&args, command);
    }
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    for warning in &parsed.inert_warnings {
        tracing::warn!("{warning}");
    }
    let node_name = std::env::var_os(NODE_NAME_ENV);
    koord_common::process::exit_code(&COMPONENT, run(args, node_name).await)
}

/// `koordlet capabilities`: detect, print, exit; no node name or cluster
/// needed. A koordlet daemon serving on `--addr` is asked whether its NRI
/// plugin is registered.
fn print_capabilities(args: &KoordletArgs, command: &capabilities::CapabilitiesArgs) -> ExitCode {
    let detected = capabilities::detect_report(&args.system, &command.detect_options(), &args.nri);
    let layout = koordlet::cgroup_layout_of(&args.system, &detected.node);
    let reaction = koordlet::qosmanager::reaction::detect(
        &args.system.proc_root_dir,
        &layout,
        &args.qos.reaction,
    );
    let blkio_volumes = koordlet::qosmanager::blkvolume::detect_capability(
        &koordlet::qosmanager::FsHostFiles,
        &args.system,
        &layout,
    );
    let report = detected
        .with_cpu_reaction(reaction)
        .with_network_qos(koordlet::qosmanager::netqos::capability::probe_host(
            &args.system.proc_root_dir,
        ))
        .with_blkio_volumes(blkio_volumes)
        .with_host_applications()
        .with_daemon(capabilities::query_daemon_nri(
            args.addr.socket_addr(),
            capabilities::DAEMON_QUERY_TIMEOUT,
        ))
        // No pod list here: every pinned checkpoint entry is shown.
        .with_kubelet_cpu_manager(
            koordlet::statesinformer::cpumanager::read_kubelet_cpu_manager_view(
                Some(&args.node_topology.var_lib_kubelet_dir),
                &Default::default(),
                &[],
            ),
        )
        .with_devices(koordlet::statesinformer::device::capability::detect(
            &args.system.sys_root_dir,
            &args.runtime_hooks.feature_gates(),
        ));
    let printed = capabilities::render_report(&report, command.output)
        .map_err(|err| err.to_string())
        .and_then(|text| {
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|err| err.to_string())
        });
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("koordlet capabilities: {err}");
            ExitCode::FAILURE
        }
    }
}
