//! koord-manager's readers of outside YAML and JSON, and what runs on them:
//!
//! - selector `0`: a snapshot for `koord-manager preview` (YAML documents or
//!   a JSON stream; the fast YAML reader, serde-saphyr with its depth and
//!   size budgets, the JSON nesting check), its `slo-controller-config`
//!   ConfigMap, and the preview of every node;
//! - selector `1`: one key of the `slo-controller-config` ConfigMap (the key
//!   chosen by the second byte, the rest is the value) through the parser,
//!   the validation, the controllers' key-by-key state, and a preview of a
//!   fixed cluster under the config that results.
#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use apis::configuration::{ALL_CONFIG_KEYS, DEFAULT_SLO_CONTROLLER_CONFIG_NAME};
use koord_manager::preview::{Snapshot, config_from, preview, render_text};
use koord_manager::slo_controller::config::{ConfigState, parse_config};
use libfuzzer_sys::fuzz_target;

/// koord-manager's preview test cluster (three nodes, NodeMetrics, pods).
static CLUSTER: LazyLock<Snapshot> = LazyLock::new(|| {
    Snapshot::parse(
        include_str!("../../koord-manager/tests/data/preview-snapshot.yaml"),
        "cluster",
    )
    .expect("the preview test snapshot parses")
});

/// The instant the test snapshot is judged at.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_226_200)
}

fn snapshot(text: &str) {
    let Ok(snapshot) = Snapshot::parse(text, "fuzz") else {
        return;
    };
    let Ok(config) = config_from(
        snapshot.config_map(DEFAULT_SLO_CONTROLLER_CONFIG_NAME),
        "fuzz",
    ) else {
        return;
    };
    let report = preview(&snapshot, &config, Some(&config), now());
    let _ = render_text(&report);
}

fn config_key(key: &str, value: &str) {
    let data = BTreeMap::from([(key.to_owned(), value.to_owned())]);
    let mut state = ConfigState::default();
    let _ = state.offer(Some(&data));
    let _ = state.offer(None);
    if let Ok(config) = parse_config(Some(&data)) {
        let report = preview(&CLUSTER, &config, Some(state.current()), now());
        let _ = render_text(&report);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = data.split_first() else {
        return;
    };
    match selector.wrapping_sub(b'0') % 2 {
        0 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                snapshot(text);
            }
        }
        _ => {
            let Some((key, value)) = rest.split_first() else {
                return;
            };
            let key = ALL_CONFIG_KEYS[usize::from(key.wrapping_sub(b'0')) % ALL_CONFIG_KEYS.len()];
            if let Ok(value) = std::str::from_utf8(value) {
                config_key(key, value);
            }
        }
    }
});
