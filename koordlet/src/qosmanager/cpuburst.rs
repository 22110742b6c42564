//! QoS strategy `cpuburst`.
