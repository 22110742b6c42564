#!/usr/bin/env bash
# Checks that a values file written for upstream Koordinator's chart installs through ours:
# upstream's own values.yaml of each given chart version (from a koordinator-sh/charts git dir)
# is passed to `helm template` of charts/koordinator, and the rendered manifests go through the
# same checks as our own renders (e2e/tests/chart_render.rs: Kubernetes types, component flags,
# kube-scheduler's configuration). Upstream files are extracted to a temporary directory, never
# committed.
#
# Usage: hack/check-upstream-chart-values.sh <koordinator-sh/charts git dir> [version ...]
#        (default versions: the three newest under versions/)
set -euo pipefail
cd "$(dirname "$0")/.."

charts=${1:?usage: $0 <koordinator-sh/charts git dir> [version ...]}
shift
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  mapfile -t versions < <(git -C "$charts" ls-tree --name-only HEAD versions/ | sed 's|versions/||' | sort -V | tail -3)
fi
helm="$(hack/helm.sh)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/render"

for version in "${versions[@]}"; do
  values="$work/upstream-$version-values.yaml"
  git -C "$charts" show "HEAD:versions/$version/values.yaml" > "$values"
  echo "== upstream chart $version values (koordinator-sh/charts $(git -C "$charts" rev-parse --short HEAD))"
  # Upstream's image coordinates would point our chart at upstream's images: keep ours, as a
  # user switching charts would; every other value is upstream's.
  "$helm" template koord charts/koordinator -f "$values" \
    --set koordlet.image.repository=koordinator-rs/koordlet \
    --set manager.image.repository=koordinator-rs/koord-manager \
    --set scheduler.image.repository=koordinator-rs/koord-scheduler \
    --set descheduler.image.repository=koordinator-rs/koord-descheduler \
    > "$work/render/upstream-$version.yaml"
  echo "rendered $(grep -c '^kind:' "$work/render/upstream-$version.yaml") objects"
done

KOORD_CHART_RENDER_DIR="$work/render" cargo test -q -p e2e --test chart_render -- --nocapture
