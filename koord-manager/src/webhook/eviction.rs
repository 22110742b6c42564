//! Node-scoped evictions (ours; upstream has no such webhook). RBAC can only grant koordlet
//! `create pods/eviction` for every pod of the cluster, and a ValidatingAdmissionPolicy cannot
//! see which node the evicted pod runs on (the Eviction object names only the pod). This webhook
//! looks the pod up and lets a node-bound requester (koordlet's pod-bound token, whose user info
//! carries `authentication.kubernetes.io/node-name`) evict only pods bound to its own node, the
//! way the NodeRestriction admission plugin scopes a kubelet.
//!
//! The decision core has no I/O: [`decide`] takes the requester and the pod's node as looked up
//! by the handler.

use k8s_openapi::api::authentication::v1::UserInfo;
use serde_json::Value;

use super::review::Decision;

/// The user-info key kube-apiserver fills from a pod-bound service-account token (1.30+).
pub const NODE_NAME_CLAIM: &str = "authentication.kubernetes.io/node-name";

/// The largest user-info entry looked at: usernames and node names are DNS-1123 subdomains or
/// `system:serviceaccount:<ns>:<name>` (well under 1 KiB); a longer value is not one of them.
const MAX_NAME_BYTES: usize = 1024;

/// Who asked for the eviction, as the API server authenticated them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requester {
    pub username: String,
    /// Every value of the node-name claim (a well-formed token has exactly one).
    pub node_claims: Vec<String>,
}

impl Requester {
    /// The requester of an admission request (its `userInfo`).
    pub fn from_user(user_info: &UserInfo) -> Self {
        // The JSON reader bounds every name; the typed user info is read through it.
        let user_info = serde_json::to_value(user_info).ok();
        Self::from_user_info(user_info.as_ref())
    }

    /// Reads `request.userInfo`; absent or malformed fields read as empty.
    pub fn from_user_info(user_info: Option<&Value>) -> Self {
        let bounded = |value: &Value| {
            value
                .as_str()
                .filter(|text| text.len() <= MAX_NAME_BYTES)
                .map(str::to_owned)
        };
        let Some(info) = user_info else {
            return Requester::default();
        };
        let username = info.get("username").and_then(bounded).unwrap_or_default();
        let node_claims = info
            .get("extra")
            .and_then(|extra| extra.get(NODE_NAME_CLAIM))
            .and_then(Value::as_array)
            .map(|values| {
                // Anything that is not one short string counts as a claim nobody can match.
                values
                    .iter()
                    .take(4)
                    .map(|value| bounded(value).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        Requester {
            username,
            node_claims,
        }
    }

    /// The node the requester's token is bound to, when it names exactly one.
    fn own_node(&self) -> Option<&str> {
        match self.node_claims.as_slice() {
            [node] if !node.is_empty() => Some(node),
            _ => None,
        }
    }
}

/// Where the evicted pod is, as the handler found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodPlacement {
    /// Bound to this node.
    Bound(String),
    /// Not bound to any node yet.
    Unbound,
    /// No such pod: the eviction itself will answer 404.
    Missing,
}

/// The users this webhook scopes to their node (koordlet's service account); everyone else is
/// left to RBAC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopedUsers(pub Vec<String>);

impl ScopedUsers {
    /// The user name of service account `name` in `namespace`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        ScopedUsers(vec![format!("system:serviceaccount:{namespace}:{name}")])
    }

    pub fn contains(&self, username: &str) -> bool {
        self.0.iter().any(|user| user == username)
    }
}

/// Whether `requester` may evict pod `namespace/name`, found at `placement`.
pub fn decide(
    requester: &Requester,
    scoped: &ScopedUsers,
    namespace: &str,
    name: &str,
    placement: &PodPlacement,
) -> Decision {
    if !scoped.contains(&requester.username) {
        return Decision::allow();
    }
    let Some(own_node) = requester.own_node() else {
        return Decision::deny(format!(
            "{} has no single node claim ({NODE_NAME_CLAIM}) in its token: only the pod-bound \
             token the kubelet mounts into its pod may evict, and only pods of that node",
            requester.username
        ));
    };
    match placement {
        PodPlacement::Bound(node) if node == own_node => Decision::allow(),
        PodPlacement::Bound(node) => Decision::deny(format!(
            "{} on node {own_node} may only evict pods of its own node; pod {namespace}/{name} \
             is on node \"{node}\"",
            requester.username
        )),
        PodPlacement::Unbound => Decision::deny(format!(
            "{} on node {own_node} may only evict pods of its own node; pod {namespace}/{name} \
             is not bound to a node",
            requester.username
        )),
        // Nothing to protect; the eviction API answers NotFound itself.
        PodPlacement::Missing => Decision::allow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn koordlet() -> ScopedUsers {
        ScopedUsers::service_account("koordinator-system", "koordlet")
    }

    fn requester(user_info: Value) -> Requester {
        Requester::from_user_info(Some(&user_info))
    }

    const KOORDLET: &str = "system:serviceaccount:koordinator-system:koordlet";

    #[test]
    fn koordlet_evicts_pods_of_its_own_node_only() {
        let on_node_a = requester(json!({
            "username": KOORDLET,
            "extra": {NODE_NAME_CLAIM: ["node-a"], "authentication.kubernetes.io/pod-name": ["koordlet-x"]}
        }));
        let own = PodPlacement::Bound("node-a".into());
        assert!(decide(&on_node_a, &koordlet(), "ns", "p", &own).allowed);

        let foreign = PodPlacement::Bound("node-b".into());
        let denied = decide(&on_node_a, &koordlet(), "ns", "p", &foreign);
        assert!(!denied.allowed);
        assert_eq!(denied.code, 403);
        assert!(denied.message.contains("node-a"), "{}", denied.message);
        assert!(denied.message.contains("\"node-b\""), "{}", denied.message);
        assert!(denied.message.contains("ns/p"), "{}", denied.message);

        let unbound = decide(&on_node_a, &koordlet(), "ns", "p", &PodPlacement::Unbound);
        assert!(!unbound.allowed);
        assert!(unbound.message.contains("not bound"), "{}", unbound.message);

        assert!(decide(&on_node_a, &koordlet(), "ns", "p", &PodPlacement::Missing).allowed);
    }

    #[test]
    fn a_koordlet_token_without_exactly_one_node_claim_evicts_nothing() {
        let own = PodPlacement::Bound("node-a".into());
        for user_info in [
            json!({"username": KOORDLET}),
            json!({"username": KOORDLET, "extra": {}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: []}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: [""]}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: ["node-a", "node-b"]}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: "node-a"}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: [7]}}),
            json!({"username": KOORDLET, "extra": {NODE_NAME_CLAIM: ["x".repeat(5000)]}}),
        ] {
            let decision = decide(&requester(user_info.clone()), &koordlet(), "ns", "p", &own);
            assert!(!decision.allowed, "{user_info}");
            assert!(
                decision.message.contains("no single node claim"),
                "{}",
                decision.message
            );
        }
    }

    #[test]
    fn other_users_are_left_to_rbac() {
        let placement = PodPlacement::Bound("node-b".into());
        for user_info in [
            json!({"username": "system:serviceaccount:kube-system:disruption-controller"}),
            json!({"username": "system:serviceaccount:other:koordlet", "extra": {NODE_NAME_CLAIM: ["node-a"]}}),
            json!({"username": ["not", "a", "string"]}),
            json!(null),
        ] {
            assert!(
                decide(
                    &requester(user_info.clone()),
                    &koordlet(),
                    "ns",
                    "p",
                    &placement
                )
                .allowed,
                "{user_info}"
            );
        }
        assert_eq!(Requester::from_user_info(None), Requester::default());
    }
}
