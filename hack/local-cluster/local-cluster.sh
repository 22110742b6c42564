#!/usr/bin/env bash
# A real one-node Kubernetes on this machine, built from Kubernetes' published Go modules.
#   hack/local-cluster/up        build (cached by version) and start the cluster
#   hack/local-cluster/down      stop it and remove everything it made
#   hack/local-cluster/status    what runs, and the node's conditions
#   local-cluster.sh images      build and import the project's images (images.sh)
#   local-cluster.sh install     helm install the chart with its defaults and wait for it
#   local-cluster.sh logs DIR    copy every component's log and the cluster's state to DIR
#   local-cluster.sh restart containerd|kubelet
#   local-cluster.sh settle [MILLI]  wait until the node's batch-cpu allocatable is >= MILLI
#   local-cluster.sh kwok up|node NAME [CPU] [MEMORY]|down   simulated nodes (KWOK)
# See README.md beside this file.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd=${1:-}
case "$(basename "$0")" in up | down | status) cmd=$(basename "$0") ;; *) shift || true ;; esac

# ---------------------------------------------------------------- prerequisites

ensure_packages() {
  local missing=()
  command -v iptables >/dev/null || missing+=(iptables)
  command -v socat >/dev/null || missing+=(socat)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v nsenter >/dev/null || missing+=(util-linux)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v curl >/dev/null || missing+=(curl)
  command -v go >/dev/null || lc_die "go is required (the machine image provides Go 1.26)"
  if [ ${#missing[@]} -gt 0 ]; then
    lc_log "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # containerd 1.7, runc, CNI plugins, the pause image: the node-runtime kit installs them.
  NR_ROOT=$LC_NR_ROOT NR_KUBEPODS=$LC_KUBEPODS bash "$LC_REPO/hack/node-runtime/setup.sh" "$LC_CONTAINERD_VERSION" >/dev/null
  [ -x /usr/lib/cni/bridge ] || lc_die "/usr/lib/cni/bridge missing (Debian containernetworking-plugins)"
}

# ---------------------------------------------------------------- build (cached by version)

LDFLAGS_K8S="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/') \
-X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/') \
-X k8s.io/component-base/version.gitTreeState=clean"
K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

build() {
  # The build modules pin one version each; refuse a mismatch instead of building something else.
  grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$LC_HERE/k8s/go.mod" \
    || lc_die "hack/local-cluster/k8s/go.mod does not pin k8s.io/kubernetes $K8S_VERSION"
  grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION\$" "$LC_HERE/etcd/go.mod" \
    || lc_die "hack/local-cluster/etcd/go.mod does not pin etcd $ETCD_VERSION"
  local have=1 c
  for c in "${K8S_COMPONENTS[@]}"; do [ -x "$LC_K8S_BIN/$c" ] || have=0; done
  if [ $have = 0 ]; then
    lc_log "building Kubernetes $K8S_VERSION (${K8S_COMPONENTS[*]}); cold this takes a while on 2 cores"
    local t0=$SECONDS tmp=$LC_K8S_BIN.tmp pkgs=()
    for c in "${K8S_COMPONENTS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    rm -rf "$tmp" && mkdir -p "$tmp"
    (cd "$LC_HERE/k8s" && go build -mod=readonly -trimpath -ldflags "$LDFLAGS_K8S" -o "$tmp/" "${pkgs[@]}")
    rm -rf "$LC_K8S_BIN" && mv "$tmp" "$LC_K8S_BIN"
    lc_log "Kubernetes built in $((SECONDS - t0)) s"
  fi
  if [ ! -x "$LC_ETCD_BIN/etcd" ]; then
    lc_log "building etcd $ETCD_VERSION"
    local t0=$SECONDS tmp=$LC_ETCD_BIN.tmp
    rm -rf "$tmp" && mkdir -p "$tmp"
    (cd "$LC_HERE/etcd" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
    rm -rf "$LC_ETCD_BIN" && mv "$tmp" "$LC_ETCD_BIN"
    lc_log "etcd built in $((SECONDS - t0)) s"
  fi
}

# KWOK, only for `kwok up`: the suite's simulated nodes (a second node for the descheduler).
build_kwok() {
  grep -q "sigs.k8s.io/kwok $KWOK_VERSION\$" "$LC_HERE/kwok/go.mod" \
    || lc_die "hack/local-cluster/kwok/go.mod does not pin sigs.k8s.io/kwok $KWOK_VERSION"
  [ -x "$LC_KWOK_BIN/kwok" ] && return 0
  lc_log "building kwok $KWOK_VERSION"
  local t0=$SECONDS tmp=$LC_KWOK_BIN.tmp
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "$LC_HERE/kwok" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
  rm -rf "$LC_KWOK_BIN" && mv "$tmp" "$LC_KWOK_BIN"
  lc_log "kwok built in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- PKI

# cert NAME CN ORG SANS: a key and a CA-signed certificate (client and server usage).
cert() {
  local name=$1 cn=$2 org=$3 sans=$4 subj="/CN=$2"
  [ -n "$org" ] && subj="/O=$org/CN=$cn"
  openssl ecparam -name prime256v1 -genkey -noout -out "$LC_PKI/$name.key" 2>/dev/null
  openssl req -new -key "$LC_PKI/$name.key" -subj "$subj" -out "$LC_PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } > "$LC_PKI/$name.ext"
  openssl x509 -req -in "$LC_PKI/$name.csr" -CA "$LC_PKI/ca.crt" -CAkey "$LC_PKI/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$LC_PKI/$name.ext" -out "$LC_PKI/$name.crt" 2>/dev/null
  rm -f "$LC_PKI/$name.csr" "$LC_PKI/$name.ext"
}

# kubeconfig NAME CERT SERVER
kubeconfig() {
  local file=$LC_CONF/$1.kubeconfig
  [ "$1" = admin ] && file=$LC_KUBECONFIG
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: koord-local
  cluster:
    server: $3
    certificate-authority-data: $(base64 -w0 < "$LC_PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 < "$LC_PKI/$2.crt")
    client-key-data: $(base64 -w0 < "$LC_PKI/$2.key")
contexts:
- name: koord-local
  context: {cluster: koord-local, user: $1}
current-context: koord-local
EOF
  chmod 600 "$file"
}

pki() {
  mkdir -p "$LC_PKI" "$LC_CONF" && chmod 700 "$LC_PKI"
  (umask 077
    openssl ecparam -name prime256v1 -genkey -noout -out "$LC_PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$LC_PKI/ca.key" -subj "/CN=koord-local-ca" -days 365 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$LC_PKI/ca.crt" 2>/dev/null
    cert apiserver kube-apiserver "" \
      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$LC_NODE_IP,IP:$LC_KUBERNETES_SERVICE_IP"
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
    cert admin koord-local-admin system:masters ""
    cert controller-manager system:kube-controller-manager "" ""
    cert scheduler system:kube-scheduler "" ""
    cert kube-proxy system:kube-proxy "" ""
    # kwok writes the status of simulated nodes and of pods bound to them, and deletes those pods.
    cert kwok koord-local-kwok system:masters ""
    cert kubelet-client "system:node:$LC_NODE" system:nodes ""
    cert kubelet-serving "system:node:$LC_NODE" system:nodes "DNS:$LC_NODE,DNS:localhost,IP:$LC_NODE_IP,IP:127.0.0.1"
    # Service-account tokens: RSA, which every consumer of the JWKS accepts.
    openssl genrsa -out "$LC_PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$LC_PKI/sa.key" -pubout -out "$LC_PKI/sa.pub" 2>/dev/null
  )
  local inside="https://127.0.0.1:6443"
  kubeconfig admin admin "https://127.0.0.1:$LC_API_PORT"
  kubeconfig controller-manager controller-manager "$inside"
  kubeconfig scheduler scheduler "$inside"
  kubeconfig kube-proxy kube-proxy "$inside"
  kubeconfig kwok kwok "$inside"
  kubeconfig kubelet kubelet-client "$inside"
}

# ---------------------------------------------------------------- processes

# start NAME [--host] CMD...: run CMD in the background (in the namespace unless --host), log to
# $LC_LOGS/NAME.log, PID in $LC_PIDS/NAME. setsid: the cluster outlives the shell that started it.
start() {
  local name=$1; shift
  local wrap=(nsenter "--net=/run/netns/$LC_NETNS" --)
  if [ "$1" = --host ]; then wrap=(); shift; fi
  mkdir -p "$LC_LOGS" "$LC_PIDS"
  # The exec keeps $! the daemon's PID.
  (close_inherited_fds; exec setsid "${wrap[@]}" "$@") </dev/null >>"$LC_LOGS/$name.log" 2>&1 &
  echo $! > "$LC_PIDS/$name"
}

# A daemon keeps none of the caller's descriptors beyond stdin/stdout/stderr: a lock the caller
# holds (`flock LOCK hack/local-cluster/up`) would otherwise stay held for as long as the cluster
# runs, and a pipe a CI step reads would never reach end of file.
close_inherited_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

pid_of() { cat "$LC_PIDS/$1" 2>/dev/null; }
running() { local pid; pid=$(pid_of "$1") && [ -n "$pid" ] && lc_alive "$pid"; }

# stop NAME: TERM, then KILL after 15 s.
stop() {
  local pid; pid=$(pid_of "$1") || return 0
  if [ -n "$pid" ] && lc_alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do lc_alive "$pid" || break; sleep 0.1; done
    lc_alive "$pid" && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$LC_PIDS/$1"
}

# wait_for WHAT SECONDS CMD...: poll CMD every 0.5 s; on timeout, show the log and fail.
wait_for() {
  local what=$1 limit=$2 log=$3; shift 3
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      [ -f "$log" ] && tail -30 "$log" >&2
      lc_die "$what not ready within ${limit} s (log: $log)"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- mount propagation

# Every real node (systemd does it at boot) has / as a shared mount; the chart's koordlet asks for
# Bidirectional propagation on /sys/fs and /var/run/koordlet, which containerd refuses on private
# mounts. This machine boots without systemd, so up makes / shared and down makes it private again,
# as it found it.
mounts() {
  awk '$5 == "/" {print ($7 ~ /^shared:/) ? "shared" : "private"}' /proc/self/mountinfo > "$LC_DIR/root-propagation"
  awk '$7 ~ /^shared:/ {print $5}' /proc/self/mountinfo > "$LC_DIR/shared-mounts-before"
  if [ "$(cat "$LC_DIR/root-propagation")" = private ]; then
    mount --make-rshared /
  fi
}

mounts_restore() {
  if [ "$(cat "$LC_DIR/root-propagation" 2>/dev/null)" = private ]; then
    mount --make-rprivate /
    # Mounts that were shared before up stay shared.
    local m
    while read -r m; do [ -d "$m" ] && mount --make-shared "$m" 2>/dev/null; done < "$LC_DIR/shared-mounts-before"
  fi
}

# ---------------------------------------------------------------- network namespace

network() {
  # iproute2 makes /run/netns a mount of its own on first use; down undoes that if up caused it.
  grep -q " /run/netns " /proc/self/mountinfo || touch "$LC_DIR/made-run-netns"
  ip netns add "$LC_NETNS"
  lc_in_netns ip link set lo up
  # The bridge exists before the API server starts, because the node's address is on it; the CNI
  # bridge plugin then attaches every pod's veth to it.
  lc_in_netns ip link add "$LC_BRIDGE" type bridge
  lc_in_netns ip addr add "$LC_NODE_IP/24" dev "$LC_BRIDGE"
  lc_in_netns ip link set "$LC_BRIDGE" up
  # Service IPs are DNATed by kube-proxy; the route only lets host processes pick a source address.
  lc_in_netns ip route add "$LC_SERVICE_CIDR" dev "$LC_BRIDGE" src "$LC_NODE_IP"
  lc_in_netns sysctl -qw net.ipv4.ip_forward=1
  lc_in_netns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

# ---------------------------------------------------------------- containerd

containerd_up() {
  local nr_run=$LC_NR_ROOT/run bin
  bin=$(NR_ROOT=$LC_NR_ROOT bash -c ". '$LC_REPO/hack/node-runtime/lib.sh'; containerd_bin $LC_CONTAINERD_VERSION")
  rm -rf "$nr_run" && mkdir -p "$nr_run/nri/plugins" "$nr_run/nri/conf.d" "$LC_CONF/cni" "$(dirname "$LC_NRI_SOCKET")"
  echo "$bin" > "$nr_run/bin"
  # The kit's containerd settings (see hack/node-runtime/up.sh for why each is there), with a real
  # bridge network and NRI on the kubelet's usual socket path, where the chart's koordlet looks.
  cat > "$nr_run/config.toml" <<TOML
version = 2
root = "$nr_run/root"
state = "$nr_run/state"
[grpc]
  address = "$nr_run/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nr_run/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/koord/pause:local"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/bin/runc"
        Root = "$nr_run/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$LC_CONF/cni"
    max_conf_num = 1
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "$LC_NRI_SOCKET"
  plugin_path = "$nr_run/nri/plugins"
  plugin_config_path = "$nr_run/nri/conf.d"
TOML
  cat > "$LC_CONF/cni/10-koord-local.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "koord-local",
  "plugins": [
    {
      "type": "bridge", "bridge": "$LC_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$LC_DIR/cni-ipam",
        "ranges": [[{"subnet": "$LC_POD_CIDR", "rangeStart": "10.244.0.10", "gateway": "$LC_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  PATH=$bin:$PATH start containerd "$bin/containerd" --config "$nr_run/config.toml"
  # The kit's down.sh finds containerd by this file.
  cp "$LC_PIDS/containerd" "$nr_run/containerd.pid"
  wait_for containerd 30 "$LC_LOGS/containerd.log" \
    "$bin/ctr" --address "$nr_run/containerd.sock" version
  wait_for "NRI socket" 10 "$LC_LOGS/containerd.log" test -S "$LC_NRI_SOCKET"
  for image in pause busybox; do
    "$bin/ctr" --address "$nr_run/containerd.sock" -n k8s.io images import "$LC_NR_ROOT/images/$image.tar" >/dev/null
  done
}

ctr_cmd() { echo "$(cat "$LC_NR_ROOT/run/bin")/ctr --address $LC_NR_ROOT/run/containerd.sock"; }

# ---------------------------------------------------------------- control plane and node

etcd_up() {
  mkdir -p "$LC_DIR/etcd" && chmod 700 "$LC_DIR/etcd"
  # No fsync: a throwaway test cluster on a small VM; etcd's latency would otherwise dominate.
  start etcd "$LC_ETCD_BIN/etcd" --name koord-local --data-dir "$LC_DIR/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster koord-local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --unsafe-no-fsync --log-level warn
  wait_for etcd 30 "$LC_LOGS/etcd.log" lc_in_netns curl -sf http://127.0.0.1:2381/health
}

apiserver_up() {
  start kube-apiserver "$LC_K8S_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$LC_NODE_IP" \
    --service-cluster-ip-range="$LC_SERVICE_CIDR" \
    --client-ca-file="$LC_PKI/ca.crt" \
    --tls-cert-file="$LC_PKI/apiserver.crt" --tls-private-key-file="$LC_PKI/apiserver.key" \
    --kubelet-client-certificate="$LC_PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$LC_PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$LC_PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --service-account-key-file="$LC_PKI/sa.pub" --service-account-signing-key-file="$LC_PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true --enable-aggregator-routing=true --profiling=false
  # The relay: the host reaches the API server on its own loopback through a unix socket.
  start apiserver-relay-inner socat "UNIX-LISTEN:$LC_DIR/apiserver.sock,fork,unlink-early,mode=600" TCP:127.0.0.1:6443
  start apiserver-relay --host socat "TCP-LISTEN:$LC_API_PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$LC_DIR/apiserver.sock"
  wait_for kube-apiserver 120 "$LC_LOGS/kube-apiserver.log" lc_kubectl get --raw /readyz
}

controllers_up() {
  # --kube-api-qps/-burst above the defaults (20/30): the node lifecycle controller lifts the
  # not-ready taint of each new node with its own requests, and at the defaults 5,000 simulated
  # nodes stayed tainted for over ten minutes after they were Ready.
  local grace=()
  [ -n "$LC_NODE_MONITOR_GRACE_PERIOD" ] && grace=(--node-monitor-grace-period="$LC_NODE_MONITOR_GRACE_PERIOD")
  start kube-controller-manager "$LC_K8S_BIN/kube-controller-manager" \
    --kubeconfig="$LC_CONF/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$LC_CONF/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$LC_CONF/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$LC_PKI/sa.key" --root-ca-file="$LC_PKI/ca.crt" \
    --cluster-signing-cert-file="$LC_PKI/ca.crt" --cluster-signing-key-file="$LC_PKI/ca.key" \
    --service-cluster-ip-range="$LC_SERVICE_CIDR" --allocate-node-cidrs=false "${grace[@]}" \
    --kube-api-qps=100 --kube-api-burst=200
  # --v=2, the chart's scheduler.kubeScheduler.logLevel: the scale benchmark compares this
  # default-scheduler with the chart's kube-scheduler, so both log alike.
  start kube-scheduler "$LC_K8S_BIN/kube-scheduler" \
    --kubeconfig="$LC_CONF/scheduler.kubeconfig" \
    --authentication-kubeconfig="$LC_CONF/scheduler.kubeconfig" \
    --authorization-kubeconfig="$LC_CONF/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --v=2
}

kubelet_up() {
  [ -e "$LC_KUBELET_DIR" ] && [ ! -e "$LC_KUBELET_DIR/.koord-local-cluster" ] \
    && lc_die "$LC_KUBELET_DIR exists and is not the local cluster's: is another kubelet installed here?"
  mkdir -p "$LC_KUBELET_DIR" "$LC_DIR/pod-logs"
  touch "$LC_KUBELET_DIR/.koord-local-cluster" "$LC_DIR/owns-kubelet-dir"
  cat > "$LC_CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 only; Kubernetes 1.35 refuses it unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: unix://$LC_NR_ROOT/run/containerd.sock
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $LC_PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $LC_PKI/kubelet-serving.crt
tlsPrivateKeyFile: $LC_PKI/kubelet-serving.key
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $LC_DIR/pod-logs
failSwapOn: false
serializeImagePulls: false
# Nothing can be pulled here: never garbage-collect the imported images.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A dev or CI disk is mostly build output: evict pods for a nearly full disk only, in absolute
# terms (CI once lost koordlet to DiskPressure at 5% of a small disk). Every signal is listed
# so that none depends on how this kubelet version defaults a partial evictionHard.
evictionHard:
  memory.available: 200Mi
  nodefs.available: 1Gi
  nodefs.inodesFree: 1%
  imagefs.available: 1Gi
  imagefs.inodesFree: 1%
EOF
  start kubelet "$LC_K8S_BIN/kubelet" --config="$LC_CONF/kubelet.yaml" \
    --kubeconfig="$LC_CONF/kubelet.kubeconfig" --root-dir="$LC_KUBELET_DIR" \
    --hostname-override="$LC_NODE" --node-ip="$LC_NODE_IP" --v=2
}

kube_proxy_up() {
  cat > "$LC_CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $LC_CONF/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $LC_POD_CIDR
hostnameOverride: $LC_NODE
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# The conntrack table size is global, not per namespace: leave it alone.
conntrack: {maxPerCore: 0}
EOF
  start kube-proxy "$LC_K8S_BIN/kube-proxy" --config="$LC_CONF/kube-proxy.yaml"
}

node_ready() {
  lc_kubectl get node "$LC_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

# ---------------------------------------------------------------- commands

cmd_up() {
  [ "$(id -u)" = 0 ] || lc_die "up needs root (network namespace, cgroups, containerd)"
  [ -e "$LC_MARK" ] && lc_die "a local cluster already runs from $LC_DIR (status: hack/local-cluster/status; down first)"
  ip netns list | grep -qw "$LC_NETNS" && lc_die "network namespace $LC_NETNS exists: run hack/local-cluster/down first"
  local t0=$SECONDS
  ensure_packages
  build
  mkdir -p "$LC_DIR" && touch "$LC_MARK"
  # hostPath directories the chart's pods may create on the node: down removes the ones that
  # did not exist before up.
  local dir
  for dir in $LC_HOST_DIRS; do [ -e "$dir" ] || echo "$dir" >> "$LC_DIR/created-host-dirs"; done
  # A failure from here on leaves a partial cluster: take it down again.
  trap 'status=$?; if [ $status -ne 0 ]; then lc_log "up failed; logs in $LC_LOGS are removed by down, copy kept in ${LC_DIR}-failed-logs"; rm -rf "${LC_DIR}-failed-logs"; cp -r "$LC_LOGS" "${LC_DIR}-failed-logs" 2>/dev/null; cmd_down || true; fi' EXIT
  pki
  mounts
  network
  containerd_up
  etcd_up
  apiserver_up
  controllers_up
  kubelet_up
  kube_proxy_up
  wait_for "node $LC_NODE Ready" 180 "$LC_LOGS/kubelet.log" node_ready
  trap - EXIT
  lc_log "cluster up in $((SECONDS - t0)) s: export KUBECONFIG=$LC_KUBECONFIG"
  echo "KUBECONFIG=$LC_KUBECONFIG"
}

# unmount_below DIR: DIR and every mount below it, deepest first (the kubelet bind-mounts its root
# dir onto itself to make it shared).
unmount_below() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r | uniq |
    while read -r m; do umount -n "$m" 2>/dev/null || umount -n -l "$m" 2>/dev/null || true; done
}

cmd_down() {
  local t0=$SECONDS
  # The node first, so nothing recreates what the runtime's teardown removes.
  stop kwok
  stop kube-proxy
  stop kubelet
  if [ -d "$LC_NR_ROOT/run" ]; then
    NR_ROOT=$LC_NR_ROOT NR_KUBEPODS=$LC_KUBEPODS bash "$LC_REPO/hack/node-runtime/down.sh" \
      || lc_log "the node-runtime kit reported leftovers (listed above)"
  fi
  rm -f "$LC_PIDS/containerd"
  local name
  for name in kube-scheduler kube-controller-manager apiserver-relay apiserver-relay-inner kube-apiserver etcd; do
    stop "$name"
  done
  # The kubelet's volume mounts (secrets, projected tokens), deepest first.
  if [ -e "$LC_KUBELET_DIR/.koord-local-cluster" ] || [ -e "$LC_DIR/owns-kubelet-dir" ]; then
    unmount_below "$LC_KUBELET_DIR"
    rm -rf "$LC_KUBELET_DIR" || true
  fi
  # Pod cgroups the kubelet made that the runtime's teardown left (the kubepods tiers).
  local h
  for h in /sys/fs/cgroup/*; do
    [ -d "$h$LC_KUBEPODS" ] && find "$h$LC_KUBEPODS" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # Bridge, veths, addresses and every iptables rule live in the namespace and go with it.
  ip netns list | grep -qw "$LC_NETNS" && ip netns delete "$LC_NETNS"
  if [ -e "$LC_DIR/made-run-netns" ] && [ -z "$(ip netns list)" ]; then
    umount -n /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null
  fi
  if [ -f "$LC_DIR/created-host-dirs" ]; then
    local dir
    while read -r dir; do [ -n "$dir" ] && rm -rf "$dir"; done < "$LC_DIR/created-host-dirs"
  fi
  rm -f "$LC_NRI_SOCKET"
  rmdir "$(dirname "$LC_NRI_SOCKET")" 2>/dev/null || true
  mounts_restore
  if [ -d "$LC_DIR" ]; then
    unmount_below "$LC_DIR"
    rm -rf "$LC_DIR" || true
  fi
  local left=()
  ip netns list | grep -qw "$LC_NETNS" && left+=("network namespace $LC_NETNS")
  [ -e "$LC_DIR" ] && left+=("$LC_DIR")
  [ -e "$LC_KUBELET_DIR/.koord-local-cluster" ] && left+=("$LC_KUBELET_DIR")
  grep -qE " ($LC_KUBELET_DIR|$LC_DIR)(/| )" /proc/self/mountinfo && left+=("mounts under $LC_KUBELET_DIR or $LC_DIR")
  for h in /sys/fs/cgroup/*; do [ -d "$h$LC_KUBEPODS" ] && left+=("cgroup $h$LC_KUBEPODS"); done
  if pgrep -f "$LC_DIR/|$LC_CACHE/" >/dev/null; then left+=("processes: $(pgrep -f "$LC_DIR/|$LC_CACHE/" | tr '\n' ' ')"); fi
  if [ ${#left[@]} -gt 0 ]; then
    lc_log "leftovers after down: ${left[*]}"
    return 1
  fi
  lc_log "down in $((SECONDS - t0)) s, nothing left behind"
}

cmd_status() {
  if [ ! -e "$LC_MARK" ]; then echo "no local cluster (nothing under $LC_DIR)"; return 3; fi
  local name healthy=0
  for name in containerd etcd kube-apiserver apiserver-relay-inner apiserver-relay kube-controller-manager kube-scheduler kubelet kube-proxy; do
    if running "$name"; then printf '%-26s running (pid %s)\n' "$name" "$(pid_of "$name")"
    else printf '%-26s NOT RUNNING (log: %s)\n' "$name" "$LC_LOGS/$name.log"; healthy=1; fi
  done
  if lc_kubectl get --raw /readyz >/dev/null 2>&1; then echo "API server: ready at https://127.0.0.1:$LC_API_PORT"
  else echo "API server: not answering"; healthy=1; fi
  if [ -e "$LC_PIDS/kwok" ]; then
    if running kwok; then printf '%-26s running (pid %s)\n' kwok "$(pid_of kwok)"
    else printf '%-26s NOT RUNNING (log: %s)\n' kwok "$LC_LOGS/kwok.log"; healthy=1; fi
  fi
  lc_kubectl get nodes -o wide 2>/dev/null || true
  lc_kubectl get pods -A -o wide 2>/dev/null || true
  echo "KUBECONFIG=$LC_KUBECONFIG"
  return $healthy
}

cmd_images() {
  [ -S "$LC_NR_ROOT/run/containerd.sock" ] || lc_die "the cluster's containerd is not running (up first)"
  bash "$LC_HERE/images.sh" --address "$LC_NR_ROOT/run/containerd.sock" --ctr "$(cat "$LC_NR_ROOT/run/bin")/ctr" \
    --kube-scheduler "$LC_K8S_BIN/kube-scheduler" "$@"
}

cmd_install() {
  local helm
  helm=$("$LC_REPO/hack/helm.sh")
  # --reset-values: without it an upgrade given no values keeps the previous run's --set flags.
  "$helm" --kubeconfig "$LC_KUBECONFIG" upgrade --install koordinator "$LC_REPO/charts/koordinator" \
    --reset-values --wait --timeout "${KOORD_LOCAL_INSTALL_TIMEOUT:-5m}" "$@"
  # The webhooks serve only once koord-manager has written its CA bundle into their
  # configurations: until then the cluster is not ready for a pod of the suite.
  local deadline=$((SECONDS + 120)) bundle
  while :; do
    bundle=$(lc_kubectl get mutatingwebhookconfiguration koordinator-mutating-webhook-configuration \
      -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null || true)
    [ -n "$bundle" ] && break
    [ $SECONDS -lt $deadline ] || lc_die "koord-manager wrote no CA bundle into the webhook configurations within 120 s"
    sleep 1
  done
  lc_log "installed; the webhook configurations carry koord-manager's CA bundle"
}

cmd_logs() {
  local out=${1:?usage: local-cluster.sh logs DIR}
  mkdir -p "$out"
  cp -r "$LC_LOGS" "$out/components" 2>/dev/null || true
  cp -r "$LC_DIR/pod-logs" "$out/pod-logs" 2>/dev/null || true
  lc_kubectl get all,nodeslos,nodemetrics,noderesourcetopologies,reservations,podgroups,elasticquotas -A -o wide > "$out/objects.txt" 2>&1 || true
  lc_kubectl get nodes -o yaml > "$out/nodes.yaml" 2>&1 || true
  lc_kubectl get pods -A -o yaml > "$out/pods.yaml" 2>&1 || true
  lc_kubectl get events -A --sort-by=.lastTimestamp > "$out/events.txt" 2>&1 || true
  lc_log "logs copied to $out"
}

# settle [MILLI] [SECONDS]: wait until the node's batch-cpu allocatable is at least MILLI (default
# 500). koord-manager derives it from the node's measured usage, and koord-scheduler's LoadAware
# filters on the same usage: right after a build has held every CPU, BE and LS pods would wait
# until the next NodeMetric report shows the build gone.
cmd_settle() {
  local want=${1:-500} limit=${2:-240} deadline batch
  deadline=$((SECONDS + limit))
  while :; do
    batch=$(lc_kubectl get node "$LC_NODE" -o jsonpath='{.status.allocatable.kubernetes\.io/batch-cpu}' 2>/dev/null || true)
    [[ $batch =~ ^[0-9]+$ ]] || batch=0
    if [ "$batch" -ge "$want" ]; then lc_log "node settled: batch-cpu $batch"; return 0; fi
    if [ $SECONDS -ge $deadline ]; then lc_log "node not settled after ${limit} s: batch-cpu $batch (continuing)"; return 0; fi
    sleep 5
  done
}

cmd_restart() {
  case "${1:-}" in
    containerd)
      # Only containerd itself: the shims and so the containers keep running, as in a real restart.
      local pid; pid=$(pid_of containerd)
      kill "$pid"; for _ in $(seq 100); do lc_alive "$pid" || break; sleep 0.1; done
      local bin; bin=$(cat "$LC_NR_ROOT/run/bin")
      PATH=$bin:$PATH start containerd "$bin/containerd" --config "$LC_NR_ROOT/run/config.toml"
      cp "$LC_PIDS/containerd" "$LC_NR_ROOT/run/containerd.pid"
      wait_for containerd 30 "$LC_LOGS/containerd.log" "$bin/ctr" --address "$LC_NR_ROOT/run/containerd.sock" version
      ;;
    kubelet) stop kubelet; kubelet_up ;;
    *) lc_die "usage: local-cluster.sh restart containerd|kubelet" ;;
  esac
}

simulated_node_ready() {
  local ready taints
  ready=$(lc_kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') || return 1
  [ "$ready" = True ] || return 1
  # The node lifecycle controller taints a new node not-ready (NoSchedule) and lifts the taint a
  # monitoring pass after the node turns Ready; a pod scheduled in between is refused for it.
  taints=$(lc_kubectl get node "$1" -o jsonpath='{.spec.taints[*].key}') || return 1
  ! grep -q 'node.kubernetes.io/' <<<"$taints"
}

# kwok up: build (cached) and start kwok, which simulates the nodes annotated $LC_KWOK_NODE_KEY=fake.
# kwok node NAME [CPU] [MEMORY]: create (or keep) such a node, Ready within seconds.
# kwok down: delete the simulated nodes and stop kwok.
cmd_kwok() {
  [ -e "$LC_MARK" ] || lc_die "no local cluster (up first)"
  case "${1:-}" in
    up)
      build_kwok
      if running kwok; then lc_log "kwok already runs (pid $(pid_of kwok))"; return 0; fi
      # Its own server (metrics, health) on the namespace's loopback only.
      start kwok "$LC_KWOK_BIN/kwok" --kubeconfig="$LC_CONF/kwok.kubeconfig" \
        --config="$LC_HERE/kwok/stages.yaml" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector="$LC_KWOK_NODE_KEY=fake" \
        --node-lease-duration-seconds="$LC_KWOK_LEASE_SECONDS" --cidr=10.245.0.0/16 --node-ip=10.245.0.1 \
        --server-address=127.0.0.1:10247
      wait_for kwok 60 "$LC_LOGS/kwok.log" lc_in_netns curl -sf http://127.0.0.1:10247/healthz
      lc_log "kwok runs; add a simulated node with: local-cluster.sh kwok node NAME [CPU] [MEMORY]"
      ;;
    node)
      local name=${2:?usage: local-cluster.sh kwok node NAME [CPU] [MEMORY]} cpu=${3:-8} memory=${4:-32Gi}
      [[ $name =~ ^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$ ]] || lc_die "invalid node name $name"
      [[ $cpu =~ ^[0-9]+m?$ && $memory =~ ^[0-9]+(Ki|Mi|Gi)?$ ]] || lc_die "invalid capacity $cpu / $memory"
      running kwok || lc_die "kwok is not running (local-cluster.sh kwok up)"
      lc_kubectl apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations: {$LC_KWOK_NODE_KEY: fake}
  labels: {kubernetes.io/hostname: $name, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
spec:
  taints: [{key: $LC_KWOK_NODE_KEY, value: fake, effect: NoSchedule}]
status:
  capacity: {cpu: "$cpu", memory: "$memory", pods: "110"}
  allocatable: {cpu: "$cpu", memory: "$memory", pods: "110"}
NODE
      wait_for "simulated node $name Ready and untainted" 60 "$LC_LOGS/kwok.log" simulated_node_ready "$name"
      lc_log "simulated node $name Ready ($cpu CPU, $memory)"
      ;;
    down)
      lc_kubectl delete nodes -l type=kwok --ignore-not-found >/dev/null || true
      stop kwok
      ;;
    *) lc_die "usage: local-cluster.sh kwok up|node NAME [CPU] [MEMORY]|down" ;;
  esac
}

case "$cmd" in
  up) cmd_up ;;
  kwok) cmd_kwok "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  build) ensure_packages; build ;;
  images) cmd_images "$@" ;;
  install) cmd_install "$@" ;;
  logs) cmd_logs "$@" ;;
  restart) cmd_restart "$@" ;;
  settle) cmd_settle "$@" ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
