use std::process::ExitCode;

use clap::Parser;
use koordlet::{COMPONENT, KoordletArgs, NODE_NAME_ENV, run};

#[tokio::main]
async fn main() -> ExitCode {
    let args = KoordletArgs::parse_from(koord_common::cli::go_style_args());
    if let Err(code) = koord_common::process::init_process_logging(&COMPONENT, &args.log) {
        return code;
    }
    let node_name = std::env::var_os(NODE_NAME_ENV);
    koord_common::process::exit_code(&COMPONENT, run(args, node_name).await)
}
