#!/usr/bin/env bash
# The main job (README): build every binary and show that each one starts.
# Until the koordlet colocation demo lands this prints each binary's version
# and lists the CRDs generated from the Rust types.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --workspace --bins --locked
for binary in koord-manager koord-scheduler koordlet koord-runtime-proxy; do
    ./target/debug/"$binary" --version
done
echo
echo "CRDs generated from the Rust types:"
ls charts/koordinator/crds
