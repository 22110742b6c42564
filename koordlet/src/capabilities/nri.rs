//! The runtime's NRI socket as `koordlet capabilities` reports it. It is a
//! fact about the container runtime rather than the kernel, and it changes
//! whenever the runtime restarts, so it is part of the printed report only,
//! not of the matrix published on the Node (the daemon exports its live NRI
//! state as `koordlet_nri_connected`).

use serde::{Deserialize, Serialize};

use super::{DetectOptions, NodeCapabilities, detect_with};
use crate::runtimehooks::nri::{NriArgs, NriProbe, probe_socket};
use crate::system::SystemArgs;

/// Key of the NRI entry in the JSON object and in `reasons`.
pub const NRI_KEY: &str = "nri";

/// Whether the container runtime offers NRI on the configured socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NriCapability {
    /// The socket probed: `--runtime-hooks-nri-socket-path`, a relative
    /// path taken below `/var/run/`.
    pub socket: String,
    /// The socket file exists.
    pub present: bool,
    /// A connection to it succeeded (and was closed at once).
    pub accepting: bool,
    /// `--enable-nri-runtime-hook`: whether the daemon would register as a
    /// plugin. The socket is probed either way.
    pub plugin_enabled: bool,
}

/// What `koordlet capabilities` prints: the node matrix with the `nri`
/// entry beside its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitiesReport {
    #[serde(flatten)]
    pub node: NodeCapabilities,
    pub nri: NriCapability,
}

impl CapabilitiesReport {
    /// Combines a detected matrix with an NRI probe; a socket that does not
    /// accept connections gets its explanation under `reasons["nri"]`.
    pub fn new(mut node: NodeCapabilities, probe: NriProbe, plugin_enabled: bool) -> Self {
        if !probe.accepts_connections {
            node.reasons.insert(NRI_KEY.to_string(), probe.detail);
        }
        Self {
            node,
            nri: NriCapability {
                socket: probe.socket.display().to_string(),
                present: probe.socket_present,
                accepting: probe.accepts_connections,
                plugin_enabled,
            },
        }
    }
}

/// Detects the node matrix and probes the NRI socket of `nri` (blocking I/O
/// and one connect: call from a blocking context).
pub fn detect_report(
    system: &SystemArgs,
    options: &DetectOptions,
    nri: &NriArgs,
) -> CapabilitiesReport {
    let node = detect_with(system, options);
    // The capability is the runtime's, so probe even when koordlet's own
    // plugin is switched off (the probe skips the socket for a disabled one).
    let probe = probe_socket(&NriArgs {
        enable: true,
        ..nri.clone()
    });
    CapabilitiesReport::new(node, probe, nri.enable)
}
