#!/usr/bin/env bash
# The colocation benchmark: a latency-sensitive HTTP service's tail latency
# against a best-effort job's throughput on this machine's real cgroups,
# without Kubernetes. A benchmark that prints figures, not a test.
#
# Every run has the same length and load pattern (idle -> 50 % of the
# machine -> 90 % -> idle, in LS requests per second; each request costs a
# fixed amount of CPU work):
#   ls-alone           the LS service alone
#   no-agent           LS + BE, nothing enforcing
#   koordlet-cfsquota  LS + BE under koordlet --standalone, cpusuppress cfsQuota
#   koordlet-cpuset    the same with the cpuset policy
# The LS service, the load generator and the BE job are parts of one binary
# (e2e/src/bin/koord-colocation-bench/); each runs in its own cgroup
# (kubelet-style kubepods/burstable and kubepods/besteffort pods, and the
# generator outside kubepods). It prints one table (LS p50/p99/p99.9 and the
# p99 inflation against ls-alone, LS p99 in the 50 % and 90 % phases, BE
# work units per second and BE's share of the CPU the rest left idle,
# koordlet's CPU and peak RSS, reaction time from an LS step to BE's limit
# dropping) and writes OUT/colocation.png plus per-run CSVs.
#
# Needs root and cgroup v1 cpu/cpuacct/cpuset/memory hierarchies. Run it on
# a quiet machine: CPU used by anything else is system usage to koordlet and
# competes with the pods (the script prints the load average before and after).
#
# Usage: hack/bench-colocation.sh [--no-build] [--koordlet PATH] [--out DIR]
#            [--phase-seconds N] [--work-us N] [--threshold PERCENT]
#            [--runs ls-alone,no-agent,koordlet-cfsquota,koordlet-cpuset]
# Not built yet: the side-by-side run of upstream's koordlet (it needs an API
# server and a kubelet: see the README's benchmark section).
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
koordlet=target/release/koordlet
out=target/bench-colocation
pass=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --koordlet) koordlet=$2; build=0; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --phase-seconds|--work-us|--threshold|--runs|--conns) pass+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
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
bench=target/release/koord-colocation-bench
[ -x "$bench" ] || cargo build --release --locked -p e2e --bin koord-colocation-bench
[ -x "$koordlet" ] || { echo "no koordlet binary at $koordlet" >&2; exit 1; }

# The plots need matplotlib: Debian's package.
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    echo "== installing python3-matplotlib (for the plots)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-matplotlib >/dev/null
fi

echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) CPUs"
"$bench" run --koordlet "$koordlet" --out "$out" "${pass[@]}"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 hack/bench-colocation-plot.py "$out"
