//! Compiles the NRI plugin API and the ttrpc envelopes (messages only: the
//! ttrpc transport is our own) with a vendored protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/nri/api.proto", "proto/nri/ttrpc.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // BTreeMap matches the hooks' label/annotation maps and keeps replies deterministic.
    config.btree_map(["."]);
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_with_config(config, &protos, &["proto"])?;
    Ok(())
}
