#!/usr/bin/env bash
# koordlet footprint benchmark (issue 3): lays out kubelet-style container
# cgroups (cgroupfs driver, cgroup v1) each holding a real process, writes a
# matching pods file, runs a release koordlet standalone collecting every
# second, and samples its RSS and CPU time.
#
# Targets: peak RSS under 32 MiB, CPU under 2% of one core over the run.
# The metric cache keeps 30 minutes of samples, so RSS grows until then:
# the default 300 s shows the start-up cost, `--duration 1900` the steady state.
#
# koordlet runs with every module a node runs: states, collectors, metric
# cache, NodeMetric reporter, QoS manager strategies, runtime hooks
# reconciler, NRI plugin (it waits for the runtime's socket), and the
# RuntimeHookService server on a socket in the work directory
# (`--no-hooks-server` leaves it off, as standalone mode does by default).
# The machine's 1-minute load average is sampled too: the figures of a
# busy machine say so.
#
# Needs root and writable cgroup v1 cpu, cpuacct and memory hierarchies
# (cpuset and the hybrid cgroup2 mount at <root>/unified are used when
# present, as runc does). Everything it creates is removed on exit, Ctrl-C
# included. Prints the figures and exits 1 when a target is missed.
#
# Usage: hack/bench-koordlet.sh [--duration SECONDS] [--pods N]
#          [--containers-per-pod N] [--busy N] [--sample-every SECONDS]
#          [--report-interval DURATION] [--binary PATH] [--no-build]
#          [--no-hooks-server] [--keep-workdir] [--koordlet-arg ARG]...
#
# --koordlet-arg passes one more flag to koordlet, e.g.
# `--koordlet-arg --metric-cache-retention=5m` reaches the metric cache's
# steady state in 5 minutes (for quick footprint experiments).
set -euo pipefail
# The whole script is one block, parsed before it runs, so editing the file
# during a run cannot change what the run does.
{
cd "$(dirname "$0")/.."

duration=300
pods=50
containers_per_pod=3
busy=6
sample_every=5
report_interval=
binary=target/release/koordlet
build=1
keep_workdir=0
hooks_server=1
extra_args=()
cgroup_root=${CGROUP_ROOT:-/sys/fs/cgroup}
rss_target_kib=$((32 * 1024))
cpu_target_percent=2

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1 needs a positive integer, got '$2'" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --duration) duration=${2:-}; positive "$1" "$duration"; shift 2 ;;
        --duration=*) duration=${1#*=}; positive --duration "$duration"; shift ;;
        --pods) pods=${2:-}; positive "$1" "$pods"; shift 2 ;;
        --containers-per-pod) containers_per_pod=${2:-}; positive "$1" "$containers_per_pod"; shift 2 ;;
        --busy) busy=${2:-}; [[ $busy =~ ^[0-9]+$ ]] || { echo "--busy needs a number" >&2; exit 2; }; shift 2 ;;
        --sample-every) sample_every=${2:-}; positive "$1" "$sample_every"; shift 2 ;;
        --report-interval) report_interval=${2:-}; shift 2 ;;
        --binary) binary=${2:-}; build=0; shift 2 ;;
        --no-build) build=0; shift ;;
        --no-hooks-server) hooks_server=0; shift ;;
        --keep-workdir) keep_workdir=1; shift ;;
        --koordlet-arg) [ $# -ge 2 ] || { echo "--koordlet-arg needs a value" >&2; exit 2; }; extra_args+=("$2"); shift 2 ;;
        --koordlet-arg=*) extra_args+=("${1#*=}"); shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

[ "$(id -u)" -eq 0 ] || { echo "needs root (it creates cgroups)" >&2; exit 2; }
controllers=(cpu cpuacct memory)
for controller in "${controllers[@]}"; do
    [ -w "$cgroup_root/$controller/cgroup.procs" ] || {
        echo "no writable cgroup v1 '$controller' hierarchy at $cgroup_root/$controller" >&2
        exit 2
    }
done
[ -w "$cgroup_root/cpuset/cgroup.procs" ] && controllers+=(cpuset)
# Hybrid hosts: runc also places containers in the unified hierarchy, which
# is where per-cgroup PSI lives.
[ -w "$cgroup_root/unified/cgroup.procs" ] && controllers+=(unified)

containers_total=$((pods * containers_per_pod))
(( busy <= containers_total )) || busy=$containers_total
run_id=$(printf '%06x' $(( ($$ << 8 ^ RANDOM) & 0xffffff )))
workdir=$(mktemp -d "${TMPDIR:-/tmp}/bench-koordlet.XXXXXX")

# --- cleanup: koordlet, then the container processes, then the cgroups ---
koordlet_pid=
workload_pids=()
created_dirs=()   # absolute cgroup dirs this run created, parents first
cleaned=0
cleanup() {
    [ "$cleaned" -eq 1 ] && return
    cleaned=1
    trap '' INT TERM HUP
    if [ -n "$koordlet_pid" ] && kill -0 "$koordlet_pid" 2>/dev/null; then
        kill -TERM "$koordlet_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$koordlet_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$koordlet_pid" 2>/dev/null || true
    fi
    [ -n "$koordlet_pid" ] && wait "$koordlet_pid" 2>/dev/null || true
    if [ ${#workload_pids[@]} -gt 0 ]; then
        kill -KILL "${workload_pids[@]}" 2>/dev/null || true
        wait "${workload_pids[@]}" 2>/dev/null || true
    fi
    local leftovers=0 i dir
    for ((i = ${#created_dirs[@]} - 1; i >= 0; i--)); do
        dir=${created_dirs[i]}
        [ -d "$dir" ] || continue
        # A killed task takes a moment to leave its cgroup.
        for _ in $(seq 50); do rmdir "$dir" 2>/dev/null && break; sleep 0.05; done
        if [ -d "$dir" ]; then
            echo "cleanup: could not remove $dir" >&2
            leftovers=$((leftovers + 1))
        fi
    done
    if [ "$keep_workdir" -eq 1 ]; then
        echo "work directory kept: $workdir"
    else
        rm -rf "$workdir"
    fi
    if [ "$leftovers" -eq 0 ]; then
        echo "cleanup: ${#workload_pids[@]} workload processes stopped, ${#created_dirs[@]} cgroups removed"
    fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- build ---
if [ "$build" -eq 1 ]; then
    echo "building koordlet (release)..."
    cargo build --release -p koordlet --locked
fi
[ -x "$binary" ] || { echo "no koordlet binary at $binary" >&2; exit 2; }

# --- cgroups ---
# Creates a relative dir in every hierarchy we use, recording what it
# created for cleanup (an existing dir, e.g. a real node's kubepods, is
# used as it is and left alone).
make_cgroup() {
    local relative=$1 controller dir parent
    for controller in "${controllers[@]}"; do
        dir=$cgroup_root/$controller/$relative
        [ -d "$dir" ] && continue
        mkdir "$dir"
        created_dirs+=("$dir")
        if [ "$controller" = cpuset ]; then
            # A new cpuset cgroup starts empty; tasks cannot join until it
            # has CPUs and memory nodes.
            parent=$(dirname "$dir")
            cat "$parent/cpuset.cpus" > "$dir/cpuset.cpus"
            cat "$parent/cpuset.mems" > "$dir/cpuset.mems"
        fi
    done
}

# Starts a process that moves itself into the container's cgroups and then
# becomes `sleep` (or a light duty-cycled loop when busy).
start_workload() {
    local relative=$1 is_busy=$2 procs=() controller body
    for controller in "${controllers[@]}"; do
        procs+=("$cgroup_root/$controller/$relative/cgroup.procs")
    done
    if [ "$is_busy" -eq 1 ]; then
        # About 50 ms of spinning per second: ~5% of a core.
        body='while :; do i=0; while [ $i -lt 15000 ]; do i=$((i + 1)); done; sleep 1; done'
    else
        body='exec sleep 2147483647'
    fi
    sh -c 'for f in "$@"; do echo $$ > "$f" || exit 1; done; '"$body" workload "${procs[@]}" \
        </dev/null >/dev/null 2>&1 &
    workload_pids+=($!)
}

pod_uid() { printf '%08x-%04x-4000-8000-%012x' "0x$run_id" "$1" "$1"; }
container_id() { printf '%s%010x%024x%024x' "$run_id" "$1" "$2" "$1"; }

echo "laying out $pods pods x $containers_per_pod containers in: ${controllers[*]}"
make_cgroup kubepods
make_cgroup kubepods/burstable
pods_json=()
busy_left=$busy
busy_every=$(( busy > 0 ? containers_total / busy : 0 ))
n=0
for ((p = 0; p < pods; p++)); do
    uid=$(pod_uid "$p")
    make_cgroup "kubepods/burstable/pod$uid"
    statuses=()
    specs=()
    for ((c = 0; c < containers_per_pod; c++)); do
        id=$(container_id "$p" "$c")
        make_cgroup "kubepods/burstable/pod$uid/$id"
        is_busy=0
        if (( busy_left > 0 && n % busy_every == 0 )); then is_busy=1; busy_left=$((busy_left - 1)); fi
        start_workload "kubepods/burstable/pod$uid/$id" "$is_busy"
        n=$((n + 1))
        specs+=("{\"name\":\"c$c\",\"image\":\"bench\",\"resources\":{\"requests\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"}}}")
        statuses+=("{\"name\":\"c$c\",\"containerID\":\"containerd://$id\",\"image\":\"bench\",\"imageID\":\"\",\"ready\":true,\"restartCount\":0,\"state\":{\"running\":{}}}")
    done
    # Every fifth pod is a koordinator BE pod, the rest default (LS).
    labels='{}'
    (( p % 5 == 4 )) && labels='{"koordinator.sh/qosClass":"BE"}'
    pods_json+=("{\"metadata\":{\"name\":\"bench-$p\",\"namespace\":\"bench\",\"uid\":\"$uid\",\"labels\":$labels},\"spec\":{\"nodeName\":\"bench-node\",\"containers\":[$(IFS=,; echo "${specs[*]}")]},\"status\":{\"phase\":\"Running\",\"qosClass\":\"Burstable\",\"containerStatuses\":[$(IFS=,; echo "${statuses[*]}")]}}")
done
printf '{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[%s]}\n' \
    "$(IFS=,; echo "${pods_json[*]}")" > "$workdir/pods.json"

# Every workload must have joined its cgroups (a failed write exits it).
sleep 1
for pid in "${workload_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "a workload process ($pid) could not join its cgroups" >&2; exit 1; }
done
echo "$containers_total container processes running ($busy lightly busy)"

# --- koordlet ---
args=(--addr=127.0.0.1:0 --node-name=bench-node --collect-res-used-interval=1s
      --pods-file "$workdir/pods.json" --node-metric-output "$workdir/nodemetric.json")
# Upstream reports every 60 s; a short run reports more often so that it
# still sees a NodeMetric.
[ -z "$report_interval" ] && (( duration < 120 )) && report_interval=10s
[ -n "$report_interval" ] && args+=(--node-metric-report-interval "$report_interval")
# Its registration file goes to the work directory, not /etc/runtime.
[ "$hooks_server" -eq 1 ] &&
    args+=(--runtime-hooks-addr "$workdir/koordlet.sock" --runtime-hooks-config-path "$workdir/hookserver.d")
[ ${#extra_args[@]} -gt 0 ] && args+=("${extra_args[@]}")
env -u NODE_NAME -u KUBECONFIG -u KUBERNETES_SERVICE_HOST -u RUST_LOG \
    "$binary" "${args[@]}" >"$workdir/koordlet.log" 2>&1 &
koordlet_pid=$!
started=$(date +%s.%N)

clk_tck=$(getconf CLK_TCK)
# utime + stime in clock ticks (fields 14 and 15, counted after the ")" that
# ends the command name).
cpu_ticks() { local stat; stat=$(<"/proc/$koordlet_pid/stat") && awk '{ print $12 + $13 }' <<<"${stat##*) }"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$koordlet_pid/status"; }

addr=
for _ in $(seq 200); do
    addr=$(sed -n 's/.*serving health and metrics on \([0-9.:]*\).*/\1/p' "$workdir/koordlet.log" | head -1)
    [ -n "$addr" ] && break
    kill -0 "$koordlet_pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$addr" ] || { echo "koordlet did not start:" >&2; cat "$workdir/koordlet.log" >&2; exit 1; }
if [ "$hooks_server" -eq 1 ]; then
    for _ in $(seq 100); do [ -S "$workdir/koordlet.sock" ] && break; sleep 0.1; done
    [ -S "$workdir/koordlet.sock" ] || {
        echo "the runtime hooks server did not bind $workdir/koordlet.sock:" >&2
        tail -20 "$workdir/koordlet.log" >&2
        exit 1
    }
fi
echo "koordlet pid $koordlet_pid serving on $addr; sampling every ${sample_every}s for ${duration}s"

samples="$workdir/samples.tsv"   # elapsed_s rss_kib cpu_ticks load1
deadline=$(awk -v s="$started" -v d="$duration" 'BEGIN { printf "%.3f", s + d }')
while :; do
    kill -0 "$koordlet_pid" 2>/dev/null || { echo "koordlet exited early:" >&2; tail -20 "$workdir/koordlet.log" >&2; exit 1; }
    now=$(date +%s.%N)
    rss=$(rss_kib) ticks=$(cpu_ticks) load1=$(cut -d' ' -f1 /proc/loadavg)
    elapsed=$(awk -v n="$now" -v s="$started" 'BEGIN { printf "%.3f", n - s }')
    printf '%s\t%s\t%s\t%s\n' "$elapsed" "$rss" "$ticks" "$load1" >> "$samples"
    awk -v n="$now" -v d="$deadline" 'BEGIN { exit !(n >= d) }' && break
    remaining=$(awk -v n="$now" -v d="$deadline" -v e="$sample_every" 'BEGIN { r = d - n; printf "%.3f", r < e ? r : e }')
    sleep "$remaining"
done

# --- what koordlet collected ---
metrics=$(curl -sf --max-time 5 "http://$addr/metrics" || true)
psi_containers=$(grep '^koordlet_container_psi{' <<<"$metrics" | sed -n 's/.*container_id="\([^"]*\)".*/\1/p' | sort -u | wc -l)
if [ -s "$workdir/nodemetric.json" ]; then
    # NodeMetric reports per pod; count the containers of the pods it
    # reports with a measured usage.
    reported_pods=$(jq '[.status.podsMetric[]? | select(.podUsage.resources.memory != null)] | length' "$workdir/nodemetric.json")
    reported_containers=$(jq --slurpfile pods "$workdir/pods.json" '
        [.status.podsMetric[]? | select(.podUsage.resources.memory != null) | .name] as $names
        | [$pods[0].items[] | select(.metadata.name as $n | $names | index($n)) | .status.containerStatuses[]] | length' \
        "$workdir/nodemetric.json")
    report_time=$(jq -r '.status.updateTime // "never"' "$workdir/nodemetric.json")
else
    reported_pods=0 reported_containers=0 report_time=never
fi

# --- figures ---
echo
awk -F'\t' -v clk="$clk_tck" -v rss_target="$rss_target_kib" -v cpu_target="$cpu_target_percent" \
    -v pods="$pods" -v containers="$containers_total" -v reported_pods="$reported_pods" \
    -v reported_containers="$reported_containers" -v psi_containers="$psi_containers" \
    -v report_time="$report_time" -v controllers="${#controllers[@]}" \
    -v hooks_server="$hooks_server" -v cpus="$(nproc)" '
    { t[NR] = $1; rss[NR] = $2; ticks[NR] = $3; if ($2 > peak) peak = $2
      load += $4; if ($4 > load_max) load_max = $4 }
    END {
        n = NR; half = t[n] / 2; sum = 0; count = 0
        for (i = 1; i <= n; i++) if (t[i] >= half) { sum += rss[i]; count++ }
        mean_late = count ? sum / count : 0
        cpu_run = ticks[n] / clk / t[n] * 100
        # Steady state: from the first sample after 10 s to the end.
        for (i = 1; i <= n && t[i] < 10; i++) ; s = (i < n) ? i : 1
        cpu_steady = (ticks[n] - ticks[s]) / clk / (t[n] - t[s]) * 100
        printf "koordlet, %d pods x %d containers (%d container cgroups, real processes), collecting every 1 s\n", pods, containers / pods, containers
        printf "  run length                 %8.1f s (%d samples)\n", t[n], n
        printf "  peak RSS                   %8.1f MiB\n", peak / 1024
        printf "  mean RSS, last half        %8.1f MiB\n", mean_late / 1024
        printf "  final RSS                  %8.1f MiB\n", rss[n] / 1024
        printf "  CPU over the run           %8.2f %% of one core (%.2f s user+system)\n", cpu_run, ticks[n] / clk
        printf "  CPU after the first 10 s   %8.2f %% of one core\n", cpu_steady
        printf "  machine load (1-min avg)   %8.2f mean, %.2f max, on %d CPUs\n", load / n, load_max, cpus
        printf "  runtime hooks server       %s\n", hooks_server ? "on (unix socket in the work directory)" : "off"
        printf "  NodeMetric (updated %s): %d/%d pods with usage = %d/%d containers\n", report_time, reported_pods, pods, reported_containers, containers
        printf "  containers with PSI series on /metrics: %d/%d\n", psi_containers, containers
        rss_ok = peak < rss_target; cpu_ok = cpu_run < cpu_target; seen_ok = reported_containers == containers
        if (t[n] < 1800) printf "  (the metric cache fills for 30 min; --duration 1900 shows the steady-state RSS)\n"
        printf "targets:\n"
        printf "  peak RSS < %d MiB            %s\n", rss_target / 1024, rss_ok ? "PASS" : "FAIL"
        printf "  CPU < %d%% of one core        %s\n", cpu_target, cpu_ok ? "PASS" : "FAIL"
        printf "  all containers reported      %s\n", seen_ok ? "PASS" : "FAIL"
        exit !(rss_ok && cpu_ok && seen_ok)
    }' "$samples" && status=0 || status=1
cp "$samples" "${TMPDIR:-/tmp}/bench-koordlet-samples.tsv" 2>/dev/null && echo "samples: ${TMPDIR:-/tmp}/bench-koordlet-samples.tsv"
exit "$status"
}
