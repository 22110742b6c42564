#!/usr/bin/env bash
# Images without Docker: builds the five release binaries, packs each (and a kube-scheduler binary)
# into a one-layer OCI tarball under the exact names the chart uses by default, and imports them into
# a containerd, so `helm install koordinator charts/koordinator` needs no registry.
#
#   hack/local-cluster/images.sh --kube-scheduler PATH [--address SOCK --ctr PATH] [--skip-build]
#                                [--only NAME[,NAME...]]... [--profile release|dev] [--check]
#
# --profile picks the cargo profile of the binaries: release (the default, what users get) or dev,
# which reuses what `cargo test --workspace` already built (CI: the release build with LTO takes
# over 20 minutes cold on 2 cores; the cluster suite checks behaviour, not speed).
#
# --check runs every imported image once through CRI as the chart would start it (see images_check.py);
# it needs the node-runtime kit's Python CRI stubs in $NR_ROOT/py (default: two levels above SOCK).
#
# NAME is one of koordlet koord-manager koord-scheduler koord-runtime-proxy koord-descheduler
# kube-scheduler.
# Without --address the tarballs are only written, to ${KOORD_LOCAL_CLUSTER_DIR:-/var/lib/koord-local}/images.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
all=(koordlet koord-manager koord-scheduler koord-runtime-proxy koord-descheduler kube-scheduler)
out_dir="${KOORD_LOCAL_CLUSTER_DIR:-/var/lib/koord-local}/images"

die() { echo "images.sh: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-0}"; }
now() { echo "${EPOCHREALTIME/./}"; }  # microseconds
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }

address="" ctr="ctr" kube_scheduler="" skip_build=false check=false only=() profile=release
while [[ $# -gt 0 ]]; do
    case "$1" in
        # Paths are made absolute: the build below runs from the repository root.
        --address) address="$(realpath -m "${2:?--address needs a socket}")"; shift 2 ;;
        --ctr) ctr="${2:?--ctr needs a path}"; [[ $ctr != */* ]] || ctr="$(realpath -m "$ctr")"; shift 2 ;;
        --kube-scheduler) kube_scheduler="$(realpath -m "${2:?--kube-scheduler needs a path}")"; shift 2 ;;
        --skip-build) skip_build=true; shift ;;
        --profile) profile="${2:?--profile needs release or dev}"; shift 2
                   [[ $profile == release || $profile == dev ]] || die "--profile: release or dev, not $profile" ;;
        --check) check=true; shift ;;
        --only) IFS=, read -ra names <<<"${2:?--only needs names}"; only+=("${names[@]}"); shift 2 ;;
        -h|--help) usage ;;
        *) echo "images.sh: unknown argument $1" >&2; usage 2 ;;
    esac
done
if $check && [[ -z "$address" ]]; then die "--check needs --address"; fi
selected=("${all[@]}")
if [[ ${#only[@]} -gt 0 ]]; then
    for n in "${only[@]}"; do [[ " ${all[*]} " == *" $n "* ]] || die "--only: unknown image $n (one of: ${all[*]})"; done
    selected=("${only[@]}")
fi
wants() { [[ " ${selected[*]} " == *" $1 "* ]]; }
t_start=$(now)

# PyYAML reads values.yaml; pyenv's python3 may have it while the system one does not.
python=""
for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import yaml' 2>/dev/null; then python="$py"; break; fi
done
if [[ -z "$python" ]]; then
    echo "== installing python3-yaml" >&2
    apt-get install -y -q python3-yaml >&2 || { apt-get update -q >&2 && apt-get install -y -q python3-yaml >&2; }
    python=/usr/bin/python3
fi

# Image names come from the chart defaults so they cannot drift from what helm renders. A name
# without a registry is normalized the way the CRI does (docker.io/[library/]), since kubelet asks
# the runtime for that normalized name.
declare -A image
while read -r key ref; do image[$key]="$ref"; done < <("$python" - "$repo/charts/koordinator/values.yaml" <<'EOF'
import sys, yaml
v = yaml.safe_load(open(sys.argv[1]))
host = v.get("imageRepositoryHost") or ""
def chart_ref(img):  # the chart's koordinator.image helper
    ref = "%s:%s" % (img["repository"], img["tag"])
    return "%s/%s" % (host, ref) if host else ref
def normalize(ref):
    first, _, rest = ref.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        ref = "docker.io/" + (ref if rest else "library/" + ref)
    return ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"
for key, ref in [("koordlet", chart_ref(v["koordlet"]["image"])),
                 ("koord-manager", chart_ref(v["manager"]["image"])),
                 ("koord-scheduler", chart_ref(v["scheduler"]["image"])),
                 ("koord-runtime-proxy", chart_ref(v["runtimeProxy"]["image"])),
                 ("koord-descheduler", chart_ref(v["descheduler"]["image"])),
                 ("kube-scheduler", v["scheduler"]["kubeScheduler"]["image"])]:
    print(key, normalize(ref))
EOF
)
for n in "${selected[@]}"; do [[ -n "${image[$n]:-}" ]] || die "no image name for $n in values.yaml"; done

# Each Rust package has exactly one binary, named like the package (no src/bin, no [[bin]]).
rust=()
for n in koordlet koord-manager koord-scheduler koord-runtime-proxy koord-descheduler; do
    if wants "$n"; then rust+=("$n"); fi
done
build_secs="skipped"
cd "$repo"
if [[ ${#rust[@]} -gt 0 ]] && ! $skip_build; then
    t=$(now)
    args=()
    for n in "${rust[@]}"; do args+=(-p "$n" --bin "$n"); done
    echo "== cargo build --profile $profile --locked ${args[*]}"
    cargo build --profile "$profile" --locked "${args[@]}"
    build_secs="$(since "$t") s"
fi
declare -A src dest user
if [[ ${#rust[@]} -gt 0 ]]; then
    # target_directory already follows CARGO_TARGET_DIR and .cargo/config.
    target_dir="$(cargo metadata --format-version 1 --no-deps |
        "$python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
fi
for n in "${rust[@]}"; do
    # Cargo writes the dev profile's binaries under debug/.
    src[$n]="$target_dir/$([[ $profile == dev ]] && echo debug || echo release)/$n"
    [[ -x "${src[$n]}" ]] || die "${src[$n]} is missing; run without --skip-build"
    dest[$n]="/$n"
done
# Same users as docker/*.Dockerfile: koordlet and the runtime proxy need root on the host, the
# manager, the extender and the descheduler run as distroless nonroot.
user[koord-manager]="65532:65532"
user[koord-scheduler]="65532:65532"
user[koord-descheduler]="65532:65532"
if wants kube-scheduler; then
    [[ -n "$kube_scheduler" ]] || die "--kube-scheduler PATH is required (or leave it out with --only)"
    [[ -x "$kube_scheduler" ]] || die "$kube_scheduler is not an executable"
    src[kube-scheduler]="$kube_scheduler"
    # The chart runs `kube-scheduler` through PATH, as in the upstream image.
    dest[kube-scheduler]="/usr/local/bin/kube-scheduler"
    want_tag="${image[kube-scheduler]##*:}"
    have="$( ("$kube_scheduler" --version 2>/dev/null || true) | head -n 1)"
    [[ "$have" == *" $want_tag" ]] ||
        echo "images.sh: warning: $kube_scheduler --version says '${have:-nothing}', the chart expects $want_tag" >&2
fi

mkdir -p "$out_dir"
t=$(now)
declare -A info
for n in "${selected[@]}"; do
    args=("$out_dir/$n.tar" "${image[$n]}" --exe "${src[$n]}:${dest[$n]}")
    if [[ -n "${user[$n]:-}" ]]; then args+=(--user "${user[$n]}"); fi
    info[$n]="$("$python" "$here/ociimage.py" "${args[@]}")"
done
pack_secs="$(since "$t")"

import_secs="skipped"
if [[ -n "$address" ]]; then
    t=$(now)
    for n in "${selected[@]}"; do
        "$ctr" --address "$address" -n k8s.io images import "$out_dir/$n.tar" >/dev/null
    done
    listed="$("$ctr" --address "$address" -n k8s.io images ls)"
    for n in "${selected[@]}"; do
        IFS=$'\t' read -r name _ manifest _ <<<"${info[$n]}"
        # columns: REF TYPE DIGEST ...; the digest must be the manifest we just wrote.
        awk -v r="$name" -v d="$manifest" '$1 == r && $3 == d {found=1} END {exit !found}' <<<"$listed" ||
            die "$name ($manifest) is not listed by ctr after the import"
    done
    import_secs="$(since "$t") s"
fi

check_secs="skipped"
if $check; then
    t=$(now)
    nr_root="${NR_ROOT:-$(dirname "$(dirname "$address")")}"
    [[ -f "$nr_root/py/cri_pb2.py" ]] || die "--check: no CRI stubs in $nr_root/py (set NR_ROOT to the kit's root)"
    # Each image runs its --help (kube-scheduler: --version, by PATH as the chart does) and must print
    # exactly what the host binary prints; koordlet also runs its capability probe inside the container.
    spec_args=()
    for n in "${selected[@]}"; do
        if [[ $n == kube-scheduler ]]; then cmd="kube-scheduler --version"; else cmd="/$n --help"; fi
        expect="$("${src[$n]}" "${cmd#* }" 2>&1)" || true
        uid=65532
        if [[ $n == koordlet || $n == koord-runtime-proxy ]]; then uid=""; fi
        spec_args+=("$n" "${image[$n]}" "$uid" "$cmd" "$expect")
        if [[ $n == koordlet ]]; then spec_args+=("$n" "${image[$n]}" "" "/koordlet capabilities" "cgroup.version"); fi
    done
    spec="$(mktemp)"
    "$python" -c 'import json, sys; a = sys.argv[1:]; print(json.dumps([
        {"name": a[i], "image": a[i + 1], "user": int(a[i + 2]) if a[i + 2] else None,
         "command": a[i + 3].split(), "expect": a[i + 4]} for i in range(0, len(a), 5)]))' "${spec_args[@]}" >"$spec"
    rc=0
    NR_ROOT="$nr_root" NR_CRI_SOCK="$address" python3 "$here/images_check.py" "$spec" || rc=$?
    rm -f "$spec"
    [[ $rc -eq 0 ]] || die "--check failed"
    check_secs="$(since "$t") s"
fi

for n in "${selected[@]}"; do
    IFS=$'\t' read -r name bytes manifest config files <<<"${info[$n]}"
    printf '%-58s %6.1f MiB  %s  (%s files, config %s)\n' "$name" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" \
        "$manifest" "$files" "${config:7:12}"
done
echo "tarballs in $out_dir; build $build_secs, packaging $pack_secs s, import $import_secs${address:+ into $address}, check $check_secs, total $(since "$t_start") s"
