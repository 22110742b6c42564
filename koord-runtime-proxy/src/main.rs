use std::process::ExitCode;

use koord_runtime_proxy::{COMPONENT, cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    let parsed = match cli::parse_args(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => err.exit(),
    };
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &parsed.args.log) {
        return code;
    }
    for warning in &parsed.warnings {
        tracing::warn!("{warning}");
    }
    koord_common::process::exit_code(&COMPONENT, run(parsed.args).await)
}
