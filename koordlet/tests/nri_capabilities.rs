#![allow(clippy::unwrap_used)]
//! `koordlet capabilities` and a running koordlet: an NRI socket that
//! accepts connections is not the same as koordlet's plugin being
//! registered, and the command says which is which by asking the daemon
//! (`koordlet_nri_connected` on its `--addr`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use koord_common::testing::{
    HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, http_get_blocking,
    isolated_command,
};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");

fn capabilities(addr: &str, socket: &Path, format: &str) -> String {
    let output = Command::new(BIN)
        .arg(format!("--addr={addr}"))
        .arg(format!(
            "--runtime-hooks-nri-socket-path={}",
            socket.display()
        ))
        .args(["capabilities", "--output", format])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn nri_entry(addr: &str, socket: &Path) -> Value {
    let text = capabilities(addr, socket, "json");
    let json: Value = serde_json::from_str(&text).unwrap();
    json["nri"].clone()
}

fn metric(addr: std::net::SocketAddr, name: &str) -> Option<f64> {
    let body = http_get_blocking(addr, "/metrics", HTTP).ok()?.body;
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn an_accepting_socket_without_a_registered_plugin_is_reported_as_such() {
    let dir = TempDir::new("nri-caps-daemon").unwrap();
    let pods_file = dir.path().join("pods.json");
    std::fs::write(
        &pods_file,
        r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#,
    )
    .unwrap();
    // A "runtime" whose socket takes connections but never answers the
    // registration: the kernel queues the connections in the backlog.
    let socket = dir.path().join("nri.sock");
    let _runtime = std::os::unix::net::UnixListener::bind(&socket).unwrap();

    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-name=nri-caps-node",
            "--runtime-hooks-nri-connect-timeout=1s",
        ])
        .arg(format!(
            "--runtime-hooks-nri-socket-path={}",
            socket.display()
        ))
        .arg("--pods-file")
        .arg(&pods_file);
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let addr = koordlet.serving_addr("health and metrics", WAIT).unwrap();
    // The plugin tried (after the states informer synced) and is not registered.
    let deadline = Instant::now() + WAIT;
    while metric(addr, "koordlet_nri_connections_total").unwrap_or(0.0) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the plugin never connected:\n{}",
            koordlet.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(addr, "koordlet_nri_connected"), Some(0.0));

    let nri = nri_entry(&addr.to_string(), &socket);
    assert_eq!(nri["accepting"], true, "{nri}");
    assert_eq!(nri["pluginConnected"], false, "{nri}");
    let detail = nri["pluginDetail"].as_str().unwrap();
    assert!(detail.contains(&addr.to_string()), "{detail}");
    assert!(detail.contains("not registered"), "{detail}");
    let table = capabilities(&addr.to_string(), &socket, "table");
    let row = table
        .lines()
        .find(|line| line.split_whitespace().next() == Some("nri.pluginConnected"))
        .unwrap_or_else(|| panic!("no nri.pluginConnected row in\n{table}"));
    assert_eq!(row.split_whitespace().nth(1), Some("false"), "{row}");

    koordlet.stop_cleanly("TERM", WAIT).unwrap();

    // No daemon any more: unknown, and the output says the socket alone proves nothing.
    let nri = nri_entry(&addr.to_string(), &socket);
    assert_eq!(nri["accepting"], true, "{nri}");
    assert_eq!(nri["pluginConnected"], Value::Null, "{nri}");
    let detail = nri["pluginDetail"].as_str().unwrap();
    assert!(detail.contains("no koordlet answered"), "{detail}");
    assert!(detail.contains("koordlet_nri_connected"), "{detail}");
}
