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
# With --containers the two pods are real containers instead: a private
# containerd 1.7 with NRI (hack/node-runtime), koordlet registered as its NRI
# plugin, pods created through CRI; the BE container prints the cgroup values
# NRI gave it at creation, and the LS load is raised by burners started in
# the LS container's cgroup. containerd and its cgroups go away on exit.
#
# Usage: hack/colocation-demo.sh [--policy cfsQuota|cpuset] [--phase-seconds N]
#                                [--no-build] [--koordlet PATH] [--log FILE]
#                                [--containers] [--threshold PERCENT]
set -euo pipefail
cd "$(dirname "$0")/.."

policy=cfsQuota
phase_seconds=12
build=1
koordlet_bin=./target/release/koordlet
threshold=65
log_copy=
log_level=warn
containers=0
while [ $# -gt 0 ]; do
    case "$1" in
        --policy) policy=$2; shift 2 ;;
        --phase-seconds) phase_seconds=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --koordlet) koordlet_bin=$2; build=0; shift 2 ;;
        --log) log_copy=$2; log_level=info; shift 2 ;;
        --containers) containers=1; shift ;;
        --threshold) threshold=$2; shift 2 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$policy" in cfsQuota|cpuset) ;; *) echo "--policy must be cfsQuota or cpuset" >&2; exit 2 ;; esac
case "$threshold" in [1-9]|[1-9][0-9]|100) ;; *) echo "--threshold must be 1..100" >&2; exit 2 ;; esac

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
kit=hack/node-runtime
nr_root=        # private containerd root (--containers), torn down by down.sh
nr_kubepods=

cleanup() {
    set +e
    [ -n "$koordlet_pid" ] && kill "$koordlet_pid" 2>/dev/null && wait "$koordlet_pid" 2>/dev/null
    for pid in "${burners[@]}" "${ls_burners[@]}"; do kill -9 "$pid" 2>/dev/null; done
    for pid in "${burners[@]}" "${ls_burners[@]}"; do wait "$pid" 2>/dev/null; done
    if [ -n "$nr_root" ]; then
        NR_ROOT=$nr_root NR_KUBEPODS=$nr_kubepods bash "$kit/down.sh" --purge >"$work/down.log" 2>&1 \
            || { echo "warning: node-runtime down.sh reported leftovers:" >&2; tail -5 "$work/down.log" >&2; }
    fi
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

if [ "$containers" = 0 ]; then
    for dir in kubepods kubepods/burstable kubepods/besteffort "$ls_pod" "$ls_pod/$ls_cid" "$be_pod" "$be_pod/$be_cid"; do
        make_cgroup "$dir"
    done
fi

burn_in() {
    local dir=$1 c
    sh -c 'while :; do :; done' >/dev/null 2>&1 &
    local pid=$!
    for c in $controllers; do echo "$pid" > "$cgroot/$c/$dir/cgroup.procs"; done
    echo "$pid"
}

if [ "$containers" = 0 ]; then
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
fi
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


# The BE pod wants every CPU (with --containers its container runs the loops).
if [ "$containers" = 0 ]; then
    for _ in $(seq "$ncpu"); do burners+=("$(burn_in "$be_pod/$be_cid")"); done
fi

# --containers: a private containerd 1.7 with NRI, koordlet as its NRI plugin,
# and the two pods created through CRI. Sets the pod/tier paths the table reads.
start_containers_demo() {
    local base=${NR_SETUP_ROOT:-/tmp/node-runtime} shared env_line
    if ! { [ -s "$base/images/busybox.tar" ] && [ -x "$base/cache/containerd-1.7/usr/bin/containerd" ] \
        && [ -f "$base/py/cri_pb2.py" ]; }; then
        echo "== preparing the node-runtime kit (hack/node-runtime/setup.sh 1.7)"
        NR_ROOT=$base bash "$kit/setup.sh" 1.7 > "$work/setup.log" 2>&1 \
            || { tail -20 "$work/setup.log" >&2; echo "node-runtime setup failed" >&2; exit 1; }
    fi
    nr_root=$work/nr
    nr_kubepods=/kubepods-demo-$run_id
    mkdir -p "$nr_root"
    # Share the prepared images, binaries and stubs; containerd's state stays private.
    for shared in images cni proto cache py; do ln -s "$base/$shared" "$nr_root/$shared"; done
    echo "== starting containerd 1.7 with NRI (NR_ROOT=$nr_root, NR_KUBEPODS=$nr_kubepods)"
    NR_ROOT=$nr_root NR_KUBEPODS=$nr_kubepods bash "$kit/up.sh" 1.7 --nri > "$work/up.log" 2>&1 \
        || { tail -20 "$work/up.log" >&2; echo "containerd did not start" >&2; exit 1; }
    while IFS= read -r env_line; do
        case "$env_line" in NR_*=*) export "${env_line?}" ;; esac
    done < "$nr_root/run/env"
    [ -n "${NR_NRI_SOCK:-}" ] || { echo "up.sh reported no NRI socket" >&2; exit 1; }

    # koordlet's cgroup layout names the QoS root "kubepods"; give it a cgroup
    # root whose <hierarchy>/kubepods is this containerd's private subtree (and
    # the subtree under its own name too, for the cgroup parents NRI reports;
    # --kubepods-cgroup-dir names it, since koordlet's hooks only touch pod
    # cgroups below the kubepods directory).
    local farm=$work/cgroup-root hierarchy name entry
    for hierarchy in "$cgroot"/*; do
        name=$(basename "$hierarchy")
        if [ -L "$hierarchy" ]; then ln -s "$(readlink "$hierarchy")" "$farm/$name"; continue; fi
        mkdir -p "$farm/$name"
        for entry in "$hierarchy"/*; do
            if [ -f "$entry" ]; then ln -s "$entry" "$farm/$name/"; fi
        done
        ln -s "$hierarchy$nr_kubepods" "$farm/$name/kubepods"
        ln -s "$hierarchy$nr_kubepods" "$farm/$name$nr_kubepods"
    done

    echo '{"apiVersion":"v1","kind":"PodList","items":[]}' > "$work/pods.json"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$koordlet_bin" --standalone --node-name colocation-demo --addr "127.0.0.1:$port" \
        --pods-file "$work/pods.json" --node-slo-file "$work/nodeslo.yaml" \
        --cgroup-root-dir "$farm" --kubepods-cgroup-dir "$nr_kubepods" --kubelet-sync-interval 1s \
        --runtime-hooks-nri-socket-path "$NR_NRI_SOCK" \
        --runtime-hooks-nri-backoff-duration 100ms --runtime-hooks-nri-backoff-cap 1s \
        --log-level "$log_level" > "$work/koordlet.log" 2>&1 &
    koordlet_pid=$!
    echo "== waiting for koordlet to register as containerd's NRI plugin"
    python3 - "$port" <<'PY' || { tail -20 "$work/koordlet.log" >&2; exit 1; }
import sys, time, urllib.request
deadline = time.time() + 60
while time.time() < deadline:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
        if "\nkoordlet_nri_connected 1" in "\n" + body:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit("koordlet did not register with NRI within 60s")
PY

    ls_uid=$(printf 'demo-ls-%s' "$run_id")
    be_uid=$(printf 'demo-be-%s' "$run_id")
    local be_cpu_limit=$(( ncpu * 1000 )) be_memory=$(( 256 << 20 ))
    local be_spec
    be_spec=$(printf '{"containers":{"batch":{"requests":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"%s"},"limits":{"kubernetes.io/batch-cpu":"%s","kubernetes.io/batch-memory":"%s"}}}}' \
        "$be_memory" "$be_cpu_limit" "$be_memory")
    echo "== creating the pods through CRI ($NR_CRI_SOCK)"
    local ids
    ids=$(NR_ROOT=$nr_root DEMO_RUN_ID=$run_id python3 - "$be_spec" "$ncpu" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["NR_ROOT"], "py"))
import grpc, cri_pb2 as pb, cri_pb2_grpc as rpc
be_spec, ncpu = sys.argv[1], int(sys.argv[2])
rt = rpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + os.environ["NR_CRI_SOCK"]))
kubepods, run_id = os.environ["NR_KUBEPODS"], os.environ["DEMO_RUN_ID"]

def run(name, uid, tier, labels, annotations, shares, command):
    sandbox = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="demo"),
        hostname=name, labels=labels, annotations=annotations,
        log_directory=os.path.join(os.environ["NR_ROOT"], "run", "logs", uid),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent="%s/%s/pod%s" % (kubepods, tier, uid)))
    sb = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox), timeout=60).pod_sandbox_id
    # The resources the kubelet derives from the pod's native requests/limits.
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name), image=pb.ImageSpec(image=os.environ["NR_BUSYBOX_IMAGE"]),
        command=["sh", "-c", command], log_path=name + ".log", labels=labels, annotations=annotations,
        linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
            cpu_period=100000, cpu_quota=0, cpu_shares=shares)))
    cid = rt.CreateContainer(pb.CreateContainerRequest(
        pod_sandbox_id=sb, config=config, sandbox_config=sandbox), timeout=60).container_id
    rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=60)
    return cid

ls = run("web", "demo-ls-" + run_id, "burstable", {"koordinator.sh/qosClass": "LS"}, {}, 1024, "exec sleep 3600")
# First instruction: what NRI put in the container's own cgroups, then one busy loop per CPU.
loops = "i=0; while [ $i -lt %d ]; do sh -c 'while :; do :; done' & i=$((i+1)); done; wait" % ncpu
be = run("batch", "demo-be-" + run_id, "besteffort", {"koordinator.sh/qosClass": "BE"},
         {"node.koordinator.sh/extended-resource-spec": be_spec}, 2,
         "cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
         "/sys/fs/cgroup/memory/memory.limit_in_bytes; " + loops)
print(ls, be)
PY
) || exit 1
    ls_cid=${ids% *}
    be_cid=${ids#* }
    ls_pod=${nr_kubepods#/}/burstable/pod$ls_uid
    be_pod=${nr_kubepods#/}/besteffort/pod$be_uid
    be_tier=${nr_kubepods#/}/besteffort

    # The pods as the kubelet would report them.
    cat > "$work/pods.json.new" <<EOF
{"apiVersion":"v1","kind":"PodList","items":[
 {"metadata":{"name":"web","namespace":"demo","uid":"$ls_uid","labels":{"koordinator.sh/qosClass":"LS"}},
  "spec":{"containers":[{"name":"web","image":"busybox","resources":{"requests":{"cpu":"1"}}}]},
  "status":{"phase":"Running","qosClass":"Burstable",
            "containerStatuses":[{"name":"web","image":"busybox","imageID":"","ready":true,"restartCount":0,
                                  "containerID":"containerd://$ls_cid","state":{"running":{}}}]}},
 {"metadata":{"name":"batch","namespace":"demo","uid":"$be_uid","labels":{"koordinator.sh/qosClass":"BE"},
              "annotations":{"node.koordinator.sh/extended-resource-spec":$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$be_spec")}},
  "spec":{"containers":[{"name":"batch","image":"busybox","resources":{
      "requests":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"$be_memory"},
      "limits":{"kubernetes.io/batch-cpu":"$be_cpu_limit","kubernetes.io/batch-memory":"$be_memory"}}}]},
  "status":{"phase":"Running","qosClass":"BestEffort",
            "containerStatuses":[{"name":"batch","image":"busybox","imageID":"","ready":true,"restartCount":0,
                                  "containerID":"containerd://$be_cid","state":{"running":{}}}]}}
]}
EOF
    mv "$work/pods.json.new" "$work/pods.json"

    local log=$nr_root/run/logs/$be_uid/batch.log lines=() _
    for _ in $(seq 100); do
        mapfile -t lines < <(awk '{print $4}' "$log" 2>/dev/null)
        [ "${#lines[@]}" -ge 3 ] && break
        sleep 0.1
    done
    echo
    echo "== the BE container's first instruction read its own cgroups (set by koordlet through NRI CreateContainer)"
    printf '   %-22s %-14s %s\n' "file" "seen" "expected from batch resources"
    printf '   %-22s %-14s %s\n' cpu.shares "${lines[0]:-?}" "1024 (batch-cpu request 1000m; kubelet asked for 2)"
    if [ "$policy" = cfsQuota ]; then
        printf '   %-22s %-14s %s\n' cpu.cfs_quota_us "${lines[1]:-?}" "-1 (the cfsQuota policy caps BE at the tier instead)"
    else
        printf '   %-22s %-14s %s\n' cpu.cfs_quota_us "${lines[1]:-?}" "$(( ncpu * 100000 )) (batch-cpu limit ${be_cpu_limit}m)"
    fi
    printf '   %-22s %-14s %s\n' memory.limit_in_bytes "${lines[2]:-?}" "$be_memory (batch-memory limit)"
    start_ns=$(now_ns)
}

cpuacct() { cat "$cgroot/cpuacct/$1/cpuacct.usage"; }
now_ns() { date +%s%N; }
start_ns=$(now_ns)

if [ "$containers" = 1 ]; then
    start_containers_demo
fi
echo
echo "== colocation demo: $ncpu CPUs, cpusuppress policy $policy, threshold ${threshold}%"
if [ "$containers" = 1 ]; then
    echo "   real containers in containerd $NR_CONTAINERD_VERSION, koordlet as its NRI plugin"
    echo "   LS pod demo/web ($ls_pod), BE pod demo/batch ($be_pod, a container running $ncpu busy loops)"
else
    echo "   LS pod demo/web ($ls_pod), BE pod demo/batch ($be_pod, $ncpu burners)"
fi
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

if [ "$containers" = 0 ]; then
table_row "no koordlet" 3
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$koordlet_bin" --standalone --node-name colocation-demo --addr "127.0.0.1:$port" \
    --pods-file "$work/pods.json" --node-slo-file "$work/nodeslo.yaml" \
    --log-level "$log_level" > "$work/koordlet.log" 2>&1 &
koordlet_pid=$!
fi
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
