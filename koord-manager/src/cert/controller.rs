//! The certificate loops every replica runs: self-managed (ensure the
//! certificates, load them, write the CA bundle; again every resync period)
//! and provided (load the mounted pair; reload when the files change).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use koord_common::{Shutdown, StatusCheck};

use super::ReloadableCert;
use super::configuration::{ConfigurationNames, Target, ensure_configurations};
use super::writer::{CertStore, ensure_cert, read_provided_pair, write_dir_artifacts};

/// Self-managed rounds repeat this often (upstream: one minute).
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(60);
/// Provided files are re-read this often.
pub const DEFAULT_PROVIDED_POLL: Duration = Duration::from_secs(10);

/// What a self-managed round maintains.
#[derive(Clone)]
pub struct SelfManaged {
    pub store: CertStore,
    pub dns_name: String,
    /// The serving pair is also written here (as upstream does), for inspection.
    pub cert_dir: Option<PathBuf>,
    /// Where the CA bundle goes; `None` skips the configurations.
    pub configurations: Option<(kube::Client, ConfigurationNames, Target)>,
    pub served_paths: Vec<&'static str>,
    pub resync: Duration,
}

impl SelfManaged {
    /// One round: ensure, load, publish the bundle.
    pub async fn round(&self, cert: &ReloadableCert, now: SystemTime) -> Result<bool, String> {
        let ensured = ensure_cert(&self.store, &self.dns_name, now)
            .await
            .map_err(|e| format!("failed to ensure certs: {e}"))?;
        let artifacts = &ensured.artifacts;
        if let (Some(dir), false) = (&self.cert_dir, matches!(self.store, CertStore::Dir(_))) {
            write_dir_artifacts(dir, artifacts)
                .map_err(|e| format!("failed to write certs to dir: {e}"))?;
        }
        cert.set_pem(&artifacts.cert, &artifacts.key)
            .map_err(|e| format!("cannot load the serving certificate: {e}"))?;
        if let Some((client, names, target)) = &self.configurations {
            let served: BTreeSet<&str> = self.served_paths.iter().copied().collect();
            ensure_configurations(client, names, artifacts.ca_cert.as_bytes(), &served, target)
                .await
                .map_err(|e| format!("failed to ensure configuration: {e}"))?;
        }
        Ok(ensured.rotated)
    }

    /// Rounds until shutdown; `status` passes once a round succeeded.
    pub async fn run(self, cert: ReloadableCert, status: StatusCheck, shutdown: Shutdown) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let wait = match self.round(&cert, SystemTime::now()).await {
                Ok(rotated) => {
                    if rotated {
                        tracing::info!(dns_name = %self.dns_name, "webhook serving certificate (re)loaded");
                    }
                    status.set_passing();
                    backoff = Duration::from_secs(1);
                    self.resync
                }
                Err(reason) => {
                    tracing::warn!(%reason, "webhook certificate round failed; retrying in {backoff:?}");
                    if !cert.is_loaded() {
                        status.set_failing(reason);
                    }
                    let wait = backoff;
                    backoff = (backoff * 2).min(self.resync);
                    wait
                }
            };
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// Loads the provided pair now and whenever the files change, until shutdown.
pub async fn run_provided(
    dir: PathBuf,
    cert: ReloadableCert,
    status: StatusCheck,
    shutdown: Shutdown,
    poll: Duration,
) {
    let mut loaded: Option<(String, String)> = None;
    loop {
        match read_provided_pair(&dir) {
            Ok(pair) if loaded.as_ref() != Some(&pair) => match cert.set_pem(&pair.0, &pair.1) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "loaded the provided webhook certificate");
                    status.set_passing();
                    loaded = Some(pair);
                }
                Err(err) => {
                    tracing::warn!(dir = %dir.display(), error = %err, "provided webhook certificate is unusable");
                    if !cert.is_loaded() {
                        status.set_failing(err.to_string());
                    }
                }
            },
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the provided webhook certificate");
                if !cert.is_loaded() {
                    status.set_failing(err.to_string());
                }
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
