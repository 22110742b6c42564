//! Helpers shared by koordlet's integration tests. Each test binary pulls in
//! `mod support;` and uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod cgroup;
pub mod standalone;
