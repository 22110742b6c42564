use std::process::ExitCode;

use clap::Parser;
use koord_scheduler::{COMPONENT, Command, SchedulerArgs, run, run_simulation};

#[tokio::main]
async fn main() -> ExitCode {
    let args = SchedulerArgs::parse_from(koord_common::cli::go_style_args());
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
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
