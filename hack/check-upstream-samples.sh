#!/usr/bin/env bash
# Checks that upstream Koordinator's example manifests deserialize into our
# types: config/samples, examples/, e2e testing manifests and the YAML blocks
# of docs/ in koordinator-sh/koordinator, and the user docs of the website
# (koordinator-sh/koordinator.sh, pass `docs`). Upstream files are extracted
# to a temporary directory, never committed.
#
# Usage: hack/check-upstream-samples.sh <upstream git dir> [path ...]
set -euo pipefail
cd "$(dirname "$0")/.."

upstream=${1:?usage: $0 <upstream git dir> [path ...]}
shift
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(config/samples examples docs test/e2e/testing-manifests)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$upstream" archive HEAD "${paths[@]}" | tar -x -C "$work"
echo "upstream $(git -C "$upstream" rev-parse --short HEAD) (${paths[*]}) extracted to $work"
KOORD_UPSTREAM_DIR=$work cargo test -q -p apis --test upstream_samples -- --nocapture
