//! CRI v1 (`runtime.v1`) messages and client, generated from `proto/cri/api.proto`.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
}
