//! Writing the CA bundle into the Mutating/ValidatingWebhookConfigurations
//! (upstream `util/configuration`). The webhooks as first installed are kept
//! in the `template` annotation; each round rebuilds the list from it, keeps
//! only paths this server answers, points services at ours and sets the bundle.

use std::collections::BTreeSet;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Annotation holding the original webhook list.
pub const TEMPLATE_ANNOTATION: &str = "template";

/// Default configuration names (upstream; env `MUTATING_WEBHOOK_NAME` / `VALIDATING_WEBHOOK_NAME`).
pub const DEFAULT_MUTATING_CONFIGURATION: &str = "koordinator-mutating-webhook-configuration";
pub const DEFAULT_VALIDATING_CONFIGURATION: &str = "koordinator-validating-webhook-configuration";

/// How kube-apiserver should reach this server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub service: String,
    /// With a host, webhooks use `https://host:port/path` instead of the service.
    pub host: Option<(String, u16)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigurationError {
    #[error("{kind} {name}: {source}")]
    Api {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{kind} {name}: invalid template annotation: {source}")]
    Template {
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind} {name}: webhook {webhook} has neither a service nor a URL")]
    NoClientConfig {
        kind: &'static str,
        name: String,
        webhook: String,
    },
}

/// The path a webhook calls.
fn path_of(config: &WebhookClientConfig) -> Option<String> {
    if let Some(service) = &config.service {
        return Some(service.path.clone().unwrap_or_default());
    }
    let url = config.url.as_deref()?;
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    Some(rest.find('/').map_or_else(String::new, |i| {
        let path = &rest[i..];
        path.split(['?', '#']).next().unwrap_or(path).to_owned()
    }))
}

fn point_at(config: &mut WebhookClientConfig, ca_bundle: &[u8], target: &Target) {
    config.ca_bundle = Some(ByteString(ca_bundle.to_vec()));
    if let Some(service) = config.service.as_mut() {
        service.namespace = target.namespace.clone();
        service.name = target.service.clone();
        if let Some((host, port)) = &target.host {
            let path = service.path.clone().unwrap_or_default();
            config.url = Some(format!("https://{host}:{port}{path}"));
            config.service = None;
        }
    }
}

/// Access to the client config of either webhook kind.
trait Webhook: Serialize + DeserializeOwned + Clone {
    fn name(&self) -> &str;
    fn client_config(&mut self) -> &mut WebhookClientConfig;
}

impl Webhook for MutatingWebhook {
    fn name(&self) -> &str {
        &self.name
    }
    fn client_config(&mut self) -> &mut WebhookClientConfig {
        &mut self.client_config
    }
}

impl Webhook for ValidatingWebhook {
    fn name(&self) -> &str {
        &self.name
    }
    fn client_config(&mut self) -> &mut WebhookClientConfig {
        &mut self.client_config
    }
}

/// The recorded template brought up to date with the live list: an entry added since it was
/// recorded (a `helm upgrade` that turns a gate on) joins it, and an entry changed since (the
/// chart's new `sideEffects`, rules, failure policy) replaces the recorded one, unless the
/// change is only what this manager writes (CA bundle, service or URL). Entries this server
/// dropped because it does not serve their path stay as recorded, so a replica that serves
/// them can put them back.
fn refresh_template<W: Webhook + PartialEq>(
    recorded: &[W],
    live: &[W],
    ca_bundle: &[u8],
    target: &Target,
) -> Vec<W> {
    let pointed = |webhook: &W| {
        let mut webhook = webhook.clone();
        point_at(webhook.client_config(), ca_bundle, target);
        webhook
    };
    let mut merged: Vec<W> = recorded
        .iter()
        .map(
            |kept| match live.iter().find(|current| current.name() == kept.name()) {
                Some(current) if pointed(current) != pointed(kept) => current.clone(),
                _ => kept.clone(),
            },
        )
        .collect();
    for current in live {
        if !recorded.iter().any(|kept| kept.name() == current.name()) {
            merged.push(current.clone());
        }
    }
    merged
}

/// Rebuilds a webhook list from the template (recorded on first sight, refreshed from the live list).
fn render<W: Webhook + PartialEq>(
    kind: &'static str,
    name: &str,
    annotations: &mut Option<std::collections::BTreeMap<String, String>>,
    webhooks: &mut Option<Vec<W>>,
    ca_bundle: &[u8],
    served: &BTreeSet<&str>,
    target: &Target,
) -> Result<(), ConfigurationError> {
    let template_error = |source| ConfigurationError::Template {
        kind,
        name: name.to_owned(),
        source,
    };
    let annotations = annotations.get_or_insert_with(Default::default);
    let live = webhooks.clone().unwrap_or_default();
    let template: Vec<W> = match annotations
        .get(TEMPLATE_ANNOTATION)
        .filter(|t| !t.is_empty())
    {
        Some(text) => {
            let recorded: Vec<W> = serde_json::from_str(text).map_err(template_error)?;
            let merged = refresh_template(&recorded, &live, ca_bundle, target);
            if merged != recorded {
                let text = serde_json::to_string(&merged).map_err(template_error)?;
                annotations.insert(TEMPLATE_ANNOTATION.to_owned(), text);
            }
            merged
        }
        None => {
            let text = serde_json::to_string(&live).map_err(template_error)?;
            annotations.insert(TEMPLATE_ANNOTATION.to_owned(), text);
            live
        }
    };
    let mut rendered = Vec::with_capacity(template.len());
    for mut webhook in template {
        let path =
            path_of(webhook.client_config()).ok_or_else(|| ConfigurationError::NoClientConfig {
                kind,
                name: name.to_owned(),
                webhook: webhook.name().to_owned(),
            })?;
        if !served.contains(path.as_str()) {
            tracing::warn!(
                kind,
                configuration = name,
                webhook = webhook.name(),
                path,
                "ignoring webhook for a path this server does not serve"
            );
            continue;
        }
        point_at(webhook.client_config(), ca_bundle, target);
        rendered.push(webhook);
    }
    *webhooks = Some(rendered);
    Ok(())
}

/// The mutating configuration with the bundle set; `None` when nothing changes.
pub fn render_mutating(
    current: &MutatingWebhookConfiguration,
    ca_bundle: &[u8],
    served: &BTreeSet<&str>,
    target: &Target,
) -> Result<Option<MutatingWebhookConfiguration>, ConfigurationError> {
    let mut desired = current.clone();
    let name = current.metadata.name.clone().unwrap_or_default();
    render(
        "MutatingWebhookConfiguration",
        &name,
        &mut desired.metadata.annotations,
        &mut desired.webhooks,
        ca_bundle,
        served,
        target,
    )?;
    Ok((desired != *current).then_some(desired))
}

/// The validating configuration with the bundle set; `None` when nothing changes.
pub fn render_validating(
    current: &ValidatingWebhookConfiguration,
    ca_bundle: &[u8],
    served: &BTreeSet<&str>,
    target: &Target,
) -> Result<Option<ValidatingWebhookConfiguration>, ConfigurationError> {
    let mut desired = current.clone();
    let name = current.metadata.name.clone().unwrap_or_default();
    render(
        "ValidatingWebhookConfiguration",
        &name,
        &mut desired.metadata.annotations,
        &mut desired.webhooks,
        ca_bundle,
        served,
        target,
    )?;
    Ok((desired != *current).then_some(desired))
}

/// Names of the two configurations to maintain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigurationNames {
    pub mutating: String,
    pub validating: String,
}

impl Default for ConfigurationNames {
    fn default() -> Self {
        ConfigurationNames {
            mutating: DEFAULT_MUTATING_CONFIGURATION.to_owned(),
            validating: DEFAULT_VALIDATING_CONFIGURATION.to_owned(),
        }
    }
}

/// Reads both configurations and replaces those that need the bundle; returns how many were updated.
pub async fn ensure_configurations(
    client: &kube::Client,
    names: &ConfigurationNames,
    ca_bundle: &[u8],
    served: &BTreeSet<&str>,
    target: &Target,
) -> Result<usize, ConfigurationError> {
    let mut updated = 0;
    let api_error = |kind, name: &str| {
        let name = name.to_owned();
        move |source| ConfigurationError::Api { kind, name, source }
    };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let kind = "MutatingWebhookConfiguration";
    let current = mutating
        .get(&names.mutating)
        .await
        .map_err(api_error(kind, &names.mutating))?;
    if let Some(desired) = render_mutating(&current, ca_bundle, served, target)? {
        mutating
            .replace(&names.mutating, &super::write_params(), &desired)
            .await
            .map_err(api_error(kind, &names.mutating))?;
        tracing::info!(configuration = %names.mutating, "wrote the CA bundle into {kind}");
        updated += 1;
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let kind = "ValidatingWebhookConfiguration";
    let current = validating
        .get(&names.validating)
        .await
        .map_err(api_error(kind, &names.validating))?;
    if let Some(desired) = render_validating(&current, ca_bundle, served, target)? {
        validating
            .replace(&names.validating, &super::write_params(), &desired)
            .await
            .map_err(api_error(kind, &names.validating))?;
        tracing::info!(configuration = %names.validating, "wrote the CA bundle into {kind}");
        updated += 1;
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            namespace: "koordinator-system".into(),
            service: "koordinator-webhook-service".into(),
            host: None,
        }
    }

    fn mutating() -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": DEFAULT_MUTATING_CONFIGURATION},
            "webhooks": [
                {"name": "mpod-create.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"service": {"name": "old", "namespace": "old-ns", "path": "/mutate-pod"}}},
                {"name": "mreservation-create.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"service": {"name": "old", "namespace": "old-ns", "path": "/mutate-reservation"}}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn a_helm_upgrade_adding_or_changing_entries_reaches_the_template() {
        let served: BTreeSet<&str> = ["/mutate-pod", "/mutate-node-status"].into();
        // Installed first: the template is recorded, the reservation entry dropped (unserved).
        let first = render_mutating(&mutating(), b"CA", &served, &target())
            .unwrap()
            .unwrap();
        // The upgrade re-applies the chart: a new entry, and mpod's sideEffects changed.
        let mut upgraded = first.clone();
        let mut webhooks = upgraded.webhooks.take().unwrap();
        webhooks[0].side_effects = "NoneOnDryRun".into();
        webhooks.push(
            serde_json::from_value(json!({
                "name": "mnode-status.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"service": {"name": "koordinator-webhook-service", "namespace": "koordinator-system", "path": "/mutate-node-status"}}
            }))
            .unwrap(),
        );
        upgraded.webhooks = Some(webhooks);
        let desired = render_mutating(&upgraded, b"CA", &served, &target())
            .unwrap()
            .unwrap();
        let webhooks = desired.webhooks.as_ref().unwrap();
        let names: Vec<&str> = webhooks.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            ["mpod-create.koordinator.sh", "mnode-status.koordinator.sh"]
        );
        assert_eq!(webhooks[0].side_effects, "NoneOnDryRun");
        assert!(webhooks[1].client_config.ca_bundle.is_some());
        let template: Vec<MutatingWebhook> = serde_json::from_str(
            &desired.metadata.annotations.as_ref().unwrap()[TEMPLATE_ANNOTATION],
        )
        .unwrap();
        // The dropped reservation entry stays recorded for a replica that serves it.
        assert_eq!(template.len(), 3);
        // Only the CA bundle differing (the manager's own write) leaves the template alone.
        let again = render_mutating(&desired, b"CA", &served, &target()).unwrap();
        assert!(again.is_none(), "a second pass changes nothing");
    }

    #[test]
    fn bundle_is_set_unserved_paths_dropped_and_template_kept() {
        let served: BTreeSet<&str> = ["/mutate-pod"].into();
        let desired = render_mutating(&mutating(), b"CA", &served, &target())
            .unwrap()
            .unwrap();
        let webhooks = desired.webhooks.as_ref().unwrap();
        assert_eq!(webhooks.len(), 1);
        let config = &webhooks[0].client_config;
        assert_eq!(config.ca_bundle.as_ref().unwrap().0, b"CA");
        let service = config.service.as_ref().unwrap();
        assert_eq!(
            (service.namespace.as_str(), service.name.as_str()),
            ("koordinator-system", "koordinator-webhook-service")
        );
        let template = &desired.metadata.annotations.as_ref().unwrap()[TEMPLATE_ANNOTATION];
        assert!(
            template.contains("/mutate-reservation"),
            "the template keeps every original webhook"
        );

        assert!(
            render_mutating(&desired, b"CA", &served, &target())
                .unwrap()
                .is_none(),
            "second round changes nothing"
        );
        let rotated = render_mutating(&desired, b"CA2", &served, &target())
            .unwrap()
            .unwrap();
        assert_eq!(
            rotated.webhooks.unwrap()[0]
                .client_config
                .ca_bundle
                .as_ref()
                .unwrap()
                .0,
            b"CA2"
        );
    }

    #[test]
    fn host_mode_switches_to_urls() {
        let served: BTreeSet<&str> = ["/mutate-pod"].into();
        let target = Target {
            host: Some(("10.0.0.5".into(), 9876)),
            ..target()
        };
        let desired = render_mutating(&mutating(), b"CA", &served, &target)
            .unwrap()
            .unwrap();
        let config = &desired.webhooks.unwrap()[0].client_config;
        assert_eq!(
            config.url.as_deref(),
            Some("https://10.0.0.5:9876/mutate-pod")
        );
        assert!(config.service.is_none());
        assert_eq!(path_of(config).as_deref(), Some("/mutate-pod"));
    }
}
