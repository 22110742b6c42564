//! `scheduling.koordinator.sh/v1alpha1`: Reservation, Device, PodMigrationJob.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

mod device;
mod pod_migration_job;
mod reservation;

pub use device::*;
pub use pod_migration_job::*;
pub use reservation::*;

/// The API group of this module.
pub const GROUP: &str = "scheduling.koordinator.sh";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// The CRDs of this group version, in a stable order, as they are installed.
/// Prefer these to `Reservation::crd()` / `PodMigrationJob::crd()`, which are
/// kube-derive's raw output (no root `apiVersion`/`kind`/`metadata`
/// properties, `nullable` markers on every optional field).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut reservation = Reservation::crd();
    crate::schema::controller_gen_style(&mut reservation);
    vec![reservation, Device::crd(), pod_migration_job_crd()]
}
