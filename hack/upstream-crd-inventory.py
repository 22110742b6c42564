#!/usr/bin/env python3
"""Extract a facts inventory (names, scope, columns, field paths and types)
from upstream Koordinator's CRD YAML, for apis/tests/crd_compat.rs.

Usage: hack/upstream-crd-inventory.py <upstream git dir or checkout> <out dir>

The inventory holds facts only (field paths and JSON types), one line each,
so the compatibility test can run offline in CI. Re-run it when moving to a
newer upstream; the commit it was taken from is recorded in every file.
"""
import os
import subprocess
import sys

import yaml

# The kinds this project implements (see apis/README.md for the others).
CRD_FILES = [
    "slo.koordinator.sh_nodeslos.yaml",
    "slo.koordinator.sh_nodemetrics.yaml",
    "scheduling.koordinator.sh_reservations.yaml",
    "scheduling.koordinator.sh_devices.yaml",
    "scheduling.koordinator.sh_podmigrationjobs.yaml",
    "scheduling.sigs.k8s.io_elasticquotas.yaml",
    "scheduling.sigs.k8s.io_podgroups.yaml",
    "quota.koordinator.sh_elasticquotaprofiles.yaml",
    "config.koordinator.sh_clustercolocationprofiles.yaml",
    "topology.node.k8s.io_noderesourcetopologies.yaml",
]


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True,
                          capture_output=True, text=True).stdout


def read_upstream(repo, rel):
    path = os.path.join(repo, rel)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return git(repo, "show", f"HEAD:{rel}")


def type_of(schema):
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = schema.get("type", "any")
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        kind += "(preserve-unknown)"
    return kind


def walk(schema, path, out):
    out.append((path, type_of(schema)))
    for name, child in sorted((schema.get("properties") or {}).items()):
        walk(child, f"{path}.{name}", out)
    if isinstance(schema.get("items"), dict):
        walk(schema["items"], f"{path}[]", out)
    if isinstance(schema.get("additionalProperties"), dict):
        walk(schema["additionalProperties"], f"{path}{{}}", out)


def inventory(doc, source):
    spec = doc["spec"]
    names = spec["names"]
    lines = [
        f"# facts from upstream koordinator {source}, by hack/upstream-crd-inventory.py",
        f"name {doc['metadata']['name']}",
        f"group {spec['group']}",
        f"kind {names['kind']}",
        f"plural {names['plural']}",
        f"scope {spec['scope']}",
        f"shortNames {','.join(sorted(names.get('shortNames') or []))}",
    ]
    for version in spec["versions"]:
        v = version["name"]
        status = "status" in (version.get("subresources") or {})
        lines.append(f"version {v} served={str(version.get('served')).lower()} "
                     f"storage={str(version.get('storage')).lower()} status={str(status).lower()}")
        for col in version.get("additionalPrinterColumns") or []:
            lines.append(f"column {v} {col['name']} {col['type']} {col['jsonPath']}")
        paths = []
        walk(version["schema"]["openAPIV3Schema"], "", paths)
        for path, kind in paths:
            lines.append(f"path {v} {path or '.'} {kind}")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    repo, out_dir = sys.argv[1], sys.argv[2]
    commit = git(repo, "rev-parse", "--short", "HEAD").strip()
    os.makedirs(out_dir, exist_ok=True)
    for name in CRD_FILES:
        rel = f"config/crd/bases/{name}"
        doc = yaml.safe_load(read_upstream(repo, rel))
        target = os.path.join(out_dir, name.replace(".yaml", ".txt"))
        with open(target, "w", encoding="utf-8") as f:
            f.write(inventory(doc, f"{commit} {rel}"))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
