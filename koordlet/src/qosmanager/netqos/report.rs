//! What one network-QoS round did, for logs and [`super::metrics`]. Kept apart from the
//! reconciler so that the metrics do not import it (and the crate's import circle).

use std::collections::BTreeMap;

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoundReport {
    pub applied: usize,
    pub deferred: usize,
    pub errors: Vec<String>,
    /// Why nothing was applied, for Leave decisions.
    pub left: Option<String>,
    /// Changes made, by [`super::diff::TcAction::kind`].
    pub applied_by_kind: BTreeMap<(&'static str, &'static str), usize>,
    /// Changes the kernel refused, by [`super::diff::TcAction::kind`].
    pub failed: BTreeMap<(&'static str, &'static str), usize>,
}
