#!/usr/bin/env bash
# The main job (README): build every binary and show each starts, show what
# this node's kernel can enforce, then run the local colocation demo
# (hack/colocation-demo.sh): koordlet in standalone mode suppressing a
# best-effort pod's CPU while a latency-sensitive pod's load rises, on real
# cgroups of this machine, with no Kubernetes. Extra arguments go to the demo
# (e.g. --policy cpuset).
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
hack/colocation-demo.sh "$@"
