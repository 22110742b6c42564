//! Generated protobuf messages of the NRI API and the ttrpc envelopes
//! (from `koordlet/proto/nri`, compiled by `build.rs`).

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod ttrpc {
    include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
}
