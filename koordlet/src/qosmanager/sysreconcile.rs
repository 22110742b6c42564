//! QoS strategy `sysreconcile`.
