// Build module for the local cluster's etcd (test infrastructure only).
module koordinator.local/local-cluster/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.16
