use std::io::Write;
use std::process::ExitCode;

use koord_descheduler::{COMPONENT, DeschedulerCommand, cli, plan, run, snapshot, write_config};

fn run_plan(
    args: &koord_descheduler::DeschedulerArgs,
    plan_args: &plan::PlanArgs,
) -> anyhow::Result<()> {
    let configuration = args.configuration()?;
    let snapshot =
        snapshot::Snapshot::read_file(&plan_args.snapshot, plan_args.max_snapshot_bytes)?;
    let now = plan_args
        .now
        .unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
    let output = plan::plan(&configuration, &snapshot, now, plan_args.rounds)?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut stdout, &output)?;
    writeln!(stdout)?;
    stdout.flush()?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli::ParsedArgs { args, warnings } = match cli::parse_args(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => err.exit(),
    };
    if let Some(text) = args
        .version
        .as_ref()
        .and_then(|v| v.output("koord-descheduler"))
    {
        println!("{text}");
        return ExitCode::SUCCESS;
    }
    if let Some(DeschedulerCommand::Plan(plan_args)) = &args.command {
        for warning in &warnings {
            eprintln!("koord-descheduler plan: warning: {warning}");
        }
        return match run_plan(&args, plan_args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("koord-descheduler plan: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(path) = &args.write_config_to {
        let written = args
            .configuration()
            .and_then(|configuration| write_config(&configuration, path));
        return match written {
            Ok(()) => {
                eprintln!(
                    "koord-descheduler: wrote the configuration to {}",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("koord-descheduler: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    koord_common::process::exit_code(&COMPONENT, run(args).await)
}
