#![allow(clippy::unwrap_used)]
//! Cluster reachability against a fake API server and a closed port.

use std::time::{Duration, Instant};

use koord_common::cluster::{ClusterError, ClusterOptions, ConfigOrigin, connect};
use koord_common::testing::{FakeApiServer, TempDir, closed_local_addr, write_kubeconfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_from_a_fake_api_server() {
    let server = FakeApiServer::start().unwrap();
    let dir = TempDir::new("cluster-ok").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &server.url()).unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(kubeconfig.clone()),
        timeout: Duration::from_secs(10),
    };
    let cluster = connect(&options).await.unwrap();
    assert_eq!(cluster.server_version, "v1.35.0-fake");
    assert_eq!(cluster.origin, ConfigOrigin::KubeconfigFlag(kubeconfig));
    assert!(
        cluster.api_server.starts_with(&server.url()),
        "{}",
        cluster.api_server
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|line| line.starts_with("GET /version"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_is_reported_with_url_and_source() {
    let closed = closed_local_addr().unwrap();
    let dir = TempDir::new("cluster-closed").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{closed}")).unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(kubeconfig.clone()),
        timeout: Duration::from_secs(10),
    };
    let started = Instant::now();
    let err = connect(&options).await.err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("cannot reach the Kubernetes API server at"),
        "{message}"
    );
    assert!(message.contains(&closed.to_string()), "{message}");
    assert!(
        message.contains(&kubeconfig.display().to_string()),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_server_builds_a_tls_client_without_panicking() {
    // Nothing listens; the point is that building the rustls client works.
    let closed = closed_local_addr().unwrap();
    let dir = TempDir::new("cluster-tls").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("https://{closed}")).unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(kubeconfig),
        timeout: Duration::from_secs(5),
    };
    let err = connect(&options).await.err().unwrap();
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_kubeconfig_names_the_path() {
    let dir = TempDir::new("cluster-missing").unwrap();
    let missing = dir.path().join("does-not-exist");
    let options = ClusterOptions {
        kubeconfig: Some(missing.clone()),
        timeout: Duration::from_secs(5),
    };
    let err = connect(&options).await.err().unwrap();
    assert!(matches!(err, ClusterError::LoadConfig { .. }), "{err}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_hits_the_timeout() {
    // Accepts connections but never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = TempDir::new("cluster-silent").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{addr}")).unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(kubeconfig),
        timeout: Duration::from_millis(700),
    };
    let started = Instant::now();
    let err = connect(&options).await.err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("no answer within 700ms"), "{err}");
    drop(listener);
}
