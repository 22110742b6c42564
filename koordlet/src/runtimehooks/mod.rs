//! Runtime hooks: container parameters decided at creation time.

pub mod nri;
