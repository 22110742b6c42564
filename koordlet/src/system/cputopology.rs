//! The node's CPU topology as data: every online CPU with its core, socket
//! and NUMA node. Read by `metricsadvisor` (`read_cpu_topology`), kept by
//! the metric cache and used by the QoS strategies, the runtime hooks'
//! rules and the topology reporter; this module only holds it, so all of
//! them can name it without reaching into the collector.

use std::collections::BTreeSet;

use crate::system::units::CpuSet;

/// One logical CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CpuInfo {
    pub cpu: u32,
    /// `topology/core_id`; unique only within a socket.
    pub core: u32,
    /// `topology/physical_package_id`.
    pub socket: u32,
    /// NUMA node (0 on kernels without NUMA).
    pub node: u32,
}

/// The online CPUs, ordered by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuTopology {
    pub cpus: Vec<CpuInfo>,
}

impl CpuTopology {
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Physical cores: distinct (socket, core) pairs.
    pub fn num_cores(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| (c.socket, c.core))
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn num_sockets(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| c.socket)
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn num_nodes(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| c.node)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Whether some core runs more than one hardware thread.
    pub fn smt(&self) -> bool {
        self.num_cores() < self.num_cpus()
    }

    /// The CPUs of one NUMA node.
    pub fn cpus_of_node(&self, node: u32) -> CpuSet {
        let mut set = CpuSet::new();
        for cpu in self.cpus.iter().filter(|c| c.node == node) {
            // Ids came from a parsed CpuSet, so they are within its range.
            let _ = set.insert(cpu.cpu);
        }
        set
    }
}
