//! NodeResourceTopology reporting: the node's CPU topology and basic info,
//! NUMA zones and CPU pools, published the way upstream koordlet publishes
//! them so that koord-scheduler's NodeNUMAResource plugin can allocate
//! cpusets. Layered bottom-up:
//!
//! - [`pools`] (pure): [`NodeHardware`], the share pools
//!   ([`cpu_share_pools`], also used by the runtime hooks' CPUSetAllocator),
//!   the node reservation and the CPU/NUMA arithmetic of the annotations.
//! - [`readers`]: [`read_node_hardware`] and [`read_node_facts`] read the
//!   hardware below the sys root, `/proc/cpuinfo` and the kubelet's CPU
//!   manager checkpoint into a [`NodeHardware`].
//! - [`desired`] (pure): [`build_desired_topology`] turns the hardware, the
//!   Node and the pods into a [`DesiredTopology`];
//!   [`DesiredTopology::change_reason`] compares it with what the API server
//!   holds and [`DesiredTopology::apply_to`] merges it in.
//! - [`reporter`] (I/O shell): [`NodeTopologyReporter`] creates the object
//!   named after the node when it is missing and replaces it only when its
//!   content changed, at start, after pod or Node changes (debounced) and
//!   every `--node-topology-sync-interval`; it can also write the object to
//!   a file.
//!
//! The kubelet CPU manager's meaning for the pools (`kubelet_cpu_state`)
//! lives with its checkpoint in [`super::cpumanager`].

pub mod desired;
pub mod pools;
pub mod readers;
pub mod reporter;

pub use desired::*;
pub use pools::*;
pub use readers::*;
pub use reporter::*;

#[cfg(test)]
mod tests;
