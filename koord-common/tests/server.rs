#![allow(clippy::unwrap_used)]
//! Starts the real health/metrics server on OS-picked ports and talks HTTP/1.1 to it.

use std::time::Duration;

use koord_common::health::{FnCheck, StatusCheck};
use koord_common::testing::http_get;
use koord_common::{
    Component, ComponentContext, Endpoints, ListenAddr, ListenerSpec, ShutdownReason,
};

fn context() -> ComponentContext {
    ComponentContext::new(Component {
        name: "koordlet",
        metric_prefix: "koordlet",
    })
}

fn loopback_any_port() -> ListenAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_health_readiness_and_metrics_then_stops() {
    let context = context();
    let server = context
        .start_server(vec![ListenerSpec::new(loopback_any_port(), Endpoints::ALL)])
        .await
        .unwrap();
    let addr = server.listeners()[0].addr;
    assert_ne!(addr.port(), 0, "the actual bound port is reported");

    // Alive and ready with only the built-in check.
    let healthz = http_get(addr, "/healthz").await.unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
    let readyz = http_get(addr, "/readyz").await.unwrap();
    assert_eq!((readyz.status, readyz.body.as_str()), (200, "ok"));

    // A failing readiness check makes /readyz 503 and is named in the body, /healthz stays 200.
    let informer = StatusCheck::failing("waiting for the first pod list");
    context
        .health
        .add_readiness_check("states-informer", informer.clone());
    context
        .health
        .add_readiness_check("backend", FnCheck(|| Ok(())));
    let readyz = http_get(addr, "/readyz").await.unwrap();
    assert_eq!(readyz.status, 503);
    assert!(
        readyz
            .body
            .contains("[-]states-informer failed: waiting for the first pod list"),
        "{}",
        readyz.body
    );
    assert!(readyz.body.contains("[+]backend ok"), "{}", readyz.body);
    assert!(
        readyz.body.ends_with("readyz check failed"),
        "{}",
        readyz.body
    );
    assert_eq!(
        readyz.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(http_get(addr, "/healthz").await.unwrap().status, 200);

    // Single checks by name.
    let one = http_get(addr, "/readyz/states-informer").await.unwrap();
    assert_eq!(one.status, 503);
    assert_eq!(http_get(addr, "/readyz/backend").await.unwrap().status, 200);
    assert_eq!(http_get(addr, "/readyz/nope").await.unwrap().status, 404);

    informer.set_passing();
    let readyz = http_get(addr, "/readyz?verbose").await.unwrap();
    assert_eq!(readyz.status, 200);
    assert!(
        readyz.body.contains("[+]states-informer ok"),
        "{}",
        readyz.body
    );

    let metrics = http_get(addr, "/metrics").await.unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    assert!(
        metrics.body.contains("koordlet_build_info{version=\""),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("process_start_time_seconds "),
        "{}",
        metrics.body
    );
    assert_eq!(http_get(addr, "/nothing-here").await.unwrap().status, 404);

    context
        .shutdown
        .trigger(ShutdownReason::Requested("test over".into()));
    let reason = tokio::time::timeout(
        Duration::from_secs(10),
        context.wait_for_shutdown(Some(server)),
    )
    .await
    .unwrap();
    assert_eq!(reason, ShutdownReason::Requested("test over".into()));
    assert!(
        http_get(addr, "/healthz").await.is_err(),
        "listener is closed after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_health_and_metrics_listeners_serve_only_their_routes() {
    let context = context();
    let health_addr = loopback_any_port();
    let metrics_addr: ListenAddr = "127.0.0.2:0".parse().unwrap_or(health_addr);
    let server = context
        .start_server(vec![
            ListenerSpec::new(metrics_addr, Endpoints::METRICS),
            ListenerSpec::new(health_addr, Endpoints::HEALTH),
        ])
        .await
        .unwrap();
    let health = server.addr_for(true).unwrap();
    let metrics = server.addr_for(false).unwrap();
    if health != metrics {
        assert_eq!(http_get(health, "/metrics").await.unwrap().status, 404);
        assert_eq!(http_get(metrics, "/healthz").await.unwrap().status, 404);
    }
    assert_eq!(http_get(health, "/healthz").await.unwrap().status, 200);
    assert_eq!(http_get(metrics, "/metrics").await.unwrap().status, 200);
    context
        .shutdown
        .trigger(ShutdownReason::Requested("done".into()));
    context.wait_for_shutdown(Some(server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_address_twice_becomes_one_listener() {
    let context = context();
    let addr = loopback_any_port();
    let server = context
        .start_server(vec![
            ListenerSpec::new(addr, Endpoints::METRICS),
            ListenerSpec::new(addr, Endpoints::HEALTH),
        ])
        .await
        .unwrap();
    assert_eq!(server.listeners().len(), 1);
    let bound = server.listeners()[0].addr;
    assert_eq!(http_get(bound, "/healthz").await.unwrap().status, 200);
    assert_eq!(http_get(bound, "/metrics").await.unwrap().status, 200);
    context
        .shutdown
        .trigger(ShutdownReason::Requested("done".into()));
    context.wait_for_shutdown(Some(server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_routes_are_served_and_busy_port_is_a_clear_error() {
    let context = context();
    let extra = axum::Router::new().route(
        "/internal-metrics",
        axum::routing::get(|| async { "internal" }),
    );
    let server = context
        .start_server(vec![
            ListenerSpec::new(loopback_any_port(), Endpoints::ALL).with_routes(extra),
        ])
        .await
        .unwrap();
    let addr = server.listeners()[0].addr;
    let internal = http_get(addr, "/internal-metrics").await.unwrap();
    assert_eq!((internal.status, internal.body.as_str()), (200, "internal"));

    let err = context
        .start_server(vec![ListenerSpec::new(
            ListenAddr::new(addr),
            Endpoints::ALL,
        )])
        .await
        .err()
        .unwrap();
    let message = err.to_string();
    assert!(
        message.contains(&addr.to_string()) && message.contains("health and metrics"),
        "{message}"
    );

    context
        .shutdown
        .trigger(ShutdownReason::Requested("done".into()));
    context.wait_for_shutdown(Some(server)).await;
}
