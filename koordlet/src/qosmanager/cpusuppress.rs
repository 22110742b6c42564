//! QoS strategy `cpusuppress`.
