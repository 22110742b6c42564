//! Cluster end-to-end suite. It runs against the cluster in `KUBECONFIG`
//! (created by `hack/kind-e2e.sh` where Docker and kind exist). When no
//! cluster is reachable every test says so plainly and skips.

pub mod cluster;
pub mod cri;
pub mod node_runtime;
pub mod proxy_harness;

use std::time::Duration;

use kube::Client;

/// The image of the suite's test pods: a busybox with `sh`, `sleep` and the usual applets. The
/// local cluster (hack/local-cluster) has only the node-runtime kit's, since nothing can be
/// pulled there; `KOORD_E2E_BUSYBOX_IMAGE` names another (hack/kind-e2e.sh uses `busybox:1.36`).
pub fn busybox_image() -> String {
    std::env::var("KOORD_E2E_BUSYBOX_IMAGE")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| "localhost/koord/busybox:local".to_string())
}

/// Why the suite is not running against a cluster.
#[derive(Debug)]
pub struct NoCluster(pub String);

impl std::fmt::Display for NoCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A client for the cluster in `KUBECONFIG` (or in-cluster config), after
/// checking the API server answers within `timeout`.
pub async fn cluster(timeout: Duration) -> Result<Client, NoCluster> {
    let where_ = std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into());
    let client = Client::try_default()
        .await
        .map_err(|error| NoCluster(format!("no kubeconfig usable at {where_}: {error}")))?;
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(error)) => Err(NoCluster(format!(
            "API server from {where_} did not answer: {error}"
        ))),
        Err(_) => Err(NoCluster(format!(
            "API server from {where_} did not answer within {timeout:?}"
        ))),
    }
}

/// Returns the cluster client, or prints a SKIP line and returns `None`.
/// Set `KOORD_E2E_REQUIRE_CLUSTER=1` to turn a missing cluster into a failure.
pub async fn cluster_or_skip(test: &str) -> Option<Client> {
    match cluster(Duration::from_secs(5)).await {
        Ok(client) => Some(client),
        Err(reason) => {
            if std::env::var("KOORD_E2E_REQUIRE_CLUSTER").is_ok_and(|value| value == "1") {
                panic!("{test}: a cluster is required but unreachable: {reason}");
            }
            eprintln!("SKIP {test}: no Kubernetes cluster reachable ({reason})");
            None
        }
    }
}
