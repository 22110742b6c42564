use std::process::ExitCode;

use koord_manager::{COMPONENT, ManagerCommand, run};

#[tokio::main]
async fn main() -> ExitCode {
    let koord_manager::cli::ParsedArgs { args, warnings } =
        match koord_manager::cli::parse_args(std::env::args_os()) {
            Ok(parsed) => parsed,
            Err(err) => err.exit(),
        };
    if let Some(ManagerCommand::Preview(preview)) = &args.command {
        for warning in &warnings {
            eprintln!("koord-manager preview: warning: {warning}");
        }
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
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    koord_common::process::exit_code(&COMPONENT, run(args).await)
}
