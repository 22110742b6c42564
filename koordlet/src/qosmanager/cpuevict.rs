//! QoS strategy `cpuevict`.
