#!/usr/bin/env bash
# Cluster end-to-end run: kind cluster → images built and loaded → helm
# install → `cargo test -p e2e` against it → logs on failure → cluster deleted.
# Needs docker, kind, kubectl and cargo (the CI workflow .github/workflows/e2e.yml
# runs it on a hosted runner). Not runnable on machines without Docker.
set -euo pipefail
cd "$(dirname "$0")/.."

cluster="${KIND_CLUSTER_NAME:-koord-e2e}"
namespace="koordinator-system"
registry="koord.local"
tag="e2e"
artifacts="${E2E_ARTIFACTS:-$PWD/target/e2e-artifacts}"
kubeconfig="$(mktemp)"

for tool in docker kind kubectl cargo; do
    command -v "$tool" >/dev/null || { echo "hack/kind-e2e.sh: $tool is required" >&2; exit 1; }
done
helm="$(hack/helm.sh)"

collect_logs() {
    mkdir -p "$artifacts"
    kubectl --kubeconfig "$kubeconfig" get all,nodeslos,nodemetrics -A -o wide > "$artifacts/objects.txt" 2>&1 || true
    kubectl --kubeconfig "$kubeconfig" get events -A --sort-by=.lastTimestamp > "$artifacts/events.txt" 2>&1 || true
    for pod in $(kubectl --kubeconfig "$kubeconfig" -n "$namespace" get pods -o name 2>/dev/null); do
        kubectl --kubeconfig "$kubeconfig" -n "$namespace" logs --all-containers "$pod" \
            > "$artifacts/$(basename "$pod").log" 2>&1 || true
    done
    kind export logs "$artifacts/kind" --name "$cluster" >/dev/null 2>&1 || true
    echo "logs collected in $artifacts"
}

cleanup() {
    local status=$?
    if [[ $status -ne 0 ]]; then collect_logs; fi
    if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; fi
    rm -f "$kubeconfig"
    exit $status
}
trap cleanup EXIT

# Two workers so that NodeSLO/NodeMetric per node, cpusets and gangs are
# exercised on more than one node; containerd in kind ships with NRI support
# that koordlet uses when the socket exists.
mkdir -p "$(dirname "$artifacts")"
cat > "$(dirname "$artifacts")/kind-config.yaml" <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
- role: worker
containerdConfigPatches:
- |-
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
KIND
kind create cluster --name "$cluster" --kubeconfig "$kubeconfig" \
    --config "$(dirname "$artifacts")/kind-config.yaml" --wait 120s

REGISTRY="$registry" TAG="$tag" hack/build-images.sh
for component in koord-manager koord-scheduler koordlet koord-runtime-proxy; do
    kind load docker-image --name "$cluster" "$registry/$component:$tag"
done

"$helm" install koordinator charts/koordinator --kubeconfig "$kubeconfig" \
    --set imageRepositoryHost="$registry" \
    --set koordlet.image.repository=koordlet --set koordlet.image.tag="$tag" \
    --set manager.image.repository=koord-manager --set manager.image.tag="$tag" \
    --set scheduler.image.repository=koord-scheduler --set scheduler.image.tag="$tag" \
    --set runtimeProxy.image.repository=koord-runtime-proxy --set runtimeProxy.image.tag="$tag" \
    --set manager.replicas=1 --set scheduler.replicas=1 \
    --wait --timeout 5m

KUBECONFIG="$kubeconfig" KOORD_E2E_REQUIRE_CLUSTER=1 KOORD_E2E_BUSYBOX_IMAGE=busybox:1.36 \
    cargo test -p e2e --locked -- --test-threads=1
