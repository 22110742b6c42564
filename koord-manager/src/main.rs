use std::process::ExitCode;

use clap::Parser;
use koord_manager::{COMPONENT, ManagerArgs, ManagerCommand, run};

#[tokio::main]
async fn main() -> ExitCode {
    let args = ManagerArgs::parse_from(koord_common::cli::go_style_args());
    if let Some(ManagerCommand::Preview(preview)) = &args.command {
        let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
        return match koord_manager::preview::run_preview(preview, &mut stdout) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("koord-manager preview: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    koord_common::process::exit_code(&COMPONENT, run(args).await)
}
