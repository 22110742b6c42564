//! koordlet's `--feature-gates`, read through koord-common's one registry
//! (Go boolean syntax, upstream's gate names and defaults, unknown names
//! refused). Runtime hooks, QoS strategies and the node topology reporter
//! all read the map this returns.

use std::collections::BTreeMap;

use koord_common::features::{FeatureGates, KOORDLET_GATES};

pub use koord_common::features::FeatureGateError;

/// The gates `text` sets (upstream's `--feature-gates` value, `A=true,B=false`),
/// checked against [`KOORDLET_GATES`]; a reader falls back to the gate's
/// default, which the test below holds equal to the table's.
pub fn parse_feature_gates(text: &str) -> Result<BTreeMap<String, bool>, FeatureGateError> {
    let gates = FeatureGates::parse(KOORDLET_GATES, text)?;
    Ok(gates
        .given()
        .into_iter()
        .map(|(name, on)| (name.to_owned(), on))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager;
    use crate::runtimehooks::hooks::{HookOptions, all_hooks};

    fn table_default(name: &str) -> bool {
        KOORDLET_GATES
            .iter()
            .find(|gate| gate.name == name)
            .unwrap_or_else(|| panic!("{name} is not in KOORDLET_GATES"))
            .default
    }

    #[test]
    fn hooks_and_strategies_name_table_gates_with_its_defaults() {
        for (hook, default) in all_hooks(&HookOptions::default()) {
            assert_eq!(table_default(hook.name()), default, "{}", hook.name());
        }
        for (name, default) in [
            qosmanager::FEATURE_CPU_BURST,
            qosmanager::FEATURE_BE_CPU_SUPPRESS,
            qosmanager::FEATURE_CGROUP_RECONCILE,
            (qosmanager::resctrl::FEATURE, true),
            (qosmanager::sysreconcile::FEATURE, false),
            (qosmanager::blkio::FEATURE, false),
            (
                qosmanager::netqos::FEATURE,
                qosmanager::netqos::FEATURE_DEFAULT,
            ),
        ] {
            assert_eq!(table_default(name), default, "{name}");
        }
        for name in qosmanager::EVICTION_FEATURES {
            assert!(!table_default(name), "{name}");
        }
        assert!(table_default(
            crate::statesinformer::nodetopo::NODE_TOPOLOGY_REPORT_GATE
        ));
    }

    #[test]
    fn given_gates_with_go_booleans() {
        let gates = parse_feature_gates("CPUBurst=F,GPUEnvInject=1,BatchResource=False").unwrap();
        assert_eq!(gates.len(), 3);
        assert_eq!(gates.get("CPUBurst"), Some(&false));
        assert_eq!(gates.get("GPUEnvInject"), Some(&true));
        assert_eq!(gates.get("BatchResource"), Some(&false));
        assert_eq!(gates.get("BECPUSuppress"), None);
        assert!(matches!(
            parse_feature_gates("Unheard=true"),
            Err(FeatureGateError::Unknown(name)) if name == "Unheard"
        ));
    }
}
