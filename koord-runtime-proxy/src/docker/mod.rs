//! Docker mode (`--backend-runtime-mode=Docker`): the proxy serves the
//! Docker Engine API on its socket in front of dockerd, for dockershim or
//! cri-dockerd, and runs the same hooks as CRI mode around container
//! create, start, update and stop; see `docs/proxy.md`, "Docker mode".
//! `core` decides, `server` moves bytes.

pub mod core;
pub mod server;

pub use server::DockerProxy;
