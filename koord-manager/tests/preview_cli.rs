#![allow(clippy::unwrap_used)]
//! `koord-manager preview` on the committed snapshot in `tests/data/`.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koord-manager");
const SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/preview-snapshot.yaml"
);
const AGAINST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/preview-against.yaml"
);
const NOW: &str = "2026-01-01T00:10:00Z";

fn preview(extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["preview", "--snapshot", SNAPSHOT, "--now", NOW])
        .args(extra)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

fn json(extra: &[&str]) -> Value {
    let output = preview(extra);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {report}"))
}

#[test]
fn json_report_follows_the_contract() {
    let report = json(&["--output", "json"]);
    let names: Vec<&str> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node-a", "node-b", "node-c"]);
    assert!(report.get("diff").is_none());

    // node-a: 16 cores, 40% safety margin, system 1 core, web uses 2 cores:
    // 16000 - 6400 - 1000 - 2000 = 6600 milli-cores.
    let a = node(&report, "node-a");
    assert_eq!(a["allocatable"]["kubernetes.io/batch-cpu"], "6600");
    // 64Gi - 35% margin (truncated) - system 4Gi - web 6Gi.
    let margin = (64.0 * (1u64 << 30) as f64 * 0.35) as i64;
    let memory = (64i64 << 30) - margin - (4i64 << 30) - (6i64 << 30);
    assert_eq!(
        a["allocatable"]["kubernetes.io/batch-memory"],
        memory.to_string()
    );
    // mid = min(prodReclaimable, unused): 3 cores and 4Gi.
    assert_eq!(a["allocatable"]["kubernetes.io/mid-cpu"], "3k");
    assert_eq!(a["allocatable"]["kubernetes.io/mid-memory"], "4Gi");
    assert_eq!(a["degraded"], false);
    assert_eq!(a["reason"], "");
    // The first matching node strategy wins (50, not 40 or the cluster's 65).
    assert_eq!(
        a["nodeSLO"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"],
        50
    );
    assert_eq!(a["nodeSLO"]["resourceUsedThresholdWithBE"]["enable"], true);

    // node-b: NodeMetric 70 minutes old at --now, beyond the 15-minute default.
    let b = node(&report, "node-b");
    assert_eq!(b["degraded"], true);
    assert!(
        b["reason"].as_str().unwrap().contains("degradeTimeMinutes"),
        "{b}"
    );
    for resource in [
        "kubernetes.io/batch-cpu",
        "kubernetes.io/batch-memory",
        "kubernetes.io/mid-cpu",
        "kubernetes.io/mid-memory",
    ] {
        assert_eq!(b["allocatable"][resource], "0", "{resource}");
    }
    assert_eq!(
        b["nodeSLO"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"],
        65
    );

    // node-c: no NodeMetric at all.
    let c = node(&report, "node-c");
    assert_eq!(c["degraded"], true);
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("NodeMetric not found")
    );
}

#[test]
fn against_lists_the_per_node_changes() {
    let report = json(&["--output", "json", "--against", AGAINST]);
    let diff = report["diff"].as_array().unwrap();
    let changes = |name: &str| -> Vec<(String, Value, Value)> {
        diff.iter()
            .find(|d| d["name"] == name)
            .map(|d| {
                d["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        (
                            c["path"].as_str().unwrap().to_owned(),
                            c["current"].clone(),
                            c["against"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // cpuReclaimThresholdPercent 60 → 70 shrinks the margin to 4800m:
    // 16000 - 4800 - 1000 - 2000 = 8200. Its own threshold (50) is unchanged.
    assert_eq!(
        changes("node-a"),
        [(
            "allocatable.kubernetes.io/batch-cpu".to_owned(),
            Value::from("6600"),
            Value::from("8200")
        )]
    );
    // Degraded nodes keep zero resources; only the cluster threshold moves.
    let threshold = "nodeSLO.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent";
    for name in ["node-b", "node-c"] {
        assert_eq!(
            changes(name),
            [(threshold.to_owned(), Value::from(65), Value::from(60))],
            "{name}"
        );
    }
}

#[test]
fn text_output_and_bad_input() {
    let output = preview(&[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("NODE"), "{text}");
    assert!(text.contains("node-a") && text.contains("6600"), "{text}");

    let dir = std::env::temp_dir().join(format!("koord-preview-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slo-controller-config}\ndata:\n  resource-threshold-config: '{\"clusterStrategy\":{\"cpuSuppressThresholdPercent\":300}}'\n",
    )
    .unwrap();
    let output = Command::new(BIN)
        .args(["preview", "--snapshot"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("cpuSuppressThresholdPercent"), "{stderr}");

    std::fs::write(&bad, "kind: [unclosed").unwrap();
    let output = Command::new(BIN)
        .args(["preview", "--snapshot"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("bad.yaml"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_beyond_the_size_limit_are_refused_before_reading() {
    let size = std::fs::metadata(SNAPSHOT).unwrap().len();
    let output = preview(&["--max-snapshot-bytes", &(size - 1).to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("preview-snapshot.yaml")
            && stderr.contains(&format!("larger than {} bytes", size - 1)),
        "{stderr}"
    );
    // At the limit it is read.
    let output = preview(&["--max-snapshot-bytes", &size.to_string()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
