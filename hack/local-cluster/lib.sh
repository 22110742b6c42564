# Settings and helpers of the local cluster (sourced by local-cluster.sh and images.sh).
# Every value can be overridden from the environment; the defaults are what the README documents.

LC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LC_REPO=$(cd "$LC_HERE/../.." && pwd)

K8S_VERSION=${KOORD_LOCAL_K8S_VERSION:-v1.35.4}
ETCD_VERSION=${KOORD_LOCAL_ETCD_VERSION:-v3.6.16}
# KWOK simulates extra nodes (`local-cluster.sh kwok up`); built only when asked for.
KWOK_VERSION=${KOORD_LOCAL_KWOK_VERSION:-v0.8.0}
# Built binaries, by version: kept by `down`, so a second `up` builds nothing.
LC_CACHE=${KOORD_LOCAL_CLUSTER_CACHE:-/var/cache/koord-local-cluster}
# Everything a running cluster owns (PKI, etcd data, logs, containerd state); `down` deletes it.
LC_DIR=${KOORD_LOCAL_CLUSTER_DIR:-/var/lib/koord-local}
# The whole cluster lives in its own network namespace: bridge, veths and the iptables rules of
# kube-proxy never touch the host's network, and deleting the namespace removes them all.
LC_NETNS=${KOORD_LOCAL_NETNS:-koord-local}
LC_NODE=${KOORD_LOCAL_NODE_NAME:-koord-local-node}
# The API server as seen from the host: a relay on loopback into the namespace.
LC_API_PORT=${KOORD_LOCAL_API_PORT:-6443}
# Simulated nodes renew their Lease every quarter of this (kwok, like the kubelet). The scale
# benchmark lengthens it: 5,000 nodes renewing every 10 s are 500 writes/s, more than a 2-CPU
# machine's API server serves beside everything else.
LC_KWOK_LEASE_SECONDS=${KOORD_LOCAL_KWOK_LEASE_SECONDS:-40}
# kube-controller-manager's --node-monitor-grace-period (empty: its default). It must exceed the
# simulated nodes' renewal interval, or they turn NotReady between renewals.
LC_NODE_MONITOR_GRACE_PERIOD=${KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD:-}
# Addresses inside the namespace only (nothing outside it can reach or see them).
LC_BRIDGE=koord0
LC_POD_CIDR=10.244.0.0/24
LC_NODE_IP=10.244.0.1
LC_SERVICE_CIDR=10.96.0.0/16
LC_KUBERNETES_SERVICE_IP=10.96.0.1
LC_CONTAINERD_VERSION=1.7
# The kubelet's real paths, so the chart's default hostPath mounts (kubelet dir, NRI socket) work.
LC_KUBELET_DIR=/var/lib/kubelet
LC_NRI_SOCKET=/var/run/nri/nri.sock
LC_KUBEPODS=/kubepods
# Node directories that the chart's hostPath volumes (koordlet's socket and hook registration dirs,
# the kubelet config dir) or the kubelet create; down removes those that up did not find.
LC_HOST_DIRS="/var/run/koordlet /etc/runtime/hookserver.d /etc/runtime /etc/kubernetes /var/run/nri /var/log/pods /var/log/containers"

LC_K8S_BIN=$LC_CACHE/kubernetes-$K8S_VERSION/bin
LC_ETCD_BIN=$LC_CACHE/etcd-$ETCD_VERSION/bin
LC_KWOK_BIN=$LC_CACHE/kwok-$KWOK_VERSION/bin
# Simulated nodes carry this annotation (kwok manages only them) and a NoSchedule taint of the same
# key, so only pods that tolerate it (a test's own) land there.
LC_KWOK_NODE_KEY=kwok.x-k8s.io/node
LC_PKI=$LC_DIR/pki
LC_LOGS=$LC_DIR/logs
LC_PIDS=$LC_DIR/pids
LC_CONF=$LC_DIR/conf
LC_KUBECONFIG=$LC_DIR/admin.kubeconfig
# The node-runtime kit's root: its images and extracted containerd stay cached; `down` removes
# only its run/ dir (the running containerd's state).
LC_NR_ROOT=$LC_CACHE/node-runtime
LC_MARK=$LC_DIR/.koord-local-cluster

lc_log() { echo "[local-cluster $(date +%H:%M:%S)] $*" >&2; }
lc_die() { lc_log "ERROR: $*"; exit 1; }

[[ $LC_DIR =~ ^(/[A-Za-z0-9._+-]+){2,}$ && $LC_DIR != *..* ]] \
  || lc_die "KOORD_LOCAL_CLUSTER_DIR must be an absolute path at least two levels deep"
[[ $LC_CACHE =~ ^(/[A-Za-z0-9._+-]+){2,}$ && $LC_CACHE != *..* ]] \
  || lc_die "KOORD_LOCAL_CLUSTER_CACHE must be an absolute path at least two levels deep"
# containerd's sockets live under $LC_NR_ROOT/run: unix socket paths are limited to 108 bytes.
[[ $LC_KWOK_LEASE_SECONDS =~ ^[1-9][0-9]{0,4}$ ]] \
  || lc_die "KOORD_LOCAL_KWOK_LEASE_SECONDS must be a number of seconds (1-99999)"
[[ -z $LC_NODE_MONITOR_GRACE_PERIOD || $LC_NODE_MONITOR_GRACE_PERIOD =~ ^[1-9][0-9]{0,5}s$ ]] \
  || lc_die "KOORD_LOCAL_NODE_MONITOR_GRACE_PERIOD must be seconds with an s suffix (e.g. 900s)"
[ ${#LC_CACHE} -le 50 ] || lc_die "KOORD_LOCAL_CLUSTER_CACHE is too long for unix socket paths (max 50 chars)"
[ ${#LC_DIR} -le 50 ] || lc_die "KOORD_LOCAL_CLUSTER_DIR is too long for unix socket paths (max 50 chars)"

# lc_in_netns CMD...: run CMD in the cluster's network namespace. nsenter, not `ip netns exec`:
# the latter remounts /sys, which would hide the cgroup hierarchies from the kubelet.
lc_in_netns() { nsenter --net="/run/netns/$LC_NETNS" -- "$@"; }

lc_kubectl() { "$LC_K8S_BIN/kubectl" --kubeconfig "$LC_KUBECONFIG" "$@"; }

# lc_alive PID: the process exists and is not a zombie.
lc_alive() {
  local state
  state=$(sed 's/.*) //' 2>/dev/null < "/proc/$1/stat") && [ "${state%% *}" != Z ]
}
