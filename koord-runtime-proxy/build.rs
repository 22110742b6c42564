//! Compiles the CRI v1 API (messages, client and server) with a vendored protoc,
//! and keeps its descriptor set so the proxy can tell which fields it knows.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/cri/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors =
        std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("cri_descriptor.bin");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    config.btree_map(["."]);
    config.file_descriptor_set_path(&descriptors);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_with_config(config, &[proto], &["proto"])?;
    Ok(())
}
