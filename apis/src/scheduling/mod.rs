//! The `scheduling.koordinator.sh` API group: Reservation, Device,
//! PodMigrationJob.

pub mod v1alpha1;
