#!/usr/bin/env bash
# The main job (README): build every binary, show each starts, show what this
# node's kernel can enforce, and run koordlet's node plane for a few seconds in
# standalone mode (no cluster) so it reports this machine's usage as a
# NodeMetric. The local colocation demo replaces the last step when it lands.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --workspace --bins --locked
for binary in koord-manager koord-scheduler koordlet koord-runtime-proxy; do
    ./target/debug/"$binary" --version
done

echo
echo "== what this node can enforce (koordlet capabilities)"
./target/debug/koordlet capabilities

echo
echo "== koordlet standalone for 8s: NodeMetric of this machine"
work=$(mktemp -d)
koordlet_pid=
cleanup() {
    [ -n "$koordlet_pid" ] && kill "$koordlet_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
echo '{"apiVersion":"v1","kind":"PodList","items":[]}' > "$work/pods.json"
./target/debug/koordlet --standalone --node-name "$(hostname)" --addr 127.0.0.1:0 \
    --pods-file "$work/pods.json" --node-metric-output "$work/nodemetric.json" \
    --node-metric-report-interval 3s --log-level warn &
koordlet_pid=$!
sleep 8
kill -TERM "$koordlet_pid"
wait "$koordlet_pid" || true
koordlet_pid=
python3 - "$work/nodemetric.json" <<'PY'
import json, sys
metric = json.load(open(sys.argv[1]))
status = metric.get("status", {})
usage = status.get("nodeMetric", {}).get("nodeUsage", {}).get("resources", {})
print(f"node {metric['metadata']['name']}: updateTime {status.get('updateTime')}, "
      f"cpu {usage.get('cpu')}, memory {usage.get('memory')}")
PY
