//! Pod binding admission (upstream `BindingAdmissionHandler`, gate
//! `BindingAdmissionWebhook`, path `/validate-pod-binding`): during a
//! scheduler migration, only users whose name contains one of the allowed
//! substrings may bind pods in the namespaces in scope. The decision core;
//! the handler reads the pod (its labels and annotations) only when the
//! core asks for it.
//!
//! Order of the checks, as upstream:
//! 1. no allowed user names configured: not checked;
//! 2. the user name contains an allowed substring: allowed;
//! 3. the pod's namespace is excluded: allowed;
//! 4. scope: `*` checks every namespace, a list checks those, nothing
//!    configured checks none (allowed);
//! 5. the pod carries a bypass label or annotation key (any value): allowed;
//!    a pod that cannot be read is allowed (fail-open, as upstream);
//! 6. dry run: allowed, the would-be denial is logged and counted;
//! 7. denied.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Upstream's default of `--binding-admission-exclude-namespaces`.
pub const DEFAULT_EXCLUDE_NAMESPACES: &str = "kube-system";
/// Upstream's default of `--binding-admission-bypass-labels`.
pub const DEFAULT_BYPASS_LABELS: &str = "koordinator.sh/binding-admission-bypass";
/// Upstream's refusal message.
pub const DENIED_MESSAGE: &str = "binding denied: username is not in the allowed list";

/// The `--binding-admission-*` flags as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingAdmissionFlags {
    pub user_name: String,
    pub dry_run: bool,
    pub namespaces: String,
    pub exclude_namespaces: String,
    pub bypass_labels: String,
    pub bypass_annotations: String,
}

/// Which namespaces are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceScope {
    /// `--binding-admission-namespaces=*`.
    All,
    /// The listed namespaces; empty checks none.
    Listed(BTreeSet<String>),
}

/// The parsed flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingAdmission {
    allowed_user_names: Vec<String>,
    scope: NamespaceScope,
    excluded_namespaces: BTreeSet<String>,
    bypass_labels: BTreeSet<String>,
    bypass_annotations: BTreeSet<String>,
    dry_run: bool,
}

/// A comma-separated flag value: items trimmed, empty items dropped.
fn items(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
}

impl BindingAdmission {
    /// Parses the flags as upstream's `SetupBindingAdmission` does: only
    /// exactly `*` selects every namespace.
    pub fn from_flags(flags: &BindingAdmissionFlags) -> Self {
        let scope = if flags.namespaces == "*" {
            NamespaceScope::All
        } else {
            NamespaceScope::Listed(items(&flags.namespaces).collect())
        };
        BindingAdmission {
            allowed_user_names: items(&flags.user_name).collect(),
            scope,
            excluded_namespaces: items(&flags.exclude_namespaces).collect(),
            bypass_labels: items(&flags.bypass_labels).collect(),
            bypass_annotations: items(&flags.bypass_annotations).collect(),
            dry_run: flags.dry_run,
        }
    }

    /// Whether any binding can be refused (an empty allowlist turns the check off).
    pub fn is_active(&self) -> bool {
        !self.allowed_user_names.is_empty()
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let scope = match &self.scope {
            NamespaceScope::All => "*".to_owned(),
            NamespaceScope::Listed(list) => list.iter().cloned().collect::<Vec<_>>().join(","),
        };
        format!(
            "allowed user names [{}], namespaces [{scope}], excluded [{}], bypass labels [{}], bypass annotations [{}], dry run {}",
            self.allowed_user_names.join(","),
            join(&self.excluded_namespaces),
            join(&self.bypass_labels),
            join(&self.bypass_annotations),
            self.dry_run
        )
    }

    /// Steps 1–4 of the module docs, on the binding request alone.
    pub fn screen(&self, username: &str, namespace: &str) -> Screen {
        if !self.is_active() {
            return Screen::Decided(Outcome::NotChecked);
        }
        if self
            .allowed_user_names
            .iter()
            .any(|allowed| username.contains(allowed.as_str()))
        {
            return Screen::Decided(Outcome::AllowedByUserName);
        }
        if self.excluded_namespaces.contains(namespace) {
            return Screen::Decided(Outcome::ExcludedNamespace);
        }
        match &self.scope {
            NamespaceScope::All => Screen::NeedsPod,
            NamespaceScope::Listed(list) if list.is_empty() => Screen::Decided(Outcome::NotChecked),
            NamespaceScope::Listed(list) if !list.contains(namespace) => {
                Screen::Decided(Outcome::OutOfScope)
            }
            NamespaceScope::Listed(_) => Screen::NeedsPod,
        }
    }

    /// Steps 5–7, once [`Self::screen`] asked for the pod. `pod` is what the
    /// lookup found: `None` when no lookup is wired (the bypass keys are
    /// then not consulted, as upstream without a client), `Some(Err)` when
    /// the pod could not be read.
    pub fn judge(&self, pod: Option<Result<&ObjectMeta, &str>>) -> Outcome {
        match pod {
            Some(Err(_)) => return Outcome::PodUnreadable,
            Some(Ok(meta)) => {
                let has =
                    |keys: &BTreeSet<String>,
                     map: Option<&std::collections::BTreeMap<String, String>>| {
                        map.and_then(|map| keys.iter().find(|key| map.contains_key(key.as_str())))
                            .cloned()
                    };
                if let Some(key) = has(&self.bypass_labels, meta.labels.as_ref()) {
                    return Outcome::BypassLabel(key);
                }
                if let Some(key) = has(&self.bypass_annotations, meta.annotations.as_ref()) {
                    return Outcome::BypassAnnotation(key);
                }
            }
            None => {}
        }
        if self.dry_run {
            Outcome::DryRun
        } else {
            Outcome::Denied
        }
    }

    /// The allowlist, for the denial log line.
    pub fn allowed_user_names(&self) -> &[String] {
        &self.allowed_user_names
    }
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}

/// What [`BindingAdmission::screen`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Screen {
    Decided(Outcome),
    /// The pod's labels and annotations decide; read it and call
    /// [`BindingAdmission::judge`].
    NeedsPod,
}

/// The decision and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Check off, not a binding, or no namespaces in scope.
    NotChecked,
    AllowedByUserName,
    ExcludedNamespace,
    OutOfScope,
    BypassLabel(String),
    BypassAnnotation(String),
    /// The pod could not be read: allowed (fail-open).
    PodUnreadable,
    /// Would be denied; allowed because of `--binding-admission-dry-run`.
    DryRun,
    Denied,
}

impl Outcome {
    pub fn allowed(&self) -> bool {
        !matches!(self, Outcome::Denied)
    }

    /// The `decision` label of `koord_manager_webhook_binding_admission_decisions_total`
    /// (upstream's values); `None` for the outcomes upstream does not count.
    pub fn metric_label(&self) -> Option<&'static str> {
        match self {
            Outcome::NotChecked | Outcome::PodUnreadable => None,
            Outcome::AllowedByUserName => Some("allowed_username"),
            Outcome::ExcludedNamespace => Some("excluded_ns"),
            Outcome::OutOfScope => Some("out_of_scope"),
            Outcome::BypassLabel(_) => Some("bypass_label"),
            Outcome::BypassAnnotation(_) => Some("bypass_annotation"),
            Outcome::DryRun => Some("dry_run"),
            Outcome::Denied => Some("denied"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(user_name: &str, namespaces: &str) -> BindingAdmissionFlags {
        BindingAdmissionFlags {
            user_name: user_name.to_owned(),
            dry_run: false,
            namespaces: namespaces.to_owned(),
            exclude_namespaces: DEFAULT_EXCLUDE_NAMESPACES.to_owned(),
            bypass_labels: DEFAULT_BYPASS_LABELS.to_owned(),
            bypass_annotations: String::new(),
        }
    }

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        ObjectMeta {
            name: Some("p".into()),
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
    }

    /// The whole decision with a pod that the lookup finds.
    fn decide(admission: &BindingAdmission, user: &str, ns: &str, pod: &ObjectMeta) -> Outcome {
        match admission.screen(user, ns) {
            Screen::Decided(outcome) => outcome,
            Screen::NeedsPod => admission.judge(Some(Ok(pod))),
        }
    }

    const KOORD: &str = "system:serviceaccount:koordinator-system:koord-scheduler";
    const DEFAULT_SCHEDULER: &str = "system:kube-scheduler";

    // Cases of upstream's TestBindingAdmissionHandler.
    #[test]
    fn upstream_table() {
        let plain = meta(&[], &[]);
        let labelled = meta(&[(DEFAULT_BYPASS_LABELS, "")], &[]);
        let cases: Vec<(
            &str,
            BindingAdmissionFlags,
            &str,
            &str,
            &ObjectMeta,
            Outcome,
        )> = vec![
            (
                "empty allowlist disables the check",
                flags("", "*"),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::NotChecked,
            ),
            (
                "user name contains an allowed substring",
                flags("koord-scheduler", "*"),
                KOORD,
                "default",
                &plain,
                Outcome::AllowedByUserName,
            ),
            (
                "second entry of the allowlist matches",
                flags("other, koord-scheduler ,", "*"),
                KOORD,
                "default",
                &plain,
                Outcome::AllowedByUserName,
            ),
            (
                "excluded namespace",
                flags("koord-scheduler", "*"),
                DEFAULT_SCHEDULER,
                "kube-system",
                &plain,
                Outcome::ExcludedNamespace,
            ),
            (
                "no namespaces configured: nothing enforced",
                flags("koord-scheduler", ""),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::NotChecked,
            ),
            (
                "namespace outside the listed scope",
                flags("koord-scheduler", "team-a,team-b"),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::OutOfScope,
            ),
            (
                "listed namespace, other user: denied",
                flags("koord-scheduler", "team-a, default"),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::Denied,
            ),
            (
                "all namespaces, other user: denied",
                flags("koord-scheduler", "*"),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::Denied,
            ),
            (
                "bypass label present (any value)",
                flags("koord-scheduler", "*"),
                DEFAULT_SCHEDULER,
                "default",
                &labelled,
                Outcome::BypassLabel(DEFAULT_BYPASS_LABELS.to_owned()),
            ),
            (
                "\" * \" is not the wildcard, only \"*\" is",
                flags("koord-scheduler", " * "),
                DEFAULT_SCHEDULER,
                "default",
                &plain,
                Outcome::OutOfScope,
            ),
        ];
        for (name, flags, user, ns, pod, expected) in cases {
            let admission = BindingAdmission::from_flags(&flags);
            assert_eq!(decide(&admission, user, ns, pod), expected, "{name}");
        }
    }

    #[test]
    fn bypass_annotations_dry_run_and_unreadable_pods() {
        let mut given = flags("koord-scheduler", "*");
        given.bypass_annotations = "example.com/delegated,vk.io/owner".into();
        let admission = BindingAdmission::from_flags(&given);
        let annotated = meta(&[], &[("vk.io/owner", "x")]);
        assert_eq!(
            decide(&admission, DEFAULT_SCHEDULER, "default", &annotated),
            Outcome::BypassAnnotation("vk.io/owner".into())
        );
        // A label key listed only as an annotation key does not bypass.
        let wrong_place = meta(&[("vk.io/owner", "x")], &[]);
        assert_eq!(
            decide(&admission, DEFAULT_SCHEDULER, "default", &wrong_place),
            Outcome::Denied
        );
        // Fail-open when the pod cannot be read; without a lookup the keys are not consulted.
        assert_eq!(
            admission.judge(Some(Err("timeout"))),
            Outcome::PodUnreadable
        );
        assert_eq!(admission.judge(None), Outcome::Denied);

        given.dry_run = true;
        let dry = BindingAdmission::from_flags(&given);
        let outcome = decide(&dry, DEFAULT_SCHEDULER, "default", &meta(&[], &[]));
        assert_eq!(outcome, Outcome::DryRun);
        assert!(outcome.allowed());
        assert_eq!(outcome.metric_label(), Some("dry_run"));
        // Bypass keys still win over the dry run (upstream counts them as bypass).
        assert_eq!(
            decide(&dry, DEFAULT_SCHEDULER, "default", &annotated),
            Outcome::BypassAnnotation("vk.io/owner".into())
        );
    }

    #[test]
    fn only_denied_is_refused_and_labels_are_upstreams() {
        assert!(!Outcome::Denied.allowed());
        let labels: Vec<_> = [
            Outcome::AllowedByUserName,
            Outcome::ExcludedNamespace,
            Outcome::OutOfScope,
            Outcome::BypassLabel(String::new()),
            Outcome::BypassAnnotation(String::new()),
            Outcome::DryRun,
            Outcome::Denied,
        ]
        .iter()
        .map(|o| o.metric_label().unwrap())
        .collect();
        assert_eq!(
            labels,
            [
                "allowed_username",
                "excluded_ns",
                "out_of_scope",
                "bypass_label",
                "bypass_annotation",
                "dry_run",
                "denied"
            ]
        );
        assert_eq!(Outcome::NotChecked.metric_label(), None);
        assert!(!BindingAdmission::from_flags(&BindingAdmissionFlags::default()).is_active());
    }
}
