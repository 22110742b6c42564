use std::process::ExitCode;

use clap::Parser;
use koord_runtime_proxy::{COMPONENT, RuntimeProxyArgs, run};

#[tokio::main]
async fn main() -> ExitCode {
    let args = RuntimeProxyArgs::parse_from(koord_common::cli::go_style_args());
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    koord_common::process::exit_code(&COMPONENT, run(args).await)
}
