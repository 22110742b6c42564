//! Where self-managed certificates live: a Secret (upstream's default) or a
//! directory (upstream's `fs` writer), and the files the server reads.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta};

use super::{
    Artifacts, CA_CERT_NAME, CA_KEY_NAME, CertError, SERVER_CERT_NAME, SERVER_CERT_NAME_2,
    SERVER_KEY_NAME, SERVER_KEY_NAME_2, SERVING_CERT_RENEW_AHEAD, generate, is_valid_for,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Where generated certificates are kept.
#[derive(Clone)]
pub enum CertStore {
    Secret {
        client: kube::Client,
        namespace: String,
        name: String,
    },
    Dir(PathBuf),
}

/// The outcome of one ensure round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub artifacts: Artifacts,
    /// New certificates were generated and stored this round.
    pub rotated: bool,
}

/// The certificates in the store, generating (first run) or regenerating
/// (invalid, or expiring within [`SERVING_CERT_RENEW_AHEAD`]) as needed.
pub async fn ensure_cert(
    store: &CertStore,
    dns_name: &str,
    now: SystemTime,
) -> Result<Ensured, StoreError> {
    let existing = store.read().await?;
    let (stored, version) = match existing {
        Some(found) => found,
        None => {
            let fresh = generate(dns_name, None, now)?;
            match store.create(&fresh).await? {
                true => {
                    tracing::info!(dns_name, "generated webhook CA and serving certificate");
                    return Ok(Ensured {
                        artifacts: fresh,
                        rotated: true,
                    });
                }
                // Another replica created it first: use theirs.
                false => store.read().await?.unwrap_or_default(),
            }
        }
    };
    if is_valid_for(&stored, dns_name, now + SERVING_CERT_RENEW_AHEAD) {
        return Ok(Ensured {
            artifacts: stored,
            rotated: false,
        });
    }
    tracing::info!(
        dns_name,
        "webhook certificate is invalid or expiring, regenerating"
    );
    let ca = (!stored.ca_key.is_empty() && !stored.ca_cert.is_empty())
        .then_some((stored.ca_key.as_str(), stored.ca_cert.as_str()));
    let fresh = generate(dns_name, ca, now)?;
    store.replace(&fresh, version).await?;
    Ok(Ensured {
        artifacts: fresh,
        rotated: true,
    })
}

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> String {
    data.get(key)
        .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
        .unwrap_or_default()
}

/// The Secret data upstream writes: both file-name conventions for the pair.
pub fn secret_data(artifacts: &Artifacts) -> BTreeMap<String, ByteString> {
    artifact_files(artifacts)
        .into_iter()
        .map(|(name, content)| (name.to_owned(), ByteString(content.as_bytes().to_vec())))
        .collect()
}

fn artifact_files(artifacts: &Artifacts) -> [(&'static str, &str); 6] {
    [
        (CA_KEY_NAME, artifacts.ca_key.as_str()),
        (CA_CERT_NAME, artifacts.ca_cert.as_str()),
        (SERVER_KEY_NAME, artifacts.key.as_str()),
        (SERVER_KEY_NAME_2, artifacts.key.as_str()),
        (SERVER_CERT_NAME, artifacts.cert.as_str()),
        (SERVER_CERT_NAME_2, artifacts.cert.as_str()),
    ]
}

impl CertStore {
    fn secret_error(namespace: &str, name: &str, source: kube::Error) -> StoreError {
        StoreError::Api {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }
    }

    /// The stored certificates and the Secret's resourceVersion; `None` when absent.
    async fn read(&self) -> Result<Option<(Artifacts, Option<String>)>, StoreError> {
        match self {
            CertStore::Secret {
                client,
                namespace,
                name,
            } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secret = api
                    .get_opt(name)
                    .await
                    .map_err(|e| Self::secret_error(namespace, name, e))?;
                Ok(secret.map(|secret| {
                    let data = secret.data.unwrap_or_default();
                    (
                        Artifacts {
                            ca_key: text(&data, CA_KEY_NAME),
                            ca_cert: text(&data, CA_CERT_NAME),
                            cert: text(&data, SERVER_CERT_NAME),
                            key: text(&data, SERVER_KEY_NAME),
                        },
                        secret.metadata.resource_version,
                    )
                }))
            }
            CertStore::Dir(dir) => read_dir_artifacts(dir).map(|found| found.map(|a| (a, None))),
        }
    }

    /// Creates the store; `false` when it already existed.
    async fn create(&self, artifacts: &Artifacts) -> Result<bool, StoreError> {
        match self {
            CertStore::Secret {
                client,
                namespace,
                name,
            } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    },
                    data: Some(secret_data(artifacts)),
                    ..Default::default()
                };
                match api.create(&super::write_params(), &secret).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(err) => Err(Self::secret_error(namespace, name, err)),
                }
            }
            CertStore::Dir(dir) => write_dir_artifacts(dir, artifacts).map(|()| true),
        }
    }

    async fn replace(
        &self,
        artifacts: &Artifacts,
        version: Option<String>,
    ) -> Result<(), StoreError> {
        match self {
            CertStore::Secret {
                client,
                namespace,
                name,
            } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        resource_version: version,
                        ..Default::default()
                    },
                    data: Some(secret_data(artifacts)),
                    ..Default::default()
                };
                api.replace(name, &super::write_params(), &secret)
                    .await
                    .map(|_| ())
                    .map_err(|e| Self::secret_error(namespace, name, e))
            }
            CertStore::Dir(dir) => write_dir_artifacts(dir, artifacts),
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes the six files, each replaced atomically (write aside, rename).
/// Private keys are created owner-only (0600) and certificates 0644 (less
/// the umask): the mode is set when the file is created, so a key is never
/// readable by others, not even for a moment.
pub fn write_dir_artifacts(dir: &Path, artifacts: &Artifacts) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    for (name, content) in artifact_files(artifacts) {
        let path = dir.join(name);
        let staging = dir.join(format!(".{name}.tmp"));
        let mode = if is_private_key(name) { 0o600 } else { 0o644 };
        write_new_file(&staging, content.as_bytes(), mode)?;
        std::fs::rename(&staging, &path).map_err(io_error(&path))?;
    }
    Ok(())
}

fn is_private_key(name: &str) -> bool {
    [CA_KEY_NAME, SERVER_KEY_NAME, SERVER_KEY_NAME_2].contains(&name)
}

/// Creates `path` afresh with `mode` and writes `content`. A file left there
/// (by a crash, or planted: it may be a link) is removed first, and the new
/// one is created exclusively, so neither its mode nor a link target is
/// inherited.
fn write_new_file(path: &Path, content: &[u8], mode: u32) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_owned(),
                source,
            });
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(content).map_err(io_error(path))?;
    file.sync_all().map_err(io_error(path))
}

/// Reads all four PEMs from a directory; `None` when any is missing.
pub fn read_dir_artifacts(dir: &Path) -> Result<Option<Artifacts>, StoreError> {
    let read = |name: &str| -> Result<Option<String>, StoreError> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    };
    let (Some(ca_key), Some(ca_cert), Some(cert), Some(key)) = (
        read(CA_KEY_NAME)?,
        read(CA_CERT_NAME)?,
        read(SERVER_CERT_NAME)?,
        read(SERVER_KEY_NAME)?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Artifacts {
        ca_key,
        ca_cert,
        cert,
        key,
    }))
}

/// The serving pair of a provided directory: `tls.crt`/`tls.key`
/// (cert-manager, Secret volume) or else `cert.pem`/`key.pem`.
pub fn read_provided_pair(dir: &Path) -> Result<(String, String), StoreError> {
    let mut last_error = None;
    for (cert, key) in [
        (SERVER_CERT_NAME_2, SERVER_KEY_NAME_2),
        (SERVER_CERT_NAME, SERVER_KEY_NAME),
    ] {
        let cert_path = dir.join(cert);
        let key_path = dir.join(key);
        match (
            std::fs::read_to_string(&cert_path),
            std::fs::read_to_string(&key_path),
        ) {
            (Ok(cert), Ok(key)) => return Ok((cert, key)),
            (Err(source), _) => {
                last_error = Some(StoreError::Io {
                    path: cert_path,
                    source,
                })
            }
            (_, Err(source)) => {
                last_error = Some(StoreError::Io {
                    path: key_path,
                    source,
                })
            }
        }
    }
    Err(last_error.unwrap_or_else(|| StoreError::Io {
        path: dir.to_owned(),
        source: io::Error::new(io::ErrorKind::NotFound, "no certificate pair"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "koord-manager-cert-{label}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn private_keys_are_written_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("modes");
        let artifacts = generate("svc.ns.svc", None, SystemTime::now()).unwrap();
        // A key file left world-readable by an older version, and a stale
        // staging file, are both replaced by owner-only files.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SERVER_KEY_NAME), "old").unwrap();
        std::fs::set_permissions(
            dir.join(SERVER_KEY_NAME),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::write(dir.join(format!(".{SERVER_KEY_NAME_2}.tmp")), "stale").unwrap();
        write_dir_artifacts(&dir, &artifacts).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(dir.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        for key in [CA_KEY_NAME, SERVER_KEY_NAME, SERVER_KEY_NAME_2] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        // Certificates are public: 0644 less the umask.
        for cert in [CA_CERT_NAME, SERVER_CERT_NAME, SERVER_CERT_NAME_2] {
            assert_eq!(mode(cert) & 0o600, 0o600, "{cert}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.join(SERVER_KEY_NAME)).unwrap(),
            artifacts.key
        );
        // A second write (rotation) keeps the modes.
        write_dir_artifacts(&dir, &artifacts).unwrap();
        assert_eq!(mode(SERVER_KEY_NAME), 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn dir_store_generates_keeps_and_rotates() {
        let dir = temp_dir("store");
        let store = CertStore::Dir(dir.clone());
        let dns = "svc.ns.svc";
        let now = SystemTime::now();
        let first = ensure_cert(&store, dns, now).await.unwrap();
        assert!(first.rotated);
        let again = ensure_cert(&store, dns, now).await.unwrap();
        assert!(!again.rotated);
        assert_eq!(again.artifacts, first.artifacts);
        assert_eq!(read_provided_pair(&dir).unwrap().0, first.artifacts.cert);

        // Close to expiry (or a new DNS name) means a new serving certificate.
        let later = now + super::super::CERT_LIFETIME - std::time::Duration::from_secs(30 * 86_400);
        let rotated = ensure_cert(&store, dns, later).await.unwrap();
        assert!(rotated.rotated);
        assert_ne!(rotated.artifacts.cert, first.artifacts.cert);
        let renamed = ensure_cert(&store, "other.ns.svc", now).await.unwrap();
        assert!(renamed.rotated);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
