//! Admission webhooks served over HTTPS on every replica (upstream
//! `pkg/webhook`): pod mutating/validating, ElasticQuota mutating/validating,
//! the slo-controller-config ConfigMap validating webhook, the node status
//! mutating webhook (resource amplification) and the node validating webhook
//! (node strategy conflicts), pod binding admission and the Reservation
//! mutating webhook; ours: node-scoped evictions for koordlet.
//!
//! - [`review`]: AdmissionReview v1 wire types and the [`review::Decision`];
//! - [`pod_mutating`], [`pod_validating`], [`elasticquota`], [`configmap`], [`eviction`],
//!   [`node_status`], [`node_validating`], [`quota_evaluate`], [`multi_quota_tree`],
//!   [`binding_admission`], [`reservation_mutating`]:
//!   the decision cores (no I/O);
//! - [`quota_evaluator`]: the per-quota batching and status writes of quota evaluation;
//! - [`handlers`]: decoding, cache snapshots, metrics;
//! - [`cache`]: the watched objects; [`server`]: the TLS listener and routes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use koord_common::{ComponentContext, Shutdown};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;

pub mod binding_admission;
pub mod cache;
pub mod configmap;
pub mod device_resource;
pub mod elasticquota;
pub mod eviction;
pub mod features;
pub mod handlers;
pub mod multi_quota_tree;
pub mod node_status;
pub mod node_validating;
pub mod pod_mutating;
pub mod pod_validating;
pub mod quota_evaluate;
pub mod quota_evaluator;
pub mod reservation_mutating;
pub mod review;
pub mod server;

use crate::cert::ReloadableCert;
use crate::cert::configuration::{ConfigurationNames, Target};
use crate::cert::controller::{DEFAULT_PROVIDED_POLL, SelfManaged, run_provided};
use crate::cert::writer::CertStore;
use cache::WebhookCaches;
use configmap::SloConfigRef;
use handlers::{ApiPodPlacement, ApiQuotaPodCounter, Handlers};

/// Readiness check: the webhook server has a certificate and its caches are synced.
pub const WEBHOOK_READY_CHECK: &str = "webhook-ready";

/// How the serving certificate is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CertMode {
    /// Generate a CA and serving certificate, store them, inject the CA bundle.
    SelfManaged,
    /// Read `tls.crt`/`tls.key` (or `cert.pem`/`key.pem`) from the cert dir, e.g. from cert-manager.
    Provided,
}

/// Where self-managed certificates are stored (upstream `WEBHOOK_CERT_WRITER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CertWriter {
    Secret,
    Fs,
}

/// Webhook flags. Upstream reads these from environment variables only;
/// the same variables still work, and each has a flag too.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookArgs {
    /// Serve the admission webhooks (upstream feature gate `WebhookFramework`).
    #[arg(long = "enable-webhook-server", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub enabled: bool,

    /// Feature gates, e.g. `PodMutatingWebhook=false` (upstream names and syntax).
    #[arg(
        long = "feature-gates",
        default_value = "",
        value_name = "NAME=BOOL,..."
    )]
    pub feature_gates: features::FeatureGates,

    /// Port of the HTTPS webhook server.
    #[arg(long = "webhook-port", env = "WEBHOOK_PORT", default_value_t = 9876)]
    pub port: u16,

    /// Address the webhook server binds to.
    #[arg(
        long = "webhook-bind-address",
        default_value = "0.0.0.0",
        value_name = "IP"
    )]
    pub bind_address: IpAddr,

    /// Reach the webhooks at https://HOST:PORT instead of through the Service.
    #[arg(long = "webhook-host", env = "WEBHOOK_HOST", value_name = "HOST")]
    pub host: Option<String>,

    /// Directory of the serving certificate (written in self-managed mode, read in provided mode).
    #[arg(
        long = "webhook-cert-dir",
        env = "WEBHOOK_CERT_DIR",
        default_value = "/tmp/koordinator-webhook-certs"
    )]
    pub cert_dir: PathBuf,

    /// self-managed: generate and rotate certificates; provided: use mounted files.
    #[arg(
        long = "webhook-cert-mode",
        env = "WEBHOOK_CERT_MODE",
        value_enum,
        default_value = "self-managed"
    )]
    pub cert_mode: CertMode,

    /// Self-managed storage: a Secret (default) or the cert dir (default when a host is set).
    #[arg(long = "webhook-cert-writer", env = "WEBHOOK_CERT_WRITER", value_enum)]
    pub cert_writer: Option<CertWriter>,

    /// Namespace of the webhook Service and Secret.
    #[arg(
        long = "webhook-namespace",
        env = "POD_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub namespace: String,

    /// Name of the webhook Service.
    #[arg(
        long = "webhook-service-name",
        env = "SERVICE_NAME",
        default_value = "koordinator-webhook-service"
    )]
    pub service_name: String,

    /// Name of the Secret holding self-managed certificates.
    #[arg(
        long = "webhook-secret-name",
        env = "SECRET_NAME",
        default_value = "koordinator-webhook-certs"
    )]
    pub secret_name: String,

    /// MutatingWebhookConfiguration that receives the CA bundle.
    #[arg(long = "mutating-webhook-name", env = "MUTATING_WEBHOOK_NAME", default_value = crate::cert::configuration::DEFAULT_MUTATING_CONFIGURATION)]
    pub mutating_configuration: String,

    /// ValidatingWebhookConfiguration that receives the CA bundle.
    #[arg(long = "validating-webhook-name", env = "VALIDATING_WEBHOOK_NAME", default_value = crate::cert::configuration::DEFAULT_VALIDATING_CONFIGURATION)]
    pub validating_configuration: String,

    /// Service account (in the webhook namespace) whose evictions the eviction webhook holds to
    /// the node of its pod-bound token: koordlet's.
    #[arg(
        long = "node-scoped-evictor-service-account",
        default_value = "koordlet",
        value_name = "NAME"
    )]
    pub node_scoped_evictor: String,

    /// Most retries of a quota usage write per batch of pod admissions (upstream
    /// `--quota-update-max-retries`; below 3 counts as 3).
    #[arg(
        long = "quota-update-max-retries",
        default_value_t = 3,
        allow_negative_numbers = true,
        value_name = "INT"
    )]
    pub quota_update_max_retries: i64,

    /// Upper bound of the sleep after a quota usage write conflict, drawn from
    /// [jitter/2, jitter); 0 (default) or negative: no sleep.
    #[arg(long = "quota-update-retry-jitter", default_value = "0", allow_hyphen_values = true, value_parser = quota_evaluate::parse_jitter_duration, value_name = "DURATION")]
    pub quota_update_retry_jitter: Duration,

    /// Cap of the conflict sleeps per batch (upstream default 1s).
    #[arg(long = "quota-update-max-total-jitter", default_value = "1s", allow_hyphen_values = true, value_parser = quota_evaluate::parse_jitter_duration, value_name = "DURATION")]
    pub quota_update_max_total_jitter: Duration,

    /// After a quota usage write conflict, read the quota from the API server
    /// (not the watch cache) before the retry.
    #[arg(long = "quota-update-conflict-fresh-get", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub quota_update_conflict_fresh_get: bool,

    /// Comma-separated substrings of the user names allowed to bind pods
    /// (upstream `--binding-admission-user-name`); empty turns the check off.
    #[arg(
        long = "binding-admission-user-name",
        default_value = "",
        value_name = "NAMES"
    )]
    pub binding_admission_user_name: String,

    /// Allow every binding but log and count the ones that would be denied.
    #[arg(long = "binding-admission-dry-run", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub binding_admission_dry_run: bool,

    /// Comma-separated namespaces whose bindings are checked; `*` checks all, empty none.
    #[arg(
        long = "binding-admission-namespaces",
        default_value = "",
        value_name = "NAMESPACES"
    )]
    pub binding_admission_namespaces: String,

    /// Comma-separated namespaces whose bindings are always allowed.
    #[arg(long = "binding-admission-exclude-namespaces", default_value = binding_admission::DEFAULT_EXCLUDE_NAMESPACES, value_name = "NAMESPACES")]
    pub binding_admission_exclude_namespaces: String,

    /// Comma-separated pod label keys; a pod carrying any of them (any value) may be bound by anyone.
    #[arg(long = "binding-admission-bypass-labels", default_value = binding_admission::DEFAULT_BYPASS_LABELS, value_name = "KEYS")]
    pub binding_admission_bypass_labels: String,

    /// Comma-separated pod annotation keys with the same effect as the bypass labels.
    #[arg(
        long = "binding-admission-bypass-annotations",
        default_value = "",
        value_name = "KEYS"
    )]
    pub binding_admission_bypass_annotations: String,

    /// How often self-managed certificates and configurations are re-checked.
    #[arg(long = "webhook-cert-resync", default_value = "1m", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub cert_resync: Duration,
}

impl WebhookArgs {
    /// `--enable-webhook-server` and the `WebhookFramework` gate.
    pub fn should_serve(&self) -> bool {
        self.enabled && self.feature_gates.webhook_framework()
    }

    pub fn bind_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind_address, self.port)
    }

    /// The DNS name in the serving certificate: the host, else the Service name.
    pub fn dns_name(&self) -> String {
        match self.host.as_deref().filter(|h| !h.is_empty()) {
            Some(host) => host.to_owned(),
            None => crate::cert::service_dns_name(&self.namespace, &self.service_name),
        }
    }

    /// The `--quota-update-*` settings.
    pub fn quota_update_settings(&self) -> quota_evaluate::UpdateSettings {
        quota_evaluate::UpdateSettings {
            max_retries: u32::try_from(self.quota_update_max_retries.max(0)).unwrap_or(u32::MAX),
            retry_jitter: self.quota_update_retry_jitter,
            max_total_jitter: self.quota_update_max_total_jitter,
            conflict_fresh_get: self.quota_update_conflict_fresh_get,
        }
    }

    /// The `--binding-admission-*` settings.
    pub fn binding_admission(&self) -> binding_admission::BindingAdmission {
        binding_admission::BindingAdmission::from_flags(&binding_admission::BindingAdmissionFlags {
            user_name: self.binding_admission_user_name.clone(),
            dry_run: self.binding_admission_dry_run,
            namespaces: self.binding_admission_namespaces.clone(),
            exclude_namespaces: self.binding_admission_exclude_namespaces.clone(),
            bypass_labels: self.binding_admission_bypass_labels.clone(),
            bypass_annotations: self.binding_admission_bypass_annotations.clone(),
        })
    }

    /// Upstream's choice: `fs` when asked, or when unset and a host is given.
    pub fn effective_writer(&self) -> CertWriter {
        match (
            self.cert_writer,
            self.host.as_deref().filter(|h| !h.is_empty()),
        ) {
            (Some(writer), _) => writer,
            (None, Some(_)) => CertWriter::Fs,
            (None, None) => CertWriter::Secret,
        }
    }
}

/// The running webhooks.
pub struct Webhooks {
    pub server: server::WebhookServer,
    pub caches: WebhookCaches,
    pub cert: ReloadableCert,
}

fn spawn_watch<K>(client: &kube::Client, cache: Arc<cache::ObjectCache<K>>, shutdown: &Shutdown)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: kube::Api<K> = kube::Api::all(client.clone());
    let kind = K::kind(&()).into_owned();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        loop {
            tokio::select! {
                _ = stop.wait() => return,
                event = events.next() => match event {
                    Some(Ok(event)) => cache.apply(event),
                    Some(Err(err)) => tracing::warn!(%kind, error = %err, "webhook cache watch failed; retrying"),
                    None => return,
                },
            }
        }
    });
}

/// Starts the caches, the certificate loop and the HTTPS server. Every
/// replica calls this, leader or not.
pub async fn start(
    context: &ComponentContext,
    args: &WebhookArgs,
    client: kube::Client,
    slo_config: SloConfigRef,
) -> Result<Webhooks, server::ServeError> {
    let caches = WebhookCaches::default();
    spawn_watch(&client, caches.profiles.clone(), &context.shutdown);
    spawn_watch(&client, caches.namespaces.clone(), &context.shutdown);
    spawn_watch(&client, caches.priority_classes.clone(), &context.shutdown);
    spawn_watch(&client, caches.quotas.clone(), &context.shutdown);
    let gates = args.feature_gates.admission_gates();
    if gates.multi_quota_tree {
        spawn_watch(&client, caches.quota_profiles.clone(), &context.shutdown);
    }

    let cert = ReloadableCert::default();
    let cert_status = context.health.readiness_status(
        "webhook-cert",
        Err("no serving certificate loaded yet".into()),
    );
    match args.cert_mode {
        CertMode::Provided => {
            tokio::spawn(run_provided(
                args.cert_dir.clone(),
                cert.clone(),
                cert_status,
                context.shutdown.clone(),
                DEFAULT_PROVIDED_POLL,
            ));
        }
        CertMode::SelfManaged => {
            let store = match args.effective_writer() {
                CertWriter::Secret => CertStore::Secret {
                    client: client.clone(),
                    namespace: args.namespace.clone(),
                    name: args.secret_name.clone(),
                },
                CertWriter::Fs => CertStore::Dir(args.cert_dir.clone()),
            };
            let target = Target {
                namespace: args.namespace.clone(),
                service: args.service_name.clone(),
                host: args
                    .host
                    .clone()
                    .filter(|h| !h.is_empty())
                    .map(|h| (h, args.port)),
            };
            let names = ConfigurationNames {
                mutating: args.mutating_configuration.clone(),
                validating: args.validating_configuration.clone(),
            };
            let loop_ = SelfManaged {
                store,
                dns_name: args.dns_name(),
                cert_dir: Some(args.cert_dir.clone()),
                configurations: Some((client.clone(), names, target)),
                served_paths: args.feature_gates.enabled_paths(),
                resync: args.cert_resync,
            };
            tokio::spawn(loop_.run(cert.clone(), cert_status, context.shutdown.clone()));
        }
    }

    let readiness_caches = caches.clone();
    // With quota admission on, every pod create reads the ElasticQuota cache.
    let quotas_needed = gates.quota_evaluation.enabled;
    context.health.add_readiness_check(
        WEBHOOK_READY_CHECK,
        koord_common::health::FnCheck(move || {
            let waiting: Vec<_> = readiness_caches
                .unsynced()
                .into_iter()
                .filter(|name| quotas_needed || *name != "elasticquotas")
                .collect();
            if waiting.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "webhook caches not synced yet: {}",
                    waiting.join(", ")
                ))
            }
        }),
    );

    let mut handlers = Handlers::new(caches.clone(), slo_config);
    handlers.gates = gates;
    if gates.quota_evaluation.enabled {
        let settings = args.quota_update_settings();
        let access = quota_evaluator::KubeQuotaAccess::new(
            client.clone(),
            caches.quotas.clone(),
            settings.conflict_fresh_get,
        );
        handlers.quota_evaluator = Some(quota_evaluator::QuotaEvaluator::new(
            Arc::new(access),
            settings,
        ));
    }
    handlers.paths = args.feature_gates.enabled_paths();
    if handlers
        .paths
        .contains(&handlers::PATH_VALIDATE_POD_BINDING)
    {
        handlers.binding_admission = args.binding_admission();
        tracing::info!(settings = %handlers.binding_admission.describe(), active = handlers.binding_admission.is_active(), "binding admission webhook on");
        handlers.binding_pods = Some(Box::new(handlers::ApiPodMetadata(client.clone())));
    }
    handlers.namespace_api = Some(client.clone());
    handlers.eviction_scope =
        eviction::ScopedUsers::service_account(&args.namespace, &args.node_scoped_evictor);
    handlers.pod_placement = Some(Box::new(ApiPodPlacement(client.clone())));
    handlers.quota_pods = Some(Box::new(ApiQuotaPodCounter(client)));
    handlers.metrics.register(&context.metrics);
    let server = server::serve(
        args.bind_addr(),
        &cert,
        Arc::new(handlers),
        &context.shutdown,
    )
    .await?;
    Ok(Webhooks {
        server,
        caches,
        cert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        webhook: WebhookArgs,
    }

    #[test]
    fn defaults_follow_upstream() {
        let flags = Flags::try_parse_from(["x"]).unwrap().webhook;
        assert_eq!(flags.port, 9876);
        assert_eq!(
            flags.cert_dir,
            PathBuf::from("/tmp/koordinator-webhook-certs")
        );
        assert_eq!(
            flags.dns_name(),
            "koordinator-webhook-service.koordinator-system.svc"
        );
        assert_eq!(flags.effective_writer(), CertWriter::Secret);
        assert_eq!(flags.cert_mode, CertMode::SelfManaged);
        assert_eq!(
            flags.mutating_configuration,
            "koordinator-mutating-webhook-configuration"
        );
        // Upstream's --binding-admission-* defaults: off (no allowlist), kube-system
        // excluded, the koordinator.sh/binding-admission-bypass label bypasses.
        assert_eq!(flags.binding_admission_user_name, "");
        assert!(!flags.binding_admission_dry_run);
        assert_eq!(flags.binding_admission_namespaces, "");
        assert_eq!(flags.binding_admission_exclude_namespaces, "kube-system");
        assert_eq!(
            flags.binding_admission_bypass_labels,
            "koordinator.sh/binding-admission-bypass"
        );
        assert_eq!(flags.binding_admission_bypass_annotations, "");
        assert!(!flags.binding_admission().is_active());
    }

    #[test]
    fn binding_admission_flags_reach_the_decision() {
        let flags = Flags::try_parse_from([
            "x",
            "--binding-admission-user-name=koord-scheduler",
            "--binding-admission-namespaces=*",
            "--binding-admission-dry-run",
        ])
        .unwrap()
        .webhook;
        let admission = flags.binding_admission();
        assert!(admission.is_active());
        assert_eq!(
            admission.screen("system:kube-scheduler", "default"),
            binding_admission::Screen::NeedsPod
        );
        assert_eq!(admission.judge(None), binding_admission::Outcome::DryRun);
    }

    #[test]
    fn upstream_manifest_feature_gates_parse() {
        let flags = Flags::try_parse_from(["x", "--feature-gates="])
            .unwrap()
            .webhook;
        assert!(flags.should_serve());
        let flags = Flags::try_parse_from(["x", "--feature-gates=WebhookFramework=false"])
            .unwrap()
            .webhook;
        assert!(!flags.should_serve());
        let flags = Flags::try_parse_from(["x", "--enable-webhook-server=false"])
            .unwrap()
            .webhook;
        assert!(!flags.should_serve());
        assert!(Flags::try_parse_from(["x", "--feature-gates=Oops"]).is_err());
    }

    #[test]
    fn a_host_switches_to_the_fs_writer_and_names_the_cert() {
        let flags = Flags::try_parse_from([
            "x",
            "--webhook-host=10.0.0.5",
            "--webhook-cert-mode=provided",
        ])
        .unwrap()
        .webhook;
        assert_eq!(flags.effective_writer(), CertWriter::Fs);
        assert_eq!(flags.dns_name(), "10.0.0.5");
        assert_eq!(flags.cert_mode, CertMode::Provided);
    }
}
