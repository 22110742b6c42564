//! RuntimeHookService (package `runtime.v1alpha1`), compiled from
//! `apis/proto/runtime/v1alpha1/api.proto` at build time.

pub mod v1alpha1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs, rust_2018_idioms)]
    tonic::include_proto!("runtime.v1alpha1");
}
