//! RuntimeHookService (package `runtime.v1alpha1`), compiled from
//! `apis/proto/runtime/v1alpha1/api.proto` at build time.

/// The kubelet's CRI message limit, 16 MiB for sending and receiving
/// (`maxMsgSize` of k8s.io/cri-client; containerd's server defaults to the
/// same), where gRPC's default is 4 MiB: a node's pod list, or a pod with
/// large annotations, outgrows that. The runtime proxy forwards CRI
/// messages up to this size to the RuntimeHookService, so koordlet's server
/// takes them up to this size too.
pub const CRI_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

pub mod v1alpha1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs, rust_2018_idioms)]
    tonic::include_proto!("runtime.v1alpha1");
}
