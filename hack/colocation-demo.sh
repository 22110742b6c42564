#!/usr/bin/env bash
# Local colocation demo: koordlet's cpusuppress holding a best-effort pod back
# while a latency-sensitive pod's load rises, on this machine, without
# Kubernetes.
#
# What it does (needs root and cgroup v1 cpu/cpuacct/cpuset/memory hierarchies
# under /sys/fs/cgroup, as on this kind of machine):
#   1. builds koordlet (release) unless --no-build;
#   2. lays out kubelet-style cgroups (cgroupfs driver): one LS pod under
#      kubepods/burstable, one BE pod under kubepods/besteffort;
#   3. starts CPU burners: the BE pod runs one per CPU (it wants the machine);
#      the LS pod runs 0, then 1, then 2 ... burners ("LS burn N"), then none;
#   4. runs koordlet --standalone with a pods file and a NodeSLO file that
#      enables cpusuppress (resourceUsedThresholdWithBE, threshold 65%);
#   5. prints a table over time (first row: before koordlet starts): LS
#      load, BE CPU share, CPU used outside the pods, the BE cgroup's
#      cfs quota and cpuset as koordlet wrote them, and the CPU left for LS;
#   6. removes every cgroup and process it made (also on Ctrl-C or failure).
#
# Usage: hack/colocation-demo.sh [--policy cfsQuota|cpuset] [--phase-seconds N]
#                                [--no-build] [--koordlet PATH] [--log FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

policy=cfsQuota
phase_seconds=12
build=1
koordlet_bin=./target/release/koordlet
threshold=65
log_copy=
log_level=warn
while [ $# -gt 0 ]; do
    case "$1" in
        --policy) policy=$2; shift 2 ;;
        --phase-seconds) phase_seconds=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --koordlet) koordlet_bin=$2; build=0; shift 2 ;;
        --log) log_copy=$2; log_level=info; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$policy" in cfsQuota|cpuset) ;; *) echo "--policy must be cfsQuota or cpuset" >&2; exit 2 ;; esac

cgroot=/sys/fs/cgroup
controllers="cpu cpuacct cpuset memory"
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: the colocation demo needs root (it creates cgroups)"; exit 0
fi
for c in $controllers; do
    if [ ! -f "$cgroot/$c/tasks" ]; then
        echo "SKIP: no cgroup v1 $c hierarchy at $cgroot/$c"; exit 0
    fi
done

if [ "$build" = 1 ]; then
    echo "== building koordlet (release)"
    cargo build --release --locked -p koordlet --bin koordlet
fi
[ -x "$koordlet_bin" ] || { echo "no koordlet binary at $koordlet_bin" >&2; exit 1; }

ncpu=$(nproc)
work=$(mktemp -d /tmp/koord-colocation-demo.XXXXXX)
run_id=$$
ls_uid="demo-ls-$run_id"
be_uid="demo-be-$run_id"
ls_cid=$(printf 'a%063d' "$run_id")
be_cid=$(printf 'b%063d' "$run_id")
ls_pod=kubepods/burstable/pod$ls_uid
be_pod=kubepods/besteffort/pod$be_uid
be_tier=kubepods/besteffort
created=()      # relative dirs we created, parents first
burners=()      # PIDs of burner processes
ls_burners=()
koordlet_pid=

cleanup() {
    set +e
    [ -n "$koordlet_pid" ] && kill "$koordlet_pid" 2>/dev/null && wait "$koordlet_pid" 2>/dev/null
    for pid in "${burners[@]}" "${ls_burners[@]}"; do kill -9 "$pid" 2>/dev/null; done
    for pid in "${burners[@]}" "${ls_burners[@]}"; do wait "$pid" 2>/dev/null; done
    local i dir c
    for ((i=${#created[@]}-1; i>=0; i--)); do
        dir=${created[$i]}
        for c in $controllers; do
            [ -d "$cgroot/$c/$dir" ] || continue
            for _ in $(seq 50); do
                rmdir "$cgroot/$c/$dir" 2>/dev/null && break
                sleep 0.1
            done
            [ -d "$cgroot/$c/$dir" ] && echo "warning: could not remove $cgroot/$c/$dir" >&2
        done
    done
    [ -n "$log_copy" ] && cp "$work/koordlet.log" "$log_copy"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Creates a cgroup in every controller (remembering it when it is new); a new
# cpuset cgroup inherits its parent's CPUs and memory nodes.
make_cgroup() {
    local dir=$1 c new=0
    for c in $controllers; do
        if [ ! -d "$cgroot/$c/$dir" ]; then
            mkdir "$cgroot/$c/$dir"
            new=1
            if [ "$c" = cpuset ]; then
                cat "$cgroot/cpuset/$(dirname "$dir")/cpuset.cpus" > "$cgroot/cpuset/$dir/cpuset.cpus"
                cat "$cgroot/cpuset/$(dirname "$dir")/cpuset.mems" > "$cgroot/cpuset/$dir/cpuset.mems"
            fi
        fi
    done
    [ "$new" = 1 ] && created+=("$dir")
    return 0
}

for dir in kubepods kubepods/burstable kubepods/besteffort "$ls_pod" "$ls_pod/$ls_cid" "$be_pod" "$be_pod/$be_cid"; do
    make_cgroup "$dir"
done

burn_in() {
    local dir=$1 c
    sh -c 'while :; do :; done' >/dev/null 2>&1 &
    local pid=$!
    for c in $controllers; do echo "$pid" > "$cgroot/$c/$dir/cgroup.procs"; done
    echo "$pid"
}

cat > "$work/pods.json" <<EOF
{"apiVersion":"v1","kind":"PodList","items":[
 {"metadata":{"name":"web","namespace":"demo","uid":"$ls_uid","labels":{"koordinator.sh/qosClass":"LS"}},
  "spec":{"containers":[{"name":"web","resources":{"requests":{"cpu":"1"}}}]},
  "status":{"phase":"Running","qosClass":"Burstable",
            "containerStatuses":[{"name":"web","containerID":"containerd://$ls_cid","state":{"running":{}}}]}},
 {"metadata":{"name":"batch","namespace":"demo","uid":"$be_uid","labels":{"koordinator.sh/qosClass":"BE"}},
  "spec":{"containers":[{"name":"batch"}]},
  "status":{"phase":"Running","qosClass":"BestEffort",
            "containerStatuses":[{"name":"batch","containerID":"containerd://$be_cid","state":{"running":{}}}]}}
]}
EOF
cat > "$work/nodeslo.yaml" <<EOF
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata:
  name: colocation-demo
spec:
  resourceUsedThresholdWithBE:
    enable: true
    cpuSuppressThresholdPercent: $threshold
    cpuSuppressPolicy: $policy
EOF


# The BE pod wants every CPU.
for _ in $(seq "$ncpu"); do burners+=("$(burn_in "$be_pod/$be_cid")"); done

cpuacct() { cat "$cgroot/cpuacct/$1/cpuacct.usage"; }
now_ns() { date +%s%N; }
start_ns=$(now_ns)

echo
echo "== colocation demo: $ncpu CPUs, cpusuppress policy $policy, threshold ${threshold}%"
echo "   LS pod demo/web ($ls_pod), BE pod demo/batch ($be_pod, $ncpu burners)"
echo "   BE budget = ${ncpu} CPUs x ${threshold}% - LS usage - system usage (upstream's formula);"
echo "   'other cores' is CPU used outside the two pods (counted as system usage)"
echo
printf '%6s  %-10s  %8s  %8s  %9s  %11s  %15s  %9s  %8s\n' \
    "t(s)" "LS load" "LS cores" "BE cores" "BE share" "other cores" "BE cfs_quota_us" "BE cpuset" "LS avail"
table_row() {
    local label=$1 seconds=$2
    local ls0 be0 t0 ls1 be1 t1
    local stat0 stat1
    ls0=$(cpuacct "$ls_pod"); be0=$(cpuacct "$be_pod"); t0=$(now_ns); stat0=$(head -1 /proc/stat)
    sleep "$seconds"
    ls1=$(cpuacct "$ls_pod"); be1=$(cpuacct "$be_pod"); t1=$(now_ns); stat1=$(head -1 /proc/stat)
    local quota cpuset
    quota=$(cat "$cgroot/cpu/$be_tier/cpu.cfs_quota_us")
    cpuset=$(cat "$cgroot/cpuset/$be_tier/cpuset.cpus")
    python3 - "$label" "$ls0" "$ls1" "$be0" "$be1" "$t0" "$t1" "$start_ns" "$ncpu" "$quota" "$cpuset" \
        "$stat0" "$stat1" <<'PY'
import sys
label, ls0, ls1, be0, be1, t0, t1, start, ncpu, quota, cpuset, stat0, stat1 = sys.argv[1:]
elapsed = (int(t1) - int(t0)) or 1
ls = (int(ls1) - int(ls0)) / elapsed
be = (int(be1) - int(be0)) / elapsed
ncpu = int(ncpu)
def times(line):
    values = [int(v) for v in line.split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values[:8]) - idle, sum(values[:8])
(busy0, total0), (busy1, total1) = times(stat0), times(stat1)
node = ncpu * (busy1 - busy0) / max(total1 - total0, 1)
other = max(node - ls - be, 0.0)
print(f"{(int(t1) - int(start)) / 1e9:6.0f}  {label:<10}  {ls:8.2f}  {be:8.2f}  {100 * be / ncpu:8.0f}%  "
      f"{other:11.2f}  {quota:>15}  {cpuset:>9}  {ncpu - be:8.2f}")
PY
}

run_phase() {
    local label=$1 rows=$(( phase_seconds / 3 ))
    [ "$rows" -lt 1 ] && rows=1
    for _ in $(seq "$rows"); do table_row "$label" 3; done
}

table_row "no koordlet" 3
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$koordlet_bin" --standalone --node-name colocation-demo --addr "127.0.0.1:$port" \
    --pods-file "$work/pods.json" --node-slo-file "$work/nodeslo.yaml" \
    --log-level "$log_level" > "$work/koordlet.log" 2>&1 &
koordlet_pid=$!
run_phase "LS idle"
for step in $(seq "$ncpu"); do
    ls_burners+=("$(burn_in "$ls_pod/$ls_cid")")
    run_phase "LS burn ${step}"
done
for pid in "${ls_burners[@]}"; do kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
ls_burners=()
run_phase "LS gone"

echo
echo "== what koordlet manages for the BE tier (GET /qos/explain?tier=be)"
python3 - "$port" <<'PY' || echo "(explain endpoint not reachable)"
import json, sys, urllib.request
entries = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/qos/explain?tier=be", timeout=10))
for e in entries:
    print(f"  {e['dir']}/{e['resource']}: expected {e['expected']}, actual {e.get('actual')}, "
          f"owner {e['strategy']}{'' if e['converged'] else '  (NOT converged)'}")
PY
echo
echo "== koordlet QoS metrics"
python3 - "$port" <<'PY' || true
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
for line in body.splitlines():
    if line.startswith(("koordlet_qos_strategy_runs_total{strategy=\"cpusuppress\"",
                        "koordlet_qos_strategy_actions_total{strategy=\"cpusuppress\"",
                        "koordlet_qos_strategy_drifts_repaired_total{strategy=\"cpusuppress\"",
                        "koordlet_be_suppress_cpu_cores", "koordlet_be_suppress_ls_used_cpu_cores")):
        print("  " + line)
PY
if grep -qiE "error|panic" "$work/koordlet.log"; then
    echo; echo "== koordlet warnings/errors"; grep -iE "error|panic" "$work/koordlet.log" | tail -5
fi
echo
echo "cleaning up: stopping koordlet and burners, removing ${#created[@]} cgroups"
