//! AdmissionReview (`admission.k8s.io/v1`) on kube's admission types, the
//! decision every webhook core returns, and the response built from it.

use std::fmt;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::core::admission::{self, AdmissionResponse};
use kube::core::{DynamicObject, Status, TypeMeta};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The apiVersion answered when a review names none (kube-apiserver
/// requires the response's to match the request's).
pub const ADMISSION_API_VERSION: &str = admission::META_API_VERSION_V1;
pub const ADMISSION_KIND: &str = admission::META_KIND;

pub use kube::core::admission::Operation;

/// What kube-apiserver posts and what we answer (`admission.k8s.io/v1`).
/// Objects arrive as [`DynamicObject`]s; each webhook decodes the type it
/// expects with [`RequestExt::decode`].
pub type AdmissionReview = admission::AdmissionReview<DynamicObject>;
/// The request part of a review; its `types` are the review's once taken
/// out with `try_into`.
pub type AdmissionRequest = admission::AdmissionRequest<DynamicObject>;

/// The operation's wire name, for logs and metric labels.
pub trait OperationName {
    fn as_str(&self) -> &'static str;
}

impl OperationName for Operation {
    fn as_str(&self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What every handler reads from a request beyond its fields.
pub trait RequestExt {
    /// True when the request is for `resource` itself, not a subresource.
    fn is_for(&self, resource: &str) -> bool;
    /// The request's namespace, empty for cluster-scoped objects.
    fn namespace(&self) -> &str;
    /// Decodes `object` (or `oldObject` when `old`), naming the field on failure.
    fn decode<T: DeserializeOwned>(&self, old: bool) -> Result<Option<T>, Decision>;
    /// The object, and on UPDATE the old object too; a missing one (or a
    /// malformed one) is the 400 to answer.
    fn decode_with_old<T: DeserializeOwned>(&self) -> Result<(T, Option<T>), Decision>;
}

impl RequestExt for AdmissionRequest {
    fn is_for(&self, resource: &str) -> bool {
        self.resource.resource == resource && self.sub_resource.as_deref().unwrap_or("").is_empty()
    }

    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn decode<T: DeserializeOwned>(&self, old: bool) -> Result<Option<T>, Decision> {
        let (field, raw) = if old {
            ("oldObject", &self.old_object)
        } else {
            ("object", &self.object)
        };
        let Some(object) = raw else {
            return Ok(None);
        };
        // The dynamic object holds metadata typed and the rest as JSON; the
        // typed object is read from their union.
        serde_json::to_value(object)
            .and_then(|value| T::deserialize(&value))
            .map(Some)
            .map_err(|err| Decision::bad_request(format!("cannot decode {field}: {err}")))
    }

    fn decode_with_old<T: DeserializeOwned>(&self) -> Result<(T, Option<T>), Decision> {
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

    /// A 400 with the error's message and its metric label.
    pub fn bad_request_for(error: &impl Refusal) -> Self {
        Decision::bad_request(error.to_string()).with_reason(error.metric_label())
    }

    /// A 500 with the error's message and its metric label.
    pub fn internal_for(error: &impl Refusal) -> Self {
        Decision::internal(error.to_string()).with_reason(error.metric_label())
    }
}

/// A webhook error that refuses an admission: its message is what the user
/// sees, its label the `reason` of `koord_manager_webhook_rejections`.
pub trait Refusal: fmt::Display {
    fn metric_label(&self) -> &'static str;
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

/// Why a response could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("cannot encode the patch: {0}")]
    Patch(#[from] admission::SerializePatchError),
    #[error("cannot encode the response: {0}")]
    Json(#[from] serde_json::Error),
}

/// The answer to `request`: its uid, the decision's allowed, code and
/// message (in `status`, with empty metadata as upstream's controller-runtime
/// sends), and the patch; kind `AdmissionReview` and the request's
/// apiVersion (the default one when it named none).
pub fn respond(
    request: &AdmissionRequest,
    decision: &Decision,
) -> Result<AdmissionReview, EncodeError> {
    let mut response = AdmissionResponse::from(request);
    response.types = TypeMeta {
        api_version: if request.types.api_version.is_empty() {
            ADMISSION_API_VERSION.to_owned()
        } else {
            request.types.api_version.clone()
        },
        kind: ADMISSION_KIND.to_owned(),
    };
    response.allowed = decision.allowed;
    response.result = Status {
        code: decision.code,
        message: decision.message.clone(),
        metadata: Some(ListMeta::default()),
        ..Status::default()
    };
    if let Some(patch) = &decision.patch {
        response = response.with_patch(patch.clone())?;
    }
    Ok(response.into_review())
}

/// The review's JSON. kube's response holds the patch as bytes, which serde
/// writes as an array of numbers; the wire carries them base64-encoded, as
/// Go's `[]byte` is.
pub fn encode(review: &AdmissionReview) -> Result<Vec<u8>, EncodeError> {
    let mut value = serde_json::to_value(review)?;
    let patch = review
        .response
        .as_ref()
        .and_then(|response| response.patch.as_ref());
    if let (Some(patch), Some(slot)) = (patch, value.pointer_mut("/response/patch")) {
        *slot = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    Ok(serde_json::to_vec(&value)?)
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

    /// A request as kube-apiserver sends it, taken out of its review.
    fn request(api_version: &str, uid: &str, object: Value) -> AdmissionRequest {
        let review: AdmissionReview = serde_json::from_value(json!({
            "apiVersion": api_version, "kind": "AdmissionReview",
            "request": {
                "uid": uid, "operation": "CREATE", "name": "p", "namespace": "ns",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {"username": "u"},
                "object": object, "oldObject": null, "dryRun": false
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn response_review(
        api_version: &str,
        uid: &str,
        decision: &Decision,
    ) -> Result<Vec<u8>, EncodeError> {
        encode(&respond(&request(api_version, uid, json!({})), decision)?)
    }

    #[test]
    fn the_wire_response_has_exactly_the_fields_we_answered_before() {
        let decision = Decision::patch_between(&json!({"a": 1}), &json!({"a": 2}));
        let body = response_review("admission.k8s.io/v1", "u-1", &decision).unwrap();
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"replace","path":"/a","value":2}]"#);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {
                    "uid": "u-1", "allowed": true,
                    "status": {"metadata": {}, "code": 200},
                    "patch": patch, "patchType": "JSONPatch"
                }
            })
        );
        let body =
            response_review("admission.k8s.io/v1", "u-2", &Decision::internal("boom")).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {
                    "uid": "u-2", "allowed": false,
                    "status": {"metadata": {}, "code": 500, "message": "boom"}
                }
            })
        );
    }

    #[test]
    fn objects_decode_as_the_webhook_expects_and_malformed_ones_are_a_400() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": null},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let decoded: k8s_openapi::api::core::v1::Pod = request("admission.k8s.io/v1", "u", pod)
            .decode(false)
            .unwrap()
            .unwrap();
        assert_eq!(decoded.metadata.labels.unwrap()["a"], "b");
        assert_eq!(
            decoded.spec.unwrap().containers[0].image.as_deref(),
            Some("i")
        );
        let absent: Option<k8s_openapi::api::core::v1::Pod> =
            request("admission.k8s.io/v1", "u", json!({}))
                .decode(true)
                .unwrap();
        assert!(absent.is_none());
        let not_a_pod = request(
            "admission.k8s.io/v1",
            "u",
            json!({"spec": {"containers": 5}}),
        );
        let denied = not_a_pod
            .decode::<k8s_openapi::api::core::v1::Pod>(false)
            .unwrap_err();
        assert_eq!(denied.code, 400);
        assert!(
            denied.message.starts_with("cannot decode object: "),
            "{}",
            denied.message
        );
    }

    #[test]
    fn kube_writes_the_patch_as_numbers_and_encode_makes_it_base64() {
        let decision = Decision::patch_between(&json!({"a": 1}), &json!({"a": 2}));
        let review = respond(&request("admission.k8s.io/v1", "u", json!({})), &decision).unwrap();
        let plain = serde_json::to_value(&review).unwrap();
        assert!(plain["response"]["patch"].is_array(), "{plain}");
        let wire: Value = serde_json::from_slice(&encode(&review).unwrap()).unwrap();
        assert!(wire["response"]["patch"].is_string(), "{wire}");
    }

    #[test]
    fn an_object_with_malformed_metadata_makes_the_review_malformed() {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {},
                "object": {"metadata": {"labels": 5}}
            }
        });
        assert!(serde_json::from_value::<AdmissionReview>(review).is_err());
    }

    #[test]
    fn reviews_without_what_kube_apiserver_always_sends_do_not_parse() {
        for missing in ["uid", "operation", "kind", "resource", "userInfo"] {
            let mut review = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u", "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "userInfo": {}
                }
            });
            review["request"].as_object_mut().unwrap().remove(missing);
            let err = serde_json::from_value::<AdmissionReview>(review).unwrap_err();
            assert!(err.to_string().contains(missing), "{missing}: {err}");
        }
    }

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
