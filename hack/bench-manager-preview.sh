#!/usr/bin/env bash
# Benchmarks `koord-manager preview` (the NodeSLO + batch/mid pass the
# controllers run) on a generated snapshot: 5,000 nodes, 5,000 NodeMetrics
# with per-pod usage, 50,000 pods and an slo-controller-config ConfigMap.
# Reports CPU time (user + system) and peak RSS of the preview process.
# Budget (ARCHITECTURE.md): under 1 s CPU and 200 MiB.
#
# Usage: hack/bench-manager-preview.sh [--nodes N] [--pods-per-node M] [--runs R]
#            [--format yaml|kubectl|json] [--keep FILE]
#
# Formats: `yaml` is one document per object with every scalar quoted;
# `kubectl` is what `kubectl get -o yaml` prints (one `List` document, keys
# sorted, plain scalars where YAML allows them); `json` is a stream of
# JSON objects.
set -euo pipefail

nodes=5000
pods_per_node=10
runs=3
format=yaml
keep=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nodes) nodes="$2"; shift 2 ;;
        --pods-per-node) pods_per_node="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --format) format="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/bench-manager-preview.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "building koord-manager (release)..." >&2
(cd "$repo" && cargo build --quiet --release -p koord-manager)
bin="$repo/target/release/koord-manager"

snapshot="$work/snapshot.$format"
python3 - "$snapshot" "$nodes" "$pods_per_node" "$format" <<'PY'
import json, sys
path, nodes, per_node, fmt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
now = "2026-01-01T00:10:00Z"
docs = [{
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
    "data": {
        "colocation-config": json.dumps({"enable": True, "midUnallocatedPercent": 10,
            "nodeConfigs": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                             "cpuReclaimThresholdPercent": 70}]}),
        "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True},
            "nodeStrategies": [{"name": "online", "nodeSelector": {"matchLabels": {"pool": "online"}},
                                "cpuSuppressThresholdPercent": 50}]}),
        "resource-qos-config": json.dumps({"clusterStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}),
        "cpu-burst-config": json.dumps({"clusterStrategy": {"policy": "auto"}}),
    },
}]
pools = ["online", "offline", "gpu", "batch"]
for n in range(nodes):
    name = f"node-{n:05d}"
    docs.append({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{n}", "labels": {"pool": pools[n % 4], "kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                   "allocatable": {"cpu": "62", "memory": "250Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
    pods_metric = []
    for p in range(per_node):
        batch = p % 3 == 2
        pod_name = f"pod-{n:05d}-{p:02d}"
        pods_metric.append({"namespace": "default", "name": pod_name,
            "priority": "koord-batch" if batch else "koord-prod",
            "podUsage": {"resources": {"cpu": f"{500 + p * 100}m", "memory": f"{1 + p}Gi"}}})
        pod = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": pod_name,
                         "labels": {"koordinator.sh/qosClass": "BE" if batch else "LS", "app": f"app-{p}"}},
            "spec": {"nodeName": name, "priority": 5500 if batch else 9500,
                     "containers": [{"name": "main", "image": "registry.example/app:1",
                         "resources": ({"requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}}
                                       if batch else {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}})}]},
            "status": {"phase": "Running"}}
        docs.append(pod)
    # Every 50th node reports stale metrics, every 100th none at all.
    if n % 100 == 99:
        continue
    updated = "2025-12-31T22:00:00Z" if n % 50 == 7 else "2026-01-01T00:09:30Z"
    docs.append({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name},
        "status": {"updateTime": updated,
                   "nodeMetric": {"nodeUsage": {"resources": {"cpu": "20", "memory": "80Gi"}},
                                  "systemUsage": {"resources": {"cpu": "2", "memory": "8Gi"}}},
                   "podsMetric": pods_metric,
                   "prodReclaimableMetric": {"resource": {"resources": {"cpu": "8", "memory": "32Gi"}}}}})
with open(path, "w") as out:
    if fmt == "json":
        # A stream of JSON objects, one per line (as `kubectl get -o json` per kind would give).
        for doc in docs:
            out.write(json.dumps(doc)); out.write("\n")
    elif fmt == "kubectl":
        import re
        # Strings print plain unless YAML would read them as something else
        # (numbers, booleans, timestamps), like kubectl's YAML printer.
        plain_safe = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./:-]*\Z")
        timestamp = re.compile(r"\d{4}-\d\d-\d\d")
        reserved = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
        def looks_numeric(text):
            try:
                float(text)
                return True
            except ValueError:
                return text[:2].lower() in ("0x", "0o", "0b")
        def scalar(value):
            if (isinstance(value, str) and plain_safe.match(value) and not value.endswith(":")
                    and value.lower() not in reserved and not looks_numeric(value)
                    and not timestamp.match(value)):
                return value
            return json.dumps(value)
        def block(value, indent, out):
            pad = "  " * indent
            if isinstance(value, dict):
                for key in sorted(value):
                    item = value[key]
                    if isinstance(item, dict) and item:
                        out.append(f"{pad}{key}:\n"); block(item, indent + 1, out)
                    elif isinstance(item, list) and item:
                        out.append(f"{pad}{key}:\n"); block(item, indent, out)
                    elif isinstance(item, (dict, list)):
                        out.append(f"{pad}{key}: {'{}' if isinstance(item, dict) else '[]'}\n")
                    else:
                        out.append(f"{pad}{key}: {scalar(item)}\n")
            else:
                for item in value:
                    if isinstance(item, dict) and item:
                        inner = []
                        block(item, indent + 1, inner)
                        first = inner[0]
                        inner[0] = pad + "- " + first[len(pad) + 2:]
                        out.extend(inner)
                    else:
                        out.append(f"{pad}- {scalar(item)}\n")
        lines = []
        block({"apiVersion": "v1", "items": docs, "kind": "List", "metadata": {"resourceVersion": ""}}, 0, lines)
        out.writelines(lines)
    else:
        def emit(value, indent):
            pad = "  " * indent
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, (dict, list)) and item:
                        out.write(f"{pad}{key}:\n"); emit(item, indent + 1)
                    else:
                        out.write(f"{pad}{key}: {json.dumps(item)}\n")
            else:
                for item in value:
                    if isinstance(item, dict):
                        first = True
                        for key, sub in item.items():
                            lead = pad + ("- " if first else "  ")
                            first = False
                            if isinstance(sub, (dict, list)) and sub:
                                out.write(f"{lead}{key}:\n"); emit(sub, indent + 2)
                            else:
                                out.write(f"{lead}{key}: {json.dumps(sub)}\n")
                    else:
                        out.write(f"{pad}- {json.dumps(item)}\n")
        for doc in docs:
            out.write("---\n"); emit(doc, 0)
PY
size=$(du -m "$snapshot" | cut -f1)
echo "snapshot: $nodes nodes, $((nodes * pods_per_node)) pods, ${size} MiB of $format" >&2

best_cpu=""
for run in $(seq 1 "$runs"); do
    /usr/bin/time -f "%U %S %M %e" -o "$work/time" \
        "$bin" preview --snapshot "$snapshot" --now 2026-01-01T00:10:00Z --output json --timings > "$work/out.json"
    read -r user sys rss_kib wall < "$work/time"
    cpu=$(python3 -c "print(f'{$user + $sys:.2f}')")
    rss_mib=$((rss_kib / 1024))
    echo "run $run: cpu ${cpu}s (user ${user}s, sys ${sys}s), wall ${wall}s, peak RSS ${rss_mib} MiB"
    if [[ -z "$best_cpu" ]] || python3 -c "import sys; sys.exit(0 if $cpu < $best_cpu else 1)"; then
        best_cpu="$cpu"; best_rss="$rss_mib"
    fi
done
if [[ -n "$keep" ]]; then
    cp "$snapshot" "$keep"
fi
python3 - "$work/out.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
nodes = report["nodes"]
degraded = sum(1 for n in nodes if n["degraded"])
print(f"report: {len(nodes)} nodes, {degraded} degraded; e.g. {nodes[0]['name']}: {nodes[0]['allocatable']}")
PY
echo "best: cpu ${best_cpu}s, peak RSS ${best_rss} MiB (budget: < 1 s CPU, < 200 MiB)"
