//! AdmissionReview (`admission.k8s.io/v1`) on kube's admission types, the
//! decision every webhook core returns, and the response built from it.

use std::fmt;
use std::ops::{Deref, DerefMut};

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kube::core::admission::{self, AdmissionResponse};
use kube::core::{DynamicObject, Resource, Status, TypeMeta};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The apiVersion answered when a review names none (kube-apiserver
/// requires the response's to match the request's).
pub const ADMISSION_API_VERSION: &str = admission::META_API_VERSION_V1;
pub const ADMISSION_KIND: &str = admission::META_KIND;

pub use kube::core::admission::Operation;

/// Reviews with their objects as [`DynamicObject`]s: the answer we send, and
/// what a body that is not a review of the expected type is read as.
pub type AdmissionReview = admission::AdmissionReview<DynamicObject>;
/// The request part of a dynamic review.
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

/// Why a body got no review answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("malformed AdmissionReview: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// An object that is not a `T`: the 400 to answer when a webhook asks for
/// it, and its metadata (which every review's objects have well-formed).
#[derive(Clone, Debug)]
struct Undecodable {
    message: String,
    metadata: ObjectMeta,
}

/// A request whose objects were read from the body as `T`, the type the
/// path serves (kube's request, through `Deref`). Objects that are not a `T`
/// are kept as the answer to give when a webhook asks for them.
#[derive(Clone, Debug)]
pub struct TypedRequest<T: Resource> {
    request: admission::AdmissionRequest<T>,
    undecodable_object: Option<Undecodable>,
    undecodable_old_object: Option<Undecodable>,
}

impl<T: Resource> Deref for TypedRequest<T> {
    type Target = admission::AdmissionRequest<T>;

    fn deref(&self) -> &Self::Target {
        &self.request
    }
}

impl<T: Resource> DerefMut for TypedRequest<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.request
    }
}

/// Reads a review body whose objects the path expects to be `T`, in one
/// decode. A body that is not such a review (rare: kube-apiserver sends the
/// registered resource) is read again as a dynamic review, so that what is
/// wrong with it gets the answer it always got: the review's own error, or
/// the object's, given when a webhook asks for that object.
pub fn read_review<T>(body: &[u8]) -> Result<TypedRequest<T>, ReviewError>
where
    T: Resource + DeserializeOwned,
{
    if let Ok(review) = serde_json::from_slice::<admission::AdmissionReview<T>>(body) {
        // Taking the request out gives it the review's apiVersion for the answer.
        let request = review.try_into().map_err(|_| ReviewError::NoRequest)?;
        return Ok(TypedRequest {
            request,
            undecodable_object: None,
            undecodable_old_object: None,
        });
    }
    let review: AdmissionReview = serde_json::from_slice(body).map_err(ReviewError::Malformed)?;
    let request: AdmissionRequest = review.try_into().map_err(|_| ReviewError::NoRequest)?;
    Ok(TypedRequest::from_dynamic(request))
}

impl<T: Resource + DeserializeOwned> TypedRequest<T> {
    /// The request with each object read as a `T` from its dynamic form.
    fn from_dynamic(request: AdmissionRequest) -> Self {
        let (object, undecodable_object) = Self::typed(request.object, "object");
        let (old_object, undecodable_old_object) = Self::typed(request.old_object, "oldObject");
        TypedRequest {
            request: admission::AdmissionRequest {
                types: request.types,
                uid: request.uid,
                kind: request.kind,
                resource: request.resource,
                sub_resource: request.sub_resource,
                request_kind: request.request_kind,
                request_resource: request.request_resource,
                request_sub_resource: request.request_sub_resource,
                name: request.name,
                namespace: request.namespace,
                operation: request.operation,
                user_info: request.user_info,
                object,
                old_object,
                dry_run: request.dry_run,
                options: request.options,
            },
            undecodable_object,
            undecodable_old_object,
        }
    }

    fn typed(object: Option<DynamicObject>, field: &str) -> (Option<T>, Option<Undecodable>) {
        let Some(object) = object else {
            return (None, None);
        };
        // The dynamic object holds metadata typed and the rest as JSON; the
        // typed object is read from their union.
        match serde_json::to_value(&object).and_then(|value| T::deserialize(&value)) {
            Ok(typed) => (Some(typed), None),
            Err(err) => (
                None,
                Some(Undecodable {
                    message: format!("cannot decode {field}: {err}"),
                    metadata: object.metadata,
                }),
            ),
        }
    }
}

impl<T: Resource> TypedRequest<T> {
    /// True when the request is for `resource` itself, not a subresource.
    pub fn is_for(&self, resource: &str) -> bool {
        self.resource.resource == resource && self.sub_resource.as_deref().unwrap_or("").is_empty()
    }

    /// The request's namespace, empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        self.request.namespace.as_deref().unwrap_or("")
    }

    /// `object`; one that is not a `T` is the 400 to answer.
    pub fn object(&self) -> Result<Option<&T>, Decision> {
        Self::present(
            self.request.object.as_ref(),
            self.undecodable_object.as_ref(),
        )
    }

    /// `oldObject`; one that is not a `T` is the 400 to answer.
    pub fn old_object(&self) -> Result<Option<&T>, Decision> {
        Self::present(
            self.request.old_object.as_ref(),
            self.undecodable_old_object.as_ref(),
        )
    }

    fn present<'a>(
        typed: Option<&'a T>,
        undecodable: Option<&Undecodable>,
    ) -> Result<Option<&'a T>, Decision> {
        match undecodable {
            Some(undecodable) => Err(Decision::bad_request(undecodable.message.clone())),
            None => Ok(typed),
        }
    }

    /// The object's metadata, whether or not it is a `T`.
    pub fn object_meta(&self) -> Option<&ObjectMeta> {
        match (&self.request.object, &self.undecodable_object) {
            (Some(object), _) => Some(object.meta()),
            (None, Some(undecodable)) => Some(&undecodable.metadata),
            (None, None) => None,
        }
    }

    /// The object, and on UPDATE the old object too; a missing one (or one
    /// that is not a `T`) is the 400 to answer.
    pub fn object_with_old(&self) -> Result<(&T, Option<&T>), Decision> {
        let object = self
            .object()?
            .ok_or_else(|| Decision::bad_request("the request has no object"))?;
        let old = if self.operation == Operation::Update {
            let old = self
                .old_object()?
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

    /// Allowed with the JSON patch that turns `original` into `mutated`, as
    /// their JSON; a 500 when either cannot be written as JSON.
    pub fn patch_from<T: serde::Serialize>(original: &T, mutated: &T) -> Self {
        match (
            serde_json::to_value(original),
            serde_json::to_value(mutated),
        ) {
            (Ok(original), Ok(mutated)) => Decision::patch_between(&original, &mutated),
            (Err(err), _) | (_, Err(err)) => Decision::internal(err.to_string()),
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
pub fn respond<T: Resource>(
    request: &admission::AdmissionRequest<T>,
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

/// The review's JSON, written straight from kube's types except for the
/// patch: kube holds it as bytes, which serde writes as an array of numbers;
/// the wire carries them base64-encoded, as Go's `[]byte` is.
pub fn encode(review: &AdmissionReview) -> Result<Vec<u8>, EncodeError> {
    Ok(serde_json::to_vec(&WireReview(review))?)
}

struct WireReview<'a>(&'a AdmissionReview);

impl serde::Serialize for WireReview<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let review = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("apiVersion", &review.types.api_version)?;
        map.serialize_entry("kind", &review.types.kind)?;
        if let Some(request) = &review.request {
            map.serialize_entry("request", request)?;
        }
        if let Some(response) = &review.response {
            map.serialize_entry("response", &WireResponse(response))?;
        }
        map.end()
    }
}

struct WireResponse<'a>(&'a AdmissionResponse);

impl serde::Serialize for WireResponse<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let response = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("uid", &response.uid)?;
        map.serialize_entry("allowed", &response.allowed)?;
        map.serialize_entry("status", &response.result)?;
        if let Some(patch) = &response.patch {
            let encoded = base64::engine::general_purpose::STANDARD.encode(patch);
            map.serialize_entry("patch", &encoded)?;
            // kube sets the type with the patch (`with_patch`); JSON patch is the only one.
            map.serialize_entry("patchType", &admission::PatchType::JsonPatch)?;
        }
        if !response.audit_annotations.is_empty() {
            map.serialize_entry("auditAnnotations", &response.audit_annotations)?;
        }
        if let Some(warnings) = &response.warnings {
            map.serialize_entry("warnings", warnings)?;
        }
        map.end()
    }
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

    /// A review body as kube-apiserver posts it, for `operation` on a pod.
    fn pod_review_body(operation: &str, object: Value, old_object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": operation, "name": "p", "namespace": "ns",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {"username": "u"},
                "object": object, "oldObject": old_object, "dryRun": false
            }
        }))
        .unwrap()
    }

    type Pod = k8s_openapi::api::core::v1::Pod;

    #[test]
    fn objects_decode_as_the_webhook_expects_and_malformed_ones_are_a_400() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": null},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let request = read_review::<Pod>(&pod_review_body("CREATE", pod, Value::Null)).unwrap();
        let decoded = request.object().unwrap().unwrap();
        assert_eq!(decoded.metadata.labels.as_ref().unwrap()["a"], "b");
        assert_eq!(
            decoded.spec.as_ref().unwrap().containers[0]
                .image
                .as_deref(),
            Some("i")
        );
        assert!(request.old_object().unwrap().is_none());
        assert_eq!(request.types.api_version, "admission.k8s.io/v1");

        // Not a pod: the review still reads, the object is the 400 to answer,
        // in the words the value decoder uses (no position in the body).
        let not_a_pod = read_review::<Pod>(&pod_review_body(
            "CREATE",
            json!({"metadata": {"name": "x", "annotations": {"k": "v"}}, "spec": {"containers": 5}}),
            Value::Null,
        ))
        .unwrap();
        let denied = not_a_pod.object().unwrap_err();
        assert_eq!(denied.code, 400);
        assert_eq!(
            denied.message,
            "cannot decode object: invalid type: integer `5`, expected a sequence"
        );
        assert_eq!(not_a_pod.object_with_old().unwrap_err(), denied);
        // Its metadata is still there for the webhooks that look at it first.
        assert_eq!(
            not_a_pod
                .object_meta()
                .unwrap()
                .annotations
                .as_ref()
                .unwrap()["k"],
            "v"
        );
        assert_eq!(not_a_pod.uid, "u");
    }

    #[test]
    fn an_old_object_that_is_not_the_type_is_named_and_the_new_one_still_reads() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let request = read_review::<Pod>(&pod_review_body(
            "UPDATE",
            pod,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "p"}}),
        ))
        .unwrap();
        assert_eq!(
            request.object().unwrap().unwrap().metadata.name.as_deref(),
            Some("p")
        );
        let denied = request.old_object().unwrap_err();
        assert!(
            denied.message.starts_with("cannot decode oldObject: "),
            "{}",
            denied.message
        );
        assert_eq!(request.object_with_old().unwrap_err(), denied);
        // An UPDATE without its old object.
        let missing = read_review::<Pod>(&pod_review_body(
            "UPDATE",
            json!({"metadata": {"name": "p"}}),
            Value::Null,
        ))
        .unwrap();
        assert_eq!(
            missing.object_with_old().unwrap_err().message,
            "the update request has no oldObject"
        );
    }

    #[test]
    fn one_decode_reads_the_same_object_as_the_dynamic_form() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "1",
                "creationTimestamp": "2026-12-04T12:00:00Z",
                "labels": {"koordinator.sh/qosClass": "BE"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}],
                "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 300}],
                "priority": 5000},
            "status": {"phase": "Pending"}});
        let body = pod_review_body("UPDATE", pod.clone(), pod);
        let typed = read_review::<Pod>(&body).unwrap();
        let review: AdmissionReview = serde_json::from_slice(&body).unwrap();
        let dynamic = TypedRequest::<Pod>::from_dynamic(review.try_into().unwrap());
        assert_eq!(typed.object, dynamic.object);
        assert_eq!(typed.old_object, dynamic.old_object);
        assert_eq!(typed.user_info, dynamic.user_info);
        assert_eq!(typed.types, dynamic.types);
        assert!(typed.object.is_some());
    }

    #[test]
    fn kube_writes_the_patch_as_numbers_and_encode_makes_it_base64() {
        let decision = Decision::patch_between(&json!({"a": 1}), &json!({"a": 2}));
        let review = respond(&request("admission.k8s.io/v1", "u", json!({})), &decision).unwrap();
        let mut plain = serde_json::to_value(&review).unwrap();
        assert!(plain["response"]["patch"].is_array(), "{plain}");
        let wire: Value = serde_json::from_slice(&encode(&review).unwrap()).unwrap();
        assert!(wire["response"]["patch"].is_string(), "{wire}");
        // Otherwise the wire form is kube's, field for field.
        plain["response"]["patch"] = wire["response"]["patch"].clone();
        assert_eq!(wire, plain);
        let mut warned = respond(
            &request("admission.k8s.io/v1", "u", json!({})),
            &Decision::deny("no"),
        )
        .unwrap();
        let response = warned.response.as_mut().unwrap();
        response.warnings = Some(vec!["careful".to_owned()]);
        response
            .audit_annotations
            .insert("k".to_owned(), "v".to_owned());
        let wire: Value = serde_json::from_slice(&encode(&warned).unwrap()).unwrap();
        assert_eq!(wire, serde_json::to_value(&warned).unwrap());
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
        assert!(serde_json::from_value::<AdmissionReview>(review.clone()).is_err());
        let body = serde_json::to_vec(&review).unwrap();
        assert!(matches!(
            read_review::<Pod>(&body),
            Err(ReviewError::Malformed(_))
        ));
    }

    #[test]
    fn bodies_that_are_not_reviews_get_the_dynamic_readers_error() {
        for body in [
            &b"{not json"[..],
            b"",
            b"[1,2]",
            br#"{"kind":"AdmissionReview","request":{"uid":5}}"#,
        ] {
            let dynamic = serde_json::from_slice::<AdmissionReview>(body).unwrap_err();
            match read_review::<Pod>(body) {
                Err(ReviewError::Malformed(err)) => {
                    assert_eq!(err.to_string(), dynamic.to_string())
                }
                other => panic!("{body:?}: {other:?}"),
            }
        }
        let no_request = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#;
        assert!(matches!(
            read_review::<Pod>(no_request),
            Err(ReviewError::NoRequest)
        ));
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
            let body = serde_json::to_vec(&review).unwrap();
            let err = serde_json::from_value::<AdmissionReview>(review).unwrap_err();
            assert!(err.to_string().contains(missing), "{missing}: {err}");
            let dynamic = serde_json::from_slice::<AdmissionReview>(&body).unwrap_err();
            match read_review::<Pod>(&body) {
                Err(ReviewError::Malformed(typed)) => {
                    assert_eq!(typed.to_string(), dynamic.to_string())
                }
                other => panic!("{missing}: {other:?}"),
            }
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
