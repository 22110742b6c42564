//! The Helm chart, rendered by `helm template`, checked as a reviewer would:
//! every document parses into the Kubernetes type of its kind with no field
//! left over (a misspelled field fails), and every component container is
//! started with flags its binary accepts.
//!
//! The rendered files come from `KOORD_CHART_RENDER_DIR` (written by
//! `.ci/run`); without it the test renders the chart itself with the helm
//! that `hack/helm.sh` caches, and skips with one line when there is none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// (name, rendered YAML) per values set, or the reason there are none.
fn rendered_sets() -> Result<Vec<(String, String)>, String> {
    if let Ok(dir) = std::env::var("KOORD_CHART_RENDER_DIR") {
        let mut sets = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().is_some_and(|ext| ext == "yaml") {
                let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
                sets.push((path.display().to_string(), text));
            }
        }
        if sets.is_empty() {
            return Err(format!("KOORD_CHART_RENDER_DIR={dir} holds no .yaml file"));
        }
        return Ok(sets);
    }
    let helm = std::env::var("KOORD_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target/tools/helm-2.2.2/helm"));
    if !helm.exists() {
        return Err(format!(
            "no rendered chart (KOORD_CHART_RENDER_DIR) and no helm at {} (run hack/helm.sh)",
            helm.display()
        ));
    }
    let chart = repo_root().join("charts/koordinator");
    let mut sets = Vec::new();
    for values in [None, Some(chart.join("ci/all-features-values.yaml"))] {
        let mut command = Command::new(&helm);
        command.arg("template").arg("koord").arg(&chart);
        if let Some(values) = &values {
            // As a cluster with the Prometheus operator: every ServiceMonitor is rendered.
            command
                .arg("-f")
                .arg(values)
                .args(["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]);
        }
        let output = command.output().map_err(|e| format!("helm: {e}"))?;
        assert!(
            output.status.success(),
            "helm template failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let name = values.map_or("default values".to_string(), |v| v.display().to_string());
        sets.push((name, String::from_utf8(output.stdout).unwrap()));
    }
    Ok(sets)
}

/// Limits for what helm renders (the chart's own output, read whole).
const RENDERED: apis::yaml::Limits = apis::yaml::Limits::objects(usize::MAX, 64);

fn documents(text: &str) -> Vec<Value> {
    apis::yaml::from_str_multiple::<Option<Value>>(text, &RENDERED)
        .unwrap()
        .into_iter()
        .flatten()
        .collect()
}

/// Paths present in `original` but missing or different after the typed
/// round trip: unknown (e.g. misspelled) fields, nulls, coerced values.
fn lost_paths(original: &Value, round_tripped: &Value, path: &str, out: &mut Vec<String>) {
    match (original, round_tripped) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let child = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => lost_paths(value, other, &child, out),
                    None => out.push(child),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                lost_paths(x, y, &format!("{path}[{index}]"), out);
            }
        }
        (a, b) if a == b => {}
        _ => out.push(format!("{path} (value {original} became {round_tripped})")),
    }
}

fn check_typed<T: DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<T, String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut lost = Vec::new();
    lost_paths(doc, &back, "", &mut lost);
    if lost.is_empty() {
        Ok(typed)
    } else {
        Err(format!(
            "fields not in the Kubernetes type: {}",
            lost.join(", ")
        ))
    }
}

/// Custom resources without k8s-openapi types: the spec keys allowed.
fn check_custom(doc: &Value, allowed_spec_keys: &[&str]) -> Result<(), String> {
    let spec = doc
        .get("spec")
        .and_then(Value::as_object)
        .ok_or("no spec object")?;
    let unknown: Vec<&String> = spec
        .keys()
        .filter(|key| !allowed_spec_keys.contains(&key.as_str()))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!("unknown spec fields {unknown:?}"))
    }
}

/// Checks one document; returns the pod spec of workloads.
fn check_document(doc: &Value) -> Result<Option<PodSpec>, String> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => check_typed::<Namespace>(doc).map(|_| None),
        ("v1", "Service") => check_typed::<Service>(doc).map(|_| None),
        ("v1", "Secret") => check_typed::<Secret>(doc).map(|_| None),
        ("v1", "ConfigMap") => check_typed::<ConfigMap>(doc).map(|_| None),
        ("v1", "ServiceAccount") => check_typed::<ServiceAccount>(doc).map(|_| None),
        ("apps/v1", "Deployment") => {
            check_typed::<Deployment>(doc).map(|d| d.spec.and_then(|s| s.template.spec))
        }
        ("apps/v1", "DaemonSet") => {
            check_typed::<DaemonSet>(doc).map(|d| d.spec.and_then(|s| s.template.spec))
        }
        ("rbac.authorization.k8s.io/v1", "Role") => check_typed::<Role>(doc).map(|_| None),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            check_typed::<RoleBinding>(doc).map(|_| None)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            check_typed::<ClusterRole>(doc).map(|_| None)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            check_typed::<ClusterRoleBinding>(doc).map(|_| None)
        }
        ("policy/v1", "PodDisruptionBudget") => {
            check_typed::<PodDisruptionBudget>(doc).map(|_| None)
        }
        ("scheduling.k8s.io/v1", "PriorityClass") => {
            check_typed::<PriorityClass>(doc).map(|_| None)
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            check_typed::<MutatingWebhookConfiguration>(doc).map(|_| None)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            check_typed::<ValidatingWebhookConfiguration>(doc).map(|_| None)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            check_typed::<ValidatingAdmissionPolicy>(doc).map(|_| None)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            check_typed::<ValidatingAdmissionPolicyBinding>(doc).map(|_| None)
        }
        ("monitoring.coreos.com/v1", "ServiceMonitor") => check_custom(
            doc,
            &[
                "endpoints",
                "selector",
                "jobLabel",
                "namespaceSelector",
                "podTargetLabels",
                "targetLabels",
            ],
        )
        .map(|_| None),
        ("cert-manager.io/v1", "Certificate") => check_custom(
            doc,
            &[
                "secretName",
                "dnsNames",
                "issuerRef",
                "duration",
                "renewBefore",
                "commonName",
                "privateKey",
                "usages",
            ],
        )
        .map(|_| None),
        ("cert-manager.io/v1", "Issuer") => {
            check_custom(doc, &["selfSigned", "ca", "acme", "vault"]).map(|_| None)
        }
        _ => Err(format!("no check for {api_version} {kind}")),
    }
}

/// Parses a component container's command line with that component's flags.
fn check_component_args(container: &Container) -> Result<(), String> {
    let command = container.command.clone().unwrap_or_default();
    let Some(binary) = command.first() else {
        return Ok(());
    };
    let mut argv: Vec<std::ffi::OsString> = command.iter().map(Into::into).collect();
    argv.extend(container.args.iter().flatten().map(Into::into));
    // Each binary's own pipeline: Go spellings, inert upstream flags, then clap.
    let result = match binary.as_str() {
        "/koordlet" => koordlet::cli::parse_args(argv).map(|_| ()),
        "/koord-manager" => koord_manager::cli::parse_args(argv).map(|_| ()),
        "/koord-scheduler" => koord_scheduler::cli::parse_args(argv).map(|_| ()),
        "/koord-runtime-proxy" => koord_runtime_proxy::cli::parse_args(argv).map(|_| ()),
        "/koord-descheduler" => koord_descheduler::cli::parse_args(argv).map(|_| ()),
        _ => return Ok(()),
    };
    result.map_err(|e| format!("{binary}: {e}"))
}

/// Resources Koordinator's DeviceShare accounts for: kube-scheduler must
/// leave them to the extender (`ignoredByScheduler`).
const KOORDINATOR_DEVICE_RESOURCES: [&str; 7] = [
    apis::extension::RESOURCE_GPU,
    apis::extension::RESOURCE_GPU_SHARED,
    apis::extension::RESOURCE_GPU_CORE,
    apis::extension::RESOURCE_GPU_MEMORY,
    apis::extension::RESOURCE_GPU_MEMORY_RATIO,
    apis::extension::RESOURCE_RDMA,
    apis::extension::RESOURCE_FPGA,
];

/// Vendor resources kube-scheduler must keep checking against allocatable.
const VENDOR_DEVICE_RESOURCES: [&str; 3] = [
    apis::extension::RESOURCE_NVIDIA_GPU,
    apis::extension::RESOURCE_AMD_GPU,
    apis::extension::RESOURCE_HYGON_DCU,
];

/// kube-scheduler's `v1helper.IsExtendedResourceName`, which its extender
/// validation requires of every managed resource: a qualified name outside
/// the `kubernetes.io/` namespace, not starting with `requests.`.
fn is_extended_resource_name(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// The `extenders` of kube-scheduler's KubeSchedulerConfiguration, checked
/// against kube-scheduler's `validateExtenders` (one binder, positive weight
/// for a prioritizer, unique extended-resource names) and for interest: the
/// extender with the verbs must have no `managedResources`, or kube-scheduler
/// calls it only for pods requesting one of them (`HTTPExtender.IsInterested`)
/// and prod/LS pods never see the Koordinator plugins. Every Koordinator
/// device resource must be declared `ignoredByScheduler`.
fn check_kube_scheduler_extenders(text: &str) -> Vec<String> {
    let config: Value = match apis::yaml::from_str(text, &RENDERED) {
        Ok(config) => config,
        Err(e) => return vec![format!("malformed: {e}")],
    };
    let Some(extenders) = config["extenders"].as_array() else {
        return vec!["no extenders".to_string()];
    };
    let mut problems = Vec::new();
    // kube-scheduler refuses anything but a whole percentage.
    match &config["percentageOfNodesToScore"] {
        Value::Null => {}
        value if value.as_u64().is_some_and(|p| p <= 100) => {}
        value => problems.push(format!(
            "percentageOfNodesToScore {value} is not a whole number from 0 to 100"
        )),
    }
    let has_verb = |extender: &Value, verb: &str| {
        extender[verb]
            .as_str()
            .is_some_and(|value| !value.is_empty())
    };
    let verbs = ["filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"];
    let with_verbs: Vec<&Value> = extenders
        .iter()
        .filter(|extender| verbs.iter().any(|verb| has_verb(extender, verb)))
        .collect();
    if with_verbs.len() != 1 {
        problems.push(format!(
            "{} extenders with verbs, expected exactly one",
            with_verbs.len()
        ));
    }
    for extender in &with_verbs {
        for verb in ["filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"] {
            if !has_verb(extender, verb) {
                problems.push(format!("the extender has no {verb}"));
            }
        }
        if extender["managedResources"]
            .as_array()
            .is_some_and(|resources| !resources.is_empty())
        {
            problems.push(
                "the extender with verbs lists managedResources: kube-scheduler would call it \
                 only for pods that request one of them"
                    .to_string(),
            );
        }
    }
    let binders = extenders.iter().filter(|e| has_verb(e, "bindVerb")).count();
    if binders > 1 {
        problems.push(format!(
            "{binders} extenders implement bind; kube-scheduler allows one"
        ));
    }
    let mut declared = BTreeSet::new();
    for extender in extenders {
        if has_verb(extender, "prioritizeVerb") && extender["weight"].as_i64().unwrap_or(0) <= 0 {
            problems.push("a prioritizing extender needs a positive weight".to_string());
        }
        for resource in extender["managedResources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = resource["name"].as_str().unwrap_or_default();
            if !is_extended_resource_name(name) {
                problems.push(format!(
                    "managed resource {name:?} is not an extended resource name; \
                     kube-scheduler refuses the configuration"
                ));
            }
            if !declared.insert(name.to_string()) {
                problems.push(format!("managed resource {name:?} is listed twice"));
            }
            if resource["ignoredByScheduler"] != Value::Bool(true) {
                problems.push(format!(
                    "managed resource {name:?} is not ignoredByScheduler"
                ));
            }
        }
    }
    for resource in KOORDINATOR_DEVICE_RESOURCES {
        if !declared.contains(resource) {
            problems.push(format!("{resource} is not declared ignoredByScheduler"));
        }
    }
    for resource in VENDOR_DEVICE_RESOURCES {
        if declared.contains(resource) {
            problems.push(format!(
                "{resource} is ignored by kube-scheduler; it must stay checked against allocatable"
            ));
        }
    }
    problems
}

/// The argv of a container (command then args), Go flag syntax normalized.
fn container_argv(container: &Container) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> =
        container.command.iter().flatten().map(Into::into).collect();
    argv.extend(container.args.iter().flatten().map(Into::into));
    koord_common::cli::normalize_go_flag_args(argv)
}

/// A probe's or Service's port as a number, resolving a name against the
/// container's ports.
fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(number) => u16::try_from(*number).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// Who can reach the koord-scheduler extender (issue 16): `/bind` acts with
/// the pod's service account, so the extender must listen on loopback (or
/// require client certificates, which the binary enforces at start), the
/// kube-scheduler next to it must call it there, no Service may lead to
/// it, and the kubelet probes (which come from the node, not from inside
/// the pod) must hit a non-loopback listener that serves `/healthz` and
/// `/readyz`.
fn check_scheduler_serving(
    pod: &PodSpec,
    kube_scheduler_config: &str,
    services: &[Service],
) -> Vec<String> {
    let Some(container) = pod.containers.iter().find(|c| {
        c.command.iter().flatten().next().map(String::as_str) == Some("/koord-scheduler")
    }) else {
        return vec!["no /koord-scheduler container".to_string()];
    };
    let args = match koord_scheduler::SchedulerArgs::try_parse_from(container_argv(container)) {
        Ok(args) => args,
        Err(e) => return vec![format!("extender flags: {e}")],
    };
    let mut problems = Vec::new();
    let (listen, transport) = match args.extender() {
        Ok(Some(extender)) => extender,
        Ok(None) => return vec!["the extender is not served (--port=0)".to_string()],
        Err(e) => return vec![format!("the extender would not start: {e}")],
    };
    let plain = transport == koord_scheduler::tls::Transport::Plain;

    // kube-scheduler calls the extender where it listens, in this pod.
    let config: Value =
        apis::yaml::from_str(kube_scheduler_config, &RENDERED).unwrap_or(Value::Null);
    for extender in config["extenders"].as_array().into_iter().flatten() {
        let url = extender["urlPrefix"].as_str().unwrap_or_default();
        let expected_scheme = if plain { "http" } else { "https" };
        let ok = ["127.0.0.1", "localhost", "[::1]"].iter().any(|host| {
            url.trim_end_matches('/') == format!("{expected_scheme}://{host}:{}", listen.port())
        });
        if !ok {
            problems.push(format!(
                "kube-scheduler calls the extender at {url:?}, not at {expected_scheme}://127.0.0.1:{} where it listens",
                listen.port()
            ));
        }
    }

    // Probes: a non-loopback listener that serves health.
    let health_port =
        (args.health_port != 0 && !args.health_address.is_loopback()).then_some(args.health_port);
    let probes = [
        ("livenessProbe", &container.liveness_probe),
        ("readinessProbe", &container.readiness_probe),
        ("startupProbe", &container.startup_probe),
    ];
    for (what, probe) in probes {
        let Some(get) = probe.as_ref().and_then(|p| p.http_get.as_ref()) else {
            continue;
        };
        let port = resolve_port(&get.port, container);
        if port.is_none() || port != health_port {
            problems.push(format!(
                "the extender's {what} goes to port {:?}, which kubelet cannot reach: the extender is on {listen} and the health listener is {:?}",
                get.port, health_port
            ));
        }
        let path = get.path.as_deref().unwrap_or("/");
        if !matches!(path, "/healthz" | "/readyz") {
            problems.push(format!(
                "the extender's {what} asks {path}; the health port serves /healthz and /readyz"
            ));
        }
    }
    if container.readiness_probe.is_none() || container.liveness_probe.is_none() {
        problems.push("the extender needs a liveness and a readiness probe".to_string());
    }

    // No Service leads to the extender.
    let selects_scheduler = |service: &Service| {
        service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|selector| {
                selector.get("koord-app").map(String::as_str) == Some("koord-scheduler")
            })
    };
    for service in services.iter().filter(|s| selects_scheduler(s)) {
        for port in service.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            let target = port
                .target_port
                .clone()
                .unwrap_or(IntOrString::Int(port.port));
            if resolve_port(&target, container) == Some(listen.port())
                || target == IntOrString::Int(i32::from(listen.port()))
            {
                problems.push(format!(
                    "Service {} exposes the extender's port {}",
                    service.metadata.name.as_deref().unwrap_or("?"),
                    listen.port()
                ));
            }
        }
    }
    problems
}

/// Who can reach koordlet's HTTP endpoints (issue 16): `/qos/explain` and
/// the audit trail are served on a loopback `--addr` only (the binary
/// enforces it), and the kubelet's probes must reach a listener that serves
/// `/healthz` and `/readyz`. The kubelet probes from the node's network
/// namespace: a probe with `host: 127.0.0.1` reaches a loopback listener
/// only when the pod shares that namespace (`hostNetwork`); a probe without
/// a host goes to the pod IP, which a loopback listener does not serve. A
/// Service must not point at a loopback-only port.
fn check_koordlet_serving(pod: &PodSpec, services: &[Service]) -> Vec<String> {
    let Some(container) = pod
        .containers
        .iter()
        .find(|c| c.command.iter().flatten().next().map(String::as_str) == Some("/koordlet"))
    else {
        return vec!["no /koordlet container".to_string()];
    };
    let args = match koordlet::KoordletArgs::try_parse_from(container_argv(container)) {
        Ok(args) => args,
        Err(e) => return vec![format!("koordlet flags: {e}")],
    };
    let host_network = pod.host_network == Some(true);
    let addr = args.addr.socket_addr();
    // Listeners serving the probes: --addr (everything) and --health-addr.
    let health: Vec<std::net::SocketAddr> = std::iter::once(addr)
        .chain(args.health_addr.map(|a| a.socket_addr()))
        .collect();
    let mut problems = Vec::new();
    let probes = [
        ("livenessProbe", &container.liveness_probe),
        ("readinessProbe", &container.readiness_probe),
        ("startupProbe", &container.startup_probe),
    ];
    for (what, probe) in probes {
        let Some(get) = probe.as_ref().and_then(|p| p.http_get.as_ref()) else {
            continue;
        };
        let port = resolve_port(&get.port, container);
        let target: Option<std::net::IpAddr> = get.host.as_deref().and_then(|h| h.parse().ok());
        let reachable = health.iter().any(|listener| {
            Some(listener.port()) == port
                && match target {
                    Some(ip) if ip.is_loopback() => {
                        host_network
                            && (listener.ip().is_loopback() || listener.ip().is_unspecified())
                    }
                    _ => listener.ip().is_unspecified(),
                }
        });
        if !reachable {
            problems.push(format!(
                "koordlet's {what} ({:?}:{:?}, hostNetwork {host_network}) reaches no listener serving probes ({health:?})",
                get.host, get.port
            ));
        }
        let path = get.path.as_deref().unwrap_or("/");
        if !(path.starts_with("/healthz") || path.starts_with("/readyz")) {
            problems.push(format!(
                "koordlet's {what} asks {path}; probes are /healthz and /readyz"
            ));
        }
    }
    if container.readiness_probe.is_none() || container.liveness_probe.is_none() {
        problems.push("koordlet needs a liveness and a readiness probe".to_string());
    }
    let selects_koordlet = |service: &Service| {
        service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|selector| {
                selector.get("koord-app").map(String::as_str) == Some("koordlet")
            })
    };
    let scraping: Vec<&str> = services
        .iter()
        .filter(|s| selects_koordlet(s))
        .filter(|service| {
            service
                .spec
                .iter()
                .flat_map(|s| s.ports.iter().flatten())
                .any(|port| {
                    let target = port
                        .target_port
                        .clone()
                        .unwrap_or(IntOrString::Int(port.port));
                    resolve_port(&target, container) == Some(addr.port())
                })
        })
        .map(|service| service.metadata.name.as_deref().unwrap_or("?"))
        .collect();
    if addr.ip().is_loopback() {
        for service in &scraping {
            problems.push(format!(
                "Service {service} points at koordlet's port {}, which listens on loopback only",
                addr.port()
            ));
        }
    } else if scraping.is_empty() {
        problems.push(format!(
            "koordlet's --addr {addr} is open beyond loopback (/metrics names pods) though no Service scrapes it"
        ));
    }
    problems
}

/// koord-descheduler's file as the binary loads it at start: upstream's
/// schema and defaults, the args its rounds need, the leader election.
/// Network QoS in the koordlet DaemonSet (`koordlet.networkQos.enabled`):
/// the `TCNetworkQoS` gate and the `NET_ADMIN` capability come together or
/// not at all. Answers whether it is on.
fn koordlet_network_qos(pod: &PodSpec) -> Result<bool, String> {
    let Some(container) = pod
        .containers
        .iter()
        .find(|c| c.command.iter().flatten().next().map(String::as_str) == Some("/koordlet"))
    else {
        return Err("no /koordlet container".to_string());
    };
    let gate_on = container
        .args
        .iter()
        .flatten()
        .filter_map(|arg| arg.strip_prefix("--feature-gates="))
        .flat_map(|gates| gates.split(','))
        .any(|gate| gate.trim() == "TCNetworkQoS=true");
    let net_admin = container
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.as_ref())
        .is_some_and(|add| add.iter().any(|cap| cap == "NET_ADMIN"));
    match (gate_on, net_admin) {
        (true, false) => Err("TCNetworkQoS=true without the NET_ADMIN capability".to_string()),
        (false, true) => Err("NET_ADMIN granted without the TCNetworkQoS gate".to_string()),
        (on, _) => Ok(on),
    }
}

fn check_descheduler_config(text: &str) -> Result<(), String> {
    let configuration = koord_descheduler::config::load(text).map_err(|e| e.to_string())?;
    koord_descheduler::live::round::Descheduler::new(&configuration).map_err(|e| e.to_string())?;
    koord_descheduler::leader_election(&configuration).map_err(|e| format!("{e:#}"))?;
    Ok(())
}

fn check_set(name: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let docs = documents(text);
    assert!(docs.len() > 10, "{name}: only {} documents", docs.len());
    let mut kinds = BTreeSet::new();
    let mut services: Vec<Service> = Vec::new();
    let mut scheduler_pod: Option<PodSpec> = None;
    let mut koordlet_pod: Option<PodSpec> = None;
    let mut kube_scheduler_config = String::new();
    let mut descheduler_config = false;
    let mut descheduler_deployment = false;
    for doc in &docs {
        if doc["kind"] == "Service"
            && let Ok(service) = serde_json::from_value::<Service>(doc.clone())
        {
            services.push(service);
        }
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let object = format!("{kind}/{}", doc["metadata"]["name"].as_str().unwrap_or("?"));
        kinds.insert(kind);
        match check_document(doc) {
            Ok(Some(pod)) => {
                for container in &pod.containers {
                    if let Err(e) = check_component_args(container) {
                        problems.push(format!("{name}: {object}: {e}"));
                    }
                }
                if object == "Deployment/koord-descheduler" {
                    descheduler_deployment = true;
                }
                if object == "Deployment/koord-scheduler" {
                    scheduler_pod = Some(pod);
                } else if object == "DaemonSet/koordlet" {
                    koordlet_pod = Some(pod);
                }
            }
            Ok(None) => {}
            Err(e) => problems.push(format!("{name}: {object}: {e}")),
        }
        if doc["kind"] == "ConfigMap" && doc["metadata"]["name"] == "slo-controller-config" {
            let data: std::collections::BTreeMap<String, String> =
                serde_json::from_value(doc["data"].clone()).unwrap();
            if let Err(e) = apis::configuration::SloControllerConfig::from_configmap_data(&data)
                .map_err(|e| e.to_string())
                .and_then(|config| config.validate().map_err(|e| format!("{e:?}")))
            {
                problems.push(format!("{name}: slo-controller-config: {e}"));
            }
        }
        if doc["kind"] == "ConfigMap" && doc["metadata"]["name"] == "koord-descheduler-config" {
            let text = doc["data"]["koord-descheduler-config"]
                .as_str()
                .unwrap_or("");
            if let Err(e) = check_descheduler_config(text) {
                problems.push(format!("{name}: koord-descheduler-config: {e}"));
            }
            descheduler_config = true;
        }
        if doc["kind"] == "ConfigMap" && doc["metadata"]["name"] == "koord-scheduler-config" {
            let text = doc["data"]["koord-scheduler-config"].as_str().unwrap_or("");
            if let Err(e) = koord_scheduler::config::SchedulerConfiguration::from_yaml(text)
                .and_then(|config| koord_scheduler::plugins::build_plugins(&config.profile()))
            {
                problems.push(format!("{name}: koord-scheduler-config: {e}"));
            }
            let text = doc["data"]["kube-scheduler-config"].as_str().unwrap_or("");
            for problem in check_kube_scheduler_extenders(text) {
                problems.push(format!("{name}: kube-scheduler-config: {problem}"));
            }
            kube_scheduler_config = text.to_string();
        }
    }
    match &scheduler_pod {
        Some(pod) => {
            for problem in check_scheduler_serving(pod, &kube_scheduler_config, &services) {
                problems.push(format!("{name}: Deployment/koord-scheduler: {problem}"));
            }
        }
        None => problems.push(format!("{name}: no Deployment/koord-scheduler rendered")),
    }
    match &koordlet_pod {
        Some(pod) => {
            for problem in check_koordlet_serving(pod, &services) {
                problems.push(format!("{name}: DaemonSet/koordlet: {problem}"));
            }
            // The all-features values switch network QoS on; the defaults leave it off.
            let wanted = name.contains("all-features");
            match koordlet_network_qos(pod) {
                Ok(on) if on != wanted => problems.push(format!(
                    "{name}: DaemonSet/koordlet: network QoS is {} (want {})",
                    if on { "on" } else { "off" },
                    if wanted { "on" } else { "off" }
                )),
                Ok(_) => {}
                Err(problem) => problems.push(format!("{name}: DaemonSet/koordlet: {problem}")),
            }
        }
        None => problems.push(format!("{name}: no DaemonSet/koordlet rendered")),
    }
    // Deployed by default, as upstream's chart does.
    if !descheduler_deployment || !descheduler_config {
        problems.push(format!(
            "{name}: no Deployment/koord-descheduler with its koord-descheduler-config rendered"
        ));
    }
    for expected in [
        "Deployment",
        "DaemonSet",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "PriorityClass",
        "ClusterRole",
    ] {
        if !kinds.contains(expected) {
            problems.push(format!("{name}: no {expected} rendered"));
        }
    }
    problems
}

#[test]
fn rendered_chart_parses_into_kubernetes_types_and_component_flags() {
    let sets = match rendered_sets() {
        Ok(sets) => sets,
        Err(reason) => {
            eprintln!("SKIP rendered_chart_parses_into_kubernetes_types: {reason}");
            return;
        }
    };
    let problems: Vec<String> = sets
        .iter()
        .flat_map(|(name, text)| check_set(name, text))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_misspelled_field_is_caught() {
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolcy": "Always"}]}
            }
        }
    });
    let error = check_document(&deployment).unwrap_err();
    assert!(error.contains("imagePullPolcy"), "{error}");
    let mut fixed = deployment.clone();
    let container = &mut fixed["spec"]["template"]["spec"]["containers"][0];
    container.as_object_mut().unwrap().remove("imagePullPolcy");
    container["imagePullPolicy"] = "Always".into();
    check_document(&fixed).unwrap();
}

#[test]
fn unknown_component_flags_are_caught() {
    let container = Container {
        name: "koordlet".into(),
        command: Some(vec!["/koordlet".into()]),
        args: Some(vec!["--cgroup-root-dirr=/host-cgroup/".into()]),
        ..Default::default()
    };
    assert!(check_component_args(&container).is_err());
}

#[test]
fn extender_interest_and_kube_scheduler_validation_are_checked() {
    let devices: String = KOORDINATOR_DEVICE_RESOURCES
        .iter()
        .map(|name| format!("  - {{name: {name}, ignoredByScheduler: true}}\n"))
        .collect();
    let verbs = "- urlPrefix: http://127.0.0.1:10251\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  bindVerb: bind\n  preemptVerb: preempt\n  weight: 1\n";
    let good = format!(
        "extenders:\n{verbs}- urlPrefix: http://127.0.0.1:10251\n  managedResources:\n{devices}"
    );
    assert_eq!(check_kube_scheduler_extenders(&good), Vec::<String>::new());

    // The verbs and the managed resources on one entry: prod pods skip the extender.
    let one_entry = format!("extenders:\n{verbs}  managedResources:\n{devices}");
    let problems = check_kube_scheduler_extenders(&one_entry).join("\n");
    assert!(problems.contains("lists managedResources"), "{problems}");

    // kubernetes.io/ names are refused by kube-scheduler; nvidia.com/gpu must not be ignored.
    let refused = format!(
        "{good}  - {{name: kubernetes.io/batch-cpu, ignoredByScheduler: true}}\n  - {{name: nvidia.com/gpu, ignoredByScheduler: true}}\n"
    );
    let problems = check_kube_scheduler_extenders(&refused).join("\n");
    assert!(
        problems.contains("\"kubernetes.io/batch-cpu\" is not an extended"),
        "{problems}"
    );
    assert!(problems.contains("nvidia.com/gpu is ignored"), "{problems}");

    // A missing device resource, and a second binder.
    let partial = format!(
        "extenders:\n{verbs}{verbs}- urlPrefix: x\n  managedResources:\n  - {{name: koordinator.sh/gpu, ignoredByScheduler: true}}\n"
    );
    let problems = check_kube_scheduler_extenders(&partial).join("\n");
    assert!(
        problems.contains("koordinator.sh/rdma is not declared"),
        "{problems}"
    );
    assert!(
        problems.contains("2 extenders implement bind"),
        "{problems}"
    );
    assert!(problems.contains("2 extenders with verbs"), "{problems}");

    // A share of nodes kube-scheduler would refuse.
    for bad in ["150", "12.5", "\"all\""] {
        let problems =
            check_kube_scheduler_extenders(&format!("percentageOfNodesToScore: {bad}\n{good}"))
                .join("\n");
        assert!(
            problems.contains("percentageOfNodesToScore"),
            "{bad}: {problems}"
        );
    }
    assert_eq!(
        check_kube_scheduler_extenders(&format!("percentageOfNodesToScore: 100\n{good}")),
        Vec::<String>::new()
    );

    // Without preemptVerb kube-scheduler's victims bypass Koordinator's rules.
    let no_preempt = good.replace("  preemptVerb: preempt\n", "");
    let problems = check_kube_scheduler_extenders(&no_preempt).join("\n");
    assert!(problems.contains("no preemptVerb"), "{problems}");
}

#[test]
fn an_exposed_extender_or_unreachable_probes_are_caught() {
    let pod = |args: &[&str], probe_port: IntOrString| -> PodSpec {
        serde_json::from_value(serde_json::json!({"containers": [{
            "name": "extender",
            "command": ["/koord-scheduler"],
            "args": args,
            "ports": [{"name": "health", "containerPort": 10260}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": probe_port}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": probe_port}}
        }]}))
        .unwrap()
    };
    let config = "extenders:\n- urlPrefix: http://127.0.0.1:10251\n";
    let health = IntOrString::String("health".into());
    let good = pod(
        &["--address=127.0.0.1", "--port=10251", "--health-port=10260"],
        health.clone(),
    );
    assert_eq!(
        check_scheduler_serving(&good, config, &[]),
        Vec::<String>::new()
    );

    // The previous chart: the extender on every interface, probed there.
    let open = pod(
        &["--address=0.0.0.0", "--port=10251"],
        IntOrString::Int(10251),
    );
    let problems = check_scheduler_serving(&open, config, &[]).join("\n");
    assert!(problems.contains("would not start"), "{problems}");
    assert!(problems.contains("not a loopback address"), "{problems}");

    // Loopback, but probed on the loopback port: kubelet cannot reach it.
    let loopback_probes = pod(
        &["--address=127.0.0.1", "--port=10251"],
        IntOrString::Int(10251),
    );
    let problems = check_scheduler_serving(&loopback_probes, config, &[]).join("\n");
    assert!(
        problems.contains("livenessProbe goes to port"),
        "{problems}"
    );
    assert!(
        problems.contains("readinessProbe goes to port"),
        "{problems}"
    );

    // kube-scheduler pointed at a Service, and a Service leading to the extender.
    let remote = "extenders:\n- urlPrefix: http://koord-scheduler.koordinator-system:10251\n";
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "koord-scheduler"},
        "spec": {"selector": {"koord-app": "koord-scheduler"}, "ports": [{"port": 10251}]}
    }))
    .unwrap();
    let problems = check_scheduler_serving(&good, remote, &[service]).join("\n");
    assert!(
        problems.contains("kube-scheduler calls the extender at"),
        "{problems}"
    );
    assert!(
        problems.contains("Service koord-scheduler exposes the extender's port 10251"),
        "{problems}"
    );
}

#[test]
fn unreachable_koordlet_probes_or_exposed_loopback_ports_are_caught() {
    let pod = |args: &[&str], host: Option<&str>, host_network: bool| -> PodSpec {
        let mut get = serde_json::json!({"path": "/readyz", "port": 9316});
        if let Some(host) = host {
            get["host"] = host.into();
        }
        let mut live = get.clone();
        live["path"] = "/healthz".into();
        serde_json::from_value(serde_json::json!({
            "hostNetwork": host_network,
            "containers": [{
                "name": "koordlet",
                "command": ["/koordlet"],
                "args": args,
                "ports": [{"name": "http", "containerPort": 9316}],
                "readinessProbe": {"httpGet": get},
                "livenessProbe": {"httpGet": live}
            }]
        }))
        .unwrap()
    };
    // The chart: loopback, probed on 127.0.0.1 from the host network.
    let good = pod(&["--addr=127.0.0.1:9316"], Some("127.0.0.1"), true);
    assert_eq!(check_koordlet_serving(&good, &[]), Vec::<String>::new());
    // Every interface is only for the ServiceMonitor (below); the previous
    // chart listened there with nothing scraping it.
    let open = pod(&["--addr=:9316"], Some("127.0.0.1"), true);
    let problems = check_koordlet_serving(&open, &[]).join("\n");
    assert!(problems.contains("no Service scrapes it"), "{problems}");

    // Loopback, probed at the pod IP: the kubelet cannot reach it.
    let problems = check_koordlet_serving(&pod(&["--addr=127.0.0.1:9316"], None, true), &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    // 127.0.0.1 without the host network is the pod's own loopback.
    let problems = check_koordlet_serving(
        &pod(&["--addr=127.0.0.1:9316"], Some("127.0.0.1"), false),
        &[],
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
    // A health-only listener on every interface serves probes at the pod IP.
    let health = pod(
        &["--addr=127.0.0.1:9315", "--health-addr=:9316"],
        None,
        true,
    );
    assert_eq!(check_koordlet_serving(&health, &[]), Vec::<String>::new());

    // A Service in front of a loopback-only port.
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "koordlet-service"},
        "spec": {"selector": {"koord-app": "koordlet"}, "ports": [{"port": 9316}]}
    }))
    .unwrap();
    let problems = check_koordlet_serving(&good, std::slice::from_ref(&service)).join("\n");
    assert!(problems.contains("listens on loopback only"), "{problems}");
    assert_eq!(
        check_koordlet_serving(&open, &[service]),
        Vec::<String>::new()
    );
}

#[test]
fn network_qos_gate_and_capability_must_come_together() {
    let pod = |gates: &str, caps: &[&str]| -> PodSpec {
        serde_json::from_value(serde_json::json!({
            "containers": [{
                "name": "koordlet",
                "command": ["/koordlet"],
                "args": [format!("--feature-gates={gates}")],
                "securityContext": {"capabilities": {"add": caps}}
            }]
        }))
        .unwrap()
    };
    assert_eq!(
        koordlet_network_qos(&pod("CPUBurst=true", &["SYS_ADMIN"])),
        Ok(false)
    );
    assert_eq!(
        koordlet_network_qos(&pod(
            "CPUBurst=true,TCNetworkQoS=true",
            &["SYS_ADMIN", "NET_ADMIN"]
        )),
        Ok(true)
    );
    let missing = koordlet_network_qos(&pod("TCNetworkQoS=true", &["SYS_ADMIN"])).unwrap_err();
    assert!(missing.contains("without the NET_ADMIN"), "{missing}");
    let stray = koordlet_network_qos(&pod("TCNetworkQoS=false", &["NET_ADMIN"])).unwrap_err();
    assert!(stray.contains("without the TCNetworkQoS gate"), "{stray}");
}

#[test]
fn a_broken_descheduler_configuration_is_caught() {
    let good = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nleaderElection:\n  resourceLock: leases\n";
    check_descheduler_config(good).unwrap();
    let lock = good.replace("resourceLock: leases", "resourceLock: endpoints");
    assert!(
        check_descheduler_config(&lock)
            .unwrap_err()
            .contains("only \"leases\" is supported")
    );
    let misspelled = format!("{good}deschedulingIntervall: 10s\n");
    assert!(check_descheduler_config(&misspelled).is_err());
}
