//! Compiles the CRI v1 API (messages, client and server) with a vendored protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/cri/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    config.btree_map(["."]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_with_config(config, &[proto], &["proto"])?;
    Ok(())
}
