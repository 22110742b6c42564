#!/usr/bin/env bash
# Checks that upstream Koordinator's example manifests (config/samples,
# examples/, e2e testing manifests, YAML blocks in docs/) deserialize into our
# types. Upstream files are extracted to a temporary directory, never committed.
#
# Usage: hack/check-upstream-samples.sh <upstream git dir or checkout> [rev]
set -euo pipefail
cd "$(dirname "$0")/.."

upstream=${1:?usage: $0 <upstream git dir or checkout> [rev]}
rev=${2:-HEAD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$upstream" archive "$rev" config/samples examples docs test/e2e/testing-manifests \
    | tar -x -C "$work"
echo "upstream $(git -C "$upstream" rev-parse --short "$rev") extracted to $work"
KOORD_UPSTREAM_DIR=$work cargo test -q -p apis --test upstream_samples -- --nocapture
