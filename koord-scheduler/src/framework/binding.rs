//! A completed reservation ([`Reserved`]) and the [`Binder`] that persists it.

use std::collections::BTreeMap;

/// A completed reservation: what the binder must persist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub pod_key: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// All plugins' pre-bind annotations merged into one patch.
    pub annotations: BTreeMap<String, String>,
}

/// A pod to nominate to a node (`status.nominatedNodeName`), see
/// [`crate::placement::filter_resolved_indexed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nomination {
    pub namespace: String,
    pub name: String,
    /// The pod's uid: a pod recreated under the same name is not nominated.
    pub uid: String,
    pub node: String,
}

/// What a binder persists for one reservation.
pub type BindFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), BindError>> + Send + 'a>>;

/// Why a reservation was not persisted.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BindError {
    /// The pod patch carrying the reservation's annotations failed.
    #[error("patching pod annotations: {0}")]
    PatchAnnotations(String),
    /// The API server refused the Binding.
    #[error("creating the Binding: {0}")]
    CreateBinding(String),
    /// The pod's status patch (its nominated node) failed.
    #[error("patching the pod's nominated node: {0}")]
    PatchStatus(String),
    /// No client yet: the API server has not been reached.
    #[error("not connected to the API server yet")]
    NotConnected,
    /// A recording binder told to fail (simulator, tests).
    #[error("{0}")]
    Refused(String),
}

impl BindError {
    /// A short, fixed label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BindError::PatchAnnotations(_) => "patch_annotations",
            BindError::CreateBinding(_) => "create_binding",
            BindError::PatchStatus(_) => "patch_status",
            BindError::NotConnected => "not_connected",
            BindError::Refused(_) => "refused",
        }
    }
}

/// Persists a reservation: one pod patch with the annotations (if any), then
/// the Binding.
pub trait Binder: Send + Sync {
    fn bind<'a>(&'a self, reserved: &'a Reserved) -> BindFuture<'a>;

    /// Writes the pod's `status.nominatedNodeName`.
    fn nominate<'a>(&'a self, nomination: &'a Nomination) -> BindFuture<'a>;
}

/// A binder that records instead of writing (simulator and tests).
#[derive(Default)]
pub struct RecordingBinder {
    pub fail_with: Option<String>,
    pub bound: std::sync::Mutex<Vec<Reserved>>,
    pub nominated: std::sync::Mutex<Vec<Nomination>>,
}

impl Binder for RecordingBinder {
    fn bind<'a>(&'a self, reserved: &'a Reserved) -> BindFuture<'a> {
        Box::pin(async move { self.record(&self.bound, reserved) })
    }

    fn nominate<'a>(&'a self, nomination: &'a Nomination) -> BindFuture<'a> {
        Box::pin(async move { self.record(&self.nominated, nomination) })
    }
}

impl RecordingBinder {
    /// Fails as told, or records `write` in `list`.
    fn record<T: Clone>(
        &self,
        list: &std::sync::Mutex<Vec<T>>,
        write: &T,
    ) -> Result<(), BindError> {
        if let Some(message) = &self.fail_with {
            return Err(BindError::Refused(message.clone()));
        }
        if let Ok(mut recorded) = list.lock() {
            recorded.push(write.clone());
        }
        Ok(())
    }
}
