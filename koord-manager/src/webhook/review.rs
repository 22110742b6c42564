//! AdmissionReview (`admission.k8s.io/v1`) wire types and the decision every
//! webhook core returns.

use std::fmt;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The apiVersion of the reviews we answer.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_KIND: &str = "AdmissionReview";

/// What kube-apiserver posts.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub request: Option<AdmissionRequest>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The request part of a review. Objects stay raw JSON; each webhook decodes
/// the type it expects.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: Option<Value>,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default)]
    pub options: Option<Value>,
}

impl AdmissionRequest {
    /// True when the request is for `resource` itself, not a subresource.
    pub fn is_for(&self, resource: &str) -> bool {
        self.resource.resource == resource && self.sub_resource.as_deref().unwrap_or("").is_empty()
    }

    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// Decodes `object` (or `oldObject` when `old`), naming the field on failure.
    pub fn decode<T: serde::de::DeserializeOwned>(&self, old: bool) -> Result<Option<T>, Decision> {
        let (field, raw) = if old {
            ("oldObject", &self.old_object)
        } else {
            ("object", &self.object)
        };
        match raw {
            None | Some(Value::Null) => Ok(None),
            Some(value) => T::deserialize(value)
                .map(Some)
                .map_err(|err| Decision::bad_request(format!("cannot decode {field}: {err}"))),
        }
    }

    /// The object, and on UPDATE the old object too; a missing one (or a
    /// malformed one) is the 400 to answer.
    pub fn decode_with_old<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<(T, Option<T>), Decision> {
        let object = self
            .decode(false)?
            .ok_or_else(|| Decision::bad_request("the request has no object"))?;
        let old = if self.operation == Operation::Update {
            let old = self
                .decode(true)?
                .ok_or_else(|| Decision::bad_request("the update request has no oldObject"))?;
            Some(old)
        } else {
            None
        };
        Ok((object, old))
    }
}

/// What a webhook decided. `code` and `message` end up in the response's
/// `status`; kube-apiserver shows `message` to the user on denial.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub code: u16,
    pub message: String,
    pub patch: Option<json_patch::Patch>,
    /// Why it was refused, as a metric label, when the webhook's error type
    /// says more than the code.
    pub reason: Option<&'static str>,
}

impl Decision {
    pub fn allow() -> Self {
        Decision {
            allowed: true,
            code: 200,
            message: String::new(),
            patch: None,
            reason: None,
        }
    }

    /// Allowed with a JSON patch from `original` to `mutated`; plain allow when they are equal.
    pub fn patch_between(original: &Value, mutated: &Value) -> Self {
        let patch = json_patch::diff(original, mutated);
        if patch.0.is_empty() {
            Decision::allow()
        } else {
            Decision {
                patch: Some(patch),
                ..Decision::allow()
            }
        }
    }

    /// A policy denial (403).
    pub fn deny(message: impl Into<String>) -> Self {
        Decision {
            allowed: false,
            code: 403,
            message: message.into(),
            patch: None,
            reason: None,
        }
    }

    /// The object is invalid or undecodable (400), as upstream's `Errored(400, …)`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Decision {
            code: 400,
            ..Decision::deny(message)
        }
    }

    /// The refusal's metric label (see [`Decision::metric_label`]).
    pub fn with_reason(self, reason: &'static str) -> Self {
        Decision {
            reason: Some(reason),
            ..self
        }
    }

    /// The `reason` label of a refusal: the one given, else what the code
    /// says (400 bad request, 403 denied, anything else internal).
    pub fn metric_label(&self) -> &'static str {
        match (self.reason, self.code) {
            (Some(reason), _) => reason,
            (None, 400) => "bad_request",
            (None, 403) => "denied",
            (None, _) => "internal",
        }
    }

    /// The webhook could not decide (500).
    pub fn internal(message: impl Into<String>) -> Self {
        Decision {
            code: 500,
            ..Decision::deny(message)
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allowed {
            write!(f, "allowed")?;
            if let Some(patch) = &self.patch {
                write!(f, " with {} patch operation(s)", patch.0.len())?;
            }
            Ok(())
        } else {
            write!(f, "denied ({}): {}", self.code, self.message)
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseStatus<'a> {
    metadata: serde_json::Map<String, Value>,
    code: u16,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    status: ResponseStatus<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: AdmissionResponseOut<'a>,
}

/// The response review for request `uid`, echoing the request's apiVersion
/// (kube-apiserver requires it to match).
pub fn response_review(
    api_version: &str,
    uid: &str,
    decision: &Decision,
) -> Result<Vec<u8>, serde_json::Error> {
    let patch = match &decision.patch {
        Some(patch) => {
            Some(base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(patch)?))
        }
        None => None,
    };
    let api_version = if api_version.is_empty() {
        ADMISSION_API_VERSION
    } else {
        api_version
    };
    serde_json::to_vec(&AdmissionReviewOut {
        api_version,
        kind: ADMISSION_KIND,
        response: AdmissionResponseOut {
            uid,
            allowed: decision.allowed,
            status: ResponseStatus {
                metadata: serde_json::Map::new(),
                code: decision.code,
                message: &decision.message,
            },
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
        },
    })
}

/// Field errors in the style of Kubernetes' `field.ErrorList` aggregate:
/// one error prints alone, several print as `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    match errors {
        [single] => single.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn review_round_trip_carries_uid_and_base64_patch() {
        let decision = Decision::patch_between(
            &json!({"metadata": {"labels": {}}}),
            &json!({"metadata": {"labels": {"a": "b"}}}),
        );
        let body = response_review("admission.k8s.io/v1", "u-1", &decision).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["kind"], "AdmissionReview");
        assert_eq!(value["response"]["uid"], "u-1");
        assert_eq!(value["response"]["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(value["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels/a", "value": "b"}])
        );
    }

    #[test]
    fn denial_has_code_and_message_and_no_patch() {
        let body = response_review("", "u", &Decision::deny("no")).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["apiVersion"], ADMISSION_API_VERSION);
        assert_eq!(value["response"]["allowed"], false);
        assert_eq!(value["response"]["status"]["code"], 403);
        assert_eq!(value["response"]["status"]["message"], "no");
        assert!(value["response"].get("patch").is_none());
    }

    #[test]
    fn equal_objects_give_a_plain_allow() {
        let same = json!({"a": 1});
        assert_eq!(Decision::patch_between(&same, &same), Decision::allow());
    }

    #[test]
    fn refusals_carry_a_metric_label() {
        assert_eq!(Decision::bad_request("x").metric_label(), "bad_request");
        assert_eq!(Decision::deny("x").metric_label(), "denied");
        assert_eq!(Decision::internal("x").metric_label(), "internal");
        let labelled = Decision::bad_request("x").with_reason("in_use");
        assert_eq!(labelled.metric_label(), "in_use");
        assert_eq!(labelled.message, "x");
    }

    #[test]
    fn aggregate_matches_kubernetes_style() {
        assert_eq!(aggregate(&["x".into()]), "x");
        assert_eq!(aggregate(&["x".into(), "y".into()]), "[x, y]");
    }
}
