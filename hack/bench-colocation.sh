#!/usr/bin/env bash
# The colocation benchmark: a latency-sensitive HTTP service's tail latency
# against a best-effort job's throughput on this machine's real cgroups,
# without Kubernetes. A benchmark that prints figures, not a test.
#
# Every run has the same length and load pattern (idle -> 50 % -> 90 % ->
# idle, in LS requests per second; each request costs a fixed amount of CPU
# work). 100 % is the LS service's capacity on this machine, measured first
# with a closed-loop probe (--rate-basis capacity, the default), or the bare
# CPUs' ncpu x 1 s / work (--rate-basis machine, which on 2 CPUs puts the
# 90 % phase above what the service can serve, so it measures a growing
# queue). --repeat N runs every kind N times, the kinds taking turns, and
# adds a table of medians (later rounds' files go to OUT/<run>-roundN):
#   ls-alone           the LS service alone
#   no-agent           LS + BE, nothing enforcing
#   koordlet-cfsquota  LS + BE under koordlet --standalone, cpusuppress cfsQuota
#   koordlet-cpuset    the same with the cpuset policy
#   koordlet-latency   cfsQuota with the cpuLatencyProtection NodeSLO extension
#                      on (ours: BE sized from the LS threads' run-queue wait,
#                      target --latency-target PERCENT of their run time)
#   upstream-cfsquota  LS + BE under upstream's koordlet (Go), cpusuppress
#   upstream-cpuset    cfsQuota, then cpuset (only with --upstream-koordlet)
# The LS service, the load generator and the BE job are parts of one binary
# (e2e/src/bin/koord-colocation-bench/); each runs in its own cgroup
# (kubelet-style kubepods/burstable and kubepods/besteffort pods, and the
# generator outside kubepods). It prints one table (LS p50/p99/p99.9 and the
# p99 inflation against ls-alone, LS p99 in the 50 % and 90 % phases, BE
# work units per second and BE's share of the CPU the rest left idle,
# koordlet's CPU and peak RSS, reaction time from an LS step to BE's limit
# dropping) and writes OUT/colocation.png plus per-run CSVs.
#
# --be-cpu-qos sched-idle (the default) gives both agents upstream's CPU QoS
# for BE in their NodeSLO (policies.cpuPolicy: coreSched, beClass.cpuQOS
# schedIdle: 1, i.e. the besteffort tier as an idle cgroup); `none` leaves it
# out. The table's last lines say in which runs the tier really was idle.
#
# --loadgen-cgroup root (the default) runs the load generator in a cgroup
# beside kubepods; ls-pod runs it in a container-like cgroup of the LS pod,
# where BE's idle tier makes way for it (its CPU then counts as the LS pod's).
#
# Needs root and cgroup v1 cpu/cpuacct/cpuset/memory hierarchies. Run it on
# a quiet machine: CPU used by anything else is system usage to koordlet and
# competes with the pods (the script prints the load average before and after).
#
# Upstream's koordlet (--upstream-koordlet PATH, a binary built outside this
# repository from upstream's cmd/koordlet) needs an API server and a kubelet:
# the harness serves the pods as a fake kubelet on loopback and writes a Node
# (InternalIP 127.0.0.1), the NodeSLO (same policy and threshold as ours) and
# a NodeMetric into the local cluster (hack/local-cluster). This script starts
# that cluster if none runs and stops it at the end; it also stops the
# cluster's kubelet for the benchmark, since a kubelet removes pod cgroups
# under /kubepods that it does not know (the benchmark's pods). A cluster it
# did not start must have no kubelet running (it refuses otherwise).
#
# Usage: hack/bench-colocation.sh [--no-build] [--koordlet PATH] [--out DIR]
#            [--upstream-koordlet PATH]
#            [--phase-seconds N] [--work-us N] [--threshold PERCENT]
#            [--latency-target PERCENT] [--repeat N]
#            [--rate-basis capacity|machine] [--probe-seconds N]
#            [--be-cpu-qos sched-idle|none] [--loadgen-cgroup root|ls-pod]
#            [--runs ls-alone,no-agent,koordlet-cfsquota,koordlet-cpuset,
#                    koordlet-latency,...]
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
# Where cargo puts its builds (CARGO_TARGET_DIR is honoured).
target_dir=${CARGO_TARGET_DIR:-target}
koordlet=$target_dir/release/koordlet
upstream=
out=target/bench-colocation
pass=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --koordlet) koordlet=$2; build=0; shift 2 ;;
        --upstream-koordlet) upstream=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --phase-seconds|--work-us|--threshold|--runs|--conns|--latency-target|--repeat|--rate-basis|--probe-seconds|--be-cpu-qos|--loadgen-cgroup) pass+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,62p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then echo "the colocation benchmark needs root (it makes cgroups)" >&2; exit 1; fi
for c in cpu cpuacct cpuset memory; do
    [ -f "/sys/fs/cgroup/$c/tasks" ] || { echo "no cgroup v1 $c hierarchy at /sys/fs/cgroup/$c" >&2; exit 1; }
done

if [ "$build" = 1 ]; then
    echo "== building koordlet and the benchmark harness (release)"
    cargo build --release --locked -p koordlet --bin koordlet -p e2e --bin koord-colocation-bench
fi
bench=$target_dir/release/koord-colocation-bench
[ -x "$bench" ] || cargo build --release --locked -p e2e --bin koord-colocation-bench
[ -x "$koordlet" ] || { echo "no koordlet binary at $koordlet" >&2; exit 1; }

if [ -n "$upstream" ]; then
    [ -x "$upstream" ] || { echo "no upstream koordlet binary at $upstream" >&2; exit 1; }
    upstream=$(cd "$(dirname "$upstream")" && pwd)/$(basename "$upstream")
    . hack/local-cluster/lib.sh
    started_cluster=0
    if [ ! -e "$LC_MARK" ]; then
        echo "== starting the local cluster for upstream's koordlet (hack/local-cluster/up; stopped again at the end)"
        started_cluster=1
        trap 'echo "== stopping the local cluster this script started"; hack/local-cluster/down || true' EXIT
        hack/local-cluster/up >/dev/null
    else
        echo "== using the local cluster that already runs ($LC_DIR; left running at the end)"
    fi
    kubelet_pid=$(cat "$LC_PIDS/kubelet" 2>/dev/null || true)
    if [ -n "$kubelet_pid" ] && lc_alive "$kubelet_pid"; then
        if [ "$started_cluster" = 0 ]; then
            echo "the running local cluster's kubelet (pid $kubelet_pid) would remove the benchmark's pod cgroups under /kubepods; run hack/local-cluster/down first" >&2
            exit 1
        fi
        # Its pod-cgroup cleanup would kill the benchmark's pods; the API server is all upstream needs.
        echo "== stopping the cluster's kubelet (pid $kubelet_pid) for the benchmark"
        kill "$kubelet_pid"
        for _ in $(seq 150); do lc_alive "$kubelet_pid" || break; sleep 0.1; done
        lc_alive "$kubelet_pid" && kill -9 "$kubelet_pid"
    fi
    export KUBECONFIG=$LC_KUBECONFIG
    for crd in slo.koordinator.sh_nodeslos slo.koordinator.sh_nodemetrics topology.node.k8s.io_noderesourcetopologies; do
        lc_kubectl apply --server-side -f "charts/koordinator/crds/$crd.yaml" >/dev/null
    done
    lc_kubectl wait --for condition=Established --timeout=60s \
        crd/nodeslos.slo.koordinator.sh crd/nodemetrics.slo.koordinator.sh \
        crd/noderesourcetopologies.topology.node.k8s.io >/dev/null
    echo "== upstream's koordlet: $upstream"
    pass+=(--upstream-koordlet "$upstream")
fi

# The plots need matplotlib: Debian's package.
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    echo "== installing python3-matplotlib (for the plots)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-matplotlib >/dev/null
fi

echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) CPUs"
"$bench" run --koordlet "$koordlet" --out "$out" "${pass[@]}"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 hack/bench-colocation-plot.py "$out"
