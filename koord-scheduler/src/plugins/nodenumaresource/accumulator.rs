//! The order in which a node's free CPUs are handed to a pod, as upstream's
//! NodeNUMAResource allocates them: for FullPCPUs (or one thread per core)
//! whole free cores of one NUMA node, else of one socket, else the socket
//! with the most free cores and then the fullest of the rest; for
//! SpreadByPCPUs one thread per core inside one NUMA node, else one socket;
//! and as a last resort single threads, near what was already taken.
//!
//! NUMA nodes and sockets are ranked by free CPUs under the NUMA allocate
//! strategy (MostAllocated: fewest free first; otherwise most free first).
//! Exclusive policies are preferences: each step first skips cores / NUMA
//! nodes that exclusive pods hold, then tries again without that filter.
//! CPUs shared by several pods (`max_ref_count` > 1, amplified nodes) prefer
//! the least shared cores and threads.
//!
//! Pure functions over a topology snapshot; `cpu_accumulator_tests.rs` holds
//! upstream's test tables.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use apis::extension::numa_aware::{
    CPUBindPolicy, CPUExclusivePolicy, CPUInfo, NUMAAllocateStrategy,
};

/// A physical core: (socket, core id), since core ids repeat across sockets.
pub type CoreKey = (i32, i32);

fn core_of(info: &CPUInfo) -> CoreKey {
    (info.socket, info.core)
}

/// A node's CPUs with the per-core / per-NUMA-node / per-socket sizes the
/// accumulator compares against (total CPUs divided by the number of each).
#[derive(Debug, Clone, Default)]
pub struct CpuLayout {
    cpus: BTreeMap<i32, CPUInfo>,
    cpus_per_core: usize,
    cpus_per_node: usize,
    cpus_per_socket: usize,
}

impl CpuLayout {
    pub fn new(cpus: &BTreeMap<i32, CPUInfo>) -> Self {
        let cores: HashSet<CoreKey> = cpus.values().map(core_of).collect();
        let nodes: HashSet<i32> = cpus.values().map(|c| c.node).collect();
        let sockets: HashSet<i32> = cpus.values().map(|c| c.socket).collect();
        let per = |groups: usize| cpus.len().checked_div(groups).unwrap_or(0);
        Self {
            cpus: cpus.clone(),
            cpus_per_core: per(cores.len()),
            cpus_per_node: per(nodes.len()),
            cpus_per_socket: per(sockets.len()),
        }
    }

    pub fn cpus_per_core(&self) -> usize {
        self.cpus_per_core
    }

    pub fn info(&self, cpu: i32) -> Option<&CPUInfo> {
        self.cpus.get(&cpu)
    }
}

/// What other pods hold on a CPU: the exclusive policy they were placed
/// with, and how many of them share it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldCpu {
    pub exclusive: Option<CPUExclusivePolicy>,
    pub ref_count: usize,
}

/// One allocation request.
#[derive(Debug, Clone, Copy)]
pub struct TakeRequest {
    pub count: usize,
    pub bind_policy: CPUBindPolicy,
    pub exclusive: Option<CPUExclusivePolicy>,
    pub strategy: NUMAAllocateStrategy,
    /// More than 1 where one CPU may go to several pods.
    pub max_ref_count: usize,
}

/// Takes `request.count` CPUs of `available`, from `preferred` first (a
/// reservation's or the pod's earlier CPUs), then from the rest.
pub fn take_preferred_cpus(
    layout: &CpuLayout,
    available: &BTreeSet<i32>,
    preferred: &BTreeSet<i32>,
    held: &BTreeMap<i32, HeldCpu>,
    request: TakeRequest,
) -> Option<BTreeSet<i32>> {
    let preferred: BTreeSet<i32> = available.intersection(preferred).copied().collect();
    let mut result = BTreeSet::new();
    let mut needed = request.count;
    let mut rest = available.clone();
    if !preferred.is_empty() {
        let first = TakeRequest {
            count: needed.min(preferred.len()),
            ..request
        };
        result = take_cpus(layout, &preferred, held, first)?;
        needed -= result.len();
        rest.retain(|cpu| !preferred.contains(cpu));
    }
    if needed > 0 {
        let more = TakeRequest {
            count: needed,
            ..request
        };
        result.extend(take_cpus(layout, &rest, held, more)?);
    }
    Some(result)
}

/// Takes `request.count` CPUs of `available`; None when they cannot be had.
pub fn take_cpus(
    layout: &CpuLayout,
    available: &BTreeSet<i32>,
    held: &BTreeMap<i32, HeldCpu>,
    request: TakeRequest,
) -> Option<BTreeSet<i32>> {
    let mut acc = Accumulator::new(layout, available, held, request);
    if acc.satisfied() {
        return Some(acc.result);
    }
    if acc.needed > acc.allocatable.len() {
        return None;
    }
    let full_pcpus = request.bind_policy == CPUBindPolicy::FullPCPUs;
    if (full_pcpus || layout.cpus_per_core == 1) && acc.take_whole_cores() {
        return Some(acc.result);
    }
    if !full_pcpus && acc.take_spread_in_one_group() {
        return Some(acc.result);
    }
    for filter_exclusive in [true, false] {
        let cpus = acc.spread(acc.free_cpus(filter_exclusive));
        for cpu in cpus {
            if acc.needs(1) {
                acc.take(&[cpu]);
            }
            if acc.satisfied() {
                return Some(acc.result);
            }
        }
    }
    None
}

struct Accumulator<'a> {
    layout: &'a CpuLayout,
    /// Free CPUs not yet taken, with how many pods already share each.
    allocatable: BTreeMap<i32, (CPUInfo, usize)>,
    needed: usize,
    exclusive: Option<CPUExclusivePolicy>,
    exclusive_cores: HashSet<CoreKey>,
    exclusive_nodes: HashSet<i32>,
    strategy: NUMAAllocateStrategy,
    max_ref_count: usize,
    result: BTreeSet<i32>,
}

impl<'a> Accumulator<'a> {
    fn new(
        layout: &'a CpuLayout,
        available: &BTreeSet<i32>,
        held: &BTreeMap<i32, HeldCpu>,
        request: TakeRequest,
    ) -> Self {
        let mut exclusive_cores = HashSet::new();
        let mut exclusive_nodes = HashSet::new();
        for (cpu, state) in held {
            let Some(info) = layout.info(*cpu) else {
                continue;
            };
            match state.exclusive {
                Some(CPUExclusivePolicy::PCPULevel) => {
                    exclusive_cores.insert(core_of(info));
                }
                Some(CPUExclusivePolicy::NUMANodeLevel) => {
                    exclusive_nodes.insert(info.node);
                }
                _ => {}
            }
        }
        let allocatable = available
            .iter()
            .filter_map(|cpu| {
                let info = layout.info(*cpu)?;
                let refs = if request.max_ref_count > 1 {
                    held.get(cpu).map_or(0, |h| h.ref_count)
                } else {
                    0
                };
                Some((*cpu, (*info, refs)))
            })
            .collect();
        let exclusive = request.exclusive.filter(|p| {
            matches!(
                p,
                CPUExclusivePolicy::PCPULevel | CPUExclusivePolicy::NUMANodeLevel
            )
        });
        Self {
            layout,
            allocatable,
            needed: request.count,
            exclusive,
            exclusive_cores,
            exclusive_nodes,
            strategy: request.strategy,
            max_ref_count: request.max_ref_count,
            result: BTreeSet::new(),
        }
    }

    fn take(&mut self, cpus: &[i32]) {
        for cpu in cpus {
            self.result.insert(*cpu);
            if let Some((info, _)) = self.allocatable.remove(cpu) {
                match self.exclusive {
                    Some(CPUExclusivePolicy::PCPULevel) => {
                        self.exclusive_cores.insert(core_of(&info));
                    }
                    Some(CPUExclusivePolicy::NUMANodeLevel) => {
                        self.exclusive_nodes.insert(info.node);
                    }
                    _ => {}
                }
            }
        }
        self.needed = self.needed.saturating_sub(cpus.len());
    }

    fn needs(&self, n: usize) -> bool {
        self.needed >= n
    }

    fn satisfied(&self) -> bool {
        self.needed == 0
    }

    fn on_exclusive_core(&self, info: &CPUInfo) -> bool {
        self.exclusive == Some(CPUExclusivePolicy::PCPULevel)
            && self.exclusive_cores.contains(&core_of(info))
    }

    fn on_exclusive_node(&self, info: &CPUInfo) -> bool {
        self.exclusive == Some(CPUExclusivePolicy::NUMANodeLevel)
            && self.exclusive_nodes.contains(&info.node)
    }

    /// Orders two free counts so the strategy's preferred group comes first.
    fn by_strategy(&self, a: usize, b: usize) -> Ordering {
        if self.strategy == NUMAAllocateStrategy::MostAllocated {
            a.cmp(&b)
        } else {
            b.cmp(&a)
        }
    }

    fn refs_of(&self, cpu: i32) -> usize {
        self.allocatable.get(&cpu).map_or(0, |(_, refs)| *refs)
    }

    fn core_refs(&self, threads: &[i32]) -> usize {
        threads.iter().map(|cpu| self.refs_of(*cpu)).sum()
    }

    /// Ascending ids, or least shared first when CPUs are shared.
    fn sort_threads(&self, cpus: &mut [i32]) {
        cpus.sort_unstable();
        if self.max_ref_count > 1 {
            cpus.sort_by_key(|cpu| (self.refs_of(*cpu), *cpu));
        }
    }

    /// Free threads per core (ascending), skipping what `skip` rejects.
    fn threads_by_core(&self, skip: impl Fn(&CPUInfo) -> bool) -> BTreeMap<CoreKey, Vec<i32>> {
        let mut cores: BTreeMap<CoreKey, Vec<i32>> = BTreeMap::new();
        for (cpu, (info, _)) in &self.allocatable {
            if !skip(info) {
                cores.entry(core_of(info)).or_default().push(*cpu);
            }
        }
        cores
    }

    /// Cores with the most free threads first (least shared first), then by id.
    fn sort_cores(&self, cores: &mut [CoreKey], threads: &BTreeMap<CoreKey, Vec<i32>>) {
        cores.sort_by(|a, b| {
            let (ta, tb) = (&threads[a], &threads[b]);
            tb.len()
                .cmp(&ta.len())
                .then_with(|| {
                    if self.max_ref_count > 1 {
                        self.core_refs(ta).cmp(&self.core_refs(tb))
                    } else {
                        Ordering::Equal
                    }
                })
                .then_with(|| a.cmp(b))
        });
    }

    /// The step for FullPCPUs (and one-thread cores); true when satisfied.
    fn take_whole_cores(&mut self) -> bool {
        if self.needed <= self.layout.cpus_per_node {
            for filter_exclusive in [true, false] {
                for cpus in self.free_cores_by_node(filter_exclusive) {
                    if cpus.len() >= self.needed {
                        let n = self.needed;
                        self.take(&cpus[..n]);
                        return true;
                    }
                }
            }
        }
        if self.needed <= self.layout.cpus_per_socket {
            for cpus in self.free_cores_by_socket() {
                if cpus.len() >= self.needed {
                    let n = self.needed;
                    self.take(&cpus[..n]);
                    return true;
                }
            }
        }
        // Wider than a socket, or every group partly used: the sockets with
        // the most free cores whole, regardless of the strategy.
        let mut groups = self.free_cores_by_socket();
        groups.sort_by_key(|cpus| std::cmp::Reverse(cpus.len()));
        let mut left_over = Vec::new();
        for cpus in groups {
            if !self.needs(cpus.len()) {
                left_over.push(cpus);
            } else {
                self.take(&cpus);
                if self.satisfied() {
                    return true;
                }
            }
        }
        // The rest core by core from the sockets with the fewest free cores.
        let per_core = self.layout.cpus_per_core.max(1);
        if self.needs(per_core) {
            left_over.sort_by_key(Vec::len);
            for cpus in left_over {
                for core in cpus.chunks(per_core) {
                    self.take(core);
                    if self.satisfied() {
                        return true;
                    }
                    if !self.needs(per_core) {
                        break;
                    }
                }
            }
        }
        false
    }

    /// The step for SpreadByPCPUs: inside one NUMA node, else one socket,
    /// one thread per core as far as the group allows; true when satisfied.
    fn take_spread_in_one_group(&mut self) -> bool {
        if self.needed <= self.layout.cpus_per_node {
            for filter_exclusive in [true, false] {
                for cpus in self.free_cpus_by_node(filter_exclusive) {
                    if cpus.len() >= self.needed {
                        let spread = self.spread(cpus);
                        let n = self.needed;
                        self.take(&spread[..n]);
                        return true;
                    }
                }
            }
        }
        if self.needed <= self.layout.cpus_per_socket {
            for filter_exclusive in [true, false] {
                for cpus in self.free_cpus_by_socket(filter_exclusive) {
                    if cpus.len() >= self.needed {
                        let spread = self.spread(cpus);
                        let n = self.needed;
                        self.take(&spread[..n]);
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Whole free cores grouped by NUMA node, groups in strategy order
    /// (node's free whole-core CPUs, then its socket's free CPUs, then id).
    fn free_cores_by_node(&self, filter_exclusive: bool) -> Vec<Vec<i32>> {
        let threads = self.threads_by_core(|info| filter_exclusive && self.on_exclusive_node(info));
        let mut socket_free: HashMap<i32, usize> = HashMap::new();
        for cpus in threads.values() {
            let socket = self.allocatable[&cpus[0]].0.socket;
            *socket_free.entry(socket).or_default() += cpus.len();
        }
        let mut cores_by_node: BTreeMap<i32, Vec<CoreKey>> = BTreeMap::new();
        for (core, cpus) in &threads {
            if cpus.len() == self.layout.cpus_per_core {
                let node = self.allocatable[&cpus[0]].0.node;
                cores_by_node.entry(node).or_default().push(*core);
            }
        }
        let mut groups: Vec<(i32, i32, Vec<i32>)> = cores_by_node
            .into_iter()
            .map(|(node, mut cores)| {
                self.sort_cores(&mut cores, &threads);
                let cpus = self.flatten(&cores, &threads);
                let socket = self.allocatable[&cpus[0]].0.socket;
                (node, socket, cpus)
            })
            .collect();
        groups.sort_by(|(na, sa, ca), (nb, sb, cb)| {
            self.by_strategy(ca.len(), cb.len())
                .then_with(|| self.by_strategy(socket_free[sa], socket_free[sb]))
                .then_with(|| na.cmp(nb))
        });
        groups.into_iter().map(|(_, _, cpus)| cpus).collect()
    }

    /// Whole free cores grouped by socket, sockets in strategy order.
    fn free_cores_by_socket(&self) -> Vec<Vec<i32>> {
        let threads = self.threads_by_core(|_| false);
        let mut cores_by_socket: BTreeMap<i32, Vec<CoreKey>> = BTreeMap::new();
        for (core, cpus) in &threads {
            if cpus.len() == self.layout.cpus_per_core {
                cores_by_socket.entry(core.0).or_default().push(*core);
            }
        }
        let mut groups: Vec<(i32, Vec<i32>)> = cores_by_socket
            .into_iter()
            .map(|(socket, mut cores)| {
                self.sort_cores(&mut cores, &threads);
                (socket, self.flatten(&cores, &threads))
            })
            .collect();
        groups.sort_by(|(sa, ca), (sb, cb)| {
            self.by_strategy(ca.len(), cb.len())
                .then_with(|| sa.cmp(sb))
        });
        groups.into_iter().map(|(_, cpus)| cpus).collect()
    }

    fn flatten(&self, cores: &[CoreKey], threads: &BTreeMap<CoreKey, Vec<i32>>) -> Vec<i32> {
        let mut out = Vec::new();
        for core in cores {
            out.extend(threads[core].iter().copied());
        }
        out
    }

    /// Free CPUs grouped by NUMA node (one per core when filtering
    /// exclusives), groups in strategy order of their free CPUs.
    fn free_cpus_by_node(&self, filter_exclusive: bool) -> Vec<Vec<i32>> {
        let mut by_node: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        let mut node_free: HashMap<i32, usize> = HashMap::new();
        let mut socket_free: HashMap<i32, usize> = HashMap::new();
        let mut socket_of: HashMap<i32, i32> = HashMap::new();
        for (cpu, (info, _)) in &self.allocatable {
            if filter_exclusive && (self.on_exclusive_core(info) || self.on_exclusive_node(info)) {
                continue;
            }
            by_node.entry(info.node).or_default().push(*cpu);
            *node_free.entry(info.node).or_default() += 1;
            *socket_free.entry(info.socket).or_default() += 1;
            socket_of.insert(info.node, info.socket);
        }
        let mut groups: Vec<(i32, Vec<i32>)> = by_node
            .into_iter()
            .map(|(node, mut cpus)| {
                self.sort_threads(&mut cpus);
                if filter_exclusive {
                    cpus = self.one_per_core(&cpus);
                }
                (node, cpus)
            })
            .collect();
        groups.sort_by(|(na, _), (nb, _)| {
            self.by_strategy(node_free[na], node_free[nb])
                .then_with(|| {
                    self.by_strategy(socket_free[&socket_of[na]], socket_free[&socket_of[nb]])
                })
                .then_with(|| na.cmp(nb))
        });
        groups.into_iter().map(|(_, cpus)| cpus).collect()
    }

    /// Free CPUs grouped by socket (one per core when filtering exclusive
    /// cores), sockets in strategy order of the CPUs each group offers.
    fn free_cpus_by_socket(&self, filter_exclusive: bool) -> Vec<Vec<i32>> {
        let mut by_socket: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (cpu, (info, _)) in &self.allocatable {
            if filter_exclusive && self.on_exclusive_core(info) {
                continue;
            }
            by_socket.entry(info.socket).or_default().push(*cpu);
        }
        let mut groups: Vec<(i32, Vec<i32>)> = by_socket
            .into_iter()
            .map(|(socket, mut cpus)| {
                self.sort_threads(&mut cpus);
                if filter_exclusive {
                    cpus = self.one_per_core(&cpus);
                }
                (socket, cpus)
            })
            .collect();
        groups.sort_by(|(sa, ca), (sb, cb)| {
            self.by_strategy(ca.len(), cb.len())
                .then_with(|| sa.cmp(sb))
        });
        groups.into_iter().map(|(_, cpus)| cpus).collect()
    }

    /// Every free CPU, core by core: sockets already holding taken CPUs
    /// first, then by the strategy over socket and NUMA node free counts,
    /// then the fullest cores, then socket, sharing and core ids.
    fn free_cpus(&self, filter_exclusive: bool) -> Vec<i32> {
        let threads = self.threads_by_core(|info| {
            filter_exclusive && (self.on_exclusive_core(info) || self.on_exclusive_node(info))
        });
        let mut node_free: HashMap<i32, usize> = HashMap::new();
        let mut socket_free: HashMap<i32, usize> = HashMap::new();
        let mut core_node: HashMap<CoreKey, i32> = HashMap::new();
        for (core, cpus) in &threads {
            for cpu in cpus {
                let info = &self.allocatable[cpu].0;
                *node_free.entry(info.node).or_default() += 1;
                *socket_free.entry(info.socket).or_default() += 1;
                core_node.insert(*core, info.node);
            }
        }
        let mut socket_taken: HashMap<i32, usize> = HashMap::new();
        for cpu in &self.result {
            if let Some(info) = self.layout.info(*cpu) {
                *socket_taken.entry(info.socket).or_default() += 1;
            }
        }
        let taken = |socket: i32| socket_taken.get(&socket).copied().unwrap_or(0);
        let mut cores: Vec<CoreKey> = threads.keys().copied().collect();
        cores.sort_by(|a, b| {
            let (sa, sb) = (a.0, b.0);
            taken(sb)
                .cmp(&taken(sa))
                .then_with(|| self.by_strategy(socket_free[&sa], socket_free[&sb]))
                .then_with(|| self.by_strategy(node_free[&core_node[a]], node_free[&core_node[b]]))
                .then_with(|| threads[a].len().cmp(&threads[b].len()))
                .then_with(|| sa.cmp(&sb))
                .then_with(|| {
                    if self.max_ref_count > 1 {
                        self.core_refs(&threads[a])
                            .cmp(&self.core_refs(&threads[b]))
                    } else {
                        Ordering::Equal
                    }
                })
                .then_with(|| a.cmp(b))
        });
        let mut out = Vec::new();
        for core in cores {
            let mut cpus = threads[&core].clone();
            self.sort_threads(&mut cpus);
            out.extend(cpus);
        }
        out
    }

    /// The first CPU of each core, in the given order.
    fn one_per_core(&self, cpus: &[i32]) -> Vec<i32> {
        let mut seen = HashSet::new();
        cpus.iter()
            .copied()
            .filter(|cpu| {
                self.layout
                    .info(*cpu)
                    .is_some_and(|info| seen.insert(core_of(info)))
            })
            .collect()
    }

    /// Reorders CPUs round-robin over their cores: one thread of every core
    /// in the list, then the second threads, and so on.
    fn spread(&self, cpus: Vec<i32>) -> Vec<i32> {
        if cpus.len() <= self.layout.cpus_per_core {
            return cpus;
        }
        let mut out = Vec::with_capacity(cpus.len());
        let mut pending = cpus;
        while !pending.is_empty() {
            let mut seen = HashSet::new();
            let mut later = Vec::new();
            for cpu in pending {
                let core = self.layout.info(cpu).map(core_of);
                if core.is_some_and(|c| seen.insert(c)) || core.is_none() {
                    out.push(cpu);
                } else {
                    later.push(cpu);
                }
            }
            pending = later;
        }
        out
    }
}

#[cfg(test)]
#[path = "cpu_accumulator_tests.rs"]
mod tests;
