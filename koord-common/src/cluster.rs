//! Finding and reaching the Kubernetes API server.
//!
//! The configuration source is chosen in controller-runtime's order (which the
//! upstream Go binaries use): `--kubeconfig`, then `KUBECONFIG`, then the
//! in-cluster service account, then `~/.kube/config`.

use std::error::Error as StdError;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Environment variable naming kubeconfig files.
pub const KUBECONFIG_ENV: &str = "KUBECONFIG";
/// Set by the kubelet inside every pod.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
pub const SERVICE_PORT_ENV: &str = "KUBERNETES_SERVICE_PORT";
/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Default bound on how long start-up waits for the API server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the client configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    KubeconfigFlag(PathBuf),
    KubeconfigEnv(String),
    InCluster { host: String, port: String },
    DefaultKubeconfig(PathBuf),
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigOrigin::KubeconfigFlag(path) => {
                write!(f, "kubeconfig {} from --kubeconfig", path.display())
            }
            ConfigOrigin::KubeconfigEnv(value) => {
                write!(f, "kubeconfig {value} from {KUBECONFIG_ENV}")
            }
            ConfigOrigin::InCluster { host, port } => write!(
                f,
                "in-cluster config ({SERVICE_HOST_ENV}={host}, {SERVICE_PORT_ENV}={port}, credentials in {SERVICE_ACCOUNT_DIR})"
            ),
            ConfigOrigin::DefaultKubeconfig(path) => {
                write!(f, "kubeconfig {} (default location)", path.display())
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no Kubernetes client configuration found: --kubeconfig not given, {KUBECONFIG_ENV} not set, \
         not running in a pod ({SERVICE_HOST_ENV} not set) and {default_kubeconfig} does not exist"
    )]
    NoConfig { default_kubeconfig: String },
    #[error("cannot load the Kubernetes client configuration from {origin}: {reason}")]
    LoadConfig {
        origin: ConfigOrigin,
        reason: String,
    },
    #[error(
        "cannot build a Kubernetes client for the API server at {api_server} ({origin}): {reason}"
    )]
    BuildClient {
        api_server: String,
        origin: ConfigOrigin,
        reason: String,
    },
    #[error("cannot reach the Kubernetes API server at {api_server} ({origin}): {reason}")]
    Unreachable {
        api_server: String,
        origin: ConfigOrigin,
        reason: String,
    },
}

/// How to reach the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// An explicit kubeconfig path (the upstream `--kubeconfig` flag).
    pub kubeconfig: Option<PathBuf>,
    /// Bound on loading the configuration plus the first API call.
    pub timeout: Duration,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// Flags for reaching the cluster, flattened by the binaries that need one.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ClusterArgs {
    /// Path to a kubeconfig; without it KUBECONFIG, the in-cluster config and ~/.kube/config are tried in turn.
    #[arg(long = "kubeconfig", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// How long start-up waits for the Kubernetes API server to answer (e.g. 10s, 500ms, 1m).
    #[arg(long = "cluster-connect-timeout", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub cluster_connect_timeout: Duration,
}

impl ClusterArgs {
    pub fn options(&self) -> ClusterOptions {
        ClusterOptions {
            kubeconfig: self.kubeconfig.clone(),
            timeout: self.cluster_connect_timeout,
        }
    }
}

/// Parses a Go-style duration: `0`, or numbers each followed by `ms`, `s`,
/// `m` or `h` (e.g. `10s`, `1.5m`, `1h30m`), as Go's `time.ParseDuration`
/// reads the values upstream manifests pass.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(format!(
            "invalid duration {input:?}: expected a number followed by ms, s, m or h"
        ));
    }
    let mut seconds = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let value: f64 = number.parse().map_err(|_| {
            format!("invalid duration {input:?}: expected a number followed by ms, s, m or h")
        })?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, remaining) = after.split_at(unit_end);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(format!(
                    "invalid duration {input:?}: unit must be ms, s, m or h"
                ));
            }
        };
        seconds += value * scale;
        rest = remaining;
    }
    Duration::try_from_secs_f64(seconds).map_err(|err| format!("invalid duration {input:?}: {err}"))
}

/// A client whose API server answered.
#[derive(Clone)]
pub struct ConnectedCluster {
    pub client: kube::Client,
    /// The configuration `client` was built from, for a second client with
    /// other settings (e.g. one that does not retry 429 answers).
    pub config: kube::Config,
    pub api_server: String,
    pub origin: ConfigOrigin,
    /// The server's `gitVersion`, e.g. `v1.35.0`.
    pub server_version: String,
}

/// Picks the configuration source without reading any file.
pub fn resolve_origin(
    kubeconfig_flag: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
    home: Option<PathBuf>,
) -> Result<ConfigOrigin, ClusterError> {
    if let Some(path) = kubeconfig_flag {
        return Ok(ConfigOrigin::KubeconfigFlag(path.to_path_buf()));
    }
    if let Some(value) = env(KUBECONFIG_ENV).filter(|value| !value.is_empty()) {
        return Ok(ConfigOrigin::KubeconfigEnv(
            value.to_string_lossy().into_owned(),
        ));
    }
    if let Some(host) = env(SERVICE_HOST_ENV).filter(|value| !value.is_empty()) {
        let port = env(SERVICE_PORT_ENV)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(ConfigOrigin::InCluster {
            host: host.to_string_lossy().into_owned(),
            port,
        });
    }
    let default_path = home.map(|home| home.join(".kube").join("config"));
    match default_path {
        Some(path) if path.exists() => Ok(ConfigOrigin::DefaultKubeconfig(path)),
        Some(path) => Err(ClusterError::NoConfig {
            default_kubeconfig: path.display().to_string(),
        }),
        None => Err(ClusterError::NoConfig {
            default_kubeconfig: "~/.kube/config".to_string(),
        }),
    }
}

/// Builds a client from KUBECONFIG or the in-cluster config and checks that the
/// API server answers `GET /version` within `timeout`.
pub async fn connect_to_cluster(timeout: Duration) -> Result<kube::Client, ClusterError> {
    connect(&ClusterOptions {
        kubeconfig: None,
        timeout,
    })
    .await
    .map(|cluster| cluster.client)
}

/// Like [`connect_to_cluster`], with an optional explicit kubeconfig and details of what answered.
pub async fn connect(options: &ClusterOptions) -> Result<ConnectedCluster, ClusterError> {
    let origin = resolve_origin(
        options.kubeconfig.as_deref(),
        |name| std::env::var_os(name),
        std::env::home_dir(),
    )?;
    let deadline = tokio::time::Instant::now() + options.timeout;

    let config = match tokio::time::timeout_at(deadline, load_config(&origin)).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(ClusterError::LoadConfig {
                origin,
                reason: format!("not loaded within {:?}", options.timeout),
            });
        }
    };
    let api_server = config.cluster_url.to_string();
    let client =
        kube::Client::try_from(config.clone()).map_err(|err| ClusterError::BuildClient {
            api_server: api_server.clone(),
            origin: origin.clone(),
            reason: error_chain(&err),
        })?;

    match tokio::time::timeout_at(deadline, client.apiserver_version()).await {
        Ok(Ok(info)) => Ok(ConnectedCluster {
            client,
            config,
            api_server,
            origin,
            server_version: info.git_version,
        }),
        Ok(Err(err)) => Err(ClusterError::Unreachable {
            api_server,
            origin,
            reason: error_chain(&err),
        }),
        Err(_) => Err(ClusterError::Unreachable {
            api_server,
            origin,
            reason: format!("no answer within {:?}", options.timeout),
        }),
    }
}

async fn load_config(origin: &ConfigOrigin) -> Result<kube::Config, ClusterError> {
    let load_error = |reason: String| ClusterError::LoadConfig {
        origin: origin.clone(),
        reason,
    };
    let options = KubeConfigOptions::default();
    let kubeconfig = match origin {
        ConfigOrigin::InCluster { .. } => {
            return kube::Config::incluster().map_err(|err| load_error(error_chain(&err)));
        }
        ConfigOrigin::KubeconfigFlag(path) | ConfigOrigin::DefaultKubeconfig(path) => {
            Kubeconfig::read_from(path).map_err(|err| load_error(error_chain(&err)))?
        }
        ConfigOrigin::KubeconfigEnv(_) => match Kubeconfig::from_env() {
            Ok(Some(kubeconfig)) => kubeconfig,
            Ok(None) => return Err(load_error(format!("{KUBECONFIG_ENV} names no file"))),
            Err(err) => return Err(load_error(error_chain(&err))),
        },
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|err| load_error(error_chain(&err)))
}

/// Joins an error and its sources into one line, skipping repeats.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(err) = current {
        let text = err.to_string();
        if !parts.iter().any(|seen| seen.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

/// Clears an object's managed fields before it is cached. No component reads
/// them, and on Nodes and Pods (every writer of a status adds an entry) they
/// are a large share of each object: at 5,000 nodes they were about two thirds
/// of koord-manager's memory.
pub fn drop_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn flag_beats_env_beats_in_cluster_beats_home() {
        let all = env_of(&[
            (KUBECONFIG_ENV, "/env/config"),
            (SERVICE_HOST_ENV, "10.0.0.1"),
            (SERVICE_PORT_ENV, "443"),
        ]);
        assert_eq!(
            resolve_origin(Some(Path::new("/flag/config")), &all, None).unwrap(),
            ConfigOrigin::KubeconfigFlag("/flag/config".into())
        );
        assert_eq!(
            resolve_origin(None, &all, None).unwrap(),
            ConfigOrigin::KubeconfigEnv("/env/config".into())
        );
        let in_cluster = env_of(&[
            (KUBECONFIG_ENV, ""),
            (SERVICE_HOST_ENV, "10.0.0.1"),
            (SERVICE_PORT_ENV, "443"),
        ]);
        assert_eq!(
            resolve_origin(None, in_cluster, None).unwrap(),
            ConfigOrigin::InCluster {
                host: "10.0.0.1".into(),
                port: "443".into()
            }
        );
    }

    #[test]
    fn home_kubeconfig_is_used_only_when_it_exists() {
        let home = std::env::temp_dir().join(format!("koord-common-home-{}", std::process::id()));
        let kube_dir = home.join(".kube");
        std::fs::create_dir_all(&kube_dir).unwrap();
        let err = resolve_origin(None, env_of(&[]), Some(home.clone())).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("KUBECONFIG not set"), "{message}");
        assert!(
            message.contains(&kube_dir.join("config").display().to_string()),
            "{message}"
        );

        std::fs::write(kube_dir.join("config"), "apiVersion: v1\nkind: Config\n").unwrap();
        assert_eq!(
            resolve_origin(None, env_of(&[]), Some(home.clone())).unwrap(),
            ConfigOrigin::DefaultKubeconfig(kube_dir.join("config"))
        );
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("10d").is_err());
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1m0.5s"), Ok(Duration::from_millis(60_500)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1h30").unwrap_err().contains("unit"));
        assert!(parse_duration("00").unwrap_err().contains("unit"));
    }

    #[test]
    fn origins_say_where_they_looked() {
        let text = ConfigOrigin::InCluster {
            host: "10.0.0.1".into(),
            port: "443".into(),
        }
        .to_string();
        assert!(
            text.contains("KUBERNETES_SERVICE_HOST=10.0.0.1") && text.contains(SERVICE_ACCOUNT_DIR)
        );
        assert_eq!(
            ConfigOrigin::KubeconfigEnv("/tmp/k".into()).to_string(),
            "kubeconfig /tmp/k from KUBECONFIG"
        );
    }

    #[test]
    fn error_chain_includes_sources_once() {
        let inner =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let outer = ClusterError::LoadConfig {
            origin: ConfigOrigin::KubeconfigFlag("/x".into()),
            reason: "boom".into(),
        };
        assert_eq!(error_chain(&inner), "connection refused");
        assert!(error_chain(&outer).starts_with("cannot load"));
    }

    #[test]
    fn managed_fields_are_dropped_and_the_rest_of_the_metadata_kept() {
        use k8s_openapi::api::core::v1::Node;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("7".into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kubelet".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        };
        drop_managed_fields(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
    }
}
