//! Compiles the CRI v1 API (client only) for the node e2e tests, with a
//! vendored protoc, from the one copy of the proto koord-runtime-proxy keeps.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../koord-runtime-proxy/proto/cri/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    config.btree_map(["."]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_with_config(config, &[proto], &["../koord-runtime-proxy/proto"])?;
    Ok(())
}
