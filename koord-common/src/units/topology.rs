//! The node's CPU topology as data: every online CPU with its core, socket
//! and NUMA node. koordlet reads it (`metricsadvisor::read_cpu_topology`),
//! keeps it in the metric cache and hands it to the QoS strategies, the
//! runtime hooks' rules and the topology reporter; this module only holds
//! it, so all of them can name it without reaching into the collector.

use std::collections::BTreeSet;

use super::cpuset::CpuSet;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(cpu: u32, core: u32, socket: u32, node: u32) -> CpuInfo {
        CpuInfo {
            cpu,
            core,
            socket,
            node,
        }
    }

    #[test]
    fn counts_cores_sockets_and_nodes() {
        // Two sockets with one NUMA node each; core ids repeat per socket;
        // two threads per core.
        let topology = CpuTopology {
            cpus: vec![
                cpu(0, 0, 0, 0),
                cpu(1, 1, 0, 0),
                cpu(2, 0, 1, 1),
                cpu(3, 1, 1, 1),
                cpu(4, 0, 0, 0),
                cpu(5, 1, 0, 0),
                cpu(6, 0, 1, 1),
                cpu(7, 1, 1, 1),
            ],
        };
        assert_eq!(topology.num_cpus(), 8);
        assert_eq!(topology.num_cores(), 4);
        assert_eq!(topology.num_sockets(), 2);
        assert_eq!(topology.num_nodes(), 2);
        assert!(topology.smt());
        assert_eq!(topology.cpus_of_node(1).to_string(), "2-3,6-7");
        assert!(topology.cpus_of_node(2).is_empty());

        let no_smt = CpuTopology {
            cpus: vec![cpu(0, 0, 0, 0), cpu(1, 1, 0, 0)],
        };
        assert!(!no_smt.smt());
        assert_eq!(CpuTopology::default().num_cores(), 0);
    }
}
