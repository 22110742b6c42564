//! Cluster end-to-end check of koord-manager's NUMA-level batch resources:
//! the BatchResource plugin writes `kubernetes.io/batch-cpu` and
//! `kubernetes.io/batch-memory` into every zone of the NodeResourceTopology
//! koordlet reports for each node, and koordlet's own reports keep them.
//!
//! Needs the chart's defaults: colocation on in `slo-controller-config`,
//! koordlet's `NodeTopologyReport` gate (on by default), the manager's
//! `BatchResource` plugin (on unless `--noderesource-plugins` leaves it out)
//! and its `patch` permission on `noderesourcetopologies`. Without a cluster
//! it prints one SKIP line and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, ensure};
use apis::extension::{BATCH_CPU, BATCH_MEMORY, QuantityValue};
use apis::topology::v1alpha1::{NodeResourceTopology, Zone};
use e2e::cluster::{eventually, worker_nodes};
use kube::Api;

/// The largest CPU normalization ratio the manager accepts: zone batch CPU
/// is scaled by it, so it bounds how far batch may exceed the zone's CPUs.
const MAX_NORMALIZATION_RATIO: i64 = 5;

fn milli(
    quantity: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> anyhow::Result<i64> {
    Ok(QuantityValue::of(quantity)
        .with_context(|| format!("quantity {:?}", quantity.0))?
        .milli_value())
}

/// A zone's batch resources, as (batch-cpu units, batch-memory bytes), once
/// both are there; checks they are consistent with the zone's own
/// resources.
fn zone_batch(zone: &Zone) -> anyhow::Result<Option<(i64, i64)>> {
    let resources = zone.resources.as_deref().unwrap_or_default();
    let find = |name: &str| resources.iter().find(|info| info.name == name);
    let (Some(cpu), Some(memory)) = (find(BATCH_CPU), find(BATCH_MEMORY)) else {
        return Ok(None);
    };
    for info in [cpu, memory] {
        let values = [
            milli(&info.capacity)?,
            milli(&info.allocatable)?,
            milli(&info.available)?,
        ];
        ensure!(
            values.iter().all(|v| *v == values[0]),
            "zone {}: {} capacity/allocatable/available differ: {values:?}",
            zone.name,
            info.name
        );
        ensure!(values[0] >= 0, "zone {}: negative {}", zone.name, info.name);
    }
    // batch-cpu counts milli-cores as whole units.
    let batch_cpu = milli(&cpu.allocatable)? / 1000;
    let batch_memory = milli(&memory.allocatable)? / 1000;
    if let Some(zone_cpu) = find("cpu") {
        let zone_milli = milli(&zone_cpu.allocatable)?;
        ensure!(
            batch_cpu <= zone_milli * MAX_NORMALIZATION_RATIO,
            "zone {}: batch-cpu {batch_cpu} beyond the zone's {zone_milli} milli-cores",
            zone.name
        );
    }
    if let Some(zone_memory) = find("memory") {
        let zone_bytes = milli(&zone_memory.allocatable)? / 1000;
        ensure!(
            batch_memory <= zone_bytes,
            "zone {}: batch-memory {batch_memory} beyond the zone's {zone_bytes} bytes",
            zone.name
        );
    }
    Ok(Some((batch_cpu, batch_memory)))
}

/// Every zone with `cpu` carries batch resources; `None` until they all do.
fn all_zones_batch(
    topology: &NodeResourceTopology,
) -> anyhow::Result<Option<Vec<(String, i64, i64)>>> {
    let zones: Vec<&Zone> = topology
        .zones
        .iter()
        .filter(|zone| {
            zone.resources
                .iter()
                .flatten()
                .any(|info| info.name == "cpu" || info.name == "memory")
        })
        .collect();
    if zones.is_empty() {
        return Ok(None);
    }
    let mut found = Vec::new();
    for zone in zones {
        match zone_batch(zone)? {
            Some((cpu, memory)) => found.push((zone.name.clone(), cpu, memory)),
            None => return Ok(None),
        }
    }
    Ok(Some(found))
}

#[tokio::test]
async fn node_resource_topology_zones_get_batch_resources() -> anyhow::Result<()> {
    let test = "node_resource_topology_zones_get_batch_resources";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    let topologies: Api<NodeResourceTopology> = Api::all(client.clone());
    for node in worker_nodes(&client).await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let zones = eventually(
            &format!("batch resources in the zones of NodeResourceTopology {name}"),
            || async {
                let Some(topology) = topologies.get_opt(&name).await? else {
                    return Ok(None);
                };
                all_zones_batch(&topology)
            },
        )
        .await?;
        // koordlet rewrites its zones every few seconds (its report interval
        // is 3 s); its updates keep the manager's resources.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let topology = topologies.get(&name).await?;
        let again = all_zones_batch(&topology)?
            .with_context(|| format!("batch resources gone from {name}'s zones: {topology:?}"))?;
        let names = |list: &[(String, i64, i64)]| -> Vec<String> {
            list.iter().map(|(zone, _, _)| zone.clone()).collect()
        };
        ensure!(
            names(&zones) == names(&again),
            "zones changed: {zones:?} then {again:?}"
        );
    }
    Ok(())
}
