use std::process::ExitCode;

use koord_scheduler::{COMPONENT, Command, cli, run, run_simulation};

#[tokio::main]
async fn main() -> ExitCode {
    let parsed = match cli::parse_args(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => err.exit(),
    };
    let args = parsed.args;
    if let Some(text) = args
        .version
        .as_ref()
        .and_then(|v| v.output("koord-scheduler"))
    {
        println!("{text}");
        return ExitCode::SUCCESS;
    }
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    for warning in &parsed.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(Command::Simulate(simulate)) = &args.command {
        return match run_simulation(&args, simulate) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("koord-scheduler simulate: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    koord_common::process::exit_code(&COMPONENT, run(args).await)
}
