//! Compiles the RuntimeHookService proto with a vendored protoc, so a fresh
//! machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/runtime/v1alpha1/api.proto";
    println!("cargo:rerun-if-changed={proto}");

    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // BTreeMap keeps map fields ordered, so hook responses are deterministic.
    config.btree_map(["."]);

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, &[proto], &["proto"])?;
    Ok(())
}
