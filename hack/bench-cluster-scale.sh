#!/usr/bin/env bash
# The scale benchmark (issue 24; not part of .ci/run): simulated nodes on the local cluster
# (hack/local-cluster, KWOK), then, per node count:
#   - the manager's convergence: every node's NodeMetric written at once, time until every Node
#     carries batch allocatable, node-status writes, the manager's CPU, RSS and bytes sent;
#   - scheduling: the same pods for kube-scheduler alone (the control plane's default-scheduler),
#     for kube-scheduler with our extender (the chart's koord-scheduler), and for upstream's
#     koord-scheduler when given as a binary; a burst each (throughput), before each burst of a
#     Koordinator scheduler one Reservation per reservation-owner pod of the mix (1 %), which
#     that scheduler places first (kube-scheduler alone gets the same pods, no Reservations);
#     then --paced-rounds paced runs (latency), each of every scheduler at once, their pods
#     interleaved (--paced-pods each, --paced-rate all together);
# and the NodeMetric/NRT writes the real koordlet makes, per 1,000 nodes.
#
#   hack/bench-cluster-scale.sh [--nodes 1000,5000] [--pods 10000] [--paced-pods 300]
#       [--paced-rate 5] [--paced-rounds 2] [--upstream-scheduler PATH] [--out DIR] [--skip-images]
#       [--only converge] [--manager-qps N] [--manager-burst N]
#
# --only converge runs the manager's convergence alone: no reporters, no scheduling, no KWOK
# (the manager does not need Ready nodes, and 5,000 KWOK nodes overload a 2-CPU machine).
# --manager-qps/--manager-burst set the manager's client-side API limit (the chart's
# manager.apiClient, upstream's --rest-config-qps/-burst; default 30/50): node-status writes
# are bounded by it, so convergence takes about (nodes - burst) / qps seconds.
#
# The upstream binary is built by the person running the benchmark, outside this repository,
# from a fetched copy of upstream Koordinator (this repository never builds it). It runs as a
# host process in the cluster's network namespace (as the control plane's kube-scheduler),
# with the admin kubeconfig and scheduler name koord-scheduler-upstream.
#
# KOORD_BENCH_IMAGE_PROFILE=dev uses debug builds of our images (faster to build, slower to
# run: only for trying the harness). Prints a table and writes results.jsonl to --out.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LC=$REPO/hack/local-cluster/local-cluster.sh

nodes_list=1000,5000 pods=10000 paced_pods=300 paced_rate=5 paced_rounds=2 upstream="" skip_images=0
only="" manager_qps=30 manager_burst=50
out=$REPO/target/bench-cluster-scale
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes_list=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --paced-pods) paced_pods=$2; shift 2 ;;
    --paced-rate) paced_rate=$2; shift 2 ;;
    --paced-rounds) paced_rounds=$2; shift 2 ;;
    --upstream-scheduler) upstream=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-images) skip_images=1; shift ;;
    --only) only=$2; shift 2 ;;
    --manager-qps) manager_qps=$2; shift 2 ;;
    --manager-burst) manager_burst=$2; shift 2 ;;
    *) sed -n '2,30p' "$0" >&2; exit 2 ;;
  esac
done
[[ $nodes_list =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "--nodes: a comma-separated list of counts" >&2; exit 2; }
[ -z "$only" ] || [ "$only" = converge ] || { echo "--only: converge is the one part that runs alone" >&2; exit 2; }
for n in $pods $paced_pods $paced_rate $paced_rounds $manager_qps $manager_burst; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "not a number: $n" >&2; exit 2; }
done
if [ -n "$upstream" ]; then
  [ -x "$upstream" ] || { echo "--upstream-scheduler $upstream is not an executable" >&2; exit 2; }
  upstream=$(realpath "$upstream")
fi
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"
log() { echo "[bench-cluster-scale $(date +%H:%M:%S)] $*" >&2; }

export KUBECONFIG=/var/lib/koord-local/admin.kubeconfig
KUBECTL=$(ls -d /var/cache/koord-local-cluster/kubernetes-*/bin/kubectl | head -1)
kubectl() { "$KUBECTL" "$@"; }

profile=${KOORD_BENCH_IMAGE_PROFILE:-release}
log "building the harness ($profile)"
cargo build --locked --profile "$profile" -p e2e --bin koord-scale-bench 2>&1 | tail -1
# The harness runs in the cluster's network namespace, where the kubeconfig's 127.0.0.1:6443 is
# the API server itself: through the host's socat relays every creation, watch event and
# binding it times would take two more hops. nsenter execs it, so a background run's $! is
# the harness's pid.
BENCH=(nsenter --net=/run/netns/koord-local
  "$REPO/target/$([ "$profile" = dev ] && echo debug || echo release)/koord-scale-bench")

# Simulated nodes renew their Lease every 150 s instead of every 10 s (see lib.sh), and
# kube-controller-manager waits 900 s before it calls a node unreachable: at 10 s, 5,000 leases
# alone are 500 writes/s, and on this machine the renewals fell behind at 1,000 nodes.
export KOORD_LOCAL_KWOK_LEASE_SECONDS=${KOORD_LOCAL_KWOK_LEASE_SECONDS:-600}
export KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD=${KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD:-900s}
flock -o /var/lock/koord-cluster.lock bash -c "'$REPO/hack/local-cluster/status' >/dev/null 2>&1 || '$REPO/hack/local-cluster/up'"
# A cluster started earlier keeps its flags: refuse one whose renewals would outlast the grace.
process_has_flag() { tr '\0' ' ' < "/proc/$(cat "/var/lib/koord-local/pids/$1")/cmdline" 2>/dev/null | grep -q -- "$2"; }
process_has_flag kube-controller-manager "--node-monitor-grace-period=$KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD" \
  || { echo "the local cluster's kube-controller-manager runs without --node-monitor-grace-period=$KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD; run hack/local-cluster/down first" >&2; exit 1; }
# Every kube-scheduler compared logs at --v=2 (the chart's kube-scheduler and upstream's too).
process_has_flag kube-scheduler "--v=2" \
  || { echo "the local cluster's kube-scheduler runs without --v=2; run hack/local-cluster/down first" >&2; exit 1; }
if [ -e /var/lib/koord-local/pids/kwok ] && kill -0 "$(cat /var/lib/koord-local/pids/kwok)" 2>/dev/null; then
  process_has_flag kwok "--node-lease-duration-seconds=$KOORD_LOCAL_KWOK_LEASE_SECONDS" \
    || { echo "kwok runs with another lease duration; run hack/local-cluster/local-cluster.sh kwok down first" >&2; exit 1; }
fi
# --skip-images trusts the cluster's containerd to hold the chart's images; a cluster started
# afresh holds none, and the install would wait out its timeout: build and import them then.
if [ "$skip_images" = 1 ]; then
  nr_root=${KOORD_LOCAL_CLUSTER_CACHE:-/var/cache/koord-local-cluster}/node-runtime  # as lib.sh
  held=$("$(cat "$nr_root/run/bin")/ctr" --address "$nr_root/run/containerd.sock" -n k8s.io images ls -q 2>/dev/null || true)
  for image in koordlet koord-manager koord-scheduler koord-descheduler kube-scheduler; do
    if ! grep -q "/$image:" <<< "$held"; then
      log "--skip-images: the cluster has no $image image; building and importing the images"
      skip_images=0
      break
    fi
  done
fi
if [ "$skip_images" = 0 ]; then
  "$LC" images --profile "$profile" | tail -1
fi
# Defaults, plus: extender metrics on (its share of each cycle), koordlet only on the real node
# (the simulated nodes' NodeMetrics come from the harness, at koordlet's cadence), and the
# manager's EnableSyncGPUSharedResource gate (upstream's, off by default), so that GPU Nodes
# advertise koordinator.sh/gpu.shared, which the pod webhook adds to the shared-GPU pods: with
# it off, a scheduler that checks every extended resource itself (kube-scheduler alone,
# upstream's koord-scheduler) cannot place those pods, and upstream's retried them for minutes.
"$LC" install --set scheduler.monitorEnabled=true --set featureGates=EnableSyncGPUSharedResource=true \
  --set manager.apiClient.qps="$manager_qps" --set manager.apiClient.burst="$manager_burst" \
  --set-json 'koordlet.nodeAffinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"type","operator":"NotIn","values":["kwok"]}]}]}}}' | tail -1
# Images built this run carry the same tags as the ones the running pods use, and an install
# whose values did not change rolls nothing: restart every component so that none runs an
# older build than the one just imported.
if [ "$skip_images" = 0 ]; then
  workloads=$(kubectl -n koordinator-system get deployment,daemonset -o name)
  for workload in $workloads; do
    kubectl -n koordinator-system rollout restart "$workload" > /dev/null
  done
  for workload in $workloads; do
    kubectl -n koordinator-system rollout status "$workload" --timeout=300s > /dev/null
  done
  log "restarted the components on the images just built"
fi
if [ -z "$only" ]; then
  "$LC" kwok up 2>&1 | tail -1
fi

upstream_pid=""
upstream_port=10269
heartbeat_pid=""
cleanup() {
  [ -n "$heartbeat_pid" ] && kill "$heartbeat_pid" 2>/dev/null || true
  [ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null || true
}
trap cleanup EXIT

if [ -n "$upstream" ]; then
  # Upstream's scheduler with the plugin set and arguments of upstream's chart (v1.8.0 defaults;
  # ElasticQuota's group namespace is the installation's) and a scheduler name of its own.
  cat > "$out/upstream-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
clientConnection: {kubeconfig: $KUBECONFIG}
profiles:
- schedulerName: koord-scheduler-upstream
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1},
                    {name: kubernetes.io/batch-cpu, weight: 1}, {name: kubernetes.io/batch-memory, weight: 1}]
  - name: LoadAwareScheduling
    args:
      filterExpiredNodeMetrics: false
      nodeMetricExpirationSeconds: 300
      resourceWeights: {cpu: 1, memory: 1}
      usageThresholds: {cpu: 65, memory: 95}
      estimatedScalingFactors: {cpu: 85, memory: 70}
  - name: ElasticQuota
    args: {quotaGroupNamespace: koordinator-system}
  - name: Coscheduling
    args: {awareNetworkTopology: true}
  plugins:
    preEnqueue: {enabled: [{name: Coscheduling}]}
    queueSort: {disabled: [{name: "*"}], enabled: [{name: PrioritySort}]}
    preFilter: {enabled: [{name: SchedulingHint}, {name: Coscheduling}, {name: Reservation}, {name: NodeNUMAResource}, {name: DeviceShare}, {name: ElasticQuota}]}
    filter: {enabled: [{name: Reservation}, {name: LoadAwareScheduling}, {name: NodeNUMAResource}, {name: DeviceShare}]}
    postFilter: {disabled: [{name: "*"}], enabled: [{name: Reservation}, {name: Coscheduling}, {name: ElasticQuota}, {name: DefaultPreemption}]}
    preScore: {enabled: [{name: Reservation}, {name: Coscheduling}]}
    score: {enabled: [{name: LoadAwareScheduling, weight: 1}, {name: NodeNUMAResource, weight: 1}, {name: DeviceShare, weight: 1}, {name: Reservation, weight: 5000}, {name: Coscheduling, weight: 1}]}
    reserve: {enabled: [{name: Reservation}, {name: LoadAwareScheduling}, {name: NodeNUMAResource}, {name: DeviceShare}, {name: Coscheduling}, {name: ElasticQuota}]}
    permit: {enabled: [{name: Coscheduling}]}
    preBind: {enabled: [{name: NodeNUMAResource}, {name: DeviceShare}, {name: Reservation}, {name: Coscheduling}, {name: DefaultPreBind}]}
    bind: {disabled: [{name: "*"}], enabled: [{name: Reservation}, {name: DefaultBinder}]}
    postBind: {enabled: [{name: Coscheduling}]}
EOF
  log "starting upstream's koord-scheduler ($upstream)"
  # In the cluster's network namespace, as the control plane's kube-scheduler: there the
  # kubeconfig's 127.0.0.1:6443 is the API server itself, not the host's relays (two socat
  # hops for every watch event and binding). Its secure port on that namespace's loopback, for
  # its metrics (delegated authentication and authorization through the API server, as the
  # admin's certificate is checked). nsenter execs it, so $! is the scheduler's pid.
  nsenter --net=/run/netns/koord-local "$upstream" --config="$out/upstream-scheduler.yaml" --bind-address=127.0.0.1 --secure-port=$upstream_port \
    --authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" --v=2 \
    > "$out/upstream-scheduler.log" 2>&1 &
  upstream_pid=$!
  sleep 10
  kill -0 "$upstream_pid" 2>/dev/null || { echo "upstream's koord-scheduler exited; see $out/upstream-scheduler.log" >&2; tail -20 "$out/upstream-scheduler.log" >&2; exit 1; }
fi

# The manager pod holding the lease.
manager_pod() {
  local holder
  holder=$(kubectl -n koordinator-system get lease koordinator-manager -o jsonpath='{.spec.holderIdentity}')
  echo "${holder%%_*}"
}

# The manager holding the lease, as a host pid (the kubelet's containers are host processes).
manager_pid() {
  local pod
  pod=$(manager_pod)
  for pid in $(pgrep -f '^/koord-manager' || true); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "HOSTNAME=$pod"; then
      echo "$pid"; return 0
    fi
  done
  echo "no process for the manager pod $pod" >&2
  return 1
}

# kube-scheduler's own account of its scheduling algorithm (filters, extenders, scores; not the
# binding, which runs apart): the count and total seconds of
# scheduler_scheduling_algorithm_duration_seconds, summed over the given NETNS:PORT targets of
# secure ports, read with the admin's client certificate; and the same for the attempts that
# placed a pod (scheduler_scheduling_attempt_duration_seconds, result="scheduled": the cycle
# and the binding, which an extender's bindVerb takes over). Each process runs one profile, so
# the metrics need no profile filter. Prints "RUNS SECONDS PLACED PLACED_SECONDS".
PKI=/var/lib/koord-local/pki
scheduler_timings() {
  local target
  for target in "$@"; do
    local in_netns=(nsenter --net="${target%:*}")
    # The host's own namespace needs no nsenter (and /proc/1 may not be ours to enter).
    [ "${target%:*}" = host ] && in_netns=()
    "${in_netns[@]}" curl -sk --max-time 10 --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
      "https://127.0.0.1:${target##*:}/metrics" || echo "scheduler metrics at $target: unreadable" >&2
  done | awk '
    /^scheduler_scheduling_algorithm_duration_seconds_count/ { count += $2 }
    /^scheduler_scheduling_algorithm_duration_seconds_sum/ { seconds += $2 }
    /^scheduler_scheduling_attempt_duration_seconds_count[{]/ && /result="scheduled"/ { placed += $2 }
    /^scheduler_scheduling_attempt_duration_seconds_sum[{]/ && /result="scheduled"/ { placed_seconds += $2 }
    END { printf "%d %.6f %d %.6f\n", count, seconds, placed, placed_seconds }'
}
# The secure-port targets of a scheduler name: the control plane's kube-scheduler in the
# cluster's namespace; the chart's kube-scheduler containers in their pods' namespaces;
# upstream's koord-scheduler in the cluster's namespace too.
scheduler_targets() {
  case "$1" in
    default-scheduler) echo /run/netns/koord-local:10259 ;;
    koord-scheduler)
      local pod pid
      for pod in ${extender_pods//,/ }; do
        for pid in $(pgrep -x kube-scheduler || true); do
          if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "HOSTNAME=$pod"; then
            echo "/proc/$pid/ns/net:10259"
          fi
        done
      done ;;
    koord-scheduler-upstream) echo /run/netns/koord-local:$upstream_port ;;
  esac
}

if [ -z "$only" ]; then
  log "the real koordlet's writes (180 s, before any simulated node exists)"
  "${BENCH[@]}" reporters --seconds 180 | tee -a "$results"
fi

# Adds a scheduler's own figures to a run's ROW, from its timings BEFORE and AFTER the run:
# per algorithm run (failed attempts included) its mean, and the part of it spent inside our
# extender's Filter and Score; per placed pod its attempt with binding.
with_timings() {
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])
n, s, placed, placed_s = (b - a for a, b in zip(map(float, sys.argv[2].split()), map(float, sys.argv[3].split())))
if n > 0:
  r["algorithm_runs"] = int(n); r["algorithm_ms_mean"] = s * 1000 / n
  if "extender_cycle_seconds" in r: r["extender_cycle_ms_per_run"] = r["extender_cycle_seconds"] * 1000 / n
if placed > 0: r["placed_attempt_ms_mean"] = placed_s * 1000 / placed
print(json.dumps(r))' "$1" "$2" "$3"
}

# One timed run: run_schedule SCHEDULER LABEL SCHEDULE-OPTIONS...
run_schedule() {
  local scheduler=$1 label=$2; shift 2
  local extender=() reserve=(--reserve 1) targets before after row
  [ "$scheduler" = koord-scheduler ] && extender=(--extender-pods "$extender_pods")
  # kube-scheduler alone knows nothing of Reservations.
  [ "$scheduler" = default-scheduler ] && reserve=()
  mapfile -t targets < <(scheduler_targets "$scheduler")
  before=$(scheduler_timings "${targets[@]}")
  row=$("${BENCH[@]}" schedule --scheduler "$scheduler" --namespace scale-bench "$@" \
    --label "$label" "${extender[@]}" "${reserve[@]}")
  after=$(scheduler_timings "${targets[@]}")
  with_timings "$row" "$before" "$after" | tee -a "$results"
}

# One timed run of every scheduler at once, their pods interleaved (the same pod of the mix for
# each, back to back): run_interleaved LABEL SCHEDULE-OPTIONS... A row per scheduler. No
# Reservations (kube-scheduler alone would not know them).
run_interleaved() {
  local label=$1; shift
  local list scheduler targets rows row
  local -A before after
  list=$(IFS=,; echo "${schedulers[*]}")
  for scheduler in "${schedulers[@]}"; do
    mapfile -t targets < <(scheduler_targets "$scheduler")
    before[$scheduler]=$(scheduler_timings "${targets[@]}")
  done
  rows=$("${BENCH[@]}" schedule --scheduler "$list" --namespace scale-bench "$@" --label "$label" \
    --extender-pods "$extender_pods" --extender-scheduler koord-scheduler)
  for scheduler in "${schedulers[@]}"; do
    mapfile -t targets < <(scheduler_targets "$scheduler")
    after[$scheduler]=$(scheduler_timings "${targets[@]}")
  done
  while IFS= read -r row; do
    scheduler=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["scheduler"])' "$row")
    with_timings "$row" "${before[$scheduler]}" "${after[$scheduler]}" | tee -a "$results"
  done <<< "$rows"
}
extender_pods=$(kubectl -n koordinator-system get pods -l koord-app=koord-scheduler \
  -o jsonpath='{.items[*].metadata.name}' | tr ' ' ,)
IFS=, read -r -a counts <<< "$nodes_list"
for count in "${counts[@]}"; do
  prefix=scale$count
  log "== $count nodes"
  "${BENCH[@]}" cleanup --prefix "$prefix" > /dev/null
  uptime | tee "$out/load-$count-before.txt" >&2
  ready_timeout=()
  [ -n "$only" ] && ready_timeout=(--ready-timeout 0)
  "${BENCH[@]}" nodes --prefix "$prefix" --count "$count" "${ready_timeout[@]}" | tee -a "$results"
  "${BENCH[@]}" converge --prefix "$prefix" --count "$count" --manager-pid "$(manager_pid)" \
    --manager-pod "$(manager_pod)" --timeout 600 \
    | tee -a "$results"
  if [ -n "$only" ]; then
    uptime | tee "$out/load-$count-after.txt" >&2
    "${BENCH[@]}" cleanup --prefix "$prefix" | tee -a "$results"
    continue
  fi
  "${BENCH[@]}" heartbeat --prefix "$prefix" --count "$count" --interval 60 2> "$out/heartbeat-$count.log" &
  heartbeat_pid=$!
  schedulers=(default-scheduler koord-scheduler)
  [ -n "$upstream" ] && schedulers+=(koord-scheduler-upstream)
  for scheduler in "${schedulers[@]}"; do
    run_schedule "$scheduler" "$scheduler burst @$count" --pods "$pods"
  done
  # The paced runs come after every burst, with the schedulers interleaved: the machine's and
  # the API server's load drift during a run (heartbeats, the bursts' leftovers, this machine's
  # two cores shared by everything), and schedulers measured one after the other, each at its
  # own moment, could not be told apart from that drift. --paced-pods is per scheduler,
  # --paced-rate the creations of all of them together.
  for round in $(seq 1 "$paced_rounds"); do
    run_interleaved "paced#$round @$count" --pods "$paced_pods" --rate "$paced_rate"
  done
  kill "$heartbeat_pid" 2>/dev/null || true
  heartbeat_pid=""
  uptime | tee "$out/load-$count-after.txt" >&2
  "${BENCH[@]}" cleanup --prefix "$prefix" | tee -a "$results"
done

python3 - "$results" "$manager_qps" "$manager_burst" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print()
for r in rows:
    if r["part"] == "reporters":
        print("real koordlet writes per second per 1,000 nodes: NodeMetric status %.2f, NodeMetric %.2f, NRT %.2f"
              % (r["nodemetrics/status_writes_per_second_per_1000_nodes"],
                 r["nodemetrics_writes_per_second_per_1000_nodes"],
                 r["noderesourcetopologies_writes_per_second_per_1000_nodes"]))
print()
print("%-40s %6s %6s %7s %8s %8s %8s %6s %7s %7s %6s %9s" % ("scheduling run", "pods", "bound", "pods/s", "p50 ms", "p90 ms", "p99 ms", "runs", "alg ms", "ext ms", "share", "placed ms"))
for r in rows:
    if r["part"] == "schedule":
        l = r["latency_ms"]
        alg = r.get("algorithm_ms_mean")
        ext = r.get("extender_cycle_ms_per_run")
        placed = r.get("placed_attempt_ms_mean")
        print("%-40s %6d %6d %7.1f %8.1f %8.1f %8.1f %6s %7s %7s %6s %9s" % (r["label"], r["pods"], r["bound"], r["pods_per_second"],
              l["p50"], l["p90"], l["p99"], r.get("algorithm_runs", "-"),
              "%.2f" % alg if alg is not None else "-", "%.2f" % ext if ext is not None else "-",
              "%.0f%%" % (100 * ext / alg) if alg and ext is not None else "-",
              "%.2f" % placed if placed is not None else "-"))
print("runs, alg ms: the scheduler's algorithm runs (failed attempts included) and their mean, from its own metrics;")
print("ext ms: time inside our extender's Filter and Score per run, from the extender's metrics; share: ext / alg;")
print("placed ms: the scheduler's mean attempt for the pods it placed, binding included, from its own metrics")
print()
# The paced runs are interleaved: within one, every scheduler met the same pods at the same moments.
paced = {}
for r in rows:
    if r["part"] == "schedule" and "interleaved_with" in r:
        paced.setdefault(r["label"].split(" ", 1)[1], {})[r["scheduler"]] = r["latency_ms"]
for run, by in paced.items():
    alone = by.get("default-scheduler")
    if not alone:
        continue
    for name in ("koord-scheduler", "koord-scheduler-upstream"):
        if name in by:
            print("%-40s p50 %.2fx  p90 %.2fx  p99 %.2fx  of kube-scheduler alone's" % ("%s %s" % (name, run),
                  by[name]["p50"] / alone["p50"], by[name]["p90"] / alone["p90"], by[name]["p99"] / alone["p99"]))
if paced:
    print("(interleaved paced runs: the pods of every scheduler created back to back, so the machine's load fell on all alike)")
    print()
print("%-40s %9s %9s %15s" % ("Reservations", "placed", "seconds", "owners in one"))
for r in rows:
    if r["part"] == "schedule" and "owner_pods" in r and "interleaved_with" not in r:
        placed = "%d/%d" % (r["reservations_placed"], r["reservations"]) if "reservations" in r else "-"
        seconds = "%.1f" % r["reservations_seconds"] if "reservations_seconds" in r else "-"
        print("%-40s %9s %9s %15s" % (r["label"], placed, seconds, "%d/%d" % (r["owner_pods_in_reservation"], r["owner_pods_bound"])))
print("placed: Reservations the scheduler placed before the pods came (kube-scheduler alone gets none); seconds: creation")
print("to the last placed; owners in one: owner pods bound into a Reservation / owner pods bound")
print()
# Where the machine's two CPUs went in each run (first creation to last binding), per bound pod.
components = ["kube-apiserver", "etcd", "kube-scheduler", "koord-scheduler", "koord-manager", "kwok", "koord-scale-ben", "koordlet"]
print("%-40s %6s %6s %7s" % ("CPU ms per bound pod", "window", "cores", "all") + "".join(" %9s" % c[:9] for c in components))
# An interleaved run's schedulers share one window: one line for all of them, over all they bound.
cpu_runs = {}
for r in rows:
    if r["part"] == "schedule" and r.get("cpu_seconds") and r.get("cpu_window_seconds"):
        label = r["label"].split(" ", 1)[1] + " (all)" if "interleaved_with" in r else r["label"]
        run = cpu_runs.setdefault(label, {"cpu": r["cpu_seconds"], "window": r["cpu_window_seconds"], "bound": 0})
        run["bound"] += r["bound"]
for label, run in cpu_runs.items():
    cpu, window, bound = run["cpu"], run["window"], run["bound"]
    if bound:
        print("%-40s %5.0fs %6.2f %7.1f" % (label, window, sum(cpu.values()) / window, 1000 * sum(cpu.values()) / bound)
              + "".join(" %9.1f" % (1000 * cpu.get(c, 0) / bound) for c in components))
print("window: first creation to last binding, in whole seconds of sampling; cores: CPU seconds of every process / window;")
print("kube-scheduler: every kube-scheduler process (the control plane's and the chart's); koord-scheduler: ours")
print("and upstream's; koord-scale-ben: the harness creating and watching the pods")
print()
for r in rows:
    if r["part"] == "converge":
        print("manager @%d nodes (client limit %s/s, burst %s): converged in %.1f s (NodeMetrics written in %.1f s), %d node-status writes (%.1f/s; %s by the manager), CPU %.1f s, RSS %.0f MiB, sent %.0f KiB/s"
              % (r["nodes"], sys.argv[2], sys.argv[3], r["seconds"], r["metrics_write_seconds"], r["node_status_writes"], r["node_status_writes_per_second"], "%d" % r["manager_node_status_writes"] if "manager_node_status_writes" in r else "?",
                 r.get("manager_cpu_seconds", float("nan")), r.get("manager_rss_bytes", 0) / 2**20,
                 r.get("manager_sent_bytes_per_second", 0) / 1024))
EOF
log "results in $results"
