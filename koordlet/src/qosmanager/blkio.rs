//! QoS strategy `blkio`.
