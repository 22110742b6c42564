//! QoS strategy `cgreconcile`.
