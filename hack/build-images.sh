#!/usr/bin/env bash
# Builds one image per binary with docker (BuildKit). Not runnable on machines
# without a Docker engine.
#   REGISTRY=ghcr.io/koordinator-rs TAG=0.1.0 hack/build-images.sh [component...]
set -euo pipefail
cd "$(dirname "$0")/.."

registry="${REGISTRY:-ghcr.io/koordinator-rs}"
tag="${TAG:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
components=("$@")
if [[ ${#components[@]} -eq 0 ]]; then
    components=(koord-manager koord-scheduler koordlet koord-runtime-proxy koord-descheduler)
fi

command -v docker >/dev/null || { echo "hack/build-images.sh: docker is required" >&2; exit 1; }
for component in "${components[@]}"; do
    dockerfile="docker/$component.Dockerfile"
    [[ -f "$dockerfile" ]] || { echo "no $dockerfile" >&2; exit 1; }
    echo "== $registry/$component:$tag"
    DOCKER_BUILDKIT=1 docker build -f "$dockerfile" -t "$registry/$component:$tag" .
done
